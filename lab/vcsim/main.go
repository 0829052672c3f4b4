// Command vcsim-gpu starts govmomi's vCenter simulator (library v0.52.0, pinned in go.mod)
// with an inventory of clusters, hosts and VMs, NVIDIA GPU host fixtures, the host managers
// the simulator lacks (HostGraphicsManager, HostImageConfigManager, HostKernelModuleSystem)
// and HostSystem.RebootHost_Task.
//
// It serves HTTPS on loopback with a certificate from a CA it generates per run; the CA is
// written to the run directory so clients verify TLS instead of switching it off.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/simulator/esx"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	// Registers the vAPI (REST) endpoints, used by modules that look up tags or sessions there, and the
	// vSphere with Tanzu namespace endpoints (VM classes, namespaces) that namespaces.go fronts.
	_ "github.com/vmware/govmomi/vapi/namespace/simulator"
	_ "github.com/vmware/govmomi/vapi/simulator"
)

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return fmt.Sprint(*m) }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

type options struct {
	listen     string
	runDir     string
	user       string
	pass       string
	dcs        int
	clusters   int
	hosts      int
	standalone int
	vms        int
	gpuHosts   string
	gpuModel   string
	gpuCount   int
	driver     string
	hostDriver multiFlag
	fixture    string
	apiVersion string
	roUser     string
	roPass     string
	vmFirmware string
	vgpuUnset  string
	rebootFlag string
	xorg       string
}

// registry is the model's object registry; request handlers use ctx.Map, set-up code uses this.
var registry *simulator.Registry

func parseFlags() *options {
	o := &options{}
	flag.StringVar(&o.listen, "l", "127.0.0.1:0", "listen address (port 0 picks a free port)")
	flag.StringVar(&o.runDir, "run-dir", "", "directory for url, ca.pem, inventory.json (required)")
	flag.StringVar(&o.user, "username", "user", "the only accepted user name")
	flag.StringVar(&o.pass, "password", "pass", "the only accepted password")
	flag.IntVar(&o.dcs, "dc", 1, "datacenters")
	flag.IntVar(&o.clusters, "clusters", 1, "clusters per datacenter")
	flag.IntVar(&o.hosts, "hosts", 2, "hosts per cluster")
	flag.IntVar(&o.standalone, "standalone-hosts", 0, "standalone hosts per datacenter")
	flag.IntVar(&o.vms, "vms", 1, "VMs per host (named <host>_VM<n>, placed on that host)")
	flag.StringVar(&o.gpuHosts, "gpu-hosts", "", "comma-separated host names or globs (DC0_C0_*) or 'all' to give NVIDIA GPUs")
	flag.StringVar(&o.gpuModel, "gpu-model", "a100-40", "GPU model key for -gpu-hosts: "+modelKeys())
	flag.IntVar(&o.gpuCount, "gpu-count", 2, "GPUs per GPU host for -gpu-hosts")
	flag.StringVar(&o.driver, "driver", defaultDriverVersion, "NVIDIA host driver VIB version on GPU hosts")
	flag.Var(&o.hostDriver, "host-driver", "HOST=VERSION: driver VIB version for one host (repeatable; drift); empty VERSION = no driver VIB")
	flag.StringVar(&o.fixture, "fixture", "", "JSON fixture file with per-host GPU settings (see README.md)")
	flag.StringVar(&o.apiVersion, "api-version", "8.0.2.0", "vSphere API version vCenter and hosts report (8.0.2.0 = vSphere 8.0U2)")
	flag.StringVar(&o.roUser, "readonly-username", "", "a second accepted user, with read-only rights (NoPermission on host configuration methods)")
	flag.StringVar(&o.roPass, "readonly-password", "", "password of -readonly-username")
	flag.StringVar(&o.vmFirmware, "vm-firmware", "efi", "firmware of the created VMs: efi or bios (per VM: fixture vm_firmware)")
	flag.StringVar(&o.vgpuUnset, "vgpu-mode-unset", "keep", "UpdateGraphicsConfig deviceType entries without vgpuMode: keep (API reference) or reset to sameSize")
	flag.StringVar(&o.rebootFlag, "module-reboot-flag", "set", "UpdateModuleOptionString: set summary.rebootRequired until the host reboots (set) or leave it (none)")
	flag.StringVar(&o.xorg, "xorg-without-vsga", "fail", "restarting xorg on an ESXi 7.0.1+ host without a vSGA device: fail (KB 318047: may not start) or start")
	flag.Parse()
	if o.runDir == "" {
		log.Fatal("-run-dir is required")
	}
	if (o.roUser == "") != (o.roPass == "") {
		log.Fatal("-readonly-username and -readonly-password go together")
	}
	if o.roUser != "" && o.roUser == o.user {
		log.Fatal("-readonly-username must differ from -username")
	}
	if !firmwareTypes[o.vmFirmware] {
		log.Fatalf("-vm-firmware %q: want efi or bios", o.vmFirmware)
	}
	if o.vgpuUnset != "keep" && o.vgpuUnset != "reset" {
		log.Fatalf("-vgpu-mode-unset %q: want keep or reset", o.vgpuUnset)
	}
	vgpuModeUnset = o.vgpuUnset
	if o.rebootFlag != "set" && o.rebootFlag != "none" {
		log.Fatalf("-module-reboot-flag %q: want set or none", o.rebootFlag)
	}
	moduleRebootFlag = o.rebootFlag
	if o.xorg != "fail" && o.xorg != "start" {
		log.Fatalf("-xorg-without-vsga %q: want fail or start", o.xorg)
	}
	xorgWithoutVsga = o.xorg
	return o
}

func main() {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	o := parseFlags()

	fixture, err := buildFixture(o)
	if err != nil {
		log.Fatalf("fixture: %v", err)
	}

	if err = os.MkdirAll(o.runDir, 0o755); err != nil {
		log.Fatal(err)
	}

	model := simulator.VPX()
	hostVersion := setVersions(model, o.apiVersion)
	model.Datacenter = o.dcs
	model.Cluster = o.clusters
	model.ClusterHost = o.hosts
	model.Host = o.standalone
	model.Machine = 0 // VMs are created per host below, so every VM has a known host
	model.Pool = 0
	model.Portgroup = 0
	if err = model.Create(); err != nil {
		log.Fatalf("create model: %v", err)
	}
	defer model.Remove()
	registry = model.Map()
	hostVersionsAfterCreate(hostVersion)
	// log.Fatal skips deferred calls: remove the model's temporary datastore directories first
	fatalf := func(format string, args ...interface{}) {
		model.Remove()
		log.Fatalf(format, args...)
	}

	if err = createVMs(model, o.vms, fixture, o.vmFirmware); err != nil {
		fatalf("create VMs: %v", err)
	}
	registerVgpuLabeler()
	wrapEnvironmentBrowsers()
	installRebootHandler()
	installPlacement()
	installMaintenance()
	installHooks()
	if err = decorateHosts(fixture); err != nil {
		fatalf("GPU hosts: %v", err)
	}
	if err = applyClusters(fixture); err != nil {
		fatalf("clusters: %v", err)
	}

	tlsConf, caPEM, err := newTLS()
	if err != nil {
		fatalf("TLS: %v", err)
	}

	u, err := url.Parse("https://" + o.listen)
	if err != nil {
		fatalf("-l %s: %v", o.listen, err)
	}
	// The lab stays on loopback; the certificate names only 127.0.0.1 and localhost.
	if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" {
		fatalf("-l %s: only 127.0.0.1 or localhost", o.listen)
	}
	u.User = url.UserPassword(o.user, o.pass)
	// Exactly these logins are accepted: the admin and, when set, the read-only user.
	registry.SessionManager().ValidLogin = func(req *types.Login) bool {
		return (req.UserName == o.user && req.Password == o.pass) ||
			(o.roUser != "" && req.UserName == o.roUser && req.Password == o.roPass)
	}
	readonlyUser = o.roUser
	model.Service.Listen = u
	model.Service.TLS = tlsConf
	model.Service.RegisterEndpoints = true
	model.Service.ServeMux = http.NewServeMux()
	front := newNamespaceFront(model.Service.ServeMux, fixture)

	server := model.Service.NewServer()
	defer server.Close()
	if err = front.seed(fixture.Namespaces); err != nil {
		fatalf("namespaces: %v", err)
	}
	// Set before the URL is published, so no request has reached the server yet.
	faults := &faultInjector{next: server.Config.Handler, token: newFaultToken()}
	server.Config.Handler = faults

	sdk := *server.URL
	sdk.User = nil
	if err = writeRunFiles(o, sdk.String(), server.URL.Host, caPEM, faults.token); err != nil {
		fatalf("run files: %v", err)
	}
	log.Printf("vcsim-gpu listening on %s (run dir %s)", sdk.String(), o.runDir)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	log.Print("vcsim-gpu stopping")
}

// setVersions makes vCenter and the hosts report a vSphere 8 release. The vCenter template says
// 6.5, and pyvmomi then negotiates an API version that lacks config.sharedGpuCapabilities (6.7)
// and fails to decode the GPU host config. vcsim serves /sdk/vimServiceVersions.xml from it.
// Returns the host product version; see hostVersionsAfterCreate for why hosts get it late.
func setVersions(model *simulator.Model, api string) string {
	parts := strings.SplitN(api, ".", 3)
	if len(parts) < 2 {
		log.Fatalf("-api-version %q: want like 8.0.2.0", api)
	}
	product := strings.Join(parts[:2], ".") + ".0"
	if len(parts) == 3 {
		product = strings.Join(parts[:2], ".") + "." + strings.SplitN(parts[2], ".", 2)[0]
	}
	about := &model.ServiceContent.About
	about.ApiVersion, about.Version, about.Build = api, product, "22385739"
	about.FullName = fmt.Sprintf("VMware vCenter Server %s build-%s", product, about.Build)
	about.LicenseProductVersion = parts[0] + ".0"
	hp := &esx.HostConfigInfo.Product
	hp.ApiVersion, hp.Version, hp.Build = api, createVersion(product), "22380479"
	hp.FullName = fmt.Sprintf("VMware ESXi %s build-%s", hp.Version, hp.Build)
	hp.LicenseProductVersion = parts[0] + ".0"
	return product
}

// createVersion is a host version the simulator can create hosts with: its cluster code maps
// host versions to VM hardware versions (types.MustParseESXiVersion) and panics on releases it
// does not list (v0.52.0: 7.0.3, 8.0.3). The same hardware version applies within the release.
func createVersion(product string) string {
	if _, err := types.ParseESXiVersion(product); err == nil {
		return product
	}
	if strings.HasPrefix(product, "8.0.") {
		return "8.0.2"
	}
	if strings.HasPrefix(product, "7.0.") {
		return "7.0.2"
	}
	return product
}

// hostVersionsAfterCreate gives every host the product version asked for once the inventory exists.
func hostVersionsAfterCreate(product string) {
	for _, h := range sortedHosts() {
		setHostVersion(h, product)
	}
}

// createVMs creates n VMs on every host, named <host>_VM<i>, like vcsim's own VM template
// (SCSI disk, CD-ROM, one NIC), powered on as vcsim's defaults are. Firmware: the fixture's
// vm_firmware entry for the VM (name or glob), else the -vm-firmware flag.
func createVMs(model *simulator.Model, n int, f *Fixture, firmware string) error {
	if n <= 0 {
		return nil
	}
	ctx := context.Background()
	// The simulator service is itself a SOAP round tripper: no HTTP needed while building.
	c, err := vim25.NewClient(ctx, model.Service)
	if err != nil {
		return err
	}
	for _, h := range sortedHosts() {
		host := object.NewHostSystem(c, h.Self)
		pool, err := host.ResourcePool(ctx)
		if err != nil {
			return err
		}
		dc := registry.Get(*datacenterOf(&h.HostSystem)).(*simulator.Datacenter)
		folder := object.NewFolder(c, dc.VmFolder)
		for i := 0; i < n; i++ {
			name := fmt.Sprintf("%s_VM%d", h.Name, i)
			spec := types.VirtualMachineConfigSpec{
				Name:     name,
				GuestId:  string(types.VirtualMachineGuestOsIdentifierOtherGuest64),
				Files:    &types.VirtualMachineFileInfo{VmPathName: "[LocalDS_0]"},
				Firmware: f.vmFirmware(name, firmware),
				Version:  vmValue(f.VMHardwareVersion, name, defaultHardwareVersion(&h.HostSystem)),
			}
			// VMs of the vSphere VM Service carry managedBy com.vmware.vcenter.wcp/VirtualMachine
			// (vmware-tanzu/vm-operator, constants ManagedByExtensionKey and ManagedByExtensionType).
			if vmListed(f.VMServiceVMs, name) {
				spec.ManagedBy = &types.ManagedByInfo{ExtensionKey: "com.vmware.vcenter.wcp", Type: "VirtualMachine"}
			}
			var devices object.VirtualDeviceList
			scsi, _ := devices.CreateSCSIController("pvscsi")
			ide, _ := devices.CreateIDEController()
			cdrom, _ := devices.CreateCdrom(ide.(*types.VirtualIDEController))
			disk := devices.CreateDisk(scsi.(types.BaseVirtualController), types.ManagedObjectReference{},
				spec.Files.VmPathName+" "+path.Join(name, "disk1.vmdk"))
			disk.CapacityInKB = 1024
			nic := esx.EthernetCard
			devices = append(devices, scsi, cdrom, disk, &nic)
			spec.DeviceChange, _ = devices.ConfigSpec(types.VirtualDeviceConfigSpecOperationAdd)

			task, err := folder.CreateVM(ctx, spec, pool, host)
			if err != nil {
				return err
			}
			info, err := task.WaitForResult(ctx, nil)
			if err != nil {
				return fmt.Errorf("%s: %v", name, err)
			}
			vm := object.NewVirtualMachine(c, info.Result.(types.ManagedObjectReference))
			if vmListed(f.PoweredOffVMs, name) {
				continue
			}
			if _, err = vm.PowerOn(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// defaultHardwareVersion is the hardware version a VM created on host h gets by default: the newest its
// ESXi release supports (VMware KB 2007240, as govmomi's types.ESXiVersion.HardwareVersion lists it;
// ESXi 8.0 U2 -> vmx-21). vcsim's own default is vmx-13 whatever the host.
func defaultHardwareVersion(h *mo.HostSystem) string {
	v, err := types.ParseESXiVersion(createVersion(h.Config.Product.Version))
	if err != nil {
		return ""
	}
	return v.HardwareVersion().String()
}

func datacenterOf(h *mo.HostSystem) *types.ManagedObjectReference {
	ref := h.Parent
	for ref != nil {
		if ref.Type == "Datacenter" {
			return ref
		}
		obj := registry.Get(*ref)
		ent, ok := obj.(mo.Entity)
		if !ok {
			return nil
		}
		ref = ent.Entity().Parent
	}
	return nil
}

func writeRunFiles(o *options, sdkURL, hostPort string, caPEM []byte, faultToken string) error {
	inv := inventory()
	inv["url"] = sdkURL
	inv["host"] = hostPort
	inv["username"] = o.user
	inv["password"] = o.pass
	inv["pid"] = os.Getpid()
	inv["ca"] = filepath.Join(o.runDir, "ca.pem")
	data, err := json.MarshalIndent(inv, "", "  ")
	if err != nil {
		return err
	}
	files := []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{"ca.pem", caPEM, 0o644},
		{"inventory.json", append(data, '\n'), 0o600}, // holds the password
		{"username", []byte(o.user + "\n"), 0o600},
		{"password", []byte(o.pass + "\n"), 0o600},
		{"fault-token", []byte(faultToken + "\n"), 0o600}, // faults.go
		{"env", []byte(fmt.Sprintf("VCSIM_URL=%s\nVCSIM_HOST=%s\nVCSIM_USERNAME=%s\nVCSIM_PASSWORD=%s\nVCSIM_CA=%s\n",
			sdkURL, hostPort, o.user, o.pass, filepath.Join(o.runDir, "ca.pem"))), 0o600},
		// url last: its presence tells waiting scripts everything else is in place
		{"url", []byte(sdkURL + "\n"), 0o644},
	}
	for _, f := range files {
		tmp := filepath.Join(o.runDir, "."+f.name+".tmp")
		if err := os.WriteFile(tmp, f.data, f.mode); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(o.runDir, f.name)); err != nil {
			return err
		}
	}
	return nil
}
