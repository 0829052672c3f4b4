# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""roles/gpu_pools with another writer between its plan and its write (issue 45 defect 7): the cluster autoscaler
taints the node (ToBeDeletedByClusterAutoscaler, cluster-autoscaler utils/taints) after the plan read it. The role's
write must keep that taint; writing back the taint list the plan had read reverted it."""

from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "mig_reconfigure"))
from mig_reconfigure_lab import H100_BALANCED, Fleet, failures, gpu  # noqa: E402  pylint: disable=import-error,wrong-import-position

pytestmark = pytest.mark.slow

OPERATOR = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
AUTOSCALER = {"key": "ToBeDeletedByClusterAutoscaler", "value": "1733300000", "effect": "NoSchedule"}
# PreferNoSchedule keeps no pod off the node, so the GPU Operator's DaemonSets need no toleration for it and the
# role leaves the ClusterPolicy alone (gpu_pools_cluster_policy: '').
POOL_TAINT = {"key": "gpuops.io/gpu-pool", "value": "inference", "effect": "PreferNoSchedule"}
POOLS = [{"name": "inference", "nodes": ["gpu-a"], "sharing": "mig", "mig_config": "all-balanced", "taints": [POOL_TAINT]}]
PLAYBOOK = """\
- name: gpu_pools' plan, another writer, gpu_pools' write
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: Plan
      ansible.builtin.include_role:
        name: gpuops.provision.gpu_pools
        tasks_from: plan
    - name: The autoscaler taints the node after the plan read it
      kubernetes.core.k8s_json_patch:
        kind: Node
        name: gpu-a
        patch: [{op: add, path: /spec/taints/-, value: %s}]
      delegate_to: localhost
      run_once: true
    - name: Write
      ansible.builtin.include_role:
        name: gpuops.provision.gpu_pools
        tasks_from: write
""" % AUTOSCALER


def test_a_taint_another_writer_added_after_the_plan_is_kept(tmp_path):
    fleet = Fleet(tmp_path, {"gpu-a": {"gpus": [gpu(instances=H100_BALANCED)]}})
    fleet.fixture["nodes"][0]["spec"] = {"taints": [dict(OPERATOR)]}
    playbook = tmp_path / "race.yml"
    playbook.write_text(PLAYBOOK, encoding="utf-8")
    with fleet.start() as lab:
        rc, out = fleet.run({"gpu_pools_pools": POOLS, "gpu_pools_cluster_policy": ""}, playbook=str(playbook))
        assert rc == 0, failures(out)
        taints = [{k: v for k, v in t.items() if k != "timeAdded"} for t in lab.get_json("/api/v1/nodes/gpu-a")["spec"]["taints"]
                  if not t["key"].startswith("node.kubernetes.io/")]
        assert POOL_TAINT in taints and OPERATOR in taints
        assert AUTOSCALER in taints, "the autoscaler's taint was reverted: %s" % taints
