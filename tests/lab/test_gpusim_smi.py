"""lab/gpusim/bin/nvidia-smi: the nvidia-smi subset the lab's roles run, backed by gpusim (NVML: nvidia-ml-py over
gpusim's libnvidia-ml.so.1, the build of the state's driver on LD_LIBRARY_PATH)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpusim_nvml import library_env  # pylint: disable=import-error  # tests/helpers, on sys.path via tests/conftest.py

SMI = Path(__file__).resolve().parents[2] / "lab" / "gpusim" / "bin" / "nvidia-smi"
A100 = "NVIDIA A100-SXM4-40GB"


def smi(state, *args):
    env = dict(os.environ, **library_env(state))
    env.pop("PYTHONPATH", None)
    return subprocess.run([sys.executable, str(SMI), *args], env=env, capture_output=True, text=True, timeout=60,
                          check=False)


def write(tmp_path, st):
    path = tmp_path / "gpusim.json"
    path.write_text(json.dumps(st))
    return path


def test_list_and_csv_query(tmp_path):
    path = write(tmp_path, {"gpus": [
        {"model": A100, "mig_mode": "enabled", "gpu_instances": [{"profile_id": 9, "start": 4, "compute_instances": [{}]}]},
        {"model": "NVIDIA L40S"}]})
    res = smi(path, "-L")
    lines = res.stdout.splitlines()
    assert res.returncode == 0
    assert lines[0].startswith("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-")
    assert lines[1].startswith("  MIG 3g.20gb     Device  0: (UUID: MIG-")
    assert lines[2].startswith("GPU 1: NVIDIA L40S (UUID: GPU-")
    res = smi(path, "--query-gpu=index,pci.bus_id,mig.mode.current,memory.total", "--format=csv,noheader,nounits")
    assert res.stdout.splitlines() == ["0, 00000000:17:00.0, Enabled, 40537", "1, 00000000:31:00.0, [N/A], 46068"]
    res = smi(path, "--query-gpu=name,bogus", "--format=csv")
    assert res.returncode == 2


def test_mig_enable_pending_then_gpu_reset(tmp_path):
    path = write(tmp_path, {"gpus": [{"model": A100, "mig_mode_self_reset": False}, {"model": "NVIDIA H100 80GB HBM3"}]})
    res = smi(path, "-i", "0", "-mig", "1")
    assert res.returncode == 0 and "pending enable state for GPU 00000000:17:00.0" in res.stdout
    q = smi(path, "-i", "0", "--query-gpu=mig.mode.current,mig.mode.pending", "--format=csv,noheader")
    assert q.stdout.strip() == "Disabled, Enabled"
    res = smi(path, "-r", "-i", "0")
    assert res.returncode == 0 and "GPU 00000000:17:00.0 was successfully reset." in res.stdout
    q = smi(path, "--query-gpu=mig.mode.current", "--format=csv,noheader")
    assert q.stdout.split() == ["Enabled", "Disabled"]
    res = smi(path, "-i", "1", "-mig", "1")  # Hopper: no warning, applied
    assert res.returncode == 0 and "pending" not in res.stdout


def test_mig_enable_on_a_busy_gpu_warns_in_use(tmp_path):
    """mig.md P1: "Warning: MIG mode is in pending enable state ... In use by another client"."""
    path = write(tmp_path, {"gpus": [{"model": A100, "processes": [{"pid": 9, "used_memory": 0}]}]})
    res = smi(path, "-i", "0", "-mig", "1")
    assert res.returncode == 0
    assert "pending enable state for GPU 00000000:17:00.0:In use by another client" in res.stdout


def test_reset_refusals_exit_codes(tmp_path):
    path = write(tmp_path, {"gpus": [{"model": A100, "processes": [{"pid": 1, "used_memory": 0}]},
                                     {"model": A100, "reset_supported": False}]})
    busy = smi(path, "-r", "-i", "0")
    assert busy.returncode == 255 and "GPU 00000000:17:00.0: In use by another client" in busy.stdout
    vm = smi(path, "--gpu-reset", "-i", "00000000:31:00.0")
    assert vm.returncode == 3 and "Not Supported" in vm.stdout


def test_query_license_and_driver_states(tmp_path):
    path = write(tmp_path, {"gpus": [{"model": A100, "virtualization_mode": "vgpu",
                                      "license": {"feature": "compute", "licensed": True, "expiry": "2027-05-27T00:08:28Z"}}]})
    out = smi(path, "-q").stdout
    assert "License Status                    : Licensed (Expiry: 2027-5-27 0:8:28 GMT)" in out
    assert "Virtualization Mode               : VGPU" in out and "Driver Version                            : 550.163.01" in out
    path.write_text(json.dumps({"driver_loaded": False, "gpus": [{"model": A100}]}))
    res = smi(path)
    assert res.returncode == 9 and "couldn't communicate with the NVIDIA driver" in res.stdout


def test_reset_by_bus_ids_is_one_request_and_nvidia_drm_refuses_it(tmp_path):
    """mig-parted nvmlResetAllGPUs: one `nvidia-smi -r -i <bus id>,<bus id>`; mig-parted#181: with nvidia_drm loaded
    "The following GPUs could not be reset: GPU ...: In use by another client", exit status 255."""
    gpus = [{"model": A100, "mig_mode": "disabled"}, {"model": A100, "mig_mode": "disabled"}]
    path = write(tmp_path, {"gpus": gpus, "host_clients": ["nvidia-persistenced"]})
    assert "pending enable state" in smi(path, "-mig", "1").stdout  # persistenced holds the GPUs
    res = smi(path, "-r", "-i", "00000000:17:00.0,00000000:31:00.0")
    assert res.returncode == 0 and res.stdout.count("was successfully reset") == 2
    assert json.loads(path.read_text())["reset_log"] == [["00000000:17:00.0", "00000000:31:00.0"]]
    path = write(tmp_path, {"gpus": gpus, "host_clients": ["nvidia_drm"]})
    smi(path, "-mig", "1")
    res = smi(path, "-r", "-i", "00000000:17:00.0,00000000:31:00.0")
    assert res.returncode == 255 and "GPU 00000000:31:00.0: In use by another client" in res.stdout
    q = smi(path, "--query-gpu=mig.mode.current,mig.mode.pending", "--format=csv,noheader")
    assert q.stdout.splitlines() == ["Disabled, Enabled"] * 2


def test_without_nvidia_ml_py_one_line_and_exit_255(tmp_path):
    """An interpreter without nvidia-ml-py: one line naming it, nvidia-smi's "other" exit status, no traceback."""
    path = write(tmp_path, {"gpus": [{"model": A100}]})
    env = dict(os.environ, **library_env(path))
    res = subprocess.run([sys.executable, "-I", "-S", str(SMI), "-L"], env=env, capture_output=True, text=True,
                         timeout=60, check=False)
    assert res.returncode == 255, res.stdout + res.stderr
    assert "nvidia-ml-py" in res.stdout and len(res.stdout.splitlines()) == 1 and res.stderr == ""
