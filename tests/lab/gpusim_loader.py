"""Load gpusim's pynvml by path, under its own name, so the real nvidia-ml-py stays importable in the same process."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

LAB = Path(__file__).resolve().parents[2] / "lab" / "gpusim"


def load_gpusim():
    """gpusim's pynvml under the name gpusim_pynvml, so the real pynvml stays importable."""
    if "gpusim" not in sys.modules:
        spec = importlib.util.spec_from_file_location("gpusim", LAB / "gpusim" / "__init__.py",
                                                      submodule_search_locations=[str(LAB / "gpusim")])
        mod = importlib.util.module_from_spec(spec)
        sys.modules["gpusim"] = mod
        spec.loader.exec_module(mod)
    if "gpusim_pynvml" not in sys.modules:
        spec = importlib.util.spec_from_file_location("gpusim_pynvml", LAB / "pynvml.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["gpusim_pynvml"] = mod
        spec.loader.exec_module(mod)
    return sys.modules["gpusim_pynvml"]
