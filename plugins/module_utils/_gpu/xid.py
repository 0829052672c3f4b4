# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA Xid events in a kernel log, NVIDIA's Xid catalog, and what they mean for a node; pure logic, no I/O.

The lines follow the driver's own format strings: NVIDIA/open-gpu-kernel-modules,
src/nvidia/src/kernel/gpu/rc/kernel_rc.c, krcReportXid_IMPL, read at the first tag of each branch from 515.43.04 to
595.44.02 and at 595.45.04:

* ``NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s``: the process that owns the channel in error (or, from
  R570 on, the one the driver is serving);
* before R570 an unknown process is printed ``pid='<unknown>', name=<unknown>``; from R570 (570.86.15) on there is
  no pid/name at all: ``NVRM: Xid (PCI:%04x:%02x:%02x): %d, %s``;
* with MIG the attribution follows the address: ``PCI:0000:17:00 GPU-I:01 GPU-CI:00`` or ``PCI:0000:17:00 GPU-I:01``;
* from R575 on, Xid 45 may end in `` caused by previous Xid %d`` (kept in the message).

Logs of older, closed drivers show a pid without a name (``79, pid=0, GPU has fallen off the bus.``) and the oldest
no ``PCI:`` (``NVRM: Xid (0000:03:00): 14, Channel 00000001``, the example on the catalog page); both are read too.

Catalog: "Analyzing Xid Errors with the Xid Catalog", Ampere and newer GPUs,
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (table "Xids", column "Resolution Bucket
(Immediate Action)").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Optional

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"

# code -> (mnemonic, description, immediate action), as the catalog's "Xids" table has them. Only codes a health gate
# acts on; a code the catalog has no row for is left out (classify() says "unknown" for it).
CATALOG = {
    8: ("ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", "RESTART_APP"),
    13: ("ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY", "Graphics Engine Exception", "RESTART_APP"),
    31: ("ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", "RESTART_APP"),
    32: ("ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream", "RESTART_APP"),
    38: ("ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "Driver firmware error", "IGNORE"),
    43: ("ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", "IGNORE"),
    45: ("ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
         "Preemptive cleanup, due to previous errors \u2013 Most likely to see when running multiple cuda applications"
         " and hitting a DBE", "WORKFLOW_XID_45"),
    46: ("ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", "RESET_GPU"),
    48: ("ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", "WORKFLOW_XID_48"),
    54: ("SILENT_RUNNING_PWR_REDUCED_CLOCKING", "Auxiliary power is not connected to the GPU board",
         "CHECK_MECHANICALS"),
    # 56-58, 61, 122, 123: "Unused" on Ampere and newer (deprecated, or V100 and older)
    56: ("DISPLAY_CHANNEL_EXCEPTION", "Unused", "CONTACT_SUPPORT"),
    57: ("FB_LINK_TRAINING_FAILURE_ERROR", "Unused", "CONTACT_SUPPORT"),
    58: ("FB_MEMORY_ERROR", "Unused", "CONTACT_SUPPORT"),
    61: ("PMU_BREAKPOINT", "Unused", "CONTACT_SUPPORT"),
    62: ("PMU_HALT_ERROR", "Internal micro-controller halt (newer drivers)", "RESET_GPU"),
    63: ("INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", "IGNORE"),
    64: ("INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", "RESET_GPU"),
    68: ("ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 Exception", "RESTART_APP"),
    69: ("ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", "RESTART_APP"),
    74: ("NVLINK_ERROR", "NVLINK Error", "WORKFLOW_NVLINK_ERR"),
    79: ("ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM"),
    92: ("EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", "IGNORE"),
    94: ("ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error", "RESTART_APP"),
    95: ("ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", "RESET_GPU"),
    109: ("ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context Switch Timeout Error", "RESET_GPU"),
    110: ("SEC_FAULT_ERROR", "Security Fault Error", "RESET_GPU"),
    119: ("GSP_RPC_TIMEOUT", "GSP RPC Timeout", "RESET_GPU"),
    120: ("GSP_ERROR", "GSP Error", "RESET_GPU"),
    121: ("C2C_ERROR", "C2C Error", "IGNORE"),
    122: ("SPI_PMU_RPC_READ_FAIL", "Unused", "CONTACT_SUPPORT"),
    123: ("SPI_PMU_RPC_WRITE_FAIL", "Unused", "CONTACT_SUPPORT"),
    136: ("ALI_TRAINING_FAIL", "Link Training Failed", "RESET_GPU"),
    140: ("UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC Unrecovered Error", "RESET_GPU"),
    143: ("GPU_INIT_ERROR", "GPU Initialization Error", "RESET_GPU"),
    144: ("NVLINK_SAW_ERROR", "NVLINK: SAW Error", "WORKFLOW_NVLINK5_ERR"),
    145: ("NVLINK_RLW_ERROR", "NVLINK: RLW Error", "WORKFLOW_NVLINK5_ERR"),
    146: ("NVLINK_TLW_ERROR", "NVLINK: TLW Error", "WORKFLOW_NVLINK5_ERR"),
    147: ("NVLINK_TREX_ERROR", "NVLINK: TREX Error", "WORKFLOW_NVLINK5_ERR"),
    148: ("NVLINK_NVLPW_CTRL_ERROR", "NVLINK: NVLPW_CTRL Error", "WORKFLOW_NVLINK5_ERR"),
    149: ("NVLINK_NETIR_ERROR", "NVLINK: NETIR Error", "WORKFLOW_NVLINK5_ERR"),
    150: ("NVLINK_MSE_ERROR", "NVLINK: MSE Error", "WORKFLOW_NVLINK5_ERR"),
    151: ("ROBUST_CHANNEL_KEY_ROTATION_ERROR", "Key rotation Error", "RESTART_VM"),
    154: ("GPU_RECOVERY_ACTION_CHANGED", "GPU Recovery Action Changed", "XID_154"),
    155: ("NVLINK_SW_DEFINED_ERROR", "NVLINK: SW Defined Error", "RESET_GPU"),
    158: ("GPU_FATAL_TIMEOUT", "GPU Fatal Timeout", "RESET_GPU"),
}

# Immediate actions that take the node out of service ("node"); every other action in CATALOG is "app" (the
# application's fault or nothing to do: RESTART_APP, IGNORE, and WORKFLOW_XID_45, a cleanup that follows another Xid).
NODE_ACTIONS = (
    "RESET_GPU", "RESTART_BM", "RESTART_VM",
    "WORKFLOW_XID_48",       # catalog: solo RESET_GPU, with 63/64 DRAIN_AND_RESET
    "WORKFLOW_NVLINK_ERR",   # Xid 74: "A GPU reset or node reboot is needed to clear this error"
    "WORKFLOW_NVLINK5_ERR",  # 144-150: RESET_GPU or IGNORE by an intrInfo/errorStatus decode not done here
    "CHECK_MECHANICALS",     # someone has to reseat or reconnect the board
    "CONTACT_SUPPORT",       # an "Unused" code on Ampere+: no recovery the node can do itself
)

# Xid 154 (immediate action XID_154, "Follow XID 154 reported guidance") carries the driver's own verdict:
# gpu.c: "GPU recovery action changed from 0x%x (%s) to 0x%x (%s)"; the names are _gpuRecoveryActionName's.
_RECOVERY_CHANGED_RE = re.compile(r"recovery action changed from .* to 0x[0-9a-fA-F]+ \((?P<action>[^)]*)\)")
_RECOVERY_NONE = "None"

# "NVRM: Xid (" anchors the match: NVSwitch errors are printed "nvidia-nvswitch%d: SXid (PCI:...): %05d, ..." (SXid,
# src/common/nvswitch/kernel/inc/common_nvswitch.h), a separate catalog with its own codes, and are not Xids.
# Domain %04x (up to 8 digits), bus and device %02x; MIG instance ids %02u.
_XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})"
    r"(?: GPU-I:(?P<gi>\d+))?(?: GPU-CI:(?P<ci>\d+))?\): (?P<xid>\d+),(?P<rest>.*)"
)
# dmesg "[ 1234.567890] ", also inside journalctl's short-monotonic prefix; dmesg -T/--notime carry no seconds.
_STAMP_RE = re.compile(r"\[\s*(?P<s>\d+\.\d+)\]")
# /dev/kmsg: "prio,seq,usec,flags[,...];message"
_KMSG_RE = re.compile(r"^\d+,\d+,(?P<us>\d+),[^;]*;")
_UNKNOWN = ("<unknown>", "'<unknown>'")


def _text(text: object) -> str:
    if text is None:
        return ""
    if isinstance(text, (bytes, bytearray)):
        return bytes(text).decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise TypeError("kernel log must be text or bytes, not %s" % type(text).__name__)
    return text


def _time(prefix: str) -> Optional[float]:
    stamp = _STAMP_RE.search(prefix)
    if stamp:
        return float(stamp.group("s"))
    kmsg = _KMSG_RE.match(prefix)
    if kmsg:
        return int(kmsg.group("us")) / 1e6
    return None


def _process(rest: str) -> tuple[Optional[int], Optional[str], str]:
    """(pid, process, message) from what follows "<code>,"."""
    rest = rest[1:] if rest.startswith(" ") else rest
    pid = name = None
    if rest.startswith("pid="):
        token, sep, rest = rest[4:].partition(",")
        token = token.strip()
        pid = int(token) if token.isdigit() else None
        rest = rest[1:] if sep and rest.startswith(" ") else rest
        if rest.startswith("name="):
            name, sep, rest = rest[5:].partition(", ")
            if not sep and name.endswith(","):  # empty message, trailing blank stripped by the logger
                name = name[:-1]
            if name in _UNKNOWN or not name:
                name = None
    return pid, name, rest.rstrip()


def parse(text: object) -> list[dict[str, Any]]:
    """The Xid events of a kernel log (dmesg, dmesg --notime, journalctl -k, /dev/kmsg), one dict per line.

    Keys: xid, pci (lower-case, as printed: "0000:17:00"), pid and process (None when the driver printed none or
    "<unknown>"), gpu_instance and compute_instance (MIG, else None), message, time (the [seconds] stamp or None),
    line. None gives []; bytes are read as UTF-8 with replacement.
    """
    events = []
    for line in _text(text).splitlines():
        match = _XID_RE.search(line)
        if not match:
            continue
        pid, name, message = _process(match.group("rest"))
        gi, ci = match.group("gi"), match.group("ci")
        events.append({
            "xid": int(match.group("xid")),
            "pci": match.group("pci").lower(),
            "pid": pid,
            "process": name,
            "gpu_instance": int(gi) if gi is not None else None,
            "compute_instance": int(ci) if ci is not None else None,
            "message": message,
            "time": _time(line[:match.start()]),
            "line": line,
        })
    return events


def slot_of(pci_address: Optional[str]) -> str:
    """The part of a GPU's PCI address an Xid line names ("0000:17:00.0" -> "0000:17:00", as ``parse`` gives it)."""
    return str(pci_address or "").lower().rsplit(".", 1)[0]


def classify(code: int, message: Optional[str] = None) -> str:
    """What an Xid means for its node: "node", "app" or "unknown".

    "node": the node must leave service (its immediate action is in NODE_ACTIONS); "app": it may stay (the
    application's fault, or nothing to do); "unknown": no row in CATALOG. For Xid 154 the new recovery action in its
    message decides ("None" is "app"); without a message, or one that names no action, 154 is "node".
    """
    row = CATALOG.get(code)
    if row is None:
        return "unknown"
    if row[2] == "XID_154":
        changed = _RECOVERY_CHANGED_RE.search(message or "")
        return "app" if changed and changed.group("action") == _RECOVERY_NONE else "node"
    return "node" if row[2] in NODE_ACTIONS else "app"


def summary(events: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per PCI address: {"codes": sorted codes, "count": events, "node_codes": sorted codes classified "node",
    "last": the last event}. Of several Xid 154 events only the last counts: it is the driver's current verdict."""
    out: dict[str, dict[str, Any]] = {}
    last154: dict[str, Mapping[str, Any]] = {}
    for event in events:
        entry = out.setdefault(event["pci"], {"codes": set(), "count": 0, "node_codes": set(), "last": None})
        entry["codes"].add(event["xid"])
        entry["count"] += 1
        entry["last"] = event
        if CATALOG.get(event["xid"], ("", "", ""))[2] == "XID_154":
            last154[event["pci"]] = event
        elif classify(event["xid"], event.get("message")) == "node":
            entry["node_codes"].add(event["xid"])
    for pci, event in last154.items():
        if classify(event["xid"], event.get("message")) == "node":
            out[pci]["node_codes"].add(event["xid"])
    for entry in out.values():
        entry["codes"] = sorted(entry["codes"])
        entry["node_codes"] = sorted(entry["node_codes"])
    return out
