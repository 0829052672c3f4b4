"""GPU health readings of gpusim (ECC, row remapping, page retirement, PCIe link, temperature, clock event
reasons, missing/lost GPUs) as pure functions over the normalized state dict (no I/O).

Every rule names the upstream source it follows. Sources used throughout:

* nvml.h      NVIDIA/go-nvml gen/nvml/nvml.h (the NVML header NVIDIA ships), function doc comments.
* smi-A100    netdata/netdata src/go/plugin/go.d/collector/nvidia_smi/testdata/a100-sxm4-mig.xml: a real
              `nvidia-smi -q -x` of an A100-SXM4-40GB with MIG enabled and two GPU instances (driver 510.47.03).
* smi-<model> thamada/nvidia-smi gls/A100SXMx4_smi.py (A100-SXM4-80GB, 555.42.02), nvsim/H100SXMx8_smi.py
              (H100 80GB HBM3, 565.57.01), nvsim/H100NVLx2_smi.py (H100 NVL, 550.54.14), nvsim/L40S_smi.py
              (L40S, 550.127.05): real `nvidia-smi -q` captures of idle GPUs with MIG disabled.
* memerr      NVIDIA "GPU Memory Error Management" (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/), chapters
              Row Remapping and User Visible Statistics.

nvidia-smi prints "N/A" where NVML answers NVML_ERROR_NOT_SUPPORTED, which is how the captures above are read.
"""

from __future__ import annotations

from .models import MODELS

# NVML return codes (same values as nvidia-ml-py).
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
GPU_IS_LOST = 15

# nvmlClocksEventReason* bits (nvml.h "nvmlClocksEventReasons"; same values as nvidia-ml-py).
REASONS = {
    "GpuIdle": 0x1, "ApplicationsClocksSetting": 0x2, "SwPowerCap": 0x4, "HwSlowdown": 0x8, "SyncBoost": 0x10,
    "SwThermalSlowdown": 0x20, "HwThermalSlowdown": 0x40, "HwPowerBrakeSlowdown": 0x80,
    "DisplayClockSetting": 0x100,
}
REASONS_ALL = 0x1FF  # nvmlClocksEventReasonAll

# nvmlTemperatureThresholds_t (nvml.h): SHUTDOWN=0, SLOWDOWN=1, MEM_MAX=2, GPU_MAX=3, ACOUSTIC_MIN/CURR/MAX=4-6,
# GPS_CURR=7, COUNT=8.
THRESHOLD_KEYS = {0: "shutdown", 1: "slowdown", 2: "mem_max", 3: "gpu_max"}
THRESHOLD_COUNT = 8

MODE_WORDS = {"enabled": 1, "enable": 1, "on": 1, "disabled": 0, "disable": 0, "off": 0}

# Per-model defaults.
#  pcie: (max generation, max width, idle_downtrain).
#    A100-SXM4-40GB 4/x16: smi-A100 (<max_link_gen>4, <max_link_width>16x). A100-SXM4-80GB 4/x16: smi-A100-80GB
#    ("Device Max 4", "Max 16x"). H100 80GB HBM3 5/x16: smi-H100. H100 NVL 5/x16: smi-H100-NVL. L40S 4/x16:
#    smi-L40S. A30 (PCIe Gen4 x16 card) and H200 (same GH100 host interface as H100) are inferred, not captured.
#    idle_downtrain: the idle L40S in P8 reports "Current 1" with "Max 4" (smi-L40S), the PCIe link drops its
#    generation to save power; the idle SXM/NVL parts in smi-A100/-H100/-H100-NVL stay at P0 with Current == Max.
#  thresholds (C): shutdown, slowdown, gpu_max (Max Operating), mem_max (None = NOT_SUPPORTED).
#    A100 40GB/80GB 92/89/85/95: smi-A100 (<gpu_temp_max_threshold>92, slow 89, max_gpu 85, max_mem 95) and
#    smi-A100-80GB (same values). A30 (GA100 like A100): inferred from A100.
#    H100 80GB HBM3 / H100 NVL 95/89/87: Hopper nvidia-smi prints margins to T.Limit, not absolutes: current 30 C with
#    "GPU T.Limit Temp 57 C" puts T.Limit at 87 C; "Shutdown T.Limit -8", "Slowdown T.Limit -2", "Max Operating
#    T.Limit 0" give 95/89/87 (smi-H100; smi-H100-NVL: 32 C + 55 = 87, same margins). Memory max 95 is inferred
#    (A100's HBM value; Hopper prints only a relative memory margin). H200: inferred from H100.
#    L40S 92/89/87, no memory sensor: 30 C + 57 = 87, margins -5/-2/0; "Memory Current Temp N/A" (smi-L40S).
#  ecc: every model here ships with ECC on (ECC Mode Current/Pending Enabled in all captures; A30/H200 inferred).
#    L40S too: ECC on, which is why it reports 46068 MiB of 48 GiB (GDDR6 carve-out; smi-L40S).
HEALTH_MODELS = {
    "NVIDIA A100-SXM4-40GB": {"pcie": (4, 16, False), "thresholds": (92, 89, 85, 95)},
    "NVIDIA A100-SXM4-80GB": {"pcie": (4, 16, False), "thresholds": (92, 89, 85, 95)},
    "NVIDIA A30": {"pcie": (4, 16, False), "thresholds": (92, 89, 85, 95)},
    "NVIDIA H100 80GB HBM3": {"pcie": (5, 16, False), "thresholds": (95, 89, 87, 95)},
    "NVIDIA H100 NVL": {"pcie": (5, 16, False), "thresholds": (95, 89, 87, 95)},
    "NVIDIA H200": {"pcie": (5, 16, False), "thresholds": (95, 89, 87, 95)},
    "NVIDIA L40S": {"pcie": (4, 16, True), "thresholds": (92, 89, 87, None)},
}
# The other MIG GPUs (issue 38's model table): no nvidia-smi capture is cited for any of them; each takes the values
# of its family above (Ampere: A100's; Hopper: H100's; Blackwell data center parts: PCIe Gen6 x16, H100's
# thresholds; RTX PRO 6000 Blackwell Server Edition: PCIe Gen5 x16, L40S's thresholds, no memory sensor), inferred.
_AMPERE = {"pcie": (4, 16, False), "thresholds": (92, 89, 85, 95)}
_HOPPER = {"pcie": (5, 16, False), "thresholds": (95, 89, 87, 95)}
_BLACKWELL = {"pcie": (6, 16, False), "thresholds": (95, 89, 87, 95)}
for _name in ("NVIDIA A100 PCIe 40GB", "NVIDIA A100-PCIE-40GB", "NVIDIA A100 80GB PCIe", "NVIDIA A800 40GB PCIe",
              "NVIDIA A800-SXM4-80GB", "NVIDIA A800 80GB PCIe", "NVIDIA PG506-232"):
    HEALTH_MODELS[_name] = dict(_AMPERE)
for _name in ("NVIDIA H100 PCIe", "NVIDIA H800", "NVIDIA H800 PCIe", "NVIDIA H800 NVL", "NVIDIA H100 96GB",
              "NVIDIA GH200 96GB HBM3", "NVIDIA H20", "NVIDIA H200 NVL", "NVIDIA GH200 144G HBM3e"):
    HEALTH_MODELS[_name] = dict(_HOPPER)
for _name in ("NVIDIA B200", "NVIDIA GB200", "NVIDIA B300 SXM6 AC", "NVIDIA GB300"):
    HEALTH_MODELS[_name] = dict(_BLACKWELL)
HEALTH_MODELS["NVIDIA RTX PRO 6000 Blackwell Server Edition"] = {"pcie": (5, 16, False), "thresholds": (92, 89, 87, None)}
assert set(HEALTH_MODELS) == set(MODELS), "every gpusim model needs health defaults"

IDLE_TEMP = 30  # C; the idle captures read 25-36 C

# Default kernel-log text per Xid (NVIDIA "XID Errors" catalog, docs.nvidia.com/deploy/xid-errors/, and the log
# examples of memerr "User Visible Statistics"); a state event's own "msg" wins.
XID_MESSAGES = {
    13: "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
    31: "Ch 00000010, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f1c_60000000. "
        "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    43: "Ch 00000010",
    45: "Ch 00000010",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer.",
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to remap row.",
    74: "NVLink: fatal error detected on link 0(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    92: "High single-bit ECC error rate",
    94: "Contained: CE User Channel (0x9). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL).",
}


class HealthError(ValueError):
    """A health field of the state is invalid (the caller reports it like any invalid state)."""


def mode_value(value, where, what="must be enabled/disabled"):
    """An enabled/disabled setting of the state (true/false, 1/0 or the words) as NVML's 1/0; state.py's MIG mode
    too."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and value in (0, 1):
        return value
    if isinstance(value, str) and value.lower() in MODE_WORDS:
        return MODE_WORDS[value.lower()]
    raise HealthError("%s: %s, got %r" % (where, what, value))


def _count(value, where):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise HealthError("%s: must be a count >= 0, got %r" % (where, value))
    return value


def reason_mask(value, where="clocks_event_reasons"):
    """An int mask or a list of names ("HwSlowdown", "hw_slowdown", "nvmlClocksEventReasonHwSlowdown")."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, (list, tuple)):
        raise HealthError("%s: a bit mask or a list of reason names, got %r" % (where, value))
    by_lower = {k.lower(): v for k, v in REASONS.items()}
    mask = 0
    for name in value:
        key = str(name)
        for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
            key = key[len(prefix):] if key.startswith(prefix) else key
        key = key.replace("_", "").lower()
        if key not in by_lower:
            raise HealthError("%s: unknown reason %r (known: %s)" % (where, name, ", ".join(REASONS)))
        mask |= by_lower[key]
    return mask


def fill(st):
    """Fill in and validate the health fields of a normalized state (called by state.normalize)."""
    st.setdefault("remapped_rows_in_mig", "instances")
    if st["remapped_rows_in_mig"] not in ("instances", "enabled"):
        raise HealthError("remapped_rows_in_mig must be 'instances' or 'enabled', got %r" % st["remapped_rows_in_mig"])
    st.setdefault("ecc_volatile_in_mig", "supported")
    if st["ecc_volatile_in_mig"] not in ("supported", "not_supported"):
        raise HealthError("ecc_volatile_in_mig must be 'supported' or 'not_supported', got %r"
                          % st["ecc_volatile_in_mig"])
    st.setdefault("kernel_log", [])
    st.setdefault("kernel_log_restricted", False)
    st.setdefault("boot_time", 1767225600)  # 2026-01-01T00:00:00Z; only `dmesg -T` shows it
    for i, g in enumerate(st["gpus"]):
        _fill_gpu(g, "gpus[%d]" % i)


def _fill_gpu(g, where):
    spec = HEALTH_MODELS[g["model"]]
    g.setdefault("present", True)
    g.setdefault("lost", False)
    ecc = g.setdefault("ecc", {})
    if not isinstance(ecc, dict):
        raise HealthError("%s.ecc must be an object" % where)
    ecc.setdefault("supported", True)
    ecc["mode"] = mode_value(ecc.get("mode", 1), where + ".ecc.mode")
    ecc["pending"] = mode_value(ecc.get("pending", ecc["mode"]), where + ".ecc.pending")
    for scope in ("volatile", "aggregate"):
        counts = ecc.setdefault(scope, {})
        for kind in ("corrected", "uncorrected"):
            counts[kind] = _count(counts.get(kind, 0), "%s.ecc.%s.%s" % (where, scope, kind))
    rows = g.setdefault("remapped_rows", {})
    for kind in ("correctable", "uncorrectable"):
        rows[kind] = _count(rows.get(kind, 0), "%s.remapped_rows.%s" % (where, kind))
    rows["pending"] = bool(rows.get("pending", False))
    rows["failure"] = bool(rows.get("failure", False))
    max_gen, max_width, downtrain = spec["pcie"]
    pcie = g.setdefault("pcie", {})
    pcie.setdefault("max_gen", max_gen)
    pcie.setdefault("max_width", max_width)
    pcie.setdefault("host_max_gen", None)     # None: the slot is no slower than the GPU
    pcie.setdefault("host_max_width", None)
    pcie.setdefault("gen", None)              # None: derived (max, or 1 while idle with idle_downtrain)
    pcie.setdefault("width", None)            # None: the max width; 8 on an x16 card = a degraded link
    pcie.setdefault("idle_downtrain", downtrain)
    temp = g.setdefault("temperature", IDLE_TEMP)
    if isinstance(temp, bool) or not isinstance(temp, int):
        raise HealthError("%s.temperature must be an integer (C)" % where)
    thr = g.setdefault("temperature_thresholds", {})
    for key, value in zip(("shutdown", "slowdown", "gpu_max", "mem_max"), spec["thresholds"]):
        thr.setdefault(key, value)
    g.setdefault("clocks_event_reasons", None)  # None: derived from processes and temperature
    if g["clocks_event_reasons"] is not None:
        reason_mask(g["clocks_event_reasons"], where + ".clocks_event_reasons")
    events = g.setdefault("xid_events", [])
    if not isinstance(events, list):
        raise HealthError("%s.xid_events must be a list" % where)
    for k, ev in enumerate(events):
        if not isinstance(ev, dict) or isinstance(ev.get("xid"), bool) or not isinstance(ev.get("xid"), int):
            raise HealthError("%s.xid_events[%d] needs an integer 'xid'" % (where, k))


# ---------------------------------------------------------------- enumeration: missing and lost GPUs
def visible(st):
    """The GPUs NVML enumerates: a GPU with `present: false` did not come up after the last boot, so
    nvmlDeviceGetCount reports fewer and the others take its indices (NVML enumerates what the driver probed;
    nvml.h nvmlDeviceGetHandleByIndex_v2: "valid indices are 0 .. accessibleDevices-1")."""
    return [g for g in st["gpus"] if g.get("present", True)]


def lost_code(gpu):
    """A GPU that fell off the bus after the driver loaded stays counted, but every call on it fails:
    nvml.h documents NVML_ERROR_GPU_IS_LOST "if the target GPU has fallen off the bus or is otherwise
    inaccessible" for nvmlDeviceGetHandleByIndex_v2 and the per-device queries, and nvidia-smi then prints
    "Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost. Reboot the system to recover this
    GPU" (JosephKJ/OWOD#81, AlexeyAB/darknet#86). Some falls report Unknown Error instead
    (NVIDIA/open-gpu-kernel-modules#387): `lost_error: UNKNOWN`. Returns the code, or None for a healthy GPU."""
    if not gpu.get("lost"):
        return None
    from .machine import error_code  # pylint: disable=import-outside-toplevel
    return error_code(gpu.get("lost_error", "GPU_IS_LOST"))


# ---------------------------------------------------------------- ECC
def ecc_mode(gpu):
    """nvml.h nvmlDeviceGetEccMode: (current, pending); NOT_SUPPORTED "if the device does not support this
    feature" ("Only applicable to devices with ECC"). `ecc.supported: false` emulates a GPU without ECC."""
    ecc = gpu["ecc"]
    if not ecc["supported"]:
        return NOT_SUPPORTED, None
    return None, [ecc["mode"], ecc["pending"]]


def total_ecc_errors(st, gpu, error_type, counter_type):
    """nvml.h nvmlDeviceGetTotalEccErrors: INVALID_ARGUMENT for a bad errorType/counterType; "Only applicable to
    devices with ECC" and "Requires ECC Mode to be enabled", otherwise NOT_SUPPORTED (nvidia-smi prints N/A for
    the counters of a GPU with ECC off). Volatile counts on a GPU with MIG enabled: the one real capture
    (smi-A100, MIG on, R510) shows the parent's volatile counters as N/A while aggregate reads 0, but nvml.h does
    not list a MIG restriction for this call as it does for nvmlDeviceGetRemappedRows, so the default stays
    readable; top-level `ecc_volatile_in_mig: not_supported` serves the other behaviour."""
    if error_type not in (0, 1) or counter_type not in (0, 1):
        return INVALID_ARGUMENT, "errorType/counterType out of range"
    ecc = gpu["ecc"]
    if not ecc["supported"]:
        return NOT_SUPPORTED, "no ECC on this GPU"
    if ecc["mode"] != 1:
        return NOT_SUPPORTED, "ECC mode is disabled"
    if counter_type == 0 and gpu.get("mig_mode") == 1 and st.get("ecc_volatile_in_mig") == "not_supported":
        return NOT_SUPPORTED, "volatile ECC counts are not read at GPU level with MIG enabled"
    scope = "volatile" if counter_type == 0 else "aggregate"
    kind = "corrected" if error_type == 0 else "uncorrected"
    return None, ecc[scope][kind]


# ---------------------------------------------------------------- row remapping / page retirement
def remapped_rows(st, gpu, arch):
    """nvml.h nvmlDeviceGetRemappedRows: "For Ampere or newer", returns (corrRows, uncRows, isPending,
    failureOccurred). MIG: the header says both "On MIG-enabled GPUs with active instances, querying the number
    of remapped rows is not supported" (@note) and "NVML_ERROR_NOT_SUPPORTED If MIG is enabled" (@return).
    smi-A100 (MIG enabled, two GPU instances) prints <remapped_rows>N/A, which both readings predict. Default
    `remapped_rows_in_mig: instances` follows the @note (readable while MIG is on but no GPU instance exists);
    `enabled` follows the @return (NOT_SUPPORTED whenever MIG mode is enabled)."""
    if arch < 7:  # NVML_DEVICE_ARCH_AMPERE
        return NOT_SUPPORTED, "row remapping needs Ampere or newer"
    if gpu.get("mig_mode") == 1:
        if st.get("remapped_rows_in_mig") == "enabled" or gpu.get("gpu_instances"):
            return NOT_SUPPORTED, "remapped rows are not readable on a MIG-enabled GPU with active instances"
    rows = gpu["remapped_rows"]
    return None, (rows["correctable"], rows["uncorrectable"], int(rows["pending"]), int(rows["failure"]))


def retired_pages_supported(arch):
    """Page retirement is the pre-Ampere scheme; "The row-remapping feature is a replacement for the page
    retirement scheme used in prior generation GPUs" (memerr, Row Remapping). Every Ampere/Ada/Hopper capture
    (smi-A100, smi-A100-80GB, smi-H100, smi-H100-NVL, smi-L40S) prints Retired Pages Single/Double Bit and
    Pending Page Blacklist as N/A, i.e. nvmlDeviceGetRetiredPages and nvmlDeviceGetRetiredPagesPendingStatus
    answer NOT_SUPPORTED (nvml.h: "NVML_ERROR_NOT_SUPPORTED if the device doesn't support this feature")."""
    return arch < 7


# ---------------------------------------------------------------- PCIe
def is_idle(gpu):
    """No client processes. The idle captures all report the "Idle" clock event reason Active; smi-A100 (MIG
    enabled, GPU instances in place) reports it Not Active, so a MIG-enabled GPU is not treated as idle."""
    return not gpu.get("processes") and gpu.get("mig_mode") != 1


def pcie(gpu):
    """(curr gen, curr width, max gen, max width, GPU max gen).

    nvml.h: nvmlDeviceGetMaxPcieLinkGeneration/Width are "the maximum ... possible with this device and system"
    ("for a generation 2 PCIe device attached to a generation 1 PCIe bus the max link generation this function
    will report is generation 1"), nvmlDeviceGetGpuMaxPcieLinkGeneration is "the maximum PCIe link generation
    supported by this device" (smi-A100-80GB: Device Max 4, Host Max 5, Max 4). The current generation drops at
    idle on cards that downtrain (`pcie.idle_downtrain`, smi-L40S: P8, Current 1 of Max 4) and is the max
    otherwise; `pcie.gen`/`pcie.width` pin the current link (a degraded link: width 8 on an x16 card)."""
    p = gpu["pcie"]
    host_gen = p["host_max_gen"] if p["host_max_gen"] is not None else p["max_gen"]
    host_width = p["host_max_width"] if p["host_max_width"] is not None else p["max_width"]
    max_gen, max_width = min(p["max_gen"], host_gen), min(p["max_width"], host_width)
    gen = p["gen"]
    if gen is None:
        gen = 1 if p["idle_downtrain"] and is_idle(gpu) else max_gen
    width = p["width"] if p["width"] is not None else max_width
    return gen, width, max_gen, max_width, p["max_gen"]


# ---------------------------------------------------------------- temperature and clock event reasons
def temperature_threshold(gpu, threshold):
    """nvml.h nvmlDeviceGetTemperatureThreshold: INVALID_ARGUMENT for an invalid thresholdType, NOT_SUPPORTED
    "if the device does not have a temperature sensor or is unsupported". Data-centre GPUs have no acoustic/GPS
    target ("GPU Target Temperature: N/A" in every capture), and the L40S has no memory sensor."""
    if not 0 <= threshold < THRESHOLD_COUNT:
        return INVALID_ARGUMENT, "thresholdType out of range"
    key = THRESHOLD_KEYS.get(threshold)
    value = gpu["temperature_thresholds"].get(key) if key else None
    if value is None:
        return NOT_SUPPORTED, "threshold %d not supported on %s" % (threshold, gpu["model"])
    return None, value


def clocks_event_reasons(gpu):
    """nvml.h nvmlClocksEventReasons: GpuIdle "Nothing is running on the GPU and the clocks are dropping to Idle
    state" (see is_idle); HwSlowdown "is an indicator of: temperature being too high" and HwThermalSlowdown
    likewise, so both are set at or above the slowdown threshold; SwThermalSlowdown keeps the GPU at or below
    "GPU Max Operating Temperature", so it is set at or above gpu_max. `clocks_event_reasons` (names or a mask)
    overrides the derivation."""
    if gpu.get("clocks_event_reasons") is not None:
        return reason_mask(gpu["clocks_event_reasons"])
    mask = REASONS["GpuIdle"] if is_idle(gpu) else 0
    thr, temp = gpu["temperature_thresholds"], gpu["temperature"]
    if thr.get("slowdown") is not None and temp >= thr["slowdown"]:
        mask |= REASONS["HwSlowdown"] | REASONS["HwThermalSlowdown"]
    if thr.get("gpu_max") is not None and temp >= thr["gpu_max"]:
        mask |= REASONS["SwThermalSlowdown"]
    return mask


# ---------------------------------------------------------------- GPU reset / reboot
def on_reset(gpu):
    """GPU reset: volatile ECC counters restart (nvidia-smi(1): "Volatile error counters track the number of
    errors detected since the last driver load"; the Xid catalog resolves Xid 48 with a GPU reset or reboot) and
    pending row remaps take effect: "A reset will be required to actually remap the row" (nvml.h
    nvmlDeviceGetRemappedRows). The remapped-row counts persist ("the number of entries recorded in the InfoROM",
    memerr) and so does failureOccurred ("set if a row remapping ever failed in the past")."""
    for kind in ("corrected", "uncorrected"):
        gpu["ecc"]["volatile"][kind] = 0
    gpu["remapped_rows"]["pending"] = False


def on_reboot(st):
    """Host reboot: everything on_reset does, plus a pending ECC mode becomes current (nvml.h nvmlDeviceGetEccMode:
    "Changing ECC modes requires a reboot"), a GPU that fell off the bus comes back ("Reboot the system to recover
    this GPU") unless `missing_after_reboot` says it stays off the bus (then it is not enumerated), and the kernel
    log starts empty (Xids are "since boot")."""
    for gpu in st["gpus"]:
        on_reset(gpu)
        gpu["ecc"]["mode"] = gpu["ecc"]["pending"]
        if gpu.get("lost"):
            gpu["lost"] = False
            if gpu.get("missing_after_reboot"):
                gpu["present"] = False
        gpu["xid_events"] = []
    st["kernel_log"] = []


# ---------------------------------------------------------------- fault injection helpers (python -m gpusim fault)
FAULTS = ("ecc-storm", "remap-pending", "remap-failed", "xid", "link-degraded", "missing", "lost", "hot", "heal")


def inject_fault(st, index, kind, count=10, xid=None, width=8, gen=None, temp=None, pid=None, name=None, msg=None,
                 t=None):
    """Apply one fault to gpus[index] (the state entry, whether or not it is enumerated)."""
    if not 0 <= index < len(st["gpus"]):
        raise HealthError("no GPU entry %d" % index)
    g = st["gpus"][index]
    if kind == "ecc-storm":
        for scope in ("volatile", "aggregate"):
            g["ecc"][scope]["uncorrected"] += count
    elif kind == "remap-pending":
        g["remapped_rows"]["uncorrectable"] += 1
        g["remapped_rows"]["pending"] = True
    elif kind == "remap-failed":
        g["remapped_rows"]["failure"] = True
    elif kind == "xid":
        if xid is None:
            raise HealthError("xid needs a number")
        from .kernlog import next_time  # pylint: disable=import-outside-toplevel
        ev = {"xid": int(xid), "t": t if t is not None else next_time(st)}
        for key, value in (("pid", pid), ("name", name), ("msg", msg)):
            if value is not None:
                ev[key] = value
        g["xid_events"].append(ev)
    elif kind == "link-degraded":
        g["pcie"]["width"] = width
        if gen is not None:
            g["pcie"]["gen"] = gen
    elif kind == "missing":
        g["present"] = False
    elif kind == "lost":
        g["lost"] = True
    elif kind == "hot":
        g["temperature"] = temp if temp is not None else g["temperature_thresholds"]["slowdown"] + 2
    elif kind == "heal":
        for key in ("ecc", "remapped_rows", "pcie", "temperature", "temperature_thresholds", "clocks_event_reasons",
                    "xid_events", "lost", "lost_error", "missing_after_reboot"):
            g.pop(key, None)
        g["present"] = True
        _fill_gpu(g, "gpus[%d]" % index)
    else:
        raise HealthError("unknown fault %r (known: %s)" % (kind, ", ".join(FAULTS)))
    return g
