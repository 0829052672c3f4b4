# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""roles/node_drain's drain against a PodDisruptionBudget that blocks for longer than a minute (issue 45 defect 4),
with the role's defaults: the workload's replacement pod takes 70 s to turn Ready (the lab's kwok pod-ready delay,
fixture podReadyDelaySeconds), so the budget refuses the second eviction until then. kubectl drain tries a refused
eviction again every 5 s until its own timeout (k8s.io/kubectl pkg/drain/drain.go evictPods); the drain must wait
it out as kubectl does, not give up after a fixed count of attempts."""

from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "preflight"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "lab", "kube"))
from preflight_lab import ansible_env, run_playbook, write_inventory  # noqa: E402  pylint: disable=import-error,wrong-import-position
import kube_harness  # noqa: E402  pylint: disable=import-error,wrong-import-position

pytestmark = pytest.mark.slow

READY_DELAY = 70
PLAYBOOK = """\
- name: node_drain's cordon and drain with the role's defaults
  hosts: all
  gather_facts: false
  tasks:
    - name: Cordon
      ansible.builtin.include_role:
        name: gpuops.provision.node_drain
        tasks_from: cordon
    - name: Drain
      ansible.builtin.include_role:
        name: gpuops.provision.node_drain
        tasks_from: drain
"""


def web(name):
    return {"metadata": {"name": name, "namespace": "ml", "labels": {"app": "web"},
                         "ownerReferences": [{"kind": "ReplicaSet", "name": "web"}]}, "spec": {"nodeName": "gpu-a"}}


@pytest.mark.long
def test_a_budget_that_blocks_while_the_replacement_starts_is_waited_out(tmp_path):
    fixture = {"nodes": [{"metadata": {"name": "gpu-a"}}, {"metadata": {"name": "gpu-b"}}],
               "namespaces": ["ml"], "podReadyDelaySeconds": READY_DELAY,
               "replicasets": [{"metadata": {"name": "web", "namespace": "ml"}}],
               "pods": [web("web-1"), web("web-2")],
               "poddisruptionbudgets": [{"metadata": {"name": "web", "namespace": "ml"},
                                         "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}}]}
    with kube_harness.kube_lab(fixture, run_dir=str(tmp_path / "k8s")) as lab:
        playbook = tmp_path / "play.yml"
        playbook.write_text(PLAYBOOK, encoding="utf-8")
        inventory = write_inventory(tmp_path / "hosts.yml", {"host-a": {
            "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "node_drain_node_name": "gpu-a", "node_drain_kubeconfig": lab.kubeconfig}})
        rc, _out, stdout, stderr = run_playbook(str(playbook), inventory, env=ansible_env())
        refused = sorted(e["t"] for e in lab.evictions(node="gpu-a", outcome="TooManyRequests"))
        assert refused, "the PodDisruptionBudget never refused: the replacement was Ready at once"
        assert rc == 0, (stdout + stderr)[-3000:]
        assert refused[-1] - refused[0] > 50, refused
        assert sorted(e["name"] for e in lab.evictions(node="gpu-a", outcome="Evicted")) == ["web-1", "web-2"]
        assert [p.metadata.name for p in lab.running_pods("ml", "gpu-a")] == []
