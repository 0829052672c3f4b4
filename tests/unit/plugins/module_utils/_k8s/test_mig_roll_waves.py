# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roll's schedule (plugins/module_utils/_k8s/mig_roll.py roll_waves, issue 16 point 2): waves within max_parallel,
max_unavailable (counting nodes already unavailable, as k8s-operator-libs GetUpgradesAvailable does) and capacity
floors, or a refusal before any node is drained."""

from __future__ import annotations

import re

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._k8s import mig_roll as R

M3 = "nvidia.com/mig-3g.40gb"
M1 = "nvidia.com/mig-1g.10gb"


def node(name, changing=True, unavailable=False, current=None, target=None):
    return dict(name=name, changing=changing, unavailable=unavailable,
                current={M3: 2} if current is None else current, target={M1: 7} if target is None else target)


def fleet(n, changing=()):
    return [node("n%d" % i, changing=i in changing) for i in range(n)]


@pytest.mark.parametrize("value, total, count", [
    (1, 20, 1), ("3", 20, 3), ("25%", 20, 5), ("26%", 20, 6), ("1%", 20, 1), ("0%", 20, 0), ("100%", 7, 7),
    (0, 5, 0), ("10%", 0, 0), ("50%", 202, 101), ("100%", 101, 101),
])
def test_scaled_rounds_a_percentage_up_as_kubernetes_does(value, total, count):
    assert R.scaled(value, total, "x") == count


@pytest.mark.parametrize("value, msg", [
    ("-1", "x must not be negative, got '-1'"),
    ("-5%", "x must be a count or a percentage such as 25%, got '-5%'"),
    ("a", "x must be a count or a percentage such as 25%, got 'a'"),
    ("5%%", "x must be a count or a percentage such as 25%, got '5%%'"),
    (True, "x must be a count or a percentage, got True"),
    ("1.5", "x must be a count or a percentage such as 25%, got '1.5'"),
    ("", "x must be a count or a percentage such as 25%, got ''"),
])
def test_scaled_refuses_what_is_not_a_count_or_a_percentage(value, msg):
    with pytest.raises(R.RollError, match="^%s$" % re.escape(msg)):
        R.scaled(value, 10, "x")


def test_serial_one_is_one_node_per_wave_in_order_and_unchanged_nodes_never_roll():
    plan = R.roll_waves(fleet(6, changing=(1, 2, 4)))
    # The defaults: one node at a time, every node may be unavailable, no failure tolerated, no floor.
    assert plan == {"waves": [["n1"], ["n2"], ["n4"]], "sizes": [1, 1, 1], "max_parallel": 1, "max_unavailable": 6,
                    "max_failures": 0, "unavailable_before": [], "min_capacity": {}, "wave_of": {"n1": 0, "n2": 1, "n4": 2},
                    "order": {"n1": 0, "n2": 1, "n4": 2}}
    assert R.roll_waves(fleet(6, changing=(1, 2, 4)), max_parallel=None)["sizes"] == [1, 1, 1]


def test_max_parallel_percentage_of_the_targeted_nodes():
    plan = R.roll_waves(fleet(4, changing=range(4)), max_parallel="50%")
    assert plan["max_parallel"] == 2 and plan["waves"] == [["n0", "n1"], ["n2", "n3"]]


def test_max_unavailable_percentage_counts_nodes_already_cordoned():
    nodes = fleet(20, changing=(0, 1, 2, 3, 4))
    nodes[10]["unavailable"] = True                      # an operator's cordon elsewhere in the pool
    plan = R.roll_waves(nodes, max_parallel=0, max_unavailable="25%")   # 25% of 20 = 5, one already down
    assert plan["max_unavailable"] == 5 and plan["unavailable_before"] == ["n10"]
    assert plan["sizes"] == [4, 1] and plan["waves"][0] == ["n0", "n1", "n2", "n3"]


def test_max_parallel_caps_the_wave_below_the_unavailability_budget():
    plan = R.roll_waves(fleet(20, changing=range(5)), max_parallel=2, max_unavailable="50%")
    assert plan["sizes"] == [2, 2, 1] and plan["max_parallel"] == 2


def test_a_cordoned_node_in_the_roll_does_not_count_twice():
    nodes = fleet(4, changing=(0, 1))
    nodes[0]["unavailable"] = True
    plan = R.roll_waves(nodes, max_parallel=0, max_unavailable=2)
    assert plan["waves"] == [["n0", "n1"]]


def test_no_room_at_all_is_refused_naming_the_node_and_the_budget():
    nodes = fleet(4, changing=(0,))
    nodes[3]["unavailable"] = True
    with pytest.raises(R.RollError, match=r"node n0 cannot be drained even alone \(max_unavailable 1: 2 node\(s\) "
                                          r"would be unavailable \(n0, n3\)\); no node is drained"):
        R.roll_waves(nodes, max_unavailable=1)


def test_capacity_floor_sizes_the_wave_and_reports_the_lowest_capacity():
    # n0..n3 hold two 3g.40gb each and change to 1g.10gb; n4 and n5 keep four each: 16 now, 8 after the roll.
    nodes = fleet(6, changing=(0, 1, 2, 3))
    nodes[4]["current"] = nodes[5]["current"] = {M3: 4}
    plan = R.roll_waves(nodes, max_parallel=0, floors={M3: 8})
    assert plan["waves"] == [["n0", "n1", "n2", "n3"]] and plan["min_capacity"] == {M3: 8}
    plan = R.roll_waves(nodes, max_parallel=0, floors={M3: 8, M1: 0})
    assert plan["min_capacity"] == {M3: 8, M1: 0}


def test_capacity_floor_that_only_part_of_the_roll_can_hold_is_refused_before_the_first_cordon():
    nodes = fleet(6, changing=(0, 1, 2, 3))
    nodes[4]["current"] = nodes[5]["current"] = {M3: 4}
    with pytest.raises(R.RollError, match=r"^node n3 cannot be drained even alone \(capacity floor: "
                                          r"nvidia.com/mig-3g.40gb would drop to 8 schedulable, floor 10\)"):
        R.roll_waves(nodes, max_parallel=0, floors={M3: 10})


def test_floor_counts_the_new_geometry_of_nodes_already_done():
    # a, b and c change *to* four 3g.40gb each: once done they add capacity, so c can go after a and b.
    nodes = [node("a", current={M3: 0}, target={M3: 4}), node("b", current={M3: 2}, target={M3: 4}),
             node("c", current={M3: 2}, target={M3: 4}), node("d", changing=False, current={M3: 2})]
    plan = R.roll_waves(nodes, max_parallel=0, floors={M3: 4})
    # a and b at once leave c's 2 and d's 2 (4); c then leaves a's 4, b's 4 and d's 2.
    assert plan["waves"] == [["a", "b"], ["c"]] and plan["min_capacity"] == {M3: 4}


def test_floors_name_every_resource_short_and_count_an_empty_pool_as_zero():
    with pytest.raises(R.RollError, match=r"^the pool is already below its capacity floor before the roll: "
                                          r"nvidia.com/mig-1g.10gb has 0 schedulable, floor 1; "
                                          r"nvidia.com/mig-3g.40gb has 2 schedulable, floor 9; no node is drained$"):
        R.roll_waves([node("a", changing=False)], floors={M3: 9, M1: 1})
    # Every node cordoned: nothing schedulable at all.
    with pytest.raises(R.RollError, match=r"^the pool is already below its capacity floor before the roll: "
                                          r"nvidia.com/mig-3g.40gb has 0 schedulable, floor 1; no node is drained$"):
        R.roll_waves([node("a", unavailable=True)], floors={M3: 1})
    both = [node("a", current={M3: 2, M1: 1}), node("b", changing=False, current={M3: 2, M1: 1})]
    with pytest.raises(R.RollError, match=r"^node a cannot be drained even alone \(capacity floor: "
                                          r"nvidia.com/mig-1g.10gb would drop to 1 schedulable, floor 2; "
                                          r"nvidia.com/mig-3g.40gb would drop to 2 schedulable, floor 3\); no node is drained$"):
        R.roll_waves(both, floors={M3: 3, M1: 2})
    # The only node drained: nothing left.
    with pytest.raises(R.RollError, match=r"^node a cannot be drained even alone \(capacity floor: "
                                          r"nvidia.com/mig-3g.40gb would drop to 0 schedulable, floor 1\); no node is drained$"):
        R.roll_waves([node("a")], floors={M3: 1})


@pytest.mark.parametrize("nodes, floors, words", [
    ([node("a", changing=False, current={M3: 1})], {M3: 2},
     "already below its capacity floor before the roll: nvidia.com/mig-3g.40gb has 1 schedulable, floor 2"),
    ([node("a", current={M3: 4}, target={}), node("b", changing=False, current={M3: 4})], {M3: 5},
     "node a cannot be drained even alone"),
    ([node("a", current={M3: 2}, target={M3: 0}), node("b", changing=False, current={M3: 2})], {M3: 3},
     "node a cannot be drained even alone (capacity floor: nvidia.com/mig-3g.40gb would drop to 2 schedulable, floor 3)"),
])
def test_floors_that_cannot_hold_are_refused(nodes, floors, words):
    with pytest.raises(R.RollError, match="no node is drained") as err:
        R.roll_waves(nodes, floors=floors)
    assert words in str(err.value)


def test_unavailable_nodes_do_not_count_towards_the_floor():
    nodes = [node("a", current={M3: 4}), node("b", changing=False, unavailable=True, current={M3: 4}),
             node("c", changing=False, current={M3: 4})]
    with pytest.raises(R.RollError, match="would drop to 4 schedulable, floor 5"):
        R.roll_waves(nodes, floors={M3: 5})


@pytest.mark.parametrize("kwargs, words", [
    ({"floors": {M3: -1}}, "^capacity floor of nvidia.com/mig-3g.40gb must be a count of 0 or more, got -1$"),
    ({"floors": {M3: True}}, "must be a count of 0 or more"),
    ({"max_parallel": "x"}, "max_parallel must be a count or a percentage"),
    ({"max_unavailable": "-1"}, "max_unavailable must"),
])
def test_bad_budget_input_is_refused(kwargs, words):
    with pytest.raises(R.RollError, match=words):
        R.roll_waves(fleet(3, changing=(0,)), **kwargs)


def test_a_node_listed_twice_is_refused():
    with pytest.raises(R.RollError, match="^nodes listed twice: a$"):
        R.roll_waves([node("a"), node("a")])
    with pytest.raises(R.RollError, match="^nodes listed twice: a, b$"):
        R.roll_waves([node("b"), node("a"), node("c"), node("a"), node("b")])


def test_empty_selection_rolls_nothing():
    assert R.roll_waves([])["waves"] == [] and R.roll_waves(fleet(3))["waves"] == []


def test_an_empty_max_unavailable_is_no_limit_and_zero_lets_no_node_go():
    # The AWX survey sends "" for an unanswered question; 0 is a real budget of none.
    assert R.roll_waves(fleet(3, changing=(0, 1)), max_parallel=0, max_unavailable="")["waves"] == [["n0", "n1"]]
    with pytest.raises(R.RollError, match=r"node n0 cannot be drained even alone \(max_unavailable 0"):
        R.roll_waves(fleet(3, changing=(0,)), max_unavailable=0)


# ---- the failure budget and the wait for jobs (issue 16 point 2) ----------------------------------------------------

@pytest.mark.parametrize("value, changing, count", [
    (0, 5, 0), (None, 5, 0), ("", 5, 0), (2, 5, 2), ("2", 5, 2), ("20%", 5, 1), ("39%", 5, 1), ("40%", 5, 2),
    ("10%", 5, 0), ("100%", 5, 5),
])
def test_the_failure_budget_is_a_count_or_a_percentage_rounded_down(value, changing, count):
    plan = R.roll_waves(fleet(8, changing=range(changing)), max_parallel=0, max_failures=value)
    assert plan["max_failures"] == count


def test_a_bad_failure_budget_is_refused_naming_it():
    with pytest.raises(R.RollError, match="max_failures must be a count or a percentage such as 25%, got 'some'"):
        R.roll_waves(fleet(3, changing=[0]), max_failures="some")
    with pytest.raises(R.RollError, match="max_failures must not be negative, got -1"):
        R.roll_waves(fleet(3, changing=[0]), max_failures=-1)


def result(name, outcome):
    return {"node": name, "result": outcome}


def test_the_budget_is_spent_only_when_more_nodes_failed_than_it_allows():
    ok = [result("a", "success"), result("b", "failed")]
    assert R.budget_spent(ok, 1) == {"spent": False, "failed": ["b"], "msg": ""}
    spent = R.budget_spent(ok + [result("c", "failed")], 1)
    assert spent["spent"] is True and spent["failed"] == ["b", "c"]
    assert spent["msg"] == ("the roll stopped: 2 node(s) failed (b, c), more than its failure budget of 1; "
                            "this node was not started")
    assert R.budget_spent([result("b", "failed")], 0)["spent"] is True
    assert R.budget_spent([], 0) == {"spent": False, "failed": [], "msg": ""}
    # No budget given is a budget of none.
    assert R.budget_spent([result("b", "failed")], None) == {
        "spent": True, "failed": ["b"],
        "msg": "the roll stopped: 1 node(s) failed (b), more than its failure budget of 0; this node was not started"}
    # Nodes not started count for nothing; neither do missing records.
    assert R.budget_spent([result("d", "not_started"), None, {}], 0)["spent"] is False


def pod(name, phase, ns="ml"):
    return {"metadata": {"name": name, "namespace": ns}, "status": {"phase": phase} if phase else {}}


def test_running_pods_are_the_running_and_pending_ones_as_upstream_counts_them():
    pods = [pod("train-2", "Running"), pod("train-1", "Pending", ns="ai"), pod("done", "Succeeded"),
            pod("crashed", "Failed"), pod("unknown", "Unknown"), pod("new", None)]
    assert R.running_pods(pods) == ["ai/train-1", "ml/train-2"]
    assert R.running_pods([]) == [] and R.running_pods(None) == []
