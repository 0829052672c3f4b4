# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""_gpu/iommu.py: the kernel command line, the IOMMU kind, passthrough and interrupt remapping, GPU group isolation, and
the whole iommu_info record built from raw readings."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._gpu import iommu as I


def test_parse_cmdline_keeps_order_flags_quotes_and_the_last_value():
    args = I.parse_cmdline('BOOT_IMAGE=/vmlinuz-6.8 root="/dev/mapper/pve-root" quiet iommu=pt quiet=1 a==b novalue=')
    assert list(args) == ["BOOT_IMAGE", "root", "quiet", "iommu", "a", "novalue"]
    assert args == {"BOOT_IMAGE": "/vmlinuz-6.8", "root": "/dev/mapper/pve-root", "quiet": "1", "iommu": "pt",
                    "a": "=b", "novalue": ""}
    assert I.parse_cmdline("nointremap") == {"nointremap": None}
    assert I.parse_cmdline("") == {} and I.parse_cmdline(None) == {}


@pytest.mark.parametrize("names,cmdline,kind", [
    (["dmar0", "dmar1"], {}, "intel"),
    (["ivhd0"], {"intel_iommu": "on"}, "amd"),            # the registered unit wins over the command line
    (["smmu3.0x0000000009050000"], {}, "arm-smmu"),
    (["arm-smmu-v3.1"], {}, "arm-smmu"),
    (["virtio-iommu"], {}, "other"),
    ([], {"intel_iommu": "on"}, "intel"),
    ([], {"amd_iommu": "on"}, "amd"),
    ([], {"quiet": None}, None),
    (["xdmar0"], {}, "other"),                             # dmar/ivhd must start the name
    (["xivhd0"], {}, "other"),
])
def test_iommu_kind(names, cmdline, kind):
    assert I.iommu_kind(iter(names), cmdline) == kind


@pytest.mark.parametrize("cmdline,expected", [
    ({"iommu": "pt"}, True), ({"iommu": "on"}, False), ({}, False),
    ({"iommu.passthrough": "1"}, True), ({"iommu.passthrough": "y"}, True), ({"iommu.passthrough": "Y"}, True),
    ({"iommu.passthrough": "on"}, True), ({"iommu.passthrough": "0"}, False), ({"iommu.passthrough": None}, False),
])
def test_passthrough_mode(cmdline, expected):
    assert I.passthrough_mode(cmdline) is expected


IR = "%x" % I.INTEL_ECAP_IR_BIT        # "8": only the interrupt remapping bit
NO_IR = "f7"                            # every low bit but that one


@pytest.mark.parametrize("kind,cmdline,ecaps,expected", [
    ("intel", {}, [IR, "f0208"], True),
    ("intel", {}, [IR, NO_IR], False),                      # one unit without it is enough to say no
    ("intel", {"intremap": "off"}, [IR], False),
    ("intel", {"nointremap": None}, [IR], False),
    ("intel", {"intremap": "on"}, [IR], True),
    ("intel", {}, [], None),                                # no ecap readable: unknown
    ("amd", {}, [IR], None),                                # AMD has no such register in sysfs
    ("amd", {"intremap": "off"}, [], False),
])
def test_interrupt_remapping(kind, cmdline, ecaps, expected):
    assert I.interrupt_remapping(kind, cmdline, ecaps) is expected
    assert I.INTEL_ECAP_IR_BIT == 8


def dev(address, cls="0x030200", vendor="0x10de", driver="vfio-pci"):
    return {"address": address, "vendor": vendor, "device": "0x20b5", "class": cls, "driver": driver}


def test_is_nvidia_gpu_needs_vendor_and_display_class():
    assert I.is_nvidia_gpu(dev("0000:17:00.0")) is True
    assert I.is_nvidia_gpu(dev("0000:17:00.0", cls="0x030000")) is True
    assert I.is_nvidia_gpu(dev("0000:17:00.1", cls="0x040300")) is False         # its audio function
    assert I.is_nvidia_gpu(dev("0000:17:00.0", vendor="0x1002")) is False


def test_gpu_isolation_allows_own_functions_and_bridges_only():
    gpu = dict(dev("0000:17:00.0"), iommu_group=42)
    own = [gpu, dev("0000:17:00.1", cls="0x040300"), dev("0000:16:00.0", cls="0x060400", vendor="0x8086")]
    assert I.gpu_isolation(gpu, own) == (True, "IOMMU group 42 holds only this card's functions and bridges")
    foreign = own + [dev("0000:18:00.0", cls="0x020000", vendor="0x15b3"), dev("0000:03:00.0", cls="0x010802")]
    assert I.gpu_isolation(gpu, foreign) == (False, "IOMMU group 42 also holds 0000:03:00.0, 0000:18:00.0")
    # a device on another slot whose address shares the text before the dot's position is still foreign
    assert I.gpu_isolation(gpu, [gpu, dev("0000:17:01.0", cls="0x040300")]) == (
        False, "IOMMU group 42 also holds 0000:17:01.0")


def test_summarize_builds_the_whole_record():
    groups = [
        {"id": 3, "devices": [dev("0000:00:02.0", cls="0x030000", vendor="0x8086")]},
        {"id": 42, "devices": [dev("0000:17:00.0"), dev("0000:17:00.1", cls="0x040300")]},
        {"id": 43, "devices": [dev("0000:65:00.0", driver="nvidia"), dev("0000:66:00.0", cls="0x020000", vendor="0x15b3")]},
    ]
    out = I.summarize(" quiet intel_iommu=on iommu=pt vfio-pci.ids=10de:20b5 pcie_acs_override=downstream foo=1\n",
                      ["dmar1", "dmar0"], [IR], groups, unsafe_interrupts=False)
    assert out == {
        "active": True, "kind": "intel", "passthrough": True, "interrupt_remapping": True,
        "allow_unsafe_interrupts": False, "units": ["dmar0", "dmar1"],
        "kernel_args": {"intel_iommu": "on", "iommu": "pt", "vfio-pci.ids": "10de:20b5",
                        "pcie_acs_override": "downstream"},
        "cmdline": "quiet intel_iommu=on iommu=pt vfio-pci.ids=10de:20b5 pcie_acs_override=downstream foo=1",
        "groups": groups,
        "gpus": [
            dict(dev("0000:17:00.0"), iommu_group=42, isolated=True,
                 isolation_reason="IOMMU group 42 holds only this card's functions and bridges",
                 group_members=["0000:17:00.0", "0000:17:00.1"]),
            dict(dev("0000:65:00.0", driver="nvidia"), iommu_group=43, isolated=False,
                 isolation_reason="IOMMU group 43 also holds 0000:66:00.0", group_members=["0000:65:00.0", "0000:66:00.0"]),
        ],
    }


def test_summarize_inactive_without_groups_or_units():
    assert I.summarize("amd_iommu=on", [], [], [])["active"] is False
    no_units = I.summarize("", [], [], [{"id": 0, "devices": [dev("0000:17:00.0")]}])
    assert no_units["active"] is False and no_units["kind"] is None and no_units["gpus"][0]["iommu_group"] == 0
    assert I.summarize("", ["dmar0"], [], [])["active"] is False
    assert I.summarize("intremap=off", ["ivhd0"], [], [])["interrupt_remapping"] is False
    assert I.summarize("", ["ivhd0"], [], [])["allow_unsafe_interrupts"] is None


def test_summarize_reports_each_relevant_kernel_argument():
    out = I.summarize("amd_iommu=on iommu.passthrough=1 intremap=off", ["ivhd0"], ["1f"], [])
    assert out["kernel_args"] == {"amd_iommu": "on", "iommu.passthrough": "1", "intremap": "off"}
    assert (out["kind"], out["passthrough"], out["interrupt_remapping"]) == ("amd", True, False)


def test_ecap_registers_are_hexadecimal():
    assert I.interrupt_remapping("intel", {}, ["1f"]) is True      # 0x1f has bit 3; read as base 17 it would not
