"""Operations on the simulated machine that NVML itself does not offer.

``reset`` is what ``nvidia-smi -r`` does (commit a pending MIG mode, lose GIs/CIs),
``reboot`` is a host/VM reboot, ``module-reload`` a reload of the nvidia module, ``fault`` injects a health fault (see health.inject_fault).
Tests and lab playbooks call them directly or through ``python -m gpusim`` (with lab/gpusim on PYTHONPATH).
"""

from __future__ import annotations

import json
import os

from . import health, machine, state
from .models import MODELS

HOLD_MEMORY = 256 * 1024 * 1024


def write_minimal(path, models, mig_mode="disabled", driver_version=None):
    st = {"gpus": [{"model": m, "mig_mode": mig_mode} for m in models]}
    if driver_version:
        st["driver_version"] = driver_version
    state.write(path, state.normalize(st))
    return st


def reset(path=None, indexes=None, log=True):
    """GPU reset of the given NVML indexes (all enumerated GPUs when None); raises machine.Fault on refusal.

    A request (``log``) goes to the state's ``reset_log`` as one entry, the bus ids of its GPUs, before it is tried:
    a test sees which GPUs were reset together (mig-parted cmd/nvidia-mig-parted/util/device.go nvmlResetAllGPUs
    resets every GPU in one `nvidia-smi -r -i <bus ids>`). bin/nvidia-smi logs its request once and resets GPU by GPU.
    """
    if log:
        log_reset(path, indexes)
    with state.transaction(path) as st:
        gpus = health.visible(st)
        for i in _targets(gpus, indexes):
            machine.reset_gpu(st, gpus[i])


def _targets(gpus, indexes):
    targets = list(range(len(gpus)) if indexes is None else indexes)
    for i in targets:
        if not 0 <= i < len(gpus):
            raise machine.Fault(machine.INVALID_ARGUMENT, "no GPU with index %d" % i)
    return targets


def log_reset(path=None, indexes=None):
    """Record one reset request (see reset)."""
    with state.transaction(path) as st:
        gpus = health.visible(st)
        st.setdefault("reset_log", []).append([gpus[i]["pci_bus_id"] for i in _targets(gpus, indexes)])


def proc_tree(root, path=None):
    """Write what /proc shows of the state's host GPU clients under ``root``: ``modules`` (nvidia, plus nvidia_drm
    when loaded) and ``<pid>/comm`` per client process, truncated to 15 characters as the kernel does (TASK_COMM_LEN;
    "nvidia-persiste", as NVIDIA/NVSentinel's kill script matches it). The product reads this to predict a reset."""
    st = state.load(path)
    clients = machine.host_clients(st)
    os.makedirs(root, exist_ok=True)
    modules = ["nvidia 56823808 2 nvidia_drm, Live 0x0000000000000000 (POE)"]
    if "nvidia_drm" in clients:
        modules.insert(0, "nvidia_drm 126976 0 - Live 0x0000000000000000 (POE)")
    with open(os.path.join(root, "modules"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(modules) + "\n")
    for pid, name in enumerate((c for c in clients if c != "nvidia_drm"), start=900):
        os.makedirs(os.path.join(root, str(pid)), exist_ok=True)
        with open(os.path.join(root, str(pid), "comm"), "w", encoding="utf-8") as fh:
            fh.write(name[:15] + "\n")


def reboot(path=None):
    with state.transaction(path) as st:
        machine.reboot(st)


def module_reload(path=None):
    """`modprobe -r nvidia && modprobe nvidia`: the driver reads RmPVMRL again (machine.reload_module)."""
    with state.transaction(path) as st:
        machine.reload_module(st)


def attach(path, pid, used_memory=HOLD_MEMORY):
    """Register ``pid`` as a compute process holding every GPU (as DCGM or a monitoring agent does)."""
    with state.transaction(path) as st:
        for gpu in st["gpus"]:
            gpu["processes"] = [p for p in gpu["processes"] if p.get("pid") != pid]
            gpu["processes"].append({"pid": pid, "used_memory": used_memory})


def detach(path, pid):
    with state.transaction(path) as st:
        for gpu in st["gpus"]:
            gpu["processes"] = [p for p in gpu["processes"] if p.get("pid") != pid]


def hold(path=None):
    """A GPU client for lab hosts (run as a systemd unit): holds every GPU until SIGTERM/SIGINT, then lets go.
    While it runs, GPU instances cannot be destroyed, MIG mode not changed and the GPU not reset (IN_USE)."""
    import signal
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)  # queued from here on: no lost-wakeup race
    pid = os.getpid()
    attach(path, pid)
    try:
        signal.sigwait(stop_signals)
    finally:
        detach(path, pid)


def fault(path, index, kind, **kw):
    """Inject one health fault into gpus[index] of the state (health.FAULTS); raises health.HealthError."""
    with state.transaction(path) as st:
        return health.inject_fault(st, index, kind, **kw)


def show(path=None):
    return state.load(path)


def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(prog="python -m gpusim", description=__doc__)
    ap.add_argument("--state", help="state file (default: $GPUSIM_STATE)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("init", help="write a minimal state with these models")
    p.add_argument("models", nargs="+", choices=sorted(MODELS))
    p.add_argument("--mig", choices=("enabled", "disabled"), default="disabled")
    p.add_argument("--driver-version")
    sub.add_parser("show", help="print the filled-in state")
    p = sub.add_parser("reset", help="GPU reset (nvidia-smi -r): commits pending MIG mode, drops GIs/CIs")
    p.add_argument("-i", "--index", type=int, action="append")
    sub.add_parser("reboot", help="reboot: commits pending MIG modes, drops GIs/CIs and processes")
    sub.add_parser("module-reload", help="reload the nvidia module (reads RmPVMRL from modprobe.d under modprobe_root)")
    sub.add_parser("hold", help="hold every GPU as a client process until SIGTERM (a DCGM-like systemd unit)")
    p = sub.add_parser("fault", help="inject a health fault into one GPU entry of the state")
    p.add_argument("kind", choices=health.FAULTS)
    p.add_argument("xid", nargs="?", type=int, help="the Xid number (fault xid)")
    p.add_argument("-i", "--index", type=int, default=0, help="position in the state's gpus list (default 0)")
    p.add_argument("--count", type=int, default=10, help="ecc-storm: uncorrected errors to add (default 10)")
    p.add_argument("--width", type=int, default=8, help="link-degraded: current link width (default 8)")
    p.add_argument("--gen", type=int, help="link-degraded: also pin the current link generation")
    p.add_argument("--temp", type=int, help="hot: temperature in C (default slowdown threshold + 2)")
    p.add_argument("--pid", type=int, help="xid: process id (default: unknown process)")
    p.add_argument("--name", help="xid: process name")
    p.add_argument("--msg", help="xid: message (default: the catalog text for that Xid)")
    p.add_argument("--t", type=float, help="xid: seconds since boot")
    args = ap.parse_args(argv)
    path = args.state or state.state_path()
    if not path:
        ap.error("give --state or set %s" % state.ENV)
    try:
        if args.cmd == "init":
            write_minimal(path, args.models, args.mig, args.driver_version)
        elif args.cmd == "show":
            print(json.dumps(show(path), indent=1, sort_keys=True))
        elif args.cmd == "reset":
            reset(path, args.index)
        elif args.cmd == "reboot":
            reboot(path)
        elif args.cmd == "module-reload":
            module_reload(path)
        elif args.cmd == "hold":
            hold(path)
        elif args.cmd == "fault":
            fault(path, args.index, args.kind, count=args.count, xid=args.xid, width=args.width, gen=args.gen,
                  temp=args.temp, pid=args.pid, name=args.name, msg=args.msg, t=args.t)
    except machine.Fault as f:
        print("gpusim: %s failed: %s (NVML error %d)" % (args.cmd, f.why, f.code))
        return 1
    except (state.StateError, health.HealthError) as e:
        print("gpusim: %s" % e)
        return 1
    return 0
