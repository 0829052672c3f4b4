# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-host MIG lock (plugins/module_utils/_mig/host_lock.py): flock, the holder's record, leases, the CLI."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._mig import host_lock

CLI = host_lock.__file__


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "run" / "gpuops" / "mig.lock")


def cli(*args):
    proc = subprocess.run([sys.executable, CLI] + list(args), capture_output=True, text=True, check=False, timeout=60)
    return proc.returncode, json.loads(proc.stdout)


def test_a_second_run_is_refused_at_once_naming_the_first(path):
    first = host_lock.HostLock(path, "gpuops.provision.mig_geometry").acquire()
    started = time.monotonic()
    with pytest.raises(host_lock.LockHeld) as refused:
        host_lock.HostLock(path, "someone else").acquire()
    assert time.monotonic() - started < 0.5
    held = refused.value.held_by
    assert (held["kind"], held["holder"], held["pid"], held["host"]) == ("run", "gpuops.provision.mig_geometry", os.getpid(),
                                                                         socket.gethostname())
    assert str(refused.value).startswith("another MIG run holds the per-host lock %s: gpuops.provision.mig_geometry "
                                         "(pid %d on " % (path, os.getpid()))
    assert " ago)" in str(refused.value)
    first.release()
    # Released: the file is gone and the next run gets the lock.
    assert not os.path.exists(path)
    with host_lock.HostLock(path, "someone else") as second:
        assert second.waited == 0 and host_lock.status(path)["holder"] == "someone else"
    assert host_lock.status(path) is None


def test_a_killed_holder_leaves_no_lock(path):
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, %r)\n"
        "from ansible_collections.gpuops.provision.plugins.module_utils._mig import host_lock\n"
        "host_lock.HostLock(%r, 'victim').acquire(); print('held', flush=True); time.sleep(600)") % (sys.path[0], path)],
        stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    try:
        assert holder.stdout.readline().strip() == "held"
        assert host_lock.status(path)["pid"] == holder.pid
        with pytest.raises(host_lock.LockHeld, match="victim"):
            host_lock.HostLock(path, "next").acquire()
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
    # The kernel dropped the flock: the record is still in the file, but nobody holds the lock.
    assert os.path.exists(path) and host_lock.status(path) is None
    with host_lock.HostLock(path, "next") as lock:
        assert lock.waited == 0 and not lock.warnings


def test_lock_timeout_waits_for_the_holder(path):
    first = host_lock.HostLock(path, "first").acquire()
    threading.Timer(0.4, first.release).start()
    with host_lock.HostLock(path, "second", timeout=10) as second:
        assert 0.3 < second.waited < 5


def test_a_holder_that_went_away_while_another_opened_the_file_is_not_trusted(path):
    # B opened the file; A released it (unlinked it); C took a new one. B's flock on the orphan must not count.
    a = host_lock.HostLock(path, "a").acquire()
    b = host_lock.HostLock(path, "b")
    fd = b._open()
    a.release()
    c = host_lock.HostLock(path, "c").acquire()
    try:
        assert b._try(fd) is True
        os.close(fd)
        with pytest.raises(host_lock.LockHeld, match=": c "):
            b.acquire()
    finally:
        c.release()


def test_a_long_held_lock_is_named_with_its_age_and_how_to_free_it(path):
    first = host_lock.HostLock(path, "stuck run").acquire()
    record = json.loads(open(path, encoding="utf-8").read())
    record["run"]["since"] -= 3 * 3600
    first._write(record)
    with pytest.raises(host_lock.LockHeld) as refused:
        host_lock.HostLock(path, "next").acquire()
    msg = str(refused.value)
    where = "pid %d on %s" % (os.getpid(), socket.gethostname())
    assert ("stuck run (%s, user " % where) in msg and ", 3 h 0 min ago)" in msg
    assert "it has held the lock for more than 15 min 0 s: if it hangs, stop %s" % where in msg
    assert refused.value.held_by["hung"] is True
    first.release()


def test_a_record_of_a_run_that_ended_does_not_name_a_live_holder(path):
    # The record names a run that has ended (its pid holds no lock); the live holder is named by its pid.
    first = host_lock.HostLock(path, "alive").acquire()
    first._write({"lease": None, "run": {"holder": "gone", "pid": 4242, "host": "h", "user": "u", "since": time.time()}})
    started = time.monotonic()
    with pytest.raises(host_lock.LockHeld) as refused:
        host_lock.HostLock(path, "next").acquire()
    assert 0.9 < time.monotonic() - started < 5, "an unrecorded holder gets a moment to record itself"
    assert "a run that has not recorded itself (pid %d on " % os.getpid() in str(refused.value)
    first.release()


def test_the_roles_lease_spans_processes_and_its_own_steps_run_inside_it(path):
    role = "gpuops.provision.mig_reconfigure run 5f0c2a91 (user=alice controller=awx-1 node=gpu-node-1)"
    code, out = cli("acquire", "--path", path, "--holder", role, "--stale-after", "3600")
    assert code == 0 and out["acquired"] is True and out["renewed"] is False
    # No process holds the flock now; the lease in the file keeps the lock for the role.
    assert host_lock.status(path)["kind"] == "lease"
    with pytest.raises(host_lock.LockHeld) as refused:
        host_lock.HostLock(path, "gpuops.provision.mig_geometry").acquire()
    assert refused.value.held_by["kind"] == "lease" and refused.value.held_by["holder"] == role
    assert ("%s (kept across its tasks since " % role) in str(refused.value) and "stale after 3600 s" in str(refused.value)
    since = json.loads(open(path, encoding="utf-8").read())["lease"]["since"]
    with host_lock.HostLock(path, role) as step:
        assert step.lease["holder"] == role and step.lease["since"] == since
        # While the role's step runs, a refused run names the role's run and the step's pid.
        with pytest.raises(host_lock.LockHeld, match=re.escape("%s (pid %d on" % (role, os.getpid()))):
            host_lock.HostLock(path, "other").acquire()
    assert host_lock.status(path)["kind"] == "lease", "the role's step must not end the role's lease"
    code, out = cli("acquire", "--path", path, "--holder", role)
    assert code == 0 and out["renewed"] is True
    code, out = cli("release", "--path", path, "--holder", role)
    assert code == 0 and out["released"] is True
    assert not os.path.exists(path) and host_lock.status(path) is None


def test_a_stale_lease_is_taken_over_naming_its_holder(path):
    code, _out = cli("acquire", "--path", path, "--holder", "a run whose controller died", "--stale-after", "0")
    assert code == 0
    time.sleep(0.05)
    with host_lock.HostLock(path, "gpuops.provision.mig_geometry") as lock:
        assert lock.took_over["holder"] == "a run whose controller died" and lock.lease is None
        assert lock.warnings == ["the MIG lock %s was kept by a run whose controller died (kept across its tasks since %s, "
                                 "0 s ago; renewed 0 s ago, stale after 0 s without renewal); it is stale and this run took "
                                 "it over" % (path, lock.took_over["since"])]
    assert host_lock.status(path) is None


def test_release_leaves_a_lease_of_another_run_alone(path):
    assert cli("acquire", "--path", path, "--holder", "run B")[0] == 0
    started = time.monotonic()
    code, out = cli("release", "--path", path, "--holder", "run A")
    assert time.monotonic() - started < 5, "a lease is not waited for"
    assert code == 0 and out["released"] is False and out["held_by"]["holder"] == "run B"
    assert host_lock.status(path)["holder"] == "run B"


def test_cli_refusal_names_the_holder_and_fails(path):
    with host_lock.HostLock(path, "gpuops.provision.mig_geometry"):
        code, out = cli("acquire", "--path", path, "--holder", "the role")
    assert code == 1 and out["acquired"] is False and out["held_by"]["pid"] == os.getpid()
    assert out["msg"].startswith("another MIG run holds the per-host lock %s: gpuops.provision.mig_geometry (pid" % path)


def test_old_mkdir_lock_and_unusable_paths_fail_clearly(tmp_path):
    old = tmp_path / "gpuops-mig-reconfigure.lock"
    old.mkdir()
    with pytest.raises(host_lock.LockError, match="is a directory .*mkdir"):
        host_lock.HostLock(str(old), "x").acquire()
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(host_lock.LockError, match="cannot open the lock file"):
        host_lock.HostLock(str(blocker / "mig.lock"), "x").acquire()


def test_a_read_only_run_that_cannot_create_the_file_honours_a_holder_or_goes_on_with_a_warning(monkeypatch, path):
    real_open = os.open

    def no_write(p, flags, *mode):
        if flags & (os.O_RDWR | os.O_WRONLY | os.O_CREAT):
            raise PermissionError(errno.EACCES, "Permission denied", p)
        return real_open(p, flags, *mode)

    monkeypatch.setattr(host_lock.os, "makedirs", lambda *a, **k: None)
    monkeypatch.setattr(host_lock.os, "open", no_write)
    with host_lock.HostLock(path, "plan", shared=True) as lock:
        assert lock.fd is None and "could not be taken (Permission denied)" in lock.warnings[0]
    with pytest.raises(host_lock.LockError, match="Permission denied"):
        host_lock.HostLock(path, "apply").acquire()
    monkeypatch.setattr(host_lock.os, "open", real_open)
    monkeypatch.undo()
    holder = host_lock.HostLock(path, "an apply").acquire()
    monkeypatch.setattr(host_lock.os, "open", no_write)
    with pytest.raises(host_lock.LockHeld, match="an apply"):
        host_lock.HostLock(path, "plan", shared=True).acquire()
    monkeypatch.setattr(host_lock.os, "open", real_open)
    holder.release()


def test_plans_share_the_lock_and_exclude_changes_both_ways(path):
    plan = host_lock.HostLock(path, "preflight plan", shared=True).acquire()
    with host_lock.HostLock(path, "role plan", shared=True) as other:
        assert other.fd is not None, "two plans must not refuse each other"
        with pytest.raises(host_lock.LockHeld) as refused:
            host_lock.HostLock(path, "an apply").acquire()
        assert "preflight plan (pid %d on " % os.getpid() in str(refused.value) and ", check mode, since " in str(refused.value)
    assert os.path.exists(path), "a plan still holds it"
    plan.release()
    assert not os.path.exists(path), "the last plan out removes the file"
    with host_lock.HostLock(path, "an apply"):
        with pytest.raises(host_lock.LockHeld, match="an apply"):
            host_lock.HostLock(path, "a plan", shared=True).acquire()
