package main

// Maintenance mode as vCenter runs it (vcsim's EnterMaintenanceMode_Task always succeeds at once,
// simulator/host_system.go). The task waits until every powered-on VM has left the host, or "the
// timeout expires, and in the latter case the task contains a Timeout fault" (vSphere Web Services
// API, HostSystem.EnterMaintenanceMode_Task; the fault is vim.fault.Timedout). Who moves the VMs:
//
//   - DRS, in a DRS cluster, for VMs it may migrate on its own: automation level fullyAutomated in
//     force for the VM; manual and partiallyAutomated only recommend migrations
//     (ClusterDrsVmConfigInfo.behavior), and an override with enabled=false excludes the VM from DRS.
//     DRS also needs another connected host outside maintenance mode that can run the VM
//     (NoMaintenanceModeDrsRecommendationForVM: "No other connected host is compatible with this
//     virtual machine", "DRS is disabled on this virtual machine").
//   - vGPU VMs additionally need the DRS cluster advanced option VgpuMMAutomationTimeoutSecs = -1 and
//     the vCenter advanced setting vgpu.hotmigrate.enabled = true; without them DRS does not
//     recommend hosts for them and they are evacuated by hand only (VMware KB 88271, "vGPU Virtual
//     Machine automated migration for Host Maintenance Mode in a DRS Cluster"). The target host must
//     have a GPU that can take the VM's vGPUs (placement.go).
//   - Nobody on a standalone host, or with DRS off: an operator must move or power off the VMs.
// Powered-off VMs stay registered unless evacuatePoweredOffVms is set in a DRS cluster.
//
// The real task blocks for `timeout` seconds before it fails; the stand-in fails at once (tests need
// not wait), with a message that names the VMs left and why.
//
// vcsim keeps only drsConfig.enabled and defaultVmBehavior of a ReconfigureComputeResource_Task
// (simulator/cluster_compute_resource.go ClusterComputeResource.update); the cluster advanced options
// (drsConfig.option) and enableVmBehaviorOverrides are kept here, merged by key as vCenter merges a
// modify=true spec (an option whose value is empty is removed).

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

const (
	vgpuMMOption      = "VgpuMMAutomationTimeoutSecs"
	vgpuHotMigrateKey = "vgpu.hotmigrate.enabled"
)

// drsOption reads a cluster advanced option ("" when unset).
func drsOption(c *simulator.ClusterComputeResource, key string) string {
	cfg, ok := c.ConfigurationEx.(*types.ClusterConfigInfoEx)
	if !ok {
		return ""
	}
	for _, o := range cfg.DrsConfig.Option {
		if v := o.GetOptionValue(); v.Key == key {
			return fmt.Sprint(v.Value)
		}
	}
	return ""
}

// vcenterSetting reads a vCenter advanced setting ("" when unset).
func vcenterSetting(ctx *simulator.Context, key string) string {
	for _, o := range ctx.Map.OptionManager().Setting {
		if v := o.GetOptionValue(); v.Key == key {
			return fmt.Sprint(v.Value)
		}
	}
	return ""
}

// evacuation decides, for every powered-on VM of host h, where DRS moves it, or why it stays.
func evacuation(ctx *simulator.Context, h *simulator.HostSystem) (map[*simulator.VirtualMachine]*simulator.HostSystem, []string) {
	moves := map[*simulator.VirtualMachine]*simulator.HostSystem{}
	var blocked []string
	cluster := clusterOf(ctx, h)
	var vms []*simulator.VirtualMachine
	for _, ref := range h.Vm {
		if vm, ok := ctx.Map.Get(ref).(*simulator.VirtualMachine); ok && vm.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOn {
			vms = append(vms, vm)
		}
	}
	sort.Slice(vms, func(i, j int) bool { return vms[i].Name < vms[j].Name })
	planned := map[types.ManagedObjectReference][][]string{} // vGPU lists already headed to each target
	for _, vm := range vms {
		if cluster == nil {
			blocked = append(blocked, vm.Name+": standalone host, no DRS")
			continue
		}
		enabled, behavior := drsFor(cluster, vm.Self)
		if !enabled {
			blocked = append(blocked, vm.Name+": DRS is disabled for it")
			continue
		}
		if behavior != string(types.DrsBehaviorFullyAutomated) {
			blocked = append(blocked, fmt.Sprintf("%s: DRS automation level %s only recommends migrations", vm.Name, behavior))
			continue
		}
		profiles := vmProfiles(vm)
		if len(profiles) > 0 {
			if v := drsOption(cluster, vgpuMMOption); v != "-1" {
				blocked = append(blocked, fmt.Sprintf("%s: vGPU VM and cluster %s has %s=%q, not -1", vm.Name, cluster.Name, vgpuMMOption, v))
				continue
			}
			if v := vcenterSetting(ctx, vgpuHotMigrateKey); !strings.EqualFold(v, "true") {
				blocked = append(blocked, fmt.Sprintf("%s: vGPU VM and vCenter has %s=%q, not true", vm.Name, vgpuHotMigrateKey, v))
				continue
			}
		}
		var target *simulator.HostSystem
		for _, other := range usableHosts(ctx, cluster) {
			if other.Self == h.Self {
				continue
			}
			if len(profiles) == 0 {
				target = other
				break
			}
			if ok, _ := fitsHost(ctx, other, profiles, vm.Self, planned[other.Self]); ok {
				target = other
				break
			}
		}
		if target == nil {
			blocked = append(blocked, vm.Name+": no other connected host is compatible with it")
			continue
		}
		moves[vm] = target
		if len(profiles) > 0 {
			planned[target.Self] = append(planned[target.Self], profiles)
		}
	}
	return moves, blocked
}

type maintainableHost struct {
	*simulator.HostSystem
}

func (w *maintainableHost) EnterMaintenanceModeTask(ctx *simulator.Context, req *types.EnterMaintenanceMode_Task) soap.HasFault {
	h := w.HostSystem
	unhook(ctx, h.Self)
	if h.Runtime.InMaintenanceMode {
		return h.EnterMaintenanceModeTask(ctx, req)
	}
	placementMu.Lock()
	defer placementMu.Unlock()
	moves, blocked := evacuation(ctx, h)
	if len(blocked) > 0 {
		msg := fmt.Sprintf("Operation timed out: host %s cannot enter maintenance mode, powered-on VMs stay: %s",
			h.Name, strings.Join(blocked, "; "))
		return &methods.EnterMaintenanceMode_TaskBody{Res: &types.EnterMaintenanceMode_TaskResponse{
			Returnval: failedTask(ctx, h, "enterMaintenanceMode", &types.Timedout{}, msg)}}
	}
	for vm, target := range moves {
		moveVM(ctx, vm, target)
	}
	if req.EvacuatePoweredOffVms != nil && *req.EvacuatePoweredOffVms {
		if c := clusterOf(ctx, h); c != nil {
			if enabled, _ := drsFor(c, types.ManagedObjectReference{}); enabled {
				for _, ref := range append([]types.ManagedObjectReference(nil), h.Vm...) {
					vm, ok := ctx.Map.Get(ref).(*simulator.VirtualMachine)
					if !ok || vm.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOn {
						continue
					}
					for _, other := range usableHosts(ctx, c) {
						if other.Self != h.Self {
							moveVM(ctx, vm, other)
							break
						}
					}
				}
			}
		}
	}
	return h.EnterMaintenanceModeTask(ctx, req)
}

type drsCluster struct {
	*simulator.ClusterComputeResource
}

func (w *drsCluster) ReconfigureComputeResourceTask(ctx *simulator.Context, req *types.ReconfigureComputeResource_Task) soap.HasFault {
	c := w.ClusterComputeResource
	unhook(ctx, c.Self)
	if spec, ok := req.Spec.(*types.ClusterConfigSpecEx); ok && spec.DrsConfig != nil {
		ctx.WithLock(c, func() {
			mergeDrsConfig(c, spec.DrsConfig)
		})
	}
	return c.ReconfigureComputeResourceTask(ctx, req)
}

func mergeDrsConfig(c *simulator.ClusterComputeResource, spec *types.ClusterDrsConfigInfo) {
	cfg, ok := c.ConfigurationEx.(*types.ClusterConfigInfoEx)
	if !ok {
		return
	}
	if spec.EnableVmBehaviorOverrides != nil {
		v := *spec.EnableVmBehaviorOverrides
		cfg.DrsConfig.EnableVmBehaviorOverrides = &v
	}
	for _, o := range spec.Option {
		ov := o.GetOptionValue()
		kept := cfg.DrsConfig.Option[:0]
		for _, cur := range cfg.DrsConfig.Option {
			if cur.GetOptionValue().Key != ov.Key {
				kept = append(kept, cur)
			}
		}
		cfg.DrsConfig.Option = kept
		if s := fmt.Sprint(ov.Value); ov.Value != nil && s != "" {
			cfg.DrsConfig.Option = append(cfg.DrsConfig.Option, &types.OptionValue{Key: ov.Key, Value: s})
		}
	}
}

// ClusterSpec is the fixture of one cluster (fixture "clusters").
type ClusterSpec struct {
	DrsEnabled      *bool             `json:"drs_enabled,omitempty"`
	DefaultBehavior string            `json:"default_behavior,omitempty"`
	DrsOptions      map[string]string `json:"drs_options,omitempty"`
	Supervisor      bool              `json:"supervisor,omitempty"` // vSphere with Tanzu enabled (namespaces.go)
}

var drsBehaviors = map[string]bool{"manual": true, "partiallyAutomated": true, "fullyAutomated": true}

// applyClusters gives every cluster vCenter's DRS defaults (a DRS cluster created in the vSphere Client
// reports defaultVmBehavior fullyAutomated) and then the fixture's settings, and sets the vCenter
// advanced settings of the fixture.
func applyClusters(f *Fixture) error {
	known := map[string]*simulator.ClusterComputeResource{}
	for _, e := range registry.All("ClusterComputeResource") {
		c := e.(*simulator.ClusterComputeResource)
		known[c.Name] = c
		if cfg, ok := c.ConfigurationEx.(*types.ClusterConfigInfoEx); ok && cfg.DrsConfig.DefaultVmBehavior == "" {
			cfg.DrsConfig.DefaultVmBehavior = types.DrsBehaviorFullyAutomated
		}
	}
	for _, name := range sortedClusterNames(f.Clusters) {
		spec := f.Clusters[name]
		c := known[name]
		if c == nil {
			return fmt.Errorf("clusters names %q, which is not in the inventory", name)
		}
		cfg := c.ConfigurationEx.(*types.ClusterConfigInfoEx)
		if spec.DrsEnabled != nil {
			v := *spec.DrsEnabled
			cfg.DrsConfig.Enabled = &v
		}
		if spec.DefaultBehavior != "" {
			if !drsBehaviors[spec.DefaultBehavior] {
				return fmt.Errorf("cluster %s: default_behavior %q not one of manual, partiallyAutomated, fullyAutomated", name, spec.DefaultBehavior)
			}
			cfg.DrsConfig.DefaultVmBehavior = types.DrsBehavior(spec.DefaultBehavior)
		}
		var opts []types.BaseOptionValue
		for _, k := range sortedKeys(spec.DrsOptions) {
			opts = append(opts, &types.OptionValue{Key: k, Value: spec.DrsOptions[k]})
		}
		mergeDrsConfig(c, &types.ClusterDrsConfigInfo{Option: opts})
	}
	if len(f.VCenterOptions) > 0 {
		m := registry.OptionManager()
		var changes []types.BaseOptionValue
		for _, k := range sortedKeys(f.VCenterOptions) {
			changes = append(changes, &types.OptionValue{Key: k, Value: f.VCenterOptions[k]})
		}
		m.UpdateOptions(&types.UpdateOptions{ChangedValue: changes})
	}
	return nil
}

func sortedClusterNames(m map[string]ClusterSpec) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func installMaintenance() {
	hostHook("EnterMaintenanceMode_Task", func(h *simulator.HostSystem) mo.Reference { return &maintainableHost{h} })
	clusterHook("ReconfigureComputeResource_Task", func(c *simulator.ClusterComputeResource) mo.Reference { return &drsCluster{c} })
}
