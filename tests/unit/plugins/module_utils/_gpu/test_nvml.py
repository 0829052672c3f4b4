# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVML adapter (plugins/module_utils/_gpu/nvml.py) against gpusim: nvidia-ml-py in-process over gpusim's libnvidia-ml.so.1."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import sysconfig

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._gpu import nvml as gpu_nvml
from ansible_collections.gpuops.provision.plugins.module_utils._mig import geometry

from gpusim_nvml import use_gpusim  # pylint: disable=import-error

A100 = "NVIDIA A100-SXM4-40GB"


@pytest.fixture
def sim(monkeypatch, tmp_path):
    """Returns a function writing a gpusim state and opening an Nvml session on it."""
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": []})

    def start(state):
        # the binding again: the library build of this state's driver
        use_gpusim(monkeypatch, tmp_path, state)
        nvml = gpu_nvml.Nvml()
        assert nvml.open(), nvml.reason
        return nvml
    start.path = path
    return start


@pytest.mark.parametrize("bus_id,address", [("00000000:17:00.0", "0000:17:00.0"), ("0000ABCD:CA:00.1", "abcd:ca:00.1")])
def test_pci_address(bus_id, address):
    assert gpu_nvml.pci_address(bus_id) == address


def test_pci_sysfs_absent_device_and_bad_tree(tmp_path):
    assert gpu_nvml.pci_sysfs(str(tmp_path), "0000:17:00.0") == {"driver": None, "iommu_group": None}
    (tmp_path / "sys/bus/pci/devices/0000:17:00.0").mkdir(parents=True)
    out = gpu_nvml.pci_sysfs(str(tmp_path), "0000:17:00.0")
    assert out["driver"] is None and "vendor is missing" in out["error"]


def test_counts_every_call_and_reads_placements_from_nvml(sim):
    nvml = sim({"gpus": [{"model": A100, "mig_mode": "enabled"}]})
    table = nvml.snapshot(0, detail=False).table
    assert table.get("1g.10gb").placements == ((0, 2), (2, 2), (4, 2), (6, 2))
    assert table.get("3g.20gb").placements == ((0, 4), (4, 4))
    assert table.memory_slices == 8
    assert nvml.calls == sum(nvml.call_counts.values()) > 20
    assert nvml.call_counts["nvmlDeviceGetGpuInstancePossiblePlacements"] == len(table.profiles)


def test_apply_plan_and_refresh(sim):
    nvml = sim({"gpus": [{"model": A100, "mig_mode": "enabled"}]})
    device = nvml.snapshot(0, detail=False)
    gpu = device.info
    entry = {"mig_enabled": True, "mig_devices": {"1c.7g.40gb": 1, "2c.7g.40gb": 1, "4c.7g.40gb": 1}}
    plan = geometry.plan_gpu(device.table, gpu["mig_mode"], gpu["instances"], entry)
    assert nvml.apply(device, plan) == {"reset_required": False, "deferred": False, "pending_reason": None}
    gpu = nvml.refresh(device).info
    (seven,) = gpu["instances"]
    # Three CIs share one GI: their placements were solved, not left to NVML.
    assert sorted((c["slices"], c["placement"]["start"]) for c in seven["compute_instances"]) == [(1, 6), (2, 4), (4, 0)]
    assert geometry.geometry_matches(gpu["instances"], plan["target_counts"])


def test_set_mig_mode_reports_why_the_change_is_pending(sim):
    # nvml.h: the call succeeds and the activation status says IN_USE (not idle) or RESET_REQUIRED (pass-through).
    nvml = sim({"gpus": [{"model": "NVIDIA H100 80GB HBM3", "mig_mode": "disabled", "processes": [{"pid": 9}]},
                         {"model": A100, "mig_mode": "disabled", "reset_supported": False},
                         {"model": A100, "mig_mode": "disabled"}]})
    busy, vm, idle = (nvml.snapshot(i, detail=False) for i in range(3))
    assert nvml.set_mig_mode(busy, True) == "in_use"
    assert nvml.set_mig_mode(vm, True) == "reset_required"
    assert nvml.set_mig_mode(idle, True) is None
    assert [nvml.refresh(g).info["mig_mode"] for g in (busy, vm, idle)] == [
        {"current": "disabled", "pending": "enabled"}] * 2 + [{"current": "enabled", "pending": "enabled"}]


def test_set_mig_mode_failure_is_explained(sim):
    nvml = sim({"gpus": [{"model": A100, "mig_mode": "enabled", "gpu_instances": [{"profile_id": 0}]}]})
    device = nvml.snapshot(0, detail=False)
    with pytest.raises(gpu_nvml.StepError, match=r"^setting MIG mode disabled: NVML error In use by another client "
                       r"\(NVML_ERROR_IN_USE\) from nvmlDeviceSetMigMode \(GPU instances"):
        nvml.set_mig_mode(device, False)


def test_strict_process_list_refuses_to_guess(sim):
    nvml = sim({"gpus": [{"model": A100, "mig_mode": "enabled"}],
                "faults": {"fail_processes_after": 0, "fail_processes_error": "NO_PERMISSION"}})
    with pytest.raises(gpu_nvml.NvmlError, match="cannot list the processes.*NVML_ERROR_NO_PERMISSION"):
        nvml.fill(nvml.device(0), detail=False, strict=True)
    # Reporting (gpu_info) keeps going: no list is not an error there.
    assert nvml.fill(nvml.device(0), detail=False).info["processes"] == []


def test_licence_expiry_constant_is_a_tuple_in_nvidia_ml_py(monkeypatch):
    # The quirk the adapter works around (reference/licensing-driver-k8s.md): the real module's constant is (2,).
    # Loaded by path, a module of its own: not the instance another test bound to gpusim's library.
    spec = importlib.util.spec_from_file_location("real_pynvml", os.path.join(sysconfig.get_paths()["purelib"], "pynvml.py"))
    real = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "real_pynvml", real)  # the module looks itself up while loading
    spec.loader.exec_module(real)
    assert real.NVML_GRID_LICENSE_EXPIRY_VALID == (2,)
    assert gpu_nvml._const(real.NVML_GRID_LICENSE_EXPIRY_VALID) == 2 and gpu_nvml._const(4) == 4


def test_licensed_and_unlicensed(sim):
    nvml = sim({"gpus": [{"model": A100, "license": {"feature": "compute", "licensed": False}},
                         {"model": A100, "license": {"feature": "compute", "licensed": True}}]})
    unlicensed = nvml.licence(nvml.device(0))
    licensed = nvml.licence(nvml.device(1))
    assert unlicensed["supported"] and unlicensed["licensed"] is False
    assert licensed["licensed"] is True and licensed["features"][0]["expiry_status"] == "permanent"


def test_refresh_reads_the_gpu_again_into_a_new_device(sim):
    # The run keeps the geometry it planned from (the undo restores it); refresh() must not overwrite it.
    nvml = sim({"gpus": [{"model": A100, "mig_mode": "enabled"}]})
    device = nvml.snapshot(0, detail=False)
    planned = json.dumps(device.info, sort_keys=True)
    plan = geometry.plan_gpu(device.table, device.info["mig_mode"], device.info["instances"],
                             {"mig_enabled": True, "mig_devices": {"3g.20gb": 2}})
    nvml.apply(device, plan)
    fresh = nvml.refresh(device)
    assert json.dumps(device.info, sort_keys=True) == planned
    assert fresh is not device and fresh.handle is device.handle and fresh.table is device.table
    assert geometry.current_counts(fresh.info["instances"]) == {"3g.20gb": 2} and fresh.info["uuid"] == device.info["uuid"]


def test_rebind_renews_handles_and_refuses_renumbered_gpus(sim):
    nvml = sim({"gpus": [{"model": A100, "uuid": "GPU-%08d-0000-0000-0000-000000000000" % i} for i in range(2)]})
    devices = [nvml.device(0), nvml.device(1)]
    nvml.reopen()
    nvml.rebind(devices)
    assert [d.info["uuid"] for d in devices] == [gpu_nvml._text(nvml.call("nvmlDeviceGetUUID", d.handle)) for d in devices]
    # Another GPU now answers at index 0 (the first two swapped places across the reset).
    state = json.loads(sim.path.read_text())
    state["gpus"].reverse()
    sim.path.write_text(json.dumps(state))
    nvml.reopen()
    with pytest.raises(gpu_nvml.NvmlError, match=r"^GPU 0 is %s after the MIG mode change, not %s: the GPUs were renumbered$"
                       % (devices[1].info["uuid"], devices[0].info["uuid"])):
        nvml.rebind(devices)


def test_only_the_adapter_holds_nvml_handles():
    # Workflows get Devices and pass them back: no NVML handle (a ctypes object) in a dict that may reach a result,
    # no adapter state in keys the callers write and pop (the former _handle/_table keys).
    import ast
    root = os.path.join(os.path.dirname(gpu_nvml.__file__), os.pardir, os.pardir)
    offenders = []
    for folder, _dirs, files in os.walk(root):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            for node in ast.walk(ast.parse(open(path).read())):
                if isinstance(node, ast.Attribute) and node.attr == "handle" and os.path.realpath(path) != os.path.realpath(gpu_nvml.__file__):
                    offenders.append("%s:%d .handle" % (name, node.lineno))
                if isinstance(node, ast.Constant) and node.value in ("_handle", "_table", "_entry", "_plan", "_table_source"):
                    offenders.append("%s:%d %r" % (name, node.lineno, node.value))
    assert offenders == []


# --- issue 37 point 4: the binding from the collection's virtualenv ----------------------------------------------------

def test_binding_from_the_collections_virtualenv_when_the_interpreter_has_none(monkeypatch, tmp_path):
    """A host whose python3 has no pynvml, and the nvidia_driver role's virtualenv (/opt/gpuops/nvml) that has it: the
    module imports it from there and says so; without either, the reason names both places."""
    name = "gpuops_test_pynvml_%d" % os.getpid()
    monkeypatch.setattr(gpu_nvml, "NVML_VENV", str(tmp_path / "venv"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    nvml = gpu_nvml.Nvml(module_name=name)
    assert nvml.open() is False
    assert nvml.reason.startswith("Python module pynvml (package nvidia-ml-py) is not installed (neither for %s nor in %s; "
                                  "the nvidia_driver role's nvml step installs it): No module named"
                                  % (sys.executable, tmp_path / "venv"))
    assert nvml.binding == {"module": None, "python": sys.executable}
    for minor in ("3.9", "3.11"):   # the newest of the venv's python3* directories is taken
        site = tmp_path / "venv" / "lib" / ("python" + minor) / "site-packages"
        site.mkdir(parents=True)
    (site / (name + ".py")).write_text(
        "class NVMLError(Exception):\n    pass\n\ndef nvmlInit():\n    raise NVMLError('stand-in: no driver')\n")
    nvml = gpu_nvml.Nvml(module_name=name)
    try:
        nvml.open()
        assert nvml.binding == {"module": str(site / (name + ".py")), "python": sys.executable}
        assert str(site) in sys.path
    finally:
        sys.modules.pop(name, None)


# --- versioned entry points on drivers without the newest symbol (issue 38, point 2) ------------------------------

PROCS = [{"pid": 41, "gpu_instance_id": 1, "compute_instance_id": 0, "used_memory": 1048576},
         {"pid": 42, "type": "graphics"}]
GI = [{"profile_id": 9, "start": 4, "id": 1, "compute_instances": [{"slices": 3}]}]


def _a100(driver, missing=(), **gpu):
    return {"driver_version": driver, "missing_symbols": list(missing),
            "gpus": [dict({"model": A100, "mig_mode": "enabled", "gpu_instances": GI, "processes": PROCS}, **gpu)]}


def _entry_points(nvml, *names):
    return {n: nvml.call_counts.get(n, 0) for n in names}


@pytest.mark.parametrize("driver", ["505.86.01", "535.98"])
def test_a_driver_without_the_v3_process_symbol_is_listed_through_v2(sim, driver):
    """nvidia-ml-py's unversioned process lists call the _v3 symbol under throwOnVersionMismatch and raise
    NVMLLibraryMismatchError, a plain Exception, when the driver lacks it (before 510.39.01, and in 535.98)."""
    nvml = sim(_a100(driver))
    with pytest.raises(nvml.nv.NVMLLibraryMismatchError):
        nvml.nv.nvmlDeviceGetComputeRunningProcesses(nvml.handle(0))
    info = nvml.fill(nvml.device(0), detail=False, strict=True).info
    assert info["processes"] == [
        {"pid": 41, "type": "compute", "used_memory_bytes": 1048576, "gpu_instance_id": 1, "compute_instance_id": 0},
        {"pid": 42, "type": "graphics", "used_memory_bytes": None, "gpu_instance_id": None, "compute_instance_id": None}]
    assert _entry_points(nvml, "nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetGraphicsRunningProcesses_v2") == {
        "nvmlDeviceGetComputeRunningProcesses_v2": 1, "nvmlDeviceGetGraphicsRunningProcesses_v2": 1}


def test_without_v3_and_v2_the_original_symbol_gives_v1_records(sim):
    missing = ["nvmlDevice%sRunningProcesses_%s" % (k, v) for k in ("GetCompute", "GetGraphics") for v in ("v3", "v2")]
    nvml = sim(_a100("550.54.15", missing))
    info = nvml.fill(nvml.device(0), detail=False, strict=True).info
    # v1 records have no GPU/compute instance ids.
    assert info["processes"] == [
        {"pid": 41, "type": "compute", "used_memory_bytes": 1048576, "gpu_instance_id": None, "compute_instance_id": None},
        {"pid": 42, "type": "graphics", "used_memory_bytes": None, "gpu_instance_id": None, "compute_instance_id": None}]
    assert nvml.call_counts["nvmlDeviceGetComputeRunningProcesses"] == 2  # the wrapper, then the C symbol
    nvml = sim(_a100("550.54.15", missing, processes=[]))
    assert nvml.fill(nvml.device(0), detail=False, strict=True).info["processes"] == []


def test_newest_profile_and_placement_symbols_missing_fall_back_to_the_older_ones(sim):
    """GI/CI profile info: the V entry points from 510.39.01; GI placements: _v2 from 470.42.01 (nvml.h per driver
    release); each missing alone, and all of them on a 460.x driver."""
    want = sim(_a100("550.54.15"))
    table = want.snapshot(0, detail=False)
    for missing in (["nvmlDeviceGetGpuInstanceProfileInfoV"], ["nvmlGpuInstanceGetComputeInstanceProfileInfoV"],
                    ["nvmlDeviceGetGpuInstancePossiblePlacements_v2"]):
        nvml = sim(_a100("550.54.15", missing))
        got = nvml.snapshot(0, detail=False)
        assert [(p.name, p.id, p.placements, p.max_count) for p in got.table.profiles] == \
            [(p.name, p.id, p.placements, p.max_count) for p in table.table.profiles], missing
        assert got.info["instances"] == table.info["instances"], missing
    nvml = sim(_a100("460.106.00", processes=[]))
    got = nvml.snapshot(0, detail=False)
    assert got.info["instances"] == table.info["instances"]
    assert nvml.call_counts["nvmlDeviceGetGpuInstancePossiblePlacements"] == 2 * len(got.table.profiles)


def test_a_missing_symbol_is_told_from_other_errors(sim):
    nvml = sim(_a100("550.54.15"))
    assert nvml.missing_symbol(nvml.nv.NVMLError(nvml.nv.NVML_ERROR_FUNCTION_NOT_FOUND))
    assert nvml.missing_symbol(nvml.nv.NVMLLibraryMismatchError("x")) and nvml.missing_symbol(AttributeError("x"))
    assert not nvml.missing_symbol(nvml.nv.NVMLError(nvml.nv.NVML_ERROR_NO_PERMISSION))
    assert not nvml.missing_symbol(ValueError("x"))
    # A refusal other than a missing symbol is no reason to try an older entry point.
    nvml = sim(dict(_a100("505.86.01"), faults={"fail_processes_after": 0, "fail_processes_error": "NO_PERMISSION"}))
    with pytest.raises(gpu_nvml.NvmlError, match="cannot list the processes.*NVML_ERROR_NO_PERMISSION"):
        nvml.fill(nvml.device(0), detail=False, strict=True)
    assert "nvmlDeviceGetComputeRunningProcesses_v2" not in nvml.call_counts or \
        nvml.call_counts["nvmlDeviceGetComputeRunningProcesses_v2"] == 1
