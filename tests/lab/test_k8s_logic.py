"""Pure rules of the Kubernetes stand-in (lab/k8s/k8s_logic.py): selectors, patches, budgets, device plugin."""

from __future__ import annotations

import os
import sys

import pytest

LAB = os.path.join(os.path.dirname(__file__), "..", "..", "lab", "k8s")
sys.path.insert(0, os.path.abspath(LAB))

import k8s_logic as L  # noqa: E402  pylint: disable=wrong-import-position
import k8s_gpusim  # noqa: E402  pylint: disable=wrong-import-position


def pod(name, node="n1", ns="apps", labels=None, phase="Running", terminating=False):
    meta = {"name": name, "namespace": ns, "labels": labels or {}}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase}}


# --- selectors ---

def test_field_selector_equality_inequality_and_missing_fields():
    p = pod("a", node="gpu-a")
    assert L.match_fields(p, L.parse_field_selector("spec.nodeName=gpu-a"))
    assert L.match_fields(p, L.parse_field_selector("spec.nodeName==gpu-a,metadata.namespace=apps"))
    assert not L.match_fields(p, L.parse_field_selector("spec.nodeName=gpu-b"))
    assert L.match_fields(p, L.parse_field_selector("spec.nodeName!=gpu-b"))
    assert not L.match_fields(p, L.parse_field_selector("spec.nodeName!=gpu-a"))
    # A missing field compares as the empty string, as the API server does for unset fields.
    assert L.match_fields(p, L.parse_field_selector("spec.schedulerName="))
    assert L.match_fields({"spec": {"unschedulable": True}}, L.parse_field_selector("spec.unschedulable=true"))


def test_label_selector_forms():
    labels = {"app": "web", "tier": "front"}
    ok = ["app=web", "app==web", "app!=db", "app in (web, db)", "env notin (prod)", "tier", "!env", "app=web,tier in (front)"]
    bad = ["app=db", "app!=web", "app in (db,x)", "tier notin (front)", "env", "!tier", "app=web,tier=back"]
    for sel in ok:
        assert L.match_labels(labels, L.parse_label_selector(sel)), sel
    for sel in bad:
        assert not L.match_labels(labels, L.parse_label_selector(sel)), sel
    assert L.match_labels({}, L.parse_label_selector("")), "empty selector matches everything"


@pytest.mark.parametrize("text", ["app in (a", "a)b", "=x", "app ~ x"])
def test_malformed_selectors_are_rejected(text):
    with pytest.raises(L.SelectorError):
        L.parse_label_selector(text)


def test_label_selector_object_match_expressions():
    sel = {"matchLabels": {"app": "web"}, "matchExpressions": [
        {"key": "tier", "operator": "In", "values": ["front"]}, {"key": "canary", "operator": "DoesNotExist"}]}
    assert L.label_selector_object_matches(sel, {"app": "web", "tier": "front"})
    assert not L.label_selector_object_matches(sel, {"app": "web", "tier": "back"})
    assert not L.label_selector_object_matches(sel, {"app": "web", "tier": "front", "canary": "1"})


# --- patches ---

def test_merge_patch_null_removes_and_lists_replace():
    node = {"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}
    out = L.apply_patch(node, {"metadata": {"labels": {"a": None, "c": "3"}}, "spec": {"taints": []}}, "application/merge-patch+json")
    assert out == {"metadata": {"labels": {"b": "2", "c": "3"}}, "spec": {"taints": []}}
    assert node["metadata"]["labels"] == {"a": "1", "b": "2"}, "input must not be mutated"


def test_strategic_merge_patch_keys_and_directives():
    obj = {"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}]},
           "spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}
    patch = {"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "DiskPressure", "$patch": "delete"}]},
             "spec": {"taints": [{"key": "y", "effect": "NoExecute"}]}, "$setElementOrder/conditions": [{"type": "Ready"}]}
    out = L.apply_patch(obj, patch, "application/strategic-merge-patch+json; charset=utf-8")
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "False"}]
    # Node taints have no patch strategy: the list is replaced whole.
    assert out["spec"]["taints"] == [{"key": "y", "effect": "NoExecute"}]
    out = L.apply_patch(obj, {"spec": {"$patch": "replace", "podCIDR": "10.0.0.0/24"}}, "application/strategic-merge-patch+json")
    assert out["spec"] == {"podCIDR": "10.0.0.0/24"}


def test_json_patch_and_bad_patches():
    obj = {"spec": {}}
    assert L.apply_patch(obj, [{"op": "add", "path": "/spec/unschedulable", "value": True}], "application/json-patch+json") == {
        "spec": {"unschedulable": True}}
    with pytest.raises(ValueError):
        L.apply_patch(obj, [{"op": "remove", "path": "/spec/missing"}], "application/json-patch+json")
    with pytest.raises(ValueError):
        L.apply_patch(obj, {"spec": {}}, "application/json-patch+json")
    with pytest.raises(ValueError, match="content type"):
        L.apply_patch(obj, {"spec": {}}, "text/plain")


# --- disruption budgets ---

def pdb(name="web", **spec):
    spec.setdefault("selector", {"matchLabels": {"app": "web"}})
    return {"metadata": {"name": name, "namespace": "apps"}, "spec": spec}


def test_pdb_status_min_available_max_unavailable_and_percentages():
    pods = [pod(f"w{i}", labels={"app": "web"}) for i in range(4)] + [pod("other", labels={"app": "db"})]
    assert L.pdb_status(pdb(minAvailable=3), pods)["disruptionsAllowed"] == 1
    assert L.pdb_status(pdb(maxUnavailable=1), pods)["disruptionsAllowed"] == 1
    expected = {"currentHealthy": 4, "desiredHealthy": 2, "expectedPods": 4, "disruptionsAllowed": 2}
    assert L.pdb_status(pdb(minAvailable="50%"), pods) == expected
    # maxUnavailable percentages round up, as the disruption controller does.
    assert L.pdb_status(pdb(maxUnavailable="30%"), pods)["desiredHealthy"] == 2
    pods[0]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert L.pdb_status(pdb(minAvailable=3), pods)["disruptionsAllowed"] == 0, "terminating pods are not healthy"


def test_eviction_verdicts():
    pods = [pod("w1", labels={"app": "web"}), pod("w2", labels={"app": "web"})]
    code, body = L.eviction_verdict(pods[0], [pdb(minAvailable=2)], pods)
    assert code == 429 and body["reason"] == "TooManyRequests"
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert "needs 2 healthy pods and has 2 currently" in body["details"]["causes"][0]["message"]
    assert L.eviction_verdict(pods[0], [pdb(minAvailable=1)], pods) == (201, None)
    assert L.eviction_verdict(pods[0], [], pods) == (201, None)
    # A PDB in another namespace does not apply.
    other_ns = pdb(minAvailable=2)
    other_ns["metadata"]["namespace"] = "elsewhere"
    assert L.eviction_verdict(pods[0], [other_ns], pods) == (201, None)
    assert L.eviction_verdict(pods[0], [pdb(minAvailable=1), pdb("web2", minAvailable=1)], pods)[0] == 500
    terminating = pod("w1", labels={"app": "web"}, terminating=True)
    assert L.eviction_verdict(terminating, [pdb(minAvailable=2)], pods) == (201, None)


# --- device plugin ---

A100 = "NVIDIA A100-SXM4-40GB"


def test_device_plugin_mixed_with_named_entries_and_defensive_modes():
    state = {"gpus": [
        {"model": A100, "mig_mode": "enabled", "gpu_instances": [
            {"profile": "MIG 1g.5gb"}, {"profile": "1g.5gb"}, {"profile": "3g.20gb", "compute_instances": [{"profile": "1c.3g.20gb"}]},
        ]},
        {"model": A100, "mig_mode": {"current": "disabled", "pending": "enabled"}},
        {"model": A100, "mig_mode": 1, "gpu_instances": [{"profile": "2g.10gb", "compute_instances": []}]},
        "garbage",
    ]}
    res, err = L.device_plugin_resources(state, "mixed")
    assert err is None
    # Empty GI (no compute instance) is no device; pending-enable still counts as a full GPU. The 1c.3g.20gb CI is
    # not registered: NVIDIA/k8s-device-plugin internal/rm/rm.go (mixed: "if info.C != info.G { return nil }").
    assert res == {"nvidia.com/mig-1g.5gb": 2, "nvidia.com/gpu": 1}
    assert L.device_plugin_resources({}, "mixed") == ({}, None)
    assert L.device_plugin_resources({"gpus": "x"}, "mixed") == ({}, None)
    assert L.device_plugin_resources({"driver_loaded": False, "gpus": state["gpus"]}, "mixed") == ({}, "NVML is not available on the node")


def test_device_plugin_single_and_none():
    homogeneous = {"gpus": [{"mig_mode": 1, "gpu_instances": [{"profile": "1g.10gb"}] * 7}] * 2}
    assert L.device_plugin_resources(homogeneous, "single") == ({"nvidia.com/gpu": 14}, None)
    assert L.device_plugin_resources(homogeneous, "none") == ({"nvidia.com/gpu": 2}, None)
    mixed = {"gpus": [{"mig_mode": 1, "gpu_instances": [{"profile": "1g.10gb"}, {"profile": "2g.20gb"}]}]}
    assert L.device_plugin_resources(mixed, "single") == ({"nvidia.com/gpu": 0}, "more than one MIG device type present on node")
    with pytest.raises(ValueError):
        L.device_plugin_resources(mixed, "bogus")


def test_device_plugin_names_gpusim_id_only_state():
    namer = k8s_gpusim.gpusim_namer()
    if namer is None:
        pytest.skip("lab/gpusim model table not present")
    state = {"gpus": [{"model": A100, "mig_mode": 1, "gpu_instances": [
        {"profile_id": 19, "compute_instances": [{"slices": 1}]},
        {"profile_id": 14, "compute_instances": [{"profile_id": 0}, {"profile_id": 0}]},
        {"profile_id": 9, "compute_instances": [{"slices": 3}]},
    ]}]}
    res = L.device_plugin_resources(state, "mixed", namer)[0]
    # 1c.2g.10gb CIs are not advertised by the mixed strategy (internal/rm/rm.go AddDefaultResourcesToConfig).
    assert res == {"nvidia.com/mig-1g.5gb": 1, "nvidia.com/mig-3g.20gb": 1}


def test_apply_node_resources_replaces_only_nvidia_keys():
    node = {"status": {"capacity": {"cpu": "8", "nvidia.com/gpu": "1"}, "allocatable": {"cpu": "7", "nvidia.com/mig-1g.5gb": "7"}}}
    L.apply_node_resources(node, {"nvidia.com/mig-3g.20gb": 2})
    assert node["status"]["capacity"] == {"cpu": "8", "nvidia.com/mig-3g.20gb": "2"}
    assert node["status"]["allocatable"] == {"cpu": "7", "nvidia.com/mig-3g.20gb": "2"}
