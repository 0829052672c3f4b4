package main

// vGPU placement: which physical GPU of a host can take which vGPU, as vCenter decides at power-on,
// DRS initial placement and maintenance-mode evacuation. vcsim powers any VM on anywhere; these
// rules are what real vSphere enforces, each with its source:
//
//   - A vGPU lands on a GPU in vendor shared passthrough graphics (sharedDirect); a GPU in shared (vSGA)
//     mode serves vSGA only (vSphere API, HostGraphicsConfigGraphicsType: "shared" = VMware shared
//     graphics, "sharedDirect" = vendor shared passthrough graphics).
//   - "By default, a GPU operates in equal-size mode": every vGPU on one GPU is the same profile, as
//     many as fit its frame buffer; mixed sizes share a GPU only in mixed-size mode (vSphere 8.0 U3,
//     HostGraphicsConfigVgpuMode mixedSize) (NVIDIA vGPU deployment guide, Citrix Virtual Apps,
//     "Selecting the Correct vGPU Profiles"; NVIDIA vGPU user guide, "Virtual GPU Types").
//   - A GPU with MIG mode enabled offers MIG-backed vGPUs only (HostGraphicsInfoVgpuMode
//     multiInstanceGpu); the GPU instances of one GPU use at most its 7 compute slices (NVIDIA MIG user
//     guide, "Supported GPU Instance Profiles"); a GPU with MIG mode off offers time-sliced vGPUs only.
//   - PowerOnVM_Task: "If the cluster is a DRS cluster, DRS will be invoked if the virtual machine can
//     be automatically placed by DRS (see DrsBehavior)"; host: "If no host is specified, the current
//     associated host is used. ... If this host is not compatible, the current host association is
//     used" (vSphere Web Services API, VirtualMachine.PowerOnVM_Task). DrsBehavior: manual generates
//     placement recommendations only; partiallyAutomated and fullyAutomated place at power-on
//     (ClusterDrsVmConfigInfo.behavior); enabled=false excludes the VM from DRS.

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// migSlices: compute slices of one MIG-capable GPU (A100, H100: 7 GPU instance slices).
const migSlices = 7

// profileFacts is what vCenter's VirtualMachineVgpuProfileInfo says of a profile. NVIDIA's names carry
// the facts: grid_<board>-<frame buffer GiB><series>, MIG-backed grid_<board>-<slices>-<GiB><series>;
// series C is compute, Q/B/A are graphics ("quadro" in VirtualMachineVgpuProfileInfoProfileClass).
type profileFacts struct {
	name    string
	board   string
	fbGiB   int64
	slices  int // 0: time-sliced
	sharing string
	class   string
}

var profileRE = regexp.MustCompile(`^([a-z]+_[a-z0-9]+?)-(?:(\d+)-)?(\d+)([a-z])[a-z0-9]*$`)

func factsOf(name string) (profileFacts, bool) {
	m := profileRE.FindStringSubmatch(name)
	if m == nil {
		return profileFacts{name: name, fbGiB: 1, sharing: "timeSliced", class: "quadro"}, false
	}
	f := profileFacts{name: name, board: m[1], sharing: "timeSliced", class: "quadro"}
	f.fbGiB, _ = strconv.ParseInt(m[3], 10, 64)
	if m[2] != "" {
		f.slices, _ = strconv.Atoi(m[2])
		f.sharing = "mig"
	}
	if m[4] == "c" {
		f.class = "compute"
	}
	return f, true
}

// gpuHost is what placement knows of a GPU host beyond its HostSystem: each GPU's model and MIG mode.
type gpuHost struct {
	host *simulator.HostSystem
	gm   *graphicsManager
	gpus []gpuDef
}

type gpuDef struct {
	pci   string
	model gpuModel
	mig   bool
}

var gpuHostsByMoid = map[string]*gpuHost{}

// gpuSlot is one GPU during a placement: its effective mode and the vGPUs it carries.
type gpuSlot struct {
	pci     string
	gtype   string
	mode    string // sameSize, mixedSize, multiInstanceGpu
	memGiB  int64
	allowed map[string]bool
	used    []profileFacts
}

// vgpuMode is the effective vGPU mode of a GPU (also reported as HostGraphicsInfo.vgpuMode on 8.0.3+ hosts).
func (g *gpuHost) vgpuMode(d gpuDef, graphicsType string) string {
	switch {
	case graphicsType != "sharedDirect":
		return "none"
	case d.mig:
		return "multiInstanceGpu"
	case g.gm != nil && g.gm.modes[d.pci] != "":
		return g.gm.modes[d.pci]
	}
	return "sameSize"
}

// allowedOn: the host's offered profiles this GPU can run (its board; MIG-backed only in MIG mode).
func allowedOn(offer []string, d gpuDef) map[string]bool {
	board := ""
	if len(d.model.Profiles) > 0 {
		f, _ := factsOf(d.model.Profiles[0])
		board = f.board
	}
	out := map[string]bool{}
	for _, p := range offer {
		f, known := factsOf(p)
		if known && f.board != board {
			continue
		}
		if (f.slices > 0) == d.mig {
			out[p] = true
		}
	}
	return out
}

// slots: the host's GPUs, empty, with what each may run.
func (g *gpuHost) slots() []*gpuSlot {
	var out []*gpuSlot
	for _, d := range g.gpus {
		gtype := "shared"
		var mem int64
		for _, info := range g.host.Config.GraphicsInfo {
			if info.PciId == d.pci {
				gtype, mem = info.GraphicsType, info.MemorySizeInKB>>20
			}
		}
		out = append(out, &gpuSlot{pci: d.pci, gtype: gtype, mode: g.vgpuMode(d, gtype), memGiB: mem,
			allowed: allowedOn(g.host.Config.SharedPassthruGpuTypes, d)})
	}
	return out
}

func (s *gpuSlot) fits(f profileFacts) bool {
	if s.gtype != "sharedDirect" || !s.allowed[f.name] {
		return false
	}
	if f.slices > 0 {
		if s.mode != "multiInstanceGpu" {
			return false
		}
		used, mem := f.slices, f.fbGiB
		for _, u := range s.used {
			used += u.slices
			mem += u.fbGiB
		}
		return used <= migSlices && mem <= s.memGiB
	}
	if s.mode == "multiInstanceGpu" {
		return false
	}
	mem := f.fbGiB
	for _, u := range s.used {
		if s.mode != "mixedSize" && u.name != f.name {
			return false
		}
		mem += u.fbGiB
	}
	return mem <= s.memGiB
}

// place puts every profile on a GPU (in the host's assignment policy order) or reports the first that
// does not fit. performance spreads vGPUs over GPUs, consolidation fills one GPU first
// (HostGraphicsConfigSharedPassthruAssignmentPolicy).
func place(slots []*gpuSlot, policy string, profiles []string) (string, bool) {
	for _, p := range profiles {
		f, _ := factsOf(p)
		order := append([]*gpuSlot(nil), slots...)
		sort.SliceStable(order, func(i, j int) bool {
			if policy == "consolidation" {
				return len(order[i].used) > len(order[j].used)
			}
			return len(order[i].used) < len(order[j].used)
		})
		placed := false
		for _, s := range order {
			if s.fits(f) {
				s.used = append(s.used, f)
				placed = true
				break
			}
		}
		if !placed {
			return p, false
		}
	}
	return "", true
}

// vmProfiles lists the vGPU profiles of a VM's devices.
func vmProfiles(vm *simulator.VirtualMachine) []string {
	var out []string
	if vm.Config == nil {
		return nil
	}
	for _, d := range vm.Config.Hardware.Device {
		if p, ok := d.(*types.VirtualPCIPassthrough); ok {
			if b, ok := p.Backing.(*types.VirtualPCIPassthroughVmiopBackingInfo); ok {
				out = append(out, b.Vgpu)
			}
		}
	}
	return out
}

var (
	placementMu sync.Mutex
	// VMs whose power-on was accepted but whose power task has not finished: they hold their vGPUs.
	pendingPowerOn = map[types.ManagedObjectReference]bool{}
)

// fitsHost says whether profiles fit on host next to the vGPUs of its running VMs (and of extra, VMs
// about to move there), or why not.
func fitsHost(ctx *simulator.Context, h *simulator.HostSystem, profiles []string, skip types.ManagedObjectReference,
	extra [][]string) (bool, string) {
	g := gpuHostsByMoid[h.Self.Value]
	if g == nil {
		return false, fmt.Sprintf("host %s has no NVIDIA GPU", h.Name)
	}
	slots := g.slots()
	policy := "performance"
	if gc := h.Config.GraphicsConfig; gc != nil {
		policy = gc.SharedPassthruAssignmentPolicy
	}
	var running []*simulator.VirtualMachine
	for _, ref := range h.Vm {
		vm, ok := ctx.Map.Get(ref).(*simulator.VirtualMachine)
		if !ok || ref == skip {
			continue
		}
		if vm.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOn || pendingPowerOn[ref] {
			running = append(running, vm)
		}
	}
	sort.Slice(running, func(i, j int) bool { return running[i].Name < running[j].Name })
	for _, vm := range running {
		place(slots, policy, vmProfiles(vm)) // what does not fit is left out: the stand-in does not evict
	}
	for _, e := range extra {
		place(slots, policy, e)
	}
	offered := map[string]bool{}
	for _, p := range h.Config.SharedPassthruGpuTypes {
		offered[p] = true
	}
	for _, p := range profiles {
		if !offered[p] {
			return false, fmt.Sprintf("host %s does not offer vGPU type %s", h.Name, p)
		}
	}
	if p, ok := place(slots, policy, profiles); !ok {
		return false, fmt.Sprintf("no GPU of host %s can take vGPU %s next to the vGPUs running there", h.Name, p)
	}
	return true, ""
}

// clusterOf returns the cluster of a host, or nil for a standalone host.
func clusterOf(ctx *simulator.Context, h *simulator.HostSystem) *simulator.ClusterComputeResource {
	if h.Parent == nil {
		return nil
	}
	c, _ := ctx.Map.Get(*h.Parent).(*simulator.ClusterComputeResource)
	return c
}

// drsFor: whether the cluster's DRS acts for the VM and the automation level in force. An unset
// defaultVmBehavior is fullyAutomated, and enableVmBehaviorOverrides defaults to true
// (ClusterDrsConfigInfo).
func drsFor(c *simulator.ClusterComputeResource, vm types.ManagedObjectReference) (enabled bool, behavior string) {
	cfg, ok := c.ConfigurationEx.(*types.ClusterConfigInfoEx)
	if !ok || cfg.DrsConfig.Enabled == nil || !*cfg.DrsConfig.Enabled {
		return false, ""
	}
	behavior = string(cfg.DrsConfig.DefaultVmBehavior)
	if behavior == "" {
		behavior = string(types.DrsBehaviorFullyAutomated)
	}
	if cfg.DrsConfig.EnableVmBehaviorOverrides != nil && !*cfg.DrsConfig.EnableVmBehaviorOverrides {
		return true, behavior
	}
	for _, o := range cfg.DrsVmConfig {
		if o.Key == vm {
			if o.Enabled != nil && !*o.Enabled {
				return false, behavior
			}
			if o.Behavior != "" {
				behavior = string(o.Behavior)
			}
		}
	}
	return true, behavior
}

// usableHosts: the cluster's connected hosts outside maintenance mode, by name.
func usableHosts(ctx *simulator.Context, c *simulator.ClusterComputeResource) []*simulator.HostSystem {
	var out []*simulator.HostSystem
	for _, ref := range c.Host {
		h, ok := ctx.Map.Get(ref).(*simulator.HostSystem)
		if ok && h.Runtime.ConnectionState == types.HostSystemConnectionStateConnected && !h.Runtime.InMaintenanceMode {
			out = append(out, h)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// moveVM registers a VM on another host of its compute resource (what a placement or vMotion leaves).
func moveVM(ctx *simulator.Context, vm *simulator.VirtualMachine, to *simulator.HostSystem) {
	from, _ := ctx.Map.Get(*vm.Runtime.Host).(*simulator.HostSystem)
	if from == nil || from.Self == to.Self {
		return
	}
	ctx.Map.RemoveReference(ctx, from, &from.Vm, vm.Self)
	ctx.Map.AddReference(ctx, to, &to.Vm, vm.Self)
	ref := to.Self
	ctx.Map.Update(ctx, vm, []types.PropertyChange{
		{Name: "runtime.host", Val: &ref},
		{Name: "summary.runtime.host", Val: &ref},
	})
}

// failedTask is a task that ended with fault and a readable message (vcsim's own tasks say only the
// fault's Go type).
func failedTask(ctx *simulator.Context, entity mo.Reference, name string, fault types.BaseMethodFault, msg string) types.ManagedObjectReference {
	t := simulator.CreateTask(entity, name, nil)
	ctx.Map.Put(t)
	now := time.Now()
	t.Info.Key, t.Info.Task = t.Self.Value, t.Self
	t.Info.StartTime, t.Info.CompleteTime = &now, &now
	t.Info.State = types.TaskInfoStateError
	t.Info.Error = &types.LocalizedMethodFault{Fault: fault, LocalizedMessage: msg}
	return t.Self
}

// placedVM serves PowerOnVM_Task for VMs with vGPUs.
type placedVM struct {
	*simulator.VirtualMachine
}

// powerOnHost chooses the host a vGPU VM starts on, or says why none can take it.
func powerOnHost(ctx *simulator.Context, vm *simulator.VirtualMachine, asked *types.ManagedObjectReference) (*simulator.HostSystem, types.BaseMethodFault, string) {
	current := ctx.Map.Get(*vm.Runtime.Host).(*simulator.HostSystem)
	profiles := vmProfiles(vm)
	cluster := clusterOf(ctx, current)
	if cluster != nil {
		if enabled, behavior := drsFor(cluster, vm.Self); enabled && behavior != string(types.DrsBehaviorManual) {
			var why []string
			candidates := usableHosts(ctx, cluster)
			sort.SliceStable(candidates, func(i, j int) bool { return candidates[i].Self == current.Self })
			for _, h := range candidates {
				ok, reason := fitsHost(ctx, h, profiles, vm.Self, nil)
				if ok {
					return h, nil, ""
				}
				why = append(why, reason)
			}
			return nil, &types.NoCompatibleHost{}, fmt.Sprintf("DRS found no compatible host for %s in cluster %s: %v",
				vm.Name, cluster.Name, why)
		}
	}
	target := current
	if asked != nil && *asked != current.Self {
		if h, ok := ctx.Map.Get(*asked).(*simulator.HostSystem); ok && h.Parent != nil && current.Parent != nil &&
			*h.Parent == *current.Parent && h.Runtime.ConnectionState == types.HostSystemConnectionStateConnected {
			target = h
		}
	}
	if target.Runtime.InMaintenanceMode {
		return nil, &types.InvalidState{}, fmt.Sprintf("host %s is in maintenance mode", target.Name)
	}
	if ok, reason := fitsHost(ctx, target, profiles, vm.Self, nil); !ok {
		return nil, &types.InsufficientGraphicsResourcesFault{}, fmt.Sprintf(
			"cannot power on %s on %s: %s", vm.Name, target.Name, reason)
	}
	return target, nil, ""
}

func (v *placedVM) PowerOnVMTask(ctx *simulator.Context, req *types.PowerOnVM_Task) soap.HasFault {
	vm := v.VirtualMachine
	unhook(ctx, vm.Self)
	if len(vmProfiles(vm)) == 0 || vm.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOn || vm.Config.Template {
		return vm.PowerOnVMTask(ctx, req)
	}
	placementMu.Lock()
	defer placementMu.Unlock()
	target, fault, msg := powerOnHost(ctx, vm, req.Host)
	if fault != nil {
		return &methods.PowerOnVM_TaskBody{Res: &types.PowerOnVM_TaskResponse{
			Returnval: failedTask(ctx, vm, "powerOn", fault, msg)}}
	}
	moveVM(ctx, vm, target)
	pendingPowerOn[vm.Self] = true
	body := vm.PowerOnVMTask(ctx, req)
	if res, ok := body.(*methods.PowerOnVM_TaskBody); ok && res.Res != nil {
		if t, ok := ctx.Map.Get(res.Res.Returnval).(*simulator.Task); ok {
			go func() {
				t.Wait()
				placementMu.Lock()
				delete(pendingPowerOn, vm.Self)
				placementMu.Unlock()
			}()
			return body
		}
	}
	delete(pendingPowerOn, vm.Self)
	return body
}

// minMultiVgpuHardware: several vGPUs on one VM need VM hardware version 15 (ESXi 6.7 U2 compatibility) or
// later (NVIDIA vGPU user guide, VMware vSphere, multiple vGPUs per VM; vSphere 6.7 U3 introduced them).
const minMultiVgpuHardware = 15

// reconfiguredVM serves ReconfigVM_Task: a spec that leaves the VM with several vGPUs on an older hardware
// version fails with DeviceUnsupportedForVmVersion, as the device's minimum version is checked by vCenter.
type reconfiguredVM struct {
	*simulator.VirtualMachine
}

func (v *reconfiguredVM) ReconfigVMTask(ctx *simulator.Context, req *types.ReconfigVM_Task) soap.HasFault {
	vm := v.VirtualMachine
	unhook(ctx, vm.Self)
	count := len(vmProfiles(vm))
	for _, change := range req.Spec.DeviceChange {
		c := change.GetVirtualDeviceConfigSpec()
		p, ok := c.Device.(*types.VirtualPCIPassthrough)
		if !ok {
			continue
		}
		if _, vgpu := p.Backing.(*types.VirtualPCIPassthroughVmiopBackingInfo); !vgpu {
			continue
		}
		switch c.Operation {
		case types.VirtualDeviceConfigSpecOperationAdd:
			count++
		case types.VirtualDeviceConfigSpecOperationRemove:
			count--
		}
	}
	var have int
	fmt.Sscanf(vm.Config.Version, "vmx-%d", &have)
	if count > 1 && have > 0 && have < minMultiVgpuHardware {
		fault := &types.DeviceUnsupportedForVmVersion{CurrentVersion: vm.Config.Version,
			ExpectedVersion: fmt.Sprintf("vmx-%d", minMultiVgpuHardware)}
		return &methods.ReconfigVM_TaskBody{Res: &types.ReconfigVM_TaskResponse{Returnval: failedTask(ctx, vm, "reconfigVm", fault,
			fmt.Sprintf("%s: %d vGPUs need virtual hardware vmx-%d or later, the VM has %s", vm.Name, count,
				minMultiVgpuHardware, vm.Config.Version))}}
	}
	return vm.ReconfigVMTask(ctx, req)
}

// upgradableVM serves UpgradeVM_Task: vcsim's own reads the compute resource's EnvironmentBrowser as its
// *simulator.EnvironmentBrowser, which vgpu.go wraps. The rules (vSphere API, VirtualMachine.UpgradeVM_Task):
// the VM must be powered off (InvalidPowerState); "If [version is] not specified, upgrade to the most current
// virtual hardware supported on the host"; a VM already at that version fails with AlreadyUpgraded.
type upgradableVM struct {
	*simulator.VirtualMachine
}

func (v *upgradableVM) UpgradeVMTask(ctx *simulator.Context, req *types.UpgradeVM_Task) soap.HasFault {
	vm := v.VirtualMachine
	unhook(ctx, vm.Self)
	host := ctx.Map.Get(*vm.Runtime.Host).(*simulator.HostSystem)
	target := req.Version
	if target == "" {
		target = defaultHardwareVersion(&host.HostSystem)
	}
	var have, want int
	fmt.Sscanf(vm.Config.Version, "vmx-%d", &have)
	fmt.Sscanf(target, "vmx-%d", &want)
	var fault types.BaseMethodFault
	msg := ""
	switch {
	case vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOff:
		fault = &types.InvalidPowerState{RequestedState: types.VirtualMachinePowerStatePoweredOff, ExistingState: vm.Runtime.PowerState}
		msg = fmt.Sprintf("%s must be powered off to upgrade its hardware", vm.Name)
	case want == 0:
		fault, msg = &types.InvalidArgument{InvalidProperty: "version"}, fmt.Sprintf("version %q is not vmx-NN", target)
	case have >= want:
		fault, msg = &types.AlreadyUpgraded{}, fmt.Sprintf("%s already has %s", vm.Name, vm.Config.Version)
	}
	if fault != nil {
		return &methods.UpgradeVM_TaskBody{Res: &types.UpgradeVM_TaskResponse{Returnval: failedTask(ctx, vm, "upgradeVm", fault, msg)}}
	}
	task := simulator.CreateTask(vm, "upgradeVm", func(*simulator.Task) (types.AnyType, types.BaseMethodFault) {
		ctx.Map.Update(ctx, vm, []types.PropertyChange{{Name: "config.version", Val: target}})
		return nil, nil
	})
	return &methods.UpgradeVM_TaskBody{Res: &types.UpgradeVM_TaskResponse{Returnval: task.Run(ctx)}}
}

func installPlacement() {
	vmHook("UpgradeVM_Task", func(vm *simulator.VirtualMachine) mo.Reference { return &upgradableVM{vm} })
	vmHook("PowerOnVM_Task", func(vm *simulator.VirtualMachine) mo.Reference { return &placedVM{vm} })
	vmHook("ReconfigVM_Task", func(vm *simulator.VirtualMachine) mo.Reference { return &reconfiguredVM{vm} })
}

// ---- vGPU profile and device facts (API 7.0.3.0+) ---------------------------------------------------------

// profileInfo is VirtualMachineVgpuProfileInfo for a profile; stunTimeEstimates from API 8.0.2.0. The
// estimates are ours (frame buffer over the vMotion link), not VMware's model.
// deviceVendorId "concatenates the 16-bit PCI vendor id in lower bits followed by 16-bit PCI device id"
// (VirtualMachineVgpuProfileInfo): the device of the host's GPU model that offers the profile.
func profileInfo(p string, device int16, withStun bool) types.VirtualMachineVgpuProfileInfo {
	f, _ := factsOf(p)
	info := types.VirtualMachineVgpuProfileInfo{
		VirtualMachineTargetInfo: types.VirtualMachineTargetInfo{Name: p},
		ProfileName:              p, DeviceVendorId: 0x10de | int64(uint16(device))<<16, FbSizeInGib: f.fbGiB,
		ProfileSharing: f.sharing, ProfileClass: f.class,
	}
	if withStun {
		for _, gbps := range []int64{10, 25, 100} {
			info.StunTimeEstimates = append(info.StunTimeEstimates, types.VirtualMachineVMotionStunTimeInfo{
				MigrationBW: gbps, StunTime: (f.fbGiB*8 + gbps - 1) / gbps})
		}
	}
	return info
}

func apiAtLeast(version string, want [3]int) bool {
	var a, b, c int
	fmt.Sscanf(version, "%d.%d.%d", &a, &b, &c)
	have := [3]int{a, b, c}
	for i := range want {
		if have[i] != want[i] {
			return have[i] > want[i]
		}
	}
	return true
}

// before703 is the fault of a 7.0.3.0 method on an older host (the method does not exist there), else nil.
func (m *graphicsManager) before703(method string) *soap.Fault {
	if apiAtLeast(m.host.Config.Product.Version, [3]int{7, 0, 3}) {
		return nil
	}
	return simulator.Fault(method+" needs ESXi 7.0.3", &types.MethodNotFound{Receiver: m.Self, Method: method})
}

// RetrieveVgpuProfileInfo (HostGraphicsManager, vSphere API 7.0.3.0): the host's vGPU profiles.
func (m *graphicsManager) RetrieveVgpuProfileInfo(ctx *simulator.Context, req *types.RetrieveVgpuProfileInfo) soap.HasFault {
	body := &methods.RetrieveVgpuProfileInfoBody{}
	if body.Fault_ = m.before703("RetrieveVgpuProfileInfo"); body.Fault_ != nil {
		return body
	}
	var out []types.VirtualMachineVgpuProfileInfo
	g := gpuHostsByMoid[m.host.Self.Value]
	for _, p := range m.host.Config.SharedPassthruGpuTypes {
		var device int16
		for _, d := range gpuDefs(g) {
			if allowedOn([]string{p}, gpuDef{model: d.model, mig: false})[p] || allowedOn([]string{p}, gpuDef{model: d.model, mig: true})[p] {
				device = d.model.DeviceID
				break
			}
		}
		out = append(out, profileInfo(p, device, apiAtLeast(m.host.Config.Product.Version, [3]int{8, 0, 2})))
	}
	body.Res = &types.RetrieveVgpuProfileInfoResponse{Returnval: out}
	return body
}

func gpuDefs(g *gpuHost) []gpuDef {
	if g == nil {
		return nil
	}
	return g.gpus
}

// RetrieveVgpuDeviceInfo (HostGraphicsManager, vSphere API 7.0.3.0): the host's vGPU-capable devices.
func (m *graphicsManager) RetrieveVgpuDeviceInfo(ctx *simulator.Context, req *types.RetrieveVgpuDeviceInfo) soap.HasFault {
	body := &methods.RetrieveVgpuDeviceInfoBody{}
	if body.Fault_ = m.before703("RetrieveVgpuDeviceInfo"); body.Fault_ != nil {
		return body
	}
	var out []types.VirtualMachineVgpuDeviceInfo
	seen := map[string]bool{}
	if g := gpuHostsByMoid[m.host.Self.Value]; g != nil {
		for _, d := range g.gpus {
			if seen[d.model.Name] {
				continue
			}
			seen[d.model.Name] = true
			info := types.VirtualMachineVgpuDeviceInfo{
				VirtualMachineTargetInfo: types.VirtualMachineTargetInfo{Name: d.model.Name},
				DeviceName:               d.model.Name, DeviceVendorId: 0x10de | int64(uint16(d.model.DeviceID))<<16,
				MaxFbSizeInGib: d.model.MemKB >> 20, TimeSlicedCapable: true,
			}
			for _, p := range d.model.Profiles {
				f, _ := factsOf(p)
				info.MigCapable = info.MigCapable || f.slices > 0
				info.ComputeProfileCapable = info.ComputeProfileCapable || f.class == "compute"
				info.QuadroProfileCapable = info.QuadroProfileCapable || f.class == "quadro"
			}
			out = append(out, info)
		}
	}
	body.Res = &types.RetrieveVgpuDeviceInfoResponse{Returnval: out}
	return body
}
