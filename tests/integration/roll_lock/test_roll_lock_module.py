# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpuops.provision.roll_lock against the lab's upstream kube-apiserver (lab/kube): the Lease is the real
coordination.k8s.io/v1 object, so the optimistic concurrency that keeps two runs from both taking the lock is the
API server's own (a second create gets AlreadyExists, an update with a stale resourceVersion gets Conflict)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "lab", "kube"))
import kube_harness  # noqa: E402  pylint: disable=import-error,wrong-import-position

from ansible_collections.gpuops.provision.plugins.module_utils._k8s import roll_lock as k8s_roll_lock  # noqa: E402
from ansible_collections.gpuops.provision.plugins.modules import roll_lock  # noqa: E402

pytestmark = pytest.mark.slow

NS = "kube-system"
ME = "run-me (user=bob)"
OTHER = "run-other (user=alice awx_job=42)"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with kube_harness.kube_lab({"nodes": []}, run_dir=str(tmp_path_factory.mktemp("k8s"))) as running:
        yield running


@pytest.fixture()
def leases(lab):
    import kubernetes  # pylint: disable=import-outside-toplevel
    return kubernetes.client.CoordinationV1Api(lab.api_client)


def read(lab, leases, name):
    try:
        return lab.api_client.sanitize_for_serialization(leases.read_namespaced_lease(name, NS))
    except Exception as e:  # pylint: disable=broad-except
        if getattr(e, "status", None) == 404:
            return None
        raise


def args(lab, name, holder=ME, **kw):
    out = {"name": name, "namespace": NS, "holder": holder, "kubeconfig": lab.kubeconfig, "ttl": 600}
    out.update(kw)
    return out


def test_take_renew_refuse_and_release(lab, leases, run_module):
    name = "roll-basic"
    taken = run_module(roll_lock, args(lab, name, nodes=["gpu-01", "gpu-02"]))
    assert taken["changed"] and taken["action"] == "create" and not taken.get("failed"), taken
    lease = read(lab, leases, name)
    assert lease["spec"]["holderIdentity"] == ME and lease["spec"]["leaseDurationSeconds"] == 600
    assert lease["metadata"]["annotations"][k8s_roll_lock.NODES_ANNOTATION] == "gpu-01,gpu-02"
    assert taken["lease"]["resource_version"] == lease["metadata"]["resourceVersion"]

    # Another run is refused while the lease lives, naming the holder and its nodes; nothing is written.
    refused = run_module(roll_lock, args(lab, name, holder=OTHER, nodes=["gpu-02"]))
    assert refused["failed"] and refused["action"] == "none"
    assert refused["msg"].startswith("another roll holds the lock kube-system/roll-basic: %s (nodes gpu-01, gpu-02;" % ME)
    assert refused["msg"].endswith("; nothing was changed")
    assert read(lab, leases, name)["metadata"]["resourceVersion"] == lease["metadata"]["resourceVersion"]

    # The holder renews: new renewTime and resourceVersion, acquireTime and transitions kept.
    renewed = run_module(roll_lock, args(lab, name))
    assert renewed["action"] == "update" and renewed["msg"] == "renewed the roll lock kube-system/roll-basic"
    after = read(lab, leases, name)
    assert after["spec"]["acquireTime"] == lease["spec"]["acquireTime"]
    assert after["spec"]["renewTime"] > lease["spec"]["renewTime"]
    assert after["metadata"]["resourceVersion"] != lease["metadata"]["resourceVersion"]

    # Release by another run leaves it; release by the holder empties the holder; a second release changes nothing.
    other = run_module(roll_lock, args(lab, name, holder=OTHER, state="absent"))
    assert other["changed"] is False and read(lab, leases, name)["spec"]["holderIdentity"] == ME
    released = run_module(roll_lock, args(lab, name, state="absent"))
    assert released["changed"] and released["lease"]["holder"] == ""
    assert read(lab, leases, name)["spec"].get("holderIdentity") in (None, "")
    again = run_module(roll_lock, args(lab, name, state="absent"))
    assert again["changed"] is False and again["action"] == "none"
    # Once released, another run takes it at once.
    assert run_module(roll_lock, args(lab, name, holder=OTHER))["action"] == "update"
    assert read(lab, leases, name)["spec"]["holderIdentity"] == OTHER


def test_an_expired_lease_is_taken_over_naming_the_stale_holder(lab, leases, run_module):
    name = "roll-stale"
    stale = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name, "namespace": NS},
             "spec": {"holderIdentity": OTHER, "leaseDurationSeconds": 60, "leaseTransitions": 1,
                      "acquireTime": "2026-01-01T00:00:00.500000Z", "renewTime": "2026-01-01T00:00:00.500000Z"}}
    leases.create_namespaced_lease(NS, stale)
    out = run_module(roll_lock, args(lab, name, nodes=["gpu-07"], _ansible_diff=True))
    assert out["changed"] and out["taken_over"] == OTHER, out
    assert "took over the roll lock kube-system/roll-stale from %s" % OTHER in json.dumps(out.get("warnings", []))
    assert out["diff"]["before"]["holder"] == OTHER and out["diff"]["after"]["holder"] == ME
    lease = read(lab, leases, name)
    assert lease["spec"]["holderIdentity"] == ME and lease["spec"]["leaseTransitions"] == 2


def test_check_mode_reads_and_refuses_but_writes_nothing(lab, leases, run_module):
    name = "roll-check"
    out = run_module(roll_lock, args(lab, name), check_mode=True)
    assert out["changed"] and out["action"] == "create" and read(lab, leases, name) is None
    run_module(roll_lock, args(lab, name, holder=OTHER))
    version = read(lab, leases, name)["metadata"]["resourceVersion"]
    refused = run_module(roll_lock, args(lab, name), check_mode=True)
    assert refused["failed"] and "another roll holds the lock kube-system/roll-check: " + OTHER in refused["msg"]
    assert read(lab, leases, name)["metadata"]["resourceVersion"] == version


def test_bad_input_and_an_unreachable_api_fail_clearly(lab, run_module, tmp_path):
    out = run_module(roll_lock, args(lab, "roll-bad", ttl=5))
    assert out["failed"] and out["msg"] == "ttl=5 is out of range: 10 to 86400 (seconds a lease lives)"
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(open(lab.kubeconfig, encoding="utf-8").read().replace(lab.url, "https://127.0.0.1:9"), encoding="utf-8")
    out = run_module(roll_lock, args(lab, "roll-bad", kubeconfig=str(dead), timeout=3))
    assert out["failed"] and out["msg"].startswith("cannot reach the Kubernetes API for Lease kube-system/roll-bad: ")


@pytest.mark.parametrize("start", ["absent", "expired"])
def test_of_runs_that_race_for_a_free_lock_exactly_one_gets_it(lab, leases, start):
    name = "roll-race-" + start
    if start == "expired":
        leases.create_namespaced_lease(NS, {"metadata": {"name": name, "namespace": NS}, "spec": {
            "holderIdentity": OTHER, "leaseDurationSeconds": 10, "renewTime": "2026-01-01T00:00:00.500000Z"}})
    holders = ["racer-%d" % i for i in range(4)]
    with concurrent.futures.ThreadPoolExecutor(len(holders)) as pool:
        results = list(pool.map(lambda h: lab.run_module("gpuops.provision.roll_lock", args(lab, name, holder=h)), holders))
    winners = [h for h, r in zip(holders, results) if not r.get("failed")]
    assert len(winners) == 1, [r.get("msg") for r in results]
    assert read(lab, leases, name)["spec"]["holderIdentity"] == winners[0]
    for r in results:
        if r.get("failed"):
            assert ("another roll holds the lock kube-system/%s: %s" % (name, winners[0]) in r["msg"]
                    or "changed hands while this run took it" in r["msg"]), r["msg"]


def test_without_a_kubeconfig_it_tries_the_in_cluster_account_and_says_why_not(run_module, monkeypatch, tmp_path):
    for var in ("K8S_AUTH_KUBECONFIG", "K8S_AUTH_CONTEXT", "KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    import kubernetes  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "none"))
    out = run_module(roll_lock, {"name": "roll-x", "holder": ME})
    assert out["failed"] and out["msg"].startswith("cannot reach the Kubernetes API for Lease kube-system/roll-x: ")
    assert "Service host/port is not set" in out["msg"]
