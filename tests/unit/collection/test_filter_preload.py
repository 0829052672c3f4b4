# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every playbook's first play and every role entry point's first task load the collection's filters in the
controller's own process, through their name (plugins/plugin_utils/_role_filters/__init__.py ``preload``): the
workers forked for later tasks inherit them instead of compiling them anew, 0.4 s of CPU a task
(bench/filter_preload prints the figures)."""

from __future__ import annotations

import glob
import os

import pytest
import yaml

from ansible_collections.gpuops.provision.plugins.filter import internal

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


class _Loader(yaml.SafeLoader):  # pylint: disable=too-many-ancestors
    pass


_Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def _load(path):
    with open(path, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=_Loader)  # nosec B506: SafeLoader with one tag added


def _first_task_name(tasks):
    for task in tasks or []:
        if "block" in task:
            found = _first_task_name(task["block"])
            if found is not None:
                return found
        elif "name" in task:
            return task["name"]
    return None


def _entry_points():
    for spec in sorted(glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml"))):
        role_dir = os.path.dirname(os.path.dirname(spec))
        for entry in _load(spec)["argument_specs"]:
            yield os.path.relpath(os.path.join(role_dir, "tasks", entry + ".yml"), ROOT)


PLAYBOOKS = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "playbooks", "*.yml")))


@pytest.mark.parametrize("path", PLAYBOOKS)
def test_the_first_play_of_each_playbook_loads_the_collections_filters_in_its_name(path):
    assert "gpuops.provision.internal(" in _load(os.path.join(ROOT, path))[0]["name"]


@pytest.mark.parametrize("path", list(_entry_points()))
def test_the_first_task_of_each_role_entry_point_loads_the_collections_filters_in_its_name(path):
    name = _first_task_name(_load(os.path.join(ROOT, path)))
    assert name is not None and "gpuops.provision.internal(" in name, (path, name)


def test_preload_leaves_the_name_as_it_is():
    assert internal.internal("", "preload") == ""
    assert internal.internal("node-1", "preload") == "node-1"
