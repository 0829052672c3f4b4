"""Seed the upstream control plane from a lab fixture (the format lab/kube/README.md describes), as a cluster would
have come to that state: controllers own what the fixture says they own.

- nodes: kwok-managed Nodes (kwok's annotation) with capacity as a kubelet registers it;
- replicasets/daemonsets/deployments: the real objects. The fixture's pods that name a ReplicaSet as owner are
  created first, bound to their nodes, without an owner; the ReplicaSet (replicas = their count) then adopts them
  (pkg/controller/controller_ref_manager.go ClaimPods), so the ReplicaSet controller replaces them when they are
  evicted, as it would its own. A DaemonSet gets a
  nodeSelector from the fixture (`nodeSelector`) or, for the GPU Operator's operands, the upstream one
  (`nvidia.com/gpu.deploy.<operand>: "true"`); its pods are the DaemonSet controller's, so fixture pods owned by a
  DaemonSet are not created;
- pods without an owner: created as written (bound when they name a node);
- poddisruptionbudgets, configmaps, namespaces, objects: created as written.
Pods get `terminationGracePeriodSeconds` = evictionDelaySeconds (kwok deletes them at their deletionTimestamp);
pods that a workload creates later (replacements) turn Ready podReadyDelaySeconds after they start.
"""
from __future__ import annotations

import copy

import yaml

# GPU Operator DaemonSets -> the node label its ClusterPolicy controller puts in their nodeSelector
# (NVIDIA/gpu-operator controllers/object_controls.go: "nvidia.com/gpu.deploy.<component>": "true").
OPERAND_SELECTORS = {
    "nvidia-device-plugin-daemonset": "nvidia.com/gpu.deploy.device-plugin",
    "nvidia-dcgm-exporter": "nvidia.com/gpu.deploy.dcgm-exporter",
    "gpu-feature-discovery": "nvidia.com/gpu.deploy.gpu-feature-discovery",
    "nvidia-mig-manager": "nvidia.com/gpu.deploy.mig-manager",
    "nvidia-operator-validator": "nvidia.com/gpu.deploy.operator-validator",
    "nvidia-dcgm": "nvidia.com/gpu.deploy.dcgm",
}
KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}


def load(fixture):
    if isinstance(fixture, dict):
        return copy.deepcopy(fixture)
    with open(fixture, encoding="utf-8") as fh:
        return yaml.safe_load(fh) or {}


def pod_spec(spec=None, cpu="10m", grace=0):
    """A pod spec with the lab's defaults where ``spec`` leaves them out: one pause container requesting ``cpu`` (kwok
    runs no image; the request is what the scheduler packs), the grace period, and no service account token."""
    spec = dict(spec or {})
    spec.setdefault("containers", [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"requests": {"cpu": cpu}}}])
    spec.setdefault("terminationGracePeriodSeconds", grace)
    spec.setdefault("automountServiceAccountToken", False)
    return spec


def node_object(obj):
    obj = copy.deepcopy(obj)
    obj.update(apiVersion="v1", kind="Node")
    meta = obj.setdefault("metadata", {})
    meta.setdefault("labels", {}).setdefault("kubernetes.io/hostname", meta["name"])
    meta["annotations"] = {**(meta.get("annotations") or {}), **KWOK_ANNOTATION}
    status = obj.setdefault("status", {})
    status.setdefault("capacity", {"cpu": "16", "memory": "64Gi", "pods": "110"})
    status.setdefault("allocatable", dict(status["capacity"]))
    return obj


def pod_object(obj, grace, owner=None):
    obj = copy.deepcopy(obj)
    obj.update(apiVersion="v1", kind="Pod")
    meta = obj.setdefault("metadata", {})
    meta.setdefault("labels", {})
    meta.pop("ownerReferences", None)
    if owner is not None:
        meta["ownerReferences"] = [owner]
    obj["spec"] = pod_spec(obj.get("spec"), "100m", grace)
    return obj


def _common_labels(pods):
    """The labels every one of ``pods`` carries (a ReplicaSet's selector must match the pods it owns, or its
    controller releases them: pkg/controller/controller_ref_manager.go ClaimPods)."""
    sets = [dict((p.get("metadata") or {}).get("labels") or {}) for p in pods]
    if not sets:
        return {}
    return {k: v for k, v in sets[0].items() if all(s.get(k) == v for s in sets[1:])}


# kwok's pod-ready Stage waits this long before a pod of the workload turns Ready (controlplane.py POD_READY_DELAY):
# a replacement pod takes time to start on a real node, and until it is Ready its PodDisruptionBudget refuses the
# next eviction (the disruption controller counts Ready pods, pkg/controller/disruption).
READY_DELAY_ANNOTATION = "lab.gpuops.io/ready-delay"


def workload_object(kind, obj, grace, owned=(), ready_delay=0):
    obj = copy.deepcopy(obj)
    obj.update(apiVersion="apps/v1", kind=kind)
    meta = obj["metadata"]
    labels = (meta.get("labels") or {}) or _common_labels(owned) or {"app": meta["name"]}
    spec = obj.setdefault("spec", {})
    spec.setdefault("selector", {"matchLabels": dict(labels)})
    template = spec.setdefault("template", {})
    template.setdefault("metadata", {}).setdefault("labels", dict(spec["selector"]["matchLabels"]))
    tspec = template["spec"] = pod_spec(template.get("spec"), "10m", grace)
    if ready_delay and kind != "DaemonSet":
        template["metadata"].setdefault("annotations", {})[READY_DELAY_ANNOTATION] = "%ds" % int(ready_delay)
    if kind == "DaemonSet":
        selector = obj.pop("nodeSelector", None)
        if selector is None and meta["name"] in OPERAND_SELECTORS:
            selector = {OPERAND_SELECTORS[meta["name"]]: "true"}
        if selector:
            tspec.setdefault("nodeSelector", selector)
    return obj


def _owner_of(pod):
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return (refs[0].get("kind"), refs[0].get("name")) if refs else (None, None)


def seed(session, fixture):
    """Create the fixture's objects through ``session`` (kube_harness.Session); returns the fixture as loaded."""
    fx = load(fixture)
    grace = int(fx.get("evictionDelaySeconds") or 0)
    ready_delay = int(fx.get("podReadyDelaySeconds") or 0)
    for ns in fx.get("namespaces") or []:
        session.ensure_namespace(ns if isinstance(ns, str) else ns["metadata"]["name"])
    session.create(*[node_object(n) for n in fx.get("nodes") or []])
    pods = fx.get("pods") or []
    for kind, key in (("ReplicaSet", "replicasets"), ("Deployment", "deployments"), ("StatefulSet", "statefulsets")):
        for obj in fx.get(key) or []:
            owned = [p for p in pods if _owner_of(p) == (kind, obj["metadata"]["name"])
                     and p["metadata"].get("namespace") == obj["metadata"].get("namespace")]
            obj = workload_object(kind, obj, grace, owned, ready_delay)
            meta = obj["metadata"]
            if kind != "ReplicaSet":
                session.create(obj)
                continue
            # The fixture's pods first, as orphans bound to their nodes; the ReplicaSet then adopts them
            # (pkg/controller/controller_ref_manager.go ClaimPods adopts orphans its selector matches) instead of
            # making others, once its informer has them: hence the wait before it is created.
            obj["spec"].setdefault("replicas", len(owned) or 1)
            names = []
            for p in owned:
                p = pod_object(p, grace)
                p["metadata"]["labels"] = {**obj["spec"]["selector"]["matchLabels"], **p["metadata"]["labels"]}
                session.create(p)
                names.append(p["metadata"]["name"])
            session.wait_for(lambda ns=meta["namespace"], names=names: {x.metadata.name for x in session.running_pods(ns)}
                             >= set(names), what=f"the pods of ReplicaSet {meta['name']} Running")
            session.create(obj)

            def adopted(ns=meta["namespace"], names=tuple(names), rs=meta["name"]):
                pods = {x.metadata.name: x for x in session.pods(ns)}
                return all(n in pods and any(r.controller and r.name == rs for r in pods[n].metadata.owner_references or [])
                           for n in names)

            session.wait_for(adopted, what=f"ReplicaSet {meta['name']} to adopt its pods")
    for obj in fx.get("daemonsets") or []:
        session.create(workload_object("DaemonSet", obj, grace))
    for p in pods:
        if _owner_of(p)[0] is None:
            session.create(pod_object(p, grace))
    for obj in fx.get("poddisruptionbudgets") or []:
        session.create({**copy.deepcopy(obj), "apiVersion": "policy/v1", "kind": "PodDisruptionBudget"})
    for obj in fx.get("configmaps") or []:
        session.create({**copy.deepcopy(obj), "apiVersion": "v1", "kind": "ConfigMap"})
    for obj in fx.get("objects") or []:
        session.create(copy.deepcopy(obj))
    return fx
