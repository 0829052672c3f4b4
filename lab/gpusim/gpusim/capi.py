"""The Python side of gpusim's libnvidia-ml.so.1 (lab/gpusim/libnvml): one entry per exported C function.

``libnvml.c`` calls :func:`call` with the C function's name and its input arguments (unsigned ints, strings, device
handle keys as the JSON text the library interned); the answer is a tuple ``(nvmlReturn_t, out values...)`` in the
order the C function's out-parameters take them. The rules are gpusim's own (api.py, machine.py, health.py, state.py):
this file only says which state access each entry point makes (read, or a transaction for a mutation).

The library keeps what a real libnvidia-ml keeps per process: the init refcount, the handles (one pointer per key), the
buffer-size checks of string outputs and NULL-pointer checks (nvml.h "NVML_ERROR_INVALID_ARGUMENT if ... is NULL").
Which entry points exist at all is the library build's export list (per driver branch, gpusim/symbols.py).

``GPUSIM_TRACE=1`` prints every call, its code and gpusim's reason to stderr (read at each call, so a test can turn it
on in a process that already loaded gpusim), one line each: ``gpusim libnvidia-ml: <name><inputs> -> <answer> <why>``.
"""

from __future__ import annotations

import json
import os
import sys
import time

from . import api, api_events, api_health, api_mig, state
from .machine import Fault


def _key(text):
    try:
        key = tuple(json.loads(text))
    except (TypeError, ValueError):
        raise Fault(api.INVALID_ARGUMENT, "invalid handle") from None
    return key


def _handle(key):
    return json.dumps(list(key))


def _read(fn):
    return lambda *args: fn(state.load(), *args)


def _mutate(fn):
    def run(*args):
        with state.transaction() as st:
            return fn(st, *args)
    return run


def _init(_flags):
    api.init_check()
    return ()


def _memory(st, key):
    total, used = api.memory(st, _key(key))
    return (total, total - used, used)


def _memory_v2(st, key, version):
    api.memory_v2_check(version)
    total, used = api.memory(st, _key(key))
    return (total, 0, total - used, used)


def _pci_v3(st, key):
    p = api.pci_info(api.device(st, _key(key))[0])
    return (p["busIdLegacy"], p["domain"], p["bus"], p["device"], p["pciDeviceId"], p["pciSubSystemId"], p["busId"])


FUNCTIONS = {
    # name: fn(*inputs) -> tuple of outputs (raises Fault)
    "nvmlInitWithFlags": _init,
    "nvmlErrorString": lambda code: (api.error_string(code),),
    "nvmlSystemGetDriverVersion": _read(lambda st: (api.driver_version(st),)),
    "nvmlSystemGetNVMLVersion": _read(lambda st: (api.nvml_version(st),)),
    "nvmlSystemGetCudaDriverVersion": _read(lambda st: (api.cuda_version(st),)),
    "nvmlDeviceGetCount_v2": _read(lambda st: (api.device_count(st),)),
    "nvmlDeviceGetHandleByIndex_v2": _read(lambda st, i: (_handle(api.handle_by_index(st, i)),)),
    "nvmlDeviceGetHandleByPciBusId_v2": _read(lambda st, bus: (_handle(api.handle_by_pci_bus_id(st, bus)),)),
    "nvmlDeviceGetHandleByUUID": _read(lambda st, uuid: (_handle(api.handle_by_uuid(st, uuid)),)),
    "nvmlDeviceGetName": _read(lambda st, k: (api.name(st, _key(k)),)),
    "nvmlDeviceGetUUID": _read(lambda st, k: (api.uuid(st, _key(k)),)),
    "nvmlDeviceGetPciInfo_v3": _read(_pci_v3),
    "nvmlDeviceGetMemoryInfo": _read(_memory),
    "nvmlDeviceGetMemoryInfo_v2": _read(_memory_v2),
    "nvmlDeviceGetMigMode": _read(lambda st, k: tuple(api.mig_mode(st, _key(k)))),
    "nvmlDeviceSetMigMode": _mutate(lambda st, k, mode: (api.set_mig_mode(st, _key(k), mode),)),
}


# ---------------------------------------------------------------- processes, health readings, virtualization / vGPU
# (rules: api_health.py; C: libnvml/processes.c, health.c, vgpu.c). A list is one flat tuple (gcall's 'L').


def _processes(kind):
    return _read(lambda st, k: (tuple(v for p in api_health.process_list(st, _key(k), kind) for v in p),))


def _retired_pages(st, key, cause):
    return (tuple(v for page in api_health.retired_pages(st, _key(key), cause) for v in page),)


def _licence(st, key):
    lic = api_health.grid_licensable_features(st, _key(key))
    f = lic["features"][0] if lic["features"] else {
        "featureCode": 0, "featureState": 0, "licenseInfo": "", "productName": "", "featureEnabled": 0,
        "licenseExpiry": {"year": 0, "month": 0, "day": 0, "hour": 0, "min": 0, "sec": 0, "status": 0}}
    e = f["licenseExpiry"]
    return (lic["isGridLicenseSupported"], len(lic["features"]), f["featureCode"], f["featureState"], f["licenseInfo"],
            f["productName"], f["featureEnabled"], e["year"], e["month"], e["day"], e["hour"], e["min"], e["sec"],
            e["status"])


def _sched_caps(st, key):
    c = api_health.vgpu_scheduler_capabilities(st, _key(key))
    return (*c["supportedSchedulers"], c["maxTimeslice"], c["minTimeslice"], c["isArrModeSupported"],
            c["maxFrequencyForARR"], c["minFrequencyForARR"], c["maxAvgFactorForARR"], c["minAvgFactorForARR"])


def _one(fn):
    """An entry point with one out value: fn(st, key, *inputs)."""
    return _read(lambda st, k, *args: (fn(st, _key(k), *args),))


def _pcie(i):
    return _one(lambda st, key: api_health.pcie(st, key)[i])


_HEALTH = {
    "nvmlDeviceGetIndex": _one(api_health.index),
    "nvmlDeviceGetSerial": _one(api_health.serial),
    "nvmlDeviceGetMinorNumber": _one(api_health.minor_number),
    "nvmlDeviceGetBrand": _one(api_health.brand),
    "nvmlDeviceGetArchitecture": _one(api_health.architecture),
    "nvmlDeviceGetCudaComputeCapability": _read(lambda st, k: api_health.cuda_compute_capability(st, _key(k))),
    "nvmlDeviceGetPersistenceMode": _one(api_health.persistence_mode),
    "nvmlDeviceGetEccMode": _read(lambda st, k: tuple(api_health.ecc_mode(st, _key(k)))),
    "nvmlDeviceGetDefaultEccMode": _one(api_health.default_ecc_mode),
    "nvmlDeviceGetTotalEccErrors": _one(api_health.total_ecc_errors),
    "nvmlDeviceGetRemappedRows": _read(lambda st, k: tuple(api_health.remapped_rows(st, _key(k)))),
    "nvmlDeviceGetRetiredPages": _read(_retired_pages),
    "nvmlDeviceGetRetiredPages_v2": _read(_retired_pages),
    "nvmlDeviceGetRetiredPagesPendingStatus": _one(api_health.retired_pages_pending),
    "nvmlDeviceGetCurrPcieLinkGeneration": _pcie(0),
    "nvmlDeviceGetCurrPcieLinkWidth": _pcie(1),
    "nvmlDeviceGetMaxPcieLinkGeneration": _pcie(2),
    "nvmlDeviceGetMaxPcieLinkWidth": _pcie(3),
    "nvmlDeviceGetGpuMaxPcieLinkGeneration": _pcie(4),
    "nvmlDeviceGetTemperature": _one(api_health.temperature),
    "nvmlDeviceGetTemperatureThreshold": _one(api_health.temperature_threshold),
    "nvmlDeviceGetCurrentClocksEventReasons": _one(api_health.clocks_event_reasons),
    "nvmlDeviceGetCurrentClocksThrottleReasons": _one(api_health.clocks_event_reasons),
    "nvmlDeviceGetSupportedClocksEventReasons": _one(api_health.supported_clocks_event_reasons),
    "nvmlDeviceGetSupportedClocksThrottleReasons": _one(api_health.supported_clocks_event_reasons),
    "nvmlDeviceGetVirtualizationMode": _one(api_health.virtualization_mode),
    "nvmlDeviceGetHostVgpuMode": _one(api_health.host_vgpu_mode),
    "nvmlDeviceGetGridLicensableFeatures_v4": _read(_licence),
    "nvmlDeviceGetVgpuSchedulerState": _read(lambda st, k: tuple(api_health.vgpu_scheduler_state(st, _key(k)))),
    "nvmlDeviceGetVgpuSchedulerCapabilities": _read(_sched_caps),
}
for _kind, _names in (("compute", "Compute"), ("graphics", "Graphics"), ("mps", "MPSCompute")):
    for _suffix in ("", "_v2", "_v3"):
        _HEALTH["nvmlDeviceGet%sRunningProcesses%s" % (_names, _suffix)] = _processes(_kind)
FUNCTIONS.update(_HEALTH)
# ---------------------------------------------------------------- GPU instances, compute instances, MIG devices
# lab/gpusim/libnvml/mig.c; the rules are gpusim/api_mig.py. Struct outputs go in nvml.h's
# field order; arrays of handles and placements are lists (gcall's 'K' and 'P').


def _gi_profile(f, named=True):
    out = (f["id"], f["isP2pSupported"], f["sliceCount"], f["instanceCount"], f["multiprocessorCount"],
           f["copyEngineCount"], f["decoderCount"], f["encoderCount"], f["jpegCount"], f["ofaCount"], f["memorySizeMB"])
    return out + (f["name"],) if named else out


def _ci_profile(f, named=True):
    out = (f["id"], f["sliceCount"], f["instanceCount"], f["multiprocessorCount"], f["sharedCopyEngineCount"],
           f["sharedDecoderCount"], f["sharedEncoderCount"], f["sharedJpegCount"], f["sharedOfaCount"])
    return out + (f["name"],) if named else out


def _gi_profile_v(st, k, index, version):
    api_mig.version_check(version, api_mig.GPU_INSTANCE_PROFILE_INFO_V2)
    return _gi_profile(api_mig.gi_profile_info(st, _key(k), index))


def _ci_profile_v(st, k, profile, eng, version):
    api_mig.version_check(version, api_mig.COMPUTE_INSTANCE_PROFILE_INFO_V2)
    return _ci_profile(api_mig.ci_profile_info(st, _key(k), profile, eng))


def _gi_info(st, k):
    f = api_mig.gi_info(st, _key(k))
    return (_handle(f["device"]), f["id"], f["profileId"]) + tuple(f["placement"])


def _ci_info(st, k):
    f = api_mig.ci_info(st, _key(k))
    return (_handle(f["device"]), _handle(f["gpuInstance"]), f["id"], f["profileId"]) + tuple(f["placement"])


def _attributes(st, k):
    f = api_mig.attributes(st, _key(k))
    return tuple(f[n] for n in ("multiprocessorCount", "sharedCopyEngineCount", "sharedDecoderCount",
                                "sharedEncoderCount", "sharedJpegCount", "sharedOfaCount", "gpuInstanceSliceCount",
                                "computeInstanceSliceCount", "memorySizeMB"))


def _gi_placements(st, k, profile_id):
    return ([list(p) for p in api_mig.gi_possible_placements(st, _key(k), profile_id)],)


def _keys(keys):
    return ([_handle(k) for k in keys],)


_MIG = {
    "nvmlDeviceGetGpuInstanceProfileInfo": _read(lambda st, k, i: _gi_profile(api_mig.gi_profile_info(st, _key(k), i),
                                                                              named=False)),
    "nvmlDeviceGetGpuInstanceProfileInfoV": _read(_gi_profile_v),
    "nvmlDeviceGetGpuInstancePossiblePlacements": _read(_gi_placements),
    "nvmlDeviceGetGpuInstancePossiblePlacements_v2": _read(_gi_placements),
    "nvmlDeviceGetGpuInstanceRemainingCapacity": _read(lambda st, k, p: (api_mig.gi_remaining_capacity(st, _key(k), p),)),
    "nvmlDeviceCreateGpuInstance": _mutate(lambda st, k, p: (_handle(api_mig.create_gi(st, _key(k), p)),)),
    "nvmlDeviceCreateGpuInstanceWithPlacement": _mutate(
        lambda st, k, p, start, size: (_handle(api_mig.create_gi(st, _key(k), p, (start, size))),)),
    "nvmlGpuInstanceDestroy": _mutate(lambda st, k: api_mig.destroy_gi(st, _key(k)) or ()),
    "nvmlDeviceGetGpuInstances": _read(lambda st, k, p: _keys(api_mig.gpu_instances(st, _key(k), p))),
    "nvmlDeviceGetGpuInstanceById": _read(lambda st, k, i: (_handle(api_mig.gpu_instance_by_id(st, _key(k), i)),)),
    "nvmlGpuInstanceGetInfo": _read(_gi_info),
    "nvmlGpuInstanceGetComputeInstanceProfileInfo": _read(
        lambda st, k, p, e: _ci_profile(api_mig.ci_profile_info(st, _key(k), p, e), named=False)),
    "nvmlGpuInstanceGetComputeInstanceProfileInfoV": _read(_ci_profile_v),
    "nvmlGpuInstanceGetComputeInstanceRemainingCapacity": _read(
        lambda st, k, p: (api_mig.ci_remaining_capacity(st, _key(k), p),)),
    "nvmlGpuInstanceGetComputeInstancePossiblePlacements": _read(
        lambda st, k, p: ([list(x) for x in api_mig.ci_possible_placements(st, _key(k), p)],)),
    "nvmlGpuInstanceCreateComputeInstance": _mutate(lambda st, k, p: (_handle(api_mig.create_ci(st, _key(k), p)),)),
    "nvmlGpuInstanceCreateComputeInstanceWithPlacement": _mutate(
        lambda st, k, p, start, size: (_handle(api_mig.create_ci(st, _key(k), p, (start, size))),)),
    "nvmlComputeInstanceDestroy": _mutate(lambda st, k: api_mig.destroy_ci(st, _key(k)) or ()),
    "nvmlGpuInstanceGetComputeInstances": _read(lambda st, k, p: _keys(api_mig.compute_instances(st, _key(k), p))),
    "nvmlGpuInstanceGetComputeInstanceById": _read(
        lambda st, k, i: (_handle(api_mig.compute_instance_by_id(st, _key(k), i)),)),
    "nvmlComputeInstanceGetInfo": _read(_ci_info),
    "nvmlComputeInstanceGetInfo_v2": _read(_ci_info),
    "nvmlDeviceIsMigDeviceHandle": _read(lambda st, k: (api_mig.is_mig_device_handle(st, _key(k)),)),
    "nvmlDeviceGetGpuInstanceId": _read(lambda st, k: (api_mig.mig_gpu_instance_id(st, _key(k)),)),
    "nvmlDeviceGetComputeInstanceId": _read(lambda st, k: (api_mig.mig_compute_instance_id(st, _key(k)),)),
    "nvmlDeviceGetMaxMigDeviceCount": _read(lambda st, k: (api_mig.max_mig_device_count(st, _key(k)),)),
    "nvmlDeviceGetMigDeviceHandleByIndex": _read(
        lambda st, k, i: (_handle(api_mig.mig_device_handle_by_index(st, _key(k), i)),)),
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle": _read(
        lambda st, k: (_handle(api_mig.device_handle_from_mig(st, _key(k))),)),
    "nvmlDeviceGetAttributes": _read(_attributes),
    "nvmlDeviceGetAttributes_v2": _read(_attributes),
}
FUNCTIONS.update(_MIG)

# ---------------------------------------------------------------- event sets
# lab/gpusim/libnvml/events.c; rules: gpusim/api_events.py. A set lives in this process (never in the state); the
# wait reads the state itself, again every api_events.POLL_S, so it is neither _read nor _mutate.


def _wait(set_key, timeout_ms):
    dev, kind, data, gi, ci = api_events.wait(_key(set_key), timeout_ms)
    return (_handle(dev), kind, data, gi, ci)


_EVENTS = {
    "nvmlEventSetCreate": lambda: (_handle(api_events.create()),),
    "nvmlDeviceGetSupportedEventTypes": _read(lambda st, k: (api_events.supported(st, _key(k)),)),
    "nvmlDeviceRegisterEvents": _read(lambda st, k, hi, lo, s: api_events.register(st, _key(k), hi << 32 | lo, _key(s))
                                      or ()),
    "nvmlEventSetWait_v2": _wait,
    "nvmlEventSetFree": lambda s: api_events.free(_key(s)) or (),
}
FUNCTIONS.update(_EVENTS)


# A test's gate in front of GPU instance creation (tests/integration/mig/test_mig_lock.py): with GPUSIM_GATE=<file> set
# and that file present, the call creates <file>.entered and waits until the test removes <file>, before it takes the
# state's lock. A run stopped there holds the product's per-host MIG lock in the middle of its apply, so "the first run
# is still applying" is a fact the test waits for, not a race against a timer.
_GATED = ("nvmlDeviceCreateGpuInstanceWithPlacement",)


def _gate(name):
    gate = os.environ.get("GPUSIM_GATE")
    if name in _GATED and gate and os.path.exists(gate):
        with open(gate + ".entered", "w", encoding="utf-8") as fh:
            fh.write(str(os.getpid()))
        while os.path.exists(gate):
            time.sleep(0.01)


def call(name, *args):
    """(code, outputs...) of the C entry point ``name``."""
    _gate(name)
    try:
        out = (api.SUCCESS,) + tuple(FUNCTIONS[name](*args))
        why = ""
    except Fault as f:
        out, why = (f.code,), f.why
    except state.StateError as e:
        out, why = (api.UNKNOWN,), str(e)
    if os.environ.get("GPUSIM_TRACE"):
        print("gpusim libnvidia-ml: %s%r -> %r %s" % (name, args, out, why), file=sys.stderr, flush=True)
    return out
