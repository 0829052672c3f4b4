"""Fixtures for the vSphere integration tests: the vcsim-gpu launcher and the runners.

Each test module starts its own simulator (free port, temporary run directory) and stops it afterwards. The
collection's modules run in the test's process (tests/helpers/module_runs.py), against the simulator over HTTPS: a
module test needs no controller process. Another collection's module (the community.vmware cross-read) and the
playbooks run as ansible runs them.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import pytest
from module_runs import run_as_task  # pylint: disable=import-error  # tests/helpers, on sys.path by tests/conftest.py

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VENV_BIN = os.path.join(ROOT, ".venv", "bin")
PYTHON = os.path.join(VENV_BIN, "python")
COLLECTIONS = os.path.join(ROOT, "build", "collections")


def _vcsim_lab():
    """The lab's launcher helper (lab/vcsim/vcsim_lab.py); tests load it by path, product code never does."""
    sys.path.insert(0, os.path.join(ROOT, "lab", "vcsim"))
    try:
        import vcsim_lab  # pylint: disable=import-error
    finally:
        sys.path.pop(0)
    return vcsim_lab


class Vcsim:
    """A running vcsim-gpu as the tests see it: ``auth`` for module arguments, ``info`` = inventory.json."""

    def __init__(self, lab):
        self.lab = lab
        self.address, self.port = lab.host, int(lab.port)
        self.info = dict(lab.inventory, username=lab.username, password=lab.password, ca=lab.ca)

    @property
    def auth(self):
        return dict(hostname=self.address, port=self.port, username=self.info["username"],
                    password=self.info["password"], ca_path=self.info["ca"])

    def arm_fault(self, method, mode, **kwargs):
        """A transport fault for the next call(s) of a SOAP method (lab/vcsim/faults.go)."""
        self.lab.arm_fault(method, mode, **kwargs)

    def faults(self):
        return self.lab.faults()

    def connect(self):
        """A verified pyvmomi session (our adapter) for reading the stand-in's state directly."""
        from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api
        return api.Session(dict(self.auth, validate_certs=True))


@pytest.fixture(scope="module")
def vcsim_factory():
    lab = _vcsim_lab()
    if not lab.available():
        pytest.skip("vcsim-gpu cannot be built here (no Go >= 1.23, see lab/vcsim/README.md)")
    with contextlib.ExitStack() as stack:
        def start(**kwargs):
            """Start one simulator; kwargs as vcsim_lab.vcsim (clusters, hosts, vms, fixture, ...)."""
            return Vcsim(stack.enter_context(lab.vcsim(timeout=120, **kwargs)))
        yield start


def ansible_env(extra=None):
    env = dict(os.environ)
    env.update(
        PATH=VENV_BIN + os.pathsep + env.get("PATH", ""),
        ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_HOST_KEY_CHECKING="0",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOCALHOST_WARNING="0",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
    )
    env.update(extra or {})
    return env


def run_adhoc(module, args, check=False, diff=False, env=None):
    """Run one module with ``ansible localhost``; returns the task result dict (``failed``/``msg`` on failure)."""
    cmd = [os.path.join(VENV_BIN, "ansible"), "localhost", "-e", "ansible_python_interpreter=" + PYTHON,
           "-m", module, "-a", json.dumps(args)]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ansible_env(env), cwd=ROOT, timeout=300, check=False)
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("no JSON from ansible (rc %s): %s %s" % (proc.returncode, proc.stdout, proc.stderr))
    return out["plays"][0]["tasks"][0]["hosts"]["localhost"]


def run_playbook(path, extra_vars, check=False, env=None):
    """Run a playbook; returns (rc, parsed json output). env: environment variables set for the run (VMWARE_* from
    the test's environment are dropped first, so a test says exactly which apply)."""
    cmd = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=" + PYTHON, "-e", json.dumps(extra_vars), path]
    if check:
        cmd.append("--check")
    run_env = {k: v for k, v in ansible_env(env).items() if not k.startswith("VMWARE_") or k in (env or {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=run_env, cwd=ROOT, timeout=600, check=False)
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("no JSON from ansible-playbook (rc %s): %s %s" % (proc.returncode, proc.stdout, proc.stderr))
    return proc.returncode, out


def task_results(out):
    """{task name: localhost result} of the first play."""
    # Role tasks are named "<role> : <task>"; tests use the bare task name.
    return {t["task"]["name"].split(" : ", 1)[-1]: t["hosts"].get("localhost") for t in out["plays"][0]["tasks"]}


class Runner:
    """Test-facing access to the runners (importlib mode: test files cannot import this conftest)."""

    playbook = staticmethod(run_playbook)
    tasks = staticmethod(task_results)

    def __init__(self, in_process, monkeypatch):
        self.in_process, self.monkeypatch = in_process, monkeypatch

    def module(self, module, args, check=False, diff=False, env=None):
        """Run ``module`` (its full name); returns the result as the controller gives it."""
        if not module.startswith("gpuops.provision."):
            return run_adhoc(module, args, check=check, diff=diff, env=env)
        with self.monkeypatch.context() as patch:
            for key, value in (env or {}).items():
                patch.setenv(key, value)
            return run_as_task(self.in_process, module.split(".")[-1], args, check=check, diff=diff)


@pytest.fixture
def ansible(run_module, monkeypatch):
    return Runner(run_module, monkeypatch)
