# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/gpu_pools.yml against the upstream control plane (lab/kube), our device-plugin stand-in reading the
ClusterPolicy, the ConfigMap and the node label, and gpusim: a MIG node becomes a time-slicing pool with 4 replicas
and goes back to MIG, each time through the mig_reconfigure roll (cordon, budgeted drain, change, wait, uncordon)."""

from __future__ import annotations

import os
import sys

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mig_reconfigure"))
from mig_reconfigure_lab import H100, H100_BALANCED, ROOT, Fleet, create_cluster_policy, failures, gpu  # noqa: E402  pylint: disable=import-error,wrong-import-position

sys.path.insert(0, os.path.join(ROOT, "lab", "kube"))
from requestlog import unschedulable  # noqa: E402  pylint: disable=import-error,wrong-import-position

PLAYBOOK = os.path.join(ROOT, "playbooks", "gpu_pools.yml")
CM = "gpuops-device-plugin-config"
CONFIG_LABEL = "nvidia.com/device-plugin.config"
TS4 = [{"name": "notebooks", "nodes": ["gpu-a"], "sharing": "time-slicing", "replicas": 4}]
MIG = [{"name": "inference", "nodes": ["gpu-a"], "sharing": "mig", "mig_config": "all-balanced"}]


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# A toleration someone else put into the ClusterPolicy: the role keeps it.
DEDICATED = {"key": "example.com/dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
POOL_TOLERATION = {"key": "gpuops.io/gpu-pool", "operator": "Exists", "effect": "NoSchedule"}
NFD_WORKER = "gpu-operator-node-feature-discovery-worker"


def _gpu_allocatable(node):
    return {k: v for k, v in node["status"]["allocatable"].items() if k.startswith("nvidia.com/")}


def _daemonset(lab, name):
    import kubernetes  # pylint: disable=import-outside-toplevel
    ds = kubernetes.client.AppsV1Api(lab.api_client).read_namespaced_daemon_set(name, "gpu-operator")
    return lab.api_client.sanitize_for_serialization(ds)


def _tolerations(lab, name):
    return _daemonset(lab, name)["spec"]["template"]["spec"].get("tolerations")


def _plugin_running(lab, node="gpu-a"):
    return [p.metadata.name for p in lab.running_pods("gpu-operator", node)
            if p.metadata.labels.get("app") == "nvidia-device-plugin-daemonset"]


@pytest.mark.long
def test_time_slicing_pool_then_back_to_mig_through_the_roll(tmp_path):
    fleet = Fleet(tmp_path, {"gpu-a": {"gpus": [gpu(H100, "enabled", H100_BALANCED)] * 2}})
    # The chart's node-feature-discovery worker (values.yaml node-feature-discovery.worker.tolerations).
    fleet.fixture["daemonsets"].append({
        "metadata": {"name": NFD_WORKER, "namespace": "gpu-operator",
                     "labels": {"app.kubernetes.io/name": "node-feature-discovery", "role": "worker"}},
        "spec": {"template": {"spec": {"tolerations": [
            {"key": "node-role.kubernetes.io/control-plane", "operator": "Equal", "value": "", "effect": "NoSchedule"},
            GPU_TOLERATION]}}}})
    with fleet.start() as lab:
        custom = create_cluster_policy(lab, [GPU_TOLERATION, DEDICATED])
        lab.wait_for(lambda: _gpu_allocatable(fleet.node("gpu-a")).get("nvidia.com/mig-1g.10gb") == "4", what="MIG devices")
        lab.wait_for(lambda: _tolerations(lab, "nvidia-device-plugin-daemonset") == [GPU_TOLERATION, DEDICATED],
                     what="the operator rendering the ClusterPolicy's tolerations")

        # A pool taint the operator's DaemonSets do not tolerate, with the ClusterPolicy left alone: refused in the
        # plan, naming pool, taint and DaemonSet, before any write.
        rc, out = fleet.run({"gpu_pools_pools": TS4, "gpu_pools_cluster_policy": ""}, playbook=PLAYBOOK)
        assert rc != 0
        assert any("pool notebooks: taint gpuops.io/gpu-pool=notebooks:NoSchedule would keep the GPU Operator's "
                   "nvidia-device-plugin-daemonset off the pool's nodes" in m
                   for msgs in failures(out).values() for m in msgs), failures(out)
        assert fleet.writes() == []

        # Invalid: fails naming pool and reason before any write.
        rc, out = fleet.run({"gpu_pools_pools": [dict(TS4[0], replicas=1)]}, playbook=PLAYBOOK)
        assert rc != 0
        assert any("pool notebooks: time-slicing needs replicas, a whole number >= 2" in m
                   for msgs in failures(out).values() for m in msgs), failures(out)
        assert fleet.writes() == []
        # Check mode: the plan and the roll's plan; kubernetes.core.k8s only sends server-side dry runs (nothing stored),
        # node_taints (the pool's taint) only reads.
        labels_before = fleet.node("gpu-a")["metadata"]["labels"]
        rc, out = fleet.run({"gpu_pools_pools": TS4}, playbook=PLAYBOOK, check=True)
        assert rc == 0, failures(out)
        dry = fleet.writes()
        assert [(r["method"], r["path"]) for r in dry] == [
            ("POST", "/api/v1/namespaces/gpu-operator/configmaps"), ("PATCH", "/apis/nvidia.com/v1/clusterpolicies/cluster-policy"),
            ("PATCH", "/apis/apps/v1/namespaces/gpu-operator/daemonsets/" + NFD_WORKER),
        ] and all(r["query"].get("dryRun") == "All" for r in dry), dry
        assert fleet.node("gpu-a")["metadata"]["labels"] == labels_before and lab.core.read_node("gpu-a").spec.taints is None
        assert CM not in [c.metadata.name for c in lab.core.list_namespaced_config_map("gpu-operator").items]
        writes_before = len(dry)

        rc, out = fleet.run({"gpu_pools_pools": TS4}, playbook=PLAYBOOK)
        assert rc == 0, failures(out)
        data = lab.core.read_namespaced_config_map(CM, "gpu-operator").data
        assert yaml.safe_load(data["notebooks"])["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
        assert yaml.safe_load(data["default"]) == {"version": "v1", "flags": {"migStrategy": "mixed"}}
        policy = custom.get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy")
        assert policy["spec"]["devicePlugin"]["config"] == {"name": CM, "default": "default"}
        node = fleet.node("gpu-a")
        labels = node["metadata"]["labels"]
        assert labels[CONFIG_LABEL] == "notebooks" and labels["nvidia.com/mig.config"] == "all-disabled"
        assert labels["gpuops.io/gpu-pool"] == "notebooks" and labels["gpuops.io/gpu-profile"] == "time-slicing-4"
        assert node["spec"]["taints"] == [{"key": "gpuops.io/gpu-pool", "value": "notebooks", "effect": "NoSchedule"}]
        assert not node["spec"].get("unschedulable")
        # The operator's DaemonSets tolerate the pool (the ClusterPolicy's list extended, the others' toleration
        # kept), the chart's NFD worker too; the roll paused and restored the device plugin, and its pod came back
        # on the tainted node.
        policy = custom.get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy")
        assert policy["spec"]["daemonsets"]["tolerations"] == [GPU_TOLERATION, DEDICATED, POOL_TOLERATION]
        assert _tolerations(lab, "nvidia-device-plugin-daemonset") == [GPU_TOLERATION, DEDICATED, POOL_TOLERATION]
        assert _tolerations(lab, NFD_WORKER)[-1] == POOL_TOLERATION and len(_tolerations(lab, NFD_WORKER)) == 3
        assert _plugin_running(lab)
        # 2 GPUs, MIG now off, 4 replicas each.
        assert _gpu_allocatable(node) == {"nvidia.com/gpu": "8"}
        assert all(not g.get("gpu_instances") for g in fleet.state("gpu-a")["gpus"])
        assert not [r for r in fleet.writes()[writes_before:] if r["query"].get("dryRun")]
        # The roll: cordon, the app pod evicted within the PDB, the config label before the uncordon.
        patches = fleet.node_patches("gpu-a")
        cordon = [i for i, r in enumerate(patches) if unschedulable(r) is True]
        config = [i for i, r in enumerate(patches) if ((r.get("body") or {}).get("metadata") or {}).get("labels", {}).get(CONFIG_LABEL)]
        uncordon = [i for i, r in enumerate(patches) if unschedulable(r) is False]
        assert len(cordon) == 1 and len(uncordon) == 1 and cordon[0] < config[0] < uncordon[0], patches
        evicted = lab.evictions(node="gpu-a")
        assert [e["outcome"] for e in evicted if "inference" in e["name"]][-1] == "Evicted", evicted
        # The pool's taint keeps the replacement (a pod without a toleration) off the GPU node: Pending.
        lab.wait_for(lambda: [p.status.phase for p in lab.pods("ml")] == ["Pending"], what="the replacement Pending")

        # Back to MIG: the same roll; the default device plugin config, the MIG devices again.
        before = len(fleet.node_patches("gpu-a"))
        rc, out = fleet.run({"gpu_pools_pools": MIG}, playbook=PLAYBOOK)
        assert rc == 0, failures(out)
        node = fleet.node("gpu-a")
        assert node["metadata"]["labels"][CONFIG_LABEL] == "default"
        assert node["metadata"]["labels"]["nvidia.com/mig.config"] == "all-balanced"
        assert node["metadata"]["labels"]["gpuops.io/gpu-sharing"] == "mig"
        assert _gpu_allocatable(node) == {"nvidia.com/mig-1g.10gb": "4", "nvidia.com/mig-2g.20gb": "2", "nvidia.com/mig-3g.40gb": "2"}
        again = fleet.node_patches("gpu-a")[before:]
        assert [unschedulable(r) for r in again if unschedulable(r) is not None] == [True, False], again
        # Nothing left to evict (the taint kept the replacement away); still drained, within the budget.
        assert len([e for e in lab.evictions(node="gpu-a") if e["outcome"] == "Evicted"]) == 1
        assert [p.status.phase for p in lab.pods("ml")] == ["Pending"]

        # A re-run changes nothing: no node patch, no eviction.
        before = len(fleet.node_patches("gpu-a"))
        rc, out = fleet.run({"gpu_pools_pools": MIG}, playbook=PLAYBOOK)
        assert rc == 0, failures(out)
        assert fleet.node_patches("gpu-a")[before:] == []

        # A device plugin that never gets the sharing config (the ClusterPolicy no longer names the ConfigMap, and the
        # run leaves it alone): the wait for 8 GPUs runs out, the roll's rollback restores the MIG geometry and puts
        # nvidia.com/device-plugin.config back to what it was, and the node stays cordoned, labelled failed.
        custom.patch_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy",
                                           {"spec": {"devicePlugin": {"config": {"name": "", "default": ""}}}})
        rc, out = fleet.run({"gpu_pools_pools": TS4, "gpu_pools_cluster_policy": "", "mig_reconfigure_resource_timeout": 5},
                            playbook=PLAYBOOK)
        assert rc != 0
        assert any("stage resources" in m for msgs in failures(out).values() for m in msgs), failures(out)
        node = fleet.node("gpu-a")
        labels = node["metadata"]["labels"]
        assert labels[CONFIG_LABEL] == "default" and labels["nvidia.com/mig.config.state"] == "failed"
        assert labels["gpuops.io/gpu-sharing"] == "mig" and node["spec"]["unschedulable"] is True
        lab.wait_for(lambda: _gpu_allocatable(fleet.node("gpu-a")).get("nvidia.com/mig-1g.10gb") == "4", what="MIG restored")


@pytest.mark.long
def test_a_replicas_change_under_the_gpu_operator_backend_restarts_the_device_plugin(tmp_path):
    """Backend gpu_operator, the MIG config already applied (all-disabled): mig-manager goes straight to success
    (reconfigure.go Run: isConfigAlreadyApplied), pausing nothing. A change of replicas alone keeps the label
    nvidia.com/device-plugin.config, so config-manager does not signal the plugin (cmd/config-manager/main.go acts on
    a label change): the roll restarts the device plugin pod and waits for the new count."""
    fleet = Fleet(tmp_path, {"gpu-a": {"gpus": [gpu(H100, "disabled")] * 2}}, selected="all-disabled",
                  group_vars={"mig_reconfigure_backend": "gpu_operator", "mig_reconfigure_mig_manager_timeout": 60})
    fleet.fixture["migManager"] = {"namespace": "gpu-operator", "stepDelay": 0.2}
    fleet.fixture["clusterPolicy"] = {"migManager": {"config": {"name": "custom-mig-parted-config"}}}
    fleet.fixture["configmaps"] = [{"metadata": {"name": "custom-mig-parted-config", "namespace": "gpu-operator"},
                                    "data": {"config.yaml": yaml.safe_dump({"version": "v1", "mig-configs": {}})}}]
    fleet.fixture["nodes"][0]["metadata"]["labels"]["nvidia.com/gpu.deploy.mig-manager"] = "true"
    with fleet.start() as lab:
        lab.wait_for(lambda: _gpu_allocatable(fleet.node("gpu-a")) == {"nvidia.com/gpu": "2"}, what="two GPUs")
        rc, out = fleet.run({"gpu_pools_pools": TS4}, playbook=PLAYBOOK)
        assert rc == 0, failures(out)
        assert _gpu_allocatable(fleet.node("gpu-a")) == {"nvidia.com/gpu": "8"}
        plugin = _plugin_running(lab)
        rc, out = fleet.run({"gpu_pools_pools": [dict(TS4[0], replicas=2)]}, playbook=PLAYBOOK)
        assert rc == 0, failures(out)
        assert _gpu_allocatable(fleet.node("gpu-a")) == {"nvidia.com/gpu": "4"}
        assert fleet.node("gpu-a")["metadata"]["labels"][CONFIG_LABEL] == "notebooks"
        assert _plugin_running(lab) and _plugin_running(lab) != plugin
        # mig-manager saw all-disabled applied: no pending pass.
        assert "pending" not in lab.mig_manager_states("gpu-a")
