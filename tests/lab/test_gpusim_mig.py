"""gpusim MIG rules: placements, NVML auto-placement, overlap, destroy order, CIs, MIG mode.

Sources of the expected values: shared/reference/mig.md (sections named per test).
"""

from __future__ import annotations

import json
from ctypes import byref, c_uint, pointer

import pytest


A100 = "NVIDIA A100-SXM4-40GB"
H100 = "NVIDIA H100 80GB HBM3"


def one(model, mig="enabled", **extra):
    return {"gpus": [dict({"model": model, "mig_mode": mig}, **extra)]}


def gi_info(nv, gi):
    info = nv.nvmlGpuInstanceGetInfo(gi)
    return info.profileId, info.placement.start, info.placement.size, info.id


def create_seq(nv, dev, ids):
    return [gi_info(nv, nv.nvmlDeviceCreateGpuInstance(dev, p)) for p in ids]


def placements(nv, dev, pid):
    count = c_uint()
    nv.nvmlDeviceGetGpuInstancePossiblePlacements(dev, pid, None, byref(count))
    arr = (nv.c_nvmlGpuInstancePlacement_t * count.value)()
    nv.nvmlDeviceGetGpuInstancePossiblePlacements(dev, pid, arr, byref(count))
    return [(arr[i].start, arr[i].size) for i in range(count.value)]


def all_gis(nv, dev):
    out = []
    for idx in range(nv.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            prof = nv.nvmlDeviceGetGpuInstanceProfileInfo(dev, idx)
        except nv.NVMLError_NotSupported:
            continue
        arr = (nv.c_nvmlGpuInstance_t * prof.instanceCount)()
        count = c_uint()
        nv.nvmlDeviceGetGpuInstances(dev, prof.id, arr, byref(count))
        out += [gi_info(nv, arr[i]) for i in range(count.value)]
    return sorted(out, key=lambda g: g[1])


# ---------------------------------------------------------------- §1.11 automatic placement
def test_auto_placement_h100_seven_1g_in_observed_order(sim):
    nv = sim.start(one(H100))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    got = create_seq(nv, dev, [19] * 7)
    assert [g[1] for g in got] == [6, 4, 5, 0, 1, 2, 3]
    assert [g[3] for g in got] == [13, 11, 12, 7, 8, 9, 10]
    with pytest.raises(nv.NVMLError_InsufficientResources):
        nv.nvmlDeviceCreateGpuInstance(dev, 19)


def test_auto_placement_2g_then_1g(sim):
    nv = sim.start(one(A100))
    got = create_seq(nv, nv.nvmlDeviceGetHandleByIndex(0), [14, 19, 19, 19, 19, 19])
    assert [(g[1], g[2]) for g in got] == [(4, 2), (6, 1), (0, 1), (1, 1), (2, 1), (3, 1)]
    assert [g[3] for g in got] == [5, 13, 7, 8, 9, 10]


def test_auto_placement_3g_first_order_works(sim):
    nv = sim.start(one(A100))
    got = create_seq(nv, nv.nvmlDeviceGetHandleByIndex(0), [9, 19, 14, 19])
    assert [(g[0], g[1], g[2]) for g in got] == [(9, 4, 4), (19, 0, 1), (14, 2, 2), (19, 1, 1)]


def test_auto_placement_3g_last_order_fails_insufficient_resources(sim):
    nv = sim.start(one(A100))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    got = create_seq(nv, dev, [19, 19, 14])
    assert [(g[1], g[2]) for g in got] == [(6, 1), (4, 1), (0, 2)]
    before = sim.state()
    with pytest.raises(nv.NVMLError_InsufficientResources):
        nv.nvmlDeviceCreateGpuInstance(dev, 9)
    assert sim.state()["gpus"] == before["gpus"]


def test_two_3g_fill_both_halves(sim):
    nv = sim.start(one(A100))
    got = create_seq(nv, nv.nvmlDeviceGetHandleByIndex(0), [9, 9])
    assert sorted((g[1], g[2]) for g in got) == [(0, 4), (4, 4)]


# ---------------------------------------------------------------- M1-M4 placements and overlap
def test_possible_placements_are_real_ones_not_go_nvml_mock(sim):
    nv = sim.start(one("NVIDIA H200"))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    assert placements(nv, dev, 15) == [(0, 2), (2, 2), (4, 2), (6, 2)]
    assert placements(nv, dev, 9) == [(0, 4), (4, 4)]
    assert placements(nv, dev, 0) == [(0, 8)]


def test_possible_placements_listed_with_mig_disabled_and_when_occupied(sim):
    nv = sim.start(one(A100, mig="disabled"))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    assert placements(nv, dev, 14) == [(0, 2), (2, 2), (4, 2)]


def test_placement_count_is_only_written_and_the_array_sized_by_a_null_call(sim):
    """nvml.h nvmlDeviceGetGpuInstancePossiblePlacements_v2: ``placements`` "Can be NULL to discover number of allowed
    placements for this profile. If non-NULL must be large enough to accommodate the placements supported by the
    profile"; ``count`` "Returns number of allowed placemenets". No INSUFFICIENT_SIZE: the count going in is not a
    capacity, so the caller sizes the array by a NULL call (the 1g+me profile: instanceCount 1, but 7 placements)."""
    nv = sim.start(one(A100))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    info = nv.nvmlDeviceGetGpuInstanceProfileInfo(dev, nv.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1)
    assert (info.id, info.instanceCount) == (20, 1)
    count = c_uint(1)
    nv.nvmlDeviceGetGpuInstancePossiblePlacements(dev, info.id, None, byref(count))
    assert count.value == 7
    arr = (nv.c_nvmlGpuInstancePlacement_t * count.value)()
    count = c_uint(1)  # what goes in is ignored
    nv.nvmlDeviceGetGpuInstancePossiblePlacements(dev, info.id, arr, byref(count))
    assert count.value == 7 and [(p.start, p.size) for p in arr] == [(s, 1) for s in range(7)]


def test_count_must_be_passed_by_reference(sim):
    nv = sim.start(one(A100))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(nv.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetGpuInstancePossiblePlacements(dev, 19, None, c_uint())
    count = c_uint()
    nv.nvmlDeviceGetGpuInstancePossiblePlacements(dev, 19, None, pointer(count))
    assert count.value == 7


def test_with_placement_overlap_is_insufficient_resources_and_changes_nothing(sim):
    nv = sim.start(one(A100))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    gi = nv.nvmlDeviceCreateGpuInstanceWithPlacement(dev, 9, byref(nv.c_nvmlGpuInstancePlacement_t(0, 4)))
    assert gi_info(nv, gi)[:3] == (9, 0, 4)
    before = sim.state()["gpus"]
    with pytest.raises(nv.NVMLError_InsufficientResources):
        nv.nvmlDeviceCreateGpuInstanceWithPlacement(dev, 14, byref(nv.c_nvmlGpuInstancePlacement_t(2, 2)))
    assert sim.state()["gpus"] == before
    # A 4g at 0:4 overlaps too; a 4g cannot go at 4 (not one of its placements).
    with pytest.raises(nv.NVMLError_InsufficientResources):
        nv.nvmlDeviceCreateGpuInstanceWithPlacement(dev, 5, byref(nv.c_nvmlGpuInstancePlacement_t(0, 4)))
    with pytest.raises(nv.NVMLError_InvalidArgument):
        nv.nvmlDeviceCreateGpuInstanceWithPlacement(dev, 5, byref(nv.c_nvmlGpuInstancePlacement_t(4, 4)))
    nv.nvmlDeviceCreateGpuInstanceWithPlacement(dev, 14, byref(nv.c_nvmlGpuInstancePlacement_t(4, 2)))
    assert [g[:3] for g in all_gis(nv, dev)] == [(9, 0, 4), (14, 4, 2)]


def test_4g_and_3g_coexist(sim):
    nv = sim.start(one(A100))
    got = create_seq(nv, nv.nvmlDeviceGetHandleByIndex(0), [5, 9])
    assert [(g[0], g[1]) for g in got] == [(5, 0), (9, 4)]


def test_me_profile_is_limited_to_one(sim):
    nv = sim.start(one(A100))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    assert nv.nvmlDeviceGetGpuInstanceRemainingCapacity(dev, 20) == 1
    nv.nvmlDeviceCreateGpuInstance(dev, 20)
    assert nv.nvmlDeviceGetGpuInstanceRemainingCapacity(dev, 20) == 0
    with pytest.raises(nv.NVMLError_InsufficientResources):
        nv.nvmlDeviceCreateGpuInstance(dev, 20)
    # ...but it coexists with six plain 1g instances (mig.md §1.12).
    create_seq(nv, dev, [19] * 6)
    assert len(all_gis(nv, dev)) == 7


def test_a30_me_profiles_share_one_jpeg_ofa(sim):
    nv = sim.start(one("NVIDIA A30"))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    nv.nvmlDeviceCreateGpuInstance(dev, 21)
    with pytest.raises(nv.NVMLError_InsufficientResources):
        nv.nvmlDeviceCreateGpuInstance(dev, 6)
    got = create_seq(nv, dev, [14, 14, 14])
    assert len(got) == 3 and nv.nvmlDeviceGetGpuInstanceRemainingCapacity(dev, 14) == 0


def test_remaining_capacity_counts_shared_slices(sim):
    nv = sim.start(one(A100))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    cap = {p: nv.nvmlDeviceGetGpuInstanceRemainingCapacity(dev, p) for p in (19, 15, 14, 9, 5, 0)}
    assert cap == {19: 7, 15: 4, 14: 3, 9: 2, 5: 1, 0: 1}
    nv.nvmlDeviceCreateGpuInstance(dev, 9)  # lands at 4:4
    cap = {p: nv.nvmlDeviceGetGpuInstanceRemainingCapacity(dev, p) for p in (19, 15, 14, 9, 5, 0)}
    assert cap == {19: 4, 15: 2, 14: 2, 9: 1, 5: 1, 0: 0}


# ---------------------------------------------------------------- M7 / L40S
def test_mig_disabled_gi_calls_not_supported(sim):
    nv = sim.start(one(A100, mig="disabled"))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceCreateGpuInstance(dev, 19)
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceGetGpuInstances(dev, 19, (nv.c_nvmlGpuInstance_t * 7)(), byref(c_uint()))
    # profiles stay queryable (current drivers; mig.md M2)
    assert nv.nvmlDeviceGetGpuInstanceProfileInfo(dev, 0).id == 19


def test_l40s_has_no_mig(sim):
    nv = sim.start(one("NVIDIA L40S", mig="disabled"))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    assert nv.nvmlDeviceGetName(dev) == "NVIDIA L40S"
    for call in (lambda: nv.nvmlDeviceGetMigMode(dev),
                 lambda: nv.nvmlDeviceSetMigMode(dev, 1),
                 lambda: nv.nvmlDeviceGetGpuInstanceProfileInfo(dev, 0),
                 lambda: nv.nvmlDeviceCreateGpuInstance(dev, 19),
                 lambda: nv.nvmlDeviceGetMaxMigDeviceCount(dev)):
        with pytest.raises(nv.NVMLError_NotSupported):
            call()


def test_profile_index_not_on_model(sim):
    nv = sim.start(one("NVIDIA A30"))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceGetGpuInstanceProfileInfo(dev, nv.NVML_GPU_INSTANCE_PROFILE_3_SLICE)
    with pytest.raises(nv.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetGpuInstanceProfileInfo(dev, nv.NVML_GPU_INSTANCE_PROFILE_COUNT)
    with pytest.raises(nv.NVMLError_InvalidArgument):
        nv.nvmlDeviceCreateGpuInstance(dev, 19)  # 19 is an A100/H100 id, not an A30 one


# ---------------------------------------------------------------- M5 destroy order, CIs
def test_destroy_gi_with_ci_is_in_use_then_ci_first_works(sim):
    nv = sim.start(one(A100))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    gi = nv.nvmlDeviceCreateGpuInstance(dev, 9)
    ci = nv.nvmlGpuInstanceCreateComputeInstance(gi, nv.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE)
    with pytest.raises(nv.NVMLError_InUse):
        nv.nvmlGpuInstanceDestroy(gi)
    assert len(all_gis(nv, dev)) == 1
    nv.nvmlComputeInstanceDestroy(ci)
    nv.nvmlGpuInstanceDestroy(gi)
    assert all_gis(nv, dev) == []
    with pytest.raises(nv.NVMLError_InvalidArgument):
        nv.nvmlGpuInstanceGetInfo(gi)  # stale handle


def test_destroy_gi_with_process_is_in_use(sim):
    st = one(A100, gpu_instances=[{"profile_id": 9, "start": 0}],
             processes=[{"pid": 4242, "used_memory": 1 << 30, "gpu_instance_id": 1, "compute_instance_id": 0}])
    nv = sim.start(st)
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    gi = nv.nvmlDeviceGetGpuInstanceById(dev, 1)
    assert gi_info(nv, gi)[:3] == (9, 0, 4)
    with pytest.raises(nv.NVMLError_InUse):
        nv.nvmlGpuInstanceDestroy(gi)
    other = nv.nvmlDeviceCreateGpuInstance(dev, 9)
    nv.nvmlGpuInstanceDestroy(other)  # a process on GI 1 does not pin GI 2


def test_ci_profiles_of_7g(sim):
    nv = sim.start(one(A100))
    gi = nv.nvmlDeviceCreateGpuInstance(nv.nvmlDeviceGetHandleByIndex(0), 0)
    got = {}
    for idx in range(nv.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        try:
            p = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, idx, nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
        except nv.NVMLError_NotSupported:
            continue
        got[p.id] = (p.sliceCount, p.instanceCount, p.multiprocessorCount, p.name)
    assert got == {0: (1, 7, 14, "MIG 1c.7g.40gb"), 1: (2, 3, 28, "MIG 2c.7g.40gb"), 2: (3, 2, 42, "MIG 3c.7g.40gb"),
                   3: (4, 1, 56, "MIG 4c.7g.40gb"), 4: (7, 1, 98, "MIG 7g.40gb")}


def test_ci_rules_inside_3g(sim):
    nv = sim.start(one(A100))
    gi = nv.nvmlDeviceCreateGpuInstance(nv.nvmlDeviceGetHandleByIndex(0), 9)
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlGpuInstanceCreateComputeInstance(gi, nv.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE)
    a = nv.nvmlGpuInstanceCreateComputeInstance(gi, nv.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE)
    b = nv.nvmlGpuInstanceCreateComputeInstance(gi, nv.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE)
    infos = [nv.nvmlComputeInstanceGetInfo(x) for x in (a, b)]
    assert [(i.id, i.placement.start, i.placement.size) for i in infos] == [(0, 0, 1), (1, 1, 1)]
    assert nv.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, 0) == 1
    assert nv.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, 1) == 0
    with pytest.raises(nv.NVMLError_InsufficientResources):
        nv.nvmlGpuInstanceCreateComputeInstance(gi, nv.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE)
    with pytest.raises(nv.NVMLError_InsufficientResources):
        nv.nvmlGpuInstanceCreateComputeInstanceWithPlacement(gi, 0, byref(nv.c_nvmlComputeInstancePlacement_t(1, 1)))
    arr = (nv.c_nvmlComputeInstance_t * 3)()
    count = c_uint()
    nv.nvmlGpuInstanceGetComputeInstances(gi, 0, arr, byref(count))
    assert count.value == 2
    assert nv.nvmlComputeInstanceGetInfo(arr[1]).id == 1
    assert nv.nvmlGpuInstanceGetInfo(nv.nvmlComputeInstanceGetInfo(arr[1]).gpuInstance).profileId == 9


def test_ci_placements_7g_3c(sim):
    nv = sim.start(one(H100))
    gi = nv.nvmlDeviceCreateGpuInstance(nv.nvmlDeviceGetHandleByIndex(0), 0)
    count = c_uint()
    arr = (nv.c_nvmlComputeInstancePlacement_t * 2)()
    nv.nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi, 2, arr, byref(count))
    assert [(arr[i].start, arr[i].size) for i in range(count.value)] == [(0, 3), (4, 3)]


# ---------------------------------------------------------------- M6 / P1 / P2 MIG mode
def test_ampere_mode_change_pending_until_reset(sim):
    """mig.md P1 (older drivers): mig_mode_self_reset=false keeps the change pending until a GPU reset."""
    from gpusim import control  # loaded by load_gpusim()
    nv = sim.start(one(A100, mig="disabled", mig_mode_self_reset=False))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    assert nv.nvmlDeviceSetMigMode(dev, nv.NVML_DEVICE_MIG_ENABLE) == nv.NVML_ERROR_RESET_REQUIRED
    assert nv.nvmlDeviceGetMigMode(dev) == [0, 1]
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceCreateGpuInstance(dev, 19)
    control.reset()
    assert nv.nvmlDeviceGetMigMode(dev) == [1, 1]
    nv.nvmlDeviceCreateGpuInstance(dev, 19)


def test_idle_bare_metal_ampere_resets_itself_on_mode_change(sim):
    """nvml.h nvmlDeviceSetMigMode: "This API may unbind or reset the device to activate the requested mode"."""
    nv = sim.start(one(A100, mig="disabled"))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    assert nv.nvmlDeviceSetMigMode(dev, nv.NVML_DEVICE_MIG_ENABLE) == nv.NVML_SUCCESS
    assert nv.nvmlDeviceGetMigMode(dev) == [1, 1]
    nv.nvmlDeviceCreateGpuInstance(dev, 19)


def test_pass_through_ampere_reports_reset_required(sim):
    """nvml.h: "On certain platforms like pass-through virtualization ... activationStatus would return
    NVML_ERROR_RESET_REQUIRED" (mig.md P2)."""
    nv = sim.start(one(A100, mig="disabled", reset_supported=False))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    assert nv.nvmlDeviceSetMigMode(dev, 1) == nv.NVML_ERROR_RESET_REQUIRED
    assert nv.nvmlDeviceGetMigMode(dev) == [0, 1]


@pytest.mark.parametrize("persists,after", [(True, [1, 1]), (False, [0, 0])])
def test_mig_mode_across_reset_is_a_state_option(sim, persists, after):
    """mig.md M8 (mode persists) vs P10 (old drivers lost it); evidence for Hopper differs, so both are served."""
    from gpusim import control
    nv = sim.start(one(H100, mig="enabled", mig_mode_persists=persists))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    nv.nvmlDeviceCreateGpuInstance(dev, 19)
    control.reset()
    assert nv.nvmlDeviceGetMigMode(dev) == after
    assert sim.state()["gpus"][0]["gpu_instances"] == []
    control.reboot()
    assert nv.nvmlDeviceGetMigMode(dev) == after


@pytest.mark.parametrize("driver,supported", [("535.261.03", False), ("550.163.01", True)])
def test_profile_queries_while_mig_disabled_follow_the_driver_branch(sim, driver, supported):
    """NVIDIA/mig-parted 219e780d (pkg/mig/discovery/discovery.go): R535 and older answer NOT_SUPPORTED to profile
    queries while MIG mode is disabled; with MIG enabled they answer."""
    from gpusim import control
    nv = sim.start(dict(one(A100, mig="disabled", mig_mode_self_reset=False), driver_version=driver))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    if supported:
        assert nv.nvmlDeviceGetGpuInstanceProfileInfo(dev, 0).id == 19
        assert placements(nv, dev, 19) == [(s, 1) for s in range(7)]
    else:
        with pytest.raises(nv.NVMLError_NotSupported):
            nv.nvmlDeviceGetGpuInstanceProfileInfo(dev, 0)
        with pytest.raises(nv.NVMLError_NotSupported):  # the v1 symbol (go-nvml's) as well as the ...V one
            nv.nvmlDeviceGetGpuInstanceProfileInfo(dev, 0, version=1)
        with pytest.raises(nv.NVMLError_NotSupported):
            placements(nv, dev, 19)
    nv.nvmlDeviceSetMigMode(dev, 1)
    control.reset()
    assert nv.nvmlDeviceGetGpuInstanceProfileInfo(dev, 0).id == 19


def test_profile_queries_option_overrides_the_branch(sim):
    nv = sim.start(dict(one(A100, mig="disabled"), driver_version="550.163.01", profile_queries_need_mig=True))
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceGetGpuInstanceProfileInfo(nv.nvmlDeviceGetHandleByIndex(0), 0)


def test_process_list_fault(sim):
    nv = sim.start(dict(one(H100), faults={"fail_processes_after": 0, "fail_processes_error": "NO_PERMISSION"}))
    with pytest.raises(nv.NVMLError_NoPermission):
        nv.nvmlDeviceGetComputeRunningProcesses(nv.nvmlDeviceGetHandleByIndex(0))


def test_cancel_pending_mode(sim):
    nv = sim.start(one("NVIDIA A30", mig="disabled"))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    nv.nvmlDeviceSetMigMode(dev, 1)
    assert nv.nvmlDeviceSetMigMode(dev, 0) == nv.NVML_SUCCESS
    assert nv.nvmlDeviceGetMigMode(dev) == [0, 0]


@pytest.mark.parametrize("model", [H100, "NVIDIA H100 NVL", "NVIDIA H200"])
def test_hopper_mode_change_applies_at_once(sim, model):
    nv = sim.start(one(model, mig="disabled"))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    assert nv.nvmlDeviceSetMigMode(dev, 1) == nv.NVML_SUCCESS
    assert nv.nvmlDeviceGetMigMode(dev) == [1, 1]
    nv.nvmlDeviceCreateGpuInstance(dev, 0)


@pytest.mark.parametrize("model", [H100, A100])
def test_processes_leave_the_mode_change_pending_in_use(sim, model):
    """nvml.h: "if device unbind fails because the device isn't idle, NVML_ERROR_IN_USE would be returned" in the
    activation status; the call itself succeeds and the mode is pending."""
    from gpusim import control
    nv = sim.start(one(model, mig="disabled", processes=[{"pid": 4242, "used_memory": 1 << 30}]))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    assert nv.nvmlDeviceSetMigMode(dev, 1) == nv.NVML_ERROR_IN_USE
    assert nv.nvmlDeviceGetMigMode(dev) == [0, 1]
    st = sim.state()
    st["gpus"][0]["processes"] = []
    sim.path.write_text(json.dumps(st))
    control.reset()
    assert nv.nvmlDeviceGetMigMode(dev) == [1, 1]


def test_gpu_instances_block_disabling(sim):
    nv = sim.start(one(H100))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    gi = nv.nvmlDeviceCreateGpuInstance(dev, 19)
    with pytest.raises(nv.NVMLError_InUse):
        nv.nvmlDeviceSetMigMode(dev, 0)
    nv.nvmlGpuInstanceDestroy(gi)
    nv.nvmlDeviceSetMigMode(dev, 0)
    assert nv.nvmlDeviceGetMigMode(dev) == [0, 0]


def test_passthrough_vm_reset_not_supported_reboot_commits(sim):
    from gpusim import control, machine
    nv = sim.start(one(A100, mig="disabled", reset_supported=False))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    assert nv.nvmlDeviceSetMigMode(dev, 1) == nv.NVML_ERROR_RESET_REQUIRED
    with pytest.raises(machine.Fault) as exc:
        control.reset(indexes=[0])
    assert exc.value.code == nv.NVML_ERROR_NOT_SUPPORTED
    assert nv.nvmlDeviceGetMigMode(dev) == [0, 1]
    control.reboot()
    assert nv.nvmlDeviceGetMigMode(dev) == [1, 1]


def test_reset_and_reboot_drop_instances_but_keep_mode(sim):
    from gpusim import control
    nv = sim.start(one(A100))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    gi = nv.nvmlDeviceCreateGpuInstance(dev, 9)
    nv.nvmlGpuInstanceCreateComputeInstance(gi, 2)
    control.reset()
    assert all_gis(nv, dev) == [] and nv.nvmlDeviceGetMigMode(dev) == [1, 1]
    nv.nvmlDeviceCreateGpuInstance(dev, 9)
    control.reboot()
    assert all_gis(nv, dev) == [] and nv.nvmlDeviceGetMigMode(dev) == [1, 1]


def test_reset_refused_while_processes_run(sim):
    from gpusim import control, machine
    nv = sim.start(one(A100, mig="disabled", mig_mode_self_reset=False))
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    nv.nvmlDeviceSetMigMode(dev, 1)
    st = sim.state()
    st["gpus"][0]["processes"] = [{"pid": 7, "used_memory": 0}]
    sim.path.write_text(json.dumps(st))
    with pytest.raises(machine.Fault) as exc:
        control.reset()
    assert exc.value.code == nv.NVML_ERROR_IN_USE
    assert nv.nvmlDeviceGetMigMode(dev) == [0, 1]


# ---------------------------------------------------------------- host GPU clients and the reset (issue 38 point 10)
@pytest.mark.parametrize("clients,status,mode", [
    ([], "NVML_SUCCESS", [1, 1]),                                   # idle: the driver resets the GPU itself
    (["nvidia-persistenced"], "NVML_ERROR_IN_USE", [0, 1]),         # gpu-operator#118
    (["nv-hostengine"], "NVML_ERROR_IN_USE", [0, 1]),               # DCGM (mig-parted hooks.sh stops nvidia-dcgm)
    (["nvidia_drm"], "NVML_ERROR_IN_USE", [0, 1]),                  # mig-parted#181
])
def test_host_clients_leave_an_ampere_mode_change_pending(sim, clients, status, mode):
    state = one(A100, mig="disabled")
    state["host_clients"] = clients
    nv = sim.start(state)
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    assert nv.nvmlDeviceSetMigMode(dev, nv.NVML_DEVICE_MIG_ENABLE) == getattr(nv, status)
    assert nv.nvmlDeviceGetMigMode(dev) == mode


@pytest.mark.parametrize("clients,socket,refused", [
    (["nvidia-persistenced"], True, False),    # nvidia-smi reaches persistenced's socket (mig-parted fafbbc5e)
    (["nvidia-persistenced"], False, True),    # gpu-operator#118: refused until persistenced was killed
    (["nv-hostengine"], True, True),
    (["nvidia_drm"], True, True),              # mig-parted#181: "In use by another client"
])
def test_reset_with_host_clients(sim, clients, socket, refused):
    from gpusim import control, machine
    state = one(A100, mig="disabled")
    state.update(host_clients=clients, persistenced_socket=socket)
    nv = sim.start(state)
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    nv.nvmlDeviceSetMigMode(dev, 1)
    if refused:
        with pytest.raises(machine.Fault) as exc:
            control.reset()
        assert exc.value.code == nv.NVML_ERROR_IN_USE and clients[0] in exc.value.why
        assert nv.nvmlDeviceGetMigMode(dev) == [0, 1]
    else:
        control.reset()
        assert nv.nvmlDeviceGetMigMode(dev) == [1, 1]
    # Each request is logged once, with its GPUs' bus ids, refused or not.
    assert sim.state()["reset_log"] == [["00000000:17:00.0"]]


def test_unknown_host_client_is_a_state_error(sim):
    from gpusim import state
    with pytest.raises(state.StateError, match="host_clients: unknown Xorg"):
        state.normalize(dict(one(A100), host_clients=["Xorg"]))


def test_proc_tree_shows_the_host_clients_as_proc_does(sim, tmp_path):
    from gpusim import control
    sim.start(dict(one(A100), host_clients=["nvidia-persistenced", "nv-hostengine", "nvidia_drm"]))
    control.proc_tree(str(tmp_path / "proc"))
    comms = sorted(p.read_text() for p in (tmp_path / "proc").glob("*/comm"))
    assert comms == ["nv-hostengine\n", "nvidia-persiste\n"]  # TASK_COMM_LEN: 15 characters
    assert (tmp_path / "proc" / "modules").read_text().startswith("nvidia_drm ")
