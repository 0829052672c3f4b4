"""The upstream control plane (lab/kube): kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kwok built
from their Go modules. These tests show the behaviours our product meets in a real cluster and a mock could only imitate:
eviction refusals computed by the disruption controller, evicted ReplicaSet pods recreated and scheduled elsewhere (or
left Pending), graceful termination taking the pod's grace period, and the device-plugin stand-in's resources."""
from __future__ import annotations

import json
import re
import os
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "lab", "kube"))
import kube_harness as kh  # noqa: E402  pylint: disable=import-error,wrong-import-position
import kubelet  # noqa: E402  pylint: disable=import-error,wrong-import-position

PDB_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    state = tmp_path_factory.mktemp("gpusim") / "gpu-dp.json"
    state.write_text(json.dumps({"gpus": [{"mig_mode": {"current": 0}}, {"mig_mode": {"current": 0}}]}), encoding="utf-8")
    with kh.control_plane(gpusim={"gpu-dp": str(state)}) as running:
        running.gpusim_state = state
        yield running


@pytest.fixture()
def lab(plane):
    return plane.session()


def _pdb_allowed(lab, ns, name):
    import kubernetes  # pylint: disable=import-outside-toplevel
    policy = kubernetes.client.PolicyV1Api(lab.api_client)
    status = policy.read_namespaced_pod_disruption_budget(name, ns).status
    return status.disruptions_allowed if status and status.observed_generation else None


def _drain(lab, node_name, **extra):
    args = {"name": node_name, "state": "drain", "delete_options": {"wait_timeout": 20, "ignore_daemonsets": True}}
    args["delete_options"].update(extra)
    return lab.run_module("kubernetes.core.k8s_drain", args)


def test_eviction_refused_by_the_disruption_controller(lab):
    # kube-controller-manager's disruption controller computes the PDB status (pkg/controller/disruption); the
    # apiserver's eviction REST handler refuses with 429 from that status (pkg/registry/core/pod/storage/eviction.go).
    lab.create(kh.node("pdb-a"), kh.replicaset("pdb", "web", replicas=2, node_selector={"kubernetes.io/hostname": "pdb-a"}),
               kh.pdb("pdb", "web", min_available=2))
    lab.wait_for(lambda: len(lab.running_pods("pdb", "pdb-a")) == 2, what="two web pods Running on pdb-a")
    lab.wait_for(lambda: _pdb_allowed(lab, "pdb", "web") == 0, what="PDB status (disruptionsAllowed 0) from the controller")
    result = _drain(lab, "pdb-a")
    assert result.get("failed"), result
    refused = lab.evictions(node="pdb-a", outcome="TooManyRequests")
    assert refused, lab.requests()
    assert all(r["status"] == 429 for r in refused)
    assert PDB_MESSAGE in refused[0]["message"]
    assert len(lab.running_pods("pdb", "pdb-a")) == 2          # nothing was evicted
    assert lab.evictions(outcome="Evicted") == []


def test_evicted_replicaset_pod_is_recreated_on_another_node(lab):
    lab.create(kh.node("move-a"), kh.node("move-b", unschedulable=True),
               kh.replicaset("move", "api", replicas=1, node_selector={"pool": "move"}))
    for name in ("move-a", "move-b"):
        lab.core.patch_node(name, {"metadata": {"labels": {"pool": "move"}}})
    first = lab.wait_for(lambda: lab.running_pods("move", "move-a"), what="the api pod Running on move-a")[0]
    lab.core.patch_node("move-b", {"spec": {"unschedulable": False}})
    result = _drain(lab, "move-a")
    assert not result.get("failed"), result
    assert [r["status"] for r in lab.evictions(node="move-a")] == [201]
    # The ReplicaSet controller makes a new pod; the scheduler binds it to the only schedulable node.
    moved = lab.wait_for(lambda: lab.running_pods("move", "move-b"), what="a replacement Running on move-b")
    assert moved[0].metadata.name != first.metadata.name
    assert moved[0].metadata.owner_references[0].name == "api"
    assert lab.pods("move", "move-a") == []


def test_evicted_pod_stays_pending_when_no_node_has_room(lab):
    lab.create(kh.node("full-a", cpu="1"), kh.node("full-b", cpu="1"),
               kh.replicaset("full", "big", replicas=2, cpu="800m", node_selector={"pool": "full"}))
    for name in ("full-a", "full-b"):
        lab.core.patch_node(name, {"metadata": {"labels": {"pool": "full"}}})
    lab.wait_for(lambda: len(lab.running_pods("full")) == 2, what="both big pods Running")
    assert {p.spec.node_name for p in lab.running_pods("full")} == {"full-a", "full-b"}
    result = _drain(lab, "full-a")
    assert not result.get("failed"), result

    def pending():
        waiting = [p for p in lab.pods("full") if p.status.phase == "Pending" and not p.spec.node_name]
        conds = [c for p in waiting for c in (p.status.conditions or []) if c.type == "PodScheduled"]
        return conds if conds and conds[0].status == "False" else None

    conds = lab.wait_for(pending, what="the replacement Pending, unschedulable")
    assert conds[0].reason == "Unschedulable"
    assert "Insufficient cpu" in conds[0].message


def test_graceful_termination_takes_the_grace_period(lab):
    lab.create(kh.node("grace-a"), kh.pod("grace", "slow", node_name="grace-a", grace=4))
    lab.wait_for(lambda: lab.running_pods("grace", "grace-a"), what="the slow pod Running")
    start = time.monotonic()
    lab.core.delete_namespaced_pod("slow", "grace")
    time.sleep(1)
    terminating = lab.pods("grace")
    assert terminating and terminating[0].metadata.deletion_timestamp is not None
    lab.wait_for(lambda: not lab.pods("grace"), timeout=15, what="the pod gone")
    # deletionTimestamp has whole seconds, so the wait is the grace period less up to one second.
    assert time.monotonic() - start >= 3.0


def test_device_plugin_advertises_gpusim_resources(lab, plane):
    # The plugin serves from its DaemonSet's pod on the node (device_plugin.py): the DaemonSet as the operator
    # renders it (seed.py: nodeSelector nvidia.com/gpu.deploy.device-plugin=true, its tolerations).
    lab.create(kh.node("gpu-dp", labels={"nvidia.com/gpu.deploy.device-plugin": "true"}),
               kh.seeding.workload_object("DaemonSet", {"metadata": {"name": "nvidia-device-plugin-daemonset",
                                                                     "namespace": "gpu-operator"}}, 0))
    lab.wait_for(lambda: (lab.core.read_node("gpu-dp").status.allocatable or {}).get("nvidia.com/gpu") == "2",
                 what="two whole GPUs advertised")
    mig = {"gpus": [{"name": "NVIDIA A100-SXM4-40GB", "mig_mode": {"current": 1},
                     "gpu_instances": [{"profile": "1g.5gb", "compute_instances": [{"profile": "1g.5gb"}]},
                                       {"profile": "1g.5gb", "compute_instances": [{"profile": "1g.5gb"}]}]},
                    {"mig_mode": {"current": 0}}]}
    tmp = str(plane.gpusim_state) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(mig, fh)
    os.replace(tmp, plane.gpusim_state)

    def advertised():
        alloc = lab.core.read_node("gpu-dp").status.allocatable or {}
        return alloc if alloc.get("nvidia.com/mig-1g.5gb") == "2" else None

    alloc = lab.wait_for(advertised, what="the MIG devices advertised")
    assert alloc["nvidia.com/gpu"] == "1" and alloc["cpu"] == "8"


def test_nodes_and_pods_stay_ready_past_the_node_monitor_grace_period(lab):
    # kwok keeps node leases (--node-lease-duration-seconds); without them kube-controller-manager's node lifecycle
    # controller marks every node NotReady after --node-monitor-grace-period (20 s here) and their pods NotReady.
    lab.create(kh.node("steady-a"), kh.pod("steady", "p", node_name="steady-a"))
    lab.wait_for(lambda: lab.running_pods("steady", "steady-a"), what="the pod Running")
    time.sleep(30)
    assert lab.node_ready("steady-a")
    pod = lab.core.read_namespaced_pod("p", "steady")
    assert [c.status for c in pod.status.conditions if c.type == "Ready"] == ["True"]


def test_a_pod_marked_not_ready_is_ready_again_as_its_kubelet_would_set_it(lab):
    # What the node lifecycle controller does to the pods of a node whose heartbeats came late (MarkPodsNotReady): the
    # Ready condition False. kwok's own stages never touch a Running pod again; a kubelet would, on its next sync.
    lab.create(kh.node("flap-a"), kh.pod("flap", "p", node_name="flap-a"))
    lab.wait_for(lambda: lab.running_pods("flap", "flap-a"), what="the pod Running")

    def ready():
        pod = lab.core.read_namespaced_pod("p", "flap")
        return [c.status for c in pod.status.conditions if c.type == "Ready"]

    lab.wait_for(lambda: ready() == ["True"], what="the pod Ready")
    lab.core.patch_namespaced_pod_status("p", "flap", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert ready() == ["False"]
    lab.wait_for(lambda: ready() == ["True"], timeout=40, what="the pod Ready again")


def test_request_log_is_the_audit_log(lab):
    lab.create(kh.node("log-a"))
    result = lab.run_module("kubernetes.core.k8s_drain", {"name": "log-a", "state": "cordon"})
    assert result.get("changed"), result
    patches = [r for r in lab.requests() if r["method"] == "PATCH" and r["path"] == "/api/v1/nodes/log-a"]
    assert len(patches) == 1 and patches[0]["status"] == 200
    assert lab.cordons("log-a") == 1 and patches[0]["user"] == "gpuops-client"
    # The lab's own requests (create, reads) are not in the product's request log.
    assert not [r for r in lab.requests() if r["method"] == "POST" and r["resource"] == "nodes"]
    # Nor is the harness's audit barrier, which requests() waits for so that the last request is always in it.
    assert not [r for r in lab.requests() if r["path"].endswith("/gpuops-audit-barrier")]
    with open(lab.request_log, encoding="utf-8") as fh:
        assert fh.read().count('"gpuops-audit-barrier"') >= 2


def test_the_binaries_carry_the_version_stamps_of_an_upstream_release(plane):
    # Upstream's release build links gitVersion/gitMajor/gitMinor in (hack/lib/version.sh kube::version::ldflags);
    # without them kubeadm, kubectl and the API server say v0.0.0-master and version-skew checks have nothing to compare.
    import subprocess  # pylint: disable=import-outside-toplevel
    pinned = [line.split()[1] for line in open(os.path.join(REPO, "lab", "kube", "go.mod"), encoding="utf-8")
              if line.strip().startswith("k8s.io/kubernetes ")][0]
    bin_dir = kubelet.tools_bin()  # kubeadm and kubectl: built apart from the control plane (make lab needs neither)
    short = subprocess.run([os.path.join(bin_dir, "kubeadm"), "version", "-o", "short"], capture_output=True, text=True,
                           check=True).stdout.strip()
    assert short == pinned, short
    client = json.loads(subprocess.run([os.path.join(bin_dir, "kubectl"), "version", "--client", "-o", "json"],
                                       capture_output=True, text=True, check=True).stdout)["clientVersion"]
    assert client["gitVersion"] == pinned and client["major"] == "1" and client["minor"] == pinned.split(".")[1]
    server = json.loads(plane.cp.get("/version")[1])
    assert server["gitVersion"] == pinned and server["gitTreeState"] == "clean", server


def test_the_product_runs_with_exactly_the_documented_permissions(plane):
    # docs/rbac/gpuops-provision.yaml bound to the product's user: what it grants works, the rest is refused.
    import kubernetes  # pylint: disable=import-outside-toplevel
    api = kubernetes.config.new_client_from_config(plane.cp.kubeconfig)
    core = kubernetes.client.CoreV1Api(api)
    auth = kubernetes.client.AuthorizationV1Api(api)

    def allowed(verb, resource, namespace=None, group="", sub=None):
        review = {"spec": {"resourceAttributes": {"verb": verb, "resource": resource, "group": group,
                                                  "namespace": namespace, "subresource": sub}}}
        return auth.create_self_subject_access_review(review).status.allowed

    assert core.list_node().items is not None
    assert allowed("patch", "nodes") and allowed("create", "pods", sub="eviction", namespace="ml")
    assert allowed("update", "leases", "kube-system", "coordination.k8s.io")
    assert allowed("update", "configmaps", "gpu-operator")
    assert not allowed("delete", "nodes") and not allowed("create", "pods", namespace="ml")
    assert not allowed("update", "leases", "default", "coordination.k8s.io")
    assert not allowed("get", "secrets", "gpu-operator")
    with pytest.raises(kubernetes.client.rest.ApiException) as refused:
        core.create_namespace({"metadata": {"name": "not-ours"}})
    assert refused.value.status == 403


def test_make_lab_builds_only_the_programs_the_control_plane_runs():
    # A fresh `make lab` built kubeadm, kubelet and kubectl too (issue 41: 473 s of 871 s), which only some tests run:
    # the control plane's set is exactly what `up` starts, the others are built apart, on first use.
    build = kubelet.gobuild.builder("kube")
    assert sorted(build.PROGRAMS.values()) == sorted(kubelet.controlplane.CORE)
    assert sorted(build.TOOLS.values()) == ["fakecri", "kubeadm", "kubectl", "kubelet"]
    with open(os.path.join(REPO, "Makefile"), encoding="utf-8") as fh:
        rules = dict(line.split(":", 1) for line in fh if re.match(r"^[a-z-]+:", line))
    assert "lab-kube-tools" not in rules["lab"] + rules["lab-up"], "make lab waits for programs it does not run"
