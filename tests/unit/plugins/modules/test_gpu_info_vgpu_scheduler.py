# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_info's per-GPU vgpu_scheduler key against gpusim in-process."""

from __future__ import annotations

from ansible_collections.gpuops.provision.plugins.modules import gpu_info

from gpusim_nvml import use_gpusim  # pylint: disable=import-error


def test_vgpu_scheduler_per_gpu(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [
        {"model": "NVIDIA L40S", "virtualization_mode": "host_vgpu", "rmpvmrl_loaded": 0x11, "vgpus_running": 2},
        {"model": "NVIDIA L40S", "virtualization_mode": "host_vgpu", "rmpvmrl_loaded": 0x00030003, "vgpus_running": 1},
        {"model": "NVIDIA L40S"},
    ]})
    res = run_module(gpu_info, {"health": False, "kernel_log": "none", "profiles": False})
    fixed, equal, bare = (g["vgpu_scheduler"] for g in res["gpus"])
    assert fixed["supported"] is True
    assert fixed["state"] == {"scheduler_policy": 3, "arr_mode": 2, "timeslice": 2083333, "avg_factor": 33}
    assert fixed["running"]["policy"] == "fixed_share" and fixed["running"]["frequency_hz"] == 480
    assert fixed["description"] == "fixed_share (arr, 480 Hz, averaging factor 33)"
    assert fixed["capabilities"]["supported_policies"] == ["best_effort", "equal_share", "fixed_share"]
    assert equal["running"]["timeslice_ms"] == 3 and equal["description"] == "equal_share (3 ms)"
    assert bare == {"supported": False, "error": "NVML_ERROR_NOT_SUPPORTED", "state": None, "capabilities": None}
    assert not res.get("failed") and res["changed"] is False
