package main

// vGPU devices on VMs. vcsim already stores a VirtualPCIPassthrough with a
// VmiopBackingInfo and keeps backing.vgpu across add/edit/remove; it only names the device
// generically ("pcipassthrough-<key>"). This handler gives it the label and summary
// vCenter shows, so modules reading deviceInfo see realistic values.

import (
	"fmt"
	"sort"
	"strings"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

type vgpuLabeler struct{}

func (vgpuLabeler) Reference() types.ManagedObjectReference {
	return types.ManagedObjectReference{Type: "GpuopsVgpuLabeler", Value: "vgpu-labeler"}
}

func (vgpuLabeler) PutObject(*simulator.Context, mo.Reference)                    {}
func (vgpuLabeler) RemoveObject(*simulator.Context, types.ManagedObjectReference) {}
func (l vgpuLabeler) UpdateObject(_ *simulator.Context, obj mo.Reference, changes []types.PropertyChange) {
	vm, ok := obj.(*mo.VirtualMachine)
	if !ok || vm.Config == nil {
		return
	}
	for _, c := range changes {
		if c.Name == "config.hardware.device" {
			labelVgpus(vm.Config.Hardware.Device)
			attachToPCIController(vm.Config.Hardware.Device)
			return
		}
	}
}

// labelVgpus numbers PCI passthrough devices "PCI device N" in key order, as vCenter does,
// and describes vGPU ones as "NVIDIA GRID vGPU <profile>".
func labelVgpus(devices []types.BaseVirtualDevice) {
	var pci []*types.VirtualPCIPassthrough
	for _, d := range devices {
		if p, ok := d.(*types.VirtualPCIPassthrough); ok {
			pci = append(pci, p)
		}
	}
	sort.Slice(pci, func(i, j int) bool { return pci[i].Key < pci[j].Key })
	for n, p := range pci {
		label := fmt.Sprintf("PCI device %d", n)
		if p.DeviceInfo == nil {
			p.DeviceInfo = &types.Description{}
		}
		info := p.DeviceInfo.GetDescription()
		if info.Label == "" || strings.HasPrefix(info.Label, "pcipassthrough-") || strings.HasPrefix(info.Label, "PCI device ") {
			info.Label = label
		}
		if b, ok := p.Backing.(*types.VirtualPCIPassthroughVmiopBackingInfo); ok {
			info.Summary = "NVIDIA GRID vGPU " + b.Vgpu
		}
	}
}

// attachToPCIController puts vGPU devices on the VM's PCI controller with a unit number, as
// vCenter reports them (vcsim leaves controllerKey 0 and no unit for passthrough devices).
func attachToPCIController(devices []types.BaseVirtualDevice) {
	var pci *types.VirtualPCIController
	for _, d := range devices {
		if c, ok := d.(*types.VirtualPCIController); ok {
			pci = c
		}
	}
	if pci == nil {
		return
	}
	// vcsim does not drop removed devices from the controller's list; keep it consistent
	present := map[int32]bool{}
	for _, d := range devices {
		present[d.GetVirtualDevice().Key] = true
	}
	keep := pci.Device[:0]
	for _, k := range pci.Device {
		if present[k] {
			keep = append(keep, k)
		}
	}
	pci.Device = keep
	used := map[int32]bool{}
	for _, d := range devices {
		v := d.GetVirtualDevice()
		if v.ControllerKey == pci.Key && v.UnitNumber != nil {
			used[*v.UnitNumber] = true
		}
	}
	for _, d := range devices {
		p, ok := d.(*types.VirtualPCIPassthrough)
		if !ok || p.ControllerKey != 0 {
			continue
		}
		unit := int32(18) // first unit vCenter gives PCI passthrough devices
		for used[unit] {
			unit++
		}
		used[unit] = true
		p.ControllerKey = pci.Key
		p.UnitNumber = &unit
		found := false
		for _, k := range pci.Device {
			found = found || k == p.Key
		}
		if !found {
			pci.Device = append(pci.Device, p.Key)
		}
	}
}

func registerVgpuLabeler() {
	registry.AddHandler(vgpuLabeler{})
}

// gpuEnvironmentBrowser adds the vGPU profiles of the hosts to QueryConfigTarget's
// sharedGpuPassthroughTypes (vcsim returns only datastores and networks there).
type gpuEnvironmentBrowser struct {
	*simulator.EnvironmentBrowser
}

func (b *gpuEnvironmentBrowser) QueryConfigTarget(ctx *simulator.Context, req *types.QueryConfigTarget) soap.HasFault {
	res := b.EnvironmentBrowser.QueryConfigTarget(ctx, req)
	body, ok := res.(*methods.QueryConfigTargetBody)
	if !ok || body.Res == nil || body.Res.Returnval == nil {
		return res
	}
	hosts := b.hostRefs()
	if req.Host != nil {
		hosts = []types.ManagedObjectReference{*req.Host}
	}
	seen := map[string]bool{}
	for _, ref := range hosts {
		h, ok := ctx.Map.Get(ref).(*simulator.HostSystem)
		if !ok || h.Config == nil {
			continue
		}
		for _, p := range h.Config.SharedPassthruGpuTypes {
			if !seen[p] {
				seen[p] = true
				body.Res.Returnval.SharedGpuPassthroughTypes = append(body.Res.Returnval.SharedGpuPassthroughTypes,
					types.VirtualMachinePciSharedGpuPassthroughInfo{VirtualMachineTargetInfo: types.VirtualMachineTargetInfo{Name: p}, Vgpu: p})
			}
		}
	}
	return body
}

// hostRefs: the hosts of the compute resource or cluster this browser belongs to.
func (b *gpuEnvironmentBrowser) hostRefs() []types.ManagedObjectReference {
	for _, kind := range []string{"ClusterComputeResource", "ComputeResource"} {
		for _, e := range registry.All(kind) {
			switch cr := e.(type) {
			case *simulator.ClusterComputeResource:
				if cr.EnvironmentBrowser != nil && *cr.EnvironmentBrowser == b.Self {
					return cr.Host
				}
			case *mo.ComputeResource:
				if cr.EnvironmentBrowser != nil && *cr.EnvironmentBrowser == b.Self {
					return cr.Host
				}
			}
		}
	}
	return nil
}

// wrapEnvironmentBrowsers replaces every compute resource's browser in the registry (same moref).
func wrapEnvironmentBrowsers() {
	for _, kind := range []string{"ClusterComputeResource", "ComputeResource"} {
		for _, e := range registry.All(kind) {
			var ref *types.ManagedObjectReference
			switch cr := e.(type) {
			case *simulator.ClusterComputeResource:
				ref = cr.EnvironmentBrowser
			case *mo.ComputeResource:
				ref = cr.EnvironmentBrowser
			}
			if ref == nil {
				continue
			}
			if eb, ok := registry.Get(*ref).(*simulator.EnvironmentBrowser); ok {
				registry.Put(&gpuEnvironmentBrowser{eb})
			}
		}
	}
}
