"""gpusim model table: profile names, ids, counts and placements per GPU model (mig.md §1)."""

from __future__ import annotations

from ctypes import byref, c_uint

import pytest

from gpusim_loader import load_gpusim  # pylint: disable=import-error  # on sys.path via conftest.py


# nvidia-smi names by profile id, from real `-lgip` outputs / UG tables (mig.md §1.2-1.7).
NAMES = {
    "NVIDIA A100-SXM4-40GB": {19: "1g.5gb", 20: "1g.5gb+me", 15: "1g.10gb", 14: "2g.10gb", 9: "3g.20gb",
                              5: "4g.20gb", 0: "7g.40gb"},
    "NVIDIA A100-SXM4-80GB": {19: "1g.10gb", 20: "1g.10gb+me", 15: "1g.20gb", 14: "2g.20gb", 9: "3g.40gb",
                              5: "4g.40gb", 0: "7g.80gb"},
    "NVIDIA A30": {14: "1g.6gb", 21: "1g.6gb+me", 5: "2g.12gb", 6: "2g.12gb+me", 0: "4g.24gb"},
    "NVIDIA H100 80GB HBM3": {19: "1g.10gb", 20: "1g.10gb+me", 15: "1g.20gb", 14: "2g.20gb", 9: "3g.40gb",
                              5: "4g.40gb", 0: "7g.80gb"},
    "NVIDIA H100 NVL": {19: "1g.12gb", 20: "1g.12gb+me", 15: "1g.24gb", 14: "2g.24gb", 9: "3g.47gb",
                        5: "4g.47gb", 0: "7g.94gb"},
    "NVIDIA H200": {19: "1g.18gb", 20: "1g.18gb+me", 15: "1g.35gb", 14: "2g.35gb", 9: "3g.71gb",
                    5: "4g.71gb", 0: "7g.141gb"},
}
# (index, id, count, placements) for the 8-slice parts and the A30.
EIGHT = {0: (19, 7, [(s, 1) for s in range(7)]), 7: (20, 1, [(s, 1) for s in range(7)]),
         9: (15, 4, [(0, 2), (2, 2), (4, 2), (6, 2)]), 1: (14, 3, [(0, 2), (2, 2), (4, 2)]),
         2: (9, 2, [(0, 4), (4, 4)]), 3: (5, 1, [(0, 4)]), 4: (0, 1, [(0, 8)])}
A30 = {0: (14, 4, [(s, 1) for s in range(4)]), 7: (21, 1, [(s, 1) for s in range(4)]),
       1: (5, 2, [(0, 2), (2, 2)]), 8: (6, 1, [(0, 2), (2, 2)]), 3: (0, 1, [(0, 4)])}
A30_NVML = {**A30, 0: (14, 7, A30[0][2]), 1: (5, 3, A30[1][2])}


def dump(nv, dev):
    out = {}
    for idx in range(nv.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            p = nv.nvmlDeviceGetGpuInstanceProfileInfo(dev, idx)
        except nv.NVMLError_NotSupported:
            continue
        count = c_uint()
        nv.nvmlDeviceGetGpuInstancePossiblePlacements(dev, p.id, None, byref(count))
        arr = (nv.c_nvmlGpuInstancePlacement_t * count.value)()
        nv.nvmlDeviceGetGpuInstancePossiblePlacements(dev, p.id, arr, byref(count))
        out[idx] = (p.id, p.instanceCount, [(arr[i].start, arr[i].size) for i in range(count.value)], p.name)
    return out


@pytest.mark.parametrize("model", sorted(NAMES))
def test_profiles_ids_names_placements(sim, model):
    nv = sim.start({"gpus": [{"model": model, "mig_mode": "enabled"}]})
    got = dump(nv, nv.nvmlDeviceGetHandleByIndex(0))
    want = A30_NVML if model == "NVIDIA A30" else EIGHT
    assert {i: v[:3] for i, v in got.items()} == {i: tuple(v) for i, v in want.items()}
    assert {v[0]: v[3] for v in got.values()} == {pid: "MIG " + n for pid, n in NAMES[model].items()}


def test_a30_instance_counts_as_nvml_reports_them_or_documented(sim):
    """NVML's instanceCount is wrong on the A30 (mig-parted discovery.go getHardcodedA30Profiles); gpusim answers an
    assumed wrong set (models.py) unless the state asks for the documented counts."""
    nv = sim.start({"a30_nvml_counts": "documented", "gpus": [{"model": "NVIDIA A30", "mig_mode": "enabled"}]})
    got = dump(nv, nv.nvmlDeviceGetHandleByIndex(0))
    assert {i: v[:3] for i, v in got.items()} == {i: tuple(v) for i, v in A30.items()}


def test_v1_and_v2_profile_structs(sim):
    """The v1 symbol (what go-nvml calls) and the ...V one with nvml.h's nvmlGpuInstanceProfileInfo_v2 struct answer
    the same profile. nvidia-ml-py's nvmlDeviceGetGpuInstanceProfileInfoById calls a symbol the pinned nvml.h does not
    declare (nvmlDeviceGetGpuInstanceProfileInfoByIdV): the library has none, as a driver of that header."""
    nv = sim.start({"gpus": [{"model": "NVIDIA H100 80GB HBM3"}]})
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    v1 = nv.nvmlDeviceGetGpuInstanceProfileInfo(dev, nv.NVML_GPU_INSTANCE_PROFILE_7_SLICE, version=1)
    assert isinstance(v1, nv.c_nvmlGpuInstanceProfileInfo_t)
    assert (v1.id, v1.sliceCount, v1.multiprocessorCount, v1.copyEngineCount, v1.memorySizeMB) == (0, 7, 132, 8, 81152)
    v2 = nv.nvmlDeviceGetGpuInstanceProfileInfo(dev, nv.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2)
    assert isinstance(v2, nv.c_nvmlGpuInstanceProfileInfo_v2_t)
    assert (v2.id, v2.sliceCount, v2.multiprocessorCount, v2.version, v2.name) == (
        15, 1, 26, nv.nvmlGpuInstanceProfileInfo_v2, "MIG 1g.20gb")
    with pytest.raises(nv.NVMLError_FunctionNotFound):
        nv.nvmlDeviceGetGpuInstanceProfileInfoById(dev, 15)


def test_memory_naming_rule_uses_device_total():
    load_gpusim()
    from gpusim import models
    # mig.md: H100 80GB has 81559 MiB and its 1g is 9.75 GiB -> 1/8 -> "10gb"
    assert models.memory_gb(9984, 81559) == 10
    # rounding is half away from zero like Go's math.Round: 0.5 * 141 = 70.5 -> 71 ("3g.71gb")
    assert models.memory_gb(71168, 143771) == 71
    # P12: the name depends on the total memory the device reports
    assert models.memory_gb(9984, 72 * 1024) != models.memory_gb(9984, 81559)


def test_table_is_self_consistent():
    load_gpusim()
    from gpusim import models
    for model in models.MODELS.values():
        if not model.mig_capable:
            assert model.gi_profiles == ()
            continue
        ids = [p.id for p in model.gi_profiles]
        assert len(ids) == len(set(ids)), model.name
        for p in model.gi_profiles:
            assert all(s + p.size <= model.memory_slices for s in p.starts), (model.name, p.id)
            assert p.memory_mib < model.memory_mib
        full = models.full_profile(model)
        assert full.size == model.memory_slices and full.starts == (0,)


def test_l40s_in_table_without_mig():
    load_gpusim()
    from gpusim import models
    assert not models.MODELS["NVIDIA L40S"].mig_capable
    # The models whose names come from a real `-lgip` (NAMES) and the L40S; the others are compared with the
    # product's documented table (tests/unit/plugins/module_utils/_mig/test_models_table.py).
    assert set(NAMES) | {"NVIDIA L40S"} <= set(models.MODELS)
    assert [n for n, m in models.MODELS.items() if not m.mig_capable] == ["NVIDIA L40S"]


def test_per_gpu_overrides_emulate_other_skus_and_drivers(sim):
    nv = sim.start({"gpus": [{"model": "NVIDIA H200", "mig_mode": "enabled", "memory_mib": 146432},
                             {"model": "NVIDIA A100-SXM4-40GB", "mig_mode": "enabled", "hide_profiles": [15]}]})
    big, old = (nv.nvmlDeviceGetHandleByIndex(i) for i in range(2))
    # P12: names follow the total memory the device reports (143 GiB -> "1g.36gb" like GH200 144G)
    assert nv.nvmlDeviceGetGpuInstanceProfileInfo(big, nv.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2).name == "MIG 1g.36gb"
    assert nv.nvmlDeviceGetMemoryInfo(big).total == 146432 << 20
    # P15: an older driver without profile 15
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceGetGpuInstanceProfileInfo(old, nv.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2)
    with pytest.raises(nv.NVMLError_InvalidArgument):
        nv.nvmlDeviceCreateGpuInstance(old, 15)
    assert sorted(dump(nv, old)) == [0, 1, 2, 3, 4, 7]
