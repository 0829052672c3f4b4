# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""tools/test_phases.py and tools/molecule_all.py when CI's time limit ends the run: CI's run of 2026-12-07 was
terminated in Molecule and printed no table, so nothing said which stage had taken the time. Each tool now prints
the table so far on SIGTERM, the running stage or scenarios with their time so far, and exits 128 + 15.

Each tool runs as a process, from a copy in a scratch tree (its ROOT), with ``make`` and ``molecule`` stand-ins on
PATH that sleep, so that the signal arrives while a stage runs."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import molecule_all  # noqa: E402  pylint: disable=import-error,wrong-import-position
import test_phases  # noqa: E402  pylint: disable=import-error,wrong-import-position

# `make TARGET`: "quick" ends after a second, every other target sleeps until it is killed. The second leaves a
# stage's slow job started while its quick job still runs, as CI's machine did.
FAKE_MAKE = """#!/bin/sh
for target; do :; done
echo "making $target"
[ "$target" = quick ] && exec sleep 1
exec sleep 60
"""
# `molecule test -s NAME`: "short" ends after a moment; "flaky" fails its first run (a fatal task, as Ansible prints
# it) and sleeps in its retry; every other scenario sleeps until it is killed.
FAKE_MOLECULE = """#!/bin/sh
echo "scenario $3"
[ "$3" = short ] && exit 0
if [ "$3" = flaky ] && [ ! -e flaky.ran ]; then
    touch flaky.ran
    echo "TASK [Wait for the node to come back]"
    echo "fatal: [drv-node-2]: FAILED! => timed out waiting for the reboot"
    exit 2
fi
exec sleep 60
"""


def scratch(tmp_path, tool, fake_name, fake_text):
    """A tree with tools/<tool> and a bin/ with the fake program; returns (script, environment)."""
    (tmp_path / "tools").mkdir()
    shutil.copy(os.path.join(ROOT, "tools", tool), tmp_path / "tools" / tool)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / fake_name).write_text(fake_text, encoding="utf-8")
    (bindir / fake_name).chmod(0o755)
    env = dict(os.environ, PATH=str(bindir) + os.pathsep + os.environ["PATH"], PYTHONUNBUFFERED="1")
    return str(tmp_path / "tools" / tool), env


def terminate_when(proc, markers, started, timeout=60):
    """SIGTERM ``proc``'s process group (as CI's limit does) once its output has shown each of ``markers``, in that
    order, and the file ``started`` (a log the stand-in writes when it runs) exists with content; return its whole
    output and exit status."""
    out = ""
    deadline = time.monotonic() + timeout
    seen = 0
    for marker in markers:
        while marker not in out[seen:]:
            assert time.monotonic() < deadline, out
            out += proc.stdout.readline()
        seen = out.index(marker, seen) + len(marker)
    while not (os.path.exists(started) and os.path.getsize(started)):
        assert time.monotonic() < deadline, out
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)
    rest = proc.communicate(timeout=30)[0]
    return out + rest, proc.returncode


def test_make_test_cut_off_prints_the_stages_so_far_and_the_running_one(tmp_path):
    script, env = scratch(tmp_path, "test_phases.py", "make", FAKE_MAKE)
    proc = subprocess.Popen([sys.executable, script, "quick", "quick+slow", "never"], env=env, cwd=str(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    # The quick job of stage 2 has ended and the slow one has started (its log says "making slow"). Stage 1's quick
    # job prints the same end line, so the wait starts at stage 2's start: CI's run of 2026-12-07 signalled after
    # stage 1's line, while stage 2's quick job still ran.
    out, rc = terminate_when(proc, [">> make test: stage 2", ">> make quick: rc=0"],
                             str(tmp_path / "build" / "phases" / "slow.log"))
    assert rc == 128 + signal.SIGTERM, out
    table = out[out.index("make test phases"):]
    assert ", cut off by SIGTERM:" in table.splitlines()[0], table
    rows = table.splitlines()[1:]
    assert len(rows) == 2 and re.search(r"cpu +\d+%  quick \d+ s$", rows[0]), table
    assert re.search(r"^ +\d+ s  \(running\)  quick \d+ s, slow still running$", rows[1]), table
    assert "never" not in table and "stage 3" not in out
    assert re.search(r">> make quick: rc=0 in \d+ s", out)  # the job that ended in the running stage, when it ended


def test_make_test_that_ends_prints_its_table_without_a_running_row(tmp_path):
    script, env = scratch(tmp_path, "test_phases.py", "make", FAKE_MAKE)
    out = subprocess.run([sys.executable, script, "quick", "quick+quick"], env=env, cwd=str(tmp_path), check=True,
                         capture_output=True, text=True).stdout
    table = out[out.index("make test phases"):].splitlines()
    assert table[0].endswith(" s in all:") and len(table) == 3 and "(running)" not in out, out
    assert ">> make test: stage 1 (quick) starts at +0 s" in out


def test_molecule_cut_off_prints_each_scenario_ended_running_or_not_started(tmp_path):
    script, env = scratch(tmp_path, "molecule_all.py", "molecule", FAKE_MOLECULE)
    for name in ("short", "long", "flaky", "last"):
        (tmp_path / "molecule" / name).mkdir(parents=True)
        (tmp_path / "molecule" / name / "molecule.yml").write_text("---\n", encoding="utf-8")
    # molecule_all runs the molecule beside its interpreter: one in the scratch bin/.
    python = tmp_path / "bin" / "python"
    python.symlink_to(sys.executable)
    proc = subprocess.Popen([str(python), script, "--jobs", "2", "short", "long", "flaky", "last"], env=env,
                            cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    # short has ended, flaky took its place and failed, and its retry has started (its log says "scenario flaky").
    out, rc = terminate_when(proc, [">> molecule test -s short: rc=0", ">> molecule test -s flaky: rc=2"],
                             str(tmp_path / "build" / "molecule" / "flaky.retry1.log"))
    assert rc == 128 + signal.SIGTERM, out
    tail = out[out.index("molecule: cut off by SIGTERM"):].splitlines()
    assert tail[1].split()[:2] == ["short", "passed"], tail
    assert tail[2].split()[:3] == ["long", "still", "running"], tail
    # The retry's row says that its time is two runs and how the first ended; what failed follows the table.
    assert tail[3].split()[:3] == ["flaky", "still", "running"], tail
    assert re.search(r"s  \(run 2; run 1 FAILED rc=2; \d+ s in the earlier runs\)$", tail[3]), tail
    assert tail[4].split() == ["last", "not", "started"], tail
    assert tail[5:8] == ["molecule: flaky failed its first run (rc=2, log build/molecule/flaky.log); what failed:",
                         "    TASK [Wait for the node to come back]",
                         "    fatal: [drv-node-2]: FAILED! => timed out waiting for the reboot"], tail


def test_the_phases_table_counts_the_running_stage_from_its_start():
    now = [100.0]
    progress = test_phases.Progress(clock=lambda: now[0])
    progress.start("sanity+lab-kube")
    now[0] = 130.0
    progress.job_ended("lab-kube", 2, 30.0)
    progress.stage_ended(30.0, 88.0, [("sanity", 0, 29.0), ("lab-kube", 2, 30.0)])
    progress.start("integration")
    now[0] = 200.0
    lines = progress.table(cut_off_by="SIGTERM")
    assert lines[0].endswith("100 s in all, cut off by SIGTERM:")
    assert lines[1] == "      30 s  cpu  88%  sanity 29 s, lab-kube 30 s FAILED rc=2"
    assert lines[2] == "      70 s  (running)  integration still running"
    assert progress.table()[1:] == lines[1:2]  # a run that ends has no running row


def test_a_job_killed_by_the_cut_off_signal_is_shown_running_not_failed():
    # CI's SIGTERM reaches the running jobs as well: the worker thread may record `make slow` dead of it (rc -15)
    # before the handler prints. That job was cut off, not failed; a job that failed on its own still shows its rc.
    clock = iter([0.0, 0.0, 5.0, 5.0])  # Progress(), start(), then each table()
    progress = test_phases.Progress(clock=lambda: next(clock))
    progress.start("quick+slow+broken")
    for target, rc, seconds in (("quick", 0, 1.0), ("broken", 2, 3.0), ("slow", -signal.SIGTERM, 5.0)):
        progress.job_ended(target, rc, seconds)
    assert progress.table(cut_off_by="SIGTERM")[1] == \
        "       5 s  (running)  quick 1 s, slow still running, broken 3 s FAILED rc=2"
    # Another signal than the one that cut the run off is a failure like any other.
    assert progress.table(cut_off_by="SIGINT")[1] == \
        "       5 s  (running)  quick 1 s, slow 5 s FAILED rc=-15, broken 3 s FAILED rc=2"


def test_the_molecule_table_adds_a_retried_scenarios_runs():
    lines = molecule_all.table(["a", "b", "c"], {"a": (0, 300.0, 2), "b": (2, 100.0, 1)}, {"b": 50.0}, 80.0)
    assert lines == ["  a                    passed on retry     300 s",
                     "  b                    still running       130 s  (run 2; run 1 FAILED rc=2; 100 s in the earlier runs)",
                     "  c                    not started"]
