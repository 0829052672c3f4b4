#!/usr/bin/env python3
"""The GPU Operator's mig-manager, played against the upstream control plane: what runs inside each Running pod of
the `nvidia-mig-manager` DaemonSet (the real DaemonSet controller creates those pods on the nodes labelled
nvidia.com/gpu.deploy.mig-manager=true; kwok runs them).

When (NVIDIA/mig-parted cmd/nvidia-mig-manager/main.go): a pod that starts applies its node's current
nvidia.com/mig.config (the node informer's AddFunc); a change of that label is applied by the running pod
(UpdateFunc); one reconfigure at a time per node, the latest value wins (SyncableMigConfig). A deleted pod is replaced
by the DaemonSet controller, and the new pod starts over. What: mig_manager.py `reconfigure`
(pkg/mig/reconfigure/reconfigure.go Run) over the node's gpusim state, with label changes and operand pod deletions
made through the API server. Each label change is logged to RUN_DIR/mig-manager.jsonl.

Usage: gpu_operator.py --kubeconfig K --run-dir D --gpusim NODE=PATH[:STRATEGY] ... [--namespace gpu-operator]
       [--config-map default-mig-parted-config] [--with-reboot] [--step-delay S]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mig_manager  # noqa: E402  pylint: disable=wrong-import-position
from device_plugin import parse_spec  # noqa: E402  pylint: disable=wrong-import-position

POD_SELECTOR = "app=nvidia-mig-manager"


class NodeClient:
    """What mig_manager.reconfigure needs from the cluster, for one node, through the API server."""

    def __init__(self, core, node, opts):
        self.core, self.node, self.opts = core, node, opts

    def labels(self):
        try:
            return dict(self.core.read_node(self.node).metadata.labels or {})
        except Exception:  # pylint: disable=broad-except  # node gone
            return {}

    def set_labels(self, labels):
        self.core.patch_node(self.node, {"metadata": {"labels": labels}})
        self.log("labels " + json.dumps(labels, sort_keys=True))

    def delete_pods(self, selector):
        pods = self.core.list_namespaced_pod(self.opts.namespace, label_selector=selector,
                                             field_selector=f"spec.nodeName={self.node}").items
        for pod in pods:
            try:
                self.core.delete_namespaced_pod(pod.metadata.name, self.opts.namespace)
            except Exception:  # pylint: disable=broad-except  # already gone
                pass

    def config(self):
        try:
            cm = self.core.read_namespaced_config_map(self.opts.config_map, self.opts.namespace)
        except Exception:  # pylint: disable=broad-except  # missing ConfigMap: reconfigure fails on it
            return None
        return (cm.data or {}).get("config.yaml")

    def sleep(self):
        time.sleep(self.opts.step_delay)

    def log(self, message):
        with open(os.path.join(self.opts.run_dir, "mig-manager.jsonl"), "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"t": time.time(), "node": self.node, "event": message}) + "\n")


class MigManagers:
    def __init__(self, core, states, opts):
        self.core, self.states, self.opts = core, states, opts
        self.pods = {}        # node -> (pod uid, the label value that pod last acted on)
        self.queue = {}
        self.running = set()
        self.lock = threading.Lock()

    def trigger(self, node, value):
        if not value or node not in self.states:
            return
        with self.lock:
            self.queue[node] = value
            if node in self.running:
                return
            self.running.add(node)
        threading.Thread(target=self._worker, args=(node,), daemon=True).start()

    def _worker(self, node):
        try:
            while True:
                with self.lock:
                    if node not in self.queue:
                        self.running.discard(node)
                        return
                    value = self.queue.pop(node)
                client = NodeClient(self.core, node, self.opts)
                result = mig_manager.reconfigure(client, self.states[node], value, self.opts.with_reboot)
                client.log(f"reconfigure to {value}: {result}")
        except Exception as exc:  # pylint: disable=broad-except
            print(f"mig-manager {node}: {exc}", file=sys.stderr, flush=True)
            with self.lock:
                self.running.discard(node)

    def sync(self):
        pods = self.core.list_namespaced_pod(self.opts.namespace, label_selector=POD_SELECTOR).items
        live = {}
        for pod in pods:
            if pod.status.phase == "Running" and not pod.metadata.deletion_timestamp and pod.spec.node_name:
                live[pod.spec.node_name] = pod.metadata.uid
        for node, uid in live.items():
            value = (self.core.read_node(node).metadata.labels or {}).get(mig_manager.CONFIG_LABEL)
            seen = self.pods.get(node)
            if seen is None or seen[0] != uid or seen[1] != value:
                self.pods[node] = (uid, value)
                self.trigger(node, value)
        for node in set(self.pods) - set(live):
            del self.pods[node]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--gpusim", action="append", default=[], metavar="NODE=PATH[:STRATEGY]")
    parser.add_argument("--namespace", default="gpu-operator")
    parser.add_argument("--config-map", default="default-mig-parted-config")
    parser.add_argument("--with-reboot", action="store_true")
    parser.add_argument("--step-delay", type=float, default=0.5)
    parser.add_argument("--interval", type=float, default=0.3)
    opts = parser.parse_args(argv)
    import kubernetes  # pylint: disable=import-outside-toplevel
    kubernetes.config.load_kube_config(opts.kubeconfig)
    core = kubernetes.client.CoreV1Api()
    states = {node: path for node, path, _strategy in (parse_spec(s) for s in opts.gpusim)}
    managers = MigManagers(core, states, opts)
    while True:
        try:
            managers.sync()
        except Exception as exc:  # pylint: disable=broad-except  # the API server may be restarting
            print(f"mig-manager: {exc}", file=sys.stderr, flush=True)
        time.sleep(opts.interval)


if __name__ == "__main__":
    sys.exit(main())
