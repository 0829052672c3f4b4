"""gpusim's libnvidia-ml.so.1 (lab/gpusim/libnvml, issue 42) under NVIDIA's own clients.

The REAL nvidia-ml-py (the PyPI binding the product installs) loads the library by name through ``LD_LIBRARY_PATH``,
in a subprocess whose ``import pynvml`` is the installed one, and runs a call sequence on a state file: every answer
(values, struct fields, exception classes and codes) and the state file afterwards must be the recorded ones
(libnvml_expected/libnvml/, libnvml_common.expected). NVIDIA's mig-parted (the lab's build) lists the GPUs and their
MIG geometry through the library (the MIG slice in full: tests/lab/test_libnvml_mig.py).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import pytest

from libnvml_common import (REPO, NEEDS_BUILD, assert_answers, expected, kernel_view, lib_env,  # pylint: disable=import-error
                            libnvml_build)


sys.path.insert(0, str(REPO / "lab"))  # lab/gobuild.py, as in tests/lab/test_mig_parted_oracle.py

pytestmark = NEEDS_BUILD

# The calls, as nvidia-ml-py names them; each answer is recorded as ["ok", value] or ["err", class, code].
PROBE = r'''
import json, sys
import pynvml as n
out = {"file": n.__file__}

def plain(v):
    if isinstance(v, bytes):
        return v.decode()
    if hasattr(v, "_fields_"):
        return {f[0]: plain(getattr(v, f[0])) for f in v._fields_}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    return v

def rec(name, fn, *args):
    try:
        out.setdefault("calls", []).append([name, "ok", plain(fn(*args))])
    except n.NVMLError as e:
        out.setdefault("calls", []).append([name, "err", type(e).__name__, e.value, str(e)])
    except Exception as e:  # NVMLLibraryMismatchError and the like: plain exceptions
        out.setdefault("calls", []).append([name, "exc", type(e).__name__])

steps = json.loads(sys.argv[1])
rec("init", n.nvmlInit)
rec("errorStrings", lambda: [n.nvmlErrorString(c) for c in list(range(0, 31)) + [999]])
rec("driver", n.nvmlSystemGetDriverVersion)
rec("nvmlVersion", n.nvmlSystemGetNVMLVersion)
rec("count", n.nvmlDeviceGetCount)
count = out["calls"][-1][2] if out["calls"][-1][1] == "ok" else 0
handles = []
for i in range(count + 1):            # one past the end: INVALID_ARGUMENT
    try:
        handles.append(n.nvmlDeviceGetHandleByIndex(i))
        out["calls"].append(["handle%d" % i, "ok"])
    except n.NVMLError as e:
        out["calls"].append(["handle%d" % i, "err", type(e).__name__, e.value])
for i, h in enumerate(handles):
    rec("name%d" % i, n.nvmlDeviceGetName, h)
    rec("uuid%d" % i, n.nvmlDeviceGetUUID, h)
    rec("pci%d" % i, n.nvmlDeviceGetPciInfo_v3, h)
    rec("memory%d" % i, n.nvmlDeviceGetMemoryInfo, h)
    rec("memory_v2_%d" % i, n.nvmlDeviceGetMemoryInfo, h, n.nvmlMemory_v2)
    rec("memory_badversion%d" % i, n.nvmlDeviceGetMemoryInfo, h, 0x01000028)
    rec("migmode%d" % i, n.nvmlDeviceGetMigMode, h)
    rec("bybus%d" % i, lambda: n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByPciBusId(
        n.nvmlDeviceGetPciInfo_v3(h).busId)))
rec("bybus_missing", n.nvmlDeviceGetHandleByPciBusId, "0000:01:00.0")
rec("bybus_bad", n.nvmlDeviceGetHandleByPciBusId, "garbage")
for index, mode in steps:
    rec("set%d=%d" % (index, mode), n.nvmlDeviceSetMigMode, handles[index], mode)
    rec("after%d" % index, n.nvmlDeviceGetMigMode, handles[index])
rec("shutdown", n.nvmlShutdown)
rec("after_shutdown", n.nvmlDeviceGetCount)
rec("shutdown_again", n.nvmlShutdown)
print(json.dumps(out))
'''

MIXED = {"gpus": [
    {"model": "NVIDIA A100-SXM4-40GB", "mig_mode": "enabled",
     "gpu_instances": [{"profile_id": 9, "start": 4, "compute_instances": [{"slices": 3}]}]},
    {"model": "NVIDIA H100 80GB HBM3", "mig_mode": "disabled"},
    {"model": "NVIDIA A100-SXM4-80GB", "mig_mode": "disabled",
     "processes": [{"pid": 4242, "used_memory": 1073741824}]},
    {"model": "NVIDIA A30", "mig_mode": "disabled", "mig_mode_self_reset": False},
    {"model": "NVIDIA L40S"},
    {"model": "NVIDIA A100-SXM4-40GB", "vgpu_name": "NVIDIA A100-4C", "virtualization_mode": "vgpu"},
    {"model": "NVIDIA H200", "present": False},
    {"model": "NVIDIA H100 NVL", "lost": True},
]}
# (gpu index, mode): GIs exist -> IN_USE; Hopper applies at once; a GPU with processes stays pending (IN_USE status);
# an A30 without self-reset -> RESET_REQUIRED; no MIG -> NOT_SUPPORTED; a bad mode -> INVALID_ARGUMENT.
MIXED_STEPS = [[0, 0], [1, 1], [2, 1], [3, 1], [4, 1], [1, 2], [1, 0]]

CASES = {
    "mixed": (MIXED, MIXED_STEPS, None),
    "r535.98": (dict(MIXED, driver_version="535.98"), MIXED_STEPS, "535.98"),
    "r470": (dict(MIXED, driver_version="470.256.02", gpus=MIXED["gpus"][:2]), [[1, 1]], "470.256.02"),
    "no_driver": ({"driver_loaded": False, "gpus": [{"model": "NVIDIA A30"}]}, [], None),
    "init_fault": ({"faults": {"fail_init_after": 0, "fail_init_error": "NO_PERMISSION", "fail_init_times": 1},
                    "gpus": [{"model": "NVIDIA A30"}]}, [], None),
    "set_fault": ({"faults": {"fail_set_mig_mode_after": 0, "fail_set_mig_mode_error": "IN_USE"},
                   "gpus": [{"model": "NVIDIA H100 80GB HBM3"}]}, [[0, 1]], None),
    "no_state": (None, [], None),
}


def _probe(libdir, state, steps, tmp):
    """The probe's answers in an isolated interpreter (``-I``: nvidia-ml-py from site-packages) on the library in
    ``libdir``, and the state file afterwards (None: there was none)."""
    path = tmp / "gpusim.json"
    if state is not None:
        path.write_text(json.dumps(state))
    argv = [sys.executable, "-I", "-c", PROBE, json.dumps(steps)]
    proc = subprocess.run(argv, env=lib_env(libdir, path), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    return out, (json.loads(path.read_text()) if path.exists() else None)


@pytest.mark.parametrize("case", sorted(CASES))
def test_real_binding_on_the_library_answers_as_recorded(case, libdirs, tmp_path):
    state, steps, driver = CASES[case]
    lib = libdirs[driver or libnvml_build.DEFAULT_DRIVER]
    out, after = _probe(lib, state, steps, tmp_path)
    assert "site-packages" in out["file"], out["file"]   # the real binding, not a module of ours
    got = {"calls": out["calls"], "state": after}
    assert_answers(got, expected("libnvml", case, got))
    print("%s: %d answers as recorded" % (case, len(got["calls"])))


def test_the_versioned_symbols_follow_the_driver_branch(libdirs):
    """What the real binding's getattr(nvmlLib, name) finds: nvmlDeviceGetMemoryInfo_v2 from 510.39.01
    (gpusim/symbols.py); every branch keeps the unversioned-name-free entry points of nvml.h."""
    have = {}
    for driver, lib in libdirs.items():
        cdll = ctypes.CDLL(os.path.join(lib, "libnvidia-ml.so.1"))
        have[driver] = {s for s in ("nvmlInit_v2", "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetCount_v2",
                                    "nvmlInit", "nvmlDeviceGetCount", "gcall", "intern") if hasattr(cdll, s)}
    assert have["470.256.02"] == {"nvmlInit_v2", "nvmlDeviceGetCount_v2"}
    assert have["535.98"] == have[libnvml_build.DEFAULT_DRIVER] == {"nvmlInit_v2", "nvmlDeviceGetCount_v2",
                                                                    "nvmlDeviceGetMemoryInfo_v2"}


C_ABI = r'''
import ctypes, json, sys
lib = ctypes.CDLL("libnvidia-ml.so.1")
r = {}
r["uninit_count"] = lib.nvmlDeviceGetCount_v2(ctypes.byref(ctypes.c_uint()))
r["init"] = lib.nvmlInit_v2()
r["count_null"] = lib.nvmlDeviceGetCount_v2(None)
buf = ctypes.create_string_buffer(80)
r["short_buffer"] = lib.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(10))        # "550.163.01" + NUL = 11
r["exact_buffer"] = [lib.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(11)), buf.value.decode()]
r["bad_handle"] = lib.nvmlDeviceGetName(ctypes.c_void_p(12345), buf, ctypes.c_uint(80))
h1, h2 = ctypes.c_void_p(), ctypes.c_void_p()
lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h1))
lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h2))
r["same_handle"] = h1.value == h2.value and h1.value is not None
lib.nvmlErrorString.restype = ctypes.c_char_p
r["error_string"] = [lib.nvmlErrorString(19).decode(), lib.nvmlErrorString(12345).decode()]
r["shutdown"] = [lib.nvmlShutdown(), lib.nvmlShutdown()]
print(json.dumps(r))
'''


def test_c_abi_rules_of_nvml_h(libdirs, tmp_path):
    """nvml.h rules that only the C ABI has: UNINITIALIZED before init, INVALID_ARGUMENT for NULL out-pointers and
    foreign handles, INSUFFICIENT_SIZE when a string and its NUL do not fit, one handle per device."""
    path = tmp_path / "gpusim.json"
    path.write_text(json.dumps({"gpus": [{"model": "NVIDIA A30"}]}))
    proc = subprocess.run([sys.executable, "-I", "-c", C_ABI], env=lib_env(libdirs[libnvml_build.DEFAULT_DRIVER], path),
                          capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(proc.stdout) == {
        "uninit_count": 1, "init": 0, "count_null": 2, "short_buffer": 7, "exact_buffer": [0, "550.163.01"],
        "bad_handle": 2, "same_handle": True, "error_string": ["In use by another client", "Unknown Error"],
        "shutdown": [0, 1]}


def _mig_parted():
    import gobuild  # pylint: disable=import-outside-toplevel,import-error
    return os.path.join(gobuild.builder("mig-parted").ensure(), "bin", "nvidia-mig-parted")


def _run_mig_parted(libdir, state, tmp_path, *args):
    path = tmp_path / "gpusim.json"
    path.write_text(json.dumps(state))
    root = kernel_view.build(str(tmp_path / "kernel"), str(path))
    env = dict(lib_env(libdir, path), GPUSIM_TRACE="1")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("no mount namespace here (unshare -m): %s" % probe.stderr.decode().strip())
    return subprocess.run(kernel_view.command(root, [_mig_parted(), *args]), env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_mig_parted_exports_gpus_with_mig_disabled(libdirs, tmp_path):
    """NVIDIA's mig-parted, through go-nvml's dlopen of our library (an interpreter of its own), lists every GPU
    (sysfs + nvmlDeviceGetHandleByPciBusId_v2) and reads its MIG mode; with MIG off nothing else is asked."""
    state = {"gpus": [{"model": "NVIDIA A100-SXM4-40GB"}, {"model": "NVIDIA H100 80GB HBM3"}, {"model": "NVIDIA L40S"}]}
    proc = _run_mig_parted(libdirs[libnvml_build.DEFAULT_DRIVER], state, tmp_path, "export", "--output-format=json")
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0, proc.stderr
    spec = json.loads(proc.stdout)
    # mig-parted folds equal per-GPU entries into one for "all" (cmd/nvidia-mig-parted/export/config.go)
    assert spec["mig-configs"]["current"] == [{"devices": "all", "mig-enabled": False, "mig-devices": {}}]
    for bus in ("0000:17:00.0", "0000:31:00.0", "0000:4b:00.0"):
        assert "nvmlDeviceGetHandleByPciBusId_v2('%s',) -> (0," % bus in proc.stderr


def test_mig_parted_exports_a_mig_enabled_gpu(libdirs, tmp_path):
    """With MIG on, mig-parted walks the GPU instance and compute instance profiles and lists the instances through
    lab/gpusim/libnvml/mig.c (v1 profile-info names, as go-nvml v0.12.4-0 calls them); the rest of the MIG slice is
    tests/lab/test_libnvml_mig.py."""
    state = {"gpus": [{"model": "NVIDIA A100-SXM4-40GB", "mig_mode": "enabled",
                       "gpu_instances": [{"profile_id": 9, "start": 4, "compute_instances": [{"slices": 3}]},
                                         {"profile_id": 19, "start": 0, "compute_instances": [{"slices": 1}]}]}]}
    proc = _run_mig_parted(libdirs[libnvml_build.DEFAULT_DRIVER], state, tmp_path, "export", "--output-format=json")
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0, proc.stderr
    assert "nvmlDeviceGetGpuInstanceProfileInfo('[\"gpu\", " in proc.stderr
    assert json.loads(proc.stdout)["mig-configs"]["current"] == [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 1, "3g.20gb": 1}}]


def test_the_in_process_tests_binding_is_the_real_one_on_each_drivers_build(monkeypatch, tmp_path, libdirs):
    """tests/helpers/gpusim_nvml.py use_gpusim: ``import pynvml`` is nvidia-ml-py from site-packages
    on the build with the state's driver's exports (535.98: no _v3 process lists, so the binding's lookup fails there
    as on that driver), and two branches live side by side in one process."""
    from gpusim_nvml import use_gpusim  # pylint: disable=import-error,import-outside-toplevel
    seen = {}
    for driver in ("550.163.01", "535.98", "535.104.05"):
        (tmp_path / driver).mkdir()
        use_gpusim(monkeypatch, tmp_path / driver, {"driver_version": driver, "gpus": [{"model": "NVIDIA A30"}]})
        import pynvml  # pylint: disable=import-outside-toplevel
        assert "site-packages" in pynvml.__file__
        pynvml.nvmlInit()
        seen[driver] = (pynvml.nvmlSystemGetDriverVersion(), pynvml.nvmlDeviceGetCount(),
                        hasattr(pynvml.nvmlLib, "nvmlDeviceGetComputeRunningProcesses_v3"),
                        os.path.basename(os.path.dirname(pynvml.nvmlLib._name)))
    assert seen == {"550.163.01": ("550.163.01", 1, True, "550.163.01"),
                    "535.98": ("535.98", 1, False, "535.98"),
                    "535.104.05": ("535.104.05", 1, True, "535.104.05")}
