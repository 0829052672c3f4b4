# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/gpu_pools.yml against the upstream control plane (lab/kube), our device-plugin stand-in reading the
ClusterPolicy, the ConfigMap and the node label, and gpusim: a MIG node becomes a time-slicing pool with 4 replicas
and goes back to MIG, each time through the mig_reconfigure roll (cordon, budgeted drain, change, wait, uncordon)."""

from __future__ import annotations

import os
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mig_reconfigure"))
from mig_reconfigure_lab import H100, H100_BALANCED, ROOT, Fleet, failures, gpu  # noqa: E402  pylint: disable=import-error,wrong-import-position

sys.path.insert(0, os.path.join(ROOT, "lab", "kube"))
import device_plugin as DP  # noqa: E402  pylint: disable=import-error,wrong-import-position
from requestlog import unschedulable  # noqa: E402  pylint: disable=import-error,wrong-import-position

PLAYBOOK = os.path.join(ROOT, "playbooks", "gpu_pools.yml")
CM = "gpuops-device-plugin-config"
CONFIG_LABEL = "nvidia.com/device-plugin.config"
TS4 = [{"name": "notebooks", "nodes": ["gpu-a"], "sharing": "time-slicing", "replicas": 4}]
MIG = [{"name": "inference", "nodes": ["gpu-a"], "sharing": "mig", "mig_config": "all-balanced"}]


def _cluster_policy(lab):
    import kubernetes  # pylint: disable=import-outside-toplevel
    lab.create(DP.cluster_policy_crd())
    custom = kubernetes.client.CustomObjectsApi(lab.api_client)

    def served():
        try:
            custom.create_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", DP.cluster_policy())
            return True
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return False
            raise
    lab.wait_for(served, what="the ClusterPolicy CRD served")
    return custom


def _gpu_allocatable(node):
    return {k: v for k, v in node["status"]["allocatable"].items() if k.startswith("nvidia.com/")}


def test_time_slicing_pool_then_back_to_mig_through_the_roll(tmp_path):
    fleet = Fleet(tmp_path, {"gpu-a": {"gpus": [gpu(H100, "enabled", H100_BALANCED)] * 2}})
    with fleet.start() as lab:
        custom = _cluster_policy(lab)
        lab.wait_for(lambda: _gpu_allocatable(fleet.node("gpu-a")).get("nvidia.com/mig-1g.10gb") == "4", what="MIG devices")

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
            ("POST", "/api/v1/namespaces/gpu-operator/configmaps"), ("PATCH", "/apis/nvidia.com/v1/clusterpolicies/cluster-policy")
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
