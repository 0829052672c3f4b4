# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node that joins with what node_preflight's join_config writes is tainted from its first registration.

The role writes the kubeadm JoinConfiguration (nodeRegistration.taints) and, when asked, the kubelet's environment
file (KUBELET_EXTRA_ARGS, for other installers). Upstream code takes it from there: kubeadm's own join (a dry run,
lab/kube/kubelet.py kubeadm_join_flags) turns the rendered JoinConfiguration into the kubelet flags it writes to
kubeadm-flags.env, and a real kubelet (k8s.io/kubernetes cmd/kubelet v1.36.1 on the project's fake CRI) started with
`$KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS`, as kubeadm's systemd drop-in starts it, registers its Node with the
lab's kube-apiserver. The apiserver's audit log has the Node create itself: the taints must be in that first
request's body, so there is no moment at which the node is schedulable. A kubelet started without those flags
registers untainted (the control: the check can fail)."""

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
OTHER = {"key": "example.com/dedicated", "value": "ml", "effect": "NoSchedule"}


def _extra_args(path, var="KUBELET_EXTRA_ARGS"):
    """The arguments an EnvironmentFile= line gives $KUBELET_EXTRA_ARGS (systemd.exec: a quoted value, split on
    whitespace when the unit uses $VAR unbraced, as kubeadm's 10-kubeadm.conf does)."""
    for line in path.read_text(encoding="utf-8").splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == var:
            return " ".join(shlex.split(value)).split()
    return []


def _first_registration(lab, node):
    lab.settle()
    with open(lab.request_log, encoding="utf-8") as fh:
        registrations = requestlog.node_registrations(fh.read(), node)
    return registrations[0] if registrations else None


def _render(tmp_path, k8s_dir, **hostvars):
    """join_config over localhost with a declared JoinConfiguration whose discovery is the lab's control plane."""
    paths = {"join": tmp_path / "kubernetes" / "gpuops-join.yaml", "env": tmp_path / "default" / "kubelet"}
    declared = {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration",
                "discovery": {"file": {"kubeConfigPath": os.path.join(k8s_dir, "kubelet.kubeconfig")}},
                "nodeRegistration": {"name": "gpu-new", "taints": [OTHER]}}
    hv = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
          "node_preflight_join_config": declared, "node_preflight_join_config_path": str(paths["join"])}
    hv.update(hostvars)
    inv = write_inventory(tmp_path / "hosts.yml", {"gpu-new": hv})
    rc, _out, _so, se = run_playbook(role_tasks_playbook(tmp_path), inv)
    assert rc == 0, se
    return paths


def _register(lab, name, flags):
    root = kubelet.start(lab.plane, name, flags)
    try:
        first = lab.wait_for(lambda: _first_registration(lab, name), timeout=90, what=f"the kubelet of {name} to register it")
    finally:
        kubelet.stop(lab.plane, root)
    assert first["status"] == 201 and first["user"] == "gpuops-lab:kubelet", first
    return [{k: t.get(k, "") for k in ("key", "value", "effect")} for t in ((first["body"] or {}).get("spec") or {}).get("taints") or []]


def test_kubeadm_join_with_the_rendered_join_configuration_registers_the_node_tainted(tmp_path):
    k8s_dir = str(tmp_path / "k8s")
    with kube_lab({}, run_dir=k8s_dir) as lab:
        paths = _render(tmp_path, k8s_dir)
        kubeadm_flags = kubelet.kubeadm_join_flags(lab.plane, str(paths["join"]), str(tmp_path))
        assert "--register-with-taints=example.com/dedicated=ml:NoSchedule,gpuops.io/preflight=pending:NoSchedule" in kubeadm_flags
        assert _register(lab, "gpu-new", kubeadm_flags) == [OTHER, GATE]
        assert _register(lab, "gpu-plain", []) == []                           # the control
        # The Node keeps them. The node lifecycle controller may add node.kubernetes.io/not-ready (or unreachable)
        # once the stopped kubelet's status goes stale, so only ours are checked, in order.
        keys = [t.key for t in lab.core.read_node("gpu-new").spec.taints]
        assert [k for k in keys if not k.startswith("node.kubernetes.io/")] == [OTHER["key"], GATE["key"]], keys


def test_with_the_environment_file_too_the_join_configurations_taints_stay(tmp_path):
    """kubeadm's drop-in passes $KUBELET_EXTRA_ARGS after $KUBELET_KUBEADM_ARGS and the kubelet keeps the last
    --register-with-taints (pkg/util/flag/flags.go RegisterWithTaintsVar.Set replaces the list): the file's flag must
    carry the JoinConfiguration's taints, or the node registers without them."""
    k8s_dir = str(tmp_path / "k8s")
    with kube_lab({}, run_dir=k8s_dir) as lab:
        paths = _render(tmp_path, k8s_dir, node_preflight_kubelet_extra_args_path=str(tmp_path / "default" / "kubelet"))
        extra = _extra_args(paths["env"])
        assert extra == ["--register-with-taints=example.com/dedicated=ml:NoSchedule,gpuops.io/preflight=pending:NoSchedule"]
        flags = kubelet.kubeadm_join_flags(lab.plane, str(paths["join"]), str(tmp_path)) + extra
        assert _register(lab, "gpu-new", flags) == [OTHER, GATE]
