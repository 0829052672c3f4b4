package main

// Method hooks: a few vSphere methods get our behaviour (RebootHost_Task, EnterMaintenanceMode_Task,
// PowerOnVM_Task, ReconfigureComputeResource_Task, ...) while the simulator's own objects stay in the
// registry. govmomi's Service.call asks ctx.Map.Handler for a stand-in object before it dispatches a
// method by name (simulator/simulator.go Service.call); the hook answers with a wrapper that embeds
// the simulator object and defines the one method. Service.call then prefers the session's registry,
// so the wrapper is put there for that one call, and the wrapper's method takes it out (unhook).

import (
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

type hookKey struct{ kind, method string }

var hooks = map[hookKey]func(obj mo.Reference) mo.Reference{}

// addHook routes method calls on objects of kind to the wrapper wrap returns (nil: the simulator's own).
func addHook(kind, method string, wrap func(obj mo.Reference) mo.Reference) {
	hooks[hookKey{kind, method}] = wrap
}

// unhook takes a wrapper out of the session registry again (see the file comment).
func unhook(ctx *simulator.Context, ref types.ManagedObjectReference) {
	if ctx.Session != nil {
		ctx.Session.Remove(ctx, ref)
	}
}

func installHooks() {
	previous := registry.Handler
	registry.Handler = func(ctx *simulator.Context, m *simulator.Method) (mo.Reference, types.BaseMethodFault) {
		if wrap := hooks[hookKey{m.This.Type, m.Name}]; wrap != nil {
			if obj := ctx.Map.Get(m.This); obj != nil {
				if w := wrap(obj); w != nil {
					if ctx.Session != nil {
						ctx.Session.Put(w)
					}
					return w, nil
				}
			}
		}
		if previous != nil {
			return previous(ctx, m)
		}
		return nil, nil
	}
}

// vmHook, hostHook, clusterHook: addHook for one kind of simulator object.
func vmHook(method string, wrap func(*simulator.VirtualMachine) mo.Reference) {
	addHook("VirtualMachine", method, func(obj mo.Reference) mo.Reference {
		if vm, ok := obj.(*simulator.VirtualMachine); ok {
			return wrap(vm)
		}
		return nil
	})
}

func hostHook(method string, wrap func(*simulator.HostSystem) mo.Reference) {
	addHook("HostSystem", method, func(obj mo.Reference) mo.Reference {
		if h, ok := obj.(*simulator.HostSystem); ok {
			return wrap(h)
		}
		return nil
	})
}

func clusterHook(method string, wrap func(*simulator.ClusterComputeResource) mo.Reference) {
	addHook("ClusterComputeResource", method, func(obj mo.Reference) mo.Reference {
		if c, ok := obj.(*simulator.ClusterComputeResource); ok {
			return wrap(c)
		}
		return nil
	})
}
