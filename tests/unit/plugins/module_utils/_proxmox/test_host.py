# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""_proxmox/host.py: the pve_gpu_host role's command line merge, PCI listing, card functions and passthrough check."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._proxmox import host as H
from ansible_collections.gpuops.provision.plugins.plugin_utils._role_filters import pve as F

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


# --------------------------------------------------------------------------- NVIDIA vGPU hosts (issue 39 point 3)

VGPU_LINES = [
    "/r/sys/bus/pci/devices/0000:41:00.0/sriov_numvfs:4",
    "/r/sys/bus/pci/devices/0000:65:00.0/sriov_numvfs:0",
    "/r/sys/bus/pci/devices/0000:41:00.4/nvidia/creatable_vgpu_types",
    "/r/sys/bus/pci/devices/0000:41:00.4/physfn",
    "/r/sys/bus/pci/devices/0000:21:00.0/mdev_supported_types",
    "ls: cannot access '/r/sys/bus/pci/devices/*/physfn': No such file or directory",
    "/r/sys/bus/pci/devices/0000:41:00.0/sriov_numvfs:x",
]


def test_vgpu_evidence():
    ev = H.vgpu_evidence(VGPU_LINES, ["/usr/lib/systemd/system/nvidia-vgpu-mgr.service", "/usr/lib/systemd/system/nvidia-vgpu-mgr.service"])
    assert ev == {"devices": {"0000:21:00.0": ["mdev_supported_types (mediated device types)"],
                              "0000:41:00.0": ["4 SR-IOV virtual functions enabled"],
                              "0000:41:00.4": ["nvidia/creatable_vgpu_types (NVIDIA vGPU driver)", "is an SR-IOV virtual function"]},
                  "manager": ["/usr/lib/systemd/system/nvidia-vgpu-mgr.service"]}
    assert H.vgpu_evidence(["/x/0000:65:00.0/sriov_numvfs:0"], []) == {"devices": {}, "manager": []}
    assert H.vgpu_evidence(["/x/0000:65:00.0/sriov_numvfs:1"], []) == {
        "devices": {"0000:65:00.0": ["1 SR-IOV virtual functions enabled"]}, "manager": []}
    assert F.pve_host_vgpu_evidence(VGPU_LINES, []) == H.vgpu_evidence(VGPU_LINES, [])


def test_vgpu_conflicts_name_the_gpus_and_the_blacklist():
    ev = H.vgpu_evidence(VGPU_LINES, ["/u/nvidia-vgpu-mgr.service"])
    assert H.vgpu_conflicts(ev, ["0000:41:00.0", "0000:65:00.0"], ["nouveau", "nvidia"]) == [
        "GPU 0000:41:00.0 would be handed to vfio-pci but serves NVIDIA vGPU (4 SR-IOV virtual functions enabled)",
        "GPU 0000:41:00.4 would be handed to vfio-pci but serves NVIDIA vGPU (nvidia/creatable_vgpu_types (NVIDIA vGPU "
        "driver), is an SR-IOV virtual function)",
        "blacklisting nvidia would stop the NVIDIA vGPU host driver (0000:21:00.0: mdev_supported_types (mediated device "
        "types); 0000:41:00.0: 4 SR-IOV virtual functions enabled; 0000:41:00.4: nvidia/creatable_vgpu_types (NVIDIA "
        "vGPU driver), is an SR-IOV virtual function; /u/nvidia-vgpu-mgr.service)"]
    # Other GPUs, nvidia not blacklisted: the vGPU cards are left alone.
    assert H.vgpu_conflicts(ev, ["0000:65:00.0"], ["nouveau"]) == []
    assert H.vgpu_conflicts({"devices": {}, "manager": ["/u/m"]}, [], ["nvidia"]) == [
        "blacklisting nvidia would stop the NVIDIA vGPU host driver (/u/m)"]
    assert H.vgpu_conflicts({"devices": {}, "manager": []}, ["0000:41:00.0"], ["nvidia"]) == []
    assert F.pve_host_vgpu_conflicts(ev, [], ["nvidia"]) == H.vgpu_conflicts(ev, [], ["nvidia"])


def _fn(addr, cls="0x030200", vendor="0x10de"):
    return {"address": addr, "vendor": vendor, "device": "0x26b9", "class": cls}


def test_vgpu_host_problems():
    pci = [_fn("0000:41:00.0"), _fn("0000:41:00.4"), _fn("0000:21:00.0"), _fn("0000:03:00.0", cls="0x010802", vendor="0x144d"),
           _fn("0000:05:00.0", cls="0x040300")]
    good = ["/r/0000:41:00.0/sriov_totalvfs:16", "/r/0000:41:00.0/sriov_numvfs:16", "/r/0000:41:00.4/physfn",
            "/r/0000:41:00.4/nvidia/creatable_vgpu_types", "/r/0000:21:00.0/mdev_supported_types"]
    assert H.vgpu_host_problems(pci, good) == []
    assert F.pve_host_vgpu_problems(pci, good) == []
    assert H.vgpu_host_problems(pci, ["/r/0000:41:00.0/sriov_totalvfs:16", "/r/0000:41:00.0/sriov_numvfs:0",
                                      "/r/0000:41:00.4/physfn"]) == [
        "GPU 0000:41:00.0: SR-IOV capable (16 virtual functions) but none enabled (pve-nvidia-sriov@ALL.service runs "
        "sriov-manage -e ALL)",
        "GPU 0000:21:00.0: no vGPU types (neither nvidia/creatable_vgpu_types nor mdev_supported_types; is the NVIDIA vGPU "
        "host driver loaded?)"]
    assert H.vgpu_host_problems(pci, good[:3] + good[4:] + ["/r/0000:51:00.4/physfn", "/r/0000:51:00.4/nvidia/creatable_vgpu_types"]) == [
        "GPU 0000:41:00.0: virtual functions enabled but none has nvidia/creatable_vgpu_types (is the NVIDIA vGPU host "
        "driver loaded?)"]
    assert H.vgpu_host_problems([_fn("0000:03:00.0", vendor="0x144d")], good) == ["no NVIDIA GPU found"]
    assert H.vgpu_host_problems([_fn("0000:21:00.0")], ["/r/0000:21:00.0/nvidia/creatable_vgpu_types"]) == []
    # a function without a class is no GPU; one virtual function is SR-IOV too
    assert H.vgpu_host_problems([{"address": "0000:07:00.0", "vendor": "0x10de"}, _fn("0000:21:00.0")],
                                ["/r/0000:21:00.0/mdev_supported_types"]) == []
    one_vf = ["/r/0000:21:00.0/sriov_totalvfs:1", "/r/0000:21:00.0/mdev_supported_types"]
    assert H.vgpu_host_problems([_fn("0000:21:00.0")], one_vf) == [
        "GPU 0000:21:00.0: SR-IOV capable (1 virtual functions) but none enabled (pve-nvidia-sriov@ALL.service runs "
        "sriov-manage -e ALL)"]


def test_helper_done_and_passthrough_files():
    assert H.helper_done(["blacklist nouveau", "/usr/sbin/dkms"]) is True
    assert H.helper_done(["  blacklist  nouveau  ", "/usr/bin/dkms "]) is True
    assert H.helper_done(["blacklist nouveau"]) is False
    assert H.helper_done(["/usr/sbin/dkms", "blacklist nouveaux"]) is False
    assert H.helper_done(["# blacklist nouveau", "/usr/sbin/dkms"]) is False
    assert F.pve_host_vgpu_helper_done(["blacklist nouveau", "/usr/sbin/dkms"]) is True
    files = [("/a", "options vfio-pci ids=10de:26b9,10de:22ba\n"), ("/b", "blacklist nouveau\nblacklist nvidia\n"),
             ("/c", "options vfio-pci ids=8086:1533\n"), ("/d", "blacklist nvidiafb\n"), ("/e", "")]
    assert H.passthrough_files(files) == ["/a", "/b"]
    slurped = [{"item": "/a", "content": "b3B0aW9ucyB2ZmlvLXBjaSBpZHM9MTBkZToyNmI5Cg=="}, {"item": "/x", "failed": True}]
    assert F.pve_host_passthrough_files(slurped) == ["/a"]


@pytest.mark.parametrize("remapping,unsafe,problem", [
    (False, False, True), (False, None, True), (False, True, False), (True, False, False), (None, False, False),
])
def test_passthrough_problems_gate_on_interrupt_remapping(remapping, unsafe, problem):
    iommu = {"active": True, "cmdline": "intel_iommu=on", "gpus": [_gpu("0000:17:00.0")],
             "interrupt_remapping": remapping, "allow_unsafe_interrupts": unsafe}
    expected = ["interrupt remapping is off (firmware, or intremap=off): VFIO refuses passthrough; enable it in the "
                "firmware, or accept the risk with 'options vfio_iommu_type1 allow_unsafe_interrupts=1'"]
    assert H.passthrough_problems(iommu, ["intel_iommu=on"], ["0000:17:00.0"]) == (expected if problem else [])
