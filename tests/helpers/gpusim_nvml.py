"""Make ``import pynvml`` answer from the lab's simulated GPUs (lab/gpusim) inside a test, with its own state file.

``import pynvml`` is the REAL nvidia-ml-py (site-packages) on gpusim's libnvidia-ml.so.1 (lab/gpusim/libnvml), the
build whose exports are the state's driver's (gpusim/symbols.py), so a symbol that driver lacks is missing as on a
real host (issue 42: there is no Python stand-in of the binding any more).
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import json
import os
import sys

GPUSIM = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "lab", "gpusim")


def use_gpusim(monkeypatch, tmp_path, state):
    """Write ``state`` to a temp GPUSIM_STATE file and make ``import pynvml`` the real binding on the library; returns the file."""
    path = tmp_path / "gpusim.json"
    path.write_text(json.dumps(state))
    monkeypatch.setenv("GPUSIM_STATE", str(path))
    monkeypatch.syspath_prepend(GPUSIM)  # gpusim's package (control, below)
    monkeypatch.setitem(sys.modules, "pynvml", real_binding(state))
    # The host GPU clients the module reads from /proc (nvml.host_gpu_clients) come from the same state: gpusim
    # writes what /proc would show of its `host_clients` (none unless the state names some).
    from gpusim import control  # pylint: disable=import-error,import-outside-toplevel
    from ansible_collections.gpuops.provision.plugins.module_utils._gpu import nvml  # pylint: disable=import-outside-toplevel
    proc = tmp_path / "proc"
    control.proc_tree(str(proc), str(path))
    monkeypatch.setattr(nvml, "PROC_ROOT", str(proc))
    return path


_LIBS = {}


def _library(state):
    """The CDLL of gpusim's libnvidia-ml.so.1 with the exports of the state's driver, less its ``missing_symbols``
    (one per build, for the life of the process)."""
    path = os.path.join(_build().ensure_for_state(state), "libnvidia-ml.so.1")
    if path not in _LIBS:
        # by path: each build is its own object (the same soname), so one process holds several side by side
        _LIBS[path] = ctypes.CDLL(path)
    return _LIBS[path]


def _build():
    """lab/gpusim/libnvml/build.py, loaded once."""
    return load_lab_script("gpusim_libnvml_build", os.path.join(GPUSIM, "libnvml", "build.py"))


def load_lab_script(name, path):
    """The lab script at ``path`` as module ``name`` (once per process), with sys.path as it was afterwards (the lab
    scripts put lab/gpusim first on it, which a test did not ask for)."""
    if name not in sys.modules:
        saved = list(sys.path)
        try:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[name] = module
        finally:
            sys.path[:] = saved
    return sys.modules[name]


def real_binding(state=None):
    """A fresh instance of nvidia-ml-py's pynvml (site-packages) whose ``nvmlLib`` is the library build of ``state``'s
    driver: its own library handle, init refcount and function-pointer cache (nvmlInit finds nvmlLib set and keeps
    it). While it loads it is sys.modules["pynvml"] (the binding looks itself up there); whatever was there before
    is put back, so the caller decides where it lives."""
    spec = importlib.machinery.PathFinder.find_spec("pynvml")
    if spec is None or "site-packages" not in (spec.origin or ""):
        raise RuntimeError("the tests need nvidia-ml-py installed (found %r)" % (spec and spec.origin))
    mod = importlib.util.module_from_spec(spec)
    saved = sys.modules.get("pynvml")
    sys.modules["pynvml"] = mod
    try:
        spec.loader.exec_module(mod)
    finally:
        if saved is not None:
            sys.modules["pynvml"] = saved
        else:
            del sys.modules["pynvml"]
    mod.nvmlLib = _library(state or {})
    return mod


def library_env(state_path, state=None):
    """The environment of a process (an Ansible module, a playbook's node) whose ``import pynvml`` is the installed
    nvidia-ml-py over gpusim's libnvidia-ml.so.1: LD_LIBRARY_PATH to the build with the exports of the state's driver
    (less its ``missing_symbols``), GPUSIM_STATE to the state. ``state``: its content, when the file is written later
    (neither: gpusim's default driver)."""
    if state is None and os.path.exists(state_path):
        with open(state_path, encoding="utf-8") as fh:
            state = json.load(fh)
    return {"LD_LIBRARY_PATH": _build().ensure_for_state(state or {}), "GPUSIM_STATE": str(state_path)}
