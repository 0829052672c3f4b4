# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A vCenter in memory for in-process module tests of the VM and host modules: api.Session with its
PropertyCollector read (collect) answered from an inventory of fake clusters, hosts and VMs, whose tasks and manager
calls (ReconfigVM_Task, PowerOnVM_Task, EnterMaintenanceMode_Task, UpdateGraphicsConfig, RestartService, ...) change
that inventory at once and are recorded in ``calls``. Everything above collect() and the task objects (planning, the
module's write order, the results) is the product's."""

from __future__ import annotations

from types import SimpleNamespace

from pyVmomi import vim

from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api


class Ref:
    """A managed object reference as a property value (only its moid is read), for example a standalone host's parent."""

    def __init__(self, moid):
        self._moId = moid


def task(result=None):
    return SimpleNamespace(info=SimpleNamespace(state=vim.TaskInfo.State.success, result=result, error=None),
                           _moId="task-1")


def vgpu_device(key, profile):
    return vim.vm.device.VirtualPCIPassthrough(
        key=key, backing=vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo(vgpu=profile),
        deviceInfo=vim.Description(label="PCI device %d" % key, summary="NVIDIA vGPU %s" % profile))


class Vm:
    """One VM: its properties, and the methods the modules call on it."""

    def __init__(self, calls, name, host, power="poweredOn", profiles=(), extra=None):
        self.calls, self.name, self._moId, self.host, self.power = calls, name, "vm-" + name, host, power
        self.devices = [vgpu_device(200 + i, p) for i, p in enumerate(profiles)]
        self.extra = dict(extra or {})
        self.locked = False

    def row(self):
        return {"name": self.name, "runtime.host": self.host, "runtime.powerState": self.power,
                "config.hardware.device": list(self.devices), "config.memoryReservationLockedToMax": self.locked,
                "config.extraConfig": [vim.option.OptionValue(key=k, value=v) for k, v in sorted(self.extra.items())],
                "config.firmware": "efi", "config.template": False, "config.version": "vmx-19", "config.managedBy": None,
                "obj": self, "moid": self._moId}

    def ReconfigVM_Task(self, spec):  # pylint: disable=invalid-name
        for change in spec.deviceChange or []:
            if change.operation == "remove":
                self.devices = [d for d in self.devices if d.key != change.device.key]
            else:
                self.devices.append(vgpu_device(300 + len(self.devices), change.device.backing.vgpu))
        for option in spec.extraConfig or []:
            if option.value == "":
                self.extra.pop(option.key, None)  # vSphere removes a key set to an empty value
            else:
                self.extra[option.key] = option.value
        if spec.memoryReservationLockedToMax:
            self.locked = True
        devices = bool(spec.deviceChange)
        self.calls.append(("reconfigure" if devices or not spec.extraConfig else "extraConfig", self.name))
        return task()

    def ShutdownGuest(self):  # pylint: disable=invalid-name
        self.calls.append(("shutdown_guest", self.name))
        self.power = "poweredOff"

    def PowerOffVM_Task(self):  # pylint: disable=invalid-name
        self.calls.append(("power_off", self.name))
        self.power = "poweredOff"
        return task()

    def PowerOnVM_Task(self, host=None):  # pylint: disable=invalid-name
        self.calls.append(("power_on", self.name))
        self.power = "poweredOn"
        return task()


class GraphicsManager:
    def __init__(self, host, calls):
        self.host, self.calls = host, calls

    def UpdateGraphicsConfig(self, config):  # pylint: disable=invalid-name
        self.calls.append(("UpdateGraphicsConfig", self.host.name, config))
        self.host.config = config


class ServiceSystem:
    def __init__(self, host, calls):
        self.host, self.calls = host, calls

    def RestartService(self, id):  # pylint: disable=invalid-name,redefined-builtin
        self.calls.append(("RestartService", self.host.name, id))


class Host:
    """One standalone ESXi host (its parent is no cluster, so DRS plays no part) offering ``offers`` (vGPU types),
    with the NVIDIA GPUs ``gpus`` (PCI addresses) in its graphics info and a default graphics type ``default``."""

    def __init__(self, calls, name, offers=("grid_a100-40c",), gpus=(), default="shared", state="connected", version="8.0.3"):
        self.calls, self.name, self._moId, self.offers = calls, name, "host-" + name, list(offers)
        self.state, self.version, self.maintenance = state, version, False
        self.info = [vim.host.GraphicsInfo(deviceName="NVIDIA A100", vendorName="NVIDIA", pciId=p, graphicsType="shared",
                                           memorySizeInKB=40 << 20, vm=[]) for p in gpus]
        self.config = vim.host.GraphicsConfig(hostDefaultGraphicsType=default, sharedPassthruAssignmentPolicy="performance",
                                              deviceType=[])
        self.configManager = SimpleNamespace(serviceSystem=ServiceSystem(self, calls))
        self.graphics_manager = GraphicsManager(self, calls)

    def row(self, vms):
        return {"name": self.name, "parent": Ref("domain-s-" + self.name), "runtime.connectionState": self.state,
                "runtime.inMaintenanceMode": self.maintenance, "config.sharedPassthruGpuTypes": self.offers,
                "config.sharedGpuCapabilities": [], "config.graphicsInfo": self.info, "config.graphicsConfig": self.config,
                "config.product.version": self.version, "configManager.imageConfigManager": None,
                "configManager.graphicsManager": self.graphics_manager,
                "vm": [v for v in vms if v.host is self], "obj": self, "moid": self._moId}

    def EnterMaintenanceMode_Task(self, timeout, evacuatePoweredOffVms=False):  # pylint: disable=invalid-name
        self.calls.append(("enter_maintenance_mode", self.name))
        self.maintenance = True
        return task()

    def ExitMaintenanceMode_Task(self, timeout):  # pylint: disable=invalid-name
        self.calls.append(("exit_maintenance_mode", self.name))
        self.maintenance = False
        return task()


class FakeSession(api.Session):
    """api.Session without a connection: collect() answers from ``inventory`` ({hosts, vms, clusters: [(name,
    moid)]})."""

    inventory = {}

    def __init__(self, params):  # pylint: disable=super-init-not-called
        self.params, self.warnings = params, []
        settings = SimpleNamespace(QueryOptions=lambda key: [])
        self.content = SimpleNamespace(about=SimpleNamespace(apiVersion="8.0.3.0"), setting=settings)
        self.api_version, self.wire_version = (8, 0), "vim.version.v8_0_3_0"

    def close(self):
        pass

    def collect(self, obj_type, props, container=None, objects=None):
        inv = self.inventory
        if objects is not None and not objects:
            return []
        wanted = None if objects is None else {o._moId for o in objects}
        if obj_type is vim.VirtualMachine:
            rows = [vm.row() for vm in inv["vms"]]
        elif obj_type is vim.HostSystem:
            rows = [h.row(inv["vms"]) for h in inv["hosts"]]
        elif obj_type is vim.ClusterComputeResource:
            rows = [{"name": name, "obj": Ref(moid), "moid": moid} for name, moid in inv.get("clusters", ())]
        else:
            rows = []
        return [{k: v for k, v in r.items() if k in props or k in ("obj", "moid")} for r in rows
                if wanted is None or r["moid"] in wanted]


def use_fake_vcenter(monkeypatch, hosts, vms, clusters=()):
    """Install FakeSession over ``hosts``, ``vms`` and ``clusters`` ((name, moid) pairs); return the inventory."""
    inventory = {"hosts": list(hosts), "vms": list(vms), "clusters": list(clusters)}
    monkeypatch.setattr(FakeSession, "inventory", inventory)
    monkeypatch.setattr(api, "Session", FakeSession)
    return inventory


AUTH = dict(hostname="vc.example.com", username="administrator@vsphere.local", password="s3cret-Pa55word")
