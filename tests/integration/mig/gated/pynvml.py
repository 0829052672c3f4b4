# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpusim's pynvml (lab/gpusim) with a gate in front of GPU instance creation, for the lock tests only.

With GPUSIM_GATE=<file> set and that file present, nvmlDeviceCreateGpuInstanceWithPlacement creates <file>.entered
and waits until the test removes <file>. A run stopped there holds the per-host lock in the middle of its apply, so
"the first run is still applying" is a fact the test waits for, not a race against a timer. Everything else is
gpusim's, unchanged.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time

GPUSIM = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))), "lab", "gpusim")
sys.path.insert(0, GPUSIM)  # gpusim's pynvml imports the gpusim package
_SPEC = importlib.util.spec_from_file_location("_gpusim_pynvml", os.path.join(GPUSIM, "pynvml.py"))
_REAL = importlib.util.module_from_spec(_SPEC)
sys.modules["_gpusim_pynvml"] = _REAL  # it looks itself up while loading
_SPEC.loader.exec_module(_REAL)
globals().update((k, v) for k, v in vars(_REAL).items() if not k.startswith("__"))


def nvmlDeviceCreateGpuInstanceWithPlacement(device, profileId, placement):  # pylint: disable=invalid-name
    gate = os.environ.get("GPUSIM_GATE")
    if gate and os.path.exists(gate):
        with open(gate + ".entered", "w", encoding="utf-8") as fh:
            fh.write(str(os.getpid()))
        while os.path.exists(gate):
            time.sleep(0.01)
    return _REAL.nvmlDeviceCreateGpuInstanceWithPlacement(device, profileId, placement)
