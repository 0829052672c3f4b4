"""gpusim for the stand-ins' own tests: its Python package (rules, state, control) loaded by path, and the REAL
nvidia-ml-py over gpusim's libnvidia-ml.so.1 (tests/helpers/gpusim_nvml.py), so every NVML call a test makes goes
through NVIDIA's binding and the C ABI as on a real host."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from gpusim_nvml import real_binding  # pylint: disable=import-error  # tests/helpers, on sys.path via tests/conftest.py

LAB = Path(__file__).resolve().parents[2] / "lab" / "gpusim"


def load_gpusim():
    """nvidia-ml-py on the library build of gpusim's default driver, one instance per process, under the name
    gpusim_binding (so a test's own ``import pynvml`` stays untouched); gpusim's package is importable as ``gpusim``."""
    if "gpusim" not in sys.modules:
        spec = importlib.util.spec_from_file_location("gpusim", LAB / "gpusim" / "__init__.py",
                                                      submodule_search_locations=[str(LAB / "gpusim")])
        mod = importlib.util.module_from_spec(spec)
        sys.modules["gpusim"] = mod
        spec.loader.exec_module(mod)
    if "gpusim_binding" not in sys.modules:
        sys.modules["gpusim_binding"] = real_binding()
    return sys.modules["gpusim_binding"]
