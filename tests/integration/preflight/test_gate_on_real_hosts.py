# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/preflight.yml on nodes as they are really found (issue 37 points 5 and 6).

Point 5: the GPU Operator's driver container keeps the driver under /run/nvidia/driver, not in the host's packages
(NVIDIA/gpu-operator#178); its device-plugin entrypoint takes /run/nvidia/validations/driver-ready as "driver root
/run/nvidia/driver". The node's tree here is the kernel's layout (lab/sysfs fake tree) with those files in it.
Point 6: kubeadm registers a node under its host name, lower-cased (k8s.io/component-helpers/node/util GetHostname),
unless nodeRegistration.name is set; an inventory of FQDNs names no node. The Kubernetes API is the lab's upstream
control plane (lab/kube).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from preflight_lab import ROOT, ansible_env, make_node, run_playbook, task_results, write_inventory  # noqa: E402  pylint: disable=import-error,wrong-import-position

sys.path.insert(0, os.path.join(ROOT, "lab", "kube"))
from kube_harness import kube_lab  # noqa: E402  pylint: disable=import-error,wrong-import-position
from gpusim_nvml import library_env  # noqa: E402  pylint: disable=import-error,wrong-import-position

pytestmark = pytest.mark.slow

PIN = "550.163.01"
PLAYBOOK = os.path.join(ROOT, "playbooks", "preflight.yml")
TAINT = {"key": "gpuops.io/preflight", "value": "pending", "effect": "NoSchedule"}
WORKER = {"cmdline": "BOOT_IMAGE=/boot/vmlinuz ro quiet", "modules": {"nvidia": {"version": PIN}}}
GPUSIM = {"driver_version": PIN, "gpus": [{"model": "NVIDIA L40S"}]}


def _operator_root(node_root, version=PIN, validated=True):
    """What the driver container leaves on the host: its root with the driver's libraries, and the validation.

    The role reads NVML through that root (LD_LIBRARY_PATH), as a real node would, so the root holds a working
    libnvidia-ml: gpusim's, under the driver's file names (the machine behind it is still the node's GPUSIM_STATE)."""
    lib = os.path.join(node_root, "run", "nvidia", "driver", "usr", "lib", "x86_64-linux-gnu")
    os.makedirs(lib, exist_ok=True)
    shutil.copy(os.path.join(library_env("", {"driver_version": version})["LD_LIBRARY_PATH"], "libnvidia-ml.so.1"),
                os.path.join(lib, "libnvidia-ml.so.%s" % version))
    os.symlink("libnvidia-ml.so.%s" % version, os.path.join(lib, "libnvidia-ml.so.1"))
    if validated:
        os.makedirs(os.path.join(node_root, "run", "nvidia", "validations"), exist_ok=True)
        with open(os.path.join(node_root, "run", "nvidia", "validations", "driver-ready"), "w", encoding="utf-8") as fh:
            fh.write("IS_HOST_DRIVER=false\nNVIDIA_DRIVER_ROOT=/run/nvidia/driver\n")


def _report(report_dir, name):
    with open(os.path.join(report_dir, name + ".json"), encoding="utf-8") as fh:
        return {c["id"]: c for c in json.load(fh)["checks"]}


def test_gpu_operator_managed_driver_passes_the_gate(tmp_path):
    """No host package, the driver in the operator's root: gpu_operator (and auto, by the validation) pass; host mode
    still fails, naming the missing package; a driver root of another version fails naming both."""
    common = {"node_preflight_checks": ["driver_version"], "node_preflight_driver_version": PIN,
              # No nvidia_driver_facts from an earlier role: the host's own package list is read (it has no driver).
              "node_preflight_driver_packages": ["nvidia-driver", "libnvidia-ml1"]}
    nodes = {
        "operator": dict(common, node_preflight_driver_mode="gpu_operator"),
        "operator-auto": dict(common, node_preflight_driver_mode="auto"),
        "operator-as-host": dict(common),
        "operator-old": dict(common, node_preflight_driver_mode="gpu_operator"),
    }
    hosts = {name: make_node(tmp_path, name, WORKER, GPUSIM, hv) for name, hv in nodes.items()}
    for name, hv in hosts.items():
        _operator_root(hv["node_preflight_root"], "550.144.03" if name == "operator-old" else PIN)
    inv = write_inventory(tmp_path / "hosts.yml", hosts)
    report_dir = str(tmp_path / "reports")
    rc, out, _so, se = run_playbook(PLAYBOOK, inv, {"node_preflight_report_dir": report_dir})
    assert out is not None, se
    checks = {name: _report(report_dir, name)["driver_version"] for name in nodes}
    assert checks["operator"]["status"] == "pass", checks["operator"]
    assert checks["operator"]["evidence"].startswith("driver container = loaded = pinned 550.163.01 (GPU Operator driver "
                                                     "root /run/nvidia/driver: libnvidia-ml.so.550.163.01, loaded 550.163.01")
    assert checks["operator-auto"]["status"] == "pass", checks["operator-auto"]
    assert checks["operator-as-host"]["status"] == "fail"
    assert checks["operator-as-host"]["evidence"].startswith("no NVIDIA driver package installed")
    assert checks["operator-old"]["status"] == "fail"
    assert checks["operator-old"]["evidence"].startswith("driver container 550.144.03, but the kernel module reports 550.163.01")
    assert rc != 0 and sorted(h for h, s in out["stats"].items() if s["failures"]) == ["operator-as-host", "operator-old"]


def test_node_registered_under_its_host_name_is_found_and_released(tmp_path):
    """An FQDN inventory name; kubeadm registered the node under the host's name with the gate taint. The gate must
    find that node and, the node passing, remove the taint; it writes no JoinConfiguration for a node that exists."""
    node_name = socket.gethostname().strip().lower()
    host = make_node(tmp_path, "gpu-a.example.com", WORKER, None,
                     {"node_preflight_checks": ["kernel_args"],
                      "node_preflight_join_config_path": str(tmp_path / "gpuops-join.yaml")})
    host.pop("node_preflight_k8s_node_name", None)  # nothing names it: the gate must find it as kubeadm named it
    inv = write_inventory(tmp_path / "hosts.yml", {"gpu-a.example.com": host})
    fixture = {"nodes": [{"metadata": {"name": node_name}, "spec": {"taints": [TAINT]}}]}
    with kube_lab(fixture) as lab:
        rc, out, _so, se = run_playbook(PLAYBOOK, inv, {"node_preflight_gate": "taint",
                                                        "node_preflight_report_dir": str(tmp_path / "reports")},
                                        env=ansible_env(lab.ansible_env()))
        nodes = {n["metadata"]["name"]: n for n in lab.get_json("/api/v1/nodes")["items"]}
    assert rc == 0, se
    assert sorted(nodes) == [node_name]
    assert [t["key"] for t in nodes[node_name]["spec"].get("taints") or []] == []
    assert not (tmp_path / "gpuops-join.yaml").exists()
    assert task_results(out, "Work out the node's name in Kubernetes")["gpu-a.example.com"]["ansible_facts"][
        "node_preflight_node_name"] == node_name


def test_join_configuration_carries_the_name_the_gate_looks_up(tmp_path):
    """A node not registered yet: the JoinConfiguration written for it names it (nodeRegistration.name), so kubeadm
    registers exactly the name the gate will look up, whatever the inventory calls the host."""
    join = tmp_path / "gpuops-join.yaml"
    host = make_node(tmp_path, "10.0.0.7", WORKER, None,
                     {"node_preflight_checks": ["kernel_args"], "node_preflight_join_config_path": str(join)})
    host.pop("node_preflight_k8s_node_name", None)
    inv = write_inventory(tmp_path / "hosts.yml", {"10.0.0.7": host})
    with kube_lab({"nodes": []}) as lab:
        rc, _out, _so, se = run_playbook(PLAYBOOK, inv, {"node_preflight_gate": "taint",
                                                         "node_preflight_report_dir": str(tmp_path / "reports")},
                                         env=ansible_env(lab.ansible_env()))
    assert rc == 0, se
    docs = [d for d in yaml.safe_load_all(join.read_text(encoding="utf-8")) if d]
    assert docs == [{"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration",
                     "nodeRegistration": {"name": socket.gethostname().strip().lower(), "taints": [TAINT]}}]
