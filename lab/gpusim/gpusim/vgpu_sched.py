"""The vGPU scheduler of a vGPU host, as the NVIDIA host driver runs it: pure functions over the state dict.

The driver reads the RmPVMRL registry key when the nvidia module loads (a module reload or a reboot): from
NVreg_RegistryDwords in the module options (modprobe configuration), per GPU from NVreg_RegistryDwordsPerDevice.
NVML then answers nvmlDeviceGetVgpuSchedulerState/Capabilities from what was loaded, never from what the files say
now. This module is written from the upstream sources below, not from the collection's code, so the two can disagree.

Sources:
  NVIDIA/open-gpu-kernel-modules src/nvidia/interface/nvrm_registry.h NV_REG_STR_RM_PVMRL: bit 0 enable (else best
    effort), bit 1 ARR disable, bits 7:4 policy (0 equal, 1 fixed share), 21:12 ARR frequency, 23:16 legacy time slice
    (ms), 31:24 ARR averaging factor.
  src/nvidia/arch/nvalloc/unix/src/osapi.c rm_parse_option_string(): whitespace dropped, ';'-separated name=value,
    os_strtoul(value, NULL, 0); registry.c regFindRegistryEntry(): names case-insensitive, a later entry overwrites;
    per-GPU entries are looked up before global ones. kernel-open/nvidia/os-registry.c: NVreg_RegistryDwordsPerDevice
    "pci=DDDD:BB:DD.F;key=value;..." applies to the GPU at that address.
  NVIDIA vGPU / AI Enterprise user guide "RmPVMRL Registry Key": TT 1-30 ms (00 default: 2 ms up to 8 vGPUs per GPU,
    1 ms above; > 30 capped); FFF 63-960 Hz (000 default 480/960 Hz; 1-62 raised to 63; > 960 capped); AA 1-60 (00
    default 33; > 60 capped); example 0x00180011 for "fixed share without strict round robin, 24 ms" (which the
    header's bit 1 reads as ARR with frequency 0x180: an option below). Strict round robin (ARR) is the default from
    release 15.0 (R525) on.
  NVML reference nvmlVgpuSchedulerParams_t: "The timeslice in ns ... 0 when there is no active scheduling" (options:
    the unit, and whether an idle GPU reads 0). nvidia-ml-py pynvml.py: NVML_VGPU_SCHEDULER_POLICY_*, _ARR_*.
  man modprobe.d(5): configuration from /etc/modprobe.d, /run/modprobe.d, /usr/local/lib/modprobe.d,
    /usr/lib/modprobe.d, /lib/modprobe.d; a file name in an earlier directory hides the same name in later ones; all
    files are read in lexical order of their names; "options" lines for one module add up, '#' starts a comment and a
    trailing backslash continues a line; '-' and '_' are the same in module names.

State keys (all optional):
  top level: "modprobe_root" (the host root whose modprobe.d the driver reads on load; unset: a load keeps what is
    loaded), "scheduler_timeslice_unit" ns|us|ms (default ns), "scheduler_params_idle" zero|configured (default
    zero: no running vGPU -> slice and averaging factor read 0), "scheduler_arr_supported" (default: driver >= 525),
    "scheduler_equal_share_timeslice" (default true: equal share honours TT; false: it runs the default slice),
    "rmpvmrl_tt_without_arr_bit" frequency|timeslice (default frequency, the header; timeslice: the guide's example).
  per GPU: "rmpvmrl_loaded" (the value the driver read at its last load, default 0), "vgpus_running" (default 0),
    "max_vgpus_per_gpu" (vGPU type density deciding the defaults, default 8), "vgpu_scheduler_policies" (default all
    three; e.g. ["best_effort", "equal_share"] for a GPU in mixed-size mode).
"""

from __future__ import annotations

import os

BEST_EFFORT, EQUAL_SHARE, FIXED_SHARE = 1, 2, 3
ARR_DEFAULT, ARR_DISABLE, ARR_ENABLE = 0, 1, 2
POLICY_IDS = {"best_effort": BEST_EFFORT, "equal_share": EQUAL_SHARE, "fixed_share": FIXED_SHARE}
MODPROBE_DIRS = ("etc/modprobe.d", "run/modprobe.d", "usr/local/lib/modprobe.d", "usr/lib/modprobe.d", "lib/modprobe.d")
UNITS = {"ns": 1000000, "us": 1000, "ms": 1}


class SchedError(Exception):
    """A state value gpusim cannot use."""


def _strtoul(text):
    t = text.strip().lower()
    base, digits = 10, "0123456789"
    if t.startswith("0x"):
        base, digits, t = 16, "0123456789abcdef", t[2:]
    elif t.startswith("0") and len(t) > 1:
        base, digits, t = 8, "01234567", t[1:]
    n = 0
    for ch in t:
        if ch not in digits:
            break
        n = n * base + digits.index(ch)
    return n & 0xFFFFFFFF


def parse_dwords(text):
    """[(name, value)] of a registry dwords string as rm_parse_option_string reads it."""
    out = []
    for token in "".join(text.split()).split(";"):
        parts = token.split("=")
        if len(parts) == 2 and parts[0] and parts[1]:
            out.append((parts[0], _strtoul(parts[1]) if parts[0].lower() != "pci" else parts[1].lower()))
    return out


def _kernel_params(option_string):
    """[(name, value)] of a module parameter string, split like the kernel's next_arg (quotes group)."""
    params, cur, quoted = [], "", False
    for ch in option_string + " ":
        if ch == '"':
            quoted = not quoted
            continue
        if ch.isspace() and not quoted:
            if cur:
                name, _eq, value = cur.partition("=")
                params.append((name.replace("-", "_"), value))
            cur = ""
            continue
        cur += ch
    return params


def modprobe_options(root, module="nvidia"):
    """The option string modprobe passes to ``module``, from the modprobe.d files under ``root``."""
    files = {}
    for d in reversed(MODPROBE_DIRS):  # earlier directories hide the same name in later ones
        path = os.path.join(root, d)
        if os.path.isdir(path):
            for name in os.listdir(path):
                if name.endswith(".conf"):
                    files[name] = os.path.join(path, name)
    opts = []
    want = module.replace("-", "_")
    for name in sorted(files):
        with open(files[name], encoding="utf-8") as fh:
            text = fh.read().replace("\\\n", " ")
        for line in text.splitlines():
            words = line.split("#", 1)[0].split(None, 2)
            if len(words) >= 3 and words[0] == "options" and words[1].replace("-", "_") == want:
                opts.append(words[2])
    return " ".join(opts)


def rmpvmrl_of_options(option_string):
    """(global RmPVMRL or None, {pci address: value}) the driver reads from a module option string."""
    dwords, per_device = "", ""
    for name, value in _kernel_params(option_string):
        if name == "NVreg_RegistryDwords":
            dwords = value  # a module parameter given twice: the kernel keeps the last
        elif name == "NVreg_RegistryDwordsPerDevice":
            per_device = value
    glob = None
    for name, value in parse_dwords(dwords):
        if name.lower() == "rmpvmrl":
            glob = value
    devices, current = {}, None
    for name, value in parse_dwords(per_device):
        if name.lower() == "pci":
            current = value
        elif name.lower() == "rmpvmrl" and current is not None:
            devices[current] = value
    return glob, devices


def _short_bus(bus_id):
    """00000000:17:00.0 -> 0000:17:00.0 (the form NVreg_RegistryDwordsPerDevice uses)."""
    dom, rest = bus_id.lower().split(":", 1)
    return "%04x:%s" % (int(dom, 16), rest)


def load_module(st):
    """The nvidia module (re)loads: every GPU takes RmPVMRL from the modprobe configuration under modprobe_root."""
    root = st.get("modprobe_root")
    if not root:
        return
    glob, devices = rmpvmrl_of_options(modprobe_options(root))
    for gpu in st["gpus"]:
        gpu["rmpvmrl_loaded"] = devices.get(_short_bus(gpu["pci_bus_id"]), glob if glob is not None else 0)


def _branch(st):
    try:
        return int(str(st.get("driver_version", "")).split(".")[0])
    except ValueError:
        return 0


def arr_supported(st):
    explicit = st.get("scheduler_arr_supported")
    return _branch(st) >= 525 if explicit is None else bool(explicit)


def _unit(st):
    unit = st.get("scheduler_timeslice_unit", "ns")
    if unit not in UNITS:
        raise SchedError("scheduler_timeslice_unit must be one of ns, us, ms, got %r" % (unit,))
    return UNITS[unit]


def running(st, gpu):
    """(policy, arr_mode, timeslice in the NVML unit, avg_factor) the loaded value makes the driver run."""
    unit = _unit(st)
    v = int(gpu.get("rmpvmrl_loaded", 0)) & 0xFFFFFFFF
    if not v & 0x1:
        return BEST_EFFORT, ARR_DEFAULT, 0, 0
    policy = FIXED_SHARE if (v >> 4) & 0xF == 1 else EQUAL_SHARE
    dense = int(gpu.get("max_vgpus_per_gpu", 8)) > 8
    idle = st.get("scheduler_params_idle", "zero") == "zero" and not gpu.get("vgpus_running", 0)
    ts_field, freq, avg = (v >> 16) & 0xFF, (v >> 12) & 0x3FF, (v >> 24) & 0xFF
    legacy = bool(v & 0x2) or not arr_supported(st)
    if (not legacy and st.get("rmpvmrl_tt_without_arr_bit", "frequency") == "timeslice"
            and ts_field and not avg and not (v >> 12) & 0xF):
        legacy = True  # the guide's 0x00TT0011 reading
    if legacy:
        ms = min(ts_field, 30) if ts_field else (1 if dense else 2)
        if policy == EQUAL_SHARE and not st.get("scheduler_equal_share_timeslice", True):
            ms = 1 if dense else 2
        return policy, ARR_DISABLE, 0 if idle else ms * unit, 0
    hz = min(max(freq, 63), 960) if freq else (960 if dense else 480)
    factor = min(avg, 60) if avg else 33
    slice_ = int(round(unit * 1000.0 / hz))
    return policy, ARR_ENABLE, 0 if idle else slice_, 0 if idle else factor


def capabilities(st, gpu):
    names = gpu.get("vgpu_scheduler_policies", ["best_effort", "equal_share", "fixed_share"])
    try:
        ids = [POLICY_IDS[n] for n in names]
    except KeyError:
        raise SchedError("vgpu_scheduler_policies: unknown policy in %r" % (names,)) from None
    unit = _unit(st)
    return {"policies": ids, "min_timeslice": 1 * unit, "max_timeslice": 30 * unit,
            "arr": arr_supported(st), "min_frequency": 63, "max_frequency": 960, "min_avg": 1, "max_avg": 60}
