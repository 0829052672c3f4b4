# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who runs a roll (plugins/module_utils/_k8s/controller.py): the ansible-playbook process above a module run, and whether
such a process still runs, read from a /proc tree (a fake one here, laid out as proc(5) describes it)."""

from __future__ import annotations

import os
import socket

from ansible_collections.gpuops.provision.plugins.module_utils._k8s import controller as P


def fake_proc(tmp_path, procs, boot="b00t"):
    """procs: {pid: (ppid, start, argv, state)}."""
    root = tmp_path / "proc"
    (root / "sys" / "kernel" / "random").mkdir(parents=True)
    (root / "sys" / "kernel" / "random" / "boot_id").write_text(boot + "\n")
    for pid, (ppid, start, argv, state) in procs.items():
        d = root / str(pid)
        d.mkdir()
        # comm may hold spaces and parentheses; fields after it: state ppid ... starttime is field 22 overall.
        fields = [state, str(ppid)] + ["0"] * 17 + [str(start)] + ["0"] * 5
        (d / "stat").write_text("%d (%s) %s\n" % (pid, "py (x) y", " ".join(fields)))
        (d / "cmdline").write_bytes("\0".join(argv).encode() + b"\0")
    return str(root)


TREE = {
    10: (1, 500, ["/usr/bin/python3", "/venv/bin/ansible-playbook", "site.yml"], "S"),  # the run
    20: (10, 600, ["/usr/bin/python3", "/venv/bin/ansible-playbook", "site.yml"], "S"),  # its worker (a fork)
    30: (20, 700, ["/bin/sh", "-c", "python3 AnsiballZ_roll_lock.py"], "S"),
    40: (30, 800, ["python3", "/tmp/AnsiballZ_roll_lock.py"], "R"),
    50: (1, 900, ["sshd"], "S"),
    60: (50, 950, ["python3", "/tmp/AnsiballZ_roll_lock.py"], "R"),
}


def test_the_controller_is_the_outermost_ansible_playbook_above_the_module(tmp_path):
    proc = fake_proc(tmp_path, TREE)
    assert P.controller(40, proc) == {"host": socket.gethostname(), "boot": "b00t", "pid": 10, "start": 500}
    # A module that runs on another host than the controller (below sshd) has none.
    assert P.controller(60, proc) is None
    assert P.controller(999, proc) is None


def test_alive_is_known_only_on_the_same_host_and_boot(tmp_path):
    proc = fake_proc(tmp_path, TREE)
    me = {"host": socket.gethostname(), "boot": "b00t", "pid": 10, "start": 500}
    assert P.alive(me, proc) is True
    assert P.alive(dict(me, start=501), proc) is False  # the pid was reused by another process
    assert P.alive(dict(me, pid=11), proc) is False     # gone
    assert P.alive(dict(me, host="elsewhere"), proc) is None
    assert P.alive(dict(me, boot="other"), proc) is None
    assert P.alive(None, proc) is None and P.alive({"pid": "x"}, proc) is None
    zombie = fake_proc(tmp_path / "z", {10: (1, 500, ["ansible-playbook"], "Z")})
    assert P.alive(me, zombie) is False


def test_identity_round_trips_through_an_annotation():
    me = {"host": "ctl", "boot": "b", "pid": 4242, "start": 99}
    text = P.encode(me)
    assert text == "host=ctl;boot=b;pid=4242;start=99"
    assert P.decode(text) == {"host": "ctl", "boot": "b", "pid": "4242", "start": "99"}
    assert P.encode(None) == "" and P.decode("") is None and P.decode("host=ctl;pid=1") is None


def test_this_process_is_alive_by_its_own_identity():
    st = P.stat(os.getpid())
    assert st is not None and st[0] == os.getppid()
    me = {"host": socket.gethostname(), "boot": P.boot_id(), "pid": os.getpid(), "start": st[1]}
    assert P.alive(me) is True
