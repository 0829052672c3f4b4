"""pve_pci_mapping against pvesim: check mode, diff, idempotence (zero writes), build_from selectors, hardware checks."""

from __future__ import annotations

A100_MAP = [
    # deliberately unnormalised spellings: upper case ids, no domain, 0x prefixes
    {"node": "pve2", "path": ["01:00.0"], "pci_id": "0x10DE:0x20B5"},
    {"node": "pve1", "path": ["0000:01:00.0"], "pci_id": "10de:20b5", "iommu_group": 1},
]


def test_mapping_check_mode_diff_create_and_idempotence(pvesim):
    state0 = pvesim.state()
    res, writes = pvesim.run("pve_pci_mapping", {"id": "a100-pool", "description": "A100 pool", "map": A100_MAP}, check=True, diff=True)
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] is True and writes == 0
    assert pvesim.state() == state0  # check mode changed nothing
    assert res["diff"]["before"] == {}
    assert res["diff"]["after"]["map"] == [
        "id=10de:20b5,iommugroup=1,node=pve1,path=0000:01:00.0,subsystem-id=10de:1533",  # subsystem read from hardware
        # issue 14: the group is filled from the hardware too (PVE refuses an entry without it at VM start)
        "id=10de:20b5,iommugroup=10,node=pve2,path=0000:01:00.0,subsystem-id=10de:1533",
    ]

    res, writes = pvesim.run("pve_pci_mapping", {"id": "a100-pool", "description": "A100 pool", "map": A100_MAP})
    assert res["changed"] is True and writes == 1
    stored = pvesim.state()["mappings"]["a100-pool"]
    assert sorted(stored["map"]) == sorted(res["mapping"]["map"])
    assert stored["description"] == "A100 pool"

    # Same request with entries in another order and other spellings: no change, zero writes.
    again = [dict(A100_MAP[1], pci_id="10DE:20B5"), dict(A100_MAP[0], path=["0000:01:00.0"])]
    res, writes = pvesim.run("pve_pci_mapping", {"id": "a100-pool", "description": "A100 pool", "map": again}, diff=True)
    assert res["changed"] is False and writes == 0, res

    # An update (new description, pve2 dropped) uses PUT with the digest.
    res, writes = pvesim.run("pve_pci_mapping", {"id": "a100-pool", "description": "only pve1", "map": [A100_MAP[1]]}, diff=True)
    assert res["changed"] is True and writes == 1
    assert res["diff"]["before"]["description"] == "A100 pool" and res["diff"]["after"]["description"] == "only pve1"
    stored = pvesim.state()["mappings"]["a100-pool"]
    assert len(stored["map"]) == 1 and stored["description"] == "only pve1"

    res, writes = pvesim.run("pve_pci_mapping", {"id": "a100-pool", "state": "absent"}, check=True)
    assert res["changed"] is True and writes == 0 and "a100-pool" in pvesim.state()["mappings"]
    res, writes = pvesim.run("pve_pci_mapping", {"id": "a100-pool", "state": "absent"})
    assert res["changed"] is True and writes == 1 and "a100-pool" not in pvesim.state()["mappings"]
    res, writes = pvesim.run("pve_pci_mapping", {"id": "a100-pool", "state": "absent"})
    assert res["changed"] is False and writes == 0


def test_mapping_build_from_selector_vf_pool(pvesim):
    args = {"id": "l40s-pool", "build_from": {"selector": "[?pci_id=='10de:26b9'].vfs[]", "nodes": ["pve1"]}}
    res, writes = pvesim.run("pve_pci_mapping", args)
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] is True and writes == 1
    stored = pvesim.state()["mappings"]["l40s-pool"]
    assert stored["map"] == [
        "id=10de:26b9,iommugroup=41,node=pve1,path=0000:41:00.4,subsystem-id=10de:1851",
        "id=10de:26b9,iommugroup=42,node=pve1,path=0000:41:00.5,subsystem-id=10de:1851",
    ]
    assert int(stored["mdev"]) == 1  # every selected VF is mdev capable
    res, writes = pvesim.run("pve_pci_mapping", args)
    assert res["changed"] is False and writes == 0


def test_mapping_build_from_selector_matching_nothing_fails(pvesim):
    res, writes = pvesim.run("pve_pci_mapping", {"id": "none", "build_from": {"selector": "[?pci_id=='dead:beef']"}})
    assert res.get("failed") and "selects no device" in res["msg"]
    assert writes == 0 and "none" not in pvesim.state()["mappings"]


def test_mapping_wrong_vendor_device_for_node_fails_before_write(pvesim):
    state0 = pvesim.state()
    # pve2's 0000:02:00.0 is an H100 (10de:2330), not an A100
    bad = [{"node": "pve1", "path": ["0000:01:00.0"]},
           {"node": "pve2", "path": ["0000:02:00.0"], "pci_id": "10de:20b5", "subsystem_id": "10de:16c1"}]
    res, writes = pvesim.run("pve_pci_mapping", {"id": "a100-pool", "map": bad})
    assert res.get("failed")
    assert "node pve2" in res["msg"] and "0000:02:00.0" in res["msg"] and "10de:2330 != 10de:20b5" in res["msg"]
    assert "nothing changed" in res["msg"]
    assert writes == 0 and pvesim.state() == state0


def test_mapping_missing_device_fails(pvesim):
    res, writes = pvesim.run("pve_pci_mapping", {"id": "ghost", "map": [{"node": "pve2", "path": ["0000:09:00.0"]}]})
    assert res.get("failed") and "node pve2 has no PCI device 0000:09:00.0" in res["msg"]
    assert writes == 0
