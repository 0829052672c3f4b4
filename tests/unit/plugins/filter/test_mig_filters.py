# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/filter/mig.py (mig_roll_summary) and the mig_reconfigure role's own filters
(plugins/plugin_utils/_role_filters/mig.py, called through gpuops.provision.internal)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.filter import mig
from ansible_collections.gpuops.provision.plugins.plugin_utils._role_filters import mig as role_mig


def test_filters_are_registered_and_wrap_the_pure_code():
    assert sorted(mig.FilterModule().filters()) == ["mig_roll_summary"]
    f = role_mig.filters()
    assert sorted(f) == ["mig_advertised_resources", "mig_expected_resources", "mig_invalid_plans_message",
                         "mig_manager_config_file", "mig_node_facts", "mig_node_plan", "mig_operand_labels",
                         "mig_plan_groups", "mig_plan_report", "mig_previous_geometry", "mig_roll_waves"]
    plans = [{"node": "n1", "selected": "all-1g", "changed": True}, {"node": "n2", "selected": "all-1g"}]
    assert f["mig_plan_report"](plans, {"sizes": [1], "order": {"n1": 0}}, "skip=yes")["lines"] == [
        "n1: reconfigure to all-1g, 1 of 1 in roll order", "n2: already at all-1g, skipped (not drained)"]
    gpus = [{"selected": True, "mig_capable": True,
             "after": {"mig_mode": {"current": "enabled"}, "mig_devices": {"1g.10gb": 2, "1c.3g.40gb": 1}}}]
    assert f["mig_expected_resources"](gpus, "mixed", "yes") == {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-1c.3g.40gb": 1}
    assert f["mig_operand_labels"]({}, ["dcgm"], "restore") == {"nvidia.com/gpu.deploy.dcgm": "true"}
    nodes = {"resources": [{"metadata": {"name": "n2", "labels": {"nvidia.com/mig.config": "other"}}},
                           {"metadata": {"name": "n1", "labels": {"nvidia.com/mig.config": "all-1g"}}}]}
    facts = f["mig_node_facts"](nodes, "n1")
    assert facts["selected"] == "all-1g" and facts["plannable"] and facts["unavailable"]  # no Ready condition
    assert f["mig_node_plan"](facts, {"changed": True, "gpus": []})["changed"] is True
    plans = [{"node": "n1", "changed": True}, {"node": "n2", "changed": True}]
    assert f["mig_roll_waves"](plans, max_parallel=0, max_failures="50%")["max_failures"] == 1


class Walked(dict):
    """A Node that records whether a filter read it."""
    read: list = []

    def get(self, *args):
        Walked.read.append(dict.get(self, "metadata", {}).get("name"))
        return dict.get(self, *args)


def test_node_facts_reads_only_its_own_node_and_pods_through_node_infos_index():
    from ansible_collections.gpuops.provision.plugins.module_utils._k8s import node_roll
    nodes = [Walked(metadata={"name": "n%d" % i, "labels": {"nvidia.com/mig.config": "c%d" % i}}) for i in range(50)]
    pods = [Walked(metadata={"name": "mm-%d" % i, "labels": {"app": "nvidia-mig-manager"}},
                   spec={"nodeName": "n%d" % i}, status={"phase": "Running"}) for i in range(50)]
    result = {"resources": nodes, "pods": pods, "index": node_roll.positions(nodes, pods)}
    Walked.read = []
    facts = role_mig.mig_node_facts(result, "n7")
    assert facts["selected"] == "c7" and facts["mig_manager_pod"] == "mm-7"
    assert set(Walked.read) <= {"n7", "mm-7"}  # the other 49 nodes and pods were never read
    assert role_mig.mig_node_facts(result, "gone")["found"] is False
    # Without the index (kubernetes.core.k8s_info's result), the same facts by walking every node.
    Walked.read = []
    assert role_mig.mig_node_facts({"resources": nodes}, "n7", mig_manager_pods=pods) == facts
    assert len(set(Walked.read)) == 100
    # Pods given explicitly win over node_info's, also an empty list.
    assert role_mig.mig_node_facts(result, "n7", mig_manager_pods=[])["mig_manager_pod"] == ""


def test_plan_groups_reads_each_hosts_plan_facts():
    hostvars = {"gpu-1": {"__mig_reconfigure_plan": {"node": "gpu-1", "changed": True},
                          "__mig_reconfigure_boot_wanted": "True"},
                "gpu-2": {"__mig_reconfigure_plan": {"node": "gpu-2", "error": "bad"},
                          "__mig_reconfigure_boot_wanted": False,
                          "__mig_reconfigure_stale_lock": {"path": "/l", "holder": "old (x)", "python": "/p"}},
                "gpu-3": {},
                # Read as the group_by it replaces read it (``| bool``): "yes" is wanted too.
                "gpu-4": {"__mig_reconfigure_plan": {"node": "gpu-4"}, "__mig_reconfigure_boot_wanted": "yes"}}
    out = role_mig.mig_plan_groups(["gpu-1", "gpu-2", "gpu-3", "gpu-4", "missing"], hostvars, superseded="old")
    assert out == {"bad": [{"node": "gpu-2", "error": "bad"}],
                   "groups": [{"host": "gpu-1", "groups": ["mig_reconfigure_changing", "mig_reconfigure_boot"]},
                              {"host": "gpu-2", "groups": ["mig_reconfigure_unchanged"]},
                              {"host": "gpu-4", "groups": ["mig_reconfigure_unchanged", "mig_reconfigure_boot"]}],
                   "unlock": [{"host": "gpu-2", "path": "/l", "holder": "old (x)", "python": "/p"}]}


def test_bad_input_is_a_filter_error_naming_the_filter():
    with pytest.raises(AnsibleFilterError, match="gpuops.provision.mig_roll_waves: max_failures must not be negative"):
        role_mig.mig_roll_waves([{"node": "n1", "changed": True}], max_failures=-2)
    with pytest.raises(AnsibleFilterError, match="gpuops.provision.mig_operand_labels: phase must be pause or restore"):
        role_mig.mig_operand_labels({}, ["dcgm"], "later")
    with pytest.raises(AnsibleFilterError, match="gpuops.provision.mig_expected_resources: .*not a MIG profile name"):
        role_mig.mig_expected_resources([{"after": {"mig_mode": {"current": "enabled"}, "mig_devices": {"bogus": 1}}}])
    with pytest.raises(AnsibleFilterError, match="gpuops.provision.mig_node_facts: backend must be one of"):
        role_mig.mig_node_facts({}, "n1", backend="operator")


def test_roll_waves_filter_reads_the_plan_records():
    plans = [{"node": "a", "changed": True, "unavailable": False, "current": {"nvidia.com/mig-3g.40gb": 2}, "target": {}},
             {"node": "b", "changed": True, "unavailable": False, "current": {"nvidia.com/mig-3g.40gb": 2}, "target": {}},
             {"node": "c", "changed": False, "unavailable": True, "current": {}, "target": {}}]
    roll = role_mig.mig_roll_waves(plans, max_parallel=0, max_unavailable=2)
    assert roll["waves"] == [["a"], ["b"]] and roll["unavailable_before"] == ["c"]
    with pytest.raises(AnsibleFilterError, match="gpuops.provision.mig_roll_waves: node a cannot be drained even alone"):
        role_mig.mig_roll_waves(plans, floors={"nvidia.com/mig-3g.40gb": 3})
