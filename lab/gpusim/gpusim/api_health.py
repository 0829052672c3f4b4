"""NVML's process lists, health readings and virtualization / vGPU / licence answers over gpusim's state, in the C
API's terms (plain values, NVML return codes as :class:`gpusim.machine.Fault`), like ``api.py``.

One rule per entry point (issue 42): the library's ``capi.py`` answers from these, and ``libnvml/processes.c``,
``health.c`` and ``vgpu.c`` put the values in nvml.h's structures. The health rules themselves and their sources are ``health.py``'s; the vGPU
scheduler's ``vgpu_sched.py``'s. ``key`` is a device handle key (api.py: ``("gpu", uuid)`` or ``("mig", ...)``).
"""

from __future__ import annotations

import datetime

from . import api, health, machine, vgpu_sched
from .machine import Fault

# nvml.h nvmlReturn_t / enum values used here (same values as nvidia-ml-py)
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
UNKNOWN = 999
FEATURE_DISABLED = 0
FEATURE_ENABLED = 1
BRAND_NVIDIA = 14              # nvmlBrandType_t NVML_BRAND_NVIDIA
VALUE_NOT_AVAILABLE_UINT = 0xFFFFFFFF           # nvidia-ml-py NVML_VALUE_NOT_AVAILABLE_uint
VALUE_NOT_AVAILABLE_ULL = 0xFFFFFFFFFFFFFFFF    # NVML_VALUE_NOT_AVAILABLE_ulonglong
PAGE_RETIREMENT_CAUSE_COUNT = 2                 # nvmlPageRetirementCause_t
TEMPERATURE_GPU = 0                             # nvmlTemperatureSensors_t
VIRTUALIZATION_MODE_HOST_VGPU = 3               # nvmlGpuVirtualizationMode_t
ARR_DISABLE = 1                                 # NVML_VGPU_SCHEDULER_ARR_DISABLE
SUPPORTED_VGPU_SCHEDULER_POLICY_COUNT = 3       # NVML_SUPPORTED_VGPU_SCHEDULER_POLICY_COUNT
# nvmlGridLicenseExpiry_t.status: NVML_GRID_LICENSE_EXPIRY_NOT_AVAILABLE / VALID / PERMANENT
EXPIRY_NOT_AVAILABLE, EXPIRY_VALID, EXPIRY_PERMANENT = 0, 2, 4
CLOCKS_EVENT_REASON_ALL = health.REASONS_ALL


def _answer(code_value, what=""):
    """health.py's (code, value) pairs: the value, or the Fault of the code (its text, else ``what``)."""
    code, value = code_value
    if code is not None:
        raise Fault(code, value if isinstance(value, str) else what)
    return value


def _gpu(st, key, allow_mig=False):
    return api.device(st, key, allow_mig)[0]


# ---------------------------------------------------------------- processes
def process_records(st, key, kind):
    """The state's process records that nvmlDevice{Compute,Graphics,MPSCompute}RunningProcesses list for a GPU or MIG
    device handle: ``kind`` "compute", "graphics" or "mps". nvml.h: the compute list has processes "which have
    active context", the graphics list "only ... graphics based processes", the MPS list "compute running processes
    ... utilizing MPS"; a record's ``type`` (default compute) says which, ``compute+graphics`` (both contexts) is in
    the compute and the graphics list, ``mps`` only in the MPS list. A MIG device lists the processes of its own
    GPU/compute instance (nvml.h @note "Per-instance information can be queried by using specific MIG device
    handles")."""
    g, mig = api.device(st, key, allow_mig=True)
    # faults.fail_processes_after: a process list NVML refuses (e.g. NO_PERMISSION for a non-root caller).
    machine.inject(st, "processes")
    out = []
    for p in g["processes"]:
        if p.get("type", "compute") not in (kind, "compute+graphics" if kind != "mps" else None):
            continue
        if mig and (p.get("gpu_instance_id") != mig[0]["id"]
                    or p.get("compute_instance_id", mig[1]["id"]) != mig[1]["id"]):
            continue
        out.append(p)
    return out


def process_list(st, key, kind):
    """[(pid, usedGpuMemory, gpuInstanceId, computeInstanceId)] as nvml.h nvmlProcessInfo_v2_t holds them: memory
    NVML_VALUE_NOT_AVAILABLE when the state gives none (nvml.h: "Under WDDM, NVML_VALUE_NOT_AVAILABLE is always
    reported"; nvidia-ml-py turns it into None), the instance ids 0xFFFFFFFF outside MIG ("set to 0xFFFFFFFF
    otherwise")."""
    return [(int(p["pid"]),
             int(p["used_memory"]) if p.get("used_memory") is not None else VALUE_NOT_AVAILABLE_ULL,
             int(p.get("gpu_instance_id", VALUE_NOT_AVAILABLE_UINT)),
             int(p.get("compute_instance_id", VALUE_NOT_AVAILABLE_UINT)))
            for p in process_records(st, key, kind)]


# ---------------------------------------------------------------- identity
def index(st, key):
    """nvmlDeviceGetIndex: the position among the GPUs NVML enumerates (health.visible)."""
    return health.visible(st).index(_gpu(st, key))


def serial(st, key):
    return _gpu(st, key)["serial"]


def minor_number(st, key):
    return _gpu(st, key)["minor_number"]


def brand(st, key):
    """nvmlDeviceGetBrand: every gpusim model is a data-centre part, NVML_BRAND_NVIDIA on current drivers."""
    _gpu(st, key)
    return BRAND_NVIDIA


def architecture(st, key):
    return machine.model_of(_gpu(st, key, allow_mig=True)).arch


def cuda_compute_capability(st, key):
    return tuple(machine.model_of(_gpu(st, key, allow_mig=True)).cuda_cc)


def persistence_mode(st, key):
    return FEATURE_ENABLED if _gpu(st, key)["persistence_mode"] else FEATURE_DISABLED


# ---------------------------------------------------------------- health readings (rules and sources: health.py)
def ecc_mode(st, key):
    """[current, pending] (health.ecc_mode)."""
    return _answer(health.ecc_mode(_gpu(st, key)), "no ECC on this GPU")


def default_ecc_mode(st, key):
    """nvmlDeviceGetDefaultEccMode: every gpusim model ships with ECC on (health.HEALTH_MODELS)."""
    ecc_mode(st, key)
    return FEATURE_ENABLED


def total_ecc_errors(st, key, error_type, counter_type):
    g = _gpu(st, key)
    return _answer(health.total_ecc_errors(st, g, int(error_type), int(counter_type)))


def remapped_rows(st, key):
    g = _gpu(st, key)
    return _answer(health.remapped_rows(st, g, machine.model_of(g).arch))


def retired_pages(st, key, cause):
    """nvmlDeviceGetRetiredPages[_v2]: [(address, timestamp)]; INVALID_ARGUMENT "if ... cause is invalid",
    NOT_SUPPORTED on row-remapping GPUs (health.retired_pages_supported). gpusim keeps no retired pages."""
    g = _gpu(st, key)
    if not 0 <= int(cause) < PAGE_RETIREMENT_CAUSE_COUNT:
        raise Fault(INVALID_ARGUMENT, "cause out of range")
    if not health.retired_pages_supported(machine.model_of(g).arch):
        raise Fault(NOT_SUPPORTED, "%s uses row remapping, not page retirement" % g["model"])
    return []


def retired_pages_pending(st, key):
    g = _gpu(st, key)
    if not health.retired_pages_supported(machine.model_of(g).arch):
        raise Fault(NOT_SUPPORTED, "%s uses row remapping, not page retirement" % g["model"])
    return FEATURE_DISABLED


def pcie(st, key):
    """(curr gen, curr width, max gen, max width, GPU max gen) (health.pcie)."""
    return health.pcie(_gpu(st, key))


def temperature(st, key, sensor):
    g = _gpu(st, key)
    # nvml.h nvmlTemperatureSensors_t has NVML_TEMPERATURE_GPU only (COUNT = 1).
    if int(sensor) != TEMPERATURE_GPU:
        raise Fault(INVALID_ARGUMENT, "sensorType %d is not a sensor" % int(sensor))
    return g["temperature"]


def temperature_threshold(st, key, threshold):
    return _answer(health.temperature_threshold(_gpu(st, key), int(threshold)))


def clocks_event_reasons(st, key):
    """nvmlDeviceGetCurrentClocksEventReasons and its deprecated name ...ThrottleReasons (health.py)."""
    return health.clocks_event_reasons(_gpu(st, key))


def supported_clocks_event_reasons(st, key):
    """nvmlDeviceGetSupportedClocksEventReasons: every nvmlClocksEventReason bit."""
    _gpu(st, key)
    return CLOCKS_EVENT_REASON_ALL


# ---------------------------------------------------------------- virtualization / licensing
VIRT = {"none": 0, "passthrough": 1, "vgpu": 2, "host_vgpu": 3, "host_vsga": 4}
HOST_VGPU = {"non_sriov": 0, "sriov": 1}
FEATURE = {"unknown": 0, "vgpu": 1, "nvidia_rtx": 2, "vworkstation": 2, "gaming": 3, "compute": 4, "vgamedev": 5}
PRODUCT = {1: ("NVIDIA Virtual PC", "GRID-Virtual-PC,2.0"), 2: ("NVIDIA RTX Virtual Workstation", "Quadro-Virtual-DWS,5.0"),
           3: ("NVIDIA Cloud Gaming", "GRID-Gaming,1.0"), 4: ("NVIDIA Virtual Compute Server", "NVIDIA-vComputeServer,9.0"),
           5: ("NVIDIA RTX Virtual Game Dev", "NVIDIA-vGameDev,1.0"), 0: ("", "")}


def _enum(value, table, what):
    if isinstance(value, int):
        return value
    try:
        return table[str(value).lower()]
    except KeyError:
        raise Fault(UNKNOWN, "state: bad %s %r" % (what, value)) from None


def virtualization_mode(st, key):
    return _enum(_gpu(st, key)["virtualization_mode"], VIRT, "virtualization_mode")


def host_vgpu_mode(st, key):
    g = _gpu(st, key)
    if _enum(g["virtualization_mode"], VIRT, "virtualization_mode") != VIRTUALIZATION_MODE_HOST_VGPU:
        raise Fault(NOT_SUPPORTED, "not a vGPU host")
    return _enum(g["host_vgpu_mode"], HOST_VGPU, "host_vgpu_mode")


def grid_licensable_features(st, key):
    """nvmlDeviceGetGridLicensableFeatures_v4 as a dict of nvmlGridLicensableFeatures_t: isGridLicenseSupported and
    the features (at most one here: the state's `license`), each with nvmlGridLicensableFeature_t's fields and
    licenseExpiry as a dict of nvmlGridLicenseExpiry_t. No `license`: not supported, no features."""
    g = _gpu(st, key)
    lic = g.get("license")
    if not lic:
        return {"isGridLicenseSupported": 0, "features": []}
    code = _enum(lic.get("feature", "compute"), FEATURE, "license feature")
    product, info = PRODUCT.get(code, ("", ""))
    expiry = {"year": 0, "month": 0, "day": 0, "hour": 0, "min": 0, "sec": 0}
    exp = lic.get("expiry")
    if lic.get("licensed") and exp:
        t = datetime.datetime.fromisoformat(str(exp).replace("Z", "+00:00"))
        expiry = {"year": t.year, "month": t.month, "day": t.day, "hour": t.hour, "min": t.minute, "sec": t.second}
        expiry["status"] = EXPIRY_VALID
    elif lic.get("licensed"):
        expiry["status"] = EXPIRY_PERMANENT
    else:
        expiry["status"] = EXPIRY_NOT_AVAILABLE
    return {"isGridLicenseSupported": 1, "features": [{
        "featureCode": code, "featureState": 1 if lic.get("licensed") else 0,
        "licenseInfo": lic.get("license_info", info), "productName": lic.get("product_name", product),
        "featureEnabled": 1, "licenseExpiry": expiry}]}


def _vgpu_host(st, key):
    """The GPU of a vGPU host; others answer NOT_SUPPORTED (the scheduler queries are "for Pascal or newer fully
    supported devices" on a hypervisor running the vGPU manager)."""
    g = _gpu(st, key)
    if _enum(g["virtualization_mode"], VIRT, "virtualization_mode") != VIRTUALIZATION_MODE_HOST_VGPU:
        raise Fault(NOT_SUPPORTED, "not a vGPU host")
    return g


def _sched(fn):
    try:
        return fn()
    except vgpu_sched.SchedError as e:
        raise Fault(UNKNOWN, "state: %s" % e) from None


def vgpu_scheduler_state(st, key):
    """nvmlDeviceGetVgpuSchedulerState: (schedulerPolicy, arrMode, timeslice, avgFactor) (vgpu_sched.running). In
    nvmlVgpuSchedulerGetState_t's union, arrMode DISABLE fills vgpuSchedData {timeslice}, the others
    vgpuSchedDataWithARR {avgFactor, timeslice}."""
    return _sched(lambda: vgpu_sched.running(st, _vgpu_host(st, key)))


def vgpu_scheduler_capabilities(st, key):
    """nvmlDeviceGetVgpuSchedulerCapabilities as nvmlVgpuSchedulerCapabilities_t's fields (vgpu_sched.capabilities);
    supportedSchedulers holds NVML_SUPPORTED_VGPU_SCHEDULER_POLICY_COUNT entries, unused ones 0."""
    caps = _sched(lambda: vgpu_sched.capabilities(st, _vgpu_host(st, key)))
    policies = list(caps["policies"][:SUPPORTED_VGPU_SCHEDULER_POLICY_COUNT])
    return {"supportedSchedulers": policies + [0] * (SUPPORTED_VGPU_SCHEDULER_POLICY_COUNT - len(policies)),
            "maxTimeslice": caps["max_timeslice"], "minTimeslice": caps["min_timeslice"],
            "isArrModeSupported": 1 if caps["arr"] else 0,
            "maxFrequencyForARR": caps["max_frequency"], "minFrequencyForARR": caps["min_frequency"],
            "maxAvgFactorForARR": caps["max_avg"], "minAvgFactorForARR": caps["min_avg"]}
