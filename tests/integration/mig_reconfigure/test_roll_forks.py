# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""More changing nodes than Ansible forks (issue 45, found by the 1,000-node bench): the nodes waiting for a slot
must not hold every worker while the node that holds the slot needs one for its next step.

With the free strategy a node waiting in node_roll's slot wait keeps its worker; the worker that the slot holder
gives back after its cordon and drain is handed round-robin to the next host (ansible-core
lib/ansible/plugins/strategy/free.py StrategyModule.run), which soon waits too. With forks 2 and three nodes
waiting behind the first, the holder never gets a worker again: the waiters time out and the holder stays cordoned.
The bench's 1,000-node run stopped so with forks 20: 27 nodes cordoned and drained, 20 workers waiting, nothing
released for five minutes."""

from __future__ import annotations

import os
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mig_reconfigure_lab import H100_BALANCED, THREE_1G, Fleet, failures, gpu  # noqa: E402  pylint: disable=import-error,wrong-import-position
from requestlog import unschedulable  # noqa: E402  pylint: disable=import-error,wrong-import-position

pytestmark = pytest.mark.slow

NAMES = ["node-1", "node-2", "node-3", "node-4"]
SLOT_TIMEOUT = 300


@pytest.mark.long
def test_nodes_waiting_for_a_slot_leave_a_worker_to_the_node_that_holds_it(tmp_path):
    fleet = Fleet(tmp_path, {n: {"gpus": [gpu(instances=H100_BALANCED)]} for n in NAMES})
    with fleet.start():
        t0 = time.monotonic()
        # slot_timeout well under what a deadlock lasts, turn_timeout above it: a waiter may not jump the queue.
        # 300 s: the whole test takes 118-152 s on a 2-core machine, the roll most of it, and the roll took 303 s on
        # one three times as loaded (a bound of 150 s failed it there); a deadlock still lasts past 300 s.
        rc, out = fleet.run(forks=2, timeout=900, extra_vars={
            "mig_reconfigure_config": THREE_1G, "mig_reconfigure_selected": "three-1g",
            "mig_reconfigure_max_parallel": 1, "mig_reconfigure_slot_timeout": SLOT_TIMEOUT,
            "mig_reconfigure_turn_timeout": 900})
        took = time.monotonic() - t0
        assert rc == 0, failures(out)
        spans = []
        for name in NAMES:
            node = fleet.node(name)
            assert node["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success", name
            assert not node["spec"].get("unschedulable"), name
            marks = [(r["t"], unschedulable(r)) for r in fleet.node_patches(name) if unschedulable(r) is not None]
            assert [m for _t, m in marks] == [True, False], (name, marks)
            spans.append((marks[0][0], marks[1][0], name))
        # One node at a time, in the roll's queue order (the inventory's).
        spans.sort()
        assert [s[2] for s in spans] == NAMES
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans
        assert took < SLOT_TIMEOUT, "the roll took %.0f s: a waiter held the holder's worker" % took
