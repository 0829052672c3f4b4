"""Issue 14: the Proxmox VE modules against the rules the real servers apply (pvesim follows qemu-server,
pve-guest-common, pve-common and pve-manager; each rule cites its upstream function in lab/pvesim).

Every test here failed on the code before issue 14: mappings without iommugroup, mdev checked one way,
options sent to servers that lack them, quoted property strings, node walks that stop at an offline node,
and permission checks that looked at the new value only.
"""

from __future__ import annotations

import pytest
import requests


def start_vm(sim, node, vmid):
    """Start a VM through the API as a client would and return the task's exit status."""
    session = requests.Session()
    session.headers["Authorization"] = "PVEAPIToken=root@pam!ansible=%s" % sim.token
    base = "%s/api2/json/nodes/%s" % (sim.server.url, node)
    upid = session.post("%s/qemu/%s/status/start" % (base, vmid), verify=sim.server.ca, timeout=30).json()["data"]
    return session.get("%s/tasks/%s/status" % (base, upid), verify=sim.server.ca, timeout=30).json()["data"]["exitstatus"]


# ------------------------------------------------------------------ point 1: iommugroup
def test_map_without_iommu_group_gets_it_from_the_hardware_and_the_vm_starts(pvesim):
    # The module's own example leaves iommu_group out; PVE's assert_valid then refused the VM start.
    res, dummy = pvesim.run("pve_pci_mapping", {"id": "a100b", "map": [{"node": "pve2", "path": ["0000:01:00.0"]}]})
    assert not res.get("failed"), res.get("msg")
    assert res["mapping"]["map"] == ["id=10de:20b5,iommugroup=10,node=pve2,path=0000:01:00.0,subsystem-id=10de:1533"]
    res, dummy = pvesim.run("pve_vm_gpu", {"vmid": 200, "gpus": [{"mapping": "a100b", "pcie": True}]})
    assert not res.get("failed"), res.get("msg")
    assert start_vm(pvesim, "pve2", 200) == "OK"


def test_build_from_without_iommu_group_fails_before_any_write(pvesim):
    args = {"id": "nogroup", "build_from": {"selector": "[?pci_id=='10de:20b5']", "nodes": ["pve1"], "with_iommu_group": False}}
    res, writes = pvesim.run("pve_pci_mapping", args)
    assert res.get("failed") and writes == 0
    assert "node pve1: device 0000:01:00.0 has iommugroup 1" in res["msg"] and "missing expected property 'iommugroup'" in res["msg"]
    assert "nogroup" not in pvesim.state()["mappings"]


def test_explicit_wrong_iommu_group_fails_naming_node_and_path(pvesim):
    res, writes = pvesim.run("pve_pci_mapping", {"id": "wronggroup", "map": [{"node": "pve2", "path": ["01:00.0"], "iommu_group": 7}]})
    assert res.get("failed") and writes == 0
    assert "node pve2: 'iommugroup' does not match for '0000:01:00.0' (10 != 7)" in res["msg"]


# ------------------------------------------------------------------ point 2: mdev both ways
def test_mdev_follows_the_hardware_when_not_given(pvesim):
    res, writes = pvesim.run("pve_pci_mapping", {"id": "vfs", "map": [{"node": "pve1", "path": ["41:00.4"]}]})
    assert not res.get("failed"), res.get("msg")
    assert res["mapping"]["mdev"] is True and int(pvesim.state()["mappings"]["vfs"]["mdev"]) == 1
    res, writes = pvesim.run("pve_pci_mapping", {"id": "plain", "map": [{"node": "pve2", "path": ["01:00.0"]}]})
    assert res["mapping"]["mdev"] is False


def test_mdev_false_on_an_mdev_capable_vf_fails_before_any_write(pvesim):
    res, writes = pvesim.run("pve_pci_mapping", {"id": "vfs", "mdev": False, "map": [{"node": "pve1", "path": ["41:00.4"]}]})
    assert res.get("failed") and writes == 0
    assert "'mdev' does not match for '0000:41:00.4': the mapping says no mdev, the device provides mediated devices" in res["msg"]


def test_mapping_mixing_mdev_capable_and_plain_devices_fails(pvesim):
    res, writes = pvesim.run("pve_pci_mapping", {"id": "mixed", "map": [{"node": "pve1", "path": ["41:00.4"]},
                                                                        {"node": "pve1", "path": ["01:00.0"]}]})
    assert res.get("failed") and writes == 0
    assert "mixes devices that provide mediated devices (pve1 0000:41:00.4)" in res["msg"]


def test_vm_gpu_refuses_a_mapping_without_mdev_on_mdev_capable_vfs(pvesim):
    pvesim.server.sim.mappings["vfwhole"] = {"map": ["node=pve1,path=0000:41:00.4,id=10de:26b9,subsystem-id=10de:1851,iommugroup=41"]}
    state0 = pvesim.state()
    res, writes = pvesim.run("pve_vm_gpu", {"vmid": 101, "gpus": [{"mapping": "vfwhole"}]})
    assert res.get("failed") and writes == 0 and pvesim.state() == state0
    assert "VM 101 on node pve1" in res["msg"] and "the mapping says no mdev, the device provides mediated devices" in res["msg"]


# ------------------------------------------------------------------ point 3: version-gated options
def test_pve_8_3_gets_no_live_migration_option_and_refuses_it_by_name(make_pvesim):
    old = make_pvesim(version="8.3.5")
    res, writes = old.run("pve_pci_mapping", {"id": "a100b", "map": [{"node": "pve2", "path": ["01:00.0"]}]})
    assert not res.get("failed"), res.get("msg")  # the old code sent live-migration-capable=0: HTTP 400
    assert writes == 1
    res, writes = old.run("pve_pci_mapping", {"id": "a100b", "live_migration_capable": False,
                                              "map": [{"node": "pve2", "path": ["01:00.0"]}]})
    assert not res.get("failed") and res["changed"] is False and writes == 0
    state0 = old.state()
    res, writes = old.run("pve_pci_mapping", {"id": "a100b", "live_migration_capable": True,
                                              "map": [{"node": "pve2", "path": ["01:00.0"]}]}, check=True)
    assert res.get("failed") and writes == 0 and old.state() == state0
    assert "'live-migration-capable' needs Proxmox VE 8.4 or newer" in res["msg"] and "the server runs 8.3.5" in res["msg"]
    new = make_pvesim(version="8.4.1")
    res, writes = new.run("pve_pci_mapping", {"id": "a100b", "live_migration_capable": True,
                                              "map": [{"node": "pve2", "path": ["01:00.0"]}]})
    assert not res.get("failed") and int(new.state()["mappings"]["a100b"]["live-migration-capable"]) == 1


def test_hostpci_driver_keep_needs_pve_9_1(make_pvesim):
    old = make_pvesim(version="9.0.10")
    res, writes = old.run("pve_vm_gpu", {"vmid": 200, "gpus": [{"mapping": "a100", "driver": "keep"}]})
    assert res.get("failed") and writes == 0
    assert "'driver' needs Proxmox VE 9.1 or newer" in res["msg"] and "9.0.10" in res["msg"] and "VM 200 on node pve2" in res["msg"]
    res, writes = old.run("pve_vm_gpu", {"vmid": 200, "gpus": [{"mapping": "a100", "driver": "vfio"}]})  # the default: not sent
    assert not res.get("failed"), res.get("msg")
    new = make_pvesim(version="9.1.1")
    res, writes = new.run("pve_vm_gpu", {"vmid": 200, "gpus": [{"mapping": "a100", "driver": "keep"}]})
    assert not res.get("failed") and new.state()["vms"]["200"]["config"]["hostpci0"] == "mapping=a100,driver=keep"


# ------------------------------------------------------------------ point 4: property strings
@pytest.mark.parametrize("module,args,text", [
    ("pve_pci_mapping", {"id": "dd", "map": [{"node": "pve2", "path": ["01:00.0"], "description": "left, top"}]},
     "description 'left, top' contains a comma"),
    ("pve_pci_mapping", {"id": "dd", "map": [{"node": "pve2", "path": ["01:00:00"]}]}, "invalid PCI address '01:00:00'"),
    ("pve_pci_mapping", {"id": "dd", "map": [{"node": "pve2", "path": ["01:00.0"], "pci_id": "10de:20b"}]}, "invalid id '10de:20b'"),
    ("pve_pci_mapping", {"id": "dd", "map": [{"node": "pve_2", "path": ["01:00.0"]}]}, "invalid node name 'pve_2'"),
    ("pve_pci_mapping", {"id": "dd\n", "map": [{"node": "pve2", "path": ["01:00.0"]}]}, "invalid mapping id 'dd\\n'"),
    ("pve_pci_mapping", {"id": "dd", "description": "x" * 4097, "map": [{"node": "pve2", "path": ["01:00.0"]}]},
     "at most 4096 characters (got 4097 characters)"),
    ("pve_vm_gpu", {"vmid": 200, "gpus": [{"mapping": "a100", "romfile": "../../etc/shadow"}]}, "invalid romfile '../../etc/shadow'"),
    ("pve_vm_gpu", {"vmid": 200, "gpus": [{"mapping": "a100\n"}]}, "invalid mapping id 'a100\\n'"),
])
def test_ambiguous_or_unstorable_input_is_refused_naming_the_value(pvesim, module, args, text):
    state0 = pvesim.state()
    res, writes = pvesim.run(module, args, token=False)
    assert res.get("failed"), res
    assert text in res["msg"], res["msg"]
    assert writes == 0 and pvesim.state() == state0


# ------------------------------------------------------------------ point 5: offline nodes
def test_offline_node_does_not_stop_work_on_the_online_ones(make_pvesim):
    sim = make_pvesim(offline=("pve2",))
    res, dummy = sim.run("pve_vm_gpu", {"vmid": 101, "gpus": [{"mapping": "a100"}]})  # no node given: /cluster/resources
    assert not res.get("failed"), res.get("msg")
    assert res["node"] == "pve1" and res["changed"] is True
    res, writes = sim.run("pve_vm_gpu", {"vmid": 200, "gpus": [{"mapping": "a100"}]})
    assert res.get("failed") and writes == 0 and res["msg"] == "node pve2 is offline, cannot change VM 200"
    res, dummy = sim.run("pve_gpu_info", {})
    assert not res.get("failed"), res.get("msg")
    assert sorted(res["nodes"]) == ["pve1"] and res["skipped_nodes"] == {"pve2": "offline"}
    res, dummy = sim.run("pve_gpu_info", {"nodes": ["pve2"]})
    assert res.get("failed") and "pve2 (offline)" in res["msg"]
    res, writes = sim.run("pve_pci_mapping", {"id": "p2", "map": [{"node": "pve2", "path": ["01:00.0"]}]})
    assert res.get("failed") and writes == 0 and "node pve2 is offline" in res["msg"]
    # a stored entry of the offline node is kept, and the online ones are still checked
    res, writes = sim.run("pve_pci_mapping", {"id": "a100", "description": "A100"})
    assert not res.get("failed"), res.get("msg")
    assert any("node pve2 is offline" in w for w in res.get("warnings", []))
    assert len(sim.state()["mappings"]["a100"]["map"]) == 2 and writes == 1


# ------------------------------------------------------------------ point 6: permissions
@pytest.mark.parametrize("vm_config,gpus,text", [
    # VM 102 holds a raw host= entry: a token may neither replace nor delete it
    ({}, [{"mapping": "a100"}], "hostpci0: replacing the existing entry has a raw host device 0000:02:00"),
    ({}, [], "hostpci0: deleting the existing entry has a raw host device 0000:02:00"),
    ({"hostpci0": ("102", "mapping=a100,romfile=vbios.rom")}, [{"mapping": "a100"}],
     "hostpci0: replacing the existing entry has a romfile vbios.rom"),
    ({"hostpci0": ("102", "mapping=a100")}, [{"mapping": "a100", "romfile": "vbios.rom"}], "hostpci0: the new entry has a romfile vbios.rom"),
])
def test_token_changes_of_root_only_entries_are_refused_before_any_write(make_pvesim, vm_config, gpus, text):
    sim = make_pvesim(**vm_config)
    state0 = sim.state()
    res, writes = sim.run("pve_vm_gpu", {"vmid": 102, "gpus": gpus})
    assert res.get("failed"), res
    assert text in res["msg"] and "root@pam with token ansible" in res["msg"] and "nothing changed" in res["msg"], res["msg"]
    assert writes == 0 and sim.state() == state0
    res, dummy = sim.run("pve_vm_gpu", {"vmid": 102, "gpus": gpus}, token=False)  # root@pam with its password may
    assert not res.get("failed"), res.get("msg")


def test_deletes_and_sets_go_in_one_call(pvesim):
    res, writes = pvesim.run("pve_vm_gpu", {"vmid": 102, "gpus": [{"mapping": "a100", "slot": 1}]}, token=False)
    assert not res.get("failed"), res.get("msg")
    assert res["set"] == {"hostpci1": "mapping=a100"} and res["deleted"] == ["hostpci0"] and writes == 1
