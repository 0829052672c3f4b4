"""gpusim's libnvidia-ml.so.1, MIG slice (lab/gpusim/libnvml/mig.c, issue 42): GPU and compute instances.

* The REAL nvidia-ml-py on the library answers a GPU/compute-instance call sequence as recorded
  (libnvml_expected/libnvml_mig/, libnvml_common.expected) and leaves the recorded state file behind.
* NVIDIA's mig-parted (the lab's build, through go-nvml's dlopen of the library) and the product's own NVML code
  (plugins/module_utils/_gpu/nvml.py on the real nvidia-ml-py, in a ``python -I`` subprocess) agree on every MIG-capable
  model of gpusim/models.py: what the product applies, mig-parted exports; what mig-parted applies, the product reads
  and its planner (geometry.plan_gpu, as the mig_geometry module plans) leaves alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from libnvml_common import (GPUSIM, REPO, NEEDS_BUILD, assert_answers, expected,  # pylint: disable=import-error
                            kernel_view, lib_env, libnvml_build)

COLLECTIONS = REPO / "build" / "collections"   # tests/conftest.py links the checkout there as gpuops.provision


models = sys.modules["gpusim.models"]   # imported by kernel_view (gpusim's package, from lab/gpusim)

pytestmark = NEEDS_BUILD


# ---------------------------------------------------------------- (a) real nvidia-ml-py on the library, as recorded
# Each answer is ["ok", value] or ["err", class, code]; handles are shown as what they name (a GPU or MIG device by
# UUID, a GPU or compute instance by its id), since pointers differ from run to run.
PROBE = r'''
import ctypes, json, sys
import pynvml as n
out = {"file": n.__file__, "calls": []}

def hd(h):
    kind = type(h).__name__
    try:
        if "GpuInstance" in kind:
            return ["gi", n.nvmlGpuInstanceGetInfo(h).id]
        if "ComputeInstance" in kind:
            return ["ci", n.nvmlComputeInstanceGetInfo(h).id]
        return ["dev", plain(n.nvmlDeviceGetUUID(h))]
    except n.NVMLError as e:
        return ["stale", e.value]

def plain(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, ctypes.c_uint):        # nvmlDeviceIsMigDeviceHandle returns the c_uint
        return v.value
    if isinstance(v, ctypes._Pointer):
        return hd(v)
    if hasattr(v, "_fields_"):
        return {f[0]: plain(getattr(v, f[0])) for f in v._fields_}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    return v

def rec(name, fn, *args):
    try:
        v = fn(*args)
        out["calls"].append([name, "ok", plain(v)])
        return v
    except n.NVMLError as e:
        out["calls"].append([name, "err", type(e).__name__, e.value])
    except Exception as e:
        out["calls"].append([name, "exc", type(e).__name__])
    return None

def placements(fn, h, pid, cls, null=False):
    count = ctypes.c_uint(8)
    arr = None if null else (cls * 8)()
    fn(h, pid, arr, ctypes.byref(count))
    return count.value if null else [(arr[k].start, arr[k].size) for k in range(count.value)]

def handles(fn, h, pid, cls):
    arr, count = (cls * 8)(), ctypes.c_uint(0)
    fn(h, pid, arr, ctypes.byref(count))
    return [arr[k] for k in range(count.value)]

rec("init", n.nvmlInit)
H = [rec("handle%d" % i, n.nvmlDeviceGetHandleByIndex, i) for i in range(n.nvmlDeviceGetCount())]
for i, h in enumerate(H):
    if h is None:
        continue
    ids = []
    for idx in range(n.NVML_GPU_INSTANCE_PROFILE_COUNT + 1):            # one past the end: INVALID_ARGUMENT
        info = rec("gip%d.%d" % (i, idx), n.nvmlDeviceGetGpuInstanceProfileInfo, h, idx)
        rec("gip_v1_%d.%d" % (i, idx), n.nvmlDeviceGetGpuInstanceProfileInfo, h, idx, 1)
        if info is None:
            info = rec("gip_v1_again%d.%d" % (i, idx), n.nvmlDeviceGetGpuInstanceProfileInfo, h, idx, 1)
        if info is not None:
            ids.append(info.id)
    for pid in ids + [999]:
        rec("placements%d.%d" % (i, pid), placements, n.nvmlDeviceGetGpuInstancePossiblePlacements, h, pid,
            n.c_nvmlGpuInstancePlacement_t)
        rec("placement_count%d.%d" % (i, pid), placements, n.nvmlDeviceGetGpuInstancePossiblePlacements, h, pid,
            n.c_nvmlGpuInstancePlacement_t, True)
        rec("remaining%d.%d" % (i, pid), n.nvmlDeviceGetGpuInstanceRemainingCapacity, h, pid)
        rec("gis%d.%d" % (i, pid), handles, n.nvmlDeviceGetGpuInstances, h, pid, n.c_nvmlGpuInstance_t)
    for gid in (0, 1, 2, 7, 13):
        rec("gi_by_id%d.%d" % (i, gid), n.nvmlDeviceGetGpuInstanceById, h, gid)
    rec("maxmig%d" % i, n.nvmlDeviceGetMaxMigDeviceCount, h)
    rec("is_mig%d" % i, n.nvmlDeviceIsMigDeviceHandle, h)
    rec("attributes_full%d" % i, n.nvmlDeviceGetAttributes_v2, h)
    rec("gi_id_full%d" % i, n.nvmlDeviceGetGpuInstanceId, h)
    small, two = (ids + [19, 14])[:2]
    # GPU instances: anywhere, at a placement, overlapping, a wrong placement size, an unknown profile
    gi_a = rec("create_gi%d" % i, n.nvmlDeviceCreateGpuInstance, h, small)
    free = rec("placements_two%d" % i, placements, n.nvmlDeviceGetGpuInstancePossiblePlacements, h, two,
               n.c_nvmlGpuInstancePlacement_t) or [(2, 2)]
    p = n.c_nvmlGpuInstancePlacement_t(*free[min(1, len(free) - 1)])
    gi_b = rec("create_gi_at%d" % i, n.nvmlDeviceCreateGpuInstanceWithPlacement, h, two, ctypes.byref(p))
    rec("create_gi_overlap%d" % i, n.nvmlDeviceCreateGpuInstanceWithPlacement, h, two, ctypes.byref(p))
    bad = n.c_nvmlGpuInstancePlacement_t(p.start, p.size + 1)
    rec("create_gi_bad_size%d" % i, n.nvmlDeviceCreateGpuInstanceWithPlacement, h, two, ctypes.byref(bad))
    rec("create_gi_bad_profile%d" % i, n.nvmlDeviceCreateGpuInstance, h, 999)
    rec("create_gi_full%d" % i, n.nvmlDeviceCreateGpuInstance, h, 0)
    for tag, gi in (("a", gi_a), ("b", gi_b)):
        if gi is None:
            continue
        rec("gi_info%d%s" % (i, tag), n.nvmlGpuInstanceGetInfo, gi)
        for idx in range(n.NVML_COMPUTE_INSTANCE_PROFILE_COUNT + 1):
            rec("cip%d%s.%d" % (i, tag, idx), n.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, idx, 0)
        rec("cip_v1_%d%s" % (i, tag), n.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, 0, 0, 1)
        rec("cip_eng1_%d%s" % (i, tag), n.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, 0, 1)
        for cpid in (0, 1, 4):
            rec("ci_placements%d%s.%d" % (i, tag, cpid), placements,
                n.nvmlGpuInstanceGetComputeInstancePossiblePlacements, gi, cpid, n.c_nvmlComputeInstancePlacement_t)
            rec("ci_remaining%d%s.%d" % (i, tag, cpid), n.nvmlGpuInstanceGetComputeInstanceRemainingCapacity, gi, cpid)
        ci1 = rec("create_ci%d%s" % (i, tag), n.nvmlGpuInstanceCreateComputeInstance, gi, 0)
        cp = n.c_nvmlComputeInstancePlacement_t(1, 1)
        rec("create_ci_at%d%s" % (i, tag), n.nvmlGpuInstanceCreateComputeInstanceWithPlacement, gi, 0, ctypes.byref(cp))
        rec("create_ci_overlap%d%s" % (i, tag), n.nvmlGpuInstanceCreateComputeInstanceWithPlacement, gi, 0,
            ctypes.byref(cp))
        cbad = n.c_nvmlComputeInstancePlacement_t(0, 2)
        rec("create_ci_bad_size%d%s" % (i, tag), n.nvmlGpuInstanceCreateComputeInstanceWithPlacement, gi, 0,
            ctypes.byref(cbad))
        rec("create_ci_full%d%s" % (i, tag), n.nvmlGpuInstanceCreateComputeInstance, gi, 1)
        for cpid in (0, 1):
            rec("cis%d%s.%d" % (i, tag, cpid), handles, n.nvmlGpuInstanceGetComputeInstances, gi, cpid,
                n.c_nvmlComputeInstance_t)
        for cid in (0, 1, 5):
            rec("ci_by_id%d%s.%d" % (i, tag, cid), n.nvmlGpuInstanceGetComputeInstanceById, gi, cid)
        if ci1 is not None:
            rec("ci_info%d%s" % (i, tag), n.nvmlComputeInstanceGetInfo, ci1)
            rec("ci_gi%d%s" % (i, tag), lambda c: n.nvmlComputeInstanceGetInfo(c).gpuInstance, ci1)
    # MIG devices: every index up to one past the last
    for k in range(9):
        m = rec("mig%d.%d" % (i, k), n.nvmlDeviceGetMigDeviceHandleByIndex, h, k)
        if m is None:
            break
        rec("mig_name%d.%d" % (i, k), n.nvmlDeviceGetName, m)
        rec("mig_is%d.%d" % (i, k), n.nvmlDeviceIsMigDeviceHandle, m)
        rec("mig_gi%d.%d" % (i, k), n.nvmlDeviceGetGpuInstanceId, m)
        rec("mig_ci%d.%d" % (i, k), n.nvmlDeviceGetComputeInstanceId, m)
        rec("mig_parent%d.%d" % (i, k), n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle, m)
        rec("mig_attributes%d.%d" % (i, k), n.nvmlDeviceGetAttributes_v2, m)
        rec("mig_memory%d.%d" % (i, k), n.nvmlDeviceGetMemoryInfo, m)
    rec("parent_of_full%d" % i, n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle, h)
    # Destroying: a GI with compute instances is in use; its CIs first, then the GI; a destroyed handle is stale
    for tag, gi in (("b", gi_b), ("a", gi_a)):
        if gi is None:
            continue
        rec("destroy_gi_in_use%d%s" % (i, tag), n.nvmlGpuInstanceDestroy, gi)
        cis = handles(n.nvmlGpuInstanceGetComputeInstances, gi, 0, n.c_nvmlComputeInstance_t)
        for j, c in enumerate(cis):
            rec("destroy_ci%d%s.%d" % (i, tag, j), n.nvmlComputeInstanceDestroy, c)
            rec("destroy_ci_again%d%s.%d" % (i, tag, j), n.nvmlComputeInstanceDestroy, c)
            rec("ci_info_stale%d%s.%d" % (i, tag, j), n.nvmlComputeInstanceGetInfo, c)
        rec("destroy_gi%d%s" % (i, tag), n.nvmlGpuInstanceDestroy, gi)
        rec("destroy_gi_again%d%s" % (i, tag), n.nvmlGpuInstanceDestroy, gi)
        rec("gi_info_stale%d%s" % (i, tag), n.nvmlGpuInstanceGetInfo, gi)
    # The state's own GIs: a compute instance with a process on it is in use
    for gid in (2,):
        gi = rec("own_gi%d" % i, n.nvmlDeviceGetGpuInstanceById, h, gid)
        if gi is not None:
            for c in handles(n.nvmlGpuInstanceGetComputeInstances, gi, 2, n.c_nvmlComputeInstance_t):
                rec("destroy_busy_ci%d" % i, n.nvmlComputeInstanceDestroy, c)
            rec("destroy_busy_gi%d" % i, n.nvmlGpuInstanceDestroy, gi)
rec("shutdown", n.nvmlShutdown)
rec("after_shutdown", n.nvmlDeviceCreateGpuInstance, H[0], 19)
print(json.dumps(out))
'''

# GPU 0: an A100 with a 3g GI (id 2) whose 3-slice CI runs a process; an H100 with MIG off (R550 lists its profiles,
# earlier drivers refuse: machine.profile_queries_need_mig); an A30 (NVML's wrong instance counts, models.py); a GPU
# without MIG; an H100 NVL that fell off the bus.
MIG_STATE = {"gpus": [
    {"model": "NVIDIA A100-SXM4-40GB", "mig_mode": "enabled",
     "gpu_instances": [{"profile_id": 9, "start": 4, "compute_instances": [{"slices": 3}]}],
     "processes": [{"pid": 4242, "used_memory": 1073741824, "gpu_instance_id": 2, "compute_instance_id": 0}]},
    {"model": "NVIDIA H100 80GB HBM3", "mig_mode": "disabled"},
    {"model": "NVIDIA A30", "mig_mode": "enabled"},
    {"model": "NVIDIA L40S"},
    {"model": "NVIDIA H100 NVL", "mig_mode": "enabled", "lost": True},
]}
CASES = {
    "r550": (MIG_STATE, None),
    "r535.98": (dict(MIG_STATE, driver_version="535.98"), "535.98"),
    "r470": (dict(MIG_STATE, driver_version="470.256.02"), "470.256.02"),
    "a30_documented": ({"a30_nvml_counts": "documented", "gpus": [{"model": "NVIDIA A30", "mig_mode": "enabled"}]}, None),
}


def _probe(libdir, state, tmp):
    path = tmp / "gpusim.json"
    path.write_text(json.dumps(state))
    argv = [sys.executable, "-I", "-c", PROBE]
    proc = subprocess.run(argv, env=lib_env(libdir, path), capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), json.loads(path.read_text())


@pytest.mark.parametrize("case", sorted(CASES))
def test_real_binding_on_the_library_answers_gi_ci_calls_as_recorded(case, libdirs, tmp_path):
    state, driver = CASES[case]
    lib = libdirs[driver or libnvml_build.DEFAULT_DRIVER]
    out, after = _probe(lib, state, tmp_path)
    assert "site-packages" in out["file"], out["file"]   # the real binding, not a module of ours
    got = {"calls": out["calls"], "state": after}
    # the sequence did reach what it is for (not only errors)
    done = {c[0] for c in got["calls"] if c[1] == "ok"}
    if case == "r550":
        assert {"create_gi0", "create_gi_at0", "create_ci0b", "create_ci_at0b", "mig0.0", "destroy_gi0b",
                "destroy_ci0b.0", "gip1.0"} <= done, sorted(done)
    assert_answers(got, expected("libnvml_mig", case, got))
    print("%s: %d answers as recorded" % (case, len(got["calls"])))


C_ABI = r'''
import ctypes, json
lib = ctypes.CDLL("libnvidia-ml.so.1")

class GiInfo(ctypes.Structure):                               # nvml.h nvmlGpuInstanceInfo_t
    _fields_ = [("device", ctypes.c_void_p), ("id", ctypes.c_uint), ("profileId", ctypes.c_uint),
                ("start", ctypes.c_uint), ("size", ctypes.c_uint)]

r = {}
dev, gi = ctypes.c_void_p(), ctypes.c_void_p()
r["uninit"] = lib.nvmlDeviceGetGpuInstanceRemainingCapacity(dev, 19, ctypes.byref(ctypes.c_uint()))
lib.nvmlInit_v2()
lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev))
info = (ctypes.c_uint * 38)()                                 # nvmlGpuInstanceProfileInfo_v2_t is 152 bytes
info[0] = 0x02000098
r["v2"] = [lib.nvmlDeviceGetGpuInstanceProfileInfoV(dev, 0, info), info[0], info[1], bytes(info)[56:56 + 11].decode()]
info[0] = 0x01000098
r["bad_version"] = lib.nvmlDeviceGetGpuInstanceProfileInfoV(dev, 0, info)
r["null_info"] = lib.nvmlDeviceGetGpuInstanceProfileInfo(dev, 0, None)
count = ctypes.c_uint(0)
r["count_only"] = [lib.nvmlDeviceGetGpuInstancePossiblePlacements_v2(dev, 19, None, ctypes.byref(count)), count.value]
r["null_count"] = lib.nvmlDeviceGetGpuInstancePossiblePlacements_v2(dev, 19, None, None)
r["null_array"] = lib.nvmlDeviceGetGpuInstances(dev, 19, None, ctypes.byref(count))
r["create"] = lib.nvmlDeviceCreateGpuInstance(dev, 19, ctypes.byref(gi))
r["gi_as_device"] = lib.nvmlDeviceGetGpuInstanceRemainingCapacity(gi, 19, ctypes.byref(count))
gi_info, again = GiInfo(), ctypes.c_void_p()
r["info"] = [lib.nvmlGpuInstanceGetInfo(gi, ctypes.byref(gi_info)), gi_info.device == dev.value, gi_info.profileId,
             gi_info.size]
lib.nvmlDeviceGetGpuInstanceById(dev, gi_info.id, ctypes.byref(again))
r["same_handle"] = again.value == gi.value
r["destroy"] = [lib.nvmlGpuInstanceDestroy(gi), lib.nvmlGpuInstanceDestroy(gi)]
print(json.dumps(r))
'''


def test_c_abi_rules_of_the_mig_entry_points(libdirs, tmp_path):
    """What only the C ABI has: UNINITIALIZED, NULL pointers, the struct version of the ...V calls
    (ARGUMENT_VERSION_MISMATCH, as nvmlDeviceGetMemoryInfo_v2), NULL placements for the count only, a GI handle
    where a device is due, one handle per GPU instance."""
    path = tmp_path / "gpusim.json"
    path.write_text(json.dumps({"gpus": [{"model": "NVIDIA A100-SXM4-40GB", "mig_mode": "enabled"}]}))
    proc = subprocess.run([sys.executable, "-I", "-c", C_ABI], env=lib_env(libdirs[libnvml_build.DEFAULT_DRIVER], path),
                          capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(proc.stdout) == {
        "uninit": 1, "v2": [0, 0x02000098, 19, "MIG 1g.5gb\0"], "bad_version": 25, "null_info": 2,
        "count_only": [0, 7], "null_count": 2, "null_array": 2, "create": 0, "gi_as_device": 2, "info": [0, True, 19, 1], "same_handle": True,
        "destroy": [0, 2]}


# ---------------------------------------------------------------- (b) mig-parted and the product on every MIG model
MIG_MODELS = sorted(name for name, m in models.MODELS.items() if m.mig_capable)


def _names(model):
    """mig-parted / go-nvlib names of the 1g, 2g and 3g profiles (models.gi_name; the 3g is absent on 4-slice parts)."""
    m = models.MODELS[model]
    return {idx: models.gi_name(m, models.gi_profile_by_index(m, idx))
            for idx in (models.GI_1_SLICE, models.GI_2_SLICE, models.GI_3_SLICE)
            if models.gi_profile_by_index(m, idx) is not None}


def _geometries(model):
    """(what the product applies, what mig-parted applies): two different geometries, with shared compute instances
    in the product's on 8-slice parts."""
    n = _names(model)
    one, two = n[models.GI_1_SLICE], n[models.GI_2_SLICE]
    if models.GI_3_SLICE in n:
        three = n[models.GI_3_SLICE]
        return {one: 2, "1c." + three: 1, "2c." + three: 1}, {two: 2, three: 1}
    return {one: 2, two: 1}, {two: 2}


def _state(model_names):
    # Bus ids in NVML index order: mig-parted numbers the GPUs in sysfs order and asks NVML by that index.
    return {"gpus": [{"model": name, "mig_mode": "enabled", "pci_bus_id": "00000000:%02X:00.0" % (0x10 + 2 * i)}
                     for i, name in enumerate(model_names)]}


def _device_filter(model):
    return "0x%08X" % models.MODELS[model].pci_device_id


def _mig_parted():
    sys.path.insert(0, str(REPO / "lab"))  # lab/gobuild.py, as tests/lab/test_libnvml.py
    try:
        import gobuild  # pylint: disable=import-outside-toplevel,import-error
    finally:
        sys.path.remove(str(REPO / "lab"))
    return os.path.join(gobuild.builder("mig-parted").ensure(), "bin", "nvidia-mig-parted")


def _run_mig_parted(libdir, path, root, *args, trace=False, smi=False):
    env = lib_env(libdir, path)
    if trace:
        env["GPUSIM_TRACE"] = "1"
    if smi:  # gpusim's nvidia-smi, which mig-parted runs to reset GPUs (util/device.go nvmlResetAllGPUs); its
        # `#!/usr/bin/env python3` must find an interpreter with nvidia-ml-py: this one's directory (the venv)
        env["PATH"] = "%s:%s:%s" % (GPUSIM / "bin", os.path.dirname(sys.executable), env.get("PATH", ""))
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("no mount namespace here (unshare -m): %s" % probe.stderr.decode().strip())
    return subprocess.run(kernel_view.command(root, [_mig_parted(), *args]), env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def _exported(proc):
    """{device filter: mig-devices} of `nvidia-mig-parted export --output-format=json`: with GPUs of several models it
    writes one entry per device ID ("device-filter", a list where models export alike; cmd/nvidia-mig-parted/export/
    config.go)."""
    assert proc.returncode == 0, proc.stderr[-4000:]
    spec = json.loads(proc.stdout)
    out = {}
    for entry in spec["mig-configs"]["current"]:
        assert entry["mig-enabled"] is True and entry["devices"] == "all", entry
        filters = entry["device-filter"]
        for f in [filters] if isinstance(filters, str) else filters:
            out[f.upper().replace("0X", "0x")] = entry["mig-devices"]
    return out


PRODUCT = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.gpuops.provision.plugins.module_utils._gpu import nvml
from ansible_collections.gpuops.provision.plugins.module_utils._mig import geometry
targets = json.loads(sys.argv[3])
nvml = nvml.Nvml()
assert nvml.open(), nvml.reason
res = {"binding": nvml.binding["module"], "gpus": {}}
for index, devices in targets.items():
    device = nvml.snapshot(int(index), detail=False)
    entry = {"mig_enabled": True, "mig_devices": devices}
    plan = geometry.plan_gpu(device.table, device.info["mig_mode"], device.info["instances"], entry)
    one = {"counts_before": geometry.current_counts(device.info["instances"]), "plan_changed": plan["changed"],
           "actions": [a["action"] for a in plan["actions"]]}
    if sys.argv[2] == "apply":
        one["applied"] = nvml.apply(device, plan)
        after = nvml.refresh(device).info
        one["counts_after"] = geometry.current_counts(after["instances"])
    res["gpus"][index] = one
nvml.close()
print(json.dumps(res))
'''


def _product(libdir, path, mode, targets):
    proc = subprocess.run([sys.executable, "-I", "-c", PRODUCT, str(COLLECTIONS), mode, json.dumps(targets)],
                          env=lib_env(libdir, path), capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout)
    assert "site-packages" in out["binding"], out["binding"]   # the real nvidia-ml-py, not a module of ours
    return out["gpus"]


@pytest.fixture(scope="module")
def roundtrips(libdirs, tmp_path_factory):
    """All MIG models as GPUs of one host (one process per step keeps the file fast): (i) the product applies its
    geometry, then mig-parted exports; (ii) on a fresh host mig-parted applies its config, then the product reads."""
    if not COLLECTIONS.joinpath("ansible_collections", "gpuops", "provision").exists():
        pytest.skip("tests/conftest.py did not link the collection under build/collections")
    lib = libdirs[libnvml_build.DEFAULT_DRIVER]
    tmp = tmp_path_factory.mktemp("mig_roundtrip")
    out = {}
    # (i) the product applies, mig-parted exports
    path = tmp / "product.json"
    path.write_text(json.dumps(_state(MIG_MODELS)))
    root = kernel_view.build(str(tmp / "kernel-product"), str(path))
    out["product_applied"] = _product(lib, path, "apply", {str(i): _geometries(m)[0] for i, m in enumerate(MIG_MODELS)})
    proc = _run_mig_parted(lib, path, root, "export", "--output-format=json")
    out["export_raw"] = proc.stdout
    out["exported"] = _exported(proc)
    # (ii) mig-parted applies a config (one entry per model, by device filter), the product reads and plans
    path = tmp / "migparted.json"
    path.write_text(json.dumps(_state(MIG_MODELS)))
    root = kernel_view.build(str(tmp / "kernel-migparted"), str(path))
    config = {"version": "v1", "mig-configs": {"roundtrip": [
        {"device-filter": [_device_filter(m)], "devices": "all", "mig-enabled": True, "mig-devices": _geometries(m)[1]}
        for m in MIG_MODELS]}}
    (tmp / "config.yaml").write_text(json.dumps(config, indent=1))   # JSON is YAML
    proc = _run_mig_parted(lib, path, root, "apply", "-f", str(tmp / "config.yaml"), "-c", "roundtrip")
    out["apply"] = proc
    out["product_read"] = _product(lib, path, "read", {str(i): _geometries(m)[1] for i, m in enumerate(MIG_MODELS)})
    proc = _run_mig_parted(lib, path, root, "assert", "-f", str(tmp / "config.yaml"), "-c", "roundtrip")
    out["assert"] = proc
    return out


def test_every_mig_model_is_covered():
    assert len(MIG_MODELS) >= 20 and "NVIDIA A30" in MIG_MODELS and "NVIDIA L40S" not in MIG_MODELS
    assert len({_device_filter(m) for m in MIG_MODELS}) == len(MIG_MODELS)   # the config tells them apart


@pytest.mark.parametrize("model", MIG_MODELS)
def test_mig_parted_exports_what_the_product_applied(model, roundtrips):
    i = MIG_MODELS.index(model)
    want = _geometries(model)[0]
    applied = roundtrips["product_applied"][str(i)]
    assert applied["counts_after"] == want, applied
    assert roundtrips["exported"][_device_filter(model)] == want, roundtrips["export_raw"]


@pytest.mark.parametrize("model", MIG_MODELS)
def test_the_product_reads_what_mig_parted_applied(model, roundtrips):
    proc = roundtrips["apply"]
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "MIG configuration applied successfully" in proc.stdout
    i = MIG_MODELS.index(model)
    read = roundtrips["product_read"][str(i)]
    assert read["counts_before"] == _geometries(model)[1], read
    # the planner the mig_geometry module runs (_mig.apply.Runner.plan_one -> geometry.plan_gpu) has nothing to do
    assert read["plan_changed"] is False and read["actions"] == [], read
    assert roundtrips["assert"].returncode == 0, roundtrips["assert"].stderr[-4000:]


def test_mig_parted_apply_enables_mig_on_hopper_then_configures(libdirs, tmp_path):
    """mig-parted's mode step through the library (cmd/nvidia-mig-parted/apply/mode.go ApplyMigMode:
    nvmlDeviceSetMigMode, then the pending check): Hopper takes the mode at once (machine.set_mig_mode), so no GPU
    reset is due and the config step follows in the same run."""
    path = tmp_path / "gpusim.json"
    path.write_text(json.dumps({"gpus": [{"model": "NVIDIA H100 80GB HBM3", "mig_mode": "disabled"}]}))
    root = kernel_view.build(str(tmp_path / "kernel"), str(path))
    config = {"version": "v1", "mig-configs": {"two-3g": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]}}
    (tmp_path / "config.yaml").write_text(json.dumps(config))
    lib = libdirs[libnvml_build.DEFAULT_DRIVER]
    proc = _run_mig_parted(lib, path, root, "apply", "-f", str(tmp_path / "config.yaml"), "-c", "two-3g", trace=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "nvmlDeviceSetMigMode('[\"gpu\", " in proc.stderr
    state = json.loads(path.read_text())["gpus"][0]
    assert (state["mig_mode"], state["mig_mode_pending"]) == (1, 1)
    assert sorted(gi["profile_id"] for gi in state["gpu_instances"]) == [9, 9]
    assert _product(lib, path, "read", {"0": {"3g.40gb": 2}})["0"]["plan_changed"] is False


def test_mig_parted_apply_resets_an_ampere_gpu_to_enable_mig(libdirs, tmp_path):
    """An Ampere GPU whose driver leaves the reset to the caller (`mig_mode_self_reset: false`, machine.set_mig_mode)
    keeps the new mode pending: mig-parted sees it pending (nvmlDeviceGetMigMode), runs `nvidia-smi -r -i <bus ids>`
    (cmd/nvidia-mig-parted/util/device.go nvmlResetAllGPUs; gpusim's bin/nvidia-smi resets the state's GPU), then
    configures the GPU in the same run."""
    path = tmp_path / "gpusim.json"
    path.write_text(json.dumps({"gpus": [{"model": "NVIDIA A100-SXM4-40GB", "mig_mode": "disabled",
                                                   "mig_mode_self_reset": False}]}))
    root = kernel_view.build(str(tmp_path / "kernel"), str(path))
    config = {"version": "v1", "mig-configs": {"seven": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}]}}
    (tmp_path / "config.yaml").write_text(json.dumps(config))
    lib = libdirs[libnvml_build.DEFAULT_DRIVER]
    proc = _run_mig_parted(lib, path, root, "--debug", "apply", "-f", str(tmp_path / "config.yaml"), "-c", "seven",
                           smi=True)
    print(proc.stdout, proc.stderr[-3000:])
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Mode change pending: true" in proc.stderr and "was successfully reset" in proc.stderr
    state = json.loads(path.read_text())["gpus"][0]
    assert (state["mig_mode"], state["mig_mode_pending"]) == (1, 1)
    assert sorted(gi["profile_id"] for gi in state["gpu_instances"]) == [19] * 7
