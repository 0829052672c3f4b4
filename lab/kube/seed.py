"""Seed the upstream control plane from a lab fixture (the format lab/kube/README.md describes), as a cluster would
have come to that state: controllers own what the fixture says they own.

- nodes: kwok-managed Nodes (kwok's annotation) with capacity as a kubelet registers it; a node may say who created
  it (`fieldManager`) and who wrote to it later (`writers`: [{manager, patch}]), each then writing with its own
  field manager, so that its managedFields are a real node's (gpu_node.py builds such nodes);
- replicasets/daemonsets/deployments: the real objects. The fixture's pods that name a ReplicaSet as owner are
  created first, bound to their nodes, without an owner; the ReplicaSet (replicas = their count) then adopts them
  (pkg/controller/controller_ref_manager.go ClaimPods), so the ReplicaSet controller replaces them when they are
  evicted, as it would its own. A DaemonSet gets a
  nodeSelector from the fixture (`nodeSelector`) or, for the GPU Operator's operands, the upstream one
  (`nvidia.com/gpu.deploy.<operand>: "true"`); its pods are the DaemonSet controller's, so fixture pods owned by a
  DaemonSet are not created;
- pods without an owner: created as written (bound when they name a node);
- clusterPolicy: the ClusterPolicy CRD and one ClusterPolicy ``cluster-policy`` with this spec, before the operand
  DaemonSets, which are rendered from it (render_operand) as the operator would;
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
    "nvidia-container-toolkit-daemonset": "nvidia.com/gpu.deploy.container-toolkit",
    "nvidia-driver-daemonset": "nvidia.com/gpu.deploy.driver",
}
# The tolerations every operand DaemonSet of the GPU Operator is rendered with (assets/state-*/0500_daemonset.yaml;
# values.yaml daemonsets.tolerations): nvidia.com/gpu only. gpu_operator.py replaces them with the ClusterPolicy's
# spec.daemonsets.tolerations when those are set (controllers/object_controls.go applyCommonDaemonsetConfig).
OPERAND_TOLERATIONS = ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},)
# mig-manager's config volume as the operator renders it without spec.migManager.config.name: the default ConfigMap's
# config.yaml mounted as config-default.yaml, and DEFAULT_CONFIG_FILE, not CONFIG_FILE (object_controls.go
# TransformMIGManager; assets/state-mig-manager/0600_daemonset.yaml names the volume mig-parted-config).
MIG_MANAGER_CONFIG_VOLUME = "mig-parted-config"
MIG_MANAGER_DEFAULT_CONFIG_MAP = "default-mig-parted-config"
KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
# Keys of a fixture node that say how it came to be, not what it is (gpu_node.py): who created it, who wrote later.
NODE_HISTORY = ("fieldManager", "writers")


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
    obj = {k: copy.deepcopy(v) for k, v in obj.items() if k not in NODE_HISTORY}
    obj.update(apiVersion="v1", kind="Node")
    meta = obj.setdefault("metadata", {})
    meta.setdefault("labels", {}).setdefault("kubernetes.io/hostname", meta["name"])
    meta["annotations"] = {**(meta.get("annotations") or {}), **KWOK_ANNOTATION}
    status = obj.setdefault("status", {})
    status.setdefault("capacity", {"cpu": "16", "memory": "64Gi", "pods": "110"})
    status.setdefault("allocatable", dict(status["capacity"]))
    return obj


def create_node(session, entry):
    """One fixture node, created as its owners made it (gpu_node.py): the create and its status by ``fieldManager``
    (a kubelet registering it), then each of ``writers`` with a PATCH of its own field manager, so that the node's
    managedFields name them as on a cluster. Without them: the lab's own client, as before."""
    obj = node_object(entry)
    name = obj["metadata"]["name"]
    owner = {"field_manager": entry["fieldManager"]} if entry.get("fieldManager") else {}
    session.core.create_node(obj, _preload_content=False, **owner)
    # The create keeps status, but a kwok heartbeat may race with it: set it explicitly once (kube_harness.create).
    session.core.patch_node_status(name, {"status": obj["status"]}, _preload_content=False, **owner)
    for writer in entry.get("writers") or []:
        session.core.patch_node(name, writer["patch"], field_manager=writer["manager"], _preload_content=False)


def create_nodes(session, entries, workers=8):
    """The fixture's nodes, up to ``workers`` at a time (a fleet has a thousand)."""
    import concurrent.futures  # pylint: disable=import-outside-toplevel
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        for future in [pool.submit(create_node, session, e) for e in entries]:
            future.result()


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
        if meta["name"] in OPERAND_SELECTORS:
            tspec.setdefault("tolerations", [dict(t) for t in OPERAND_TOLERATIONS])
        if meta["name"] == "nvidia-mig-manager":
            mig_manager_config(tspec, "")
    return obj


def _toleration_view(tolerations):
    return [(t.get("key") or "", t.get("operator") or "Equal", t.get("value") or "", t.get("effect") or "",
             t.get("tolerationSeconds", t.get("toleration_seconds"))) for t in tolerations or []]


def render_operand(ds, spec):
    """The operand DaemonSet ``ds`` (a dict) as the GPU Operator's ClusterPolicy controller renders it for the
    ClusterPolicy ``spec`` (None: no ClusterPolicy); returns True when that changed it.
    controllers/object_controls.go applyCommonDaemonsetConfig: the pod tolerations become
    spec.daemonsets.tolerations when it lists any (a replacement, not a merge), else the asset's stay;
    TransformMIGManager: mig-manager's config volume and CONFIG_FILE follow spec.migManager.config.name."""
    tspec = ds["spec"]["template"]["spec"]
    wanted = ((spec or {}).get("daemonsets") or {}).get("tolerations") or [dict(t) for t in OPERAND_TOLERATIONS]
    changed = False
    if _toleration_view(tspec.get("tolerations")) != _toleration_view(wanted):
        tspec["tolerations"] = [dict(t) for t in wanted]
        changed = True
    if ds["metadata"]["name"] == "nvidia-mig-manager":
        name = (((spec or {}).get("migManager") or {}).get("config") or {}).get("name") or ""
        changed = mig_manager_config(tspec, name) or changed
    return changed


def mig_manager_config_view(tspec):
    """(ConfigMap name, [(key, path)] items, {CONFIG_FILE/DEFAULT_CONFIG_FILE: value}) of mig-manager's pod template:
    what TransformMIGManager sets, apart from the defaults the API server adds (defaultMode, ...)."""
    volume = next((v for v in tspec.get("volumes") or [] if v.get("name") == MIG_MANAGER_CONFIG_VOLUME), {})
    cm = volume.get("configMap") or volume.get("config_map") or {}
    items = [(i.get("key"), i.get("path")) for i in cm.get("items") or []]
    env = {e["name"]: e.get("value") for e in (tspec.get("containers") or [{}])[0].get("env") or []
           if e.get("name") in ("CONFIG_FILE", "DEFAULT_CONFIG_FILE")}
    return cm.get("name"), items, env


def mig_manager_config(tspec, config_name):
    """Set mig-manager's config volume and environment in a pod template spec as the operator's TransformMIGManager
    does for spec.migManager.config.name ``config_name`` (empty: the default ConfigMap, remapped, and
    DEFAULT_CONFIG_FILE). Returns True when the template changed."""
    before = mig_manager_config_view(tspec)
    volume = {"name": MIG_MANAGER_CONFIG_VOLUME, "configMap": {"name": config_name or MIG_MANAGER_DEFAULT_CONFIG_MAP}}
    if not config_name:
        volume["configMap"]["items"] = [{"key": "config.yaml", "path": "config-default.yaml"}]
    tspec["volumes"] = [v for v in tspec.get("volumes") or [] if v.get("name") != MIG_MANAGER_CONFIG_VOLUME] + [volume]
    container = tspec["containers"][0]
    env = [e for e in container.get("env") or [] if e.get("name") not in ("CONFIG_FILE", "DEFAULT_CONFIG_FILE")]
    env.append({"name": "CONFIG_FILE", "value": "/mig-parted-config/config.yaml"} if config_name
               else {"name": "DEFAULT_CONFIG_FILE", "value": "/mig-parted-config/config-default.yaml"})
    container["env"] = env
    return mig_manager_config_view(tspec) != before


def _owner_of(pod):
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return (refs[0].get("kind"), refs[0].get("name")) if refs else (None, None)


def create_cluster_policy(session, spec, name="cluster-policy"):
    """The ClusterPolicy CRD (device_plugin.cluster_policy_crd) and one ClusterPolicy with ``spec``, once served."""
    import kubernetes  # pylint: disable=import-outside-toplevel
    from device_plugin import cluster_policy_crd  # pylint: disable=import-outside-toplevel
    session.create(cluster_policy_crd())
    custom = kubernetes.client.CustomObjectsApi(session.api_client)
    body = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": name}, "spec": spec or {}}

    def created():
        try:
            custom.create_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", body)
            return True
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:  # the CRD is not served yet
                return False
            raise
    session.wait_for(created, what="the ClusterPolicy CRD served")


def seed(session, fixture):
    """Create the fixture's objects through ``session`` (kube_harness.Session); returns the fixture as loaded."""
    fx = load(fixture)
    grace = int(fx.get("evictionDelaySeconds") or 0)
    ready_delay = int(fx.get("podReadyDelaySeconds") or 0)
    for ns in fx.get("namespaces") or []:
        session.ensure_namespace(ns if isinstance(ns, str) else ns["metadata"]["name"])
    if fx.get("clusterPolicy") is not None:  # before the operands, which the operator renders from it
        create_cluster_policy(session, fx["clusterPolicy"])
    create_nodes(session, fx.get("nodes") or [])
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
            orphans = []
            for p in owned:
                p = pod_object(p, grace)
                p["metadata"]["labels"] = {**obj["spec"]["selector"]["matchLabels"], **p["metadata"]["labels"]}
                orphans.append(p)
            session.create_many(orphans)
            names = [p["metadata"]["name"] for p in orphans]

            def running(ns=meta["namespace"], names=frozenset(names)):
                return {p["metadata"]["name"] for p in session.list_json("pods", ns)
                        if (p.get("status") or {}).get("phase") == "Running"} >= names

            session.wait_for(running, timeout=300, what=f"the pods of ReplicaSet {meta['name']} Running",
                             interval=max(0.2, len(names) / 100))
            session.create(obj)

            def adopted(ns=meta["namespace"], names=tuple(names), rs=meta["name"]):
                pods = {p["metadata"]["name"]: p for p in session.list_json("pods", ns)}
                return all(n in pods and any(r.get("controller") and r.get("name") == rs
                                             for r in pods[n]["metadata"].get("ownerReferences") or [])
                           for n in names)

            session.wait_for(adopted, timeout=300, what=f"ReplicaSet {meta['name']} to adopt its pods",
                             interval=max(0.2, len(names) / 100))
    for obj in fx.get("daemonsets") or []:
        obj = workload_object("DaemonSet", obj, grace)
        if obj["metadata"]["name"] in OPERAND_SELECTORS:
            render_operand(obj, fx.get("clusterPolicy"))
        session.create(obj)
    session.create_many([pod_object(p, grace) for p in pods if _owner_of(p)[0] is None])
    for obj in fx.get("poddisruptionbudgets") or []:
        session.create({**copy.deepcopy(obj), "apiVersion": "policy/v1", "kind": "PodDisruptionBudget"})
    for obj in fx.get("configmaps") or []:
        session.create({**copy.deepcopy(obj), "apiVersion": "v1", "kind": "ConfigMap"})
    for obj in fx.get("objects") or []:
        session.create(copy.deepcopy(obj))
    return fx
