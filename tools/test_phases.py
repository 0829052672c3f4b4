"""Run `make test`'s phases and print how long each took and how busy the CPUs were meanwhile.

Each argument is a stage: jobs separated by "+" run side by side, each job one `make` of its space-separated
targets (its output kept in build/phases/<first target>.log and printed when the job ends); stages run one after
another. The table at the end
is the last thing CI prints, so a slow phase shows in CI's tail without re-running anything. Stops at the first
failed stage (the others in that stage run to their end) and exits with its status.

When CI's time limit ends the run (SIGTERM, or SIGINT), the table so far is printed before the exit: the stages that
ended and the one that was running, with each job's time so far. A run cut off at its limit then shows where its time
went (CI's run of 2026-12-07 ended in Molecule with no table, and nothing said which earlier stage had been slow).

Usage: test_phases.py STAGE [STAGE ...]      e.g. test_phases.py "sanity+lab-kube lab-mig-parted" units
"""
from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOGS = os.path.join(ROOT, "build", "phases")


def cpu_times():
    """(busy, total) jiffies of all CPUs, from the first line of /proc/stat."""
    with open("/proc/stat", encoding="ascii") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


class Progress:
    """The stages that ended (rows) and the one running now (its name, start, and each job's end), for the table."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.begin = clock()
        self.rows = []          # (stage, seconds, cpu %, [(target, rc, seconds)])
        self.stage = None       # the stage running now
        self.started = 0.0
        self.ended = {}         # target -> (rc, seconds) of the running stage's jobs that ended
        # A job's end is recorded and printed under this lock, and the signal handler prints the table under it:
        # no job end line inside the table, and no job printed as ended but missing from it. Only the stage's
        # threads and the handler take it, so the handler (in the main thread) never waits on itself.
        self.lock = threading.Lock()
        self.cut_off = False

    def start(self, stage):
        self.stage, self.started, self.ended = stage, self.clock(), {}
        print(f">> make test: stage {len(self.rows) + 1} ({stage}) starts at +{self.started - self.begin:.0f} s",
              flush=True)

    def job_ended(self, target, rc, seconds, report=None):
        """Record a job's end and print ``report`` (its end line and log), unless the run has been cut off."""
        with self.lock:
            self.ended[target] = (rc, seconds)
            if report is not None and not self.cut_off:
                print(report, flush=True)

    def stage_ended(self, seconds, cpu, results):
        self.rows.append((self.stage, seconds, cpu, results))
        self.stage = None

    def table(self, cut_off_by=None):
        """The table's lines: each stage that ended, then the running one (when ``cut_off_by`` names the signal)."""
        now = self.clock()
        head = f"make test phases ({os.cpu_count()} CPUs), {now - self.begin:.0f} s in all"
        lines = [f"{head}, cut off by {cut_off_by}:" if cut_off_by else f"{head}:"]
        for _stage, seconds, cpu, results in self.rows:
            detail = ", ".join(f"{t} {s:.0f} s{'' if rc == 0 else f' FAILED rc={rc}'}" for t, rc, s in results)
            lines.append(f"  {seconds:6.0f} s  cpu {cpu:3.0f}%  {detail}")
        if cut_off_by and self.stage is not None:
            # The signal reaches the stage's jobs too (CI signals the process group): a job that a worker thread saw
            # die of it before this handler ran was running when the run was cut off, and is shown so.
            killed = -signal.Signals[cut_off_by].value
            jobs = []
            for target in self.stage.split("+"):
                if target in self.ended and self.ended[target][0] != killed:
                    rc, seconds = self.ended[target]
                    jobs.append(f"{target} {seconds:.0f} s{'' if rc == 0 else f' FAILED rc={rc}'}")
                else:
                    jobs.append(f"{target} still running")
            lines.append(f"  {now - self.started:6.0f} s  (running)  {', '.join(jobs)}")
        return lines


def run_target(target, alone, progress):
    start = time.monotonic()
    cmd = ["make", "--no-print-directory", *target.split()]
    report = None
    if alone:  # one target in its stage: its output streams as it comes
        rc = subprocess.call(cmd, cwd=ROOT)
    else:
        log_path = os.path.join(LOGS, f"{target.split()[0]}.log")
        with open(log_path, "w", encoding="utf-8") as log:
            rc = subprocess.call(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            report = f">> make {target}: rc={rc} in {time.monotonic() - start:.0f} s\n{fh.read()}"
    seconds = time.monotonic() - start
    progress.job_ended(target, rc, seconds, report)
    return target, rc, seconds


def on_signal(progress):
    """A handler that prints the table so far and exits as the signal would have (128 + its number)."""
    def handler(signum, _frame):
        name = signal.Signals(signum).name
        with progress.lock:
            progress.cut_off = True
            print("\n" + "\n".join(progress.table(cut_off_by=name)), flush=True)
        os._exit(128 + signum)  # the stage's threads wait on children that got the same signal: do not join them
    return handler


def main(stages):
    os.makedirs(LOGS, exist_ok=True)
    progress = Progress()
    previous = {signum: signal.signal(signum, on_signal(progress)) for signum in (signal.SIGTERM, signal.SIGINT)}
    failed = 0
    try:
        for stage in stages:
            targets = stage.split("+")
            busy0, total0 = cpu_times()
            progress.start(stage)
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(targets)) as pool:
                results = list(pool.map(lambda t: run_target(t, len(targets) == 1, progress), targets))
            busy1, total1 = cpu_times()
            cpu = 100.0 * (busy1 - busy0) / max(1, total1 - total0)
            progress.stage_ended(time.monotonic() - progress.started, cpu, results)
            failed = next((result[1] for result in results if result[1]), 0)
            if failed:
                break
    finally:  # main() in a test leaves the test process's handlers as they were
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print("\n" + "\n".join(progress.table()))
    return failed


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]) if len(sys.argv) > 1 else 2)
