# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""node_roll's wait for a slot (plugins/module_utils/_node_roll_apply.py NodeRoll.take_slot) against a fake roll
Lease: what it reads while it waits."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils import _node_roll as R
from ansible_collections.gpuops.provision.plugins.module_utils import _node_roll_apply as A


class FakeLease:
    """The roll's Lease: the queue a, b, c; ``a`` passes its turn after ``turns`` reads."""

    where = "kube-system/roll"

    def __init__(self, turns):
        self.turns, self.reads, self.writes = turns, 0, []
        self.notes = {R.LEASE_NODES: "a,b,c", R.LEASE_QUEUE: "a,b,c", R.LEASE_PASSED: "", R.LEASE_SLOTS: ""}

    def read(self):
        self.reads += 1
        if self.reads > self.turns:
            self.notes[R.LEASE_PASSED] = "a"
        return {"metadata": {"resourceVersion": str(self.reads), "annotations": dict(self.notes)}}

    def write(self, lease):
        self.writes.append(lease)
        self.notes = dict(lease["metadata"]["annotations"])
        return lease


def ready(name):
    return {"metadata": {"name": name, "annotations": {}}, "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {}}}


@pytest.fixture(name="listed")
def fixture_listed(monkeypatch):
    calls = []

    def list_nodes(api, timeout, page=500, cached=False):
        calls.append(cached)
        return [ready(n) for n in "abc"]

    monkeypatch.setattr(A, "list_nodes", list_nodes)
    monkeypatch.setattr(A, "SLOT_POLL", 0.0)
    return calls


LIMITS = {"max_parallel": 0, "max_unavailable": None, "max_failures": 0, "floors": {}, "turn_timeout": 300}


def test_a_node_whose_turn_has_not_come_reads_the_lease_not_the_nodes(listed):
    lease = FakeLease(turns=5)
    roll = A.NodeRoll(api=None, name="b", roll="mig_reconfigure", timeout=5)
    decision = roll.take_slot(lease, LIMITS, wait=60, check=False)
    assert decision["take"] is True
    # Five looks at the Lease with "a" ahead, then one LIST of the nodes once nothing was ahead of "b".
    assert listed == [True]
    assert R.lease_list(lease.writes[-1], R.LEASE_SLOTS) == ["b"]
    assert R.lease_list(lease.writes[-1], R.LEASE_PASSED) == ["a", "b"]


def test_check_mode_and_a_node_without_a_lease_decide_from_the_nodes_at_once(listed):
    roll = A.NodeRoll(api=None, name="b", roll="mig_reconfigure", timeout=5)
    assert roll.take_slot(FakeLease(turns=5), LIMITS, wait=60, check=True)["reasons"] == ["its turn comes after a"]
    assert roll.take_slot(None, LIMITS, wait=60, check=False)["take"] is True
    assert listed == [True, True]


def test_a_queued_node_that_waits_too_long_says_for_whom(listed):
    roll = A.NodeRoll(api=None, name="c", roll="mig_reconfigure", timeout=5)
    with pytest.raises(A._k8s.NodeStepError, match="waited 0 s for a slot in the roll: its turn comes after a, b"):
        roll.take_slot(FakeLease(turns=10 ** 6), LIMITS, wait=0, check=False)
    assert listed == []
