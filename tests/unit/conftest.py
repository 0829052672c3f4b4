"""Shared unit-test fixtures."""

from __future__ import annotations

import json
import os
import sys

import pytest
from ansible.module_utils import _internal as ansible_internal, basic
from ansible.module_utils.common import warnings as ansible_warnings

# Helpers shared by the unit tests (gpusim_nvml) import from this folder.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def run_module(monkeypatch, capsys):
    """Run a module's main() with the given arguments and return its JSON result (exit_json or fail_json)."""

    def _run(module, args, check_mode=False):
        params = dict(args)
        if check_mode:
            params["_ansible_check_mode"] = True
        monkeypatch.setattr(basic, "_ANSIBLE_ARGS", None)  # AnsibleModule caches parsed arguments per process
        # Warnings and deprecations are process-wide and de-duplicated: each run starts with none, as a real one does.
        monkeypatch.setattr(ansible_warnings, "_global_warnings", {})
        monkeypatch.setattr(ansible_warnings, "_global_deprecations", {})
        # Once any controller code is imported (a filter test, say), module warnings go to the controller's display
        # instead of the result; a module run on a host never sees the controller.
        monkeypatch.setattr(ansible_internal, "is_controller", False)
        monkeypatch.setattr("sys.argv", [module.__name__, json.dumps({"ANSIBLE_MODULE_ARGS": params})])
        with pytest.raises(SystemExit):
            module.main()
        return json.loads(capsys.readouterr().out)

    return _run
