# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The installed collection (conftest.py: tarball -> ansible-galaxy -> empty collections path, ansible-core only):
its dependencies resolve, every module's docs render, every playbook is reachable as gpuops.provision.<name> and
parses, and the fleet report playbook runs from the install and writes where the user runs it."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from installed_env import ROOT, _run, clean_env, dev_copy  # noqa: E402  pylint: disable=import-error,wrong-import-position
from gpusim_nvml import library_env  # noqa: E402  pylint: disable=import-error,wrong-import-position

MODULES = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py"))
                 if not p.endswith("__init__.py"))
PLAYBOOKS = sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(ROOT, "playbooks", "*.yml")))
ROLES = sorted(os.path.basename(os.path.dirname(os.path.dirname(p)))
               for p in glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml")))


def test_the_manifest_declares_galaxy_yml_dependencies_and_they_were_installed(installed):
    assert installed.manifest()["collection_info"]["dependencies"] == installed.deps
    for collection in installed.deps:
        ns, name = collection.split(".")
        assert os.path.isfile(os.path.join(installed.collections, "ansible_collections", ns, name, "MANIFEST.json")), collection
    # Nothing of the source tree's development material came along.
    for dev in ("lab", "bench", "molecule", "tools", "build", "inventories/lab", "tests", "pytest.ini"):
        assert not os.path.exists(os.path.join(installed.path, dev)), dev
    # awx.awx only where awx_setup.yml runs (requirements.yml, the execution environment): an install does not pull it.
    assert "awx.awx" not in installed.deps and not os.path.exists(os.path.join(installed.collections, "ansible_collections", "awx"))
    # Nor any tool's hidden state (hypothesis' .hypothesis/ database, caches, dotfiles).
    hidden = [os.path.join(folder, n) for folder, dirs, files in os.walk(installed.path) for n in dirs + files if n.startswith(".")]
    assert hidden == []


def test_the_tarball_alone_does_not_resolve_without_its_dependencies(installed, tmp_path):
    # Offered nothing but the tarball, ansible-galaxy refuses, naming a declared dependency (the resolver stops at
    # the first it cannot satisfy): the dependencies above were resolved because the MANIFEST asks for them.
    proc = subprocess.run([installed.bin("ansible-galaxy"), "collection", "install", "--offline", installed.tarball,
                           "-p", str(tmp_path / "c")], env=dict(installed.env, ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "c")),
                          capture_output=True, text=True, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Failed to resolve the requested dependencies map" in out, out
    assert "(dependency of gpuops.provision:" in out, out
    assert any("* %s:%s (dependency of gpuops.provision" % (c, spec) in out for c, spec in installed.deps.items()), out


# The pre-join gate's taint step: its first task reads the GPU Operator's ClusterPolicy with kubernetes.core.k8s_info.
USE_K8S = """
- name: Taint a node with the collection's node_preflight role
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Taint
      ansible.builtin.include_role:
        name: gpuops.provision.node_preflight
        tasks_from: taint
      vars:
        node_preflight_gpu_operator_toleration: true
        node_preflight_kubeconfig: /nonexistent/kubeconfig
"""


def test_without_kubernetes_core_the_roles_cannot_run(installed, tmp_path):
    # Why the dependency matters: with every other collection of the install but kubernetes.core, the first Kubernetes
    # task of a role cannot be resolved; with the full install, the same run gets as far as reading the kubeconfig.
    coll = tmp_path / "c"
    req = tmp_path / "req.yml"
    req.write_text(yaml.safe_dump({"collections": [{"name": installed.tarball, "type": "file"}]
                                   + [{"name": dev_copy(c), "type": "dir"} for c in installed.closure if c != "kubernetes.core"]}))
    _run([installed.bin("ansible-galaxy"), "collection", "install", "--offline", "--no-deps", "-r", str(req), "-p", str(coll)],
         env=dict(installed.env, ANSIBLE_COLLECTIONS_PATH=str(coll)))
    playbook = tmp_path / "taint.yml"
    playbook.write_text(USE_K8S)
    outs = {}
    for name, path in (("without", str(coll)), ("full", installed.collections)):
        proc = subprocess.run([installed.bin("ansible-playbook"), str(playbook), "-e", "ansible_python_interpreter=" + installed.bin("python")],
                              env=dict(installed.env, ANSIBLE_COLLECTIONS_PATH=path), cwd=installed.cwd,
                              capture_output=True, text=True, check=False)
        assert proc.returncode != 0
        outs[name] = proc.stdout + proc.stderr
    assert "couldn't resolve module/action 'kubernetes.core.k8s_info'" in outs["without"], outs["without"]
    assert "couldn't resolve module/action" not in outs["full"] and "/nonexistent/kubeconfig" in outs["full"], outs["full"]


@pytest.mark.parametrize("module", MODULES)
def test_ansible_doc_renders_every_module_from_the_install(installed, module):
    out = _run([installed.bin("ansible-doc"), "-t", "module", "gpuops.provision." + module], env=installed.env,
               cwd=installed.cwd).stdout
    assert os.path.join(installed.path, "plugins", "modules", module + ".py") in out
    for section in ("OPTIONS", "EXAMPLES", "RETURN VALUES"):
        assert section in out, (module, section)


def test_ansible_doc_lists_the_roles_entry_points_from_the_install(installed):
    out = json.loads(_run([installed.bin("ansible-doc"), "-t", "role", "-l", "gpuops.provision", "--json"], env=installed.env,
                          cwd=installed.cwd).stdout)
    assert sorted(k.split(".")[-1] for k in out) == ROLES


# Calls awx.awx, which is no dependency of the collection: installed beside it where the setup runs (docs/awx.md).
SETUP_PLAYBOOKS = ("awx_setup",)


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_every_playbook_is_reachable_by_its_collection_name(installed, playbook, tmp_path):
    # As users call them: ansible-playbook gpuops.provision.<name>, with the example inventory the tarball ships.
    inventory = os.path.join(installed.path, "inventories", "example", "hosts.yml")
    cmd = [installed.bin("ansible-playbook"), "gpuops.provision." + playbook, "--syntax-check", "-i", inventory]
    env = installed.env
    if playbook in SETUP_PLAYBOOKS:
        # The install alone lacks awx.awx, and says so; `ansible-galaxy collection install awx.awx` beside it is enough.
        proc = subprocess.run(cmd, env=env, cwd=installed.cwd, capture_output=True, text=True, check=False)
        assert proc.returncode != 0 and "awx.awx" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        _run([installed.bin("ansible-galaxy"), "collection", "install", "--offline", "--no-deps", dev_copy("awx.awx"),
              "-p", str(tmp_path / "setup")], env=env)
        env = dict(env, ANSIBLE_COLLECTIONS_PATH=os.pathsep.join([installed.collections, str(tmp_path / "setup")]))
    proc = _run(cmd, env=env, cwd=installed.cwd)
    assert "playbook: " in proc.stdout and os.path.join(installed.path, "playbooks", playbook + ".yml") in proc.stdout, proc.stdout


def test_the_fleet_report_runs_from_the_install_and_writes_where_the_user_runs_it(installed, tmp_path):
    # A GPU node simulated by gpusim (the installed nvidia-ml-py over gpusim's libnvidia-ml.so.1) and a fake /sys; roles, filters
    # and modules all come from the install. The report lands in ./fleet-report of the working directory, not in
    # the installed collection.
    state = tmp_path / "gpusim.json"
    state.write_text(json.dumps({"gpus": [{"model": "NVIDIA A100-SXM4-40GB", "mig_mode": "enabled"}]}))
    python = installed.bin("python")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"node-1": {
        "ansible_connection": "local", "ansible_python_interpreter": python, "fleet_report_driver_facts": False,
        "gpuops_sysfs_root": str(tmp_path / "empty-root"),
        "fleet_report_environment": library_env(state)}},
        "vars": {}}, "ungrouped": {}}))
    proc = _run([installed.bin("ansible-playbook"), "gpuops.provision.fleet_report", "-i", str(inventory),
                 "-e", "ansible_python_interpreter=" + python],
                env=installed.env, cwd=installed.cwd)
    # The default callback: the json one is ansible.posix's, which the install does not hold.
    assert re.search(r"node-1\s+: ok=\d+ .*failed=0", proc.stdout), proc.stdout[-3000:]
    report = json.load(open(os.path.join(installed.cwd, "fleet-report", "report.json"), encoding="utf-8"))
    assert [h["host"] for h in report["hosts"]] == ["node-1"], report
    assert [(g["index"], g["mig"]["current"]) for g in report["hosts"][0]["gpus"]] == [(0, "enabled")], report["hosts"]
    assert not os.path.exists(os.path.join(installed.path, "build")), "the report went into the installed collection"


def test_the_environment_has_no_dev_collections(installed):
    # The run above cannot have borrowed a collection from the `ansible` package: the install's path is all there is.
    out = _run([installed.bin("ansible-galaxy"), "collection", "list", "--format", "json"], env=installed.env,
               cwd=installed.cwd).stdout
    listed = {name for path in json.loads(out).values() for name in path}
    assert listed == {"gpuops.provision", *installed.closure}, listed
    assert clean_env(installed.venv, "x", "y")["ANSIBLE_COLLECTIONS_SCAN_SYS_PATH"] == "False"
