"""NVML's answers over gpusim's state, in the C API's terms: plain values, handle keys and NVML return codes.

The rules of the NVML entry points live here once (issue 42: gpusim answers below the C ABI, there is no Python
stand-in of nvidia-ml-py any more): ``capi.py``, the Python side of our ``libnvidia-ml.so.1`` (``lab/gpusim/libnvml``),
calls them. Nothing here knows about ctypes or the binding; a refused call raises :class:`gpusim.machine.Fault` with
the NVML return code.

A handle key is a tuple: ``("gpu", uuid)`` for a GPU, ``("mig", uuid, gi id, ci id)`` for a MIG device.
"""

from __future__ import annotations

from . import health, machine, models, state
from .machine import Fault

# nvml.h nvmlReturn_t values used here
SUCCESS = 0
UNINITIALIZED = 1
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
LIBRARY_NOT_FOUND = 12
ARGUMENT_VERSION_MISMATCH = 25
UNKNOWN = 999

# What libnvidia-ml's nvmlErrorString() returns. The first block is nvidia-ml-py's own table
# (NVMLError._errcode_to_string), which repeats the library's texts; the second the library's texts for the codes that
# table lacks (nvidia-ml-py asks nvmlErrorString for those).
ERROR_STRINGS = {
    1: "Uninitialized",
    2: "Invalid Argument",
    3: "Not Supported",
    4: "Insufficient Permissions",
    5: "Already Initialized",
    6: "Not Found",
    7: "Insufficient Size",
    8: "Insufficient External Power",
    9: "Driver Not Loaded",
    10: "Timeout",
    11: "Interrupt Request Issue",
    12: "NVML Shared Library Not Found",
    13: "Function Not Found",
    14: "Corrupted infoROM",
    15: "GPU is lost",
    16: "GPU requires restart",
    17: "The operating system has blocked the request.",
    18: "RM has detected an NVML/RM version mismatch.",
    20: "Insufficient Memory",
    999: "Unknown Error",
}
LIB_ERROR_STRINGS = {
    19: "In use by another client",
    21: "No data",
    22: "vGPU ECC not supported",
    23: "Insufficient resources",
    24: "Frequency not supported",
    25: "Argument version mismatch",
    26: "Deprecated",
    27: "Not ready",
    28: "GPU not found",
    29: "Invalid state",
    30: "Reset type not supported",
}

# nvml.h: nvmlMemory_v2 = NVML_STRUCT_VERSION(Memory, 2) = sizeof(nvmlMemory_v2_t) | 2 << 24
MEMORY_V2 = 0x02000028

# nvml.h NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT / NVML_DEVICE_PCI_BUS_ID_FMT
PCI_BUS_ID_LEGACY_FMT = "%04X:%02X:%02X.0"
PCI_BUS_ID_FMT = "%08X:%02X:%02X.0"


def error_string(code):
    return ERROR_STRINGS.get(code) or LIB_ERROR_STRINGS.get(code) or "Unknown Error"


# ---------------------------------------------------------------- init / system
def init_check(path=None):
    """What nvmlInit_v2 / nvmlInitWithFlags decide from the machine (the library's refcount is the caller's).

    A missing or unset state file is a host without NVIDIA userspace (LIBRARY_NOT_FOUND); `library_present: false`
    the same; `driver_loaded: false` DRIVER_NOT_LOADED; `faults.fail_init_after` the injected fault.
    """
    try:
        st = state.load(path)
    except state.StateError as e:
        if "does not exist" in str(e) or "is not set" in str(e):
            raise Fault(LIBRARY_NOT_FOUND, str(e)) from None
        raise Fault(UNKNOWN, str(e)) from None
    if not st["library_present"]:
        raise Fault(LIBRARY_NOT_FOUND, "libnvidia-ml.so.1 not found")
    if not st["driver_loaded"]:
        raise Fault(DRIVER_NOT_LOADED, "nvidia kernel module not loaded")
    if "fail_init_after" in st["faults"]:
        with state.transaction(path) as tst:
            machine.inject(tst, "init")


def cuda_version(st):
    if "cuda_driver_version" in st:
        return int(st["cuda_driver_version"])
    branch = int(st["driver_version"].split(".")[0])
    # CUDA version each driver branch ships (R525 = 12.0 ... R580 = 13.0).
    table = ((580, 13000), (575, 12090), (570, 12080), (565, 12070), (560, 12060), (555, 12050),
             (550, 12040), (545, 12030), (535, 12020), (530, 12010), (525, 12000), (520, 11080),
             (515, 11070), (510, 11060), (470, 11040), (460, 11020), (450, 11000))
    for b, v in table:
        if branch >= b:
            return v
    return 10020


def driver_version(st):
    return st["driver_version"]


def nvml_version(st):
    """nvmlSystemGetNVMLVersion: "<CUDA major>.<driver version>", e.g. 12.550.163.01."""
    return "%d.%s" % (cuda_version(st) // 1000, st["driver_version"])


# ---------------------------------------------------------------- devices
def reachable(g):
    """The GPU behind a handle: gone when no longer enumerated, GPU_IS_LOST (health.lost_code) when it fell off
    the bus after the handle was taken."""
    if not g.get("present", True):
        raise Fault(INVALID_ARGUMENT, "GPU %s is not enumerated" % g["uuid"])
    code = health.lost_code(g)
    if code is not None:
        raise Fault(code, "GPU %s has fallen off the bus" % g["uuid"])
    return g


def gpu_key(g):
    return ("gpu", g["uuid"])


def mig_uuid(g, gi, ci):
    # pylint: disable-next=protected-access
    return "MIG-" + state._uuid("gpusim-mig:%s:%d:%d" % (g["uuid"], gi["id"], ci["id"]))[4:]


def device(st, key, allow_mig=False):
    """(gpu dict, (gi, ci) or None) for a device handle key."""
    kinds = ("gpu", "mig") if allow_mig else ("gpu",)
    if not key or key[0] not in kinds:
        raise Fault(INVALID_ARGUMENT, "invalid device handle")
    for g in st["gpus"]:
        if g["uuid"] == key[1]:
            reachable(g)
            if key[0] == "mig":
                gi = machine.find_gi(g, key[2])
                ci = [c for c in gi["compute_instances"] if c["id"] == key[3]] if gi else []
                if not ci:
                    raise Fault(INVALID_ARGUMENT, "MIG device no longer exists")
                return g, (gi, ci[0])
            return g, None
    raise Fault(INVALID_ARGUMENT, "GPU %s is gone" % key[1])


def device_count(st):
    """GPUs the driver enumerated (health.visible): a GPU with `present: false` is not counted, a lost one is."""
    return len(health.visible(st))


def handle_by_index(st, index):
    gpus = health.visible(st)
    if not 0 <= index < len(gpus):
        raise Fault(INVALID_ARGUMENT, "no GPU with index %d" % index)
    return gpu_key(reachable(gpus[index]))


def handle_by_pci_bus_id(st, text):
    """nvmlDeviceGetHandleByPciBusId_v2: "domain:bus:device.function" in any of nvml.h's forms."""
    want = parse_bus(text)
    if want is None:
        raise Fault(INVALID_ARGUMENT, "bad PCI bus id %r" % text)
    for g in health.visible(st):
        if parse_bus(g["pci_bus_id"]) == want:
            return gpu_key(reachable(g))
    raise Fault(NOT_FOUND, "no GPU at %s" % text)


def handle_by_uuid(st, text):
    """nvmlDeviceGetHandleByUUID: "The UUID of the target GPU or MIG instance" (a MIG device's handle for a MIG
    UUID); NOT_FOUND "if uuid does not match a valid device on the system"; GPU_IS_LOST "if any GPU has fallen off
    the bus" (the lookup walks every GPU, unlike the by-index and by-bus-id lookups)."""
    for g in health.visible(st):
        reachable(g)
    for g in health.visible(st):
        if g["uuid"] == text:
            return gpu_key(g)
        for gi in g.get("gpu_instances", []):
            for ci in gi["compute_instances"]:
                if mig_uuid(g, gi, ci) == text:
                    return ("mig", g["uuid"], gi["id"], ci["id"])
    raise Fault(NOT_FOUND, "no GPU with UUID %s" % text)


def name(st, key):
    g, mig = device(st, key, allow_mig=True)
    if mig:
        model = machine.model_of(g)
        prof = models.gi_profile_by_id(model, mig[0]["profile_id"])
        return "%s MIG %s" % (g["model"], models.ci_name(model, prof, mig[1]["slices"]))
    # In a vGPU guest NVML names the vGPU type, not the board ("NVIDIA A100-4C"; older drivers "GRID A100-4C"):
    # the state gives that name as it is, gpusim does not make one up (README "vgpu_name").
    if g.get("vgpu_name") and g.get("virtualization_mode") in ("vgpu", 2):
        return g["vgpu_name"]
    return g["model"]


def uuid(st, key):
    g, mig = device(st, key, allow_mig=True)
    return mig_uuid(g, *mig) if mig else g["uuid"]


def parse_bus(text):
    """(domain, bus, device) of "00000000:17:00.0", "0000:17:00.0" or "17:00.0"."""
    try:
        parts = (text.decode() if isinstance(text, bytes) else str(text)).strip().lower().split(":")
        dev, _fn = parts[-1].split(".")
        dom = int(parts[-3], 16) if len(parts) >= 3 else 0
        return dom, int(parts[-2], 16), int(dev, 16)
    except (ValueError, IndexError):
        return None


def pci_info(g):
    """nvmlPciInfo_t's fields (nvml.h; the v3 entry point fills busIdLegacy and busId)."""
    dom, bus, dev = parse_bus(g["pci_bus_id"])
    model = machine.model_of(g)
    return {"domain": dom, "bus": bus, "device": dev,
            "pciDeviceId": model.pci_device_id, "pciSubSystemId": model.pci_subsystem_id,
            "busId": PCI_BUS_ID_FMT % (dom, bus, dev), "busIdLegacy": PCI_BUS_ID_LEGACY_FMT % (dom, bus, dev)}


def memory(st, key):
    """(total, used) bytes of a GPU or MIG device; used is what its processes hold."""
    g, mig = device(st, key, allow_mig=True)
    model = machine.model_of(g)
    if mig:
        total = models.gi_profile_by_id(model, mig[0]["profile_id"]).memory_mib * models.MIB
        used = sum(int(p.get("used_memory", 0)) for p in g["processes"]
                   if p.get("gpu_instance_id") == mig[0]["id"])
    else:
        total = model.memory_mib * models.MIB
        used = sum(int(p.get("used_memory", 0)) for p in g["processes"])
    return total, min(used, total)


def memory_v2_check(version):
    """nvmlDeviceGetMemoryInfo_v2: the caller's struct version must be nvmlMemory_v2."""
    if version != MEMORY_V2:
        raise Fault(ARGUMENT_VERSION_MISMATCH, "unknown memory struct version")


def mig_mode(st, key):
    """[current, pending] (machine.py holds the rules)."""
    g = device(st, key)[0]
    machine.require_mig_capable(g)
    return [g["mig_mode"], g["mig_mode_pending"]]


def set_mig_mode(st, key, mode):
    """The activation status (the call itself succeeds, machine.set_mig_mode)."""
    g = device(st, key)[0]
    return machine.set_mig_mode(st, g, int(mode))
