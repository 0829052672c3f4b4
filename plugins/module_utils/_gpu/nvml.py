# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVML adapter over pynvml (the nvidia-ml-py package).

Reads the whole picture of a host's GPUs (versions, devices, MIG mode, GI profiles with the placements NVML
reports, GPU/compute instances, processes, virtualization and licence state) and carries out the actions that
``geometry.plan_gpu`` computes, restoring the previous geometry when a step fails. Every NVML call goes through
``Nvml.call`` so a module run can report how many it made.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any, Optional

from ansible_collections.gpuops.provision.plugins.module_utils._gpu import sysfs
from ansible_collections.gpuops.provision.plugins.module_utils._mig import geometry

# Profile index -> name attribute, as go-nvlib derives it (REV1 = "+me", ALL_ME, GFX, NO_ME).
GI_INDEX_ATTRS = {7: "+me", 8: "+me", 10: "+gfx", 11: "+gfx", 12: "+gfx", 13: "-me", 14: "-me", 15: "+me.all", 16: "+me.all", 17: "+gfx"}
# Compute slices -> NVML compute-instance profile index.
CI_INDEX_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
VIRT_MODES = {0: "none", 1: "passthrough", 2: "vgpu", 3: "host_vgpu", 4: "host_vsga"}
HOST_VGPU_MODES = {0: "non_sriov", 1: "sriov"}
LICENSE_FEATURES = {0: "unknown", 1: "vgpu", 2: "nvidia_rtx", 3: "gaming", 4: "compute", 5: "vgamedev"}
LICENSE_EXPIRY = {0: "not_available", 1: "invalid", 2: "valid", 3: "not_applicable", 4: "permanent"}
# NVML architectures where a MIG mode change needs a GPU reset (Ampere); Hopper and later switch at once.
RESET_ARCHES = (7,)
# nvml.h nvmlClocksEventReason* bits (the names without the prefix, as nvidia-smi -q -d PERFORMANCE words them).
CLOCK_EVENT_REASONS = {"GpuIdle": 0x1, "ApplicationsClocksSetting": 0x2, "SwPowerCap": 0x4, "HwSlowdown": 0x8,
                       "SyncBoost": 0x10, "SwThermalSlowdown": 0x20, "HwThermalSlowdown": 0x40,
                       "HwPowerBrakeSlowdown": 0x80, "DisplayClockSetting": 0x100}
MAX_PLACEMENTS = 32
NO_ID = 0xFFFFFFFF
# Where the nvidia_driver role puts nvidia-ml-py when the distribution's package is missing or too old (its 'nvml'
# step, issue 37 point 4): a virtualenv of the host's python3. A module that cannot import pynvml from its own
# interpreter takes the binding from there.
NVML_VENV = "/opt/gpuops/nvml"
NVML_SUCCESS = 0
NVML_ERROR_INSUFFICIENT_SIZE = 7
# Process lists, newest entry point first: nvidia-ml-py's unversioned wrapper calls the _v3 symbol (510.39.01 and
# newer, not in 535.98) under throwOnVersionMismatch; _v2 (450.66 and newer); then the driver's original symbol,
# which the binding does not wrap (NVIDIA's nvml.h in NVIDIA/nvidia-settings, per release).
PROCESS_LISTS = {"compute": ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2"),
                 "graphics": ("nvmlDeviceGetGraphicsRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses_v2")}


class _ProcessInfoV1(ctypes.Structure):
    """nvml.h nvmlProcessInfo_v1_t, what the original (unversioned) process-list symbol fills in."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class NvmlError(Exception):
    """An NVML failure described for the user."""


class StepError(NvmlError):
    """An NVML failure whose message already names the step ("creating GPU instance 1g.10gb at placement 0:1: ...");
    the caller adds the GPU."""


class ApplyError(NvmlError):
    """A failed apply; ``restored`` tells whether the previous geometry was put back."""

    def __init__(self, message: str, restored: bool) -> None:
        super(ApplyError, self).__init__(message)
        self.restored = restored


class Device:
    """One GPU as this adapter holds it.

    ``info`` is the plain description a module reports (identity, then what fill() adds: JSON-ready data only);
    ``table`` the GI profile table NVML gave for the GPU (empty until profiles() read it). ``handle`` is NVML's
    handle, for this adapter's calls only: callers pass the Device back instead, so no ctypes object can reach a
    result, and rebind() renews every handle in one place after a new NVML session.
    """

    __slots__ = ("info", "table", "handle")

    def __init__(self, handle: Any, info: dict[str, Any], table: Optional[geometry.ProfileTable] = None) -> None:
        self.handle = handle
        self.info = info
        self.table = table if table is not None else geometry.ProfileTable([])

    @property
    def index(self) -> int:
        return int(self.info["index"])


def _mig_mode(current: Any, pending: Any) -> dict[str, str]:
    """nvmlDeviceGetMigMode's (current, pending) as the GPU dicts report it."""
    return {"current": "enabled" if current else "disabled", "pending": "enabled" if pending else "disabled"}


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _const(value: Any) -> Any:
    # nvidia-ml-py defines some constants as 1-tuples (trailing comma), e.g. NVML_GRID_LICENSE_EXPIRY_VALID.
    return value[0] if isinstance(value, tuple) else value


def gpu_label(gpu: dict[str, Any]) -> str:
    """How an NVML error names a GPU: index, model, UUID and PCI address, as far as they are known. The index alone
    is not enough: NVML may renumber GPUs, and a log read later must point at one physical device."""
    known = [str(gpu[k]) for k in ("model", "uuid", "pci_address") if gpu.get(k)]
    return "GPU %d (%s)" % (gpu["index"], ", ".join(known)) if known else "GPU %d" % gpu["index"]


def pci_address(bus_id: str) -> str:
    """NVML '00000000:17:00.0' -> sysfs '0000:17:00.0'."""
    bus_id = bus_id.lower()
    domain, _sep, rest = bus_id.partition(":")
    if not rest:
        return bus_id
    return "%04x:%s" % (int(domain, 16) & 0xFFFF, rest)


def pci_sysfs(root: str, address: str) -> dict[str, Any]:
    """Bound kernel driver and IOMMU group of a PCI function, read under ``root`` (``/`` on a real host)."""
    out: dict[str, Any] = {"driver": None, "iommu_group": None}
    if not os.path.isdir(os.path.join(root, "sys", "bus", "pci", "devices", address)):
        return out
    try:
        dev = sysfs.pci_device(root, address)
    except sysfs.SysfsError as e:
        out["error"] = str(e)
        return out
    out["driver"] = dev["driver"]
    out["iommu_group"] = dev["iommu_group"]
    return out


# Host GPU clients that hold the GPUs open without being NVML processes, so that an Ampere MIG mode change stays
# pending (IN_USE) until they let go and the GPU is reset: nvidia-persistenced (gpu-operator#118; NVIDIA/NVSentinel
# #1690, "persistence mode counts as an attachment"), DCGM's nv-hostengine (mig-parted deployments/systemd/hooks.sh
# stops nvidia-dcgm.service in pre-apply-mode; DGX A100 user guide, "stop nvsm dcgm") and the nvidia_drm module
# (mig-parted README "Known Issues", #181). /proc/<pid>/comm holds 15 characters (TASK_COMM_LEN).
HOST_CLIENT_PROCESSES = {"nvidia-persiste": "nvidia-persistenced", "nv-hostengine": "nv-hostengine"}
HOST_CLIENT_MODULES = ("nvidia_drm",)
PROC_ROOT = "/proc"


def host_gpu_clients(proc: Optional[str] = None) -> list[str]:
    """The host GPU clients running now (names as HOST_CLIENT_PROCESSES and HOST_CLIENT_MODULES give them), read
    from ``proc`` (default PROC_ROOT): loaded modules from ``modules`` as mig-parted reads it
    (cmd/nvidia-mig-parted/util/nvml.go IsNvidiaModuleLoaded), processes from ``<pid>/comm``. Unreadable entries
    (a process that ended meanwhile, a /proc without them) are skipped."""
    proc = proc or PROC_ROOT
    found: set[str] = set()
    try:
        with open(os.path.join(proc, "modules"), encoding="utf-8") as fh:
            loaded = set(line.split()[0] for line in fh if line.strip())
    except OSError:
        loaded = set()
    found.update(m for m in HOST_CLIENT_MODULES if m in loaded)
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        pids = []
    for pid in pids:
        try:
            with open(os.path.join(proc, pid, "comm"), encoding="utf-8") as fh:
                name = HOST_CLIENT_PROCESSES.get(fh.read().strip())
        except OSError:
            continue
        if name:
            found.add(name)
    return sorted(found)


class Nvml:
    """One NVML session. ``available``/``reason`` say whether NVML could be used at all."""

    def __init__(self, module_name: str = "pynvml") -> None:
        self.calls = 0
        self.call_counts: dict[str, int] = {}
        self.available = False
        self.reason: Optional[str] = None
        self.nv: Any = None  # the pynvml module once open() imported it
        self._module_name = module_name
        self._ci_profiles: dict[int, list[tuple[int, Any]]] = {}

    # -- plumbing ---------------------------------------------------------------------------------------------

    def call(self, name: str, *args: Any) -> Any:
        self.calls += 1
        self.call_counts[name] = self.call_counts.get(name, 0) + 1
        try:
            return getattr(self.nv, name)(*args)
        except Exception as e:
            # Which NVML function failed, for the message (failure()); the error itself goes on unchanged.
            if self.nv is not None and isinstance(e, self.nv.NVMLError) and not hasattr(e, "gpuops_call"):
                e.gpuops_call = name
            raise

    def error_name(self, err: Exception) -> str:
        code = getattr(err, "value", None)
        for attr in dir(self.nv):
            if attr.startswith("NVML_ERROR_") and getattr(self.nv, attr) == code:
                return attr
        return "NVML_ERROR_%s" % code

    def describe(self, err: Exception) -> str:
        return "%s (%s)" % (_text(err), self.error_name(err))

    def failure(self, err: Exception) -> str:
        """An NVMLError as the message's last part: 'NVML error Invalid Argument (NVML_ERROR_INVALID_ARGUMENT) from
        nvmlDeviceGetGpuInstances'. The caller puts the GPU (gpu_label) and the step in front."""
        call = getattr(err, "gpuops_call", None)
        return "NVML error %s%s" % (self.describe(err), " from %s" % call if call else "")

    def is_error(self, err: BaseException, *names: str) -> bool:
        return isinstance(err, self.nv.NVMLError) and getattr(err, "value", None) in [getattr(self.nv, n, None) for n in names]

    def _import(self) -> Any:
        """pynvml from this interpreter, else from the collection's virtualenv (NVML_VENV)."""
        try:
            return __import__(self._module_name)
        except ImportError:
            found = glob.glob(os.path.join(NVML_VENV, "lib", "python3*", "site-packages"))
            if not found:
                raise
            # The newest python3.N (numerically: 3.11 after 3.9) when the venv was ever made by two.
            sys.path.append(max(found, key=lambda p: [int(n) for n in os.path.basename(os.path.dirname(p))[6:].split(".")
                                                      if n.isdigit()]))
            return __import__(self._module_name)

    @property
    def binding(self) -> dict[str, Optional[str]]:
        """Which pynvml this run uses (its file) and the interpreter that runs it."""
        return {"module": getattr(self.nv, "__file__", None) if self.nv is not None else None, "python": sys.executable}

    def missing_symbol(self, err: BaseException) -> bool:
        """Whether ``err`` says the driver (or the binding) lacks the entry point called: nvidia-ml-py raises
        NVMLError_FunctionNotFound for a symbol the library does not export, and NVMLLibraryMismatchError (a plain
        Exception, not an NVMLError) from its unversioned wrappers under throwOnVersionMismatch; a binding older than
        the function has no attribute for it."""
        # By name: older bindings have no such class, so there is none to compare with.
        mismatch = any(c.__name__ == "NVMLLibraryMismatchError" for c in type(err).__mro__)
        return isinstance(err, AttributeError) or mismatch or self.is_error(err, "NVML_ERROR_FUNCTION_NOT_FOUND")

    def _mismatch_error(self) -> tuple[type[BaseException], ...]:
        """nvidia-ml-py's NVMLLibraryMismatchError, where the binding has it."""
        cls = getattr(self.nv, "NVMLLibraryMismatchError", None)
        return (cls,) if isinstance(cls, type) and issubclass(cls, BaseException) else ()

    def binding_errors(self) -> tuple[type[BaseException], ...]:
        """What nvidia-ml-py raises for an answer NVML did not give: NVMLError, its NVMLLibraryMismatchError, and
        AttributeError / NotImplementedError for a function the binding lacks."""
        return (self.nv.NVMLError, AttributeError, NotImplementedError) + self._mismatch_error()

    def c_symbol(self, name: str) -> Any:
        """The driver's own C function ``name`` through nvidia-ml-py's symbol lookup (``_nvmlGetFunctionPointer``),
        for entry points the binding does not wrap: NVMLError_FunctionNotFound when the driver lacks it."""
        self.calls += 1
        self.call_counts[name] = self.call_counts.get(name, 0) + 1
        return getattr(self.nv, "_nvmlGetFunctionPointer")(name)

    def open(self) -> bool:
        try:
            self.nv = self._import()
        except ImportError as e:
            self.reason = ("Python module pynvml (package nvidia-ml-py) is not installed (neither for %s nor in %s; the "
                           "nvidia_driver role's nvml step installs it): %s" % (sys.executable, NVML_VENV, e))
            return False
        try:
            self.call("nvmlInit")
        except self.nv.NVMLError as e:
            if self.is_error(e, "NVML_ERROR_LIBRARY_NOT_FOUND"):
                self.reason = "NVML library (libnvidia-ml.so.1) not found: the NVIDIA driver is not installed"
            elif self.is_error(e, "NVML_ERROR_DRIVER_NOT_LOADED"):
                self.reason = "the NVIDIA kernel driver is not loaded"
            elif self.is_error(e, "NVML_ERROR_LIB_RM_VERSION_MISMATCH"):
                self.reason = "NVML library and kernel module versions differ (driver updated, reboot pending)"
            elif self.is_error(e, "NVML_ERROR_NO_PERMISSION"):
                self.reason = "no permission to open the NVIDIA devices"
            else:
                self.reason = "opening NVML: %s" % self.failure(e)
            return False
        except OSError as e:
            self.reason = "NVML could not be loaded: %s" % e
            return False
        self.available = True
        return True

    def close(self) -> None:
        if self.available:
            try:
                self.call("nvmlShutdown")
            except self.nv.NVMLError:
                pass
            self.available = False

    def _try(self, name: str, *args: Any) -> Any:
        """Optional query: None when NVML does not support it here (old driver, no such feature)."""
        try:
            return self.call(name, *args)
        except (self.nv.NVMLError, AttributeError, NotImplementedError):
            return None

    # -- system -----------------------------------------------------------------------------------------------

    def system(self) -> dict[str, Optional[str]]:
        cuda = self._try("nvmlSystemGetCudaDriverVersion")
        nvml_version = self._try("nvmlSystemGetNVMLVersion")
        return {
            "driver_version": _text(self.call("nvmlSystemGetDriverVersion")),
            "cuda_driver_version": "%d.%d" % (cuda // 1000, (cuda % 1000) // 10) if cuda else None,
            "nvml_version": _text(nvml_version) if nvml_version is not None else None,
        }

    def count(self) -> int:
        return self.call("nvmlDeviceGetCount")

    def handle(self, index: int) -> Any:
        return self.call("nvmlDeviceGetHandleByIndex", index)

    # -- one GPU ----------------------------------------------------------------------------------------------

    def device(self, index: int) -> Device:
        """The GPU at ``index`` with its identity (PCI, memory, UUID, name, MIG mode) in ``info``."""
        dev = self.handle(index)
        pci = self.call("nvmlDeviceGetPciInfo", dev)
        mem = self.call("nvmlDeviceGetMemoryInfo", dev)
        info = {
            "index": index,
            "uuid": _text(self.call("nvmlDeviceGetUUID", dev)),
            "model": _text(self.call("nvmlDeviceGetName", dev)),
            "pci_bus_id": _text(pci.busId),
            "pci_address": pci_address(_text(pci.busId)),
            "pci_device_id": "0x%08X" % pci.pciDeviceId,
            "pci_subsystem_id": "0x%08X" % pci.pciSubSystemId,
            "memory": {"total_bytes": int(mem.total), "used_bytes": int(mem.used), "free_bytes": int(mem.free)},
            "mig_capable": False,
            "mig_mode": None,
        }
        try:
            cur, pend = self.call("nvmlDeviceGetMigMode", dev)
        except self.nv.NVMLError as e:
            if not self.is_error(e, "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND"):
                raise
        else:
            info["mig_capable"] = True
            info["mig_mode"] = _mig_mode(cur, pend)
        return Device(dev, info)

    def architecture(self, device: Device) -> Optional[int]:
        return self._try("nvmlDeviceGetArchitecture", device.handle)

    def compute_capability(self, device: Device) -> Optional[str]:
        """CUDA compute capability as "major.minor", or None where NVML does not say."""
        cc = self._try("nvmlDeviceGetCudaComputeCapability", device.handle)
        return "%d.%d" % tuple(cc) if cc else None

    def _gi_profile_info(self, dev: Any, idx: int) -> Any:
        try:
            return self.call("nvmlDeviceGetGpuInstanceProfileInfo", dev, idx)
        except Exception as e:  # pylint: disable=broad-except  # missing_symbol decides; anything else goes on
            # The versioned (V) entry point exists from 510.39.01; before, the v1 call.
            if self.missing_symbol(e):
                return self.call("nvmlDeviceGetGpuInstanceProfileInfo", dev, idx, 1)
            raise

    def _placements(self, dev: Any, profile_id: int) -> list[tuple[int, int]]:
        """The placements NVML offers for a GI profile: nvidia-ml-py calls the _v2 symbol (470.42.01 and newer);
        older drivers have only the original one, called directly (the binding does not wrap it)."""
        arr = (self.nv.c_nvmlGpuInstancePlacement_t * MAX_PLACEMENTS)()
        cnt = ctypes.c_uint(MAX_PLACEMENTS)
        try:
            self.call("nvmlDeviceGetGpuInstancePossiblePlacements", dev, profile_id, arr, ctypes.byref(cnt))
        except Exception as e:  # pylint: disable=broad-except  # missing_symbol decides; anything else goes on
            if not self.missing_symbol(e):
                raise
            cnt.value = MAX_PLACEMENTS
            fn = self.c_symbol("nvmlDeviceGetGpuInstancePossiblePlacements")
            getattr(self.nv, "_nvmlCheckReturn")(fn(dev, profile_id, arr, ctypes.byref(cnt)))
        return [(arr[i].start, arr[i].size) for i in range(cnt.value)]

    def profiles(self, device: Device) -> geometry.ProfileTable:
        """Read the GPU's GI profiles with the placements NVML reports (empty when NVML offers none) into
        ``device.table``, and return that table."""
        dev, total_memory_bytes = device.handle, device.info["memory"]["total_bytes"]
        out = []
        for idx in range(self.nv.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = self._gi_profile_info(dev, idx)
            except self.nv.NVMLError as e:
                if self.is_error(e, "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_NOT_FOUND"):
                    continue
                raise
            if not info.instanceCount:
                continue
            placements = self._placements(dev, info.id)
            name = geometry.gi_profile_name(info.sliceCount, info.memorySizeMB, total_memory_bytes, GI_INDEX_ATTRS.get(idx, ""))
            aliases = []
            nvml_name = _text(getattr(info, "name", b"") or b"").strip()
            if nvml_name.startswith("MIG "):
                nvml_name = nvml_name[4:]
            if nvml_name and nvml_name != name and geometry.MIG_NAME_RE.match(nvml_name):
                aliases.append(nvml_name)
            out.append(geometry.Profile(name, info.id, info.sliceCount, placements, info.instanceCount, int(info.memorySizeMB), aliases, idx))
        device.table = geometry.ProfileTable(out)
        return device.table

    def _ci_profile_info(self, gi: Any, idx: int) -> Any:
        shared = self.nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
        try:
            return self.call("nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, idx, shared)
        except Exception as e:  # pylint: disable=broad-except  # missing_symbol decides; anything else goes on
            # Drivers before the versioned (V) entry point (510.39.01) only have the v1 call.
            if self.missing_symbol(e):
                return self.call("nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, idx, shared, 1)
            raise

    def _ci_profiles_of(self, gi: Any, gi_profile_id: int) -> list[tuple[int, Any]]:
        """[(index, info)] of the CI profiles a GI offers; the same for every GI of one profile, so cached."""
        if gi_profile_id in self._ci_profiles:
            return self._ci_profiles[gi_profile_id]
        found = []
        for idx in range(self.nv.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            try:
                info = self._ci_profile_info(gi, idx)
            except self.nv.NVMLError as e:
                if self.is_error(e, "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_NOT_FOUND"):
                    continue
                raise
            if info.instanceCount:
                found.append((idx, info))
        self._ci_profiles[gi_profile_id] = found
        return found

    def instances(self, device: Device) -> list[dict[str, Any]]:
        """Current GPU instances with placements and compute instances, for the profiles of ``device.table``."""
        dev = device.handle
        result = []
        for prof in device.table.profiles:
            arr = (self.nv.c_nvmlGpuInstance_t * max(prof.max_count, 1))()
            cnt = ctypes.c_uint(0)
            self.call("nvmlDeviceGetGpuInstances", dev, prof.id, arr, ctypes.byref(cnt))
            for i in range(cnt.value):
                gi = arr[i]
                info = self.call("nvmlGpuInstanceGetInfo", gi)
                entry: dict[str, Any] = {
                    "gi_id": int(info.id), "profile": prof.name, "profile_id": prof.id, "slices": prof.slices,
                    "placement": {"start": int(info.placement.start), "size": int(info.placement.size)},
                    "compute_instances": []}
                for _idx, ci_prof in self._ci_profiles_of(gi, prof.id):
                    carr = (self.nv.c_nvmlComputeInstance_t * max(ci_prof.instanceCount, 1))()
                    ccnt = ctypes.c_uint(0)
                    self.call("nvmlGpuInstanceGetComputeInstances", gi, ci_prof.id, carr, ctypes.byref(ccnt))
                    for j in range(ccnt.value):
                        cinfo = self.call("nvmlComputeInstanceGetInfo", carr[j])
                        entry["compute_instances"].append({
                            "ci_id": int(cinfo.id), "profile_id": int(ci_prof.id), "slices": int(ci_prof.sliceCount),
                            "profile": geometry.ci_profile_name(int(ci_prof.sliceCount), prof.name, prof.slices),
                            "placement": {"start": int(cinfo.placement.start), "size": int(cinfo.placement.size)},
                        })
                entry["compute_instances"].sort(key=lambda c: c["ci_id"])
                result.append(entry)
        result.sort(key=lambda g: (g["placement"]["start"], g["gi_id"]))
        return result

    def _process_list(self, kind: str, dev: Any) -> list[Any]:
        """One process list through the newest entry point the driver exports (PROCESS_LISTS, then the original
        symbol with its v1 records), as NVIDIA's own tools fall back."""
        for name in PROCESS_LISTS[kind]:
            try:
                return list(self.call(name, dev) or [])
            except Exception as e:  # pylint: disable=broad-except  # missing_symbol decides; anything else goes on
                if not self.missing_symbol(e):
                    raise
        fn = self.c_symbol(PROCESS_LISTS[kind][0])
        count = ctypes.c_uint(0)
        ret = fn(dev, ctypes.byref(count), None)
        if ret == NVML_SUCCESS:
            return []
        if ret != NVML_ERROR_INSUFFICIENT_SIZE:
            getattr(self.nv, "_nvmlCheckReturn")(ret)
        count.value = count.value * 2 + 5  # room for processes started meanwhile, as nvidia-ml-py sizes it
        infos = (_ProcessInfoV1 * count.value)()
        getattr(self.nv, "_nvmlCheckReturn")(fn(dev, ctypes.byref(count), infos))
        return [infos[i] for i in range(count.value)]

    def processes(self, device: Device, strict: bool = False) -> list[dict[str, Any]]:
        """Processes on the GPU. ``strict``: a list NVML refuses (NO_PERMISSION, FUNCTION_NOT_FOUND, ...) raises
        NvmlError, because "no processes" would let a change destroy instances that are in use."""
        dev = device.handle
        procs: dict[int, dict[str, Any]] = {}
        for fn, kind in (("nvmlDeviceGetComputeRunningProcesses", "compute"), ("nvmlDeviceGetGraphicsRunningProcesses", "graphics")):
            try:
                found: Optional[list[Any]] = self._process_list(kind, dev)
            except self.binding_errors() as e:
                if strict:
                    why = self.failure(e) if isinstance(e, self.nv.NVMLError) else "%s: %s" % (fn, e)
                    raise NvmlError("cannot list the processes on the GPU: %s" % why)
                found = None
            for p in found or []:
                gi_id = getattr(p, "gpuInstanceId", NO_ID)
                ci_id = getattr(p, "computeInstanceId", NO_ID)
                used = getattr(p, "usedGpuMemory", None)
                if used == 2 ** 64 - 1:  # NVML_VALUE_NOT_AVAILABLE in a v1 record (the binding maps it to None)
                    used = None
                procs.setdefault(int(p.pid), {
                    "pid": int(p.pid), "type": kind, "used_memory_bytes": int(used) if used is not None else None,
                    "gpu_instance_id": None if gi_id in (None, NO_ID) else int(gi_id),
                    "compute_instance_id": None if ci_id in (None, NO_ID) else int(ci_id),
                })
        return [procs[k] for k in sorted(procs)]

    def virtualization(self, device: Device) -> dict[str, Any]:
        dev = device.handle
        mode = self._try("nvmlDeviceGetVirtualizationMode", dev)
        out = {"mode": VIRT_MODES.get(mode, mode), "host_vgpu_mode": None}
        if mode in (3, 4):
            host = self._try("nvmlDeviceGetHostVgpuMode", dev)
            out["host_vgpu_mode"] = HOST_VGPU_MODES.get(host, host)
        return out

    def vgpu_scheduler(self, device: Device) -> dict[str, Any]:
        """The vGPU scheduler a vGPU host's driver runs on this GPU, and what the GPU supports.

        nvidia-ml-py: nvmlDeviceGetVgpuSchedulerState (c_nvmlVgpuSchedulerGetState_t: schedulerPolicy, arrMode,
        schedulerParams) and nvmlDeviceGetVgpuSchedulerCapabilities (c_nvmlVgpuSchedulerCapabilities_t). Not a vGPU
        host (bare metal, passthrough, guest) or too old a driver: NOT_SUPPORTED (or FUNCTION_NOT_FOUND), reported as
        ``supported: False`` with the error, never raised. The raw state goes to _gpu.vgpu_scheduler.spec_of_nvml.
        """
        dev = device.handle
        out: dict[str, Any] = {"supported": False, "error": None, "state": None, "capabilities": None}
        state, err = self._reading("nvmlDeviceGetVgpuSchedulerState", dev)
        if err:
            out["error"] = err
            return out
        # schedulerParams is a union: with ARR on, vgpuSchedDataWithARR {avgFactor, timeslice}; else vgpuSchedData
        # {timeslice}: the slice sits at a different offset in each, so arrMode says which member to read.
        arr_mode = int(state.arrMode)
        params = state.schedulerParams
        if arr_mode == _const(getattr(self.nv, "NVML_VGPU_SCHEDULER_ARR_DISABLE", 1)):
            timeslice, avg = int(params.vgpuSchedData.timeslice), 0
        else:
            timeslice, avg = int(params.vgpuSchedDataWithARR.timeslice), int(params.vgpuSchedDataWithARR.avgFactor)
        out["supported"] = True
        out["state"] = {"scheduler_policy": int(state.schedulerPolicy), "arr_mode": arr_mode,
                        "timeslice": timeslice, "avg_factor": avg}
        caps, err = self._reading("nvmlDeviceGetVgpuSchedulerCapabilities", dev)
        if err:
            out["capabilities_error"] = err
            return out
        policies = {1: "best_effort", 2: "equal_share", 3: "fixed_share"}
        out["capabilities"] = {
            "supported_policies": [policies[int(p)] for p in caps.supportedSchedulers if int(p) in policies],
            "min_timeslice": int(caps.minTimeslice), "max_timeslice": int(caps.maxTimeslice),
            "arr_supported": bool(caps.isArrModeSupported),
            "min_frequency": int(caps.minFrequencyForARR), "max_frequency": int(caps.maxFrequencyForARR),
            "min_avg_factor": int(caps.minAvgFactorForARR), "max_avg_factor": int(caps.maxAvgFactorForARR),
        }
        return out

    def licence(self, device: Device) -> dict[str, Any]:
        feats = self._try("nvmlDeviceGetGridLicensableFeatures", device.handle)
        if feats is None:
            return {"supported": False, "licensed": None, "features": []}
        out: dict[str, Any] = {"supported": bool(feats.isGridLicenseSupported), "licensed": None, "features": []}
        for i in range(min(int(feats.licensableFeaturesCount), len(feats.gridLicensableFeatures))):
            f = feats.gridLicensableFeatures[i]
            exp = f.licenseExpiry
            status = LICENSE_EXPIRY.get(int(exp.status), int(exp.status))
            expiry = None
            if int(exp.status) == _const(getattr(self.nv, "NVML_GRID_LICENSE_EXPIRY_VALID", 2)):
                expiry = "%04d-%02d-%02dT%02d:%02d:%02dZ" % (exp.year, exp.month, exp.day, exp.hour, exp.min, exp.sec)
            out["features"].append({
                "feature": LICENSE_FEATURES.get(int(f.featureCode), int(f.featureCode)),
                "product": _text(f.productName), "licensed": bool(f.featureState), "enabled": bool(f.featureEnabled),
                "info": _text(f.licenseInfo), "expiry_status": status, "expiry": expiry,
            })
        enabled = [f for f in out["features"] if f["enabled"]] or out["features"]
        if out["supported"] and enabled:
            out["licensed"] = any(f["licensed"] for f in enabled)
        return out

    # -- health (read-only; module_utils/_preflight/health.py judges) --------------------------------------------------------

    def _reading(self, name: str, *args: Any) -> tuple[Any, Optional[str]]:
        """(value, None), or (None, 'NVML_ERROR_...') when NVML does not answer: NOT_SUPPORTED is an answer too (the
        GPU or driver lacks the feature, or MIG hides it), which _preflight/health.py tells apart. A lost GPU is not a reading:
        that error goes on and becomes the GPU's error."""
        try:
            return self.call(name, *args), None
        except AttributeError:  # an nvidia-ml-py older than the function
            return None, "NVML_ERROR_FUNCTION_NOT_FOUND"
        except self.nv.NVMLError as e:
            if self.is_error(e, "NVML_ERROR_GPU_IS_LOST"):
                raise
            return None, self.error_name(e)

    def health(self, device: Device) -> dict[str, Any]:
        """The readings a health gate needs, each as NVML gave it (nvml.h: nvmlDeviceGetTotalEccErrors,
        nvmlDeviceGetRemappedRows, nvmlDeviceGetRetiredPagesPendingStatus, nvmlDeviceGet{Curr,Max}PcieLink*,
        nvmlDeviceGetTemperature[Threshold], nvmlDeviceGetCurrentClocksEventReasons), with the error in place of a
        value NVML did not give."""
        nv, dev = self.nv, device.handle
        out: dict[str, Any] = {}
        persistence, err = self._reading("nvmlDeviceGetPersistenceMode", dev)
        out["persistence_mode"] = {"enabled": None if err else bool(persistence), "error": err}
        modes, err = self._reading("nvmlDeviceGetEccMode", dev)
        ecc: dict[str, Any] = {"enabled": None, "pending": None, "error": err}
        if not err:
            ecc["enabled"], ecc["pending"] = bool(modes[0]), bool(modes[1])
            for kind, error_type in (("uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED"),
                                     ("corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED")):
                for counter, counter_type in (("volatile", "NVML_VOLATILE_ECC"), ("aggregate", "NVML_AGGREGATE_ECC")):
                    value, e = self._reading("nvmlDeviceGetTotalEccErrors", dev, getattr(nv, error_type),
                                             getattr(nv, counter_type))
                    ecc["%s_%s" % (counter, kind)] = None if e else int(value)
                    if e:
                        ecc["%s_%s_error" % (counter, kind)] = e
        out["ecc"] = ecc
        rows, err = self._reading("nvmlDeviceGetRemappedRows", dev)
        out["remapped_rows"] = {"error": err} if err else {
            "correctable": int(rows[0]), "uncorrectable": int(rows[1]), "pending": bool(rows[2]),
            "failure": bool(rows[3]), "error": None}
        pending, err = self._reading("nvmlDeviceGetRetiredPagesPendingStatus", dev)
        out["retired_pages"] = {"pending": None if err else bool(pending), "error": err}
        pcie: dict[str, Any] = {}
        for key, name in (("gen", "nvmlDeviceGetCurrPcieLinkGeneration"), ("width", "nvmlDeviceGetCurrPcieLinkWidth"),
                          ("max_gen", "nvmlDeviceGetMaxPcieLinkGeneration"), ("max_width", "nvmlDeviceGetMaxPcieLinkWidth"),
                          ("gpu_max_gen", "nvmlDeviceGetGpuMaxPcieLinkGeneration")):
            value, err = self._reading(name, dev)
            pcie[key] = None if err else int(value)
            if err:
                pcie.setdefault("errors", {})[key] = err
        out["pcie"] = pcie
        temp: dict[str, Any] = {}
        value, err = self._reading("nvmlDeviceGetTemperature", dev, nv.NVML_TEMPERATURE_GPU)
        temp["current"] = None if err else int(value)
        for key in ("slowdown", "shutdown", "gpu_max"):
            value, err = self._reading("nvmlDeviceGetTemperatureThreshold", dev,
                                       getattr(nv, "NVML_TEMPERATURE_THRESHOLD_%s" % key.upper()))
            temp[key] = None if err else int(value)
        out["temperature"] = temp
        # The clocks *event* reasons replaced the *throttle* reasons in nvidia-ml-py 12.535 (same bits).
        mask, err = self._reading("nvmlDeviceGetCurrentClocksEventReasons", dev)
        if err == "NVML_ERROR_FUNCTION_NOT_FOUND":
            mask, err = self._reading("nvmlDeviceGetCurrentClocksThrottleReasons", dev)
        reasons = sorted(n for n, bit in CLOCK_EVENT_REASONS.items() if not err and int(mask) & bit)
        out["clock_event_reasons"] = {"mask": None if err else int(mask), "active": reasons, "error": err}
        return out

    def snapshot(self, index: int, detail: bool = True) -> Device:
        """Everything about one GPU that the modules use, read into a Device (see fill())."""
        return self.fill(self.device(index), detail)

    def fill(self, device: Device, detail: bool = True, strict: bool = False) -> Device:
        """Add MIG profiles (``device.table``), instances, processes (and with ``detail`` virtualization, licence and
        vGPU scheduler) to a device() read. ``strict`` makes an unreadable process list an error (see processes()).

        What was read stays in ``device.info`` when a later read raises."""
        info = device.info
        info["instances"] = []
        if info["mig_capable"]:
            self.profiles(device)
            if info["mig_mode"]["current"] == "enabled":
                info["instances"] = self.instances(device)
        info["processes"] = self.processes(device, strict=strict)
        if detail:
            info["virtualization"] = self.virtualization(device)
            info["license"] = self.licence(device)
            info["vgpu_scheduler"] = self.vgpu_scheduler(device)
        return device

    def refresh(self, device: Device) -> Device:
        """The GPU as it is now: a new Device (same handle and profile table, a copy of ``info``) with MIG mode and
        instances read again (identity and profiles do not change). ``device`` itself is left as it was read."""
        dev = device.handle
        cur, pend = self.call("nvmlDeviceGetMigMode", dev)
        fresh = Device(dev, dict(device.info), device.table)
        fresh.info["mig_mode"] = _mig_mode(cur, pend)
        fresh.info["instances"] = self.instances(fresh) if cur else []
        return fresh

    def rebind(self, devices: Iterable[Device]) -> None:
        """New handles for Devices read before reopen(); raises NvmlError when a GPU's index now holds another GPU."""
        for device in devices:
            dev = self.handle(device.index)
            uuid = _text(self.call("nvmlDeviceGetUUID", dev))
            if uuid != device.info["uuid"]:
                raise NvmlError("GPU %d is %s after the MIG mode change, not %s: the GPUs were renumbered"
                                % (device.index, uuid, device.info["uuid"]))
            device.handle = dev

    # -- actions ----------------------------------------------------------------------------------------------

    def _gi(self, dev: Any, gi_id: int) -> Any:
        return self.call("nvmlDeviceGetGpuInstanceById", dev, gi_id)

    def _ci_profile_id(self, gi: Any, gi_profile_id: int, slices: int) -> int:
        for _idx, info in self._ci_profiles_of(gi, gi_profile_id):
            if int(info.sliceCount) == slices:
                return int(info.id)
        raise NvmlError("NVML offers no %d-slice compute instance profile for this GPU instance" % slices)

    def _create_cis(self, gi: Any, gi_profile_id: int, cis: list[dict[str, Any]]) -> list[Any]:
        """Create compute instances in a GI; several share a GI, so their placements are solved, not left to NVML."""
        ids = [self._ci_profile_id(gi, gi_profile_id, c["slices"]) for c in cis]
        placements = [c.get("placement") for c in cis]
        if len(cis) > 1 and not all(placements):
            items = []
            for c, pid in zip(cis, ids):
                arr = (self.nv.c_nvmlComputeInstancePlacement_t * MAX_PLACEMENTS)()
                cnt = ctypes.c_uint(0)
                self.call("nvmlGpuInstanceGetComputeInstancePossiblePlacements", gi, pid, arr, ctypes.byref(cnt))
                items.append((pid, [(arr[i].start, arr[i].size) for i in range(cnt.value)]))
            solved = geometry.solve_placements(items)
            if solved is None:
                raise NvmlError("no non-overlapping placement for compute instances %s" % ", ".join(c["profile"] for c in cis))
            placements = [{"start": s, "size": z} for s, z in solved]
        handles = []
        for c, pid, pl in zip(cis, ids, placements):
            if pl and len(cis) > 1:
                p = self.nv.c_nvmlComputeInstancePlacement_t()
                p.start, p.size = pl["start"], pl["size"]
                handles.append(self.call("nvmlGpuInstanceCreateComputeInstanceWithPlacement", gi, pid, ctypes.byref(p)))
            else:
                handles.append(self.call("nvmlGpuInstanceCreateComputeInstance", gi, pid))
        return handles

    def _create_gis(self, dev: Any, actions: list[dict[str, Any]], created: list[tuple[Any, list[Any]]]) -> None:
        """Run create_gi/create_ci actions; ``created`` collects (gi handle, [ci handles]) for rollback."""
        by_ref: dict[Any, tuple[Any, int, tuple[Any, list[Any]], str]] = {}
        cis: dict[Any, list[dict[str, Any]]] = {}
        for a in actions:
            if a["action"] == "create_gi":
                p = self.nv.c_nvmlGpuInstancePlacement_t()
                p.start, p.size = a["placement"]["start"], a["placement"]["size"]
                where = "GPU instance %s at placement %d:%d" % (a["profile"], p.start, p.size)
                try:
                    gi = self.call("nvmlDeviceCreateGpuInstanceWithPlacement", dev, a["profile_id"], ctypes.byref(p))
                except self.nv.NVMLError as e:
                    raise StepError("creating %s: %s" % (where, self.failure(e)))
                entry: tuple[Any, list[Any]] = (gi, [])
                created.append(entry)
                by_ref[a["ref"]] = (gi, a["profile_id"], entry, where)
                cis[a["ref"]] = []
            elif a["action"] == "create_ci":
                cis[a["gi_ref"]].append(a)
        for ref, ci_list in cis.items():
            gi, gi_profile_id, entry, where = by_ref[ref]
            if not ci_list:
                continue
            step = "creating compute instance(s) %s in %s" % (", ".join(c["profile"] for c in ci_list), where)
            try:
                entry[1].extend(self._create_cis(gi, gi_profile_id, ci_list))
            except self.nv.NVMLError as e:
                raise StepError("%s: %s" % (step, self.failure(e)))
            except NvmlError as e:
                raise StepError("%s: %s" % (step, e))

    def _destroy(self, dev: Any, actions: list[dict[str, Any]], done: list[dict[str, Any]]) -> None:
        """Run destroy actions; ``done`` collects the ones that succeeded (for a precise rollback)."""
        for a in actions:
            try:
                if a["action"] == "destroy_ci":
                    ci = self.call("nvmlGpuInstanceGetComputeInstanceById", self._gi(dev, a["gi_id"]), a["ci_id"])
                    self.call("nvmlComputeInstanceDestroy", ci)
                elif a["action"] == "destroy_gi":
                    self.call("nvmlGpuInstanceDestroy", self._gi(dev, a["gi_id"]))
                done.append(a)
            except self.nv.NVMLError as e:
                # nvml.h documents IN_USE from nvmlComputeInstanceDestroy as processes active on the compute instance,
                # and from nvmlGpuInstanceDestroy as processes or compute instances active on the GPU instance: both
                # causes are named, not just processes.
                if a["action"] == "destroy_ci":
                    what = "compute instance %s of GPU instance %s" % (a["ci_id"], a["gi_id"])
                    busy = "processes are active on the compute instance"
                else:
                    what = "GPU instance %s (%s)" % (a["gi_id"], a["profile"])
                    busy = "compute instances or processes are active on the GPU instance"
                hint = " (%s)" % busy if self.is_error(e, "NVML_ERROR_IN_USE") else ""
                raise StepError("destroying %s: %s%s" % (what, self.failure(e), hint))

    def set_mig_mode(self, device: Device, enabled: bool) -> Optional[str]:
        """Request a MIG mode; returns None when it is current now, else why it is still pending.

        ``nvmlDeviceSetMigMode`` returns SUCCESS and reports the outcome in its activation status (nvml.h): SUCCESS
        (the driver reset the GPU itself), RESET_REQUIRED (pass-through VM: only a VM reboot commits it) or IN_USE
        (the GPU was not idle: the mode stays pending until the clients stop and the GPU is reset). mig-parted reads
        the pending state back the same way (``pkg/mig/mode/nvml.go`` ``IsMigModeChangePending``).
        """
        dev = device.handle
        want = self.nv.NVML_DEVICE_MIG_ENABLE if enabled else self.nv.NVML_DEVICE_MIG_DISABLE
        status = None
        try:
            status = self.call("nvmlDeviceSetMigMode", dev, want)
        except self.nv.NVMLError as e:
            # Older bindings raised the activation status instead of returning it.
            if self.is_error(e, "NVML_ERROR_RESET_REQUIRED"):
                return "reset_required"
            hint = " (GPU instances or clients hold the GPU)" if self.is_error(e, "NVML_ERROR_IN_USE") else ""
            raise StepError("setting MIG mode %s: %s%s" % ("enabled" if enabled else "disabled", self.failure(e), hint))
        try:
            cur, _pend = self.call("nvmlDeviceGetMigMode", dev)
        except self.nv.NVMLError as e:
            raise StepError("reading the MIG mode back after setting it %s: %s"
                            % ("enabled" if enabled else "disabled", self.failure(e)))
        if bool(cur) == bool(enabled):
            return None
        if status == self.nv.NVML_ERROR_IN_USE:
            return "in_use"
        return "reset_required"

    def reopen(self) -> None:
        """A new NVML session: a MIG mode change may unbind or reset the device, and nvml.h expects the caller to
        query its attributes again, so handles from before are not reused."""
        try:
            self.call("nvmlShutdown")
        except self.nv.NVMLError:
            pass
        self.available = False
        self._ci_profiles = {}
        try:
            self.call("nvmlInit")
        except self.nv.NVMLError as e:
            raise StepError("opening NVML again after the MIG mode change: %s" % self.failure(e))
        self.available = True

    def apply(self, device: Device, plan: dict[str, Any],
              after_mode: Optional[Callable[[Device], list[dict[str, Any]]]] = None) -> dict[str, Any]:
        """Carry out a plan on one GPU. Returns {'reset_required', 'deferred', 'pending_reason'}.

        MIG mode first, then the instances (mig-parted's order: ``apply --mode-only``, then ``apply``). When the
        mode became current, ``after_mode(gpu)`` may return the create actions planned again on the GPU as it is
        now (new session, live profile table); it raises NvmlError to refuse, and the mode is rolled back.
        ``device.info`` is the GPU as the plan saw it: a failure restores that geometry.
        Raises ApplyError after restoring; its message names the step and NVML's error (the caller adds the GPU).
        """
        actions = plan["actions"]
        destroys = [a for a in actions if a["action"] in ("destroy_ci", "destroy_gi")]
        modes = [a for a in actions if a["action"] == "set_mig_mode"]
        creates = [a for a in actions if a["action"] in ("create_gi", "create_ci")]
        done: list[dict[str, Any]] = []
        created: list[tuple[Any, list[Any]]] = []
        mode_set = None
        pending = None
        step = "destroying instances"
        try:
            self._destroy(device.handle, destroys, done)
            for a in modes:
                step = "setting MIG mode"
                # Recorded first: when only reading the mode back fails, the change may have taken effect, and
                # setting the previous mode again is harmless when it did not.
                mode_set = a["mode"]
                pending = self.set_mig_mode(device, a["mode"] == "enabled")
            if pending and creates:
                return {"reset_required": True, "deferred": True, "pending_reason": pending}
            if modes and not pending and after_mode is not None:
                step = "checking the GPU after the MIG mode change"
                creates = after_mode(device)
            step = "creating instances"
            self._create_gis(device.handle, creates, created)
        except (NvmlError, self.nv.NVMLError) as e:
            # A raw NVMLError (a read between the steps, after_mode's new session) is rolled back like the others.
            if isinstance(e, StepError):
                why = str(e)
            elif isinstance(e, NvmlError):
                why = "%s: %s" % (step, e)
            else:
                why = "%s: %s" % (step, self.failure(e))
            restored, notes = self._restore(device, created, done, mode_set, bool(pending))
            raise ApplyError("%s; %s" % (why, notes), restored)
        return {"reset_required": bool(pending), "deferred": False, "pending_reason": pending}

    def _restore(self, device: Device, created: list[tuple[Any, list[Any]]], done: list[dict[str, Any]],
                 mode_set: Optional[str], reset: bool) -> tuple[bool, str]:
        """Undo a partial apply: drop what was created, restore the mode, recreate what was destroyed."""
        dev, gpu = device.handle, device.info
        problems = []
        gone_gis = set(a["gi_id"] for a in done if a["action"] == "destroy_gi")
        gone_cis = set((a["gi_id"], a["ci_id"]) for a in done if a["action"] == "destroy_ci")
        removed = [gi for gi in gpu["instances"] if gi["gi_id"] in gone_gis]
        # GIs that lost only some compute instances keep their slot; just their CIs come back.
        partial = [(gi, [ci for ci in gi["compute_instances"] if (gi["gi_id"], ci["ci_id"]) in gone_cis])
                   for gi in gpu["instances"] if gi["gi_id"] not in gone_gis]
        partial = [(gi, cis) for gi, cis in partial if cis]
        for gi, cis in reversed(created):
            for ci in cis:
                try:
                    self.call("nvmlComputeInstanceDestroy", ci)
                except self.nv.NVMLError as e:
                    problems.append("removing a compute instance this run created: %s" % self.failure(e))
            try:
                self.call("nvmlGpuInstanceDestroy", gi)
            except self.nv.NVMLError as e:
                problems.append("removing a GPU instance this run created: %s" % self.failure(e))
        before = gpu["mig_mode"]
        still_pending = None
        if mode_set is not None and mode_set != before["pending"]:
            try:
                still_pending = self.set_mig_mode(device, before["pending"] == "enabled")
            except NvmlError as e:
                problems.append("restoring MIG mode %s: %s" % (before["pending"], e))
            if still_pending and before["current"] == before["pending"] and removed:
                problems.append("MIG mode %s is back but pending a GPU reset (%s), so the previous instances could "
                                "not be recreated" % (before["pending"], still_pending))
        if removed and not reset and not still_pending:
            try:
                self._create_gis(dev, geometry.rollback_actions(removed), [])
            except NvmlError as e:
                problems.append("recreating the previous instances: %s" % e)
        for gi, cis in partial:
            try:
                handle = self._gi(dev, gi["gi_id"])
                self._create_cis(handle, gi["profile_id"], [dict(ci, placement=ci.get("placement")) for ci in cis])
            except (self.nv.NVMLError, NvmlError) as e:
                why = self.failure(e) if isinstance(e, self.nv.NVMLError) else e
                problems.append("recreating compute instances of GPU instance %s: %s" % (gi["gi_id"], why))
        if problems:
            return False, "restoring the previous geometry also failed (%s); the GPU needs manual attention" % "; ".join(problems)
        return True, "the previous geometry was restored"
