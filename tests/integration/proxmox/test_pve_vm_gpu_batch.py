"""pve_vm_gpu's batch form (issue 16 point 1) in-process against pvesim: one session for many VMs, every VM checked
before the first write, bounded concurrency, per-VM results and diffs, partial failure."""

from __future__ import annotations

import copy
import json

import pytest

from ansible_collections.gpuops.provision.plugins.modules import pve_vm_gpu

from .conftest import FIXTURE, Server

A100 = [{"mapping": "a100", "pcie": True}]


def fixture(extra=8, task_seconds=0.0, **vm_conf):
    """The Proxmox tests' cluster plus ``extra`` stopped q35 VMs 300.. on pve1 (and 400.. on pve2)."""
    data = copy.deepcopy(FIXTURE)
    for i in range(extra):
        for base, node in ((300, "pve1"), (400, "pve2")):
            conf = {"name": "pool%d" % (base + i), "machine": "q35", "bios": "ovmf"}
            data["vms"][str(base + i)] = {"node": node, "status": "stopped", "config": conf}
    for vmid, conf in vm_conf.items():
        data["vms"][vmid.lstrip("vm")]["config"].update(conf)
    data["task_seconds"] = task_seconds
    return data


@pytest.fixture
def sim(tmp_path):
    started = []

    def start(data):
        server = Server(data, run_dir=str(tmp_path / ("pvesim%d" % len(started))), host="127.0.0.1", port=0).start()
        started.append(server)
        root = data.get("users", {}).get("root@pam", {"password": "pvesim", "tokens": {"ansible": "pvesim-token"}})
        auth = dict(api_host="127.0.0.1", api_port=server.port, api_user="root@pam", api_token_id="ansible",
                    api_token_secret=root["tokens"]["ansible"], ca_path=server.ca)
        return server, auth

    yield start
    for server in started:
        server.stop()


def state(server):
    return json.loads(json.dumps(server.sim.dump(), sort_keys=True))


def hostpci(server, vmid):
    conf = state(server)["vms"][str(vmid)]["config"]
    return {k: v for k, v in conf.items() if k.startswith("hostpci")}


def pool(*vmids, gpus=None):
    return [{"vmid": v, "gpus": A100 if gpus is None else gpus} for v in vmids]


def test_batch_writes_each_vm_once_then_rerun_writes_nothing(sim, run_module):
    server, auth = sim(fixture())
    vms = pool(*range(300, 308), *range(400, 408))
    res = run_module(pve_vm_gpu, dict(auth, vms=vms))
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] is True and res["writes"] == 16 and res["failed_vms"] == []
    assert [r["vmid"] for r in res["vms"]] == [v["vmid"] for v in vms]  # the task's order, whatever finished first
    assert {r["node"] for r in res["vms"][:8]} == {"pve1"} and {r["node"] for r in res["vms"][8:]} == {"pve2"}
    assert all(r["changed"] and r["writes"] == 1 and r["set"] == {"hostpci0": "mapping=a100,pcie=1"} for r in res["vms"])
    assert all(hostpci(server, v["vmid"]) == {"hostpci0": "mapping=a100,pcie=1"} for v in vms)

    again = run_module(pve_vm_gpu, dict(auth, vms=vms))
    assert again["changed"] is False and again["writes"] == 0
    assert not any(r["changed"] for r in again["vms"])


def test_batch_check_mode_gives_a_diff_per_vm_and_writes_nothing(sim, run_module):
    server, auth = sim(fixture(extra=2, vm102={"hostpci0": "mapping=a100,pcie=1"}))
    before = state(server)
    res = run_module(pve_vm_gpu, dict(auth, vms=pool(300, 400) + [{"vmid": 102, "gpus": []}]), check_mode=True)
    assert res["changed"] is True and res["writes"] == 0 and state(server) == before
    assert [d["before_header"] for d in res["diff"]] == ["VM 300 on pve1", "VM 400 on pve2", "VM 102 on pve1"]
    assert res["diff"][0]["after"] == {"hostpci0": "mapping=a100,pcie=1"} and res["diff"][0]["before"] == {}
    assert res["diff"][2] == dict(before={"hostpci0": "mapping=a100,pcie=1"}, after={},
                                  before_header="VM 102 on pve1", after_header="VM 102 on pve1")


def test_one_invalid_vm_fails_the_batch_before_any_write_and_is_named(sim, run_module):
    server, auth = sim(fixture(extra=4))
    before = state(server)
    # VM 101 is i440fx: pcie=1 cannot work there. VM 999 does not exist. The others are fine.
    vms = pool(300, 301, 101, 302) + pool(999)
    res = run_module(pve_vm_gpu, dict(auth, vms=vms))
    assert res["failed"] is True and state(server) == before
    assert res["msg"].startswith("2 VMs cannot be configured, nothing changed")
    assert "VM 101 on node pve1: hostpci0 (mapping=a100,pcie=1): pcie=1 needs the q35 machine type" in res["msg"]
    assert "VM 999 not found on any node" in res["msg"]
    assert len(res["problems"]) == 2 and "300" not in res["msg"]


def test_a_failed_write_leaves_that_vm_as_it_was_and_the_others_done(sim, run_module):
    # A backup holds VM 302's lock: PVE's update_vm_api refuses its config (check_lock), which the plan cannot know.
    server, auth = sim(fixture(extra=5, vm302={"lock": "backup"}))
    res = run_module(pve_vm_gpu, dict(auth, vms=pool(*range(300, 305)), max_concurrent=2))
    assert res["failed"] is True and res["failed_vms"] == [302]
    assert "VM is locked (backup)" in res["msg"] and "the other VMs are done" in res["msg"]
    bad = res["vms"][2]
    assert bad["vmid"] == 302 and bad["failed"] and bad["changed"] is False and bad["hostpci"] == {}
    assert hostpci(server, 302) == {}
    for vmid in (300, 301, 303, 304):
        assert hostpci(server, vmid) == {"hostpci0": "mapping=a100,pcie=1"}
    assert [r["changed"] for r in res["vms"]] == [True, True, False, True, True]


def test_stop_on_error_starts_no_write_after_the_failure(sim, run_module):
    server, auth = sim(fixture(extra=5, vm302={"lock": "backup"}))
    res = run_module(pve_vm_gpu, dict(auth, vms=pool(*range(300, 305)), max_concurrent=1, stop_on_error=True))
    assert res["failed"] is True and res["failed_vms"] == [302]
    assert "not started (stop_on_error): VMs 303, 304" in res["msg"]
    assert [r.get("skipped", False) for r in res["vms"]] == [False, False, False, True, True]
    assert all(r["hostpci"] == {} and r["set"] == {} and not r["changed"] for r in res["vms"][3:])
    assert [bool(hostpci(server, v)) for v in range(300, 305)] == [True, True, False, False, False]


@pytest.mark.parametrize("workers, low, high", [(1, 1, 1), (4, 2, 4)])
def test_writes_run_at_most_max_concurrent_at_a_time(sim, run_module, workers, low, high):
    # Each config task takes 0.4 s (pvesim task_seconds); the tasks' own start/end times show how many overlapped.
    server, auth = sim(fixture(task_seconds=0.4))
    res = run_module(pve_vm_gpu, dict(auth, vms=pool(*range(300, 308)), max_concurrent=workers))
    assert not res.get("failed"), res.get("msg")
    tasks = [t for t in server.sim.tasks.values() if t["type"] == "qmconfig"]
    assert len(tasks) == 8
    spans = [(t["end"] - 0.4, t["end"]) for t in tasks]
    overlap = max(sum(1 for s, e in spans if s <= start < e) for start, dummy in spans)
    assert low <= overlap <= high


def test_empty_batch_selects_nothing(sim, run_module):
    server, auth = sim(fixture(extra=0))
    before = state(server)
    res = run_module(pve_vm_gpu, dict(auth, vms=[]))
    assert res["changed"] is False and res["vms"] == [] and res["writes"] == 0 and state(server) == before


@pytest.mark.parametrize("args, words", [
    ({"vms": pool(300, 300)}, ["VM 300 is listed twice", "nothing changed"]),
    ({"vms": [{"vmid": 300, "gpus": A100, "timeout": 0}]}, ["vms[vmid=300]: timeout=0 is out of range"]),
    ({"vms": [{"vmid": 99, "gpus": A100}]}, ["vms[vmid=99]: vmid=99 is out of range"]),
    ({"vms": pool(300), "max_concurrent": 0}, ["max_concurrent=0 is out of range"]),
    ({"vms": pool(300), "vmid": 300}, ["mutually exclusive", "vmid|vms"]),
    ({"vmid": 300}, ["gpus"]),
    ({"gpus": A100}, ["one of the following is required: vmid, vms"]),
])
def test_batch_bad_input_is_refused_before_any_call(sim, run_module, args, words):
    server, auth = sim(fixture(extra=1))
    before = state(server)
    res = run_module(pve_vm_gpu, dict(auth, **args))
    assert res["failed"] is True and state(server) == before
    for word in words:
        assert word in res["msg"], res["msg"]
