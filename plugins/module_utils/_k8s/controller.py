# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who runs a roll, as far as it can be known on this host: the ``ansible-playbook`` process above this module run,
named by host, boot, pid and start time, and whether such a process still runs (I/O: /proc).

A roll's Lease and per-host locks carry this identity so that the next run can tell a holder that died (a controller
killed with its whole process tree, an AWX job container gone) from one that is still working: where the next run
runs on the same host and boot, a pid that is gone, or reused by another process (its start time differs), is a dead
holder, and its locks are taken over at once instead of after their time to live. Where the identity names another
host or boot, nothing can be known here and the time to live decides.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any, Optional

PROC = "/proc"
# The programs whose process is a roll's controller (ansible-runner starts ansible-playbook too).
CONTROLLERS = ("ansible-playbook",)


def _read(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return None


def boot_id(proc: str = PROC) -> str:
    return (_read(os.path.join(proc, "sys", "kernel", "random", "boot_id")) or "").strip()


def stat(pid: int, proc: str = PROC) -> Optional[tuple[int, int]]:
    """(parent pid, start time in clock ticks since boot) of ``pid`` from /proc/<pid>/stat; None when it is gone or
    a zombie (proc(5): the fields after the command name, which may itself hold spaces and parentheses)."""
    text = _read(os.path.join(proc, str(pid), "stat"))
    if not text or ")" not in text:
        return None
    fields = text.rsplit(")", 1)[1].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return int(fields[1]), int(fields[19])


def _is_controller(pid: int, proc: str) -> bool:
    argv = (_read(os.path.join(proc, str(pid), "cmdline")) or "").split("\0")
    return any(os.path.basename(arg) in CONTROLLERS for arg in argv[:3])


def controller(pid: Optional[int] = None, proc: str = PROC) -> Optional[dict[str, Any]]:
    """The identity of the outermost ``ansible-playbook`` process among ``pid``'s ancestors (this process by
    default): ansible-playbook forks a worker per task, and the module runs below that worker, so the outermost one
    is the run itself. None when there is none (the module runs on another host than the controller)."""
    pid = os.getpid() if pid is None else pid
    found = None
    seen = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        st = stat(pid, proc)
        if st is None:
            break
        if _is_controller(pid, proc):
            found = (pid, st[1])
        pid = st[0]
    if found is None:
        return None
    return {"host": socket.gethostname(), "boot": boot_id(proc), "pid": found[0], "start": found[1]}


def alive(identity: Optional[Mapping[str, Any]], proc: str = PROC) -> Optional[bool]:
    """Whether the process ``identity`` names still runs: True or False where it can be known here (same host and
    boot), None where it cannot (another host or boot, or no identity)."""
    if not identity:
        return None
    try:
        pid, start = int(identity["pid"]), int(identity["start"])
    except (KeyError, TypeError, ValueError):
        return None
    if identity.get("host") != socket.gethostname() or identity.get("boot") != boot_id(proc):
        return None
    st = stat(pid, proc)
    return st is not None and st[1] == start


def encode(identity: Optional[Mapping[str, Any]]) -> str:
    """'host=<h>;boot=<b>;pid=<p>;start=<s>' for an annotation ('' for none)."""
    if not identity:
        return ""
    return ";".join("%s=%s" % (k, identity[k]) for k in ("host", "boot", "pid", "start"))


def decode(text: Optional[str]) -> Optional[dict[str, Any]]:
    """The identity encode() wrote; None for an empty or unreadable text."""
    out: dict[str, Any] = {}
    for part in (text or "").split(";"):
        key, sep, value = part.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out if {"host", "boot", "pid", "start"} <= set(out) else None
