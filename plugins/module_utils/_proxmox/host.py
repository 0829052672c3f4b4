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

from ansible_collections.gpuops.provision.plugins.module_utils._gpu import iommu as gpu_iommu

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
    slots = {gpu_iommu.slot_of(addr) for addr in selected}
    return [f for f in pci if "vendor" in f and "device" in f and gpu_iommu.slot_of(f["address"]) in slots]


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
    # VFIO refuses to assign a device without interrupt remapping unless vfio_iommu_type1 allow_unsafe_interrupts=1
    # (pve-docs qm-pci-passthrough.adoc), which is reported (the host's facts), not hidden in a warning.
    if iommu.get("interrupt_remapping") is False and not iommu.get("allow_unsafe_interrupts"):
        out.append("interrupt remapping is off (firmware, or intremap=off): VFIO refuses passthrough; enable it in the "
                   "firmware, or accept the risk with 'options vfio_iommu_type1 allow_unsafe_interrupts=1'")
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


# --------------------------------------------------------------------------- NVIDIA vGPU hosts

# What a host running NVIDIA vGPU shows in sysfs (pve-common SysFSTools::lspci, qemu-server PCI/Mdev.pm
# get_mdev_types): SR-IOV virtual functions enabled on a GPU, the nvidia/ interface of the vGPU driver on kernels >= 6.8
# (creatable_vgpu_types), the classic mdev types of older GPUs; a virtual function points at its physfn.
_VGPU_LINE = re.compile(r"([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])/(sriov_numvfs:(\d+)|nvidia/creatable_vgpu_types|"
                        r"mdev_supported_types|physfn)$")
_VGPU_WHAT = {"nvidia/creatable_vgpu_types": "nvidia/creatable_vgpu_types (NVIDIA vGPU driver)",
              "mdev_supported_types": "mdev_supported_types (mediated device types)",
              "physfn": "is an SR-IOV virtual function"}


def vgpu_evidence(lines: Iterable[str], manager_units: Iterable[str]) -> dict[str, Any]:
    """What says a host runs NVIDIA vGPU, from ``grep -H . */sriov_numvfs`` and ``ls -d */nvidia/creatable_vgpu_types
    */mdev_supported_types */physfn`` lines over <sysfs>/bus/pci/devices and the nvidia-vgpu-mgr unit files found.

    Returns {devices: {address: [reasons]}, manager: [unit files]} (only NVIDIA-unrelated lines are ignored by the
    caller's listing: these paths exist only on devices whose driver offers them).
    """
    devices: dict[str, list[str]] = {}
    for line in lines:
        m = _VGPU_LINE.search(line.strip())
        if not m:
            continue
        if m.group(3) is not None:
            if int(m.group(3)) > 0:
                devices.setdefault(m.group(1), []).append("%s SR-IOV virtual functions enabled" % m.group(3))
            continue
        devices.setdefault(m.group(1), []).append(_VGPU_WHAT[m.group(2)])
    return {"devices": {a: devices[a] for a in sorted(devices)}, "manager": sorted(set(manager_units))}


def vgpu_conflicts(evidence: dict[str, Any], selected: list[str], blacklist: list[str]) -> list[str]:
    """How the passthrough set-up would break NVIDIA vGPU on this host: a selected GPU (or a function of its card) that
    serves vGPUs would go to vfio-pci, and a blacklisted nvidia module stops the vGPU manager for every vGPU VM at the
    next boot. Empty when the host shows no vGPU (or the set-up leaves it alone)."""
    out = []
    cards = {gpu_iommu.slot_of(a) for a in selected}
    for addr, why in evidence["devices"].items():
        if addr in selected or gpu_iommu.slot_of(addr) in cards:
            out.append("GPU %s would be handed to vfio-pci but serves NVIDIA vGPU (%s)" % (addr, ", ".join(why)))
    if "nvidia" in blacklist and (evidence["devices"] or evidence["manager"]):
        found = ["%s: %s" % (a, ", ".join(w)) for a, w in evidence["devices"].items()] + evidence["manager"]
        out.append("blacklisting nvidia would stop the NVIDIA vGPU host driver (%s)" % "; ".join(found))
    return out


_SRIOV_LINE = re.compile(r"([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])/sriov_totalvfs:(\d+)$")


def vgpu_host_problems(pci: list[dict[str, str]], lines: Iterable[str]) -> list[str]:
    """What keeps the NVIDIA GPUs of a host from serving vGPUs after the vGPU host set-up (pve-docs "NVIDIA vGPU on
    Proxmox VE"): an SR-IOV GPU (sriov_totalvfs > 0, Ampere and newer) needs its virtual functions enabled
    (pve-nvidia-sriov@ALL.service, sriov-manage -e ALL) and the vGPU driver's nvidia/creatable_vgpu_types on its VFs;
    an older GPU needs creatable types or mdev types on itself. ``pci``: parse_pci_listing() of the host; ``lines``:
    the listing of vgpu_evidence() plus ``grep -H . */sriov_totalvfs`` lines."""
    lines = [line.strip() for line in lines]
    evidence = vgpu_evidence(lines, [])["devices"]
    total = {m.group(1): int(m.group(2)) for m in (_SRIOV_LINE.search(line) for line in lines) if m}
    vfs = [a for a, why in evidence.items() if _VGPU_WHAT["physfn"] in why]
    typed_vfs = [a for a in vfs if _VGPU_WHAT["nvidia/creatable_vgpu_types"] in evidence[a]]
    out = []
    gpus = [f["address"] for f in pci if f.get("vendor") == gpu_iommu.NVIDIA_VENDOR
            and f.get("class", "").startswith(gpu_iommu.DISPLAY_CLASS_PREFIX) and f["address"] not in vfs]
    if not gpus:
        return ["no NVIDIA GPU found"]
    for gpu in gpus:
        why = evidence.get(gpu, [])
        if total.get(gpu, 0) > 0:
            if not any(w.endswith("SR-IOV virtual functions enabled") for w in why):
                out.append("GPU %s: SR-IOV capable (%d virtual functions) but none enabled (pve-nvidia-sriov@ALL.service "
                           "runs sriov-manage -e ALL)" % (gpu, total[gpu]))
            elif not [v for v in typed_vfs if v[:7] == gpu[:7]]:  # VFs sit on their PF's bus
                out.append("GPU %s: virtual functions enabled but none has nvidia/creatable_vgpu_types (is the NVIDIA "
                           "vGPU host driver loaded?)" % gpu)
        elif not [w for w in why if w in (_VGPU_WHAT["nvidia/creatable_vgpu_types"], _VGPU_WHAT["mdev_supported_types"])]:
            out.append("GPU %s: no vGPU types (neither nvidia/creatable_vgpu_types nor mdev_supported_types; is the NVIDIA "
                       "vGPU host driver loaded?)" % gpu)
    return out


def helper_done(lines: Iterable[str]) -> bool:
    """Whether what ``pve-nvidia-vgpu-helper setup`` leaves is there: a ``blacklist nouveau`` line in modprobe.d and a
    dkms command (``grep -h`` of the blacklist lines and ``command -v dkms`` output)."""
    lines = [line.strip() for line in lines]
    return any(re.match(r"blacklist\s+nouveau\b", line) for line in lines) and any(line.endswith("/dkms") for line in lines)


def passthrough_files(files: Iterable[tuple[str, str]]) -> list[str]:
    """The files (path, text) that set a host up for VFIO passthrough of NVIDIA GPUs: ``options vfio-pci ids=``
    naming an NVIDIA id, or ``blacklist nvidia``."""
    out = []
    for path, text in files:
        if re.search(r"(?m)^\s*(options\s+vfio-pci\s+ids=\S*10de:|blacklist\s+nvidia\s*$)", text):
            out.append(path)
    return out
