"""pvesim rules of issue 39, each against the upstream function it follows (the model, without HTTPS: lab/pvesim/state.py).

- ';' in a host= value or a map path: one multifunction device; alternatives only from separate map entries
  (qemu-server src/PVE/QemuServer/PCI.pm parse_hostpci, choose_hostpci_devices; the someNic fixture of
  src/test/run_config2command_tests.pl); pve-manager PVE/API2/Hardware/PCI.pm mdevscan skips ';' paths.
- HA-managed VMs: start/shutdown only queue an ha-manager request (qemu-server src/PVE/API2/Qemu.pm vm_start,
  vm_shutdown; pve-ha-manager src/PVE/HA/Manager.pm next_state_started/next_state_stopped; Config.pm
  get_service_status for status/current's ha).
- Privileges by ACL path (pve-access-control RPCEnvironment, API2/AccessControl.pm permissions).
- romfile presence (qemu-server PCI.pm print_hostpci_devices passes /usr/share/kvm/<romfile> to QEMU).
- NVIDIA VF vGPU types from the parent GPU whatever the VF's state from qemu-server 9.1.11 (PCI/Mdev.pm get_mdev_types,
  commit 008475ca).
"""

from __future__ import annotations

import os
import time
import sys

import pytest

LAB = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "lab")
if LAB not in sys.path:
    sys.path.insert(0, LAB)

from pvesim.state import Sim  # noqa: E402  pylint: disable=wrong-import-position

NV = "0x10de"
L40S_TYPES = [{"type": "nvidia-1155", "name": "NVIDIA L40S-4Q", "max": 12}]


def dev(id_, cls, group, device="0x20b5", **extra):
    return dict({"id": id_, "class": cls, "vendor": NV, "device": device, "iommugroup": group,
                 "subsystem_vendor": NV, "subsystem_device": "0x1533"}, **extra)


def fixture(**extra):
    """pve1: two GPUs (01:00 with its audio function, 02:00), an L40S PF with two VFs; VMs 100-102 (q35, stopped)."""
    fx = {
        "version": {"version": "9.1.1", "release": "9.1", "repoid": "0"},
        "nodes": {"pve1": {"pci": [
            dev("0000:01:00.0", "0x030000", 1), dev("0000:01:00.1", "0x040300", 1, device="0x1aef"),
            dev("0000:02:00.0", "0x030200", 2),
            dev("0000:41:00.0", "0x030200", 40, device="0x26b9", vgpu_types=L40S_TYPES, nvidia=1),
            dev("0000:41:00.4", "0x030200", 41, device="0x26b9", physfn="0000:41:00.0"),
            dev("0000:41:00.5", "0x030200", 42, device="0x26b9", physfn="0000:41:00.0"),
        ]}},
        "mappings": {},
        "vms": {str(v): {"node": "pve1", "status": "stopped", "config": {"machine": "q35"}} for v in (100, 101, 102)},
    }
    fx.update(extra)
    return fx


def entry(path, device="20b5", group=None):
    """A map entry as assert_valid wants it for the first path of ``path``."""
    text = f"node=pve1,path={path},id=10de:{device},subsystem-id=10de:1533"
    return text + (f",iommugroup={group}" if group is not None else "")


def start(sim, vmid, **config):
    """Set the VM's config as root@pam and start it; returns the start task's exit status."""
    sim.vm_update("pve1", vmid, {k: str(v) for k, v in config.items()}, "root@pam")
    upid = sim.vm_power("pve1", vmid, "start", "root@pam")
    return sim.task_status("pve1", upid)["exitstatus"]


# ---------------------------------------------------------------------------------------- ';' = one device

def test_semicolon_host_is_one_multifunction_device_not_alternatives():
    # parse_hostpci: push $alternatives->@*, [split(/;/, $host)] -- one alternative holding every listed function.
    sim = Sim(fixture())
    assert start(sim, 100, hostpci0="0000:01:00.0;0000:02:00.0") == "OK"
    assert sim.vms[100]["devices"] == ["0000:01:00.0", "0000:02:00.0"]


def test_map_entries_are_the_alternatives_and_a_semicolon_entry_is_one_device():
    # parse_hostpci: one alternative per map entry of the node (the someNic fixture: two map entries, one chosen);
    # choose_hostpci_devices takes the first alternative none of whose functions is used.
    sim = Sim(fixture(mappings={
        "pool": {"map": [entry("0000:01:00.0", group=1), entry("0000:02:00.0", group=2)]},
        "both": {"map": [entry("0000:01:00.0;0000:02:00.0", group=1)]},
    }))
    assert start(sim, 100, hostpci0="mapping=pool") == "OK"
    assert start(sim, 101, hostpci0="mapping=pool") == "OK"
    assert (sim.vms[100]["devices"], sim.vms[101]["devices"]) == (["0000:01:00.0"], ["0000:02:00.0"])
    assert start(sim, 102, hostpci0="mapping=pool") == "could not find a free device for 'hostpci0'"
    for vmid in (100, 101):
        sim.vm_power("pve1", vmid, "stop", "root@pam")
    assert start(sim, 102, hostpci0="mapping=both") == "OK"
    assert sim.vms[102]["devices"] == ["0000:01:00.0", "0000:02:00.0"]


@pytest.mark.parametrize("mapping,hostpci", [
    (None, "0000:41:00.4;0000:41:00.5,mdev=nvidia-1155"),
    ({"mdev": 1, "map": [entry("0000:41:00.4;0000:41:00.5", device="26b9", group=41)]}, "mapping=vfs,mdev=nvidia-1155"),
    (None, "0000:01:00,mdev=nvidia-1155"),  # a path without function is every function of the device
])
def test_mdev_on_more_than_one_function_dies(mapping, hostpci):
    # parse_hostpci: "cannot use mediated device with multifunction device" when an alternative has > 1 function.
    sim = Sim(fixture(mappings={"vfs": mapping} if mapping else {}))
    assert start(sim, 100, hostpci0=hostpci) == "cannot use mediated device with multifunction device"
    assert sim.vms[100]["status"] == "stopped"


def test_a_function_twice_on_one_vm_dies():
    # choose_hostpci_devices: $add_used_device dies "device '<id>' assigned more than once".
    sim = Sim(fixture())
    assert start(sim, 100, hostpci0="0000:02:00.0", hostpci1="0000:02:00.0,pcie=1") == (
        "device '0000:02:00.0' assigned more than once")


def test_mdev_scan_of_a_mapping_skips_semicolon_paths():
    # pve-manager PVE/API2/Hardware/PCI.pm mdevscan: "next if $id =~ m/;/" (mdev not supported for multifunction)
    entries = [entry("0000:41:00.4;0000:41:00.5", device="26b9", group=41), entry("0000:41:00.5", device="26b9", group=42)]
    sim = Sim(fixture(mappings={"vfs": {"mdev": 1, "map": entries}}))
    assert [t["type"] for t in sim.mdev_scan("pve1", "vfs")] == ["nvidia-1155"]
    sim.mappings["vfs"]["map"].pop()
    assert sim.mdev_scan("pve1", "vfs") == []


# ---------------------------------------------------------------------------------------- HA-managed VMs

def ha_sim(**extra):
    fx = fixture(ha_seconds=0.2, **extra)
    fx["vms"]["100"].update(status="running", ha={"state": "started"})
    return Sim(fx)


def test_ha_start_and_shutdown_only_queue_a_request_and_the_state_follows_later():
    # qemu-server API2/Qemu.pm vm_shutdown / vm_start: PVE::HA::Config::vm_is_ha_managed -> fork_worker('hastop'|
    # 'hastart') running ha-manager, which ends at once; pve-ha-manager Manager.pm next_state_started/_stopped act later.
    sim = ha_sim()
    assert sim.vm_status("pve1", 100)["ha"] == {"managed": 1, "state": "started"}
    assert sim.vm_status("pve1", 101)["ha"] == {"managed": 0}
    upid = sim.vm_power("pve1", 100, "shutdown", "root@pam")
    task = sim.task_status("pve1", upid)
    assert (task["type"], task["status"], task["exitstatus"]) == ("hastop", "stopped", "OK")
    assert sim.vm_status("pve1", 100)["status"] == "running"  # the task is done, the VM still runs
    assert sim.vm_status("pve1", 100)["ha"]["state"] == "request_stop"
    time.sleep(0.25)
    assert sim.vm_status("pve1", 100)["status"] == "stopped"
    assert sim.vm_status("pve1", 100)["ha"] == {"managed": 1, "state": "stopped"}
    upid = sim.vm_power("pve1", 100, "start", "root@pam")
    assert sim.task_status("pve1", upid)["type"] == "hastart"
    assert (sim.vm_status("pve1", 100)["status"], sim.vm_status("pve1", 100)["ha"]["state"]) == ("stopped", "request_start")
    time.sleep(0.25)
    assert (sim.vm_status("pve1", 100)["status"], sim.vm_status("pve1", 100)["ha"]["state"]) == ("running", "started")


def test_ha_start_that_fails_leaves_the_service_in_error():
    # Manager.pm: a start the LRM reports as failed ends, after the relocation policy, in service state 'error'.
    sim = ha_sim()
    sim.vm_update("pve1", 100, {"hostpci0": "0000:02:00.0,pcie=1", "machine": "pc"}, "root@pam")
    sim.vm_power("pve1", 100, "stop", "root@pam")
    time.sleep(0.25)
    sim.vm_power("pve1", 100, "start", "root@pam")
    time.sleep(0.25)
    status = sim.vm_status("pve1", 100)
    assert (status["status"], status["ha"]) == ("stopped", {"managed": 1, "state": "error"})
    assert sim.dump()["vms"]["100"]["ha"] == {"state": "started", "service": "error", "error": "q35 machine model is not enabled"}


# ---------------------------------------------------------------------------------------- privileges by ACL path

def test_privileges_propagate_down_acl_paths_and_access_permissions_reports_them():
    # PVE::RPCEnvironment: an ACL entry (propagate=1) holds for its path and everything below; a token with privilege
    # separation has the intersection with its user; GET /access/permissions dumps the caller's own (pve-access-control
    # API2/AccessControl.pm permissions).
    from pvesim.httpd import Privs  # pylint: disable=import-outside-toplevel
    privs = Privs({"/": ["Sys.Audit"], "/vms/102": ["VM.Audit", "VM.Config.HWType"], "/mapping/pci": ["Mapping.Use"]},
                  {"/": ["Sys.Audit", "VM.Audit", "Mapping.Use"]})
    assert privs.at("/vms/102") == {"Sys.Audit", "VM.Audit"}
    assert privs.at("/vms/1021") == {"Sys.Audit"}
    assert privs.at("/mapping/pci/a100") == {"Sys.Audit", "Mapping.Use"}
    assert privs.has("/vms/102", "VM.Audit") and not privs.has("/vms/102", "VM.Config.HWType")
    assert privs.dump("/vms/102") == {"/vms/102": {"Sys.Audit": 1, "VM.Audit": 1}}
    assert Privs(None).at("/x") is None and Privs(None).has("/x", "VM.Audit")
    assert Privs(["VM.Audit"]).at("/vms/1") == {"VM.Audit"}


# ---------------------------------------------------------------------------------------- ROM files

def test_a_romfile_missing_from_usr_share_kvm_fails_the_start():
    # qemu-server PCI.pm print_hostpci_devices: romfile=/usr/share/kvm/<romfile>; QEMU fails without the file.
    fx = fixture()
    fx["nodes"]["pve1"]["romfiles"] = ["a100.rom"]
    sim = Sim(fx)
    assert start(sim, 100, hostpci0="0000:02:00.0,romfile=gone.rom") == (
        'start failed: QEMU exited with code 1 (kvm: -device vfio-pci,host=0000:02:00.0,romfile=/usr/share/kvm/gone.rom: '
        'failed to find romfile "/usr/share/kvm/gone.rom")')
    assert start(sim, 101, hostpci0="0000:02:00.0,romfile=a100.rom") == "OK"


# ---------------------------------------------------------------------------------------- NVIDIA VF types

@pytest.mark.parametrize("version,listed", [("9.1.1", []), ("9.2.0", ["nvidia-1155"])])
def test_a_busy_vf_lists_its_parents_types_from_9_2(version, listed):
    # qemu-server PCI/Mdev.pm get_mdev_types: since 008475ca (9.1.11) through NVML for the physfn, whatever the VF's
    # state; before, the VF's own creatable_vgpu_types, empty while it holds a vGPU.
    fx = fixture()
    fx["version"] = {"version": version, "release": version[:3], "repoid": "0"}
    sim = Sim(fx)
    assert start(sim, 100, hostpci0="0000:41:00.4,mdev=nvidia-1155") == "OK"
    assert [t["type"] for t in sim.mdev_types("pve1", "0000:41:00.4")] == listed
    assert [t["type"] for t in sim.mdev_types("pve1", "0000:41:00.5")] == ["nvidia-1155"]
