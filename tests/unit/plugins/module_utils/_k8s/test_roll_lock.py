# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roll's lock decisions (plugins/module_utils/_k8s/roll_lock.py), following client-go's leader election
(tools/leaderelection/leaderelection.go tryAcquireOrRenew and release)."""

from __future__ import annotations

import datetime
import json
import os
import time

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._k8s import roll_lock as L

NOW = 1796200000.25  # 2026-12-02, a quarter second past
ME = "gpuops.provision.mig_reconfigure 0000beef (user=bob controller=ctl)"
OTHER = "gpuops.provision.mig_reconfigure 0badc0de (user=alice controller=awx-1 awx_job=42)"


def lease(holder=OTHER, renewed=NOW - 10, duration=3600, nodes="gpu-01,gpu-02", transitions=2, rv="77"):
    spec = {"holderIdentity": holder, "leaseDurationSeconds": duration, "acquireTime": L.format_time((renewed or NOW) - 100),
            "renewTime": L.format_time(renewed) if renewed is not None else None, "leaseTransitions": transitions}
    return {"metadata": {"name": "roll", "namespace": "kube-system", "resourceVersion": rv,
                         "annotations": {L.NODES_ANNOTATION: nodes}}, "spec": spec}


def decide(current, state="held", holder=ME, ttl=600, nodes=("gpu-03",), now=NOW, **kwargs):
    return L.decide(current, state, "roll", "kube-system", holder, ttl, list(nodes), now, **kwargs)


def notes(nodes, slots="", queue="", passed="", progress="", **more):
    """The annotations a Lease written by decide() carries."""
    return dict({L.NODES_ANNOTATION: nodes, L.SLOTS_ANNOTATION: slots, L.QUEUE_ANNOTATION: queue,
                 L.PASSED_ANNOTATION: passed, L.PROGRESS_ANNOTATION: progress}, **more)


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
    with pytest.raises(L.LockError, match="^unreadable time in the Lease: 'yesterday'$"):
        L.parse_time("yesterday")
    # A fraction that is not digits is the Lease's fault, not the API's: LockError, never float()'s ValueError.
    for bad in ("2026-12-02T04:30:00.abcZ", "2026-12-02T04:30:00.25.5Z", "2026-12-02T04:30:00.5e3Z", "2026-12-02T04:30:00.Z"):
        with pytest.raises(L.LockError, match="^unreadable time in the Lease: %r$" % bad):
            L.parse_time(bad)
    assert L.parse_time("2026-12-02T04:30:00.25Z") - L.parse_time("2026-12-02T04:30:00Z") == pytest.approx(0.25)
    with pytest.raises(L.LockError, match="^Lease times are UTC, got '2026-12-02T04:30:00[+]02:00'$"):
        L.parse_time("2026-12-02T04:30:00+02:00")
    # A second offset after a UTC one is still not UTC.
    with pytest.raises(L.LockError, match="^Lease times are UTC, got '2026-12-02T04:30:00[+]00:00[+]02:00'$"):
        L.parse_time("2026-12-02T04:30:00+00:00+02:00")


def test_times_are_read_to_the_second_and_the_microsecond():
    # Exact: a 1 s or 1 us error would move the lease's end.
    assert L.parse_time("2026-12-02T04:30:07Z") == 1796185807.0
    assert L.parse_time("2026-12-02T04:30:07.000001Z") - 1796185807.0 == pytest.approx(0.000001, abs=3e-7)  # one float step here is 2.4e-7
    assert L.parse_time("2026-12-02T04:30:07.5Z") == 1796185807.5
    # Both spellings of a UTC offset.
    assert L.parse_time("2026-12-02T04:30:07+0000") == 1796185807.0
    assert L.parse_time("2026-12-02T04:30:07.250000+00:00") == 1796185807.25


@pytest.fixture
def controller_east_of_utc():
    """The controller's local time zone 3 h east of UTC (a POSIX TZ rule: no tz database needed)."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "XYZ-3"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


def test_times_are_utc_whatever_the_controller_time_zone(controller_east_of_utc):
    assert L.format_time(0) == "1970-01-01T00:00:00.000001Z"
    assert L.format_time(1796185807.5) == "2026-12-02T04:30:07.500000Z"
    assert L.parse_time("2026-12-02T04:30:07Z") == 1796185807.0
    assert L.parse_time("2026-12-02T04:30:07.5Z") == 1796185807.5
    # The kubernetes client hands MicroTime over as datetime: naive ones are UTC, aware ones keep their zone.
    assert L.parse_time(datetime.datetime(2026, 12, 2, 4, 30, 7)) == 1796185807.0
    east = datetime.timezone(datetime.timedelta(hours=2))
    assert L.parse_time(datetime.datetime(2026, 12, 2, 6, 30, 7, tzinfo=east)) == 1796185807.0
    assert L.parse_time(datetime.datetime(2026, 12, 2, 4, 30, 7, tzinfo=datetime.timezone.utc)) == 1796185807.0


def test_no_lease_is_created_for_this_run():
    d = decide(None, nodes=("gpu-03", "gpu-04"))
    # A create must not carry a resourceVersion.
    assert d == {"action": "create", "before": None, "taken_over": None, "superseded": "",
                 "msg": "took the roll lock kube-system/roll",
                 "body": {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                          "metadata": {"name": "roll", "namespace": "kube-system",
                                       "labels": {"app.kubernetes.io/managed-by": "gpuops.provision"},
                                       "annotations": notes("gpu-03,gpu-04", progress=L.format_time(NOW))},
                          "spec": {"holderIdentity": ME, "leaseDurationSeconds": 600, "acquireTime": L.format_time(NOW),
                                   "renewTime": L.format_time(NOW), "leaseTransitions": 0}}}


def test_a_live_lease_of_another_run_is_refused_naming_it_and_its_nodes():
    current = lease(renewed=NOW - 10, duration=3600)
    d = decide(current)
    assert d == {"action": "refuse", "body": None, "before": L.record(current), "taken_over": None, "superseded": "",
                 "msg": "another roll holds the lock kube-system/roll: %s (nodes gpu-01, gpu-02; renewed %s; "
                        "expires in 3590 s); nothing was changed" % (OTHER, L.format_time(NOW - 10))}
    # A quarter second left rounds to 0 s, still ahead.
    last = decide(lease(renewed=NOW - 3599.75, duration=3600))
    assert last["action"] == "refuse" and last["msg"].endswith("expires in 0 s); nothing was changed")
    # One second before its end the lease still holds; at its end it no longer does (renewTime + duration > now).
    assert decide(lease(renewed=NOW - 3599, duration=3600))["action"] == "refuse"
    assert decide(lease(renewed=NOW - 3600, duration=3600))["action"] == "update"


def test_an_expired_lease_is_taken_over_with_the_resource_version_read():
    current = lease(renewed=NOW - 4000, duration=3600, transitions=2, rv="77")
    d = decide(current)
    # client-go: LeaderTransitions + 1 on a change of hands.
    assert d == {"action": "update", "before": L.record(current), "taken_over": OTHER, "superseded": OTHER,
                 "msg": "took over the roll lock kube-system/roll from %s (nodes gpu-01, gpu-02; renewed %s; expired 400 s ago), "
                        "whose lease expired" % (OTHER, L.format_time(NOW - 4000)),
                 "body": {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                          "metadata": {"name": "roll", "namespace": "kube-system", "resourceVersion": "77",
                                       "labels": {"app.kubernetes.io/managed-by": "gpuops.provision"},
                                       "annotations": notes("gpu-03", progress=L.format_time(NOW), **{L.SUPERSEDED: OTHER})},
                          "spec": {"holderIdentity": ME, "leaseDurationSeconds": 600, "acquireTime": L.format_time(NOW),
                                   "renewTime": L.format_time(NOW), "leaseTransitions": 3}}}


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
    # No nodes given on a renewal: the recorded ones stay.
    assert d == {"action": "update", "before": L.record(mine), "taken_over": None, "superseded": "",
                 "msg": "renewed the roll lock kube-system/roll",
                 "body": {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                          "metadata": {"name": "roll", "namespace": "kube-system", "resourceVersion": "90",
                                       "labels": {"app.kubernetes.io/managed-by": "gpuops.provision"},
                                       "annotations": notes("gpu-01,gpu-02")},
                          "spec": {"holderIdentity": ME, "leaseDurationSeconds": 600, "acquireTime": mine["spec"]["acquireTime"],
                                   "renewTime": L.format_time(NOW), "leaseTransitions": 4}}}
    # Nodes given replace the recorded ones; a Lease without acquireTime gets now.
    del mine["spec"]["acquireTime"]
    body = decide(mine, nodes=("gpu-05",))["body"]
    assert body["spec"]["acquireTime"] == L.format_time(NOW) and body["metadata"]["annotations"] == notes("gpu-05")
    # Our own expired lease (nobody took it) is renewed too.
    assert decide(lease(holder=ME, renewed=NOW - 9999))["msg"] == "renewed the roll lock kube-system/roll"


def test_release_empties_the_holder_only_when_this_run_holds_it():
    mine = lease(holder=ME, transitions=4, rv="91")
    d = decide(mine, state="absent")
    # client-go release: holder "" and a duration of 1 s; acquireTime and the transitions stay.
    assert d == {"action": "update", "before": L.record(mine), "taken_over": None, "superseded": "",
                 "msg": "released the roll lock kube-system/roll",
                 "body": {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                          "metadata": {"name": "roll", "namespace": "kube-system", "resourceVersion": "91",
                                       "labels": {"app.kubernetes.io/managed-by": "gpuops.provision"},
                                       "annotations": notes("")},
                          "spec": {"holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": mine["spec"]["acquireTime"],
                                   "renewTime": L.format_time(NOW), "leaseTransitions": 4}}}
    # A Lease without acquireTime is released without one.
    del mine["spec"]["acquireTime"]
    assert decide(mine, state="absent")["body"]["spec"]["acquireTime"] is None
    current = lease()
    other = decide(current, state="absent")
    assert other == {"action": "none", "body": None, "before": L.record(current), "taken_over": None, "superseded": "",
                     "msg": "the roll lock kube-system/roll is not held by this run, but by %s (nodes gpu-01, gpu-02; renewed %s; "
                            "expires in 3590 s); left as it is" % (OTHER, L.format_time(NOW - 10))}
    # A holder with nothing more to say is named alone.
    bare = decide(lease(nodes="", renewed=None, duration=None), state="absent")
    assert bare["msg"] == "the roll lock kube-system/roll is not held by this run, but by %s; left as it is" % OTHER
    none = decide(None, state="absent")
    assert none == {"action": "none", "body": None, "before": None, "taken_over": None, "superseded": "",
                    "msg": "the roll lock kube-system/roll is not held by this run; left as it is"}


def test_record_reads_every_field():
    rec = L.record(lease(renewed=NOW, duration=60, transitions=5, rv="12"))
    assert rec == {"holder": OTHER, "acquired": L.format_time(NOW - 100), "renewed": L.format_time(NOW),
                   "duration": 60, "expires_at": pytest.approx(NOW + 60), "transitions": 5,
                   "nodes": ["gpu-01", "gpu-02"], "slots": [], "queue": [], "passed": [], "progress": "", "process": "",
                   "superseded": "", "resource_version": "12"}
    assert L.record(None) is None and L.record({}) is None
    bare = L.record({"metadata": {"name": "x"}, "spec": {}})
    assert bare["holder"] == "" and bare["expires_at"] is None and bare["nodes"] == [] and bare["transitions"] == 0


@pytest.mark.parametrize("kwargs, words", [
    ({"holder": ""}, "^holder must name this run$"),
    ({"holder": "  "}, "^holder must name this run$"),
    ({"ttl": 0}, "^ttl must be a positive number of seconds, got 0$"),
    ({"ttl": True}, "^ttl must be a positive number of seconds, got True$"),
    ({"ttl": "60"}, "^ttl must be a positive number of seconds, got '60'$"),
])
def test_bad_input_is_refused_naming_the_option(kwargs, words):
    with pytest.raises(L.LockError, match=words):
        decide(None, **kwargs)
    with pytest.raises(L.LockError, match="^state must be held or absent, got 'taken'$"):
        decide(None, state="taken")
    with pytest.raises(L.LockError, match="^name must be 1 to 253 characters, got ''$"):
        L.decide(None, "held", "", "ns", ME, 60, [], NOW)
    with pytest.raises(L.LockError, match="^namespace must not be empty$"):
        L.decide(None, "held", "roll", "", ME, 60, [], NOW)


def test_every_problem_is_named_at_once():
    with pytest.raises(L.LockError, match="^name must be 1 to 253 characters, got ''; namespace must not be empty; "
                                          "holder must name this run; ttl must be a positive number of seconds, got 0$"):
        L.decide(None, "held", "", "", " ", 0, [], NOW)


def test_the_limits_on_name_and_ttl_are_inclusive():
    # 253 characters and 1 s are allowed; 254 characters and 0 s are not.
    assert L.decide(None, "held", "r" * 253, "ns", ME, 1, [], NOW)["body"]["spec"]["leaseDurationSeconds"] == 1
    with pytest.raises(L.LockError, match="^name must be 1 to 253 characters, got '%s'$" % ("r" * 254)):
        L.decide(None, "held", "r" * 254, "ns", ME, 1, [], NOW)


# ---- beyond client-go: a holder known to be dead, the run it supersedes, check mode, bounds ----------------------

PROCESS = "host=ctl;boot=b1;pid=4242;start=99"


def test_a_live_lease_whose_controller_process_is_gone_is_taken_over_at_once():
    current = lease(renewed=NOW - 10, duration=3600)
    current["metadata"]["annotations"][L.PROCESS_ANNOTATION] = PROCESS
    d = decide(current, holder_alive=False, process="host=ctl;boot=b1;pid=5000;start=120", queue=["gpu-03"])
    assert d["action"] == "update" and d["taken_over"] == OTHER and d["superseded"] == OTHER
    assert d["msg"] == ("took over the roll lock kube-system/roll from %s (nodes gpu-01, gpu-02; renewed %s; expires in "
                        "3590 s), whose controller process is gone (%s)" % (OTHER, L.format_time(NOW - 10), PROCESS))
    assert d["body"]["metadata"]["annotations"] == notes(
        "gpu-03", queue="gpu-03", progress=L.format_time(NOW),
        **{L.PROCESS_ANNOTATION: "host=ctl;boot=b1;pid=5000;start=120", L.SUPERSEDED: OTHER})
    # Alive, or not knowable from here: the lease holds.
    assert decide(current, holder_alive=True)["action"] == "refuse"
    assert decide(current, holder_alive=None)["action"] == "refuse"


def test_an_interrupted_holder_recorded_on_a_free_lease_is_superseded_by_the_next_run():
    released = lease(holder="", duration=1, renewed=NOW - 1)
    released["metadata"]["annotations"][L.SUPERSEDED] = OTHER
    d = decide(released)
    assert d["taken_over"] is None and d["superseded"] == OTHER and d["msg"] == "took the roll lock kube-system/roll"
    assert d["body"]["metadata"]["annotations"][L.SUPERSEDED] == OTHER
    # A renewal keeps the record and says so; a clean release clears it.
    mine = lease(holder=ME)
    mine["metadata"]["annotations"].update({L.SUPERSEDED: OTHER, L.SLOTS_ANNOTATION: "gpu-01", L.QUEUE_ANNOTATION: "gpu-01",
                                            L.PASSED_ANNOTATION: "gpu-01", L.PROGRESS_ANNOTATION: "T"})
    renewed = decide(mine, nodes=())
    assert renewed["superseded"] == OTHER
    assert renewed["body"]["metadata"]["annotations"] == notes(
        "gpu-01,gpu-02", slots="gpu-01", queue="gpu-01", passed="gpu-01", progress="T", **{L.SUPERSEDED: OTHER})
    assert L.SUPERSEDED not in decide(mine, state="absent")["body"]["metadata"]["annotations"]


def test_a_release_for_a_dead_controller_records_the_holder_for_the_next_run():
    mine = lease(holder=ME)
    d = decide(mine, state="absent", interrupted=True)
    assert d["msg"] == "released the roll lock kube-system/roll, whose holder's controller is gone"
    assert d["body"]["metadata"]["annotations"][L.SUPERSEDED] == ME and d["body"]["spec"]["holderIdentity"] == ""


def test_check_mode_says_what_would_be_done():
    assert decide(None, check=True)["msg"] == "would take the roll lock kube-system/roll"
    assert decide(lease(holder=ME), check=True)["msg"] == "would renew the roll lock kube-system/roll"
    assert decide(lease(holder=ME), state="absent", check=True)["msg"] == "would release the roll lock kube-system/roll"
    assert decide(lease(renewed=NOW - 4000), check=True)["msg"].startswith("would take over the roll lock kube-system/roll from ")


def test_the_holder_is_bounded():
    with pytest.raises(L.LockError, match=r"^holder must be at most 1024 characters, got 10000$"):
        decide(None, holder="h" * 10000)
    assert decide(None, holder="h" * 1024)["action"] == "create"


# ---- the renewer beside the roll (api.keep_lock; issue 45 defect 5) ---------------------------------------------

class FakeLeases:
    """CoordinationV1Api over one Lease held by ME; ``fail_at``: the renewal attempts (1-based) that get a 500."""

    def __init__(self, clock, fail_at=()):
        self.clock, self.fail_at, self.attempts, self.renewed_at = clock, set(fail_at), 0, []
        self.lease = lease(holder=ME, renewed=time.time(), duration=9)

    def read_namespaced_lease(self, name, namespace, **_kwargs):
        return type("Response", (), {"data": json.dumps(self.lease).encode()})()

    def replace_namespaced_lease(self, name, namespace, body, **_kwargs):
        self.attempts += 1
        if self.attempts in self.fail_at:
            from kubernetes.client.rest import ApiException  # pylint: disable=import-outside-toplevel
            raise ApiException(status=500, reason="Internal Server Error")
        self.lease = body
        self.renewed_at.append(self.clock.now)
        return type("Response", (), {"data": json.dumps(body).encode()})()


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def keep(monkeypatch, fail_at=(), keep_alive=20):
    from ansible_collections.gpuops.provision.plugins.module_utils._k8s import api  # pylint: disable=import-outside-toplevel
    clock = FakeClock()
    leases = FakeLeases(clock, fail_at)
    monkeypatch.setattr(api.kubernetes.client, "CoordinationV1Api", lambda _api: leases)
    p = {"name": "roll", "namespace": "kube-system", "holder": ME, "ttl": 9, "keep_alive": keep_alive, "timeout": 5,
         "controller": None}
    return api.keep_lock(None, p, sleep=clock.sleep, clock=clock), leases


def test_one_transient_error_in_a_renewal_is_retried_and_the_lock_kept(monkeypatch):
    # ttl 9: a renewal every 3 s (RetryPeriod), a failed one tried again 2 s later, given up only after 6 s
    # without a successful one (RenewDeadline), as client-go's leader election does.
    kept, leases = keep(monkeypatch, fail_at=(2,))
    assert kept["ended"] == "keep_alive_elapsed" and kept["renewals"] == leases.attempts - 1
    gaps = [b - a for a, b in zip(leases.renewed_at, leases.renewed_at[1:])]
    assert leases.renewed_at[0] == 0 and max(gaps) <= 5.1 and leases.renewed_at[-1] > 15, leases.renewed_at
    assert leases.lease["spec"]["holderIdentity"] == ME


def test_renewals_failing_past_the_renew_deadline_end_the_renewer(monkeypatch):
    kept, leases = keep(monkeypatch, fail_at=range(2, 100))
    assert kept["ended"] == "renew_failed" and kept["renewals"] == 1
    assert kept["msg"].startswith("no renewal of the roll lock succeeded for 6 s: ")
    assert leases.attempts == 4  # at 3, 5 and 7 s after the one success at 0 s


# ---- a write of this run's own lock that meets 409 (api.roll_lock) ----------------------------------------------

class RacedLeases:
    """CoordinationV1Api whose Lease another writer changes between the module's read and its first ``races`` writes,
    as the API server's optimistic concurrency answers then (409, the resourceVersion read is stale): ``by`` is the
    holder that writer leaves (ME: this run's own renewer renewing)."""

    def __init__(self, current, races=1, by=ME):
        self.lease, self.races, self.by, self.writes = current, races, by, []

    def read_namespaced_lease(self, name, namespace, **_kwargs):
        return type("Response", (), {"data": json.dumps(self.lease).encode()})()

    def replace_namespaced_lease(self, name, namespace, body, **_kwargs):
        from kubernetes.client.rest import ApiException  # pylint: disable=import-outside-toplevel
        if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        if self.races:
            self.races -= 1
            rv = str(int(self.lease["metadata"]["resourceVersion"]) + 1)
            self.lease = lease(holder=self.by, renewed=time.time(), duration=30, rv=rv)
            raise ApiException(status=409, reason="Conflict")
        self.writes.append(body)
        self.lease = dict(body, metadata=dict(body["metadata"], resourceVersion=str(int(self.lease["metadata"]["resourceVersion"]) + 1)))
        return type("Response", (), {"data": json.dumps(self.lease).encode()})()


def run_roll_lock(monkeypatch, leases, state):
    from ansible_collections.gpuops.provision.plugins.module_utils._k8s import api  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(api.kubernetes.client, "CoordinationV1Api", lambda _api: leases)
    p = {"name": "roll", "namespace": "kube-system", "holder": ME, "ttl": 30, "nodes": [], "timeout": 5, "state": state}
    return api.roll_lock(None, p, check_mode=False, diff=False)


def test_a_release_that_races_this_runs_renewer_reads_the_lease_again_and_releases_it(monkeypatch):
    # The roll's last play releases the lock while the renewer beside the roll renews it: 2026-12-07's integration
    # run, audit log: the renewer's update at 14.861, the release's update (read at 14.862, before it) 409 at 14.901;
    # the failed release took localhost, the only host of its play, and ansible-playbook stopped before the summary.
    leases = RacedLeases(lease(holder=ME, renewed=time.time(), duration=30))
    result, _warning = run_roll_lock(monkeypatch, leases, "absent")
    assert result["action"] == "update" and result["msg"] == "released the roll lock kube-system/roll"
    assert [w["spec"]["holderIdentity"] for w in leases.writes] == [""]


def test_a_renewal_that_races_this_runs_renewer_is_written_on_the_fresh_read(monkeypatch):
    leases = RacedLeases(lease(holder=ME, renewed=time.time(), duration=30), races=2)
    result, _warning = run_roll_lock(monkeypatch, leases, "held")
    assert result["msg"] == "renewed the roll lock kube-system/roll" and len(leases.writes) == 1


def test_a_take_that_meets_409_lost_to_another_run_and_changes_nothing(monkeypatch):
    from ansible_collections.gpuops.provision.plugins.module_utils._k8s import api  # pylint: disable=import-outside-toplevel
    leases = RacedLeases(lease(holder="", renewed=time.time() - 100, duration=1), by=OTHER)
    with pytest.raises(api.LockFailed, match=r"changed hands while this run took it \(Conflict\); nothing was changed"):
        run_roll_lock(monkeypatch, leases, "held")
    assert leases.writes == [] and leases.lease["spec"]["holderIdentity"] == OTHER


def test_a_release_that_keeps_meeting_409_gives_up(monkeypatch):
    from ansible_collections.gpuops.provision.plugins.module_utils._k8s import api  # pylint: disable=import-outside-toplevel
    leases = RacedLeases(lease(holder=ME, renewed=time.time(), duration=30), races=api.LEASE_CONFLICT_RETRIES)
    with pytest.raises(api.LockFailed, match=r"held by this run, changed between each read and write \(5 conflicts in a row: "
                                             r"Conflict\); nothing was changed"):
        run_roll_lock(monkeypatch, leases, "absent")
    assert leases.writes == []
