# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""_proxmox/rules.py: Proxmox VE rules beyond property strings (pure)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._proxmox import rules as R


@pytest.mark.parametrize("status,managed", [
    ({"ha": {"managed": 1, "state": "started"}}, True),
    ({"ha": {"managed": "1"}}, True),
    ({"ha": {"managed": 0}}, False),
    ({"ha": {"managed": "0"}}, False),
    ({"ha": {}}, False),
    ({"ha": None}, False),
    ({}, False),
    (None, False),
])
def test_ha_managed(status, managed):
    assert R.ha_managed(status) is managed


@pytest.mark.parametrize("status,want,verdict", [
    ({"status": "running", "ha": {"managed": 1, "state": "request_stop"}}, "stopped", ""),
    ({"status": "stopped", "ha": {"managed": 1, "state": "request_stop"}}, "stopped", None),
    ({"status": "stopped", "ha": {"managed": 1, "state": "stopped"}}, "stopped", None),
    ({"status": "stopped", "ha": {"managed": 1, "state": "request_start"}}, "running", ""),
    ({"status": "running", "ha": {"managed": 1, "state": "request_start"}}, "running", ""),
    ({"status": "running", "ha": {"managed": 1, "state": "started"}}, "running", None),
    ({"status": "running", "ha": {"managed": 0}}, "running", None),
    ({"status": "stopped", "ha": {"managed": 0}}, "running", ""),
    ({"status": "stopped"}, "stopped", None),
])
def test_ha_verdict_waits_until_vm_and_service_agree(status, want, verdict):
    assert R.ha_verdict(status, want) == verdict


@pytest.mark.parametrize("state", ["error", "fence", "recovery", "freeze"])
@pytest.mark.parametrize("want", ["stopped", "running"])
def test_ha_verdict_names_a_stuck_service(state, want):
    assert R.ha_verdict({"vmid": 7, "status": "stopped", "ha": {"managed": 1, "state": state}}, want) == (
        "HA service vm:7 is in state '%s' (ha-manager status shows why)" % state)
    assert R.ha_verdict({"status": "stopped", "ha": {"state": state}}, want).startswith("HA service vm:? is in state")


# --------------------------------------------------------------------------- devices that collide

def _d(id_, cls="0x030200", vendor="0x10de", device="0x26b9", physfn=None, name=None):
    from ansible_collections.gpuops.provision.plugins.module_utils._proxmox import property_strings
    raw = {"id": id_, "class": cls, "vendor": vendor, "device": device, "iommugroup": 1}
    if physfn:
        raw["physfn"] = physfn
    if name:
        raw["device_name"] = name
    return property_strings.device_facts(raw)


DEVS = [_d("0000:01:00.0"), _d("0000:01:00.1", cls="0x040300", device="0x22ba"), _d("0000:41:00.0"),
        _d("0000:41:00.4", physfn="0000:41:00.0"), _d("0000:41:00.5", physfn="0000:41:00.0"),
        _d("0000:03:00.0", cls="0x010802", vendor="0x144d", device="0xa80a", name="NVMe SSD"),
        _d("0000:05:00.0", cls="0x030000", vendor="0x1002", device="0x73bf")]
PHYSFN = {"0000:41:00.4": "0000:41:00.0", "0000:41:00.5": "0000:41:00.0"}
MAPPINGS = {"pool": {"map": ["node=pve1,path=0000:41:00.4,id=10de:26b9", "node=pve2,path=0000:41:00.9,id=10de:26b9",
                             "bad", "node=pve1,path=0000:41:00.5,id=10de:26b9", "node=pve1,path=0000:77:00.0,id=10de:26b9"]},
            "none": {}}


def test_entry_alternatives_of_mappings_and_host_values():
    assert R.entry_alternatives({"mapping": "pool"}, "pve1", MAPPINGS, DEVS) == [["0000:41:00.4"], ["0000:41:00.5"]]
    assert R.entry_alternatives({"mapping": "pool"}, "pve3", MAPPINGS, DEVS) == []
    assert R.entry_alternatives({"mapping": "none"}, "pve1", MAPPINGS, DEVS) == []
    assert R.entry_alternatives({"mapping": "gone"}, "pve1", MAPPINGS, DEVS) == []
    assert R.entry_alternatives({"host": "0000:01:00"}, "pve1", MAPPINGS, DEVS) == [["0000:01:00.0", "0000:01:00.1"]]
    assert R.entry_alternatives({"host": "0000:01:00.1;0000:41:00.0"}, "pve1", MAPPINGS, DEVS) == [
        ["0000:01:00.1", "0000:41:00.0"]]
    assert R.entry_alternatives({"host": "0000:99:00.0"}, "pve1", MAPPINGS, DEVS) == []


@pytest.mark.parametrize("a,b,same,why", [
    ([["x"]], [["x"]], True, "the same function x"),
    ([["x"]], [["x"]], False, None),
    ([["0000:41:00.0"]], [["0000:41:00.4"]], False, "0000:41:00.0, the physical function of virtual function 0000:41:00.4"),
    ([["0000:41:00.5"]], [["0000:41:00.0"]], True, "0000:41:00.5, a virtual function of physical function 0000:41:00.0"),
    ([["0000:41:00.4"]], [["0000:41:00.5"]], True, None),
    ([["0000:41:00.4"]], [["0000:41:00.4"], ["0000:41:00.5"]], True, None),  # the pool has a free alternative
    ([["0000:41:00.4"], ["0000:41:00.5"]], [["0000:41:00.0"]], True,
     "0000:41:00.4, a virtual function of physical function 0000:41:00.0"),
    ([["a", "0000:41:00.4"]], [["0000:41:00.0", "b"]], True,
     "0000:41:00.4, a virtual function of physical function 0000:41:00.0"),
    ([], [["x"]], True, None),
    ([["x"]], [], True, None),
])
def test_collision(a, b, same, why):
    assert R.collision(a, b, PHYSFN, same=same) == why


def test_collision_defaults_to_counting_the_same_function():
    assert R.collision([["x"]], [["x"]], {}) == "the same function x"


def test_vm_collisions_names_both_entries():
    entries = {2: [["0000:41:00.0"]], 0: [["0000:01:00.0"]], 1: [["0000:01:00.0"]], 3: [["0000:41:00.4"]]}
    labels = {0: "hostpci0 (a)", 1: "hostpci1 (b)", 2: "hostpci2 (c)", 3: "hostpci3 (d)"}
    assert R.vm_collisions(entries, labels, PHYSFN) == [
        "hostpci0 (a) and hostpci1 (b) both reach the same function 0000:01:00.0",
        "hostpci2 (c) and hostpci3 (d) both reach 0000:41:00.0, the physical function of virtual function 0000:41:00.4"]
    assert R.vm_collisions({0: [["0000:01:00.0"]]}, {0: "x"}, PHYSFN) == []


def test_cross_vm_collisions_count_pf_and_vf_only():
    mine = {1: [["0000:41:00.0"]], 0: [["0000:01:00.0"]]}
    others = [("VM 7 (running)", "hostpci0 (p)", [["0000:41:00.5"]]), ("VM 8 (stopped)", "hostpci2 (q)", [["0000:01:00.0"]]),
              ("VM 9 (stopped)", "hostpci1 (r)", [["0000:41:00.4"]])]
    assert R.cross_vm_collisions(mine, {0: "hostpci0 (a)", 1: "hostpci1 (b)"}, others, PHYSFN) == [
        "hostpci1 (b) reaches 0000:41:00.0, the physical function of virtual function 0000:41:00.5, which VM 7 (running) "
        "has in hostpci0 (p)",
        "hostpci1 (b) reaches 0000:41:00.0, the physical function of virtual function 0000:41:00.4, which VM 9 (stopped) "
        "has in hostpci1 (r)"]
    assert R.cross_vm_collisions(mine, {0: "a", 1: "b"}, [], PHYSFN) == []


def test_non_gpu_functions():
    assert R.non_gpu_functions("0000:01:00", DEVS) == []  # the GPU's audio goes with it
    assert R.non_gpu_functions("0000:41:00.4", DEVS) == []
    assert R.non_gpu_functions("0000:03:00.0", DEVS) == ["0000:03:00.0 (class 0x010802, 144d:a80a, NVMe SSD)"]
    assert R.non_gpu_functions("0000:05:00.0;0000:01:00.1", DEVS) == ["0000:05:00.0 (class 0x030000, 1002:73bf)"]
    assert R.non_gpu_functions("0000:09:00.0", DEVS) == []
    assert R.non_gpu_functions("0000:01:00.1;0000:03:00.0", DEVS) == ["0000:03:00.0 (class 0x010802, 144d:a80a, NVMe SSD)"]


def test_mapping_users():
    configs = {"pve2": {"10": {"hostpci3": "mapping=gpu", "hostpci1": "mapping=gpu,pcie=1"}},
               "pve1": {"101": {"hostpci0": "mapping=gpu2"}, "9": {"hostpci0": "mapping=gpu"}, "8": {"hostpci0": "bad=1"},
                        "7": {"name": "x"}, "10": {"hostpci2": "mapping=gpu"}}}
    assert R.mapping_users("gpu", configs) == ["VM 9 on pve1 (hostpci0)", "VM 10 on pve1 (hostpci2)",
                                               "VM 10 on pve2 (hostpci1, hostpci3)"]
    assert R.mapping_users("gpu3", configs) == []
    assert R.mapping_users("gpu", {}) == []


# --------------------------------------------------------------------------- privileges

@pytest.mark.parametrize("method,path,hint", [
    ("get", "nodes/pve1/hardware/pci", "this needs Sys.Audit|Sys.Modify on /, for the hardware read: pve_gpu_info"),
    ("GET", "/nodes/pve1/hardware/pci/0000:01:00.0/mdev", "this needs Sys.Audit|Sys.Modify on /, for the mdev types"),
    ("get", "cluster/mapping/pci/a100", "this needs Mapping.Audit|Mapping.Use|Mapping.Modify on /mapping/pci/<id>, for reading"),
    ("post", "cluster/mapping/pci", "this needs Mapping.Modify on /mapping/pci, for pve_pci_mapping creating a mapping"),
    ("put", "cluster/mapping/pci/a100", "this needs Mapping.Modify on /mapping/pci/<id>, for pve_pci_mapping changing"),
    ("delete", "cluster/mapping/pci/a100", "this needs Mapping.Modify on /mapping/pci, for pve_pci_mapping state=absent"),
    ("get", "nodes/pve1/qemu/100/config", "this needs VM.Audit on /vms/<vmid>, for reading a VM"),
    ("post", "nodes/pve1/qemu/100/config", "this needs VM.Config.HWType|Mapping.Use on /vms/<vmid> and /mapping/pci/<id>"),
    ("post", "nodes/pve1/qemu/100/status/start", "this needs VM.PowerMgmt on /vms/<vmid>, for pve_vm_gpu restart"),
    ("get", "version", ""),
    ("post", "nodes/pve1/hardware/pci", ""),
])
def test_forbidden_hint(method, path, hint):
    got = R.forbidden_hint(method, path)
    assert (got.startswith(hint) and bool(got) == bool(hint)), got


def test_missing_privileges():
    needed = [("/vms/1", "VM.Config.HWType", "to write"), ("/mapping/pci/a", "Mapping.Use", "sets a"),
              ("/mapping/pci/a", "Mapping.Use", "sets a"), ("/vms/1", "VM.PowerMgmt", "restart")]
    assert R.missing_privileges(needed, {"/vms/1": {"VM.Config.HWType": 1, "VM.PowerMgmt": 0}}) == [
        "Mapping.Use on /mapping/pci/a (sets a)"]
    assert R.missing_privileges(needed, {}) == ["VM.Config.HWType on /vms/1 (to write)", "Mapping.Use on /mapping/pci/a (sets a)",
                                                "VM.PowerMgmt on /vms/1 (restart)"]
    assert R.missing_privileges([], {}) == []


# --------------------------------------------------------------------------- VM-side settings

@pytest.mark.parametrize("current,want,same", [
    ("q35", "q35", True), ("pc-q35-9.2+pve1", "q35", True), ("type=pc-q35-8.1,viommu=intel", "q35", True),
    ("", "q35", False), (None, "q35", False), ("pc-i440fx-9.2", "q35", False),
    ("", "pc", True), ("pc-i440fx-9.2", "i440fx", True), ("q35", "pc", False), ("virt", "pc", False),
    ("pc-q35-9.2", "pc-q35-9.2", True), ("q35", "pc-q35-9.2", False),
])
def test_machine_is(current, want, same):
    assert R.machine_is(current, want) is same


@pytest.mark.parametrize("config,want,sets,problems", [
    ({}, {"machine": "q35", "bios": "ovmf", "vga": "none", "efidisk_storage": "local-lvm"},
     {"machine": "q35", "bios": "ovmf", "vga": "none", "efidisk0": "local-lvm:1,efitype=4m"}, []),
    ({"machine": "pc-q35-9.2+pve1", "bios": "ovmf", "vga": "none,clipboard=vnc", "efidisk0": "local-lvm:vm-1-disk-0,size=4M"},
     {"machine": "q35", "bios": "ovmf", "vga": "none", "efidisk_storage": "local-lvm"}, {}, []),
    ({"vga": "std,memory=32"}, {"vga": "none", "machine": None}, {"vga": "none"}, []),
    ({}, {"bios": "ovmf"}, {"bios": "ovmf"},
     ["bios ovmf needs an EFI disk and the VM has none: give vm_settings.efidisk_storage (the storage Proxmox VE creates it on)"]),
    ({"bios": "ovmf"}, {"efidisk_storage": "ceph"}, {"efidisk0": "ceph:1,efitype=4m"}, []),
    ({"bios": "ovmf"}, {"vga": "none"}, {"vga": "none"}, []),  # not asked about the BIOS: no EFI disk demanded
    ({"bios": "ovmf", "efidisk0": "x"}, {"bios": "seabios"}, {"bios": "seabios"}, []),
    ({}, {"efidisk_storage": "ceph"}, {}, []),  # SeaBIOS needs none
    ({}, None, {}, []),
    ({}, {"bios": "seabios"}, {}, []),  # SeaBIOS is the default
    ({"bios": "seabios"}, {"efidisk_storage": "ceph"}, {}, []),
])
def test_plan_vm_settings(config, want, sets, problems):
    assert R.plan_vm_settings(config, want) == (sets, problems)


def test_romfile_checks():
    gpus = [{"mapping": "a", "romfile": "b.rom"}, {"host": "01:00.0", "romfile": "a.rom"}, {"mapping": "c", "romfile": "a.rom"}]
    vms = [{"vmid": 101, "node": "pve1", "gpus": gpus},
           {"vmid": 102, "gpus": [{"mapping": "a", "romfile": "x.rom"}, {"mapping": "b", "romfile": "w.rom"}]},
           {"vmid": 103, "node": "pve2", "gpus": [{"mapping": "a"}, "not a dict"]},
           {"vmid": 104, "node": "pve2", "gpus": [{"mapping": "a", "romfile": "z.rom"}]}]
    got = R.romfile_checks(vms, {"pve1": "pve1.example.com"})
    assert got["problems"] == ["VM 102 names romfile w.rom, x.rom but no node: give its node so that the file can be checked there"]
    assert [(c["vmid"], c["node"], c["host"], c["romfile"]) for c in got["checks"]] == [
        (101, "pve1", "pve1.example.com", "a.rom"), (101, "pve1", "pve1.example.com", "b.rom"), (104, "pve2", "pve2", "z.rom")]
    assert got["checks"][0]["missing"] == (
        "VM 101: romfile a.rom is not in /usr/share/kvm on node pve1 (QEMU would fail its start)")
    assert R.romfile_checks(vms[3:], None, "/x")["checks"][0]["missing"].startswith("VM 104: romfile z.rom is not in /x on")
    assert R.romfile_checks([], {}) == {"checks": [], "problems": []}


@pytest.mark.parametrize("text,value", [
    (None, ""), ("", ""), ("std,memory=32", "std"), ("type=none,clipboard=vnc", "none"), ("memory=32,type=qxl", "qxl"),
    ("memory=32", ""), ("pc-q35-9.2+pve1", "pc-q35-9.2+pve1"),
])
def test_default_value_of_a_property_string(text, value):
    assert R._default_value(text) == value  # pylint: disable=protected-access


def test_restart_disruptions_name_the_shutdown_its_stop_and_the_start_through_ha_where_managed():
    assert R.restart_disruptions("VM 100 on node pve1", 180, False) == [
        "shut down VM 100 on node pve1 (stopped after 180 s if still running)", "start VM 100 on node pve1"]
    assert R.restart_disruptions("VM 7 on node pve2", 30, True) == [
        "shut down VM 7 on node pve2 through HA (stopped after 30 s if still running)",
        "start VM 7 on node pve2 through HA"]
