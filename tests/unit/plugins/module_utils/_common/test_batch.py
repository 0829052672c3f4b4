# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/module_utils/_common/batch.py: what the VM modules' batch forms share."""

from __future__ import annotations

import threading

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._common import batch


def test_invalid_message_names_each_vm_of_a_batch_and_keeps_a_single_problem_as_it_is():
    exc = batch.BatchInvalid(["VM 1: a", "VM 2: b"])
    assert batch.invalid_message(exc, True) == "2 VMs cannot be configured, nothing changed: VM 1: a; VM 2: b"
    assert batch.invalid_message(batch.BatchInvalid(["VM 1: a"]), True) == "VM 1: a"
    assert batch.invalid_message(exc, False) == "VM 1: a; VM 2: b"


def test_outcome_keeps_the_order_names_failures_and_skips():
    results = [{"vmid": 1, "changed": True}, {"vmid": 2, "changed": False, "failed": True, "msg": "VM 2: locked"},
               {"vmid": 3, "changed": False, "skipped": True, "msg": "not written"}]
    diffs = [{"before": {}, "after": {"a": 1}}, None, {"before": {}, "after": {}}]
    out, msg = batch.outcome(results, "vmid", lambda r: "VM %s" % r["vmid"], diffs)
    assert out["changed"] is True and out["failed_vms"] == [2] and out["vms"] is results
    assert [d["before_header"] for d in out["diff"]] == ["VM 1", "VM 3"]
    assert msg == "1 of 3 VMs failed: VM 2: locked; not started (stop_on_error): VMs 3"
    out, msg = batch.outcome(results[:1], "vmid", str)
    assert msg is None and "diff" not in out and out["failed_vms"] == []
    out, msg = batch.outcome(results[:2], "vmid", str)
    assert msg == "1 of 2 VMs failed: VM 2: locked; the other VMs are done"
    assert batch.outcome([], "vmid", str) == (dict(changed=False, vms=[], failed_vms=[], disruptions=[]), None)


def test_outcome_keeps_each_vms_disruptions_and_puts_all_of_them_first_in_the_diff():
    results = [{"vmid": 1, "changed": True, "disruptions": ["shut down VM 1", "start VM 1"]},
               {"vmid": 2, "changed": True, "disruptions": []},
               {"vmid": 3, "changed": True, "disruptions": ["shut down VM 3", "start VM 3"]}]
    diffs = [{"before": {"a": 0}, "after": {"a": 1}}, {"before": {}, "after": {"b": 1}}, {"before": {}, "after": {}}]
    out, msg = batch.outcome(results, "vmid", lambda r: "VM %s" % r["vmid"], diffs)
    assert msg is None
    # Per VM as each VM reported them; the task's list: all of them, in the task's order of the VMs.
    assert [r["disruptions"] for r in out["vms"]] == [["shut down VM 1", "start VM 1"], [], ["shut down VM 3", "start VM 3"]]
    assert out["disruptions"] == ["shut down VM 1", "start VM 1", "shut down VM 3", "start VM 3"]
    # ansible-core renders a diff list in order: the disruptions come first, in an entry of their own, then the VMs.
    assert out["diff"][0] == {"prepared": "Disruptive actions, in order:\n1. shut down VM 1\n2. start VM 1\n"
                                          "3. shut down VM 3\n4. start VM 3\n"}
    assert [d.get("before_header") for d in out["diff"][1:]] == ["VM 1", "VM 2", "VM 3"]
    assert out["diff"][1] == dict(diffs[0], before_header="VM 1", after_header="VM 1")
    # Without disruptions the batch diff is the list of the VMs' diffs, as before.
    quiet = [dict(r, disruptions=[]) for r in results]
    out, _msg = batch.outcome(quiet, "vmid", lambda r: "VM %s" % r["vmid"], diffs)
    assert out["disruptions"] == [] and [d["before_header"] for d in out["diff"]] == ["VM 1", "VM 2", "VM 3"]


def test_pool_map_returns_caught_errors_in_place_and_raises_the_others():
    seen, lock = {"now": 0, "max": 0}, threading.Lock()
    gate = threading.Barrier(3)

    def work(i):
        with lock:
            seen["now"] += 1
            seen["max"] = max(seen["max"], seen["now"])
        if i < 3:
            gate.wait(timeout=5)  # the first three must run together
        with lock:
            seen["now"] -= 1
        if i == 4:
            raise KeyError("expected")
        return i * 10

    out = batch.pool_map(work, list(range(6)), 3, (KeyError,))
    assert out[:4] == [0, 10, 20, 30] and isinstance(out[4], KeyError) and out[5] == 50
    assert seen["max"] == 3
    with pytest.raises(ZeroDivisionError):
        batch.pool_map(lambda i: 1 // i, [1, 0], 2, (KeyError,))
    assert batch.pool_map(lambda i: i, [1, 2], 1, ()) == [1, 2]
