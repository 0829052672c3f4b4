"""The audit log read as the product's request log (lab/kube/requestlog.py), on events shaped as kube-apiserver writes
them (k8s.io/apiserver pkg/apis/audit/v1 Event: objectRef, user.groups, requestObject, responseStatus); the same
reading on a running control plane is tests/lab/test_kube_controlplane.py test_request_log_is_the_audit_log."""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "lab", "kube")))

import requestlog as RL  # noqa: E402  pylint: disable=wrong-import-position

PRODUCT = {"username": "gpuops-client", "groups": ["system:masters", RL.CLIENT_GROUP, "system:authenticated"]}
SCHEDULER = {"username": "gpuops-lab:kube-scheduler", "groups": ["system:masters", "system:authenticated"]}
LAB = {"username": "gpuops-lab:lab", "groups": ["system:masters", "system:authenticated"]}


def event(user, verb, uri, ref, code=201, stamp="2026-12-01T10:00:00.000000Z", body=None, message=None):
    ev = {"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Request", "stage": "ResponseComplete",
          "verb": verb, "requestURI": uri, "user": user, "objectRef": {"apiVersion": "v1", **ref},
          "responseStatus": {"metadata": {}, "code": code}, "stageTimestamp": stamp}
    if body is not None:
        ev["requestObject"] = body
    if message:
        ev["responseStatus"]["message"] = message
    return json.dumps(ev)


def binding(ns, pod, node):
    return event(SCHEDULER, "create", f"/api/v1/namespaces/{ns}/pods/{pod}/binding",
                 {"resource": "pods", "namespace": ns, "name": pod, "subresource": "binding"},
                 body={"kind": "Binding", "metadata": {"name": pod, "namespace": ns}, "target": {"kind": "Node", "name": node}})


def evict(ns, pod, code=201, message=None):
    return event(PRODUCT, "create", f"/api/v1/namespaces/{ns}/pods/{pod}/eviction",
                 {"resource": "pods", "namespace": ns, "name": pod, "subresource": "eviction"}, code=code,
                 body={"kind": "Eviction", "metadata": {"name": pod, "namespace": ns}}, message=message)


def test_eviction_names_the_node_the_scheduler_bound_the_pod_to():
    log = RL.from_audit("\n".join([binding("ml", "web-x1", "gpu-a"), evict("ml", "web-x1")]))
    assert [(r["node"], r["outcome"], r["status"]) for r in log] == [("gpu-a", "Evicted", 201)]
    assert RL.evictions(log, node="gpu-a", outcome="Evicted") == log


def test_pod_created_on_a_node_and_a_name_used_again_elsewhere():
    created = event(LAB, "create", "/api/v1/namespaces/ml/pods", {"resource": "pods", "namespace": "ml", "name": "db-0"},
                    body={"kind": "Pod", "metadata": {"name": "db-0"}, "spec": {"nodeName": "gpu-b"}})
    text = "\n".join([created, evict("ml", "db-0", 429, "Cannot evict pod as it would violate the pod's disruption budget."),
                      binding("ml", "db-0", "gpu-c"), evict("ml", "db-0")])
    log = RL.from_audit(text)
    assert [(r["node"], r["outcome"]) for r in log] == [("gpu-b", "TooManyRequests"), ("gpu-c", "Evicted")]
    assert "disruption budget" in log[0]["message"]


def test_only_the_products_requests_and_a_failed_placement_places_nothing():
    refused = event(SCHEDULER, "create", "/api/v1/namespaces/ml/pods/p/binding",
                    {"resource": "pods", "namespace": "ml", "name": "p", "subresource": "binding"}, code=409,
                    body={"target": {"name": "gpu-z"}})
    patch = event(PRODUCT, "patch", "/api/v1/nodes/gpu-a?fieldManager=x", {"resource": "nodes", "name": "gpu-a"}, code=200,
                  stamp="2026-12-01T10:00:01.500000Z", body={"spec": {"unschedulable": True}})
    log = RL.from_audit("\n".join([refused, binding("ml", "q", "gpu-a"), patch, evict("ml", "p")]))
    assert [r["method"] for r in log] == ["PATCH", "POST"]
    assert log[0]["query"] == {"fieldManager": "x"} and log[0]["user"] == "gpuops-client"
    assert RL.timeline(log, "gpu-a")["cordons"] == 1 and RL.node_patches(log, "gpu-a") == [log[0]]
    assert log[1]["node"] is None                       # the 409 binding never put p on gpu-z
    assert RL.from_audit("\n".join([patch, patch, evict("ml", "p")]), start=2) == [log[1]]
    assert RL.from_audit("") == []


def test_node_registrations_are_every_users_creates_of_that_node():
    kubelet = {"username": "gpuops-lab:kubelet", "groups": ["system:masters", "system:authenticated"]}
    body = {"kind": "Node", "metadata": {"name": "gpu-new"}, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}
    text = "\n".join([
        event(kubelet, "create", "/api/v1/nodes", {"resource": "nodes", "name": "gpu-new"}, body=body),
        event(kubelet, "create", "/api/v1/nodes", {"resource": "nodes", "name": "gpu-other"}, body={"metadata": {"name": "gpu-other"}}),
        event(PRODUCT, "patch", "/api/v1/nodes/gpu-new", {"resource": "nodes", "name": "gpu-new"}, code=200, body={}),
    ])
    regs = RL.node_registrations(text, "gpu-new")
    assert [(r["user"], r["status"], r["body"]["spec"]["taints"][0]["key"]) for r in regs] == [("gpuops-lab:kubelet", 201, "k")]
    assert RL.from_audit(text)[0]["method"] == "PATCH" and len(RL.from_audit(text)) == 1
