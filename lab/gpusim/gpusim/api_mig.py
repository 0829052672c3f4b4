"""NVML's GPU-instance, compute-instance and MIG-device entry points over gpusim's state, in the C API's terms.

``capi.py`` (the Python side of our ``libnvidia-ml.so.1``, ``lab/gpusim/libnvml/mig.c``) answers from these (issue 42:
the rules' one home, since gpusim has no Python stand-in of nvidia-ml-py any more); the MIG rules themselves (placements,
capacity, create/destroy, in-use checks) stay in ``machine.py``. Values are plain: handle keys, ints, dicts named as
nvml.h's struct fields; a refused call raises :class:`gpusim.machine.Fault` with the NVML return code.

Handle keys (tuples): ``("gpu", uuid)``, ``("gi", uuid, gi id)``, ``("ci", uuid, gi id, ci id)`` and
``("mig", uuid, gi id, ci id)`` for a MIG device.
"""

from __future__ import annotations

from . import api, machine, models
from .machine import Fault

# nvml.h NVML_GPU_INSTANCE_PROFILE_COUNT as nvidia-ml-py 13.615.71 has it (0x12: up to ..._3_SLICE_GFX); an index past
# it is INVALID_ARGUMENT, one the model lacks NOT_SUPPORTED (nvml.h nvmlDeviceGetGpuInstanceProfileInfo @return).
GPU_INSTANCE_PROFILE_COUNT = 0x12
# nvml.h NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED: the only engine profile there is.
COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0
# nvml.h: nvmlGpuInstanceProfileInfo_v2 = NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 2) = sizeof(..._v2_t) | 2 << 24,
# nvmlComputeInstanceProfileInfo_v2 likewise (nvidia-ml-py spells the same numbers).
GPU_INSTANCE_PROFILE_INFO_V2 = 0x02000098
COMPUTE_INSTANCE_PROFILE_INFO_V2 = 0x02000088


def gi_key(g, gi):
    return ("gi", g["uuid"], gi["id"])


def ci_key(g, gi, ci):
    return ("ci", g["uuid"], gi["id"], ci["id"])


def mig_key(g, gi, ci):
    return ("mig", g["uuid"], gi["id"], ci["id"])


def version_check(version, expected):
    """The ...V entry points: the caller's struct version (nvml.h "The caller must set the version field") must be
    the one this library fills, as api.memory_v2_check for nvmlDeviceGetMemoryInfo_v2."""
    if version != expected:
        raise Fault(api.ARGUMENT_VERSION_MISMATCH, "unknown struct version 0x%08x" % version)


def gpu(st, key):
    """The GPU dict of a (non-MIG) device handle key."""
    return api.device(st, key)[0]


def gi(st, key):
    """(gpu, gi) of a GPU instance handle key; INVALID_ARGUMENT once the GI is gone (nvml.h nvmlDeviceCreateGpuInstance:
    "If ... the GPU instance is destroyed explicitly, the GPU instance handle would become invalid")."""
    if not key or key[0] != "gi":
        raise Fault(api.INVALID_ARGUMENT, "invalid GPU instance handle")
    for g in st["gpus"]:
        if g["uuid"] == key[1]:
            api.reachable(g)
            found = machine.find_gi(g, key[2])
            if found is not None:
                return g, found
    raise Fault(api.INVALID_ARGUMENT, "GPU instance no longer exists")


def ci(st, key):
    """(gpu, gi, ci) of a compute instance handle key."""
    if not key or key[0] != "ci":
        raise Fault(api.INVALID_ARGUMENT, "invalid compute instance handle")
    for g in st["gpus"]:
        if g["uuid"] == key[1]:
            api.reachable(g)
            found = machine.find_gi(g, key[2])
            for c in (found or {}).get("compute_instances", []):
                if c["id"] == key[3]:
                    return g, found, c
    raise Fault(api.INVALID_ARGUMENT, "compute instance no longer exists")


# ---------------------------------------------------------------- GPU instances
def _gi_profile_fields(model, prof, st):
    # models.py: NVML's own (wrong) count where the driver reports one, unless the state asks for the documented ones.
    documented = (st or {}).get("a30_nvml_counts") == "documented"
    return {"id": prof.id, "isP2pSupported": prof.p2p, "sliceCount": prof.slices,
            "instanceCount": prof.nvml_instances if prof.nvml_instances and not documented else prof.instances,
            "multiprocessorCount": prof.sms, "copyEngineCount": prof.ce, "decoderCount": prof.dec,
            "encoderCount": prof.enc, "jpegCount": prof.jpg, "ofaCount": prof.ofa, "memorySizeMB": prof.memory_mib,
            "name": "MIG " + models.gi_name(model, prof)}


def gi_profile_info(st, key, index):
    """nvmlDeviceGetGpuInstanceProfileInfo(V): the fields of nvmlGpuInstanceProfileInfo_v2_t (v1: all but version and
    name) for profile *index* ``index`` (NVML_GPU_INSTANCE_PROFILE_*)."""
    g = gpu(st, key)
    machine.require_profile_queries(st, g)
    if not 0 <= index < GPU_INSTANCE_PROFILE_COUNT:
        raise Fault(api.INVALID_ARGUMENT, "profile index %d out of range" % index)
    model = machine.model_of(g)
    prof = models.gi_profile_by_index(model, index)
    if prof is None:
        raise Fault(api.NOT_SUPPORTED, "%s has no profile with index %d" % (g["model"], index))
    return _gi_profile_fields(model, prof, st)


def gi_profile_info_by_id(st, key, profile_id):
    g = gpu(st, key)
    machine.require_profile_queries(st, g)
    prof = machine.gi_profile(g, profile_id)
    return _gi_profile_fields(machine.model_of(g), prof, st)


def gi_remaining_capacity(st, key, profile_id):
    g = gpu(st, key)
    machine.require_mig_enabled(g)
    return machine.remaining_capacity(g, profile_id)


def gi_possible_placements(st, key, profile_id):
    """M2: all placements of the profile, whether or not they are free or MIG is enabled (R550 and newer; older
    drivers refuse profile queries while MIG is disabled, machine.profile_queries_need_mig). [(start, size)]"""
    g = gpu(st, key)
    machine.require_profile_queries(st, g)
    prof = machine.gi_profile(g, profile_id)
    return [(s, prof.size) for s in prof.starts]


def create_gi(st, key, profile_id, placement=None):
    """nvmlDeviceCreateGpuInstance / ...WithPlacement (``placement``: (start, size)); the new GI's key."""
    g = gpu(st, key)
    if placement is None:
        return gi_key(g, machine.create_gi(st, g, profile_id))
    start, size = placement
    prof = machine.gi_profile(g, profile_id)
    if size != prof.size:
        raise Fault(api.INVALID_ARGUMENT, "placement size %d, profile %d needs %d" % (size, prof.id, prof.size))
    return gi_key(g, machine.create_gi(st, g, prof.id, start=start))


def destroy_gi(st, key):
    g, found = gi(st, key)
    machine.destroy_gi(st, g, found["id"])


def gpu_instances(st, key, profile_id):
    """nvmlDeviceGetGpuInstances: the keys of the profile's GIs, in the state's order."""
    g = gpu(st, key)
    machine.require_mig_enabled(g)
    prof = machine.gi_profile(g, profile_id)
    return [gi_key(g, x) for x in g["gpu_instances"] if x["profile_id"] == prof.id]


def gpu_instance_by_id(st, key, gi_id):
    g = gpu(st, key)
    machine.require_mig_enabled(g)
    found = machine.find_gi(g, gi_id)
    if found is None:
        raise Fault(api.NOT_FOUND, "no GPU instance %d" % gi_id)
    return gi_key(g, found)


def gi_info(st, key):
    """nvmlGpuInstanceInfo_t: device (a key), id, profileId, placement (start, size)."""
    g, found = gi(st, key)
    return {"device": api.gpu_key(g), "id": found["id"], "profileId": found["profile_id"],
            "placement": (found["start"], found["size"])}


# ---------------------------------------------------------------- compute instances
def _ci_ctx(st, key, profile_id):
    g, found = gi(st, key)
    prof = models.gi_profile_by_id(machine.model_of(g), found["profile_id"])
    return g, found, prof, machine.ci_slices_for(prof, profile_id)


def ci_profile_info(st, key, profile, eng_profile):
    """nvmlGpuInstanceGetComputeInstanceProfileInfo(V): the fields of nvmlComputeInstanceProfileInfo_v2_t (v1: all but
    version and name)."""
    g, _gi, prof, c = _ci_ctx(st, key, profile)
    if eng_profile != COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED:
        raise Fault(api.NOT_SUPPORTED, "only the shared engine profile exists")
    model = machine.model_of(g)
    return {"id": models.CI_INDEX_BY_SLICES[c], "sliceCount": c,
            "instanceCount": len(models.CI_PLACEMENTS[prof.slices][c]),
            "multiprocessorCount": models.ci_sms(prof, c, model), "sharedCopyEngineCount": prof.ce,
            "sharedDecoderCount": prof.dec, "sharedEncoderCount": prof.enc, "sharedJpegCount": prof.jpg,
            "sharedOfaCount": prof.ofa, "name": "MIG " + models.ci_name(model, prof, c)}


def ci_remaining_capacity(st, key, profile_id):
    _g, found, prof, c = _ci_ctx(st, key, profile_id)
    return machine.ci_remaining(found, c, prof.slices)


def ci_possible_placements(st, key, profile_id):
    _g, _gi, prof, c = _ci_ctx(st, key, profile_id)
    return [(s, c) for s in models.CI_PLACEMENTS[prof.slices][c]]


def create_ci(st, key, profile_id, placement=None):
    """nvmlGpuInstanceCreateComputeInstance / ...WithPlacement (``placement``: (start, size)); the new CI's key."""
    g, found = gi(st, key)
    if placement is None:
        return ci_key(g, found, machine.create_ci(st, g, found, profile_id))
    start, size = placement
    _g, _gi, _prof, c = _ci_ctx(st, key, profile_id)
    if size != c:
        raise Fault(api.INVALID_ARGUMENT, "placement size %d, profile needs %d" % (size, c))
    return ci_key(g, found, machine.create_ci(st, g, found, profile_id, start=start))


def destroy_ci(st, key):
    g, found, c = ci(st, key)
    machine.destroy_ci(st, g, found, c["id"])


def compute_instances(st, key, profile_id):
    g, found, _prof, _c = _ci_ctx(st, key, profile_id)
    return [ci_key(g, found, c) for c in found["compute_instances"] if c["profile_id"] == profile_id]


def compute_instance_by_id(st, key, ci_id):
    g, found = gi(st, key)
    for c in found["compute_instances"]:
        if c["id"] == ci_id:
            return ci_key(g, found, c)
    raise Fault(api.NOT_FOUND, "no compute instance %d" % ci_id)


def ci_info(st, key):
    """nvmlComputeInstanceInfo_t: device and gpuInstance (keys), id, profileId, placement (start, size)."""
    g, found, c = ci(st, key)
    return {"device": api.gpu_key(g), "gpuInstance": gi_key(g, found), "id": c["id"], "profileId": c["profile_id"],
            "placement": (c["start"], c["slices"])}


# ---------------------------------------------------------------- MIG devices
def _mig_devices(g):
    return [(x, c) for x in g["gpu_instances"] for c in x["compute_instances"]]


def _mig(st, key):
    g, mig = api.device(st, key, allow_mig=True)
    if not mig:
        raise Fault(api.INVALID_ARGUMENT, "not a MIG device handle")
    return g, mig


def is_mig_device_handle(st, key):
    return 1 if api.device(st, key, allow_mig=True)[1] else 0


def mig_gpu_instance_id(st, key):
    return _mig(st, key)[1][0]["id"]


def mig_compute_instance_id(st, key):
    return _mig(st, key)[1][1]["id"]


def max_mig_device_count(st, key):
    """nvml.h nvmlDeviceGetMaxMigDeviceCount: "Returns zero if MIG is not supported or enabled" (a MIG-capable GPU
    with MIG off: 0, so that go-nvlib's VisitMigDevices, which every device plugin strategy but none runs on each
    MIG-capable GPU, asks no MIG device handle of it; a GPU without MIG keeps gpusim's NOT_SUPPORTED)."""
    g = gpu(st, key)
    machine.require_mig_capable(g)
    return machine.model_of(g).max_mig_devices if g["mig_mode"] == 1 else 0


def mig_device_handle_by_index(st, key, index):
    g = gpu(st, key)
    machine.require_mig_enabled(g)
    devs = _mig_devices(g)
    if not 0 <= index < len(devs):
        raise Fault(api.NOT_FOUND, "no MIG device at index %d" % index)
    return mig_key(g, *devs[index])


def device_handle_from_mig(st, key):
    return api.gpu_key(_mig(st, key)[0])


def attributes(st, key):
    """nvmlDeviceAttributes_t of a MIG device (nvml.h nvmlDeviceGetAttributes_v2: "only supports MIG device handles")."""
    g, mig = api.device(st, key, allow_mig=True)
    if not mig:
        raise Fault(api.NOT_SUPPORTED, "only MIG device handles have attributes")
    model = machine.model_of(g)
    prof = models.gi_profile_by_id(model, mig[0]["profile_id"])
    c = mig[1]["slices"]
    return {"multiprocessorCount": models.ci_sms(prof, c, model), "sharedCopyEngineCount": prof.ce,
            "sharedDecoderCount": prof.dec, "sharedEncoderCount": prof.enc, "sharedJpegCount": prof.jpg,
            "sharedOfaCount": prof.ofa, "gpuInstanceSliceCount": prof.slices, "computeInstanceSliceCount": c,
            "memorySizeMB": prof.memory_mib}
