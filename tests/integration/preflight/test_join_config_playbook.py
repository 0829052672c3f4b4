# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""roles/node_preflight/tasks/join_config.yml with ansible-playbook against localhost (connection local, files in a
tmp dir): the JoinConfiguration and kubelet's environment file carry the gate taint, mode 0600, a second run changes
nothing, check mode writes nothing, a bootstrap token stays out of --diff. And taint.yml on the lab's Kubernetes
stand-in: a node that is not registered gets the JoinConfiguration, the NFD worker DaemonSet gets the toleration once."""

from __future__ import annotations

import os
import stat
import sys

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from preflight_lab import ROOT, ansible_env, role_tasks_playbook, run_playbook, write_inventory  # noqa: E402  pylint: disable=import-error,wrong-import-position

GATE = {"key": "gpuops.io/preflight", "value": "pending", "effect": "NoSchedule"}
OTHER = {"key": "example.com/dedicated", "value": "ml", "effect": "NoSchedule"}
GATE_FLAG = "--register-with-taints=gpuops.io/preflight=pending:NoSchedule"
TOKEN = "abcdef.0123456789abcdef"


def _playbook(tmp_path, tasks="join_config"):
    return role_tasks_playbook(tmp_path, tasks)


def _inventory(tmp_path, **hostvars):
    hv = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
          # the node's Kubernetes name (else the host name of this machine, as kubeadm would take it)
          "node_preflight_k8s_node_name": "gpu-new"}
    hv.update(hostvars)
    return write_inventory(tmp_path / "hosts.yml", {"gpu-new": hv})


def _changed(out):
    return out["stats"]["gpu-new"]["changed"]


def _task(out, suffix):
    for play in out["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"].endswith(suffix):
                return task["hosts"]["gpu-new"]
    raise AssertionError("no task %r" % suffix)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def paths(tmp_path):
    return {"join": tmp_path / "etc" / "kubernetes" / "gpuops-join.yaml", "kubelet": tmp_path / "default" / "kubelet"}


def test_writes_the_taint_mode_0600_and_a_second_run_changes_nothing(tmp_path, paths):
    inv = _inventory(tmp_path, node_preflight_join_config_path=str(paths["join"]),
                     node_preflight_kubelet_extra_args_path=str(paths["kubelet"]))
    play = _playbook(tmp_path)
    rc, out, _so, se = run_playbook(play, inv)
    assert rc == 0, se
    docs = [d for d in yaml.safe_load_all(paths["join"].read_text(encoding="utf-8")) if d]
    assert docs == [{"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration",
                     "nodeRegistration": {"name": "gpu-new", "taints": [GATE]}}]
    assert _mode(paths["join"]) == 0o600
    assert paths["kubelet"].read_text(encoding="utf-8") == 'KUBELET_EXTRA_ARGS="%s"\n' % GATE_FLAG
    assert _changed(out) >= 2
    msg = _task(out, "Say where the registration with the gate taint is")["msg"]
    assert str(paths["join"]) in msg and "kubeadm join --config" in msg and "after adding discovery" in msg
    assert str(paths["kubelet"]) in msg

    rc, out, _so, se = run_playbook(play, inv)
    assert rc == 0, se
    assert _changed(out) == 0, out["stats"]
    assert _mode(paths["join"]) == 0o600


def test_check_mode_writes_nothing(tmp_path, paths):
    inv = _inventory(tmp_path, node_preflight_join_config_path=str(paths["join"]),
                     node_preflight_kubelet_extra_args_path=str(paths["kubelet"]))
    rc, out, _so, se = run_playbook(_playbook(tmp_path), inv, check=True)
    assert rc == 0, se
    assert _task(out, "Write the kubeadm JoinConfiguration with the gate taint")["changed"] is True
    assert not paths["join"].exists() and not paths["kubelet"].exists()
    assert "would be in" in _task(out, "Say where the registration with the gate taint is")["msg"]


def test_an_existing_file_is_merged_and_its_token_stays_out_of_the_diff(tmp_path, paths):
    paths["join"].parent.mkdir(parents=True)
    paths["join"].write_text(yaml.safe_dump_all([
        {"apiVersion": "kubeadm.k8s.io/v1beta3", "kind": "JoinConfiguration",
         "discovery": {"bootstrapToken": {"apiServerEndpoint": "10.0.0.1:6443", "token": TOKEN, "unsafeSkipCAVerification": True}},
         "nodeRegistration": {"taints": [OTHER]}},
        {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "cgroupDriver": "systemd"}]),
        encoding="utf-8")
    os.chmod(paths["join"], 0o644)
    paths["kubelet"].parent.mkdir(parents=True)
    paths["kubelet"].write_text("# local\nKUBELET_EXTRA_ARGS=--node-ip=10.0.0.5\n", encoding="utf-8")
    os.chmod(paths["kubelet"], 0o640)
    inv = _inventory(tmp_path, node_preflight_join_config_path=str(paths["join"]),
                     node_preflight_kubelet_extra_args_path=str(paths["kubelet"]))
    rc, out, stdout, se = run_playbook(_playbook(tmp_path), inv, extra_args=["--diff"])
    assert rc == 0, se
    assert TOKEN not in stdout
    join, kubelet = [d for d in yaml.safe_load_all(paths["join"].read_text(encoding="utf-8")) if d]
    assert join["apiVersion"] == "kubeadm.k8s.io/v1beta3"
    assert join["discovery"]["bootstrapToken"]["token"] == TOKEN
    assert join["nodeRegistration"]["taints"] == [OTHER, GATE]
    assert kubelet == {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "cgroupDriver": "systemd"}
    assert _mode(paths["join"]) == 0o600
    # The JoinConfiguration's other taint too: kubeadm's drop-in passes this variable after its own flags, and the
    # kubelet keeps the last --register-with-taints (test_join_registration.py shows it on a kubelet).
    assert paths["kubelet"].read_text(encoding="utf-8") == \
        '# local\nKUBELET_EXTRA_ARGS="--node-ip=10.0.0.5 --register-with-taints=example.com/dedicated=ml:NoSchedule,%s"\n' \
        % GATE_FLAG.split("=", 1)[1]
    assert _mode(paths["kubelet"]) == 0o640  # an existing environment file keeps its mode
    assert "after adding discovery" not in _task(out, "Say where the registration with the gate taint is")["msg"]
    rc, out, _so, se = run_playbook(_playbook(tmp_path), inv)
    assert rc == 0 and _changed(out) == 0, (se, out["stats"])


def test_declared_document_wins_and_a_bad_taint_fails_naming_the_field(tmp_path, paths):
    declared = {"discovery": {"file": {"kubeConfigPath": "/etc/kubernetes/discovery.conf"}},
                "nodeRegistration": {"name": "gpu-new", "taints": [OTHER]}}
    inv = _inventory(tmp_path, node_preflight_join_config_path=str(paths["join"]), node_preflight_join_config=declared)
    rc, _out, _so, se = run_playbook(_playbook(tmp_path), inv)
    assert rc == 0, se
    doc = yaml.safe_load(paths["join"].read_text(encoding="utf-8"))
    assert doc["discovery"] == declared["discovery"] and doc["nodeRegistration"]["taints"] == [OTHER, GATE]

    inv = _inventory(tmp_path, node_preflight_join_config_path=str(paths["join"]), node_preflight_taint_key="Not A Key")
    rc, out, _so, _se = run_playbook(_playbook(tmp_path), inv)
    assert rc != 0
    failed = _task(out, "Write the kubeadm JoinConfiguration with the gate taint")
    assert "gpuops.provision.preflight_join_config: taint.key 'Not A Key' is not a valid taint key" in failed["msg"]


def test_nothing_to_write_says_so(tmp_path):
    inv = _inventory(tmp_path, node_preflight_join_config_path="")
    rc, out, _so, se = run_playbook(_playbook(tmp_path), inv)
    assert rc == 0, se
    assert _changed(out) == 0
    assert "nothing registers it with the taint" in _task(out, "Say where the registration with the gate taint is")["msg"]


# --- taint.yml on the lab's Kubernetes control plane ------------------------------------------------------------------------

NFD_NS = "gpu-operator"
NFD_DS = "gpu-operator-node-feature-discovery-worker"
CHART_TOLERATIONS = [{"key": "node-role.kubernetes.io/control-plane", "operator": "Equal", "value": "", "effect": "NoSchedule"},
                     {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.mark.slow
def test_gate_registers_an_unregistered_node_and_lets_nfd_tolerate_the_taint(tmp_path, paths):
    sys.path.insert(0, os.path.join(ROOT, "lab", "kube"))
    from kube_harness import kube_lab  # pylint: disable=import-error,import-outside-toplevel

    fixture = {
        "namespaces": [{"metadata": {"name": NFD_NS}}],
        "nodes": [{"metadata": {"name": "gpu-old"}}],
        "daemonsets": [{"metadata": {"name": NFD_DS, "namespace": NFD_NS},
                        "spec": {"selector": {"matchLabels": {"app": "nfd-worker"}},
                                 "template": {"metadata": {"labels": {"app": "nfd-worker"}},
                                              "spec": {"tolerations": CHART_TOLERATIONS,
                                                       "containers": [{"name": "worker", "image": "nfd:v0.19.0"}]}}}}],
    }
    # The NFD patch is a write to a GPU Operator cluster: on only when asked (default: node_preflight_gpu_operator_toleration).
    inv = _inventory(tmp_path, node_preflight_join_config_path=str(paths["join"]), node_preflight_report={"ready": False},
                     node_preflight_k8s_delegate="gpu-new", node_preflight_nfd_toleration=True)
    play = _playbook(tmp_path, "taint")
    with kube_lab(fixture) as lab:
        env = ansible_env(lab.ansible_env())
        rc, out, _so, se = run_playbook(play, inv, env=env)
        assert rc == 0, se
        ds = lab.get_json("/apis/apps/v1/namespaces/%s/daemonsets/%s" % (NFD_NS, NFD_DS))
        patches = lab.count("PATCH", "/apis/apps/v1/namespaces/%s/daemonsets/%s" % (NFD_NS, NFD_DS))
        rc2, out2, _so, se2 = run_playbook(play, inv, env=env)
        patches2 = lab.count("PATCH", "/apis/apps/v1/namespaces/%s/daemonsets/%s" % (NFD_NS, NFD_DS))
        node_writes = [r for r in lab.requests() if r["method"] != "GET" and "/nodes" in r["path"]]
    # kube-apiserver stores the chart's `value: ""` as no value (omitempty), so the stored list is compared that way.
    stored = [{k: v for k, v in t.items() if v != ""} for t in CHART_TOLERATIONS]
    assert ds["spec"]["template"]["spec"]["tolerations"] == stored + [
        {"key": GATE["key"], "operator": "Exists", "effect": GATE["effect"]}]
    assert patches == 1
    assert rc2 == 0, se2
    assert patches2 == 1, "the second run patched the DaemonSet again"
    assert node_writes == []  # the node is not registered: nothing to taint through the API
    doc = yaml.safe_load(paths["join"].read_text(encoding="utf-8"))
    assert doc["nodeRegistration"]["taints"] == [GATE]
    assert _mode(paths["join"]) == 0o600
    msg = _task(out, "Say where the registration with the gate taint is")["msg"]
    assert msg.startswith("gpu-new is not a Kubernetes node yet:") and str(paths["join"]) in msg
    assert _task(out2, "Write the kubeadm JoinConfiguration with the gate taint")["changed"] is False
