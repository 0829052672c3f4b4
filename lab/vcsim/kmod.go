package main

// HostKernelModuleSystem per host, and RebootHost_Task, which vcsim v0.52.0 lacks: the host's
// configManager.kernelModuleSystem points at an unregistered "kernelModuleSystem" object
// (simulator/esx/host_system.go), and HostSystem has no RebootHost method (simulator/host_system.go).
//
// What the API reference says, and what this follows (vSphere Web Services API, HostKernelModuleSystem and
// KernelModuleInfo; pyVmomi _typeinfo_vim.py vim.host.KernelModuleSystem):
//   - QueryConfiguredModuleOptionString(name): "the options configured to be passed to the kernel module when
//     loaded. Note that this is not necessarily the option string currently in use"; NotFound "if the kernel
//     module does not exist on the host". Privilege Host.Config.Settings.
//   - UpdateModuleOptionString(name, options): "the options to be passed to the kernel module when loaded";
//     NotFound likewise; Host.Config.Settings.
//   - QueryModules(): KernelModuleInfo[]; its optionString is again the *configured* string ("not necessarily
//     the option string currently in use"). The API has no field for the string a module was loaded with.
//   - RebootHost_Task(force): without force the host must be in maintenance mode (InvalidState otherwise).
// So the option a running module uses is not readable through the API (on the host it shows in nvidia-smi and
// the vmkernel log). The stand-in keeps it internally ("loaded") and applies the configured string at a reboot.
//
// summary.rebootRequired (HostListSummary: "Indicates whether or not the host requires a reboot due to a
// configuration change") is set after an option change when -module-reboot-flag=set (default). Whether ESXi
// raises it for a module option is not documented, so -module-reboot-flag=none models a host that does not;
// clients must not depend on it.

import (
	"fmt"
	"sort"
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// moduleRebootFlag is -module-reboot-flag: "set" raises summary.rebootRequired after an option change, "none" does not.
var moduleRebootFlag = "set"

// baseModules every host lists (names as `esxcli system module list` shows them on ESXi 8).
var baseModules = []string{"vmkernel", "nvme_pcie", "vmw_ahci", "ixgben"}

type kernelModule struct {
	id         int32
	name       string
	version    string
	configured string // UpdateModuleOptionString; what the next load gets
	loaded     string // what the module runs with since the last (simulated) boot
}

// kernelModuleSystem is one host's HostKernelModuleSystem.
type kernelModuleSystem struct {
	mo.HostKernelModuleSystem
	host    *simulator.HostSystem
	modules map[string]*kernelModule
}

// kmodSystems by host moid, for RebootHost_Task.
var kmodSystems = map[string]*kernelModuleSystem{}

// registerKernelModules gives host h its own kernel module system: the base modules, plus "nvidia" (the
// module NVIDIA's vGPU user guide configures with `esxcli system module parameters set -m nvidia`) when the
// host has an NVIDIA driver VIB. options are the fixture's module_options (configured and loaded at start).
func registerKernelModules(h *simulator.HostSystem, driverVersion string, options map[string]string) error {
	ks := &kernelModuleSystem{host: h, modules: map[string]*kernelModule{}}
	ks.Self = types.ManagedObjectReference{Type: "HostKernelModuleSystem", Value: "kernelModuleSystem-" + h.Self.Value}
	version := fmt.Sprintf("Version %s, Build: %s", h.Config.Product.Version, h.Config.Product.Build)
	for i, name := range baseModules {
		ks.modules[name] = &kernelModule{id: int32(i + 1), name: name, version: version}
	}
	if driverVersion != "" {
		ks.modules["nvidia"] = &kernelModule{id: int32(len(baseModules) + 1), name: "nvidia", version: "Version " + driverVersion}
	}
	for _, name := range sortedKeys(options) {
		m := ks.modules[name]
		if m == nil {
			return fmt.Errorf("host %s: module_options names module %q, which the host does not have (it has %s)",
				h.Name, name, ks.names())
		}
		m.configured, m.loaded = options[name], options[name]
	}
	registry.Put(ks)
	ref := ks.Self
	h.ConfigManager.KernelModuleSystem = &ref
	kmodSystems[h.Self.Value] = ks
	return nil
}

func (ks *kernelModuleSystem) names() string {
	var names []string
	for n := range ks.modules {
		names = append(names, n)
	}
	sort.Strings(names)
	return fmt.Sprint(names)
}

func (ks *kernelModuleSystem) notFound(name string) *soap.Fault {
	return simulator.Fault(fmt.Sprintf("%s: kernel module %q does not exist on the host", ks.host.Name, name), &types.NotFound{})
}

// QueryModules lists the host's modules; optionString is the configured string (KernelModuleInfo.optionString).
func (ks *kernelModuleSystem) QueryModules(ctx *simulator.Context, req *types.QueryModules) soap.HasFault {
	if fault := noPermission(ctx, ks.host, "Host.Config.Settings"); fault != nil {
		return &methods.QueryModulesBody{Fault_: fault}
	}
	var out []types.KernelModuleInfo
	for _, m := range ks.modules {
		out = append(out, types.KernelModuleInfo{
			Id: m.id, Name: m.name, Version: m.version, Filename: m.name, OptionString: m.configured,
			Loaded: true, Enabled: true, UseCount: 1,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return &methods.QueryModulesBody{Res: &types.QueryModulesResponse{Returnval: out}}
}

func (ks *kernelModuleSystem) QueryConfiguredModuleOptionString(ctx *simulator.Context, req *types.QueryConfiguredModuleOptionString) soap.HasFault {
	body := &methods.QueryConfiguredModuleOptionStringBody{}
	if fault := noPermission(ctx, ks.host, "Host.Config.Settings"); fault != nil {
		body.Fault_ = fault
		return body
	}
	m := ks.modules[req.Name]
	if m == nil {
		body.Fault_ = ks.notFound(req.Name)
		return body
	}
	body.Res = &types.QueryConfiguredModuleOptionStringResponse{Returnval: m.configured}
	return body
}

// UpdateModuleOptionString replaces the module's configured option string (the whole string, as
// `esxcli system module parameters set` without --append does); the module keeps running with the old one.
func (ks *kernelModuleSystem) UpdateModuleOptionString(ctx *simulator.Context, req *types.UpdateModuleOptionString) soap.HasFault {
	body := &methods.UpdateModuleOptionStringBody{}
	if fault := noPermission(ctx, ks.host, "Host.Config.Settings"); fault != nil {
		body.Fault_ = fault
		return body
	}
	m := ks.modules[req.Name]
	if m == nil {
		body.Fault_ = ks.notFound(req.Name)
		return body
	}
	m.configured = req.Options
	ks.syncRebootRequired(ctx)
	body.Res = &types.UpdateModuleOptionStringResponse{}
	return body
}

// pending: some module's configured string differs from the one it runs with.
func (ks *kernelModuleSystem) pending() bool {
	for _, m := range ks.modules {
		if m.configured != m.loaded {
			return true
		}
	}
	return false
}

func (ks *kernelModuleSystem) syncRebootRequired(ctx *simulator.Context) {
	if moduleRebootFlag != "set" {
		return
	}
	want := ks.pending()
	ctx.Map.WithLock(ctx, ks.host, func() {
		ctx.Map.Update(ctx, ks.host, []types.PropertyChange{{Name: "summary.rebootRequired", Val: want}})
	})
}

// rebootableHost serves RebootHost_Task for a HostSystem; installed through the registry's Handler hook
// (simulator/simulator.go Service.call consults ctx.Map.Handler before dispatching by method name).
type rebootableHost struct {
	*simulator.HostSystem
}

// RebootHostTask: without force the host must be in maintenance mode (InvalidState, as vCenter answers).
// The reboot is immediate here; the kernel modules load their configured options, rebootRequired clears and
// runtime.bootTime moves on (a real host is notResponding for minutes meanwhile).
func (h *rebootableHost) RebootHostTask(ctx *simulator.Context, req *types.RebootHost_Task) soap.HasFault {
	host := h.HostSystem
	unhook(ctx, host.Self)
	task := simulator.CreateTask(host, "rebootHost", func(*simulator.Task) (types.AnyType, types.BaseMethodFault) {
		if !req.Force && !host.Runtime.InMaintenanceMode {
			return nil, &types.InvalidState{}
		}
		if ks := kmodSystems[host.Self.Value]; ks != nil {
			for _, m := range ks.modules {
				m.loaded = m.configured
			}
		}
		now := time.Now()
		// the task holds the host's lock while it runs (simulator/task.go Task.Run)
		ctx.Map.Update(ctx, host, []types.PropertyChange{
			{Name: "summary.rebootRequired", Val: false},
			{Name: "runtime.bootTime", Val: &now},
		})
		return nil, nil
	})
	return &methods.RebootHost_TaskBody{Res: &types.RebootHost_TaskResponse{Returnval: task.Run(ctx)}}
}

// installRebootHandler routes RebootHost_Task on hosts to rebootableHost (hooks.go).
func installRebootHandler() {
	hostHook("RebootHost_Task", func(h *simulator.HostSystem) mo.Reference { return &rebootableHost{h} })
}
