# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vGPU scheduler reader of the NVML adapter (gpu_nvml.Nvml.vgpu_scheduler) against gpusim in-process, and the
pure policy code's reading of what it returns (_gpu.vgpu_scheduler.spec_of_nvml / matches)."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._gpu import nvml as gpu_nvml
from ansible_collections.gpuops.provision.plugins.module_utils._gpu import vgpu_scheduler as vs

from gpusim_nvml import use_gpusim  # pylint: disable=import-error

HOST = {"model": "NVIDIA L40S", "virtualization_mode": "host_vgpu", "vgpus_running": 1}


@pytest.fixture
def sim(monkeypatch, tmp_path):
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": []})

    def start(state):
        path.write_text(json.dumps(state))
        nvml = gpu_nvml.Nvml()
        assert nvml.open(), nvml.reason
        return nvml
    return start


def read(nvml, index=0):
    return nvml.vgpu_scheduler(nvml.device(index))


def test_bare_metal_gpu_is_not_supported_not_an_error(sim):
    nvml = sim({"gpus": [{"model": "NVIDIA L40S"}]})
    assert read(nvml) == {"supported": False, "error": "NVML_ERROR_NOT_SUPPORTED", "state": None, "capabilities": None}


@pytest.mark.parametrize("loaded,unit,spec,observed", [
    (0x11, "ns", {"policy": "fixed_share"}, dict(policy="fixed_share", arr=True, frequency_hz=480, averaging_factor=33)),
    (0x3C3C0011, "us", {"policy": "fixed_share", "frequency_hz": 960, "averaging_factor": 60},
     dict(policy="fixed_share", arr=True, frequency_hz=960, averaging_factor=60)),
    (0x00030003, "ns", {"policy": "equal_share", "timeslice_ms": 3}, dict(policy="equal_share", arr=False, timeslice_ms=3)),
    (0x00030003, "us", {"policy": "equal_share", "timeslice_ms": 3}, dict(policy="equal_share", arr=False, timeslice_ms=3)),
    (0x00030003, "ms", {"policy": "equal_share", "timeslice_ms": 3}, dict(policy="equal_share", arr=False, timeslice_ms=3)),
    (0x0, "ns", {"policy": "best_effort"}, dict(policy="best_effort")),
])
def test_reads_state_in_any_unit_and_matches_the_written_value(sim, loaded, unit, spec, observed):
    nvml = sim({"scheduler_timeslice_unit": unit, "gpus": [dict(HOST, rmpvmrl_loaded=loaded)]})
    out = read(nvml)
    assert out["supported"] is True and out["error"] is None
    running = vs.spec_of_nvml(out["state"])
    assert {k: running[k] for k in observed} == observed
    assert vs.matches(spec, running)
    assert vs.rmpvmrl(spec) == loaded


def test_capabilities(sim):
    nvml = sim({"gpus": [dict(HOST, vgpu_scheduler_policies=["best_effort", "equal_share"])]})
    caps = read(nvml)["capabilities"]
    assert caps == {"supported_policies": ["best_effort", "equal_share"], "min_timeslice": 1000000,
                    "max_timeslice": 30000000, "arr_supported": True, "min_frequency": 63, "max_frequency": 960,
                    "min_avg_factor": 1, "max_avg_factor": 60}
    assert vs.unsupported_reason({"policy": "fixed_share"}, caps).startswith("policy fixed_share is not supported")


def test_idle_gpu_reads_zero_and_still_matches_the_policy(sim):
    nvml = sim({"gpus": [dict(HOST, rmpvmrl_loaded=0x00030013, vgpus_running=0)]})
    running = vs.spec_of_nvml(read(nvml)["state"])
    assert running["timeslice_ms"] is None and running["policy"] == "fixed_share"
    assert vs.matches({"policy": "fixed_share", "timeslice_ms": 3}, running)
    assert not vs.matches({"policy": "equal_share", "timeslice_ms": 3}, running)


def test_older_nvidia_ml_py_without_the_functions(sim, monkeypatch):
    nvml = sim({"gpus": [HOST]})
    monkeypatch.delattr(nvml.nv, "nvmlDeviceGetVgpuSchedulerCapabilities")
    out = read(nvml)
    assert out["supported"] is True and out["capabilities"] is None
    assert out["capabilities_error"] == "NVML_ERROR_FUNCTION_NOT_FOUND"
    monkeypatch.delattr(nvml.nv, "nvmlDeviceGetVgpuSchedulerState")
    assert read(nvml)["error"] == "NVML_ERROR_FUNCTION_NOT_FOUND"


def test_lost_gpu_is_raised_not_reported(sim):
    nvml = sim({"gpus": [HOST]})
    device = nvml.device(0)
    st = json.loads(open(os.environ["GPUSIM_STATE"]).read())
    st["gpus"][0]["lost"] = True
    open(os.environ["GPUSIM_STATE"], "w").write(json.dumps(st))
    with pytest.raises(nvml.nv.NVMLError_GpuIsLost):
        nvml.vgpu_scheduler(device)
