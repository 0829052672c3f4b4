# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark: plan and apply of a full 8-GPU MIG host (7 instances per GPU), and gpu_info on it.

Each module run is one Python process, started the way Ansible starts a module (module file + JSON argument
file), with NVIDIA's nvidia-ml-py over gpusim's libnvidia-ml.so.1 (lab/gpusim/libnvml). Printed per run: wall time
and NVML calls. Two anchors are measured in the same run on an identical host:

* per-GPU module calls: mig_geometry once per GPU (what a loop over GPUs in a playbook does);
* naive apply: mig-parted's method (clear, then NVML automatic placement in largest-first order, one CI each),
  in one process, without planning or verification.

Usage: .venv/bin/python bench/mig/run.py [--gpus 8] [--model "NVIDIA A100-SXM4-40GB"] [--repeat 1]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(ROOT, "build", "collections")
GPUSIM = os.path.join(ROOT, "lab", "gpusim")
MODULES = os.path.join(ROOT, "plugins", "modules")


def ensure_link():
    link = os.path.join(COLLECTIONS, "ansible_collections", "gpuops", "provision")
    if not os.path.lexists(link):
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(os.path.relpath(ROOT, os.path.dirname(link)), link)


@functools.lru_cache(maxsize=None)
def libnvml_dir():
    """The directory of gpusim's libnvidia-ml.so.1 for its default driver (built on first use; asked once a run)."""
    out = subprocess.run([sys.executable, os.path.join(GPUSIM, "libnvml", "build.py")], capture_output=True, text=True,
                         check=True)
    return out.stdout.strip().splitlines()[-1]


def env_for(state):
    env = dict(os.environ)
    env["PYTHONPATH"] = COLLECTIONS
    env["LD_LIBRARY_PATH"] = libnvml_dir()
    env["GPUSIM_STATE"] = state
    return env


def run_module(name, args, state, tmp, check=False):
    """One module process, as AnsiballZ runs it: python <module> <args.json>. Returns (seconds, result)."""
    params = dict(args)
    params["_ansible_check_mode"] = check
    argfile = os.path.join(tmp, "args.json")
    with open(argfile, "w", encoding="utf-8") as fh:
        json.dump({"ANSIBLE_MODULE_ARGS": params}, fh)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, os.path.join(MODULES, name + ".py"), argfile], env=env_for(state),
                          capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        raise SystemExit("%s printed no JSON:\n%s\n%s" % (name, proc.stdout, proc.stderr))
    if result.get("failed"):
        raise SystemExit("%s failed: %s" % (name, result.get("msg")))
    return elapsed, result


NAIVE = r'''
import json, sys, time, ctypes
import pynvml
counts = {"n": 0}
def c(name, *a):
    counts["n"] += 1
    return getattr(pynvml, name)(*a)
order = json.loads(sys.argv[1])  # GI profile ids in creation order
t0 = time.perf_counter()
c("nvmlInit")
for i in range(c("nvmlDeviceGetCount")):
    dev = c("nvmlDeviceGetHandleByIndex", i)
    for pid in order:
        gi = c("nvmlDeviceCreateGpuInstance", dev, pid)
        info = c("nvmlGpuInstanceGetInfo", gi)
        prof = c("nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, 0, 0)  # 1-slice CI: the full CI of a 1g GI
        c("nvmlGpuInstanceCreateComputeInstance", gi, prof.id)
c("nvmlShutdown")
print(json.dumps({"seconds": time.perf_counter() - t0, "calls": counts["n"]}))
'''


def naive_apply(state, order):
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", NAIVE, json.dumps(order)], env=env_for(state), capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode:
        return elapsed, None, proc.stderr.strip().splitlines()[-1]
    return elapsed, json.loads(proc.stdout), None


def fresh_state(path, gpus, model):
    with open(path, "w", encoding="utf-8") as fh:
        json.dump({"gpus": [{"model": model, "mig_mode": "enabled"} for _ in range(gpus)]}, fh)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--model", default="NVIDIA A100-SXM4-40GB")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--profile", default="1g.5gb", help="GI profile name on --model")
    ap.add_argument("--profile-id", type=int, default=19, help="its NVML profile id (for the naive anchor)")
    ap.add_argument("--count", type=int, default=7)
    opts = ap.parse_args()
    ensure_link()
    target = {opts.profile: opts.count}
    n_inst = sum(target.values())
    with tempfile.TemporaryDirectory() as tmp:
        state = os.path.join(tmp, "gpusim.json")
        args = {"devices": [{"devices": "all", "mig-enabled": True, "mig-devices": target}]}
        best = {}
        for _ in range(opts.repeat):
            fresh_state(state, opts.gpus, opts.model)
            measures = [("plan (check mode)", run_module("mig_geometry", args, state, tmp, check=True))]
            measures.append(("apply", run_module("mig_geometry", args, state, tmp)))
            measures.append(("re-run (no change)", run_module("mig_geometry", args, state, tmp)))
            measures.append(("gpu_info", run_module("gpu_info", {}, state, tmp)))
            # Anchor 1: the same apply as one module run per GPU.
            fresh_state(state, opts.gpus, opts.model)
            total_t = 0.0
            total_calls = 0
            for i in range(opts.gpus):
                t, r = run_module("mig_geometry", {"devices": [{"devices": [i], "mig-enabled": True, "mig-devices": target}]}, state, tmp)
                total_t += t
                total_calls += r["nvml_calls"]
            measures.append(("anchor: apply, one module run per GPU", (total_t, {"nvml_calls": total_calls})))
            for name, (t, r) in measures:
                calls = r.get("nvml_calls", r.get("nvml", {}).get("calls"))
                if name not in best or t < best[name][0]:
                    best[name] = (t, calls)
            # Anchor 2: naive mig-parted-style apply (automatic placement, largest first), no planning.
            fresh_state(state, opts.gpus, opts.model)
            t, r, err = naive_apply(state, [opts.profile_id] * opts.count)
            name = "anchor: naive auto-placement apply (no plan/verify)"
            if name not in best or t < best[name][0]:
                best[name] = (t, r["calls"] if r else None, err)
        print("host: %d x %s, target %s (%d instances per GPU), best of %d" % (opts.gpus, opts.model, target, n_inst, opts.repeat))
        print("%-52s %10s %12s" % ("run", "seconds", "NVML calls"))
        for name, v in best.items():
            print("%-52s %10.3f %12s%s" % (name, v[0], v[1], ("  (" + v[2] + ")") if len(v) > 2 and v[2] else ""))
        a, anchor = best["apply"], best["anchor: apply, one module run per GPU"]
        print("ratio apply / per-GPU runs: time %.2f, NVML calls %.2f" % (a[0] / anchor[0], a[1] / float(anchor[1])))
        naive = best["anchor: naive auto-placement apply (no plan/verify)"]
        if naive[1]:
            print("ratio apply / naive apply: time %.2f, NVML calls %.2f" % (a[0] / naive[0], a[1] / float(naive[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
