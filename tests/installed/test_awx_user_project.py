# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""AWX the usual way (issue 41 point 4): a platform team's own project (docs/examples/awx-project: its inventory,
one playbook per workflow importing the collection's, collections/requirements.yml), the collection installed from
its tarball by AWX's project sync, and the Proxmox and vSphere job templates of playbooks/awx_setup.yml run through
ansible-runner with the connection from the credential types' injectors alone: no connection variable anywhere in
the project or its inventory.

The job's collections path is AWX's (awx_job.project_update): the project's requirements_collections/ first, then
the execution environment's, which holds the collection's dependencies as execution-environment.yml installs them."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import sys

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import awx_job  # noqa: E402  pylint: disable=import-error,wrong-import-position
from installed_env import ROOT, clean_env, closure, dev_copy  # noqa: E402  pylint: disable=import-error,wrong-import-position

EXAMPLE = os.path.join(ROOT, "docs", "examples", "awx-project")
# Connection options of the roles: in a project for AWX none of them is set, the credentials inject them.
CONNECTION_VARS = re.compile(r"^(pve_gpu_vm_(api_\w+|validate_certs|ca_path)|vsphere_vgpu_(host|vm)_vcenter_\w+)$")


def _load(name, path):
    """A test helper module by path (the Proxmox suite's pvesim fixture and its helpers)."""
    import importlib.util  # pylint: disable=import-outside-toplevel
    for folder in (ROOT, os.path.join(ROOT, "tests", "helpers")):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def workflow_playbooks():
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "playbooks", "*.yml")) if not p.endswith("awx_setup.yml"))


def test_one_job_template_per_workflow_playbook_and_the_example_project_has_each():
    templates, _types = awx_job.setup_vars()
    by_playbook = {}
    for tmpl in templates:
        by_playbook.setdefault(os.path.basename(tmpl["playbook"]), []).append(tmpl["name"])
    # Proxmox and vSphere ran only inside "site": no template of their own (issue 41).
    assert sorted(by_playbook) == workflow_playbooks()
    assert all(len(names) == 1 for names in by_playbook.values()), by_playbook
    for name in workflow_playbooks():
        with open(os.path.join(EXAMPLE, "playbooks", name), encoding="utf-8") as f:
            plays = yaml.safe_load(f)
        assert plays == [{"name": "Workflow gpuops.provision." + name[:-4], "ansible.builtin.import_playbook": "gpuops.provision." + name[:-4]}]


def test_the_example_project_sets_no_connection_variable_and_requires_the_collection():
    found = []
    for path in glob.glob(os.path.join(EXAMPLE, "inventory", "**", "*.yml"), recursive=True):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        found += [(path, k) for k in re.findall(r"^\s*(\w+):", text, re.M) if CONNECTION_VARS.match(k)]
    assert not found
    with open(os.path.join(EXAMPLE, "collections", "requirements.yml"), encoding="utf-8") as f:
        assert [c["name"] for c in yaml.safe_load(f)["collections"]] == ["gpuops.provision"]


def _project(tmp_path, installed, group_vars):
    """The example project as the team would commit it, with this test's fleet in its inventory and, since Galaxy is
    out of reach here, its requirements naming the tarball (type file) where the example names the Galaxy release."""
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE, project)
    (project / "collections" / "requirements.yml").write_text(
        yaml.safe_dump({"collections": [{"name": installed.tarball, "type": "file"}]}), encoding="utf-8")
    shutil.rmtree(project / "inventory")
    (project / "inventory" / "group_vars").mkdir(parents=True)
    hosts = {"all": {"children": {group: {"hosts": {name: {"ansible_connection": "local"}}} for group, name in
                                  (("pve_clusters", "pve-lab"), ("vcenters", "vcenter-lab"))}}}
    (project / "inventory" / "hosts.yml").write_text(yaml.safe_dump(hosts), encoding="utf-8")
    for group, data in group_vars.items():
        (project / "inventory" / "group_vars" / (group + ".yml")).write_text(yaml.safe_dump(data), encoding="utf-8")
    return project


def _ee_collections(tmp_path, installed):
    """The execution environment's collection directory: the collection's dependencies, not the collection."""
    ee = tmp_path / "ee-collections" / "ansible_collections"
    for collection in closure(installed.deps):
        ns, name = collection.split(".")
        (ee / ns).mkdir(parents=True, exist_ok=True)
        os.symlink(dev_copy(collection), ee / ns / name)
    return str(ee.parent)


def _run(tmp_path, installed, name, group_vars, credentials):
    tmpl = awx_job.template(name)
    project = _project(tmp_path, installed, group_vars)
    ee = _ee_collections(tmp_path, installed)
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "ansible.cfg").write_text("[defaults]\n", encoding="utf-8")
    pdd, _extra = awx_job.private_data_dir(tmp_path, tmpl, None, None, credentials=credentials, project=str(project),
                                           env={"ANSIBLE_PYTHON_INTERPRETER": installed.bin("python")})
    sync_env = clean_env(installed.venv, ee, str(home))
    requirements = awx_job.project_update(pdd, installed.bin("ansible-galaxy"), sync_env)
    assert os.path.isfile(os.path.join(requirements, "ansible_collections", "gpuops", "provision", "MANIFEST.json"))
    job_env = clean_env(installed.venv, os.pathsep.join([requirements, ee]), str(home))
    result = awx_job.run_job(pdd, tmpl, installed.bin("ansible-runner"), job_env, playbook=awx_job.job_playbook(tmpl),
                             inventory=os.path.join(pdd, "project", "inventory", "hosts.yml"))
    return tmpl, result


@pytest.mark.slow
def test_proxmox_job_from_a_user_project_with_the_credential_alone(installed, tmp_path):
    pve = _load("proxmox_fixtures", os.path.join(ROOT, "tests", "integration", "proxmox", "conftest.py"))
    sim = pve.Sim(json.loads(json.dumps(pve.FIXTURE)), tmp_path)
    try:
        creds = {"host": "127.0.0.1", "port": str(sim.server.port), "user": "root@pam", "token_id": "ansible",
                 "token_secret": sim.token, "validate_certs": True, "ca_path": sim.server.ca}
        group_vars = {"pve_clusters": {
            "pve_gpu_vm_mappings": [{"id": "h100", "description": "H100 of pve2", "map": [{"node": "pve2", "path": ["0000:02:00.0"]}]}],
            "pve_gpu_vm_vms": [{"vmid": 200, "gpus": [{"mapping": "h100", "pcie": True}]}]}}
        tmpl, (rc, status, events, stdout) = _run(tmp_path, installed, "gpuops | Proxmox GPUs", group_vars, {"proxmox": creds})
        assert tmpl["credentials"] == ["proxmox"]
        assert (rc, status) == (0, "successful"), stdout[-4000:]
        state = sim.state()
        assert state["vms"]["200"]["config"]["hostpci0"] == "mapping=h100,pcie=1"
        assert any("node=pve2" in m for m in state["mappings"]["h100"]["map"])
        assert sim.token not in json.dumps(events) + stdout
    finally:
        sim.stop()


@pytest.mark.slow
def test_vsphere_job_from_a_user_project_with_the_credential_alone(installed, tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "lab", "vcsim"))
    import vcsim_lab  # noqa: E402  pylint: disable=import-error,import-outside-toplevel
    fixture = {"hosts": {"DC0_C0_H0": {"model": "a100-40"}, "DC0_C0_H1": {"model": "a100-40"}}}
    # A long password: Ansible masks each occurrence of a secret, and "pass" is in "passthrough".
    with vcsim_lab.vcsim(hosts=2, vms=0, fixture=fixture, password="vcenter-password-not-a-secret-7", timeout=120) as sim:
        assert int(sim.port) != 443  # only the credential's port reaches it
        creds = {"host": sim.host, "port": str(sim.port), "username": sim.username, "password": sim.password,
                 "validate_certs": True, "ca_path": sim.ca}
        group_vars = {"vcenters": {"vsphere_vgpu_host_esxi_hostnames": ["DC0_C0_H0"],
                                   "vsphere_vgpu_host_default_graphics_type": "sharedDirect", "vsphere_vgpu_vm_vms": []}}
        tmpl, (rc, status, events, stdout) = _run(tmp_path, installed, "gpuops | vSphere vGPU", group_vars, {"vcenter": creds})
        assert tmpl["credentials"] == ["vcenter"]
        assert (rc, status) == (0, "successful"), stdout[-4000:]
        changed = [e["event_data"]["task"] for e in events if e.get("event") == "runner_on_ok" and e["event_data"]["res"].get("changed")]
        assert changed, "the job changed nothing on vCenter"
        assert sim.password not in json.dumps(events) + stdout
