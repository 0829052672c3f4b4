"""MIG rules of gpusim, pure functions over the normalized state dict (no I/O).

Each rule names its source in shared/reference/mig.md (M1..M9, §1.11 ...).
Errors are raised as :class:`Fault` carrying an NVML return code.
"""

from __future__ import annotations

import dataclasses
import functools

from . import health, vgpu_sched
from .models import MODELS, CI_PLACEMENTS, CI_INDEX_BY_SLICES, gi_profile_by_id, full_profile

# NVML return codes used here (same values as nvidia-ml-py).
SUCCESS = 0
INVALID_ARGUMENT = 2
NOT_SUPPORTED = 3
NOT_FOUND = 6
INSUFFICIENT_SIZE = 7
RESET_REQUIRED = 16
IN_USE = 19
INSUFFICIENT_RESOURCES = 23
UNKNOWN = 999

ERROR_NAMES = {
    "UNINITIALIZED": 1, "INVALID_ARGUMENT": 2, "NOT_SUPPORTED": 3, "NO_PERMISSION": 4, "NOT_FOUND": 6,
    "INSUFFICIENT_SIZE": 7, "DRIVER_NOT_LOADED": 9, "TIMEOUT": 10, "LIBRARY_NOT_FOUND": 12, "GPU_IS_LOST": 15,
    "RESET_REQUIRED": 16, "OPERATING_SYSTEM": 17, "LIB_RM_VERSION_MISMATCH": 18, "IN_USE": 19, "MEMORY": 20,
    "NO_DATA": 21, "INSUFFICIENT_RESOURCES": 23, "NOT_READY": 27, "INVALID_STATE": 29, "UNKNOWN": 999,
}

ANY_ID = 0xFFFFFFFF


class Fault(Exception):
    def __init__(self, code, why=""):
        super().__init__(code, why)
        self.code = code
        self.why = why


def error_code(value):
    """Fault-injection error given as a number or a name like "IN_USE"/"NVML_ERROR_IN_USE"."""
    if isinstance(value, int):
        return value
    name = str(value).upper()
    name = name[len("NVML_ERROR_"):] if name.startswith("NVML_ERROR_") else name
    if name not in ERROR_NAMES:
        raise Fault(INVALID_ARGUMENT, "unknown fault error %r" % value)
    return ERROR_NAMES[name]


def inject(st, op):
    """Fault injection: faults.fail_<op>_after=N makes attempt N+1 (and later) fail.

    faults.fail_<op>_error picks the NVML error (default UNKNOWN), fail_<op>_times
    limits how many attempts fail. Attempts are counted in state counters.
    """
    faults = st.get("faults") or {}
    key = "fail_%s_after" % op
    counters = st.setdefault("counters", {})
    n = counters.get(op, 0)
    counters[op] = n + 1
    if key not in faults:
        return
    after = int(faults[key])
    times = faults.get("fail_%s_times" % op)
    if n >= after and (times is None or n < after + int(times)):
        raise Fault(error_code(faults.get("fail_%s_error" % op, "UNKNOWN")), "injected fault on %s #%d" % (op, n + 1))


def model_of(gpu):
    """The GPU's model, with the per-GPU overrides that emulate other SKUs/drivers applied:
    `memory_mib` (total memory; profile names follow it, mig.md P12) and `hide_profiles`
    (profile ids an older driver does not list, e.g. 15 before R525-era drivers, P15)."""
    base = MODELS[gpu["model"]]
    mem, hide = gpu.get("memory_mib"), tuple(gpu.get("hide_profiles") or ())
    if not mem and not hide:
        return base
    return _variant(base, int(mem or base.memory_mib), hide)


@functools.lru_cache(maxsize=64)
def _variant(base, mem, hide):
    return dataclasses.replace(base, memory_mib=mem, gi_profiles=tuple(p for p in base.gi_profiles if p.id not in hide))


def require_mig_capable(gpu):
    if not model_of(gpu).mig_capable:
        raise Fault(NOT_SUPPORTED, "%s has no MIG" % gpu["model"])


def require_mig_enabled(gpu):
    """M7: GI/CI operations need MIG mode *currently* enabled."""
    require_mig_capable(gpu)
    if gpu["mig_mode"] != 1:
        raise Fault(NOT_SUPPORTED, "MIG mode is disabled")


def gi_profile(gpu, profile_id):
    require_mig_capable(gpu)
    prof = gi_profile_by_id(model_of(gpu), profile_id)
    if prof is None:
        raise Fault(INVALID_ARGUMENT, "profile id %r not on %s" % (profile_id, gpu["model"]))
    return prof


def _slots(start, size):
    return set(range(start, start + size))


def occupied(gpu):
    used = set()
    for gi in gpu["gpu_instances"]:
        used |= _slots(gi["start"], gi["size"])
    return used


def _engines_used(gpu):
    model = model_of(gpu)
    tot = [0, 0, 0, 0]
    for gi in gpu["gpu_instances"]:
        p = gi_profile_by_id(model, gi["profile_id"])
        for k, v in enumerate((p.dec, p.enc, p.jpg, p.ofa)):
            tot[k] += v
    return tot


def _fits_engines(gpu, prof):
    """Media engines (DEC/ENC/JPG/OFA) are shared from the full GPU's budget; this limits
    "+me" profiles to one at a time (mig.md §1.12), inferred from the per-profile counts."""
    full = full_profile(model_of(gpu))
    budget = (full.dec, full.enc, full.jpg, full.ofa)
    used = _engines_used(gpu)
    need = (prof.dec, prof.enc, prof.jpg, prof.ofa)
    return all(u + n <= b for u, n, b in zip(used, need, budget))


def _count(gpu, profile_id):
    return sum(1 for gi in gpu["gpu_instances"] if gi["profile_id"] == profile_id)


def free_placements(gpu, prof, used=None):
    used = occupied(gpu) if used is None else used
    return [s for s in prof.starts if not (_slots(s, prof.size) & used)]


def can_create(gpu, prof):
    return (_count(gpu, prof.id) < prof.instances and _fits_engines(gpu, prof)
            and bool(free_placements(gpu, prof)))


def remaining_capacity(gpu, profile_id):
    """M9: how many more GIs of this profile fit now (disjoint free placements, capped by
    the profile's instance count and the engine budget)."""
    prof = gi_profile(gpu, profile_id)
    if gpu["mig_mode"] != 1:
        return 0
    used = set(occupied(gpu))
    n = 0
    sim = {"model": gpu["model"], "gpu_instances": list(gpu["gpu_instances"])}
    while can_create(sim, prof):
        start = free_placements(sim, prof, used)[0]
        used |= _slots(start, prof.size)
        sim["gpu_instances"].append({"profile_id": prof.id, "start": start, "size": prof.size})
        n += 1
    return n


def auto_placement(gpu, prof):
    """§1.11: among the free placements pick the one that blocks the fewest still-free
    placements of all profiles; ties go to the lowest start."""
    used = occupied(gpu)
    free = free_placements(gpu, prof, used)
    if not free:
        return None
    model = model_of(gpu)
    still_free = [(p.id, s, p.size) for p in model.gi_profiles for s in free_placements(gpu, p, used)]

    def blocked(start):
        mine = _slots(start, prof.size)
        return sum(1 for _pid, s, size in still_free if _slots(s, size) & mine)

    return min(free, key=lambda s: (blocked(s), s))


def gi_id_for(model, start, size):
    """GI ids follow the observed binary-tree numbering: 7g=0, halves 1-2, quarters 3-6,
    eighths 7-14 on A100 (mig.md §1.11); the driver assigns them, do not rely on them."""
    n = model.memory_slices // size
    return n - 1 + start // size


def create_gi(st, gpu, profile_id, start=None):
    """M2/M4/M7: create a GI at `start` (or NVML's automatic choice); returns the GI dict."""
    require_mig_enabled(gpu)
    prof = gi_profile(gpu, profile_id)
    inject(st, "gi_create")
    if start is None:
        if _count(gpu, prof.id) >= prof.instances or not _fits_engines(gpu, prof):
            raise Fault(INSUFFICIENT_RESOURCES, "no capacity left for profile %d" % prof.id)
        start = auto_placement(gpu, prof)
        if start is None:
            raise Fault(INSUFFICIENT_RESOURCES, "no free placement for profile %d" % prof.id)
    else:
        if start not in prof.starts:
            raise Fault(INVALID_ARGUMENT, "start %r is not a placement of profile %d" % (start, prof.id))
        if _slots(start, prof.size) & occupied(gpu):
            raise Fault(INSUFFICIENT_RESOURCES, "placement %d:%d overlaps an existing GI" % (start, prof.size))
        if _count(gpu, prof.id) >= prof.instances or not _fits_engines(gpu, prof):
            raise Fault(INSUFFICIENT_RESOURCES, "no capacity left for profile %d" % prof.id)
    gi = {"id": gi_id_for(model_of(gpu), start, prof.size), "profile_id": prof.id, "start": start,
          "size": prof.size, "compute_instances": []}
    gpu["gpu_instances"].append(gi)
    gpu["gpu_instances"].sort(key=lambda g: g["id"])
    return gi


def find_gi(gpu, gi_id):
    for gi in gpu["gpu_instances"]:
        if gi["id"] == gi_id:
            return gi
    return None


def _procs_on(gpu, gi_id=None, ci_id=None):
    out = []
    for p in gpu["processes"]:
        pg = p.get("gpu_instance_id")
        pc = p.get("compute_instance_id")
        if gi_id is None:
            out.append(p)
        elif pg is None or (pg == gi_id and (ci_id is None or pc is None or pc == ci_id)):
            # A process without a GI id holds the whole GPU.
            out.append(p)
    return out


def destroy_gi(st, gpu, gi_id):
    """M5: IN_USE while CIs or processes exist on the GI."""
    require_mig_enabled(gpu)
    gi = find_gi(gpu, gi_id)
    if gi is None:
        raise Fault(INVALID_ARGUMENT, "GPU instance %r does not exist" % gi_id)
    inject(st, "gi_destroy")
    if gi["compute_instances"]:
        raise Fault(IN_USE, "GPU instance %d still has compute instances" % gi_id)
    if _procs_on(gpu, gi_id):
        raise Fault(IN_USE, "processes run on GPU instance %d" % gi_id)
    gpu["gpu_instances"].remove(gi)


def ci_slices_for(gi_prof, ci_profile_index):
    by_index = {v: k for k, v in CI_INDEX_BY_SLICES.items()}
    if ci_profile_index not in by_index:
        raise Fault(INVALID_ARGUMENT if ci_profile_index >= 9 else NOT_SUPPORTED,
                    "compute instance profile %r" % ci_profile_index)
    c = by_index[ci_profile_index]
    if c not in CI_PLACEMENTS[gi_prof.slices]:
        raise Fault(NOT_SUPPORTED, "%dc does not exist in a %dg GPU instance" % (c, gi_prof.slices))
    return c


def _ci_used(gi):
    used = set()
    for ci in gi["compute_instances"]:
        used |= _slots(ci["start"], ci["slices"])
    return used


def ci_free_starts(gi, c, gi_slices):
    used = _ci_used(gi)
    return [s for s in CI_PLACEMENTS[gi_slices][c] if not (_slots(s, c) & used)]


def ci_remaining(gi, c, gi_slices):
    n, used = 0, _ci_used(gi)
    for s in CI_PLACEMENTS[gi_slices][c]:
        if not (_slots(s, c) & used):
            used |= _slots(s, c)
            n += 1
    cap = len(CI_PLACEMENTS[gi_slices][c]) - sum(1 for ci in gi["compute_instances"] if ci["slices"] == c)
    return min(n, cap)


def create_ci(st, gpu, gi, ci_profile_index, start=None):
    require_mig_enabled(gpu)
    prof = gi_profile_by_id(model_of(gpu), gi["profile_id"])
    c = ci_slices_for(prof, ci_profile_index)
    inject(st, "ci_create")
    free = ci_free_starts(gi, c, prof.slices)
    if start is None:
        if not free:
            raise Fault(INSUFFICIENT_RESOURCES, "no free compute slices for %dc in GI %d" % (c, gi["id"]))
        start = free[0]
    elif start not in CI_PLACEMENTS[prof.slices][c]:
        raise Fault(INVALID_ARGUMENT, "start %r is not a %dc placement" % (start, c))
    elif start not in free:
        raise Fault(INSUFFICIENT_RESOURCES, "placement %d:%d overlaps a compute instance" % (start, c))
    ids = {ci["id"] for ci in gi["compute_instances"]}
    new_id = next(i for i in range(64) if i not in ids)
    ci = {"id": new_id, "profile_id": ci_profile_index, "slices": c, "start": start}
    gi["compute_instances"].append(ci)
    gi["compute_instances"].sort(key=lambda x: x["id"])
    return ci


def destroy_ci(st, gpu, gi, ci_id):
    for ci in gi["compute_instances"]:
        if ci["id"] == ci_id:
            inject(st, "ci_destroy")
            if _procs_on(gpu, gi["id"], ci_id):
                raise Fault(IN_USE, "processes run on compute instance %d" % ci_id)
            gi["compute_instances"].remove(ci)
            return
    raise Fault(INVALID_ARGUMENT, "compute instance %r does not exist" % ci_id)


def set_mig_mode(st, gpu, mode):
    """M6/P1/P2: returns the activation status; the call itself succeeds (nvml.h ``nvmlDeviceSetMigMode``).

    Hopper applies at once. An idle bare-metal Ampere GPU is reset by the driver itself ("This API may unbind or
    reset the device to activate the requested mode"); `mig_mode_self_reset: false` (older drivers, evidence
    differs, mig.md P1) keeps it pending until a reset instead, reported as RESET_REQUIRED. In a pass-through VM
    (`reset_supported: false`) only a VM reboot commits it: RESET_REQUIRED. A GPU with processes is "not idle":
    the mode stays pending and the status is IN_USE ("The caller of this API is expected to idle the device and
    retry"). mig-parted reads the pending state back with GetMigMode (pkg/mig/mode/nvml.go
    IsMigModeChangePending). Existing GPU instances make the call fail with IN_USE (mig-parted clears them first,
    cmd/nvidia-mig-parted/apply/mode.go ApplyMigMode).
    """
    require_mig_capable(gpu)
    if mode not in (0, 1):
        raise Fault(INVALID_ARGUMENT, "mode must be 0 or 1")
    inject(st, "set_mig_mode")
    if gpu["mig_mode"] == mode and gpu["mig_mode_pending"] == mode:
        return SUCCESS
    if gpu["gpu_instances"]:
        raise Fault(IN_USE, "GPU instances exist")
    gpu["mig_mode_pending"] = mode
    if gpu["mig_mode"] == mode:
        # Cancelling a pending change needs no reset.
        return SUCCESS
    if gpu["processes"]:
        return IN_USE
    if model_of(gpu).mig_reset_required:
        if host_clients(st):
            # A host client that holds the device keeps it from going idle: gpu-operator#118 (nvidia-persistenced:
            # "MIG mode is in pending enable state ... In use by another client"), mig-parted#181 (nvidia_drm).
            return IN_USE
        if not gpu.get("reset_supported", True) or not gpu.get("mig_mode_self_reset", True):
            return RESET_REQUIRED
        _power_cycle(gpu)
        return SUCCESS
    gpu["mig_mode"] = mode
    return SUCCESS


# Host GPU clients that hold every GPU's device open without being an NVML process (gpusim option `host_clients`):
# the process name as /proc/<pid>/comm shows it (15 characters at most, so "nvidia-persiste"), or a kernel module.
HOST_CLIENTS = ("nvidia-persistenced", "nv-hostengine", "nvidia_drm")


def host_clients(st):
    """The host GPU clients the state runs (`host_clients`, default none; each one of HOST_CLIENTS)."""
    return list(st.get("host_clients") or [])  # validated by state.normalize


def reset_blockers(st):
    """Host clients that make `nvidia-smi -r` refuse with "In use by another client":
    nv-hostengine (DCGM; mig-parted deployments/systemd/hooks.sh stops nvidia-dcgm.service before a mode change),
    nvidia_drm (mig-parted#181, README "Known Issues": the reset fails while the module is loaded) and
    nvidia-persistenced unless nvidia-smi reaches its socket (`persistenced_socket`, default true: nvidia-smi
    "coordinates with persistenced when resetting GPUs", mig-parted fafbbc5e deployments/container/Dockerfile; false:
    gpu-operator#118, where the reset was refused until persistenced was killed)."""
    blockers = [c for c in host_clients(st) if c != "nvidia-persistenced"]
    if "nvidia-persistenced" in host_clients(st) and not st.get("persistenced_socket", True):
        blockers.insert(0, "nvidia-persistenced")
    return blockers


def reset_gpu(st, gpu):
    """What `nvidia-smi -r` does: commit a pending MIG mode; GIs/CIs are lost (M8). Volatile ECC counts restart and
    pending row remaps take effect (health.on_reset). A GPU that fell off the bus cannot be reset: the Xid catalog
    resolves Xid 79 with a node reboot, and nvml.h answers GPU_IS_LOST for every call on it."""
    inject(st, "reset")
    lost = health.lost_code(gpu)
    if lost is not None:
        raise Fault(lost, "GPU has fallen off the bus: reboot")
    if not gpu.get("reset_supported", True):
        raise Fault(NOT_SUPPORTED, "GPU reset is not supported here (pass-through VM): reboot")
    if gpu["processes"]:
        raise Fault(IN_USE, "GPU is in use by another client")
    blockers = reset_blockers(st)
    if blockers:
        raise Fault(IN_USE, "GPU is in use by another client (%s)" % ", ".join(blockers))
    _power_cycle(gpu)
    health.on_reset(gpu)


def _power_cycle(gpu):
    """A GPU reset or reboot: a pending mode commits, instances are lost (M8). Whether the mode itself survives
    (mig.md M8 for Ampere; P10 reports old drivers losing it; Hopper evidence differs) is the per-GPU option
    `mig_mode_persists` (default true): false brings the GPU back with MIG disabled."""
    if model_of(gpu).mig_capable:
        gpu["mig_mode"] = gpu["mig_mode_pending"]
        if not gpu.get("mig_mode_persists", True):
            gpu["mig_mode"] = gpu["mig_mode_pending"] = 0
    gpu["gpu_instances"] = []


def profile_queries_need_mig(st, gpu):
    """R535 and older drivers answer NOT_SUPPORTED to GPU-instance profile queries while MIG mode is disabled
    (NVIDIA/mig-parted 219e780d: pkg/mig/discovery/discovery.go ErrNoProfilesDiscovered, "Older drivers such as
    R535 does not support querying MIG profiles when MIG mode is disabled"). Decided by the state's driver branch
    (< 550), or set per state with `profile_queries_need_mig: true|false`."""
    if gpu["mig_mode"] == 1:
        return False
    explicit = st.get("profile_queries_need_mig")
    if explicit is not None:
        return bool(explicit)
    try:
        return int(str(st.get("driver_version", "")).split(".")[0]) < 550
    except ValueError:
        return False


def require_profile_queries(st, gpu):
    require_mig_capable(gpu)
    if profile_queries_need_mig(st, gpu):
        raise Fault(NOT_SUPPORTED, "driver %s lists no GPU instance profiles while MIG mode is disabled"
                    % st.get("driver_version"))


def reboot(st):
    """Host/VM reboot: pending MIG modes commit (mode persists, M8), GIs/CIs and processes vanish; the health
    state restarts as health.on_reboot says (volatile ECC, pending remaps and ECC mode, lost GPUs, kernel log)."""
    for gpu in st["gpus"]:
        _power_cycle(gpu)
        gpu["processes"] = []
        if gpu.get("vgpus_running"):
            gpu["vgpus_running"] = 0  # the VMs went down with the host
    health.on_reboot(st)
    vgpu_sched.load_module(st)  # the driver loads at boot and reads RmPVMRL from the modprobe configuration


def reload_module(st):
    """`modprobe -r nvidia && modprobe nvidia` on a vGPU host: refused while a process or a vGPU VM holds a GPU
    (modprobe: "Module nvidia is in use"); the fresh load reads RmPVMRL again (gpusim/vgpu_sched.py)."""
    inject(st, "module_reload")
    for gpu in st["gpus"]:
        if gpu["processes"] or gpu.get("vgpus_running", 0):
            raise Fault(IN_USE, "Module nvidia is in use (GPU %s: %d processes, %d vGPUs running)"
                        % (gpu["pci_bus_id"], len(gpu["processes"]), gpu.get("vgpus_running", 0)))
    vgpu_sched.load_module(st)
