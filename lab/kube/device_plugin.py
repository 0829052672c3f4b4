#!/usr/bin/env python3
"""Our stand-in for NVIDIA's k8s-device-plugin on kwok nodes (there is no kubelet to register a real plugin with).

For each NODE=PATH[:STRATEGY] it re-reads the node's gpusim state file and, when what the plugin would advertise has
changed, PATCHes the node's status so `capacity`/`allocatable` carry exactly those nvidia.com/* resources, as the kubelet
does once a device plugin has registered them (pkg/kubelet/cm/devicemanager ListAndWatch -> node status). The resource
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

    def plugin_pods(self):
        """{node: uid} of the Running device plugin pods not being deleted (one LIST a pass)."""
        pods = self.api.list_namespaced_pod(self.namespace, label_selector=self.plugin_selector).items
        return {p.spec.node_name: p.metadata.uid for p in pods
                if p.spec.node_name and p.status.phase == "Running" and not p.metadata.deletion_timestamp}

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


def sync(api, nodes, namer, lag=0.0, configs=None, cc_of=None):
    source = False  # the ClusterPolicy's config, read once per pass
    plugins = configs.plugin_pods() if configs is not None else None
    for node, path, strategy in nodes:
        # --lag: a changed state is advertised only once the file is that old (the plugin restarting after a change).
        try:
            if lag and time.time() - os.path.getmtime(path) < lag:
                continue
        except OSError:
            continue
        state = read_state(path)
        if state is None:
            continue
        resources, error = device_plugin_resources(state, strategy, namer)
        try:
            obj = api.read_node(node)
        except Exception:  # pylint: disable=broad-except  # the node may not exist yet
            continue
        uid = plugins.get(node) if plugins is not None else "static"
        if configs is not None:
            if source is False:
                source = configs.source()
            sharing, config_error = configs.for_node(node, obj.metadata.labels, source, uid)
            resources, sharing_error = apply_sharing(resources, sharing, state, cc_of)
            error = error or config_error or sharing_error
        # No plugin pod, or a plugin that failed on the node's devices (its resources came back empty): nothing served.
        serving = uid is not None and not (error and not resources)
        status, annotations = status_patch(api.api_client.sanitize_for_serialization(obj.status), resources, error,
                                           serving)
        current_error = (obj.metadata.annotations or {}).get(ERROR_ANNOTATION)
        if current_error != error:
            api.patch_node(node, {"metadata": {"annotations": annotations}})
        if status:
            api.patch_node_status(node, {"status": status})


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
    while True:
        try:
            sync(api, nodes, namer, args.lag, configs, cc_of)
        except Exception as exc:  # pylint: disable=broad-except  # keep advertising; the API server may restart
            print(f"device plugin: {exc}", file=sys.stderr, flush=True)
        if args.once:
            return 0
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
