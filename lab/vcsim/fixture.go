package main

// GPU host fixtures: which hosts carry NVIDIA GPUs, which vGPU profiles they offer and which
// host driver VIB they run. Built from flags and an optional JSON file (format in README.md).

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"

	"github.com/vmware/govmomi/simulator"
)

const (
	defaultDriverVersion = "550.90.05-1OEM.800.1.0.20613240"
	defaultDriverName    = "NVD-AIE_ESXi_8.0.0_Driver"
)

// gpuModel is one catalog entry: what vSphere reports for such a board.
type gpuModel struct {
	Name     string   // HostGraphicsInfo.deviceName
	MemKB    int64    // HostGraphicsInfo.memorySizeInKB
	DeviceID int16    // PCI device id (vendor 0x10de)
	Profiles []string // vGPU types the host driver offers for it
}

// Profile names follow NVIDIA's vGPU naming (grid_<board>-<fb GiB><series>, MIG-backed
// grid_<board>-<slices>-<fb GiB>c); the lists are what the simulator offers, not a support matrix.
var catalog = map[string]gpuModel{
	"a100-40": {"NVIDIA A100-PCIE-40GB", 40 << 20, 0x20f1, []string{
		"grid_a100-4c", "grid_a100-5c", "grid_a100-8c", "grid_a100-10c", "grid_a100-20c", "grid_a100-40c",
		"grid_a100-1-5c", "grid_a100-2-10c", "grid_a100-3-20c", "grid_a100-4-20c", "grid_a100-7-40c"}},
	"a100-80": {"NVIDIA A100 80GB PCIe", 80 << 20, 0x20b5, []string{
		"grid_a100d-4c", "grid_a100d-8c", "grid_a100d-10c", "grid_a100d-16c", "grid_a100d-20c", "grid_a100d-40c", "grid_a100d-80c",
		"grid_a100d-1-10c", "grid_a100d-2-20c", "grid_a100d-3-40c", "grid_a100d-4-40c", "grid_a100d-7-80c"}},
	"l40s": {"NVIDIA L40S", 48 << 20, 0x26b9, []string{
		"grid_l40s-1q", "grid_l40s-2q", "grid_l40s-4q", "grid_l40s-8q", "grid_l40s-16q", "grid_l40s-24q", "grid_l40s-48q",
		"grid_l40s-4c", "grid_l40s-6c", "grid_l40s-8c", "grid_l40s-12c", "grid_l40s-16c", "grid_l40s-24c", "grid_l40s-48c"}},
	"h100-80": {"NVIDIA H100 PCIe", 80 << 20, 0x2331, []string{
		"grid_h100-4c", "grid_h100-5c", "grid_h100-8c", "grid_h100-10c", "grid_h100-16c", "grid_h100-20c", "grid_h100-40c", "grid_h100-80c",
		"grid_h100-1-10c", "grid_h100-2-20c", "grid_h100-3-40c", "grid_h100-4-40c", "grid_h100-7-80c"}},
}

// Bus numbers of the GPUs on a host, in slot order (a typical 2-socket server layout).
var gpuBuses = []byte{0x3b, 0x5e, 0x86, 0xaf, 0xd8, 0x18, 0x31, 0x4a}

func modelKeys() string {
	keys := make([]string, 0, len(catalog))
	for k := range catalog {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

func lookupModel(key string) (gpuModel, error) {
	if m, ok := catalog[strings.ToLower(key)]; ok {
		return m, nil
	}
	for _, m := range catalog {
		if strings.EqualFold(m.Name, key) {
			return m, nil
		}
	}
	return gpuModel{}, fmt.Errorf("unknown GPU model %q (known: %s, or their device names)", key, modelKeys())
}

// VIBSpec is an extra software package on a host.
type VIBSpec struct {
	Name            string `json:"name"`
	Version         string `json:"version"`
	Vendor          string `json:"vendor"`
	Summary         string `json:"summary,omitempty"`
	AcceptanceLevel string `json:"acceptance_level,omitempty"`
}

// GPUSpec is one physical GPU.
type GPUSpec struct {
	Model string `json:"model"`
	PciID string `json:"pci_id,omitempty"`
}

// HostSpec is the fixture of one GPU host; unset fields inherit (flags < defaults < hosts entry).
type HostSpec struct {
	Model            string            `json:"model,omitempty"`
	Count            int               `json:"count,omitempty"`
	GPUs             []GPUSpec         `json:"gpus,omitempty"`
	Profiles         []string          `json:"profiles,omitempty"`
	Driver           *string           `json:"driver,omitempty"`
	DriverName       string            `json:"driver_name,omitempty"`
	GraphicsType     string            `json:"graphics_type,omitempty"`
	AssignmentPolicy string            `json:"assignment_policy,omitempty"`
	DeviceTypes      map[string]string `json:"device_types,omitempty"`
	VIBs             []VIBSpec         `json:"vibs,omitempty"`
	AcceptanceLevel  string            `json:"acceptance_level,omitempty"`
	VgpuModes        map[string]string `json:"vgpu_modes,omitempty"`     // {pci id: sameSize|mixedSize}; API 8.0.3.0+
	EsxiVersion      string            `json:"esxi_version,omitempty"`   // e.g. 7.0.3: this host's product version
	ModuleOptions    map[string]string `json:"module_options,omitempty"` // {kernel module: option string} configured and loaded at start
	MigGPUs          []string          `json:"mig_gpus,omitempty"`       // PCI ids of GPUs with MIG mode on (MIG-backed vGPUs only)
}

// Fixture is the JSON file given with -fixture.
type Fixture struct {
	Defaults          HostSpec               `json:"defaults"`
	Hosts             map[string]HostSpec    `json:"hosts"`               // host name or glob -> spec; each named host is a GPU host
	VMFirmware        map[string]string      `json:"vm_firmware"`         // VM name or glob -> efi|bios (VMs created by -vms)
	VMHardwareVersion map[string]string      `json:"vm_hardware_version"` // VM name or glob -> vmx-NN
	VMServiceVMs      []string               `json:"vm_service_vms"`      // VM names or globs owned by the VM Service
	PoweredOffVMs     []string               `json:"powered_off_vms"`     // VM names or globs created powered off
	Clusters          map[string]ClusterSpec `json:"clusters"`            // cluster name -> DRS settings, Supervisor
	VCenterOptions    map[string]string      `json:"vcenter_options"`     // vCenter advanced settings
	Namespaces        []NamespaceSpec        `json:"namespaces"`          // vSphere Namespaces that exist already
}

// vmValue is the value of the first entry (exact name, then globs in order) matching VM name.
func vmValue(m map[string]string, name, def string) string {
	if v, ok := m[name]; ok {
		return v
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if matchHost(k, name) {
			return m[k]
		}
	}
	return def
}

func vmListed(list []string, name string) bool {
	for _, p := range list {
		if matchHost(p, name) {
			return true
		}
	}
	return false
}

var hardwareVersionRE = regexp.MustCompile(`^vmx-\d+$`)

var firmwareTypes = map[string]bool{"efi": true, "bios": true}

// vmFirmware is the firmware of VM name: an exact fixture entry, else a matching glob, else def.
func (f *Fixture) vmFirmware(name, def string) string {
	return vmValue(f.VMFirmware, name, def)
}

// resolved is what decorateHosts applies to one host.
type resolved struct {
	spec     HostSpec
	gpus     []GPUSpec
	models   []gpuModel
	mig      []bool // per GPU: MIG mode on
	profiles []string
}

type fixtureSet struct {
	gpuHosts map[string]*resolved // by host name
}

func (s HostSpec) overlay(o HostSpec) HostSpec {
	if o.Model != "" {
		s.Model = o.Model
		s.GPUs = nil
	}
	if o.Count != 0 {
		s.Count = o.Count
		s.GPUs = nil
	}
	if o.GPUs != nil {
		s.GPUs = o.GPUs
	}
	if o.Profiles != nil {
		s.Profiles = o.Profiles
	}
	if o.Driver != nil {
		s.Driver = o.Driver
	}
	if o.DriverName != "" {
		s.DriverName = o.DriverName
	}
	if o.GraphicsType != "" {
		s.GraphicsType = o.GraphicsType
	}
	if o.AssignmentPolicy != "" {
		s.AssignmentPolicy = o.AssignmentPolicy
	}
	if o.DeviceTypes != nil {
		s.DeviceTypes = o.DeviceTypes
	}
	if o.VIBs != nil {
		s.VIBs = o.VIBs
	}
	if o.ModuleOptions != nil {
		s.ModuleOptions = o.ModuleOptions
	}
	if o.AcceptanceLevel != "" {
		s.AcceptanceLevel = o.AcceptanceLevel
	}
	if o.VgpuModes != nil {
		s.VgpuModes = o.VgpuModes
	}
	if o.EsxiVersion != "" {
		s.EsxiVersion = o.EsxiVersion
	}
	if o.MigGPUs != nil {
		s.MigGPUs = o.MigGPUs
	}
	return s
}

func isGlob(p string) bool { return strings.ContainsAny(p, "*?[") }

func matchHost(pattern, name string) bool {
	if pattern == "all" || pattern == name {
		return true
	}
	ok, _ := path.Match(pattern, name)
	return ok
}

// buildFixture reads flags and the fixture file; host names are checked later, against the inventory.
func buildFixture(o *options) (*Fixture, error) {
	driver := o.driver
	f := &Fixture{Hosts: map[string]HostSpec{}}
	if o.fixture != "" {
		data, err := os.ReadFile(o.fixture)
		if err != nil {
			return nil, err
		}
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.DisallowUnknownFields() // a typo in a fixture key must not silently fall back to defaults
		if err = dec.Decode(f); err != nil {
			return nil, fmt.Errorf("%s: %v", o.fixture, err)
		}
		if f.Hosts == nil {
			f.Hosts = map[string]HostSpec{}
		}
		for vm, fw := range f.VMFirmware {
			if !firmwareTypes[fw] {
				return nil, fmt.Errorf("%s: vm_firmware[%s] %q not one of efi, bios", o.fixture, vm, fw)
			}
		}
		for vm, v := range f.VMHardwareVersion {
			if !hardwareVersionRE.MatchString(v) {
				return nil, fmt.Errorf("%s: vm_hardware_version[%s] %q: want like vmx-13", o.fixture, vm, v)
			}
		}
	}
	base := HostSpec{Model: o.gpuModel, Count: o.gpuCount, Driver: &driver, DriverName: defaultDriverName,
		GraphicsType: "shared", AssignmentPolicy: "performance", AcceptanceLevel: "partner"}
	f.Defaults = base.overlay(f.Defaults)
	for _, p := range strings.Split(o.gpuHosts, ",") {
		if p = strings.TrimSpace(p); p != "" {
			if _, ok := f.Hosts[p]; !ok {
				f.Hosts[p] = HostSpec{}
			}
		}
	}
	for _, hd := range o.hostDriver {
		i := strings.Index(hd, "=")
		if i <= 0 {
			return nil, fmt.Errorf("-host-driver %q: want HOST=VERSION", hd)
		}
		name, ver := hd[:i], hd[i+1:]
		spec := f.Hosts[name]
		spec.Driver = &ver
		f.Hosts[name] = spec
	}
	return f, nil
}

// resolve matches fixture entries against the inventory's host names.
func (f *Fixture) resolve(hostNames []string) (*fixtureSet, error) {
	set := &fixtureSet{gpuHosts: map[string]*resolved{}}
	keys := make([]string, 0, len(f.Hosts))
	for k := range f.Hosts {
		keys = append(keys, k)
	}
	// globs first, exact names last, so an exact entry refines what a glob set
	sort.Slice(keys, func(i, j int) bool {
		gi, gj := isGlob(keys[i]) || keys[i] == "all", isGlob(keys[j]) || keys[j] == "all"
		if gi != gj {
			return gi
		}
		return keys[i] < keys[j]
	})
	specs := map[string]HostSpec{}
	for _, k := range keys {
		matched := false
		for _, name := range hostNames {
			if !matchHost(k, name) {
				continue
			}
			matched = true
			cur, ok := specs[name]
			if !ok {
				cur = f.Defaults
			}
			specs[name] = cur.overlay(f.Hosts[k])
		}
		if !matched {
			return nil, fmt.Errorf("GPU host %q matches no host in the inventory (hosts: %s)", k, strings.Join(hostNames, ", "))
		}
	}
	for name, spec := range specs {
		r, err := resolveHost(name, spec)
		if err != nil {
			return nil, err
		}
		set.gpuHosts[name] = r
	}
	return set, nil
}

var graphicsTypes = map[string]bool{"shared": true, "sharedDirect": true}

// HostGraphicsConfigVgpuMode (vSphere API 8.0.3.0): the values UpdateGraphicsConfig accepts.
var vgpuModes = map[string]bool{"sameSize": true, "mixedSize": true}

var esxiVersionRE = regexp.MustCompile(`^\d+\.\d+\.\d+$`)
var assignmentPolicies = map[string]bool{"performance": true, "consolidation": true}

func resolveHost(name string, spec HostSpec) (*resolved, error) {
	r := &resolved{spec: spec}
	gpus := spec.GPUs
	if gpus == nil {
		if spec.Count < 1 || spec.Count > len(gpuBuses) {
			return nil, fmt.Errorf("host %s: GPU count %d out of range 1..%d", name, spec.Count, len(gpuBuses))
		}
		for i := 0; i < spec.Count; i++ {
			gpus = append(gpus, GPUSpec{Model: spec.Model})
		}
	}
	seenPci := map[string]bool{}
	seenProfile := map[string]bool{}
	migOn := map[string]bool{}
	for _, id := range spec.MigGPUs {
		migOn[id] = true
	}
	for i, g := range gpus {
		m, err := lookupModel(g.Model)
		if err != nil {
			return nil, fmt.Errorf("host %s GPU %d: %v", name, i, err)
		}
		if g.PciID == "" {
			if i >= len(gpuBuses) {
				return nil, fmt.Errorf("host %s: more than %d GPUs need explicit pci_id", name, len(gpuBuses))
			}
			g.PciID = fmt.Sprintf("0000:%02x:00.0", gpuBuses[i])
		}
		if seenPci[g.PciID] {
			return nil, fmt.Errorf("host %s: duplicate GPU pci_id %s", name, g.PciID)
		}
		seenPci[g.PciID] = true
		mig := migOn[g.PciID]
		r.gpus = append(r.gpus, g)
		r.models = append(r.models, m)
		r.mig = append(r.mig, mig)
		// A GPU offers time-sliced vGPU types with MIG mode off and MIG-backed ones with it on, never both.
		hasMig := false
		for _, p := range m.Profiles {
			f, _ := factsOf(p)
			hasMig = hasMig || f.slices > 0
			if (f.slices > 0) == mig && !seenProfile[p] {
				seenProfile[p] = true
				r.profiles = append(r.profiles, p)
			}
		}
		if mig && !hasMig {
			return nil, fmt.Errorf("host %s: mig_gpus names %s, a %s, which has no MIG mode", name, g.PciID, m.Name)
		}
	}
	for id := range migOn {
		if !seenPci[id] {
			return nil, fmt.Errorf("host %s: mig_gpus names %s, which is not one of its GPUs", name, id)
		}
	}
	if spec.Profiles != nil {
		r.profiles = append([]string(nil), spec.Profiles...)
	}
	if !graphicsTypes[spec.GraphicsType] {
		return nil, fmt.Errorf("host %s: graphics_type %q not one of shared, sharedDirect", name, spec.GraphicsType)
	}
	if !assignmentPolicies[spec.AssignmentPolicy] {
		return nil, fmt.Errorf("host %s: assignment_policy %q not one of performance, consolidation", name, spec.AssignmentPolicy)
	}
	for id, t := range spec.DeviceTypes {
		if !seenPci[id] {
			return nil, fmt.Errorf("host %s: device_types names %s, which is not one of its GPUs", name, id)
		}
		if !graphicsTypes[t] {
			return nil, fmt.Errorf("host %s: device_types[%s] %q not one of shared, sharedDirect", name, id, t)
		}
	}
	for id, m := range spec.VgpuModes {
		if !seenPci[id] {
			return nil, fmt.Errorf("host %s: vgpu_modes names %s, which is not one of its GPUs", name, id)
		}
		if !vgpuModes[m] {
			return nil, fmt.Errorf("host %s: vgpu_modes[%s] %q not one of sameSize, mixedSize", name, id, m)
		}
	}
	if spec.EsxiVersion != "" && !esxiVersionRE.MatchString(spec.EsxiVersion) {
		return nil, fmt.Errorf("host %s: esxi_version %q: want like 8.0.3", name, spec.EsxiVersion)
	}
	return r, nil
}

func sortedHosts() []*simulator.HostSystem {
	var hosts []*simulator.HostSystem
	for _, e := range registry.All("HostSystem") {
		hosts = append(hosts, e.(*simulator.HostSystem))
	}
	sort.Slice(hosts, func(i, j int) bool { return hosts[i].Name < hosts[j].Name })
	return hosts
}
