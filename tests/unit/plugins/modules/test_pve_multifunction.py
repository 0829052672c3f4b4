# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""';' in a mapping path or a host= value is one multifunction device, not alternatives (issue 39 point 1).

qemu-server PCI.pm parse_hostpci makes each map entry of a node one alternative, and the ';'-separated parts of an
entry (or of a host= value) one device whose functions all reach the VM; with mdev that dies. pvesim follows it
(tests/lab/test_pvesim_upstream_rules.py), so these runs end in a real VM start.
"""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.modules import pve_pci_mapping, pve_vm_gpu

from pvesim_inproc import cluster, module_runner, use_pvesim, writes  # pylint: disable=import-error

VF4 = "id=10de:26b9,iommugroup=41,node=pve1,path=0000:41:00.4,subsystem-id=10de:1851"
VF5 = "id=10de:26b9,iommugroup=42,node=pve1,path=0000:41:00.5,subsystem-id=10de:1851"


@pytest.fixture
def sim(monkeypatch):
    fx = cluster()
    fx["mappings"] = {}
    return use_pvesim(monkeypatch, fx)


@pytest.fixture
def mapping(run_module):
    return module_runner(run_module, pve_pci_mapping)


@pytest.fixture
def vm_gpu(run_module):
    return module_runner(run_module, pve_vm_gpu)


def test_a_list_of_vfs_is_a_pool_of_map_entries_and_each_vm_starts_on_its_own_vf(sim, mapping, vm_gpu):
    res = mapping({"id": "vgpu", "map": [{"node": "pve1", "path": ["41:00.4", "0000:41:00.5"]}]})
    assert res["changed"] is True and res["mapping"]["map"] == [VF4, VF5] and res["mapping"]["mdev"] is True, res
    assert sim.mappings["vgpu"]["map"] == [VF4, VF5]
    for vmid in (100, 102):
        res = vm_gpu({"vmid": vmid, "gpus": [{"mapping": "vgpu", "mdev": "nvidia-1155"}], "restart": "always"})
        assert res.get("failed") is not True, res
    sim.vm_power("pve1", 102, "start", "root@pam")
    assert (sim.vms[100]["devices"], sim.vms[102]["devices"]) == (["0000:41:00.4"], ["0000:41:00.5"])


def test_devices_in_one_path_list_become_entries_and_functions_of_one_device_join(sim, mapping):
    res = mapping({"id": "two", "map": [{"node": "pve1", "path": ["0000:03:00.0", "01:00.0"]}]}, check_mode=True)
    assert [e.split("path=")[1].split(",")[0] for e in res["mapping"]["map"]] == ["0000:03:00.0", "0000:01:00.0"], res
    assert writes(sim) == 0


def test_mdev_mapping_with_a_semicolon_entry_is_refused(sim, mapping):
    audio = {"id": "0000:01:00.1", "class": "0x040300", "vendor": "0x10de", "device": "0x1aef", "iommugroup": 1}
    sim.nodes["pve1"]["pci"]["0000:01:00.1"] = audio
    res = mapping({"id": "mf", "mdev": True, "validate_hardware": False,
                   "map": [{"node": "pve1", "path": ["01:00.0", "01:00.1"]}]})
    assert res["failed"] is True and writes(sim) == 0, res
    assert res["msg"] == (
        "mapping mf: mdev is set but node pve1 path 0000:01:00.0;0000:01:00.1 joins several functions into one "
        "multifunction device, which cannot provide a mediated device ('cannot use mediated device with multifunction "
        "device'); a vGPU pool is one map entry per virtual function; nothing changed")


@pytest.mark.parametrize("gpu,msg", [
    ({"host": "01:00.0;0000:03:00.0"},
     "VM 102 on node pve1: gpus[0]: host 0000:01:00.0;0000:03:00.0 joins functions of different devices "
     "(0000:01:00, 0000:03:00): Proxmox VE passes every ';'-separated function to the VM together, as one "
     "multifunction device, not as alternatives; a pool is a PCI mapping with one map entry per device"),
    ({"host": "41:00.4;41:00.5", "mdev": "nvidia-1155"},
     "VM 102 on node pve1: gpus[0]: host 0000:41:00.4;0000:41:00.5 with mdev nvidia-1155: cannot use mediated device "
     "with multifunction device (qemu-server parse_hostpci); give one function"),
])
def test_host_joining_devices_or_mdev_on_several_functions_is_refused(sim, vm_gpu, gpu, msg):
    res = vm_gpu({"vmid": 102, "gpus": [gpu]}, token=False)
    assert res["failed"] is True and writes(sim) == 0, res
    assert res["msg"] == msg


def test_stored_semicolon_entry_with_mdev_fails_the_precheck_not_the_start(sim, vm_gpu):
    sim.mappings["joined"] = {"mdev": 1, "map": ["node=pve1,path=0000:41:00.4;0000:41:00.5,id=10de:26b9,"
                                                 "subsystem-id=10de:1851,iommugroup=41"]}
    res = vm_gpu({"vmid": 102, "gpus": [{"mapping": "joined", "mdev": "nvidia-1155"}]})
    assert res["failed"] is True and writes(sim) == 0, res
    assert res["msg"] == (
        "VM 102 on node pve1: hostpci0 (mapping=joined,mdev=nvidia-1155): cannot use mediated device with "
        "multifunction device: 0000:41:00.4;0000:41:00.5 is 2 functions (0000:41:00.4, 0000:41:00.5); give one "
        "function; nothing changed")
