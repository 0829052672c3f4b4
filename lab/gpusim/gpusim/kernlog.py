"""The kernel log of a gpusim host: what `dmesg` prints (lab/gpusim/bin/dmesg), since the last boot.

Xid events are not an NVML reading: the NVIDIA kernel module (NVRM) prints them to the kernel log and health
checks parse `dmesg`/`journalctl -k` (NVIDIA/NVSentinel syslog-health-monitor, leptonai/gpud, DCGM's kmsg reader
`ParseKmsgLineForXid`, whose regex is ``;NVRM: Xid \\(PCI:(.*)\\): (\\d+),.*``). The lines follow the driver's
own format strings, NVIDIA/open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c krcReportXid_IMPL:

* 515.43.04 - 565.57.01: ``NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s`` where an unknown process
  prints ``pid='<unknown>', name=<unknown>`` (``char pid_string[12] = "'<unknown>'"``, procname ``"<unknown>"``);
* 570.86.15 and later: the same when the process is known, ``NVRM: Xid (PCI:%04x:%02x:%02x): %d, %s`` (no
  pid/name at all) when it is not;
* on a MIG GPU the parenthesis carries `` GPU-I:%02u`` and `` GPU-CI:%02u`` (krcGetMigAttributionForError).

The PCI address is lower-case hex without the function (``PCI:0000:cb:00``). Before a GPU's first Xid the driver
logs its UUID and board serial once (_krcLogUuidOnce: ``NVRM: GPU at PCI:%04x:%02x:%02x: %s`` and ``NVRM: GPU
Board Serial Number: %s``); Xid 79 is followed by ``NVRM: GPU %04x:%02x:%02x.%x: GPU has fallen off the bus.``
(src/nvidia/arch/nvalloc/unix/src/osinit.c, NV_DEV_PRINTF with NV_PCI_DEV_FMT). Other kernel lines (boot, PCI
probe, module load) are there so a parser has to filter.
"""

from __future__ import annotations

from .health import XID_MESSAGES, visible
from .models import MODELS

DEFAULT_XID_T0 = 1000.0   # seconds since boot of the first Xid without an explicit "t"
DEFAULT_XID_STEP = 50.0


def _branch(st):
    try:
        return int(str(st.get("driver_version", "")).split(".")[0])
    except ValueError:
        return 0


def _bus(gpu):
    parts = gpu["pci_bus_id"].lower().split(":")
    dom, bus = int(parts[-3], 16), int(parts[-2], 16)
    dev = int(parts[-1].split(".")[0], 16)
    return dom, bus, dev


def xid_line(st, gpu, ev):
    """The message NVRM prints for one Xid event of the state (without the dmesg timestamp)."""
    dom, bus, dev = _bus(gpu)
    attr = "PCI:%04x:%02x:%02x" % (dom, bus, dev)
    if ev.get("gpu_instance_id") is not None:
        attr += " GPU-I:%02u" % int(ev["gpu_instance_id"])
        if ev.get("compute_instance_id") is not None:
            attr += " GPU-CI:%02u" % int(ev["compute_instance_id"])
    msg = ev.get("msg", XID_MESSAGES.get(int(ev["xid"]), ""))
    known = ev.get("pid") is not None
    if known:
        return "NVRM: Xid (%s): %d, pid=%s, name=%s, %s" % (
            attr, ev["xid"], ev["pid"], ev.get("name", "<unknown>"), msg)
    if _branch(st) >= 570:
        return "NVRM: Xid (%s): %d, %s" % (attr, ev["xid"], msg)
    return "NVRM: Xid (%s): %d, pid='<unknown>', name=<unknown>, %s" % (attr, ev["xid"], msg)


def event_times(st):
    """[(gpu, event, seconds since boot)]: an event without "t" comes DEFAULT_XID_STEP after DEFAULT_XID_T0 plus
    its position among all events (deterministic for a minimal state)."""
    out, n = [], 0
    for gpu in st["gpus"]:
        for ev in gpu.get("xid_events", []):
            out.append((gpu, ev, float(ev["t"]) if ev.get("t") is not None else DEFAULT_XID_T0 + DEFAULT_XID_STEP * n))
            n += 1
    return out


def next_time(st):
    """When an Xid injected now happens: DEFAULT_XID_STEP after the latest one (DEFAULT_XID_T0 for the first)."""
    times = [t for _g, _ev, t in event_times(st)]
    return max(times) + DEFAULT_XID_STEP if times else DEFAULT_XID_T0


def records(st):
    """[(seconds since boot, message)] of the kernel log, in time order."""
    out = [
        (0.0, "Linux version 5.15.0-131-generic (buildd@lcy02-amd64-047) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) "
              "11.4.0, GNU ld (GNU Binutils for Ubuntu) 2.38) #141-Ubuntu SMP Fri Jan 10 21:18:28 UTC 2025"),
        (0.0, "Command line: BOOT_IMAGE=/vmlinuz-5.15.0-131-generic root=/dev/mapper/vg0-root ro"),
        (0.412337, "ACPI: PCI Root Bridge [PC00] (domain 0000 [bus 00-16])"),
    ]
    t = 1.104518
    for gpu in st["gpus"]:
        if not gpu.get("present", True):
            continue
        dom, bus, dev = _bus(gpu)
        pci = MODELS[gpu["model"]].pci_device_id
        out.append((t, "pci %04x:%02x:%02x.0: [%04x:%04x] type 00 class 0x030200" % (
            dom, bus, dev, pci & 0xFFFF, pci >> 16)))
        t += 0.000731
    out.append((2.886214, "EXT4-fs (dm-0): mounted filesystem with ordered data mode. Opts: (null). Quota mode: none."))
    if st.get("driver_loaded", True):
        out += [
            (5.271093, "nvidia: module license 'NVIDIA' taints kernel."),
            (5.271101, "Disabling lock debugging due to kernel taint"),
            (5.318712, "nvidia-nvlink: Nvlink Core is being initialized, major device number 234"),
            # kernel-open/nvidia/nv.c "NVRM: loading %s" with pNVRM_ID (utils.mk GENERATE_NVIDSTRING)
            (5.320544, "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  "
                       "(dvs-builder@U16-I2-C03-12-1)  Thu Apr  3 23:14:11 UTC 2025" % st.get("driver_version")),
            (5.412890, "nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  %s"
                       % st.get("driver_version")),
            (6.002177, "[drm] [nvidia-drm] [GPU ID 0x00001700] Loading driver"),
        ]
    out.append((9.337120, "IPv6: ADDRCONF(NETDEV_CHANGE): eno1: link becomes ready"))
    logged = set()
    for gpu, ev, at in sorted(event_times(st), key=lambda r: r[2]):
        dom, bus, dev = _bus(gpu)
        if gpu["uuid"] not in logged:
            out.append((at, "NVRM: GPU at PCI:%04x:%02x:%02x: %s" % (dom, bus, dev, gpu["uuid"])))
            out.append((at, "NVRM: GPU Board Serial Number: %s" % gpu["serial"]))
            logged.add(gpu["uuid"])
        out.append((at, xid_line(st, gpu, ev)))
        if int(ev["xid"]) == 79:
            out.append((at, "NVRM: GPU %04x:%02x:%02x.0: GPU has fallen off the bus." % (dom, bus, dev)))
    for k, line in enumerate(st.get("kernel_log", [])):
        if isinstance(line, str):
            out.append((20.0 + k, line))
        else:
            out.append((float(line.get("t", 20.0 + k)), str(line["msg"])))
    out.sort(key=lambda r: r[0])  # stable: same-time lines keep their order
    return out


def xids(st):
    """[(NVML index or None, xid)] of the log, for tests and reports; index None = the GPU is not enumerated."""
    vis = visible(st)
    return [(vis.index(g) if g in vis else None, int(ev["xid"])) for g in st["gpus"] for ev in g.get("xid_events", [])]
