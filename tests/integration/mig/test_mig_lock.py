# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-host MIG lock between real processes (issue 15 point 4): two mig_geometry applies on one gpusim host, a
killed holder, and the role's lock CLI against a running module. The first run is stopped at a gate inside its
apply (gpusim's GPUSIM_GATE, lab/gpusim/gpusim/capi.py), holding the lock, until the test lets it go."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from gpusim_nvml import library_env  # pylint: disable=import-error

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HOSTLOCK = os.path.join(ROOT, "plugins", "module_utils", "_mig", "host_lock.py")
A100 = "NVIDIA A100-SXM4-40GB"
ARGS = {"devices": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.20gb": 1, "2g.10gb": 2}}]}
HOLDER = "gpuops.provision.mig_geometry"


class Sim:
    """One simulated host: a gpusim state, its lock file and the module run as its own Python process."""

    def __init__(self, base):
        self.base = str(base)
        self.state = os.path.join(self.base, "gpusim.json")
        self.lock = os.path.join(self.base, "run", "gpuops", "mig.lock")
        self.gate = os.path.join(self.base, "gate")

    def reset(self):
        with open(self.state, "w", encoding="utf-8") as fh:
            json.dump({"gpus": [{"model": A100, "mig_mode": "enabled"}]}, fh)

    def env(self, gated=False):
        env = dict(os.environ, GPUOPS_MIG_LOCK=self.lock, PYTHONPATH=os.path.join(ROOT, "build", "collections"),
                   **library_env(self.state))
        env.pop("GPUSIM_GATE", None)
        if gated:
            env["GPUSIM_GATE"] = self.gate
        return env

    def start(self, args=None, gated=False):
        """A mig_geometry run (python -m, arguments inline, as AnsibleModule reads them when debugging)."""
        cmd = [sys.executable, "-m", "ansible_collections.gpuops.provision.plugins.modules.mig_geometry",
               json.dumps({"ANSIBLE_MODULE_ARGS": args or ARGS})]
        return subprocess.Popen(cmd, cwd=self.base, env=self.env(gated), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def result(self, proc, timeout=120):
        out, err = proc.communicate(timeout=timeout)
        try:
            return json.loads(out)
        except ValueError:
            raise AssertionError("no JSON from mig_geometry (rc %s):\n%s\n%s" % (proc.returncode, out, err)) from None

    def start_holder(self):
        """A first apply that stops at the gate, inside its apply, holding the lock; returns it once it is there."""
        with open(self.gate, "w", encoding="utf-8"):
            pass
        entered = self.gate + ".entered"
        if os.path.exists(entered):
            os.unlink(entered)
        first = self.start(gated=True)
        deadline = time.monotonic() + 60
        while not os.path.exists(entered):
            if first.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("the first run never reached the gate: %s" % (first.communicate(),))
            time.sleep(0.02)
        return first

    def open_gate(self):
        os.unlink(self.gate)

    def hostlock(self, *args):
        proc = subprocess.run([sys.executable, HOSTLOCK] + list(args) + ["--path", self.lock], capture_output=True,
                              text=True, check=False, timeout=60)
        return proc.returncode, json.loads(proc.stdout)


@pytest.fixture
def sim(tmp_path):
    s = Sim(tmp_path)
    s.reset()
    return s


def test_second_concurrent_apply_is_refused_at_once_naming_the_holder_20_of_20(sim):
    refused = 0
    first_ok = 0
    slowest = 0.0
    for attempt in range(20):
        sim.reset()
        first = sim.start_holder()
        before = open(sim.state, "rb").read()
        started = time.monotonic()
        second = sim.result(sim.start())
        elapsed = time.monotonic() - started
        untouched = open(sim.state, "rb").read() == before
        sim.open_gate()
        done = sim.result(first)
        if done.get("changed") is True and not done.get("failed"):
            first_ok += 1
        else:
            print("attempt %d: the first run failed: %s" % (attempt, done.get("msg")))
        msg = second.get("msg", "")
        named = ("another MIG run holds the per-host lock %s: %s (pid %d on " % (sim.lock, HOLDER, first.pid)) in msg
        # Refused before reading or changing anything: no per-GPU results, the simulated GPUs untouched.
        if second.get("failed") and second["changed"] is False and named and msg.endswith("; nothing was changed") \
                and second["lock"]["held_by"]["pid"] == first.pid and second["lock"]["waited"] == 0 and untouched \
                and "gpus" not in second:
            refused += 1
        else:
            print("attempt %d: the second run was not refused: %s" % (attempt, msg or second.get("changed")))
        slowest = max(slowest, elapsed)
    print("\nconcurrent applies on one host: the second refused at once naming the holder %d/20 times, the first "
          "completed %d/20 times (slowest refusal %.2f s, a whole module process)" % (refused, first_ok, slowest))
    assert (refused, first_ok) == (20, 20)
    assert not os.path.exists(sim.lock), "a released lock left its file"


def test_a_killed_holder_leaves_no_lock(sim):
    first = sim.start_holder()
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    sim.open_gate()
    # The kernel dropped the flock with the process: the file may remain, the lock does not.
    assert os.path.exists(sim.lock)
    code, shown = sim.hostlock("show")
    assert code == 0 and shown["held_by"] is None, shown
    started = time.monotonic()
    second = sim.result(sim.start())
    assert second.get("changed") is True and not second.get("failed"), second.get("msg")
    assert second["lock"]["waited"] == 0 and second["lock"]["holder"] == HOLDER
    assert time.monotonic() - started < 60
    assert not os.path.exists(sim.lock)


def test_the_roles_lock_command_is_refused_by_a_running_module_and_the_module_by_the_roles_lock(sim):
    role = "gpuops.provision.mig_reconfigure run 0badc0de (user=alice controller=awx-1 node=gpu-node-1)"
    # A module run holds the lock: the role's lock task (the same CLI it runs on the node) is refused, naming it.
    first = sim.start_holder()
    code, out = sim.hostlock("acquire", "--holder", role)
    sim.open_gate()
    assert sim.result(first)["changed"] is True
    assert code == 1 and out["acquired"] is False
    assert ("holds the per-host lock %s: %s (pid %d on" % (sim.lock, HOLDER, first.pid)) in out["msg"], out["msg"]
    # The role holds its lock across tasks: a direct module run is refused, naming the role's run; the role's own
    # module steps (its lock_holder) go ahead inside it.
    code, out = sim.hostlock("acquire", "--holder", role)
    assert code == 0 and out["acquired"] is True, out
    direct = sim.result(sim.start(dict(ARGS, force=True)))
    assert direct["failed"] and direct["lock"]["held_by"]["kind"] == "lease"
    assert ("another MIG run holds the per-host lock %s: %s (kept across its tasks since" % (sim.lock, role)) in direct["msg"]
    inside = sim.result(sim.start(dict(ARGS, lock_holder=role, devices=[{"devices": "all", "mig-enabled": False}])))
    assert inside.get("changed") is True and inside["lock"]["lease"] == role, inside.get("msg")
    code, out = sim.hostlock("release", "--holder", role)
    assert code == 0 and out["released"] is True
    assert not os.path.exists(sim.lock)
    again = sim.result(sim.start())
    assert again.get("changed") is True and again["lock"]["lease"] is None


def test_two_ansible_runs_the_second_refused_naming_the_first(host, tmp_path):
    """The same through `ansible localhost -m` (AnsiballZ, the module's own pid in the record)."""
    host.write({"gpus": [{"model": A100, "mig_mode": "enabled"}]})
    gate = str(tmp_path / "gate")
    open(gate, "w", encoding="utf-8").close()
    env = {"GPUSIM_GATE": gate}
    results = {}
    first = threading.Thread(target=lambda: results.update(first=host.run("mig_geometry", ARGS, extra_env=env)))
    first.start()
    deadline = time.monotonic() + 120
    while not os.path.exists(gate + ".entered"):
        assert first.is_alive() and time.monotonic() < deadline, results
        time.sleep(0.05)
    pid = int(open(gate + ".entered", encoding="utf-8").read())
    second = host.run("mig_geometry", ARGS)
    os.unlink(gate)
    first.join(timeout=180)
    assert results["first"].get("changed") is True, results["first"].get("msg")
    assert second["failed"] is True and second["changed"] is False
    assert "another MIG run holds the per-host lock" in second["msg"] and "%s (pid %d on" % (HOLDER, pid) in second["msg"]
    assert second["lock"]["held_by"]["pid"] == pid
