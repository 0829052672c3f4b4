"""Shared unit-test fixtures."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils import basic


@pytest.fixture
def run_module(monkeypatch, capsys):
    """Run a module's main() with the given arguments and return its JSON result (exit_json or fail_json)."""

    def _run(module, args, check_mode=False):
        params = dict(args)
        if check_mode:
            params["_ansible_check_mode"] = True
        monkeypatch.setattr(basic, "_ANSIBLE_ARGS", None)  # AnsibleModule caches parsed arguments per process
        monkeypatch.setattr("sys.argv", [module.__name__, json.dumps({"ANSIBLE_MODULE_ARGS": params})])
        with pytest.raises(SystemExit):
            module.main()
        return json.loads(capsys.readouterr().out)

    return _run
