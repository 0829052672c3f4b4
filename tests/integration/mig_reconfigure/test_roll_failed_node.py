# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node the roll failed, as the next node's turn and the next run see it (issue 45 defects 2 and 3), through
playbooks/mig_reconfigure.yml only, so that the same test runs on the roll before and after its rework.

- The roll's own cordon, left on a failed node, is the roll's to lift once a later run finishes the node; it was
  taken for an operator's (no mark of the roll's) and the node stayed unschedulable after success.
- A failed node left cordoned still holds its place in the budget: k8s-operator-libs' GetUpgradesAvailable
  (pkg/upgrade/common_manager.go) recounts the unavailable nodes, failed ones included, before it takes the next one.
  Waves planned once took the next node anyway (2 unavailable for a max_unavailable of 1, the floor broken)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mig_reconfigure_lab import H100_BALANCED, THREE_1G, Fleet, failures, gpu  # noqa: E402  pylint: disable=import-error,wrong-import-position
from requestlog import mig_allocatable, unschedulable  # noqa: E402  pylint: disable=import-error,wrong-import-position

pytestmark = pytest.mark.slow

STATE = "nvidia.com/mig.config.state"
M1G = "nvidia.com/mig-1g.10gb"
# The first GPU instance the apply creates fails, once: the node's geometry is restored, the node fails and stays
# cordoned (its GPUs were touched).
FAULT = {"fail_gi_create_after": 0, "fail_gi_create_error": "INSUFFICIENT_RESOURCES", "fail_gi_create_times": 1}


def balanced(faults=None):
    node = {"gpus": [gpu(instances=H100_BALANCED)]}
    if faults:
        node["faults"] = dict(faults)
    return node


def cordons(fleet, name):
    return [r for r in fleet.node_patches(name) if unschedulable(r) is True]


@pytest.mark.long
def test_a_later_run_that_finishes_a_failed_node_lifts_the_rolls_own_cordon(tmp_path):
    fleet = Fleet(tmp_path, {"node-1": balanced(FAULT)})
    run = {"mig_reconfigure_config": THREE_1G, "mig_reconfigure_selected": "three-1g"}
    with fleet.start():
        rc, out = fleet.run(extra_vars=run)
        assert rc != 0 and "stage apply" in " ".join(failures(out)["node-1"]), failures(out)
        node = fleet.node("node-1")
        assert node["spec"]["unschedulable"] is True and node["metadata"]["labels"][STATE] == "failed"
        rc, out = fleet.run(extra_vars=run)
        assert rc == 0, failures(out)
        node = fleet.node("node-1")
        assert node["metadata"]["labels"][STATE] == "success"
        assert not node["spec"].get("unschedulable"), "the roll's own cordon was left on node-1 after it succeeded"


def test_a_failed_node_left_cordoned_holds_its_slot_so_the_next_node_is_not_taken(tmp_path):
    # The case: 4 nodes, max_unavailable 1, max_failures 1, a floor of 6 where each node advertises 2.
    names = ["node-1", "node-2", "node-3", "node-4"]
    fleet = Fleet(tmp_path, {n: balanced(FAULT if n == "node-1" else None) for n in names})
    with fleet.start() as lab:
        lab.wait_for(lambda: sum(mig_allocatable(fleet.node(n)).get(M1G, 0) for n in names) == 8,
                     timeout=60, what="the device plugin to advertise the 1g.10gb instances")
        rc, out = fleet.run(extra_vars={"mig_reconfigure_config": THREE_1G, "mig_reconfigure_selected": "three-1g",
                                        "mig_reconfigure_max_unavailable": 1, "mig_reconfigure_max_failures": 1,
                                        "mig_reconfigure_capacity_floor": {M1G: 6}})
        assert rc != 0 and "stage apply" in " ".join(failures(out)["node-1"]), failures(out)
        assert fleet.node("node-1")["spec"]["unschedulable"] is True
        taken = [n for n in names[1:] if cordons(fleet, n)]
        assert taken == [], "cordoned while the failed node-1 was still cordoned: %s" % taken
        for name in names[1:]:
            assert fleet.node(name)["metadata"]["labels"].get(STATE) != "success", name
