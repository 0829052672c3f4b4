"""NVIDIA's own k8s-device-plugin (lab/device-plugin: v0.17.4, built on first use) on the lab's real kubelet
(kubelet.py), answering from gpusim's libnvidia-ml.so.1 (lab/gpusim/libnvml) on a gpusim state: the resources the
Node advertises come from NVIDIA's code and the kubelet's device manager, not from the stand-in (device_plugin.py).

What the plugin reads besides NVML, given as the driver lays it out, in a private mount namespace
(device-plugins-view.sh on top of gpusim's kernel-view.sh):
- /sys/bus/pci/devices/<bdf>/numa_node (internal/rm/nvml_devices.go GetNumaNode): kernel_view.py's sysfs tree;
- /proc/driver/nvidia-caps/mig-minors (internal/mig/mig.go GetMigCapabilityDevicePaths), MIG devices only;
- /var/lib/kubelet/device-plugins: the kubelet's device-plugins dir (its socket path is a constant upstream);
- /dev/nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset (stat'ed for Allocate's device specs with
  --pass-device-specs) and /dev/nvidia<minor> (named, not stat'ed): real character device nodes, links to this
  machine's /dev for the rest. No GPU is opened: the plugin only names them to the kubelet.

Needs root (the kubelet, mount namespaces). Usage:

    root = kubelet.start(plane, "gpu-real", [], device_plugins=True)
    nvidia_device_plugin.start(plane, root, state_path, strategy="single")   # or config={"sharing": ...}
    ...
    nvidia_device_plugin.stop(plane)
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import stat
import sys
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
GPUSIM = os.path.join(REPO, "lab", "gpusim")
VIEW = os.path.join(HERE, "device-plugins-view.sh")
NAME = "nvidia-device-plugin"       # its pid file and log in the control plane's run dir
sys.path.insert(0, HERE)
import controlplane  # noqa: E402  pylint: disable=wrong-import-position
from controlplane import gobuild  # noqa: E402  pylint: disable=wrong-import-position


def _load(name, path):
    """A lab script by path, with sys.path as it was afterwards (kernel_view.py puts lab/gpusim first on it, which
    the caller did not ask for)."""
    saved = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path[:] = saved


def binary():
    """bin/nvidia-device-plugin (built on first use, cached under build/device-plugin/)."""
    return os.path.join(gobuild.builder("device-plugin").ensure(), "bin", "nvidia-device-plugin")


def library_dir(driver=None):
    """The directory of gpusim's libnvidia-ml.so.1 for ``driver`` (gpusim's default), built on first use."""
    build = _load("gpusim_libnvml_build", os.path.join(GPUSIM, "libnvml", "build.py"))
    return build.ensure(*([driver] if driver else []))


# /proc/driver/nvidia-caps/mig-minors as the nvidia module writes it when it loads (nvidia-caps: every capability it
# may ever create, whether or not the GPU instance exists): "config 1", "monitor 2", then per GPU minor (0..31) and GPU
# instance id (0..14) the instance's access file and its eight compute instances' (ci0..ci7), numbered on from 3; the
# last line is "gpu31/gi14/ci7/access 4322". The device plugin turns a MIG device's gi/ci into /dev/nvidia-caps/
# nvidia-cap<N> from it and refuses a MIG device missing there (internal/rm/nvml_devices.go nvmlMigDevice.GetPaths).
MIG_GPUS, MIG_GIS, MIG_CIS = 32, 15, 8


def mig_minors():
    lines, minor = ["config 1", "monitor 2"], 3
    for gpu in range(MIG_GPUS):
        for gi in range(MIG_GIS):
            lines.append("gpu%d/gi%d/access %d" % (gpu, gi, minor))
            minor += 1
            for ci in range(MIG_CIS):
                lines.append("gpu%d/gi%d/ci%d/access %d" % (gpu, gi, ci, minor))
                minor += 1
    return "\n".join(lines) + "\n"


# The device nodes as the driver has them made (nvidia-modprobe, utils/nvidia-modprobe-utils.c, mode 0666): the
# nvidia module's fixed major 195 (NV_MAJOR_DEVICE_NUMBER), minor 255 nvidiactl, 254 nvidia-modeset and one per GPU
# minor number; nvidia-uvm and nvidia-uvm-tools (minors 0, 1) on nvidia-uvm's major, which the kernel hands out at load
# (alloc_chrdev_region, read back from /proc/devices): the value below is this lab's. MIG capability nodes
# (/dev/nvidia-caps/nvidia-cap<N>) are made on demand by nvidia-modprobe -f; the plugin names them unchecked.
NVIDIA_MAJOR, UVM_MAJOR = 195, 510


def device_nodes(gpus):
    """{name: (major, minor)} of /dev for the state's GPUs (gpusim's, loaded: minor_number filled in)."""
    nodes = {"nvidiactl": (NVIDIA_MAJOR, 255), "nvidia-modeset": (NVIDIA_MAJOR, 254),
             "nvidia-uvm": (UVM_MAJOR, 0), "nvidia-uvm-tools": (UVM_MAJOR, 1)}
    for g in gpus:
        if g.get("present", True):
            nodes["nvidia%d" % g["minor_number"]] = (NVIDIA_MAJOR, g["minor_number"])
    return nodes


def kernel_root(root, state_path):
    """ROOT/sys, ROOT/proc/modules (kernel_view.py), ROOT/proc/driver/nvidia-caps/mig-minors and ROOT/dev (the
    NVIDIA device nodes) for ``state_path``."""
    kernel_view = _load("gpusim_libnvml_kernel_view", os.path.join(GPUSIM, "libnvml", "kernel_view.py"))
    kernel_view.build(root, state_path)
    caps = os.path.join(root, "proc", "driver", "nvidia-caps")
    os.makedirs(caps, exist_ok=True)
    with open(os.path.join(caps, "mig-minors"), "w", encoding="utf-8") as fh:
        fh.write(mig_minors())
    dev = os.path.join(root, "dev")
    os.makedirs(dev, exist_ok=True)
    for name, (major, minor) in device_nodes(kernel_view.state.load(state_path)["gpus"]).items():
        os.mknod(os.path.join(dev, name), 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(os.path.join(dev, name), 0o666)  # mknod's mode is masked by the umask
    return root


def command(kubelet_root, kernel, argv):
    """argv under the kernel view of ``kernel`` with the kubelet's device-plugins dir at the plugin's constant path."""
    return ["unshare", "-m", "--", "sh", os.path.join(GPUSIM, "libnvml", "kernel-view.sh"), kernel,
            "sh", VIEW, os.path.join(kubelet_root, "device-plugins"), "--proc-driver", os.path.join(kernel, "proc", "driver"),
            "--dev", os.path.join(kernel, "dev"), *argv]


def start(plane, kubelet_root, state_path, strategy="single", config=None, env=None, driver=None, pass_device_specs=False):
    """Start the plugin for the kubelet under ``kubelet_root`` (kubelet.start's) with gpusim ``state_path``; returns
    its argv. ``config``: the plugin's config file as a dict (version v1; ``sharing.timeSlicing`` and the like),
    ``env``: more environment (e.g. DP_DISABLE_HEALTHCHECKS), ``pass_device_specs``: Allocate names the device nodes
    too (the GPU Operator's device plugin DaemonSet sets PASS_DEVICE_SPECS=true). Its log is RUN_DIR/nvidia-device-plugin.log, this
    run's only, with every NVML call traced (GPUSIM_TRACE)."""
    run_dir = plane.run_dir
    work = os.path.join(run_dir, NAME)
    os.makedirs(work, exist_ok=True)
    stop(plane)  # one plugin per kubelet, as one DaemonSet pod per node; its kernel view is the new state's
    shutil.rmtree(os.path.join(work, "kernel"), ignore_errors=True)
    kernel = kernel_root(os.path.join(work, "kernel"), state_path)
    exe = binary()
    argv = [exe, "--mig-strategy", strategy, "--fail-on-init-error=true",
            "--kubelet-socket", "/var/lib/kubelet/device-plugins/kubelet.sock", f"--pass-device-specs={str(pass_device_specs).lower()}"]
    if config is not None:
        path = os.path.join(work, "config.yaml")
        with open(path, "w", encoding="utf-8") as fh:
            yaml.safe_dump(config, fh)
        argv += ["--config-file", path]
    full = dict((k, v) for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME"))
    full.update({"LD_LIBRARY_PATH": library_dir(driver), "GPUSIM_HOME": GPUSIM,
                 "GPUSIM_STATE": os.path.abspath(state_path), "GPUSIM_TRACE": "1"}, **(env or {}))
    open(os.path.join(run_dir, f"{NAME}.log"), "w", encoding="utf-8").close()  # pylint: disable=consider-using-with
    # exe: the binary the pid runs once unshare and the two scripts have exec'd it, so that controlplane.stop (and
    # down) find it (controlplane.running compares /proc/<pid>/exe).
    proc = controlplane.spawn(run_dir, NAME, command(kubelet_root, kernel, argv), env=full, exe=exe)
    _until_execd(run_dir, NAME, proc)
    return argv


def _until_execd(run_dir, name, proc, timeout=30.0):
    """Wait until the wrappers have exec'd the program (or it has ended): before that controlplane.running does not
    know the pid (its exe is still unshare's or sh's), and a stop would leave it running."""
    deadline = time.monotonic() + timeout
    while controlplane.running(run_dir, name) is None and proc.poll() is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not start:\n" + controlplane.log_tail(run_dir, name))
        time.sleep(0.05)


def log(plane):
    """The plugin's log since its last start."""
    with open(os.path.join(plane.run_dir, f"{NAME}.log"), encoding="utf-8", errors="replace") as fh:
        return fh.read()


def running(plane):
    return controlplane.running(plane.run_dir, NAME) is not None


def nvml_calls(text):
    """The NVML entry points a log's GPUSIM_TRACE lines show, in first-call order."""
    return list(dict.fromkeys(re.findall(r"^gpusim libnvidia-ml: (nvml\w+)\(", text, re.M)))


def stop(plane):
    controlplane.stop(plane.run_dir, NAME)
