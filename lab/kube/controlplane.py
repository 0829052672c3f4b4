#!/usr/bin/env python3
"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
(nodes and pod lifecycles without kubelets), all upstream binaries from lab/kube/build.py; plus our device-plugin
stand-in (device_plugin.py) when nodes are mapped to gpusim states.

Everything speaks TLS with a CA made per run dir. Each process is started in its own session, its PID kept in
RUN_DIR/pids/<name>.pid, and stopped by that PID (`down`). The apiserver's audit log (RUN_DIR/audit.jsonl) records every
request made with the client kubeconfig (RUN_DIR/kubeconfig, group gpuops:clients); of the lab's own clients
(controllers, kwok, the harness) only where pods were placed (requestlog.py reads it as the product's request log).

Usage: controlplane.py up RUN_DIR [--fixture F] [--gpusim NODE=PATH[:STRATEGY] ...]
           returns once the API server is ready and the fixture (lab/kube/README.md's format, seed.py) is in place
       controlplane.py down RUN_DIR
       controlplane.py status RUN_DIR    exit 0 when its processes all run
"""
from __future__ import annotations

import argparse
import base64
import datetime
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import gobuild  # noqa: E402  pylint: disable=wrong-import-position
import requestlog  # noqa: E402  pylint: disable=wrong-import-position

CLIENT_GROUP = requestlog.CLIENT_GROUP
PRODUCT_USER = "gpuops-client"
# The collection's documented permissions, bound to the product's user (docs/rbac.md).
RBAC = os.path.join(os.path.dirname(os.path.dirname(HERE)), "docs", "rbac", "gpuops-provision.yaml")
# Stopped in this order (clients of the API server first, etcd last).
# What every `up` starts (the device plugin and mig-manager only on request).
CORE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
PROCESSES = ("nvidia-device-plugin", "kubelet", "fakecri", "gpu-operator", "device-plugin", "kwok", "kube-scheduler", "kube-controller-manager",
             "kube-apiserver", "etcd")
SERVICE_CIDR = "10.96.0.0/24"
# The lab's own clients (each with a certificate and a kubeconfig of its own), none of them audited as the product.
LAB_USERS = ("kube-controller-manager", "kube-scheduler", "kwok", "kubelet", "lab")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- certificates ---------------------------------------------------------------------------------------------------
def _pem_key(key):
    from cryptography.hazmat.primitives import serialization  # pylint: disable=import-outside-toplevel
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def make_pki(pki):
    """CA; serving certs for etcd and kube-apiserver; client certs (CN = user, O = groups) for each client."""
    from cryptography import x509  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives import hashes, serialization  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives.asymmetric import ec, rsa  # pylint: disable=import-outside-toplevel
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # pylint: disable=import-outside-toplevel

    os.makedirs(pki, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpuops lab kubernetes CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=30))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))

    def write(name, data):
        with open(os.path.join(pki, name), "wb") as fh:
            fh.write(data)

    write("ca.crt", ca.public_bytes(serialization.Encoding.PEM))

    def issue(name, common_name, groups=(), sans=(), server=False, client=False):
        key = ec.generate_private_key(ec.SECP256R1())
        subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
        builder = (x509.CertificateBuilder().subject_name(x509.Name(subject)).issuer_name(ca_name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=30))
                   .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
        if sans:
            alt = [x509.IPAddress(ipaddress.ip_address(s)) if s[0].isdigit() else x509.DNSName(s) for s in sans]
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        write(f"{name}.crt", builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
        write(f"{name}.key", _pem_key(key))

    loopback = ("127.0.0.1", "localhost")
    issue("etcd", "etcd", sans=loopback, server=True, client=True)
    issue("apiserver-etcd-client", "kube-apiserver-etcd-client", client=True)
    service_ip = str(next(ipaddress.ip_network(SERVICE_CIDR).hosts()))
    issue("apiserver", "kube-apiserver", server=True,
          sans=loopback + (service_ip, "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                           "kubernetes.default.svc.cluster.local"))
    # The clients: the product under test (audited), bound to exactly the permissions the collection documents
    # (docs/rbac/gpuops-provision.yaml, applied by grant_product()), so that a call needing more fails here as on a
    # real cluster; the lab's own (not audited) in system:masters.
    issue("client", PRODUCT_USER, groups=(CLIENT_GROUP,), client=True)
    for user in LAB_USERS:
        issue(user, f"gpuops-lab:{user}", groups=("system:masters",), client=True)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    write("sa.key", _pem_key(sa_key))
    write("sa.pub", sa_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))


def kubeconfig(path, server, pki, user):
    def data(name):
        with open(os.path.join(pki, name), "rb") as fh:
            return base64.b64encode(fh.read()).decode()

    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": "gpuops-lab",
        "clusters": [{"name": "gpuops-lab", "cluster": {"server": server, "certificate-authority-data": data("ca.crt")}}],
        "users": [{"name": user, "user": {"client-certificate-data": data(f"{user}.crt"),
                                          "client-key-data": data(f"{user}.key")}}],
        "contexts": [{"name": "gpuops-lab", "context": {"cluster": "gpuops-lab", "user": user}}],
    }
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(doc, fh)


AUDIT_BARRIER = "gpuops-audit-barrier"
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
    # One event per request, written when the response is complete (the log backend is blocking by default).
    "omitStages": ["RequestReceived", "ResponseStarted", "Panic"],
    "rules": [
        {"level": "Request", "userGroups": [CLIENT_GROUP],
         "verbs": ["create", "update", "patch", "delete", "deletecollection"]},
        {"level": "Metadata", "userGroups": [CLIENT_GROUP]},
        # From everyone, where pods are put on nodes (creates naming spec.nodeName, the scheduler's bindings): the
        # request log names the node of a pod that is gone by the time it is read (requestlog.py). And Node creates:
        # what a kubelet registered its node with (kubelet.py).
        {"level": "Request", "verbs": ["create"],
         "resources": [{"group": "", "resources": ["pods", "pods/binding", "nodes"]}]},
        # The harness's barrier (kube_harness.Session.settle): a read of a namespace that does not exist, logged so
        # that the harness can wait for it to appear behind every request answered before it.
        {"level": "Metadata", "verbs": ["get"],
         "resources": [{"group": "", "resources": ["namespaces"], "resourceNames": [AUDIT_BARRIER]}]},
        {"level": "None"},
    ],
}


# kwok's own stages (read from the pinned module by build.py) for node start-up, heartbeats with leases and pods
# becoming Ready/Succeeded; pod deletion is ours (below).
KWOK_STAGES = ("node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
               "pod/fast/pod-ready.yaml", "pod/fast/pod-complete.yaml")
# A kubelet stops a deleted pod's containers within its grace period and then deletes the pod with grace 0
# (pkg/kubelet/status/status_manager.go canBeDeleted/syncPod). kwok's fast pod-delete deletes at once; this one waits
# until metadata.deletionTimestamp (the apiserver sets it to now + the grace period), which kwok's durationFrom turns
# into a delay (sigs.k8s.io/kwok pkg/utils/lifecycle/value_duration_from.go: a time minus now).
POD_DELETE_STAGE = {
    "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "pod-delete-after-grace"},
    "spec": {
        "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
        "selector": {"matchExpressions": [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}]},
        "delay": {"durationMilliseconds": 0, "durationFrom": {"expressionFrom": ".metadata.deletionTimestamp"}},
        "next": {"finalizers": {"empty": True}, "delete": True},
    },
}


# A node that misses its heartbeats goes NotReady and the node lifecycle controller marks its pods not Ready
# (kube-controller-manager pkg/controller/nodelifecycle, MarkPodsNotReady in pkg/controller/util/node); a real kubelet
# sets them Ready again once it is back, on its next status sync (pkg/kubelet/status/status_manager.go, every 10 s).
# kwok's pod-ready Stage only matches Pending pods, so without this one such pods stay not Ready for good: under load
# a fleet's heartbeats come late, and PodDisruptionBudgets would then refuse every eviction.
POD_READY_AGAIN_STAGE = {
    "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "pod-ready-again"},
    "spec": {
        "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
        "selector": {"matchExpressions": [
            {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
            {"key": ".status.phase", "operator": "In", "values": ["Running"]},
            {"key": '.status.conditions.[] | select( .type == "Ready" ) | .status', "operator": "In", "values": ["False"]},
        ]},
        "delay": {"durationMilliseconds": 10000},
        "next": {"statusTemplate": '{{ $now := Now }}\nconditions:\n- lastTransitionTime: {{ $now | Quote }}\n'
                                   '  status: "True"\n  type: Ready\n'},
    },
}


# kwok's pod-ready Stage turns a pod Ready at once; a pod whose template carries lab.gpuops.io/ready-delay (seed.py,
# fixture podReadyDelaySeconds) waits that long first, as a replacement pod takes time to start on a real node. The
# delay is kwok's own (a Stage's delay.durationFrom: a JQ expression yielding a Go duration string,
# sigs.k8s.io/kwok pkg/utils/lifecycle/value_duration_from.go); no annotation: no delay.
POD_READY_DELAY = {"durationMilliseconds": 0,
                   "durationFrom": {"expressionFrom": '.metadata.annotations["lab.gpuops.io/ready-delay"]'}}


def kwok_config(path, stages_dir, options=None):
    docs = [{"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration", "options": options}] if options else []
    for rel in KWOK_STAGES:
        with open(os.path.join(stages_dir, rel), encoding="utf-8") as fh:
            docs.extend(d for d in yaml.safe_load_all(fh) if d)
    for doc in docs:
        if doc.get("kind") == "Stage" and doc["metadata"]["name"] == "pod-ready":
            doc["spec"]["delay"] = dict(POD_READY_DELAY)
    docs.append(POD_DELETE_STAGE)
    docs.append(POD_READY_AGAIN_STAGE)
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump_all(docs, fh)


# --- processes ------------------------------------------------------------------------------------------------------
def _pid_path(run_dir, name):
    return os.path.join(run_dir, "pids", f"{name}.pid")


def spawn(run_dir, name, argv, env=None, exe=None):
    """Start ``argv`` in a session of its own, logging to RUN_DIR/<name>.log; its pid file names ``exe``, the binary
    the pid runs (default argv[0]; a wrapper that execs it, such as unshare, names the program it ends in)."""
    os.makedirs(os.path.join(run_dir, "pids"), exist_ok=True)
    with open(os.path.join(run_dir, f"{name}.log"), "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,  # pylint: disable=consider-using-with
                                start_new_session=True, cwd=run_dir, env=env)
    with open(_pid_path(run_dir, name), "w", encoding="utf-8") as fh:
        fh.write(f"{proc.pid} {exe or argv[0]}\n")
    return proc


def _alive(pid, exe):
    """The PID runs ``exe`` and has not exited (a zombie's /proc entry stays until it is reaped)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return False
        return os.path.realpath(f"/proc/{pid}/exe") == os.path.realpath(exe) or \
            os.readlink(f"/proc/{pid}/exe").startswith(os.path.realpath(exe))
    except OSError:
        return False


def running(run_dir, name):
    try:
        with open(_pid_path(run_dir, name), encoding="utf-8") as fh:
            pid, exe = fh.read().split(maxsplit=1)
    except OSError:
        return None
    pid = int(pid)
    return pid if _alive(pid, exe.strip()) else None


def stop(run_dir, name, timeout=15.0):
    """SIGTERM one process by its PID file (only while that PID still runs the binary it was started as), then
    SIGKILL; the PID file goes."""
    pid = running(run_dir, name)
    if pid is not None:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + timeout
        while running(run_dir, name) and time.monotonic() < deadline:
            time.sleep(0.1)
        if running(run_dir, name):
            os.killpg(pid, signal.SIGKILL)
    try:
        os.unlink(_pid_path(run_dir, name))
    except OSError:
        pass


def down(run_dir, timeout=15.0):
    """Stop every process of the run dir, clients of the API server first."""
    for name in PROCESSES:
        stop(run_dir, name, timeout)


def log_tail(run_dir, name, lines=30):
    try:
        with open(os.path.join(run_dir, f"{name}.log"), encoding="utf-8", errors="replace") as fh:
            return "".join(fh.readlines()[-lines:])
    except OSError:
        return ""


class ControlPlane:
    """Paths and endpoints of a control plane started in ``run_dir``."""

    def __init__(self, run_dir):
        self.run_dir = os.path.abspath(run_dir)
        self.pki = os.path.join(self.run_dir, "pki")
        self.kubeconfig = os.path.join(self.run_dir, "kubeconfig")          # the product's (audited)
        self.lab_kubeconfig = os.path.join(self.run_dir, "lab.kubeconfig")  # the lab's own (not audited)
        self.audit_log = os.path.join(self.run_dir, "audit.jsonl")
        with open(os.path.join(self.run_dir, "endpoints.json"), encoding="utf-8") as fh:
            self.endpoints = json.load(fh)
        self.url = self.endpoints["apiserver"]

    def ssl_context(self, user="lab"):
        ctx = ssl.create_default_context(cafile=os.path.join(self.pki, "ca.crt"))
        ctx.load_cert_chain(os.path.join(self.pki, f"{user}.crt"), os.path.join(self.pki, f"{user}.key"))
        return ctx

    def get(self, path, user="lab", timeout=5.0):
        with urllib.request.urlopen(self.url + path, context=self.ssl_context(user), timeout=timeout) as resp:  # nosec - loopback
            return resp.status, resp.read()

    def audit_barrier(self, timeout=5.0):
        """Send the barrier read (AUDIT_POLICY); returns its audit ID (the Audit-ID header, apiserver
        pkg/endpoints/filters/audit_init.go), which its audit event carries."""
        try:
            with urllib.request.urlopen(self.url + "/api/v1/namespaces/" + AUDIT_BARRIER, context=self.ssl_context("lab"),
                                        timeout=timeout) as resp:  # nosec - loopback
                return resp.headers["Audit-ID"]
        except urllib.error.HTTPError as exc:  # 404: the namespace does not exist, which is the point
            return exc.headers["Audit-ID"]


def _wait(what, check, run_dir, names, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name in names:
            if running(run_dir, name) is None:
                raise RuntimeError(f"{name} exited while waiting for {what}:\n{log_tail(run_dir, name)}")
        try:
            if check():
                return
        except Exception:  # pylint: disable=broad-except  # not up yet
            pass
        time.sleep(0.2)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}:\n" + "\n".join(log_tail(run_dir, n) for n in names))


def start_gpu_operator(plane, gpusim, mig_manager):
    """Our GPU Operator (gpu_operator.py: the operands' rendering, the kubelet's ConfigMap volumes and mig-manager)
    for the nodes mapped to gpusim states; ``mig_manager`` is the fixture's migManager mapping (namespace,
    withReboot, stepDelay, configSyncPeriod, podTimeout)."""
    argv = [sys.executable, os.path.join(HERE, "gpu_operator.py"), "--kubeconfig", plane.lab_kubeconfig,
            "--run-dir", plane.run_dir, "--namespace", mig_manager.get("namespace", "gpu-operator"),
            "--step-delay", str(mig_manager.get("stepDelay", 0.5)),
            "--config-sync-period", str(mig_manager.get("configSyncPeriod", 4.0)),
            "--pod-timeout", str(mig_manager.get("podTimeout", 60.0))]
    if mig_manager.get("withReboot"):
        argv.append("--with-reboot")
    for spec in gpusim:
        argv += ["--gpusim", spec]
    spawn(plane.run_dir, "gpu-operator", argv)


# A fleet (hundreds to a thousand kwok nodes, thousands of pods; bench/mig_reconfigure --fleet) on this lab:
# - kwokctl's --disable-qps-limits (sigs.k8s.io/kwok pkg/kwokctl/components/kube_controller_manager.go and
#   kube_scheduler.go: --kube-api-qps 5000, --kube-api-burst 10000, consts.DefaultUnlimitedQPS/Burst): the controller
#   manager's default 20 requests/s would take minutes to create the DaemonSets' thousands of pods (kwok's own client
#   has no limit, pkg/utils/client/clientset.go);
# - the node monitor's upstream grace period (kube-controller-manager --node-monitor-grace-period, 50 s in v1.36)
#   instead of the lab's 20 s: a thousand node leases renewed on a loaded 2-core machine come late by seconds, and
#   at 20 s nodes flap NotReady (and count against a roll's budget);
# - kwok's parallelism raised from its default 4 (KwokConfiguration options nodeLeaseParallelism,
#   nodePlayStageParallelism, podPlayStageParallelism: pkg/apis/config/v1alpha1/kwok_configuration_types.go), so
#   that it renews a thousand leases every 10 s as a thousand kubelets would.
UNLIMITED_QPS = ["--kube-api-qps", "5000", "--kube-api-burst", "10000"]
FLEET_KWOK_OPTIONS = {"nodeLeaseParallelism": 32, "nodePlayStageParallelism": 16, "podPlayStageParallelism": 16}


def up(run_dir, gpusim=(), timeout=180.0, devplugin_lag=0.0, fleet=False):
    """Start everything (stopping what an earlier `up` left in ``run_dir``); returns a ControlPlane once the API server
    is ready and the controllers have created the default ServiceAccount. ``fleet``: set up for hundreds of nodes
    (above)."""
    run_dir = os.path.abspath(run_dir)
    os.makedirs(run_dir, exist_ok=True)
    down(run_dir)
    # A new control plane is a new cluster: no state, audit log or mig-manager log from an earlier one.
    for name in ("etcd-data", "kubelet", "mig-manager"):  # kubelet: gpu_operator.py's ConfigMap volumes
        shutil.rmtree(os.path.join(run_dir, name), ignore_errors=True)
    for name in ("audit.jsonl", "mig-manager.jsonl"):
        try:
            os.unlink(os.path.join(run_dir, name))
        except OSError:
            pass
    out = gobuild.builder("kube").ensure()
    bin_dir = os.path.join(out, "bin")
    pki = os.path.join(run_dir, "pki")
    make_pki(pki)
    ports = {name: free_port() for name in ("etcd", "etcd-peer", "apiserver", "kwok")}
    server = f"https://127.0.0.1:{ports['apiserver']}"
    with open(os.path.join(run_dir, "endpoints.json"), "w", encoding="utf-8") as fh:
        json.dump({"apiserver": server, "etcd": f"https://127.0.0.1:{ports['etcd']}", "bin": bin_dir}, fh)
    kubeconfig(os.path.join(run_dir, "kubeconfig"), server, pki, "client")
    for user in LAB_USERS:
        kubeconfig(os.path.join(run_dir, f"{user}.kubeconfig" if user != "lab" else "lab.kubeconfig"), server, pki, user)
    with open(os.path.join(run_dir, "audit-policy.yaml"), "w", encoding="utf-8") as fh:
        yaml.safe_dump(AUDIT_POLICY, fh)
    kwok_config(os.path.join(run_dir, "kwok.yaml"), os.path.join(out, "kwok-stages"), FLEET_KWOK_OPTIONS if fleet else None)

    def p(name):
        return os.path.join(pki, name)

    etcd_url = f"https://127.0.0.1:{ports['etcd']}"
    peer_url = f"http://127.0.0.1:{ports['etcd-peer']}"
    spawn(run_dir, "etcd", [
        os.path.join(bin_dir, "etcd"), "--name", "lab", "--data-dir", os.path.join(run_dir, "etcd-data"),
        "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
        "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
        "--initial-cluster", f"lab={peer_url}", "--listen-metrics-urls", "",
        "--cert-file", p("etcd.crt"), "--key-file", p("etcd.key"), "--trusted-ca-file", p("ca.crt"),
        "--client-cert-auth", "--unsafe-no-fsync", "--log-level", "warn",
    ])
    spawn(run_dir, "kube-apiserver", [
        os.path.join(bin_dir, "kube-apiserver"),
        "--etcd-servers", etcd_url, "--etcd-cafile", p("ca.crt"),
        "--etcd-certfile", p("apiserver-etcd-client.crt"), "--etcd-keyfile", p("apiserver-etcd-client.key"),
        "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(ports["apiserver"]),
        "--tls-cert-file", p("apiserver.crt"), "--tls-private-key-file", p("apiserver.key"),
        "--client-ca-file", p("ca.crt"), "--authorization-mode", "RBAC",
        "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
        "--service-account-key-file", p("sa.pub"), "--service-account-signing-key-file", p("sa.key"),
        "--service-cluster-ip-range", SERVICE_CIDR, "--allow-privileged=true",
        "--audit-policy-file", os.path.join(run_dir, "audit-policy.yaml"), "--audit-log-path", os.path.join(run_dir, "audit.jsonl"),
        "--audit-log-format", "json", "--audit-log-maxsize", "0",
        # The "kubernetes" Service endpoints may not be loopback addresses, and nothing in the lab dials them.
        "--endpoint-reconciler-type", "none", "--profiling=false", "-v", "1",
    ])
    plane = None

    def apiserver_ready():
        nonlocal plane
        plane = plane or ControlPlane(run_dir)
        return plane.get("/readyz")[0] == 200

    _wait("kube-apiserver /readyz", apiserver_ready, run_dir, ("etcd", "kube-apiserver"), timeout)
    spawn(run_dir, "kube-controller-manager", [
        os.path.join(bin_dir, "kube-controller-manager"),
        "--kubeconfig", os.path.join(run_dir, "kube-controller-manager.kubeconfig"),
        "--authentication-kubeconfig", os.path.join(run_dir, "kube-controller-manager.kubeconfig"),
        "--authorization-kubeconfig", os.path.join(run_dir, "kube-controller-manager.kubeconfig"),
        "--leader-elect=false", "--secure-port", "0", "--use-service-account-credentials=false",
        "--service-account-private-key-file", p("sa.key"), "--root-ca-file", p("ca.crt"),
        "--service-cluster-ip-range", SERVICE_CIDR,
        # 20 s instead of 50 s: a node whose heartbeats stop shows NotReady within a test's time.
        "--node-monitor-grace-period", "50s" if fleet else "20s", "-v", "1", *(UNLIMITED_QPS if fleet else []),
    ])
    spawn(run_dir, "kube-scheduler", [
        os.path.join(bin_dir, "kube-scheduler"), "--kubeconfig", os.path.join(run_dir, "kube-scheduler.kubeconfig"),
        "--authentication-kubeconfig", os.path.join(run_dir, "kube-scheduler.kubeconfig"),
        "--authorization-kubeconfig", os.path.join(run_dir, "kube-scheduler.kubeconfig"),
        "--leader-elect=false", "--secure-port", "0", "-v", "1", *(UNLIMITED_QPS if fleet else []),
    ])
    spawn(run_dir, "kwok", [
        os.path.join(bin_dir, "kwok"), "--kubeconfig", os.path.join(run_dir, "kwok.kubeconfig"),
        "--config", os.path.join(run_dir, "kwok.yaml"),
        "--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake",
        "--server-address", f"127.0.0.1:{ports['kwok']}", "--node-ip", "127.0.0.1",
        # Node leases, as kubelets keep them (kwok renews at a quarter of the duration). Without them the
        # heartbeat-with-lease stage updates the Ready condition only every 10 minutes, the node lifecycle controller
        # finds every node NotReady after its grace period and marks their pods NotReady for good.
        "--node-lease-duration-seconds", "40",
    ])
    if gpusim:
        argv = [sys.executable, os.path.join(HERE, "device_plugin.py"), "--kubeconfig", plane.lab_kubeconfig,
                "--lag", str(devplugin_lag)]
        for spec in gpusim:
            argv += ["--gpusim", spec]
        spawn(run_dir, "device-plugin", argv)
    names = list(CORE) + (["device-plugin"] if gpusim else [])

    def default_sa():
        return plane.get("/api/v1/namespaces/default/serviceaccounts/default")[0] == 200

    _wait("the default ServiceAccount (kube-controller-manager)", default_sa, run_dir, names, timeout)
    grant_product(plane)
    return plane


def grant_product(plane):
    """Apply the collection's RBAC objects (the namespaces they live in first) and bind them to the product's user,
    as docs/rbac.md tells an administrator to."""
    import kubernetes  # pylint: disable=import-outside-toplevel
    api = kubernetes.config.new_client_from_config(config_file=plane.lab_kubeconfig)
    core, rbac = kubernetes.client.CoreV1Api(api), kubernetes.client.RbacAuthorizationV1Api(api)
    subject = [{"kind": "User", "name": PRODUCT_USER, "apiGroup": "rbac.authorization.k8s.io"}]
    with open(RBAC, encoding="utf-8") as fh:
        docs = yaml.safe_load(fh)["items"]  # one List document (kubectl apply takes its items)
    for doc in docs:
        ns = doc["metadata"].get("namespace")
        if ns:
            try:
                core.create_namespace({"metadata": {"name": ns}})
            except kubernetes.client.rest.ApiException as e:
                if e.status != 409:
                    raise
            rbac.create_namespaced_role(ns, doc)
            rbac.create_namespaced_role_binding(ns, {"metadata": {"name": doc["metadata"]["name"], "namespace": ns},
                                                     "roleRef": {"kind": "Role", "name": doc["metadata"]["name"],
                                                                 "apiGroup": "rbac.authorization.k8s.io"},
                                                     "subjects": subject})
        else:
            rbac.create_cluster_role(doc)
            rbac.create_cluster_role_binding({"metadata": {"name": doc["metadata"]["name"]},
                                              "roleRef": {"kind": "ClusterRole", "name": doc["metadata"]["name"],
                                                          "apiGroup": "rbac.authorization.k8s.io"},
                                              "subjects": subject})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("action", choices=("up", "down", "status"))
    parser.add_argument("run_dir")
    parser.add_argument("--gpusim", action="append", default=[], metavar="NODE=PATH[:STRATEGY]")
    parser.add_argument("--fixture")
    args = parser.parse_args(argv)
    if args.action == "down":
        down(args.run_dir)
        return 0
    if args.action == "status":  # 0 when every core process of an earlier `up` still runs
        return 0 if all(running(args.run_dir, n) for n in CORE) else 1
    start = time.monotonic()
    if args.fixture:
        import kube_harness  # pylint: disable=import-outside-toplevel  # it imports this module
        plane = kube_harness.start(args.run_dir, args.fixture, args.gpusim).cp
    else:
        plane = up(args.run_dir, args.gpusim)
    print(f"kubernetes control plane up in {time.monotonic() - start:.1f} s: {plane.url} (kubeconfig {plane.kubeconfig})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
