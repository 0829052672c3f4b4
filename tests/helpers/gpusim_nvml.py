"""Make ``import pynvml`` answer from the lab's simulated GPUs (lab/gpusim) inside a test, with its own state file.

Two bindings (issue 42 moves the suites from the first to the second):

* ``GPUSIM_BINDING`` unset or ``standin``: lab/gpusim/pynvml.py, the Python stand-in of nvidia-ml-py;
* ``GPUSIM_BINDING=library``: the REAL nvidia-ml-py (site-packages) on gpusim's libnvidia-ml.so.1
  (lab/gpusim/libnvml), the build whose exports are the state's driver's (gpusim/symbols.py), so a symbol that driver
  lacks is missing as on a real host. ``make units-nvml-library`` runs the NVML-backed tests this way.
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
    """Write ``state`` to a temp GPUSIM_STATE file and make ``import pynvml`` return gpusim; returns the file."""
    path = tmp_path / "gpusim.json"
    path.write_text(json.dumps(state))
    monkeypatch.setenv("GPUSIM_STATE", str(path))
    monkeypatch.syspath_prepend(GPUSIM)  # the stand-in imports gpusim's rules from there
    library = os.environ.get("GPUSIM_BINDING", "standin") == "library"
    if library:
        spec = _real_binding_spec()
    else:
        spec = importlib.util.spec_from_file_location("pynvml", os.path.join(GPUSIM, "pynvml.py"))
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "pynvml", mod)  # both look themselves up there while loading
    spec.loader.exec_module(mod)
    if library:
        # its own library handle, refcount and function-pointer cache: nvmlInit finds nvmlLib set and keeps it
        mod.nvmlLib = _library(state or {})
    # The host GPU clients the module reads from /proc (_nvml.host_gpu_clients) come from the same state: gpusim
    # writes what /proc would show of its `host_clients` (none unless the state names some).
    from gpusim import control  # pylint: disable=import-error,import-outside-toplevel
    from ansible_collections.gpuops.provision.plugins.module_utils import _nvml  # pylint: disable=import-outside-toplevel
    proc = tmp_path / "proc"
    control.proc_tree(str(proc), str(path))
    monkeypatch.setattr(_nvml, "PROC_ROOT", str(proc))
    return path


_LIBS = {}


def _library(state):
    """The CDLL of gpusim's libnvidia-ml.so.1 with the exports of the state's driver, less its ``missing_symbols``
    (one per build, for the life of the process)."""
    build = load_lab_script("gpusim_libnvml_build", os.path.join(GPUSIM, "libnvml", "build.py"))
    path = os.path.join(build.ensure(state.get("driver_version") or build.DEFAULT_DRIVER,
                                     state.get("missing_symbols") or ()), "libnvidia-ml.so.1")
    if path not in _LIBS:
        # by path: each build is its own object (the same soname), so one process holds several side by side
        _LIBS[path] = ctypes.CDLL(path)
    return _LIBS[path]


def load_lab_script(name, path):
    """The lab script at ``path`` as module ``name`` (once per process), with sys.path as it was afterwards: the lab
    scripts put lab/gpusim first on it, where lab/gpusim/pynvml.py would shadow the installed nvidia-ml-py."""
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


def _real_binding_spec():
    """nvidia-ml-py's pynvml from site-packages, never lab/gpusim's."""
    path = [p for p in sys.path if os.path.abspath(p or ".") != GPUSIM]
    spec = importlib.machinery.PathFinder.find_spec("pynvml", path)
    if spec is None or "site-packages" not in (spec.origin or ""):
        raise RuntimeError("GPUSIM_BINDING=library needs nvidia-ml-py installed (found %r)" % (spec and spec.origin))
    return spec


def library_env(state_path, state=None):
    """The environment of a process (an Ansible module, a playbook's node) whose ``import pynvml`` is the installed
    nvidia-ml-py over gpusim's libnvidia-ml.so.1: LD_LIBRARY_PATH to the build with the exports of the state's driver
    (less its ``missing_symbols``), GPUSIM_STATE to the state. ``state``: its content, when the file is written later
    (neither: gpusim's default driver)."""
    if state is None and os.path.exists(state_path):
        with open(state_path, encoding="utf-8") as fh:
            state = json.load(fh)
    state = state or {}
    build = load_lab_script("gpusim_libnvml_build", os.path.join(GPUSIM, "libnvml", "build.py"))
    libdir = build.ensure(state.get("driver_version") or build.DEFAULT_DRIVER, state.get("missing_symbols") or ())
    return {"LD_LIBRARY_PATH": libdir, "GPUSIM_STATE": str(state_path)}
