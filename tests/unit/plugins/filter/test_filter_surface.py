# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The public filter surface (issue 41 point 8): the filters a user's playbook calls, each documented with an example;
the roles' own computations behind the one ``gpuops.provision.internal`` entry, every name the roles call registered
and every registered name called."""

from __future__ import annotations

import glob
import os
import re

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.filter import internal
from collection_filters import ROOT, public, role_internal  # pylint: disable=import-error

# What a platform team's playbook calls: fleet drift and driver versions, preflight reports for CI, the node
# registration merge for their own templates, the roll and health summaries, the report model.
PUBLIC = sorted([
    "driver_branch", "driver_drift", "driver_drift_table", "driver_version_compare", "driver_version_select",
    "driver_vgpu_compat", "gpu_health_plan", "internal", "mig_roll_summary", "preflight_join_config", "preflight_junit",
    "preflight_register_with_taints", "preflight_reports", "preflight_summary", "report_model",
])
CALL = re.compile(r"gpuops\.provision\.internal\(\s*'([a-z0-9_]+)'")
SOURCES = ("roles", "playbooks")


def _docs():
    return {os.path.basename(p)[:-4]: p for p in glob.glob(os.path.join(ROOT, "plugins", "filter", "*.yml"))}


def _internal_calls():
    seen = {}
    for top in SOURCES:
        for path in glob.glob(os.path.join(ROOT, top, "**", "*"), recursive=True):
            if os.path.isfile(path) and path.endswith((".yml", ".yaml", ".j2")):
                with open(path, encoding="utf-8") as fh:
                    for name in CALL.findall(fh.read()):
                        seen.setdefault(name, os.path.relpath(path, ROOT))
    return seen


def test_the_public_filters_are_the_user_facing_ones_each_documented_with_an_example():
    assert sorted(public()) == PUBLIC
    docs = _docs()
    assert sorted(docs) == PUBLIC  # no documentation left for a filter that is gone, none missing
    for name, path in docs.items():
        with open(path, encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
        assert doc["DOCUMENTATION"]["name"] == name and doc["DOCUMENTATION"]["short_description"], path
        assert "gpuops.provision." + name in doc["EXAMPLES"], path
        assert doc["RETURN"]["_value"]["description"], path


def test_no_role_internal_name_is_public_too():
    assert not set(role_internal()) & set(public())


def test_every_name_the_roles_call_is_registered_and_every_registered_name_is_called():
    calls = _internal_calls()
    registered = set(role_internal())
    assert {n: p for n, p in calls.items() if n not in registered} == {}
    assert sorted(registered - set(calls)) == []


def test_roles_call_no_role_internal_name_as_a_public_filter():
    # A bare gpuops.provision.<internal name> in a role would fail at run time: ansible-core finds no such filter.
    bare = re.compile(r"\|\s*gpuops\.provision\.(%s)\b" % "|".join(sorted(role_internal(), key=len, reverse=True)))
    found = []
    for top in SOURCES:
        for path in glob.glob(os.path.join(ROOT, top, "**", "*.y*ml"), recursive=True):
            with open(path, encoding="utf-8") as fh:
                found += ["%s: %s" % (os.path.relpath(path, ROOT), m) for m in bare.findall(fh.read())]
    assert found == []


def test_internal_dispatches_by_name_and_refuses_an_unknown_one():
    assert internal.internal("535.261.03-1", "driver_apt_pin") == "535.261.03-*"
    assert internal.internal({}, "preflight_needs") == role_internal()["preflight_needs"]({})
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.provision\.internal: no role-internal filter 'driver_drift'"):
        internal.internal({}, "driver_drift")
