# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig_geometry module against gpusim (lab/gpusim) installed in-process as ``pynvml``."""

from __future__ import annotations

import json
import sys
import time

import pytest

from ansible_collections.gpuops.provision.plugins.modules import mig_geometry

from gpusim_nvml import use_gpusim  # pylint: disable=import-error

A100 = "NVIDIA A100-SXM4-40GB"
H100 = "NVIDIA H100 80GB HBM3"
TARGET = {"3g.20gb": 1, "2g.10gb": 2}


def entry(devices="all", enabled=True, mig_devices=None, **extra):
    e = {"devices": devices, "mig-enabled": enabled}
    if enabled:
        e["mig-devices"] = TARGET if mig_devices is None else mig_devices
    e.update(extra)
    return e


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
    assert res["diff"]["before"]["gpu0"]["mig_devices"] == {"7g.40gb": 1}
    assert res["diff"]["after"]["gpu0"]["mig_devices"] == TARGET


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
    assert "GPU 0 (NVIDIA A100-SXM4-40GB)" in res["msg"]
    assert "creating GPU instance" in res["msg"] and "INSUFFICIENT_RESOURCES" in res["msg"]
    assert "previous geometry was restored" in res["msg"]
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
    assert "GPU 1 (NVIDIA A100-SXM4-40GB)" in res["msg"] and "GPU 0 restored" in res["msg"], res["msg"]
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
    assert res["failed"] and "creating compute instance(s) 2g.10gb failed" in res["msg"]
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
    from ansible_collections.gpuops.provision.plugins.module_utils import _mig_models
    monkeypatch.delitem(_mig_models.MODELS, 0x233010DE)
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
