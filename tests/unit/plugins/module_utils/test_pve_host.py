# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""_pve_host: the pve_gpu_host role's command line merge, PCI listing, card functions and passthrough check."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils import _pve_host as H
from ansible_collections.gpuops.provision.plugins.filter import pve as F

WANT = ["intel_iommu=on", "iommu=pt"]


@pytest.mark.parametrize("lines,want,remove,expected", [
    # nothing there yet: the wanted arguments in their order
    ([], WANT, [], "intel_iommu=on iommu=pt"),
    (None, WANT, [], "intel_iommu=on iommu=pt"),
    # other arguments keep their place; missing wanted ones are appended
    (["root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet"], WANT, [], "root=ZFS=rpool/ROOT/pve-1 boot=zfs quiet intel_iommu=on iommu=pt"),
    # a wanted argument already there stays where it is, and only once
    (["iommu=pt quiet iommu=pt"], WANT, [], "iommu=pt quiet intel_iommu=on"),
    # an argument with a wanted name is replaced in place
    (["quiet intel_iommu=off splash"], WANT, [], "quiet intel_iommu=on splash iommu=pt"),
    # ... only once: a second one with that name is dropped
    (["intel_iommu=off intel_iommu=igfx_off"], WANT, [], "intel_iommu=on iommu=pt"),
    # a name wanted twice is ambiguous: the old token is kept, both wanted ones are appended
    (["a=0"], ["a=1", "a=2"], [], "a=0 a=1 a=2"),
    # owned arguments no longer wanted are dropped, wherever they stand
    (["quiet iommu=pt"], ["intel_iommu=on"], ["iommu=pt"], "quiet intel_iommu=on"),
    (["iommu=pt quiet"], ["intel_iommu=on"], ["iommu=pt"], "quiet intel_iommu=on"),
    # the name is what comes before the first '=' (values may hold '=', as ZFS root datasets do)
    (["quiet root=ZFS=rpool/ROOT/old boot=zfs"], ["root=ZFS=rpool/ROOT/new"], [], "quiet root=ZFS=rpool/ROOT/new boot=zfs"),
    # only the first line counts
    (["quiet", "second line"], [], [], "quiet"),
    # a name without a value matches a wanted argument with one
    (["iommu quiet"], ["iommu=pt"], [], "iommu=pt quiet"),
])
def test_merge_cmdline(lines, want, remove, expected):
    assert H.merge_cmdline(lines, want, remove) == expected
    assert F.pve_host_cmdline(lines or [], want, remove) == expected


LISTING = [
    "/sys/bus/pci/devices/0000:17:00.1/class:0x040300",
    "/sys/bus/pci/devices/0000:17:00.0/vendor:0x10DE",
    "/sys/bus/pci/devices/0000:17:00.0/device:0x20B5",
    "/sys/bus/pci/devices/0000:17:00.0/class:0x030200",
    "/sys/bus/pci/devices/0000:17:00.1/vendor:0x10de",
    "/sys/bus/pci/devices/0000:17:00.1/device:0x22a3",
    "/sys/bus/pci/devices/0000:00:01.0/vendor:0x8086",
    "grep: /sys/bus/pci/devices/0000:00:02.0/class: Permission denied",
    "/sys/bus/pci/devices/0000:00:03.0/subsystem_vendor:0x10de",
    "/sys/bus/pci/devices/0000:00:04.0/vendor:10de",
]


def test_parse_pci_listing_groups_by_address_lowercases_and_ignores_other_lines():
    assert H.parse_pci_listing(LISTING) == [
        {"address": "0000:00:01.0", "vendor": "0x8086"},
        {"address": "0000:17:00.0", "vendor": "0x10de", "device": "0x20b5", "class": "0x030200"},
        {"address": "0000:17:00.1", "class": "0x040300", "vendor": "0x10de", "device": "0x22a3"},
    ]
    assert H.parse_pci_listing([]) == []
    assert F.pve_host_pci(LISTING) == H.parse_pci_listing(LISTING)


PCI = [
    {"address": "0000:17:00.0", "vendor": "0x10de", "device": "0x20b5", "class": "0x030200"},
    {"address": "0000:17:00.1", "vendor": "0x10de", "device": "0x22a3", "class": "0x040300"},
    {"address": "0000:17:00.2", "vendor": "0x10de"},
    {"address": "0000:170:00.0", "vendor": "0x10de", "device": "0x20b5"},
    {"address": "0000:65:00.0", "vendor": "0x10de", "device": "0x20b5", "class": "0x030200"},
    {"address": "0000:66:00.0", "vendor": "0x10de", "device": "0x22a3", "class": "0x040300"},
]


def test_card_functions_are_the_same_slot_with_ids():
    assert [f["address"] for f in H.card_functions(PCI, ["0000:17:00.0"])] == ["0000:17:00.0", "0000:17:00.1"]
    assert [f["address"] for f in H.card_functions(PCI, ["0000:17:00.1", "0000:65:00.0"])] == [
        "0000:17:00.0", "0000:17:00.1", "0000:65:00.0"]
    assert H.card_functions(PCI, []) == []
    assert F.pve_host_card_functions(PCI, ["0000:65:00.0"]) == [PCI[4]]


def test_stolen_functions_share_an_id_outside_the_selection():
    taken = ["0000:17:00.0", "0000:17:00.1"]
    assert H.stolen_functions(PCI, taken, ["10de:20b5", "10de:22a3"]) == [
        {"address": "0000:170:00.0", "id": "10de:20b5"},
        {"address": "0000:65:00.0", "id": "10de:20b5"},
        {"address": "0000:66:00.0", "id": "10de:22a3"},
    ]
    assert H.stolen_functions(PCI, taken, ["10de:22a3"]) == [{"address": "0000:66:00.0", "id": "10de:22a3"}]
    assert H.stolen_functions(PCI, [p["address"] for p in PCI], ["10de:20b5"]) == []
    assert F.pve_host_vfio_stolen(PCI, taken, ["10de:1234"]) == []


def _gpu(address, isolated=True, driver="vfio-pci", reason=None):
    return {"address": address, "isolated": isolated, "driver": driver, "isolation_reason": reason}


def test_passthrough_problems_lists_each_in_order():
    iommu = {"active": False, "cmdline": "BOOT_IMAGE=/vmlinuz iommu=pt",
             "gpus": [_gpu("0000:17:00.0", isolated=False, driver="nvidia", reason="group 3 also holds 0000:18:00.0"),
                      _gpu("0000:65:00.0", driver=None)]}
    assert H.passthrough_problems(iommu, ["intel_iommu=on", "iommu=pt", "pcie_acs_override=x"],
                                  ["0000:17:00.0", "0000:65:00.0", "0000:b3:00.0"]) == [
        "IOMMU is not active (no IOMMU unit in /sys/class/iommu or no IOMMU groups)",
        "kernel argument intel_iommu=on is not on the running command line",
        "kernel argument pcie_acs_override=x is not on the running command line",
        "GPU 0000:17:00.0: not isolated: group 3 also holds 0000:18:00.0",
        "GPU 0000:17:00.0: bound to nvidia, not vfio-pci",
        "GPU 0000:65:00.0: bound to no driver, not vfio-pci",
        "GPU 0000:b3:00.0: no IOMMU group",
    ]


def test_passthrough_problems_go_on_after_a_gpu_without_group():
    iommu = {"active": True, "cmdline": "intel_iommu=on", "gpus": [_gpu("0000:65:00.0", driver="nvidia")]}
    assert H.passthrough_problems(iommu, ["intel_iommu=on"], ["0000:17:00.0", "0000:65:00.0"]) == [
        "GPU 0000:17:00.0: no IOMMU group", "GPU 0000:65:00.0: bound to nvidia, not vfio-pci"]


def test_passthrough_problems_none_when_ready_and_first_record_of_an_address_counts():
    iommu = {"active": True, "cmdline": "quiet intel_iommu=on iommu=pt",
             "gpus": [_gpu("0000:17:00.0"), _gpu("0000:17:00.0", driver="nvidia")]}
    assert H.passthrough_problems(iommu, WANT, ["0000:17:00.0"]) == []
    assert H.passthrough_problems(iommu, WANT, []) == []
    assert F.pve_host_problems(iommu, ["intel_iommu=on"], ["0000:17:00.0"]) == []
