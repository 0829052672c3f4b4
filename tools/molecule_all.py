"""Run every Molecule scenario (`molecule test -s NAME`), JOBS at a time, longest first; print each scenario's log
as it ends, a table of wall times, and exit 1 when any failed.

A scenario that fails is run once more (--retries, MOLECULE_RETRIES): scenarios beside each other on two cores meet
timeouts that one alone does not (driver_roll failed so in CI on 2026-12-05 and passed alone in 372 s). The table says
"passed on retry" and the failed run's failing lines are printed after it, at the end of the output where a CI tail
shows them, whether or not the retry passed: a flaky scenario is reported, not hidden.

When CI's time limit ends the run (SIGTERM, SIGINT), the table so far is printed before the exit, with the scenarios
still running and their time so far (a retry's row says so, and how the first run ended), then what failed in each
failed first run: CI's run of 2026-12-07 was cut off with driver_roll "still running 1611 s", more than twice its
usual time, and its tail did not say whether that was one run or a retry.

Scenarios are independent (own containers, own ephemeral directory, control planes on free ports), and most of
their time is spent waiting on containers (boots, reboots, apt), so two at a time fit on two cores.

Usage: molecule_all.py [--jobs N] [--logs DIR] [SCENARIO ...]      (default: every folder under molecule/)
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Longest first, so the last one to start is a short one. Seconds in a fresh-clone make test on 2 cores
# (2026-12-02): mig_reconfigure 655, driver_roll 589, driver_pin 502, driver_rhel_dnf 461, driver_cuda_repo 304,
# pve_gpu_host 279; driver_dkms (the real module build) 790 on 2026-12-05 beside driver_cuda_repo.
ORDER = ("driver_dkms", "mig_reconfigure", "driver_roll", "driver_pin", "driver_rhel_dnf", "driver_cuda_repo",
         "pve_gpu_host")


# What marks a failure in a molecule log: Ansible's fatal/failed results, molecule's own errors.
FAILURE_MARKS = ("fatal:", "failed:", "FAILED!", "ERROR", "CRITICAL")


def failing_lines(text, limit=40):
    """The lines of a molecule log that say what failed, each after the task it belongs to."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        if any(k in line for k in FAILURE_MARKS):
            # the task the failure belongs to, once
            task = next((lines[j] for j in range(i - 1, max(-1, i - 60), -1) if lines[j].startswith("TASK [")), None)
            if task and task not in out:
                out.append(task)
            out.append(line[:2000])
    return out[-limit:]


def run(name, logs, molecule, attempt=1):
    log_path = os.path.join(logs, f"{name}.log" if attempt == 1 else f"{name}.retry{attempt - 1}.log")
    start = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        # NO_COLOR: the log is a file; molecule's own output would otherwise carry ANSI colour codes.
        rc = subprocess.call([molecule, "test", "-s", name], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=dict(os.environ, NO_COLOR="1"))
    return name, rc, time.monotonic() - start, log_path, attempt


def table(names, results, running, now):
    """The wall-time table's lines: each scenario's result, or how long it has run, or that it has not started."""
    lines = []
    for name in names:
        if name in results and name not in running:
            rc, seconds, attempt = results[name]
            state = "passed" if rc == 0 and attempt == 1 else "passed on retry" if rc == 0 else "FAILED rc=%d" % rc
            lines.append(f"  {name:<20} {state:<16} {seconds:6.0f} s")
        elif name in running:
            rc, before, attempt = results.get(name, (0, 0, 0))
            line = f"  {name:<20} {'still running':<16} {before + now - running[name]:6.0f} s"
            if attempt:  # a retry: CI's tail must say that the time is two runs, and how the first ended
                line += f"  (run {attempt + 1}; run {attempt} FAILED rc={rc}; {before:.0f} s in the earlier runs)"
            lines.append(line)
        else:
            lines.append(f"  {name:<20} not started")
    return lines


def failure_report(first_failures):
    """What failed in each scenario's first run, for the end of the output (where CI's tail shows it)."""
    lines = []
    for name, (rc, log, failed) in sorted(first_failures.items()):
        lines.append(f"molecule: {name} failed its first run (rc={rc}, log {log}); what failed:")
        lines.extend("    " + line for line in failed)
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("MOLECULE_JOBS", "2")))
    parser.add_argument("--logs", default=os.path.join(ROOT, "build", "molecule"))
    parser.add_argument("--retries", type=int, default=int(os.environ.get("MOLECULE_RETRIES", "1")))
    parser.add_argument("scenarios", nargs="*")
    args = parser.parse_args(argv)
    found = sorted(d for d in os.listdir(os.path.join(ROOT, "molecule"))
                   if os.path.isfile(os.path.join(ROOT, "molecule", d, "molecule.yml")))
    names = args.scenarios or sorted(found, key=lambda n: ORDER.index(n) if n in ORDER else -1)
    unknown = [n for n in names if n not in found]
    if unknown:
        print(f"molecule_all: no such scenario: {', '.join(unknown)}", file=sys.stderr)
        return 2
    os.makedirs(args.logs, exist_ok=True)
    molecule = os.path.join(os.path.dirname(sys.executable), "molecule")
    jobs = max(1, args.jobs)
    start = time.monotonic()
    results = {}
    running = {}  # scenario -> when its current run started
    first_failures = {}

    def submit(pool, name, attempt):
        running[name] = time.monotonic()
        return pool.submit(run, name, args.logs, molecule, attempt)

    def cut_off(signum, _frame):
        print(f"molecule: cut off by {signal.Signals(signum).name} after {time.monotonic() - start:.0f} s", flush=True)
        print("\n".join(table(names, results, running, time.monotonic()) + failure_report(first_failures)), flush=True)
        os._exit(128 + signum)  # the pool's threads wait on molecule processes that got the same signal

    previous = {signum: signal.signal(signum, cut_off) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            # Submitted as workers free up, so that "running" is what runs; a retry goes first in the queue.
            queue = [(name, 1) for name in names]
            pending = set()
            while queue or pending:
                while queue and len(pending) < jobs:
                    pending.add(submit(pool, *queue.pop(0)))
                done, pending = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
                for fut in done:
                    name, rc, seconds, log_path, attempt = fut.result()
                    running.pop(name, None)
                    with open(log_path, encoding="utf-8", errors="replace") as fh:
                        text = fh.read()
                    print(f">> molecule test -s {name}: rc={rc} in {seconds:.0f} s, run {attempt} "
                          f"(log {os.path.relpath(log_path, ROOT)}), +{time.monotonic() - start:.0f} s")
                    print(text if rc else text[-3000:], flush=True)
                    total = results.get(name, (0, 0, 0))[1] + seconds
                    results[name] = (rc, total, attempt)
                    if rc and attempt == 1:
                        first_failures[name] = (rc, os.path.relpath(log_path, ROOT), failing_lines(text))
                    if rc and attempt <= args.retries:
                        queue.insert(0, (name, attempt + 1))
    finally:  # main() is called by the unit tests too: their process keeps its own handlers
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print(f"molecule: {len(results)} scenarios, {jobs} at a time, {time.monotonic() - start:.0f} s")
    print("\n".join(table(names, results, running, time.monotonic()) + failure_report(first_failures)))
    return 1 if any(result[0] for result in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
