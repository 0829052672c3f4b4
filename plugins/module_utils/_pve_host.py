# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pve_gpu_host role's decisions about a Proxmox VE host's passthrough set-up; pure logic, no I/O.

The role reads the host (the systemd-boot command line, the PCI functions in sysfs, iommu_info) and these functions
decide what to write and whether the running kernel matches; its filters (plugins/filter/pve.py) call them.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from ansible_collections.gpuops.provision.plugins.module_utils import _iommu

# `grep -H -s . <sysfs>/*/vendor ...` prints "<path>/<domain:bus:slot.fn>/<attribute>:<value>".
_PCI_LINE = re.compile(r"([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])/(vendor|device|class):(0x[0-9a-fA-F]+)$")


def merge_cmdline(lines: list[str] | None, want: list[str], remove: Iterable[str]) -> str:
    """The systemd-boot command line with the kernel arguments ``want``, other arguments kept in place.

    ``lines``: the non-empty lines of /etc/kernel/cmdline (only the first counts). An existing token equal to a wanted
    one stays where it is (once); a token with the name of exactly one wanted argument is replaced in place
    (intel_iommu=off -> intel_iommu=on); tokens in ``remove`` are dropped; missing wanted ones are appended.
    """
    names = [arg.split("=", 1)[0] for arg in want]
    out: list[str] = []
    done: list[str] = []
    for tok in (lines[0] if lines else "").split():
        name = tok.split("=", 1)[0]
        if tok in remove:
            continue
        if tok in want:
            arg = tok
        elif names.count(name) == 1:
            arg = want[names.index(name)]
        else:
            out.append(tok)
            continue
        if arg not in done:
            out.append(arg)
            done.append(arg)
    out.extend(arg for arg in want if arg not in done)
    return " ".join(out)


def parse_pci_listing(lines: Iterable[str]) -> list[dict[str, str]]:
    """The PCI functions in ``grep -H`` output of their vendor/device/class files, sorted by address.

    Each is {address, vendor, device, class} with the ids in lower case; a function keeps only the attributes found.
    """
    found: dict[str, dict[str, str]] = {}
    for line in lines:
        m = _PCI_LINE.search(line)
        if m:
            found.setdefault(m.group(1), {"address": m.group(1)})[m.group(2)] = m.group(3).lower()
    return sorted(found.values(), key=lambda f: f["address"])


def card_functions(pci: list[dict[str, str]], selected: list[str]) -> list[dict[str, str]]:
    """Every function (with vendor and device ids) of the cards of the ``selected`` GPUs: same domain:bus:slot,
    e.g. a GPU's HDMI audio controller."""
    slots = {_iommu.slot_of(addr) for addr in selected}
    return [f for f in pci if "vendor" in f and "device" in f and _iommu.slot_of(f["address"]) in slots]


def stolen_functions(pci: list[dict[str, str]], taken: list[str], ids: list[str]) -> list[dict[str, str]]:
    """Functions outside ``taken`` whose vendor:device id is in ``ids``: vfio-pci would claim them too."""
    out = []
    for f in pci:
        if "vendor" in f and "device" in f and f["address"] not in taken:
            pid = "%s:%s" % (f["vendor"][2:], f["device"][2:])
            if pid in ids:
                out.append({"address": f["address"], "id": pid})
    return out


def passthrough_problems(iommu: dict[str, Any], kernel_args: list[str], selected: list[str]) -> list[str]:
    """What keeps the running kernel (``iommu``: an iommu_info result) from the planned passthrough set-up."""
    out = []
    if not iommu["active"]:
        out.append("IOMMU is not active (no IOMMU unit in /sys/class/iommu or no IOMMU groups)")
    running = iommu["cmdline"].split()
    out.extend("kernel argument %s is not on the running command line" % arg for arg in kernel_args if arg not in running)
    by_address: dict[str, dict[str, Any]] = {}
    for gpu in iommu["gpus"]:
        by_address.setdefault(gpu["address"], gpu)
    for addr in selected:
        gpu = by_address.get(addr)
        if gpu is None:
            out.append("GPU %s: no IOMMU group" % addr)
            continue
        if not gpu["isolated"]:
            out.append("GPU %s: not isolated: %s" % (addr, gpu["isolation_reason"]))
        if gpu["driver"] != "vfio-pci":
            out.append("GPU %s: bound to %s, not vfio-pci" % (addr, gpu["driver"] or "no driver"))
    return out
