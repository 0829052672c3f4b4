"""The apiserver's audit log (controlplane.py's policy) read as the product's request log, and views of that log.

One entry per request the product made (user group gpuops:clients): method, path, query, status, the resource and
name it touched, the body it sent for writes, the time the response was complete; a pod request names the node the
pod was on, and an eviction its outcome (Evicted, TooManyRequests, ...) and the server's message.

The node of a pod comes from the log itself: the policy also records, from every user, pod creates (spec.nodeName)
and the scheduler's bindings (pods/binding, target.name), so a pod that is gone by the time anyone reads the log
still names its node. Pure: the tests (kube_harness.py) and the Molecule scenarios' filters read a file's text.

    entries = from_audit(open("RUN_DIR/audit.jsonl").read())
    evictions(entries, node="gpu-a", outcome="TooManyRequests")
"""
from __future__ import annotations

import datetime
import json
import urllib.parse

CLIENT_GROUP = "gpuops:clients"  # controlplane.py issues the product's client certificate in this group
VERB_METHOD = {"create": "POST", "update": "PUT", "patch": "PATCH", "delete": "DELETE", "deletecollection": "DELETE",
               "get": "GET", "list": "GET", "watch": "GET"}
EVICTION_OUTCOME = {201: "Evicted", 200: "Evicted", 429: "TooManyRequests", 404: "NotFound", 500: "InternalError"}


def _epoch(stamp):
    if not stamp:
        return None
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _placement(event):
    """(namespace, pod, node) when the event places a pod on a node (a create with spec.nodeName, a binding)."""
    ref = event.get("objectRef") or {}
    if ref.get("resource") != "pods" or event.get("verb") != "create" or (event.get("responseStatus") or {}).get("code", 0) >= 300:
        return None
    body = event.get("requestObject") or {}
    if ref.get("subresource") == "binding":
        node = (body.get("target") or {}).get("name")
        name = ref.get("name") or (body.get("metadata") or {}).get("name")
    elif not ref.get("subresource"):
        node = (body.get("spec") or {}).get("nodeName")
        name = ref.get("name") or (body.get("metadata") or {}).get("name")
    else:
        return None
    return (ref.get("namespace"), name, node) if name and node else None


def audit_to_request(event, pod_nodes):
    """One audit event -> a request-log entry; ``pod_nodes`` maps (namespace, pod) to the node it was placed on."""
    path, _, query = event.get("requestURI", "").partition("?")
    ref = event.get("objectRef") or {}
    entry = {
        "t": _epoch(event.get("stageTimestamp") or event.get("requestReceivedTimestamp")),
        "method": VERB_METHOD.get(event.get("verb"), event.get("verb", "").upper()),
        "verb": event.get("verb"), "path": path,
        "query": {k: v[-1] for k, v in urllib.parse.parse_qs(query).items()},
        "status": (event.get("responseStatus") or {}).get("code"),
        "resource": ref.get("resource"), "namespace": ref.get("namespace"), "name": ref.get("name"),
        "subresource": ref.get("subresource"), "user": (event.get("user") or {}).get("username"),
    }
    if "requestObject" in event:
        entry["body"] = event["requestObject"]
    if entry["resource"] == "pods" and entry["name"]:
        entry["node"] = pod_nodes.get((entry["namespace"], entry["name"]))
    if entry["resource"] == "pods" and entry["subresource"] == "eviction" and entry["method"] == "POST":
        entry["outcome"] = EVICTION_OUTCOME.get(entry["status"], str(entry["status"]))
        entry["message"] = (event.get("responseStatus") or {}).get("message")
    return entry


def from_audit(text, start=0):
    """The audit log's text -> the product's requests, in order; ``start`` skips that many of them."""
    pod_nodes = {}
    out = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        event = json.loads(line)
        placed = _placement(event)
        if placed:
            pod_nodes[placed[:2]] = placed[2]
        if CLIENT_GROUP in ((event.get("user") or {}).get("groups") or []):
            out.append(audit_to_request(event, pod_nodes))
    return out[start:]


def node_registrations(text, node):
    """Every create of Node ``node`` in the audit log, by any user (a kubelet registering it, the lab seeding it), as
    request-log entries with the body sent: the policy records Node creates from everyone."""
    out = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if event.get("verb") == "create" and ref.get("resource") == "nodes" and not ref.get("subresource") \
                and (ref.get("name") or ((event.get("requestObject") or {}).get("metadata") or {}).get("name")) == node:
            out.append(audit_to_request(event, {}))
    return out


# --- views ----------------------------------------------------------------------------------------------------------
def writes(log):
    return [r for r in log if r["method"] in ("POST", "PATCH", "PUT", "DELETE")]


def node_patches(log, node):
    return [r for r in log if r["method"] == "PATCH" and r["path"] == f"/api/v1/nodes/{node}"]


def unschedulable(entry):
    """What a node PATCH sets spec.unschedulable to (merge or JSON patch), None when it leaves it alone."""
    body = entry.get("body")
    if isinstance(body, dict) and "unschedulable" in (body.get("spec") or {}):
        return bool(body["spec"]["unschedulable"])
    if isinstance(body, list):
        for op in body:
            if op.get("path") == "/spec/unschedulable":
                return bool(op.get("value"))
    return None


def timeline(log, node):
    """{cordon, uncordon, cordons, uncordons, seconds}: the node's first cordon and last uncordon times."""
    cordon = uncordon = None
    cordons = uncordons = 0
    for r in node_patches(log, node):
        value = unschedulable(r)
        if value is True:
            cordons += 1
            cordon = r["t"] if cordon is None else cordon
        elif value is False:
            uncordons += 1
            uncordon = r["t"]
    seconds = round(uncordon - cordon, 2) if cordon is not None and uncordon is not None else None
    return {"cordon": cordon, "uncordon": uncordon, "cordons": cordons, "uncordons": uncordons, "seconds": seconds}


def evictions(log, node=None, outcome=None):
    return [
        r for r in log
        if r["method"] == "POST" and r.get("subresource") == "eviction"
        and (node is None or r.get("node") == node) and (outcome is None or r.get("outcome") == outcome)
    ]


def mig_allocatable(node):
    """A Node object's advertised MIG devices: {nvidia.com/mig-<profile>: count} with count > 0."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return {k: int(v) for k, v in allocatable.items() if k.startswith("nvidia.com/mig-") and int(v) > 0}
