"""Unit tests for the pyvmomi adapter's conversions and TLS policy (no network)."""

from __future__ import annotations

import ssl

import pytest
from pyVmomi import vim, vmodl

from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api as vsphere_api


def test_ssl_context_verifies_by_default_and_with_ca(tmp_path):
    ctx = vsphere_api.ssl_context(True)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    with pytest.raises((FileNotFoundError, ssl.SSLError)):
        vsphere_api.ssl_context(True, str(tmp_path / "missing.pem"))


def test_ssl_context_unverified_only_when_asked():
    ctx = vsphere_api.ssl_context(False)
    assert ctx.verify_mode == ssl.CERT_NONE and not ctx.check_hostname


def vgpu_device(key, profile):
    return vim.vm.device.VirtualPCIPassthrough(
        key=key, backing=vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo(vgpu=profile),
        deviceInfo=vim.Description(label="PCI device %d" % key, summary="x"))


def test_vm_vgpus_picks_only_vmiop_passthrough():
    devices = [
        vim.vm.device.VirtualDisk(key=2000),
        vgpu_device(203, "grid_a100-40c"),
        # DirectPath passthrough of a whole device is not a vGPU.
        vim.vm.device.VirtualPCIPassthrough(key=204, backing=vim.vm.device.VirtualPCIPassthrough.DeviceBackingInfo(id="0000:3b:00.0")),
    ]
    out = vsphere_api.vm_vgpus(devices)
    assert [(d["key"], d["profile"]) for d in out] == [(203, "grid_a100-40c")]
    assert "device" not in vsphere_api.public_vgpu(out[0])


def test_graphics_config_and_devices_to_plain_data():
    cfg = vim.host.GraphicsConfig(hostDefaultGraphicsType="sharedDirect", sharedPassthruAssignmentPolicy="consolidation",
                                  deviceType=[vim.host.GraphicsConfig.DeviceType(deviceId="3b:00.0", graphicsType="shared")])
    assert vsphere_api.graphics_config(cfg) == dict(default_graphics_type="sharedDirect", assignment_policy="consolidation",
                                                    devices={"0000:3b:00.0": "shared"}, vgpu_modes={})
    info = [vim.host.GraphicsInfo(deviceName="NVIDIA A100-PCIE-40GB", vendorName="NVIDIA", pciId="0000:3b:00.0",
                                  graphicsType="sharedDirect", memorySizeInKB=40 << 20)]
    assert vsphere_api.graphics_devices(info)[0]["memory_mb"] == 40960


def test_host_offer_merges_types_and_capabilities():
    row = {"config.sharedPassthruGpuTypes": ["grid_a100-4c"],
           "config.sharedGpuCapabilities": [vim.host.SharedGpuCapabilities(vgpu="grid_a100-40c")]}
    assert vsphere_api.host_offer(row) == ["grid_a100-40c", "grid_a100-4c"]


def test_fault_message_uses_localized_text():
    fault = vmodl.fault.InvalidArgument(msg="bad vgpu", invalidProperty="backing.vgpu")
    assert vsphere_api.fault_message(fault) == "InvalidArgument: bad vgpu"
    assert vsphere_api.fault_message(vim.fault.InvalidPowerState()) == "InvalidPowerState"


def test_call_counter_counts_every_invoke():
    class Stub:
        def InvokeMethod(self, mo, info, args):
            return args

    stub = Stub()
    counter = vsphere_api.CallCounter(stub)
    stub.InvokeMethod(None, type("I", (), {"wsdlName": "RetrievePropertiesEx"})(), (1,))
    stub.InvokeMethod(None, type("I", (), {"wsdlName": "Fetch"})(), (2,))
    assert counter.calls == 2 and counter.by_method == {"RetrievePropertiesEx": 1, "Fetch": 1}


def test_valid_regex():
    assert vsphere_api.valid_regex("^nv") == "^nv"
    with pytest.raises(vsphere_api.VsphereError, match="not a valid regular expression"):
        vsphere_api.valid_regex("(")


# ---- issue 14 point 10: host graphics edited from the fetched configuration ------------------------------------------

def fetched_graphics_config():
    return vim.host.GraphicsConfig(
        hostDefaultGraphicsType="shared", sharedPassthruAssignmentPolicy="performance",
        deviceType=[vim.host.GraphicsConfig.DeviceType(deviceId="0000:3b:00.0", graphicsType="sharedDirect", vgpuMode="mixedSize"),
                    vim.host.GraphicsConfig.DeviceType(deviceId="0000:5e:00.0", graphicsType="shared", vgpuMode="sameSize")])


def test_graphics_config_reports_vgpu_modes():
    assert vsphere_api.graphics_config(fetched_graphics_config())["vgpu_modes"] == {
        "0000:3b:00.0": "mixedSize", "0000:5e:00.0": "sameSize"}


def test_edit_graphics_config_keeps_fields_it_does_not_set():
    cfg = fetched_graphics_config()
    after = dict(default_graphics_type="sharedDirect", assignment_policy="consolidation",
                 devices={"0000:3b:00.0": "sharedDirect", "0000:5e:00.0": "sharedDirect", "0000:86:00.0": "shared"},
                 vgpu_modes={"0000:5e:00.0": "mixedSize"})
    new = vsphere_api.edit_graphics_config(cfg, after)
    assert (new.hostDefaultGraphicsType, new.sharedPassthruAssignmentPolicy) == ("sharedDirect", "consolidation")
    assert [(d.deviceId, d.graphicsType, d.vgpuMode) for d in new.deviceType] == [
        ("0000:3b:00.0", "sharedDirect", "mixedSize"),  # untouched device: its mode is sent back as fetched
        ("0000:5e:00.0", "sharedDirect", "mixedSize"),
        ("0000:86:00.0", "shared", None)]
    assert cfg.deviceType[1].graphicsType == "shared"  # the fetched object is not modified


class FakeSession:
    def __init__(self, api, wire, sensors=()):
        self.content = type("C", (), {"about": type("A", (), {"apiVersion": api})()})()
        self.wire_version = wire
        self.sensors = list(sensors)

    def speaks(self, data_type, field):
        return vsphere_api.Session.speaks(self, data_type, field)

    def collect(self, obj_type, props, container=None, objects=None):
        return [{props[0]: self.sensors}]


@pytest.mark.parametrize("api,host,wire,expect", [
    ("8.0.3.0", "8.0.3", "vim.version.v8_0_3_0", None),
    ("8.0.3.0", "8.0.2", "vim.version.v8_0_3_0", "host esx1 ESXi 8.0.2"),
    ("8.0.2.0", "8.0.2", "vim.version.v8_0_2_0", "vCenter API 8.0.2.0, host esx1 ESXi 8.0.2"),
    ("8.0.3.0", "8.0.3", "vim.version.v8_0_2_0", "pyvmomi session version vim.version.v8_0_2_0"),
])
def test_vgpu_mode_unsupported_names_what_is_too_old(api, host, wire, expect):
    assert vsphere_api.vgpu_mode_unsupported(FakeSession(api, wire), {"name": "esx1", "config.product.version": host}) == expect


# ---- issue 14 point 11: read-only accounts fall back to the health sensors ------------------------------------------

class RefusingImageConfigManager:
    def FetchSoftwarePackages(self):  # pylint: disable=invalid-name
        host = vim.HostSystem("host-18")
        raise vim.fault.NoPermission(
            msg="Permission to perform this operation was denied.", object=host, privilegeId="Host.Config.Image",
            missingPrivileges=[vim.fault.NoPermission.EntityPrivileges(entity=host, privilegeIds=["Host.Config.Image"])])


def test_fetch_software_packages_no_permission_falls_back_with_a_warning():
    sensor = vim.host.NumericSensorInfo(name="NVIDIA NVD-AIE_ESXi_8.0.0_Driver 550.90.05-1OEM.800.1.0.20613240 2024-06-04",
                                        sensorType="Software Components")
    row = {"obj": vim.HostSystem("host-18"), "name": "esx1", "configManager.imageConfigManager": RefusingImageConfigManager()}
    session = FakeSession("8.0.2.0", None, [sensor])
    assert vsphere_api.host_packages(session, row)[1] == "health_sensors"  # a fallback, not a failure
    warnings = []
    drv = vsphere_api.host_driver(session, row, warnings=warnings)
    assert drv == dict(vib="NVD-AIE_ESXi_8.0.0_Driver", vib_version="550.90.05-1OEM.800.1.0.20613240",
                       version="550.90.05", source="health_sensors")
    assert len(warnings) == 1 and "host esx1" in warnings[0] and "privilege Host.Config.Image" in warnings[0]


def test_other_fetch_faults_still_fail():
    class Broken:
        def FetchSoftwarePackages(self):  # pylint: disable=invalid-name
            raise vmodl.fault.SystemError(msg="hostd crashed", reason="x")

    row = {"obj": vim.HostSystem("host-18"), "name": "esx1", "configManager.imageConfigManager": Broken()}
    with pytest.raises(vsphere_api.VsphereError, match="host esx1: FetchSoftwarePackages failed: SystemError"):
        vsphere_api.host_packages(FakeSession("8.0.2.0", None), row)
