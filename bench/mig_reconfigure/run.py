# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark: playbooks/mig_reconfigure.yml on a simulated fleet where only some nodes need a MIG change, against the
naive rollout that drains every node (bench/mig_reconfigure/naive.yml: DeepOps' MIG playbook / label-everything),
all measured in this run on identical fresh fleets (local hosts + gpusim + the Kubernetes stand-in).

Drains take real time: every pod has a termination grace period (--grace seconds scaled by --factor, 30 s x 0.1 =
3 s by default), which the stand-in honours (kwok deletes a pod at its deletionTimestamp: lab/kube/controlplane.py
POD_DELETE_STAGE), and no drain overrides it. DaemonSet pods (the device plugin) stay, as on a real node.

Measured: ours with max_parallel 1 (serial), ours with max_unavailable --budget (25%: the 5 changed nodes of 20 in
one wave), and the naive roll with serial 1. Printed: wall time, nodes drained (from the stand-in's request log:
exactly the changed ones for ours), the lowest schedulable count of --floor-resource at any instant of the roll
(worked out from the cordon/uncordon PATCHes of the request log and each node's advertised resources before and
after), the ratios against the naive roll, and the machine's load.

The boot-time re-apply (installed on every node by playbooks/mig_reconfigure.yml) is off unless --boot-apply: the
anchor installs none, and its cost (a copy of the applier's code per node) does not depend on the roll.

Usage: .venv/bin/python bench/mig_reconfigure/run.py [--nodes 20] [--changed 5] [--grace 30] [--factor 0.1]
                                                   [--budget 25%] [--floor 15] [--boot-apply]
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration", "mig_reconfigure"))
from mig_reconfigure_lab import H100_3G_X2, H100_BALANCED, Fleet, failures, gpu  # noqa: E402  pylint: disable=import-error,wrong-import-position
from requestlog import mig_allocatable, node_patches, unschedulable  # noqa: E402  pylint: disable=import-error,wrong-import-position

NAIVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "naive.yml")
RESOURCE = "nvidia.com/mig-3g.40gb"


def fleet_nodes(total, changed):
    # Changed nodes spread over the fleet, the rest already at the target.
    step = max(total // max(changed, 1), 1)
    picks = set(range(0, total, step)[:changed])
    return {"gpu-%02d" % i: {"gpus": [gpu(instances=H100_3G_X2 if i in picks else H100_BALANCED)]} for i in range(total)}


def lowest_capacity(log, before, after, resource):
    """The lowest count of ``resource`` on schedulable nodes at any instant of the roll, from the request log.

    A node counts with what it advertised before the roll until its first cordon, with nothing while cordoned, and
    with what it advertises after the roll once uncordoned (its GPUs change only while it is cordoned)."""
    events = []
    for node in before:
        for r in node_patches(log, node):
            value = unschedulable(r)
            if value is not None:
                events.append((r["t"], node, value))
    state = {n: "before" for n in before}
    def total():
        return sum(0 if s == "cordoned" else (before if s == "before" else after)[n].get(resource, 0)
                   for n, s in state.items())
    low = total()
    for _t, node, cordon in sorted(events):
        state[node] = "cordoned" if cordon else "after"
        low = min(low, total())
    return low


def measure(base, nodes, extra_vars, grace, playbook=None):
    gv = {"mig_reconfigure_drain_grace_period": None,  # each pod's own grace period, as kubectl drain
          "mig_reconfigure_drain_timeout": 120 + 4 * grace}
    fleet = Fleet(base, nodes, label_selected=False, group_vars=gv)
    with fleet.start(eviction_delay=grace) as lab:
        lab.wait_for(lambda: all(mig_allocatable(fleet.node(n)) for n in nodes), timeout=120,
                     what="the device plugin to advertise every node")
        before = {n: mig_allocatable(fleet.node(n)) for n in nodes}
        t0 = time.monotonic()
        kwargs = {"playbook": playbook} if playbook else {}
        rc, out = fleet.run(extra_vars=extra_vars, timeout=3600, **kwargs)
        wall = time.monotonic() - t0
        if rc != 0:
            raise SystemExit("run failed: %s" % failures(out))
        drained = sorted(n for n in nodes if lab.cordons(n) > 0)
        wrong = [n for n in nodes if sorted(g["profile_id"] for g in fleet.state(n)["gpus"][0].get("gpu_instances") or [])
                 != [9, 14, 19, 19]]
        if wrong:
            raise SystemExit("nodes not at the target after the run: %s" % wrong)
        lab.wait_for(lambda: all(mig_allocatable(fleet.node(n)).get(RESOURCE) == 1 for n in nodes), timeout=120,
                     what="the device plugin to advertise the new geometry")
        after = {n: mig_allocatable(fleet.node(n)) for n in nodes}
        low = lowest_capacity(lab.requests(), before, after, RESOURCE)
        waves = ((out.get("global_custom_stats") or {}).get("mig_reconfigure") or {}).get("roll", {}).get("sizes")
        return wall, drained, low, waves, play_seconds(out)


def play_seconds(out):
    """{play name: seconds} from the json callback's play durations; a serial play has one entry per batch, summed."""
    def epoch(text):
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    total = {}
    for p in out["plays"]:
        d = p["play"].get("duration") or {}
        if d.get("end"):
            name = p["play"]["name"].split("| ")[-1]
            total[name] = round(total.get(name, 0.0) + epoch(d["end"]) - epoch(d["start"]), 1)
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--changed", type=int, default=5)
    ap.add_argument("--grace", type=float, default=30.0, help="pods' termination grace period, seconds")
    ap.add_argument("--factor", type=float, default=0.1, help="scales the grace period (30 s x 0.1 = 3 s)")
    ap.add_argument("--budget", default="25%", help="max_unavailable of the budgeted run")
    ap.add_argument("--floor", type=int, default=15, help="capacity floor of %s for ours" % RESOURCE)
    ap.add_argument("--boot-apply", action="store_true",
                    help="also install the boot-time re-apply on every node (ours only: the anchor has none)")
    args = ap.parse_args()
    grace = int(round(args.grace * args.factor))
    nodes = fleet_nodes(args.nodes, args.changed)
    need = sorted(n for n, s in nodes.items() if len(s["gpus"][0]["gpu_instances"]) == 2)
    floor = {RESOURCE: args.floor}
    boot = {"mig_reconfigure_boot_apply": bool(args.boot_apply)}
    load = os.getloadavg()
    runs = {}
    with tempfile.TemporaryDirectory(prefix="bench-migrc-") as tmp:
        runs["naive (drain all, serial 1)"] = measure(os.path.join(tmp, "naive"), nodes, {"mig_reconfigure_serial": 1},
                                                      grace, NAIVE)
        runs["ours, max_parallel 1"] = measure(os.path.join(tmp, "serial"), nodes, dict(
            boot, mig_reconfigure_max_parallel=1, mig_reconfigure_capacity_floor=floor), grace)
        runs["ours, max_unavailable %s" % args.budget] = measure(os.path.join(tmp, "budget"), nodes, dict(
            boot, mig_reconfigure_max_parallel=0, mig_reconfigure_max_unavailable=args.budget,
            mig_reconfigure_capacity_floor=floor), grace)
    print("fleet: %d nodes, %d need a change (%s); pod grace %d s (%.0f s x %.2f); floor %s >= %d"
          % (args.nodes, len(need), ", ".join(need), grace, args.grace, args.factor, RESOURCE, args.floor))
    print("load average before the runs: %.2f %.2f %.2f on %d CPUs; boot-time re-apply %s"
          % (load + (os.cpu_count(), "installed by ours" if args.boot_apply else "off (the anchor has none)")))
    naive = runs["naive (drain all, serial 1)"][0]
    ok = True
    for name, (wall, drained, low, waves, plays) in runs.items():
        ours = not name.startswith("naive")
        exact = drained == need
        held = low >= args.floor
        ok &= (exact and held) if ours else True
        print("%-30s: %7.1f s wall (%.3fx naive), %2d nodes drained%s, lowest schedulable %s %d%s%s"
              % (name, wall, wall / naive, len(drained),
                 (" (exactly the changed ones)" if exact else " (MISMATCH: %s)" % drained) if ours else "",
                 RESOURCE, low, (" (floor %d held)" % args.floor if held else " (FLOOR %d BROKEN)" % args.floor) if ours else "",
                 ", waves %s" % waves if waves else ""))
        if ours:
            print("%-30s  plays: %s" % ("", ", ".join("%s %.1f s" % kv for kv in plays.items())))
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
