# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A roll as a reconcile from the live cluster (plugins/module_utils/_k8s/node_roll.py): each node's state on the node,
the budget recounted per node as k8s-operator-libs' GetUpgradesAvailable does, the order of the queue, and the pods
a drain evicts as kubectl drain's filters choose them."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._k8s import node_roll as R

ROLL = "mig_reconfigure"
M3G = "nvidia.com/mig-3g.40gb"


def node(name, unschedulable=False, ready=True, phase=None, roll=ROLL, ours_cordon=False, initial=None, rv="7",
         gpus=None, target="all-balanced", failed_at=None):
    notes = {}
    if phase:
        notes.update({R.ROLL: roll, R.PHASE: phase, R.TARGET: target})
    if failed_at is not None:
        notes[R.FAILED_AT] = failed_at
    if ours_cordon:
        notes[R.CORDONED_BY] = "gpuops.provision"
    if initial is not None:
        notes[R.INITIAL] = initial if isinstance(initial, str) else json.dumps(initial)
    return {"metadata": {"name": name, "resourceVersion": rv, "annotations": notes, "labels": {}},
            "spec": {"unschedulable": True} if unschedulable else {},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                       "allocatable": dict(gpus or {})}}


def advertised(n):
    return n["status"]["allocatable"]


def decide(nodes, me, slots=(), limits=None, **kwargs):
    limits = dict({"max_parallel": 1, "max_unavailable": None, "max_failures": 0, "floors": {}}, **(limits or {}))
    return R.slot_decision(nodes, [n["metadata"]["name"] for n in nodes], slots, me, ROLL, limits, advertised, **kwargs)


# ---- a node's state ---------------------------------------------------------------------------------------------

def test_state_reads_the_roll_annotations_and_who_cordoned_the_node():
    st = R.state(node("a", unschedulable=True, phase="drained", ours_cordon=True, initial={"unschedulable": False}), ROLL)
    assert st == {"name": "a", "roll": ROLL, "target": "all-balanced", "phase": "drained", "ours": True,
                  "cordoned_by_us": True, "unschedulable": True, "ready": True, "was_cordoned": False,
                  "initial": {"unschedulable": False}, "failed_at": None}
    # Another roll's phase is not this roll's to finish; with no roll named, any of ours counts.
    assert R.state(node("a", phase="drained", roll="nvidia_driver"), ROLL)["ours"] is False
    assert R.state(node("a", phase="drained", roll="nvidia_driver"))["ours"] is True
    assert R.state(node("a"), ROLL)["ours"] is False and R.state(node("a"), ROLL)["phase"] == ""


def test_an_operator_cordon_is_told_from_ours_and_the_recorded_initial_state_wins():
    # Cordoned, no annotation of ours: an operator's.
    assert R.state(node("a", unschedulable=True), ROLL)["was_cordoned"] is True
    # Our cordon annotation: ours.
    assert R.state(node("a", unschedulable=True, ours_cordon=True), ROLL)["was_cordoned"] is False
    # The state recorded when the roll took the node wins over what the node shows now.
    assert R.state(node("a", unschedulable=True, initial={"unschedulable": True}, ours_cordon=True), ROLL)["was_cordoned"] is True
    assert R.state(node("a", unschedulable=True, initial={"unschedulable": False}), ROLL)["was_cordoned"] is False
    # Unreadable records are ignored rather than trusted.
    for bad in ("not json", "[1]"):
        st = R.state(node("a", unschedulable=True, initial=bad), ROLL)
        assert st["initial"] == {} and st["was_cordoned"] is True


def test_ready_needs_a_true_ready_condition():
    assert R.ready(node("a")) is True
    assert R.ready(node("a", ready=False)) is False
    assert R.ready({"status": {"conditions": [{"type": "MemoryPressure", "status": "True"}]}}) is False
    assert R.ready(None) is False


@pytest.mark.parametrize("phase, resume", [("", ""), ("released", ""), ("cordoned", "cordoned"), ("drained", "drained"),
                                           ("applied", "applied"), ("failed", "failed")])
def test_a_node_left_in_a_phase_of_ours_is_resumed(phase, resume):
    assert R.resume_from(R.state(node("a", phase=phase or None), ROLL), "all-balanced") == resume
    # Another roll's phase is not resumed by this one.
    assert R.resume_from(R.state(node("a", phase=phase or None, roll="other"), ROLL), "x") == ""


def test_the_cordon_patch_records_the_state_before_the_roll_once_and_carries_the_version():
    body = R.cordon_patch(node("a", rv="41"), ROLL, "all-3g", "gpuops.provision mig_reconfigure", {"x": "1"})
    assert body == {"metadata": {"annotations": {R.ROLL: ROLL, R.TARGET: "all-3g", R.PHASE: "cordoned",
                                                 R.INITIAL: '{"unschedulable": false}',
                                                 R.CORDONED_BY: "gpuops.provision mig_reconfigure"},
                                 "resourceVersion": "41", "labels": {"x": "1"}},
                    "spec": {"unschedulable": True}}
    # An operator's cordon: recorded, and no cordon annotation of ours (so it stays after the roll).
    body = R.cordon_patch(node("a", unschedulable=True), ROLL, "t", "r")
    assert body["metadata"]["annotations"][R.INITIAL] == '{"unschedulable": true}'
    assert R.CORDONED_BY not in body["metadata"]["annotations"] and "labels" not in body["metadata"]
    assert "spec" not in body  # cordoned already: not cordoned again
    # A second cordon by a later run keeps the first record (the node is cordoned by us by then).
    again = node("a", unschedulable=True, phase="cordoned", ours_cordon=True, initial={"unschedulable": False})
    body = R.cordon_patch(again, ROLL, "t", "r")
    assert R.INITIAL not in body["metadata"]["annotations"] and body["metadata"]["annotations"][R.CORDONED_BY] == "r"
    assert "spec" not in body


def test_values_written_to_the_node_are_bounded():
    with pytest.raises(R.RollStateError, match=r"^target is 1025 characters long, at most 1024 are written to the node$"):
        R.cordon_patch(node("a"), ROLL, "x" * 1025, "r")
    assert R.cordon_patch(node("a"), ROLL, "x" * 1024, "r")["metadata"]["annotations"][R.TARGET] == "x" * 1024


def test_release_uncordons_only_our_cordon_and_clears_our_annotations():
    ours = node("a", unschedulable=True, phase="applied", ours_cordon=True, initial={"unschedulable": False})
    assert R.release_patch(ours, ROLL) == {
        "metadata": {"annotations": {R.PHASE: "released", R.CORDONED_BY: None, R.INITIAL: None, R.FAILED_AT: None}},
        "spec": {"unschedulable": False}}
    operators = node("a", unschedulable=True, phase="applied", initial={"unschedulable": True})
    assert "spec" not in R.release_patch(operators, ROLL)
    assert "spec" not in R.release_patch(node("a", phase="applied"), ROLL)  # not cordoned at all


def test_a_failed_node_is_left_cordoned_or_uncordoned_but_an_operators_cordon_stays():
    ours = node("a", unschedulable=True, phase="drained", ours_cordon=True, initial={"unschedulable": False})
    assert R.failed_patch(ours, ROLL, "cordoned", 1733390000.25) == {
        "metadata": {"annotations": {R.PHASE: "failed", R.FAILED_AT: "1733390000.250"}}}
    assert R.failed_patch(ours, ROLL, "uncordoned", 5) == {
        "metadata": {"annotations": {R.PHASE: "failed", R.FAILED_AT: "5.000", R.CORDONED_BY: None}},
        "spec": {"unschedulable": False}}
    operators = node("a", unschedulable=True, phase="drained", initial={"unschedulable": True})
    assert "spec" not in R.failed_patch(operators, ROLL, "uncordoned", 5)
    with pytest.raises(R.RollStateError, match=r"^a failed node is left cordoned or uncordoned, got 'gone'$"):
        R.failed_patch(ours, ROLL, "gone", 5)
    # The time reads back; one that does not parse reads as unknown.
    assert R.state(node("a", phase="failed", failed_at="1733390000.250"), ROLL)["failed_at"] == 1733390000.25
    assert R.state(node("a", phase="failed", failed_at="soon"), ROLL)["failed_at"] is None
    assert R.state(node("a", phase="failed"), ROLL)["failed_at"] is None


def test_phase_patch_takes_only_known_phases():
    assert R.phase_patch("drained") == {"metadata": {"annotations": {R.PHASE: "drained"}}}
    with pytest.raises(R.RollStateError, match=r"^phase must be one of cordoned, drained, applied, released, failed, got 'x'$"):
        R.phase_patch("x")


# ---- the budget, recounted per node -----------------------------------------------------------------------------

def test_issue_45_after_a_failure_the_next_node_is_not_taken_beyond_the_budget():
    # 4 nodes, max_unavailable 1, max_failures 1, floor 6 (each node advertises 2): the first node failed and is left
    # cordoned. The plan-time waves took the second node anyway (2 unavailable, capacity 4); the recount must not.
    nodes = [node("n1", unschedulable=True, ours_cordon=True, phase="failed", gpus={M3G: 2})] + \
        [node("n%d" % i, gpus={M3G: 2}) for i in (2, 3, 4)]
    d = decide(nodes, "n2", limits={"max_unavailable": 1, "max_failures": 1, "floors": {M3G: 6}})
    assert d["take"] is False and d["spent"] is False
    assert d["reasons"] == ["max_unavailable 1: 2 node(s) would be unavailable (n1, n2)",
                            "capacity floor: nvidia.com/mig-3g.40gb would drop to 4 schedulable, floor 6"]
    # No other node is in progress (a failed node is not): waiting would free nothing.
    assert d["wait"] is False
    assert d["counts"] == {"in_progress": [], "unavailable": ["n1"], "failed": ["n1"]}


def test_a_failed_node_counts_as_unavailable_even_uncordoned_and_spends_the_failure_budget():
    nodes = [node("n1", phase="failed"), node("n2"), node("n3")]
    assert decide(nodes, "n2", limits={"max_unavailable": 1, "max_failures": 1})["reasons"] == [
        "max_unavailable 1: 2 node(s) would be unavailable (n1, n2)"]
    d = decide(nodes, "n2", limits={"max_failures": 0})
    assert d == {"take": False, "held": False, "wait": False, "spent": True,
                 "counts": {"in_progress": [], "unavailable": ["n1"], "failed": ["n1"]},
                 "reasons": ["the roll's failure budget is spent: 1 node(s) failed (n1), more than max_failures 0"]}
    # A failed node does not hold one of max_parallel's places: no work is in progress on it.
    assert decide(nodes, "n2", limits={"max_failures": 1, "max_parallel": 1})["take"] is True
    # A node's own earlier failure does not spend the budget for itself (a run finishing it).
    assert decide([node("n1", phase="failed"), node("n2")], "n1", limits={"max_failures": 0})["take"] is True


def test_a_node_an_earlier_run_failed_spends_no_budget_of_the_run_that_retries_it():
    # molecule/driver_roll: drv-node-2 failed in the first run; in the second, drv-node-3 must go on after drv-node-2,
    # not stop because of the first run's failure - also in the moment between drv-node-2 taking its slot and its
    # cordon PATCH (phase still failed).
    def nodes(failed_at):
        return [node("n1"), node("n2", unschedulable=True, ours_cordon=True, phase="failed", failed_at=failed_at),
                node("n3")]
    lease_taken = 2000.0
    for passed in ([], ["n2"]):
        d = decide(nodes("1000.000"), "n3", limits={"max_failures": 0, "max_parallel": 0}, queue=["n2", "n3"],
                   passed=passed, since=lease_taken)
        assert d["spent"] is False and d["counts"]["failed"] == [] and d["counts"]["unavailable"] == ["n2"]
        assert d["take"] is (passed == ["n2"])
    # Retaken with a slot by this run, before its cordon PATCH (phase still failed): in progress, so with
    # max_parallel 1 the next node waits for it (the driver roll's second run cordoned drv-node-3 beside drv-node-2).
    d = decide(nodes("1000.000"), "n3", slots=["n2"], limits={"max_failures": 0, "max_parallel": 1},
               queue=["n2", "n3"], passed=["n2"], since=lease_taken)
    assert (d["take"], d["wait"], d["counts"]["in_progress"]) == (False, True, ["n2"])
    assert d["reasons"] == ["max_parallel 1: 1 node(s) in progress (n2)"]
    # Failed in this run and holding its slot: no work in progress on it, so it holds no max_parallel place.
    assert decide(nodes("2500.000"), "n3", slots=["n2"], limits={"max_failures": 1, "max_parallel": 1},
                  queue=["n2", "n3"], passed=["n2"], since=lease_taken)["take"] is True
    # Without a recorded time (a failure an older version left) it cannot be dated: it counts, as before.
    assert decide(nodes(None), "n3", limits={"max_failures": 0}, queue=["n2", "n3"], passed=["n2"],
                  since=lease_taken)["spent"] is True
    # Failed again in this run (after the Lease was taken): it counts.
    d = decide(nodes("2500.000"), "n3", limits={"max_failures": 0}, queue=["n2", "n3"], passed=["n2"], since=lease_taken)
    assert d["spent"] is True and d["counts"]["failed"] == ["n2"]
    # Also outside this run's queue of changing nodes (molecule/driver_roll: drv-node-2 was on the pin already; the
    # run finds it unfinished from its annotations).
    assert decide(nodes("1000.000"), "n3", limits={"max_failures": 0}, queue=["n3"], since=lease_taken)["take"] is True
    # A stalled queue: it may never come, so it counts.
    assert decide(nodes("1000.000"), "n3", limits={"max_failures": 0}, queue=["n2", "n3"], stalled=True,
                  since=lease_taken)["spent"] is True
    # No Lease time known: no failure is known to be an earlier run's.
    assert decide(nodes("1000.000"), "n3", limits={"max_failures": 0}, queue=["n2", "n3"], passed=["n2"])["spent"] is True
    # It still counts as unavailable meanwhile.
    d = decide(nodes("1000.000"), "n1", limits={"max_unavailable": 1}, queue=["n1", "n2"], since=lease_taken)
    assert d["reasons"] == ["max_unavailable 1: 2 node(s) would be unavailable (n1, n2)"]


def test_cordoned_and_not_ready_nodes_count_against_max_unavailable_as_the_gpu_operator_counts_them():
    nodes = [node("n1", unschedulable=True), node("n2", ready=False), node("n3"), node("n4")]
    assert decide(nodes, "n3", limits={"max_unavailable": 3})["take"] is True
    d = decide(nodes, "n3", limits={"max_unavailable": 2})
    assert d["take"] is False and d["reasons"] == ["max_unavailable 2: 3 node(s) would be unavailable (n1, n2, n3)"]
    # A node that is already unavailable adds nothing by going.
    assert decide(nodes, "n1", limits={"max_unavailable": 2})["take"] is True
    # Untargeted nodes do not count.
    d = R.slot_decision(nodes, ["n3", "n4"], [], "n3", ROLL, {"max_unavailable": 1, "max_parallel": 1}, advertised)
    assert d["take"] is True


def test_max_parallel_counts_slots_and_nodes_in_a_phase_of_ours_and_waiting_helps_then():
    nodes = [node("n1", unschedulable=True, ours_cordon=True, phase="drained"), node("n2"), node("n3")]
    d = decide(nodes, "n2", limits={"max_parallel": 1})
    assert d["take"] is False and d["wait"] is True
    assert d["reasons"] == ["max_parallel 1: 1 node(s) in progress (n1)"]
    assert decide(nodes, "n2", limits={"max_parallel": 2})["take"] is True
    assert decide(nodes, "n2", limits={"max_parallel": 0})["take"] is True  # no limit
    # A slot in the Lease counts too, before its node shows any phase.
    d = decide([node("n1"), node("n2")], "n2", slots=["n1"], limits={"max_parallel": 1})
    assert d["take"] is False and d["wait"] is True and d["counts"]["in_progress"] == ["n1"]
    # Released nodes are done.
    assert decide([node("n1", phase="released"), node("n2")], "n2")["take"] is True


def test_a_node_holding_a_slot_keeps_it():
    d = decide([node("n1"), node("n2")], "n2", slots=["n1", "n2"], limits={"max_parallel": 1})
    assert d["take"] is True and d["held"] is True


def test_floors_count_what_the_other_schedulable_nodes_advertise_now():
    nodes = [node("n1", gpus={M3G: 2}), node("n2", gpus={M3G: 2}), node("n3", unschedulable=True, gpus={M3G: 2})]
    assert decide(nodes, "n1", limits={"floors": {M3G: 2}})["take"] is True
    d = decide(nodes, "n1", limits={"floors": {M3G: 3}})
    assert d["reasons"] == ["capacity floor: nvidia.com/mig-3g.40gb would drop to 2 schedulable, floor 3"]
    # A node in progress elsewhere does not count either.
    nodes[1] = node("n2", unschedulable=True, ours_cordon=True, phase="cordoned", gpus={M3G: 2})
    d = decide(nodes, "n1", limits={"floors": {M3G: 1}, "max_parallel": 2})
    assert d["reasons"] == ["capacity floor: nvidia.com/mig-3g.40gb would drop to 0 schedulable, floor 1"]
    assert d["wait"] is True


def test_the_queue_keeps_the_roll_order_until_it_stalls():
    nodes = [node("n1"), node("n2"), node("n3")]
    d = decide(nodes, "n3", limits={"max_parallel": 0}, queue=["n2", "n3"], passed=[])
    assert d == {"take": False, "held": False, "wait": True, "spent": False,
                 "counts": {"in_progress": [], "unavailable": [], "failed": []},
                 "reasons": ["its turn comes after n2"]}
    assert decide(nodes, "n3", limits={"max_parallel": 0}, queue=["n2", "n3"], passed=["n2"])["take"] is True
    assert decide(nodes, "n2", limits={"max_parallel": 0}, queue=["n2", "n3"], passed=[])["take"] is True
    # Stalled (no turn came for a while): the node goes ahead; a node not in the queue is not held back.
    assert decide(nodes, "n3", limits={"max_parallel": 0}, queue=["n2", "n3"], stalled=True)["take"] is True
    assert decide(nodes, "n1", limits={"max_parallel": 0}, queue=["n2", "n3"])["take"] is True


def test_the_turn_is_read_from_the_queue_alone():
    wait = {"take": False, "held": False, "wait": True, "spent": False}
    assert R.turn_decision(["a", "b", "c"], ["a"], "c") == dict(wait, counts={}, reasons=["its turn comes after b"])
    assert R.turn_decision(["a", "b", "c"], [], "c", counts={"failed": ["z"]}) == dict(
        wait, counts={"failed": ["z"]}, reasons=["its turn comes after a, b"])
    assert R.turn_decision(["a", "b", "c"], ["b", "a"], "c") is None
    assert R.turn_decision(["a", "b"], [], "a") is None          # first in the queue
    assert R.turn_decision(["a", "b"], [], "x") is None          # not in the queue
    assert R.turn_decision(["a", "b"], [], "b", stalled=True) is None
    assert R.turn_decision([], [], "b") is None


def test_lease_lists_and_turns():
    lease = {"metadata": {"resourceVersion": "9", "annotations": {R.LEASE_NODES: "a,b,c", R.LEASE_SLOTS: "",
                                                                  R.LEASE_PASSED: "a"}}}
    assert R.lease_list(lease, R.LEASE_NODES) == ["a", "b", "c"]
    assert R.lease_list(lease, R.LEASE_SLOTS) == [] and R.lease_list(None, R.LEASE_SLOTS) == []
    turned = R.lease_turn(lease, "b", ["c", "b", "b"], "T")
    assert turned["metadata"]["resourceVersion"] == "9"
    assert turned["metadata"]["annotations"] == {R.LEASE_NODES: "a,b,c", R.LEASE_SLOTS: "b,c", R.LEASE_PASSED: "a,b",
                                                 R.LEASE_PROGRESS: "T"}
    assert R.lease_turn(turned, "b", [], "U")["metadata"]["annotations"][R.LEASE_PASSED] == "a,b"
    assert lease["metadata"]["annotations"][R.LEASE_SLOTS] == ""  # the read copy is left as it was


# ---- the drain ----------------------------------------------------------------------------------------------------

def pod(name, owner="ReplicaSet", phase="Running", volumes=(), mirror=False, gpu=None, labels=None, controller=True):
    meta = {"name": name, "namespace": "ml", "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": controller}]
    if mirror:
        meta["annotations"] = {R.MIRROR: "abc"}
    spec = {"volumes": list(volumes), "containers": [{"name": "c", "resources": {"limits": {gpu: 1}} if gpu else {}}]}
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def test_the_drain_selects_pods_as_kubectl_drain_does():
    pods = [pod("app"), pod("ds", owner="DaemonSet"), pod("static", owner="Node", mirror=True),
            pod("bare", owner=None), pod("scratch", volumes=[{"name": "v", "emptyDir": {}}]),
            pod("done", owner=None, phase="Succeeded", volumes=[{"name": "v", "emptyDir": {}}])]
    sel = R.drain_selection(pods)
    assert sel["evict"] == ["ml/app", "ml/done"] and sel["skip"] == ["ml/ds", "ml/static"]
    assert sel["errors"] == ["ml/bare has no controller: nothing would recreate it (set force)",
                             "ml/scratch has emptyDir data (set delete_emptydir_data)"]
    sel = R.drain_selection(pods, delete_emptydir_data=True, force=True)
    assert sel["evict"] == ["ml/app", "ml/bare", "ml/scratch", "ml/done"] and sel["errors"] == []
    sel = R.drain_selection([pod("ds", owner="DaemonSet")], ignore_daemonsets=False)
    assert sel["errors"] == ["ml/ds is managed by a DaemonSet (set ignore_daemonsets)"] and sel["evict"] == []


def test_the_controller_reference_decides_and_a_non_controller_owner_still_counts_as_one():
    p = pod("x", owner="DaemonSet", controller=False)
    p["metadata"]["ownerReferences"].insert(0, {"kind": "ReplicaSet", "name": "r", "controller": True})
    assert R.drain_selection([p])["evict"] == ["ml/x"]
    assert R.drain_selection([pod("y", owner="DaemonSet", controller=False)])["skip"] == ["ml/y"]


def test_only_gpu_pods_and_selected_pods_are_evicted_when_asked():
    pods = [pod("cpu"), pod("gpu", gpu="nvidia.com/gpu"), pod("mig", gpu="nvidia.com/mig-1g.10gb"),
            pod("shared", gpu="nvidia.com/gpu.shared"), pod("other", gpu="amd.com/gpu")]
    assert R.drain_selection(pods, gpu_only=True)["evict"] == ["ml/gpu", "ml/mig", "ml/shared"]
    assert R.drain_selection(pods, gpu_only=True)["skip"] == ["ml/cpu", "ml/other"]
    init = pod("init")
    init["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"nvidia.com/gpu": 1}}}]
    assert R.uses_gpu(init) is True and R.uses_gpu(pod("plain")) is False
    labelled = [pod("a", labels={"app": "x"}), pod("b", labels={"app": "y"})]
    assert R.drain_selection(labelled, selectors=[("app", "y")])["evict"] == ["ml/b"]


def test_selector_pairs():
    assert R.selector_pairs(["app=x", " tier == web "]) == [("app", "x"), ("tier", "web")]
    assert R.selector_pairs(None) == []
    with pytest.raises(R.RollStateError, match=r"^pod selector 'app' is not key=value$"):
        R.selector_pairs(["app"])
    with pytest.raises(R.RollStateError, match=r"^pod selector '=x' is not key=value$"):
        R.selector_pairs(["=x"])


def test_api_errors_carry_the_servers_reason_and_field():
    from ansible_collections.gpuops.provision.plugins.module_utils._k8s import api as k8s_api  # pylint: disable=import-outside-toplevel

    class Refused(Exception):
        status, reason = 422, "Unprocessable Entity"
        body = json.dumps({"kind": "Status", "status": "Failure", "reason": "Invalid",
                           "message": 'Node "gpu-a" is invalid: metadata.labels: Invalid value: "bad key!": name part '
                                      "must consist of alphanumeric characters",
                           "details": {"causes": [{"reason": "FieldValueInvalid", "field": "metadata.labels",
                                                   "message": 'Invalid value: "bad key!"'}]}})

    assert k8s_api.api_message(Refused()) == ('422 Unprocessable Entity: Node "gpu-a" is invalid: metadata.labels: Invalid '
                                              'value: "bad key!": name part must consist of alphanumeric characters')

    class Conflict(Exception):
        status, reason = 409, "Conflict"
        body = json.dumps({"message": "the object has been modified",
                           "details": {"causes": [{"field": "metadata.resourceVersion", "message": "stale"}]}})

    assert k8s_api.api_message(Conflict()) == "409 Conflict: the object has been modified (metadata.resourceVersion: stale)"

    class Bare(Exception):
        status, reason, body = 500, "Internal Server Error", "<html>"

    assert k8s_api.api_message(Bare()) == "500 Internal Server Error"


def test_slim_keeps_what_a_roll_plans_with_and_nothing_else():
    full = node("a", unschedulable=True, phase="drained", gpus={M3G: 2})
    full["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    full["metadata"]["labels"] = {"nvidia.com/mig.config": "all-3g"}
    full["spec"]["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    full["status"]["conditions"].append({"type": "MemoryPressure", "status": "False"})
    full["status"].update(images=[{"names": ["x"]}], addresses=[{"address": "10.0.0.1"}], nodeInfo={"kernelVersion": "6"})
    assert R.slim(full) == {
        "metadata": {"name": "a", "labels": {"nvidia.com/mig.config": "all-3g"}, "annotations": full["metadata"]["annotations"],
                     "resourceVersion": "7"},
        "spec": {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {M3G: 2}}}
    assert R.slim({}) == {"metadata": {"name": None, "labels": {}, "annotations": {}, "resourceVersion": None},
                          "spec": {"unschedulable": False, "taints": []}, "status": {"conditions": [], "allocatable": {}}}


def test_positions_index_nodes_by_name_and_pods_by_their_node():
    nodes = [{"metadata": {"name": "gpu-b"}}, {"metadata": {"name": "gpu-a"}}, {}]
    pods = [{"spec": {"nodeName": "gpu-a"}}, {"spec": {"nodeName": "gpu-b"}}, {"spec": {"nodeName": "gpu-a"}}, {}]
    assert R.positions(nodes, pods) == {"nodes": {"gpu-b": 0, "gpu-a": 1, "None": 2},
                                        "pods": {"gpu-a": [0, 2], "gpu-b": [1], "": [3]}}
    assert R.positions([]) == {"nodes": {}, "pods": {}}


def test_slim_pod_keeps_what_the_plan_reads_of_a_pod():
    full = {"metadata": {"name": "mm-1", "namespace": "gpu-operator", "labels": {"app": "nvidia-mig-manager"},
                         "uid": "u", "managedFields": [{"manager": "kube-controller-manager"}],
                         "ownerReferences": [{"kind": "DaemonSet"}]},
            "spec": {"nodeName": "gpu-a", "containers": [{"name": "mig-manager"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.9"}}
    slim = {"metadata": {"name": "mm-1", "namespace": "gpu-operator", "labels": {"app": "nvidia-mig-manager"}},
            "spec": {"nodeName": "gpu-a"}, "status": {"phase": "Running"}}
    assert R.slim_pod(full) == slim
    full["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert R.slim_pod(full) == dict(slim, metadata=dict(slim["metadata"], deletionTimestamp="2026-01-01T00:00:00Z"))
    assert R.slim_pod({}) == {"metadata": {"name": None, "namespace": None, "labels": {}}, "spec": {"nodeName": None},
                              "status": {"phase": None}}


def test_a_kubeconfig_path_that_is_not_there_is_named(tmp_path, monkeypatch):
    # The kubernetes library says only "Invalid kube-config file. No configuration found." for it.
    import kubernetes  # pylint: disable=import-outside-toplevel
    from ansible_collections.gpuops.provision.plugins.module_utils._k8s import api as k8s_api  # pylint: disable=import-outside-toplevel
    monkeypatch.delenv("K8S_AUTH_KUBECONFIG", raising=False)
    with pytest.raises(kubernetes.config.ConfigException, match="^kubeconfig /nonexistent/kubeconfig: no such file$"):
        k8s_api.api_client("/nonexistent/kubeconfig")
    monkeypatch.setenv("K8S_AUTH_KUBECONFIG", str(tmp_path / "gone"))
    with pytest.raises(kubernetes.config.ConfigException, match="gone: no such file"):
        k8s_api.api_client()
    # A file that is there goes on to the library, which reads it.
    empty = tmp_path / "empty"
    empty.write_text("")
    with pytest.raises(kubernetes.config.ConfigException) as err:
        k8s_api.api_client(str(empty))
    assert "no such file" not in str(err.value)


def test_the_roll_queue_finishes_the_nodes_an_earlier_run_left_first():
    nodes = [node("a"), node("b", phase="failed", roll="nvidia_driver", unschedulable=True, ours_cordon=True),
             node("c", phase="released", roll="nvidia_driver"), node("d", phase="drained", roll="mig_reconfigure"),
             node("e", phase="cordoned", roll="nvidia_driver")]
    names = ["a", "b", "c", "d", "e", "f"]
    # b and e are unfinished by this roll (d by another roll, c released); then the changing ones in roll order, once.
    assert R.roll_queue(nodes, "nvidia_driver", names, ["f", "c", "e", "a"]) == ["b", "e", "a", "c", "f"]
    # Only the roll's own nodes: an unfinished node outside ``names`` is not this run's.
    assert R.roll_queue(nodes, "nvidia_driver", ["a", "c"], []) == []
    assert R.roll_queue([], "nvidia_driver", ["a", "a", "b"], ["b", "a"]) == ["a", "b"]


# ---- what node_roll and node_release disrupt (their ``disruptions``) --------------------------------------------------

def test_roll_disruptions_follow_the_runs_order_and_name_the_pods():
    done = {"cordoned": True, "evicted": ["ml/train-0", "ml/train-1"], "stopped": ["gpu-operator/dp-1"]}
    assert R.roll_disruptions("gpu-1", done) == [
        "cordon node gpu-1", "drain node gpu-1, evicting 2 pod(s): ml/train-0, ml/train-1",
        "delete the GPU client pods of node gpu-1, 1 pod(s): gpu-operator/dp-1"]
    # A node cordoned already (an operator's cordon, or past the drain) is not cordoned again; nothing evicted.
    assert R.roll_disruptions("gpu-1", {"cordoned": False, "evicted": [], "stopped": []}) == []
    assert R.roll_disruptions("gpu-1", {"cordoned": False, "evicted": ["a/b"]}) == [
        "drain node gpu-1, evicting 1 pod(s): a/b"]


def test_a_long_pod_list_names_the_first_ten_and_counts_the_rest():
    pods = ["ml/p%02d" % i for i in range(13)]
    assert R.roll_disruptions("n", {"evicted": pods}) == [
        "drain node n, evicting 13 pod(s): %s and 3 more" % ", ".join(pods[:10])]
    assert R.roll_disruptions("n", {"evicted": pods[:10]}) == ["drain node n, evicting 10 pod(s): %s" % ", ".join(pods[:10])]


def test_release_disruptions_are_the_pods_restarted_and_a_cordon_never_the_uncordon():
    done = {"pods_deleted": ["gpu-operator/validator-x"], "final": {"spec": {"unschedulable": True}}}
    assert R.release_disruptions("gpu-1", done, was_cordoned=False) == [
        "restart pods of node gpu-1 (deleted for their controllers to recreate), 1 pod(s): gpu-operator/validator-x",
        "cordon node gpu-1"]
    assert R.release_disruptions("gpu-1", done, was_cordoned=True) == [
        "restart pods of node gpu-1 (deleted for their controllers to recreate), 1 pod(s): gpu-operator/validator-x"]
    uncordon = {"pods_deleted": [], "final": {"metadata": {"labels": {"a": "b"}}, "spec": {"unschedulable": False}}}
    assert R.release_disruptions("gpu-1", uncordon, was_cordoned=True) == []
    assert R.release_disruptions("gpu-1", {"pods_deleted": [], "final": {}}, was_cordoned=False) == []
