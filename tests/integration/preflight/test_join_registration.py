# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node that joins with what node_preflight's join_config writes is tainted from its first registration.

The role writes the kubelet's environment file (KUBELET_EXTRA_ARGS, which kubeadm's systemd drop-in and most
installers pass to the kubelet) with --register-with-taints. A real kubelet (lab/kube/kubelet.py: k8s.io/kubernetes
cmd/kubelet v1.36.1 on the Kubernetes project's fake CRI) started with those arguments registers its Node against the
lab's kube-apiserver, and the apiserver's audit log has the Node create itself: the taint must be in that first
request's body, so there is no moment at which the node is schedulable. A kubelet started without the file's
arguments registers without the taint (the control, showing the check can fail)."""

from __future__ import annotations

import os
import shlex
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from preflight_lab import ROOT, role_tasks_playbook, run_playbook, write_inventory  # noqa: E402  pylint: disable=import-error,wrong-import-position

sys.path.insert(0, os.path.join(ROOT, "lab", "kube"))
import kubelet  # noqa: E402  pylint: disable=import-error,wrong-import-position
import requestlog  # noqa: E402  pylint: disable=import-error,wrong-import-position
from kube_harness import kube_lab  # noqa: E402  pylint: disable=import-error,wrong-import-position

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.geteuid() != 0, reason="a kubelet runs only as root")]

GATE = {"key": "gpuops.io/preflight", "value": "pending", "effect": "NoSchedule"}


def _extra_args(path, var="KUBELET_EXTRA_ARGS"):
    """The arguments an EnvironmentFile= line gives $KUBELET_EXTRA_ARGS (systemd.exec: a quoted value, split on
    whitespace when the unit uses $VAR unbraced, as kubeadm's 10-kubeadm.conf does)."""
    for line in path.read_text(encoding="utf-8").splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == var:
            return shlex.split(value)
    return []


def _first_registration(lab, node):
    with open(lab.request_log, encoding="utf-8") as fh:
        registrations = requestlog.node_registrations(fh.read(), node)
    return registrations[0] if registrations else None


def test_the_kubelet_registers_the_node_with_the_gate_taint(tmp_path):
    env_file = tmp_path / "default" / "kubelet"
    inv = write_inventory(tmp_path / "hosts.yml", {"gpu-new": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "node_preflight_join_config_path": str(tmp_path / "kubernetes" / "gpuops-join.yaml"),
        "node_preflight_kubelet_extra_args_path": str(env_file)}})
    rc, _out, _so, se = run_playbook(role_tasks_playbook(tmp_path), inv)
    assert rc == 0, se
    args = _extra_args(env_file)
    assert args == ["--register-with-taints=gpuops.io/preflight=pending:NoSchedule"]

    with kube_lab({}, run_dir=str(tmp_path / "k8s")) as lab:
        for name, extra in (("gpu-new", args), ("gpu-plain", [])):
            root = kubelet.start(lab.plane, name, extra)
            try:
                first = lab.wait_for(lambda n=name: _first_registration(lab, n), timeout=90,
                                     what=f"the kubelet of {name} to register it")
            finally:
                kubelet.stop(lab.plane, root)
            taints = ((first["body"] or {}).get("spec") or {}).get("taints") or []
            if name == "gpu-new":
                assert first["status"] == 201 and first["user"] == "gpuops-lab:kubelet", first
                assert GATE in [{k: t.get(k) for k in ("key", "value", "effect")} for t in taints], first["body"]
                node = lab.core.read_node(name)
                assert GATE["key"] in [t.key for t in node.spec.taints or []]
            else:
                assert GATE["key"] not in [t.get("key") for t in taints], first["body"]
