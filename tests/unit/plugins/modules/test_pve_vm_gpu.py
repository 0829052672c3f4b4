# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""pve_vm_gpu module in-process against pvesim (lab/pvesim) without its HTTPS server (tests/helpers/pvesim_inproc)."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.gpuops.provision.plugins.modules import pve_vm_gpu

from pvesim_inproc import cluster, module_runner, use_pvesim, warning_texts, writes  # pylint: disable=import-error


@pytest.fixture
def sim(monkeypatch):
    return use_pvesim(monkeypatch, cluster())


@pytest.fixture
def run(run_module):
    return module_runner(run_module, pve_vm_gpu)


warnings = warning_texts


def conf(sim, vmid):
    return copy.deepcopy(sim.vms[vmid]["conf"])


def test_check_mode_reports_the_change_and_writes_nothing(sim, run):
    before = conf(sim, 102)
    res = run({"vmid": 102, "gpus": [{"mapping": "a100", "pcie": True}]}, check_mode=True)
    assert res["changed"] is True and res["writes"] == 0, res
    assert res["set"] == {"hostpci0": "mapping=a100,pcie=1"} and res["deleted"] == []
    assert res["node"] == "pve1" and res["before"] == {} and res["hostpci"] == {"hostpci0": "mapping=a100,pcie=1"}
    assert res["diff"] == {"before": {}, "after": {"hostpci0": "mapping=a100,pcie=1"}}
    assert "vmid" not in res
    assert conf(sim, 102) == before and writes(sim) == 0


def test_apply_then_equivalent_rerun_is_idempotent(sim, run):
    res = run({"vmid": 102, "gpus": [{"mapping": "a100", "pcie": True}]})
    assert res["changed"] is True and res["writes"] == 1 and res["pending"] is False and res["restarted"] is False, res
    assert sim.vms[102]["conf"]["hostpci0"] == "mapping=a100,pcie=1"
    again = run({"vmid": 102, "node": "pve1", "gpus": [{"mapping": "a100", "pcie": True, "rombar": True, "x_vga": False}]})
    assert again["changed"] is False and again["writes"] == 0 and again["set"] == {}, again
    assert again["before"] == again["hostpci"] == {"hostpci0": "mapping=a100,pcie=1"}
    assert writes(sim) == 1


def test_every_gpu_option_reaches_the_hostpci_entry(sim, run):
    # Raw host devices and romfiles are root@pam's alone (password login, not a token).
    gpu = {"host": "01:00.0", "pcie": True, "x_vga": True, "rombar": False, "romfile": "a100.rom", "legacy_igd": True,
           "vendor_id": "10DE", "device_id": "0x20b5", "sub_vendor_id": "10de", "sub_device_id": "1533", "driver": "keep"}
    res = run({"vmid": 102, "gpus": [gpu]}, token=False, check_mode=True)
    assert res["set"] == {"hostpci0": "0000:01:00.0,device-id=0x20b5,driver=keep,legacy-igd=1,pcie=1,rombar=0,romfile=a100.rom,"
                                      "sub-device-id=0x1533,sub-vendor-id=0x10de,vendor-id=0x10de,x-vga=1"}, res
    # The default driver (vfio) is dropped; mdev is not offered by the A100 here, so the pre-check is off.
    res = run({"vmid": 102, "precheck": False, "gpus": [dict(gpu, driver="vfio", mdev="nvidia-1155")]}, token=False, check_mode=True)
    assert "driver" not in res["set"]["hostpci0"] and ",mdev=nvidia-1155," in res["set"]["hostpci0"]
    assert writes(sim) == 0


def test_running_vm_change_is_pending_unless_restarted(sim, run):
    res = run({"vmid": 100, "gpus": [{"mapping": "a100", "pcie": True}]})
    assert res["changed"] is True and res["pending"] is True and res["restarted"] is False, res
    assert warnings(res) == ["VM 100 on node pve1 runs; hostpci changes (hostpci0) apply at its next start (restart=never)"]
    res = run({"vmid": 100, "gpus": [{"mapping": "a100", "pcie": True}], "restart": "if_needed"})
    assert res["changed"] is True and res["restarted"] is True and res["pending"] is False and res["set"] == {}, res
    assert sim.vms[100]["status"] == "running" and sim.vms[100]["conf"]["hostpci0"] == "mapping=a100,pcie=1"
    res = run({"vmid": 100, "gpus": [{"mapping": "a100", "pcie": True}], "restart": "if_needed"})
    assert res["changed"] is False and res["writes"] == 0, res


def test_empty_gpus_deletes_and_exclusive_false_keeps(sim, run):
    run({"vmid": 102, "gpus": [{"mapping": "a100"}]})
    kept = run({"vmid": 102, "gpus": [], "exclusive": False})
    assert kept["changed"] is False and kept["hostpci"] == {"hostpci0": "mapping=a100"}, kept
    res = run({"vmid": 102, "gpus": []})
    assert res["changed"] is True and res["deleted"] == ["hostpci0"] and res["hostpci"] == {}, res
    assert "hostpci0" not in sim.vms[102]["conf"]


def test_batch_writes_each_vm_and_reports_per_vm(sim, run):
    res = run({"vms": [{"vmid": 102, "gpus": [{"mapping": "a100", "pcie": True}]},
                       {"vmid": 200, "gpus": [{"mapping": "a100"}]},
                       {"vmid": 101, "gpus": []}], "max_concurrent": 2})
    assert res["changed"] is True and res["failed_vms"] == [] and res["writes"] == 2, res
    assert [(v["vmid"], v["node"], v["changed"], v["writes"]) for v in res["vms"]] == [
        (102, "pve1", True, 1), (200, "pve2", True, 1), (101, "pve1", False, 0)]
    assert sim.vms[200]["conf"]["hostpci0"] == "mapping=a100"
    again = run({"vms": [{"vmid": 102, "gpus": [{"mapping": "a100", "pcie": True}]}, {"vmid": 200, "gpus": [{"mapping": "a100"}]}]})
    assert again["changed"] is False and again["writes"] == 0, again


def fails(sim, res, *parts):
    """The run failed with a message holding every part, and pvesim saw no write."""
    assert res.get("failed") is True, res
    for part in parts:
        assert part in res["msg"], (part, res["msg"])
    assert writes(sim) == 0


@pytest.mark.parametrize("args, parts", [
    ({"vmid": 101, "gpus": [{"mapping": "a100", "pcie": True}]},
     ["VM 101 on node pve1: hostpci0 (mapping=a100,pcie=1): pcie=1 needs the q35 machine type", "nothing changed"]),
    ({"vmid": 102, "gpus": [{"mapping": "nope"}]}, ["VM 102 on node pve1: hostpci0 (mapping=nope): PCI mapping 'nope' does not exist"]),
    ({"vmid": 200, "gpus": [{"mapping": "l40s-vgpu", "mdev": "nvidia-1155"}]},
     ["VM 200 on node pve2", "PCI mapping 'l40s-vgpu' has no entry for node pve2"]),
    ({"vmid": 102, "gpus": [{"mapping": "l40s-vgpu", "mdev": "nvidia-9999"}]},
     ["VM 102 on node pve1", "mdev type 'nvidia-9999' is not available on mapping l40s-vgpu (available: nvidia-1155, nvidia-1156)"]),
    ({"vmid": 102, "gpus": [{"mapping": "a100", "mdev": "nvidia-1155"}]},
     ["VM 102 on node pve1", "mdev is set but PCI mapping 'a100' is not marked mdev"]),
    ({"vmid": 102, "gpus": [{"mapping": "a100", "host": "01:00.0"}]}, ["VM 102 on node pve1: gpus[0] needs exactly one of mapping and host"]),
    ({"vmid": 102, "gpus": [{"mapping": "a100", "vf": 0}]}, ["VM 102 on node pve1: gpus[0]: vf needs host (the physical function)"]),
    ({"vmid": 102, "gpus": [{"host": "41:00.0", "vf": 5}]},
     ["VM 102 on node pve1: gpus[0]: device 0000:41:00.0 has 2 virtual function(s), vf 5 does not exist"]),
    ({"vmid": 102, "gpus": [{"mapping": "a100", "vendor_id": "10d"}]}, ["VM 102 on node pve1: gpus[0]:", "10d"]),
    ({"vmid": 999, "gpus": []}, ["VM 999 not found on any node"]),
    ({"vmid": 102, "gpus": [{"host": "01:00.0"}]},
     ["VM 102 on node pve1: only root@pam with a password may set, replace or delete raw host devices",
      "this run is root@pam with token ansible", "raw host device 0000:01:00.0"]),
    ({"vmid": 0, "gpus": []}, ["VM 0: vmid", "nothing changed"]),
    ({"vms": [{"vmid": 102, "gpus": []}, {"vmid": 102, "gpus": []}]}, ["VM 102 is listed twice; nothing changed"]),
    ({"vms": [{"vmid": 102, "gpus": [{"mapping": "a100", "pcie": True}]}, {"vmid": 101, "gpus": [{"mapping": "a100", "pcie": True}]}]},
     ["VM 101 on node pve1", "pcie=1 needs the q35 machine type"]),
    ({"vmid": 102, "gpus": [{"mapping": "a100", "driver": "other"}]}, ["driver", "vfio, keep", "other"]),
])
def test_bad_input_fails_naming_vm_device_and_reason_and_writes_nothing(sim, run, args, parts):
    before = copy.deepcopy({vmid: vm["conf"] for vmid, vm in sim.vms.items()})
    fails(sim, run(args), *parts)
    assert {vmid: vm["conf"] for vmid, vm in sim.vms.items()} == before


def test_shared_iommu_group_fails_naming_the_other_device(sim, run):
    fails(sim, run({"vmid": 102, "gpus": [{"host": "03:00.0"}]}, token=False),
          "VM 102 on node pve1: hostpci0 (0000:03:00.0): device 0000:03:00.0 shares IOMMU group 3 with 0000:04:00.0")


def test_option_the_server_lacks_fails_naming_both_versions(monkeypatch, run):
    sim = use_pvesim(monkeypatch, cluster(version="9.0.3"))
    fails(sim, run({"vmid": 102, "gpus": [{"mapping": "a100", "driver": "keep"}]}, check_mode=True),
          "VM 102 on node pve1: hostpci0 (mapping=a100,driver=keep): 'driver' needs Proxmox VE 9.1 or newer",
          "the server runs 9.0.3; nothing changed")


# --------------------------------------------------------------- vm_settings (issue 39): planned before any write

GPU_VM = {"machine": "q35", "bios": "ovmf", "vga": "none", "efidisk_storage": "local-lvm"}


def test_settings_and_gpu_in_one_config_call_then_nothing(sim, run):
    # VM 101 is i440fx/SeaBIOS: pcie=1 needs the q35 the same run asks for.
    args = {"vmid": 101, "gpus": [{"mapping": "a100", "pcie": True, "x_vga": True}], "vm_settings": GPU_VM}
    res = run(args, check_mode=True)
    assert res["changed"] is True and writes(sim) == 0, res
    assert res["vm_settings"] == {"machine": "q35", "bios": "ovmf", "vga": "none", "efidisk0": "local-lvm:1,efitype=4m"}
    assert res["diff"]["after"] == {"hostpci0": "mapping=a100,pcie=1,x-vga=1", "machine": "q35", "bios": "ovmf",
                                    "vga": "none", "efidisk0": "local-lvm:1,efitype=4m"}, res["diff"]
    res = run(args)
    assert res["changed"] is True and res["writes"] == 1, res
    conf = sim.vms[101]["conf"]
    assert (conf["machine"], conf["bios"], conf["vga"], conf["efidisk0"], conf["hostpci0"]) == (
        "q35", "ovmf", "none", "local-lvm:1,efitype=4m", "mapping=a100,pcie=1,x-vga=1")
    again = run(args)
    assert again["changed"] is False and again["writes"] == 0 and again["vm_settings"] == {}, again


def test_ovmf_without_efi_disk_or_storage_is_refused_before_any_write(sim, run):
    res = run({"vmid": 101, "gpus": [{"mapping": "a100"}], "vm_settings": {"bios": "ovmf"}})
    assert res["failed"] is True and writes(sim) == 0, res
    assert res["msg"] == ("VM 101 on node pve1: bios ovmf needs an EFI disk and the VM has none: give "
                          "vm_settings.efidisk_storage (the storage Proxmox VE creates it on); nothing changed")


def test_running_vm_gets_the_settings_at_its_restart(sim, run):
    res = run({"vmid": 100, "gpus": [], "vm_settings": {"vga": "none"}})
    assert res["changed"] is True and res["pending"] is True, res
    assert sim.vms[100]["pending"] == {"vga": "none"}
    res = run({"vmid": 100, "gpus": [], "vm_settings": {"vga": "none"}, "restart": "if_needed"})
    assert res["restarted"] is True and sim.vms[100]["conf"]["vga"] == "none" and sim.vms[100]["pending"] == {}, res


# --------------------------------------------------------------- disruptions (issue 41): the restart named first

RESTART_100 = ["shut down VM 100 on node pve1 (stopped after 180 s if still running)", "start VM 100 on node pve1"]


def test_check_mode_names_the_restart_first_in_the_diff_and_writes_nothing(sim, run):
    res = run({"vmid": 100, "gpus": [{"mapping": "a100", "pcie": True}], "restart": "if_needed"}, check_mode=True)
    assert res["changed"] is True and res["restarted"] is True and writes(sim) == 0, res
    # shutdown_timeout (default 180) is when Proxmox VE turns the shutdown into a stop (forceStop).
    assert res["disruptions"] == RESTART_100
    assert res["diff"] == [{"prepared": "Disruptive actions, in order:\n1. %s\n2. %s\n" % tuple(RESTART_100)},
                           {"before": {}, "after": {"hostpci0": "mapping=a100,pcie=1"}}]
    assert sim.vms[100]["status"] == "running"


def test_the_real_restart_reports_its_disruptions_and_a_rerun_none(sim, run):
    args = {"vmid": 100, "gpus": [{"mapping": "a100", "pcie": True}], "restart": "if_needed", "shutdown_timeout": 60}
    res = run(args)
    assert res["restarted"] is True and res["disruptions"] == [
        "shut down VM 100 on node pve1 (stopped after 60 s if still running)", "start VM 100 on node pve1"], res
    again = run(args)
    assert again["changed"] is False and again["disruptions"] == [] and again["diff"] == {
        "before": {"hostpci0": "mapping=a100,pcie=1"}, "after": {"hostpci0": "mapping=a100,pcie=1"}}, again


def test_no_restart_no_disruption_a_pending_change_and_a_stopped_vm_included(sim, run):
    res = run({"vmid": 100, "gpus": [{"mapping": "a100", "pcie": True}]}, check_mode=True)  # restart=never
    assert res["pending"] is True and res["disruptions"] == [] and isinstance(res["diff"], dict), res
    res = run({"vmid": 102, "gpus": [{"mapping": "a100"}], "restart": "always"}, check_mode=True)
    assert res["changed"] is True and res["restarted"] is False and res["disruptions"] == [], res


def test_batch_keeps_each_vms_restart_and_leads_the_diff_with_them(sim, run):
    res = run({"vms": [{"vmid": 102, "gpus": [{"mapping": "a100", "pcie": True}]},
                       {"vmid": 100, "gpus": [{"mapping": "a100", "pcie": True}], "restart": "always"}]},
              check_mode=True)
    assert res["changed"] is True and writes(sim) == 0, res
    assert [(v["vmid"], v["disruptions"]) for v in res["vms"]] == [(102, []), (100, RESTART_100)]
    assert res["disruptions"] == RESTART_100
    assert res["diff"][0] == {"prepared": "Disruptive actions, in order:\n1. %s\n2. %s\n" % tuple(RESTART_100)}
    assert [d["before_header"] for d in res["diff"][1:]] == ["VM 102 on pve1", "VM 100 on pve1"]
