# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""roles/node_drain under a roll's Lease (issue 45, "the same design for the driver roll"): before the cordon the
node takes a slot within the budget that module node_roll recounts from the live cluster - an operator's cordon
elsewhere counts against max_unavailable, and a node the roll marked failed (node_drain's fail entry point) keeps
counting against max_failures - as k8s-operator-libs GetUpgradesAvailable recounts on every reconcile. The driver
roll (playbooks/driver_pin.yml) passes its Lease and nvidia_driver_roll_* limits through these variables; before,
node_drain cordoned at once whatever the cluster looked like."""

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

LEASE = {"name": "gpuops-nvidia-driver-roll", "namespace": "kube-system", "holder": "driver-roll-test"}
PLAYBOOK = """\
- name: The roll's Lease over gpu-a, gpu-b and gpu-c
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Take it
      gpuops.provision.roll_lock:
        name: "{{ node_drain_lease.name }}"
        namespace: "{{ node_drain_lease.namespace }}"
        holder: "{{ node_drain_lease.holder }}"
        nodes: [gpu-a, gpu-b, gpu-c]
        kubeconfig: "{{ lab_kubeconfig }}"

- name: A node's turn under the Lease
  hosts: "{{ turn }}"
  gather_facts: false
  tasks:
    - name: Cordon within the budget
      ansible.builtin.include_role:
        name: gpuops.provision.node_drain
        tasks_from: cordon
    - name: Mark the node failed
      ansible.builtin.include_role:
        name: gpuops.provision.node_drain
        tasks_from: fail
      when: fail_it | default(false) | bool
"""


def test_the_cordon_takes_a_slot_counted_from_the_live_cluster_and_a_failed_node_keeps_counting(tmp_path):
    fixture = {"nodes": [{"metadata": {"name": "gpu-a"}}, {"metadata": {"name": "gpu-b"}},
                         # an operator's cordon, from before the roll
                         {"metadata": {"name": "gpu-c"}, "spec": {"unschedulable": True}}]}
    with kube_harness.kube_lab(fixture, run_dir=str(tmp_path / "k8s")) as lab:
        playbook = tmp_path / "play.yml"
        playbook.write_text(PLAYBOOK, encoding="utf-8")
        local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        inventory = write_inventory(tmp_path / "hosts.yml", {
            "host-a": dict(local, node_drain_node_name="gpu-a"), "host-b": dict(local, node_drain_node_name="gpu-b")},
            group_vars={"node_drain_kubeconfig": lab.kubeconfig, "node_drain_lease": LEASE, "node_drain_roll": "nvidia_driver",
                        "node_drain_max_unavailable": 1, "node_drain_slot_timeout": 5})
        common = {"lab_kubeconfig": lab.kubeconfig, "node_drain_lease": LEASE}

        def run(**extra):
            rc, out, stdout, stderr = run_playbook(str(playbook), inventory, extra_vars=dict(common, **extra), env=ansible_env())
            return rc, out, (stdout + stderr)[-3000:]

        def msg(out, host):
            return " ".join(str(r.get("msg", "")) for p in out["plays"] for t in p["tasks"]
                            for h, r in t["hosts"].items() if h == host and r.get("failed"))

        # gpu-c is cordoned by an operator: with max_unavailable 1, gpu-a would make two unavailable.
        rc, out, text = run(turn="host-a")
        assert rc != 0, text
        assert "max_unavailable 1: 2 node(s) would be unavailable (gpu-a, gpu-c)" in msg(out, "host-a"), text
        assert lab.cordons("gpu-a") == 0

        # Room for it now; its turn then fails: it stays cordoned, phase failed.
        rc, out, text = run(turn="host-a", node_drain_max_unavailable=3, fail_it=True)
        assert rc == 0, text
        node = lab.get_json("/api/v1/nodes/gpu-a")
        assert node["spec"].get("unschedulable") is True
        assert node["metadata"]["annotations"]["gpuops.provision/roll-phase"] == "failed"

        # The failed gpu-a keeps counting: with max_failures 0 gpu-b does not start.
        rc, out, text = run(turn="host-b", node_drain_max_unavailable=3)
        assert rc != 0, text
        assert "the roll's failure budget is spent: 1 node(s) failed (gpu-a)" in msg(out, "host-b"), text
        assert lab.cordons("gpu-b") == 0
        # gpu-c, the operator's, was never touched.
        assert [r for r in lab.requests() if r["method"] == "PATCH" and r["name"] == "gpu-c"] == []
