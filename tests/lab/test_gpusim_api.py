"""gpusim's pynvml surface against the real nvidia-ml-py, plus the inventory queries
(identity, PCI, memory, processes, MIG devices, virtualization, licensing)."""

from __future__ import annotations

import ctypes
import importlib.util
import inspect
import sys

import pytest

from gpusim_loader import load_gpusim  # pylint: disable=import-error  # on sys.path via conftest.py


A100 = "NVIDIA A100-SXM4-40GB"
# Names gpusim defines for its own use (or that come from imports) and that need not exist in nvidia-ml-py.
OWN = {"GPUSIM", "annotations", "datetime", "ctypes"}


@pytest.fixture(scope="module")
def real():
    """The real nvidia-ml-py module, loaded by file path (no NVIDIA library needed to import it)."""
    spec = importlib.util.find_spec("pynvml")
    assert spec is not None and "site-packages" in spec.origin, "nvidia-ml-py must be installed in the venv"
    real_spec = importlib.util.spec_from_file_location("real_pynvml", spec.origin)
    mod = importlib.util.module_from_spec(real_spec)
    sys.modules["real_pynvml"] = mod
    real_spec.loader.exec_module(mod)
    return mod


def public(mod):
    return {n: getattr(mod, n) for n in dir(mod) if not n.startswith("__") and n not in OWN
            and not (n.startswith("_") and not n.startswith("_nvml"))}


def test_every_name_exists_in_nvidia_ml_py_with_same_value(real):
    nv = load_gpusim()
    missing, differ = [], []
    for name, ours in public(nv).items():
        if not hasattr(real, name):
            missing.append(name)
            continue
        theirs = getattr(real, name)
        if isinstance(ours, (int, str, tuple)) and not isinstance(ours, bool) and ours != theirs:
            differ.append((name, ours, theirs))
    assert missing == [] and differ == []


def test_structures_have_the_same_fields(real):
    nv = load_gpusim()
    checked = 0
    for name, ours in public(nv).items():
        if isinstance(ours, type) and issubclass(ours, ctypes.Structure) and hasattr(ours, "_fields_"):
            theirs = getattr(real, name)
            assert [f[0] for f in ours._fields_] == [f[0] for f in theirs._fields_], name
            assert ctypes.sizeof(ours) == ctypes.sizeof(theirs), name
            checked += 1
    assert checked >= 20


def test_function_signatures_match(real):
    nv = load_gpusim()
    funcs = {n: f for n, f in public(nv).items() if n.startswith("nvml") and inspect.isfunction(f)}
    assert len(funcs) > 60
    for name, f in funcs.items():
        assert list(inspect.signature(f).parameters) == list(inspect.signature(getattr(real, name)).parameters), name


def test_error_classes_and_codes_match(real):
    nv = load_gpusim()
    ours = {n: getattr(nv, n)(0).value for n in dir(nv) if n.startswith("NVMLError_")}
    theirs = {n: getattr(real, n)(0).value for n in dir(real) if n.startswith("NVMLError_")}
    assert ours == theirs
    e = nv.NVMLError(nv.NVML_ERROR_IN_USE)
    assert isinstance(e, nv.NVMLError_InUse) and str(e) == "In use by another client"
    assert nv.nvmlExceptionClass(23) is nv.NVMLError_InsufficientResources
    # the real binding's expiry constants are 1-tuples (trailing comma); gpusim keeps that quirk
    assert nv.NVML_GRID_LICENSE_EXPIRY_VALID == real.NVML_GRID_LICENSE_EXPIRY_VALID == (2,)


def test_identity_pci_and_memory(sim):
    nv = sim.start({"gpus": [{"model": "NVIDIA H100 NVL", "persistence_mode": False,
                              "processes": [{"pid": 11, "used_memory": 3 << 30}]}]})
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    pci = nv.nvmlDeviceGetPciInfo(dev)
    assert (pci.busId, pci.busIdLegacy, pci.pciDeviceId, pci.bus) == ("00000000:17:00.0", "0000:17:00.0", 0x232110DE, 0x17)
    mem = nv.nvmlDeviceGetMemoryInfo(dev)
    assert (mem.total, mem.used, mem.free) == (95830 << 20, 3 << 30, (95830 << 20) - (3 << 30))
    assert nv.nvmlDeviceGetMemoryInfo(dev, version=nv.nvmlMemory_v2).version == nv.nvmlMemory_v2
    assert nv.nvmlDeviceGetPersistenceMode(dev) == nv.NVML_FEATURE_DISABLED
    assert nv.nvmlDeviceGetArchitecture(dev) == nv.NVML_DEVICE_ARCH_HOPPER
    assert nv.nvmlDeviceGetCudaComputeCapability(dev) == (9, 0)
    assert nv.nvmlDeviceGetIndex(nv.nvmlDeviceGetHandleByPciBusId("17:00.0")) == 0
    procs = nv.nvmlDeviceGetComputeRunningProcesses(dev)
    assert [(p.pid, p.usedGpuMemory) for p in procs] == [(11, 3 << 30)]
    assert nv.nvmlDeviceGetGraphicsRunningProcesses(dev) == []
    assert nv.nvmlSystemGetDriverBranch().branch == "r550_00"


def test_mig_device_handles(sim):
    nv = sim.start({"gpus": [{"model": A100, "mig_mode": "enabled",
                              "processes": [{"pid": 5, "used_memory": 1 << 20, "gpu_instance_id": 2,
                                             "compute_instance_id": 0}]}]})
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    assert nv.nvmlDeviceGetMaxMigDeviceCount(dev) == 7
    gi = nv.nvmlDeviceCreateGpuInstance(dev, 9)
    nv.nvmlGpuInstanceCreateComputeInstance(gi, 1)  # 2c at 0:2 (the only 2c placement in a 3g)
    nv.nvmlGpuInstanceCreateComputeInstance(gi, 0)  # 1c lands at 2
    mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(dev, 0)
    assert nv.nvmlDeviceIsMigDeviceHandle(mig).value == 1 and nv.nvmlDeviceIsMigDeviceHandle(dev).value == 0
    assert nv.nvmlDeviceGetName(mig) == "NVIDIA A100-SXM4-40GB MIG 2c.3g.20gb"
    assert nv.nvmlDeviceGetUUID(mig).startswith("MIG-")
    assert nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByUUID(nv.nvmlDeviceGetUUID(mig))) == nv.nvmlDeviceGetUUID(mig)
    assert (nv.nvmlDeviceGetGpuInstanceId(mig), nv.nvmlDeviceGetComputeInstanceId(mig)) == (2, 0)
    assert nv.nvmlDeviceGetMemoryInfo(mig).total == 19968 << 20
    assert [p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(mig)] == [5]
    attrs = nv.nvmlDeviceGetAttributes(nv.nvmlDeviceGetMigDeviceHandleByIndex(dev, 1))
    assert (attrs.gpuInstanceSliceCount, attrs.computeInstanceSliceCount, attrs.multiprocessorCount) == (3, 1, 14)
    assert nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)) == nv.nvmlDeviceGetUUID(dev)
    with pytest.raises(nv.NVMLError_NotFound):
        nv.nvmlDeviceGetMigDeviceHandleByIndex(dev, 2)


def test_virtualization_modes(sim):
    nv = sim.start({"gpus": [{"model": A100}, {"model": "NVIDIA L40S", "virtualization_mode": "host_vgpu",
                                               "host_vgpu_mode": "sriov"}]})
    bare, host = (nv.nvmlDeviceGetHandleByIndex(i) for i in range(2))
    assert nv.nvmlDeviceGetVirtualizationMode(bare) == nv.NVML_GPU_VIRTUALIZATION_MODE_NONE
    assert nv.nvmlDeviceGetVirtualizationMode(host) == nv.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU
    assert nv.nvmlDeviceGetHostVgpuMode(host) == nv.NVML_HOST_VGPU_MODE_SRIOV
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceGetHostVgpuMode(bare)


def test_licensing(sim):
    nv = sim.start({"gpus": [
        {"model": A100, "virtualization_mode": "vgpu",
         "license": {"feature": "compute", "licensed": True, "expiry": "2027-05-27T00:08:28Z"}},
        {"model": A100, "virtualization_mode": "vgpu", "license": {"feature": "compute", "licensed": False}},
        {"model": A100}]})
    lic, unlic, bare = (nv.nvmlDeviceGetGridLicensableFeatures(nv.nvmlDeviceGetHandleByIndex(i)) for i in range(3))
    f = lic.gridLicensableFeatures[0]
    assert (lic.isGridLicenseSupported, lic.licensableFeaturesCount) == (1, 1)
    assert (f.featureCode, f.featureState) == (nv.NVML_GRID_LICENSE_FEATURE_CODE_COMPUTE, 1)
    assert f.productName == "NVIDIA Virtual Compute Server"
    e = f.licenseExpiry
    assert (e.year, e.month, e.day, e.hour, e.min, e.sec, e.status) == (2027, 5, 27, 0, 8, 28, 2)
    g = unlic.gridLicensableFeatures[0]
    assert (g.featureState, g.licenseExpiry.status) == (0, 0)
    assert (bare.isGridLicenseSupported, bare.licensableFeaturesCount) == (0, 0)


def test_versioned_symbols_are_the_ones_the_binding_looks_up(real):
    """gpusim/symbols.py names exactly the symbols nvidia-ml-py's functions look up, and the unversioned process
    lists are throwOnVersionMismatch-wrapped _v3 calls in nvidia-ml-py as in gpusim."""
    load_gpusim()
    from gpusim import symbols  # pylint: disable=import-outside-toplevel,import-error
    source = inspect.getsource(real)
    for symbol in symbols.SINCE:
        if symbol.startswith("nvmlDeviceGetMPSCompute"):
            continue  # gpusim has no MPS process list; the binding's lookup is the same pattern
        assert '_nvmlGetFunctionPointer("%s")' % symbol in source, symbol
    for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses",
                 "nvmlDeviceGetMPSComputeRunningProcesses"):
        assert "@throwOnVersionMismatch\ndef %s(handle):\n    return %s_v3(handle)" % (name, name) in source
    assert issubclass(real.NVMLLibraryMismatchError, Exception) and not issubclass(real.NVMLLibraryMismatchError, real.NVMLError)


@pytest.mark.parametrize("driver,v2,v3", [("450.51.06", False, False), ("450.66", True, False), ("505.86.01", True, False),
                                          ("510.39.01", True, True), ("535.86.05", True, True), ("535.98", True, False),
                                          ("535.104.05", True, True), ("580.65.06", True, True)])
def test_process_lists_per_driver_version(sim, driver, v2, v3):
    nv = sim.start({"driver_version": driver, "gpus": [{"model": A100, "processes": [{"pid": 7}]}]})
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    if v3:
        assert [p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(dev)] == [7]
    else:
        with pytest.raises(nv.NVMLLibraryMismatchError):
            nv.nvmlDeviceGetComputeRunningProcesses(dev)
        with pytest.raises(nv.NVMLError_FunctionNotFound):
            nv.nvmlDeviceGetGraphicsRunningProcesses_v3(dev)
    if v2:
        assert [p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses_v2(dev)] == [7]
    else:
        with pytest.raises(nv.NVMLError_FunctionNotFound):
            nv.nvmlDeviceGetComputeRunningProcesses_v2(dev)
    # The driver's original symbol is always there, as a C function with v1 records.
    fn = nv._nvmlGetFunctionPointer("nvmlDeviceGetComputeRunningProcesses")  # pylint: disable=protected-access
    count = ctypes.c_uint(0)
    assert fn(dev, ctypes.byref(count), None) == nv.NVML_ERROR_INSUFFICIENT_SIZE and count.value == 1
    with pytest.raises(nv.NVMLError_FunctionNotFound):
        nv._nvmlGetFunctionPointer("nvmlDeviceGetMemoryInfo_v2" if driver < "510" else "nvmlNoSuchFunction")  # pylint: disable=protected-access


def test_missing_symbols_fault_removes_one_entry_point(sim):
    nv = sim.start({"driver_version": "580.65.06", "missing_symbols": ["nvmlDeviceGetGpuInstanceProfileInfoV"],
                    "gpus": [{"model": A100, "mig_mode": "enabled"}]})
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(nv.NVMLError_FunctionNotFound):
        nv.nvmlDeviceGetGpuInstanceProfileInfo(dev, nv.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    assert nv.nvmlDeviceGetGpuInstanceProfileInfo(dev, nv.NVML_GPU_INSTANCE_PROFILE_1_SLICE, 1).id == 19
