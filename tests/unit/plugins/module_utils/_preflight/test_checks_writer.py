# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node_preflight_report action (controller-side report writer) and the preflight filters."""

from __future__ import annotations

import json
import os
from unittest import mock

import pytest
from ansible.errors import AnsibleActionFail, AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.action.node_preflight_report import ActionModule
from ansible_collections.gpuops.provision.plugins.filter import preflight as F
from collection_filters import every  # pylint: disable=import-error
from ansible_collections.gpuops.provision.plugins.plugin_utils._role_filters import preflight as RF
from ansible_collections.gpuops.provision.plugins.module_utils._preflight import checks as P


def action(args, check_mode=False):
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = check_mode
    return ActionModule(task, mock.MagicMock(), mock.MagicMock(), loader=None, templar=None, shared_loader_obj=None)


def reports():
    good = P.evaluate("node-a", {"cmdline": "ro iommu=pt"}, {"checks": ["kernel_args"], "kernel_args": ["iommu=pt"]})
    bad = P.evaluate("node-b", {"cmdline": "ro"}, {"checks": ["kernel_args"], "kernel_args": ["iommu=pt"]})
    return [good, bad]


def test_writes_once_then_is_idempotent_and_check_mode_writes_nothing(tmp_path):
    args = {"reports": reports(), "report_dir": str(tmp_path / "r"), "junit_file": str(tmp_path / "r" / "junit.xml")}
    dry = action(args, check_mode=True).run(task_vars={})
    assert dry["changed"] and not os.path.exists(tmp_path / "r")
    first = action(args).run(task_vars={})
    assert first["changed"] and sorted(os.listdir(tmp_path / "r")) == ["junit.xml", "node-a.json", "node-b.json"]
    assert json.loads((tmp_path / "r" / "node-b.json").read_text())["failed_checks"] == ["kernel_args"]
    assert "iommu=pt missing" in (tmp_path / "r" / "junit.xml").read_text()
    assert first["summary"]["ready"] == ["node-a"] and first["summary"]["not_ready"] == ["node-b"]
    second = action(args).run(task_vars={})
    assert not second["changed"] and second["written"] == []


def test_rejects_bad_input(tmp_path):
    with pytest.raises(AnsibleActionFail):
        action({"reports": [{"x": 1}], "report_dir": str(tmp_path)}).run(task_vars={})
    bad = reports()
    bad[0]["node"] = "../escape"
    with pytest.raises(AnsibleActionFail):
        action({"reports": bad, "report_dir": str(tmp_path)}).run(task_vars={})


def test_filters():
    hv = {"node-a": {"node_preflight_report": reports()[0]}, "node-c": {}}
    got = F.preflight_reports(hv, ["node-a", "node-c", "node-d"])
    assert [r["node"] for r in got] == ["node-a", "node-c", "node-d"]
    assert got[1]["failed_checks"] == ["facts"] and got[2]["verdict"] == "fail"
    assert F.preflight_summary(got)["not_ready"] == ["node-c", "node-d"]
    assert F.preflight_junit(got).startswith("<?xml")
    assert every()["preflight_not_ready_message"](got[1], "node-c") == (
        "node-c is NOT READY: facts failed.  [facts] no preflight report: gathering facts failed or the host was unreachable"
        " -- remedy: make the node reachable and rerun the preflight ")
    with pytest.raises(AnsibleFilterError, match="unknown check"):
        RF.preflight_report({}, "n", {"checks": ["bogus"]})
