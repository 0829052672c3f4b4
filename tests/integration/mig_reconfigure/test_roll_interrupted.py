# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kill anywhere, run again (issue 45): playbooks/mig_reconfigure.yml is killed with SIGKILL - ansible-playbook and
its whole process tree, as when the controller dies - at each phase of a node's roll in turn (after the cordon, in
the middle of the drain, after the apply, during the release), and then run again. The next run must finish what
the killed one left: every node at its target, uncordoned unless an operator had cordoned it, the operand labels
back to "true", the roll's Lease released, and no node drained again that the killed run had drained already.

One fleet for every phase (one control plane start): every node changes in every cycle but node-1 in the first (the
target alternates between all-balanced and all-3g); node-3 was cordoned by an operator before the first roll and must
stay so; node-2 is killed at the phase under test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mig_reconfigure_lab import H100_3G_X2, H100_BALANCED, PLAYBOOK, ROOT, VENV_BIN, Fleet, failures, gpu  # noqa: E402  pylint: disable=import-error,wrong-import-position
from requestlog import mig_allocatable  # noqa: E402  pylint: disable=import-error,wrong-import-position

pytestmark = [pytest.mark.slow, pytest.mark.long]

PHASE = "gpuops.provision/roll-phase"
STATE = "nvidia.com/mig.config.state"
TARGETS = {"all-balanced": [9, 14, 19, 19], "all-3g": [9, 9]}
OPERANDS = ("nvidia.com/gpu.deploy.device-plugin", "nvidia.com/gpu.deploy.gpu-feature-discovery")


def profile_ids(fleet, name):
    return sorted(g["profile_id"] for g in fleet.state(name)["gpus"][0].get("gpu_instances") or [])


def annotations(fleet, name):
    return fleet.node(name)["metadata"].get("annotations") or {}


def start(fleet, selected, log_path):
    """ansible-playbook in a session of its own, so that its whole process group can be killed at once."""
    env = fleet.lab.ansible_env()
    env.update({"ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_FORKS": "8",
                "ANSIBLE_LOCALHOST_WARNING": "0", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0"})
    cmd = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", fleet.inventory, PLAYBOOK,
           "-e", json.dumps({"mig_reconfigure_selected": selected})]
    log = open(log_path, "w", encoding="utf-8")  # pylint: disable=consider-using-with  # closed by the caller's kill
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # pylint: disable=consider-using-with


def renewer_pids(fleet):
    """The roll lock's renewer (an async task, which ansible's async_wrapper puts in a session of its own)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as fh:
                argv = fh.read().decode("utf-8", "replace")
            with open("/proc/%s/environ" % pid, "rb") as fh:
                environ = fh.read().decode("utf-8", "replace")
        except OSError:
            continue
        if "roll_lock" in argv and fleet.lab.tmpdir in environ:
            out.append(int(pid))
    return out


def descendants(root):
    """Every process below ``root`` (ansible-core puts each worker in a process group of its own, so killing the
    playbook's group leaves the workers finishing their step: the whole tree has to go, as when the host dies)."""
    children = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open("/proc/%s/stat" % pid, encoding="utf-8") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(pid))
    out, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out


def kill_tree(root):
    """SIGSTOP the whole tree first (nothing forks or finishes meanwhile), then SIGKILL it."""
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in [root] + descendants(root):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def kill_when(fleet, proc, condition, what, timeout=600):
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, "the roll ended before %s" % what
        assert time.monotonic() < deadline, "never reached %s" % what
        time.sleep(0.05)
    kill_tree(proc.pid)
    proc.wait()
    return time.time()


def lease(fleet):
    return fleet.lab.get_json("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/gpuops-mig-reconfigure")


def test_a_roll_killed_at_any_phase_is_finished_by_the_next_run(tmp_path):
    # node-1 is where the drained pods go (the real scheduler places them; node-3 is cordoned): without it the
    # inference Deployment's replacement has nowhere to run and its PodDisruptionBudget blocks the next drain.
    nodes = {"node-1": {"gpus": [gpu(instances=H100_BALANCED)]}, "node-2": {"gpus": [gpu(instances=H100_3G_X2)]},
             "node-3": {"gpus": [gpu(instances=H100_3G_X2)]}}
    # Pods take their own 5 s grace period to go (a drain that can be caught in the middle); the device plugin
    # reports the new devices 3 s after a change, and not while the test holds it (a release caught waiting).
    # A drain killed in the middle leaves evictions the disruption controller still counts against the inference
    # PodDisruptionBudget for a while (its disruptedPods): the next run's drain waits that out, as kubectl's would.
    fleet = Fleet(tmp_path, nodes, group_vars={"mig_reconfigure_drain_grace_period": None,
                                               "mig_reconfigure_drain_timeout": 240,
                                               "mig_reconfigure_roll_lock_ttl": 30,
                                               "mig_reconfigure_boot_apply": False})
    fleet.fixture["nodes"][2]["spec"] = {"unschedulable": True}  # node-3: cordoned by an operator before any roll
    phases = [
        ("after the cordon", lambda: annotations(fleet, "node-2").get(PHASE) == "cordoned", False),
        ("in the middle of the drain",
         lambda: annotations(fleet, "node-2").get(PHASE) == "cordoned" and fleet.lab.evictions(node="node-2"), False),
        ("after the apply", lambda: profile_ids(fleet, "node-2") == TARGETS[selected], True),
        ("during the release", lambda: annotations(fleet, "node-2").get(PHASE) == "applied", True),
    ]
    hold = threading.Event()

    def hold_the_device_plugin():
        # While set, node-2's GPU state stays "just changed" for the device-plugin stand-in (it advertises a change
        # only once the file is --lag seconds old), so the release waits for the resources until the kill.
        while not stop.is_set():
            if hold.is_set():
                os.utime(fleet.states["node-2"])
            time.sleep(0.5)

    stop = threading.Event()
    holder = threading.Thread(target=hold_the_device_plugin, daemon=True)
    holder.start()
    with fleet.start(eviction_delay=5, devplugin_lag=3) as lab:
        selected = "all-balanced"
        for cycle, (what, reached, past_drain) in enumerate(phases):
            selected = "all-balanced" if cycle % 2 == 0 else "all-3g"
            # The killed run: its renewer is left alive in one cycle (it must release the lock when it sees the
            # controller gone) and killed with the rest in the others (as when the controller host dies: the next
            # run sees that the holder's process is gone and takes the lock over at once).
            launched = time.time()
            if what == "during the release":
                hold.set()
            proc = start(fleet, selected, str(tmp_path / ("killed-%d.json" % cycle)))
            killed_at = kill_when(fleet, proc, reached, what)
            hold.clear()
            phase_at_kill = annotations(fleet, "node-2").get(PHASE)
            renewers = renewer_pids(fleet)
            if cycle != 1:
                for pid in renewers:
                    os.kill(pid, signal.SIGKILL)
            else:
                assert renewers, "the renewer was not running beside the roll"
                lab.wait_for(lambda: (lease(fleet)["spec"].get("holderIdentity") or "") == "", timeout=30,
                             what="the renewer to release the lock of the dead controller")
            evictions_before = {n: len(lab.evictions(node=n)) for n in nodes}
            started = time.monotonic()
            rc, out = fleet.run(extra_vars={"mig_reconfigure_selected": selected}, timeout=900)
            took = time.monotonic() - started
            assert rc == 0, (what, failures(out))
            # The killed run's locks (the roll's Lease, node-2's per-host lock) did not hold the next run back for
            # their time to live (3600 s for the per-host lock, 30 s for the Lease).
            assert took < 600, (what, took)
            for name in nodes:
                node = fleet.node(name)
                labels = node["metadata"]["labels"]
                assert profile_ids(fleet, name) == TARGETS[selected], (what, name)
                if (name, cycle) != ("node-1", 0):  # node-1 is at all-balanced already: the first roll skips it
                    assert labels[STATE] == "success" and all(labels[k] == "true" for k in OPERANDS), (what, name, labels)
                assert node["metadata"]["annotations"].get(PHASE) in (None, "released"), (what, name)
                assert "gpuops.provision/cordoned-by" not in node["metadata"]["annotations"], (what, name)
                assert bool(node["spec"].get("unschedulable")) is (name == "node-3"), (what, name)
                assert mig_allocatable(node), (what, name)
            assert (lease(fleet)["spec"].get("holderIdentity") or "") == "", what
            # A node the killed run had drained is not drained again (nothing was evicted from it in the new run).
            if past_drain:
                assert phase_at_kill in ("drained", "applied"), (what, phase_at_kill)
                assert len(lab.evictions(node="node-2")) == evictions_before["node-2"], what
            stats = out["global_custom_stats"]["mig_reconfigure"]["nodes"]
            assert stats["node-2"]["result"] == "success", (what, stats["node-2"])
            assert stats["node-2"]["resumed_from"] == phase_at_kill, (what, stats["node-2"], phase_at_kill)
            print("\n%s: killed at phase %s, %.1f s after it started; the next run took %.1f s"
                  % (what, phase_at_kill, killed_at - launched, took))
        stop.set()
