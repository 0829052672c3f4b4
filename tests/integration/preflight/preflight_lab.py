# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Helpers for the preflight/licensing integration tests: simulated nodes (fake sysfs tree + gpusim state) run as
local inventory hosts, and ansible-playbook runs with the JSON callback."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VENV_BIN = os.path.dirname(sys.executable)
GPUSIM = os.path.join(ROOT, "lab", "gpusim")
COLLECTIONS = os.path.join(ROOT, "build", "collections")

# The licence service stand-in (a TLS listener) and client configuration tokens, shared with the unit tests.
sys.path.insert(0, os.path.join(ROOT, "tests", "helpers"))
from gpusim_nvml import library_env  # noqa: E402  pylint: disable=import-error,wrong-import-position
from nls_service import TlsListener, write_token  # noqa: E402,F401  pylint: disable=import-error,wrong-import-position,unused-import

_spec = importlib.util.spec_from_file_location("fake_tree", os.path.join(ROOT, "lab", "sysfs", "fake_tree.py"))
fake_tree = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_tree)


def make_node(base, name, sysfs=None, gpusim=None, hostvars=None):
    """A simulated node: its own sysfs/proc tree and (optionally) gpusim state; returns its inventory vars."""
    node_dir = os.path.join(str(base), name)
    root = fake_tree.build(os.path.join(node_dir, "root"), sysfs or {})
    hv = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "node_preflight_root": root,
        # Every simulated node runs on this machine (one host name): each names its Kubernetes node itself.
        "node_preflight_k8s_node_name": name,
    }
    if gpusim is not None:
        state = os.path.join(node_dir, "gpusim.json")
        with open(state, "w", encoding="utf-8") as fh:
            json.dump(gpusim, fh)
        # gpusim's bin first: its dmesg prints this node's kernel log (Xid events), not the test machine's.
        # NVML: the installed nvidia-ml-py over gpusim's libnvidia-ml.so.1 (issue 42).
        hv["node_preflight_environment"] = dict(library_env(state), PATH=os.pathsep.join(
            [os.path.join(GPUSIM, "bin"), VENV_BIN, os.environ.get("PATH", "/usr/bin:/bin")]))
    hv.update(hostvars or {})
    return hv


def write_inventory(path, hosts, group="gpu_nodes", group_vars=None):
    inv = {"all": {"children": {group: {"hosts": hosts, "vars": group_vars or {}}}}}
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(inv, fh)
    return str(path)


def ansible_env(base=None, extra=None):
    env = dict(os.environ if base is None else base)
    env.update({
        "PATH": VENV_BIN + os.pathsep + env.get("PATH", ""),
        "ANSIBLE_COLLECTIONS_PATH": COLLECTIONS,
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_FORKS": "8",
    })
    env.update(extra or {})
    return env


def run_playbook(playbook, inventory, extra_vars=None, env=None, json_output=True, verbosity=0, timeout=600, check=False,
                 extra_args=()):
    """Run ansible-playbook; returns (returncode, parsed JSON or None, stdout, stderr)."""
    env = dict(env or ansible_env())
    if json_output:
        env.update({"ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1"})
    cmd = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", inventory, playbook]
    if extra_vars:
        cmd += ["-e", json.dumps(extra_vars)]
    if verbosity:
        cmd.append("-" + "v" * verbosity)
    if check:
        cmd.append("--check")
    cmd += list(extra_args)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    out = None
    if json_output:
        try:
            out = json.loads(proc.stdout)
        except ValueError:
            raise AssertionError("ansible-playbook printed no JSON (rc %d):\n%s\n%s" % (proc.returncode, proc.stdout[-4000:], proc.stderr[-4000:]))
    return proc.returncode, out, proc.stdout, proc.stderr


def deprecations(out, stderr=""):
    """Every deprecation warning of a run: the json callback puts them in the task results ("deprecations", per loop
    item too), the default callback prints "[DEPRECATION WARNING]" lines."""
    found = [line for line in stderr.splitlines() if "DEPRECATION WARNING" in line]
    for play in (out or {}).get("plays", []):
        for task in play["tasks"]:
            for host, res in task["hosts"].items():
                for r in [res] + list(res.get("results") or []):
                    found += ["%s: %s: %s" % (host, task["task"]["name"], d.get("msg")) for d in r.get("deprecations") or []]
    return found


def task_results(out, name):
    """{host: result} of the first task with this name (across plays)."""
    for play in out["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"] == name or task["task"]["name"].endswith(" : " + name):
                return task["hosts"]
    return {}


# node_preflight's task files that render registration with the gate taint, included as a playbook would.
ROLE_TASKS_PLAYBOOK = """\
- name: {tasks} entry point
  hosts: all
  gather_facts: false
  tasks:
    - name: Register with the gate taint
      ansible.builtin.include_role:
        name: gpuops.provision.node_preflight
        tasks_from: {tasks}
"""


def role_tasks_playbook(tmp_path, tasks="join_config"):
    """A playbook (written in ``tmp_path``) that includes node_preflight's tasks file ``tasks``; returns its path."""
    path = tmp_path / ("%s.yml" % tasks)
    path.write_text(ROLE_TASKS_PLAYBOOK.format(tasks=tasks), encoding="utf-8")
    return str(path)
