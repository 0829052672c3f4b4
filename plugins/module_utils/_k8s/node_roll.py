# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A roll over Kubernetes nodes as a reconcile from the live cluster, without I/O (modules node_roll, node_release,
roll_lock; the mig_reconfigure, nvidia_driver and gpu_health rolls).

Each node's progress lives on the node itself, in annotations under ``gpuops.provision/``, as NVIDIA's
k8s-operator-libs keeps its upgrade state on the node (pkg/upgrade/consts.go: the state label and the
``node-initial-state.unschedulable`` annotation): the roll that owns it, its target, the phase reached and the node's
state before the roll. Every run reads them, so a run killed anywhere leaves nodes that the next run finishes.

The budget is recounted from the live nodes before a node is taken, as k8s-operator-libs' GetUpgradesAvailable
(pkg/upgrade/common_manager.go) recounts on every reconcile: cordoned and not-Ready nodes, nodes of ours in any phase
(a failed one keeps its slot), and the capacity the schedulable nodes advertise now. Slots are taken in the roll's
Lease with its resourceVersion (optimistic concurrency), so two hosts that both see a free slot cannot both take it.

The drain selects pods as ``kubectl drain`` does (k8s.io/kubectl pkg/drain/filters.go): DaemonSet and mirror pods
are left, finished pods are deleted without ceremony, pods without a controller need ``force`` and pods with emptyDir
volumes ``delete_emptydir_data``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Optional

PREFIX = "gpuops.provision/"
# The annotation node_drain has always put on its own cordon; a cordon without it is an operator's.
CORDONED_BY = PREFIX + "cordoned-by"
ROLL = PREFIX + "roll"
TARGET = PREFIX + "roll-target"
PHASE = PREFIX + "roll-phase"
INITIAL = PREFIX + "roll-initial"
# When the node's turn failed, in seconds since the epoch (as k8s-operator-libs keeps its upgrade times on the node):
# a failure from before the roll's Lease was taken is an earlier run's, which this run retries.
FAILED_AT = PREFIX + "roll-failed-at"
# Phases in the order a node goes through them; "failed" may follow any of them.
PHASES = ("cordoned", "drained", "applied", "released", "failed")
UNFINISHED = ("cordoned", "drained", "applied", "failed")
# On the roll's Lease: the nodes the roll targets and the ones holding a slot now.
LEASE_NODES = "gpuops.io/roll-nodes"
LEASE_SLOTS = PREFIX + "roll-slots"
LEASE_QUEUE = PREFIX + "roll-queue"
LEASE_PASSED = PREFIX + "roll-passed"
LEASE_PROGRESS = PREFIX + "roll-progress"
# kubernetes.io/config.mirror: a static pod's mirror, which the kubelet recreates (kubectl drain skips it).
MIRROR = "kubernetes.io/config.mirror"
GPU_RESOURCES = ("nvidia.com/gpu",)
GPU_RESOURCE_PREFIXES = ("nvidia.com/mig-", "nvidia.com/gpu.")
# Annotation values and a Lease holder: bounded so that one field cannot fill the object (annotations share 256 KiB).
MAX_VALUE = 1024


class RollStateError(Exception):
    """A node's roll state or a roll option the roll cannot work with; the message is for the user."""


# ---- a node's roll state ------------------------------------------------------------------------------------------

def state(node: Optional[Mapping[str, Any]], roll: str = "") -> dict[str, Any]:
    """The roll state of ``node`` (a Node as a dict): ``roll`` that owns it, ``target``, ``phase`` ('' when none),
    ``ours`` (the phase belongs to ``roll``, or any roll when ``roll`` is empty), ``cordoned_by_us`` (our cordon
    annotation is on), ``unschedulable``, ``ready``, ``was_cordoned`` (an operator's cordon, kept after the roll) and
    ``initial`` (the node's state before the roll, as recorded) and ``failed_at`` (when its turn failed, if recorded)."""
    meta = (node or {}).get("metadata") or {}
    notes = meta.get("annotations") or {}
    spec = (node or {}).get("spec") or {}
    owner = notes.get(ROLL, "")
    phase = notes.get(PHASE, "")
    unschedulable = bool(spec.get("unschedulable"))
    ours_cordon = CORDONED_BY in notes
    try:
        initial = json.loads(notes.get(INITIAL) or "{}")
    except ValueError:
        initial = {}
    if not isinstance(initial, dict):
        initial = {}
    # The node's cordon before the roll: as recorded when the roll took it, else what the node shows now.
    was = bool(initial["unschedulable"]) if "unschedulable" in initial else unschedulable and not ours_cordon
    try:
        failed_at: Optional[float] = float(notes[FAILED_AT])
    except (KeyError, TypeError, ValueError):
        failed_at = None
    return dict(name=meta.get("name", ""), roll=owner, target=notes.get(TARGET, ""), phase=phase,
                ours=bool(phase) and (not roll or owner == roll), cordoned_by_us=ours_cordon,
                unschedulable=unschedulable, ready=ready(node), was_cordoned=was, initial=initial, failed_at=failed_at)


def ready(node: Optional[Mapping[str, Any]]) -> bool:
    """The node's Ready condition is True (k8s-operator-libs isNodeConditionReady; no condition: not Ready)."""
    for cond in ((node or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def resume_from(st: Mapping[str, Any], target: str) -> str:
    """Where a run picks up a node whose state ``st`` (from state()) an earlier run of this roll left: '' when it has
    nothing of ours to finish, else the phase to continue from. A state left for another target is finished too: the
    node is cordoned or its operands paused by us, whatever the target was."""
    if not st["ours"] or st["phase"] == "released":
        return ""
    del target  # the target decides what the apply does, not whether the node is finished
    return st["phase"]


def cordon_patch(node: Mapping[str, Any], roll: str, target: str, reason: str,
                 labels: Optional[Mapping[str, Optional[str]]] = None) -> dict[str, Any]:
    """The one PATCH that takes a node into the roll: our annotations (roll, target, phase cordoned, the node's state
    before the roll unless an earlier run recorded it), our cordon annotation unless an operator had cordoned it, the
    cordon (unless the node is cordoned already), and ``labels`` (for example the paused operands). Carries the node's resourceVersion: a node changed since
    it was read is refused by the API server (409) and read again."""
    st = state(node, roll)
    notes: dict[str, Optional[str]] = {ROLL: roll, TARGET: _bounded("target", target), PHASE: "cordoned"}
    if not (st["ours"] and st["initial"]):
        notes[INITIAL] = json.dumps({"unschedulable": st["unschedulable"] and not st["cordoned_by_us"]},
                                    sort_keys=True)
    if not st["was_cordoned"]:
        notes[CORDONED_BY] = _bounded("reason", reason)
    meta: dict[str, Any] = {"annotations": notes, "resourceVersion": (node.get("metadata") or {}).get("resourceVersion")}
    if labels:
        meta["labels"] = dict(labels)
    # A node cordoned already (by an operator, or by an earlier run of ours) is not cordoned again.
    return {"metadata": meta, "spec": {"unschedulable": True}} if not st["unschedulable"] else {"metadata": meta}


def phase_patch(phase: str) -> dict[str, Any]:
    """The PATCH that records ``phase`` (one of PHASES)."""
    if phase not in PHASES:
        raise RollStateError("phase must be one of %s, got %r" % (", ".join(PHASES), phase))
    return {"metadata": {"annotations": {PHASE: phase}}}


def release_patch(node: Mapping[str, Any], roll: str) -> dict[str, Any]:
    """The annotations and cordon of the node's last PATCH in the roll: phase released, our cordon annotation and
    the recorded initial state gone, and the node uncordoned when the cordon is ours (an operator's stays)."""
    st = state(node, roll)
    out: dict[str, Any] = {"metadata": {"annotations": {PHASE: "released", CORDONED_BY: None, INITIAL: None,
                                                        FAILED_AT: None}}}
    if st["unschedulable"] and not st["was_cordoned"]:
        out["spec"] = {"unschedulable": False}
    return out


def failed_patch(node: Mapping[str, Any], roll: str, leave: str, now: float) -> dict[str, Any]:
    """Phase failed at ``now`` (seconds since the epoch); ``leave`` 'cordoned' keeps the node cordoned, 'uncordoned'
    uncordons it unless an operator had cordoned it (its slot is kept either way: a failed node counts against the
    budget until a run finishes it)."""
    if leave not in ("cordoned", "uncordoned"):
        raise RollStateError("a failed node is left cordoned or uncordoned, got %r" % (leave,))
    st = state(node, roll)
    out: dict[str, Any] = {"metadata": {"annotations": {PHASE: "failed", FAILED_AT: "%.3f" % now}}}
    if leave == "uncordoned" and st["unschedulable"] and not st["was_cordoned"]:
        out["spec"] = {"unschedulable": False}
        out["metadata"]["annotations"][CORDONED_BY] = None
    return out


def _bounded(what: str, value: str) -> str:
    text = str(value)
    if len(text) > MAX_VALUE:
        raise RollStateError("%s is %d characters long, at most %d are written to the node" % (what, len(text), MAX_VALUE))
    return text


def slim(node: Mapping[str, Any]) -> dict[str, Any]:
    """A Node cut down to what a roll plans with (module node_info): name, labels, annotations, resourceVersion, the
    cordon and taints, the Ready condition and allocatable; no managedFields, images, addresses or node info."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    return {"metadata": {"name": meta.get("name"), "labels": dict(meta.get("labels") or {}),
                         "annotations": dict(meta.get("annotations") or {}),
                         "resourceVersion": meta.get("resourceVersion")},
            "spec": {"unschedulable": bool(spec.get("unschedulable")), "taints": list(spec.get("taints") or [])},
            "status": {"conditions": [c for c in status.get("conditions") or [] if c.get("type") == "Ready"],
                       "allocatable": dict(status.get("allocatable") or {})}}


def slim_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A Pod cut down to what a plan reads of it (module node_info's ``pods``): name, namespace, labels, whether it is
    being deleted, its node and phase."""
    meta = pod.get("metadata") or {}
    out: dict[str, Any] = {"metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                                        "labels": dict(meta.get("labels") or {})},
                           "spec": {"nodeName": (pod.get("spec") or {}).get("nodeName")},
                           "status": {"phase": (pod.get("status") or {}).get("phase")}}
    if meta.get("deletionTimestamp"):
        out["metadata"]["deletionTimestamp"] = meta["deletionTimestamp"]
    return out


def positions(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """module node_info's index: each node's position in ``nodes`` by name, and each node's pods' positions in
    ``pods``: a filter run once per host then reads its own node, not all of them (ansible-core templates every
    element a filter walks: a thousand nodes walked per host is a tenth of a second a host)."""
    pods_of: dict[str, list[int]] = {}
    for i, pod in enumerate(pods):
        pods_of.setdefault(str((pod.get("spec") or {}).get("nodeName") or ""), []).append(i)
    return {"nodes": {str((n.get("metadata") or {}).get("name")): i for i, n in enumerate(nodes)}, "pods": pods_of}


# ---- the budget, recounted from the live cluster ------------------------------------------------------------------

def roll_queue(nodes: Any, roll: str, names: Optional[Iterable[str]], changing: Optional[Iterable[str]]) -> list[str]:
    """The roll's queue over ``names`` (the roll's nodes, in roll order): first the nodes an earlier run of ``roll``
    left unfinished (a phase of it other than released on the node: unavailable already, so finished first), then the
    ``changing`` ones, each once. ``nodes``: Node objects, or a node_info/k8s_info result (its ``resources``; none
    when the read was skipped)."""
    if isinstance(nodes, Mapping):
        nodes = nodes.get("resources")
    by_name = {(n.get("metadata") or {}).get("name"): n for n in nodes or []}
    order = list(dict.fromkeys(names or []))
    left = [n for n in order if resume_from(state(by_name.get(n), roll), "") != ""]
    wanted = set(changing or [])
    return left + [n for n in order if n in wanted and n not in left]


def lease_list(lease: Optional[Mapping[str, Any]], key: str) -> list[str]:
    """A comma-separated node list annotation of the Lease (LEASE_NODES, LEASE_SLOTS)."""
    notes = ((lease or {}).get("metadata") or {}).get("annotations") or {}
    return [n for n in (notes.get(key) or "").split(",") if n]


def slot_decision(nodes: Iterable[Mapping[str, Any]], targeted: Iterable[str], slots: Iterable[str], me: str,
                  roll: str, limits: Mapping[str, Any], advertised: Any, queue: Iterable[str] = (),
                  passed: Iterable[str] = (), stalled: bool = False, since: Optional[float] = None) -> dict[str, Any]:
    """Whether node ``me`` may take a slot of the roll now (k8s-operator-libs GetUpgradesAvailable, per node).

    ``nodes``: the live Node objects; ``targeted``: the names the roll covers (the budget counts those);
    ``slots``: the names holding a slot in the Lease; ``limits``: ``max_parallel`` (0: none), ``max_unavailable``
    (None: none), ``max_failures``, ``floors`` ({resource: count}); ``advertised(node)`` gives a node's GPU resources.
    ``queue``: the changing nodes in roll order and ``passed`` those whose turn came: a node waits for the nodes
    before it, so the roll keeps its order (a canary first), unless the queue is ``stalled`` (no turn came for a
    while: an earlier host may be unreachable and never come).

    Counted unavailable: a targeted node cordoned or not Ready, one with a phase of this roll (a failed one too, as
    k8s-operator-libs keeps counting a failed upgrade, until a run finishes it), one holding a slot. Counted failed
    (for max_failures): the failed ones, except those that failed before ``since`` (when the roll's Lease was taken:
    an earlier run's failure, which this run retries), unless the queue is ``stalled``. In progress (for
    max_parallel): the ones holding a slot or in a phase of this roll other than failed and released. The floors
    count what the other schedulable nodes advertise now. Returns ``take`` (bool), ``held`` (the node holds its slot already), ``wait`` (a slot may free:
    try again), ``spent`` (the failure budget is spent: this node is not started), ``reasons`` and the ``counts`` read.
    """
    names = list(dict.fromkeys(targeted))
    wanted = set(names)
    by_name = {(n.get("metadata") or {}).get("name"): n for n in nodes}
    slot_set = set(slots)
    failed = set()
    earlier = set()
    in_progress = set(slot_set)
    for name in names:
        node = by_name.get(name)
        if node is None:
            continue
        st = state(node, roll)
        if st["ours"] and st["phase"] == "failed":
            failed.add(name)
            # Undated (an older version's failure): counted, as before.
            if st["failed_at"] is not None and since is not None and st["failed_at"] < since:
                earlier.add(name)
        elif st["ours"] and st["phase"] != "released":
            in_progress.add(name)
    # A failed node keeps counting as unavailable until a run finishes it, cordoned or not; no work is in progress
    # on it, so it does not hold one of max_parallel's places (max_failures decides whether more nodes start). Unless
    # it holds a slot again, taken by this run to retry an earlier run's failure: its phase says failed until its next
    # PATCH, but it is in progress (molecule/driver_roll: drv-node-3 was cordoned beside drv-node-2 in that moment).
    in_progress -= failed - (slot_set & earlier)
    unavailable = in_progress | failed
    for name in names:
        node = by_name.get(name)
        if node is not None and (bool((node.get("spec") or {}).get("unschedulable")) or not ready(node)):
            unavailable.add(name)
    # A node of the roll that an earlier run failed is retried by this run (every run finishes the nodes an earlier
    # one left, whether or not they are in its queue of changing nodes): that failure does not spend this run's failure
    # budget (the node still counts as unavailable); if it fails again, it does. Unless the queue is stalled: an
    # unreachable host may be the reason, and its node may never come.
    retried = set() if stalled else earlier
    others_failed = sorted(failed - {me} - retried)
    counts = dict(in_progress=sorted(in_progress), unavailable=sorted(unavailable & wanted | slot_set),
                  failed=others_failed)
    max_failures = int(limits.get("max_failures") or 0)
    if len(others_failed) > max_failures:
        return dict(take=False, held=me in slot_set, wait=False, spent=True, counts=counts, reasons=[
            "the roll's failure budget is spent: %d node(s) failed (%s), more than max_failures %d"
            % (len(others_failed), ", ".join(others_failed), max_failures)])
    if me in slot_set:
        return dict(take=True, held=True, wait=False, spent=False, counts=counts, reasons=[])
    waiting = turn_decision(queue, passed, me, stalled, counts)
    if waiting is not None:
        return waiting
    reasons = []
    parallel = int(limits.get("max_parallel") or 0)
    if parallel and len(in_progress | {me}) > parallel:
        reasons.append("max_parallel %d: %d node(s) in progress (%s)"
                       % (parallel, len(in_progress - {me}), ", ".join(sorted(in_progress - {me}))))
    max_unavailable = limits.get("max_unavailable")
    if max_unavailable is not None and len(unavailable | {me}) > int(max_unavailable):
        reasons.append("max_unavailable %d: %d node(s) would be unavailable (%s)"
                       % (int(max_unavailable), len(unavailable | {me}), ", ".join(sorted(unavailable | {me}))))
    floors = dict(limits.get("floors") or {})
    if floors:
        have: dict[str, int] = {}
        for name in names:
            node = by_name.get(name)
            if node is None or name in unavailable or name == me:
                continue
            for res, count in (advertised(node) or {}).items():
                have[res] = have.get(res, 0) + int(count)
        for res in sorted(floors):
            if have.get(res, 0) < int(floors[res]):
                reasons.append("capacity floor: %s would drop to %d schedulable, floor %d"
                               % (res, have.get(res, 0), int(floors[res])))
    # Waiting helps only while another node of the roll is in progress: it will give its slot back.
    busy = sorted(in_progress - {me})
    return dict(take=not reasons, held=False, wait=bool(reasons) and bool(busy), spent=False, counts=counts,
                reasons=reasons)


def turn_decision(queue: Iterable[str], passed: Iterable[str], me: str, stalled: bool = False,
                  counts: Optional[Mapping[str, Any]] = None) -> Optional[dict[str, Any]]:
    """The decision for node ``me`` while nodes before it in the roll's ``queue`` have not had their turn (are not in
    ``passed``): it waits for them; None when none is ahead of it, it is not in the queue, or the queue is
    ``stalled``. Read from the Lease alone, so a node whose turn has not come need not list the cluster's nodes."""
    queue = list(queue)
    done = set(passed)
    ahead = [n for n in queue[:queue.index(me)] if n not in done] if me in queue and not stalled else []
    if not ahead:
        return None
    return dict(take=False, held=False, wait=True, spent=False, counts=dict(counts or {}),
                reasons=["its turn comes after %s" % ", ".join(ahead)])


def lease_with_slots(lease: Mapping[str, Any], slots: Iterable[str], more: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
    """The Lease (as read, resourceVersion kept) with its slot list set to ``slots`` (sorted, no duplicates) and the
    annotations ``more`` set."""
    meta = dict(lease.get("metadata") or {})
    notes = dict(meta.get("annotations") or {})
    notes[LEASE_SLOTS] = ",".join(sorted(set(slots)))
    notes.update(more or {})
    meta["annotations"] = notes
    out = dict(lease)
    out["metadata"] = meta
    return out


def lease_turn(lease: Mapping[str, Any], node: str, slots: Iterable[str], now: str) -> dict[str, Any]:
    """The Lease once ``node``'s turn came (it took a slot, or cannot start): ``slots``, the node among those that
    passed (LEASE_PASSED) and the time of this progress (LEASE_PROGRESS, a MicroTime ``now``)."""
    passed = lease_list(lease, LEASE_PASSED)
    return lease_with_slots(lease, slots, {LEASE_PASSED: ",".join(passed + [node] if node not in passed else passed),
                                           LEASE_PROGRESS: now})


# ---- the drain, as kubectl selects pods --------------------------------------------------------------------------

def uses_gpu(pod: Mapping[str, Any]) -> bool:
    """The pod requests or limits a GPU resource (nvidia.com/gpu, nvidia.com/mig-*, nvidia.com/gpu.shared), as
    k8s-operator-libs' pod deletion selects GPU pods (pkg/upgrade/pod_manager.go, the GPU resource filter)."""
    spec = pod.get("spec") or {}
    for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        res = c.get("resources") or {}
        for name in list((res.get("limits") or {})) + list((res.get("requests") or {})):
            if name in GPU_RESOURCES or name.startswith(GPU_RESOURCE_PREFIXES):
                return True
    return False


def drain_selection(pods: Iterable[Mapping[str, Any]], ignore_daemonsets: bool = True, delete_emptydir_data: bool = False,
                    force: bool = False, gpu_only: bool = False, selectors: Iterable[tuple[str, str]] = ()) -> dict[str, Any]:
    """The pods a drain evicts, the ones it leaves, and the ones that stop it, as kubectl drain's filters decide
    (k8s.io/kubectl pkg/drain/filters.go: skipDeletedFilter aside, daemonSetFilter, mirrorPodFilter,
    localStorageFilter, unreplicatedFilter; a finished pod passes the last two).

    ``gpu_only``: only pods that use a GPU resource (the rest stay on the cordoned node);
    ``selectors``: (key, value) pairs, any of which a pod must match to be evicted.
    Returns ``evict`` and ``skip`` ('<namespace>/<name>' lists) and ``errors`` (why a pod stops the drain).
    """
    evict, skip, errors = [], [], []
    for pod in pods:
        meta = pod.get("metadata") or {}
        where = "%s/%s" % (meta.get("namespace", ""), meta.get("name", ""))
        phase = (pod.get("status") or {}).get("phase")
        finished = phase in ("Succeeded", "Failed")
        owners = meta.get("ownerReferences") or []
        controller = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
        labels = meta.get("labels") or {}
        if selectors and not any(labels.get(k) == v for k, v in selectors):
            skip.append(where)
            continue
        if gpu_only and not uses_gpu(pod):
            skip.append(where)
            continue
        if controller and controller.get("kind") == "DaemonSet":
            if ignore_daemonsets:
                skip.append(where)
            else:
                errors.append("%s is managed by a DaemonSet (set ignore_daemonsets)" % where)
            continue
        if MIRROR in (meta.get("annotations") or {}):
            skip.append(where)
            continue
        if not finished:
            if any("emptyDir" in (v or {}) for v in (pod.get("spec") or {}).get("volumes") or []) and not delete_emptydir_data:
                errors.append("%s has emptyDir data (set delete_emptydir_data)" % where)
                continue
            if controller is None and not force:
                errors.append("%s has no controller: nothing would recreate it (set force)" % where)
                continue
        evict.append(where)
    return dict(evict=evict, skip=skip, errors=errors)


def selector_pairs(selectors: Optional[Iterable[object]]) -> list[tuple[str, str]]:
    """'key=value' (or 'key==value') selectors as pairs; equality only, as the roles' selector variables are written."""
    out = []
    for sel in selectors or []:
        key, sep, value = str(sel).replace("==", "=").partition("=")
        if not sep or not key.strip():
            raise RollStateError("pod selector %r is not key=value" % (sel,))
        out.append((key.strip(), value.strip()))
    return out


# ---- what a run disrupts (the modules' ``disruptions``) -------------------------------------------------------------

# Pods named in one disruption sentence; the rest are counted (the full lists are in the modules' results).
NAMED_PODS = 10


def _pods(pods: Iterable[str]) -> str:
    """'N pod(s): a, b' naming the first NAMED_PODS, then how many more."""
    listed = [str(p) for p in pods]
    named = ", ".join(listed[:NAMED_PODS])
    more = len(listed) - NAMED_PODS
    return "%d pod(s): %s%s" % (len(listed), named, " and %d more" % more if more > 0 else "")


def roll_disruptions(name: str, done: Mapping[str, Any]) -> list[str]:
    """What a node_roll run does (or in check mode would do) to the node ``name`` and its pods, in its order, from
    its ``done`` record: the cordon (not when the node is cordoned already), the drain's evictions, the GPU client
    pods deleted (``stopped``). A node past the drain and still cordoned has none, unless GPU clients came back."""
    out = []
    if done.get("cordoned"):
        out.append("cordon node %s" % name)
    if done.get("evicted"):
        out.append("drain node %s, evicting %s" % (name, _pods(done["evicted"])))
    if done.get("stopped"):
        out.append("delete the GPU client pods of node %s, %s" % (name, _pods(done["stopped"])))
    return out


def release_disruptions(name: str, done: Mapping[str, Any], was_cordoned: bool) -> list[str]:
    """What a node_release run does (or would do) to the node ``name``, in its order, from its ``done`` record: the
    pods it deletes for their controllers to recreate (``pods_deleted``), and a cordon its final patch writes
    (``unschedulable`` true on a node that was not cordoned). Label changes and the uncordon disrupt nothing."""
    out = []
    if done.get("pods_deleted"):
        out.append("restart pods of node %s (deleted for their controllers to recreate), %s"
                   % (name, _pods(done["pods_deleted"])))
    if ((done.get("final") or {}).get("spec") or {}).get("unschedulable") is True and not was_cordoned:
        out.append("cordon node %s" % name)
    return out
