# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes API through the official Python client (the library kubernetes.core uses): the client from a
kubeconfig or the in-cluster account, the node steps that follow a GPU change (I/O; the decisions are
``mig_roll.label_patch`` and ``mig_roll.advertised_resources``), and the roll lock's Lease (the decision is
``k8s_roll_lock.decide``).

Why one process for the steps after a change: each kubernetes.core module run pays about a second for importing
this client; a roll made three of them per node after the apply (restore labels, wait for resources, uncordon).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from ansible_collections.gpuops.provision.plugins.module_utils._common import disruption
from ansible_collections.gpuops.provision.plugins.module_utils._k8s import controller as k8s_controller
from ansible_collections.gpuops.provision.plugins.module_utils._k8s import gpu_pools, mig_roll, node_roll
from ansible_collections.gpuops.provision.plugins.module_utils._k8s import roll_lock as k8s_roll_lock

try:
    import kubernetes
    from kubernetes.client.rest import ApiException
    HAS_KUBERNETES = True
    KUBERNETES_ERROR = None
except ImportError as e:  # pragma: no cover - depends on the host
    HAS_KUBERNETES = False
    KUBERNETES_ERROR = e

    class ApiException(Exception):  # type: ignore[no-redef]
        """Stands in for the client's exception where the library is missing (modules fail before any call)."""


# The connection options of the collection's Kubernetes modules (doc fragment _kubernetes_auth).
ARGUMENT_SPEC = dict(kubeconfig=dict(type="path"), context=dict(type="str"), timeout=dict(type="int", default=30))


def api_client(kubeconfig: Optional[str] = None, context: Optional[str] = None) -> Any:
    """A client from the kubeconfig (the option, then kubernetes.core's environment variables, then the library's
    default: KUBECONFIG or ~/.kube/config), or the in-cluster service account where there is none (AWX container
    groups). TLS is verified as the kubeconfig says."""
    path = kubeconfig or os.environ.get("K8S_AUTH_KUBECONFIG")
    context = context or os.environ.get("K8S_AUTH_CONTEXT")
    # The library says only "Invalid kube-config file. No configuration found." for a path that is not there.
    if path and not any(os.path.isfile(os.path.expanduser(p)) for p in str(path).split(os.pathsep) if p):
        raise kubernetes.config.ConfigException("kubeconfig %s: no such file" % path)
    try:
        return kubernetes.config.new_client_from_config(config_file=path, context=context)
    except kubernetes.config.ConfigException:
        if path:
            raise
    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_incluster_config(client_configuration=cfg)
    return kubernetes.client.ApiClient(cfg)


def label_problems(params: Mapping[str, Any], options: Iterable[str]) -> list[str]:
    """Label values must be strings (or null to remove): a YAML true would be written as 'True'."""
    return ["%s: the value of %s must be a string or null, got %r" % (option, key, value)
            for option in options for key, value in sorted((params.get(option) or {}).items())
            if value is not None and not isinstance(value, str)]


def api_message(err: BaseException) -> str:
    """An API error as the server worded it: '<status> <reason>: <the Status message> (<field>: <cause>, ...)'.

    The API server explains a refusal in the body (a metav1.Status: ``message`` and ``details.causes`` with the
    ``field`` each cause is about, k8s.io/apimachinery pkg/api/errors NewInvalid); the client's own text is only
    the HTTP reason phrase ("Unprocessable Entity"), which names neither the field nor the rule."""
    head = "%s %s" % (getattr(err, "status", ""), getattr(err, "reason", "") or "")
    try:
        body = json.loads(getattr(err, "body", None) or "")
    except (TypeError, ValueError):
        body = None
    if not isinstance(body, dict):
        return head.strip() or str(err)
    causes = ((body.get("details") or {}).get("causes")) or []
    extra = ", ".join("%s: %s" % (c.get("field") or "?", c.get("message") or c.get("reason") or "")
                      for c in causes if isinstance(c, dict) and (c.get("field") or c.get("message")))
    message = str(body.get("message") or "").strip()
    text = "%s: %s" % (head.strip(), message) if message else head.strip()
    return "%s (%s)" % (text, extra) if extra and extra not in message else text


def describe_failure(node: str, err: BaseException) -> str:
    """The message of a failed node step: the API's status, reason and the server's own explanation, or why the API
    could not be reached."""
    if isinstance(err, ApiException):
        return "node %s: Kubernetes API error: %s" % (node, api_message(err))
    return "node %s: cannot reach the Kubernetes API: %s" % (node, err)


class NodeStepError(Exception):
    """A step of NodeRelease failed; ``done`` says what had been written before it."""

    def __init__(self, msg: str, done: dict[str, Any]) -> None:
        super().__init__(msg)
        self.done = done


def _node_view(node: Mapping[str, Any]) -> dict[str, Any]:
    spec = node.get("spec") or {}
    return {"labels": dict((node.get("metadata") or {}).get("labels") or {}),
            "unschedulable": bool(spec.get("unschedulable")),
            "advertised": mig_roll.advertised_resources((node.get("status") or {}).get("allocatable"))}


class NodeRelease:
    """After a node's GPUs changed: restore labels, restart pods, wait until the node advertises ``resources``,
    then set the final labels and cordon state in one PATCH. Each write is skipped when it would change nothing, and
    check mode writes nothing and does not wait."""

    def __init__(self, api: Any, name: str, timeout: int) -> None:
        self.api = api
        # Any, like every API client's objects here: only recent kubernetes releases ship hints (kubernetes-client/python
        # PR 2657), the older ones this collection also runs with have none.
        self.core: Any = kubernetes.client.CoreV1Api(api)
        self.name = name
        self.timeout = timeout
        self.done: dict[str, Any] = {"restored": {}, "pods_deleted": [], "waited_seconds": None, "final": {}}

    def read(self) -> dict[str, Any]:
        return self.api.sanitize_for_serialization(self.core.read_node(self.name, _request_timeout=self.timeout))

    def patch(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.api.sanitize_for_serialization(self.core.patch_node(self.name, body, _request_timeout=self.timeout))

    def restart_pods(self, namespace: str, selectors: Iterable[str], check: bool) -> None:
        """Delete the pods on this node that match any of ``selectors`` (their DaemonSet recreates them); one that is
        gone already is not an error. Listed now, not before the change: a pod recreated meanwhile is restarted too."""
        for selector in selectors:
            pods = self.core.list_namespaced_pod(namespace, label_selector=selector,
                                                 field_selector="spec.nodeName=%s" % self.name,
                                                 _request_timeout=self.timeout).items
            for pod in pods:
                where = "%s/%s" % (namespace, pod.metadata.name)
                if where in self.done["pods_deleted"]:
                    continue
                if not check:
                    try:
                        self.core.delete_namespaced_pod(pod.metadata.name, namespace, _request_timeout=self.timeout)
                    except ApiException as e:
                        if getattr(e, "status", None) != 404:
                            raise
                        continue
                self.done["pods_deleted"].append(where)

    def wait_for(self, node: dict[str, Any], expected: Mapping[str, int], wait_timeout: float) -> dict[str, Any]:
        """Wait until the node advertises exactly ``expected`` (``mig_roll.advertised_resources``), by watching the
        Node from the version read (as ``kubectl wait`` does) rather than polling; returns the last node seen."""
        start = time.monotonic()
        deadline = start + wait_timeout
        while _node_view(node)["advertised"] != expected:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise NodeStepError(
                    "%s: the device plugin did not advertise the expected resources within %d s: expected %s, "
                    "advertised %s; the node is left cordoned"
                    % (self.name, wait_timeout, _fmt(expected), _fmt(_node_view(node)["advertised"])), self.done)
            # The server ends a watch after timeout_seconds; the read timeout outlives it so that the client does not.
            window = max(1, min(int(remaining + 0.999), 60))
            stream = kubernetes.watch.Watch()
            try:
                for event in stream.stream(self.core.list_node, field_selector="metadata.name=%s" % self.name,
                                           resource_version=node["metadata"]["resourceVersion"],
                                           timeout_seconds=window, _request_timeout=(self.timeout, window + 5)):
                    if event["type"] in ("ADDED", "MODIFIED"):
                        node = self.api.sanitize_for_serialization(event["object"])
                        if _node_view(node)["advertised"] == expected or time.monotonic() >= deadline:
                            stream.stop()
            except ApiException as e:
                if getattr(e, "status", None) != 410:  # 410 Gone: the version is too old to watch from; read again
                    raise
            if _node_view(node)["advertised"] != expected:
                node = self.read()  # the watch ended (its window, 410) without the match: from the current version
        self.done["waited_seconds"] = round(time.monotonic() - start, 2)
        return node

    def run(self, restore_labels: Optional[Mapping[str, Optional[str]]], pods: tuple[str, Sequence[str]],  # pylint: disable=too-many-arguments
            resources: Optional[Mapping[str, int]], labels: Optional[Mapping[str, Optional[str]]], unschedulable: Optional[bool],
            wait_timeout: float, check: bool, roll: str = "", lease: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """``pods``: (namespace, label selectors) of the pods to restart. Returns the node's view before and after.

        ``roll``: the roll whose state the node carries (``node_roll``): the first PATCH records phase applied, the
        last one phase released with our cordon annotations gone, and uncordons the node when the cordon is the
        roll's (``unschedulable``, when set, decides instead); ``lease`` (``_k8s.node_roll_apply.RollLease``) then gives
        the node's slot back."""
        node = self.read()
        before = _node_view(node)
        restore = mig_roll.label_patch(before["labels"], restore_labels)
        first: dict[str, Any] = {"metadata": {"labels": restore}} if restore else {}
        if roll:
            first = _merge(first, node_roll.phase_patch("applied"))
        if first and not check:
            node = self.patch(first)
        self.done["restored"] = restore
        self.restart_pods(pods[0], pods[1], check)
        if resources is not None and not check:
            node = self.wait_for(node, resources, wait_timeout)
        current = _node_view(node)
        # In check mode the restore was not written: the final patch is worked out as if it had been.
        expected_labels = mig_roll.patched_labels(current["labels"], restore)
        label_changes = mig_roll.label_patch(expected_labels, labels)
        final: dict[str, Any] = {}
        if label_changes:
            final["metadata"] = {"labels": label_changes}
        if roll:
            final = _merge(final, node_roll.release_patch(node, roll))
        if unschedulable is not None:
            final.pop("spec", None)
            if bool(unschedulable) != current["unschedulable"]:
                final["spec"] = {"unschedulable": bool(unschedulable)}
        if final and not check:
            node = self.patch(final)
        if lease is not None and not check:
            lease.release_slot(self.name)
        self.done["final"] = final
        after = {"labels": mig_roll.patched_labels(expected_labels, label_changes),
                 "unschedulable": final.get("spec", {}).get("unschedulable", current["unschedulable"]),
                 "advertised": _node_view(node)["advertised"]}
        return before, after


def release_outcome(name: str, done: Mapping[str, Any], before: Mapping[str, Any], after: Mapping[str, Any],
                    diff: bool) -> dict[str, Any]:
    """The node_release module's result from NodeRelease.run's: ``changed``, the node before and after, what was
    done, the ``disruptions`` (the pods deleted, a cordon: node_roll.release_disruptions) and, with ``diff``, those
    first and then the node's labels and cordon before and after."""
    result: dict[str, Any] = dict(changed=bool(done["restored"] or done["pods_deleted"] or done["final"]),
                                  before=before, after=after, **done,
                                  disruptions=node_roll.release_disruptions(name, done, bool(before["unschedulable"])))
    if diff:
        result["diff"] = disruption.diff_first(result["disruptions"], dict(
            before={k: before[k] for k in ("labels", "unschedulable")},
            after={k: after[k] for k in ("labels", "unschedulable")},
            before_header="node/%s" % name, after_header="node/%s" % name))
    return result


def _merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """A merge patch of ``b`` over ``a`` (nested dicts merged, other values replaced)."""
    out = dict(a)
    for key, value in b.items():
        out[key] = _merge(out[key], value) if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) else value
    return out


def _fmt(resources: Optional[Mapping[str, int]]) -> str:
    return "{%s}" % ", ".join("%s: %s" % kv for kv in sorted(resources.items())) if resources else "nothing"


class LockFailed(Exception):
    """The roll lock was not taken or released; ``extras`` are the result keys the module reports with it."""

    def __init__(self, msg: str, **extras: Any) -> None:
        super().__init__(msg)
        self.extras = extras


def _read_lease(leases: Any, p: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    try:
        return json.loads(leases.read_namespaced_lease(p["name"], p["namespace"], _preload_content=False,
                                                       _request_timeout=p["timeout"]).data)
    except ApiException as e:
        if getattr(e, "status", None) != 404:
            raise
        return None


def _write_lease(leases: Any, p: Mapping[str, Any], plan: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    if plan["action"] == "create":
        written = leases.create_namespaced_lease(p["namespace"], plan["body"], _preload_content=False,
                                                 _request_timeout=p["timeout"])
    else:
        written = leases.replace_namespaced_lease(p["name"], p["namespace"], plan["body"], _preload_content=False,
                                                  _request_timeout=p["timeout"])
    return k8s_roll_lock.record(json.loads(written.data))


# Writes of this run's own lock (a release, a renewal) that meet 409 in a row before giving up.
LEASE_CONFLICT_RETRIES = 5


def roll_lock(api: Any, p: dict[str, Any], check_mode: bool, diff: bool) -> tuple[dict[str, Any], Optional[str]]:
    """Take, renew or release the Lease ``p['namespace']/p['name']`` as the roll_lock module's parameters ``p`` say.

    The Lease names this run's controller process (``k8s_controller.controller``, where the module runs below
    ansible-playbook), and a holder whose controller process is known to be gone is taken over at once.
    Returns the module result and a warning (a lock taken over), or raises LockFailed (refused, or the Lease changed
    hands meanwhile: nothing changed) or the client's errors."""
    leases = kubernetes.client.CoordinationV1Api(api)
    where = "%s/%s" % (p["namespace"], p["name"])
    me = k8s_controller.controller()
    for attempt in range(LEASE_CONFLICT_RETRIES):
        current = _read_lease(leases, p)
        rec = k8s_roll_lock.record(current)
        holder_alive = None
        if rec and rec["holder"] and rec["holder"] != p["holder"]:
            holder_alive = k8s_controller.alive(k8s_controller.decode(rec["process"]))
        try:
            plan = k8s_roll_lock.decide(current, p["state"], p["name"], p["namespace"], p["holder"], p["ttl"], p["nodes"],
                                        time.time(), process=k8s_controller.encode(me), holder_alive=holder_alive,
                                        check=check_mode, queue=p.get("queue"))
        except k8s_roll_lock.LockError as e:
            raise LockFailed("%s: %s" % (where, e))
        before = plan["before"]
        if plan["action"] == "refuse":
            raise LockFailed(plan["msg"], action="none", lease=before, taken_over=None)
        after = k8s_roll_lock.record(plan["body"]) if plan["body"] else before
        if plan["action"] == "none" or check_mode:
            break
        try:
            after = _write_lease(leases, p, plan)
            break
        except ApiException as e:
            if getattr(e, "status", None) != 409:
                raise
            # Our own lock moved under us: this run's renewer (keep_lock) renewed it, or the roll's slot writes
            # changed it, between the read and the write. It is still ours, so read it and decide again, as client-go
            # retries tryAcquireOrRenew (leaderelection.go renew). A take that meets 409 lost to another run.
            if rec is None or rec["holder"] != p["holder"]:
                raise LockFailed("the roll lock %s changed hands while this run took it (%s); nothing was changed"
                                 % (where, e.reason), action="none", lease=before, taken_over=None)
            if attempt + 1 == LEASE_CONFLICT_RETRIES:
                raise LockFailed("the roll lock %s, held by this run, changed between each read and write (%d conflicts "
                                 "in a row: %s); nothing was changed" % (where, LEASE_CONFLICT_RETRIES, e.reason),
                                 action="none", lease=before, taken_over=None)
    result = dict(changed=plan["action"] != "none", action=plan["action"], lease=after, taken_over=plan["taken_over"],
                  superseded=plan["superseded"], controller=me, msg=plan["msg"])
    if diff:
        result["diff"] = dict(before=before or {}, after=after or {}, before_header=where, after_header=where)
    return result, plan["msg"] if plan["taken_over"] else None


# client-go leader election's defaults in proportion (tools/leaderelection: LeaseDuration 15 s, RenewDeadline 10 s,
# RetryPeriod 2 s): renew every third of the lease, give up when no renewal succeeded for two thirds of it.
RENEW_RETRY = 2.0


def keep_lock(api: Any, p: Mapping[str, Any], sleep: Any = time.sleep, clock: Any = time.monotonic) -> dict[str, Any]:
    """Keep the roll lock (already taken by this holder) alive for up to ``p['keep_alive']`` seconds, as a
    leader-election renewer: a renewal every ``ttl / 3`` s, a failed one retried every RENEW_RETRY s. Ends when the
    Lease is no longer this run's (released at the roll's end, or taken by another run), when the controller process
    ``p['controller']`` is known to be gone (the lock is then released, the holder recorded as interrupted, so that
    the next run starts at once and finishes this one's nodes), or when no renewal succeeded for ``2 * ttl / 3`` s.
    Returns ``ended`` (released, controller_gone, renew_failed, keep_alive_elapsed), ``renewals`` and ``msg``."""
    leases = kubernetes.client.CoordinationV1Api(api)
    ttl = int(p["ttl"])
    period, deadline = max(ttl / 3.0, 1.0), max(2.0 * ttl / 3.0, 1.0)
    end = clock() + float(p["keep_alive"])
    last_ok = next_renew = clock()
    renewals = 0
    error = ""
    while clock() < end:
        if k8s_controller.alive(p.get("controller")) is False:
            current = _read_lease(leases, p)
            if (k8s_roll_lock.record(current) or {}).get("holder") == p["holder"]:
                plan = k8s_roll_lock.decide(current, "absent", p["name"], p["namespace"], p["holder"], ttl, [], time.time(),
                                            interrupted=True)
                _write_lease(leases, p, plan)
            return dict(ended="controller_gone", renewals=renewals,
                        msg="the roll's controller process is gone: released the roll lock for the next run")
        if clock() >= next_renew:
            try:
                current = _read_lease(leases, p)
                if (k8s_roll_lock.record(current) or {}).get("holder") != p["holder"]:
                    return dict(ended="released", renewals=renewals, msg="the roll lock is no longer this run's")
                plan = k8s_roll_lock.decide(current, "held", p["name"], p["namespace"], p["holder"], ttl, [], time.time())
                _write_lease(leases, p, plan)
                renewals += 1
                last_ok = clock()
                next_renew = last_ok + period
            except Exception as e:  # pylint: disable=broad-except  # API or network: retried until the deadline
                error = api_message(e) if isinstance(e, ApiException) else str(e)
                if clock() - last_ok >= deadline:
                    return dict(ended="renew_failed", renewals=renewals,
                                msg="no renewal of the roll lock succeeded for %d s: %s" % (deadline, error))
                # 409: the roll's own slot writes moved the Lease meanwhile; read it again at once.
                next_renew = clock() + (0 if getattr(e, "status", None) == 409 else RENEW_RETRY)
        sleep(min(1.0, max(next_renew - clock(), 0.05)))
    return dict(ended="keep_alive_elapsed", renewals=renewals, msg="kept the roll lock for %d s" % p["keep_alive"])


def set_taints(api: Any, name: str, wanted: list[Mapping[str, Any]], managed_keys: list[str],
               labels: Optional[Mapping[str, Optional[str]]], timeout: int, check: bool,
               retries: int = 20) -> tuple[list[Any], list[Any], dict[str, Any]]:
    """Put ``wanted`` among the node's taints (``gpu_pools.node_taints``: a taint of the same key and effect
    replaced, other taints with a key of ``managed_keys`` removed, every other taint kept) and merge ``labels``, from a
    fresh read, in one PATCH carrying the node's resourceVersion: a node whose taints another writer (the node
    lifecycle controller, an autoscaler) changed since the read is refused with 409 and worked out again, so nobody
    else's taint is reverted. Returns (taints before, taints after, the label changes)."""
    core: Any = kubernetes.client.CoreV1Api(api)
    for _attempt in range(retries):
        node = json.loads(core.read_node(name, _preload_content=False, _request_timeout=timeout).data)
        before = list((node.get("spec") or {}).get("taints") or [])
        after = gpu_pools.node_taints(before, wanted, managed_keys)
        label_changes = mig_roll.label_patch((node.get("metadata") or {}).get("labels") or {}, labels)
        body: dict[str, Any] = {"metadata": {"resourceVersion": node["metadata"]["resourceVersion"]}}
        if label_changes:
            body["metadata"]["labels"] = label_changes
        if after != before:
            body["spec"] = {"taints": after}
        if check or (after == before and not label_changes):
            return before, after, label_changes
        try:
            core.patch_node(name, body, _preload_content=False, _request_timeout=timeout)
            return before, after, label_changes
        except ApiException as e:
            if getattr(e, "status", None) != 409:
                raise
    raise NodeStepError("node %s changed %d times in a row while its taints were written" % (name, retries), {})
