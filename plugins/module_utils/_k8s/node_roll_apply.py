# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A node's Kubernetes side of a roll through the official Python client (module node_roll; I/O, the decisions are
``node_roll``): a slot taken in the roll's Lease against the budget recounted from the live nodes, the cordon with
the node's roll state in one PATCH, a drain as kubectl drains (parallel evictions, a refusal by a
PodDisruptionBudget retried every few seconds until the drain's timeout), the phase recorded, a failure marked.

Nodes are read as plain JSON (``_preload_content=False``): the client's model classes cost seconds for a thousand
nodes, and every write is a merge of plain dicts anyway.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Callable, Mapping
from typing import Any, Optional

from ansible_collections.gpuops.provision.plugins.module_utils._common import disruption
from ansible_collections.gpuops.provision.plugins.module_utils._k8s import api as k8s_api, mig_roll, node_roll, roll_lock

try:
    import kubernetes
except ImportError:  # pragma: no cover - k8s_api.HAS_KUBERNETES says so; modules fail before any call
    pass

ApiException = k8s_api.ApiException
# kubectl drain: a refused eviction is tried again after 5 s (k8s.io/kubectl pkg/drain/drain.go evictPods). The wait
# until the evicted pods are gone is a watch (NodeRoll.wait_gone), not kubectl's GET of each pod every second.
EVICT_RETRY = 5.0
# Evictions in flight at once (kubectl starts one goroutine per pod; a connection pool bounds ours).
EVICT_WORKERS = 16
# A slot claim that lost a race for the Lease (409) reads again at once. A wait for a slot watches the Lease, so a
# slot given back or a turn passed is seen the moment it is written (client-go's informers watch for the same
# reason); it looks at the nodes again at least this often, for cordons and NotReady nodes outside the roll.
SLOT_POLL = 2.0
# While nodes ahead of it in the queue have not had their turn, only a write of the Lease can change its answer: it
# watches the Lease this long (the turn_timeout that lets a waiting node jump a stalled queue is checked as often).
QUEUED_WATCH = 30.0
CONFLICT_RETRIES = 20


def _json(resp: Any) -> Any:
    return json.loads(resp.data)


def list_nodes(api: Any, timeout: int, page: int = 500, cached: bool = False,
               pages: Optional[list[int]] = None) -> list[dict[str, Any]]:
    """Every Node as a plain dict: one LIST in pages of ``page`` (limit/continue, a consistent snapshot), or with
    ``cached`` one unpaged LIST from the API server's watch cache (resourceVersion 0: cheap for the server, possibly
    a moment old, as an informer's view is). ``pages`` gets one entry per page read."""
    core: Any = kubernetes.client.CoreV1Api(api)
    if cached:
        return list(_json(core.list_node(resource_version="0", _preload_content=False, _request_timeout=timeout))["items"])
    out: list[dict[str, Any]] = []
    token = None
    while True:
        kwargs: dict[str, Any] = {"limit": page, "_preload_content": False, "_request_timeout": timeout}
        if token:
            kwargs["_continue"] = token
        body = _json(core.list_node(**kwargs))
        out.extend(body.get("items") or [])
        if pages is not None:
            pages.append(len(body.get("items") or []))
        token = (body.get("metadata") or {}).get("continue")
        if not token:
            return out


def list_pods(api: Any, namespace: str, selector: str, timeout: int) -> list[dict[str, Any]]:
    """The pods of ``namespace`` matching the label ``selector``, as plain dicts (one LIST)."""
    core: Any = kubernetes.client.CoreV1Api(api)
    return list(_json(core.list_namespaced_pod(namespace, label_selector=selector, _preload_content=False,
                                               _request_timeout=timeout))["items"])


class RollLease:
    """The roll's Lease as the slot book: who holds a slot is an annotation written with the Lease's
    resourceVersion, so a lost race (409 Conflict) is read again and decided again."""

    def __init__(self, api: Any, namespace: str, name: str, holder: str, timeout: int) -> None:
        self.api = api
        self.leases: Any = kubernetes.client.CoordinationV1Api(api)
        self.namespace, self.name, self.holder, self.timeout = namespace, name, holder, timeout
        self.seen = ""  # the resourceVersion last read: wait_changed watches from it
        self.watchable = True

    @property
    def where(self) -> str:
        return "%s/%s" % (self.namespace, self.name)

    def read(self) -> dict[str, Any]:
        lease = _json(self.leases.read_namespaced_lease(self.name, self.namespace, _preload_content=False,
                                                        _request_timeout=self.timeout))
        self.seen = str((lease.get("metadata") or {}).get("resourceVersion") or "")
        holder = (lease.get("spec") or {}).get("holderIdentity") or ""
        if holder != self.holder:
            raise RollLost("the roll lost its lock %s: it is held by %s now, not by this run; nothing more is started"
                           % (self.where, holder or "nobody"))
        return dict(lease)

    def write(self, lease: Mapping[str, Any]) -> dict[str, Any]:
        return dict(_json(self.leases.replace_namespaced_lease(self.name, self.namespace, lease, _preload_content=False,
                                                               _request_timeout=self.timeout)))

    def wait_changed(self, seconds: float) -> None:
        """Return once the Lease is written after the version last read, or after ``seconds``: one WATCH of it from
        that resourceVersion (fieldSelector metadata.name, as client-go's single-object informers watch), instead of
        a sleep that sees a freed slot up to SLOT_POLL late."""
        if seconds <= 0:
            return
        if not self.seen or not self.watchable:
            time.sleep(seconds)
            return
        window = max(1, int(seconds + 0.999))
        watch = kubernetes.watch.Watch()
        try:
            for _event in watch.stream(self.leases.list_namespaced_lease, self.namespace,
                                       field_selector="metadata.name=%s" % self.name, resource_version=self.seen,
                                       timeout_seconds=window, _request_timeout=(self.timeout, window + 5)):
                return
        except ApiException as e:
            if getattr(e, "status", None) == 403:
                # A Role granted before this release lacks watch on leases (docs/rbac.md): wait as it did then.
                self.watchable = False
                time.sleep(seconds)
            elif getattr(e, "status", None) != 410:  # 410 Gone: too old to watch from; the caller reads again
                raise
        finally:
            watch.stop()

    def edit_slots(self, change: Callable[[list[str]], Optional[list[str]]]) -> dict[str, Any]:
        """Read the Lease, let ``change(slots)`` return the new slot list (None: leave it), write it; again on 409."""
        for _attempt in range(CONFLICT_RETRIES):
            lease = self.read()
            slots = node_roll.lease_list(lease, node_roll.LEASE_SLOTS)
            new = change(slots)
            if new is None or sorted(set(new)) == sorted(set(slots)):
                return lease
            try:
                return self.write(node_roll.lease_with_slots(lease, new))
            except ApiException as e:
                if getattr(e, "status", None) != 409:
                    raise
        raise RollLost("the roll's lock %s changed %d times in a row while this node wrote its slot"
                       % (self.where, CONFLICT_RETRIES))

    def release_slot(self, node: str) -> None:
        try:
            self.edit_slots(lambda slots: [s for s in slots if s != node])
        except RollLost:
            pass  # a lock held by another run (or released) holds no slot of ours any more


class RollLost(Exception):
    """The roll's Lease is no longer this run's: nothing more may start."""


class NodeRoll:
    """One node's Kubernetes side of a roll named ``roll``; ``done`` records what was written."""

    def __init__(self, api: Any, name: str, roll: str, timeout: int) -> None:
        self.api = api
        self.core: Any = kubernetes.client.CoreV1Api(api)
        self.name, self.roll, self.timeout = name, roll, timeout
        self.done: dict[str, Any] = {"slot": None, "cordoned": False, "labels": {}, "evicted": [], "phase": None,
                                     "waited_for_slot": 0.0}

    def read(self) -> dict[str, Any]:
        return dict(_json(self.core.read_node(self.name, _preload_content=False, _request_timeout=self.timeout)))

    def patch(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return dict(_json(self.core.patch_node(self.name, body, _preload_content=False, _request_timeout=self.timeout)))

    # ---- the slot --------------------------------------------------------------------------------------------------
    def take_slot(self, lease: Optional[RollLease], limits: Mapping[str, Any], wait: float, check: bool) -> dict[str, Any]:
        """Take a slot in the roll, waiting up to ``wait`` seconds while another node of the roll holds one that it
        will give back. Without a Lease (no roll lock) the budget is recounted all the same, but two hosts could take
        a slot at once: the roll lock is what makes the count safe. Raises NodeStepError when the node may not start."""
        start = time.monotonic()
        deadline = start + wait
        while True:
            # While nodes before it in the roll's queue have not had their turn, the Lease alone says it waits: the
            # cluster's nodes (a LIST of a thousand is tens of MB) are listed only once nothing is ahead of it.
            decision = self._queued(lease, limits) if not check else None
            queued = decision is not None
            if decision is None:
                decision = self._claim(lease, list_nodes(self.api, self.timeout, cached=True), limits, check)
            if decision["take"]:
                self.done["slot"] = True
                self.done["waited_for_slot"] = round(time.monotonic() - start, 2)
                return decision
            if decision["spent"]:
                raise k8s_api.NodeStepError("%s: not started: %s" % (self.name, "; ".join(decision["reasons"])),
                                            dict(self.done, spent=True))
            if check:
                return decision
            if not decision["wait"]:
                raise k8s_api.NodeStepError(
                    "%s cannot be taken out now and no other node of the roll is in progress, so waiting would not "
                    "free a slot: %s; nothing was changed" % (self.name, "; ".join(decision["reasons"])), self.done)
            if time.monotonic() >= deadline:
                raise k8s_api.NodeStepError("%s waited %d s for a slot in the roll: %s; nothing was changed"
                                            % (self.name, wait, "; ".join(decision["reasons"])), self.done)
            pause = min(QUEUED_WATCH if queued else SLOT_POLL, max(deadline - time.monotonic(), 0.0))
            if lease is None:
                time.sleep(pause)
            else:
                lease.wait_changed(pause)

    @staticmethod
    def _stalled(lease: Mapping[str, Any], limits: Mapping[str, Any]) -> bool:
        """No node's turn came for turn_timeout seconds (LEASE_PROGRESS): a waiting node goes ahead."""
        notes = (lease.get("metadata") or {}).get("annotations") or {}
        since = roll_lock.parse_time(notes.get(node_roll.LEASE_PROGRESS) or None)
        return since is not None and time.time() - since > float(limits.get("turn_timeout") or 0)

    def _queued(self, lease: Optional[RollLease], limits: Mapping[str, Any]) -> Optional[dict[str, Any]]:
        """The wait decision while the roll's queue (in the Lease) has nodes ahead of this one, else None."""
        if lease is None:
            return None
        current = lease.read()
        if self.name in node_roll.lease_list(current, node_roll.LEASE_SLOTS):
            return None
        return node_roll.turn_decision(node_roll.lease_list(current, node_roll.LEASE_QUEUE),
                                       node_roll.lease_list(current, node_roll.LEASE_PASSED), self.name,
                                       self._stalled(current, limits))

    def _claim(self, lease: Optional[RollLease], nodes: list[dict[str, Any]], limits: Mapping[str, Any],
               check: bool) -> dict[str, Any]:
        """One decision over ``nodes`` and the Lease as read now, and the slot written when it is taken; a write
        refused with 409 (another slot moved meanwhile) reads the Lease again and decides again."""
        def decide(current: Mapping[str, Any], slots: list[str]) -> dict[str, Any]:
            targeted = node_roll.lease_list(current, node_roll.LEASE_NODES) or [self.name]
            return node_roll.slot_decision(
                nodes, targeted, slots, self.name, self.roll, limits,
                lambda n: mig_roll.advertised_resources((n.get("status") or {}).get("allocatable")),
                queue=node_roll.lease_list(current, node_roll.LEASE_QUEUE),
                passed=node_roll.lease_list(current, node_roll.LEASE_PASSED), stalled=self._stalled(current, limits),
                since=roll_lock.parse_time((current.get("spec") or {}).get("acquireTime")))

        if lease is None:
            return decide({}, [])
        for _attempt in range(CONFLICT_RETRIES):
            current = lease.read()
            slots = node_roll.lease_list(current, node_roll.LEASE_SLOTS)
            decision = decide(current, slots)
            # The node's turn has come when it takes a slot or cannot start at all: the nodes after it go on.
            done = decision["take"] or decision["spent"] or not decision["wait"]
            if not done or check or self.name in slots:
                return decision
            try:
                lease.write(node_roll.lease_turn(current, self.name, slots + [self.name] if decision["take"] else slots,
                                                 roll_lock.format_time(time.time())))
                return decision
            except ApiException as e:
                if getattr(e, "status", None) != 409:
                    raise
        raise RollLost("the roll's lock %s changed %d times in a row while %s took its slot"
                       % (lease.where, CONFLICT_RETRIES, self.name))

    # ---- cordon, phase, failure ------------------------------------------------------------------------------------
    def cordon(self, node: dict[str, Any], target: str, reason: str, labels: Mapping[str, Optional[str]],
               check: bool) -> dict[str, Any]:
        """Our roll state, the cordon and ``labels`` in one PATCH with the node's resourceVersion (read again on
        409). Labels already at their value are not written."""
        for _attempt in range(CONFLICT_RETRIES):
            body = node_roll.cordon_patch(node, self.roll, target, reason,
                                          mig_roll.label_patch((node.get("metadata") or {}).get("labels") or {}, labels))
            self.done["labels"] = body["metadata"].get("labels") or {}
            self.done["cordoned"] = not bool((node.get("spec") or {}).get("unschedulable"))
            if check:
                return node
            try:
                node = self.patch(body)
                self.done["phase"] = "cordoned"
                return node
            except ApiException as e:
                if getattr(e, "status", None) != 409:
                    raise
                node = self.read()
        raise k8s_api.NodeStepError("%s changed %d times in a row while it was cordoned" % (self.name, CONFLICT_RETRIES),
                                    self.done)

    def mark(self, phase: str, check: bool) -> None:
        if not check:
            self.patch(node_roll.phase_patch(phase))
        self.done["phase"] = phase

    def fail(self, leave: str, labels: Mapping[str, Optional[str]], check: bool) -> dict[str, Any]:
        node = self.read()
        body = node_roll.failed_patch(node, self.roll, leave, time.time())
        change = mig_roll.label_patch((node.get("metadata") or {}).get("labels") or {}, labels)
        if change:
            body["metadata"]["labels"] = change
        self.done["labels"] = change
        if not check:
            node = self.patch(body)
        self.done["phase"] = "failed"
        return node

    # ---- waiting for jobs -------------------------------------------------------------------------------------------
    def wait_for_jobs(self, wait: Mapping[str, Any], check: bool) -> dict[str, Any]:
        """The GPU Operator upgrade policy's waitForCompletion (k8s-operator-libs pkg/upgrade/pod_manager.go
        ScheduleCheckOnPodCompletion): the node is cordoned, so no new pod lands; wait until no pod on it matching
        ``wait['selector']`` is Running or Pending (``mig_roll.running_pods``), up to ``wait['timeout']`` seconds (0:
        no limit). When it runs out, the drain evicts them (upstream's choice), or with ``on_timeout`` 'fail' the
        node fails. Returns ``left`` (the pods still running when the wait ended) and ``seconds``."""
        start = time.monotonic()
        timeout = float(wait.get("timeout") or 0)
        while True:
            pods = _json(self.core.list_pod_for_all_namespaces(
                label_selector=wait["selector"], field_selector="spec.nodeName=%s" % self.name, _preload_content=False,
                _request_timeout=self.timeout))["items"]
            left = mig_roll.running_pods(pods)
            if not left or check or (timeout and time.monotonic() - start >= timeout):
                break
            time.sleep(max(float(wait.get("delay") or 10), 0.5))
        if left and not check and wait.get("on_timeout") == "fail":
            raise k8s_api.NodeStepError(
                "%s: %d pod(s) matching %s were still running after %d s: %s; the node is left cordoned"
                % (self.name, len(left), wait["selector"], int(timeout), ", ".join(left)), dict(self.done, jobs_left=left))
        return dict(left=left, seconds=round(time.monotonic() - start, 2))

    # ---- the drain -------------------------------------------------------------------------------------------------
    def pods(self) -> list[dict[str, Any]]:
        pods = self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % self.name,
                                                     _preload_content=False, _request_timeout=self.timeout)
        return list(_json(pods)["items"])

    def drain(self, options: Mapping[str, Any], check: bool) -> dict[str, Any]:
        """Evict the pods kubectl drain would (``node_roll.drain_selection``), all at once, each refused eviction
        (429: a PodDisruptionBudget) tried again every EVICT_RETRY s, then wait until they are gone; everything
        within ``options['timeout']`` seconds. Returns ``evicted``, ``skipped``, ``retries`` and ``seconds``."""
        start = time.monotonic()
        deadline = start + float(options["timeout"])
        pods = self.pods()
        sel = node_roll.drain_selection(pods, options["ignore_daemonsets"], options["delete_emptydir_data"],
                                        options["force"], options["gpu_only"],
                                        node_roll.selector_pairs(options.get("selectors")))
        if sel["errors"]:
            raise k8s_api.NodeStepError("%s: cannot drain: %s; the node is left cordoned"
                                        % (self.name, "; ".join(sel["errors"])), self.done)
        by_where = {"%s/%s" % (p["metadata"].get("namespace", ""), p["metadata"]["name"]): p for p in pods}
        targets = [by_where[w] for w in sel["evict"]]
        report: dict[str, Any] = {"evicted": sel["evict"], "skipped": sel["skip"], "retries": 0, "seconds": 0.0}
        self.done["evicted"] = sel["evict"]
        if check or not targets:
            return report
        refusals: dict[str, str] = {}

        def evict(pod: Mapping[str, Any]) -> None:
            meta = pod["metadata"]
            where = "%s/%s" % (meta["namespace"], meta["name"])
            body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                                    "metadata": {"name": meta["name"], "namespace": meta["namespace"]}}
            if options.get("grace_period") is not None:
                body["deleteOptions"] = {"gracePeriodSeconds": int(options["grace_period"])}
            while True:
                try:
                    self.core.create_namespaced_pod_eviction(meta["name"], meta["namespace"], body,
                                                             _request_timeout=self.timeout)
                    refusals.pop(where, None)
                    return
                except ApiException as e:
                    status = getattr(e, "status", None)
                    if status == 404:
                        refusals.pop(where, None)
                        return
                    if status != 429:
                        raise
                    refusals[where] = k8s_api.api_message(e)
                    report["retries"] += 1
                    if time.monotonic() + EVICT_RETRY > deadline:
                        return
                    time.sleep(EVICT_RETRY)

        with concurrent.futures.ThreadPoolExecutor(max_workers=min(EVICT_WORKERS, len(targets))) as pool:
            for future in [pool.submit(evict, p) for p in targets]:
                future.result()
        uids = {p["metadata"]["uid"]: "%s/%s" % (p["metadata"]["namespace"], p["metadata"]["name"]) for p in targets}
        left = self.wait_gone(uids, deadline)
        if left:
            why = "; ".join("%s: eviction refused (%s)" % (w, refusals[w]) for w in left if w in refusals)
            raise k8s_api.NodeStepError(
                "%s: drain did not finish within %d s: pods still on the node: %s%s; the node is left cordoned"
                % (self.name, int(options["timeout"]), ", ".join(left), (". " + why) if why else ""),
                dict(self.done, pods_left=left))
        report["seconds"] = round(time.monotonic() - start, 2)
        return report

    def wait_gone(self, uids: Mapping[str, str], deadline: float, namespace: Optional[str] = None) -> list[str]:
        """Wait until none of the pods ``uids`` ({uid: 'namespace/name'}) is on the node any more; returns those
        still there at ``deadline`` (sorted). One LIST of the node's pods, then a WATCH of them from its
        resourceVersion, which ends the wait the moment the last one is deleted (kubectl's waitForDelete GETs each
        pod every second instead: a request a pod a second, and up to a second late); on 410 Gone or the end of the
        watch's window, LIST again."""
        left = dict(uids)
        while True:
            body = self._list_pods(namespace)
            present = {(p.get("metadata") or {}).get("uid") for p in body.get("items") or []}
            left = {uid: where for uid, where in left.items() if uid in present}
            remaining = deadline - time.monotonic()
            if not left or remaining <= 0:
                return sorted(left.values())
            window = max(1, min(int(remaining + 0.999), 60))
            try:
                lister, args = self._pod_lister(namespace)
                for event in kubernetes.watch.Watch().stream(
                        lister, *args, field_selector="spec.nodeName=%s" % self.name,
                        resource_version=(body.get("metadata") or {}).get("resourceVersion"), timeout_seconds=window,
                        _request_timeout=(self.timeout, window + 5)):
                    if event["type"] == "DELETED":
                        left.pop(str(((event.get("raw_object") or {}).get("metadata") or {}).get("uid")), None)
                    if not left or time.monotonic() >= deadline:
                        break
            except ApiException as e:
                if getattr(e, "status", None) != 410:  # 410 Gone: too old to watch from; LIST again
                    raise
            if not left:
                return []

    def _pod_lister(self, namespace: Optional[str]) -> tuple[Any, tuple[str, ...]]:
        """The client's LIST (and, with watch=True, WATCH) of pods: in ``namespace``, or in all namespaces."""
        if namespace:
            return self.core.list_namespaced_pod, (namespace,)
        return self.core.list_pod_for_all_namespaces, ()

    def _list_pods(self, namespace: Optional[str]) -> dict[str, Any]:
        lister, args = self._pod_lister(namespace)
        return dict(_json(lister(*args, field_selector="spec.nodeName=%s" % self.name, _preload_content=False,
                                 _request_timeout=self.timeout)))

    # ---- the GPU clients -------------------------------------------------------------------------------------------
    def stop_pods(self, stop: Mapping[str, Any], check: bool) -> dict[str, Any]:
        """The pods on the node in ``stop['namespace']`` whose labels match any of ``stop['selectors']`` (the GPU
        clients: DaemonSet pods, which the drain leaves) deleted, then waited for until gone, within
        ``stop['timeout']`` s: mig-manager pauses the operands and waits for their pods to be deleted (NVIDIA/mig-parted
        pkg/mig/reconfigure/reconfigure.go waitForPodsToBeDeleted) before it touches the GPUs. A pod gone already is
        not an error. Returns ``deleted`` (namespace/name) and ``seconds``."""
        start = time.monotonic()
        namespace = stop["namespace"]
        pods = mig_roll.pods_matching(self._list_pods(namespace).get("items") or [], stop["selectors"])
        # A pod already being deleted (its DaemonSet's paused label) is waited for, not deleted again.
        uids = {p["metadata"]["uid"]: "%s/%s" % (namespace, p["metadata"]["name"]) for p in pods}
        report: dict[str, Any] = {"deleted": sorted(uids.values()), "seconds": 0.0}
        self.done["stopped"] = report["deleted"]
        if check or not uids:
            return report
        for pod in pods:
            if pod["metadata"].get("deletionTimestamp"):
                continue
            try:
                self.core.delete_namespaced_pod(pod["metadata"]["name"], namespace, _request_timeout=self.timeout)
            except ApiException as e:
                if getattr(e, "status", None) != 404:
                    raise
        left = self.wait_gone(uids, start + float(stop["timeout"]), namespace)
        if left:
            raise k8s_api.NodeStepError("%s: the GPU client pods %s were still on the node after %d s; the node is left "
                                        "cordoned" % (self.name, ", ".join(left), int(stop["timeout"])),
                                        dict(self.done, pods_left=left))
        report["seconds"] = round(time.monotonic() - start, 2)
        return report


def run(api: Any, p: Mapping[str, Any], check: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The node_roll module's work for its parameters ``p``; returns (result, the node before). Any failure is a
    NodeStepError carrying what was written before it (``done``: the slot, the cordon, the phase)."""
    roll = NodeRoll(api, p["name"], p["roll"], p["timeout"])
    lease = RollLease(api, p["lease"]["namespace"], p["lease"]["name"], p["lease"]["holder"], p["timeout"]) \
        if p.get("lease") else None
    try:
        try:
            return _run(roll, lease, p, check)
        except ApiException as e:
            if getattr(e, "status", None) == 404 and not roll.done["phase"]:
                raise k8s_api.NodeStepError("no Kubernetes node named %s; nothing was changed" % p["name"], roll.done)
            raise k8s_api.NodeStepError(k8s_api.describe_failure(p["name"], e), roll.done)
        except (k8s_api.NodeStepError, RollLost, node_roll.RollStateError):
            raise
        except Exception as e:  # pylint: disable=broad-except  # API, urllib3: reported with what was done before
            raise k8s_api.NodeStepError(k8s_api.describe_failure(p["name"], e), roll.done)
    except k8s_api.NodeStepError:
        # A slot taken for a node that carries no phase of the roll yet would be held by nobody: give it back.
        if lease is not None and roll.done["slot"] and not roll.done["phase"] and not check:
            lease.release_slot(p["name"])
            roll.done["slot"] = False
        raise


def _run(roll: NodeRoll, lease: Optional[RollLease], p: Mapping[str, Any], check: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    node = roll.read()
    before = node_roll.state(node, p["roll"])
    # A node an earlier run took into the roll is in it from the start: a failure now is a failure of the roll's node,
    # not a node left as it was.
    if before["ours"] and before["phase"] not in ("", "released"):
        roll.done["phase"] = before["phase"]
    result: dict[str, Any] = {"before": before, "drain": None, "slot": None, "slot_held": False, "done": roll.done}
    if p["state"] == "failed":
        roll.fail(p["failed_node_state"], p["labels"] or {}, check)
        return result, node
    phase = before["phase"] if before["ours"] else ""
    limits = {"max_parallel": p["max_parallel"], "max_unavailable": p["max_unavailable"],
              "max_failures": p["max_failures"], "floors": p["floors"] or {}, "turn_timeout": p["turn_timeout"]}
    result["slot"] = roll.take_slot(lease, limits, p["slot_timeout"], check)
    result["slot_held"] = result["slot"]["held"]
    # Where an earlier run of this roll stopped: past the drain (drained, applied), a node still cordoned is not
    # drained again; anything earlier, or a node someone uncordoned meanwhile, is cordoned and drained (again).
    past_drain = phase in ("drained", "applied") and before["unschedulable"]
    if not past_drain and (phase != "cordoned" or not before["unschedulable"] or p["state"] == "cordoned"):
        node = roll.cordon(node, p["target"], p["reason"], p["labels"] or {}, check)
    if not past_drain and p["state"] == "drained":
        if (p.get("wait_for_jobs") or {}).get("selector"):
            result["jobs"] = roll.wait_for_jobs(p["wait_for_jobs"], check)
        result["drain"] = roll.drain(p["drain"], check)
        roll.mark("drained", check)
    if p["state"] == "drained" and (p.get("stop_pods") or {}).get("selectors"):
        # After the drain and on every later run that finds the node past it: a client that came back meanwhile goes.
        result["stopped"] = roll.stop_pods(p["stop_pods"], check)
    return result, node


def outcome(result: dict[str, Any], p: Mapping[str, Any], diff: bool) -> dict[str, Any]:
    """The node_roll module's result from :func:`run`'s: ``changed``, the phase, the seconds waited for a slot, the
    ``disruptions`` (the cordon, the evictions, the GPU clients deleted: node_roll.roll_disruptions) and, with
    ``diff``, those first and then the node's phase and cordon before and after."""
    done = result.pop("done")
    changed = bool(done["slot"] and not result["slot_held"]) or done["cordoned"] or bool(done["labels"]) \
        or bool(done["evicted"]) or bool(done.get("stopped")) or done["phase"] is not None
    out = dict(changed=changed, **result, phase=done["phase"] or result["before"]["phase"],
               waited_for_slot=done["waited_for_slot"], disruptions=node_roll.roll_disruptions(p["name"], done))
    if diff:
        out["diff"] = disruption.diff_first(out["disruptions"], dict(
            before={"phase": result["before"]["phase"], "unschedulable": result["before"]["unschedulable"]},
            after={"phase": out["phase"], "unschedulable": result["before"]["unschedulable"] or p["state"] != "failed"},
            before_header="node " + p["name"], after_header="node " + p["name"]))
    return out
