# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark: playbooks/mig_reconfigure.yml on simulated fleets (local hosts + gpusim + the lab's upstream Kubernetes
control plane with kwok nodes), in two parts, each printing its own figures:

1. The fleet (--fleet 1000): a thousand GPU nodes of a GPU Operator cluster as a real one looks (lab/kube/gpu_node.py:
   eight H100s each, the labels NFD, GPU feature discovery, the operator, the kubelet and an administrator put there,
   each with its own field manager, so every node carries managedFields and weighs what a real one does), five
   operand DaemonSets run by the real DaemonSet controller (five pods a node), a workload pod on every node in
   --fleet-teams ReplicaSets with a PodDisruptionBudget each (maxUnavailable 1) whose replacements turn Ready
   --ready-delay seconds after they start (kwok's pod-ready stage, lab/kube/controlplane.py POD_READY_DELAY), two
   nodes an operator had cordoned, and history: the boot-time re-apply installed and current on every node at its
   target. --fleet-changed nodes (50) were relabelled to another MIG configuration. The roll runs with
   max_unavailable --fleet-budget (10%), a capacity floor and the boot re-apply on. Printed: the plan's time for all
   nodes, the roll's time, the Kubernetes API requests per node (the API server's audit log, lab/kube/requestlog.py),
   and whether max_unavailable and the floor held at every instant, worked out from the audit log: each node's
   cordon and uncordon PATCHes and every write of the roll Lease's slots.
2. The comparison (--nodes 20, --changed 5), against the naive rollout that drains every node
   (bench/mig_reconfigure/naive.yml: DeepOps' MIG playbook / label-everything), all on identical fresh fleets: ours
   with max_parallel 1 (serial), ours with max_unavailable --budget, and the naive roll serial 1. Printed: wall
   time, nodes drained (exactly the changed ones for ours), the lowest schedulable count of the floor's resource at
   any instant, the ratios against the naive roll.

Drains take real time: every pod has a termination grace period (--grace seconds scaled by --factor, 30 s x 0.1 =
3 s by default), which the stand-in honours (kwok deletes a pod at its deletionTimestamp: lab/kube/controlplane.py
POD_DELETE_STAGE), and no drain overrides it. DaemonSet pods stay, as on a real node.

Usage: .venv/bin/python bench/mig_reconfigure/run.py [--only fleet|compare] [--fleet 1000] [--fleet-changed 50]
           [--fleet-budget 10%] [--forks 20] [--nodes 20] [--changed 5] [--grace 30] [--ready-delay 30]
           [--factor 0.1] [--budget 25%] [--floor 15] [--boot-apply]
"""

from __future__ import annotations

import argparse
import collections
import datetime
import hashlib
import json
import math
import os
import signal
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration", "mig_reconfigure"))
from mig_reconfigure_lab import CONFIG, H100_3G_X2, H100_BALANCED, PYTHON, Fleet, failures, gpu  # noqa: E402  pylint: disable=import-error,wrong-import-position
from requestlog import mig_allocatable, node_patches, unschedulable  # noqa: E402  pylint: disable=import-error,wrong-import-position
import gpu_node  # noqa: E402  pylint: disable=import-error,wrong-import-position

NAIVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "naive.yml")
RESOURCE = "nvidia.com/mig-3g.40gb"
ROLE = os.path.join(ROOT, "roles", "mig_reconfigure")
SLOTS = "gpuops.provision/roll-slots"  # plugins/module_utils/_k8s/node_roll.py LEASE_SLOTS
TARGET_IDS = [9, 14, 19, 19]  # all-balanced on an H100: 3g.40gb, 2g.20gb, 2 x 1g.10gb


# ---- what the request log says --------------------------------------------------------------------------------------

def lowest_capacity(log, before, after, resource, cordoned=()):
    """The lowest count of ``resource`` on schedulable nodes at any instant of the roll, from the request log.

    A node counts with what it advertised before the roll until its first cordon, with nothing while cordoned, and
    with what it advertises after the roll once uncordoned (its GPUs change only while it is cordoned); the nodes
    ``cordoned`` before the roll count with nothing until uncordoned."""
    events = []
    for r in log:
        if r["method"] == "PATCH" and r["resource"] == "nodes" and r["name"] in before and (r["status"] or 0) < 300:
            value = unschedulable(r)
            if value is not None:
                events.append((r["t"], r["name"], value))
    state = {n: "cordoned" if n in cordoned else "before" for n in before}
    have = {"before": before, "after": after}

    def count(n):
        return 0 if state[n] == "cordoned" else have[state[n]][n].get(resource, 0)

    total = sum(count(n) for n in state)
    low = total
    for _t, node, cordon in sorted(events):
        total -= count(node)
        state[node] = "cordoned" if cordon else "after"
        total += count(node)
        low = min(low, total)
    return low


def unavailable_timeline(log, targeted, cordoned=()):
    """The most targeted nodes unavailable at once during the roll (cordoned, or holding a slot of the roll's Lease,
    as node_roll counts them), the most slots held at once, and when: from each cordon/uncordon PATCH and each
    successful write of the Lease's slot list, in the order the API server completed them."""
    wanted = set(targeted)
    events = []
    for r in log:
        if (r["status"] or 0) >= 300:
            continue
        if r["method"] == "PATCH" and r["resource"] == "nodes" and r["name"] in wanted:
            value = unschedulable(r)
            if value is not None:
                events.append((r["t"], "node", r["name"], value))
        elif r["resource"] == "leases" and r["method"] in ("PUT", "POST", "PATCH") and isinstance(r.get("body"), dict):
            notes = (r["body"].get("metadata") or {}).get("annotations") or {}
            if SLOTS in notes:
                events.append((r["t"], "slots", None, frozenset(n for n in notes[SLOTS].split(",") if n)))
    down, slots = set(cordoned), frozenset()
    worst = (len(down), None)
    most_slots = 0
    for t, kind, node, value in sorted(events, key=lambda e: e[0]):
        if kind == "node":
            (down.add if value else down.discard)(node)
        else:
            slots = value
        most_slots = max(most_slots, len(slots))
        now = len(down | (slots & wanted))
        if now > worst[0]:
            worst = (now, t)
    return {"unavailable": worst[0], "at": worst[1], "slots": most_slots}


def request_counts(log, since=None, until=None):
    """{'<METHOD> <resource>[/<subresource>]': count} of the product's requests between two times."""
    out = collections.Counter()
    for r in log:
        if (since is None or r["t"] >= since) and (until is None or r["t"] < until):
            what = (r["resource"] or r["path"]) + ("/" + r["subresource"] if r.get("subresource") else "")
            out["%s %s" % (r["verb"] if r["verb"] in ("list", "watch") else r["method"], what)] += 1
    return out


def play_seconds(out):
    """{play name: seconds} from the json callback's play durations; a serial play has one entry per batch, summed."""
    total = {}
    for name, start, end in play_times(out):
        total[name] = round(total.get(name, 0.0) + end - start, 1)
    return total


def play_times(out):
    def epoch(text):
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    res = []
    for p in out["plays"]:
        d = p["play"].get("duration") or {}
        if d.get("end"):
            res.append((p["play"]["name"].split("| ")[-1], epoch(d["start"]), epoch(d["end"])))
    return res


# ---- part 2: the 20-node comparison against drain-every-node --------------------------------------------------------

def fleet_nodes(total, changed):
    # Changed nodes spread over the fleet, the rest already at the target.
    step = max(total // max(changed, 1), 1)
    picks = set(range(0, total, step)[:changed])
    return {"gpu-%02d" % i: {"gpus": [gpu(instances=H100_3G_X2 if i in picks else H100_BALANCED)]} for i in range(total)}


def at_target(fleet, names):
    return [n for n in names if any(sorted(g["profile_id"] for g in s.get("gpu_instances") or []) != TARGET_IDS
                                    for s in fleet.state(n)["gpus"])]


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
        wrong = at_target(fleet, nodes)
        if wrong:
            raise SystemExit("nodes not at the target after the run: %s" % wrong)
        lab.wait_for(lambda: all(mig_allocatable(fleet.node(n)).get(RESOURCE) == 1 for n in nodes), timeout=120,
                     what="the device plugin to advertise the new geometry")
        after = {n: mig_allocatable(fleet.node(n)) for n in nodes}
        log = lab.requests()
        drained = sorted({r["name"] for r in log if r["method"] == "PATCH" and r["resource"] == "nodes"
                          and unschedulable(r) is True})
        low = lowest_capacity(log, before, after, RESOURCE)
        waves = ((out.get("global_custom_stats") or {}).get("mig_reconfigure") or {}).get("roll", {}).get("sizes")
        return wall, drained, low, waves, play_seconds(out)


def compare(args):
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
    print("== %d-node comparison against drain-every-node (bench/mig_reconfigure/naive.yml)" % args.nodes)
    print("fleet: %d nodes, %d need a change (%s); pod grace %d s (%.0f s x %.2f); floor %s >= %d"
          % (args.nodes, len(need), ", ".join(need), grace, args.grace, args.factor, RESOURCE, args.floor))
    print("load average before the runs: %.2f %.2f %.2f, after: %.2f %.2f %.2f, on %d CPUs; boot-time re-apply %s"
          % (load + os.getloadavg() + (os.cpu_count(), "installed by ours" if args.boot_apply else "off (the anchor has none)")))
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
        print("%-30s  plays: %s" % ("", ", ".join("%s %.1f s" % kv for kv in plays.items())))
    return ok


# ---- part 1: the fleet ----------------------------------------------------------------------------------------------

OPERANDS = ("nvidia-device-plugin-daemonset", "gpu-feature-discovery", "nvidia-dcgm-exporter",
            "nvidia-container-toolkit-daemonset", "nvidia-operator-validator")


def boot_stamp():
    """The version the role stamps the boot-time re-apply's declaration with (plan.yml: the applier and the
    collection files of vars/main.yml __mig_reconfigure_boot_files, each read by the file lookup, which strips
    trailing whitespace, joined, sha1). The join's '\\n' reaches Jinja from a folded YAML scalar as a backslash and
    an n, which is what it joins with (a stable stamp all the same)."""
    with open(os.path.join(ROLE, "vars", "main.yml"), encoding="utf-8") as fh:
        files = yaml.safe_load(fh)["__mig_reconfigure_boot_files"]
    paths = [os.path.join(ROLE, "files", "gpuops_mig_apply.py")]
    paths += [os.path.join(ROOT, "plugins", "module_utils", f) for f in files]
    texts = []
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            texts.append(fh.read().rstrip())
    return hashlib.sha1("\\n".join(texts).encode("utf-8")).hexdigest()


def install_boot_history(fleet, changed, previous="all-3g"):
    """What an earlier roll left on every node: the boot-time re-apply's declaration, current (this config, the
    node's configuration, this applier version) where the node is at its target, ``previous`` on the changed ones."""
    stamp = boot_stamp()
    with open(fleet.inventory, encoding="utf-8") as fh:
        hosts = yaml.safe_load(fh)["all"]["children"]["gpu_nodes"]["hosts"]
    for name in fleet.nodes:
        path = os.path.join(fleet.base, "boot", name, "mig-config.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({"config": CONFIG, "selected": previous if name in changed else "all-balanced",
                       "lock_path": hosts[name]["mig_reconfigure_lock_path"], "stamp": stamp}, fh)


def fleet_fixture(names, changed, cordoned, gpus, grace, ready_delay, teams):
    """The cluster: gpu_node.py nodes, the operands' DaemonSets, a workload pod on every node (``teams`` ReplicaSets
    over consecutive nodes, a PodDisruptionBudget each), pods' grace and the replacements' ready delay."""
    per_team = math.ceil(len(names) / teams)
    balanced = {p: n * gpus for p, n in {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}.items()}
    fixture = {
        "evictionDelaySeconds": grace, "podReadyDelaySeconds": ready_delay,
        "nodes": [gpu_node.gpu_node(n, gpus=gpus, profiles={"3g.40gb": 2 * gpus} if n in changed else balanced,
                                    cordoned=n in cordoned) for n in names],
        "daemonsets": [{"metadata": {"name": d, "namespace": "gpu-operator"}} for d in OPERANDS],
        "replicasets": [], "pods": [], "poddisruptionbudgets": [],
    }
    container = [{"name": "main", "image": "nvcr.io/nvidia/tritonserver:25.03-py3",
                  "resources": {"requests": {"cpu": "4", RESOURCE: "1"}, "limits": {RESOURCE: "1"}}}]
    for t in range(teams):
        team = "team-%02d" % t
        fixture["replicasets"].append({"metadata": {"name": team, "namespace": "ml"},
                                       "spec": {"template": {"spec": {"containers": container}}}})
        fixture["poddisruptionbudgets"].append({"metadata": {"name": team, "namespace": "ml"},
                                                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": team}}}})
        for n in names[t * per_team:(t + 1) * per_team]:
            fixture["pods"].append({"metadata": {"name": "%s-%s" % (team, n), "namespace": "ml", "labels": {"app": team},
                                                 "ownerReferences": [{"kind": "ReplicaSet", "name": team}]},
                                    "spec": {"nodeName": n, "containers": container}})
    return fixture


def node_python(base, record):
    """An interpreter for the fleet's hosts that runs the real one under /usr/bin/time, appending each process's
    CPU seconds (user, system), start time and program to ``record``: with local hosts the node-side work (modules,
    scripts) runs on this machine, where on a real fleet it runs on the nodes, so the bench tells the two apart.
    None where there is no /usr/bin/time."""
    if not os.access("/usr/bin/time", os.X_OK):
        return None
    os.makedirs(base, exist_ok=True)
    path = os.path.join(base, "node-python")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write('#!/bin/sh\nexec /usr/bin/time -a -o %s -f "%%U %%S $(date +%%s.%%N) $1" %s "$@"\n' % (record, PYTHON))
    os.chmod(path, 0o755)
    return path


def node_cpu_seconds(record, until):
    """(CPU seconds of node-side processes started before ``until``, of all of them) from node_python's record."""
    if not os.path.exists(record):
        return None, None
    before = total = 0.0
    with open(record, encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            try:
                cpu, start = float(parts[0]) + float(parts[1]), float(parts[2])
            except (IndexError, ValueError):
                continue  # /usr/bin/time's own notes ("Command exited with non-zero status")
            total += cpu
            if until is not None and start < until:
                before += cpu
    return before, total


def fleet_run(args, tmp):
    grace = int(round(args.grace * args.factor))
    ready_delay = int(round(args.ready_delay * args.factor))
    total = args.fleet
    names = ["gpu-%04d" % i for i in range(total)]
    step = max(total // max(args.fleet_changed, 1), 1)
    changed = names[0::step][:args.fleet_changed]
    # Two nodes an operator had cordoned (not changing): they count against max_unavailable and stay cordoned.
    cordoned = [names[step // 2], names[total // 2 + step // 2]]
    states = {n: {"gpus": [gpu(instances=H100_3G_X2 if n in changed else H100_BALANCED) for _ in range(args.gpus)]}
              for n in names}
    gv = {"mig_reconfigure_drain_grace_period": None, "mig_reconfigure_drain_timeout": 900,
          "mig_reconfigure_resource_timeout": 600}
    fixture = fleet_fixture(names, set(changed), set(cordoned), args.gpus, grace, ready_delay, args.fleet_teams)
    base = os.path.join(tmp, "fleet")
    node_cpu = os.path.join(base, "node-cpu.txt")
    python = node_python(base, node_cpu)
    fleet = Fleet(base, states, group_vars=gv, fixture=fixture,
                  host_vars={n: {"ansible_python_interpreter": python} for n in names} if python else None)
    install_boot_history(fleet, set(changed))
    t_seed = time.monotonic()
    load0 = os.getloadavg()
    with fleet.start(fleet=True, timeout=3600) as lab:
        seeded = time.monotonic() - t_seed

        def advertised():
            nodes = lab.list_json("nodes")
            return nodes if all(mig_allocatable(n) for n in nodes) and len(nodes) == total else None

        nodes = lab.wait_for(advertised, timeout=600, what="the device plugin to advertise every node", interval=2)
        before = {n["metadata"]["name"]: mig_allocatable(n) for n in nodes}
        sizes = [len(json.dumps(n)) for n in nodes]
        managers = sorted({m["manager"] for n in nodes for m in n["metadata"].get("managedFields") or []})
        pods = lab.list_json("pods")
        # One 3g.40gb per GPU at the target: the floor leaves room for --fleet-floor-nodes nodes' worth of it.
        floor = args.gpus * (total - len(cordoned) - args.fleet_floor_nodes)
        extra = {"mig_reconfigure_max_parallel": 0, "mig_reconfigure_max_unavailable": args.fleet_budget,
                 "mig_reconfigure_capacity_floor": {RESOURCE: floor}, "mig_reconfigure_boot_apply": True}
        load1 = os.getloadavg()
        t0 = time.monotonic()
        cpu0 = os.times()
        rc, out = fleet.run(extra_vars=extra, timeout=4 * 3600, forks=args.forks)
        cpu1 = os.times()
        wall = time.monotonic() - t0
        load2 = os.getloadavg()
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            with open(os.path.join(args.keep, "fleet-run.json"), "w", encoding="utf-8") as fh:
                json.dump(out, fh)
        if rc != 0:
            raise SystemExit("fleet run failed (rc %d): %s" % (rc, json.dumps(failures(out))[:4000]))
        wrong = at_target(fleet, names)
        lab.wait_for(lambda: all(mig_allocatable(n).get(RESOURCE) == args.gpus for n in lab.list_json("nodes")),
                     timeout=300, what="the device plugin to advertise the new geometry", interval=2)
        after_nodes = lab.list_json("nodes")
        after = {n["metadata"]["name"]: mig_allocatable(n) for n in after_nodes}
        still = sorted(n["metadata"]["name"] for n in after_nodes if (n.get("spec") or {}).get("unschedulable"))
        not_ready = sorted(n["metadata"]["name"] for n in after_nodes
                           if not any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions") or []))
        log = lab.requests()
        if args.keep:
            with open(os.path.join(args.keep, "fleet-requests.json"), "w", encoding="utf-8") as fh:
                json.dump(log, fh)
    plays = play_times(out)
    plan = next((e - s for name, s, e in plays if name.startswith("plan")), None)
    plan_end = next((e for name, _s, e in plays if name.startswith("plan")), None)
    roll = next((e - s for name, s, e in plays if name.startswith("roll")), None)
    drained = sorted({r["name"] for r in log if r["method"] == "PATCH" and r["resource"] == "nodes"
                      and unschedulable(r) is True})
    cordon_times = [r["t"] for r in log if r["method"] == "PATCH" and r["resource"] == "nodes" and unschedulable(r) is not None]
    limit = math.ceil(total * float(args.fleet_budget.rstrip("%")) / 100) if args.fleet_budget.endswith("%") \
        else int(args.fleet_budget)
    budget = unavailable_timeline(log, names, cordoned)
    low = lowest_capacity(log, before, after, RESOURCE, cordoned)
    results = ((out.get("global_custom_stats") or {}).get("mig_reconfigure") or {}).get("nodes") or {}
    cordoned_s = sorted(float(r["cordoned_seconds"]) for r in results.values() if r.get("cordoned_seconds") is not None)
    boot = sum(1 for p in out["plays"] if p["play"]["name"].endswith("re-apply the geometry at boot")
               for t in p["tasks"] if t["task"]["name"].endswith("The declared geometry")
               for r in t["hosts"].values() if not r.get("skipped"))
    plan_req = request_counts(log, until=plan_end)
    cpu_all = (cpu1.children_user + cpu1.children_system) - (cpu0.children_user + cpu0.children_system)
    node_plan, node_all = node_cpu_seconds(node_cpu, plan_end)
    roll_req = request_counts(log, since=plan_end)
    print("== fleet: %d kwok nodes (%d x H100 each), %d relabelled to a new MIG configuration, %d cordoned by an "
          "operator" % (total, args.gpus, len(changed), len(cordoned)))
    print("cluster: %d pods (%d operand DaemonSets, %d workload ReplicaSets with a PDB maxUnavailable 1 each); node "
          "objects %.1f KiB on average (managedFields of %s); seeded in %.0f s"
          % (len(pods), len(OPERANDS), args.fleet_teams, sum(sizes) / len(sizes) / 1024, ", ".join(managers), seeded))
    print("roll: max_unavailable %s (%d nodes), capacity floor %s >= %d, boot-time re-apply on; pod grace %d s, "
          "replacements Ready %d s after start; forks %d"
          % (args.fleet_budget, limit, RESOURCE, floor, grace, ready_delay, args.forks))
    print("load average: %.2f %.2f %.2f before seeding, %.2f %.2f %.2f before the run, %.2f %.2f %.2f after, on %d CPUs"
          % (load0 + load1 + load2 + (os.cpu_count(),)))
    print("plan (all %d nodes): %.1f s; roll (%d changing nodes): %.1f s; whole playbook: %.1f s wall"
          % (total, plan or 0, len(changed), roll or 0, wall))
    print("plays: %s" % ", ".join("%s %.1f s" % kv for kv in play_seconds(out).items()))
    if node_all is not None:
        print("CPU of the run: %.0f s in all, of which %.0f s node-side (module and script processes, which on a real "
              "fleet run on the nodes: %.0f s in the plan, %.2f s a node) and %.0f s on the controller (%.2f s a node)"
              % (cpu_all, node_all, node_plan, node_plan / total, cpu_all - node_all, (cpu_all - node_all) / total))
    if cordon_times:
        print("first cordon to last uncordon: %.1f s; per changed node cordoned: median %.1f s, max %.1f s"
              % (max(cordon_times) - min(cordon_times), cordoned_s[len(cordoned_s) // 2] if cordoned_s else 0,
                 cordoned_s[-1] if cordoned_s else 0))
    print("nodes drained: %d (%s); boot-time re-apply installed on %d node(s); not at the target: %d; cordoned after: "
          "%s; not Ready after: %d"
          % (len(drained), "exactly the changed ones" if drained == sorted(changed) else "MISMATCH %s" % drained,
             boot, len(wrong), ", ".join(still) or "none", len(not_ready)))
    n_plan, n_roll = sum(plan_req.values()), sum(roll_req.values())
    print("API requests (audit log): %d in all = %.2f per node; plan %d (%.2f per node); after the plan %d (%.1f per "
          "changing node)" % (n_plan + n_roll, (n_plan + n_roll) / total, n_plan, n_plan / total, n_roll,
                              n_roll / max(len(changed), 1)))
    print("  plan: %s" % ", ".join("%s %d" % kv for kv in plan_req.most_common()))
    print("  roll: %s" % ", ".join("%s %d" % kv for kv in roll_req.most_common(12)))
    held_u = budget["unavailable"] <= limit
    held_f = low >= floor
    print("budget at every instant (audit log): at most %d of %d nodes unavailable (limit %d: %s), at most %d slots "
          "held; lowest schedulable %s %d (floor %d: %s)"
          % (budget["unavailable"], total, limit, "held" if held_u else "BROKEN", budget["slots"], RESOURCE, low, floor,
             "held" if held_f else "BROKEN"))
    return held_u and held_f and drained == sorted(changed) and not wrong and still == sorted(cordoned)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=("fleet", "compare"), help="run one part only")
    ap.add_argument("--fleet", type=int, default=1000, help="nodes of the fleet")
    ap.add_argument("--fleet-changed", type=int, default=50)
    ap.add_argument("--fleet-budget", default="10%", help="max_unavailable of the fleet's roll")
    ap.add_argument("--fleet-floor-nodes", type=int, default=5,
                    help="capacity floor of %s: what the schedulable nodes advertise after the roll, less this many "
                    "nodes' worth" % RESOURCE)
    ap.add_argument("--fleet-teams", type=int, default=20, help="workload ReplicaSets (a PDB each) over the fleet")
    ap.add_argument("--gpus", type=int, default=8, help="GPUs per fleet node")
    ap.add_argument("--forks", type=int, default=20, help="ansible forks of the fleet's run")
    ap.add_argument("--ready-delay", type=float, default=30.0,
                    help="seconds until a replacement pod is Ready (scaled by --factor)")
    ap.add_argument("--keep", metavar="DIR", help="run the fleet in DIR and keep it, with the run's callback output and request log")
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--changed", type=int, default=5)
    ap.add_argument("--grace", type=float, default=30.0, help="pods' termination grace period, seconds")
    ap.add_argument("--factor", type=float, default=0.1, help="scales the grace period (30 s x 0.1 = 3 s)")
    ap.add_argument("--budget", default="25%", help="max_unavailable of the comparison's budgeted run")
    ap.add_argument("--floor", type=int, default=15, help="capacity floor of %s for ours in the comparison" % RESOURCE)
    ap.add_argument("--boot-apply", action="store_true",
                    help="comparison: also install the boot-time re-apply on every node (ours only: the anchor has none)")
    args = ap.parse_args()
    # A SIGTERM (timeout, a CI runner) unwinds like ^C: the control planes are stopped by their context managers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ok = True
    if args.only != "compare":
        if args.keep:
            ok &= fleet_run(args, args.keep)
        else:
            with tempfile.TemporaryDirectory(prefix="bench-migfleet-") as tmp:
                ok &= fleet_run(args, tmp)
    if args.only != "fleet":
        ok &= compare(args)
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
