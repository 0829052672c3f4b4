# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig_geometry module against gpusim (lab/gpusim) installed in-process as ``pynvml``."""

from __future__ import annotations

import json
import sys

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
    path = use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "disabled"}]})
    plan = run_module(mig_geometry, {"devices": [entry()]}, check_mode=True)
    assert plan["gpus"][0]["reset_required"] is True
    res = run_module(mig_geometry, {"devices": [entry()]})
    assert res["changed"] is True and res["reset_required"] is True
    assert res["gpus"][0]["after"]["mig_mode"] == {"current": "disabled", "pending": "enabled"}
    assert [a["action"] for a in res["gpus"][0]["actions"]] == ["set_mig_mode"]
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
    assert a100["changed"] and not h100["selected"] and h100["before"] is None
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
