# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""roles/node_drain against the lab's upstream Kubernetes control plane (lab/kube): the cordon carries our annotation and
the node's roll state, the uncordon removes it, a node an operator cordoned stays cordoned, a node our own earlier run
left cordoned is uncordoned, and a node that is not in the cluster fails with nothing changed. (The drain itself runs
in the MIG and driver rolls' tests: tests/integration/mig_reconfigure, molecule/mig_reconfigure and
molecule/driver_roll.)"""

from __future__ import annotations

import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "preflight"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "lab", "kube"))
from preflight_lab import ansible_env, run_playbook, write_inventory  # noqa: E402  pylint: disable=import-error,wrong-import-position
import kube_harness  # noqa: E402  pylint: disable=import-error,wrong-import-position

ANNOTATION = "gpuops.provision/cordoned-by"
PHASE = "gpuops.provision/roll-phase"
PLAYBOOK = """\
- name: node_drain entry points
  hosts: all
  gather_facts: false
  tasks:
    - name: Cordon
      ansible.builtin.include_role:
        name: gpuops.provision.node_drain
        tasks_from: cordon
    - name: Uncordon
      ansible.builtin.include_role:
        name: gpuops.provision.node_drain
        tasks_from: uncordon
      when: uncordon | default(true) | bool
"""


def node(name, unschedulable=False, annotations=None):
    meta = {"name": name}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"unschedulable": unschedulable}}


@pytest.fixture()
def lab(tmp_path):
    fixture = {"nodes": [node("fresh"), node("operator", True), node("ours", True, {ANNOTATION: "earlier run"})],
               "pods": []}
    with kube_harness.kube_lab(fixture, run_dir=str(tmp_path / "k8s")) as running:
        yield running


def _run(tmp_path, lab, name, uncordon=True):
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK, encoding="utf-8")
    inventory = write_inventory(tmp_path / "hosts.yml", {"host-" + name: {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "node_drain_node_name": name, "node_drain_kubeconfig": lab.kubeconfig, "uncordon": uncordon}})
    rc, out, stdout, stderr = run_playbook(str(playbook), inventory, env=ansible_env())
    return rc, out, stdout + stderr


def _node(lab, name):
    return lab.get_json("/api/v1/nodes/" + name)


def test_cordon_marks_and_uncordon_clears(tmp_path, lab):
    rc, _out, text = _run(tmp_path, lab, "fresh", uncordon=False)
    assert rc == 0, text
    n = _node(lab, "fresh")
    assert n["spec"]["unschedulable"] is True
    assert n["metadata"]["annotations"][ANNOTATION] == "gpuops.provision"
    rc, _out, text = _run(tmp_path, lab, "fresh")
    assert rc == 0, text
    n = _node(lab, "fresh")
    assert not n["spec"].get("unschedulable")
    assert ANNOTATION not in (n["metadata"].get("annotations") or {})


def test_operator_cordon_is_left_alone(tmp_path, lab):
    rc, _out, text = _run(tmp_path, lab, "operator", uncordon=False)
    assert rc == 0, text
    notes = _node(lab, "operator")["metadata"]["annotations"]
    # The roll's state records that the node was cordoned before the roll.
    assert notes[PHASE] == "cordoned" and json.loads(notes["gpuops.provision/roll-initial"]) == {"unschedulable": True}
    rc, _out, text = _run(tmp_path, lab, "operator")
    assert rc == 0, text
    n = _node(lab, "operator")
    assert n["spec"]["unschedulable"] is True
    assert ANNOTATION not in (n["metadata"].get("annotations") or {})
    assert n["metadata"]["annotations"][PHASE] == "released"
    assert lab.cordons("operator") == 0 and lab.cordons("operator", value=False) == 0   # the cordon never touched


def test_our_earlier_cordon_is_undone(tmp_path, lab):
    rc, _out, text = _run(tmp_path, lab, "ours")
    assert rc == 0, text
    n = _node(lab, "ours")
    assert not n["spec"].get("unschedulable")
    assert ANNOTATION not in (n["metadata"].get("annotations") or {})


def test_unknown_node_fails_with_nothing_changed(tmp_path, lab):
    rc, _out, text = _run(tmp_path, lab, "missing")
    assert rc != 0
    assert "no Kubernetes node named missing; nothing was changed" in text
    assert [r for r in lab.requests() if r["method"] != "GET"] == []
