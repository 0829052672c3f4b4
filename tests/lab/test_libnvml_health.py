"""gpusim's libnvidia-ml.so.1 (issue 42): process lists, health readings, virtualization / vGPU scheduler / licence.

As in test_libnvml.py: the REAL nvidia-ml-py loads the library (libnvml/processes.c, health.c, vgpu.c) through
``LD_LIBRARY_PATH`` in an isolated subprocess, and every answer (values, struct fields, exception classes and codes)
and the state file afterwards must be the recorded ones (libnvml_expected/libnvml_health/, libnvml_common.expected);
the rules are gpusim/api_health.py's. Then the product's own process listing (plugins/module_utils/_gpu/nvml.py) on the
535.98 build, which lacks the ``_v3`` process symbols (issue 42, item 5).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from libnvml_common import (GPUSIM, REPO, NEEDS_BUILD, assert_answers, expected, lib_env,  # pylint: disable=import-error
                            libnvml_build)

COLLECTIONS = REPO / "build" / "collections"


pytestmark = NEEDS_BUILD

# Every call of the product's health / preflight / inventory readings through nvidia-ml-py, per GPU; each answer is
# ["ok", value], ["err", class, code] or ["exc", class] (NVMLLibraryMismatchError is a plain Exception).
PROBE = r'''
import ctypes, json, sys
import pynvml as n
out = {"file": n.__file__, "calls": []}

def plain(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, n.nvmlFriendlyObject):
        return {k: plain(x) for k, x in sorted(vars(v).items())}
    if hasattr(v, "_fields_"):
        return {f[0]: plain(getattr(v, f[0])) for f in v._fields_}
    if isinstance(v, (list, tuple, ctypes.Array)):
        return [plain(x) for x in v]
    return v

def rec(name, fn, *args):
    try:
        out["calls"].append([name, "ok", plain(fn(*args))])
    except n.NVMLError as e:
        out["calls"].append([name, "err", type(e).__name__, e.value])
    except Exception as e:  # NVMLLibraryMismatchError: a plain Exception
        out["calls"].append([name, "exc", type(e).__name__])

class V1(ctypes.Structure):  # nvml.h nvmlProcessInfo_v1_t
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]

def v1_list(symbol, h):
    """The original symbol, sized as the product calls it (count 0 and NULL, then count records)."""
    fn = n._nvmlGetFunctionPointer(symbol)
    count = ctypes.c_uint(0)
    first = fn(h, ctypes.byref(count), None)
    short = (V1 * 1)()
    one = ctypes.c_uint(1)
    second = fn(h, ctypes.byref(one), short) if count.value > 1 else None
    infos = (V1 * max(count.value, 1))()
    got = ctypes.c_uint(count.value)
    third = fn(h, ctypes.byref(got), infos)
    return [first, count.value, second, one.value, third, [[infos[i].pid, infos[i].usedGpuMemory]
                                                          for i in range(got.value if third == 0 else 0)]]

rec("init", n.nvmlInit)
rec("count", n.nvmlDeviceGetCount)
count = out["calls"][-1][2] if out["calls"][-1][1] == "ok" else 0
handles = []
for i in range(count):
    try:
        handles.append(n.nvmlDeviceGetHandleByIndex(i))
        out["calls"].append(["handle%d" % i, "ok"])
    except n.NVMLError as e:
        out["calls"].append(["handle%d" % i, "err", type(e).__name__, e.value])
for i, h in enumerate(handles):
    for kind in ("Compute", "Graphics", "MPSCompute"):
        for suffix in ("", "_v2", "_v3"):
            name = "nvmlDeviceGet%sRunningProcesses%s" % (kind, suffix)
            rec("%s/%d" % (name, i), getattr(n, name), h)
        rec("v1 %s/%d" % (kind, i), v1_list, "nvmlDeviceGet%sRunningProcesses" % kind, h)
    for name in ("nvmlDeviceGetEccMode", "nvmlDeviceGetCurrentEccMode", "nvmlDeviceGetPendingEccMode",
                 "nvmlDeviceGetDefaultEccMode", "nvmlDeviceGetRemappedRows", "nvmlDeviceGetRetiredPagesPendingStatus",
                 "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth",
                 "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth",
                 "nvmlDeviceGetGpuMaxPcieLinkGeneration", "nvmlDeviceGetCurrentClocksEventReasons",
                 "nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetSupportedClocksEventReasons",
                 "nvmlDeviceGetSupportedClocksThrottleReasons", "nvmlDeviceGetPersistenceMode",
                 "nvmlDeviceGetArchitecture", "nvmlDeviceGetCudaComputeCapability", "nvmlDeviceGetIndex",
                 "nvmlDeviceGetSerial", "nvmlDeviceGetMinorNumber", "nvmlDeviceGetBrand",
                 "nvmlDeviceGetVirtualizationMode", "nvmlDeviceGetHostVgpuMode",
                 "nvmlDeviceGetGridLicensableFeatures", "nvmlDeviceGetGridLicensableFeatures_v4",
                 "nvmlDeviceGetVgpuSchedulerState", "nvmlDeviceGetVgpuSchedulerCapabilities"):
        rec("%s/%d" % (name, i), getattr(n, name), h)
    for error_type, counter_type in ((0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (0, 2)):
        rec("ecc%d%d/%d" % (error_type, counter_type, i), n.nvmlDeviceGetTotalEccErrors, h, error_type, counter_type)
    for cause in (0, 1, 2):
        rec("retired%d/%d" % (cause, i), n.nvmlDeviceGetRetiredPages, h, cause)
        rec("retired_v2_%d/%d" % (cause, i), n.nvmlDeviceGetRetiredPages_v2, h, cause)
    for sensor in (0, 1):
        rec("temperature%d/%d" % (sensor, i), n.nvmlDeviceGetTemperature, h, sensor)
    for threshold in range(9):
        rec("threshold%d/%d" % (threshold, i), n.nvmlDeviceGetTemperatureThreshold, h, threshold)
rec("shutdown", n.nvmlShutdown)
for h in handles[:1]:
    rec("after_shutdown_temperature", n.nvmlDeviceGetTemperature, h, 0)
    rec("after_shutdown_processes", n.nvmlDeviceGetComputeRunningProcesses_v2, h)
    rec("after_shutdown_licence", n.nvmlDeviceGetGridLicensableFeatures, h)
print(json.dumps(out))
'''


def _state_file(path):
    return json.loads(path.read_text())


A100, H100, L40S = "NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3", "NVIDIA L40S"
PROCS = [{"pid": 4001, "used_memory": 2147483648}, {"pid": 4002, "type": "graphics", "used_memory": 1048576},
         {"pid": 4003, "type": "compute+graphics"}, {"pid": 4004, "type": "mps", "used_memory": 4096},
         {"pid": 4005, "used_memory": 0}]
FAULTS = {"driver_version": "550.163.01", "ecc_volatile_in_mig": "not_supported", "gpus": [
    # ECC storm, a pending and a failed row remap, hot (slowdown reasons), a degraded link, five processes of every
    # kind, a licensed vGPU guest with an expiry date.
    {"model": A100, "processes": PROCS, "ecc": {"volatile": {"corrected": 7, "uncorrected": 3},
                                                "aggregate": {"corrected": 70, "uncorrected": 30}},
     "remapped_rows": {"correctable": 2, "uncorrectable": 1, "pending": True, "failure": True},
     "temperature": 91, "pcie": {"width": 8, "gen": 3}, "persistence_mode": False,
     "virtualization_mode": "vgpu", "vgpu_name": "NVIDIA A100-4C",
     "license": {"feature": "compute", "licensed": True, "expiry": "2027-03-04T05:06:07Z"},
     "xid_events": [{"xid": 48, "t": 100}, {"xid": 63, "t": 101}]},
    # ECC off with a pending enable, a permanent licence, passthrough, named clock event reasons.
    {"model": H100, "ecc": {"mode": "disabled", "pending": "enabled"}, "virtualization_mode": "passthrough",
     "license": {"feature": "vworkstation", "licensed": True, "product_name": "NVIDIA RTX Virtual Workstation"},
     "clocks_event_reasons": ["SwPowerCap", "HwPowerBrakeSlowdown"]},
    # no ECC at all, idle (the link downtrains), an unlicensed feature, a slot slower than the card
    {"model": L40S, "ecc": {"supported": False}, "license": {"feature": "vgamedev", "licensed": False},
     "pcie": {"host_max_gen": 3}},
    # MIG on with a GPU instance: remapped rows and volatile ECC counts not readable, processes in the instance
    {"model": A100, "mig_mode": "enabled",
     "gpu_instances": [{"profile_id": 9, "start": 4, "compute_instances": [{"slices": 3}]}],
     "processes": [{"pid": 5001, "gpu_instance_id": 1, "compute_instance_id": 0, "used_memory": 1024}]},
    {"model": A100, "lost": True},
    {"model": H100, "present": False},
    {"model": A100, "lost": True, "lost_error": "UNKNOWN"},
]}
PROCESS_FAULT = {"faults": {"fail_processes_after": 0, "fail_processes_error": "NO_PERMISSION"},
                 "gpus": [{"model": A100, "processes": PROCS[:2]}]}
# vGPU hosts: the scheduler the loaded RmPVMRL value runs (vgpu_sched.py): ARR (0x01 with frequency/avg fields),
# legacy time-sliced (0x03), fixed share, best effort (0), another timeslice unit, a policy subset, a bad state unit.
VGPU_HOSTS = {"driver_version": "550.163.01", "gpus": [
    dict({"model": L40S, "virtualization_mode": "host_vgpu", "host_vgpu_mode": "sriov"}, **extra) for extra in (
        {"rmpvmrl_loaded": 0x1E078001, "vgpus_running": 2},
        {"rmpvmrl_loaded": 0x000A0003, "vgpus_running": 1},
        {"rmpvmrl_loaded": 0x00000011, "vgpus_running": 1, "vgpu_scheduler_policies": ["best_effort", "equal_share"]},
        {"rmpvmrl_loaded": 0},
        {"rmpvmrl_loaded": 0x00000001, "host_vgpu_mode": "non_sriov", "max_vgpus_per_gpu": 16},
        {"virtualization_mode": "host_vsga"},
    )]}
VGPU_HOSTS_US = dict(VGPU_HOSTS, scheduler_timeslice_unit="us", driver_version="535.98",
                     scheduler_params_idle="configured")
BAD_UNIT = {"scheduler_timeslice_unit": "fortnight",
            "gpus": [{"model": L40S, "virtualization_mode": "host_vgpu", "rmpvmrl_loaded": 1}]}


def _files(*globs):
    return {"%s/%s" % (p.parent.name, p.stem): json.loads(p.read_text())
            for g in globs for p in sorted(GPUSIM.glob(g))}


CASES = dict(_files("states/*.json", "vgpu-hosts/*.json"), **{
    "faults": (FAULTS, None),
    "faults@535.98": (dict(FAULTS, driver_version="535.98"), "535.98"),
    "faults@470": (dict(FAULTS, driver_version="470.256.02"), "470.256.02"),
    "process_fault": (PROCESS_FAULT, None),
    "vgpu_hosts": (VGPU_HOSTS, None),
    "vgpu_hosts_us@535.98": (VGPU_HOSTS_US, "535.98"),
    "bad_unit": (BAD_UNIT, None),
})
CASES = {k: v if isinstance(v, tuple) else (v, None) for k, v in CASES.items()}


def _run(script, state, driver, libdirs, tmp, *argv):
    """The answers of ``script`` in an isolated interpreter (``-I``: nvidia-ml-py from site-packages) on the library
    build of ``driver``, and the state file afterwards."""
    tmp.mkdir(parents=True)
    path = tmp / "gpusim.json"
    path.write_text(json.dumps(copy.deepcopy(state)))
    env = lib_env(libdirs[driver or libnvml_build.DEFAULT_DRIVER], path)
    proc = subprocess.run([sys.executable, "-I", "-c", script, *argv], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert "site-packages" in out["file"], out["file"]   # the real binding, not a module of ours
    return out, _state_file(path)


@pytest.mark.parametrize("case", sorted(CASES))
def test_real_binding_on_the_library_answers_as_recorded(case, libdirs, tmp_path):
    state, driver = CASES[case]
    out, after = _run(PROBE, state, driver, libdirs, tmp_path / "lib")
    got = {"calls": out["calls"], "state": after}
    assert_answers(got, expected("libnvml_health", case, got))
    print("%s: %d answers as recorded" % (case, len(got["calls"])))


def test_the_faults_case_reaches_the_rules(libdirs, tmp_path):
    """The recorded answers are not vacuous: the fault state's answers are the readings and errors it was built for."""
    theirs = _run(PROBE, FAULTS, None, libdirs, tmp_path / "lib")[0]
    got = {c[0]: c[1:] for c in theirs["calls"]}
    assert got["nvmlDeviceGetComputeRunningProcesses/0"] == ["ok", [
        {"computeInstanceId": 0xFFFFFFFF, "gpuInstanceId": 0xFFFFFFFF, "pid": 4001, "usedGpuMemory": 2147483648},
        {"computeInstanceId": 0xFFFFFFFF, "gpuInstanceId": 0xFFFFFFFF, "pid": 4003, "usedGpuMemory": None},
        {"computeInstanceId": 0xFFFFFFFF, "gpuInstanceId": 0xFFFFFFFF, "pid": 4005, "usedGpuMemory": 0}]]
    assert [p["pid"] for p in got["nvmlDeviceGetGraphicsRunningProcesses_v2/0"][1]] == [4002, 4003]
    assert [p["pid"] for p in got["nvmlDeviceGetMPSComputeRunningProcesses_v3/0"][1]] == [4004]
    # v1: sizing call INSUFFICIENT_SIZE with the count, a one-record buffer too short, then the records
    assert got["v1 Compute/0"] == ["ok", [7, 3, 7, 3, 0, [[4001, 2147483648], [4003, 2 ** 64 - 1], [4005, 0]]]]
    assert got["nvmlDeviceGetComputeRunningProcesses_v2/3"][1][0]["gpuInstanceId"] == 1
    assert got["ecc11/0"] == ["ok", 30] and got["ecc10/0"] == ["ok", 3]
    assert got["ecc20/0"] == ["err", "NVMLError_InvalidArgument", 2]
    assert got["ecc00/1"] == ["err", "NVMLError_NotSupported", 3]          # ECC off
    assert got["nvmlDeviceGetEccMode/1"] == ["ok", [0, 1]]
    assert got["nvmlDeviceGetEccMode/2"] == ["err", "NVMLError_NotSupported", 3]
    assert got["nvmlDeviceGetRemappedRows/0"] == ["ok", [2, 1, 1, 1]]
    assert got["nvmlDeviceGetRemappedRows/3"] == ["err", "NVMLError_NotSupported", 3]  # MIG with an instance
    assert got["ecc00/3"] == ["err", "NVMLError_NotSupported", 3]          # ecc_volatile_in_mig: not_supported
    assert got["retired0/0"] == ["err", "NVMLError_NotSupported", 3]
    assert got["retired2/0"] == ["err", "NVMLError_InvalidArgument", 2]
    assert [got["nvmlDeviceGetCurrPcieLinkGeneration/0"][1], got["nvmlDeviceGetCurrPcieLinkWidth/0"][1]] == [3, 8]
    assert got["nvmlDeviceGetCurrPcieLinkGeneration/2"] == ["ok", 1]      # idle L40S downtrains
    assert got["nvmlDeviceGetMaxPcieLinkGeneration/2"] == ["ok", 3]       # host slot Gen3
    assert got["nvmlDeviceGetGpuMaxPcieLinkGeneration/2"] == ["ok", 4]
    assert got["nvmlDeviceGetCurrentClocksEventReasons/0"] == ["ok", 0x8 | 0x20 | 0x40]
    assert got["nvmlDeviceGetCurrentClocksEventReasons/1"] == ["ok", 0x4 | 0x80]
    assert got["threshold2/2"] == ["err", "NVMLError_NotSupported", 3]    # L40S: no memory sensor
    assert got["temperature1/0"] == ["err", "NVMLError_InvalidArgument", 2]
    assert got["nvmlDeviceGetPersistenceMode/0"] == ["ok", 0]
    lic = got["nvmlDeviceGetGridLicensableFeatures/0"][1]
    assert lic["isGridLicenseSupported"] == 1 and lic["licensableFeaturesCount"] == 1
    assert lic["gridLicensableFeatures"][0]["licenseExpiry"] == {
        "year": 2027, "month": 3, "day": 4, "hour": 5, "min": 6, "sec": 7, "status": 2}
    assert lic["gridLicensableFeatures"][0]["productName"] == "NVIDIA Virtual Compute Server"
    assert got["nvmlDeviceGetGridLicensableFeatures/1"][1]["gridLicensableFeatures"][0]["licenseExpiry"]["status"] == 4
    assert got["nvmlDeviceGetVirtualizationMode/0"] == ["ok", 2]
    assert got["nvmlDeviceGetHostVgpuMode/0"] == ["err", "NVMLError_NotSupported", 3]
    assert got["handle4"] == ["err", "NVMLError_GpuIsLost", 15] and got["handle5"] == ["err", "NVMLError_Unknown", 999]
    assert got["after_shutdown_processes"] == ["err", "NVMLError_Uninitialized", 1]
    assert got["nvmlDeviceGetComputeRunningProcesses_v3/0"][0] == "ok"
    old = _run(PROBE, dict(FAULTS, driver_version="535.98"), "535.98", libdirs, tmp_path / "535")[0]
    got = {c[0]: c[1:] for c in old["calls"]}
    assert got["nvmlDeviceGetComputeRunningProcesses/0"] == ["exc", "NVMLLibraryMismatchError"]
    assert got["nvmlDeviceGetMPSComputeRunningProcesses_v3/0"] == ["err", "NVMLError_FunctionNotFound", 13]
    assert got["nvmlDeviceGetComputeRunningProcesses_v2/0"][0] == "ok"


# The product's readings (plugins/module_utils/_gpu/nvml.py) through whichever pynvml the interpreter imports: the
# collection from build/collections, nothing else added to sys.path (-I leaves PYTHONPATH out).
PRODUCT = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.gpuops.provision.plugins.module_utils._gpu import nvml
nvml = nvml.Nvml()
assert nvml.open(), nvml.reason
out = {"file": nvml.nv.__file__, "gpus": []}
for i in range(nvml.count()):
    device = nvml.device(i)
    try:
        nvml.nv.nvmlDeviceGetComputeRunningProcesses(device.handle)
        plain = "ok"
    except Exception as e:  # pylint: disable=broad-except
        plain = type(e).__name__
    out["gpus"].append({"plain_unversioned_call": plain, "processes": nvml.processes(device, strict=True),
                        "health": nvml.health(device), "virtualization": nvml.virtualization(device),
                        "licence": nvml.licence(device), "vgpu_scheduler": nvml.vgpu_scheduler(device),
                        "architecture": nvml.architecture(device), "cc": nvml.compute_capability(device)})
out["process_calls"] = {k: v for k, v in sorted(nvml.call_counts.items()) if "RunningProcesses" in k}
nvml.close()
print(json.dumps(out))
'''
FALLBACK = {"gpus": [{"model": A100, "processes": PROCS[:3]}, {"model": L40S, "processes": [{"pid": 77}]},
                     {"model": H100}]}


@pytest.mark.parametrize("driver", ["535.98", "550.163.01"])
def test_the_products_process_list_falls_back_to_v2_on_a_driver_without_v3(driver, libdirs, tmp_path):
    """Issue 42 item 5: on 535.98 (no _v3 process symbols) the real binding's unversioned process list raises
    NVMLLibraryMismatchError, and the product's listing (Nvml.processes -> _process_list) goes on to the _v2 symbol
    and returns the state's processes; on 550.163.01 the unversioned call works. Everything else the product reads
    (health, virtualization, licence, scheduler, architecture) and the state file afterwards are as recorded."""
    state = dict(FALLBACK, driver_version=driver)
    theirs, their_state = _run(PRODUCT, state, driver, libdirs, tmp_path / "lib", str(COLLECTIONS))
    print(json.dumps({"driver": driver, "library": {k: theirs[k] for k in ("file", "process_calls")},
                      "gpus": [{k: g[k] for k in ("plain_unversioned_call", "processes")} for g in theirs["gpus"]]}))
    got = {"gpus": theirs["gpus"], "process_calls": theirs["process_calls"], "state": their_state}
    assert got == expected("libnvml_health", "product@" + driver, got)
    plain = "NVMLLibraryMismatchError" if driver == "535.98" else "ok"
    assert [g["plain_unversioned_call"] for g in theirs["gpus"]] == [plain] * 3
    assert theirs["gpus"][0]["processes"] == [
        {"pid": 4001, "type": "compute", "used_memory_bytes": 2147483648, "gpu_instance_id": None,
         "compute_instance_id": None},
        {"pid": 4002, "type": "graphics", "used_memory_bytes": 1048576, "gpu_instance_id": None,
         "compute_instance_id": None},
        {"pid": 4003, "type": "compute", "used_memory_bytes": None, "gpu_instance_id": None,
         "compute_instance_id": None}]
    assert [p["pid"] for p in theirs["gpus"][1]["processes"]] == [77] and theirs["gpus"][2]["processes"] == []
    v2 = {"nvmlDeviceGetComputeRunningProcesses_v2": 3, "nvmlDeviceGetGraphicsRunningProcesses_v2": 3}
    if driver == "535.98":
        assert {k: theirs["process_calls"].get(k) for k in v2} == v2
    else:
        assert not set(v2) & set(theirs["process_calls"])


def test_the_vgpu_host_case_reaches_the_scheduler_rules(libdirs, tmp_path):
    """The vGPU host answers are the scheduler the loaded RmPVMRL value runs, in the union member arrMode names."""
    theirs = _run(PROBE, VGPU_HOSTS, None, libdirs, tmp_path / "lib")[0]
    got = {c[0]: c[1:] for c in theirs["calls"]}
    arr = got["nvmlDeviceGetVgpuSchedulerState/0"][1]
    assert arr["arrMode"] == 2 and arr["schedulerParams"]["vgpuSchedDataWithARR"]["avgFactor"] > 0
    legacy = got["nvmlDeviceGetVgpuSchedulerState/1"][1]
    assert legacy["arrMode"] == 1 and legacy["schedulerParams"]["vgpuSchedData"]["timeslice"] == 10 * 1000000
    assert got["nvmlDeviceGetVgpuSchedulerState/3"] == ["ok", {"schedulerPolicy": 1, "arrMode": 0, "schedulerParams": {
        "vgpuSchedDataWithARR": {"avgFactor": 0, "timeslice": 0}, "vgpuSchedData": {"timeslice": 0}}}]
    assert got["nvmlDeviceGetVgpuSchedulerCapabilities/2"][1]["supportedSchedulers"] == [1, 2, 0]
    assert got["nvmlDeviceGetHostVgpuMode/0"] == ["ok", 1] and got["nvmlDeviceGetHostVgpuMode/4"] == ["ok", 0]
    assert got["nvmlDeviceGetVgpuSchedulerState/5"] == ["err", "NVMLError_NotSupported", 3]   # host_vsga
    bad = _run(PROBE, BAD_UNIT, None, libdirs, tmp_path / "bad")[0]
    assert {c[0]: c[1:] for c in bad["calls"]}["nvmlDeviceGetVgpuSchedulerState/0"] == ["err", "NVMLError_Unknown", 999]


C_ABI = r'''
import ctypes, json
lib = ctypes.CDLL("libnvidia-ml.so.1")
r = {}
h = ctypes.c_void_p()
count = ctypes.c_uint(0)
r["uninit"] = lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(count), None)
lib.nvmlInit_v2()
lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
r["count_null"] = lib.nvmlDeviceGetComputeRunningProcesses_v2(h, None, None)
r["foreign_handle"] = lib.nvmlDeviceGetComputeRunningProcesses_v2(ctypes.c_void_p(12345), ctypes.byref(count), None)
r["ecc_null"] = lib.nvmlDeviceGetEccMode(h, None, ctypes.byref(ctypes.c_uint()))
buf = ctypes.create_string_buffer(30)
r["serial_short"] = lib.nvmlDeviceGetSerial(h, buf, ctypes.c_uint(5))
# a buffer big enough but a count that says otherwise: INSUFFICIENT_SIZE with the count needed, nothing written
infos = (ctypes.c_uint * 64)(*([7] * 64))
count = ctypes.c_uint(1)
r["short_count"] = [lib.nvmlDeviceGetComputeRunningProcesses_v2(h, ctypes.byref(count), infos), count.value,
                    infos[0]]
lic = ctypes.create_string_buffer(1500)
r["licence_null"] = lib.nvmlDeviceGetGridLicensableFeatures_v4(h, None)
r["sched_not_host"] = lib.nvmlDeviceGetVgpuSchedulerState(h, lic)
print(json.dumps(r))
'''


def test_c_abi_rules_of_the_new_entry_points(libdirs, tmp_path):
    """nvml.h rules only the C ABI has, for the new entry points: UNINITIALIZED before init, INVALID_ARGUMENT for NULL
    out-pointers and foreign handles, INSUFFICIENT_SIZE for a short serial buffer and an infoCount below the list."""
    path = tmp_path / "gpusim.json"
    path.write_text(json.dumps({"gpus": [{"model": A100, "processes": [PROCS[0], PROCS[2]]}]}))
    proc = subprocess.run([sys.executable, "-I", "-c", C_ABI], env=lib_env(libdirs[libnvml_build.DEFAULT_DRIVER], path),
                          capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(proc.stdout) == {
        "uninit": 1, "count_null": 2, "foreign_handle": 2, "ecc_null": 2, "serial_short": 7, "short_count": [7, 2, 7],
        "licence_null": 2, "sched_not_host": 3}
