# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_roll and node_release in-process against a Kubernetes API in memory: the client's CoreV1Api is replaced by
FakeCore (a Node and its pods; patches merged, evictions and deletes remove the pod), so the modules' own slot,
cordon, drain, GPU client stop and release run. What they disrupt (cordon, evictions, pods deleted) is their
``disruptions``, first in their diff."""

from __future__ import annotations

import copy
import json

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._common import disruption
from ansible_collections.gpuops.provision.plugins.module_utils._k8s import api as k8s_api, node_roll_apply
from ansible_collections.gpuops.provision.plugins.modules import node_release, node_roll

NODE = "gpu-1"


class Resp:
    """A response read with _preload_content=False."""

    def __init__(self, body):
        self.data = json.dumps(body).encode()


def merge(target, patch):
    """A JSON merge patch (RFC 7386): null removes a key."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


def pod(namespace, name, owner_kind, labels=None):
    return {"metadata": {"namespace": namespace, "name": name, "uid": "uid-" + name, "labels": labels or {},
                         "ownerReferences": [{"kind": owner_kind, "name": "owner", "controller": True}]},
            "spec": {"nodeName": NODE, "containers": [{"name": "c"}]}, "status": {"phase": "Running"}}


class Obj:
    """A client model object (what a call without _preload_content=False returns): attribute access."""

    def __init__(self, body):
        self.metadata = type("Meta", (), {"name": body["metadata"]["name"]})()


class FakeCore:
    """CoreV1Api of one Node and its pods; ``calls`` records every write."""

    def __init__(self, state):
        self.state = state

    def _node(self, kw):
        body = copy.deepcopy(self.state["node"])
        return Resp(body) if kw.get("_preload_content") is False else body

    def read_node(self, name, **kw):
        return self._node(kw)

    def patch_node(self, name, body, **kw):
        self.state["calls"].append(("patch_node", copy.deepcopy(body)))
        merge(self.state["node"], body)
        return self._node(kw)

    def _pods(self, namespace, kw):
        items = [p for p in self.state["pods"] if namespace is None or p["metadata"]["namespace"] == namespace]
        selector = kw.get("label_selector")
        if selector:
            key, _sep, value = selector.partition("=")
            items = [p for p in items if p["metadata"]["labels"].get(key) == value]
        if kw.get("_preload_content") is False:
            return Resp({"metadata": {"resourceVersion": "9"}, "items": items})
        return type("PodList", (), {"items": [Obj(p) for p in items]})()

    def list_pod_for_all_namespaces(self, **kw):
        return self._pods(None, kw)

    def list_namespaced_pod(self, namespace, **kw):
        return self._pods(namespace, kw)

    def _remove(self, what, name, namespace):
        self.state["calls"].append((what, "%s/%s" % (namespace, name)))
        self.state["pods"] = [p for p in self.state["pods"]
                              if (p["metadata"]["namespace"], p["metadata"]["name"]) != (namespace, name)]

    def create_namespaced_pod_eviction(self, name, namespace, body, **kw):
        self._remove("evict", name, namespace)

    def delete_namespaced_pod(self, name, namespace, **kw):
        self._remove("delete", name, namespace)


class FakeApi:
    @staticmethod
    def sanitize_for_serialization(obj):
        return obj


@pytest.fixture(name="cluster")
def fixture_cluster(monkeypatch):
    state = {"calls": [],
             "node": {"metadata": {"name": NODE, "resourceVersion": "7", "labels": {}, "annotations": {}}, "spec": {},
                      "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {}}},
             "pods": [pod("ml", "train-0", "ReplicaSet"), pod("ml", "train-1", "ReplicaSet"),
                      pod("gpu-operator", "dp-1", "DaemonSet", {"app": "nvidia-device-plugin-daemonset"}),
                      pod("gpu-operator", "validator-1", "DaemonSet", {"app": "nvidia-operator-validator"})]}
    monkeypatch.setattr(k8s_api, "api_client", lambda kubeconfig=None, context=None: FakeApi())
    monkeypatch.setattr(k8s_api.kubernetes.client, "CoreV1Api", lambda api=None: FakeCore(state))
    monkeypatch.setattr(node_roll_apply, "list_nodes", lambda api, timeout, page=500, cached=False: [state["node"]])
    return state


ROLL_ARGS = {"name": NODE, "roll": "mig_reconfigure", "_ansible_diff": True,
             "stop_pods": {"selectors": ["app=nvidia-device-plugin-daemonset"]}}
TAKEN = ["cordon node gpu-1", "drain node gpu-1, evicting 2 pod(s): ml/train-0, ml/train-1",
         "delete the GPU client pods of node gpu-1, 1 pod(s): gpu-operator/dp-1"]


def test_node_roll_check_mode_names_cordon_drain_and_client_stop_first(cluster, run_module):
    res = run_module(node_roll, dict(ROLL_ARGS), check_mode=True)
    assert res["changed"] is True and cluster["calls"] == [], res
    assert res["disruptions"] == TAKEN
    assert res["diff"][0] == {"prepared": disruption.prepared(TAKEN)}
    assert res["diff"][1]["before"] == {"phase": "", "unschedulable": False}
    assert res["diff"][1]["after"] == {"phase": "drained", "unschedulable": True}


def test_node_roll_does_what_it_named_and_a_rerun_past_the_drain_disrupts_nothing(cluster, run_module):
    res = run_module(node_roll, dict(ROLL_ARGS))
    assert res["changed"] is True and res["disruptions"] == TAKEN, res
    assert [c for c in cluster["calls"] if c[0] != "patch_node"] == [
        ("evict", "ml/train-0"), ("evict", "ml/train-1"), ("delete", "gpu-operator/dp-1")]
    assert cluster["node"]["spec"]["unschedulable"] is True
    again = run_module(node_roll, dict(ROLL_ARGS))
    assert again["disruptions"] == [] and not isinstance(again["diff"], list), again


RELEASE_ARGS = {"name": NODE, "restart_pods": ["app=nvidia-operator-validator"], "unschedulable": False,
                "restore_labels": {"nvidia.com/gpu.deploy.device-plugin": "true"}, "_ansible_diff": True}


def test_node_release_names_the_pods_it_restarts_not_the_uncordon(cluster, run_module):
    cluster["node"]["spec"]["unschedulable"] = True
    res = run_module(node_release, dict(RELEASE_ARGS), check_mode=True)
    restart = ["restart pods of node gpu-1 (deleted for their controllers to recreate), 1 pod(s): "
               "gpu-operator/validator-1"]
    assert res["changed"] is True and cluster["calls"] == [] and res["disruptions"] == restart, res
    assert res["diff"][0] == {"prepared": disruption.prepared(restart)}
    assert res["diff"][1]["before"]["unschedulable"] is True and res["diff"][1]["after"]["unschedulable"] is False


def test_node_release_that_cordons_says_so_and_one_without_pods_disrupts_nothing(cluster, run_module):
    res = run_module(node_release, {"name": NODE, "unschedulable": True, "_ansible_diff": True}, check_mode=True)
    assert res["disruptions"] == ["cordon node gpu-1"], res
    res = run_module(node_release, {"name": NODE, "labels": {"nvidia.com/mig.config.state": "success"},
                                    "_ansible_diff": True}, check_mode=True)
    assert res["changed"] is True and res["disruptions"] == [] and not isinstance(res["diff"], list), res
