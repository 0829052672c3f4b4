# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Helpers for the usage advice's integration tests (the fixtures in conftest.py): a real Prometheus (Debian's package) on a backfilled week of
dcgm-exporter history, started by lab/dcgm/prometheus.py, and ansible-playbook runs against it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VENV_BIN = os.path.dirname(sys.executable)
HELPER = os.path.join(ROOT, "lab", "dcgm", "prometheus.py")
# dcgm-exporter on its default counters (etc/default-counters.csv leaves these two commented out).
DEFAULT_OFF = ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY")


class Prometheus:
    def __init__(self, run_dir):
        self.run_dir = str(run_dir)
        with open(os.path.join(self.run_dir, "url"), encoding="utf-8") as f:
            self.url = f.read().strip()
        with open(os.path.join(self.run_dir, "timings.json"), encoding="utf-8") as f:
            self.timings = json.load(f)


def start(run_dir, *args):
    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        pytest.skip("Debian's prometheus package is not installed (make deps installs it)")
    subprocess.run([sys.executable, HELPER, "up", str(run_dir)] + list(args), check=True, capture_output=True,
                   text=True, timeout=300)
    return Prometheus(run_dir)


def stop(run_dir):
    subprocess.run([sys.executable, HELPER, "down", str(run_dir)], check=False, capture_output=True, timeout=60)


def ansible_env(extra=None):
    env = dict(os.environ)
    for key in [k for k in env if k.startswith("PROMETHEUS_")]:
        del env[key]
    env.update({
        "PATH": VENV_BIN + os.pathsep + env.get("PATH", ""),
        "ANSIBLE_COLLECTIONS_PATH": os.path.join(ROOT, "build", "collections"),
        "ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "json",
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_SHOW_CUSTOM_STATS": "1",
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_NOCOLOR": "1",
    })
    env.update(extra or {})
    return env


def run_playbook(playbook, inventory, env, *flags, extra_vars=None):
    """(rc, the json callback's document or None, stdout, stderr)."""
    cmd = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", str(inventory), playbook,
           "-e", "ansible_python_interpreter=%s" % sys.executable] + list(flags)
    if extra_vars:
        cmd += ["-e", json.dumps(extra_vars)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        out = None
    return proc.returncode, out, proc.stdout, proc.stderr


def task_results(out, name):
    """{host: result} of the task ``name`` across the plays."""
    found = {}
    for play in out["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"] == name:
                found.update(task["hosts"])
    return found


def failures(out):
    return [(task["task"]["name"], host, res.get("msg")) for play in out["plays"] for task in play["tasks"]
            for host, res in task["hosts"].items() if res.get("failed")]
