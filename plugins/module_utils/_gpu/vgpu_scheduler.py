# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure vGPU scheduler policy: validation, the RmPVMRL registry value, module option strings, NVML state.

Nothing here does I/O. The KVM/Proxmox role writes the value into the nvidia module's options
(/etc/modprobe.d), the ESXi side into the nvidia VIB's module option string; both verify through NVML's
scheduler queries, read by plugins/module_utils/_gpu/nvml.py.

Sources (read 2026-12-04):
  [reg]   NVIDIA/open-gpu-kernel-modules src/nvidia/interface/nvrm_registry.h, NV_REG_STR_RM_PVMRL ("RmPVMRL"):
          bit 0 enables the per-VM software runlist (0 = best effort, the default); bit 1 disables Adaptive Round
          Robin (0 = ARR, the strict round-robin scheduler, default; 1 = legacy PVMRL with a plain time slice);
          bits 7:4 the policy (0 equal share, 1 fixed share); bits 21:12 the ARR scheduling frequency; bits 23:16
          the legacy time slice in ms; bits 31:24 the ARR averaging factor. Frequency and time slice overlap:
          which one the driver reads follows bit 1.
  [ug]    NVIDIA vGPU software / AI Enterprise user guide, "Changing Scheduling Behavior for Time-Sliced vGPUs",
          section "RmPVMRL Registry Key": TT (time slice) 0x01-0x1E ms, 00 = default (2 ms for <= 8 vGPUs per
          GPU, 1 ms above), > 0x1E capped at 30; FFF (frequency) 0x3F-0x3C0 Hz, 000 = default (480/960 Hz),
          below 63 raised to 63, above 960 capped; AA (averaging factor) 0x01-0x3C, 00 = default 33, above 60
          capped. Examples: 0x01 equal share, 0x11 fixed share, 0x3c3c0011 fixed share with AA=60 and 960 Hz,
          0x00030003 equal share without ARR and 3 ms. Only GPUs after Maxwell support equal/fixed share;
          mixed-size time-sliced vGPUs support best effort and equal share only. The key is read when the
          driver loads: a module reload or reboot applies it.
  [opt]   NVIDIA/open-gpu-kernel-modules src/nvidia/arch/nvalloc/unix/src/osapi.c, rm_parse_option_string():
          NVreg_RegistryDwords loses all whitespace, splits on ';', takes name=value (entries without exactly
          one '=' are skipped), parses the value with os_strtoul(value, NULL, 0) (0x hex, leading 0 octal,
          else decimal). registry.c RmWriteRegistryDword/regFindRegistryEntry: names compare case-insensitively
          and a later entry overwrites an earlier one.
  [nvml]  nvidia-ml-py pynvml.py: NVML_VGPU_SCHEDULER_POLICY_{UNKNOWN,BEST_EFFORT,EQUAL_SHARE,FIXED_SHARE} = 0..3,
          NVML_VGPU_SCHEDULER_ARR_{DEFAULT,DISABLE,ENABLE} = 0..2, c_nvmlVgpuSchedulerGetState_t (schedulerPolicy,
          arrMode, schedulerParams union of vgpuSchedDataWithARR{avgFactor, timeslice} / vgpuSchedData{timeslice}),
          c_nvmlVgpuSchedulerCapabilities_t (supportedSchedulers[3], max/minTimeslice, isArrModeSupported,
          max/minFrequencyForARR, max/minAvgFactorForARR). NVML API reference, nvmlVgpuSchedulerParams_t:
          "The timeslice in ns for each software run list as configured, or the default value otherwise".
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn, Optional

POLICIES = ("best_effort", "equal_share", "fixed_share")
SPEC_KEYS = ("policy", "arr", "timeslice_ms", "frequency_hz", "averaging_factor")

# [ug] ranges the driver honours; values outside are clamped or defaulted by the driver, so we refuse them.
TIMESLICE_MS_RANGE = (1, 30)
FREQUENCY_HZ_RANGE = (63, 960)
AVERAGING_FACTOR_RANGE = (1, 60)

# [nvml] NVML_VGPU_SCHEDULER_POLICY_* and NVML_VGPU_SCHEDULER_ARR_*
NVML_POLICY = {0: "unknown", 1: "best_effort", 2: "equal_share", 3: "fixed_share"}
NVML_POLICY_ID = {v: k for k, v in NVML_POLICY.items()}
NVML_ARR = {0: "default", 1: "disabled", 2: "enabled"}

REGISTRY_DWORDS = "NVreg_RegistryDwords"
REGISTRY_DWORDS_PER_DEVICE = "NVreg_RegistryDwordsPerDevice"
KEY = "RmPVMRL"

# [reg] field layout
_ENABLE = 0x1
_ARR_DISABLE = 0x2
_FIXED_SHARE = 0x10


class SchedulerError(ValueError):
    """A vGPU scheduler spec or value that cannot be applied; the message names the host."""


def _fail(host: Optional[str], reason: str) -> NoReturn:
    where = "host %s: " % host if host else ""
    raise SchedulerError("%svGPU scheduler: %s" % (where, reason))


def _int_in(spec: Mapping[str, Any], key: str, bounds: tuple[int, int], host: Optional[str]) -> Optional[int]:
    value = spec.get(key)
    if value is None:
        return None
    # bool is an int in Python; a YAML 'yes' must not become 1 ms.
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(host, "%s must be an integer, got %r" % (key, value))
    lo, hi = bounds
    if not lo <= value <= hi:
        _fail(host, "%s %d is outside the driver's range %d-%d" % (key, value, lo, hi))
    return value


def normalize(spec: object, host: Optional[str] = None) -> dict[str, Any]:
    """Validate a user spec and return it with every key of SPEC_KEYS (None = the driver's default).

    ``{"policy": "fixed_share", "timeslice_ms": 3}`` -> arr False (a time slice is only read with ARR disabled
    [reg]), timeslice_ms 3. ``frequency_hz``/``averaging_factor`` imply arr True (the strict round-robin
    scheduler). ``{"policy": "fixed_share"}`` leaves arr None: the driver's default (ARR where the branch has it).
    """
    if not isinstance(spec, dict):
        _fail(host, "the spec must be a mapping with a policy, got %r" % (spec,))
    unknown = sorted(set(spec) - set(SPEC_KEYS), key=str)
    if unknown:
        _fail(host, "unknown option(s) %s (expected %s)" % (", ".join(map(str, unknown)), ", ".join(SPEC_KEYS)))
    policy = spec.get("policy")
    if not isinstance(policy, str) or policy not in POLICIES:
        _fail(host, "unknown policy %r (expected one of %s)" % (policy, ", ".join(POLICIES)))
    arr = spec.get("arr")
    if arr is not None and not isinstance(arr, bool):
        _fail(host, "arr must be true or false, got %r" % (arr,))
    timeslice = _int_in(spec, "timeslice_ms", TIMESLICE_MS_RANGE, host)
    frequency = _int_in(spec, "frequency_hz", FREQUENCY_HZ_RANGE, host)
    avg = _int_in(spec, "averaging_factor", AVERAGING_FACTOR_RANGE, host)
    out = dict.fromkeys(SPEC_KEYS)
    out["policy"] = policy
    if policy == "best_effort":
        given = [k for k, v in (("arr", arr), ("timeslice_ms", timeslice), ("frequency_hz", frequency),
                                ("averaging_factor", avg)) if v is not None]
        if given:
            _fail(host, "%s cannot be set for best_effort: the best effort scheduler has no configurable time "
                        "slice (equal_share and fixed_share do)" % ", ".join(given))
        return out
    arr_params = frequency is not None or avg is not None
    if timeslice is not None and arr_params:
        _fail(host, "timeslice_ms (legacy scheduler, arr false) and frequency_hz/averaging_factor (arr true) "
                    "exclude each other")
    if arr is True and timeslice is not None:
        _fail(host, "timeslice_ms needs arr false: with adaptive round robin the time slice follows frequency_hz")
    if arr is False and arr_params:
        _fail(host, "frequency_hz and averaging_factor need arr true (adaptive round robin)")
    if arr is None and timeslice is not None:
        arr = False
    elif arr is None and arr_params:
        arr = True
    out.update(arr=arr, timeslice_ms=timeslice, frequency_hz=frequency, averaging_factor=avg)
    return out


def rmpvmrl(spec: object) -> int:
    """The RmPVMRL DWORD for a spec [reg]; best effort is 0."""
    s = normalize(spec)
    if s["policy"] == "best_effort":
        return 0
    value = _ENABLE | (_FIXED_SHARE if s["policy"] == "fixed_share" else 0)
    if s["arr"] is False:
        value |= _ARR_DISABLE | (s["timeslice_ms"] or 0) << 16
    else:
        # arr None: bit 1 clear, which is ARR on branches that have it and ignored on older ones [reg]
        value |= (s["frequency_hz"] or 0) << 12 | (s["averaging_factor"] or 0) << 24
    return value


def strtoul(text: object) -> int:
    """os_strtoul(text, NULL, 0) as the driver parses a registry value [opt]: prefix digits, 32 bits."""
    t = str(text).strip().lower()
    if t.startswith("0x"):
        base, digits, t = 16, "0123456789abcdef", t[2:]
    elif t.startswith("0") and len(t) > 1:
        base, digits, t = 8, "01234567", t[1:]
    else:
        base, digits = 10, "0123456789"
    n = 0
    for ch in t:
        if ch not in digits:
            break
        n = n * base + digits.index(ch)
    return n & 0xFFFFFFFF


def spec_of_rmpvmrl(value: object) -> dict[str, Any]:
    """Inverse of rmpvmrl(): what the driver runs for a RmPVMRL value (int, or text as written in modprobe).

    Out-of-range fields are clamped the way [ug] says the driver does; 0 fields mean the driver default (None).
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise SchedulerError("vGPU scheduler: RmPVMRL value must be an integer, got %r" % (value,))
    v = strtoul(value) if isinstance(value, str) else value & 0xFFFFFFFF
    out = dict.fromkeys(SPEC_KEYS)
    if not v & _ENABLE:
        out["policy"] = "best_effort"
        return out
    out["policy"] = "fixed_share" if (v >> 4) & 0xF == 1 else "equal_share"
    out["arr"] = not v & _ARR_DISABLE
    if out["arr"]:
        freq = (v >> 12) & 0x3FF
        avg = (v >> 24) & 0xFF
        out["frequency_hz"] = min(max(freq, FREQUENCY_HZ_RANGE[0]), FREQUENCY_HZ_RANGE[1]) if freq else None
        out["averaging_factor"] = min(avg, AVERAGING_FACTOR_RANGE[1]) if avg else None
    else:
        ts = (v >> 16) & 0xFF
        out["timeslice_ms"] = min(ts, TIMESLICE_MS_RANGE[1]) if ts else None
    return out


# ---- module option strings -------------------------------------------------------------------------------------

def _split_options(option_string: Optional[str]) -> list[str]:
    """Split a module option string like the kernel's next_arg(): whitespace outside double quotes."""
    cur: list[str]
    tokens, cur, quoted = [], [], False
    for ch in option_string or "":
        if ch == '"':
            quoted = not quoted
        if ch.isspace() and not quoted:
            if cur:
                tokens.append("".join(cur))
                cur = []
            continue
        cur.append(ch)
    if cur:
        tokens.append("".join(cur))
    return tokens


def _param(token: str) -> tuple[str, Optional[str]]:
    """(name with '-' as '_', unquoted value or None) of one option token."""
    name, eq, value = token.partition("=")
    if not eq:
        return name.replace("-", "_"), None
    if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        value = value[1:-1]
    return name.replace("-", "_"), value


def _last_param(option_string: Optional[str], wanted: str) -> Optional[tuple[int, str]]:
    found = None
    for i, tok in enumerate(_split_options(option_string)):
        name, value = _param(tok)
        if name == wanted:
            found = (i, value or "")
    return found


def registry_dwords(option_string: Optional[str]) -> str:
    """The NVreg_RegistryDwords value in a module option string ('' when absent); the kernel keeps the last one."""
    found = _last_param(option_string, REGISTRY_DWORDS)
    return found[1] if found else ""


def _entries(dwords: str) -> list[tuple[str, Optional[str], Optional[str]]]:
    """[(raw entry, name or None, value text or None)] of a registry dwords string [opt]."""
    out: list[tuple[str, Optional[str], Optional[str]]] = []
    for raw in dwords.split(";"):
        compact = "".join(raw.split())
        parts = compact.split("=")
        if len(parts) == 2 and parts[0] and parts[1]:
            out.append((raw, parts[0], parts[1]))
        else:
            out.append((raw, None, None))
    return out


def configured_rmpvmrl(option_string: Optional[str]) -> Optional[str]:
    """The RmPVMRL text the driver would read from an option string (the last entry wins [opt]), or None."""
    value = None
    for _raw, name, text in _entries(registry_dwords(option_string)):
        if name is not None and name.lower() == KEY.lower():
            value = text
    return value


def configured_spec(option_string: Optional[str]) -> dict[str, Any]:
    """The scheduler spec an option string configures (best effort when RmPVMRL is absent)."""
    text = configured_rmpvmrl(option_string)
    return spec_of_rmpvmrl(text if text is not None else 0)


def per_device_rmpvmrl(option_string: Optional[str]) -> dict[str, str]:
    """{pci address: RmPVMRL text} from NVreg_RegistryDwordsPerDevice ("pci=<bdf>;key=value;pci=..."), which
    overrides the host-wide key for those GPUs (per-GPU registry entries are looked up first [opt])."""
    found = _last_param(option_string, REGISTRY_DWORDS_PER_DEVICE)
    out: dict[str, str]
    device: Optional[str]
    out, device = {}, None
    # _entries gives a name and a text together or neither, so text is a str wherever name is.
    for _raw, name, text in _entries(found[1] if found else ""):
        if name is None:
            continue
        if name.lower() == "pci":
            device = text.lower()  # type: ignore[union-attr]
        elif name.lower() == KEY.lower() and device is not None:
            out[device] = text  # type: ignore[assignment]
    return out


def format_value(value: int) -> str:
    """As the user guide writes values: 0x11 for the short ones, 0x00030003 once a field above bit 7 is set."""
    return "0x%08x" % value if value > 0xFF else "0x%02x" % value


def options_with_policy(option_string: Optional[str], spec: object) -> str:
    """The option string with RmPVMRL set to the spec; every other key and parameter kept.

    Returns the input unchanged when the driver would already run the spec (whatever the value's spelling), so
    a re-run writes nothing. Best effort removes RmPVMRL (the driver default) rather than writing 0.
    """
    s = normalize(spec)
    option_string = option_string or ""
    value = rmpvmrl(s)
    # Compare what the driver would run, so 0x11, 17 and 0x00000011 all count as already fixed share.
    if configured_spec(option_string) == spec_of_rmpvmrl(value):
        return option_string
    tokens = _split_options(option_string)
    found = _last_param(option_string, REGISTRY_DWORDS)
    kept, placed = [], False
    for raw, name, _text in _entries(found[1] if found else ""):
        if name is not None and name.lower() == KEY.lower():
            if value and not placed:
                kept.append("%s=%s" % (KEY, format_value(value)))
                placed = True
            continue
        if raw.strip():
            kept.append(raw.strip())
    if value and not placed:
        kept.append("%s=%s" % (KEY, format_value(value)))
    new_token = '%s="%s"' % (REGISTRY_DWORDS, ";".join(kept)) if kept else None
    if found:
        if new_token:
            tokens[found[0]] = new_token
        else:
            del tokens[found[0]]
    else:
        # No dwords token means best effort, returned above as already so: new_token is set here.
        tokens.append(new_token)  # type: ignore[arg-type]
    return " ".join(tokens)


# ---- NVML ------------------------------------------------------------------------------------------------------

def timeslice_ms(raw: Optional[float]) -> Optional[float]:
    """A scheduler time slice from NVML in ms.

    The NVML reference says ns; older tools print us. The ranges cannot overlap (ms 1-30 -> us 1000-30000 ->
    ns 1e6-3e7), so the magnitude tells the unit. 0 ("no active scheduling") -> None.
    """
    if not raw:
        return None
    if raw >= 100000:
        return raw / 1e6
    if raw >= 100:
        return raw / 1e3
    return float(raw)


def spec_of_nvml(state: Mapping[str, Any]) -> dict[str, Any]:
    """The running scheduler from what _gpu.nvml.scheduler_state() reads for one GPU.

    ``state``: {"scheduler_policy": NVML_VGPU_SCHEDULER_POLICY_* (int) or its name, "arr_mode":
    NVML_VGPU_SCHEDULER_ARR_* (int), "timeslice": schedulerParams' timeslice (raw), "avg_factor": int}. Returns
    SPEC_KEYS plus "timeslice_observed_ms" (the slice the driver runs, float or None); with ARR the frequency is
    derived from the slice.
    """
    pol = state.get("scheduler_policy")
    # A missing (None) or unknown id is simply not a key: get() answers "unknown" for it.
    policy = pol if isinstance(pol, str) else NVML_POLICY.get(pol, "unknown")  # type: ignore[arg-type]
    out = dict.fromkeys(SPEC_KEYS)
    out["policy"] = policy
    ts = timeslice_ms(state.get("timeslice") or 0)
    out["timeslice_observed_ms"] = ts
    if policy not in ("equal_share", "fixed_share"):
        return out
    # [nvml] "DEPRECATED: Adaptive Round Robin mode is always enabled"; DEFAULT is the RmPVMRL default, ARR on.
    out["arr"] = state.get("arr_mode", 0) != 1
    if out["arr"]:
        out["frequency_hz"] = int(round(1000.0 / ts)) if ts else None
        out["averaging_factor"] = state.get("avg_factor") or None
    else:
        out["timeslice_ms"] = int(round(ts)) if ts else None
    return out


def matches(spec: object, observed: Mapping[str, Any]) -> bool:
    """Whether an observed scheduler (spec_of_nvml or spec_of_rmpvmrl) runs the spec.

    None in the spec means any value (driver default). None in the observation means "not reported": NVML
    reads 0 for the slice and averaging factor while no vGPU runs ("0 when there is no active scheduling"
    [nvml]), and that cannot be held against the spec; the policy always must match.
    """
    s = normalize(spec)
    if observed.get("policy") != s["policy"]:
        return False
    if s["policy"] == "best_effort":
        return True
    for key in ("arr", "timeslice_ms", "averaging_factor"):
        if s[key] is not None and observed.get(key) is not None and observed[key] != s[key]:
            return False
    if s["frequency_hz"] is not None and observed.get("frequency_hz") is not None:
        # The frequency comes back as a whole-ns slice: allow the rounding (1 %).
        if abs(observed["frequency_hz"] - s["frequency_hz"]) > max(1, s["frequency_hz"] // 100):
            return False
    return True


def unsupported_reason(spec: object, capabilities: Optional[Mapping[str, Any]]) -> Optional[str]:
    """Why a GPU cannot run the spec according to NVML's capabilities, or None.

    ``capabilities``: {"supported_policies": [names], "arr_supported": bool, "min_timeslice"/"max_timeslice":
    raw NVML slice bounds, ...} as _gpu.nvml.scheduler_capabilities() returns them. Empty/None -> None (unknown).
    """
    if not capabilities:
        return None
    s = normalize(spec)
    supported = capabilities.get("supported_policies") or []
    if s["policy"] != "best_effort" and supported and s["policy"] not in supported:
        return "policy %s is not supported (the GPU supports %s)" % (s["policy"], ", ".join(supported) or "none")
    if s["policy"] != "best_effort" and s["arr"] is True and capabilities.get("arr_supported") is False:
        return "adaptive round robin (arr) is not supported; set timeslice_ms or arr false"
    lo, hi = timeslice_ms(capabilities.get("min_timeslice")), timeslice_ms(capabilities.get("max_timeslice"))
    if s["timeslice_ms"] is not None and lo and hi and not lo <= s["timeslice_ms"] <= hi:
        return "timeslice_ms %s is outside this GPU's range %g-%g ms" % (s["timeslice_ms"], lo, hi)
    return None


def describe(spec: Mapping[str, Any]) -> str:
    """One line for messages and reports: 'fixed_share (arr, default slice)', 'equal_share (3 ms)'."""
    if spec.get("policy") not in ("equal_share", "fixed_share"):
        return str(spec.get("policy"))
    if spec.get("arr") is False:
        ts = spec.get("timeslice_ms")
        return "%s (%s)" % (spec["policy"], "%d ms" % ts if ts else "default time slice")
    if spec.get("arr") is None:
        return "%s (driver default scheduling)" % spec["policy"]
    bits = ["arr"]
    if spec.get("frequency_hz"):
        bits.append("%d Hz" % spec["frequency_hz"])
    if spec.get("averaging_factor"):
        bits.append("averaging factor %d" % spec["averaging_factor"])
    return "%s (%s)" % (spec["policy"], ", ".join(bits))


# ---- modprobe configuration and the role's plan (KVM / Proxmox VE hosts) -----------------------------------------
# man modprobe.d(5): files from /etc/modprobe.d, /run/modprobe.d, /usr/local/lib/modprobe.d, /usr/lib/modprobe.d and
# /lib/modprobe.d, a name in an earlier directory hiding the same name in later ones, read in lexical order of the
# names; "options" lines of one module add up ('-' and '_' equal in module names), '#' comments, '\' continues a line.
MODPROBE_DIRS = ("/etc/modprobe.d", "/run/modprobe.d", "/usr/local/lib/modprobe.d", "/usr/lib/modprobe.d",
                 "/lib/modprobe.d")


def _modprobe_name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _modprobe_dir_rank(path: str) -> int:
    for rank, d in enumerate(MODPROBE_DIRS):
        if ("/" + path.lstrip("/")).rsplit("/", 1)[0].endswith(d):
            return rank
    return len(MODPROBE_DIRS)


def modprobe_files_in_order(files: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """[{path, content}] -> the files modprobe reads, in its order (hidden names and non-.conf files dropped)."""
    chosen: dict[str, Mapping[str, Any]] = {}
    for f in files:
        name = _modprobe_name(f["path"])
        if not name.endswith(".conf"):
            continue
        if name not in chosen or _modprobe_dir_rank(f["path"]) < _modprobe_dir_rank(chosen[name]["path"]):
            chosen[name] = f
    return [chosen[n] for n in sorted(chosen)]


def module_options(content: Optional[str], module: str = "nvidia") -> list[str]:
    """The option strings of ``options <module> ...`` lines in one modprobe.d file."""
    want = module.replace("-", "_")
    out = []
    for line in (content or "").replace("\\\n", " ").splitlines():
        words = line.split("#", 1)[0].split(None, 2)
        if len(words) == 3 and words[0] == "options" and words[1].replace("-", "_") == want:
            out.append(words[2].strip())
    return out


def _sets_dwords(options: Iterable[str]) -> bool:
    return any(_param(tok)[0] == REGISTRY_DWORDS for opt in options for tok in _split_options(opt))


def render_conf(dwords: str, module: str = "nvidia") -> str:
    """The role's modprobe.d file for a registry dwords value."""
    return ("# Managed by gpuops.provision (pve_gpu_host, vGPU scheduler). The NVIDIA host driver reads RmPVMRL when\n"
            "# the %s module loads: a module reload or a reboot applies a change.\n"
            'options %s %s="%s"\n' % (module, module, REGISTRY_DWORDS, dwords))


def modprobe_plan(files: Iterable[Mapping[str, Any]], spec: object, path: str, host: Optional[str] = None, module: str = "nvidia") -> dict[str, Any]:
    """What the role writes to ``path`` so the driver loads ``spec``, from the modprobe.d files now on the host.

    ``files``: [{path, content}] of every modprobe.d file (the role's own included when it exists). The new file
    carries the NVreg_RegistryDwords the driver reads today with RmPVMRL set, so other keys stay in force (the kernel
    keeps only the last NVreg_RegistryDwords). Fails naming the host, before anything is written, when a file read
    after ``path`` also sets NVreg_RegistryDwords (it would override ours) or NVreg_RegistryDwordsPerDevice sets
    RmPVMRL for some GPUs (those entries beat the host-wide key).
    """
    s = normalize(spec, host)
    # One spelling per file: the role's path may hold ".." or "//" (a root given relative to the inventory) while
    # find/slurp report the same file under another; unnormalised, the role's own file was counted twice.
    path = posixpath.normpath(path)
    files = [dict(f, path=posixpath.normpath(f["path"])) for f in files]
    ordered = modprobe_files_in_order([f for f in files if f["path"] != path] + [{"path": path, "content": ""}])
    mine = [i for i, f in enumerate(ordered) if f["path"] == path][0]
    later = [f["path"] for f in ordered[mine + 1:] if _sets_dwords(module_options(f["content"], module))]
    if later:
        _fail(host, "%s sets %s for %s after %s, so the driver would never read the policy written there; move its "
                    "keys into %s or remove them (nothing changed)" % (", ".join(later), REGISTRY_DWORDS, module, path, path))
    current = {f["path"]: f.get("content") or "" for f in files}.get(path)
    before_opts = " ".join(o for f in modprobe_files_in_order(files) for o in module_options(f["content"], module))
    overrides = per_device_rmpvmrl(before_opts)
    if overrides:
        _fail(host, "%s sets RmPVMRL per GPU (%s), which beats the host-wide key; remove those entries first (nothing "
                    "changed)" % (REGISTRY_DWORDS_PER_DEVICE, ", ".join(sorted(overrides))))
    others = " ".join(o for f in ordered if f["path"] != path for o in module_options(f["content"], module))
    own = module_options(current or "", module)
    effective = " ".join(filter(None, [others] + own))
    new_opts = options_with_policy('%s="%s"' % (REGISTRY_DWORDS, registry_dwords(effective)), s)
    content = render_conf(registry_dwords(new_opts), module)
    return {
        "path": path,
        "content": content,
        "changed": content != current,
        "spec": s,
        "rmpvmrl": format_value(rmpvmrl(s)),
        "configured_before": configured_spec(before_opts),
        "registry_dwords": registry_dwords(new_opts),
    }


def _gpu_name(gpu: Mapping[str, Any]) -> str:
    return "GPU %s (%s)" % (gpu.get("pci_address") or gpu.get("pci_bus_id") or gpu.get("index"), gpu.get("uuid"))


def _vgpu_gpus(gpus: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [g for g in gpus if (g.get("vgpu_scheduler") or {}).get("supported")]


def running(gpus: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """{address, running} of each GPU that answers the vGPU scheduler queries: what the role reports as running."""
    return [{"address": g.get("pci_address"), "running": g["vgpu_scheduler"].get("description")} for g in _vgpu_gpus(gpus)]


def precheck(gpus: Iterable[Mapping[str, Any]], spec: object, host: Optional[str] = None) -> list[str]:
    """Problems that stop the role before it writes, from gpu_info's GPUs: a GPU whose capabilities exclude the spec."""
    s = normalize(spec, host)
    out = []
    for g in _vgpu_gpus(gpus):
        why = unsupported_reason(s, g["vgpu_scheduler"].get("capabilities"))
        if why:
            out.append("host %s: %s: %s" % (host, _gpu_name(g), why))
    return out


def mismatches(gpus: Sequence[Mapping[str, Any]], spec: object, host: Optional[str] = None) -> list[str]:
    """One message per vGPU-host GPU whose running scheduler (gpu_info) is not the spec; a message too when no GPU
    answers the scheduler queries (not a vGPU host, or the vGPU manager is not loaded)."""
    s = normalize(spec, host)
    vgpu = _vgpu_gpus(gpus)
    if not vgpu:
        errors = sorted({(g.get("vgpu_scheduler") or {}).get("error") or "no answer" for g in gpus}) or ["no GPU"]
        return ["host %s: no GPU answers NVML's vGPU scheduler queries (%s): not a vGPU host, or the NVIDIA vGPU "
                "manager is not loaded" % (host, ", ".join(errors))]
    out = []
    for g in vgpu:
        observed = g["vgpu_scheduler"].get("running") or spec_of_nvml(g["vgpu_scheduler"].get("state") or {})
        if not matches(s, observed):
            out.append("host %s: %s: expected %s, observed %s" % (host, _gpu_name(g), describe(s), describe(observed)))
    return out
