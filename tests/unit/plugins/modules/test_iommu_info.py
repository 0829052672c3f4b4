"""iommu_info against fake sysfs trees laid out as the kernel does (lab/sysfs/fake_tree.py)."""

from __future__ import annotations

import os
import sys

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._gpu import iommu, sysfs
from ansible_collections.gpuops.provision.plugins.modules import iommu_info

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "lab", "sysfs"))
import fake_tree  # noqa: E402  pylint: disable=wrong-import-position

A100 = {"vendor": "0x10de", "device": "0x20b0", "class": "0x030200", "subsystem_vendor": "0x10de", "subsystem_device": "0x134f"}
A100_AUDIO = {"vendor": "0x10de", "device": "0x1aef", "class": "0x040300"}
BRIDGE = {"vendor": "0x8086", "device": "0x2030", "class": "0x060400"}
NIC = {"vendor": "0x8086", "device": "0x1572", "class": "0x020000"}
# VT-d ecap with bit 3 (interrupt remapping) set, as read on a Xeon host.
ECAP_IR = "0xf050da"


def dev(address, ids, group, driver=None):
    return dict(ids, address=address, group=group, driver=driver)


def run(tmp_path, spec):
    root = fake_tree.build(str(tmp_path / "host"), spec)
    return iommu_info.gather(root)


def test_iommu_off_no_units_no_groups(tmp_path):
    facts = run(tmp_path, {"cmdline": "BOOT_IMAGE=/vmlinuz ro quiet", "devices": [dev("0000:17:00.0", A100, None, "nvidia")]})
    assert facts["active"] is False
    assert facts["kind"] is None
    assert facts["groups"] == [] and facts["gpus"] == []
    assert facts["passthrough"] is False


def test_intel_on_with_passthrough(tmp_path):
    facts = run(tmp_path, {
        "cmdline": "BOOT_IMAGE=/boot/vmlinuz-6.8.12-4-pve root=/dev/mapper/pve-root ro quiet intel_iommu=on iommu=pt",
        "iommu_units": {"dmar0": {"ecap": ECAP_IR}, "dmar1": {"ecap": ECAP_IR}},
        "devices": [dev("0000:17:00.0", A100, 14, "vfio-pci")],
    })
    assert facts["active"] is True
    assert facts["kind"] == "intel"
    assert facts["passthrough"] is True
    assert facts["interrupt_remapping"] is True
    assert facts["kernel_args"] == {"intel_iommu": "on", "iommu": "pt"}
    assert facts["units"] == ["dmar0", "dmar1"]
    assert facts["gpus"][0]["driver"] == "vfio-pci"
    assert facts["gpus"][0]["iommu_group"] == 14


def test_intel_interrupt_remapping_absent_or_disabled(tmp_path):
    no_ir = run(tmp_path / "a", {"cmdline": "intel_iommu=on", "iommu_units": {"dmar0": {"ecap": "0xf050d2"}},
                                 "devices": [dev("0000:17:00.0", A100, 1)]})
    assert no_ir["interrupt_remapping"] is False
    off = run(tmp_path / "b", {"cmdline": "intel_iommu=on intremap=off", "iommu_units": {"dmar0": {"ecap": ECAP_IR}},
                               "devices": [dev("0000:17:00.0", A100, 1)]})
    assert off["interrupt_remapping"] is False


def test_amd_default_on(tmp_path):
    facts = run(tmp_path, {"cmdline": "BOOT_IMAGE=/vmlinuz ro quiet", "iommu_units": {"ivhd0": {}},
                           "devices": [dev("0000:41:00.0", A100, 32, "nvidia")]})
    assert facts["active"] is True
    assert facts["kind"] == "amd"
    assert facts["passthrough"] is False
    assert facts["interrupt_remapping"] is None  # AMD exposes no register for it in sysfs
    assert facts["kernel_args"] == {}


def test_gpu_sharing_group_with_unrelated_device_is_not_isolated(tmp_path):
    facts = run(tmp_path, {"cmdline": "intel_iommu=on", "iommu_units": {"dmar0": {"ecap": ECAP_IR}}, "devices": [
        dev("0000:17:00.0", A100, 9, "nvidia"),
        dev("0000:18:00.0", NIC, 9, "i40e"),
    ]})
    gpu = facts["gpus"][0]
    assert gpu["isolated"] is False
    assert "0000:18:00.0" in gpu["isolation_reason"]
    assert gpu["group_members"] == ["0000:17:00.0", "0000:18:00.0"]


def test_gpu_with_its_audio_function_and_bridge_is_isolated(tmp_path):
    facts = run(tmp_path, {"cmdline": "amd_iommu=on", "iommu_units": {"ivhd0": {}}, "devices": [
        dev("0000:16:00.0", BRIDGE, 9, "pcieport"),
        dev("0000:17:00.0", A100, 9, "vfio-pci"),
        dev("0000:17:00.1", A100_AUDIO, 9, "vfio-pci"),
    ]})
    assert len(facts["gpus"]) == 1  # the audio function is not a GPU
    assert facts["gpus"][0]["isolated"] is True
    assert len(facts["groups"][0]["devices"]) == 3


@pytest.mark.parametrize("attr,value,expected", [
    ("vendor", "nvidia", "expected a hexadecimal id"),
    ("class", "", "expected a hexadecimal id"),
])
def test_malformed_sysfs_content_is_a_clear_error(tmp_path, attr, value, expected):
    spec = {"cmdline": "intel_iommu=on", "iommu_units": {"dmar0": {}}, "devices": [dict(dev("0000:17:00.0", A100, 3), **{attr: value})]}
    with pytest.raises(sysfs.SysfsError) as err:
        run(tmp_path, spec)
    assert "0000:17:00.0/%s" % attr in str(err.value) and expected in str(err.value)


def test_malformed_group_and_address_names(tmp_path):
    root = fake_tree.build(str(tmp_path / "host"), {"iommu_units": {"dmar0": {}}, "devices": [dev("0000:17:00.0", A100, 3)]})
    os.makedirs(os.path.join(root, "sys/kernel/iommu_groups/3/devices/not-an-address"))
    with pytest.raises(sysfs.SysfsError, match="not-an-address.*not a PCI address"):
        iommu_info.gather(root)
    os.rmdir(os.path.join(root, "sys/kernel/iommu_groups/3/devices/not-an-address"))
    os.makedirs(os.path.join(root, "sys/kernel/iommu_groups/bogus"))
    with pytest.raises(sysfs.SysfsError, match="bogus is not a numbered IOMMU group"):
        iommu_info.gather(root)


def test_missing_cmdline_is_a_clear_error(tmp_path):
    root = fake_tree.build(str(tmp_path / "host"), {})
    os.remove(os.path.join(root, "proc/cmdline"))
    with pytest.raises(sysfs.SysfsError, match="proc/cmdline does not exist"):
        iommu_info.gather(root)


def test_cmdline_path_overrides_root(tmp_path):
    root = fake_tree.build(str(tmp_path / "host"), {"cmdline": "quiet"})
    other = tmp_path / "cmdline"
    other.write_text("intel_iommu=on iommu=pt\n")
    facts = iommu_info.gather(root, str(other))
    assert facts["passthrough"] is True and facts["kind"] == "intel"


def test_parse_cmdline_flags_quotes_and_repeats():
    args = iommu.parse_cmdline('quiet iommu=off iommu=pt "acpi_osi=Windows 2020" vfio-pci.ids=10de:20b0,10de:1aef')
    assert args["quiet"] is None
    assert args["iommu"] == "pt"  # the kernel honours the last occurrence
    assert args["acpi_osi"] == "Windows 2020"
    assert args["vfio-pci.ids"] == "10de:20b0,10de:1aef"


def test_module_main_returns_json_and_fails_cleanly(tmp_path, run_module):
    spec = {"cmdline": "intel_iommu=on", "iommu_units": {"dmar0": {}}, "devices": [dev("0000:17:00.0", A100, 1)]}
    good = fake_tree.build(str(tmp_path / "good"), spec)
    result = run_module(iommu_info, {"root": good}, check_mode=True)
    assert result["changed"] is False and "failed" not in result
    assert result["gpus"][0]["isolated"] is True
    result = run_module(iommu_info, {"root": str(tmp_path / "missing")})
    assert result["failed"] is True
    assert "Cannot read IOMMU state" in result["msg"] and "proc/cmdline" in result["msg"]
