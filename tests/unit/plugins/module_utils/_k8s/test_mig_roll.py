# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""MIG roll decisions (plugins/module_utils/_k8s/mig_roll.py) and the documented profile tables (_mig/models.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._k8s import mig_roll as R
from ansible_collections.gpuops.provision.plugins.module_utils._mig import geometry as mig_geometry, models as M


def gpu(current="enabled", devices=None, selected=True, capable=True):
    after = {"mig_mode": {"current": current, "pending": current}, "mig_devices": devices or {}}
    return {"selected": selected, "mig_capable": capable, "before": after, "after": after}


def test_expected_resources_count_every_gpu_selected_or_not():
    gpus = [gpu(devices={"1g.10gb": 2, "3g.40gb": 1}),
            gpu(devices={"2g.20gb": 3}, selected=False),          # not selected: still advertised
            gpu(current="disabled", selected=False),              # MIG off: one whole GPU
            gpu(current="disabled", capable=False, selected=False)]  # L40S
    assert R.expected_resources(gpus) == {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-3g.40gb": 1,
                                          "nvidia.com/mig-2g.20gb": 3, "nvidia.com/gpu": 2}
    assert R.expected_resources(gpus, "single") == {"nvidia.com/gpu": 8}


def test_expected_resources_leave_out_ci_profiles_unless_served_and_rename_plus():
    gpus = [gpu(devices={"1c.3g.40gb": 2, "1g.10gb+me": 1})]
    # k8s-device-plugin internal/rm/rm.go: mixed registers C == G profiles only.
    assert R.expected_resources(gpus) == {"nvidia.com/mig-1g.10gb.me": 1}
    assert R.expected_resources(gpus, ci_profiles_served=True) == {"nvidia.com/mig-1g.10gb.me": 1,
                                                                   "nvidia.com/mig-1c.3g.40gb": 2}
    with pytest.raises(R.RollError, match="^MIG strategy must be mixed or single, got 'none'$"):
        R.expected_resources(gpus, "none")


def test_expected_resources_read_the_target_geometry_else_the_current_one():
    before = {"mig_mode": {"current": "enabled"}, "mig_devices": {"7g.80gb": 1}}
    after = {"mig_mode": {"current": "enabled"}, "mig_devices": {"3g.40gb": 2}}
    # mig_geometry's record of a GPU it changes: the target counts, not what the GPU has now.
    assert R.expected_resources([{"mig_capable": True, "before": before, "after": after}]) == {"nvidia.com/mig-3g.40gb": 2}
    # A record with only the current geometry: that one.
    assert R.expected_resources([{"mig_capable": True, "before": before}]) == {"nvidia.com/mig-7g.80gb": 1}
    # A record that does not say whether the GPU is MIG-capable is taken as capable; one that says not is a whole GPU.
    assert R.expected_resources([{"after": after}]) == {"nvidia.com/mig-3g.40gb": 2}
    assert R.expected_resources([{"mig_capable": False, "after": after}]) == {"nvidia.com/gpu": 1}


def test_a_mig_gpu_with_no_instances_advertises_nothing():
    assert R.expected_resources([gpu(devices={})]) == {}
    assert R.expected_resources([]) == {}


def test_advertised_resources_pick_gpu_keys_above_zero_as_ints():
    alloc = {"cpu": "8", "nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "2", "nvidia.com/mig-3g.40gb": "x",
             "nvidia.com/mig-2g.20gb": 1, "example.com/foo": "3"}
    assert R.advertised_resources(alloc) == {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-2g.20gb": 1}
    assert R.advertised_resources(None) == {}
    # Whole GPUs, and shared ones under the name renameByDefault gives them (gpu_pools).
    assert R.advertised_resources({"nvidia.com/gpu": "2", "nvidia.com/gpu.shared": "8", "nvidia.com/gpus": "1"}) == \
        {"nvidia.com/gpu": 2, "nvidia.com/gpu.shared": 8}


def test_ci_profiles_requested_only_on_selected_gpus():
    gpus = [gpu(devices={"1c.3g.40gb": 2, "3g.40gb": 1}), gpu(devices={"1c.2g.20gb": 1}, selected=False),
            gpu(devices={"7c.7g.80gb": 1}), gpu(devices={"2c.4g.40gb": 1, "1c.3g.40gb": 1})]
    assert R.ci_profiles_requested(gpus) == ["1c.3g.40gb", "2c.4g.40gb"]
    assert R.is_ci_profile("2c.3g.40gb") and not R.is_ci_profile("3g.40gb") and not R.is_ci_profile("7c.7g.80gb")


def test_operand_labels_follow_mig_manager():
    # mig-parted pkg/mig/reconfigure/reconfigure.go maybeSetPaused / maybeSetTrue.
    labels = {"nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/gpu.deploy.dcgm": "false",
              "nvidia.com/gpu.deploy.nvsm": "paused-for-mig-change"}
    ops = ["device-plugin", "dcgm", "nvsm", "dcgm-exporter", "client"]
    assert R.operand_labels(labels, ops, "pause") == {
        "nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change", "nvidia.com/gpu.deploy.dcgm": "false",
        "nvidia.com/gpu.deploy.nvsm": "paused-for-mig-change", "nvidia.com/gpu.deploy.dcgm-exporter": "paused-for-mig-change"}
    # A label an interrupted run left paused comes back as true; the absent client label is not added.
    assert R.operand_labels(labels, ops, "restore") == {
        "nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/gpu.deploy.dcgm": "false",
        "nvidia.com/gpu.deploy.nvsm": "true", "nvidia.com/gpu.deploy.dcgm-exporter": "true"}
    with_client = dict(labels, **{"nvidia.com/gpu.deploy.client": "true"})
    assert R.operand_labels(with_client, ["client"], "pause") == {"nvidia.com/gpu.deploy.client": "paused-for-mig-change"}
    # An absent client label is passed over, not the end of the list.
    assert R.operand_labels({}, ["client", "device-plugin"], "pause") == {"nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change"}
    with pytest.raises(R.RollError, match="^phase must be pause or restore, got 'resume'$"):
        R.operand_labels(labels, ops, "resume")


def test_label_patch_writes_only_what_changes():
    current = {"a": "1", "b": "2", "gone": "x"}
    # Same value: nothing; a new value or key: written; None removes a key only where it is present.
    assert R.label_patch(current, {"a": "1", "b": "3", "c": "4", "gone": None, "never": None}) == \
        {"b": "3", "c": "4", "gone": None}
    assert R.label_patch(current, {"a": "1"}) == {}
    assert R.label_patch({}, {}) == {} and R.label_patch(current, None) == {}
    # An empty string is a value, not a removal.
    assert R.label_patch({"a": "1"}, {"a": ""}) == {"a": ""}


def test_patched_labels_apply_a_merge_patch_without_touching_the_input():
    current = {"a": "1", "b": "2"}
    assert R.patched_labels(current, {"a": None, "b": "3", "c": "4", "missing": None}) == {"b": "3", "c": "4"}
    assert current == {"a": "1", "b": "2"}


def test_running_pods_of_records_missing_their_namespace_or_name():
    pods = [{"metadata": {"name": "train"}, "status": {"phase": "Running"}},
            {"metadata": {"namespace": "ml"}, "status": {"phase": "Pending"}}]
    assert R.running_pods(pods) == ["/train", "ml/"]


# --- documented tables --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pci,names", [
    (0x20B010DE, ["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]),
    (0x233010DE, ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
    (0x232110DE, ["1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"]),
    (0x233510DE, ["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]),
    (0x20B710DE, ["1g.6gb", "1g.6gb+me", "2g.12gb", "2g.12gb+me", "4g.24gb"]),
])
def test_documented_tables_carry_the_user_guide_names(pci, names):
    table = M.documented_table(pci, "580.95.05")
    assert table.names() == names
    assert M.documented_table("0x%08X" % pci).names() == names


def test_documented_placements_and_counts():
    table = M.documented_table(0x20B010DE)
    assert table.get("3g.20gb").placements == ((0, 4), (4, 4)) and table.get("3g.20gb").id == 9
    assert table.get("1g.10gb").placements == ((0, 2), (2, 2), (4, 2), (6, 2)) and table.get("1g.10gb").max_count == 4
    assert table.get("7g.40gb").placements == ((0, 8),) and table.memory_slices == 8
    assert M.documented_table(0x20B710DE).memory_slices == 4
    # The documented table validates a target as the live one does.
    groups, placed = mig_geometry.validate_target(table, {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1})
    assert len(groups) == 4 and len(placed) == 4
    assert M.documented_table(0x26B910DE) is None  # L40S: no MIG


def test_a30_me_profiles_need_their_branch():
    assert "1g.6gb+me" not in M.documented_table(0x20B710DE, "460.106.00").names()
    assert "2g.12gb+me" not in M.documented_table(0x20B710DE, "470.256.02").names()
    assert "2g.12gb+me" in M.documented_table(0x20B710DE, "525.147.05").names()
    hint = M.missing_profiles_hint(0x20B710DE, "460.106.00", ["1g.6gb+me"])
    assert hint == ("the loaded driver is 460.106.00; NVIDIA documents MIG on A30 from driver 460.73.01; "
                    "1g.6gb+me needs R470 or newer")


@pytest.mark.parametrize("pci,driver,expected", [
    (0x233510DE, "535.261.03", "driver 535.261.03 is older than 550.90.07, the minimum NVIDIA documents for MIG on H200 (R550)"),
    (0x233510DE, "550.90.07", None),
    (0x233010DE, "525.85.11", "driver 525.85.11 is older than 525.85.12, the minimum NVIDIA documents for MIG on H100 80GB HBM3 (R525)"),
    (0x20B010DE, "450.80.02", None),
    (0x26B910DE, "535.261.03", None),
    (0x233010DE, "garbage", None),
])
def test_below_minimum(pci, driver, expected):
    assert M.below_minimum(pci, driver) == expected


def test_disagreements_name_each_difference():
    doc = M.documented_table(0x233010DE)
    live = mig_geometry.ProfileTable([mig_geometry.Profile("3g.40gb", 9, 3, [(0, 4)], 1),
                                      mig_geometry.Profile("1g.10gb", 19, 1, [(s, 1) for s in range(7)], 7)])
    assert M.disagreements(doc, live, {"1g.10gb"}) == []
    assert M.disagreements(doc, live, {"3g.40gb", "2g.20gb", "9g.1gb"}) == [
        "2g.20gb is documented but the driver does not offer it",
        "3g.40gb: max_count documented 2, NVML reports 1",
        "3g.40gb: placements documented ((0, 4), (4, 4)), NVML reports ((0, 4),)"]


def test_unknown_profiles_and_gi_names():
    table = M.documented_table(0x233010DE)
    assert mig_geometry.unknown_profiles(table, {"1c.3g.40gb": 1, "3g.20gb": 1, "1g.10gb": 2}) == ["3g.20gb"]
    assert mig_geometry.gi_profile_names({"1c.3g.40gb": 1, "3g.40gb": 1, "1g.10gb+me": 1}) == {"3g.40gb", "1g.10gb+me"}


def node(name="n1", labels=None, unschedulable=None, ready="True", allocatable=None):
    out = {"metadata": {"name": name, "labels": labels or {}},
           "status": {"conditions": [{"type": "Ready", "status": ready}], "allocatable": allocatable or {}}}
    if unschedulable is not None:
        out["spec"] = {"unschedulable": unschedulable}
    return out


def test_node_facts_pick_the_node_and_take_the_variable_before_the_label():
    nodes = {"resources": [node("n0", {"nvidia.com/mig.config": "other"}),
                           node("n1", {"nvidia.com/mig.config": "all-1g"}, allocatable={"nvidia.com/mig-1g.10gb": "7", "cpu": "8"})]}
    facts = R.node_facts(nodes, "n1")
    assert facts == {"node": "n1", "failed": False, "msg": "", "found": True, "labels": {"nvidia.com/mig.config": "all-1g"},
                     "mig_manager": "", "mig_manager_pod": "", "mig_manager_config_error": "", "set_mig_manager_config": False,
                     "was_cordoned": False, "unavailable": False, "advertised": {"nvidia.com/mig-1g.10gb": 7},
                     "selected": "all-1g", "skip": False, "plannable": True, "backend": "nvml", "resume": ""}
    assert R.node_facts(nodes, "n1", selected="all-balanced")["selected"] == "all-balanced"
    # Absent: nothing selected (an empty string, as the role's messages print it), not plannable.
    assert R.node_facts(nodes, "n9") == {"node": "n9", "failed": False, "msg": "", "found": False, "labels": {},
                                         "mig_manager": "", "mig_manager_pod": "", "mig_manager_config_error": "",
                                         "set_mig_manager_config": False, "was_cordoned": False, "unavailable": True,
                                         "advertised": {}, "selected": "", "skip": False, "plannable": False,
                                         "backend": "nvml", "resume": ""}
    unreadable = R.node_facts({"failed": True, "msg": "401"}, "n1", backend="gpu_operator")
    assert unreadable["failed"] is True and unreadable["msg"] == "401" and unreadable["backend"] == "gpu_operator"


def test_node_facts_cordon_readiness_and_the_skip_label():
    cordoned = R.node_facts({"resources": [node(unschedulable=True)]}, "n1", selected="x")
    assert cordoned["was_cordoned"] and cordoned["unavailable"]
    not_ready = R.node_facts({"resources": [node(ready="Unknown")]}, "n1", selected="x")
    assert not_ready["unavailable"] and not not_ready["was_cordoned"]
    labelled = {"resources": [node(labels={"gpuops.io/skip": "true", "empty": ""})]}
    assert R.node_facts(labelled, "n1", skip_label="gpuops.io/skip=true")["skip"]
    assert not R.node_facts(labelled, "n1", skip_label="gpuops.io/skip=false")["skip"]
    assert R.node_facts(labelled, "n1", skip_label="empty")["skip"]             # key alone matches an empty value
    assert not R.node_facts(labelled, "n1", skip_label="absent")["skip"]
    assert not R.node_facts(labelled, "n1", skip_label="")["skip"]


def mm_pod(node_name="n1", phase="Running", deleting=False, app="nvidia-mig-manager", name="nvidia-mig-manager-x1"):
    meta = {"name": name, "labels": {"app": app}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-04T10:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node_name}, "status": {"phase": phase}}


NAMED = {"policy_name": "cluster-policy", "config_map": "gpuops-mig",
         "policy": {"metadata": {"name": "cluster-policy"}, "spec": {"migManager": {"config": {"name": "gpuops-mig"}}}}}


def test_running_pod_is_a_running_mig_manager_pod_on_the_node():
    assert R.running_pod([mm_pod()], "n1") == "nvidia-mig-manager-x1"
    for other in (mm_pod("n2"), mm_pod(phase="Pending"), mm_pod(deleting=True), mm_pod(app="nvidia-device-plugin-daemonset")):
        assert R.running_pod([other], "n1") == ""
    assert R.running_pod(None, "n1") == "" and R.running_pod([{}], "n1") == ""


@pytest.mark.parametrize("backend, label, pods, plannable", [
    ("nvml", None, [], True), ("nvml", "true", [], True),   # the label alone: mig-manager disabled, nothing runs
    ("nvml", "true", [mm_pod()], False), ("nvml", None, [mm_pod("n2")], True),
    ("gpu_operator", "true", [mm_pod()], True), ("gpu_operator", "true", [], False),
    ("gpu_operator", "true", [mm_pod(phase="Pending")], False), ("gpu_operator", None, [mm_pod()], True)])
def test_the_backend_is_decided_from_a_running_mig_manager_pod(backend, label, pods, plannable):
    labels = {} if label is None else {"nvidia.com/gpu.deploy.mig-manager": label}
    facts = R.node_facts({"resources": [node(labels=labels)]}, "n1", selected="x", backend=backend,
                         mig_manager_pods=pods, mig_manager=NAMED)
    assert facts["plannable"] is plannable
    error = R.node_plan(facts, {"skipped": True})["error"]
    assert (error == "") is plannable
    with pytest.raises(R.RollError, match="^backend must be one of nvml, gpu_operator, got 'mig-manager'$"):
        R.node_facts({}, "n1", backend="mig-manager")


@pytest.mark.parametrize("backend, label, pods, error", [
    ("nvml", "true", [mm_pod()],
     "the GPU Operator's mig-manager runs on this node (pod nvidia-mig-manager-x1), which re-applies its own MIG "
     "configuration; backend nvml needs it off (label the node nvidia.com/gpu.deploy.mig-manager=false, or disable "
     "migManager in the ClusterPolicy), or use mig_reconfigure_backend=gpu_operator"),
    ("gpu_operator", "true", [],
     "backend gpu_operator needs the GPU Operator's mig-manager running on this node, but no Running "
     "app=nvidia-mig-manager pod is on it (nvidia.com/gpu.deploy.mig-manager is true; the operator sets that label on "
     "every MIG-capable node, also with migManager disabled in the ClusterPolicy)"),
    ("gpu_operator", None, [],
     "backend gpu_operator needs the GPU Operator's mig-manager running on this node, but no Running "
     "app=nvidia-mig-manager pod is on it (nvidia.com/gpu.deploy.mig-manager is absent; the operator sets that label "
     "on every MIG-capable node, also with migManager disabled in the ClusterPolicy)"),
])
def test_a_mig_manager_at_odds_with_the_backend_is_explained(backend, label, pods, error):
    labels = {} if label is None else {"nvidia.com/gpu.deploy.mig-manager": label}
    facts = R.node_facts({"resources": [node(labels=labels)]}, "n1", selected="x", backend=backend,
                         mig_manager_pods=pods, mig_manager=NAMED)
    assert R.node_plan(facts, {"skipped": True})["error"] == error


def test_mig_manager_reads_the_roles_configmap_only_when_the_cluster_policy_names_it():
    """object_controls.go TransformMIGManager: CONFIG_FILE only with spec.migManager.config.name."""
    assert R.mig_manager_config(NAMED) == ("", False)
    unnamed = dict(NAMED, policy={"metadata": {"name": "cluster-policy"}, "spec": {}})
    assert R.mig_manager_config(unnamed) == (
        "mig-manager does not read the ConfigMap gpuops-mig: ClusterPolicy cluster-policy names no config "
        "(spec.migManager.config.name), so mig-manager generates its configuration from the hardware; set "
        "spec.migManager.config.name to gpuops-mig in the ClusterPolicy, or let the role set it "
        "(mig_reconfigure_mig_manager_set_config: true)", False)
    other = dict(NAMED, policy={"metadata": {"name": "cp"}, "spec": {"migManager": {"config": {"name": "custom"}}}})
    assert R.mig_manager_config(other) == (
        "mig-manager does not read the ConfigMap gpuops-mig: ClusterPolicy cp names custom "
        "(spec.migManager.config.name), so mig-manager reads custom; set spec.migManager.config.name to gpuops-mig in "
        "the ClusterPolicy, or let the role set it (mig_reconfigure_mig_manager_set_config: true)", False)
    assert R.mig_manager_config(dict(unnamed, may_set=True)) == ("", True)
    assert R.mig_manager_config(dict(NAMED, policy=None)) == (
        "ClusterPolicy cluster-policy (mig_reconfigure_cluster_policy) was not found: backend gpu_operator needs the "
        "GPU Operator's ClusterPolicy to name mig-manager's ConfigMap gpuops-mig", False)
    facts = R.node_facts({"resources": [node()]}, "n1", selected="x", backend="gpu_operator",
                         mig_manager_pods=[mm_pod()], mig_manager=unnamed)
    assert not facts["plannable"] and R.node_plan(facts, {"skipped": True})["error"] == R.mig_manager_config(unnamed)[0]
    facts = R.node_facts({"resources": [node()]}, "n1", selected="x", backend="gpu_operator",
                         mig_manager_pods=[mm_pod()], mig_manager=dict(unnamed, may_set=True))
    assert facts["plannable"] and facts["set_mig_manager_config"] is True
    # The nvml backend does not care what the ClusterPolicy says.
    assert R.node_facts({"resources": [node()]}, "n1", selected="x", mig_manager=unnamed)["mig_manager_config_error"] == ""


def test_node_plan_names_the_first_reason_a_node_cannot_roll():
    ok = R.node_facts({"resources": [node()]}, "n1", selected="all-1g")
    assert R.node_plan(R.node_facts({"failed": True, "msg": "Unauthorized"}, "n1"), {})["error"] == \
        "cannot read Kubernetes node n1: Unauthorized"
    assert R.node_plan(R.node_facts({"resources": []}, "n1"), {})["error"] == "Kubernetes node n1 not found"
    assert R.node_plan(R.node_facts({"resources": [node()]}, "n1"), {})["error"] == \
        "no MIG configuration selected: set mig_reconfigure_selected or the node label nvidia.com/mig.config"
    assert R.node_plan(ok, {"failed": True, "msg": "unknown config"})["error"] == "unknown config"
    assert R.node_plan(ok, {"failed": True})["error"] == "mig_geometry failed"
    ci = [gpu(devices={"1c.3g.40gb": 2, "2c.4g.40gb": 1})]
    assert R.node_plan(ok, {"changed": True, "gpus": ci})["error"] == (
        "compute-instance profile(s) 1c.3g.40gb, 2c.4g.40gb are not registered by the NVIDIA device plugin (mixed strategy "
        "serves C == G profiles only); set mig_reconfigure_ci_profiles_served if the plugin on this node serves them")
    plan = R.node_plan(ok, {"changed": True, "gpus": ci}, ci_profiles_served=True)
    assert plan["error"] == "" and plan["changed"] and plan["target"] == {"nvidia.com/mig-1c.3g.40gb": 2, "nvidia.com/mig-2c.4g.40gb": 1}


def test_a_node_an_interrupted_run_left_is_finished_whatever_its_geometry_and_skip_label_say():
    # Issue 45: killed after the apply, the GPUs are at the target; the node is still cordoned by the roll.
    left = node(allocatable={}, unschedulable=True)
    left["metadata"]["annotations"] = {"gpuops.provision/roll": "mig_reconfigure", "gpuops.provision/roll-phase": "applied",
                                       "gpuops.provision/cordoned-by": "gpuops.provision mig_reconfigure",
                                       "gpuops.provision/roll-initial": '{"unschedulable": false}'}
    left["metadata"]["labels"] = {"gpuops.io/mig-reconfigure": "skip"}
    facts = R.node_facts({"resources": [left]}, "n1", selected="all-3g", skip_label="gpuops.io/mig-reconfigure=skip")
    assert facts["resume"] == "applied" and facts["was_cordoned"] is False and facts["skip"] is True
    plan = R.node_plan(facts, {"changed": False, "gpus": [gpu(devices={"3g.40gb": 2})]})
    assert plan["changed"] is True and plan["resume"] == "applied" and plan["skipped_by_label"] is False
    # An operator's cordon (no annotation of ours) is not the roll's: the node is not resumed.
    operator = node(unschedulable=True)
    facts = R.node_facts({"resources": [operator]}, "n1", selected="all-3g")
    assert facts["resume"] == "" and facts["was_cordoned"] is True
    assert R.node_plan(facts, {"changed": False})["changed"] is False
    # A bad plan stays an error even on a node to finish.
    assert R.node_plan(dict(facts, resume="drained"), {"failed": True, "msg": "bad"})["changed"] is False


def test_node_plan_changes_skips_by_label_and_keeps_the_current_resources():
    facts = R.node_facts({"resources": [node(allocatable={"nvidia.com/mig-1g.10gb": "7"})]}, "n1", selected="all-3g")
    target = [gpu(devices={"3g.40gb": 2})]
    plan = R.node_plan(facts, {"changed": True, "reset_required": True, "gpus": target})
    assert plan == {"node": "n1", "selected": "all-3g", "error": "", "changed": True, "skipped_by_label": False,
                    "resume": "", "reset_required": True, "gpus": target, "unavailable": False,
                    "current": {"nvidia.com/mig-1g.10gb": 7}, "target": {"nvidia.com/mig-3g.40gb": 2}}
    cordoned = R.node_plan(dict(facts, unavailable=True), {"changed": True, "gpus": target})
    assert cordoned["unavailable"] is True and cordoned["reset_required"] is False
    same = R.node_plan(facts, {"changed": False, "gpus": target})
    assert not same["changed"] and same["target"] == same["current"]  # at its target: what it advertises stays
    skipped = R.node_plan(dict(facts, skip=True), {"changed": True, "gpus": target})
    assert not skipped["changed"] and skipped["skipped_by_label"]
    assert not R.node_plan(dict(facts, skip=True), {"changed": False})["skipped_by_label"]


def test_node_plan_forced_changes_and_shares_whole_gpus():
    # gpu_pools: the geometry stays but the device plugin's sharing changes, so the node rolls all the same.
    facts = R.node_facts({"resources": [node(allocatable={"nvidia.com/gpu": "2"})]}, "n1", selected="pool-a")
    whole = [gpu(current="disabled", capable=False), gpu(current="disabled", capable=False)]
    plan = R.node_plan(facts, {"changed": False, "gpus": whole}, force=True, sharing={"replicas": 4, "rename_by_default": True})
    assert plan["changed"] is True and plan["current"] == {"nvidia.com/gpu": 2} and plan["target"] == {"nvidia.com/gpu.shared": 8}
    unforced = R.node_plan(facts, {"changed": False, "gpus": whole}, sharing={"replicas": 4})
    assert unforced["changed"] is False and unforced["target"] == {"nvidia.com/gpu": 2}


def test_pods_matching_equality_selectors_in_order():
    pods = [{"metadata": {"name": "a", "labels": {"app": "dcgm", "tier": "gpu"}}},
            {"metadata": {"name": "b", "labels": {"app": "other"}}},
            {"metadata": {"name": "c", "labels": {"app": "plugin"}}}, {"metadata": {"name": "d"}}, None]
    got = R.pods_matching(pods, ["app=plugin", "tier == gpu", "app=dcgm"])
    assert [p["metadata"]["name"] for p in got] == ["a", "c"]  # each once, though "a" matches two selectors
    assert R.pods_matching(pods, []) == []
    # key==value alone, spaced or not.
    assert [p["metadata"]["name"] for p in R.pods_matching(pods, ["tier==gpu"])] == ["a"]
    assert [p["metadata"]["name"] for p in R.pods_matching(pods, [" app == other "])] == ["b"]
    with pytest.raises(R.RollError, match="^pod selector '=x' is not key=value$"):
        R.pods_matching(pods, ["=x"])
    # The key is what comes before the first '='.
    with pytest.raises(R.RollError, match="^pod selector '=app=x' is not key=value$"):
        R.pods_matching(pods, ["=app=x"])


def test_plan_report_lines_and_records_for_every_kind_of_node():
    plans = [dict(node="gpu-1", selected="all-3g", changed=True, reset_required=True, skipped_by_label=False),
             dict(node="gpu-2", selected="all-3g", changed=False, skipped_by_label=True),
             dict(node="gpu-3", selected="all-3g", changed=False, skipped_by_label=False),
             dict(node="gpu-4", selected="all-1g", changed=True, reset_required=False),
             dict(node="gpu-5", selected="all-1g", changed=True, resume="drained")]
    roll = {"sizes": [1, 1, 1], "order": {"gpu-1": 0, "gpu-4": 1, "gpu-5": 2}}
    report = R.plan_report(plans, roll, "gpuops.io/mig-reconfigure=skip")
    assert report["lines"] == [
        "gpu-1: reconfigure to all-3g (MIG mode change, needs a GPU reset), 1 of 3 in roll order",
        "gpu-2: skipped by gpuops.io/mig-reconfigure=skip (not drained)",
        "gpu-3: already at all-3g, skipped (not drained)",
        "gpu-4: reconfigure to all-1g, 2 of 3 in roll order",
        "gpu-5: finish the interrupted roll (phase drained) to all-1g, 3 of 3 in roll order",
    ]
    assert report["nodes"] == {
        "gpu-1": {"selected": "all-3g", "result": "planned", "drained": False},
        "gpu-2": {"selected": "all-3g", "result": "skipped", "drained": False},
        "gpu-3": {"selected": "all-3g", "result": "skipped", "drained": False},
        "gpu-4": {"selected": "all-1g", "result": "planned", "drained": False},
        "gpu-5": {"selected": "all-1g", "result": "planned", "drained": False},
    }
    assert R.plan_report([], {}) == {"lines": [], "nodes": {}, "gpus": []}


def mig_gpu(index, before, after, changed=True, reset=False, actions=(), model="NVIDIA H100 80GB HBM3"):
    """A GPU of mig_geometry's result: ``before``/``after`` as (current mode, pending mode, mig_devices)."""
    def geometry(g):
        return {"mig_mode": {"current": g[0], "pending": g[1]}, "mig_devices": g[2]}
    return dict(index=index, model=model, changed=changed, reset_required=reset, actions=list(actions),
                before=geometry(before), after=geometry(after))


ON, OFF = "enabled", "disabled"


def test_layout_names_the_largest_instances_first_and_leaves_out_zero_counts():
    assert R.layout({"1g.10gb": 1, "3g.40gb": 2, "2g.20gb": 0}) == "3g.40gb x2, 1g.10gb x1"
    # A compute instance of a 3g GPU instance goes with its GPU instance, after the full-size one.
    assert R.layout({"1c.3g.40gb": 3, "3g.40gb": 1, "2g.20gb": 1}) == "3g.40gb x1, 1c.3g.40gb x3, 2g.20gb x1"
    assert R.layout({"1g.10gb+me": 1, "1g.10gb": 2}) == "1g.10gb x2, 1g.10gb+me x1"
    assert R.layout({"oddname": 1, "1g.5gb": 1}) == "1g.5gb x1, oddname x1"
    assert R.layout({}) == R.layout(None) == R.layout({"1g.5gb": 0}) == "MIG on, no instances"


def test_a_gpus_geometry_before_and_after_in_words():
    gpu = mig_gpu(0, (ON, ON, {"1g.10gb": 7}), (ON, ON, {"3g.40gb": 2}))
    assert (R.gpu_before(gpu), R.gpu_after(gpu)) == ("1g.10gb x7", "3g.40gb x2")
    off = mig_gpu(0, (ON, ON, {"7g.80gb": 1}), (OFF, OFF, {}))
    assert (R.gpu_before(off), R.gpu_after(off)) == ("7g.80gb x1", "MIG off")
    # A disable waiting for its reset: MIG is still current, the target is off.
    assert R.gpu_after(mig_gpu(0, (ON, ON, {}), (ON, OFF, {}), reset=True)) == "MIG off"
    # An enable waiting for its reset: check mode's 'after' has no instances yet; the planned creations say what comes.
    creates = [{"action": "set_mig_mode", "mode": "enabled"}, {"action": "create_gi", "profile": "3g.20gb"},
               {"action": "create_ci", "profile": "3g.20gb"}, {"action": "create_gi", "profile": "3g.20gb"},
               {"action": "create_ci", "profile": "3g.20gb"}]
    pending = mig_gpu(1, (OFF, OFF, {}), (OFF, ON, {}), reset=True, actions=creates)
    assert (R.gpu_before(pending), R.gpu_after(pending)) == ("MIG off", "3g.20gb x2")
    # An earlier run's enable still pending is named in 'before'.
    assert R.gpu_before(mig_gpu(1, (OFF, ON, {}), (OFF, ON, {}))) == "MIG off (MIG on pending)"
    assert R.gpu_before(mig_gpu(1, (ON, OFF, {"1g.5gb": 1}), (ON, OFF, {}))) == "1g.5gb x1 (MIG off pending)"
    assert R.gpu_after({"before": {"mig_mode": {"current": ON, "pending": ON}, "mig_devices": {"1g.5gb": 7}}}) == "1g.5gb x7"
    assert R.gpu_before({}) == R.gpu_after({}) == "MIG off"


@pytest.mark.parametrize("reset,gpu_reset,reboot,needs", [
    (False, True, True, "none"),
    (True, True, False, "reset"),
    (True, True, True, "reset"),   # the reset first; the reboot only where it fails (tasks/reset.yml)
    (True, False, True, "reboot"),
    (True, False, False, "reset"),  # neither allowed: the node fails at its reset, which is what it waits for
])
def test_what_a_gpu_waits_for_follows_the_roles_reset_and_reboot_settings(reset, gpu_reset, reboot, needs):
    assert R.reset_need({"reset_required": reset}, gpu_reset, reboot) == needs


def test_plan_report_lists_only_the_gpus_that_change_on_nodes_that_change():
    changing = [mig_gpu(1, (ON, ON, {"1g.10gb": 7}), (ON, ON, {"3g.40gb": 2})),
                mig_gpu(0, (ON, ON, {"7g.80gb": 1}), (OFF, OFF, {})),
                mig_gpu(2, (ON, ON, {"3g.40gb": 2}), (ON, ON, {"3g.40gb": 2}), changed=False)]
    plans = [dict(node="gpu-1", selected="mix", changed=True, gpus=changing),
             # Skipped by its label: its GPUs would change, but the roll leaves the node alone.
             dict(node="gpu-2", selected="mix", changed=False, skipped_by_label=True, gpus=changing),
             # An interrupted run drained it already: it is not drained again.
             dict(node="gpu-3", selected="mix", changed=True, resume="applied", gpus=changing[:1])]
    out = R.plan_report(plans, {"order": {"gpu-1": 0, "gpu-3": 1}}, "skip", gpu_reset=False, reboot=True)
    assert out["lines"][3:] == [
        "GPUs that change (node GPU: before → after, reset or reboot, drain):",
        "  gpu-1 GPU 0: 7g.80gb x1 → MIG off, no reset, node drained",
        "  gpu-1 GPU 1: 1g.10gb x7 → 3g.40gb x2, no reset, node drained",
        "  gpu-3 GPU 1: 1g.10gb x7 → 3g.40gb x2, no reset, node already drained"]
    assert [(g["node"], g["gpu"], g["drain"]) for g in out["gpus"]] == [("gpu-1", 0, True), ("gpu-1", 1, True),
                                                                        ("gpu-3", 1, False)]
    waits = dict(plans[0], gpus=[mig_gpu(4, (OFF, OFF, {}), (OFF, ON, {}), reset=True, model="NVIDIA A30")])
    out = R.plan_report([waits], {}, "", gpu_reset=False, reboot=True)
    assert out["lines"][-1] == "  gpu-1 GPU 4: MIG off → MIG on, no instances, reboot, node drained"
    assert out["gpus"] == [dict(node="gpu-1", gpu=4, model="NVIDIA A30", before="MIG off", after="MIG on, no instances",
                                needs="reboot", drain=True)]
    # No GPU changes: the node's line alone, no header.
    lines = R.plan_report([dict(node="gpu-9", selected="x", changed=True, gpus=[])], {"order": {"gpu-9": 0}})["lines"]
    assert lines == ["gpu-9: reconfigure to x, 1 of 1 in roll order"]


def test_plan_groups_gathers_invalid_plans_groups_and_the_superseded_rolls_locks():
    old = "gpuops.provision.mig_reconfigure 0000abcd (user=ops controller=c1)"
    lock = {"path": "/run/l", "holder": old + " (user=ops node=gpu-1)", "python": "/usr/bin/python3"}
    rows = [("gpu-1", {"node": "gpu-1", "changed": False}, False, lock),
            ("gpu-2", {"node": "gpu-2", "changed": True}, True, lock),
            ("gpu-3", {"node": "gpu-3", "error": "too big"}, False, {}),
            ("gpu-4", {"node": "gpu-4"}, True, dict(lock, holder="gpuops.provision.mig_reconfigure 0000abcdef (x)")),
            ("gpu-5", {"node": "gpu-5"}, False, dict(lock, holder=old))]
    out = R.plan_groups(rows, old)
    assert out["bad"] == [{"node": "gpu-3", "error": "too big"}]
    assert out["groups"] == [{"host": "gpu-1", "groups": ["mig_reconfigure_unchanged"]},
                             {"host": "gpu-2", "groups": ["mig_reconfigure_changing", "mig_reconfigure_boot"]},
                             {"host": "gpu-3", "groups": ["mig_reconfigure_unchanged"]},
                             {"host": "gpu-4", "groups": ["mig_reconfigure_unchanged", "mig_reconfigure_boot"]},
                             {"host": "gpu-5", "groups": ["mig_reconfigure_unchanged"]}]
    # Only nodes that do not change, and only the superseded roll's own holder (not one whose id merely starts alike).
    assert out["unlock"] == [dict(lock, host="gpu-1"), dict(lock, host="gpu-5", holder=old)]
    assert R.plan_groups(rows, "")["unlock"] == []
    assert R.plan_groups([("gpu-1", {"node": "gpu-1"}, False, None)], old) == {
        "bad": [], "groups": [{"host": "gpu-1", "groups": ["mig_reconfigure_unchanged"]}], "unlock": []}
    assert R.plan_groups([], old) == {"bad": [], "groups": [], "unlock": []}


# ---- the rollback entries and the drain report (mig_reconfigure rollback.yml, node_drain drain.yml) ----------------

def test_previous_geometry_restores_changed_gpus_only():
    gpus = [
        {"index": 0, "changed": True, "before": {"mig_mode": {"current": "enabled"}, "mig_devices": {"1g.10gb": 7}}},
        {"index": 1, "changed": True, "before": {"mig_mode": {"current": "disabled"}, "mig_devices": {}}},
        {"index": 2, "changed": False, "before": {"mig_mode": {"current": "enabled"}, "mig_devices": {"7g.80gb": 1}}},
        {"index": 3, "changed": True, "before": None},
        {"index": 4, "changed": True},
        {"index": 5, "changed": True, "before": {"mig_mode": {"current": "enabled"}, "mig_devices": {"3g.40gb": 2}}},
    ]
    assert R.previous_geometry(gpus) == [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
        {"devices": [1], "mig-enabled": False},
        {"devices": [5], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
    ]
    assert R.previous_geometry([]) == [] and R.previous_geometry(None) == []


def test_roll_summary_says_per_node_what_happened():
    rows = [
        ("h1", {"node": "n1", "changed": True}, {"result": "reconfigured", "cordoned_seconds": 41.5}),
        ("h2", {"node": "n2", "changed": True}, {"result": "failed", "reason": "drain timed out", "cordoned_seconds": None}),
        ("h3", {"node": "n3", "changed": False, "selected": "all-1g.10gb"}, {}),
        ("h4", {"changed": True}, {}),
        ("h5", {}, {}),
        ("h6", {"node": "n6", "changed": False}, {"cordoned_seconds": 0}),
    ]
    assert R.roll_summary(rows, False) == (
        "n1: reconfigured, cordoned 41.5 s; n2: failed (drain timed out); n3: skipped (already at all-1g.10gb, not "
        "drained); h4: not reached; h5: skipped (already at ?, not drained); n6: skipped (already at ?, not drained), "
        "cordoned 0 s")
    assert R.roll_summary([("h4", {"changed": True}, {})], True) == "h4: would reconfigure"
    assert R.roll_summary([], False) == ""


def test_mig_manager_config_file_is_the_kubelets_copy_of_the_named_configmap():
    """pkg/kubelet/kubelet_getters.go getPodVolumeDir; the config volume and CONFIG_FILE as the GPU Operator renders
    them (assets/state-mig-manager/0600_daemonset.yaml, object_controls.go TransformMIGManager)."""
    def reader(node_name="n1", cm="gpuops-mig", env=None, mounts=None, **kw):
        pod = mm_pod(node_name, **kw)
        pod["metadata"]["uid"] = "u-1"
        container = {"env": [{"name": "CONFIG_FILE", "value": "/mig-parted-config/config.yaml"}] if env is None else env}
        if mounts is not None:
            container["volumeMounts"] = mounts
        pod["spec"].update(volumes=[{"name": "host-root", "hostPath": {"path": "/"}},
                                    {"name": "mig-parted-config", "configMap": {"name": cm}}], containers=[container])
        return pod
    want = "/var/lib/kubelet/pods/u-1/volumes/kubernetes.io~configmap/mig-parted-config/config.yaml"
    assert R.mig_manager_config_file([reader()], "n1", "gpuops-mig", "/var/lib/kubelet/") == want
    assert R.mig_manager_config_file([reader(node_name="n2"), reader()], "n1", "gpuops-mig", "/var/lib/kubelet") == want
    mounted = [{"name": "mig-parted-config", "mountPath": "/etc/mig/"}]
    assert R.mig_manager_config_file([reader(env=[{"name": "CONFIG_FILE", "value": "/etc/mig/c.yaml"}], mounts=mounted)],
                                     "n1", "gpuops-mig", "/k") == "/k/pods/u-1/volumes/kubernetes.io~configmap/mig-parted-config/c.yaml"
    for other in (reader(cm="default-mig-parted-config"), reader(phase="Pending"), reader(deleting=True),
                  reader(env=[{"name": "DEFAULT_CONFIG_FILE", "value": "/mig-parted-config/config-default.yaml"}]),
                  reader(env=[{"name": "CONFIG_FILE", "value": "/elsewhere/config.yaml"}])):
        assert R.mig_manager_config_file([other], "n1", "gpuops-mig", "/var/lib/kubelet") == ""
    assert R.mig_manager_config_file(None, "n1", "gpuops-mig", "/var/lib/kubelet") == ""


def _g(index, mig=True, devices=None, capable=True):
    after = {"mig_mode": {"current": "enabled" if mig else "disabled"}, "mig_devices": devices or {}}
    return {"index": index, "mig_capable": capable, "changed": True, "selected": True, "after": after}


def test_single_strategy_refuses_what_the_device_plugin_refuses():
    """internal/rm/device_map.go: one migEnabled value per node, every MIG GPU with devices, one device type."""
    assert R.single_strategy_problem([_g(0, devices={"1g.10gb": 7}), _g(1, devices={"1g.10gb": 7})]) == ""
    assert R.single_strategy_problem([_g(0, mig=False), _g(1, capable=False)]) == ""
    assert R.single_strategy_problem([_g(0, devices={"1g.10gb": 7}), _g(1, mig=False), _g(2, capable=False)]) == (
        "the device plugin's single MIG strategy needs MIG enabled on every GPU of the node or on none, and the plan "
        "leaves GPU 0 with MIG enabled and GPU 1, 2 without")
    assert R.single_strategy_problem([_g(0, devices={"1g.10gb": 0}), _g(1, devices={"1g.10gb": 7})]) == (
        "the device plugin's single MIG strategy refuses a MIG-enabled GPU without MIG devices (GPU 0)")
    assert R.single_strategy_problem([_g(0, devices={"1g.10gb": 2, "2g.20gb": 1})]) == (
        "the device plugin's single MIG strategy serves one MIG device type per node, and the plan leaves 1g.10gb, 2g.20gb")
    facts = R.node_facts({"resources": [node()]}, "n1", selected="x")
    mixed = {"changed": True, "gpus": [_g(0, devices={"1g.10gb": 2, "2g.20gb": 1})]}
    assert R.node_plan(facts, mixed, strategy="single")["error"].startswith("the device plugin's single MIG strategy serves")
    assert R.node_plan(facts, mixed, strategy="mixed")["error"] == ""
    assert R.node_plan(facts, dict(mixed, changed=False), strategy="single")["error"] == ""  # not rolled: not judged


def test_single_strategy_serves_compute_instance_profiles():
    """rm.go AddDefaultResourcesToConfig: single adds AddMIGResource("*", "gpu"), which matches 1c.* profiles."""
    facts = R.node_facts({"resources": [node()]}, "n1", selected="x")
    ci = {"changed": True, "gpus": [_g(0, devices={"1c.3g.40gb": 3})]}
    plan = R.node_plan(facts, ci, strategy="single")
    assert plan["error"] == "" and plan["target"] == {"nvidia.com/gpu": 3}
    assert R.node_plan(facts, ci, strategy="mixed")["error"].startswith("compute-instance profile(s) 1c.3g.40gb")
    assert R.expected_resources(ci["gpus"], "single") == {"nvidia.com/gpu": 3}
    assert R.expected_resources(ci["gpus"], "mixed") == {}


def test_node_facts_resume_only_this_rolls_phase():
    # A phase another roll (the health roll, a driver roll) left on the node is not mig_reconfigure's to finish.
    def node(roll, phase):
        return {"resources": [{"metadata": {"name": "n1", "labels": {"nvidia.com/mig.config": "all-1g"},
                                            "annotations": {"gpuops.provision/roll": roll, "gpuops.provision/roll-phase": phase,
                                                            "gpuops.provision/roll-target": "all-1g"}},
                               "spec": {"unschedulable": True}}]}
    assert R.node_facts(node("mig_reconfigure", "drained"), "n1")["resume"] == "drained"
    assert R.node_facts(node("gpu_health", "drained"), "n1")["resume"] == ""
    assert R.node_facts(node("mig_reconfigure", "released"), "n1")["resume"] == ""
