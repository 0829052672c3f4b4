# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""pve_vm_gpu vm_settings: machine q35, bios ovmf with an EFI disk, vga none, planned before any write (issue 39)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.modules import pve_vm_gpu

from pvesim_inproc import cluster, module_runner, use_pvesim, writes  # pylint: disable=import-error

GPU_VM = {"machine": "q35", "bios": "ovmf", "vga": "none", "efidisk_storage": "local-lvm"}


@pytest.fixture
def sim(monkeypatch):
    return use_pvesim(monkeypatch, cluster())


@pytest.fixture
def run(run_module):
    return module_runner(run_module, pve_vm_gpu)


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
