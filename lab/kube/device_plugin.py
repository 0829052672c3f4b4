#!/usr/bin/env python3
"""Our stand-in for NVIDIA's k8s-device-plugin on kwok nodes (there is no kubelet to register a real plugin with).

For each NODE=PATH[:STRATEGY] it re-reads the node's gpusim state file and, when what the plugin would advertise has
changed, PATCHes the node's status so `capacity`/`allocatable` carry exactly those nvidia.com/* resources, as the kubelet
does once a device plugin has registered them (pkg/kubelet/cm/devicemanager ListAndWatch -> node status). The resource
rules are gpu_resources.py `device_plugin_resources` (NVIDIA/k8s-device-plugin internal/rm/rm.go, cited there).
The plugin's complaint for an invalid `single` layout goes into the annotation lab.gpuops.io/device-plugin-error.

Usage: device_plugin.py --kubeconfig K --gpusim NODE=PATH[:STRATEGY] [...] [--once] [--interval S] [--lag S]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_resources import device_plugin_resources, gpusim_namer  # noqa: E402  pylint: disable=wrong-import-position

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


def status_patch(node_status, resources, error):
    """A merge patch for the node (status and the error annotation) that leaves exactly ``resources`` as nvidia.com/*."""
    status = {}
    for field in ("capacity", "allocatable"):
        current = (node_status or {}).get(field) or {}
        wanted = {k: str(v) for k, v in resources.items()}
        change = {k: None for k in current if k.startswith("nvidia.com/") and k not in wanted}
        change.update({k: v for k, v in wanted.items() if current.get(k) != v})
        if change:
            status[field] = change
    return status, {ERROR_ANNOTATION: error}


def sync(api, nodes, namer, lag=0.0):
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
        status, annotations = status_patch(api.api_client.sanitize_for_serialization(obj.status), resources, error)
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
    args = parser.parse_args(argv)
    import kubernetes  # pylint: disable=import-outside-toplevel
    kubernetes.config.load_kube_config(args.kubeconfig)
    api = kubernetes.client.CoreV1Api()
    nodes = [parse_spec(s) for s in args.gpusim]
    namer = gpusim_namer()
    while True:
        try:
            sync(api, nodes, namer, args.lag)
        except Exception as exc:  # pylint: disable=broad-except  # keep advertising; the API server may restart
            print(f"device plugin: {exc}", file=sys.stderr, flush=True)
        if args.once:
            return 0
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
