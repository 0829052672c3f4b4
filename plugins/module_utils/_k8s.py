# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes API through the official Python client (the library kubernetes.core uses): the client from a
kubeconfig or the in-cluster account, the node steps that follow a GPU change (I/O; the decisions are
``_mig_roll.label_patch`` and ``_mig_roll.advertised_resources``), and the roll lock's Lease (the decision is
``_rolllock.decide``).

Why one process for the steps after a change: each kubernetes.core module run pays about a second for importing
this client; a roll made three of them per node after the apply (restore labels, wait for resources, uncordon).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from ansible_collections.gpuops.provision.plugins.module_utils import _mig_roll, _rolllock

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


def describe_failure(node: str, err: BaseException) -> str:
    """The message of a failed node step: the API's status and reason, or why the API could not be reached."""
    if isinstance(err, ApiException):
        return "node %s: Kubernetes API error: %s %s" % (node, getattr(err, "status", ""), getattr(err, "reason", err))
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
            "advertised": _mig_roll.advertised_resources((node.get("status") or {}).get("allocatable"))}


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
        """Wait until the node advertises exactly ``expected`` (``_mig_roll.advertised_resources``), by watching the
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
            wait_timeout: float, check: bool) -> tuple[dict[str, Any], dict[str, Any]]:
        """``pods``: (namespace, label selectors) of the pods to restart. Returns the node's view before and after."""
        node = self.read()
        before = _node_view(node)
        restore = _mig_roll.label_patch(before["labels"], restore_labels)
        if restore and not check:
            node = self.patch({"metadata": {"labels": restore}})
        self.done["restored"] = restore
        self.restart_pods(pods[0], pods[1], check)
        if resources is not None and not check:
            node = self.wait_for(node, resources, wait_timeout)
        current = _node_view(node)
        # In check mode the restore was not written: the final patch is worked out as if it had been.
        expected_labels = _mig_roll.patched_labels(current["labels"], restore)
        label_changes = _mig_roll.label_patch(expected_labels, labels)
        final: dict[str, Any] = {}
        if label_changes:
            final["metadata"] = {"labels": label_changes}
        if unschedulable is not None and bool(unschedulable) != current["unschedulable"]:
            final["spec"] = {"unschedulable": bool(unschedulable)}
        if final and not check:
            node = self.patch(final)
        self.done["final"] = final
        after = {"labels": _mig_roll.patched_labels(expected_labels, label_changes),
                 "unschedulable": final.get("spec", {}).get("unschedulable", current["unschedulable"]),
                 "advertised": _node_view(node)["advertised"]}
        return before, after


def _fmt(resources: Optional[Mapping[str, int]]) -> str:
    return "{%s}" % ", ".join("%s: %s" % kv for kv in sorted(resources.items())) if resources else "nothing"


class LockFailed(Exception):
    """The roll lock was not taken or released; ``extras`` are the result keys the module reports with it."""

    def __init__(self, msg: str, **extras: Any) -> None:
        super().__init__(msg)
        self.extras = extras


def roll_lock(api: Any, p: dict[str, Any], check_mode: bool, diff: bool) -> tuple[dict[str, Any], Optional[str]]:
    """Take, renew or release the Lease ``p['namespace']/p['name']`` as the roll_lock module's parameters ``p`` say.

    Returns the module result and a warning (a lock taken over from a holder whose lease expired), or raises
    LockFailed (refused, or the Lease changed hands meanwhile: nothing changed) or the client's errors."""
    leases = kubernetes.client.CoordinationV1Api(api)
    where = "%s/%s" % (p["namespace"], p["name"])
    timeout = p["timeout"]
    try:
        current = api.sanitize_for_serialization(
            leases.read_namespaced_lease(p["name"], p["namespace"], _request_timeout=timeout))
    except ApiException as e:
        if getattr(e, "status", None) != 404:
            raise
        current = None
    try:
        plan = _rolllock.decide(current, p["state"], p["name"], p["namespace"], p["holder"], p["ttl"], p["nodes"],
                                time.time())
    except _rolllock.LockError as e:
        raise LockFailed("%s: %s" % (where, e))
    before = plan["before"]
    if plan["action"] == "refuse":
        raise LockFailed(plan["msg"], action="none", lease=before, taken_over=None)
    after = _rolllock.record(plan["body"]) if plan["body"] else before
    if plan["action"] != "none" and not check_mode:
        try:
            if plan["action"] == "create":
                written = leases.create_namespaced_lease(p["namespace"], plan["body"], _request_timeout=timeout)
            else:
                written = leases.replace_namespaced_lease(p["name"], p["namespace"], plan["body"],
                                                          _request_timeout=timeout)
        except ApiException as e:
            if getattr(e, "status", None) == 409:
                raise LockFailed("the roll lock %s changed hands while this run took it (%s); nothing was changed"
                                 % (where, e.reason), action="none", lease=before, taken_over=None)
            raise
        after = _rolllock.record(api.sanitize_for_serialization(written))
    result = dict(changed=plan["action"] != "none", action=plan["action"], lease=after, taken_over=plan["taken_over"],
                  msg=plan["msg"])
    if diff:
        result["diff"] = dict(before=before or {}, after=after or {}, before_header=where, after_header=where)
    return result, plan["msg"] if plan["taken_over"] else None
