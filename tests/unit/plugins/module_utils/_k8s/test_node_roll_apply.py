# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_roll's wait for a slot (plugins/module_utils/_k8s/node_roll_apply.py NodeRoll.take_slot) against a fake roll
Lease: what it reads while it waits."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._k8s import node_roll as R
from ansible_collections.gpuops.provision.plugins.module_utils._k8s import node_roll_apply as A


class FakeLease:
    """The roll's Lease: the queue a, b, c; ``a`` passes its turn after ``turns`` reads."""

    where = "kube-system/roll"

    def __init__(self, turns):
        self.turns, self.reads, self.writes, self.waits = turns, 0, [], []
        self.notes = {R.LEASE_NODES: "a,b,c", R.LEASE_QUEUE: "a,b,c", R.LEASE_PASSED: "", R.LEASE_SLOTS: ""}

    def read(self):
        self.reads += 1
        if self.reads > self.turns:
            self.notes[R.LEASE_PASSED] = "a"
        return {"metadata": {"resourceVersion": str(self.reads), "annotations": dict(self.notes)}}

    def write(self, lease):
        self.writes.append(lease)
        self.notes = dict(lease["metadata"]["annotations"])
        return lease

    def wait_changed(self, seconds):
        self.waits.append((self.reads, seconds))


def ready(name):
    return {"metadata": {"name": name, "annotations": {}}, "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {}}}


@pytest.fixture(name="listed")
def fixture_listed(monkeypatch):
    calls = []

    def list_nodes(api, timeout, page=500, cached=False):
        calls.append(cached)
        return [ready(n) for n in "abc"]

    monkeypatch.setattr(A, "list_nodes", list_nodes)
    monkeypatch.setattr(A, "SLOT_POLL", 0.0)
    return calls


LIMITS = {"max_parallel": 0, "max_unavailable": None, "max_failures": 0, "floors": {}, "turn_timeout": 300}


def test_a_node_whose_turn_has_not_come_reads_the_lease_not_the_nodes(listed):
    lease = FakeLease(turns=5)
    roll = A.NodeRoll(api=None, name="b", roll="mig_reconfigure", timeout=5)
    decision = roll.take_slot(lease, LIMITS, wait=60, check=False)
    assert decision["take"] is True
    # Five looks at the Lease with "a" ahead, then one LIST of the nodes once nothing was ahead of "b"; between two
    # looks it waits on the Lease (a watch), not a sleep, as long as QUEUED_WATCH while nodes are ahead of it.
    assert listed == [True]
    assert lease.waits == [(n, A.QUEUED_WATCH) for n in range(1, 6)]
    assert R.lease_list(lease.writes[-1], R.LEASE_SLOTS) == ["b"]
    assert R.lease_list(lease.writes[-1], R.LEASE_PASSED) == ["a", "b"]


def test_a_node_at_the_head_of_the_queue_looks_at_the_nodes_again_every_slot_poll(monkeypatch):
    # "b" is next, but the budget (max_parallel 1, "a" holds the slot) keeps it waiting: cordons and NotReady nodes
    # outside the roll can change the answer too, so it looks again after SLOT_POLL, not QUEUED_WATCH.
    lists = []

    def list_nodes(api, timeout, page=500, cached=False):
        lists.append(cached)
        if len(lists) == 3:
            lease.notes[R.LEASE_SLOTS] = ""
        return [ready(n) for n in "abc"]

    monkeypatch.setattr(A, "list_nodes", list_nodes)
    lease = FakeLease(turns=0)
    lease.notes[R.LEASE_SLOTS] = "a"
    roll = A.NodeRoll(api=None, name="b", roll="mig_reconfigure", timeout=5)
    assert roll.take_slot(lease, dict(LIMITS, max_parallel=1), wait=60, check=False)["take"] is True
    assert len(lists) == 3 and [s for _r, s in lease.waits] == [A.SLOT_POLL, A.SLOT_POLL]
    assert R.lease_list(lease.writes[-1], R.LEASE_SLOTS) == ["b"]


def test_check_mode_and_a_node_without_a_lease_decide_from_the_nodes_at_once(listed):
    roll = A.NodeRoll(api=None, name="b", roll="mig_reconfigure", timeout=5)
    assert roll.take_slot(FakeLease(turns=5), LIMITS, wait=60, check=True)["reasons"] == ["its turn comes after a"]
    assert roll.take_slot(None, LIMITS, wait=60, check=False)["take"] is True
    assert listed == [True, True]


def test_a_queued_node_that_waits_too_long_says_for_whom(listed):
    roll = A.NodeRoll(api=None, name="c", roll="mig_reconfigure", timeout=5)
    with pytest.raises(A.k8s_api.NodeStepError, match="waited 0 s for a slot in the roll: its turn comes after a, b"):
        roll.take_slot(FakeLease(turns=10 ** 6), LIMITS, wait=0, check=False)
    assert listed == []


# ---- the wait until pods are gone, and the GPU clients (stop_pods) ------------------------------------------------

class Resp:
    def __init__(self, body):
        self.data = __import__("json").dumps(body).encode()


def pod(name, uid, labels=None, deleting=False, ns="gpu-operator"):
    meta = {"name": name, "namespace": ns, "uid": uid, "labels": labels or {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


class FakeCore:
    """CoreV1Api's pod calls: LISTs answer ``lists`` in turn (the last one again), deletes are recorded (``gone``
    answers 404), a WATCH streams ``events``."""

    def __init__(self, lists, gone=()):
        self.lists, self.gone, self.calls, self.deleted = list(lists), set(gone), [], []

    def _list(self, *args, **kw):
        self.calls.append(("watch" if kw.get("watch") else "list", args, kw.get("field_selector")))
        items = self.lists.pop(0) if len(self.lists) > 1 else self.lists[0]
        return Resp({"metadata": {"resourceVersion": "7"}, "items": items})

    list_namespaced_pod = _list
    list_pod_for_all_namespaces = _list

    def delete_namespaced_pod(self, name, namespace, **kw):
        if name in self.gone:
            raise A.ApiException(status=404)
        self.deleted.append((namespace, name))


class FakeWatch:
    """kubernetes.watch.Watch: stream() records what it was asked and yields the events given to the class."""

    events = []
    asked = []

    def stream(self, func, *args, **kw):
        FakeWatch.asked.append((args, kw.get("resource_version"), kw.get("field_selector")))
        yield from FakeWatch.events

    def stop(self):
        FakeWatch.asked.append("stopped")


@pytest.fixture(name="watch")
def fixture_watch(monkeypatch):
    FakeWatch.events, FakeWatch.asked = [], []
    monkeypatch.setattr(A.kubernetes.watch, "Watch", FakeWatch)
    return FakeWatch


def roll_with(core):
    roll = A.NodeRoll.__new__(A.NodeRoll)
    roll.api, roll.core, roll.name, roll.roll, roll.timeout = None, core, "gpu-a", "mig_reconfigure", 5
    roll.done = {"slot": None, "cordoned": False, "labels": {}, "evicted": [], "phase": "drained", "waited_for_slot": 0}
    return roll


def deleted(uid):
    return {"type": "DELETED", "raw_object": {"metadata": {"uid": uid}}}


def test_the_wait_until_pods_are_gone_watches_from_one_list(watch):
    core = FakeCore([[pod("a", "u1"), pod("b", "u2"), pod("other", "u9")]])
    watch.events = [deleted("u1"), {"type": "MODIFIED", "raw_object": {"metadata": {"uid": "u2"}}}, deleted("u2"),
                    deleted("never-reached")]
    left = roll_with(core).wait_gone({"u1": "ns/a", "u2": "ns/b"}, A.time.monotonic() + 30)
    assert left == []
    # One LIST of the node's pods, one WATCH from its resourceVersion, no GET per pod and second.
    assert core.calls == [("list", (), "spec.nodeName=gpu-a")]
    assert watch.asked == [((), "7", "spec.nodeName=gpu-a")]


def test_pods_already_gone_need_no_watch_and_a_deadline_ends_the_wait(watch):
    core = FakeCore([[pod("other", "u9")]])
    assert roll_with(core).wait_gone({"u1": "ns/a"}, A.time.monotonic() + 30) == []
    assert watch.asked == []
    core = FakeCore([[pod("a", "u1"), pod("b", "u2")]])
    watch.events = [deleted("u2")]
    assert roll_with(core).wait_gone({"u1": "ns/a", "u2": "ns/b"}, A.time.monotonic() - 1) == ["ns/a", "ns/b"]
    assert roll_with(core).wait_gone({"u1": "ns/a", "u2": "ns/b"}, A.time.monotonic() + 0.5) == ["ns/a"]


def test_a_watch_too_old_to_resume_lists_again(watch, monkeypatch):
    core = FakeCore([[pod("a", "u1")], []])

    class Gone(FakeWatch):
        def stream(self, func, *args, **kw):
            raise A.ApiException(status=410)
            yield  # pylint: disable=unreachable

    monkeypatch.setattr(A.kubernetes.watch, "Watch", Gone)
    assert roll_with(core).wait_gone({"u1": "ns/a"}, A.time.monotonic() + 30) == []
    assert [c[0] for c in core.calls] == ["list", "list"]


class FakeLeases:
    """CoordinationV1Api: the roll's Lease at resourceVersion 12."""

    def read_namespaced_lease(self, name, namespace, **kw):
        return Resp({"metadata": {"name": name, "resourceVersion": "12"}, "spec": {"holderIdentity": "run-1"}})

    def list_namespaced_lease(self, namespace, **kw):  # pragma: no cover - only the FakeWatch calls it
        raise AssertionError("the watch is the FakeWatch")


def roll_lease():
    lease = A.RollLease.__new__(A.RollLease)
    lease.api, lease.leases, lease.namespace, lease.name, lease.holder, lease.timeout = (
        None, FakeLeases(), "kube-system", "roll", "run-1", 5)
    lease.seen, lease.watchable = "", True
    return lease


def test_a_wait_for_a_slot_watches_the_lease_from_the_version_last_read(watch, monkeypatch):
    slept = []
    monkeypatch.setattr(A.time, "sleep", slept.append)
    lease = roll_lease()
    lease.wait_changed(2.0)  # nothing read yet: nothing to watch from
    assert slept == [2.0] and watch.asked == []
    lease.read()
    watch.events = [{"type": "MODIFIED", "raw_object": {}}, {"type": "MODIFIED", "raw_object": {}}]
    lease.wait_changed(2.0)
    # One WATCH of this Lease from the version read, ended at its first event (a slot given back, a turn passed).
    assert watch.asked == [(("kube-system",), "12", "metadata.name=roll"), "stopped"]
    assert slept == [2.0]
    lease.wait_changed(0)
    assert len(watch.asked) == 2


def test_a_role_without_watch_on_leases_waits_as_before(watch, monkeypatch):
    slept = []
    monkeypatch.setattr(A.time, "sleep", slept.append)

    class Forbidden(FakeWatch):
        def stream(self, func, *args, **kw):
            FakeWatch.asked.append("watch")
            raise A.ApiException(status=403)
            yield  # pylint: disable=unreachable

    monkeypatch.setattr(A.kubernetes.watch, "Watch", Forbidden)
    lease = roll_lease()
    lease.read()
    lease.wait_changed(2.0)
    lease.wait_changed(2.0)
    # Refused once (a Role granted before watch was needed), then it sleeps without asking again.
    assert watch.asked == ["watch", "stopped"] and slept == [2.0, 2.0] and lease.watchable is False


@pytest.mark.parametrize("status", [500, 410])
def test_a_lease_watch_refused_otherwise_is_an_error_and_a_watch_too_old_reads_again(watch, monkeypatch, status):
    class Refused(FakeWatch):
        def stream(self, func, *args, **kw):
            raise A.ApiException(status=status)
            yield  # pylint: disable=unreachable

    monkeypatch.setattr(A.kubernetes.watch, "Watch", Refused)
    monkeypatch.setattr(A.time, "sleep", lambda s: pytest.fail("no sleep after a refused watch"))
    lease = roll_lease()
    lease.read()
    if status == 410:
        lease.wait_changed(2.0)  # too old to watch from: the caller reads the Lease again
    else:
        with pytest.raises(A.ApiException):
            lease.wait_changed(2.0)
    assert lease.watchable is True


STOP = {"namespace": "gpu-operator", "selectors": ["app=nvidia-device-plugin-daemonset", "app=gpu-feature-discovery"],
        "timeout": 30}


def test_stop_pods_deletes_the_gpu_clients_and_waits_for_them(watch):
    core = FakeCore([[pod("dp-1", "u1", {"app": "nvidia-device-plugin-daemonset"}),
                      pod("gfd-1", "u2", {"app": "gpu-feature-discovery"}, deleting=True),
                      pod("toolkit-1", "u3", {"app": "nvidia-container-toolkit-daemonset"})]])
    watch.events = [deleted("u2"), deleted("u1")]
    roll = roll_with(core)
    report = roll.stop_pods(STOP, check=False)
    assert report["deleted"] == ["gpu-operator/dp-1", "gpu-operator/gfd-1"]
    # The pod already being deleted (its DaemonSet's paused label) is only waited for; the others stay.
    assert core.deleted == [("gpu-operator", "dp-1")]
    assert core.calls[0] == ("list", ("gpu-operator",), "spec.nodeName=gpu-a")
    assert roll.done["stopped"] == report["deleted"]


def test_stop_pods_in_check_mode_and_a_pod_gone_meanwhile(watch):
    core = FakeCore([[pod("dp-1", "u1", {"app": "nvidia-device-plugin-daemonset"})]])
    assert roll_with(core).stop_pods(STOP, check=True)["deleted"] == ["gpu-operator/dp-1"]
    assert core.deleted == [] and watch.asked == []
    core = FakeCore([[pod("dp-1", "u1", {"app": "nvidia-device-plugin-daemonset"})], []], gone={"dp-1"})
    assert roll_with(core).stop_pods(STOP, check=False)["deleted"] == ["gpu-operator/dp-1"]


def test_gpu_clients_that_do_not_go_fail_the_node_cordoned(watch):
    core = FakeCore([[pod("dp-1", "u1", {"app": "nvidia-device-plugin-daemonset"})]])
    with pytest.raises(A.k8s_api.NodeStepError, match="gpu-a: the GPU client pods gpu-operator/dp-1 were still on the "
                       "node after 0 s; the node is left cordoned") as err:
        roll_with(core).stop_pods(dict(STOP, timeout=0), check=False)
    assert err.value.done["pods_left"] == ["gpu-operator/dp-1"]
