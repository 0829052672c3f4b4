# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_info module against gpusim (lab/gpusim): nvidia-ml-py in-process over gpusim's libnvidia-ml.so.1."""

from __future__ import annotations

import os
import sys

import pytest

from ansible_collections.gpuops.provision.plugins.modules import gpu_info

from gpusim_nvml import use_gpusim  # pylint: disable=import-error


def test_missing_python_module_is_reported_not_raised(monkeypatch, run_module):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes the import fail
    res = run_module(gpu_info, {})
    assert not res.get("failed")
    assert res["nvml"]["available"] is False
    assert "nvidia-ml-py" in res["nvml"]["reason"]
    assert res["gpus"] == []


@pytest.mark.parametrize("state,reason", [
    ({"gpus": [], "driver_loaded": False}, "kernel driver is not loaded"),
    ({"gpus": [], "library_present": False}, "libnvidia-ml.so.1"),
])
def test_missing_driver_or_library(monkeypatch, tmp_path, run_module, state, reason):
    use_gpusim(monkeypatch, tmp_path, state)
    res = run_module(gpu_info, {})
    assert res["nvml"]["available"] is False
    assert reason in res["nvml"]["reason"]


def test_reports_gpus_geometry_processes_licence_and_sysfs(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {
        "driver_version": "550.163.01",
        "gpus": [
            {"model": "NVIDIA A100-SXM4-40GB", "mig_mode": "enabled",
             "gpu_instances": [{"profile_id": 9, "start": 4, "compute_instances": [{"slices": 1}, {"slices": 2}]},
                               {"profile_id": 14, "start": 0, "compute_instances": [{}]}],
             "processes": [{"pid": 4242, "used_memory": 1048576, "gpu_instance_id": 2, "compute_instance_id": 0}],
             "license": {"feature": "compute", "licensed": True, "expiry": "2030-01-02T03:04:05Z"}},
            {"model": "NVIDIA L40S", "virtualization_mode": "passthrough"},
        ],
    })
    root = tmp_path / "root"
    dev = root / "sys/bus/pci/devices/0000:17:00.0"
    dev.mkdir(parents=True)
    for name, value in (("vendor", "0x10de"), ("device", "0x20b0"), ("class", "0x030200")):
        (dev / name).write_text(value + "\n")
    (root / "sys/bus/pci/drivers/nvidia").mkdir(parents=True)
    (root / "sys/kernel/iommu_groups/42").mkdir(parents=True)
    os.symlink("../../../bus/pci/drivers/nvidia", str(dev / "driver"))
    os.symlink("../../../kernel/iommu_groups/42", str(dev / "iommu_group"))

    res = run_module(gpu_info, {"sysfs_root": str(root)})
    assert res["nvml"]["available"] is True
    assert res["nvml"]["driver_version"] == "550.163.01"
    assert res["nvml"]["calls"] > 0
    a100, l40s = res["gpus"]
    assert a100["model"] == "NVIDIA A100-SXM4-40GB"
    assert a100["pci_device_id"] == "0x20B010DE"
    assert a100["mig_mode"] == {"current": "enabled", "pending": "enabled"}
    assert a100["mig_devices"] == {"1c.3g.20gb": 1, "2c.3g.20gb": 1, "2g.10gb": 1}
    placements = sorted((gi["profile"], gi["placement"]["start"], gi["placement"]["size"]) for gi in a100["instances"])
    assert placements == [("2g.10gb", 0, 2), ("3g.20gb", 4, 4)]
    assert [p["pid"] for p in a100["processes"]] == [4242]
    assert a100["license"]["licensed"] is True
    assert a100["license"]["features"][0]["expiry"] == "2030-01-02T03:04:05Z"
    assert a100["kernel_driver"] == "nvidia" and a100["iommu_group"] == 42
    three_g = [p for p in a100["profiles"] if p["name"] == "3g.20gb"][0]
    assert [(p["start"], p["size"]) for p in three_g["placements"]] == [(0, 4), (4, 4)]
    assert l40s["mig_capable"] is False and l40s["mig_mode"] is None and l40s["instances"] == []
    assert l40s["virtualization"]["mode"] == "passthrough"
    assert l40s["kernel_driver"] is None


def test_profiles_can_be_left_out(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": "NVIDIA H100 80GB HBM3", "mig_mode": "enabled"}]})
    with_profiles = run_module(gpu_info, {})
    without = run_module(gpu_info, {"profiles": False})
    assert "profiles" not in without["gpus"][0]
    assert [p["name"] for p in with_profiles["gpus"][0]["profiles"]][0] == "1g.10gb"


def test_mig_query_failure_keeps_identity_and_names_error(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": "NVIDIA A100-SXM4-40GB", "mig_mode": "enabled"}]})
    sim = sys.modules["pynvml"]

    def refuse(*_args):
        raise sim.NVMLError(sim.NVML_ERROR_NO_PERMISSION)

    # Listing GPU instances needs root on a real host.
    monkeypatch.setattr(sim, "nvmlDeviceGetGpuInstances", refuse)
    res = run_module(gpu_info, {})
    assert not res.get("failed")
    gpu = res["gpus"][0]
    assert gpu["model"] == "NVIDIA A100-SXM4-40GB" and gpu["uuid"].startswith("GPU-")
    assert "NVML_ERROR_NO_PERMISSION" in gpu["error"]
    assert gpu["instances"] == [] and gpu["mig_mode"]["current"] == "enabled"


# --- health readings (module_utils/_nvml.Nvml.health) and the kernel log -------------------------------------------

def use_dmesg(monkeypatch):
    """gpusim's dmesg (lab/gpusim/bin) first on PATH: the module reads the simulated host's kernel log."""
    from gpusim_nvml import GPUSIM  # pylint: disable=import-error,import-outside-toplevel
    monkeypatch.setenv("PATH", os.path.join(GPUSIM, "bin") + os.pathsep + os.environ.get("PATH", ""))


def test_health_readings_as_nvml_gives_them(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [
        {"model": "NVIDIA H100 80GB HBM3", "mig_mode": "disabled"},
        {"model": "NVIDIA H100 80GB HBM3", "mig_mode": "disabled", "temperature": 91, "pcie": {"width": 8},
         "ecc": {"volatile": {"uncorrected": 5}, "aggregate": {"uncorrected": 9}},
         "remapped_rows": {"uncorrectable": 2, "pending": True}},
    ]})
    res = run_module(gpu_info, {"kernel_log": "none"})
    healthy, sick = (g["health"] for g in res["gpus"])
    assert healthy["ecc"] == {"enabled": True, "pending": True, "error": None, "volatile_uncorrected": 0,
                              "aggregate_uncorrected": 0, "volatile_corrected": 0, "aggregate_corrected": 0}
    assert healthy["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False,
                                        "error": None}
    # Row remapping replaced page retirement on Ampere and later: NVML answers NOT_SUPPORTED for retired pages.
    assert healthy["retired_pages"] == {"pending": None, "error": "NVML_ERROR_NOT_SUPPORTED"}
    assert healthy["pcie"] == {"gen": 5, "width": 16, "max_gen": 5, "max_width": 16, "gpu_max_gen": 5}
    assert healthy["temperature"] == {"current": 30, "slowdown": 89, "shutdown": 95, "gpu_max": 87}
    assert healthy["clock_event_reasons"] == {"mask": 1, "active": ["GpuIdle"], "error": None}
    assert healthy["persistence_mode"] == {"enabled": True, "error": None}
    assert sick["ecc"]["volatile_uncorrected"] == 5 and sick["ecc"]["aggregate_uncorrected"] == 9
    assert sick["remapped_rows"]["pending"] is True and sick["remapped_rows"]["uncorrectable"] == 2
    assert sick["pcie"]["width"] == 8 and sick["temperature"]["current"] == 91
    assert {"HwSlowdown", "HwThermalSlowdown"} <= set(sick["clock_event_reasons"]["active"])
    assert res["kernel_log"] == {"source": "none", "read": False, "error": "kernel_log=none", "xid_events": []}
    # Off: no readings, fewer NVML calls.
    lean = run_module(gpu_info, {"kernel_log": "none", "health": False})
    assert "health" not in lean["gpus"][0] and lean["nvml"]["calls"] < res["nvml"]["calls"]


def test_row_remapping_on_a_mig_gpu_with_instances_is_an_nvml_error_not_a_reading(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": "NVIDIA A100-SXM4-40GB", "mig_mode": "enabled",
                                                 "gpu_instances": [{"profile_id": 9, "start": 4}]}]})
    res = run_module(gpu_info, {"kernel_log": "none"})
    assert res["gpus"][0]["health"]["remapped_rows"] == {"error": "NVML_ERROR_NOT_SUPPORTED"}


def test_a_lost_gpu_is_that_gpus_error_and_a_missing_one_is_not_counted(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": "NVIDIA H100 80GB HBM3", "mig_mode": "disabled"},
                                                {"model": "NVIDIA H100 80GB HBM3", "mig_mode": "disabled", "lost": True},
                                                {"model": "NVIDIA H100 80GB HBM3", "mig_mode": "disabled",
                                                 "present": False}]})
    res = run_module(gpu_info, {"kernel_log": "none"})
    assert not res.get("failed") and len(res["gpus"]) == 2
    assert "health" in res["gpus"][0]
    assert res["gpus"][1]["error"].endswith("(NVML_ERROR_GPU_IS_LOST)") and "health" not in res["gpus"][1]


def test_xid_events_come_from_the_kernel_log_and_land_on_their_gpu(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [
        {"model": "NVIDIA H100 80GB HBM3", "mig_mode": "disabled"},
        {"model": "NVIDIA H100 80GB HBM3", "mig_mode": "disabled",
         "xid_events": [{"xid": 48, "t": 100.5, "msg": "DBE (double bit error) ECC error"},
                        {"xid": 79, "t": 200.25, "msg": "GPU has fallen off the bus."}]}]})
    use_dmesg(monkeypatch)
    res = run_module(gpu_info, {})
    log = res["kernel_log"]
    assert log["source"] == "dmesg" and log["read"] and log["error"] is None
    assert [(e["xid"], e["pci"]) for e in log["xid_events"]] == [(48, "0000:31:00"), (79, "0000:31:00")]
    assert res["gpus"][0]["health"]["xid"] == [] and res["gpus"][1]["health"]["xid"] == [48, 79]


def test_a_kernel_log_that_cannot_be_read_is_reported(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"kernel_log_restricted": True,
                                       "gpus": [{"model": "NVIDIA H100 80GB HBM3", "mig_mode": "disabled"}]})
    use_dmesg(monkeypatch)
    res = run_module(gpu_info, {})
    assert not res["kernel_log"]["read"] and res["kernel_log"]["error"].startswith("dmesg exited 1: ")
    assert "Operation not permitted" in res["kernel_log"]["error"]
    missing = run_module(gpu_info, {"kernel_log": "journal"}) if not __import__("shutil").which("journalctl") else None
    if missing is not None:
        assert missing["kernel_log"]["error"] == "journalctl is not installed"
