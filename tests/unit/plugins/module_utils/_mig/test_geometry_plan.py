# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Geometry diff and action planning (plugins/module_utils/_mig/geometry.py plan_gpu)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._mig import geometry as m

ON = {"current": "enabled", "pending": "enabled"}
OFF = {"current": "disabled", "pending": "disabled"}


def a100():
    ones = [(i, 1) for i in range(7)]
    return m.ProfileTable([
        m.Profile("1g.5gb", 19, 1, ones, 7), m.Profile("1g.5gb+me", 20, 1, ones, 1),
        m.Profile("1g.10gb", 15, 1, [(0, 2), (2, 2), (4, 2), (6, 2)], 4), m.Profile("2g.10gb", 14, 2, [(0, 2), (2, 2), (4, 2)], 3),
        m.Profile("3g.20gb", 9, 3, [(0, 4), (4, 4)], 2), m.Profile("4g.20gb", 5, 4, [(0, 4)], 1), m.Profile("7g.40gb", 0, 7, [(0, 8)], 1),
    ])


def gi(gi_id, profile, start, size, cis=None, slices=None):
    table = a100()
    prof = table.get(profile)
    cis = cis if cis is not None else [prof.slices]
    return {"gi_id": gi_id, "profile": profile, "profile_id": prof.id, "slices": prof.slices,
            "placement": {"start": start, "size": size},
            "compute_instances": [{"ci_id": i, "slices": c, "profile": m.ci_profile_name(c, profile, prof.slices),
                                   "placement": {"start": 0, "size": c}} for i, c in enumerate(cis)]}


def target(devices, enabled=True):
    return {"mig_enabled": enabled, "mig_devices": devices, "devices": "all", "device_filter": None}


def kinds(plan):
    return [a["action"] for a in plan["actions"]]


def test_matching_geometry_is_unchanged_whatever_the_placement():
    current = [gi(3, "2g.10gb", 4, 2), gi(1, "3g.20gb", 0, 4), gi(5, "2g.10gb", 4, 2)]
    plan = m.plan_gpu(a100(), ON, current, target({"3g.20gb": 1, "2g.10gb": 2}))
    assert plan["changed"] is False and plan["actions"] == []


def test_empty_gpu_instance_counts_as_a_difference():
    current = [gi(1, "3g.20gb", 4, 4), gi(2, "2g.10gb", 0, 2), gi(3, "2g.10gb", 2, 2, cis=[])]
    plan = m.plan_gpu(a100(), ON, current, target({"3g.20gb": 1, "2g.10gb": 2}))
    assert plan["changed"]
    # The GI without a CI is rebuilt, the two complete ones are kept.
    assert plan["keep"] == [1, 2]
    assert kinds(plan) == ["destroy_gi", "create_gi", "create_ci"]


def test_keeps_wanted_instances_and_destroys_cis_before_gis():
    current = [gi(1, "3g.20gb", 4, 4), gi(2, "1g.5gb", 0, 1), gi(3, "1g.5gb", 1, 1)]
    plan = m.plan_gpu(a100(), ON, current, target({"3g.20gb": 1, "2g.10gb": 2}))
    assert plan["keep"] == [1]
    assert kinds(plan) == ["destroy_ci", "destroy_gi", "destroy_ci", "destroy_gi", "create_gi", "create_ci", "create_gi", "create_ci"]
    creates = [a["placement"] for a in plan["actions"] if a["action"] == "create_gi"]
    assert sorted((p["start"], p["size"]) for p in creates) == [(0, 2), (2, 2)]


def test_falls_back_to_full_rebuild_when_kept_instances_block_the_target():
    # The 3g at slice 0 matches the target but blocks the 4g, whose only placement is slice 0.
    current = [gi(1, "3g.20gb", 0, 4), gi(2, "2g.10gb", 4, 2)]
    plan = m.plan_gpu(a100(), ON, current, target({"4g.20gb": 1, "3g.20gb": 1}))
    assert plan["keep"] == []
    assert kinds(plan)[:4] == ["destroy_ci", "destroy_gi", "destroy_ci", "destroy_gi"]
    creates = dict((a["profile"], a["placement"]["start"]) for a in plan["actions"] if a["action"] == "create_gi")
    assert creates == {"4g.20gb": 0, "3g.20gb": 4}


def test_impossible_target_raises_before_any_action():
    current = [gi(1, "7g.40gb", 0, 8)]
    with pytest.raises(m.MigError, match="9 memory slices"):
        m.plan_gpu(a100(), ON, current, target({"3g.20gb": 2, "1g.5gb": 1}))


def test_enable_on_hopper_creates_in_same_run():
    plan = m.plan_gpu(a100(), OFF, [], target({"7g.40gb": 1}), mode_change_resets=False)
    assert kinds(plan) == ["set_mig_mode", "create_gi", "create_ci"]
    assert plan["reset_required"] is False
    after = m.predicted_after(OFF, [], plan, a100())
    assert after["mig_mode"] == ON and after["mig_devices"] == {"7g.40gb": 1}


def test_enable_on_ampere_reports_reset_required():
    plan = m.plan_gpu(a100(), OFF, [], target({"7g.40gb": 1}), mode_change_resets=True)
    assert plan["reset_required"] is True and plan["changed"] is True
    after = m.predicted_after(OFF, [], plan, a100())
    assert after["mig_mode"] == {"current": "disabled", "pending": "enabled"}
    assert after["instances"] == []


def test_pending_enable_waits_for_reset_without_actions():
    plan = m.plan_gpu(a100(), {"current": "disabled", "pending": "enabled"}, [], target({"7g.40gb": 1}))
    assert plan == {"changed": False, "actions": [], "reset_required": True, "keep": [], "target_counts": {"7g.40gb": 1}}


def test_disable_destroys_everything_then_sets_mode():
    current = [gi(1, "3g.20gb", 4, 4, cis=[1, 1]), gi(2, "2g.10gb", 0, 2)]
    plan = m.plan_gpu(a100(), ON, current, target({}, enabled=False), mode_change_resets=True)
    assert kinds(plan) == ["destroy_ci", "destroy_ci", "destroy_gi", "destroy_ci", "destroy_gi", "set_mig_mode"]
    assert plan["reset_required"] is True
    assert m.plan_gpu(a100(), OFF, [], target({}, enabled=False))["changed"] is False


def test_pending_disable_is_cancelled_when_mig_wanted():
    current = [gi(1, "7g.40gb", 0, 8)]
    plan = m.plan_gpu(a100(), {"current": "enabled", "pending": "disabled"}, current, target({"7g.40gb": 1}))
    assert kinds(plan) == ["set_mig_mode"]
    assert plan["actions"][0]["mode"] == "enabled"


def test_enabled_with_no_instances():
    plan = m.plan_gpu(a100(), ON, [gi(1, "1g.5gb", 0, 1)], target({}))
    assert kinds(plan) == ["destroy_ci", "destroy_gi"]
    assert m.plan_gpu(a100(), ON, [], target({}))["changed"] is False


def test_compute_instance_targets_and_summary():
    plan = m.plan_gpu(a100(), ON, [], target({"1c.3g.20gb": 3, "1c.2g.10gb": 2}))
    cis = [(a["profile"], a["gi_ref"]) for a in plan["actions"] if a["action"] == "create_ci"]
    assert cis == [("1c.3g.20gb", 0)] * 3 + [("1c.2g.10gb", 1)] * 2
    current = [gi(1, "3g.20gb", 4, 4, cis=[1, 1, 1]), gi(2, "2g.10gb", 0, 2, cis=[1, 1])]
    assert m.current_counts(current) == {"1c.3g.20gb": 3, "1c.2g.10gb": 2}
    assert m.plan_gpu(a100(), ON, current, target({"1c.3g.20gb": 3, "1c.2g.10gb": 2}))["changed"] is False


def test_rollback_recreates_previous_instances_with_placements():
    current = [gi(7, "3g.20gb", 4, 4, cis=[1, 2])]
    acts = m.rollback_actions(current)
    assert acts[0] == {"action": "create_gi", "ref": 0, "profile": "3g.20gb", "profile_id": 9, "placement": {"start": 4, "size": 4}}
    assert [(a["profile"], a["slices"]) for a in acts[1:]] == [("1c.3g.20gb", 1), ("2c.3g.20gb", 2)]


def test_gpu_disruptions_name_what_goes_and_the_mode_change_in_the_apply_order():
    gpu = {"index": 3, "model": "NVIDIA A100-SXM4-40GB", "reset_required": False}
    plan = m.plan_gpu(a100(), ON, [gi(1, "3g.20gb", 4, 4), gi(2, "1g.5gb", 0, 1), gi(3, "1g.5gb", 1, 1)],
                      target({"3g.20gb": 1, "2g.10gb": 2}))
    # Both 1g instances go (the 3g stays); the creations take nothing away.
    assert m.gpu_disruptions(dict(gpu, actions=plan["actions"])) == [
        "destroy the GPU instances 1g.5gb x2 of GPU 3 (NVIDIA A100-SXM4-40GB) with their compute instances"]
    assert m.gpu_disruptions(dict(gpu, actions=plan["actions"]), [99, 7]) == [
        "destroy the GPU instances 1g.5gb x2 of GPU 3 (NVIDIA A100-SXM4-40GB) with their compute instances "
        "(processes 7, 99 use them)"]
    off = m.plan_gpu(a100(), ON, [gi(1, "3g.20gb", 4, 4), gi(2, "2g.10gb", 0, 2)], target({}, enabled=False))
    assert m.gpu_disruptions(dict(gpu, actions=off["actions"])) == [
        "destroy the GPU instances 2g.10gb x1, 3g.20gb x1 of GPU 3 (NVIDIA A100-SXM4-40GB) with their compute instances",
        "turn MIG mode off for GPU 3 (NVIDIA A100-SXM4-40GB)"]
    # A mode change alone carries the processes; one that waits for a reset says who does not do it.
    on = [{"action": "set_mig_mode", "mode": "enabled"}, {"action": "create_gi", "profile": "7g.40gb"}]
    assert m.gpu_disruptions(dict(gpu, actions=on, reset_required=True), [5]) == [
        "turn MIG mode on for GPU 3 (NVIDIA A100-SXM4-40GB) (processes 5 run on it): pending until a GPU reset or "
        "reboot, which this module does not do"]
    unchanged = m.plan_gpu(a100(), ON, [gi(1, "7g.40gb", 0, 8)], target({"7g.40gb": 1}))
    assert m.gpu_disruptions(dict(gpu, actions=unchanged["actions"])) == [] and m.gpu_disruptions(gpu) == []
