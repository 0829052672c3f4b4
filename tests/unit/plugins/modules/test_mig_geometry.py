# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig_geometry module against gpusim (lab/gpusim): nvidia-ml-py in-process over gpusim's libnvidia-ml.so.1."""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._mig import host_lock
from ansible_collections.gpuops.provision.plugins.modules import mig_geometry

from gpusim_nvml import use_gpusim  # pylint: disable=import-error

A100 = "NVIDIA A100-SXM4-40GB"
H100 = "NVIDIA H100 80GB HBM3"
TARGET = {"3g.20gb": 1, "2g.10gb": 2}


@pytest.fixture(autouse=True)
def lock_path(monkeypatch, tmp_path):
    """Each test its own per-host MIG lock (the module's E(GPUOPS_MIG_LOCK) fallback), never this machine's /run."""
    path = tmp_path / "locks" / "mig.lock"
    monkeypatch.setenv("GPUOPS_MIG_LOCK", str(path))
    return path


def entry(devices="all", enabled=True, mig_devices=None, **extra):
    e = {"devices": devices, "mig-enabled": enabled}
    if enabled:
        e["mig-devices"] = TARGET if mig_devices is None else mig_devices
    e.update(extra)
    return e


# gpusim's default PCI buses by index (lab/gpusim/README.md).
BUSES = ("0000:17:00.0", "0000:31:00.0")


def label(res, index=0):
    """How an NVML error names a GPU: index, model, UUID and PCI address."""
    gpu = res["gpus"][index]
    return "GPU %d (%s, %s, %s)" % (index, gpu["model"], gpu["uuid"], BUSES[index])


def geometry(path, index=0):
    g = json.loads(path.read_text())["gpus"][index]
    return sorted((gi["profile_id"], gi.get("start"), len(gi.get("compute_instances", []))) for gi in g.get("gpu_instances", []))


def test_apply_then_idempotent(monkeypatch, tmp_path, run_module):
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled"}]})
    first = run_module(mig_geometry, {"devices": [entry()]})
    assert first["changed"] is True, first
    gpu = first["gpus"][0]
    assert gpu["after"]["mig_devices"] == TARGET
    assert gpu["before"]["mig_devices"] == {}
    assert geometry(path) == [(9, 4, 1), (14, 0, 1), (14, 2, 1)]
    assert first["nvml_calls"] > 0
    second = run_module(mig_geometry, {"devices": [entry()]})
    assert second["changed"] is False
    assert second["gpus"][0]["actions"] == []


def test_check_mode_changes_nothing_and_reports_plan(monkeypatch, tmp_path, run_module):
    seven = {"model": A100, "mig_mode": "enabled", "gpu_instances": [{"profile_id": 0, "compute_instances": [{}]}]}
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [seven]})
    before = path.read_bytes()
    res = run_module(mig_geometry, {"devices": [entry()], "_ansible_diff": True}, check_mode=True)
    assert res["changed"] is True
    assert path.read_bytes() == before
    kinds = [a["action"] for a in res["gpus"][0]["actions"]]
    assert kinds[:2] == ["destroy_ci", "destroy_gi"] and kinds.count("create_gi") == 3
    # The 7g instance goes: that disruption leads the diff, then the geometry before and after.
    assert res["disruptions"] == ["destroy the GPU instances 7g.40gb x1 of GPU 0 (NVIDIA A100-SXM4-40GB) with their "
                                  "compute instances"]
    assert res["diff"][0] == {"prepared": "Disruptive actions, in order:\n1. %s\n" % res["disruptions"][0]}
    assert res["diff"][1]["before"]["gpu0"]["mig_devices"] == {"7g.40gb": 1}
    assert res["diff"][1]["after"]["gpu0"]["mig_devices"] == TARGET


def test_impossible_layout_fails_naming_gpu_and_reason(monkeypatch, tmp_path, run_module):
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": H100, "mig_mode": "enabled"}, {"model": A100, "mig_mode": "enabled"}]})
    before = path.read_bytes()
    res = run_module(mig_geometry, {"devices": [entry([0], mig_devices={"7g.80gb": 1}),
                                                entry([1], mig_devices={"3g.20gb": 2, "1g.5gb": 1})]})
    assert res["failed"] and res["changed"] is False
    assert "GPU 1 (NVIDIA A100-SXM4-40GB)" in res["msg"]
    assert "1g.5gb: 1, 3g.20gb: 2" in res["msg"] and "9 memory slices but the GPU has 8" in res["msg"]
    # GPU 0 was valid but is not touched either: validation precedes every change.
    assert path.read_bytes() == before


def test_invalid_document_fails_before_nvml(monkeypatch, tmp_path, run_module):
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled"}]})
    res = run_module(mig_geometry, {"config": {"version": "v1", "mig-configs": {"a": [entry(bogus=1)]}}, "selected": "a"})
    assert res["failed"] and "unknown key(s) bogus" in res["msg"]
    res = run_module(mig_geometry, {"config": {"version": "v1", "mig-configs": {"a": [entry()]}}, "selected": "b"})
    assert "'b' is not in mig-configs" in res["msg"]
    assert geometry(path) == []


def test_processes_block_without_force_and_name_pids(monkeypatch, tmp_path, run_module):
    state = {"gpus": [{"model": A100, "mig_mode": "enabled",
                       "gpu_instances": [{"profile_id": 0, "id": 0, "start": 0, "compute_instances": [{}]}],
                       "processes": [{"pid": 4242, "gpu_instance_id": 0, "compute_instance_id": 0}, {"pid": 77, "gpu_instance_id": 0}]}]}
    path = use_gpusim(monkeypatch, tmp_path, state)
    before = path.read_bytes()
    res = run_module(mig_geometry, {"devices": [entry()]})
    assert res["failed"] and res["changed"] is False
    assert "GPU 0 (NVIDIA A100-SXM4-40GB)" in res["msg"] and "PID 77, 4242" in res["msg"]
    assert path.read_bytes() == before
    # With force the module tries; NVML refuses (IN_USE) and the geometry is left as it was.
    res = run_module(mig_geometry, {"devices": [entry()], "force": True})
    assert res["failed"] and "IN_USE" in res["msg"] and "previous geometry was restored" in res["msg"]
    assert geometry(path) == [(0, 0, 1)]


def test_processes_on_kept_instances_do_not_block(monkeypatch, tmp_path, run_module):
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled",
                                                        "gpu_instances": [{"profile_id": 9, "start": 4, "id": 2, "compute_instances": [{}]}],
                                                        "processes": [{"pid": 4242, "gpu_instance_id": 2, "compute_instance_id": 0}]}]})
    res = run_module(mig_geometry, {"devices": [entry()]})
    assert res["changed"] is True, res
    assert geometry(path) == [(9, 4, 1), (14, 0, 1), (14, 2, 1)]


def test_mid_apply_failure_restores_previous_geometry(monkeypatch, tmp_path, run_module):
    previous = [{"profile_id": 19, "start": s, "compute_instances": [{}]} for s in range(7)]
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled", "gpu_instances": previous}],
                                              "faults": {"fail_gi_create_after": 1, "fail_gi_create_times": 1,
                                                         "fail_gi_create_error": "INSUFFICIENT_RESOURCES"}})
    before = geometry(path)
    res = run_module(mig_geometry, {"devices": [entry()]})
    assert res["failed"]
    assert res["msg"] == ("%s: creating GPU instance 2g.10gb at placement 0:2: NVML error Insufficient resources "
                          "(NVML_ERROR_INSUFFICIENT_RESOURCES) from nvmlDeviceCreateGpuInstanceWithPlacement; the previous "
                          "geometry was restored" % label(res))
    assert geometry(path) == before
    assert res["gpus"][0]["changed"] is False
    assert res["gpus"][0]["after"]["mig_devices"] == {"1g.5gb": 7}


def test_failure_on_a_later_gpu_restores_the_gpus_already_changed(monkeypatch, tmp_path, run_module):
    previous = [{"profile_id": 19, "start": s, "compute_instances": [{}]} for s in range(7)]
    # GPU 0 needs 3 creations for TARGET; the 5th creation of the run (GPU 1's second) fails once.
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled", "gpu_instances": previous},
                                                       {"model": A100, "mig_mode": "enabled", "gpu_instances": previous}],
                                              "faults": {"fail_gi_create_after": 4, "fail_gi_create_times": 1}})
    before = [geometry(path, 0), geometry(path, 1)]
    res = run_module(mig_geometry, {"devices": [entry()]})
    assert res["failed"]
    assert res["msg"].startswith(label(res, 1) + ": creating GPU instance 2g.10gb at placement 0:2: NVML error "), res["msg"]
    assert res["msg"].endswith("; the previous geometry was restored (GPU 0 restored)")
    assert [geometry(path, 0), geometry(path, 1)] == before
    assert [g["changed"] for g in res["gpus"]] == [False, False]
    assert res["gpus"][0]["after"]["mig_devices"] == {"1g.5gb": 7}
    assert res["changed"] is False


def test_ampere_mode_change_needs_reset_then_completes(monkeypatch, tmp_path, run_module):
    # A pass-through VM: the driver cannot reset the GPU, NVML reports RESET_REQUIRED (mig.md P2).
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "disabled", "reset_supported": False}]})
    plan = run_module(mig_geometry, {"devices": [entry()]}, check_mode=True)
    assert plan["gpus"][0]["reset_required"] is True
    res = run_module(mig_geometry, {"devices": [entry()]})
    assert res["changed"] is True and res["reset_required"] is True
    assert res["gpus"][0]["after"]["mig_mode"] == {"current": "disabled", "pending": "enabled"}
    assert [a["action"] for a in res["gpus"][0]["actions"]] == ["set_mig_mode"]
    assert res["gpus"][0]["pending_reason"] == "reset_required"
    assert "takes effect after a GPU reset" in json.dumps(res.get("warnings"))
    again = run_module(mig_geometry, {"devices": [entry()]})
    assert again["changed"] is False and again["reset_required"] is True
    # What a GPU reset does on the simulator: the pending mode becomes current.
    state = json.loads(path.read_text())
    state["gpus"][0]["mig_mode"] = state["gpus"][0]["mig_mode_pending"]
    path.write_text(json.dumps(state))
    done = run_module(mig_geometry, {"devices": [entry()]})
    assert done["changed"] is True and done["reset_required"] is False
    assert done["gpus"][0]["after"]["mig_devices"] == TARGET


def test_hopper_enables_and_creates_in_one_run_and_disables(monkeypatch, tmp_path, run_module):
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": H100, "mig_mode": "disabled"}]})
    res = run_module(mig_geometry, {"devices": [entry(mig_devices={"1g.10gb": 7})]})
    assert res["changed"] and res["reset_required"] is False
    assert res["gpus"][0]["after"]["mig_devices"] == {"1g.10gb": 7}
    off = run_module(mig_geometry, {"devices": [entry(enabled=False)]})
    assert off["changed"]
    assert off["gpus"][0]["after"]["mig_mode"] == {"current": "disabled", "pending": "disabled"}
    assert geometry(path) == []


def test_device_filter_and_non_mig_gpus(monkeypatch, tmp_path, run_module):
    gpus = [{"model": "NVIDIA L40S"}, {"model": A100, "mig_mode": "enabled"}, {"model": H100, "mig_mode": "enabled"}]
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": gpus})
    res = run_module(mig_geometry, {"devices": [entry(**{"device-filter": "0x20B010DE"}), entry([0], enabled=False)]})
    assert res["changed"]
    l40s, a100, h100 = res["gpus"]
    assert l40s["selected"] and l40s["skipped"] == "GPU does not support MIG"
    assert a100["changed"] and not h100["selected"] and not h100["changed"]
    # Unselected GPUs are reported as they are: the device plugin still advertises them.
    assert h100["before"]["mig_mode"]["current"] == "enabled" and h100["after"] == h100["before"]
    assert l40s["mig_capable"] is False and a100["mig_capable"] is True
    assert geometry(path, 2) == []
    res = run_module(mig_geometry, {"devices": [entry([0])]})
    assert res["failed"] and "GPU 0 (NVIDIA L40S) does not support MIG" in res["msg"]
    res = run_module(mig_geometry, {"devices": [entry([5])]})
    assert res["failed"] and "GPU index 5 but this host has 3 GPU(s)" in res["msg"]


def test_nvml_missing_fails_clearly(monkeypatch, run_module):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    res = run_module(mig_geometry, {"devices": [entry()]})
    assert res["failed"] and res["msg"].startswith("NVML is not available: Python module pynvml")


def test_failure_while_destroying_restores_the_removed_instances(monkeypatch, tmp_path, run_module):
    previous = [{"profile_id": 14, "start": s, "compute_instances": [{"slices": 1}, {"slices": 1, "start": 1}]} for s in (0, 2)]
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled", "gpu_instances": previous}],
                                              "faults": {"fail_gi_destroy_after": 1, "fail_gi_destroy_times": 1}})
    before = geometry(path)
    res = run_module(mig_geometry, {"devices": [entry(mig_devices={"7g.40gb": 1})]})
    assert res["failed"] and "destroying GPU instance" in res["msg"] and "previous geometry was restored" in res["msg"]
    # The first 2g GI was gone and is back with both CIs; the second lost its CIs only and got them back.
    assert geometry(path) == before
    assert res["gpus"][0]["after"]["mig_devices"] == {"1c.2g.10gb": 4}


def test_failure_while_creating_compute_instances_is_rolled_back(monkeypatch, tmp_path, run_module):
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled"}],
                                              "faults": {"fail_ci_create_after": 2, "fail_ci_create_times": 1}})
    res = run_module(mig_geometry, {"devices": [entry()]})
    assert res["failed"] and res["msg"].startswith(
        "%s: creating compute instance(s) 2g.10gb in GPU instance 2g.10gb at placement 2:2: NVML error Unknown Error "
        "(NVML_ERROR_UNKNOWN) from nvmlGpuInstanceCreateComputeInstance" % label(res)), res["msg"]
    assert "previous geometry was restored" in res["msg"]
    assert geometry(path) == []


# --- real drivers (issue: MIG on real drivers) ------------------------------------------------------------------------

R535 = "535.261.03"


def _state(model, driver=R535, **gpu):
    return {"driver_version": driver, "gpus": [dict({"model": model, "mig_mode": "disabled"}, **gpu)]}


@pytest.mark.parametrize("model,target", [(H100, {"1g.10gb": 2, "3g.40gb": 1}), (A100, TARGET)])
@pytest.mark.parametrize("driver,source", [(R535, "documented"), ("550.163.01", "nvml")])
def test_mig_off_plans_applies_and_is_idempotent_on_old_and_new_drivers(
        monkeypatch, tmp_path, run_module, model, target, driver, source):
    # R535 answers NOT_SUPPORTED to profile queries while MIG is off (mig-parted 219e780d): the plan uses the
    # documented table; R550 answers, and the live table is used.
    path = use_gpusim(monkeypatch, tmp_path, _state(model, driver))
    before = path.read_bytes()
    plan = run_module(mig_geometry, {"devices": [entry(mig_devices=target)]}, check_mode=True)
    assert plan["changed"] and not plan.get("failed"), plan
    assert plan["gpus"][0]["profile_table"] == source
    assert plan["gpus"][0]["after"]["mig_devices"] == target
    assert path.read_bytes() == before
    res = run_module(mig_geometry, {"devices": [entry(mig_devices=target)]})
    assert res["changed"] and res["reset_required"] is False, res
    assert res["gpus"][0]["after"]["mig_devices"] == target
    assert json.loads(path.read_text())["gpus"][0]["mig_mode"] == 1
    again = run_module(mig_geometry, {"devices": [entry(mig_devices=target)]})
    assert again["changed"] is False and again["gpus"][0]["profile_table"] == "nvml"


def test_a_new_nvml_session_after_the_mode_change(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, _state(H100))
    nv = sys.modules["pynvml"]
    inits = []
    real_init = nv.nvmlInit
    monkeypatch.setattr(nv, "nvmlInit", lambda: inits.append(1) or real_init())
    res = run_module(mig_geometry, {"devices": [entry(mig_devices={"7g.80gb": 1})]})
    assert res["changed"] and len(inits) == 2  # the module's session and the one after SetMigMode


def test_live_table_disagreeing_with_the_documented_one_rolls_the_mode_back(monkeypatch, tmp_path, run_module):
    # The driver lacks profile 15 (1g.20gb) once MIG is on; the documented table has it.
    path = use_gpusim(monkeypatch, tmp_path, _state(H100, hide_profiles=[15]))
    plan = run_module(mig_geometry, {"devices": [entry(mig_devices={"1g.20gb": 2})]}, check_mode=True)
    assert plan["changed"] and plan["gpus"][0]["profile_table"] == "documented"
    res = run_module(mig_geometry, {"devices": [entry(mig_devices={"1g.20gb": 2})]})
    assert res["failed"]
    assert "differs from the documented one" in res["msg"] and "1g.20gb is documented but the driver does not offer it" in res["msg"]
    assert "the previous geometry was restored" in res["msg"]
    gpu = json.loads(path.read_text())["gpus"][0]
    assert (gpu["mig_mode"], gpu["mig_mode_pending"], gpu["gpu_instances"]) == (0, 0, [])


def test_no_documented_table_and_no_live_profiles_fails_clearly(monkeypatch, tmp_path, run_module):
    # A30 on R535 with MIG off: documented; an unknown SKU is emulated by an unlisted PCI id below.
    from ansible_collections.gpuops.provision.plugins.module_utils._mig import models
    monkeypatch.delitem(models.MODELS, 0x233010DE)
    path = use_gpusim(monkeypatch, tmp_path, _state(H100))
    before = path.read_bytes()
    res = run_module(mig_geometry, {"devices": [entry(mig_devices={"1g.10gb": 1})]})
    assert res["failed"] and res["changed"] is False
    assert "driver 535.261.03" in res["msg"] and "no documented table for PCI device 0x233010DE" in res["msg"]
    assert path.read_bytes() == before


def test_driver_older_than_the_documented_minimum_fails_naming_both(monkeypatch, tmp_path, run_module):
    path = use_gpusim(monkeypatch, tmp_path, _state("NVIDIA H200", driver="535.261.03", mig_mode="enabled"))
    before = path.read_bytes()
    res = run_module(mig_geometry, {"devices": [entry(mig_devices={"1g.18gb": 1})]})
    assert res["failed"] and res["changed"] is False
    assert "GPU 0 (NVIDIA H200): driver 535.261.03 is older than 550.90.07, the minimum NVIDIA documents for MIG on H200 (R550)" in res["msg"]
    assert path.read_bytes() == before


def test_profile_the_driver_does_not_offer_names_driver_and_requirement(monkeypatch, tmp_path, run_module):
    # A30 1g.6gb+me needs R470 (MIG user guide); an R460 driver does not list profile 21.
    use_gpusim(monkeypatch, tmp_path, _state("NVIDIA A30", driver="460.106.00", mig_mode="enabled", hide_profiles=[21]))
    res = run_module(mig_geometry, {"devices": [entry(mig_devices={"1g.6gb+me": 1})]})
    assert res["failed"]
    assert "profile(s) 1g.6gb+me not offered" in res["msg"] and "the loaded driver is 460.106.00" in res["msg"]
    assert "1g.6gb+me needs R470 or newer" in res["msg"]


def test_vgpu_guest_is_refused_before_any_change(monkeypatch, tmp_path, run_module):
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled", "virtualization_mode": "vgpu"}]})
    before = path.read_bytes()
    res = run_module(mig_geometry, {"devices": [entry()]})
    assert res["failed"] and "GPU 0 (NVIDIA A100-SXM4-40GB) is a vGPU guest" in res["msg"]
    assert path.read_bytes() == before


def test_unreadable_process_list_is_an_error_not_no_processes(monkeypatch, tmp_path, run_module):
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled"}],
                                              "faults": {"fail_processes_after": 0, "fail_processes_error": "NO_PERMISSION"}})
    before = json.loads(path.read_text())["gpus"]
    res = run_module(mig_geometry, {"devices": [entry()]})
    assert res["failed"] and "cannot list the processes" in res["msg"] and "NVML_ERROR_NO_PERMISSION" in res["msg"]
    assert json.loads(path.read_text())["gpus"] == before


def test_busy_gpu_mode_change_stays_pending_and_says_why(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "disabled", "processes": [{"pid": 77}]}]})
    res = run_module(mig_geometry, {"devices": [entry()], "force": True})
    assert res["changed"] and res["reset_required"] and res["gpus"][0]["pending_reason"] == "in_use"
    assert "the GPU was not idle" in json.dumps(res.get("warnings"))
    assert res["gpus"][0]["after"]["mig_mode"] == {"current": "disabled", "pending": "enabled"}


def test_idle_bare_metal_ampere_enables_and_creates_in_one_run(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "disabled"}]})
    res = run_module(mig_geometry, {"devices": [entry()]})
    assert res["changed"] and res["reset_required"] is False
    assert res["gpus"][0]["after"]["mig_devices"] == TARGET


@pytest.mark.parametrize("name,count,limit", [("1g.5gb", 10 ** 15, 7), ("3g.20gb", 10 ** 7, 2), ("1c.3g.20gb", 7, 6)])
def test_huge_counts_are_refused_at_once(monkeypatch, tmp_path, run_module, name, count, limit):
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled"}]})
    before = path.read_bytes()
    started = time.monotonic()
    res = run_module(mig_geometry, {"devices": [entry(mig_devices={name: count})]})
    assert time.monotonic() - started < 5
    assert res["failed"] and "%d x %s requested but this GPU allows at most %d" % (count, name, limit) in res["msg"]
    assert "GPU 0 (NVIDIA A100-SXM4-40GB)" in res["msg"] and path.read_bytes() == before


# --- NVML errors name the GPU and the step (issue 15 point 4) -----------------------------------------------------------

def _nvml_error(code):
    nv = sys.modules["pynvml"]

    def fail(*_args):
        raise nv.NVMLError(getattr(nv, code))
    return fail


@pytest.mark.parametrize("function,where,step", [
    ("nvmlSystemGetDriverVersion", "NVML", "reading the driver version"),
    ("nvmlDeviceGetUUID", "GPU 0", "reading its identity (PCI info, memory, UUID, name, MIG mode)"),
    ("nvmlDeviceGetGpuInstancePossiblePlacements", "label", "reading its GPU instance profiles"),
    ("nvmlDeviceGetGpuInstances", "label", "reading its GPU and compute instances"),
])
def test_a_failed_nvml_read_names_the_gpu_the_step_and_the_function(monkeypatch, tmp_path, run_module, function, where, step):
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled"}]})
    before = path.read_bytes()
    known = run_module(mig_geometry, {"devices": [entry()]}, check_mode=True)
    monkeypatch.setattr(sys.modules["pynvml"], function, _nvml_error("NVML_ERROR_INVALID_ARGUMENT"))
    res = run_module(mig_geometry, {"devices": [entry()]})
    assert res["failed"] and res["changed"] is False
    # Before: "NVML error: Invalid Argument (NVML_ERROR_INVALID_ARGUMENT)", with no GPU and no step.
    assert res["msg"] == ("nothing was changed: %s: %s: NVML error Invalid Argument (NVML_ERROR_INVALID_ARGUMENT) from %s"
                          % (label(known) if where == "label" else where, step, function))
    assert path.read_bytes() == before


def test_in_use_on_destroy_names_both_causes_nvml_gives(monkeypatch, tmp_path, run_module):
    # nvml.h: nvmlGpuInstanceDestroy returns IN_USE when processes or compute instances are active on the GPU
    # instance; the old hint blamed processes only.
    seven = {"model": A100, "mig_mode": "enabled",
             "gpu_instances": [{"profile_id": 0, "id": 0, "start": 0, "compute_instances": [{}]}]}
    faults = {"fail_gi_destroy_after": 0, "fail_gi_destroy_times": 1, "fail_gi_destroy_error": "IN_USE"}
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [seven], "faults": faults})
    before = geometry(path)
    res = run_module(mig_geometry, {"devices": [entry()]})
    assert res["failed"]
    assert res["msg"] == ("%s: destroying GPU instance 0 (7g.40gb): NVML error In use by another client (NVML_ERROR_IN_USE) "
                          "from nvmlGpuInstanceDestroy (compute instances or processes are active on the GPU instance); "
                          "the previous geometry was restored" % label(res))
    assert geometry(path) == before


def test_a_raw_nvml_error_in_the_middle_of_an_apply_is_rolled_back_and_named(monkeypatch, tmp_path, run_module):
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": H100, "mig_mode": "disabled"}]})
    nv = sys.modules["pynvml"]
    real_set, real_get = nv.nvmlDeviceSetMigMode, nv.nvmlDeviceGetMigMode
    after_set = []

    def set_mode(*args):
        after_set.append(True)
        return real_set(*args)

    def get_mode(*args):
        if after_set and len(after_set) == 1 and after_set.pop() is True:
            after_set.append(False)  # only the first read after the first set fails
            raise nv.NVMLError(nv.NVML_ERROR_UNKNOWN)
        return real_get(*args)
    monkeypatch.setattr(nv, "nvmlDeviceSetMigMode", set_mode)
    monkeypatch.setattr(nv, "nvmlDeviceGetMigMode", get_mode)
    res = run_module(mig_geometry, {"devices": [entry(mig_devices={"7g.80gb": 1})]})
    assert res["failed"]
    # Before: the error escaped the apply unrolled, as "NVML error: Unknown Error", and MIG stayed enabled.
    assert res["msg"] == ("GPU 0 (%s, %s, %s): reading the MIG mode back after setting it enabled: NVML error Unknown Error "
                          "(NVML_ERROR_UNKNOWN) from nvmlDeviceGetMigMode; the previous geometry was restored"
                          % (H100, res["gpus"][0]["uuid"], BUSES[0]))
    gpu = json.loads(path.read_text())["gpus"][0]
    assert (gpu["mig_mode"], gpu["mig_mode_pending"], gpu.get("gpu_instances", [])) == (0, 0, [])


def test_an_unreadable_process_list_names_the_gpu_and_the_step(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled"}],
                                       "faults": {"fail_processes_after": 0, "fail_processes_error": "NO_PERMISSION"}})
    res = run_module(mig_geometry, {"devices": [entry()]})
    assert res["msg"].startswith("nothing was changed: GPU 0 (%s, GPU-" % A100), res["msg"]
    assert res["msg"].endswith(", 0000:17:00.0): listing its processes: cannot list the processes on the GPU: NVML error "
                               "Insufficient Permissions (NVML_ERROR_NO_PERMISSION) from nvmlDeviceGetComputeRunningProcesses")


# --- the per-host lock (issue 15 point 4) ---------------------------------------------------------------------------------

ROLE = "gpuops.provision.mig_reconfigure run 0badc0de (user=alice controller=awx-1 node=gpu-node-1)"


def test_every_run_holds_the_lock_from_plan_to_rollback_check_mode_included(monkeypatch, tmp_path, run_module, lock_path):
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled"}],
                                              "faults": {"fail_gi_create_after": 2, "fail_gi_create_times": 1}})
    nv = sys.modules["pynvml"]
    seen = {}

    def watch(name):
        real = getattr(nv, name)

        def call(*args):
            seen.setdefault(name, []).append(host_lock.status(str(lock_path)))
            return real(*args)
        monkeypatch.setattr(nv, name, call)
    # The first read of the plan, a creation of the apply, and a destroy of the rollback.
    for name in ("nvmlDeviceGetCount", "nvmlDeviceCreateGpuInstanceWithPlacement", "nvmlGpuInstanceDestroy"):
        watch(name)
    plan = run_module(mig_geometry, {"devices": [entry()]}, check_mode=True)
    assert plan["changed"] and plan["lock"] == {"path": str(lock_path), "holder": "gpuops.provision.mig_geometry",
                                                "lease": None, "waited": 0.0, "shared": True}
    res = run_module(mig_geometry, {"devices": [entry()]})
    assert res["failed"] and "the previous geometry was restored" in res["msg"] and geometry(path) == []
    assert sorted(seen) == ["nvmlDeviceCreateGpuInstanceWithPlacement", "nvmlDeviceGetCount", "nvmlGpuInstanceDestroy"]
    held = [h for calls in seen.values() for h in calls]
    assert len(held) >= 6 and all(h and h["holder"] == "gpuops.provision.mig_geometry" and h["pid"] == os.getpid() for h in held)
    assert host_lock.status(str(lock_path)) is None and not lock_path.exists()


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_held_lock_refuses_at_once_naming_the_holder_before_any_nvml_call(
        monkeypatch, tmp_path, run_module, lock_path, check_mode):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled"}]})
    inits = []
    monkeypatch.setattr(sys.modules["pynvml"], "nvmlInit", lambda: inits.append(1))
    with host_lock.HostLock(str(lock_path), "another apply"):
        res = run_module(mig_geometry, {"devices": [entry()]}, check_mode=check_mode)
    assert res["failed"] and res["changed"] is False and inits == []
    assert res["msg"].startswith("another MIG run holds the per-host lock %s: another apply (pid %d on " % (lock_path, os.getpid()))
    assert res["msg"].endswith(" ago); nothing was changed")
    assert res["lock"]["held_by"]["holder"] == "another apply" and res["lock"]["held_by"]["kind"] == "run"
    assert res["lock"]["waited"] == 0.0


def test_lock_timeout_waits_for_the_holder(monkeypatch, tmp_path, run_module, lock_path):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled"}]})
    other = host_lock.HostLock(str(lock_path), "another apply").acquire()
    threading.Timer(0.5, other.release).start()
    res = run_module(mig_geometry, {"devices": [entry()], "lock_timeout": 30})
    assert res["changed"] is True and 0.4 <= res["lock"]["waited"] < 30


def test_the_roles_lock_lets_its_own_steps_in_and_refuses_any_other_run(monkeypatch, tmp_path, run_module, lock_path, capsys):
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled"}]})
    # What the role's lock task runs on the node.
    assert host_lock.main(["acquire", "--path", str(lock_path), "--holder", ROLE]) == 0
    assert json.loads(capsys.readouterr().out)["acquired"] is True
    before = path.read_bytes()
    direct = run_module(mig_geometry, {"devices": [entry()]})
    assert direct["failed"] and path.read_bytes() == before
    assert direct["msg"].startswith("another MIG run holds the per-host lock %s: %s (kept across its tasks since " % (lock_path, ROLE))
    assert direct["lock"]["held_by"]["kind"] == "lease"
    step = run_module(mig_geometry, {"devices": [entry()], "lock_holder": ROLE})
    assert step["changed"] is True and step["lock"]["lease"] == ROLE
    assert host_lock.status(str(lock_path))["holder"] == ROLE, "the role's step ended the role's lock"
    assert host_lock.main(["release", "--path", str(lock_path), "--holder", ROLE]) == 0
    assert json.loads(capsys.readouterr().out)["released"] is True
    assert run_module(mig_geometry, {"devices": [entry()]})["changed"] is False


def test_a_stale_lock_of_a_dead_role_run_is_taken_over_naming_it(monkeypatch, tmp_path, run_module, lock_path, capsys):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled"}]})
    assert host_lock.main(["acquire", "--path", str(lock_path), "--holder", ROLE, "--stale-after", "0"]) == 0
    capsys.readouterr()
    time.sleep(0.05)
    res = run_module(mig_geometry, {"devices": [entry()]})
    assert res["changed"] is True and res["lock"]["took_over"]["holder"] == ROLE
    warnings = json.dumps(res.get("warnings"))
    assert ("was kept by %s (kept across its tasks" % ROLE) in warnings and "it is stale and this run took it over" in warnings


@pytest.mark.parametrize("args,msg", [({"lock_timeout": -1}, "lock_timeout must be 0 or more seconds, got -1"),
                                      ({"lock_holder": " "}, "lock_holder must not be empty"),
                                      ({"lock_timeout": "soon"}, "argument 'lock_timeout' is of type str and we were unable to convert to int"),
                                      ({"lock_path": "/proc/gpuops/mig.lock"}, "cannot take the per-host MIG lock: cannot open")])
def test_bad_lock_options_fail_clearly(monkeypatch, tmp_path, run_module, args, msg):
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled"}]})
    before = path.read_bytes()
    res = run_module(mig_geometry, dict({"devices": [entry()]}, **args))
    assert res["failed"] and msg in res["msg"] and path.read_bytes() == before


def test_plans_run_side_by_side_but_an_apply_waits_for_them(monkeypatch, tmp_path, run_module, lock_path):
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled"}]})
    before = path.read_bytes()
    with host_lock.HostLock(str(lock_path), "gpuops.provision.node_preflight plan", shared=True):
        plan = run_module(mig_geometry, {"devices": [entry()]}, check_mode=True)
        apply = run_module(mig_geometry, {"devices": [entry()]})
    assert plan["changed"] is True and not plan.get("failed") and plan["lock"]["shared"] is True
    assert apply["failed"] and path.read_bytes() == before
    assert apply["msg"].startswith("another MIG run holds the per-host lock %s: gpuops.provision.node_preflight plan (pid %d on "
                                   % (lock_path, os.getpid()))
    assert apply["lock"]["held_by"]["check_mode"] is True


def test_device_filter_matching_no_gpu_warns(monkeypatch, tmp_path, run_module):
    # issue 15 point 5: a filter that selects nothing used to pass without a word (mig-parted does nothing for it).
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled"}]})
    before = path.read_bytes()
    res = run_module(mig_geometry, {"devices": [entry(**{"device-filter": "0x233010DE"})]})
    assert not res.get("failed") and res["changed"] is False and path.read_bytes() == before
    assert "entry 0: device-filter 0x233010DE matches no GPU on this host (GPUs: 0 0x20B010DE)" in json.dumps(res["warnings"])
    res = run_module(mig_geometry, {"devices": [entry(**{"device-filter": "0x20B010DE"})]})
    assert res["changed"] is True and "matches no GPU" not in json.dumps(res.get("warnings", []))


def test_overlapping_entries_and_gpus_left_alone_warn_in_check_mode_and_apply(monkeypatch, tmp_path, run_module):
    """Two entries selecting one GPU: mig-parted applies the last (kept), and the module says so, naming the GPU and
    the entries; a GPU the configuration leaves alone (an L40S under devices: all) is said once, at the top."""
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled"}, {"model": "NVIDIA L40S"}]})
    params = {"devices": [entry(mig_devices={"7g.40gb": 1}), entry(devices=[0])]}
    for check in (True, False):
        res = run_module(mig_geometry, params, check_mode=check)
        warned = [w["event"]["msg"] if isinstance(w, dict) else w for w in res["warnings"]]
        assert warned[:2] == [
            "the configuration leaves 1 GPU(s) as they are: GPU 1 (NVIDIA L40S): no MIG",
            "GPU 0 (NVIDIA A100-SXM4-40GB) is selected by entries 0, 1; mig-parted applies the last one, entry 1"], res
        assert res["gpus"][0]["after"]["mig_devices"] == TARGET


# ---- disruptions (issue 41): what a change takes away, named first ---------------------------------------------------

def test_a_change_that_only_adds_instances_disrupts_nothing_and_keeps_its_plain_diff(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "enabled"}]})
    res = run_module(mig_geometry, {"devices": [entry()], "_ansible_diff": True}, check_mode=True)
    assert res["changed"] is True and res["disruptions"] == [], res
    assert res["diff"]["after"]["gpu0"]["mig_devices"] == TARGET


def test_a_mode_change_waiting_for_a_reset_says_this_module_does_not_reset(monkeypatch, tmp_path, run_module):
    # A100 in a pass-through VM: the driver cannot reset it, so the change waits (the role resets or reboots).
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "disabled", "reset_supported": False}]})
    expected = ["turn MIG mode on for GPU 0 (NVIDIA A100-SXM4-40GB): pending until a GPU reset or reboot, which this "
                "module does not do"]
    plan = run_module(mig_geometry, {"devices": [entry()], "_ansible_diff": True}, check_mode=True)
    assert plan["disruptions"] == expected and plan["diff"][0]["prepared"].endswith("1. %s\n" % expected[0]), plan
    res = run_module(mig_geometry, {"devices": [entry()]})
    assert res["changed"] is True and res["disruptions"] == expected, res
    # Nothing left to do until the reset: no disruption.
    assert run_module(mig_geometry, {"devices": [entry()]})["disruptions"] == []


def test_hopper_mode_changes_in_both_directions_are_named_and_a_rerun_has_none(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": H100, "mig_mode": "disabled"}, {"model": H100, "mig_mode": "disabled"}]})
    on = run_module(mig_geometry, {"devices": [entry([1], mig_devices={"1g.10gb": 7})]})
    assert on["disruptions"] == ["turn MIG mode on for GPU 1 (NVIDIA H100 80GB HBM3)"], on
    again = run_module(mig_geometry, {"devices": [entry([1], mig_devices={"1g.10gb": 7})], "_ansible_diff": True})
    assert again["changed"] is False and again["disruptions"] == [] and again["diff"] == {"before": {}, "after": {}}
    off = run_module(mig_geometry, {"devices": [entry([1], enabled=False)]}, check_mode=True)
    # Turning MIG off destroys the seven instances first, then the mode.
    assert off["disruptions"] == [
        "destroy the GPU instances 1g.10gb x7 of GPU 1 (NVIDIA H100 80GB HBM3) with their compute instances",
        "turn MIG mode off for GPU 1 (NVIDIA H100 80GB HBM3)"], off


def test_forced_changes_name_the_processes_that_lose_their_instances(monkeypatch, tmp_path, run_module):
    state = {"gpus": [{"model": A100, "mig_mode": "enabled",
                       "gpu_instances": [{"profile_id": 0, "id": 0, "start": 0, "compute_instances": [{}]}],
                       "processes": [{"pid": 4242, "gpu_instance_id": 0, "compute_instance_id": 0}, {"pid": 77, "gpu_instance_id": 0}]}]}
    use_gpusim(monkeypatch, tmp_path, state)
    res = run_module(mig_geometry, {"devices": [entry()], "force": True}, check_mode=True)
    assert res["disruptions"] == ["destroy the GPU instances 7g.40gb x1 of GPU 0 (NVIDIA A100-SXM4-40GB) with their "
                                  "compute instances (processes 77, 4242 use them)"], res
