# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_info's health readings (gpus[].health) of a healthy, busy GPU, for the tests of the checks that judge them."""

from __future__ import annotations

import copy

# PCIe generation and temperature thresholds as NVML reports them on an A100-SXM4 (Gen4) and an H100 SXM5 (Gen5)
# (lab/gpusim/gpusim/health.py HEALTH_MODELS).
_BOARDS = {"a100": {"gen": 4, "shutdown": 92, "gpu_max": 85}, "h100": {"gen": 5, "shutdown": 95, "gpu_max": 87}}


def healthy(board="a100"):
    """A fresh copy of the readings (a test changes its copy)."""
    b = _BOARDS[board]
    return copy.deepcopy({
        "persistence_mode": {"enabled": True, "error": None},
        "ecc": {"enabled": True, "pending": True, "error": None, "volatile_uncorrected": 0, "aggregate_uncorrected": 0,
                "volatile_corrected": 0, "aggregate_corrected": 0},
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False, "error": None},
        "retired_pages": {"pending": None, "error": "NVML_ERROR_NOT_SUPPORTED"},
        "pcie": {"gen": b["gen"], "width": 16, "max_gen": b["gen"], "max_width": 16, "gpu_max_gen": b["gen"]},
        "temperature": {"current": 40, "slowdown": 89, "shutdown": b["shutdown"], "gpu_max": b["gpu_max"]},
        "clock_event_reasons": {"mask": 0, "active": [], "error": None},
        "xid": [],
    })
