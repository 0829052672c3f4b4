# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A simulated GPU fleet for playbooks/mig_reconfigure.yml: every node is a local inventory host with its own gpusim
state file, and a Kubernetes node of the same name in the lab's upstream control plane (lab/kube; its device-plugin
stand-in reads that file).
Used by the integration tests and by bench/mig_reconfigure."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VENV_BIN = os.path.join(ROOT, ".venv", "bin")
PYTHON = os.path.join(VENV_BIN, "python")
GPUSIM = os.path.join(ROOT, "lab", "gpusim")
PLAYBOOK = os.path.join(ROOT, "playbooks", "mig_reconfigure.yml")

sys.path.insert(0, os.path.join(ROOT, "lab", "kube"))
from kube_harness import kube_lab  # noqa: E402  pylint: disable=import-error,wrong-import-position
from requestlog import node_patches, timeline, writes  # noqa: E402  pylint: disable=import-error,wrong-import-position
import device_plugin  # noqa: E402  pylint: disable=import-error,wrong-import-position
from gpusim_nvml import library_env  # noqa: E402  pylint: disable=import-error,wrong-import-position

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"
BALANCED_H100 = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
BALANCED_A100 = {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
CONFIG = {"version": "v1", "mig-configs": {
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "all-balanced": [
        {"devices": "all", "device-filter": "0x233010DE", "mig-enabled": True, "mig-devices": BALANCED_H100},
        {"devices": "all", "device-filter": "0x20B010DE", "mig-enabled": True, "mig-devices": BALANCED_A100},
    ],
    "all-3g": [{"devices": "all", "device-filter": "0x233010DE", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}],
    "too-big": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 3}}],
}}
# CONFIG plus three-1g: all-balanced with a third 1g.10gb in place of its 2g.20gb, so a node keeps its two 1g.10gb
# through the change (test_roll_failed_node, test_roll_forks).
THREE_1G = dict(CONFIG, **{"mig-configs": dict(CONFIG["mig-configs"], **{"three-1g": [
    {"devices": "all", "device-filter": "0x233010DE", "mig-enabled": True, "mig-devices": {"1g.10gb": 3, "3g.40gb": 1}}]})})


def create_cluster_policy(lab, tolerations=None):
    """The GPU Operator's ClusterPolicy (its CRD, then the object once the API server serves it), as a cluster with
    the operator has it; ``tolerations``: its spec.daemonsets.tolerations. Returns the CustomObjectsApi."""
    import kubernetes  # pylint: disable=import-outside-toplevel
    lab.create(device_plugin.cluster_policy_crd())
    custom = kubernetes.client.CustomObjectsApi(lab.api_client)
    policy = device_plugin.cluster_policy()
    if tolerations is not None:
        policy["spec"]["daemonsets"] = {"tolerations": tolerations}

    def served():
        try:
            custom.create_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", policy)
            return True
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return False
            raise
    lab.wait_for(served, what="the ClusterPolicy CRD served")
    return custom


def gi(profile_id, start, slices):
    return {"profile_id": profile_id, "start": start, "compute_instances": [{"slices": slices}]}


# H100 geometries as gpusim seeds.
H100_BALANCED = [gi(19, 0, 1), gi(19, 1, 1), gi(14, 2, 2), gi(9, 4, 3)]
H100_3G_X2 = [gi(9, 0, 3), gi(9, 4, 3)]


def gpu(model=H100, mig_mode="enabled", instances=None):
    g = {"model": model, "mig_mode": mig_mode}
    if instances:
        g["gpu_instances"] = instances
    return g


class Fleet:
    """Nodes (name -> gpusim state), the Kubernetes fixture and the inventory; start() gives a running stand-in."""

    def __init__(self, base, nodes, selected="all-balanced", pods_per_node=True, extra_pods=(), pdbs=(), host_vars=None,
                 group_vars=None, label_selected=True, fixture=None):
        """``fixture``: the cluster as given (lab/kube seed.py's format, e.g. bench/mig_reconfigure's fleet of
        gpu_node.py nodes) instead of the one made here from ``nodes`` (plain nodes, a device plugin and an inference
        pod on each)."""
        self.base = str(base)
        self.nodes = nodes
        self.lab = None
        self.states = {}
        os.makedirs(self.base, exist_ok=True)
        for name, state in nodes.items():
            path = os.path.join(self.base, name + ".gpusim.json")
            with open(path, "w", encoding="utf-8") as fh:
                json.dump(state, fh)
            self.states[name] = path
        labels = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.device-plugin": "true",
                  "nvidia.com/gpu.deploy.dcgm-exporter": "false"}
        if label_selected:
            labels["nvidia.com/mig.config"] = selected
        self.fixture = {
            "nodes": [{"metadata": {"name": n, "labels": dict(labels)}} for n in nodes],
            "daemonsets": [{"metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "gpu-operator"}}],
            "replicasets": [{"metadata": {"name": "inference-7d9f", "namespace": "ml"}}],
            "pods": [],
            "poddisruptionbudgets": [{"metadata": {"name": "inference", "namespace": "ml"},
                                      "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "inference"}}}}],
        }
        if pods_per_node:
            for n in nodes:
                self.fixture["pods"] += [
                    {"metadata": {"name": "nvidia-device-plugin-daemonset-" + n, "namespace": "gpu-operator",
                                  "labels": {"app": "nvidia-device-plugin-daemonset"},
                                  "ownerReferences": [{"kind": "DaemonSet", "name": "nvidia-device-plugin-daemonset"}]},
                     "spec": {"nodeName": n}},
                    {"metadata": {"name": "inference-7d9f-" + n, "namespace": "ml", "labels": {"app": "inference"},
                                  "ownerReferences": [{"kind": "ReplicaSet", "name": "inference-7d9f"}]},
                     "spec": {"nodeName": n}},
                ]
        self.fixture["pods"] += list(extra_pods)
        self.fixture["poddisruptionbudgets"] += list(pdbs)
        if fixture is not None:
            self.fixture = fixture
        # Extra pods owned by a ReplicaSet get that ReplicaSet in their namespace.
        known = {("ml", "inference-7d9f")}
        for p in extra_pods:
            owner = (p["metadata"].get("ownerReferences") or [{}])[0]
            key = (p["metadata"]["namespace"], owner.get("name"))
            if owner.get("kind") == "ReplicaSet" and key not in known:
                known.add(key)
                self.fixture["replicasets"].append({"metadata": {"name": key[1], "namespace": key[0]}})
        path_env = os.pathsep.join([os.path.join(GPUSIM, "bin"), VENV_BIN, os.environ.get("PATH", "/usr/bin:/bin")])
        hosts = {}
        for n in nodes:
            hv = {
                "ansible_connection": "local",
                "ansible_python_interpreter": PYTHON,
                "mig_reconfigure_environment": dict(library_env(self.states[n]), PATH=path_env),
                "mig_reconfigure_lock_path": os.path.join(self.base, n + ".lock"),
                # The lab's kubelet directory of this node, where gpu_operator.py keeps mig-manager's ConfigMap copy.
                "mig_reconfigure_kubelet_root_dir": os.path.join(self.base, "k8s", "kubelet", n),
            }
            hv.update((host_vars or {}).get(n, {}))
            hosts[n] = hv
        gv = {
            "mig_reconfigure_config": CONFIG,
            "mig_reconfigure_gpu_client_units": [],  # no systemd here; the pod and label side is exercised
            "mig_reconfigure_drain_grace_period": 0,
            "mig_reconfigure_drain_timeout": 30,
            "mig_reconfigure_resource_delay": 1,
            "mig_reconfigure_resource_timeout": 30,
            # The boot-time re-apply goes into this fleet's directory, never into the test machine's /etc.
            "mig_reconfigure_boot_dir": os.path.join(self.base, "boot", "{{ inventory_hostname }}", "lib"),
            "mig_reconfigure_boot_declared": os.path.join(self.base, "boot", "{{ inventory_hostname }}", "mig-config.json"),
            "mig_reconfigure_boot_unit_dir": os.path.join(self.base, "boot", "{{ inventory_hostname }}"),
            "mig_reconfigure_boot_enable": False,
            "mig_reconfigure_boot_python": PYTHON,
        }
        if not label_selected:
            gv["mig_reconfigure_selected"] = selected
        gv.update(group_vars or {})
        self.inventory = os.path.join(self.base, "inventory.yml")
        with open(self.inventory, "w", encoding="utf-8") as fh:
            yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts, "vars": gv}}}}, fh)

    @contextlib.contextmanager
    def start(self, **kwargs):
        with kube_lab(self.fixture, run_dir=os.path.join(self.base, "k8s"), gpusim=dict(self.states), **kwargs) as lab:
            self.lab = lab
            yield lab

    def raw(self, node):
        with open(self.states[node], "rb") as fh:
            return fh.read()

    def state(self, node):
        with open(self.states[node], encoding="utf-8") as fh:
            return json.load(fh)

    def node(self, name):
        return self.lab.get_json("/api/v1/nodes/" + name)

    def run(self, extra_vars=None, check=False, timeout=900, forks=8, playbook=PLAYBOOK, env_extra=None):
        env = self.lab.ansible_env()
        env.update(env_extra or {})
        env.update({"ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_NOCOLOR": "1",
                    "ANSIBLE_RETRY_FILES_ENABLED": "0", "ANSIBLE_FORKS": str(forks),
                    "ANSIBLE_LOCALHOST_WARNING": "0", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
                    "ANSIBLE_SHOW_CUSTOM_STATS": "1"})
        cmd = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", self.inventory, playbook]
        if extra_vars:
            cmd += ["-e", json.dumps(extra_vars)]
        if check:
            cmd.append("--check")
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        try:
            out = json.loads(proc.stdout)
        except ValueError:
            raise AssertionError("ansible-playbook printed no JSON (rc %d):\n%s\n%s"
                                 % (proc.returncode, proc.stdout[-6000:], proc.stderr[-4000:])) from None
        return proc.returncode, out

    # --- request-log views (lab/kube/requestlog.py) -------------------------------------------------------------
    def node_patches(self, node):
        return node_patches(self.lab.requests(), node)

    def timeline(self, node):
        """(first cordon t, last uncordon t) from the request log, None where absent."""
        t = timeline(self.lab.requests(), node)
        return t["cordon"], t["uncordon"]

    def writes(self):
        return writes(self.lab.requests())


def failures(out):
    """{host: msg} of failed tasks (rescued ones aside)."""
    res = {}
    for play in out["plays"]:
        for task in play["tasks"]:
            for host, r in task["hosts"].items():
                if r.get("failed") and not r.get("ignore_errors") and not r.get("_ansible_ignore_errors"):
                    res.setdefault(host, []).append(r.get("msg", ""))
    return res
