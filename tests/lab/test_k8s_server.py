"""The Kubernetes stand-in over HTTPS, driven by the official kubernetes Python client (strict models)."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest
from kubernetes import client, config

LAB = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "lab", "k8s"))
sys.path.insert(0, LAB)

from k8s_harness import k8s_lab  # noqa: E402  pylint: disable=wrong-import-position

FIXTURE = {
    "nodes": [{"metadata": {"name": "gpu-a", "labels": {"nvidia.com/gpu.present": "true"}}}, {"metadata": {"name": "gpu-b"}}],
    "replicasets": [{"metadata": {"name": "web-1", "namespace": "apps"}}],
    "daemonsets": [{"metadata": {"name": "device-plugin", "namespace": "gpu-operator"}}],
    "pods": [
        {"metadata": {"name": "web-1-a", "namespace": "apps", "labels": {"app": "web"},
                      "ownerReferences": [{"kind": "ReplicaSet", "name": "web-1"}]}, "spec": {"nodeName": "gpu-a"}},
        {"metadata": {"name": "web-1-b", "namespace": "apps", "labels": {"app": "web"},
                      "ownerReferences": [{"kind": "ReplicaSet", "name": "web-1"}]}, "spec": {"nodeName": "gpu-b"}},
        {"metadata": {"name": "dp-a", "namespace": "gpu-operator", "labels": {"app": "device-plugin"},
                      "ownerReferences": [{"kind": "DaemonSet", "name": "device-plugin"}]}, "spec": {"nodeName": "gpu-a"}},
    ],
    "poddisruptionbudgets": [{"metadata": {"name": "web", "namespace": "apps"},
                              "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}],
}


def api(lab):
    return config.new_client_from_config(config_file=lab.kubeconfig)


def names(items):
    return sorted(i.metadata.name for i in items)


@pytest.fixture(name="lab")
def lab_fixture(tmp_path):
    with k8s_lab(FIXTURE, run_dir=str(tmp_path / "run")) as lab:
        yield lab


@pytest.fixture(name="shared_lab", scope="module")
def shared_lab_fixture(tmp_path_factory):
    """One server for the tests that only read (saves a start-up per test on a busy machine)."""
    with k8s_lab(FIXTURE, run_dir=str(tmp_path_factory.mktemp("k8s") / "run")) as lab:
        yield lab


def test_start_writes_port_kubeconfig_and_serves_https_with_its_ca(shared_lab):
    lab = shared_lab
    assert lab.url == f"https://127.0.0.1:{lab.port}"
    assert os.path.exists(os.path.join(lab.run_dir, "ca.crt"))
    nodes = client.CoreV1Api(api(lab)).list_node()
    assert names(nodes.items) == ["gpu-a", "gpu-b"]
    # A client that does not trust the lab CA is refused: TLS is verified, not bypassed.
    cfg = client.Configuration()
    cfg.host = lab.url
    cfg.retries = 0
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        client.CoreV1Api(client.ApiClient(cfg)).list_node()


def test_requests_without_the_token_are_unauthorized(shared_lab):
    lab = shared_lab
    cfg = client.Configuration()
    cfg.host = lab.url
    cfg.ssl_ca_cert = os.path.join(lab.run_dir, "ca.crt")
    with pytest.raises(client.ApiException) as exc:
        client.CoreV1Api(client.ApiClient(cfg)).list_node()
    assert exc.value.status == 401


def test_list_shape_generated_metadata_and_selectors(shared_lab):
    lab = shared_lab
    c = api(lab)
    body = lab.get_json("/api/v1/nodes")
    assert body["kind"] == "NodeList" and body["apiVersion"] == "v1" and body["metadata"]["resourceVersion"].isdigit()
    node = body["items"][0]
    assert node["metadata"]["uid"] and node["metadata"]["creationTimestamp"].endswith("Z")

    v1 = client.CoreV1Api(c)
    assert names(v1.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-a").items) == ["dp-a", "web-1-a"]
    assert names(v1.list_pod_for_all_namespaces(field_selector="spec.nodeName!=gpu-a").items) == ["web-1-b"]
    assert names(v1.list_namespaced_pod("apps").items) == ["web-1-a", "web-1-b"]
    assert names(v1.list_pod_for_all_namespaces(label_selector="app in (device-plugin)").items) == ["dp-a"]
    assert names(v1.list_pod_for_all_namespaces(label_selector="app!=web", field_selector="spec.nodeName=gpu-a").items) == ["dp-a"]
    assert names(v1.list_node(label_selector="nvidia.com/gpu.present").items) == ["gpu-a"]
    assert names(v1.list_node(label_selector="!nvidia.com/gpu.present").items) == ["gpu-b"]
    assert names(v1.list_namespace().items) == ["apps", "default", "gpu-operator"]
    with pytest.raises(client.ApiException) as exc:
        v1.list_node(label_selector="a in (b")
    assert exc.value.status == 400
    # Owner references named by kind/name in the fixture point at the real owner's uid.
    rs = client.AppsV1Api(c).read_namespaced_replica_set("web-1", "apps")
    assert v1.read_namespaced_pod("web-1-a", "apps").metadata.owner_references[0].uid == rs.metadata.uid


def test_create_generates_metadata_conflicts_and_patch_bumps_resource_version(lab):
    v1 = client.CoreV1Api(api(lab))
    created = v1.create_namespaced_pod("apps", {"metadata": {"generateName": "job-"}, "spec": {"containers": [{"name": "c"}]}})
    assert created.metadata.name.startswith("job-") and created.metadata.uid and created.metadata.namespace == "apps"
    with pytest.raises(client.ApiException) as exc:
        v1.create_namespaced_pod("apps", {"metadata": {"name": created.metadata.name}, "spec": {"containers": [{"name": "c"}]}})
    assert exc.value.status == 409
    before = v1.read_node("gpu-a").metadata.resource_version
    after = v1.patch_node("gpu-a", {"metadata": {"labels": {"x": "1"}}}).metadata.resource_version
    assert int(after) > int(before)
    assert v1.patch_node("gpu-a", {"metadata": {"labels": {"x": "1"}}}).metadata.resource_version == after, "no-op patch"
    assert "x" not in v1.patch_node("gpu-a", {"metadata": {"labels": {"x": None}}}).metadata.labels
    with pytest.raises(client.ApiException) as exc:
        v1.read_namespaced_pod("nope", "apps")
    assert exc.value.status == 404 and json.loads(exc.value.body)["reason"] == "NotFound"


def test_eviction_pdb_refusal_success_and_absent(lab):
    v1 = client.CoreV1Api(api(lab))

    def evict(name, ns="apps"):
        return v1.create_namespaced_pod_eviction(name, ns, client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=ns)))

    with pytest.raises(client.ApiException) as exc:
        evict("web-1-a")
    assert exc.value.status == 429
    assert exc.value.headers["Content-Type"] == "application/json"
    assert json.loads(exc.value.body)["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert names(v1.list_namespaced_pod("apps").items) == ["web-1-a", "web-1-b"], "a refused eviction deletes nothing"
    pdb = client.PolicyV1Api(api(lab)).read_namespaced_pod_disruption_budget("web", "apps")
    assert (pdb.status.current_healthy, pdb.status.desired_healthy, pdb.status.disruptions_allowed) == (2, 2, 0)

    client.PolicyV1Api(api(lab)).patch_namespaced_pod_disruption_budget("web", "apps", {"spec": {"minAvailable": 1}})
    evict("web-1-a")
    assert names(v1.list_namespaced_pod("apps").items) == ["web-1-b"]
    # The budget now protects the last pod again.
    with pytest.raises(client.ApiException) as exc:
        evict("web-1-b")
    assert exc.value.status == 429
    with pytest.raises(client.ApiException) as exc:
        evict("web-1-a")
    assert exc.value.status == 404
    outcomes = [(e["name"], e["outcome"], e.get("node")) for e in lab.evictions()]
    assert outcomes == [("web-1-a", "TooManyRequests", "gpu-a"), ("web-1-a", "Evicted", "gpu-a"),
                        ("web-1-b", "TooManyRequests", "gpu-b"), ("web-1-a", "NotFound", None)]
    assert len(lab.evictions(node="gpu-a", outcome="Evicted")) == 1


def test_eviction_delay_keeps_pod_terminating_then_deletes(tmp_path):
    with k8s_lab(FIXTURE, run_dir=str(tmp_path / "run"), eviction_delay=1.0) as lab:
        v1 = client.CoreV1Api(api(lab))
        v1.create_namespaced_pod_eviction("dp-a", "gpu-operator", client.V1Eviction(metadata=client.V1ObjectMeta(name="dp-a")))
        assert v1.read_namespaced_pod("dp-a", "gpu-operator").metadata.deletion_timestamp is not None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and v1.list_namespaced_pod("gpu-operator").items:
            time.sleep(0.2)
        assert not v1.list_namespaced_pod("gpu-operator").items


def write_state(path, gpus):
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"gpus": gpus}, fh)
    os.replace(tmp, path)


def test_allocatable_follows_gpusim_state_per_node(tmp_path):
    state_a, state_b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    write_state(state_a, [{"model": "NVIDIA A100-SXM4-40GB", "mig_mode": "disabled"}])
    write_state(state_b, [{"model": "NVIDIA H100 80GB HBM3", "mig_mode": "enabled",
                           "gpu_instances": [{"profile": "1g.10gb"}, {"profile": "1g.10gb"}]}])
    with k8s_lab(FIXTURE, run_dir=str(tmp_path / "run"), gpusim={"gpu-a": state_a, "gpu-b": (state_b, "single")}) as lab:
        v1 = client.CoreV1Api(api(lab))
        alloc = v1.read_node("gpu-a").status.allocatable
        assert alloc["nvidia.com/gpu"] == "1" and alloc["cpu"] == "16"
        assert v1.read_node("gpu-b").status.capacity["nvidia.com/gpu"] == "2"
        # gpusim's own id-only form: names come from gpusim's model table, as nvidia-smi would print them.
        write_state(state_a, [{"model": "NVIDIA A100-SXM4-40GB", "mig_mode": "enabled", "gpu_instances": [
            {"profile_id": 14, "start": 0, "compute_instances": [{"slices": 1}, {"profile_id": 0}]},
            {"profile_id": 19, "start": 2, "compute_instances": [{"slices": 1}]},
            {"profile_id": 9, "start": 4, "compute_instances": [{"profile_id": 2}]}]}])
        nodes = {n.metadata.name: n for n in v1.list_node().items}
        alloc = nodes["gpu-a"].status.allocatable
        assert "nvidia.com/gpu" not in alloc
        # The two 1c.2g.10gb CIs are not advertised: the mixed strategy registers C == G profiles only
        # (NVIDIA/k8s-device-plugin internal/rm/rm.go AddDefaultResourcesToConfig).
        assert {k: v for k, v in alloc.items() if k.startswith("nvidia.com/")} == {
            "nvidia.com/mig-1g.5gb": "1", "nvidia.com/mig-3g.20gb": "1"}
        # A torn state file keeps the last advertised resources instead of failing the API.
        with open(state_a, "w", encoding="utf-8") as fh:
            fh.write("{not json")
        assert v1.read_node("gpu-a").status.allocatable["nvidia.com/mig-3g.20gb"] == "1"


def test_bad_fixture_fails_startup_naming_the_object(tmp_path):
    with pytest.raises(RuntimeError, match="unknown kind 'Gadget'"):
        with k8s_lab({"objects": [{"apiVersion": "v1", "kind": "Gadget", "metadata": {"name": "g"}}]}, run_dir=str(tmp_path / "r")):
            pass


def test_watch_streams_our_eviction_as_deleted_event(lab):
    import threading  # pylint: disable=import-outside-toplevel

    from kubernetes import watch  # pylint: disable=import-outside-toplevel

    c = api(lab)
    v1 = client.CoreV1Api(c)
    policy = client.PolicyV1Api(c)
    policy.patch_namespaced_pod_disruption_budget("web", "apps", {"spec": {"minAvailable": 0}})

    def evict_later():
        time.sleep(1.0)
        v1.create_namespaced_pod_eviction("web-1-a", "apps", client.V1Eviction(metadata=client.V1ObjectMeta(name="web-1-a")))

    thread = threading.Thread(target=evict_later)
    thread.start()
    events, stream = [], watch.Watch()
    for event in stream.stream(v1.list_namespaced_pod, "apps", _request_timeout=15):
        events.append((event["type"], event["object"].metadata.name))
        if event["type"] == "DELETED":
            stream.stop()
    thread.join()
    assert sorted(events[:2]) == [("ADDED", "web-1-a"), ("ADDED", "web-1-b")]
    assert events[2:] == [("DELETED", "web-1-a")]
