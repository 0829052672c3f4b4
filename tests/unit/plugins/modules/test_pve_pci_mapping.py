# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""pve_pci_mapping module in-process against pvesim (lab/pvesim) without its HTTPS server (tests/helpers/pvesim_inproc)."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.gpuops.provision.plugins.modules import pve_pci_mapping

from pvesim_inproc import cluster, module_runner, use_pvesim, warning_texts, writes  # pylint: disable=import-error

A100_PVE1 = "id=10de:20b5,iommugroup=1,node=pve1,path=0000:01:00.0,subsystem-id=10de:1533"
A100_PVE2 = "id=10de:20b5,iommugroup=10,node=pve2,path=0000:01:00.0,subsystem-id=10de:1533"


@pytest.fixture
def sim(monkeypatch):
    return use_pvesim(monkeypatch, cluster())


@pytest.fixture
def run(run_module):
    return module_runner(run_module, pve_pci_mapping)


warnings = warning_texts


def stored(sim, mid):
    return copy.deepcopy(sim.mappings.get(mid))


def test_check_mode_reports_the_create_and_writes_nothing(sim, run):
    given = [{"node": "pve2", "path": ["01:00.0"]}, {"node": "pve1", "path": ["0000:01:00.0"]}]
    res = run({"id": "gpu", "description": "A100s", "map": given}, check_mode=True)
    assert res["changed"] is True and res["writes"] == 0, res
    assert writes(sim) == 0 and "gpu" not in sim.mappings
    # Entries filled in from the hardware (ids, subsystem, IOMMU group), sorted by node, canonical form.
    assert res["mapping"] == {"id": "gpu", "map": [A100_PVE1, A100_PVE2], "description": "A100s", "mdev": False,
                              "live_migration_capable": False}
    assert res["before"] is None
    assert res["diff"] == {"before": {}, "after": res["mapping"]}


def test_create_then_rerun_is_idempotent(sim, run):
    args = {"id": "gpu", "description": "A100s", "map": [{"node": "pve1", "path": ["01:00.0"]}, {"node": "pve2", "path": ["01:00.0"]}]}
    first = run(args)
    assert first["changed"] is True and first["writes"] == 1, first
    assert sorted(sim.mappings["gpu"]["map"]) == sorted([A100_PVE1, A100_PVE2])
    assert sim.mappings["gpu"]["description"] == "A100s"
    # Equivalent spelling (0x prefixes, upper case, other order) compares equal: no write.
    again = run({"id": "gpu", "description": "A100s", "map": [
        {"node": "pve2", "path": ["0000:01:00.0"], "pci_id": "0x10DE:0x20B5"}, {"node": "pve1", "path": ["01:00.0"]}]})
    assert again["changed"] is False and again["writes"] == 0, again
    assert writes(sim) == 1
    assert again["before"] == again["mapping"] == first["mapping"]
    assert again["diff"]["before"] == again["diff"]["after"]


def test_update_in_one_call_and_empty_description_deletes_it(sim, run):
    run({"id": "gpu", "description": "old", "map": [{"node": "pve1", "path": ["01:00.0"]}]})
    res = run({"id": "gpu", "description": "", "live_migration_capable": True})
    assert res["changed"] is True and res["writes"] == 1 and writes(sim) == 2, res
    assert res["before"]["description"] == "old" and res["mapping"]["description"] == ""
    assert res["mapping"]["map"] == [A100_PVE1]  # kept from the server when neither map nor build_from is given
    assert "description" not in sim.mappings["gpu"]
    assert str(sim.mappings["gpu"]["live-migration-capable"]) == "1"
    assert res["diff"]["before"]["live_migration_capable"] is False and res["diff"]["after"]["live_migration_capable"] is True


def test_absent_check_mode_then_delete_then_idempotent(sim, run):
    before = stored(sim, "a100")
    res = run({"id": "a100", "state": "absent"}, check_mode=True)
    assert res["changed"] is True and res["mapping"] is None and res["writes"] == 0
    assert res["before"]["map"] == [A100_PVE1, A100_PVE2]
    assert res["diff"] == {"before": res["before"], "after": {}}
    assert stored(sim, "a100") == before and writes(sim) == 0
    res = run({"id": "a100", "state": "absent"})
    assert res["changed"] is True and res["writes"] == 1 and "a100" not in sim.mappings
    res = run({"id": "a100", "state": "absent"})
    assert res["changed"] is False and res["writes"] == 0 and res["before"] is None


def test_build_from_vf_pool_follows_the_hardware_mdev(sim, run):
    res = run({"id": "pool", "build_from": {"selector": "[?pci_id=='10de:26b9'].vfs[]", "nodes": ["pve1"]}})
    assert res["changed"] is True, res
    assert res["mapping"]["mdev"] is True  # the VFs provide mediated devices: PVE 8.4+ wants mdev=1
    assert res["mapping"]["map"] == ["id=10de:26b9,iommugroup=41,node=pve1,path=0000:41:00.4,subsystem-id=10de:1851",
                                     "id=10de:26b9,iommugroup=42,node=pve1,path=0000:41:00.5,subsystem-id=10de:1851"]
    assert str(sim.mappings["pool"]["mdev"]) == "1"
    assert run({"id": "pool", "build_from": {"selector": "[?pci_id=='10de:26b9'].vfs[]", "nodes": ["pve1"]}})["changed"] is False


def test_offline_node_entry_is_kept_with_a_warning(monkeypatch, run):
    sim = use_pvesim(monkeypatch, cluster(pve2_status="offline"))
    res = run({"id": "a100", "description": "kept"})
    assert res["changed"] is True, res
    assert res["mapping"]["map"] == [A100_PVE1, A100_PVE2]
    assert warnings(res) == ["mapping a100: node pve2 is offline; its entry %s was not checked against the hardware" % A100_PVE2]
    assert sim.mappings["a100"]["description"] == "kept"


def fails(sim, res, *parts):
    """The run failed with a message holding every part, and pvesim saw no write."""
    assert res.get("failed") is True, res
    for part in parts:
        assert part in res["msg"], (part, res["msg"])
    assert writes(sim) == 0


@pytest.mark.parametrize("args, parts", [
    ({"id": "9bad", "map": [{"node": "pve1", "path": ["01:00.0"]}]}, ["invalid mapping id '9bad'"]),
    ({"id": "gpu", "description": "a\nb", "map": [{"node": "pve1", "path": ["01:00.0"]}]},
     ["mapping gpu: description must be one line", "with a line break"]),
    ({"id": "gpu", "map": [{"node": "pve1", "path": ["01:00.0"], "iommu_group": -2}]},
     ["mapping gpu: node pve1: map entry iommu_group", "nothing changed"]),
    ({"id": "gpu", "map": [{"node": "pve2", "path": ["0000:09:00.0"]}]}, ["mapping gpu: node pve2 has no PCI device 0000:09:00.0"]),
    ({"id": "gpu", "map": [{"node": "pve9", "path": ["01:00.0"]}]}, ["mapping gpu: unknown node pve9"]),
    ({"id": "gpu", "map": [{"node": "pve1", "path": ["01:00.0"], "pci_id": "10de:2330"}]},
     ["mapping gpu does not match the hardware, nothing changed", "node pve1", "10de:2330"]),
    ({"id": "gpu", "map": [{"node": "pve1", "path": ["01:00.0"]}, {"node": "pve1", "path": ["0000:01:00.0"]}]},
     ["mapping gpu lists the same device more than once (node pve1 path 0000:01:00.0)", "nothing changed"]),
    ({"id": "gpu", "map": [{"node": "pve1", "path": ["01:00.0", "0000:01:00.0"]}]},
     ["mapping gpu: node pve1: path 0000:01:00.0;0000:01:00.0 names function 0000:01:00.0 more than once"]),
    ({"id": "gpu", "map": [{"node": "pve1", "path": ["0000:41:00.4"]}, {"node": "pve1", "path": ["0000:03:00.0"]}]},
     ["mapping gpu mixes devices that provide mediated devices (pve1 0000:41:00.4)", "(pve1 0000:03:00.0)", "nothing changed"]),
    ({"id": "gpu"}, ["mapping gpu does not exist; give map or build_from to create it"]),
    ({"id": "gpu", "build_from": {"selector": "[?pci_id=='ffff:ffff']"}}, ["selects no device on node(s) pve1, pve2"]),
    ({"id": "gpu", "build_from": {"selector": "[?"}}, ["build_from.selector '[?' is not a valid JMESPath expression"]),
    ({"id": "gpu", "build_from": {"selector": "[].id"}}, ["build_from.selector must return device facts"]),
    ({"id": "gpu", "build_from": {"selector": "[?pci_id=='10de:1eb8']", "nodes": []}},
     ["mapping gpu: build_from.nodes is an empty list, which selects no node"]),
    ({"id": "gpu", "build_from": {"selector": "[?pci_id=='10de:1eb8']", "with_iommu_group": False}},
     ["mapping gpu: node pve1: device 0000:03:00.0 has iommugroup 3; build_from.with_iommu_group=false", "nothing changed"]),
])
def test_bad_input_fails_naming_host_device_and_reason_and_writes_nothing(sim, run, args, parts):
    before = copy.deepcopy(sim.mappings)
    fails(sim, run(args), *parts)
    assert sim.mappings == before


def test_offline_node_given_in_map_fails_naming_it(monkeypatch, run):
    sim = use_pvesim(monkeypatch, cluster(pve2_status="offline"))
    fails(sim, run({"id": "gpu", "map": [{"node": "pve2", "path": ["01:00.0"]}]}),
          "mapping gpu: node pve2 is offline, cannot read its PCI devices for mapping gpu")


def test_option_the_server_lacks_fails_naming_both_versions(monkeypatch, run):
    sim = use_pvesim(monkeypatch, cluster(version="8.3.2"))
    res = run({"id": "gpu", "live_migration_capable": True, "map": [{"node": "pve1", "path": ["01:00.0"]}]}, check_mode=True)
    fails(sim, res, "mapping gpu: live_migration_capable: 'live-migration-capable' needs Proxmox VE 8.4 or newer",
          "the server runs 8.3.2; nothing changed")
    # false is what an old server does anyway: not sent, and the create goes through.
    res = run({"id": "gpu", "live_migration_capable": False, "map": [{"node": "pve1", "path": ["01:00.0"]}]})
    assert res["changed"] is True and "live-migration-capable" not in sim.mappings["gpu"], res


def test_validate_hardware_false_writes_what_was_given(sim, run):
    res = run({"id": "gpu", "validate_hardware": False, "map": [{"node": "pve1", "path": ["01:00.0"], "pci_id": "10de:2330"}]})
    assert res["changed"] is True, res
    assert res["mapping"]["map"] == ["id=10de:2330,iommugroup=1,node=pve1,path=0000:01:00.0,subsystem-id=10de:1533"]
    assert sim.mappings["gpu"]["map"] == res["mapping"]["map"]


def test_a_path_that_is_not_an_nvidia_gpu_is_refused_unless_the_item_says_so(sim, run):
    # issue 39 point 4: a typo mapped an NVMe controller with no warning. 0000:04:00.0 of pve1 is an Intel NIC.
    res = run({"id": "gpu", "map": [{"node": "pve1", "path": ["04:00.0"]}]})
    assert res["failed"] is True and writes(sim) == 0, res
    assert res["msg"] == ("mapping gpu: node pve1: path 0000:04:00.0 is not an NVIDIA GPU: 0000:04:00.0 (class 0x020000, "
                          "8086:1533); a typo? Set allow_non_gpu: true on this map item to map other devices; nothing changed")
    res = run({"id": "nic", "map": [{"node": "pve1", "path": ["04:00.0"], "allow_non_gpu": True}], "validate_hardware": False},
              check_mode=True)
    assert res.get("failed") is not True and res["changed"] is True, res


def test_absent_refuses_a_mapping_that_vms_use_unless_forced(monkeypatch, run):
    # issue 39 point 7: a deleted mapping leaves its VMs unable to start ("PCI device mapping not found").
    fx = cluster(pve2_status="offline")
    fx["vms"]["102"]["config"]["hostpci1"] = "mapping=a100,pcie=1"
    fx["vms"]["101"]["pending"] = {"hostpci0": "mapping=a100"}  # its next start uses it too
    sim = use_pvesim(monkeypatch, fx)
    for check_mode in (True, False):
        res = run({"id": "a100", "state": "absent"}, check_mode=check_mode)
        assert res["failed"] is True and writes(sim) == 0 and "a100" in sim.mappings, res
        assert res["msg"] == ("mapping a100 is used by VM 101 on pve1 (hostpci0), VM 102 on pve1 (hostpci1); without it "
                              "they cannot start (\"PCI device mapping not found\"); remove it from their hostpci entries "
                              "first, or set force: true; nothing changed")
        assert res["users"] == ["VM 101 on pve1 (hostpci0)", "VM 102 on pve1 (hostpci1)"]
    res = run({"id": "a100", "state": "absent", "force": True})
    assert res["changed"] is True and "a100" not in sim.mappings, res
    res = run({"id": "l40s-vgpu", "state": "absent"})
    assert res["changed"] is True and warnings(res) == [
        "mapping l40s-vgpu: node pve2 is offline; its VMs were not checked for the mapping before the delete"], res


@pytest.mark.parametrize("args,where", [
    ({"description": "GPU\x07 pool"}, "description holds control characters ('\\x07')"),
    ({"map": [{"node": "pve1", "path": ["01:00.0"], "description": "a\x1bb\x7f"}]},
     "map[0].description holds control characters ('\\x1b', '\\x7f')"),
])
def test_control_characters_in_descriptions_name_the_option(sim, run, args, where):
    # issue 39 point 9 (a NUL byte still fails earlier, in ansible-core's own syslog logging of the arguments)
    res = run(dict({"id": "gpu", "map": [{"node": "pve1", "path": ["01:00.0"]}]}, **args))
    assert res["failed"] is True and writes(sim) == 0, res
    assert res["msg"] == "mapping gpu: %s, which a Proxmox VE config file cannot keep; nothing changed" % where


def test_a_malformed_ca_path_names_the_option(sim, run, tmp_path):
    bad = tmp_path / "ca.pem"
    bad.write_text("-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n")
    for path in (str(bad), str(tmp_path / "missing.pem")):
        res = run({"id": "gpu", "state": "absent", "ca_path": path})
        assert res["failed"] is True and writes(sim) == 0, res
        assert res["msg"].startswith("mapping gpu: pve.test: ca_path %s cannot be used as the CA to verify the server with (" % path), res
        assert res["msg"].endswith("give a PEM file of the CA certificate(s); nothing was sent"), res
