"""gpusim state file: deterministic fill-in, persistence across processes, locking, driver
states and fault injection."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from gpusim_loader import LAB, load_gpusim  # pylint: disable=import-error  # on sys.path via conftest.py
from gpusim_nvml import library_env  # pylint: disable=import-error  # tests/helpers, on sys.path via tests/conftest.py
from libnvml_common import clean_env, refusal  # pylint: disable=import-error


A100 = "NVIDIA A100-SXM4-40GB"


def nvml_env(state_path):
    """A process whose ``import pynvml`` is nvidia-ml-py over gpusim's library on ``state_path`` (the lab setup)."""
    return dict(clean_env(), **library_env(state_path))


def child(state_path, code):
    """Run `code` in a fresh interpreter on gpusim's library (nvidia-ml-py as ``nv``, initialised)."""
    res = subprocess.run([sys.executable, "-c", "import pynvml as nv\nnv.nvmlInit()\n" + code], env=nvml_env(state_path),
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_minimal_state_filled_in_deterministically(sim):
    nv = sim.start({"gpus": [{"model": A100, "mig_mode": "enabled"}, {"model": "NVIDIA H100 80GB HBM3"}]})
    uuids = [nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i)) for i in range(2)]
    buses = [nv.nvmlDeviceGetPciInfo(nv.nvmlDeviceGetHandleByIndex(i)).busId for i in range(2)]
    assert buses == ["00000000:17:00.0", "00000000:31:00.0"]
    assert len(set(uuids)) == 2 and all(u.startswith("GPU-") and len(u) == 40 for u in uuids)
    assert nv.nvmlSystemGetDriverVersion() == "550.163.01"
    assert nv.nvmlDeviceGetMemoryInfo(nv.nvmlDeviceGetHandleByIndex(0)).total == 40537 * 1024 * 1024
    # the same minimal state in another process gives the same identities
    out = child(sim.path, "print([nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i)) for i in range(2)])")
    assert out.strip() == str(uuids)


def test_explicit_values_win(sim):
    nv = sim.start({"driver_version": "535.247.01", "gpus": [
        {"model": A100, "uuid": "GPU-11111111-2222-3333-4444-555555555555", "pci_bus_id": "00000000:CA:00.0"}]})
    dev = nv.nvmlDeviceGetHandleByPciBusId("0000:ca:00.0")
    assert nv.nvmlDeviceGetUUID(dev) == "GPU-11111111-2222-3333-4444-555555555555"
    assert nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByUUID("GPU-11111111-2222-3333-4444-555555555555")) \
        == "GPU-11111111-2222-3333-4444-555555555555"
    assert nv.nvmlSystemGetDriverVersion() == "535.247.01"
    assert nv.nvmlSystemGetCudaDriverVersion() == 12020
    with pytest.raises(nv.NVMLError_NotFound):
        nv.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
    with pytest.raises(nv.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetHandleByIndex(1)


def test_persistence_across_processes(sim):
    nv = sim.start({"gpus": [{"model": A100, "mig_mode": "enabled"}]})
    child(sim.path, "nv.nvmlDeviceCreateGpuInstance(nv.nvmlDeviceGetHandleByIndex(0), 9)")
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    gi = nv.nvmlDeviceGetGpuInstanceById(dev, 2)  # created by the child at 4:4
    assert nv.nvmlGpuInstanceGetInfo(gi).placement.start == 4
    nv.nvmlDeviceCreateGpuInstance(dev, 9)
    out = child(sim.path, "print(nv.nvmlDeviceGetGpuInstanceRemainingCapacity(nv.nvmlDeviceGetHandleByIndex(0), 9))")
    assert out.strip() == "0"


def test_concurrent_processes_do_not_lose_updates(sim):
    sim.path.write_text(json.dumps({"gpus": [{"model": A100, "mig_mode": "enabled"}]}))
    env = nvml_env(sim.path)
    # Each process creates and destroys a 1g GI 25 times; without the lock, read-modify-write
    # cycles interleave and attempts (counters) or instances get lost.
    code = ("import pynvml as nv\nnv.nvmlInit()\ndev = nv.nvmlDeviceGetHandleByIndex(0)\n"
            "for _i in range(25):\n    nv.nvmlGpuInstanceDestroy(nv.nvmlDeviceCreateGpuInstance(dev, 19))\n")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env) for _i in range(3)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    st = sim.state()
    assert st["counters"] == {"gi_create": 75, "gi_destroy": 75}
    assert st["gpus"][0]["gpu_instances"] == []


def test_driver_not_loaded_and_no_library(sim, monkeypatch):
    nv = load_gpusim()
    sim.path.write_text(json.dumps({"driver_loaded": False, "gpus": [{"model": A100}]}))
    with pytest.raises(nv.NVMLError_DriverNotLoaded):
        nv.nvmlInit()
    sim.path.write_text(json.dumps({"library_present": False, "gpus": []}))
    with pytest.raises(nv.NVMLError_LibraryNotFound):
        nv.nvmlInit()
    monkeypatch.setenv("GPUSIM_STATE", str(sim.path) + ".missing")
    with pytest.raises(nv.NVMLError_LibraryNotFound):
        nv.nvmlInit()
    monkeypatch.delenv("GPUSIM_STATE")
    with pytest.raises(nv.NVMLError_LibraryNotFound):
        nv.nvmlInit()


def test_uninitialized_and_refcount(sim):
    nv = load_gpusim()
    with pytest.raises(nv.NVMLError_Uninitialized):
        nv.nvmlDeviceGetCount()
    sim.start({"gpus": [{"model": A100}]})
    nv.nvmlInit()
    nv.nvmlShutdown()
    assert nv.nvmlDeviceGetCount() == 1
    nv.nvmlShutdown()
    with pytest.raises(nv.NVMLError_Uninitialized):
        nv.nvmlDeviceGetCount()
    with pytest.raises(nv.NVMLError_Uninitialized):
        nv.nvmlShutdown()


def test_invalid_state_is_reported(sim, monkeypatch, capfd):
    nv = load_gpusim()
    sim.path.write_text(json.dumps({"gpus": [{"model": "NVIDIA B300"}]}))
    monkeypatch.setenv("GPUSIM_TRACE", "1")
    with pytest.raises(nv.NVMLError_Unknown):
        nv.nvmlInit()
    assert "NVIDIA B300" in refusal(capfd.readouterr().err, "nvmlInitWithFlags")[1]


def test_fault_nth_gi_create_fails_with_chosen_error(sim):
    nv = sim.start({"faults": {"fail_gi_create_after": 2, "fail_gi_create_error": "INSUFFICIENT_RESOURCES",
                               "fail_gi_create_times": 1},
                    "gpus": [{"model": A100, "mig_mode": "enabled"}]})
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    nv.nvmlDeviceCreateGpuInstance(dev, 19)
    nv.nvmlDeviceCreateGpuInstance(dev, 19)
    with pytest.raises(nv.NVMLError_InsufficientResources):
        nv.nvmlDeviceCreateGpuInstance(dev, 19)
    st = sim.state()
    assert len(st["gpus"][0]["gpu_instances"]) == 2 and st["counters"]["gi_create"] == 3
    nv.nvmlDeviceCreateGpuInstance(dev, 19)  # times=1: only the third attempt failed
    assert len(sim.state()["gpus"][0]["gpu_instances"]) == 3


def test_fault_default_error_persists_for_later_calls(sim):
    nv = sim.start({"faults": {"fail_ci_create_after": 0}, "gpus": [{"model": A100, "mig_mode": "enabled"}]})
    gi = nv.nvmlDeviceCreateGpuInstance(nv.nvmlDeviceGetHandleByIndex(0), 0)
    for _attempt in range(2):
        with pytest.raises(nv.NVMLError_Unknown):
            nv.nvmlGpuInstanceCreateComputeInstance(gi, 4)
    assert sim.state()["gpus"][0]["gpu_instances"][0]["compute_instances"] == []


def test_fault_on_set_mig_mode(sim):
    nv = sim.start({"faults": {"fail_set_mig_mode_after": 0, "fail_set_mig_mode_error": "NVML_ERROR_IN_USE"},
                    "gpus": [{"model": "NVIDIA H200"}]})
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(nv.NVMLError_InUse):
        nv.nvmlDeviceSetMigMode(dev, 1)
    assert nv.nvmlDeviceGetMigMode(dev) == [0, 0]


def test_cli_reset_commits_pending_mode(sim):
    nv = sim.start({"gpus": [{"model": "NVIDIA A30"}]})
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    nv.nvmlDeviceSetMigMode(dev, 1)
    env = dict(os.environ, PYTHONPATH=str(LAB))
    res = subprocess.run([sys.executable, "-m", "gpusim", "--state", str(sim.path), "reset", "-i", "0"],
                         env=env, capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert nv.nvmlDeviceGetMigMode(dev) == [1, 1]
    sim.path.write_text(json.dumps(dict(sim.state(), gpus=[dict(sim.state()["gpus"][0], reset_supported=False)])))
    res = subprocess.run([sys.executable, "-m", "gpusim", "--state", str(sim.path), "reset"],
                         env=env, capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 1 and "reboot" in res.stdout


def test_failed_attempts_count_towards_faults(sim):
    nv = sim.start({"faults": {"fail_gi_create_after": 2}, "gpus": [{"model": A100, "mig_mode": "enabled"}]})
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    gi = nv.nvmlDeviceCreateGpuInstance(dev, 0)            # attempt 1
    with pytest.raises(nv.NVMLError_InsufficientResources):
        nv.nvmlDeviceCreateGpuInstance(dev, 0)             # attempt 2: GPU full
    assert sim.state()["counters"]["gi_create"] == 2
    nv.nvmlGpuInstanceDestroy(gi)
    with pytest.raises(nv.NVMLError_Unknown):
        nv.nvmlDeviceCreateGpuInstance(dev, 0)             # attempt 3: injected
    assert sim.state()["gpus"][0]["gpu_instances"] == []


@pytest.mark.parametrize("gpu, why", [
    ({"model": A100, "mig_mode": "disabled", "gpu_instances": [{"profile_id": 0}]}, "need MIG mode enabled"),
    ({"model": A100, "mig_mode": "enabled", "gpu_instances": [{"profile_id": 9, "start": 0}, {"profile_id": 5}]}, "overlaps"),
    ({"model": A100, "mig_mode": "enabled", "gpu_instances": [{"profile_id": 9, "start": 2}]}, "not a placement"),
])
def test_impossible_seeded_geometry_is_rejected(sim, gpu, why, monkeypatch, capfd):
    nv = load_gpusim()
    sim.path.write_text(json.dumps({"gpus": [gpu]}))
    monkeypatch.setenv("GPUSIM_TRACE", "1")
    with pytest.raises(nv.NVMLError_Unknown):
        nv.nvmlInit()
    assert why in refusal(capfd.readouterr().err, "nvmlInitWithFlags")[1]


def test_cli_hold_blocks_mig_changes_until_sigterm(sim):
    """`python -m gpusim hold` is the lab's DCGM-like GPU client unit: while it runs, GPU instances cannot be
    destroyed nor the GPU reset; SIGTERM (systemctl stop) lets go of the GPU."""
    nv = sim.start({"gpus": [{"model": A100, "mig_mode": "enabled",
                              "gpu_instances": [{"profile_id": 9, "start": 0}]}]})
    env = dict(os.environ, PYTHONPATH=str(LAB))
    proc = subprocess.Popen([sys.executable, "-m", "gpusim", "--state", str(sim.path), "hold"], env=env)
    try:
        for dummy in range(200):
            if sim.state()["gpus"][0].get("processes"):
                break
            time.sleep(0.05)
        assert [p["pid"] for p in sim.state()["gpus"][0]["processes"]] == [proc.pid]
        dev = nv.nvmlDeviceGetHandleByIndex(0)
        gi = nv.nvmlDeviceGetGpuInstanceById(dev, sim.state()["gpus"][0]["gpu_instances"][0]["id"])
        with pytest.raises(nv.NVMLError_InUse):
            nv.nvmlGpuInstanceDestroy(gi)
        with pytest.raises(nv.NVMLError_InUse):
            nv.nvmlDeviceSetMigMode(dev, 0)
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    assert sim.state()["gpus"][0]["processes"] == []
    nv.nvmlGpuInstanceDestroy(gi)
