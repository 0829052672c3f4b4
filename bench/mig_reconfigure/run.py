# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark: playbooks/mig_reconfigure.yml on a simulated fleet where only some nodes need a MIG change, against the
naive rollout that drains every node (bench/mig_reconfigure/naive.yml: DeepOps' MIG playbook / label-everything),
both measured in this run on identical fresh fleets (local hosts + gpusim + the Kubernetes stand-in).

Printed: wall time and number of nodes drained (cordoned) for each, and the ratios.

Usage: .venv/bin/python bench/mig_reconfigure/run.py [--nodes 20] [--changed 5] [--serial 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration", "mig_reconfigure"))
from mig_reconfigure_lab import H100_3G_X2, H100_BALANCED, Fleet, failures, gpu  # noqa: E402  pylint: disable=import-error,wrong-import-position

NAIVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "naive.yml")


def fleet_nodes(total, changed):
    # Changed nodes spread over the fleet, the rest already at the target.
    step = max(total // max(changed, 1), 1)
    picks = set(range(0, total, step)[:changed])
    return {"gpu-%02d" % i: {"gpus": [gpu(instances=H100_3G_X2 if i in picks else H100_BALANCED)]} for i in range(total)}


def measure(base, nodes, serial, playbook=None):
    fleet = Fleet(base, nodes, label_selected=False, group_vars={"mig_reconfigure_drain_grace_period": 0})
    with fleet.start() as lab:
        t0 = time.monotonic()
        kwargs = {"playbook": playbook} if playbook else {}
        rc, out = fleet.run(extra_vars={"mig_reconfigure_serial": serial}, timeout=3600, **kwargs)
        wall = time.monotonic() - t0
        if rc != 0:
            raise SystemExit("run failed: %s" % failures(out))
        drained = sorted(n for n in nodes if lab.cordons(n) > 0)
        wrong = [n for n in nodes if fleet.state(n)["gpus"][0].get("gpu_instances") and
                 sorted(g["profile_id"] for g in fleet.state(n)["gpus"][0]["gpu_instances"]) != [9, 14, 19, 19]]
        if wrong:
            raise SystemExit("nodes not at the target after the run: %s" % wrong)
        return wall, drained


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--changed", type=int, default=5)
    ap.add_argument("--serial", default="1")
    args = ap.parse_args()
    nodes = fleet_nodes(args.nodes, args.changed)
    need = sorted(n for n, s in nodes.items() if len(s["gpus"][0]["gpu_instances"]) == 2)
    with tempfile.TemporaryDirectory(prefix="bench-migrc-") as tmp:
        ours, ours_drained = measure(os.path.join(tmp, "ours"), nodes, args.serial)
        naive, naive_drained = measure(os.path.join(tmp, "naive"), nodes, args.serial, NAIVE)
    print("fleet: %d nodes, %d need a change (%s), serial %s" % (args.nodes, len(need), ", ".join(need), args.serial))
    print("mig_reconfigure.yml : %7.1f s wall, %2d nodes drained %s" % (ours, len(ours_drained), "(exactly the changed ones)"
                                                                          if ours_drained == need else "(MISMATCH: %s)" % ours_drained))
    print("naive (drain all)   : %7.1f s wall, %2d nodes drained" % (naive, len(naive_drained)))
    print("ratio naive/ours    : wall %.2fx, drained nodes %.2fx" % (naive / ours, len(naive_drained) / max(len(ours_drained), 1)))
    if ours_drained != need:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
