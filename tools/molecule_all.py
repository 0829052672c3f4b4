"""Run every Molecule scenario (`molecule test -s NAME`), JOBS at a time, longest first; print each scenario's log
as it ends, a table of wall times, and exit 1 when any failed.

Scenarios are independent (own containers, own ephemeral directory, control planes on free ports), and most of
their time is spent waiting on containers (boots, reboots, apt), so two at a time fit on two cores.

Usage: molecule_all.py [--jobs N] [--logs DIR] [SCENARIO ...]      (default: every folder under molecule/)
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Longest first, so the last one to start is a short one. Seconds in a fresh-clone make test on 2 cores
# (2026-12-02): mig_reconfigure 655, driver_roll 589, driver_pin 502, driver_rhel_dnf 461, driver_cuda_repo 304,
# pve_gpu_host 279; driver_dkms (the real module build) 790 on 2026-12-05 beside driver_cuda_repo.
ORDER = ("driver_dkms", "mig_reconfigure", "driver_roll", "driver_pin", "driver_rhel_dnf", "driver_cuda_repo",
         "pve_gpu_host")


def run(name, logs, molecule):
    log_path = os.path.join(logs, f"{name}.log")
    start = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        # NO_COLOR: the log is a file; molecule's own output would otherwise carry ANSI colour codes.
        rc = subprocess.call([molecule, "test", "-s", name], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=dict(os.environ, NO_COLOR="1"))
    return name, rc, time.monotonic() - start, log_path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("MOLECULE_JOBS", "2")))
    parser.add_argument("--logs", default=os.path.join(ROOT, "build", "molecule"))
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
    start = time.monotonic()
    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run, n, args.logs, molecule) for n in names]
        for fut in concurrent.futures.as_completed(futures):
            name, rc, seconds, log_path = fut.result()
            results.append((name, rc, seconds))
            with open(log_path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            print(f">> molecule test -s {name}: rc={rc} in {seconds:.0f} s (log {os.path.relpath(log_path, ROOT)})")
            print(text if rc else text[-3000:], flush=True)
    print(f"molecule: {len(results)} scenarios, {args.jobs} at a time, {time.monotonic() - start:.0f} s")
    for name, rc, seconds in results:
        print(f"  {name:<20} {'passed' if rc == 0 else 'FAILED rc=%d' % rc:<14} {seconds:6.0f} s")
    return 1 if any(result[1] for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
