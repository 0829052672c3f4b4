"""Make ``import pynvml`` return the lab's NVML stand-in (lab/gpusim) inside a test, with its own state file."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

GPUSIM = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "lab", "gpusim")


def use_gpusim(monkeypatch, tmp_path, state):
    """Write ``state`` to a temp GPUSIM_STATE file and make ``import pynvml`` return gpusim; returns the file."""
    path = tmp_path / "gpusim.json"
    path.write_text(json.dumps(state))
    monkeypatch.setenv("GPUSIM_STATE", str(path))
    monkeypatch.syspath_prepend(GPUSIM)
    spec = importlib.util.spec_from_file_location("pynvml", os.path.join(GPUSIM, "pynvml.py"))
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    spec.loader.exec_module(mod)
    # The host GPU clients the module reads from /proc (_nvml.host_gpu_clients) come from the same state: gpusim
    # writes what /proc would show of its `host_clients` (none unless the state names some).
    from gpusim import control  # pylint: disable=import-error,import-outside-toplevel
    from ansible_collections.gpuops.provision.plugins.module_utils import _nvml  # pylint: disable=import-outside-toplevel
    proc = tmp_path / "proc"
    control.proc_tree(str(proc), str(path))
    monkeypatch.setattr(_nvml, "PROC_ROOT", str(proc))
    return path
