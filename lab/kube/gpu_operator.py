#!/usr/bin/env python3
"""The GPU Operator for the lab, played against the upstream control plane: the parts of it that are not the
Kubernetes controllers themselves. The operand DaemonSets and their pods are real (seed.py creates the DaemonSets as
the operator renders them; the DaemonSet controller places their pods; kwok runs them). This process plays:

* the ClusterPolicy controller's rendering of those DaemonSets (NVIDIA/gpu-operator controllers/object_controls.go):
  every operand's pod tolerations are the ClusterPolicy's spec.daemonsets.tolerations when it lists any, else the
  asset's own (applyCommonDaemonsetConfig); mig-manager's config volume and CONFIG_FILE follow
  spec.migManager.config.name (TransformMIGManager). A changed template is written back, and the DaemonSet controller
  rolls the pods, as in a cluster.
* the kubelet's ConfigMap volumes of the mig-manager pods (pkg/volume/configmap/configmap.go SetUpAt through
  pkg/volume/util/atomic_writer.go): written under KUBELET_ROOT/<node>/pods/<uid>/volumes/kubernetes.io~configmap/
  <volume>/ when the pod starts, then refreshed only at the kubelet's periodic pod sync (pkg/kubelet/kubelet.go
  syncLoop, --sync-frequency, 1 min by default; --config-sync-period here), so a changed ConfigMap reaches the
  running container late (NVIDIA/mig-parted#108, NVIDIA/gpu-operator#891).
* mig-manager inside each Running pod of the nvidia-mig-manager DaemonSet (NVIDIA/mig-parted
  cmd/nvidia-mig-manager/main.go): at start setupMigConfig (CONFIG_FILE must exist, else the container fails; without
  it a config generated from the hardware, pkg/mig/builder), then a reconfigure of the node's current
  nvidia.com/mig.config (the informer's AddFunc), and of every change of that label (UpdateFunc); one at a time per
  node, the latest value wins (SyncableMigConfig). The work is mig_manager.py `reconfigure` (pkg/mig/reconfigure
  reconfigure.go Run) over the node's gpusim state, reading the config file as it is at that moment. A deleted pod is
  replaced by the DaemonSet controller, and the new pod starts over. Each label change is logged to
  RUN_DIR/mig-manager.jsonl.

Usage: gpu_operator.py --kubeconfig K --run-dir D [--gpusim NODE=PATH[:STRATEGY] ...] [--namespace gpu-operator]
       [--with-reboot] [--step-delay S] [--config-sync-period S] [--pod-timeout S]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import mig_manager  # noqa: E402  pylint: disable=wrong-import-position
import seed  # noqa: E402  pylint: disable=wrong-import-position
from device_plugin import parse_spec  # noqa: E402  pylint: disable=wrong-import-position

POD_SELECTOR = "app=nvidia-mig-manager"
CONFIG_VOLUME_DIR = os.path.join("volumes", "kubernetes.io~configmap")


def kubelet_root(run_dir, node):
    """The lab's kubelet root directory of ``node`` (a real node's is /var/lib/kubelet)."""
    return os.path.join(run_dir, "kubelet", node)


def projected_path(root, uid, volume, path):
    """Where the kubelet puts file ``path`` of a pod's ConfigMap volume (pkg/kubelet/kubelet_getters.go
    getPodVolumeDir: <root>/pods/<uid>/volumes/<plugin name, '/' escaped as '~'>/<volume>)."""
    return os.path.join(root, "pods", uid, CONFIG_VOLUME_DIR, volume, path)


def policy_spec(custom):
    """The first ClusterPolicy's spec, or None (no CRD, no policy: the operator renders the assets as they are)."""
    import kubernetes  # pylint: disable=import-outside-toplevel
    try:
        items = custom.list_cluster_custom_object("nvidia.com", "v1", "clusterpolicies").get("items") or []
    except kubernetes.client.ApiException:
        return None
    return (items[0].get("spec") or {}) if items else None


class ClusterPolicyController:
    """Renders the operand DaemonSets from the ClusterPolicy (see the module docstring)."""

    def __init__(self, api_client, namespace):
        import kubernetes  # pylint: disable=import-outside-toplevel
        self.api_client = api_client
        self.apps = kubernetes.client.AppsV1Api(api_client)
        self.custom = kubernetes.client.CustomObjectsApi(api_client)
        self.namespace = namespace

    def sync(self):
        import kubernetes  # pylint: disable=import-outside-toplevel
        spec = policy_spec(self.custom)
        for ds in self.apps.list_namespaced_daemon_set(self.namespace).items:
            if ds.metadata.name not in seed.OPERAND_SELECTORS:
                continue
            body = self.api_client.sanitize_for_serialization(ds)
            if seed.render_operand(body, spec):
                try:
                    self.apps.replace_namespaced_daemon_set(ds.metadata.name, self.namespace, body)
                except kubernetes.client.ApiException as exc:
                    if exc.status != 409:  # changed meanwhile: the next pass renders it again
                        raise


class ProjectedConfigMaps:
    """The kubelet's ConfigMap volumes of the pods whose containers the lab plays (see the module docstring)."""

    def __init__(self, core, run_dir, namespace, period):
        self.core, self.run_dir, self.namespace, self.period = core, run_dir, namespace, period
        self.next_sync = {}   # pod uid -> when the kubelet next syncs it
        self.dirs = {}        # pod uid -> its pod directory

    def _write(self, pod):
        root = kubelet_root(self.run_dir, pod.spec.node_name)
        for volume in pod.spec.volumes or []:
            if volume.config_map is None:
                continue
            try:
                data = self.core.read_namespaced_config_map(volume.config_map.name, self.namespace).data or {}
            except Exception:  # pylint: disable=broad-except  # missing: the kubelet keeps what it wrote (or nothing)
                continue
            items = [(i.key, i.path) for i in volume.config_map.items or []] or [(k, k) for k in data]
            for key, rel in items:
                if key not in data:
                    continue
                path = projected_path(root, pod.metadata.uid, volume.name, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                tmp = path + ".tmp"
                with open(tmp, "w", encoding="utf-8") as fh:
                    fh.write(data[key])
                os.replace(tmp, path)  # atomic_writer.go: readers see the old or the new content, never a mix
        self.dirs[pod.metadata.uid] = os.path.join(root, "pods", pod.metadata.uid)

    def sync(self, pods):
        """``pods``: the Running pods of the played containers, this pass."""
        now = time.monotonic()
        live = set()
        for pod in pods:
            uid = pod.metadata.uid
            live.add(uid)
            if uid not in self.next_sync or now >= self.next_sync[uid]:
                self._write(pod)
                self.next_sync[uid] = now + self.period
        for uid in set(self.next_sync) - live:  # the kubelet removes an orphaned pod's directory
            del self.next_sync[uid]
            shutil.rmtree(self.dirs.pop(uid, ""), ignore_errors=True)


def generated_config(state_path):
    """What mig-manager generates from the hardware when no CONFIG_FILE is given (pkg/mig/builder/builder.go
    buildMigConfigSpec): all-disabled, all-enabled and one all-<profile> per GPU-instance profile with its maximum
    count (device filters when GPUs of several models differ). all-balanced (builder/balanced.go) is not played."""
    gpus = mig_manager.gstate.load(state_path)["gpus"]
    configs = {"all-disabled": [{"devices": "all", "mig-enabled": False}],
               "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}]}
    models = {}
    for gpu in gpus:
        model = mig_manager.machine.model_of(gpu)
        if model.mig_capable:
            models[model.pci_device_id] = model
    by_profile = {}
    for pci, model in sorted(models.items()):
        for prof in model.gi_profiles:
            by_profile.setdefault(mig_manager.models.gi_name(model, prof), {}).setdefault(prof.instances, []).append(pci)
    for name, counts in sorted(by_profile.items()):
        entries = []
        for count, pcis in sorted(counts.items()):
            entry = {"devices": "all", "mig-enabled": True, "mig-devices": {name: count}}
            if len(models) > 1:
                entry["device-filter"] = ["0x%08X" % p for p in sorted(pcis)]
            entries.append(entry)
        configs["all-" + name.replace("+", ".")] = entries
    return yaml.safe_dump({"version": "v1", "mig-configs": configs})


class NodeClient:
    """What mig_manager.reconfigure needs from the cluster and its container, for one node."""

    def __init__(self, core, node, opts, config_path):
        self.core, self.node, self.opts, self.config_path = core, node, opts, config_path

    def labels(self):
        try:
            return dict(self.core.read_node(self.node).metadata.labels or {})
        except Exception:  # pylint: disable=broad-except  # node gone
            return {}

    def set_labels(self, labels):
        self.core.patch_node(self.node, {"metadata": {"labels": labels}})
        self.log("labels " + json.dumps(labels, sort_keys=True))

    def _pods(self, selector):
        return [p for p in self.core.list_namespaced_pod(self.opts.namespace, label_selector=selector,
                                                          field_selector=f"spec.nodeName={self.node}").items]

    def delete_pods(self, selector):
        for pod in self._pods(selector):
            try:
                self.core.delete_namespaced_pod(pod.metadata.name, self.opts.namespace)
            except Exception:  # pylint: disable=broad-except  # already gone
                pass

    def wait_pods_gone(self, selector=None, node_selector_key=None):
        """reconfigure.go waitForPodDeletion (a label selector, in the operator's namespace) or
        waitForPodsWithNodeSelector (DaemonSet pods of any namespace whose nodeSelector has the key): polls every
        second until none is left on the node; False after --pod-timeout (upstream: 5 minutes)."""
        deadline = time.monotonic() + self.opts.pod_timeout
        while True:
            if selector is not None:
                left = self._pods(selector)
            else:
                left = [p for p in self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.node}").items
                        if any(r.controller and r.kind == "DaemonSet" for r in p.metadata.owner_references or [])
                        and node_selector_key in (p.spec.node_selector or {})]
            if not left:
                return True
            if time.monotonic() >= deadline:
                self.log(f"timed out waiting for {selector or node_selector_key} pods to be deleted")
                return False
            time.sleep(1.0)

    def config(self):
        """The config file as the container sees it now (every mig-parted run reads it anew)."""
        try:
            with open(self.config_path, encoding="utf-8") as fh:
                return fh.read()
        except OSError:
            return None

    def sleep(self):
        time.sleep(self.opts.step_delay)

    def log(self, message):
        with open(os.path.join(self.opts.run_dir, "mig-manager.jsonl"), "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"t": time.time(), "node": self.node, "event": message}) + "\n")


class MigManagers:
    def __init__(self, core, states, opts):
        self.core, self.states, self.opts = core, states, opts
        self.pods = {}        # node -> (pod uid, the label value that pod last acted on, its config file)
        self.waiting = set()  # pod uids whose container waits for its config file (logged once)
        self.queue = {}
        self.running = set()
        self.lock = threading.Lock()

    def trigger(self, node, value, config_path):
        # SyncableMigConfig.Set wakes the loop only for a non-empty value: a node without the label is left alone.
        if not value or node not in self.states:
            return
        with self.lock:
            self.queue[node] = (value, config_path)
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
                    value, config_path = self.queue.pop(node)
                client = NodeClient(self.core, node, self.opts, config_path)
                result = mig_manager.reconfigure(client, self.states[node], value, self.opts.with_reboot)
                client.log(f"reconfigure to {value}: {result}")
        except Exception as exc:  # pylint: disable=broad-except
            print(f"mig-manager {node}: {exc}", file=sys.stderr, flush=True)
            with self.lock:
                self.running.discard(node)

    def start_container(self, pod):
        """setupMigConfig for a new pod: its config file, or None while the container cannot start. A ConfigMap volume
        whose ConfigMap does not exist keeps a real pod in ContainerCreating (the kubelet retries the mount); kwok
        shows it Running, so the container here starts once the kubelet's copy exists."""
        node = pod.spec.node_name
        env = {e.name: e.value for e in pod.spec.containers[0].env or []}
        client = NodeClient(self.core, node, self.opts, None)
        if env.get("CONFIG_FILE"):
            volume = seed.MIG_MANAGER_CONFIG_VOLUME
            rel = os.path.relpath(env["CONFIG_FILE"], "/" + volume)
            path = projected_path(kubelet_root(self.opts.run_dir, node), pod.metadata.uid, volume, rel)
            if not os.path.exists(path):
                if pod.metadata.uid not in self.waiting:
                    self.waiting.add(pod.metadata.uid)
                    client.log(f"waiting for {env['CONFIG_FILE']} (ConfigMap volume not mounted)")
                return None
            client.log(f"using custom config {env['CONFIG_FILE']}")
            return path
        path = os.path.join(self.opts.run_dir, "mig-manager", node, "generated-config.yaml")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(generated_config(self.states[node]))
        client.log("using a config generated from the hardware")
        return path

    def sync(self, pods):
        live = {}
        for pod in pods:
            live[pod.spec.node_name] = pod
        for node, pod in live.items():
            if node not in self.states:
                continue
            uid = pod.metadata.uid
            value = (self.core.read_node(node).metadata.labels or {}).get(mig_manager.CONFIG_LABEL)
            seen = self.pods.get(node)
            if seen is None or seen[0] != uid:
                config_path = self.start_container(pod)
                if config_path is not None:  # started: its first pass applies the current label (AddFunc)
                    self.pods[node] = (uid, value, config_path)
                    self.trigger(node, value, config_path)
            elif seen[1] != value:
                self.pods[node] = (uid, value, seen[2])
                self.trigger(node, value, seen[2])
        for node in set(self.pods) - set(live):
            del self.pods[node]


def running_pods(core, namespace, selector):
    return [p for p in core.list_namespaced_pod(namespace, label_selector=selector).items
            if p.status.phase == "Running" and not p.metadata.deletion_timestamp and p.spec.node_name]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--gpusim", action="append", default=[], metavar="NODE=PATH[:STRATEGY]")
    parser.add_argument("--namespace", default="gpu-operator")
    parser.add_argument("--with-reboot", action="store_true")
    parser.add_argument("--step-delay", type=float, default=0.5)
    parser.add_argument("--interval", type=float, default=0.3)
    parser.add_argument("--config-sync-period", type=float, default=4.0)
    parser.add_argument("--pod-timeout", type=float, default=60.0)
    opts = parser.parse_args(argv)
    import kubernetes  # pylint: disable=import-outside-toplevel
    api_client = kubernetes.config.new_client_from_config(opts.kubeconfig)
    core = kubernetes.client.CoreV1Api(api_client)
    states = {node: path for node, path, _strategy in (parse_spec(s) for s in opts.gpusim)}
    policy = ClusterPolicyController(api_client, opts.namespace)
    volumes = ProjectedConfigMaps(core, opts.run_dir, opts.namespace, opts.config_sync_period)
    managers = MigManagers(core, states, opts)
    last_render = 0.0
    while True:
        try:
            if time.monotonic() - last_render >= 1.0:
                policy.sync()
                last_render = time.monotonic()
            pods = running_pods(core, opts.namespace, POD_SELECTOR)
            volumes.sync(pods)
            managers.sync(pods)
        except Exception as exc:  # pylint: disable=broad-except  # the API server may be restarting
            print(f"gpu operator: {exc}", file=sys.stderr, flush=True)
        time.sleep(opts.interval)


if __name__ == "__main__":
    sys.exit(main())
