#!/usr/bin/env python3
"""Our stand-in for NVIDIA's k8s-device-plugin on kwok nodes (there is no kubelet to register a real plugin with).

For each NODE=PATH[:STRATEGY] it re-reads the node's gpusim state file when it changed and, when what the plugin would
advertise differs from the node's status, PATCHes the status so `capacity`/`allocatable` carry exactly those
nvidia.com/* resources, as the kubelet does once a device plugin has registered them (pkg/kubelet/cm/devicemanager
ListAndWatch -> node status). Nodes and the plugin's pods are read from watches (class Informer), not one GET per
node and pass, so a fleet of a thousand nodes costs next to nothing while nothing changes. The resource
rules are gpu_resources.py `device_plugin_resources` (NVIDIA/k8s-device-plugin internal/rm/rm.go, cited there).
The plugin's complaint for an invalid layout goes into the annotation lab.gpuops.io/device-plugin-error.

The plugin is the container of the node's device plugin DaemonSet pod: it serves only while a Running pod of it is on
the node. Without one (paused by its label, kept off by a taint it does not tolerate, or deleted and not yet back),
or when the plugin refuses the node's devices (its device map fails, internal/rm/device_map.go), nothing is
registered: the kubelet marks the resource's devices unhealthy when the plugin's endpoint stops, so allocatable drops
to 0 while capacity keeps the count (pkg/kubelet/cm/devicemanager/manager.go GetCapacity, markResourceUnhealthy).

Sharing (time-slicing, MPS) as the GPU Operator wires it: the ClusterPolicy's spec.devicePlugin.config (name: the
ConfigMap in the operator's namespace, default: its default key; controllers/object_controls.go
handleDevicePluginConfig), the key picked per node by config-manager from the label nvidia.com/device-plugin.config
(gpu_resources.select_config), read through the API server. config-manager acts on a change of that label only
(cmd/config-manager/main.go continuouslySyncConfigChanges), and the plugin re-reads its file only when signalled or
restarted, so a changed ConfigMap under the same key takes effect when the node's device plugin pod is replaced
(a new pod uid), not before. A key that does not exist or a file the plugin cannot parse leaves the previous
config in place, with the error in the annotation. Without a ClusterPolicy (or its CRD) there is no config file and
no sharing, as with an operator whose devicePlugin.config is unset.

Usage: device_plugin.py --kubeconfig K --gpusim NODE=PATH[:STRATEGY] [...] [--once] [--interval S] [--lag S]
       [--operator-namespace gpu-operator] [--plugin-selector app=nvidia-device-plugin-daemonset]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_resources import (  # noqa: E402  pylint: disable=wrong-import-position
    CONFIG_LABEL, apply_sharing, device_plugin_resources, gpusim_compute_capability, gpusim_namer, parse_sharing, select_config)

ERROR_ANNOTATION = "lab.gpuops.io/device-plugin-error"


def parse_spec(spec):
    node, _, rest = spec.partition("=")
    path, _, strategy = rest.partition(":")
    if not node or not path:
        raise ValueError(f"--gpusim {spec!r}: expected NODE=PATH[:STRATEGY]")
    return node, path, strategy or "mixed"


def read_state(path):
    """The gpusim state, or None while the file is missing or half-written (the plugin keeps what it advertised)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def status_patch(node_status, resources, error, serving=True):
    """A merge patch for the node (status and the error annotation) that leaves exactly ``resources`` as nvidia.com/*;
    while the plugin does not serve, allocatable holds 0 for every nvidia.com/* capacity and capacity is kept."""
    status = {}
    if not serving:
        capacity = (node_status or {}).get("capacity") or {}
        resources = {k: 0 for k in capacity if k.startswith("nvidia.com/")}
        allocatable = (node_status or {}).get("allocatable") or {}
        change = {k: "0" for k in resources if allocatable.get(k) != "0"}
        change.update({k: None for k in allocatable if k.startswith("nvidia.com/") and k not in resources})
        return ({"allocatable": change} if change else {}), {ERROR_ANNOTATION: error}
    for field in ("capacity", "allocatable"):
        current = (node_status or {}).get(field) or {}
        wanted = {k: str(v) for k, v in resources.items()}
        change = {k: None for k in current if k.startswith("nvidia.com/") and k not in wanted}
        change.update({k: v for k, v in wanted.items() if current.get(k) != v})
        if change:
            status[field] = change
    return status, {ERROR_ANNOTATION: error}


def cluster_policy_crd():
    """The ClusterPolicy CustomResourceDefinition (nvidia.com/v1, cluster-scoped, as the GPU Operator's
    config/crd/bases/nvidia.com_clusterpolicies.yaml), with its schema left open: the lab reads spec.devicePlugin only."""
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "clusterpolicies.nvidia.com"},
            "spec": {"group": "nvidia.com", "scope": "Cluster",
                     "names": {"kind": "ClusterPolicy", "listKind": "ClusterPolicyList", "plural": "clusterpolicies",
                               "singular": "clusterpolicy"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


def cluster_policy(config_name="", default="", name="cluster-policy"):
    """A ClusterPolicy whose spec.devicePlugin.config names the device plugin's ConfigMap and default key."""
    config = {"name": config_name, "default": default} if config_name else {}
    return {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": name},
            "spec": {"devicePlugin": {"config": config}}}


class SharingConfigs:
    """Per node, the sharing config its device plugin runs with: (label, plugin pod uid) -> parsed config."""

    def __init__(self, api, namespace="gpu-operator", plugin_selector="app=nvidia-device-plugin-daemonset"):
        self.api, self.namespace, self.plugin_selector = api, namespace, plugin_selector
        self.applied = {}   # node -> {"trigger": (label, uid), "sharing": parsed or None, "error": str or None}

    def source(self):
        """(ConfigMap name, default key) from the ClusterPolicy, or None (no CRD, no policy, no config name)."""
        import kubernetes  # pylint: disable=import-outside-toplevel
        custom = kubernetes.client.CustomObjectsApi(self.api.api_client)
        try:
            policies = custom.list_cluster_custom_object("nvidia.com", "v1", "clusterpolicies").get("items") or []
        except kubernetes.client.ApiException:
            return None
        for policy in policies:
            config = ((policy.get("spec") or {}).get("devicePlugin") or {}).get("config") or {}
            if config.get("name"):
                return config["name"], config.get("default") or ""
        return None

    def for_node(self, node, labels, source, plugin_uid=None):
        """(sharing, error) for ``node``; re-read only when its label or its device plugin pod changed."""
        if source is None:  # no config file: no sharing, and no per-node reads on every pass
            self.applied.pop(node, None)
            return None, None
        label = (labels or {}).get(CONFIG_LABEL, "")
        trigger = (label, plugin_uid, source)
        seen = self.applied.get(node)
        if seen is not None and seen["trigger"] == trigger:
            return seen["sharing"], seen["error"]
        sharing = (seen or {}).get("sharing")
        try:
            data = self.api.read_namespaced_config_map(source[0], self.namespace).data or {}
        except Exception:  # pylint: disable=broad-except  # a missing ConfigMap: the volume has no files
            data = {}
        key, error = select_config(data, label, source[1])
        if error is None:
            parsed, error = parse_sharing(data.get(key) or "")
            if error is None:
                sharing = parsed
        self.applied[node] = {"trigger": trigger, "sharing": sharing, "error": error}
        return sharing, error


class Informer:
    """Objects of one kind as a client-go informer holds them (k8s.io/client-go tools/cache reflector.go
    ListAndWatch: one LIST, then a WATCH from its resourceVersion, resumed from the last version seen when it ends, a
    new LIST after 410 Gone), which is how the kubelet and every controller read: no GET per object and pass.
    ``lister`` is the client's list call for the kind (its LIST and, with watch=True, its WATCH); ``keep`` picks the
    objects held, by name. Names of the objects that changed since the last ``take_dirty`` are kept. Plain dicts (the
    client's model classes are slow)."""

    def __init__(self, lister, keep=None):
        self.lister, self.keep = lister, keep or (lambda name: True)
        self.objects, self.dirty, self.version = {}, set(), None
        self.lock = threading.Lock()
        self.synced = threading.Event()

    def relist(self):
        body = json.loads(self.lister(_preload_content=False, _request_timeout=60).data)
        with self.lock:
            gone = set(self.objects)
            self.objects = {o["metadata"]["name"]: o for o in body["items"] if self.keep(o["metadata"]["name"])}
            self.dirty |= set(self.objects) | gone
        self.version = body["metadata"]["resourceVersion"]
        self.synced.set()

    def put(self, obj):
        """Keep ``obj`` unless the cache holds a newer version of it (a PATCH's answer may overtake the watch)."""
        name = obj["metadata"]["name"]
        if not self.keep(name):
            return
        with self.lock:
            held = self.objects.get(name)
            try:
                older = held is not None and int(obj["metadata"]["resourceVersion"]) < int(held["metadata"]["resourceVersion"])
            except (KeyError, ValueError):
                older = False
            if not older:
                self.objects[name] = obj
            self.dirty.add(name)

    def get(self, name):
        with self.lock:
            return self.objects.get(name)

    def values(self):
        with self.lock:
            return list(self.objects.values())

    def take_dirty(self):
        with self.lock:
            dirty, self.dirty = self.dirty, set()
        return dirty

    def watch(self, window=300):
        """One WATCH from the version held (a LIST first when there is none), until the server ends it."""
        from kubernetes.watch.watch import iter_resp_lines  # pylint: disable=import-outside-toplevel
        if self.version is None:
            self.relist()
        resp = self.lister(watch=True, resource_version=self.version, allow_watch_bookmarks=True,
                           timeout_seconds=window, _preload_content=False, _request_timeout=(10, window + 30))
        try:
            for line in iter_resp_lines(resp):
                if not line:
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    if obj.get("code") == 410:  # too old to watch from: LIST again
                        self.version = None
                    return
                self.version = (obj.get("metadata") or {}).get("resourceVersion") or self.version
                if event["type"] == "DELETED":
                    with self.lock:
                        if self.objects.pop(obj["metadata"]["name"], None) is not None:
                            self.dirty.add(obj["metadata"]["name"])
                elif event["type"] in ("ADDED", "MODIFIED"):
                    self.put(obj)
        finally:
            resp.release_conn()

    def watch_forever(self):
        while True:
            try:
                self.watch()
            except Exception as exc:  # pylint: disable=broad-except  # the API server may restart: watch again
                print(f"device plugin: watch: {exc}", file=sys.stderr, flush=True)
                time.sleep(1)


def serving_pods(pods):
    """{node: uid} of the Running device plugin pods not being deleted."""
    return {p["spec"]["nodeName"]: p["metadata"]["uid"] for p in pods
            if (p.get("spec") or {}).get("nodeName") and (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")}


def _file_version(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class Plugin:
    """The device plugins of every node mapped to a gpusim state. A real plugin tells the kubelet its devices when
    they change (ListAndWatch streams a new list on a change), and the kubelet writes them into the node's status;
    here a pass looks at each state file's version (a stat, no read), at the nodes the node watch saw change and at
    the nodes whose plugin pod came, went or was replaced (the pod watch), and works out and writes only those: a
    fleet of a thousand nodes costs a thousand stats a pass, not a thousand GETs. With a ClusterPolicy naming a
    sharing config, every node is worked out on every pass (the config depends on its device plugin pod,
    config-manager's trigger); without ``configs`` the plugin serves on every node (no DaemonSet modelled)."""

    def __init__(self, api, nodes, namer, lag=0.0, configs=None, cc_of=None):
        self.api, self.nodes, self.namer, self.lag, self.configs, self.cc_of = api, nodes, namer, lag, configs, cc_of
        names = {n for n, _p, _s in nodes}
        self.cache = Informer(api.list_node, names.__contains__)
        self.pods = None
        if configs is not None:
            self.pods = Informer(lambda **kw: api.list_namespaced_pod(configs.namespace,
                                                                      label_selector=configs.plugin_selector, **kw))
        self.seen = {}      # node -> the state file's version last worked out
        self.states = {}    # node -> the gpusim state read at that version
        self.served = {}    # node -> the plugin pod uid it was last worked out with
        self.pending = set()

    def informers(self):
        return [i for i in (self.cache, self.pods) if i is not None]

    def sync(self):
        source = self.configs.source() if self.configs is not None else None
        dirty = self.cache.take_dirty() | self.pending
        self.pending = set()
        plugins = serving_pods(self.pods.values()) if self.pods is not None else None
        if self.pods is not None:
            self.pods.take_dirty()
        for node, path, strategy in self.nodes:
            version = _file_version(path)
            if version is None:
                continue
            # --lag: a changed state is advertised only once the file is that old (the plugin restarting after a change).
            if self.lag and time.time() - version[1] / 1e9 < self.lag:
                self.pending.add(node)
                continue
            uid = plugins.get(node) if plugins is not None else "static"
            if version != self.seen.get(node):
                state = read_state(path)
                if state is None:  # half-written: look again on the next pass
                    continue
                self.states[node], self.seen[node] = state, version
            elif node not in dirty and source is None and self.served.get(node, False) == uid:
                continue
            if self.advertise(node, self.states[node], strategy, source, uid):
                self.served[node] = uid
            else:
                self.pending.add(node)

    def advertise(self, node, state, strategy, source, uid):
        """Write what ``node``'s plugin advertises where its status differs; False while the node is not there."""
        obj = self.cache.get(node)
        if obj is None:
            return False
        resources, error = device_plugin_resources(state, strategy, self.namer)
        meta = obj.get("metadata") or {}
        if self.configs is not None:
            sharing, config_error = self.configs.for_node(node, meta.get("labels"), source, uid)
            resources, sharing_error = apply_sharing(resources, sharing, state, self.cc_of)
            error = error or config_error or sharing_error
        # No plugin pod, or a plugin that failed on the node's devices (its resources came back empty): nothing served.
        serving = uid is not None and not (error and not resources)
        status, annotations = status_patch(obj.get("status"), resources, error, serving)
        if (meta.get("annotations") or {}).get(ERROR_ANNOTATION) != error:
            self.cache.put(json.loads(self.api.patch_node(node, {"metadata": {"annotations": annotations}},
                                                          _preload_content=False).data))
        if status:
            # The kubelet writes a node's device resources into its status (pkg/kubelet/nodestatus/setters.go
            # MachineInfo): its field manager, so the node's managedFields say so.
            self.cache.put(json.loads(self.api.patch_node_status(node, {"status": status}, field_manager="kubelet",
                                                                 _preload_content=False).data))
        return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--gpusim", action="append", default=[], metavar="NODE=PATH[:STRATEGY]")
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--once", action="store_true")
    parser.add_argument("--lag", type=float, default=0.0)
    parser.add_argument("--operator-namespace", default="gpu-operator")
    parser.add_argument("--plugin-selector", default="app=nvidia-device-plugin-daemonset")
    args = parser.parse_args(argv)
    import kubernetes  # pylint: disable=import-outside-toplevel
    kubernetes.config.load_kube_config(args.kubeconfig)
    api = kubernetes.client.CoreV1Api()
    nodes = [parse_spec(s) for s in args.gpusim]
    namer = gpusim_namer()
    configs = SharingConfigs(api, args.operator_namespace, args.plugin_selector)
    cc_of = gpusim_compute_capability()
    plugin = Plugin(api, nodes, namer, args.lag, configs, cc_of)
    if args.once:
        for informer in plugin.informers():
            informer.relist()
        plugin.sync()
        return 0
    for informer in plugin.informers():
        threading.Thread(target=informer.watch_forever, daemon=True).start()
        informer.synced.wait(60)
    while True:
        try:
            plugin.sync()
        except Exception as exc:  # pylint: disable=broad-except  # keep advertising; the API server may restart
            print(f"device plugin: {exc}", file=sys.stderr, flush=True)
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
