"""NVIDIA's own k8s-device-plugin (lab/device-plugin: v0.17.4, built on first use) on the lab's real kubelet
(kubelet.py), answering from gpusim's libnvidia-ml.so.1 (lab/gpusim/libnvml) on a gpusim state: the resources the
Node advertises come from NVIDIA's code and the kubelet's device manager, not from the stand-in (device_plugin.py).

What the plugin reads besides NVML, given as the driver lays it out, in a private mount namespace
(device-plugins-view.sh on top of gpusim's kernel-view.sh):
- /sys/bus/pci/devices/<bdf>/numa_node (internal/rm/nvml_devices.go GetNumaNode): kernel_view.py's sysfs tree;
- /proc/driver/nvidia-caps/mig-minors (internal/mig/mig.go GetMigCapabilityDevicePaths), MIG devices only;
- /var/lib/kubelet/device-plugins: the kubelet's device-plugins dir (its socket path is a constant upstream).
The device nodes (/dev/nvidia<minor>, /dev/nvidia-caps/nvidia-cap<N>) are only named in Allocate's answer with the
default device-list strategy (envvar) and pass-device-specs off; no pod is admitted here, so none are made.

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
import sys

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
    """A lab script by path, with sys.path as it was afterwards (kernel_view.py puts lab/gpusim first on it, where
    gpusim's pynvml.py would shadow nvidia-ml-py for the rest of the process)."""
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


def kernel_root(root, state_path):
    """ROOT/sys, ROOT/proc/modules (kernel_view.py) and ROOT/proc/driver/nvidia-caps/mig-minors for ``state_path``."""
    kernel_view = _load("gpusim_libnvml_kernel_view", os.path.join(GPUSIM, "libnvml", "kernel_view.py"))
    kernel_view.build(root, state_path)
    caps = os.path.join(root, "proc", "driver", "nvidia-caps")
    os.makedirs(caps, exist_ok=True)
    with open(os.path.join(caps, "mig-minors"), "w", encoding="utf-8") as fh:
        fh.write(mig_minors())
    return root


def command(kubelet_root, kernel, argv):
    """argv under the kernel view of ``kernel`` with the kubelet's device-plugins dir at the plugin's constant path."""
    return ["unshare", "-m", "--", "sh", os.path.join(GPUSIM, "libnvml", "kernel-view.sh"), kernel,
            "sh", VIEW, os.path.join(kubelet_root, "device-plugins"), "--proc-driver", os.path.join(kernel, "proc", "driver"),
            *argv]


def start(plane, kubelet_root, state_path, strategy="single", config=None, env=None, driver=None):
    """Start the plugin for the kubelet under ``kubelet_root`` (kubelet.start's) with gpusim ``state_path``; returns
    its argv. ``config``: the plugin's config file as a dict (version v1; ``sharing.timeSlicing`` and the like),
    ``env``: more environment (e.g. DP_DISABLE_HEALTHCHECKS). Its log is RUN_DIR/nvidia-device-plugin.log, this
    run's only, with every NVML call traced (GPUSIM_TRACE)."""
    run_dir = plane.run_dir
    work = os.path.join(run_dir, NAME)
    os.makedirs(work, exist_ok=True)
    stop(plane)  # one plugin per kubelet, as one DaemonSet pod per node; its kernel view is the new state's
    shutil.rmtree(os.path.join(work, "kernel"), ignore_errors=True)
    kernel = kernel_root(os.path.join(work, "kernel"), state_path)
    exe = binary()
    argv = [exe, "--mig-strategy", strategy, "--fail-on-init-error=true",
            "--kubelet-socket", "/var/lib/kubelet/device-plugins/kubelet.sock"]
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
    controlplane.spawn(run_dir, NAME, command(kubelet_root, kernel, argv), env=full, exe=exe)
    return argv


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
