"""The device-plugin stand-in's sharing (lab/kube/gpu_resources.py select_config / parse_sharing / apply_sharing and
device_plugin.py SharingConfigs), each rule against the NVIDIA/k8s-device-plugin or GPU Operator function it follows;
then once against the upstream control plane: the ClusterPolicy, the ConfigMap and the node label read through the API."""
from __future__ import annotations

import json
import os
import sys

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "lab", "kube"))
import device_plugin as DP  # noqa: E402  pylint: disable=import-error,wrong-import-position
import gpu_resources as R  # noqa: E402  pylint: disable=import-error,wrong-import-position
import kube_harness as kh  # noqa: E402  pylint: disable=import-error,wrong-import-position

H100 = "NVIDIA H100 80GB HBM3"


def ts(replicas=4, rename=None, key="timeSlicing", **extra):
    section = {"resources": [{"name": "nvidia.com/gpu", "replicas": replicas}]}
    if rename is not None:
        section["renameByDefault"] = rename
    section.update(extra)
    return yaml.safe_dump({"version": "v1", "sharing": {key: section}})


def test_select_config_follows_config_manager():
    # cmd/config-manager/main.go updateConfigName: label first (must exist), then DEFAULT_CONFIG (must exist), then
    # FALLBACK_STRATEGIES=empty as the GPU Operator sets it (controllers/object_controls.go).
    assert R.select_config({"a", "default"}, "a", "default") == ("a", None)
    assert R.select_config({"a"}, "b", "a") == (None, "specified config b does not exist")
    assert R.select_config({"a", "default"}, "", "default") == ("default", None)
    assert R.select_config({"a"}, "", "default") == (None, "specified config default does not exist")
    assert R.select_config({"a"}, "", "") == ("", None)


def test_parse_sharing_follows_api_config_v1():
    assert R.parse_sharing(ts()) == ({"strategy": "time-slicing", "replicas": {"nvidia.com/gpu": (4, "nvidia.com/gpu")},
                                      "fail_requests_greater_than_one": False}, None)
    # replicas.go disableResoureRenaming: renameByDefault -> "<name>.shared"; a per-resource rename is ignored.
    shared = R.parse_sharing(ts(rename=True))[0]
    assert shared["replicas"] == {"nvidia.com/gpu": (4, "nvidia.com/gpu.shared")}
    own = yaml.safe_dump({"sharing": {"timeSlicing": {"resources": [{"name": "gpu", "replicas": 2, "rename": "x"}]}}})
    assert R.parse_sharing(own)[0]["replicas"] == {"nvidia.com/gpu": (2, "nvidia.com/gpu")}
    # config.go NewConfig: MPS defaults failRequestsGreaterThanOne to true; sharing.go: MPS wins.
    mps = R.parse_sharing(ts(key="mps"))[0]
    assert mps["strategy"] == "mps" and mps["fail_requests_greater_than_one"] is True
    assert R.parse_sharing(yaml.safe_dump({"version": "v1", "flags": {"migStrategy": "mixed"}})) == (None, None)
    assert R.parse_sharing("") == (None, None)
    assert R.parse_sharing(ts(replicas=1))[1].endswith("number of replicas must be >= 2")
    assert R.parse_sharing(yaml.safe_dump({"sharing": {"timeSlicing": {"resources": []}}}))[1].endswith("no resources specified")
    assert R.parse_sharing(yaml.safe_dump({"sharing": {"mps": {"resources": [{"name": "gpu"}]}}}))[1].endswith("no replicas specified")
    assert R.parse_sharing(yaml.safe_dump({"version": "v2"}))[1].endswith("unknown version: v2")


def test_apply_sharing_follows_update_device_map_with_replicas():
    whole = {"gpus": [{"model": H100, "mig_mode": "disabled"}] * 2}
    sharing = R.parse_sharing(ts())[0]
    assert R.apply_sharing({"nvidia.com/gpu": 2}, sharing, whole) == ({"nvidia.com/gpu": 8}, None)
    renamed = R.parse_sharing(ts(rename=True))[0]
    assert R.apply_sharing({"nvidia.com/gpu": 2}, renamed, whole) == ({"nvidia.com/gpu.shared": 8}, None)
    # Resources the config does not name keep their count (MIG devices beside a whole GPU).
    assert R.apply_sharing({"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 2}, sharing, whole) == (
        {"nvidia.com/gpu": 4, "nvidia.com/mig-1g.10gb": 2}, None)
    assert R.apply_sharing({"nvidia.com/gpu": 2}, None, whole) == ({"nvidia.com/gpu": 2}, None)
    # internal/plugin/mps.go getMPSOptions: no MPS on MIG devices; mps/device.go maxClients: 48 from 7.5, else 16.
    mps = R.parse_sharing(ts(key="mps"))[0]
    mig = {"gpus": [{"model": H100, "mig_mode": "enabled"}]}
    assert R.apply_sharing({"nvidia.com/mig-3g.40gb": 2}, mps, mig) == (
        {"nvidia.com/mig-3g.40gb": 0}, "sharing using MPS is not supported for MIG devices")
    many = R.parse_sharing(ts(replicas=20, key="mps"))[0]
    assert R.apply_sharing({"nvidia.com/gpu": 1}, many, whole, lambda m: (7, 0)) == (
        {"nvidia.com/gpu": 0}, "invalid device: maximum allowed replicas exceeded: 20 > 16")
    assert R.apply_sharing({"nvidia.com/gpu": 1}, many, whole, R.gpusim_compute_capability()) == ({"nvidia.com/gpu": 20}, None)
    assert R.gpusim_compute_capability()(H100) == (9, 0)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    base = tmp_path_factory.mktemp("sharing")
    state = base / "gpu-ts.json"
    state.write_text(json.dumps({"gpus": [{"model": H100, "mig_mode": "disabled"}] * 2}), encoding="utf-8")
    fixture = {"nodes": [{"metadata": {"name": "gpu-ts", "labels": {"nvidia.com/gpu.deploy.device-plugin": "true"}}}],
               "daemonsets": [{"metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "gpu-operator"}}]}
    with kh.kube_lab(fixture, run_dir=str(base / "k8s"), gpusim={"gpu-ts": str(state)}) as session:
        yield session


def _advertised(lab, node="gpu-ts"):
    n = lab.core.read_node(node)
    alloc = {k: v for k, v in (n.status.allocatable or {}).items() if k.startswith("nvidia.com/")}
    return alloc, (n.metadata.annotations or {}).get(DP.ERROR_ANNOTATION)


def _wait(lab, want, what):
    return lab.wait_for(lambda: _advertised(lab)[0] == want, timeout=30, what=what)


def test_the_stand_in_follows_the_cluster_policy_configmap_label_and_pod_restart(lab):
    import kubernetes  # pylint: disable=import-outside-toplevel
    _wait(lab, {"nvidia.com/gpu": "2"}, "two whole GPUs before any ClusterPolicy")
    lab.create(DP.cluster_policy_crd())
    custom = kubernetes.client.CustomObjectsApi(lab.api_client)

    def established():
        try:
            custom.list_cluster_custom_object("nvidia.com", "v1", "clusterpolicies")
            return True
        except kubernetes.client.ApiException:
            return False
    lab.wait_for(established, what="the ClusterPolicy CRD served")
    lab.core.create_namespaced_config_map("gpu-operator", {"metadata": {"name": "dp-config"}, "data": {
        "default": yaml.safe_dump({"version": "v1"}), "ts4": ts(4), "ts2": ts(2, rename=True), "bad": ts(1)}})
    custom.create_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", DP.cluster_policy("dp-config", "default"))
    # The default key (no sharing) until the label selects one; then four replicas of each GPU.
    lab.core.patch_node("gpu-ts", {"metadata": {"labels": {R.CONFIG_LABEL: "ts4"}}})
    _wait(lab, {"nvidia.com/gpu": "8"}, "4 x 2 GPUs after the label")
    # A label naming no key: config-manager fails, the plugin keeps its config, the error is shown.
    lab.core.patch_node("gpu-ts", {"metadata": {"labels": {R.CONFIG_LABEL: "nope"}}})
    lab.wait_for(lambda: _advertised(lab)[1] == "specified config nope does not exist", timeout=30, what="the error")
    assert _advertised(lab)[0] == {"nvidia.com/gpu": "8"}
    lab.core.patch_node("gpu-ts", {"metadata": {"labels": {R.CONFIG_LABEL: "ts2"}}})
    _wait(lab, {"nvidia.com/gpu.shared": "4"}, "renamed shared resource")
    # The ConfigMap changes under the same key: nothing happens until the device plugin pod is replaced.
    lab.core.patch_namespaced_config_map("dp-config", "gpu-operator", {"data": {"ts2": ts(3, rename=True)}})
    import time  # pylint: disable=import-outside-toplevel
    time.sleep(2)
    assert _advertised(lab)[0] == {"nvidia.com/gpu.shared": "4"}
    pod = [p for p in lab.pods("gpu-operator", "gpu-ts") if p.metadata.labels.get("app") == "nvidia-device-plugin-daemonset"][0]
    lab.core.delete_namespaced_pod(pod.metadata.name, "gpu-operator")
    _wait(lab, {"nvidia.com/gpu.shared": "6"}, "the new content after the plugin pod restarted")
    # No label: the ClusterPolicy's default key; a file the plugin refuses keeps the previous config, with the error.
    lab.core.patch_node("gpu-ts", {"metadata": {"labels": {R.CONFIG_LABEL: None}}})
    _wait(lab, {"nvidia.com/gpu": "2"}, "the default config")
    lab.core.patch_node("gpu-ts", {"metadata": {"labels": {R.CONFIG_LABEL: "bad"}}})
    lab.wait_for(lambda: (_advertised(lab)[1] or "").endswith("number of replicas must be >= 2"), timeout=30, what="the parse error")
    assert _advertised(lab)[0] == {"nvidia.com/gpu": "2"}
