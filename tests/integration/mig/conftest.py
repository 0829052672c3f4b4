# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures for the MIG integration tests: a temp gpusim state and `ansible localhost -m ...` runs against it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from gpusim_nvml import library_env  # pylint: disable=import-error

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VENV_BIN = os.path.dirname(sys.executable)


class Host:
    """One simulated machine (a GPUSIM_STATE file) and a way to run collection modules on it."""

    def __init__(self, state_path):
        self.state_path = state_path
        # The host's per-host MIG lock (mig_geometry's GPUOPS_MIG_LOCK fallback), next to its state, not in /run.
        self.lock_path = os.path.join(os.path.dirname(str(state_path)), "run", "gpuops", "mig.lock")

    def write(self, state):
        with open(self.state_path, "w", encoding="utf-8") as fh:
            json.dump(state, fh)

    def state(self):
        with open(self.state_path, encoding="utf-8") as fh:
            return json.load(fh)

    def raw(self):
        with open(self.state_path, "rb") as fh:
            return fh.read()

    def run(self, module, args=None, check=False, diff=False, extra_env=None):
        env = dict(os.environ)
        env.update({
            "PATH": VENV_BIN + os.pathsep + env.get("PATH", ""),
            "ANSIBLE_COLLECTIONS_PATH": os.path.join(ROOT, "build", "collections"),
            "GPUOPS_MIG_LOCK": self.lock_path,
            "ANSIBLE_STDOUT_CALLBACK": "json",
            "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
            "ANSIBLE_LOCALHOST_WARNING": "0",
            "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
            "ANSIBLE_NOCOLOR": "1",
        })
        # NVML: the installed nvidia-ml-py over gpusim's libnvidia-ml.so.1 with this state's driver (issue 42).
        env.update(library_env(self.state_path))
        env.update(extra_env or {})
        cmd = [os.path.join(VENV_BIN, "ansible"), "localhost", "-m", "gpuops.provision.%s" % module,
               "-e", "ansible_python_interpreter=%s" % sys.executable]
        if args is not None:
            cmd += ["-a", json.dumps(args)]
        if check:
            cmd.append("--check")
        if diff:
            cmd.append("--diff")
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
        try:
            out = json.loads(proc.stdout)
        except ValueError:
            raise AssertionError("ansible printed no JSON (rc %d):\n%s\n%s" % (proc.returncode, proc.stdout, proc.stderr))
        return out["plays"][0]["tasks"][0]["hosts"]["localhost"]


@pytest.fixture
def host(tmp_path):
    return Host(tmp_path / "gpusim.json")
