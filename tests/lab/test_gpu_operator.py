"""The lab's GPU Operator (lab/kube/gpu_operator.py, seed.py) on the upstream control plane, each behaviour against
the upstream code it follows: the operand DaemonSets as the operator renders them (tolerations, mig-manager's config
volume), the real DaemonSet controller placing and removing their pods, the device plugin serving only from its
pod, and the kubelet's late refresh of mig-manager's mounted config."""

from __future__ import annotations

import json
import os
import sys
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "lab", "kube"))
import gpu_operator as OP  # noqa: E402  pylint: disable=import-error,wrong-import-position
import mig_manager as MM  # noqa: E402  pylint: disable=import-error,wrong-import-position
import seed  # noqa: E402  pylint: disable=import-error,wrong-import-position
from kube_harness import kube_lab  # noqa: E402  pylint: disable=import-error,wrong-import-position
from requestlog import mig_allocatable  # noqa: E402  pylint: disable=import-error,wrong-import-position

H100 = "NVIDIA H100 80GB HBM3"
DP = "app=nvidia-device-plugin-daemonset"
DP_LABEL = "nvidia.com/gpu.deploy.device-plugin"
POOL_TAINT = {"key": "gpuops.io/gpu-pool", "value": "inference", "effect": "NoSchedule"}
DOC = {"version": "v1", "mig-configs": {
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "inference-3g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]}}


def test_render_follows_apply_common_daemonset_config_and_transform_mig_manager():
    """object_controls.go applyCommonDaemonsetConfig replaces the pod tolerations with spec.daemonsets.tolerations
    when it lists any; TransformMIGManager mounts the named ConfigMap and sets CONFIG_FILE, else the default one as
    config-default.yaml with DEFAULT_CONFIG_FILE."""
    ds = seed.workload_object("DaemonSet", {"metadata": {"name": "nvidia-mig-manager", "namespace": "gpu-operator"}}, 0)
    tspec = ds["spec"]["template"]["spec"]
    assert tspec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert tspec["nodeSelector"] == {"nvidia.com/gpu.deploy.mig-manager": "true"}
    assert seed.mig_manager_config_view(tspec) == (
        "default-mig-parted-config", [("config.yaml", "config-default.yaml")],
        {"DEFAULT_CONFIG_FILE": "/mig-parted-config/config-default.yaml"})
    assert seed.render_operand(ds, None) is False and seed.render_operand(ds, {}) is False
    policy = {"daemonsets": {"tolerations": [POOL_TAINT]}, "migManager": {"config": {"name": "gpuops-mig"}}}
    assert seed.render_operand(ds, policy) is True
    assert tspec["tolerations"] == [POOL_TAINT]   # replaced, not merged: nvidia.com/gpu is no longer tolerated
    assert seed.mig_manager_config_view(tspec) == ("gpuops-mig", [], {"CONFIG_FILE": "/mig-parted-config/config.yaml"})
    assert seed.render_operand(ds, policy) is False


def _plugin_pods(lab, node="gpu-a"):
    return [p.metadata.name for p in lab.running_pods("gpu-operator", node) if p.metadata.labels.get("app") ==
            "nvidia-device-plugin-daemonset"]


def _gpus(lab, node="gpu-a"):
    n = lab.get_json("/api/v1/nodes/" + node)["status"]
    return n["allocatable"].get("nvidia.com/gpu"), n["capacity"].get("nvidia.com/gpu")


def _label(lab, value):
    lab.core.patch_node("gpu-a", {"metadata": {"labels": {DP_LABEL: value}}})


def test_device_plugin_serves_only_from_a_pod_the_daemonset_controller_may_place(tmp_path):
    """The device plugin pod goes when its label is paused (the DaemonSet controller's nodeSelector check) and the
    node's GPUs with it (allocatable 0, capacity kept: devicemanager marks the stopped plugin's devices unhealthy).
    An untolerated NoSchedule taint keeps a new pod off (pkg/controller/daemon NodeShouldRunDaemonPod; a running pod
    stays), until the ClusterPolicy's daemonsets.tolerations lists it and the operator renders it."""
    state = tmp_path / "gpu-a.json"
    state.write_text(json.dumps({"gpus": [{"model": H100, "mig_mode": "disabled"}] * 2}))
    fixture = {"nodes": [{"metadata": {"name": "gpu-a"}}], "clusterPolicy": {}}
    with kube_lab(fixture, run_dir=str(tmp_path / "k8s"), gpusim={"gpu-a": str(state)}) as lab:
        lab.wait_for(lambda: _gpus(lab) == ("2", "2"), what="two GPUs served")
        _label(lab, "paused-for-mig-change")
        lab.wait_for(lambda: not _plugin_pods(lab), what="the plugin pod removed by the DaemonSet controller")
        lab.wait_for(lambda: _gpus(lab) == ("0", "2"), what="allocatable 0 without the plugin")
        lab.core.patch_node("gpu-a", {"spec": {"taints": [POOL_TAINT]}})
        _label(lab, "true")
        time.sleep(4)
        assert not _plugin_pods(lab) and _gpus(lab) == ("0", "2")
        import kubernetes  # pylint: disable=import-outside-toplevel
        custom = kubernetes.client.CustomObjectsApi(lab.api_client)
        custom.patch_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy", {"spec": {
            "daemonsets": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                                           dict(POOL_TAINT, operator="Equal")]}}})
        lab.wait_for(lambda: _plugin_pods(lab), what="the plugin pod placed once the taint is tolerated")
        lab.wait_for(lambda: _gpus(lab) == ("2", "2"), what="the GPUs served again")


def _mm_fixture(cluster_policy):
    return {"migManager": {"namespace": "gpu-operator", "stepDelay": 0.1, "configSyncPeriod": 6},
            "clusterPolicy": cluster_policy,
            "nodes": [{"metadata": {"name": "gpu-a", "labels": {MM.CONFIG_LABEL: "all-disabled", MM.DEPLOY_LABEL: "true"}}}],
            "configmaps": [{"metadata": {"name": "gpuops-mig", "namespace": "gpu-operator"},
                            "data": {"config.yaml": yaml.safe_dump(DOC)}}]}


def _state(lab, node="gpu-a"):
    return lab.get_json("/api/v1/nodes/" + node)["metadata"]["labels"].get(MM.STATE_LABEL)


def _select(lab, name):
    lab.core.patch_node("gpu-a", {"metadata": {"labels": {MM.CONFIG_LABEL: name, MM.STATE_LABEL: None}}})


def test_mig_manager_reads_its_configmap_only_when_the_cluster_policy_names_it(tmp_path):
    """Without spec.migManager.config.name mig-manager runs on a config generated from the hardware
    (cmd/nvidia-mig-manager/main.go setupMigConfig), so a name only the ConfigMap has fails validation."""
    state = tmp_path / "gpu-a.json"
    state.write_text(json.dumps({"gpus": [{"model": H100, "mig_mode": "disabled"}]}))
    with kube_lab(_mm_fixture({}), run_dir=str(tmp_path / "k8s"), gpusim={"gpu-a": str(state)}) as lab:
        lab.wait_for(lambda: _state(lab) == "success", what="all-disabled (generated config) applied at start")
        _select(lab, "inference-3g")
        lab.wait_for(lambda: _state(lab) in ("success", "failed"), what="mig-manager's answer")
        assert _state(lab) == "failed"
        assert any("not present" in e["event"] for e in lab.mig_manager_events("gpu-a"))


def test_a_changed_configmap_reaches_mig_manager_only_at_the_kubelet_sync(tmp_path):
    """The ClusterPolicy names the ConfigMap: mig-manager reads its mounted copy, which the kubelet writes at pod
    start and refreshes only at its periodic sync (configSyncPeriod 6 s here): a config added to the ConfigMap and
    selected at once fails; once the file has it, the same selection succeeds."""
    state = tmp_path / "gpu-a.json"
    state.write_text(json.dumps({"gpus": [{"model": H100, "mig_mode": "disabled"}]}))
    fixture = _mm_fixture({"migManager": {"config": {"name": "gpuops-mig"}}})
    with kube_lab(fixture, run_dir=str(tmp_path / "k8s"), gpusim={"gpu-a": str(state)}) as lab:
        lab.wait_for(lambda: _state(lab) == "success", what="all-disabled applied at start")
        pod = [p for p in lab.running_pods("gpu-operator", "gpu-a") if p.metadata.labels.get("app") == "nvidia-mig-manager"][0]
        mounted = OP.projected_path(OP.kubelet_root(lab.run_dir, "gpu-a"), pod.metadata.uid, "mig-parted-config",
                                    "config.yaml")
        assert yaml.safe_load(open(mounted, encoding="utf-8")) == DOC
        doc = dict(DOC, **{"mig-configs": dict(DOC["mig-configs"], **{"inference-1g": [
            {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]})})
        lab.core.patch_namespaced_config_map("gpuops-mig", "gpu-operator", {"data": {"config.yaml": yaml.safe_dump(doc)}})
        _select(lab, "inference-1g")
        lab.wait_for(lambda: _state(lab) in ("success", "failed"), what="mig-manager's answer on the stale file")
        assert _state(lab) == "failed"
        lab.wait_for(lambda: yaml.safe_load(open(mounted, encoding="utf-8")) == doc, timeout=15,
                     what="the kubelet's sync writing the new content")
        _select(lab, "all-disabled")
        lab.wait_for(lambda: _state(lab) == "success", what="back to all-disabled")
        _select(lab, "inference-1g")
        lab.wait_for(lambda: _state(lab) in ("success", "failed"), what="mig-manager's answer on the fresh file")
        assert _state(lab) == "success"
        lab.wait_for(lambda: mig_allocatable(lab.get_json("/api/v1/nodes/gpu-a")) == {"nvidia.com/mig-1g.10gb": 7},
                     what="the MIG devices served")
