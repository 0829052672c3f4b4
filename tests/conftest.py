"""Make the repository importable as ``ansible_collections.gpuops.provision`` for pytest.

The repository root is the collection root; Python needs it under an ``ansible_collections/<ns>/<name>``
path. ``make`` creates the same link (build/collections); doing it here too lets a bare ``pytest`` work.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, "build", "collections")
LINK = os.path.join(COLLECTIONS, "ansible_collections", "gpuops", "provision")

if not os.path.lexists(LINK):
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    os.symlink(os.path.relpath(ROOT, os.path.dirname(LINK)), LINK)
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
os.environ.setdefault("ANSIBLE_COLLECTIONS_PATH", COLLECTIONS)
# mig_geometry's per-host lock (E(GPUOPS_MIG_LOCK)): one per test process, never this machine's /run, so that
# parallel workers and non-root runs do not meet there; tests that share a lock on purpose pass their own path.
os.environ.setdefault("GPUOPS_MIG_LOCK", os.path.join(tempfile.mkdtemp(prefix="gpuops-test-lock-"), "mig.lock"))

# Helpers shared by several test folders (gpusim_nvml: nvidia-ml-py over gpusim's libnvidia-ml.so.1).
HELPERS = os.path.join(ROOT, "tests", "helpers")
if HELPERS not in sys.path:
    sys.path.insert(0, HELPERS)


from ansible.module_utils import _internal as ansible_internal, basic  # noqa: E402  pylint: disable=wrong-import-position
from ansible.module_utils.common import warnings as ansible_warnings  # noqa: E402  pylint: disable=wrong-import-position


@pytest.hookimpl(trylast=True)  # after pytest's own reordering (fixtures.py reorder_items), which would undo it
def pytest_collection_modifyitems(items):
    """Tests marked ``long`` (a minute or more each) run first. pytest-xdist hands tests to its workers in
    collection order, so a long test collected late ran on one worker after the other had run out of tests. A
    stable sort: every other order stays, module fixtures' grouping included."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.fixture
def run_module(monkeypatch, capsys, tmp_path):
    """Run a module's main() in this process with the given arguments; return its JSON result (exit_json or
    fail_json). An exception that escapes main() propagates, as a module traceback would."""

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
        # As ansible does, the arguments go in a file (a long value on the command line would be taken for a path).
        args_file = tmp_path / "module_args.json"
        args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": params}), encoding="utf-8")
        monkeypatch.setattr("sys.argv", [module.__name__, str(args_file)])
        with pytest.raises(SystemExit):
            module.main()
        return json.loads(capsys.readouterr().out)

    return _run
