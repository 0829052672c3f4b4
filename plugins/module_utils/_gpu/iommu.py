# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""IOMMU facts from already-read data (pure: no file access; _gpu/sysfs.py does the reading)."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

NVIDIA_VENDOR = "0x10de"
# PCI base classes: 0x03 display controller (0x0300 VGA, 0x0302 3D), 0x0604 PCI-to-PCI bridge.
DISPLAY_CLASS_PREFIX = "0x03"
BRIDGE_CLASS_PREFIX = "0x0604"
# Intel VT-d extended capability register: bit 3 is Interrupt Remapping support.
INTEL_ECAP_IR_BIT = 1 << 3


def parse_cmdline(text: Optional[str]) -> dict[str, Optional[str]]:
    """Split a kernel command line into an ordered dict; a bare flag maps to None, a repeated key keeps the last value."""
    args: dict[str, Optional[str]] = {}
    for token in shlex.split(text or "", posix=True):
        key, sep, value = token.partition("=")
        args[key] = value if sep else None
    return args


def iommu_kind(class_iommu_names: Iterable[str], cmdline: Mapping[str, Optional[str]]) -> Optional[str]:
    """Which IOMMU the kernel registered (from /sys/class/iommu entry names), else what the command line asks for."""
    names = list(class_iommu_names)
    if any(n.startswith("dmar") for n in names):
        return "intel"
    if any(n.startswith("ivhd") for n in names):
        return "amd"
    if any("smmu" in n for n in names):
        return "arm-smmu"
    if names:
        return "other"
    if "intel_iommu" in cmdline:
        return "intel"
    if "amd_iommu" in cmdline:
        return "amd"
    return None


def passthrough_mode(cmdline: Mapping[str, Optional[str]]) -> bool:
    """True when DMA translation is bypassed for host devices (iommu=pt or iommu.passthrough=1)."""
    if cmdline.get("iommu") == "pt":
        return True
    return cmdline.get("iommu.passthrough") in ("1", "y", "Y", "on")


def interrupt_remapping(kind: Optional[str], cmdline: Mapping[str, Optional[str]], intel_ecaps: Optional[Iterable[str]]) -> Optional[bool]:
    """True/False when it can be known, None otherwise.

    The kernel turns remapping off with intremap=off or nointremap whatever the hardware has. On Intel the ecap register
    says whether the hardware supports it; the kernel enables it when supported. AMD exposes no equivalent in sysfs.
    """
    if cmdline.get("intremap") == "off" or "nointremap" in cmdline:
        return False
    if kind == "intel" and intel_ecaps:
        return all(int(ecap, 16) & INTEL_ECAP_IR_BIT for ecap in intel_ecaps)
    return None


def is_nvidia_gpu(device: Mapping[str, Any]) -> bool:
    return device["vendor"] == NVIDIA_VENDOR and device["class"].startswith(DISPLAY_CLASS_PREFIX)


def slot_of(address: str) -> str:
    """'0000:01:00.1' -> '0000:01:00' (the physical device; functions share it)."""
    return address.rsplit(".", 1)[0]


def gpu_isolation(gpu: Mapping[str, Any], group_devices: Iterable[Mapping[str, Any]]) -> tuple[bool, str]:
    """Is the GPU's IOMMU group safe to pass through whole?

    Isolated means every other member is another function of the same card (its audio or USB-C controller) or a PCI
    bridge: those go to the VM with it or stay inert. Anything else would be handed to the VM too, or block vfio-pci.
    """
    foreign = [
        d["address"] for d in group_devices
        if d["address"] != gpu["address"]
        and slot_of(d["address"]) != slot_of(gpu["address"])
        and not d["class"].startswith(BRIDGE_CLASS_PREFIX)
    ]
    if foreign:
        return False, "IOMMU group %s also holds %s" % (gpu["iommu_group"], ", ".join(sorted(foreign)))
    return True, "IOMMU group %s holds only this card's functions and bridges" % gpu["iommu_group"]


def summarize(cmdline_text: str, class_iommu_names: Sequence[str], intel_ecaps: Optional[Iterable[str]],
              groups: Sequence[Mapping[str, Any]], unsafe_interrupts: Optional[bool] = None) -> dict[str, Any]:
    """Build the iommu_info result from raw readings.

    groups: list of {"id": int, "devices": [{"address", "vendor", "device", "class", "driver", ...}]}.
    """
    cmdline = parse_cmdline(cmdline_text)
    kind = iommu_kind(class_iommu_names, cmdline)
    gpus: list[dict[str, Any]] = []
    for group in groups:
        for dev in group["devices"]:
            if is_nvidia_gpu(dev):
                gpu = dict(dev, iommu_group=group["id"])
                gpu["isolated"], gpu["isolation_reason"] = gpu_isolation(gpu, group["devices"])
                gpu["group_members"] = [d["address"] for d in group["devices"]]
                gpus.append(gpu)
    relevant = ("intel_iommu", "amd_iommu", "iommu", "iommu.passthrough", "intremap", "vfio-pci.ids", "pcie_acs_override")
    return {
        # Groups exist only when an IOMMU translates DMA; /sys/class/iommu alone can list a unit the kernel left off.
        "active": bool(groups) and bool(class_iommu_names),
        "kind": kind,
        "passthrough": passthrough_mode(cmdline),
        "interrupt_remapping": interrupt_remapping(kind, cmdline, intel_ecaps),
        "allow_unsafe_interrupts": unsafe_interrupts,
        "units": sorted(class_iommu_names),
        "kernel_args": {k: cmdline[k] for k in relevant if k in cmdline},
        "cmdline": cmdline_text.strip(),
        "groups": groups,
        "gpus": gpus,
    }
