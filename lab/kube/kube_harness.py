"""Tests' handle on the upstream control plane (controlplane.py): start it once, seed objects, wait for the controllers,
run the product's modules and playbooks against it, and read the apiserver's audit log as the product's request log
(requestlog.py).

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
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import controlplane  # noqa: E402  pylint: disable=wrong-import-position
import requestlog  # noqa: E402  pylint: disable=wrong-import-position
import seed as seeding  # noqa: E402  pylint: disable=wrong-import-position


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
    spec = seeding.pod_spec({"nodeSelector": node_selector} if node_selector else None, cpu, grace)
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


# --- a view of the cluster from one point on ------------------------------------------------------------------------
class Session:
    """The product's view of the control plane from one point on: run_module/ansible_env with the product's
    kubeconfig, the request log since the session began, and the lab's own client for seeding and reading state."""

    def __init__(self, plane, api_client):
        self.plane = plane
        self.run_dir = plane.run_dir
        self.kubeconfig = plane.kubeconfig
        self.url = plane.url
        self.request_log = plane.audit_log
        self.api_client = api_client
        # Own temp dir per session: kubernetes.core caches discovery as k8srcp-<sha256(host)>.json in it. Short and
        # outside the (possibly deep) run dir: ansible-core puts an AF_UNIX socket in it (108-byte path limit).
        self.tmpdir = tempfile.mkdtemp(prefix="kubelab-", dir="/tmp" if os.path.isdir("/tmp") else None)
        self._start = len(requestlog.from_audit(self._audit_text()))
        import kubernetes  # pylint: disable=import-outside-toplevel
        self.core = kubernetes.client.CoreV1Api(api_client)

    def close(self):
        shutil.rmtree(self.tmpdir, ignore_errors=True)

    # the product's side: its modules and playbooks, with its (audited) kubeconfig
    def ansible_env(self, base=None):
        env = dict(os.environ if base is None else base)
        env["PATH"] = os.path.join(REPO, ".venv", "bin") + os.pathsep + env.get("PATH", "")
        env["ANSIBLE_COLLECTIONS_PATH"] = os.path.join(REPO, "build", "collections")
        env["K8S_AUTH_KUBECONFIG"] = self.kubeconfig
        env["TMPDIR"] = self.tmpdir
        env["ANSIBLE_LOCAL_TEMP"] = os.path.join(self.tmpdir, "ansible-local")
        env["ANSIBLE_HOME"] = os.path.join(self.tmpdir, "ansible-home")
        env.setdefault("ANSIBLE_NOCOLOR", "1")
        return env

    def run_module(self, module, args, check=False, timeout=120):
        """Run one module with ``ansible localhost -m`` (JSON callback); returns the task result dict."""
        cmd = [
            os.path.join(REPO, ".venv", "bin", "ansible"), "localhost", "-i", "localhost,", "-c", "local",
            "-m", module, "-a", json.dumps(args),
            "-e", f"ansible_python_interpreter={os.path.join(REPO, '.venv', 'bin', 'python')}",
        ]
        if check:
            cmd.append("--check")
        env = self.ansible_env()
        env["ANSIBLE_LOAD_CALLBACK_PLUGINS"] = "1"
        env["ANSIBLE_STDOUT_CALLBACK"] = "json"
        for _attempt in range(3):
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
            # ansible-core 2.21 gives its in-process RPC server a fixed 5 s to start; on an overloaded machine that
            # fails before anything runs (nothing was sent to the server), so starting again is safe.
            if "Local RPC server did not start" not in proc.stdout + proc.stderr:
                break
        try:
            out = json.loads(proc.stdout)
        except ValueError as exc:
            raise AssertionError(f"ansible output is not JSON (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}") from exc
        return out["plays"][0]["tasks"][0]["hosts"]["localhost"]

    # the request log (the product's requests since this session began) and our mig-manager's log
    def _audit_text(self):
        if not os.path.exists(self.request_log):
            return ""
        with open(self.request_log, encoding="utf-8") as fh:
            return fh.read()

    def settle(self, timeout=20.0):
        """Wait until the audit log holds every request answered so far. The apiserver writes a request's
        ResponseComplete event in a deferred call after the response body has gone out (apiserver
        pkg/endpoints/filters/audit.go WithAudit), so a client can read the log before its last request is in it. A
        barrier read sent now is logged after every request answered before it was sent."""
        audit_id = self.plane.audit_barrier()
        needle = f'"auditID":"{audit_id}"'
        deadline = time.monotonic() + timeout
        while needle not in self._audit_text():
            if time.monotonic() > deadline:
                raise AssertionError(f"the audit log did not show the barrier {audit_id} within {timeout:.0f} s")
            time.sleep(0.02)

    def requests(self):
        self.settle()
        return requestlog.from_audit(self._audit_text(), self._start)

    def count(self, method=None, path=None, predicate=None):
        return sum(
            1 for r in self.requests()
            if (method is None or r["method"] == method) and (path is None or r["path"] == path)
            and (predicate is None or predicate(r))
        )

    def cordons(self, node_name, value=True):
        """PATCHes of the node that set spec.unschedulable to ``value`` (cordon: True, uncordon: False)."""
        return sum(1 for r in requestlog.node_patches(self.requests(), node_name) if requestlog.unschedulable(r) is value)

    def evictions(self, node=None, outcome=None):  # pylint: disable=redefined-outer-name
        return requestlog.evictions(self.requests(), node, outcome)

    def mig_manager_events(self, node=None):  # pylint: disable=redefined-outer-name
        """Our mig-manager's log (gpu_operator.py): [{"t", "node", "event"}]."""
        path = os.path.join(self.run_dir, "mig-manager.jsonl")
        if not os.path.exists(path):
            return []
        with open(path, encoding="utf-8") as fh:
            events = [json.loads(line) for line in fh if line.strip()]
        return [e for e in events if node is None or e["node"] == node]

    def mig_manager_states(self, node_name):
        """The nvidia.com/mig.config.state values mig-manager set on a node, in order."""
        out = []
        for e in self.mig_manager_events(node_name):
            if e["event"].startswith("labels "):
                value = json.loads(e["event"][len("labels "):]).get("nvidia.com/mig.config.state")
                if value is not None:
                    out.append(value)
        return out

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

    def create_many(self, objects, workers=8):
        """Create ``objects`` (no Nodes) with up to ``workers`` requests in flight, their namespaces first, once each:
        a fleet's thousands of pods one request after another take minutes."""
        import concurrent.futures  # pylint: disable=import-outside-toplevel
        import kubernetes.utils  # pylint: disable=import-outside-toplevel
        for ns in sorted({o["metadata"].get("namespace") for o in objects} - {None}):
            self.ensure_namespace(ns)
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            for future in [pool.submit(kubernetes.utils.create_from_dict, self.api_client, o) for o in objects]:
                future.result()

    def list_json(self, kind="pods", ns=None):
        """Every Pod (of namespace ``ns``) or Node as plain dicts: one LIST, without the client's model classes,
        which take seconds for a fleet's thousands of objects."""
        if kind == "nodes":
            resp = self.core.list_node(_preload_content=False, _request_timeout=60)
        elif ns:
            resp = self.core.list_namespaced_pod(ns, _preload_content=False, _request_timeout=60)
        else:
            resp = self.core.list_pod_for_all_namespaces(_preload_content=False, _request_timeout=60)
        return json.loads(resp.data)["items"]

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
        return [p for p in items if node_name is None or p.spec.node_name == node_name]

    def running_pods(self, ns=None, node_name=None):
        return [p for p in self.pods(ns, node_name) if p.status.phase == "Running" and not p.metadata.deletion_timestamp]

    def node_ready(self, name):
        n = self.core.read_node(name)
        return any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))

    def wait_for(self, check, timeout=60.0, what="condition", interval=0.2):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = check()
            if last:
                return last
            time.sleep(interval)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


class Plane:
    """A running control plane (controlplane.ControlPlane) with the lab's client; sessions start request logs."""

    def __init__(self, cp):
        import kubernetes  # pylint: disable=import-outside-toplevel
        self.cp = cp
        self.api_client = kubernetes.config.new_client_from_config(cp.lab_kubeconfig)
        self.sessions = []

    def close(self):
        for s in self.sessions:
            s.close()

    def session(self):
        s = Session(self.cp, self.api_client)
        self.sessions.append(s)
        return s


def _gpusim_specs(gpusim):
    specs = []
    for name, spec in (gpusim or {}).items():
        path, strategy = (spec, "mixed") if isinstance(spec, (str, os.PathLike)) else spec
        specs.append(f"{name}={path}:{strategy}")
    return specs


def _running(pod):
    return (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")


def _ready(node):
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in (node.get("status") or {}).get("conditions") or [])


def settled(session, fx):
    """The seeded cluster at rest: nodes Ready, the fixture's pods Running, every DaemonSet's pods Running. One LIST
    each, the cheap ones first (a fleet has a thousand nodes and thousands of pods)."""
    import kubernetes  # pylint: disable=import-outside-toplevel
    apps = kubernetes.client.AppsV1Api(session.api_client)
    for ds in apps.list_daemon_set_for_all_namespaces().items:
        st = ds.status
        if st.observed_generation != ds.metadata.generation or (st.number_ready or 0) != (st.desired_number_scheduled or 0):
            return False
    ready = {n["metadata"]["name"] for n in session.list_json("nodes") if _ready(n)}
    if any(n["metadata"]["name"] not in ready for n in fx.get("nodes") or []):
        return False
    running = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in session.list_json("pods") if _running(p)}
    for p in fx.get("pods") or []:
        kind = (p["metadata"].get("ownerReferences") or [{}])[0].get("kind")
        if kind != "DaemonSet" and p["spec"].get("nodeName") and (p["metadata"]["namespace"], p["metadata"]["name"]) not in running:
            return False
    return True


def operator_defaults(fx, gpusim_nodes):
    """What the GPU Operator has put in a cluster whose GPU nodes are ``gpusim_nodes`` before any test: its device
    plugin DaemonSet, and on those nodes the label that DaemonSet selects, where the fixture has no value for it
    (controllers/state_manager.go addGPUStateLabels keeps a non-empty value). The mig-manager DaemonSet when the
    fixture asks for mig-manager, and a ClusterPolicy naming its configMap unless the fixture gives its own."""
    names = {d["metadata"]["name"] for d in fx.get("daemonsets") or []}
    mig = fx.get("migManager")
    namespace = (mig or {}).get("namespace", "gpu-operator")
    if gpusim_nodes and "nvidia-device-plugin-daemonset" not in names:
        fx.setdefault("daemonsets", []).append({"metadata": {"name": "nvidia-device-plugin-daemonset",
                                                             "namespace": namespace}})
    for n in fx.get("nodes") or []:
        if n["metadata"]["name"] in gpusim_nodes:
            labels = n["metadata"].setdefault("labels", {})
            if not labels.get(seeding.OPERAND_SELECTORS["nvidia-device-plugin-daemonset"]):
                labels[seeding.OPERAND_SELECTORS["nvidia-device-plugin-daemonset"]] = "true"
    if mig is not None:
        if "nvidia-mig-manager" not in names:
            fx.setdefault("daemonsets", []).append({"metadata": {"name": "nvidia-mig-manager", "namespace": namespace}})
        if "clusterPolicy" not in fx and mig.get("configMap"):
            fx["clusterPolicy"] = {"migManager": {"config": {"name": mig["configMap"]}}}
    return fx


def start(run_dir, fixture=None, gpusim=None, devplugin_lag=0.0, eviction_delay=None, timeout=120.0, fleet=False):
    """Control plane up in ``run_dir``, the fixture seeded (seed.py) with the operator's defaults (operator_defaults),
    our GPU Operator (gpu_operator.py) started where the fixture has its operands, and everything settled; returns the
    Plane (its first session holds the seeding). ``fleet``: the control plane set up for hundreds of nodes
    (controlplane.up)."""
    specs = gpusim if isinstance(gpusim, list) else _gpusim_specs(gpusim)
    plane = Plane(controlplane.up(run_dir, specs, devplugin_lag=devplugin_lag, fleet=fleet))
    fx = seeding.load(fixture) if fixture is not None else {}
    if eviction_delay is not None:
        fx["evictionDelaySeconds"] = eviction_delay
    operator_defaults(fx, [spec.split("=", 1)[0] for spec in specs])
    s = plane.session()
    seeding.seed(s, fx)
    if any(d["metadata"]["name"] in seeding.OPERAND_SELECTORS for d in fx.get("daemonsets") or []):
        controlplane.start_gpu_operator(plane.cp, specs, fx.get("migManager") or {})
    # A fleet's LISTs are tens of MB: look less often the larger the cluster.
    s.wait_for(lambda: settled(s, fx), timeout=timeout, what="the seeded cluster to settle",
               interval=max(0.2, len(fx.get("nodes") or []) / 200))
    plane.fixture = fx
    return plane


@contextlib.contextmanager
def kube_lab(fixture=None, *, run_dir=None, gpusim=None, eviction_delay=None, devplugin_lag=0.0, timeout=120.0,
             fleet=False):
    """A control plane with ``fixture`` seeded (seed.py's format), stopped on exit: yields a Session whose request log
    starts after the seeding. ``gpusim``: {node: state_path} or {node: (state_path, strategy)} for the device plugin."""
    own = run_dir is None
    run_dir = run_dir or tempfile.mkdtemp(prefix="kubecp-")
    plane = None
    try:
        plane = start(run_dir, fixture, gpusim, devplugin_lag, eviction_delay, timeout, fleet)
        yield plane.session()
    finally:
        if plane is not None:
            plane.close()
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
        plane.close()
    finally:
        controlplane.down(run_dir)
        if own:
            shutil.rmtree(run_dir, ignore_errors=True)
