# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reads of /proc and /sys, relative to a root directory so tests (and containers) can use a fake tree."""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Iterable
from typing import Any, Optional

PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z")
HEX_ID = re.compile(r"^0x[0-9a-f]+\Z")


class SysfsError(Exception):
    """Sysfs content that does not look like what the kernel writes; the message names the path."""


def _path(root: str, *parts: str) -> str:
    return os.path.join(root, *(p.lstrip("/") for p in parts))


# Files a user can point a module at (cmdline_path, gridd_conf, a token) may be a FIFO or a device, whose open() or
# read() blocks for ever (issue 37 point 11). Such paths are opened without blocking and read only when they are
# regular files (procfs and sysfs attributes are), at most READ_LIMIT bytes within READ_TIMEOUT seconds.
READ_LIMIT = 1 << 20
READ_TIMEOUT = 10.0


def read_file(path: str, timeout: float = READ_TIMEOUT, limit: int = READ_LIMIT) -> str:
    """The UTF-8 text of the regular file ``path``. Raises FileNotFoundError when it does not exist and SysfsError,
    naming the path, when it is not a regular file, not UTF-8, too large, too slow or unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise SysfsError("cannot read %s: %s" % (path, exc.strerror or exc)) from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else \
                "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file"
            raise SysfsError("%s is not a regular file (it is %s): only regular files are read" % (path, kind))
        deadline = time.monotonic() + timeout
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise SysfsError("%s is larger than %d bytes: not read" % (path, limit))
            chunks.append(chunk)
            if time.monotonic() > deadline:
                raise SysfsError("reading %s took longer than %g s: not read" % (path, timeout))
    except OSError as exc:
        raise SysfsError("cannot read %s: %s" % (path, exc.strerror or exc)) from exc
    finally:
        os.close(fd)
    data = b"".join(chunks)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SysfsError("%s is not UTF-8 text (byte 0x%02x at offset %d)" % (path, data[exc.start], exc.start)) from exc


def read_text(path: str, default: Optional[str] = None) -> Optional[str]:
    try:
        return read_file(path).strip()
    except FileNotFoundError:
        return default


def _hex_attr(dev_dir: str, name: str, required: bool = True) -> Optional[str]:
    path = os.path.join(dev_dir, name)
    value = read_text(path)
    if value is None:
        if required:
            raise SysfsError("%s is missing" % path)
        return None
    value = value.lower()
    if not HEX_ID.match(value):
        raise SysfsError("%s holds %r, expected a hexadecimal id such as 0x10de" % (path, value))
    return value


def _link_name(path: str) -> Optional[str]:
    """Basename of a symlink's target (driver, iommu_group, physfn), or None if absent."""
    try:
        return os.path.basename(os.readlink(path))
    except FileNotFoundError:
        return None
    except OSError as exc:
        if os.path.isdir(path):  # fake trees may use a plain directory named after the driver
            return None
        raise SysfsError("cannot read link %s: %s" % (path, exc)) from exc


def pci_device(root: str, address: str, dev_dir: Optional[str] = None) -> dict[str, Any]:
    """Identity and binding of one PCI function from /sys/bus/pci/devices/<address>."""
    if not PCI_ADDRESS.match(address):
        raise SysfsError("%r under %s is not a PCI address (domain:bus:slot.function)" % (address, dev_dir or root))
    dev_dir = dev_dir or _path(root, "sys/bus/pci/devices", address)
    group = _link_name(os.path.join(dev_dir, "iommu_group"))
    return {
        "address": address,
        "vendor": _hex_attr(dev_dir, "vendor"),
        "device": _hex_attr(dev_dir, "device"),
        "class": _hex_attr(dev_dir, "class"),
        "subsystem_vendor": _hex_attr(dev_dir, "subsystem_vendor", required=False),
        "subsystem_device": _hex_attr(dev_dir, "subsystem_device", required=False),
        "driver": _link_name(os.path.join(dev_dir, "driver")),
        "iommu_group": int(group) if group and group.isdigit() else None,
    }


def iommu_groups(root: str) -> list[dict[str, Any]]:
    """Every IOMMU group with its PCI functions, sorted by group number."""
    base = _path(root, "sys/kernel/iommu_groups")
    if not os.path.isdir(base):
        return []
    groups = []
    for name in os.listdir(base):
        if not name.isdigit():
            raise SysfsError("%s/%s is not a numbered IOMMU group" % (base, name))
        devices_dir = os.path.join(base, name, "devices")
        addresses = sorted(os.listdir(devices_dir)) if os.path.isdir(devices_dir) else []
        devices = [pci_device(root, addr, os.path.join(devices_dir, addr)) for addr in addresses]
        for dev in devices:
            dev["iommu_group"] = int(name)
        groups.append({"id": int(name), "devices": devices})
    return sorted(groups, key=lambda g: g["id"])


def class_iommu_units(root: str) -> list[str]:
    base = _path(root, "sys/class/iommu")
    return sorted(os.listdir(base)) if os.path.isdir(base) else []


def intel_ecaps(root: str, units: Iterable[str]) -> list[str]:
    """The ecap register of every Intel DMAR unit that exposes it."""
    values = []
    for unit in units:
        path = _path(root, "sys/class/iommu", unit, "intel-iommu/ecap")
        value = read_text(path)
        if value is None:
            continue
        if not re.match(r"^(0x)?[0-9a-fA-F]+\Z", value):
            raise SysfsError("%s holds %r, expected a hexadecimal register value" % (path, value))
        values.append(value)
    return values


def unsafe_interrupts(root: str) -> Optional[bool]:
    value = read_text(_path(root, "sys/module/vfio_iommu_type1/parameters/allow_unsafe_interrupts"))
    return None if value is None else value in ("Y", "1")


def kernel_cmdline(root: str, cmdline_path: Optional[str] = None) -> str:
    path = cmdline_path or _path(root, "proc/cmdline")
    text = read_text(path)
    if text is None:
        raise SysfsError("%s does not exist" % path)
    return text
