"""What the tests of gpusim's libnvidia-ml.so.1 (lab/gpusim/libnvml, issue 42) share: the build and kernel-view
scripts loaded by path, the skip when the library cannot be built, and the environment of a process on the library."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from gpusim_nvml import load_lab_script  # pylint: disable=import-error

REPO = Path(__file__).resolve().parents[2]
GPUSIM = REPO / "lab" / "gpusim"


# (lab/gpusim/pynvml.py must not shadow nvidia-ml-py for later tests of this worker: tests/lab/test_gpusim_api.py)
libnvml_build = load_lab_script("gpusim_libnvml_build", GPUSIM / "libnvml" / "build.py")
kernel_view = load_lab_script("gpusim_libnvml_kernel_view", GPUSIM / "libnvml" / "kernel_view.py")

NEEDS_BUILD = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("go") is None,
                                 reason="the library build needs gcc and go (nvml.h from the Go module proxy)")


def clean_env():
    """This process's environment without what selects a binding, a library or a state."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "GPUSIM_STATE", "GPUSIM_HOME", "GPUSIM_TRACE")}


def lib_env(libdir, state_path):
    """A process whose ``import pynvml`` is nvidia-ml-py on the library in ``libdir``, reading ``state_path``."""
    return dict(clean_env(), LD_LIBRARY_PATH=libdir, GPUSIM_HOME=str(GPUSIM), GPUSIM_STATE=str(state_path))
