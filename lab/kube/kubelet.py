"""A real kubelet (k8s.io/kubernetes cmd/kubelet, built from the control plane's pin: lab/kube/build.py ensure_tools,
on first use) that registers one Node with the
lab's API server, for what only a kubelet shows: what its flags put into the Node it registers
(pkg/kubelet/kubelet_node_status.go initialNode: --register-with-taints becomes spec.taints of the create).

There is no container runtime here: the kubelet talks to the Kubernetes project's own fake CRI server
(k8s.io/cri-client/pkg/fake, cmd/fakecri). Its configuration turns off what needs a real node (cgroups per QoS
class, node allocatable enforcement; cgroup v1 is allowed). The kernel tunables a kubelet sets at start
(pkg/kubelet/cm/container_manager_linux.go setupKernelTunables: vm.overcommit_memory, kernel.panic, ...) are this
machine's: ``start`` keeps their values and ``stop`` puts them back. Both processes belong to the control plane's run
dir ("fakecri", "kubelet"), so controlplane.down stops them too.

``kubeadm_join_flags`` runs kubeadm's own join (dry run) on a JoinConfiguration and returns the flags kubeadm would
give this kubelet, so a test starts the kubelet exactly as a kubeadm node would.

Needs root (the kubelet refuses to start otherwise). Usage from tests:

    flags = kubelet.kubeadm_join_flags(plane, "join.yaml", tmp_dir)        # KUBELET_KUBEADM_ARGS
    root = kubelet.start(plane, "gpu-new", flags + extra_args)             # then $KUBELET_EXTRA_ARGS, as the drop-in
    ...
    kubelet.stop(plane, root)
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import controlplane  # noqa: E402  pylint: disable=wrong-import-position
from controlplane import gobuild  # noqa: E402  pylint: disable=wrong-import-position


def tools_bin():
    """bin/ of kubeadm, kubectl, kubelet and fakecri (built on first use, cached under build/kube/)."""
    return os.path.join(gobuild.builder("kube").ensure_tools(), "bin")


# The sysctls setupKernelTunables sets when protectKernelDefaults is false (utilsysctl's names, /proc/sys paths).
TUNABLES = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
            "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")


def _mounts_under(path):
    """Mount points at or below ``path`` (/proc/self/mountinfo, field 5; octal escapes as the kernel writes them)."""
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        points = [line.split()[4].encode().decode("unicode_escape") for line in fh if line.strip()]
    return [p for p in points if p == path or p.startswith(path.rstrip("/") + "/")]


def config(root):
    """The KubeletConfiguration (kubelet.config.k8s.io/v1beta1) of a registration-only kubelet under ``root``."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": f"unix://{root}/cri.sock",
        "address": "127.0.0.1", "port": controlplane.free_port(), "readOnlyPort": 0, "healthzPort": 0,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs", "cgroupsPerQOS": False, "enforceNodeAllocatable": [],
        # Since v1.35 a kubelet refuses cgroup v1 unless told otherwise (KEP-5573); this machine may have only v1.
        "failCgroupV1": False, "failSwapOn": False,
        # false: the kubelet sets the tunables (true would make it exit on this machine's values, maybe before it
        # registered); start/stop keep and restore them.
        "protectKernelDefaults": False,
        "localStorageCapacityIsolation": False,
        "volumePluginDir": os.path.join(root, "volume-plugins"), "podLogsDir": os.path.join(root, "pod-logs"),
        "staticPodPath": "", "registerNode": True, "serializeImagePulls": True,
    }


def kubeadm_join_flags(plane, join_config, workdir):
    """The kubelet flags ``kubeadm join --config join_config`` gives this node, read from the kubeadm-flags.env that
    kubeadm's own dry run writes (cmd/kubeadm/app/cmd/phases/join/kubelet.go runKubeletStartJoinPhase ->
    WriteKubeletDynamicEnvFile: KUBELET_KUBEADM_ARGS). The JoinConfiguration's discovery must point at this control
    plane (discovery.file.kubeConfigPath: RUN_DIR/kubelet.kubeconfig, whose credentials kubeadm uses to bootstrap).

    Discovery reads kube-public/cluster-info; it is created here as `kubeadm init` creates it
    (cmd/kubeadm/app/phases/bootstraptoken/clusterinfo/clusterinfo.go CreateBootstrapConfigMapIfNotExists: a
    kubeconfig holding only the cluster, under the key "kubeconfig"). Preflight checks are ignored: this machine is no
    node (no container runtime, no kubelet service)."""
    import kubernetes  # pylint: disable=import-outside-toplevel
    with open(plane.lab_kubeconfig, encoding="utf-8") as fh:
        cluster = yaml.safe_load(fh)["clusters"][0]["cluster"]
    info = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "", "cluster": cluster}],
            "contexts": [], "users": [], "preferences": {}}
    core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(plane.lab_kubeconfig))
    try:
        core.create_namespaced_config_map("kube-public", {"metadata": {"name": "cluster-info"},
                                                          "data": {"kubeconfig": yaml.safe_dump(info)}})
    except kubernetes.client.ApiException as exc:
        if exc.status != 409:
            raise
    dry = os.path.join(workdir, "kubeadm-dry-run")
    os.makedirs(dry, exist_ok=True)
    proc = subprocess.run([os.path.join(tools_bin(), "kubeadm"), "join", "--config", join_config, "--dry-run",
                           "--ignore-preflight-errors=all"], env=dict(os.environ, KUBEADM_JOIN_DRYRUN_DIR=dry),
                          capture_output=True, text=True, timeout=120, check=False)
    flags_env = os.path.join(dry, "kubeadm-flags.env")
    if proc.returncode != 0 or not os.path.exists(flags_env):
        raise RuntimeError(f"kubeadm join --dry-run failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    with open(flags_env, encoding="utf-8") as fh:
        for line in fh:
            name, _, value = line.strip().partition("=")
            if name == "KUBELET_KUBEADM_ARGS":  # the drop-in uses it unbraced: split on whitespace (systemd.exec)
                return " ".join(shlex.split(value)).split()
    raise RuntimeError(f"{flags_env} has no KUBELET_KUBEADM_ARGS")


def start(plane, node_name, extra_args=(), root=None, device_plugins=False):
    """Start fakecri and a kubelet for ``node_name`` (its flags: ours, then ``extra_args`` as an installer passes
    them); returns the kubelet's root dir. The lab's kubelet.kubeconfig is its credential.

    ``device_plugins``: the kubelet's device manager listens in ROOT/device-plugins, seen by it as the fixed
    /var/lib/kubelet/device-plugins in a mount namespace of its own (device-plugins-view.sh), for a device plugin
    started the same way (nvidia_device_plugin.py). Without it the kubelet uses this machine's
    /var/lib/kubelet/device-plugins, whatever --root-dir says.

    The root dir is short by default (a /tmp dir of its own, removed by ``stop``): the kubelet binds unix sockets
    under it (pod-resources, plugins), and a socket path has at most 108 bytes."""
    run_dir = plane.run_dir
    owned = root is None
    root = tempfile.mkdtemp(prefix="kubelet-", dir="/tmp") if owned else os.path.abspath(root)
    os.makedirs(root, exist_ok=True)
    saved = {}
    for name in TUNABLES:
        with open(f"/proc/sys/{name}", encoding="utf-8") as fh:
            saved[name] = fh.read().strip()
    with open(os.path.join(root, "lab-kubelet.json"), "w", encoding="utf-8") as fh:
        json.dump({"tunables": saved, "owned": owned}, fh)
    bin_dir = tools_bin()
    controlplane.spawn(run_dir, "fakecri", [os.path.join(bin_dir, "fakecri"), f"unix://{root}/cri.sock"])
    deadline = time.monotonic() + 20
    while not os.path.exists(os.path.join(root, "cri.sock")):
        if time.monotonic() > deadline or controlplane.running(run_dir, "fakecri") is None:
            raise RuntimeError("fakecri did not listen:\n" + controlplane.log_tail(run_dir, "fakecri"))
        time.sleep(0.1)
    with open(os.path.join(root, "config.yaml"), "w", encoding="utf-8") as fh:
        yaml.safe_dump(config(root), fh)
    argv = [os.path.join(bin_dir, "kubelet"), "--config", os.path.join(root, "config.yaml"),
            "--kubeconfig", os.path.join(run_dir, "kubelet.kubeconfig"), "--root-dir", root,
            "--cert-dir", os.path.join(root, "pki"), "--hostname-override", node_name, *extra_args]
    if device_plugins:
        os.makedirs(os.path.join(root, "device-plugins"), exist_ok=True)
        view = ["unshare", "-m", "--", "sh", os.path.join(HERE, "device-plugins-view.sh"), os.path.join(root, "device-plugins")]
        proc = controlplane.spawn(run_dir, "kubelet", view + argv, exe=argv[0])
        # Until unshare and the script have exec'd the kubelet, controlplane.running does not know the pid (its exe is
        # unshare's), and a stop would leave it running.
        deadline = time.monotonic() + 30
        while controlplane.running(run_dir, "kubelet") is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    else:
        controlplane.spawn(run_dir, "kubelet", argv)
    return root


def stop(plane, root):
    """Stop the kubelet and fakecri, then give this machine back what the kubelet changed: the kernel tunables it had
    before ``start``, and the bind mount of the root dir on itself (pkg/kubelet/kubelet.go setupDataDirs makes the
    root dir an rshared mount); remove the root dir ``start`` made."""
    for name in ("kubelet", "fakecri"):
        controlplane.stop(plane.run_dir, name)
    # A bind mount of a dir on itself is no mount to os.path.ismount (same device), hence mountinfo. The kubelet's
    # last threads may still hold the dir for a moment after it is reaped ("target is busy"): retry, then detach.
    for attempt in range(51):
        if not _mounts_under(root):
            break
        lazy = ["-l"] if attempt == 50 else []
        if subprocess.run(["umount", "-R", *lazy, root], check=False, capture_output=True).returncode != 0:
            time.sleep(0.2)
    if _mounts_under(root):
        raise RuntimeError(f"kubelet root dir {root} is still mounted: {_mounts_under(root)}")
    path = os.path.join(root, "lab-kubelet.json")
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as fh:
        state = json.load(fh)
    for name, value in state["tunables"].items():
        with open(f"/proc/sys/{name}", "w", encoding="utf-8") as out:
            out.write(value)
    if state["owned"]:
        shutil.rmtree(root, ignore_errors=True)
