# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A roll's lock as a Kubernetes coordination.k8s.io/v1 Lease; what to write, without I/O (module roll_lock).

The rules are client-go's leader election (k8s.io/client-go tools/leaderelection/leaderelection.go):
- tryAcquireOrRenew: no Lease yet -> create it; a Lease with a holder whose renewTime + leaseDurationSeconds is
  still ahead -> held, refused; otherwise (no holder, or expired) -> update it to us, leaseTransitions + 1; our own
  Lease -> update renewTime, acquireTime and leaseTransitions kept.
- release: update the holder to "" (and leaseDurationSeconds to 1) rather than delete the object.
Every update carries the resourceVersion that was read, so two runs that both saw the lock free cannot both take it:
the API server answers the second with 409 Conflict (optimistic concurrency), as a second create gets AlreadyExists.

client-go times the lease from when it observed the record (its own clock); a one-shot run has no earlier
observation, so it uses the record's renewTime: controllers whose clocks differ by a fraction of the TTL agree.

Beyond client-go: the Lease names the holder's controller process (``_k8s/controller.py``: host, boot, pid, start time). A run
on the same host and boot that finds that process gone takes the lock over at once rather than after its time to
live, and the holder it replaced - whose per-host locks and node states it must finish - is recorded in the Lease
(``SUPERSEDED``) until a run releases the lock cleanly.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from typing import Any, Optional, Union

from ansible_collections.gpuops.provision.plugins.module_utils._k8s import node_roll

API_VERSION = "coordination.k8s.io/v1"
NODES_ANNOTATION = node_roll.LEASE_NODES
# The roll's slots, its changing nodes in roll order, the ones whose turn has come (took a slot, or could not start)
# and when the last one came: node_roll keeps the budget and the order with them (node_roll.slot_decision).
SLOTS_ANNOTATION = node_roll.LEASE_SLOTS
QUEUE_ANNOTATION = node_roll.LEASE_QUEUE
PASSED_ANNOTATION = node_roll.LEASE_PASSED
PROGRESS_ANNOTATION = node_roll.LEASE_PROGRESS
PROCESS_ANNOTATION = "gpuops.provision/holder-process"
SUPERSEDED = "gpuops.provision/superseded"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpuops.provision"}
# Lease names are DNS subdomains (RFC 1123), as every object name the API server validates that way.
MAX_NAME = 253
# holderIdentity has no bound of its own in the API; ours is written into messages and per-host locks too.
MAX_HOLDER = 1024


class LockError(Exception):
    """Input the lock cannot work with; the message is for the user."""


def format_time(epoch: float) -> str:
    """metav1.MicroTime as the API server writes it: RFC 3339 with microseconds, UTC.

    Never with a zero fraction: the kubernetes client (37.x) turns a Lease given as a dict into its model, whose
    datetime.isoformat() leaves a zero fraction out, and the API server's MicroTime parser
    (apimachinery pkg/apis/meta/v1/micro_time.go, layout RFC3339Micro) then refuses the request; 1 us later is kept."""
    stamp = datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc)
    if stamp.microsecond == 0:
        stamp += datetime.timedelta(microseconds=1)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _micro(text: Union[str, datetime.datetime, None]) -> Optional[str]:
    """A time read from the Lease, written back as format_time writes it (None stays None)."""
    epoch = parse_time(text)
    return None if epoch is None else format_time(epoch)


def parse_time(text: Union[str, datetime.datetime, None]) -> Optional[float]:
    """Seconds since the epoch of a MicroTime or Time string (fraction optional, Z or +00:00); None if empty."""
    if not text:
        return None
    if isinstance(text, datetime.datetime):
        stamp = text if text.tzinfo else text.replace(tzinfo=datetime.timezone.utc)
        return stamp.timestamp()
    value = str(text).strip()
    if value.endswith("Z"):
        value = value[:-1] + "+00:00"
    main, _sep, zone = value.partition("+")
    main, dot, fraction = main.partition(".")
    # A fraction is one or more digits (RFC 3339 time-secfrac): float() would take "5e3" or reject ".25.5" with its
    # own ValueError, which the module would report as an unreachable API.
    if dot and not (fraction.isascii() and fraction.isdigit()):
        raise LockError("unreadable time in the Lease: %r" % (text,))
    try:
        stamp = datetime.datetime.strptime(main, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        raise LockError("unreadable time in the Lease: %r" % (text,))
    if zone and zone not in ("00:00", "0000"):
        raise LockError("Lease times are UTC, got %r" % (text,))
    return stamp.timestamp() + (float("0." + fraction) if fraction else 0.0)


def record(lease: Optional[Mapping[str, Any]]) -> Optional[dict[str, Any]]:
    """The parts of a Lease (plain dict, as the API returns it; None when absent) the decision reads."""
    if not lease:
        return None
    meta = lease.get("metadata") or {}
    spec = lease.get("spec") or {}
    renewed = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds")
    notes = meta.get("annotations") or {}
    nodes = [n for n in (notes.get(NODES_ANNOTATION) or "").split(",") if n]
    return {
        "holder": spec.get("holderIdentity") or "",
        "acquired": spec.get("acquireTime"),
        "renewed": spec.get("renewTime"),
        "duration": int(duration) if duration is not None else None,
        "expires_at": renewed + int(duration) if renewed is not None and duration is not None else None,
        "transitions": int(spec.get("leaseTransitions") or 0),
        "nodes": nodes,
        "slots": [n for n in (notes.get(SLOTS_ANNOTATION) or "").split(",") if n],
        "queue": [n for n in (notes.get(QUEUE_ANNOTATION) or "").split(",") if n],
        "passed": [n for n in (notes.get(PASSED_ANNOTATION) or "").split(",") if n],
        "progress": notes.get(PROGRESS_ANNOTATION) or "",
        "process": notes.get(PROCESS_ANNOTATION) or "",
        "superseded": notes.get(SUPERSEDED) or "",
        "resource_version": meta.get("resourceVersion"),
    }


def describe(rec: Mapping[str, Any], now: float) -> str:
    """'<holder> (nodes a, b; renewed <t>, expires in N s)' for messages."""
    parts = []
    if rec["nodes"]:
        parts.append("nodes " + ", ".join(rec["nodes"]))
    if rec["renewed"]:
        parts.append("renewed " + str(rec["renewed"]))
    if rec["expires_at"] is not None:
        left = int(round(rec["expires_at"] - now))
        parts.append(("expires in %d s" % left) if left >= 0 else ("expired %d s ago" % -left))
    return "%s (%s)" % (rec["holder"], "; ".join(parts)) if parts else rec["holder"]


def _body(name: str, namespace: str, holder: str, ttl: int, nodes: Iterable[str], acquired: Optional[str], renewed: str,
          transitions: int, resource_version: Optional[str] = None, process: str = "", superseded: str = "",
          slots: Iterable[str] = (), queue: Iterable[str] = (), passed: Iterable[str] = (),
          progress: str = "") -> dict[str, Any]:
    notes = {NODES_ANNOTATION: ",".join(nodes), SLOTS_ANNOTATION: ",".join(slots), QUEUE_ANNOTATION: ",".join(queue),
             PASSED_ANNOTATION: ",".join(passed), PROGRESS_ANNOTATION: progress}
    if process:
        notes[PROCESS_ANNOTATION] = process
    if superseded:
        notes[SUPERSEDED] = superseded
    meta = {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY), "annotations": notes}
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    return {"apiVersion": API_VERSION, "kind": "Lease", "metadata": meta,
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": int(ttl), "acquireTime": acquired,
                     "renewTime": renewed, "leaseTransitions": int(transitions)}}


def validate(name: Optional[str], namespace: Optional[str], holder: Optional[str], ttl: object) -> None:
    problems = []
    if not name or len(name) > MAX_NAME:
        problems.append("name must be 1 to %d characters, got %r" % (MAX_NAME, name))
    if not namespace:
        problems.append("namespace must not be empty")
    if not holder or not str(holder).strip():
        problems.append("holder must name this run")
    elif len(str(holder)) > MAX_HOLDER:
        problems.append("holder must be at most %d characters, got %d" % (MAX_HOLDER, len(str(holder))))
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 1:
        problems.append("ttl must be a positive number of seconds, got %r" % (ttl,))
    if problems:
        raise LockError("; ".join(problems))


def decide(lease: Optional[Mapping[str, Any]], state: str, name: str, namespace: str, holder: str, ttl: int,
           nodes: Optional[Iterable[str]], now: float, process: str = "", holder_alive: Optional[bool] = None,
           check: bool = False, interrupted: bool = False, queue: Optional[Iterable[str]] = None) -> dict[str, Any]:
    """What to do with the Lease ``lease`` (None: absent) for ``state`` 'held' (take or renew) or 'absent' (release).

    ``process``: this run's controller process (``_k8s.controller.encode``), written into the Lease; ``holder_alive``:
    whether the current holder's process still runs, where that can be known (None: it cannot); ``check``: check
    mode (the words say "would"); ``interrupted``: a release because the holder's controller died (the holder is
    recorded as superseded, for the next run to finish its nodes); ``queue``: the nodes that change, in roll order
    (a lock taken starts with no node having had its turn; a renewal keeps the record as it is).

    Returns a dict: ``action`` (none, create, update or refuse), ``body`` (the Lease to write), ``before`` (the
    record read, or None), ``taken_over`` (the holder replaced, or None), ``superseded`` (the interrupted holder
    whose leftovers this run finishes, or '') and ``msg``.
    """
    validate(name, namespace, holder, ttl)
    nodes = list(nodes or [])
    rec = record(lease)
    stamp = format_time(now)
    where = "%s/%s" % (namespace, name)
    if state == "absent":
        if rec is None or rec["holder"] != holder:
            msg = ("the roll lock %s is not held by this run%s; left as it is"
                   % (where, (", but by " + describe(rec, now)) if rec and rec["holder"] else ""))
            return dict(action="none", body=None, before=rec, taken_over=None, superseded="", msg=msg)
        # A clean release clears the record of an interrupted holder: this run finished what that one left.
        body = _body(name, namespace, "", 1, [], _micro(rec["acquired"]), stamp, rec["transitions"],
                     rec["resource_version"], superseded=holder if interrupted else "")
        msg = "%s the roll lock %s%s" % ("would release" if check else "released", where,
                                         ", whose holder's controller is gone" if interrupted else "")
        return dict(action="update", body=body, before=rec, taken_over=None, superseded="", msg=msg)
    if state != "held":
        raise LockError("state must be held or absent, got %r" % (state,))
    queue = list(queue or [])
    if rec is None:
        body = _body(name, namespace, holder, ttl, nodes, stamp, stamp, 0, process=process, queue=queue, progress=stamp)
        return dict(action="create", body=body, before=None, taken_over=None, superseded="",
                    msg=("would take" if check else "took") + " the roll lock " + where)
    if rec["holder"] == holder:
        body = _body(name, namespace, holder, ttl, nodes or rec["nodes"], _micro(rec["acquired"]) or stamp, stamp,
                     rec["transitions"], rec["resource_version"], process=rec["process"] or process,
                     superseded=rec["superseded"], slots=rec["slots"], queue=queue or rec["queue"],
                     passed=rec["passed"], progress=rec["progress"])
        return dict(action="update", body=body, before=rec, taken_over=None, superseded=rec["superseded"],
                    msg=("would renew" if check else "renewed") + " the roll lock " + where)
    # A Lease without a duration is expired at once, as client-go's isLeaseValid has it.
    live = rec["holder"] and rec["expires_at"] is not None and rec["expires_at"] > now
    if live and holder_alive is not False:
        return dict(action="refuse", body=None, before=rec, taken_over=None, superseded="",
                    msg="another roll holds the lock %s: %s; nothing was changed" % (where, describe(rec, now)))
    stale = rec["holder"] or None
    # The holder whose nodes and per-host locks this run finishes: the one replaced now, or one an earlier release
    # recorded as interrupted.
    superseded = stale or rec["superseded"]
    body = _body(name, namespace, holder, ttl, nodes, stamp, stamp, rec["transitions"] + 1, rec["resource_version"],
                 process=process, superseded=superseded, queue=queue, progress=stamp)
    if stale and live:
        why = "whose controller process is gone (%s)" % rec["process"]
    elif stale:
        why = "whose lease expired"
    msg = ("%s over the roll lock %s from %s, %s" % ("would take" if check else "took", where, describe(rec, now), why)) \
        if stale else ("would take" if check else "took") + " the roll lock " + where
    return dict(action="update", body=body, before=rec, taken_over=stale, superseded=superseded, msg=msg)
