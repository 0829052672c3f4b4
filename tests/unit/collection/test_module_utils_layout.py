# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/module_utils shows its domains (issue 44): packages by domain instead of flat files, each private, each
with a docstring that names every file it holds; the unit tests, tools/mutation.toml and the boot-time applier's file
list name files that exist."""

from __future__ import annotations

import ast
import os
import re
import tomllib

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir))
MODULE_UTILS = os.path.join(ROOT, "plugins", "module_utils")
UNIT = os.path.join(ROOT, "tests", "unit", "plugins", "module_utils")


def packages():
    return sorted(d for d in os.listdir(MODULE_UTILS)
                  if os.path.isdir(os.path.join(MODULE_UTILS, d)) and d != "__pycache__")


def py_files(folder):
    return sorted(f for f in os.listdir(folder) if f.endswith(".py"))


def test_at_most_five_files_at_the_top_and_every_package_private():
    assert len(py_files(MODULE_UTILS)) <= 5, py_files(MODULE_UTILS)
    assert packages(), "no packages under plugins/module_utils"
    # A leading underscore keeps a package out of the collection's public interface, as the flat _*.py files were.
    assert [p for p in packages() if not p.startswith("_")] == []


@pytest.mark.parametrize("package", packages())
def test_each_package_docstring_names_each_of_its_files(package):
    folder = os.path.join(MODULE_UTILS, package)
    assert "__init__.py" in py_files(folder), "%s has no __init__.py" % package
    with open(os.path.join(folder, "__init__.py"), encoding="utf-8") as fh:
        doc = ast.get_docstring(ast.parse(fh.read())) or ""
    named = set(re.findall(r"``([a-z_]+\.py)``", doc))
    files = set(py_files(folder)) - {"__init__.py"}
    assert sorted(files - named) == [], "%s/__init__.py does not name these files" % package
    assert sorted(named - files) == [], "%s/__init__.py names files it does not hold" % package


def test_unit_test_folders_mirror_the_packages():
    folders = sorted(d for d in os.listdir(UNIT) if os.path.isdir(os.path.join(UNIT, d)) and d != "__pycache__")
    assert sorted(set(folders) - set(packages())) == []


def test_mutation_config_and_boot_files_name_existing_files():
    with open(os.path.join(ROOT, "tools", "mutation.toml"), "rb") as fh:
        config = tomllib.load(fh)
    missing = [name for name in config["files"] if not os.path.isfile(os.path.join(MODULE_UTILS, name))]
    missing += [t for spec in config["files"].values() for t in spec["tests"] if not os.path.isfile(os.path.join(ROOT, t))]
    with open(os.path.join(ROOT, "roles", "mig_reconfigure", "vars", "main.yml"), encoding="utf-8") as fh:
        boot = yaml.safe_load(fh)["__mig_reconfigure_boot_files"]
    missing += [name for name in boot if not os.path.isfile(os.path.join(MODULE_UTILS, name))]
    assert missing == []


def test_files_import_each_other_without_a_cycle():
    """docs/development.md: files import downward only. A cycle is named by the files that make it."""
    prefix = "ansible_collections.gpuops.provision.plugins.module_utils."
    files = {"%s.%s" % (p, f[:-3]): os.path.join(MODULE_UTILS, p, f)
             for p in packages() for f in py_files(os.path.join(MODULE_UTILS, p)) if f != "__init__.py"}
    graph = {}
    for name, path in files.items():
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(prefix):
                target = node.module[len(prefix):]
                deps.update([target] if target in files else ["%s.%s" % (target, a.name) for a in node.names])
        graph[name] = sorted(d for d in deps if d in files)
    assert sum(len(d) for d in graph.values()) > len(files), "the import graph was not read"
    cycles, done = [], set()

    def visit(node, path):
        for dep in graph[node]:
            if dep in path:
                cycles.append(path[path.index(dep):] + [dep])
            elif dep not in done:
                visit(dep, path + [dep])
        done.add(node)

    for name in sorted(graph):
        if name not in done:
            visit(name, [name])
    assert cycles == []
