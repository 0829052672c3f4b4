package main

// HostServiceSystem per host (host.configManager.serviceSystem): vcsim v0.52.0 only references an
// unregistered "serviceSystem" (simulator/esx/host_system.go), so RestartService answered
// ManagedObjectNotFound. Its serviceInfo is the host's config.service list (the esx template's: xorg,
// ntpd, TSM-SSH, ...).
//
// Xorg (VMware KB 318047, "Xorg service is no longer required for NVIDIA vGPU"): "As of vSphere 7.0
// Update 1, Xorg is no longer required for graphics devices in vGPU mode and may not start when using
// them ... Xorg is still required and must be able to start if the graphics device will be used in
// shared mode vSGA." So on ESXi 7.0.1 and later a start or restart of xorg fails while no graphics device
// of the host is in shared (vSGA) mode; -xorg-without-vsga start models a host where it still starts
// ("may not start": the KB does not say it always fails).

import (
	"fmt"
	"sync"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// xorgWithoutVsga is -xorg-without-vsga: "fail" (default) or "start".
var xorgWithoutVsga = "fail"

type serviceSystem struct {
	mo.HostServiceSystem
	host *simulator.HostSystem
	mu   sync.Mutex
}

func registerServiceSystem(h *simulator.HostSystem) {
	s := &serviceSystem{host: h}
	s.Self = types.ManagedObjectReference{Type: "HostServiceSystem", Value: "serviceSystem-" + h.Self.Value}
	if h.Config.Service != nil {
		s.ServiceInfo.Service = append([]types.HostService(nil), h.Config.Service.Service...)
	}
	registry.Put(s)
	ref := s.Self
	h.ConfigManager.ServiceSystem = &ref
}

func (s *serviceSystem) notFound(id string) *soap.Fault {
	return simulator.Fault(fmt.Sprintf("%s: service %q not found", s.host.Name, id), &types.NotFound{})
}

// vsgaActive: a graphics device of the host is in shared (vSGA) mode.
func (s *serviceSystem) vsgaActive() bool {
	for _, g := range s.host.Config.GraphicsInfo {
		if g.GraphicsType == "shared" {
			return true
		}
	}
	return false
}

// start runs service id, or says why it does not start.
func (s *serviceSystem) start(id string) *soap.Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.ServiceInfo.Service {
		svc := &s.ServiceInfo.Service[i]
		if svc.Key != id {
			continue
		}
		if id == "xorg" && xorgWithoutVsga == "fail" && apiAtLeast(s.host.Config.Product.Version, [3]int{7, 0, 1}) && !s.vsgaActive() {
			svc.Running = false
			return simulator.Fault(fmt.Sprintf("%s: Failed to start service xorg: no graphics device in shared (vSGA) mode", s.host.Name),
				&types.HostConfigFault{})
		}
		svc.Running = true
		return nil
	}
	return s.notFound(id)
}

// startFault is what RestartService and StartService answer: a fault, or nil when the service runs.
func (s *serviceSystem) startFault(ctx *simulator.Context, id string) *soap.Fault {
	if fault := noPermission(ctx, s.host, "Host.Config.NetService"); fault != nil {
		return fault
	}
	return s.start(id)
}

func (s *serviceSystem) RestartService(ctx *simulator.Context, req *types.RestartService) soap.HasFault {
	if fault := s.startFault(ctx, req.Id); fault != nil {
		return &methods.RestartServiceBody{Fault_: fault}
	}
	return &methods.RestartServiceBody{Res: &types.RestartServiceResponse{}}
}

func (s *serviceSystem) StartService(ctx *simulator.Context, req *types.StartService) soap.HasFault {
	if fault := s.startFault(ctx, req.Id); fault != nil {
		return &methods.StartServiceBody{Fault_: fault}
	}
	return &methods.StartServiceBody{Res: &types.StartServiceResponse{}}
}

func (s *serviceSystem) StopService(ctx *simulator.Context, req *types.StopService) soap.HasFault {
	body := &methods.StopServiceBody{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.ServiceInfo.Service {
		if s.ServiceInfo.Service[i].Key == req.Id {
			s.ServiceInfo.Service[i].Running = false
			body.Res = &types.StopServiceResponse{}
			return body
		}
	}
	body.Fault_ = s.notFound(req.Id)
	return body
}

func (s *serviceSystem) RefreshServices(ctx *simulator.Context, req *types.RefreshServices) soap.HasFault {
	return &methods.RefreshServicesBody{Res: &types.RefreshServicesResponse{}}
}
