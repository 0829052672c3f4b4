# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVML adapter (plugins/module_utils/_nvml.py) against gpusim installed in-process as ``pynvml``."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import sysconfig

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils import _mig, _nvml

from gpusim_nvml import use_gpusim  # pylint: disable=import-error

A100 = "NVIDIA A100-SXM4-40GB"


@pytest.fixture
def sim(monkeypatch, tmp_path):
    """Returns a function writing a gpusim state and opening an Nvml session on it."""
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": []})

    def start(state):
        path.write_text(json.dumps(state))
        nvml = _nvml.Nvml()
        assert nvml.open(), nvml.reason
        return nvml
    start.path = path
    return start


@pytest.mark.parametrize("bus_id,address", [("00000000:17:00.0", "0000:17:00.0"), ("0000ABCD:CA:00.1", "abcd:ca:00.1")])
def test_pci_address(bus_id, address):
    assert _nvml.pci_address(bus_id) == address


def test_pci_sysfs_absent_device_and_bad_tree(tmp_path):
    assert _nvml.pci_sysfs(str(tmp_path), "0000:17:00.0") == {"driver": None, "iommu_group": None}
    (tmp_path / "sys/bus/pci/devices/0000:17:00.0").mkdir(parents=True)
    out = _nvml.pci_sysfs(str(tmp_path), "0000:17:00.0")
    assert out["driver"] is None and "vendor is missing" in out["error"]


def test_counts_every_call_and_reads_placements_from_nvml(sim):
    nvml = sim({"gpus": [{"model": A100, "mig_mode": "enabled"}]})
    gpu = nvml.snapshot(0, detail=False)
    table = gpu["_table"]
    assert table.get("1g.10gb").placements == ((0, 2), (2, 2), (4, 2), (6, 2))
    assert table.get("3g.20gb").placements == ((0, 4), (4, 4))
    assert table.memory_slices == 8
    assert nvml.calls == sum(nvml.call_counts.values()) > 20
    assert nvml.call_counts["nvmlDeviceGetGpuInstancePossiblePlacements"] == len(table.profiles)


def test_apply_plan_and_refresh(sim):
    nvml = sim({"gpus": [{"model": A100, "mig_mode": "enabled"}]})
    gpu = nvml.snapshot(0, detail=False)
    entry = {"mig_enabled": True, "mig_devices": {"1c.7g.40gb": 1, "2c.7g.40gb": 1, "4c.7g.40gb": 1}}
    plan = _mig.plan_gpu(gpu["_table"], gpu["mig_mode"], gpu["instances"], entry)
    assert nvml.apply(gpu, plan) == {"reset_required": False, "deferred": False, "pending_reason": None}
    nvml.refresh(gpu)
    (seven,) = gpu["instances"]
    # Three CIs share one GI: their placements were solved, not left to NVML.
    assert sorted((c["slices"], c["placement"]["start"]) for c in seven["compute_instances"]) == [(1, 6), (2, 4), (4, 0)]
    assert _mig.geometry_matches(gpu["instances"], plan["target_counts"])


def test_set_mig_mode_reports_why_the_change_is_pending(sim):
    # nvml.h: the call succeeds and the activation status says IN_USE (not idle) or RESET_REQUIRED (pass-through).
    nvml = sim({"gpus": [{"model": "NVIDIA H100 80GB HBM3", "mig_mode": "disabled", "processes": [{"pid": 9}]},
                         {"model": A100, "mig_mode": "disabled", "reset_supported": False},
                         {"model": A100, "mig_mode": "disabled"}]})
    busy, vm, idle = (nvml.snapshot(i, detail=False) for i in range(3))
    assert nvml.set_mig_mode(busy["_handle"], True) == "in_use"
    assert nvml.set_mig_mode(vm["_handle"], True) == "reset_required"
    assert nvml.set_mig_mode(idle["_handle"], True) is None
    assert [nvml.refresh(g)["mig_mode"] for g in (busy, vm, idle)] == [
        {"current": "disabled", "pending": "enabled"}] * 2 + [{"current": "enabled", "pending": "enabled"}]


def test_set_mig_mode_failure_is_explained(sim):
    nvml = sim({"gpus": [{"model": A100, "mig_mode": "enabled", "gpu_instances": [{"profile_id": 0}]}]})
    gpu = nvml.snapshot(0, detail=False)
    with pytest.raises(_nvml.StepError, match=r"^setting MIG mode disabled: NVML error In use by another client "
                                              r"\(NVML_ERROR_IN_USE\) from nvmlDeviceSetMigMode \(GPU instances"):
        nvml.set_mig_mode(gpu["_handle"], False)


def test_strict_process_list_refuses_to_guess(sim):
    nvml = sim({"gpus": [{"model": A100, "mig_mode": "enabled"}],
                "faults": {"fail_processes_after": 0, "fail_processes_error": "NO_PERMISSION"}})
    dev, info = nvml.identity(0)
    with pytest.raises(_nvml.NvmlError, match="cannot list the processes.*NVML_ERROR_NO_PERMISSION"):
        nvml.fill(dev, dict(info), detail=False, strict=True)
    # Reporting (gpu_info) keeps going: no list is not an error there.
    assert nvml.fill(dev, dict(info), detail=False)["processes"] == []


def test_licence_expiry_constant_is_a_tuple_in_nvidia_ml_py(monkeypatch):
    # The quirk the adapter works around (reference/licensing-driver-k8s.md): the real module's constant is (2,).
    # Loaded by path so that a simulator installed as ``pynvml`` by another test cannot stand in for it.
    spec = importlib.util.spec_from_file_location("real_pynvml", os.path.join(sysconfig.get_paths()["purelib"], "pynvml.py"))
    real = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "real_pynvml", real)  # the module looks itself up while loading
    spec.loader.exec_module(real)
    assert real.NVML_GRID_LICENSE_EXPIRY_VALID == (2,)
    assert _nvml._const(real.NVML_GRID_LICENSE_EXPIRY_VALID) == 2 and _nvml._const(4) == 4


def test_licensed_and_unlicensed(sim):
    nvml = sim({"gpus": [{"model": A100, "license": {"feature": "compute", "licensed": False}},
                         {"model": A100, "license": {"feature": "compute", "licensed": True}}]})
    unlicensed = nvml.licence(nvml.handle(0))
    licensed = nvml.licence(nvml.handle(1))
    assert unlicensed["supported"] and unlicensed["licensed"] is False
    assert licensed["licensed"] is True and licensed["features"][0]["expiry_status"] == "permanent"
