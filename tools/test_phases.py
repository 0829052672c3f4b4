"""Run `make test`'s phases and print how long each took and how busy the CPUs were meanwhile.

Each argument is a stage: jobs separated by "+" run side by side, each job one `make` of its space-separated
targets (its output kept in build/phases/<first target>.log and printed when the job ends); stages run one after
another. The table at the end
is the last thing CI prints, so a slow phase shows in CI's tail without re-running anything. Stops at the first
failed stage (the others in that stage run to their end) and exits with its status.

Usage: test_phases.py STAGE [STAGE ...]      e.g. test_phases.py "sanity+lab-kube lab-mig-parted" units
"""
from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOGS = os.path.join(ROOT, "build", "phases")


def cpu_times():
    """(busy, total) jiffies of all CPUs, from the first line of /proc/stat."""
    with open("/proc/stat", encoding="ascii") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def run_target(target, alone):
    start = time.monotonic()
    cmd = ["make", "--no-print-directory", *target.split()]
    if alone:  # one target in its stage: its output streams as it comes
        rc = subprocess.call(cmd, cwd=ROOT)
    else:
        log_path = os.path.join(LOGS, f"{target.split()[0]}.log")
        with open(log_path, "w", encoding="utf-8") as log:
            rc = subprocess.call(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            print(f">> make {target}: rc={rc}\n{fh.read()}", flush=True)
    return target, rc, time.monotonic() - start


def main(stages):
    os.makedirs(LOGS, exist_ok=True)
    rows, failed = [], 0
    begin = time.monotonic()
    for stage in stages:
        targets = stage.split("+")
        busy0, total0 = cpu_times()
        start = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(targets)) as pool:
            results = list(pool.map(lambda t: run_target(t, len(targets) == 1), targets))
        busy1, total1 = cpu_times()
        cpu = 100.0 * (busy1 - busy0) / max(1, total1 - total0)
        rows.append((stage, time.monotonic() - start, cpu, results))
        failed = next((result[1] for result in results if result[1]), 0)
        if failed:
            break
    print(f"\nmake test phases ({os.cpu_count()} CPUs), {time.monotonic() - begin:.0f} s in all:")
    for stage, seconds, cpu, results in rows:
        detail = ", ".join(f"{t} {s:.0f} s{'' if rc == 0 else f' FAILED rc={rc}'}" for t, rc, s in results)
        print(f"  {seconds:6.0f} s  cpu {cpu:3.0f}%  {detail}")
    return failed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]) if len(sys.argv) > 1 else 2)
