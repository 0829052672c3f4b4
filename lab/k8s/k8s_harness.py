"""Start/stop the Kubernetes stand-in from tests and read its request log.

    sys.path.insert(0, "lab/k8s")
    from k8s_harness import k8s_lab

    with k8s_lab({"nodes": [{"metadata": {"name": "gpu-a"}}]}, gpusim={"gpu-a": state_path}) as lab:
        subprocess.run([...], env=lab.ansible_env())
        assert lab.cordons("gpu-a") == 1
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

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SERVER = os.path.join(HERE, "server.py")


# --- views of the request log (one JSON object per request); pure, so molecule/mig_reconfigure's filters use them too


def parse_requests(text):
    """The request log's text -> list of requests."""
    return [json.loads(line) for line in (text or "").splitlines() if line.strip()]


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


class K8sLab:
    """A running stand-in: its run dir, URL, kubeconfig and request log."""

    def __init__(self, run_dir, proc):
        self.run_dir = run_dir
        self.proc = proc
        with open(os.path.join(run_dir, "port"), encoding="utf-8") as fh:
            self.port = int(fh.read().strip())
        self.kubeconfig = os.path.join(run_dir, "kubeconfig")
        self.request_log = os.path.join(run_dir, "requests.jsonl")
        with open(self.kubeconfig, encoding="utf-8") as fh:
            self.url = yaml.safe_load(fh)["clusters"][0]["cluster"]["server"]
        # Own temp dir per run: kubernetes.core caches discovery as k8srcp-<sha256(host)>.json in it. Short and
        # outside the (possibly deep) run dir: ansible-core puts an AF_UNIX socket in it (108-byte path limit).
        self.tmpdir = tempfile.mkdtemp(prefix="k8slab-", dir="/tmp" if os.path.isdir("/tmp") else None)

    def get_json(self, path):
        """GET a path with the kubeconfig's token and CA (raw JSON, as the server sent it)."""
        import ssl  # pylint: disable=import-outside-toplevel
        import urllib.request  # pylint: disable=import-outside-toplevel

        with open(self.kubeconfig, encoding="utf-8") as fh:
            token = yaml.safe_load(fh)["users"][0]["user"]["token"]
        ctx = ssl.create_default_context(cafile=os.path.join(self.run_dir, "ca.crt")) if self.url.startswith("https") else None
        req = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:  # nosec - loopback test server
            return json.loads(resp.read())

    def ansible_env(self, base=None):
        env = dict(os.environ if base is None else base)
        venv_bin = os.path.join(REPO, ".venv", "bin")
        env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
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

    def requests(self):
        if not os.path.exists(self.request_log):
            return []
        with open(self.request_log, encoding="utf-8") as fh:
            return parse_requests(fh.read())

    def mig_manager_events(self, node=None):
        """The lab mig-manager's log (lab/k8s/mig_manager.py via server.py): [{"t", "node", "event"}]."""
        path = os.path.join(self.run_dir, "mig-manager.jsonl")
        if not os.path.exists(path):
            return []
        with open(path, encoding="utf-8") as fh:
            events = [json.loads(line) for line in fh if line.strip()]
        return [e for e in events if node is None or e["node"] == node]

    def mig_manager_states(self, node):
        """The nvidia.com/mig.config.state values mig-manager set on a node, in order."""
        out = []
        for e in self.mig_manager_events(node):
            if e["event"].startswith("labels "):
                value = json.loads(e["event"][len("labels "):]).get("nvidia.com/mig.config.state")
                if value is not None:
                    out.append(value)
        return out

    def count(self, method=None, path=None, predicate=None):
        return sum(
            1 for r in self.requests()
            if (method is None or r["method"] == method) and (path is None or r["path"] == path)
            and (predicate is None or predicate(r))
        )

    def cordons(self, node, value=True):
        """PATCHes of the node that set spec.unschedulable to ``value`` (cordon: True, uncordon: False)."""
        return sum(1 for r in node_patches(self.requests(), node) if unschedulable(r) is value)

    def evictions(self, node=None, outcome=None):
        return evictions(self.requests(), node, outcome)


def _wait_ready(run_dir, proc, timeout):
    port_file = os.path.join(run_dir, "port")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(port_file):
            return
        if proc.poll() is not None:
            with open(os.path.join(run_dir, "server.log"), encoding="utf-8") as fh:
                raise RuntimeError(f"k8s stand-in exited with {proc.returncode}: {fh.read()}")
        time.sleep(0.05)
    raise RuntimeError(f"k8s stand-in did not write {port_file} within {timeout}s")


@contextlib.contextmanager
def k8s_lab(fixture=None, *, run_dir=None, gpusim=None, eviction_delay=0.0, devplugin_lag=0.0, plain_http=False,
            timeout=20.0, python=None):
    """Start ``server.py`` in a subprocess on a free loopback port; stop it on exit.

    ``fixture``: a dict (written to the run dir) or a path. ``gpusim``: {node: path} or {node: (path, strategy)}.
    """
    own_dir = run_dir is None
    run_dir = run_dir or tempfile.mkdtemp(prefix="k8slab-")
    os.makedirs(run_dir, exist_ok=True)
    cmd = [python or sys.executable, SERVER, "--port", "0", "--run-dir", run_dir,
           "--eviction-delay", str(eviction_delay), "--devplugin-lag", str(devplugin_lag)]
    if isinstance(fixture, dict):
        path = os.path.join(run_dir, "fixture.yaml")
        with open(path, "w", encoding="utf-8") as fh:
            yaml.safe_dump(fixture, fh)
        cmd += ["--fixture", path]
    elif fixture is not None:
        cmd += ["--fixture", str(fixture)]
    for node, spec in (gpusim or {}).items():
        path, strategy = (spec, "mixed") if isinstance(spec, (str, os.PathLike)) else spec
        cmd += ["--gpusim", f"{node}={path}:{strategy}"]
    if plain_http:
        cmd.append("--plain-http")
    log = open(os.path.join(run_dir, "server.log"), "w", encoding="utf-8")  # pylint: disable=consider-using-with
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)  # pylint: disable=consider-using-with
    lab = None
    try:
        _wait_ready(run_dir, proc, timeout)
        lab = K8sLab(run_dir, proc)
        yield lab
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        if lab is not None:
            shutil.rmtree(lab.tmpdir, ignore_errors=True)
        if own_dir:
            shutil.rmtree(run_dir, ignore_errors=True)
