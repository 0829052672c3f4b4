# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_info's compute_capability (the gpu_pools plan checks that MPS pools have Volta or later), against gpusim."""

from __future__ import annotations

import sys

from ansible_collections.gpuops.provision.plugins.modules import gpu_info

from gpusim_nvml import use_gpusim  # pylint: disable=import-error


def test_compute_capability_per_gpu(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": "NVIDIA H100 80GB HBM3"}, {"model": "NVIDIA L40S"}]})
    res = run_module(gpu_info, {"profiles": False, "health": False, "kernel_log": "none"})
    assert [g["compute_capability"] for g in res["gpus"]] == ["9.0", "8.9"]


def test_compute_capability_is_null_where_nvml_has_no_answer(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": "NVIDIA L40S"}]})
    monkeypatch.delattr(sys.modules["pynvml"], "nvmlDeviceGetCudaComputeCapability")
    res = run_module(gpu_info, {"profiles": False, "health": False, "kernel_log": "none"})
    assert res["gpus"][0]["compute_capability"] is None and res["gpus"][0]["model"] == "NVIDIA L40S"
