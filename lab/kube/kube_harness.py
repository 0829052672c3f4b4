"""Tests' handle on the upstream control plane (controlplane.py): start it once, seed objects, wait for the controllers,
and read the apiserver's audit log as the request log the kmock stand-in's tests already read (lab/k8s/k8s_harness.py).

    sys.path.insert(0, "lab/kube")
    from kube_harness import control_plane, node, replicaset, pdb

    with control_plane(tmp_dir) as plane:            # once per test module: etcd, apiserver, KCM, scheduler, kwok
        lab = plane.session()                         # the request log from here on
        lab.create(node("gpu-a"), replicaset("apps", "web", replicas=2), pdb("apps", "web", min_available=2))
        lab.wait_for(lambda: len(lab.running_pods("apps")) == 2)
        lab.run_module("kubernetes.core.k8s_drain", {"name": "gpu-a", "state": "drain"})
        lab.evictions(node="gpu-a", outcome="TooManyRequests")
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "k8s"))
import controlplane  # noqa: E402  pylint: disable=wrong-import-position
import k8s_harness  # noqa: E402  pylint: disable=wrong-import-position
import seed as seeding  # noqa: E402  pylint: disable=wrong-import-position

# The pod watcher's retries while a control plane stops are expected; urllib3 would log each one.
logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
VERB_METHOD = {"create": "POST", "update": "PUT", "patch": "PATCH", "delete": "DELETE", "deletecollection": "DELETE",
               "get": "GET", "list": "GET", "watch": "GET"}
EVICTION_OUTCOME = {201: "Evicted", 200: "Evicted", 429: "TooManyRequests", 404: "NotFound", 500: "InternalError"}


# --- manifests ------------------------------------------------------------------------------------------------------
def node(name, labels=None, annotations=None, unschedulable=False, cpu="8", memory="32Gi", pods="110", taints=None):
    """A Node that kwok manages, with capacity set at create time as a kubelet registers it (seed.node_object)."""
    resources = {"cpu": cpu, "memory": memory, "pods": pods}
    spec = {"unschedulable": True} if unschedulable else {}
    if taints:
        spec["taints"] = taints
    return seeding.node_object({"metadata": {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {})},
                                "spec": spec, "status": {"capacity": resources, "allocatable": dict(resources)}})


def namespace(name):
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _pod_template(labels, cpu, node_selector, grace):
    spec = {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": cpu}}}],
            "terminationGracePeriodSeconds": grace, "automountServiceAccountToken": False}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"metadata": {"labels": labels}, "spec": spec}


def replicaset(ns, name, replicas=1, cpu="100m", node_selector=None, grace=0, labels=None):
    labels = labels or {"app": name}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": _pod_template(labels, cpu, node_selector, grace)}}


def daemonset(ns, name, node_selector=None, labels=None):
    labels = labels or {"app": name}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"matchLabels": labels}, "template": _pod_template(labels, "10m", node_selector, 0)}}


def pod(ns, name, node_name=None, labels=None, cpu="100m", volumes=None, grace=0):
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": _pod_template(labels or {}, cpu, None, grace)["spec"]}
    if node_name:
        body["spec"]["nodeName"] = node_name
    if volumes:
        body["spec"]["volumes"] = volumes
    return body


def pdb(ns, name, selector=None, min_available=None, max_unavailable=None):
    spec = {"selector": {"matchLabels": selector or {"app": name}}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": ns},
            "spec": spec}


# --- the audit log as a request log ---------------------------------------------------------------------------------
def audit_to_request(event, pod_nodes):
    """One audit event -> the request-log entry shape of lab/k8s (method, path, query, status, resource, ...)."""
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


def _epoch(stamp):
    if not stamp:
        return None
    import datetime  # pylint: disable=import-outside-toplevel
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class Session(k8s_harness.K8sLab):
    """The product's view of the control plane from one point on: run_module/ansible_env (as lab/k8s), the request
    log since the session began, and the lab's own client for seeding and reading state."""

    def __init__(self, plane, api_client, pod_nodes=None):  # pylint: disable=super-init-not-called  # no kmock process
        self.plane = plane
        self.run_dir = plane.run_dir
        self.kubeconfig = plane.kubeconfig
        self.url = plane.url
        self.request_log = plane.audit_log
        self.api_client = api_client
        self.tmpdir = tempfile.mkdtemp(prefix="kubelab-", dir="/tmp" if os.path.isdir("/tmp") else None)
        self._offset = os.path.getsize(plane.audit_log) if os.path.exists(plane.audit_log) else 0
        self._pod_nodes = pod_nodes if pod_nodes is not None else {}
        import kubernetes  # pylint: disable=import-outside-toplevel
        self.core = kubernetes.client.CoreV1Api(api_client)

    def close(self):
        shutil.rmtree(self.tmpdir, ignore_errors=True)

    # seeding and reading with the lab's own (unaudited) credentials
    def create(self, *objects):
        import kubernetes.utils  # pylint: disable=import-outside-toplevel
        for obj in objects:
            ns = obj["metadata"].get("namespace")
            if ns:
                self.ensure_namespace(ns)
            status = obj.get("status") if obj["kind"] == "Node" else None
            kubernetes.utils.create_from_dict(self.api_client, obj)
            if status:  # the Node create keeps status, but a later heartbeat may race: set it explicitly once
                self.core.patch_node_status(obj["metadata"]["name"], {"status": status})

    def ensure_namespace(self, name):
        import kubernetes  # pylint: disable=import-outside-toplevel
        try:
            self.core.create_namespace(namespace(name))
        except kubernetes.client.ApiException as exc:
            if exc.status != 409:
                raise
        # ServiceAccount admission refuses pods until the controller manager made the namespace's default account.
        self.wait_for(lambda: self._exists(self.core.read_namespaced_service_account, "default", name),
                      what=f"ServiceAccount {name}/default")

    @staticmethod
    def _exists(read, *args):
        import kubernetes  # pylint: disable=import-outside-toplevel
        try:
            read(*args)
            return True
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return False
            raise

    def get_json(self, path):
        return json.loads(self.plane.get(path)[1])

    def pods(self, ns=None, node_name=None):
        if ns:
            items = self.core.list_namespaced_pod(ns).items
        else:
            items = self.core.list_pod_for_all_namespaces().items
        for p in items:
            if p.spec.node_name:
                self._pod_nodes[(p.metadata.namespace, p.metadata.name)] = p.spec.node_name
        return [p for p in items if node_name is None or p.spec.node_name == node_name]

    def running_pods(self, ns=None, node_name=None):
        return [p for p in self.pods(ns, node_name) if p.status.phase == "Running" and not p.metadata.deletion_timestamp]

    def node_ready(self, name):
        n = self.core.read_node(name)
        return any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))

    def wait_for(self, check, timeout=60.0, what="condition"):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = check()
            if last:
                return last
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")

    def requests(self):
        self.pods()  # remember where pods are before the log names their evictions
        if not os.path.exists(self.request_log):
            return []
        with open(self.request_log, encoding="utf-8") as fh:
            fh.seek(self._offset)
            text = fh.read()
        return [audit_to_request(json.loads(line), self._pod_nodes) for line in text.splitlines() if line.strip()]


class Plane:
    """A running control plane (controlplane.ControlPlane) with the lab's client. A thread remembers which node each
    pod was bound to, so request-log entries about a pod that is gone by then still name its node."""

    def __init__(self, cp):
        import kubernetes  # pylint: disable=import-outside-toplevel
        self.cp = cp
        self.api_client = kubernetes.config.new_client_from_config(cp.lab_kubeconfig)
        self.sessions = []
        self.pod_nodes = {}
        self._stop = threading.Event()
        self._core = kubernetes.client.CoreV1Api(self.api_client)
        self._thread = threading.Thread(target=self._watch_pods, daemon=True)
        self._thread.start()

    def _watch_pods(self):
        while not self._stop.wait(0.2):
            try:
                for p in self._core.list_pod_for_all_namespaces(_request_timeout=5).items:
                    if p.spec.node_name:
                        self.pod_nodes[(p.metadata.namespace, p.metadata.name)] = p.spec.node_name
            except Exception:  # pylint: disable=broad-except  # stopping, or the API server is busy
                pass

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=10)

    def session(self):
        s = Session(self.cp, self.api_client, self.pod_nodes)
        self.sessions.append(s)
        return s


def _gpusim_specs(gpusim):
    specs = []
    for name, spec in (gpusim or {}).items():
        path, strategy = (spec, "mixed") if isinstance(spec, (str, os.PathLike)) else spec
        specs.append(f"{name}={path}:{strategy}")
    return specs


def settled(session, fx):
    """The seeded cluster at rest: nodes Ready, the fixture's pods Running, every DaemonSet's pods Running."""
    import kubernetes  # pylint: disable=import-outside-toplevel
    apps = kubernetes.client.AppsV1Api(session.api_client)
    for n in fx.get("nodes") or []:
        if not session.node_ready(n["metadata"]["name"]):
            return False
    running = {(p.metadata.namespace, p.metadata.name) for p in session.running_pods()}
    for p in fx.get("pods") or []:
        kind = (p["metadata"].get("ownerReferences") or [{}])[0].get("kind")
        if kind != "DaemonSet" and p["spec"].get("nodeName") and (p["metadata"]["namespace"], p["metadata"]["name"]) not in running:
            return False
    for ds in apps.list_daemon_set_for_all_namespaces().items:
        st = ds.status
        if st.observed_generation != ds.metadata.generation or (st.number_ready or 0) != (st.desired_number_scheduled or 0):
            return False
    return True


def start(run_dir, fixture=None, gpusim=None, devplugin_lag=0.0, eviction_delay=None, timeout=120.0):
    """Control plane up in ``run_dir``, the fixture seeded (seed.py), our mig-manager started when the fixture asks
    for it, and everything settled; returns the Plane (its first session holds the seeding)."""
    specs = gpusim if isinstance(gpusim, list) else _gpusim_specs(gpusim)
    plane = Plane(controlplane.up(run_dir, specs, devplugin_lag=devplugin_lag))
    fx = seeding.load(fixture) if fixture is not None else {}
    if eviction_delay is not None:
        fx["evictionDelaySeconds"] = eviction_delay
    mig = fx.get("migManager")
    if mig is not None and not any(d["metadata"]["name"] == "nvidia-mig-manager" for d in fx.get("daemonsets") or []):
        fx.setdefault("daemonsets", []).append({"metadata": {"name": "nvidia-mig-manager",
                                                             "namespace": mig.get("namespace", "gpu-operator")}})
    s = plane.session()
    seeding.seed(s, fx)
    if mig is not None:
        controlplane.start_gpu_operator(plane.cp, specs, mig)
    s.wait_for(lambda: settled(s, fx), timeout=timeout, what="the seeded cluster to settle")
    plane.fixture = fx
    return plane


@contextlib.contextmanager
def kube_lab(fixture=None, *, run_dir=None, gpusim=None, eviction_delay=None, devplugin_lag=0.0, timeout=120.0):
    """lab/k8s/k8s_harness.py `k8s_lab`'s interface on the upstream control plane: yields a Session whose request log
    starts after the seeding."""
    own = run_dir is None
    run_dir = run_dir or tempfile.mkdtemp(prefix="kubecp-")
    plane = None
    try:
        plane = start(run_dir, fixture, gpusim, devplugin_lag, eviction_delay, timeout)
        yield plane.session()
    finally:
        if plane is not None:
            plane.stop()
            for s in plane.sessions:
                s.close()
        controlplane.down(run_dir)
        if own:
            shutil.rmtree(run_dir, ignore_errors=True)


@contextlib.contextmanager
def control_plane(run_dir=None, gpusim=None):
    """Start the control plane in ``run_dir`` (a temp dir by default); stop every process on exit.

    ``gpusim``: {node: state_path} or {node: (state_path, strategy)} for the device-plugin stand-in."""
    own = run_dir is None
    run_dir = run_dir or tempfile.mkdtemp(prefix="kubecp-")
    try:
        plane = Plane(controlplane.up(run_dir, _gpusim_specs(gpusim)))
        yield plane
        plane.stop()
        for s in plane.sessions:
            s.close()
    finally:
        controlplane.down(run_dir)
        if own:
            shutil.rmtree(run_dir, ignore_errors=True)
