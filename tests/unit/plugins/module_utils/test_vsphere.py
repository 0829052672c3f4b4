"""Unit tests for the pyvmomi adapter's conversions and TLS policy (no network)."""

from __future__ import annotations

import ssl

import pytest
from pyVmomi import vim, vmodl

from ansible_collections.gpuops.provision.plugins.module_utils import _vsphere


def test_ssl_context_verifies_by_default_and_with_ca(tmp_path):
    ctx = _vsphere.ssl_context(True)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    with pytest.raises((FileNotFoundError, ssl.SSLError)):
        _vsphere.ssl_context(True, str(tmp_path / "missing.pem"))


def test_ssl_context_unverified_only_when_asked():
    ctx = _vsphere.ssl_context(False)
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
    out = _vsphere.vm_vgpus(devices)
    assert [(d["key"], d["profile"]) for d in out] == [(203, "grid_a100-40c")]
    assert "device" not in _vsphere.public_vgpu(out[0])


def test_graphics_config_and_devices_to_plain_data():
    cfg = vim.host.GraphicsConfig(hostDefaultGraphicsType="sharedDirect", sharedPassthruAssignmentPolicy="consolidation",
                                  deviceType=[vim.host.GraphicsConfig.DeviceType(deviceId="3b:00.0", graphicsType="shared")])
    assert _vsphere.graphics_config(cfg) == dict(default_graphics_type="sharedDirect", assignment_policy="consolidation",
                                                 devices={"0000:3b:00.0": "shared"})
    info = [vim.host.GraphicsInfo(deviceName="NVIDIA A100-PCIE-40GB", vendorName="NVIDIA", pciId="0000:3b:00.0",
                                  graphicsType="sharedDirect", memorySizeInKB=40 << 20)]
    assert _vsphere.graphics_devices(info)[0]["memory_mb"] == 40960


def test_host_offer_merges_types_and_capabilities():
    row = {"config.sharedPassthruGpuTypes": ["grid_a100-4c"],
           "config.sharedGpuCapabilities": [vim.host.SharedGpuCapabilities(vgpu="grid_a100-40c")]}
    assert _vsphere.host_offer(row) == ["grid_a100-40c", "grid_a100-4c"]
    assert _vsphere.is_gpu_host(row)
    assert not _vsphere.is_gpu_host({})


def test_fault_message_uses_localized_text():
    fault = vmodl.fault.InvalidArgument(msg="bad vgpu", invalidProperty="backing.vgpu")
    assert _vsphere.fault_message(fault) == "InvalidArgument: bad vgpu"
    assert _vsphere.fault_message(vim.fault.InvalidPowerState()) == "InvalidPowerState"


def test_call_counter_counts_every_invoke():
    class Stub:
        def InvokeMethod(self, mo, info, args):
            return args

    stub = Stub()
    counter = _vsphere.CallCounter(stub)
    stub.InvokeMethod(None, type("I", (), {"wsdlName": "RetrievePropertiesEx"})(), (1,))
    stub.InvokeMethod(None, type("I", (), {"wsdlName": "Fetch"})(), (2,))
    assert counter.calls == 2 and counter.by_method == {"RetrievePropertiesEx": 1, "Fetch": 1}


def test_valid_regex():
    assert _vsphere.valid_regex("^nv") == "^nv"
    with pytest.raises(_vsphere.VsphereError, match="not a valid regular expression"):
        _vsphere.valid_regex("(")
