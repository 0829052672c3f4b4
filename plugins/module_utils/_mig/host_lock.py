# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one per-host MIG lock: taken by the mig_geometry module, the mig_reconfigure role and the boot-time re-apply.

A run holds ``flock(2)`` on the lock file for as long as it runs. The kernel drops that lock when the process exits,
however it exits, so a crashed or killed run never leaves a lock behind. The file holds a JSON record of the holder
(who, pid, host, since) so that a refused run can name it. A run that changes the GPUs holds it exclusively; a
read-only run (check mode) holds it shared: plans exclude every change, not each other, since a plan read while
another run rebuilds the GPUs would describe a half-built layout, while two plans disturb nothing.

The role's per-node reconfiguration spans many tasks, each its own process, and sometimes a reboot. It keeps the
lock between them as a *lease*: a record in the same file, written under the flock, naming its holder. A run with
that holder goes ahead inside the lease (and renews it); any other run is refused, naming it, until the role releases
it, or until it has not been renewed for its stale timeout (a controller killed mid-run leaves it behind), when the
next changing run takes it over and says whose it was. A live flock is never broken: a run holding the lock for long
is named with its age and pid, and only stopping that process frees the lock. The default path is under /run, which
the system empties at boot, so a reboot ends every lease.

Stdlib only: the boot-time applier runs this without ansible-core. ``python _mig/host_lock.py acquire|release|show`` is
how the role takes and drops its lease on the node (one JSON object on stdout).
"""

from __future__ import annotations

import argparse
import errno
import fcntl
import json
import os
import pwd
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Optional, Union

DEFAULT_PATH = "/run/gpuops/mig.lock"
ENV_PATH = "GPUOPS_MIG_LOCK"
# A mig_geometry run takes seconds to a minute; a run holding the lock longer than this is named as possibly hung.
HUNG_AFTER = 900
POLL = 0.1
GRACE = 1.0
OLD_DIRECTORY = ("the lock path %s is a directory (the lock of an older gpuops.provision mig_reconfigure, a mkdir; "
                 "remove it once no such run is going)")


class LockError(Exception):
    """The lock could not be taken for a reason other than another holder (path unusable, no permission)."""


class LockHeld(LockError):
    """Another run holds the lock; ``held_by`` describes it (see describe())."""

    def __init__(self, msg: str, held_by: dict[str, Any]) -> None:
        super(LockHeld, self).__init__(msg)
        self.held_by = held_by


def default_path() -> str:
    return os.environ.get(ENV_PATH) or DEFAULT_PATH


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _span(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    if seconds < 120:
        return "%d s" % seconds
    if seconds < 7200:
        return "%d min %d s" % divmod(seconds, 60)
    return "%d h %d min" % (seconds // 3600, seconds % 3600 // 60)


def _user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def _expired(lease: Mapping[str, Any], now: float) -> bool:
    return now - float(lease.get("renewed", 0)) > float(lease.get("stale_after", 0))


def _holders(fd: int) -> Optional[set[int]]:
    """Pids holding a flock on the open file, from /proc/locks (Linux), without taking it: probing with flock()
    would, for an instant, refuse a run that tries to take it. None when /proc/locks cannot be read."""
    st = os.fstat(fd)
    key = "%02x:%02x:%d" % (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    pids = set()
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            for line in fh:
                fields = line.split()
                # "1: FLOCK  ADVISORY  WRITE 11023 fe:00:9977966 0 EOF"; waiters have "->" after the number.
                if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == key and fields[4].isdigit():
                    pids.add(int(fields[4]))
    except OSError:
        return None
    return pids


def describe(record: Mapping[str, Any], now: Optional[float] = None, live: Optional[set[int]] = None) -> dict[str, Any]:
    """``held_by`` for a refused run: the holder, its pid, host and age, and whether it is stale or may hang.
    ``live``: the pids that hold the flock now, when known; a recorded run that is not among them has ended."""
    now = time.time() if now is None else now
    run, lease = record.get("run"), record.get("lease")
    if run and live is not None and run.get("pid") not in live:
        run = None
    if run:
        held = {"kind": "run", "holder": run.get("holder"), "pid": run.get("pid"), "host": run.get("host"),
                "user": run.get("user"), "check_mode": bool(run.get("check_mode")), "since": _iso(run.get("since", now)),
                "age_seconds": round(now - run.get("since", now), 1)}
        held["hung"] = held["age_seconds"] > HUNG_AFTER
    elif lease:
        held = {"kind": "lease", "holder": lease.get("holder"), "pid": None, "host": lease.get("host"),
                "user": lease.get("user"), "since": _iso(lease.get("since", now)),
                "age_seconds": round(now - lease.get("since", now), 1),
                "renewed_seconds_ago": round(now - lease.get("renewed", now), 1),
                "stale_after": lease.get("stale_after"), "stale": _expired(lease, now)}
    else:
        # The flock is held but no record names the holder: it has just taken the lock, or is a read-only run that
        # may not write the file, or one of several plans (only one of them is recorded at a time).
        held = {"kind": "run", "holder": None, "pid": min(live) if live else None, "pids": sorted(live or []),
                "host": socket.gethostname(), "user": None, "since": None, "age_seconds": None}
    return held


def sentence(held: Mapping[str, Any]) -> str:
    """One line naming the holder, for error messages."""
    if held["kind"] == "lease":
        return ("%s (kept across its tasks since %s, %s ago; renewed %s ago, stale after %s s without renewal)"
                % (held["holder"], held["since"], _span(held["age_seconds"]), _span(held["renewed_seconds_ago"]),
                   held["stale_after"]))
    if not held.get("holder"):
        pids = ", ".join(str(p) for p in held.get("pids") or []) or "unknown"
        return "a run that has not recorded itself (pid %s on %s)" % (pids, held["host"])
    text = "%s (pid %s on %s, user %s, %ssince %s, %s ago)" % (
        held["holder"], held["pid"], held["host"], held["user"], "check mode, " if held.get("check_mode") else "",
        held["since"], _span(held["age_seconds"]))
    if held.get("hung"):
        text += ("; it has held the lock for more than %s: if it hangs, stop pid %s on %s (the kernel then drops the "
                 "lock)" % (_span(HUNG_AFTER), held["pid"], held["host"]))
    return text


def _read(fd: int, patient: bool = False) -> dict[str, Any]:
    """The record in an open lock file ({} when there is none). ``patient``: the file is locked by a live holder,
    which may have created it a moment ago and not written its record yet, so an empty file is read again."""
    for _attempt in range(10):
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        data = b"".join(chunks).decode("utf-8", "replace").strip()
        if data:
            try:
                # The holder overwrites the record in place, then truncates: a longer old record may still trail it.
                record = json.JSONDecoder().raw_decode(data)[0]
                return record if isinstance(record, dict) else {}
            except ValueError:
                pass
        elif not patient:
            return {}
        time.sleep(0.02)
    return {}


def _same_file(fd: int, path: str) -> bool:
    """Whether ``fd`` is still the file at ``path``: a holder releasing the lock unlinks the file, and a run that
    opened it just before must not take the lock on that orphan."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


class HostLock:
    """The per-host MIG lock for one run. ``holder`` names the run to others; ``timeout`` is how long acquire()
    waits for another holder before raising LockHeld. ``shared``: a read-only run (check mode), which only excludes
    changing runs; one whose user cannot create or write the lock file still honours a holder it can see, and
    otherwise goes on with a warning. ``wait_for_lease``: false to give up at once on another run's lease."""

    def __init__(self, path: str, holder: str, timeout: Optional[float] = 0, shared: bool = False,
                 wait_for_lease: bool = True, supersede: str = "") -> None:
        self.path = path
        # A roll known to be dead (its controller process gone, roll_lock's "superseded"): its leases, whose holders
        # are that roll's holder followed by " node=...", are taken over at once, not after their stale timeout.
        self.supersede = supersede
        self.holder = holder
        self.timeout = max(float(timeout or 0), 0.0)
        self.shared = shared
        self.wait_for_lease = wait_for_lease
        self.fd: Optional[int] = None
        self.writable = False
        self.lease: Optional[dict[str, Any]] = None
        self.waited = 0.0
        self.warnings: list[str] = []
        self.took_over: Optional[dict[str, Any]] = None
        self.token = os.urandom(8).hex()

    # -- taking it ----------------------------------------------------------------------------------------------

    def _open(self) -> Optional[int]:
        """An fd on the lock file (created as needed); None when a read-only run cannot open any."""
        try:
            os.makedirs(os.path.dirname(self.path) or ".", 0o755, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            self.writable = True
            return fd
        except IsADirectoryError:
            raise LockError(OLD_DIRECTORY % self.path)
        except OSError as e:
            if not (self.shared and e.errno in (errno.EACCES, errno.EPERM, errno.EROFS)):
                raise LockError("cannot open the lock file %s: %s" % (self.path, e.strerror or e))
            why = e
        self.writable = False
        try:
            return os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            # No file and no right to create one: no run holds the lock now, and this one cannot take it.
            self.warnings.append("the MIG lock %s could not be taken (%s); this read-only run goes on without it"
                                 % (self.path, why.strerror or why))
            return None

    def acquire(self) -> HostLock:
        started = time.time()
        deadline = started + self.timeout
        busy_since = None  # ``waited`` counts time spent on another holder, not this run's own open and write
        while True:
            fd = self._open()
            if fd is None:
                return self
            held = self._try(fd)
            if held is None:
                self.waited = round(time.time() - busy_since, 2) if busy_since else 0.0
                return self
            os.close(fd)
            if held is True:
                continue  # the holder released it and removed the file meanwhile: open the new one
            busy_since = busy_since or time.time()
            # A holder with no record yet (it has just taken the lock) or a plan that blocks a plan (only while it
            # ends, see release()) is about to write its record or be gone: look again for a moment before refusing.
            if (held["holder"] is None or (self.shared and held.get("check_mode"))) and time.time() < started + GRACE:
                time.sleep(0.02)
                continue
            foreign_lease = held["kind"] == "lease" and held["holder"] != self.holder
            if time.time() >= deadline or (foreign_lease and not self.wait_for_lease):
                self.waited = round(time.time() - busy_since, 2)
                raise LockHeld("another MIG run holds the per-host lock %s: %s" % (self.path, sentence(held)), held)
            time.sleep(min(POLL, max(deadline - time.time(), 0.0)))

    def _try(self, fd: int) -> Union[None, Literal[True], dict[str, Any]]:
        """None: taken (fd kept); True: the file went away under us, try again; else describe() of the holder."""
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise LockError("cannot lock %s: %s" % (self.path, e.strerror or e))
            if not _same_file(fd, self.path):
                return True
            return describe(_read(fd, patient=True), live=_holders(fd))
        if not _same_file(fd, self.path):
            return True
        now = time.time()
        record = _read(fd)
        lease = record.get("lease")
        if lease and lease.get("holder") != self.holder:
            held = describe({"lease": lease}, now)
            dead = self._superseded(str(lease.get("holder") or ""))
            if not held["stale"] and not dead:
                fcntl.flock(fd, fcntl.LOCK_UN)
                return held
            self.took_over = held
            self.warnings.append("the MIG lock %s was kept by %s; %s and this run %s"
                                 % (self.path, sentence(held), "that run was interrupted" if dead else "it is stale",
                                    "ignores it" if self.shared else "took it over"))
            # Only a changing run, holding the lock alone, clears it; a plan leaves the record as it is.
            record = dict(record, lease=lease if self.shared else None)
            lease = None
        if lease:
            lease = dict(lease, renewed=now)
            record["lease"] = lease
        self.lease = lease
        self.fd = fd
        # The token tells this run's entry from another one of the same process (a pid is not enough).
        me = {"holder": self.holder, "pid": os.getpid(), "host": socket.gethostname(), "user": _user(), "since": now,
              "check_mode": self.shared, "token": self.token}
        if not self.shared:
            self._write({"lease": record.get("lease"), "run": me})
            return None
        # Plans share the lock, so the record names one of them at a time: this one, unless a live plan is named.
        run = record.get("run")
        live = _holders(fd)
        named = run and (live is None or run.get("pid") in live)
        if not named or lease:
            self._write(dict(record, run=run if named else me))
        return None

    def _superseded(self, holder: str) -> bool:
        return bool(self.supersede) and (holder == self.supersede or holder.startswith(self.supersede + " "))

    def _write(self, record: Mapping[str, Any]) -> None:
        if not self.writable:
            return
        data = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
        fd: int = self.fd  # type: ignore[assignment]  # only called with the lock taken: _try set it, release checks it
        # Overwrite, then cut: a reader sees the old or the new record, never an empty file (see _read).
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, data)
        os.ftruncate(fd, len(data))
        os.fsync(fd)

    # -- keeping and dropping it --------------------------------------------------------------------------------

    def keep(self, stale_after: float) -> None:
        """Keep the lock for this holder after this process ends (a lease), renewed by its later runs."""
        if not self.writable or self.shared:
            raise LockError("cannot keep the lock %s: this run may not write it" % self.path)
        now = time.time()
        since = self.lease["since"] if self.lease else now
        self.lease = {"holder": self.holder, "since": since, "renewed": now, "stale_after": int(stale_after),
                      "host": socket.gethostname(), "user": _user()}

    def drop(self) -> None:
        """End this holder's lease (the lock is free once this run releases it)."""
        self.lease = None

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            if self.shared:
                # Other plans may hold it too: this plan's own entry goes; the file goes only when no one else holds
                # it, which taking it exclusively (without waiting) tells. A failed attempt only loses a lock that is
                # being released anyway.
                record = _read(self.fd)
                if (record.get("run") or {}).get("token") == self.token:
                    record["run"] = None
                    self._write(record)
                if self.writable and not record.get("lease"):
                    try:
                        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except OSError:
                        pass
                    else:
                        if _same_file(self.fd, self.path):
                            os.unlink(self.path)
            elif self.lease:
                self._write({"lease": self.lease, "run": None})
            elif self.writable and _same_file(self.fd, self.path):
                # Unlinked while still held alone: no file is left behind, and a run that opened it a moment ago
                # sees that it is gone (_same_file) and opens the new one.
                os.unlink(self.path)
        finally:
            os.close(self.fd)
            self.fd = None

    def info(self) -> dict[str, Any]:
        """What a module returns about the lock."""
        out = {"path": self.path, "holder": self.holder, "lease": self.lease["holder"] if self.lease else None,
               "waited": self.waited, "shared": self.shared}
        if self.took_over:
            out["took_over"] = self.took_over
        return out

    def __enter__(self) -> HostLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def status(path: str) -> Optional[dict[str, Any]]:
    """describe() of whoever holds the lock at ``path`` now (a run, or a lease that is not stale), or None."""
    if os.path.isdir(path):
        raise LockError(OLD_DIRECTORY % path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    try:
        live = _holders(fd)
        if live is None:
            # No /proc/locks: probe, accepting that a run trying to take it this very instant may be refused.
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                live = set()
            except OSError:
                live = None
        record = _read(fd, patient=bool(live))
        if live is None or live:
            return describe(record, live=live)
        lease = record.get("lease")
        if lease and not _expired(lease, time.time()):
            return describe({"lease": lease})
        return None
    finally:
        os.close(fd)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """CLI for the role: acquire|release|show; prints one JSON object, exits 0, or 1 when refused or failed."""
    parser = argparse.ArgumentParser(prog="host_lock.py", description="the per-host MIG lock of gpuops.provision")
    parser.add_argument("action", choices=["acquire", "release", "show"])
    parser.add_argument("--path", default=default_path())
    parser.add_argument("--holder", default="")
    parser.add_argument("--stale-after", type=int, default=3600, help="acquire: seconds a lease lasts unrenewed")
    parser.add_argument("--timeout", type=float, default=0, help="seconds to wait for another holder")
    parser.add_argument("--supersede", default="", help="acquire: the holder of an interrupted roll, whose leases "
                        "(that holder, or it followed by a space) are taken over at once")
    args = parser.parse_args(argv)
    out: dict[str, Any] = {"path": args.path, "holder": args.holder}
    try:
        if args.action == "show":
            out.update(ok=True, held_by=status(args.path))
        elif not args.holder:
            out.update(ok=False, msg="--holder is required")
        elif args.action == "acquire":
            lock = HostLock(args.path, args.holder, timeout=args.timeout, supersede=args.supersede)
            lock.acquire()
            renewed = lock.lease is not None
            lock.keep(args.stale_after)
            lock.release()
            out.update(ok=True, acquired=True, renewed=renewed, warnings=lock.warnings, took_over=lock.took_over,
                       msg="%s the MIG lock %s for %s" % ("renewed" if renewed else "took", args.path, args.holder))
        else:
            # Waits for a step that holds the flock for a moment, not for another run's lease.
            lock = HostLock(args.path, args.holder, timeout=max(args.timeout, 10), wait_for_lease=False)
            try:
                lock.acquire()
            except LockHeld as e:
                # Not ours (taken over as stale by another run): leave it alone.
                out.update(ok=True, released=False, held_by=e.held_by, msg="%s; left as it is" % e)
            else:
                had = lock.lease is not None
                lock.drop()
                lock.release()
                out.update(ok=True, released=had, warnings=lock.warnings,
                           msg="released the MIG lock %s" % args.path if had else "%s held no MIG lock" % args.holder)
    except LockHeld as e:
        out.update(ok=False, acquired=False, held_by=e.held_by, msg=str(e))
    except LockError as e:
        out.update(ok=False, msg=str(e))
    # A command on the node (the role's lock task), not module code: it prints and exits like one.
    print(json.dumps(out, sort_keys=True))  # pylint: disable=ansible-bad-function
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())  # pylint: disable=ansible-bad-function
