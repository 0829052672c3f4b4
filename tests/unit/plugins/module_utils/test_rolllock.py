# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roll's lock decisions (plugins/module_utils/_rolllock.py), following client-go's leader election
(tools/leaderelection/leaderelection.go tryAcquireOrRenew and release)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils import _rolllock as L

NOW = 1796200000.25  # 2026-12-02, a quarter second past
ME = "gpuops.provision.mig_reconfigure 0000beef (user=bob controller=ctl)"
OTHER = "gpuops.provision.mig_reconfigure 0badc0de (user=alice controller=awx-1 awx_job=42)"


def lease(holder=OTHER, renewed=NOW - 10, duration=3600, nodes="gpu-01,gpu-02", transitions=2, rv="77"):
    spec = {"holderIdentity": holder, "leaseDurationSeconds": duration, "acquireTime": L.format_time((renewed or NOW) - 100),
            "renewTime": L.format_time(renewed) if renewed is not None else None, "leaseTransitions": transitions}
    return {"metadata": {"name": "roll", "namespace": "kube-system", "resourceVersion": rv,
                         "annotations": {L.NODES_ANNOTATION: nodes}}, "spec": spec}


def decide(current, state="held", holder=ME, ttl=600, nodes=("gpu-03",), now=NOW):
    return L.decide(current, state, "roll", "kube-system", holder, ttl, list(nodes), now)


def test_times_round_trip_as_the_api_server_writes_them():
    # Never a zero fraction (the kubernetes client would drop it and the API server refuse the Lease).
    assert L.format_time(0) == "1970-01-01T00:00:00.000001Z"
    assert L.format_time(0.5) == "1970-01-01T00:00:00.500000Z"
    assert L.parse_time("2026-12-02T04:30:00.250000Z") == pytest.approx(1796185800.25)
    assert L.parse_time("2026-12-02T04:30:00Z") == 1796185800.0
    assert L.parse_time("2026-12-02T04:30:00+00:00") == 1796185800.0
    assert L.parse_time(L.format_time(NOW)) == pytest.approx(NOW)
    # A whole-second acquireTime (other writers) is written back with the 1 us, so a renewal is accepted.
    whole = lease(holder=ME)
    whole["spec"]["acquireTime"] = "2026-12-01T00:00:00.000000Z"
    assert L.decide(whole, "held", "roll", "kube-system", ME, 60, [], NOW)["body"]["spec"]["acquireTime"] \
        == "2026-12-01T00:00:00.000001Z"
    assert L.parse_time("") is None and L.parse_time(None) is None
    with pytest.raises(L.LockError, match="unreadable time in the Lease: 'yesterday'"):
        L.parse_time("yesterday")
    with pytest.raises(L.LockError, match="Lease times are UTC, got '2026-12-02T04:30:00[+]02:00'"):
        L.parse_time("2026-12-02T04:30:00+02:00")


def test_no_lease_is_created_for_this_run():
    d = decide(None)
    assert d["action"] == "create" and d["before"] is None and d["taken_over"] is None
    assert d["msg"] == "took the roll lock kube-system/roll"
    body = d["body"]
    assert body["apiVersion"] == "coordination.k8s.io/v1" and body["kind"] == "Lease"
    assert "resourceVersion" not in body["metadata"]  # a create must not carry one
    assert body["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpuops.provision"}
    assert body["metadata"]["annotations"] == {L.NODES_ANNOTATION: "gpu-03"}
    assert body["spec"] == {"holderIdentity": ME, "leaseDurationSeconds": 600, "acquireTime": L.format_time(NOW),
                            "renewTime": L.format_time(NOW), "leaseTransitions": 0}


def test_a_live_lease_of_another_run_is_refused_naming_it_and_its_nodes():
    d = decide(lease(renewed=NOW - 10, duration=3600))
    assert d["action"] == "refuse" and d["body"] is None
    assert d["msg"] == ("another roll holds the lock kube-system/roll: %s (nodes gpu-01, gpu-02; renewed %s; "
                        "expires in 3590 s); nothing was changed" % (OTHER, L.format_time(NOW - 10)))
    # One second before its end the lease still holds; at its end it no longer does (renewTime + duration > now).
    assert decide(lease(renewed=NOW - 3599, duration=3600))["action"] == "refuse"
    assert decide(lease(renewed=NOW - 3600, duration=3600))["action"] == "update"


def test_an_expired_lease_is_taken_over_with_the_resource_version_read():
    d = decide(lease(renewed=NOW - 4000, duration=3600, transitions=2, rv="77"))
    assert d["action"] == "update" and d["taken_over"] == OTHER
    assert d["msg"].startswith("took over the roll lock kube-system/roll from %s (nodes gpu-01, gpu-02;" % OTHER)
    assert d["msg"].endswith("expired 400 s ago), whose lease expired")
    assert d["body"]["metadata"]["resourceVersion"] == "77"
    assert d["body"]["spec"]["leaseTransitions"] == 3  # client-go: LeaderTransitions + 1 on a change of hands
    assert d["body"]["spec"]["holderIdentity"] == ME and d["body"]["spec"]["acquireTime"] == L.format_time(NOW)
    assert d["body"]["metadata"]["annotations"][L.NODES_ANNOTATION] == "gpu-03"


def test_a_released_lease_or_one_without_a_duration_is_free():
    released = decide(lease(holder="", duration=1, renewed=NOW - 1))
    assert released["action"] == "update" and released["taken_over"] is None
    assert released["msg"] == "took the roll lock kube-system/roll"
    assert released["body"]["spec"]["leaseTransitions"] == 3
    # client-go's isLeaseValid: observedTime + leaseDuration > now, so a duration of 0 (or none) is not valid.
    assert decide(lease(duration=None))["action"] == "update"
    assert decide(lease(renewed=None, duration=3600))["action"] == "refuse"  # acquireTime stands in for renewTime


def test_our_own_lease_is_renewed_keeping_acquire_time_and_transitions():
    mine = lease(holder=ME, renewed=NOW - 50, transitions=4, rv="90")
    d = decide(mine, nodes=())
    assert d["action"] == "update" and d["taken_over"] is None
    assert d["msg"] == "renewed the roll lock kube-system/roll"
    spec = d["body"]["spec"]
    assert spec["acquireTime"] == mine["spec"]["acquireTime"] and spec["leaseTransitions"] == 4
    assert spec["renewTime"] == L.format_time(NOW) and spec["leaseDurationSeconds"] == 600
    assert d["body"]["metadata"]["resourceVersion"] == "90"
    # No nodes given on a renewal: the recorded ones stay.
    assert d["body"]["metadata"]["annotations"][L.NODES_ANNOTATION] == "gpu-01,gpu-02"
    # Our own expired lease (nobody took it) is renewed too.
    assert decide(lease(holder=ME, renewed=NOW - 9999))["msg"] == "renewed the roll lock kube-system/roll"


def test_release_empties_the_holder_only_when_this_run_holds_it():
    d = decide(lease(holder=ME, transitions=4, rv="91"), state="absent")
    assert d["action"] == "update" and d["msg"] == "released the roll lock kube-system/roll"
    assert d["body"]["spec"]["holderIdentity"] == "" and d["body"]["spec"]["leaseDurationSeconds"] == 1
    assert d["body"]["spec"]["leaseTransitions"] == 4 and d["body"]["metadata"]["resourceVersion"] == "91"
    other = decide(lease(), state="absent")
    assert other["action"] == "none" and other["body"] is None
    assert other["msg"].startswith("the roll lock kube-system/roll is not held by this run, but by %s (" % OTHER)
    assert other["msg"].endswith("; left as it is")
    none = decide(None, state="absent")
    assert none["action"] == "none" and none["msg"] == "the roll lock kube-system/roll is not held by this run; left as it is"


def test_record_reads_every_field():
    rec = L.record(lease(renewed=NOW, duration=60, transitions=5, rv="12"))
    assert rec == {"holder": OTHER, "acquired": L.format_time(NOW - 100), "renewed": L.format_time(NOW),
                   "duration": 60, "expires_at": pytest.approx(NOW + 60), "transitions": 5,
                   "nodes": ["gpu-01", "gpu-02"], "resource_version": "12"}
    assert L.record(None) is None and L.record({}) is None
    bare = L.record({"metadata": {"name": "x"}, "spec": {}})
    assert bare["holder"] == "" and bare["expires_at"] is None and bare["nodes"] == [] and bare["transitions"] == 0


@pytest.mark.parametrize("kwargs, words", [
    ({"holder": ""}, "holder must name this run"),
    ({"holder": "  "}, "holder must name this run"),
    ({"ttl": 0}, "ttl must be a positive number of seconds, got 0"),
    ({"ttl": True}, "ttl must be a positive number of seconds, got True"),
    ({"ttl": "60"}, "ttl must be a positive number of seconds, got '60'"),
])
def test_bad_input_is_refused_naming_the_option(kwargs, words):
    with pytest.raises(L.LockError, match=words):
        decide(None, **kwargs)
    with pytest.raises(L.LockError, match="state must be held or absent, got 'taken'"):
        decide(None, state="taken")
    with pytest.raises(L.LockError, match="name must be 1 to 253 characters"):
        L.decide(None, "held", "", "ns", ME, 60, [], NOW)
    with pytest.raises(L.LockError, match="namespace must not be empty"):
        L.decide(None, "held", "roll", "", ME, 60, [], NOW)
