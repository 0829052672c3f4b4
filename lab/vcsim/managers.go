package main

// GPU host decoration and the two host managers vcsim only references
// (host.configManager.graphicsManager / imageConfigManager point at unregistered objects there).

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// graphicsManager is one host's HostGraphicsManager. Its properties mirror the host's
// config.graphics* fields; UpdateGraphicsConfig changes both.
type graphicsManager struct {
	mo.HostGraphicsManager
	host  *simulator.HostSystem
	modes map[string]string // per-device vGPU mode (HostGraphicsConfigVgpuMode), API 8.0.3.0+
	mig   map[string]bool   // GPUs with MIG mode on (set on the host with nvidia-smi, not through this API)
}

// imageConfigManager is one host's HostImageConfigManager, serving the host's VIB list.
type imageConfigManager struct {
	mo.HostImageConfigManager
	host       *simulator.HostSystem
	packages   []types.SoftwarePackage
	acceptance string
}

// summaries of what each host got, for inventory.json
var (
	hostSummaryMu sync.Mutex
	hostSummaries = map[string]map[string]interface{}{}
)

func decorateHosts(f *Fixture) error {
	hosts := sortedHosts()
	names := make([]string, len(hosts))
	for i, h := range hosts {
		names[i] = h.Name
	}
	set, err := f.resolve(names)
	if err != nil {
		return err
	}
	for _, h := range hosts {
		r := set.gpuHosts[h.Name]
		var packages []types.SoftwarePackage
		acceptance := "partner"
		modes := map[string]string{}
		if r != nil {
			if r.spec.EsxiVersion != "" {
				setHostVersion(h, r.spec.EsxiVersion)
			}
			packages = applyGPUs(h, r)
			acceptance = r.spec.AcceptanceLevel
			for id, m := range r.spec.VgpuModes {
				modes[id] = m
			}
			if len(modes) > 0 && !hasVgpuMode(h) {
				return fmt.Errorf("host %s: vgpu_modes need ESXi 8.0.3 or later (API 8.0.3.0), the host reports %s",
					h.Name, h.Config.Product.Version)
			}
		}
		packages = append(basePackages(h), packages...)
		gm := registerManagers(h, packages, acceptance, modes)
		if r != nil {
			g := &gpuHost{host: h, gm: gm}
			for i, gpu := range r.gpus {
				g.gpus = append(g.gpus, gpuDef{pci: gpu.PciID, model: r.models[i], mig: r.mig[i]})
				if r.mig[i] {
					gm.mig[gpu.PciID] = true
				}
			}
			gpuHostsByMoid[h.Self.Value] = g
			applyEffectiveTypes(h, gm.modes, gm.mig)
			gm.syncFromHost()
		}
		driver, options := "", map[string]string(nil)
		if r != nil {
			if r.spec.Driver != nil {
				driver = *r.spec.Driver
			}
			options = r.spec.ModuleOptions
		}
		if err := registerKernelModules(h, driver, options); err != nil {
			return err
		}
		registerServiceSystem(h)
		summarize(h, r, packages)
	}
	return nil
}

// setHostVersion makes one host report another ESXi release than the -api-version default.
func setHostVersion(h *simulator.HostSystem, version string) {
	p := &h.Config.Product
	p.Version, p.ApiVersion = version, version+".0" // ESXi 8.0.3 reports API 8.0.3.0
	p.FullName = fmt.Sprintf("VMware ESXi %s build-%s", version, p.Build)
	p.LicenseProductVersion = strings.SplitN(version, ".", 2)[0] + ".0"
	if h.Summary.Config.Product != nil {
		prod := *p
		h.Summary.Config.Product = &prod
	}
}

// hasVgpuMode: HostGraphicsConfigDeviceType.vgpuMode and HostGraphicsInfo.vgpuMode are
// "Since vSphere API Release 8.0.3.0" (govmomi vim25/types: vim:"8.0.3.0" tags); older hosts
// do not have the fields at all.
func hasVgpuMode(h *simulator.HostSystem) bool {
	var a, b, c int
	fmt.Sscanf(h.Config.Product.Version, "%d.%d.%d", &a, &b, &c)
	return a > 8 || (a == 8 && (b > 0 || c >= 3))
}

// applyGPUs writes the GPU fixture into the host's config, hardware and sensors and returns
// the NVIDIA packages to list.
func applyGPUs(h *simulator.HostSystem, r *resolved) []types.SoftwarePackage {
	cfg := h.Config // NewHostSystem gave every host its own deep copy
	spec := r.spec

	cfg.GraphicsInfo = nil
	cfg.PciPassthruInfo = append([]types.BaseHostPciPassthruInfo(nil), cfg.PciPassthruInfo...)
	// hardware is a shallow copy of the template: copy the slice before adding to it
	hw := *h.Hardware
	hw.PciDevice = append([]types.HostPciDevice(nil), hw.PciDevice...)
	for i, g := range r.gpus {
		m := r.models[i]
		cfg.GraphicsInfo = append(cfg.GraphicsInfo, types.HostGraphicsInfo{
			DeviceName:     m.Name,
			VendorName:     "NVIDIA Corporation",
			PciId:          g.PciID,
			GraphicsType:   spec.GraphicsType,
			MemorySizeInKB: m.MemKB,
		})
		var bus, slot, fn byte
		fmt.Sscanf(g.PciID, "0000:%x:%x.%x", &bus, &slot, &fn)
		hw.PciDevice = append(hw.PciDevice, types.HostPciDevice{
			Id: g.PciID, ClassId: 0x0302, Bus: bus, Slot: slot, Function: fn,
			VendorId: 0x10de, SubVendorId: 0x10de, VendorName: "NVIDIA Corporation",
			DeviceId: m.DeviceID, SubDeviceId: 0x1533, DeviceName: m.Name,
		})
		cfg.PciPassthruInfo = append(cfg.PciPassthruInfo, &types.HostPciPassthruInfo{
			Id: g.PciID, DependentDevice: g.PciID, PassthruCapable: true,
		})
	}
	h.Hardware = &hw

	cfg.SharedPassthruGpuTypes = append([]string(nil), r.profiles...)
	cfg.SharedGpuCapabilities = nil
	for _, p := range r.profiles {
		cfg.SharedGpuCapabilities = append(cfg.SharedGpuCapabilities, types.HostSharedGpuCapabilities{
			Vgpu: p, DiskSnapshotSupported: true, MemorySnapshotSupported: true, SuspendSupported: true, MigrateSupported: true,
		})
	}
	gc := &types.HostGraphicsConfig{
		HostDefaultGraphicsType:        spec.GraphicsType,
		SharedPassthruAssignmentPolicy: spec.AssignmentPolicy,
	}
	ids := make([]string, 0, len(spec.DeviceTypes))
	for id := range spec.DeviceTypes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		gc.DeviceType = append(gc.DeviceType, types.HostGraphicsConfigDeviceType{DeviceId: id, GraphicsType: spec.DeviceTypes[id]})
	}
	// A device with a vGPU mode but no graphics type entry is listed with the host default.
	for _, id := range sortedKeys(spec.VgpuModes) {
		if _, ok := spec.DeviceTypes[id]; !ok {
			gc.DeviceType = append(gc.DeviceType, types.HostGraphicsConfigDeviceType{DeviceId: id, GraphicsType: spec.GraphicsType})
		}
	}
	sort.Slice(gc.DeviceType, func(i, j int) bool { return gc.DeviceType[i].DeviceId < gc.DeviceType[j].DeviceId })
	for i := range gc.DeviceType {
		gc.DeviceType[i].VgpuMode = spec.VgpuModes[gc.DeviceType[i].DeviceId]
	}
	cfg.GraphicsConfig = gc

	var pkgs []types.SoftwarePackage
	driverVersion := ""
	if spec.Driver != nil {
		driverVersion = *spec.Driver
	}
	if driverVersion != "" {
		created := time.Date(2024, 6, 4, 0, 0, 0, 0, time.UTC)
		for _, name := range []string{spec.DriverName, "nvdgpumgmtdaemon"} {
			pkgs = append(pkgs, softwarePackage(name, driverVersion, "NVD", "partner",
				"NVIDIA AI Enterprise vGPU host driver component", created))
		}
		// The PropertyCollector-readable fallback source of installed components.
		addSensor(h, fmt.Sprintf("NVIDIA %s %s %s", spec.DriverName, driverVersion, created.Format("2006-01-02 15:04:05.000")))
	}
	for _, v := range spec.VIBs {
		level := v.AcceptanceLevel
		if level == "" {
			level = "partner"
		}
		pkgs = append(pkgs, softwarePackage(v.Name, v.Version, v.Vendor, level, v.Summary, time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)))
	}
	return pkgs
}

// applyEffectiveTypes sets each device's graphicsType from the config: a per-device entry
// overrides the host default. (Real hosts apply it after an Xorg restart or reboot; the
// simulator applies it at once.) On API 8.0.3.0+ hosts graphicsInfo[].vgpuMode is the device's
// mode for vGPU (sharedDirect) devices, sameSize unless set ("By default, a GPU operates in
// equal-size mode", NVIDIA vGPU deployment guide, Citrix Virtual Apps, "Selecting the Correct
// vGPU Profiles"), and none ("vGPU mode not applicable", HostGraphicsInfoVgpuMode) for vSGA ones.
func applyEffectiveTypes(h *simulator.HostSystem, modes map[string]string, mig map[string]bool) {
	cfg := h.Config
	if cfg.GraphicsConfig == nil {
		return
	}
	withModes := hasVgpuMode(h)
	info := make([]types.HostGraphicsInfo, len(cfg.GraphicsInfo))
	copy(info, cfg.GraphicsInfo)
	for i := range info {
		info[i].GraphicsType = cfg.GraphicsConfig.HostDefaultGraphicsType
		for _, d := range cfg.GraphicsConfig.DeviceType {
			if d.DeviceId == info[i].PciId {
				info[i].GraphicsType = d.GraphicsType
			}
		}
		info[i].VgpuMode = ""
		if withModes {
			info[i].VgpuMode = "none"
			if info[i].GraphicsType == "sharedDirect" {
				info[i].VgpuMode = "sameSize"
				if m := modes[info[i].PciId]; m != "" {
					info[i].VgpuMode = m
				}
				if mig[info[i].PciId] {
					info[i].VgpuMode = "multiInstanceGpu"
				}
			}
		}
	}
	cfg.GraphicsInfo = info
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func addSensor(h *simulator.HostSystem, name string) {
	// healthSystemRuntime is shared with the template; give this host its own copy first
	if h.Runtime.HealthSystemRuntime == nil || h.Runtime.HealthSystemRuntime.SystemHealthInfo == nil {
		return
	}
	hs := *h.Runtime.HealthSystemRuntime
	shi := *hs.SystemHealthInfo
	shi.NumericSensorInfo = append(append([]types.HostNumericSensorInfo(nil), shi.NumericSensorInfo...),
		types.HostNumericSensorInfo{
			Name: name,
			HealthState: &types.ElementDescription{
				Description: types.Description{Label: "Green", Summary: "Sensor is operating under normal conditions"},
				Key:         "green",
			},
			SensorType: "Software Components",
		})
	hs.SystemHealthInfo = &shi
	h.Runtime.HealthSystemRuntime = &hs
}

func softwarePackage(name, version, vendor, level, summary string, created time.Time) types.SoftwarePackage {
	mm := true
	no := false
	return types.SoftwarePackage{
		Name: name, Version: version, Type: "bootbank", Vendor: vendor, AcceptanceLevel: level,
		Summary: summary, Description: summary, CreationDate: &created, MaintenanceModeRequired: &mm,
		Capability: types.SoftwarePackageCapability{LiveInstallAllowed: &no, LiveRemoveAllowed: &no, StatelessReady: &mm, Overlay: &no},
	}
}

// basePackages are the VMware VIBs every host lists, versioned from the host's product.
func basePackages(h *simulator.HostSystem) []types.SoftwarePackage {
	p := h.Config.Product
	ver := fmt.Sprintf("%s-0.0.%s", p.Version, p.Build)
	created := time.Date(2017, 6, 1, 0, 0, 0, 0, time.UTC)
	var pkgs []types.SoftwarePackage
	for _, name := range []string{"esx-base", "esx-ui", "vsan", "vmkusb"} {
		pkgs = append(pkgs, softwarePackage(name, ver, "VMware", "vmware_certified", "VMware component "+name, created))
	}
	return pkgs
}

// registerManagers gives the host its own manager objects: the template's configManager
// morefs are shared by all hosts and unregistered, so each host gets fresh references.
func registerManagers(h *simulator.HostSystem, packages []types.SoftwarePackage, acceptance string, modes map[string]string) *graphicsManager {
	gm := &graphicsManager{host: h, modes: modes, mig: map[string]bool{}}
	gm.Self = types.ManagedObjectReference{Type: "HostGraphicsManager", Value: "graphicsManager-" + h.Self.Value}
	gm.syncFromHost()
	registry.Put(gm)
	gref := gm.Self
	h.ConfigManager.GraphicsManager = &gref

	im := &imageConfigManager{host: h, packages: packages, acceptance: acceptance}
	im.Self = types.ManagedObjectReference{Type: "HostImageConfigManager", Value: "imageConfigManager-" + h.Self.Value}
	registry.Put(im)
	iref := im.Self
	h.ConfigManager.ImageConfigManager = &iref
	return gm
}

func (m *graphicsManager) syncFromHost() {
	cfg := m.host.Config
	m.GraphicsInfo = cfg.GraphicsInfo
	m.GraphicsConfig = cfg.GraphicsConfig
	m.SharedPassthruGpuTypes = cfg.SharedPassthruGpuTypes
	m.SharedGpuCapabilities = cfg.SharedGpuCapabilities
}

func invalidArgument(msg, property string) *soap.Fault {
	return simulator.Fault(msg, &types.InvalidArgument{InvalidProperty: property})
}

// readonlyUser is the -readonly-username login: it may read everything but gets NoPermission from
// the host configuration methods, as a vCenter role without Host.Config.* privileges does.
var readonlyUser string

// noPermission is the fault vCenter returns for a missing privilege on the host (vim.fault.NoPermission:
// object and privilegeId, deprecated in 8.0 for missingPrivileges, which pyvmomi decodes since 7.0.3.2).
func noPermission(ctx *simulator.Context, h *simulator.HostSystem, privilege string) *soap.Fault {
	if readonlyUser == "" || ctx.Session == nil || ctx.Session.UserName != readonlyUser {
		return nil
	}
	ref := h.Self
	return simulator.Fault(fmt.Sprintf("Permission to perform this operation was denied (%s on %s).", privilege, h.Name),
		&types.NoPermission{Object: &ref, PrivilegeId: privilege, MissingPrivileges: []types.NoPermissionEntityPrivileges{
			{Entity: ref, PrivilegeIds: []string{privilege}}}})
}

// vgpuModeUnset is -vgpu-mode-unset: what UpdateGraphicsConfig does to a device whose entry has no
// vgpuMode. The API reference says "If this value is unset, the mode remains unchanged" (govmomi
// vim25/types HostGraphicsConfigDeviceType.VgpuMode); "reset" models a host that treats the sent
// configuration as complete, so clients that drop the field are caught either way.
var vgpuModeUnset = "keep"

// validateGraphicsConfig rejects what ESXi rejects, naming the offending property.
func (m *graphicsManager) validateGraphicsConfig(c *types.HostGraphicsConfig) *soap.Fault {
	if !graphicsTypes[c.HostDefaultGraphicsType] {
		return invalidArgument(fmt.Sprintf("%s: hostDefaultGraphicsType %q is not shared or sharedDirect", m.host.Name, c.HostDefaultGraphicsType),
			"config.hostDefaultGraphicsType")
	}
	if !assignmentPolicies[c.SharedPassthruAssignmentPolicy] {
		return invalidArgument(fmt.Sprintf("%s: sharedPassthruAssignmentPolicy %q is not performance or consolidation", m.host.Name, c.SharedPassthruAssignmentPolicy),
			"config.sharedPassthruAssignmentPolicy")
	}
	known := map[string]bool{}
	for _, g := range m.host.Config.GraphicsInfo {
		known[g.PciId] = true
	}
	seen := map[string]bool{}
	for i, d := range c.DeviceType {
		prop := fmt.Sprintf("config.deviceType[%d]", i)
		if !known[d.DeviceId] {
			return invalidArgument(fmt.Sprintf("%s: deviceId %q is not a graphics device of this host", m.host.Name, d.DeviceId), prop+".deviceId")
		}
		if seen[d.DeviceId] {
			return invalidArgument(fmt.Sprintf("%s: deviceId %q given twice", m.host.Name, d.DeviceId), prop+".deviceId")
		}
		seen[d.DeviceId] = true
		if !graphicsTypes[d.GraphicsType] {
			return invalidArgument(fmt.Sprintf("%s: graphicsType %q for %s is not shared or sharedDirect", m.host.Name, d.GraphicsType, d.DeviceId), prop+".graphicsType")
		}
		if d.VgpuMode != "" && !hasVgpuMode(m.host) {
			return invalidArgument(fmt.Sprintf("%s: vgpuMode needs ESXi 8.0.3 or later, the host runs %s", m.host.Name, m.host.Config.Product.Version), prop+".vgpuMode")
		}
		if d.VgpuMode != "" && !vgpuModes[d.VgpuMode] {
			return invalidArgument(fmt.Sprintf("%s: vgpuMode %q for %s is not sameSize or mixedSize", m.host.Name, d.VgpuMode, d.DeviceId), prop+".vgpuMode")
		}
	}
	return nil
}

// UpdateGraphicsConfig replaces the host graphics configuration (default type, assignment
// policy and the per-device list) and applies it to the devices.
func (m *graphicsManager) UpdateGraphicsConfig(ctx *simulator.Context, req *types.UpdateGraphicsConfig) soap.HasFault {
	body := &methods.UpdateGraphicsConfigBody{}
	if fault := noPermission(ctx, m.host, "Host.Config.Settings"); fault != nil {
		body.Fault_ = fault
		return body
	}
	if fault := m.validateGraphicsConfig(&req.Config); fault != nil {
		body.Fault_ = fault
		return body
	}
	c := req.Config
	c.DeviceType = append([]types.HostGraphicsConfigDeviceType(nil), req.Config.DeviceType...)
	listed := map[string]bool{}
	for i := range c.DeviceType {
		d := &c.DeviceType[i]
		listed[d.DeviceId] = true
		switch {
		case d.VgpuMode != "":
			m.modes[d.DeviceId] = d.VgpuMode
		case vgpuModeUnset == "reset":
			delete(m.modes, d.DeviceId)
		}
		if hasVgpuMode(m.host) {
			d.VgpuMode = m.modes[d.DeviceId]
			if d.VgpuMode == "" {
				d.VgpuMode = "sameSize"
			}
		}
	}
	if vgpuModeUnset == "reset" {
		for id := range m.modes {
			if !listed[id] {
				delete(m.modes, id)
			}
		}
	}
	ctx.Map.WithLock(ctx, m.host, func() {
		m.host.Config.GraphicsConfig = &c
		applyEffectiveTypes(m.host, m.modes, m.mig)
		ctx.Map.Update(ctx, m.host, []types.PropertyChange{{Name: "config", Val: m.host.Config}})
	})
	m.syncFromHost()
	ctx.Map.Update(ctx, m, []types.PropertyChange{
		{Name: "graphicsConfig", Val: m.GraphicsConfig},
		{Name: "graphicsInfo", Val: m.GraphicsInfo},
	})
	body.Res = &types.UpdateGraphicsConfigResponse{}
	return body
}

// IsSharedGraphicsActive: true when a device runs in shared (vSGA) mode.
func (m *graphicsManager) IsSharedGraphicsActive(req *types.IsSharedGraphicsActive) soap.HasFault {
	active := false
	for _, g := range m.host.Config.GraphicsInfo {
		if g.GraphicsType == "shared" {
			active = true
		}
	}
	return &methods.IsSharedGraphicsActiveBody{Res: &types.IsSharedGraphicsActiveResponse{Returnval: active}}
}

// RefreshGraphicsManager re-reads the host state, as ESXi re-scans its graphics devices.
func (m *graphicsManager) RefreshGraphicsManager(req *types.RefreshGraphicsManager) soap.HasFault {
	m.syncFromHost()
	return &methods.RefreshGraphicsManagerBody{Res: &types.RefreshGraphicsManagerResponse{}}
}

// FetchSoftwarePackages lists the host's VIBs (what `esxcli software vib list` shows). It needs
// Host.Config.Image (pyVmomi _typeinfo_vim.py, HostImageConfigManager.fetchSoftwarePackages).
func (m *imageConfigManager) FetchSoftwarePackages(ctx *simulator.Context, req *types.FetchSoftwarePackages) soap.HasFault {
	if fault := noPermission(ctx, m.host, "Host.Config.Image"); fault != nil {
		return &methods.FetchSoftwarePackagesBody{Fault_: fault}
	}
	out := make([]types.SoftwarePackage, len(m.packages))
	copy(out, m.packages)
	return &methods.FetchSoftwarePackagesBody{Res: &types.FetchSoftwarePackagesResponse{Returnval: out}}
}

// HostImageConfigGetAcceptance is pyvmomi's QueryHostAcceptanceLevel.
func (m *imageConfigManager) HostImageConfigGetAcceptance(req *types.HostImageConfigGetAcceptance) soap.HasFault {
	return &methods.HostImageConfigGetAcceptanceBody{Res: &types.HostImageConfigGetAcceptanceResponse{Returnval: m.acceptance}}
}

var acceptanceLevels = map[string]bool{"vmware_certified": true, "vmware_accepted": true, "partner": true, "community": true}

// UpdateHostImageAcceptanceLevel is pyvmomi's UpdateAcceptanceLevel.
func (m *imageConfigManager) UpdateHostImageAcceptanceLevel(req *types.UpdateHostImageAcceptanceLevel) soap.HasFault {
	body := &methods.UpdateHostImageAcceptanceLevelBody{}
	if !acceptanceLevels[req.NewAcceptanceLevel] {
		body.Fault_ = invalidArgument(fmt.Sprintf("%s: acceptance level %q is not one of vmware_certified, vmware_accepted, partner, community",
			m.host.Name, req.NewAcceptanceLevel), "newAcceptanceLevel")
		return body
	}
	m.acceptance = req.NewAcceptanceLevel
	body.Res = &types.UpdateHostImageAcceptanceLevelResponse{}
	return body
}

// HostImageConfigGetProfile is pyvmomi's QueryHostImageProfile.
func (m *imageConfigManager) HostImageConfigGetProfile(req *types.HostImageConfigGetProfile) soap.HasFault {
	p := m.host.Config.Product
	return &methods.HostImageConfigGetProfileBody{Res: &types.HostImageConfigGetProfileResponse{
		Returnval: types.HostImageProfileSummary{Name: fmt.Sprintf("ESXi-%s-%s-standard", p.Version, p.Build), Vendor: p.Vendor},
	}}
}

func summarize(h *simulator.HostSystem, r *resolved, packages []types.SoftwarePackage) {
	s := map[string]interface{}{
		"name":                   h.Name,
		"moid":                   h.Self.Value,
		"gpu":                    r != nil,
		"graphics_manager":       h.ConfigManager.GraphicsManager.Value,
		"image_config_manager":   h.ConfigManager.ImageConfigManager.Value,
		"kernel_module_system":   h.ConfigManager.KernelModuleSystem.Value,
		"cluster":                "",
		"vms":                    []string{},
		"profiles":               []string{},
		"gpus":                   []map[string]interface{}{},
		"driver_version":         nil,
		"software_package_names": []string{},
		"esxi_version":           h.Config.Product.Version,
		"vgpu_modes":             map[string]string{},
	}
	if parent := registry.Get(*h.Parent); parent != nil {
		if c, ok := parent.(*simulator.ClusterComputeResource); ok {
			s["cluster"] = c.Name
		}
	}
	var vms []string
	for _, ref := range h.Vm {
		if vm, ok := registry.Get(ref).(*simulator.VirtualMachine); ok {
			vms = append(vms, vm.Name)
		}
	}
	sort.Strings(vms)
	if vms != nil {
		s["vms"] = vms
	}
	var names []string
	for _, p := range packages {
		names = append(names, p.Name+" "+p.Version)
	}
	s["software_package_names"] = names
	if r != nil {
		s["profiles"] = r.profiles
		var gpus []map[string]interface{}
		for i, g := range r.gpus {
			gpus = append(gpus, map[string]interface{}{"pci_id": g.PciID, "device_name": r.models[i].Name, "memory_kb": r.models[i].MemKB})
		}
		s["gpus"] = gpus
		if r.spec.VgpuModes != nil {
			s["vgpu_modes"] = r.spec.VgpuModes
		}
		if r.spec.Driver != nil && *r.spec.Driver != "" {
			s["driver_version"] = *r.spec.Driver
			s["driver_name"] = r.spec.DriverName
		}
	}
	hostSummaryMu.Lock()
	hostSummaries[h.Name] = s
	hostSummaryMu.Unlock()
}

// inventory is written to <run-dir>/inventory.json so tests know names and morefs up front.
func inventory() map[string]interface{} {
	hostSummaryMu.Lock()
	defer hostSummaryMu.Unlock()
	var hosts []map[string]interface{}
	var gpuHosts []string
	for _, h := range sortedHosts() {
		if s, ok := hostSummaries[h.Name]; ok {
			hosts = append(hosts, s)
			if s["gpu"] == true {
				gpuHosts = append(gpuHosts, h.Name)
			}
		}
	}
	var vms []map[string]interface{}
	for _, e := range registry.All("VirtualMachine") {
		vm := e.(*simulator.VirtualMachine)
		host := ""
		if vm.Runtime.Host != nil {
			if h, ok := registry.Get(*vm.Runtime.Host).(*simulator.HostSystem); ok {
				host = h.Name
			}
		}
		vms = append(vms, map[string]interface{}{"name": vm.Name, "moid": vm.Self.Value, "host": host,
			"firmware": vm.Config.Firmware})
	}
	sort.Slice(vms, func(i, j int) bool { return strings.Compare(vms[i]["name"].(string), vms[j]["name"].(string)) < 0 })
	if gpuHosts == nil {
		gpuHosts = []string{}
	}
	return map[string]interface{}{"hosts": hosts, "gpu_hosts": gpuHosts, "vms": vms}
}
