"""pve_gpu_info against pvesim: GPUs, functions, IOMMU isolation, VFs, mdev types, mappings and VM usage."""

from __future__ import annotations


def test_gpu_info_reports_hardware_mappings_and_users(pvesim, fixture_data):
    res, writes = pvesim.run("pve_gpu_info", {"nodes": ["pve1"]})
    assert not res.get("failed"), res.get("msg")
    assert writes == 0 and res["changed"] is False
    gpus = {g["id"]: g for g in res["nodes"]["pve1"]["gpus"]}
    # VFs are not top-level GPUs; audio/NIC/bridge are not GPUs
    assert sorted(gpus) == ["0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:41:00.0"]
    a100, rtx, t4, l40s = (gpus[k] for k in sorted(gpus))
    assert a100["pci_id"] == "10de:20b5" and a100["subsystem_id"] == "10de:1533"
    assert a100["iommu_isolated"] is True and a100["iommu_group_devices"] == ["0000:00:01.0", "0000:01:00.0"]
    assert rtx["functions"] == ["0000:02:00.0", "0000:02:00.1"] and rtx["iommu_isolated"] is True
    assert t4["iommu_isolated"] is False and "0000:04:00.0" in t4["iommu_group_devices"]
    assert l40s["virtfns"] == ["0000:41:00.4", "0000:41:00.5"]
    assert [v["id"] for v in l40s["vfs"]] == ["0000:41:00.4", "0000:41:00.5"]
    assert l40s["driver"] == "nvidia"
    assert sorted(t["type"] for t in l40s["vfs"][0]["mdev_types"]) == ["nvidia-1155", "nvidia-1156"]
    # VM 102 has hostpci0 = whole RTX device
    assert rtx["used_by"] == [{"vmid": 102, "slot": "hostpci0", "via": "host", "mapping": None,
                               "paths": ["0000:02:00"], "mdev": None}]
    assert a100["used_by"] == []
    assert a100["mappings"] == ["a100", "wrongid"] and t4["mappings"] == ["t4"]
    assert l40s["mappings"] == [] and l40s["vfs"][1]["mappings"] == ["l40s-vgpu"]
    assert [g["node"] for g in res["gpus"]] == ["pve1"] * 4


def test_gpu_info_unknown_node_fails(pvesim):
    res, writes = pvesim.run("pve_gpu_info", {"nodes": ["nope"]})
    assert res.get("failed") and "unknown node(s): nope" in res["msg"]
    assert writes == 0
