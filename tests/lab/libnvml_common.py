"""What the tests of gpusim's libnvidia-ml.so.1 (lab/gpusim/libnvml, issue 42) share: the build and kernel-view
scripts loaded by path, the skip when the library cannot be built, and the environment of a process on the library."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GPUSIM = REPO / "lab" / "gpusim"


def load(name, path):
    """The lab script at ``path`` as module ``name``, with sys.path as it was afterwards: the scripts put lab/gpusim
    first on it, where lab/gpusim/pynvml.py would shadow the installed nvidia-ml-py for every later test of this
    worker (tests/lab/test_gpusim_api.py checks that it does not)."""
    if name in sys.modules:
        return sys.modules[name]
    saved = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
        return module
    finally:
        sys.path[:] = saved


libnvml_build = load("gpusim_libnvml_build", GPUSIM / "libnvml" / "build.py")
kernel_view = load("gpusim_libnvml_kernel_view", GPUSIM / "libnvml" / "kernel_view.py")

NEEDS_BUILD = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("go") is None,
                                 reason="the library build needs gcc and go (nvml.h from the Go module proxy)")


def clean_env():
    """This process's environment without what selects a binding, a library or a state."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "GPUSIM_STATE", "GPUSIM_HOME", "GPUSIM_TRACE")}


def lib_env(libdir, state_path):
    """A process whose ``import pynvml`` is nvidia-ml-py on the library in ``libdir``, reading ``state_path``."""
    return dict(clean_env(), LD_LIBRARY_PATH=libdir, GPUSIM_HOME=str(GPUSIM), GPUSIM_STATE=str(state_path))
