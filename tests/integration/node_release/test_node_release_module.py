# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpuops.provision.node_release against the lab's upstream kube-apiserver (lab/kube): the order of its writes in
the API server's audit log, the wait on what the device-plugin stand-in advertises from the node's gpusim file (the
kubelet's node status, lab/kube/device_plugin.py), the operator validator recreated by the real DaemonSet
controller, and what a wait that runs out leaves."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "lab", "kube"))
import kube_harness  # noqa: E402  pylint: disable=import-error,wrong-import-position
from requestlog import mig_allocatable, node_patches, unschedulable, writes  # noqa: E402  pylint: disable=import-error,wrong-import-position

from ansible_collections.gpuops.provision.plugins.modules import node_release  # noqa: E402

pytestmark = pytest.mark.slow

NODE = "gpu-a"
NS = "gpu-operator"
VALIDATOR = "app=nvidia-operator-validator"
PAUSED = "paused-for-mig-change"
H100 = "NVIDIA H100 80GB HBM3"
# gpusim seeds: two 3g.40gb, then one of each balanced profile (H100: 9 = 3g.40gb, 14 = 2g.20gb, 19 = 1g.10gb).
THREE_G = [{"profile_id": 9, "start": 0, "compute_instances": [{"slices": 3}]},
           {"profile_id": 9, "start": 4, "compute_instances": [{"slices": 3}]}]
BALANCED = [{"profile_id": 19, "start": 0, "compute_instances": [{"slices": 1}]},
            {"profile_id": 19, "start": 1, "compute_instances": [{"slices": 1}]},
            {"profile_id": 14, "start": 2, "compute_instances": [{"slices": 2}]},
            {"profile_id": 9, "start": 4, "compute_instances": [{"slices": 3}]}]
BALANCED_RESOURCES = {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-2g.20gb": 1, "nvidia.com/mig-3g.40gb": 1}


def write_state(path, instances):
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"gpus": [{"model": H100, "mig_mode": "enabled", "gpu_instances": instances}]}, fh)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    base = tmp_path_factory.mktemp("release")
    state = str(base / "gpu-a.gpusim.json")
    write_state(state, THREE_G)
    fixture = {
        "nodes": [{"metadata": {"name": NODE, "labels": {
            "nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/gpu.deploy.operator-validator": "true"}}}],
        "daemonsets": [{"metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": NS}},
                       {"metadata": {"name": "nvidia-operator-validator", "namespace": NS,
                                     "labels": {"app": "nvidia-operator-validator"}}}],
    }
    # The device plugin advertises a changed gpusim file only once it is 2 s old (a plugin restarting after a change).
    with kube_harness.kube_lab(fixture, run_dir=str(base / "k8s"), gpusim={NODE: state}, devplugin_lag=2.0) as running:
        running.state_path = state
        running.wait_for(lambda: mig_allocatable(node(running)) == {"nvidia.com/mig-3g.40gb": 2}, timeout=60,
                         what="the device plugin to advertise the seed")
        yield running


def node(lab):
    return lab.api_client.sanitize_for_serialization(lab.core.read_node(NODE))


def set_node(lab, labels, cordoned):
    lab.core.patch_node(NODE, {"metadata": {"labels": labels}, "spec": {"unschedulable": cordoned}})


def validator_pods(lab):
    return sorted(p.metadata.name for p in lab.core.list_namespaced_pod(NS, label_selector=VALIDATOR).items
                  if not p.metadata.deletion_timestamp)


def since(lab, start):
    return [r for r in lab.requests()[start:] if r["path"].startswith("/api/v1/")]


def args(lab, **kw):
    out = {"name": NODE, "kubeconfig": lab.kubeconfig, "namespace": NS, "wait_timeout": 30}
    out.update(kw)
    return out


def test_restore_restart_wait_then_one_patch_with_the_labels_and_the_uncordon(lab, run_module):
    set_node(lab, {"nvidia.com/gpu.deploy.device-plugin": PAUSED, "nvidia.com/mig.config.state": "pending"}, True)
    lab.wait_for(lambda: validator_pods(lab), what="the validator pod")
    old_validator = validator_pods(lab)
    start = len(lab.requests())
    # The GPUs change now; the device plugin shows it 2 s later, so the module must wait for it.
    write_state(lab.state_path, BALANCED)
    changed_at = time.time()
    result = run_module(node_release, args(
        lab, restore_labels={"nvidia.com/gpu.deploy.device-plugin": "true"}, restart_pods=[VALIDATOR],
        resources=BALANCED_RESOURCES,
        labels={"nvidia.com/mig.config": "all-balanced", "nvidia.com/mig.config.state": "success"},
        unschedulable=False))
    assert not result.get("failed") and result["changed"], result
    assert result["restored"] == {"nvidia.com/gpu.deploy.device-plugin": "true"}
    assert result["pods_deleted"] == ["%s/%s" % (NS, old_validator[0])]
    assert result["final"] == {"metadata": {"labels": {"nvidia.com/mig.config": "all-balanced",
                                                       "nvidia.com/mig.config.state": "success"}},
                               "spec": {"unschedulable": False}}
    assert result["before"]["unschedulable"] is True and result["before"]["advertised"] == {"nvidia.com/mig-3g.40gb": 2}
    assert result["after"] == {"labels": node(lab)["metadata"]["labels"], "unschedulable": False,
                               "advertised": BALANCED_RESOURCES}
    # It waited for the device plugin (2 s lag), not longer than a watch needs to see the status change.
    assert result["waited_seconds"] is not None and 0.5 < result["waited_seconds"] < 15, result["waited_seconds"]
    assert time.time() - changed_at >= 2

    # The writes, in order: labels restored, the validator deleted, then one PATCH with the labels and the uncordon.
    log = since(lab, start)
    ours = [(r["method"], r["path"]) for r in writes(log)]
    assert ours == [("PATCH", "/api/v1/nodes/%s" % NODE),
                    ("DELETE", "/api/v1/namespaces/%s/pods/%s" % (NS, old_validator[0])),
                    ("PATCH", "/api/v1/nodes/%s" % NODE)], ours
    first, last = node_patches(log, NODE)
    assert unschedulable(first) is None and unschedulable(last) is False
    # The node was watched, not polled: one read, one watch (plus the read after it), no GET per second.
    reads = [r for r in log if r["method"] == "GET" and r["path"] == "/api/v1/nodes/%s" % NODE]
    assert len(reads) <= 3, reads
    assert any(r["path"] == "/api/v1/nodes" and r["verb"] == "watch" for r in log), log
    final = node(lab)
    assert final["spec"].get("unschedulable") in (None, False)
    assert final["metadata"]["labels"]["nvidia.com/gpu.deploy.device-plugin"] == "true"
    lab.wait_for(lambda: validator_pods(lab) and validator_pods(lab) != old_validator,
                 what="the DaemonSet controller to recreate the validator")

    # A second run with nothing to do writes nothing and does not wait.
    start = len(lab.requests())
    again = run_module(node_release, args(
        lab, restore_labels={"nvidia.com/gpu.deploy.device-plugin": "true"}, resources=BALANCED_RESOURCES,
        labels={"nvidia.com/mig.config": "all-balanced", "nvidia.com/mig.config.state": "success"},
        unschedulable=False))
    assert not again["changed"] and again["final"] == {} and again["restored"] == {}, again
    assert again["waited_seconds"] < 1
    assert writes(since(lab, start)) == []


def test_a_node_cordoned_before_the_roll_stays_cordoned(lab, run_module):
    set_node(lab, {"nvidia.com/mig.config.state": "pending"}, True)
    result = run_module(node_release, args(lab, labels={"nvidia.com/mig.config.state": "success"},
                                           unschedulable=True))
    assert result["changed"] and result["final"] == {"metadata": {"labels": {"nvidia.com/mig.config.state": "success"}}}
    assert node(lab)["spec"]["unschedulable"] is True


def test_a_wait_that_runs_out_leaves_the_node_cordoned_and_unlabelled(lab, run_module):
    set_node(lab, {"nvidia.com/mig.config.state": "pending", "nvidia.com/mig.config": "old"}, True)
    write_state(lab.state_path, BALANCED)
    lab.wait_for(lambda: mig_allocatable(node(lab)) == BALANCED_RESOURCES, what="the balanced geometry")
    start = len(lab.requests())
    t0 = time.monotonic()
    result = run_module(node_release, args(
        lab, resources={"nvidia.com/mig-3g.40gb": 2}, wait_timeout=3,
        labels={"nvidia.com/mig.config": "all-3g", "nvidia.com/mig.config.state": "success"}, unschedulable=False))
    assert result["failed"]
    assert 3 <= time.monotonic() - t0 < 20
    assert result["msg"] == (
        "gpu-a: the device plugin did not advertise the expected resources within 3 s: expected "
        "{nvidia.com/mig-3g.40gb: 2}, advertised {nvidia.com/mig-1g.10gb: 2, nvidia.com/mig-2g.20gb: 1, "
        "nvidia.com/mig-3g.40gb: 1}; the node is left cordoned")
    assert result["final"] == {} and result["restored"] == {}
    assert writes(since(lab, start)) == []
    after = node(lab)
    assert after["spec"]["unschedulable"] is True and after["metadata"]["labels"]["nvidia.com/mig.config"] == "old"


def test_check_mode_reports_the_patches_and_writes_nothing(lab, run_module):
    set_node(lab, {"nvidia.com/gpu.deploy.device-plugin": PAUSED, "nvidia.com/mig.config.state": "pending"}, True)
    lab.wait_for(lambda: validator_pods(lab), what="the validator pod")
    start = len(lab.requests())
    result = run_module(node_release, dict(args(
        lab, restore_labels={"nvidia.com/gpu.deploy.device-plugin": "true"}, restart_pods=[VALIDATOR],
        resources={"nvidia.com/mig-7g.80gb": 1},  # never advertised: check mode does not wait
        labels={"nvidia.com/mig.config.state": "success"}, unschedulable=False), _ansible_diff=True),
        check_mode=True)
    assert result["changed"] and not result.get("failed"), result
    assert result["restored"] == {"nvidia.com/gpu.deploy.device-plugin": "true"}
    assert result["pods_deleted"] == ["%s/%s" % (NS, validator_pods(lab)[0])]
    assert result["final"] == {"metadata": {"labels": {"nvidia.com/mig.config.state": "success"}},
                               "spec": {"unschedulable": False}}
    assert result["waited_seconds"] is None
    # The validator's restart is the one disruption, first in the diff (issue 41); the uncordon is none.
    assert result["disruptions"] == ["restart pods of node %s (deleted for their controllers to recreate), 1 pod(s): %s"
                                     % (NODE, result["pods_deleted"][0])], result
    assert result["diff"][1]["before"]["unschedulable"] is True and result["diff"][1]["after"]["unschedulable"] is False
    assert result["diff"][1]["after"]["labels"]["nvidia.com/gpu.deploy.device-plugin"] == "true"
    assert writes(since(lab, start)) == []


@pytest.mark.parametrize("kw, words", [
    ({"labels": {"nvidia.com/mig.config.state": True}}, "labels: the value of nvidia.com/mig.config.state must be a "
                                                        "string or null, got True"),
    ({"restore_labels": {"nvidia.com/gpu.deploy.dcgm": 1}}, "restore_labels: the value of nvidia.com/gpu.deploy.dcgm"),
    ({"resources": {"nvidia.com/gpu": "two"}}, "resources: every count must be an integer"),
    ({"wait_timeout": 0}, "wait_timeout=0 is out of range"),
])
def test_bad_input_fails_naming_the_node_before_any_request(lab, run_module, kw, words):
    start = len(lab.requests())
    result = run_module(node_release, args(lab, **kw))
    assert result["failed"] and result["msg"].startswith("node gpu-a: ") and words in result["msg"], result["msg"]
    assert result["msg"].endswith("; nothing was changed")
    assert since(lab, start) == []


def test_an_unreachable_api_fails_naming_the_node(tmp_path, run_module):
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}], "users": [{"name": "u", "user": {}}]}))
    result = run_module(node_release, {"name": NODE, "kubeconfig": str(config), "timeout": 2})
    assert result["failed"] and result["msg"].startswith("node gpu-a: cannot reach the Kubernetes API: "), result
