# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Devices that cannot be given out together (issue 39 points 4 and 9), refused before any write.

Point 4: the whole card (the PF) for one VM while another VM has one of its VFs: qemu-server's start refuses it
("already in use by VMID"), and handing the PF to vfio-pci takes the VFs away. Point 9: one VM given one device twice
(a mapping and a raw host=, or a VF and its PF): choose_hostpci_devices dies "assigned more than once".
"""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.modules import pve_vm_gpu

from pvesim_inproc import cluster, module_runner, use_pvesim, writes  # pylint: disable=import-error


@pytest.fixture
def sim(monkeypatch):
    fx = cluster()
    fx["vms"]["101"]["config"]["machine"] = "q35"
    # VM 200... on pve1 a running vGPU VM on the first VF of the L40S
    fx["vms"]["103"] = {"node": "pve1", "status": "running",
                        "config": {"name": "vgpu", "machine": "q35", "hostpci0": "mapping=l40s-vgpu,mdev=nvidia-1155"}}
    return use_pvesim(monkeypatch, fx)


@pytest.fixture
def run(run_module):
    return module_runner(run_module, pve_vm_gpu)


def test_pf_for_one_vm_while_another_has_its_vf_is_refused_naming_both(sim, run):
    res = run({"vmid": 102, "gpus": [{"host": "41:00.0"}]}, token=False)
    assert res["failed"] is True and writes(sim) == 0, res
    assert res["msg"] == (
        "VM 102 on node pve1: hostpci0 (0000:41:00.0) reaches 0000:41:00.0, the physical function of virtual function "
        "0000:41:00.4, which VM 103 (running) has in hostpci0 (mapping=l40s-vgpu,mdev=nvidia-1155); nothing changed")


def test_a_vf_while_another_vm_has_the_pf_is_refused(sim, run):
    sim.vms[103]["conf"]["hostpci0"] = "0000:41:00,pcie=1"
    res = run({"vmid": 102, "gpus": [{"mapping": "l40s-vgpu", "mdev": "nvidia-1155"}]})
    assert res["failed"] is True and writes(sim) == 0, res
    assert "which VM 103 (running) has in hostpci0 (0000:41:00,pcie=1)" in res["msg"], res
    assert "hostpci0 (mapping=l40s-vgpu,mdev=nvidia-1155) reaches 0000:41:00.4, a virtual function of physical function 0000:41:00.0" in res["msg"]


def test_the_same_device_in_two_vms_configs_is_left_to_the_start_check(sim, run):
    res = run({"vmid": 102, "gpus": [{"mapping": "a100", "pcie": True}]})  # VM 100 may have it too; one runs at a time
    assert res.get("failed") is not True and res["changed"] is True, res


def test_batch_vms_are_checked_against_each_others_plans(sim, run):
    sim.vm_power("pve1", 103, "stop", "root@pam")
    sim.vms[103]["conf"].pop("hostpci0")
    res = run({"vms": [{"vmid": 101, "gpus": [{"mapping": "l40s-vgpu", "mdev": "nvidia-1155"}]},
                       {"vmid": 102, "gpus": [{"host": "41:00.0"}]}]}, token=False)
    assert res["failed"] is True and writes(sim) == 0, res
    assert "VM 102 on node pve1: hostpci0 (0000:41:00.0) reaches 0000:41:00.0, the physical function of virtual " \
           "function 0000:41:00.4, which VM 101 (stopped) has in hostpci0 (mapping=l40s-vgpu,mdev=nvidia-1155)" in res["msg"], res


@pytest.mark.parametrize("gpus,why", [
    ([{"mapping": "a100"}, {"host": "01:00.0"}],
     "hostpci0 (mapping=a100) and hostpci1 (0000:01:00.0) both reach the same function 0000:01:00.0"),
    ([{"host": "41:00.4", "mdev": "nvidia-1155"}, {"host": "41:00.0"}],
     "hostpci0 (0000:41:00.4,mdev=nvidia-1155) and hostpci1 (0000:41:00.0) both reach 0000:41:00.4, a virtual function "
     "of physical function 0000:41:00.0"),
    ([{"host": "41:00"}, {"mapping": "l40s-vgpu"}],
     "hostpci0 (0000:41:00) and hostpci1 (mapping=l40s-vgpu) both reach 0000:41:00.0, the physical function of virtual "
     "function 0000:41:00.4"),
])
def test_one_device_twice_on_a_vm_is_refused_naming_both_entries(sim, run, gpus, why):
    sim.vm_power("pve1", 103, "stop", "root@pam")
    sim.vms[103]["conf"].pop("hostpci0")
    res = run({"vmid": 102, "gpus": gpus}, token=False)
    assert res["failed"] is True and writes(sim) == 0, res
    assert res["msg"] == "VM 102 on node pve1: %s; nothing changed" % why, res


def test_a_pool_with_a_free_alternative_is_no_collision(sim, run):
    sim.vm_power("pve1", 103, "stop", "root@pam")
    sim.vms[103]["conf"].pop("hostpci0")
    res = run({"vmid": 102, "gpus": [{"host": "41:00.4", "mdev": "nvidia-1155"}, {"mapping": "l40s-vgpu", "mdev": "nvidia-1155"}]},
              token=False, check_mode=True)
    assert res.get("failed") is not True, res
