# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collections the roles and workflow playbooks call at run time are the ones galaxy.yml declares (an installed
copy resolves only those), requirements.yml and execution-environment.yml install the same ones plus those of the
setup playbook (awx_setup.yml: awx.awx, which no install of the collection should pull), and the versions the tests
run with fall inside the declared ranges (ansible-galaxy's own range check)."""

from __future__ import annotations

import glob
import json
import os
import re
import sys

import pytest
import yaml
from ansible.galaxy.dependency_resolution.versioning import meets_requirements

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
OURS = {"ansible.builtin", "ansible.legacy", "gpuops.provision"}
# Task keywords that look like nothing else (module names are the remaining keys with two dots).
FQCN = re.compile(r"^([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\.[a-z][a-z0-9_]*$")
# Filters and tests in templates: "| ns.coll.name" and "is [not] ns.coll.name"; lookups: lookup('ns.coll.name'.
IN_TEMPLATE = re.compile(r"(?:\|\s*|\bis\s+(?:not\s+)?|\b(?:lookup|query|q)\(\s*['\"])([a-z][a-z0-9_]*\.[a-z][a-z0-9_]*)\.[a-z][a-z0-9_]*")


# Run once by an administrator to create the AWX objects, never by a job: what it calls is installed beside it
# (requirements.yml, the execution environment), not declared as a dependency of every install.
SETUP_PLAYBOOKS = ("playbooks/awx_setup.yml",)


def task_files(setup=False):
    """Every YAML file Ansible reads tasks or plays from: roles' tasks and handlers, the collection's playbooks
    (``setup``: the setup playbooks instead)."""
    if setup:
        return [os.path.join(ROOT, p) for p in SETUP_PLAYBOOKS]
    files = glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml"))
    files += glob.glob(os.path.join(ROOT, "roles", "*", "handlers", "*.yml"))
    files += glob.glob(os.path.join(ROOT, "playbooks", "*.yml"))
    return sorted(f for f in files if os.path.relpath(f, ROOT) not in SETUP_PLAYBOOKS)


def _strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)


def _module_keys(node):
    """Keys naming a collection's module: task keys and module_defaults keys, anywhere in the document."""
    if isinstance(node, dict):
        for k, v in node.items():
            if isinstance(k, str) and FQCN.match(k):
                yield k
            yield from _module_keys(v)
    elif isinstance(node, list):
        for v in node:
            yield from _module_keys(v)


class _Loader(yaml.SafeLoader):  # pylint: disable=too-many-ancestors
    """SafeLoader that reads Ansible's !unsafe and !vault tags as plain strings."""


_Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))
_Loader.add_constructor("!vault", lambda loader, node: "")


def used_collections(files):
    """{collection: sorted file paths} of the collections these task files call (modules, filters, tests, lookups)."""
    used = {}
    for path in files:
        with open(path, encoding="utf-8") as f:
            doc = yaml.load(f, Loader=_Loader)  # noqa: S506 - SafeLoader subclass
        names = {".".join(FQCN.match(k).groups()) for k in _module_keys(doc)}
        for text in _strings(doc):
            names.update(IN_TEMPLATE.findall(text))
        for name in names - OURS:
            used.setdefault(name, set()).add(os.path.relpath(path, ROOT))
    return {k: sorted(v) for k, v in used.items()}


def read_yaml(name):
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return yaml.load(f, Loader=_Loader)  # noqa: S506


def installed_version(collection):
    """The version of ``collection`` the tests run with: its MANIFEST.json on ANSIBLE_COLLECTIONS_PATH, then on
    sys.path (where ansible-core also looks: the `ansible` package's collections)."""
    ns, name = collection.split(".")
    for base in os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep) + sys.path:
        manifest = os.path.join(base, "ansible_collections", ns, name, "MANIFEST.json")
        if os.path.isfile(manifest):
            with open(manifest, encoding="utf-8") as f:
                return json.load(f)["collection_info"]["version"]
    return None


def test_scanner_finds_modules_filters_and_module_defaults(tmp_path):
    # The scanner itself: a module key, a module_defaults key, a filter, a test and a lookup are each found; a dotted
    # attribute path (item.metadata.name) and a label (nvidia.com/mig.config.state) are not collections.
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: all\n"
        "  module_defaults:\n    five.six.mod: {a: 1}\n"
        "  tasks:\n"
        "    - one.two.mod: {name: \"{{ item.metadata.name }}\"}\n"
        "    - ansible.builtin.debug: {msg: \"{{ x | three.four.flt }}\"}\n"
        "    - ansible.builtin.debug: {msg: \"{{ lookup('seven.eight.lk', 'k') }}\"}\n"
        "      when: x is not nine.ten.tst\n"
        "    - ansible.builtin.set_fact: {l: {nvidia.com/mig.config.state: pending}}\n",
        encoding="utf-8")
    assert used_collections([str(play)]) == {c: [os.path.relpath(str(play), ROOT)]
                                             for c in ("one.two", "three.four", "five.six", "seven.eight", "nine.ten")}


def test_galaxy_declares_every_collection_the_roles_and_playbooks_call():
    used = used_collections(task_files())
    declared = read_yaml("galaxy.yml").get("dependencies") or {}
    missing = {c: files for c, files in used.items() if c not in declared}
    assert not missing, "galaxy.yml dependencies lack collections called at run time: %s" % missing
    unused = sorted(set(declared) - set(used))
    assert not unused, "galaxy.yml declares collections no role or playbook calls: %s" % unused


def test_a_collection_removed_from_galaxy_yml_is_reported():
    # What the test above relies on: kubernetes.core is called (the MIG roll, the pools), so leaving it out fails.
    used = used_collections(task_files())
    assert "roles/gpu_pools/tasks/write.yml" in used["kubernetes.core"]
    declared = dict(read_yaml("galaxy.yml")["dependencies"])
    del declared["kubernetes.core"]
    assert [c for c in used if c not in declared] == ["kubernetes.core"]


def test_what_only_the_setup_playbook_calls_is_no_dependency():
    # awx.awx was a hard dependency: every install pulled it although only awx_setup.yml calls it (issue 41).
    setup_only = set(used_collections(task_files(setup=True))) - set(used_collections(task_files()))
    assert setup_only == {"awx.awx"}, setup_only
    assert not setup_only & set(read_yaml("galaxy.yml")["dependencies"]), "galaxy.yml makes every install pull %s" % setup_only


def _installed_by(name):
    if name == "requirements.yml":
        entries = read_yaml(name)["collections"]
    else:
        entries = read_yaml(name)["dependencies"]["galaxy"]["collections"]
    return {c["name"]: c.get("version") for c in entries}


# The range each collection is tested with: galaxy.yml's, and for awx.awx (no dependency) requirements.yml's.
RANGES = dict(_installed_by("requirements.yml"), **read_yaml("galaxy.yml")["dependencies"])


@pytest.mark.parametrize("collection", sorted(set(used_collections(task_files())) | set(used_collections(task_files(setup=True)))))
def test_the_tested_version_meets_the_declared_range(collection):
    version = installed_version(collection)
    assert version, "%s is not installed on ANSIBLE_COLLECTIONS_PATH (make collection installs it)" % collection
    spec = RANGES.get(collection)
    assert spec, "%s: no range in galaxy.yml or requirements.yml" % collection
    assert meets_requirements(version, spec), "%s %s is outside the declared range %s" % (collection, version, spec)


@pytest.mark.parametrize("name", ["requirements.yml", "execution-environment.yml"])
def test_requirements_yml_and_the_execution_environment_install_what_the_collection_and_its_setup_call(name):
    declared = read_yaml("galaxy.yml")["dependencies"]
    installed = _installed_by(name)
    assert {k: v for k, v in installed.items() if k in declared} == declared
    setup = set(used_collections(task_files(setup=True))) - set(declared)
    missing = sorted(setup - set(installed))
    assert not missing, "%s does not install %s, which %s calls" % (name, missing, SETUP_PLAYBOOKS)
    # The setup's collections with the same range wherever they are installed.
    assert {k: installed[k] for k in setup} == {k: _installed_by("requirements.yml")[k] for k in setup}
