# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""pve_gpu_info lists per node the VMs that hold a GPU (issue 41 point 7: the fleet report's Proxmox VE section),
against pvesim in-process: name and state from the node's VM list, each hostpci entry with the GPUs it covers and
its vGPU (mdev) type by name."""

from __future__ import annotations

from ansible_collections.gpuops.provision.plugins.modules import pve_gpu_info

from pvesim_inproc import cluster, module_runner, use_pvesim  # pylint: disable=import-error


def test_the_vms_holding_gpus_with_their_devices_per_node(monkeypatch, run_module):
    fx = cluster()
    fx["vms"]["100"]["config"]["hostpci0"] = "mapping=a100,pcie=1"
    fx["vms"]["102"]["config"]["hostpci0"] = "mapping=l40s-vgpu,mdev=nvidia-1156"
    fx["vms"]["101"]["config"]["hostpci1"] = "0000:04:00.0"   # a NIC only: not a GPU VM
    fx["vms"]["200"]["config"]["hostpci0"] = "0000:01:00.0,pcie=1"
    use_pvesim(monkeypatch, fx)
    res = module_runner(run_module, pve_gpu_info)({})
    assert not res.get("failed"), res
    pve1 = res["nodes"]["pve1"]["vms"]
    assert [v["vmid"] for v in pve1] == [100, 102]
    ml1, q35 = pve1
    assert (ml1["name"], ml1["status"], ml1["node"]) == ("ml1", "running", "pve1")
    assert ml1["hostpci"] == [{"vmid": 100, "slot": "hostpci0", "via": "mapping", "mapping": "a100",
                               "paths": ["0000:01:00.0"], "mdev": None, "mdev_name": None, "gpus": ["0000:01:00.0"]}]
    assert (q35["name"], q35["status"]) == ("q35", "stopped")
    vgpu = q35["hostpci"][0]
    assert vgpu["gpus"] == ["0000:41:00.4", "0000:41:00.5"] and vgpu["mdev"] == "nvidia-1156"
    assert vgpu["mdev_name"] == "NVIDIA L40S-8Q"
    assert res["nodes"]["pve2"]["vms"][0]["hostpci"][0]["via"] == "host"
    assert res["nodes"]["pve2"]["vms"][0]["hostpci"][0]["gpus"] == ["0000:01:00.0"]
    assert [v["vmid"] for v in res["vms"]] == [100, 102, 200]


def test_gather_vms_false_lists_none(monkeypatch, run_module):
    fx = cluster()
    fx["vms"]["100"]["config"]["hostpci0"] = "mapping=a100,pcie=1"
    use_pvesim(monkeypatch, fx)
    res = module_runner(run_module, pve_gpu_info)({"gather_vms": False})
    assert res["nodes"]["pve1"]["vms"] == [] and res["vms"] == []
