"""kubernetes.core modules, run unchanged as `ansible localhost -m ...` subprocesses, against the k8s stand-in."""

from __future__ import annotations

import json
import os
import sys

import pytest
from kubernetes import client, config

LAB = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "lab", "k8s"))
sys.path.insert(0, LAB)

from k8s_harness import k8s_lab  # noqa: E402  pylint: disable=wrong-import-position

PDB_MSG = "Cannot evict pod as it would violate the pod's disruption budget."


def owned(kind, name):
    return [{"kind": kind, "name": name}]


def fixture(min_available=1):
    return {
        "nodes": [{"metadata": {"name": "gpu-a", "labels": {"nvidia.com/gpu.present": "true"}}},
                  {"metadata": {"name": "gpu-b", "labels": {"nvidia.com/gpu.present": "true"}}},
                  {"metadata": {"name": "cpu-1"}}],
        "replicasets": [{"metadata": {"name": "web-1", "namespace": "apps"}}],
        "daemonsets": [{"metadata": {"name": "device-plugin", "namespace": "gpu-operator"}}],
        "pods": [
            {"metadata": {"name": "web-1-a", "namespace": "apps", "labels": {"app": "web"}, "ownerReferences": owned("ReplicaSet", "web-1")},
             "spec": {"nodeName": "gpu-a"}},
            {"metadata": {"name": "web-1-b", "namespace": "apps", "labels": {"app": "web"}, "ownerReferences": owned("ReplicaSet", "web-1")},
             "spec": {"nodeName": "gpu-b"}},
            {"metadata": {"name": "cache-a", "namespace": "apps", "labels": {"app": "cache"}, "ownerReferences": owned("ReplicaSet", "web-1")},
             "spec": {"nodeName": "gpu-a", "volumes": [{"name": "scratch", "emptyDir": {}}]}},
            {"metadata": {"name": "dp-a", "namespace": "gpu-operator", "ownerReferences": owned("DaemonSet", "device-plugin")},
             "spec": {"nodeName": "gpu-a"}},
            {"metadata": {"name": "dp-b", "namespace": "gpu-operator", "ownerReferences": owned("DaemonSet", "device-plugin")},
             "spec": {"nodeName": "gpu-b"}},
        ],
        "poddisruptionbudgets": [{"metadata": {"name": "web", "namespace": "apps"},
                                  "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "web"}}}}],
    }


def core(lab):
    return client.CoreV1Api(config.new_client_from_config(config_file=lab.kubeconfig))


def pods_on(lab, node):
    return sorted(p.metadata.name for p in core(lab).list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items)


@pytest.fixture(name="lab")
def lab_fixture(tmp_path):
    with k8s_lab(fixture(), run_dir=str(tmp_path / "run")) as lab:
        yield lab


def test_cordon_is_idempotent_and_uncordon_reverts(lab):
    first = lab.run_module("kubernetes.core.k8s_drain", {"name": "gpu-a", "state": "cordon"})
    assert first.get("changed") is True and not first.get("failed"), first
    assert core(lab).read_node("gpu-a").spec.unschedulable is True
    again = lab.run_module("kubernetes.core.k8s_drain", {"name": "gpu-a", "state": "cordon"})
    assert again.get("changed") is False and "already marked unschedulable" in again["result"], again
    assert lab.cordons("gpu-a") == 1, "the second cordon must not PATCH the node"
    back = lab.run_module("kubernetes.core.k8s_drain", {"name": "gpu-a", "state": "uncordon"})
    assert back.get("changed") is True, back
    assert not core(lab).read_node("gpu-a").spec.unschedulable
    assert lab.cordons("gpu-a", value=False) == 1
    assert lab.cordons("gpu-b") == 0


def test_drain_evicts_only_that_nodes_pods(lab):
    res = lab.run_module("kubernetes.core.k8s_drain", {
        "name": "gpu-a", "state": "drain",
        "delete_options": {"ignore_daemonsets": True, "delete_emptydir_data": True, "wait_timeout": 30, "wait_sleep": 1},
    })
    assert res.get("changed") is True and not res.get("failed"), res
    assert "2 Pod(s) deleted from node" in res["result"], res
    # DaemonSet pod stays (ignored), the other node keeps all of its pods.
    assert pods_on(lab, "gpu-a") == ["dp-a"]
    assert pods_on(lab, "gpu-b") == ["dp-b", "web-1-b"]
    assert core(lab).read_node("gpu-a").spec.unschedulable is True
    assert sorted(e["name"] for e in lab.evictions(node="gpu-a", outcome="Evicted")) == ["cache-a", "web-1-a"]
    assert lab.evictions(node="gpu-b") == []
    assert lab.cordons("gpu-a") == 1


def test_drain_without_options_fails_and_reverts_its_cordon(lab):
    res = lab.run_module("kubernetes.core.k8s_drain", {"name": "gpu-a", "state": "drain"})
    assert res.get("failed") is True, res
    assert "cannot delete DaemonSet-managed Pods" in res["msg"]
    assert "cannot delete Pods with local storage" in res["msg"]
    assert not core(lab).read_node("gpu-a").spec.unschedulable
    assert (lab.cordons("gpu-a"), lab.cordons("gpu-a", value=False)) == (1, 1)
    assert lab.evictions() == []


def test_pdb_refusal_is_the_429_failure_message(tmp_path):
    with k8s_lab(fixture(min_available=2), run_dir=str(tmp_path / "run")) as lab:
        res = lab.run_module("kubernetes.core.k8s_drain", {
            "name": "gpu-a", "state": "drain", "pod_selectors": ["app=web"],
            "delete_options": {"ignore_daemonsets": True, "delete_emptydir_data": True},
        })
        assert res.get("failed") is True, res
        assert res["msg"] == f"Failed to delete pod apps/web-1-a due to: {PDB_MSG}"
        # pod_selectors went to the server as a labelSelector: the cache pod was never listed for eviction.
        listing = [r for r in lab.requests() if r["path"] == "/api/v1/pods"]
        assert [r["query"] for r in listing] == [{"fieldSelector": "spec.nodeName=gpu-a", "labelSelector": "app=web"}]
        assert [e["outcome"] for e in lab.evictions()] == ["TooManyRequests"]
        assert pods_on(lab, "gpu-a") == ["cache-a", "dp-a", "web-1-a"]


def test_k8s_info_lists_nodes_and_filters_by_label(lab):
    res = lab.run_module("kubernetes.core.k8s_info", {"kind": "Node"})
    assert not res.get("failed"), res
    assert sorted(n["metadata"]["name"] for n in res["resources"]) == ["cpu-1", "gpu-a", "gpu-b"]
    res = lab.run_module("kubernetes.core.k8s_info", {"kind": "Node", "label_selectors": ["nvidia.com/gpu.present=true"]})
    assert sorted(n["metadata"]["name"] for n in res["resources"]) == ["gpu-a", "gpu-b"]


def test_node_label_patch_and_removal(lab):
    add = lab.run_module("kubernetes.core.k8s", {
        "state": "patched", "kind": "Node", "name": "gpu-a",
        "definition": {"metadata": {"labels": {"nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.config.state": "pending"}}},
    })
    assert add.get("changed") is True and not add.get("failed"), add
    labels = core(lab).read_node("gpu-a").metadata.labels
    assert labels["nvidia.com/mig.config.state"] == "pending" and labels["nvidia.com/gpu.present"] == "true"
    remove = lab.run_module("kubernetes.core.k8s", {
        "state": "patched", "kind": "Node", "name": "gpu-a",
        "definition": {"metadata": {"labels": {"nvidia.com/mig.config.state": None}}},
    })
    assert remove.get("changed") is True, remove
    labels = core(lab).read_node("gpu-a").metadata.labels
    assert "nvidia.com/mig.config.state" not in labels and labels["nvidia.com/mig.config"] == "all-1g.10gb"
    assert "nvidia.com/mig.config" not in core(lab).read_node("gpu-b").metadata.labels


def test_taint_and_untaint(lab):
    taint = {"key": "gpuops.io/gpu-validation", "value": "pending", "effect": "NoSchedule"}
    res = lab.run_module("kubernetes.core.k8s_taint", {"name": "gpu-a", "state": "present", "taints": [taint]})
    assert res.get("changed") is True and not res.get("failed"), res
    assert [(t.key, t.value, t.effect) for t in core(lab).read_node("gpu-a").spec.taints] == [
        ("gpuops.io/gpu-validation", "pending", "NoSchedule")]
    res = lab.run_module("kubernetes.core.k8s_taint", {"name": "gpu-a", "state": "absent", "taints": [taint]})
    assert res.get("changed") is True, res
    assert not core(lab).read_node("gpu-a").spec.taints


def write_state(path, gpus):
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"gpus": gpus}, fh)
    os.replace(tmp, path)


def test_allocatable_reflects_gpusim_state_change(tmp_path):
    state = str(tmp_path / "gpu-a.json")
    write_state(state, [{"model": "NVIDIA H100 80GB HBM3", "mig_mode": "disabled"}] * 2)
    with k8s_lab(fixture(), run_dir=str(tmp_path / "run"), gpusim={"gpu-a": state}) as lab:
        before = lab.run_module("kubernetes.core.k8s_info", {"kind": "Node", "name": "gpu-a"})
        assert before["resources"][0]["status"]["allocatable"]["nvidia.com/gpu"] == "2"
        write_state(state, [{"model": "NVIDIA H100 80GB HBM3", "mig_mode": "enabled",
                             "gpu_instances": [{"profile": "1g.10gb"}] * 7}] * 2)
        after = lab.run_module("kubernetes.core.k8s_info", {"kind": "Node", "name": "gpu-a"})
        alloc = after["resources"][0]["status"]["allocatable"]
        assert alloc["nvidia.com/mig-1g.10gb"] == "14" and "nvidia.com/gpu" not in alloc
        assert after["resources"][0]["status"]["capacity"]["nvidia.com/mig-1g.10gb"] == "14"
