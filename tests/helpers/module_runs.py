"""A collection module run in the test's process (tests/conftest.py ``run_module``: main() with its arguments as
ansible passes them), its result shaped as the controller gives a task: the integration tests of the Proxmox and
vSphere modules use it where ``ansible localhost -m`` cost about 1.5 s of CPU a call before the module ran."""

from __future__ import annotations

import importlib

MODULES = "ansible_collections.gpuops.provision.plugins.modules."


def run_as_task(run_module, name, params, check=False, diff=False):
    """Run gpuops.provision.<name> with ``params``, in check mode and with --diff as asked; return its result."""
    args = dict(params, _ansible_diff=True) if diff else dict(params)  # what --diff passes the module
    result = run_module(importlib.import_module(MODULES + name), args, check_mode=check)
    # As the controller gives it: a result without "changed" did not change; warnings as their texts (the module
    # sends ansible-core's warning summaries).
    result.setdefault("changed", False)
    if "warnings" in result:
        result["warnings"] = [w["event"]["msg"] if isinstance(w, dict) else w for w in result["warnings"]]
    return result
