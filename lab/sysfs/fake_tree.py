"""Build a fake /sys + /proc tree the way the kernel lays it out, for tests and lab containers.

The spec is JSON-friendly::

    {"cmdline": "BOOT_IMAGE=... intel_iommu=on iommu=pt",
     "iommu_units": {"dmar0": {"ecap": "0xf020de"}},          # /sys/class/iommu/<unit>
     "devices": [{"address": "0000:17:00.0", "vendor": "0x10de", "device": "0x20b0",
                  "class": "0x030200", "driver": "vfio-pci", "group": 14,
                  "files": {"sriov_totalvfs": "16"}}],                   # files under the device; a VF has "physfn"
     "modules": {"nvidia": {"version": "550.163.01"}}}         # /sys/module/<name>/...

Devices live under sys/devices/pci0000:00/<address>; sys/bus/pci/devices/<address>, the group's devices/<address>,
<dev>/iommu_group and <dev>/driver are relative symlinks, as on a real host.
"""

from __future__ import annotations

import json
import os
import sys


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text + "\n")


def _symlink(target_abs, link_abs):
    os.makedirs(os.path.dirname(link_abs), exist_ok=True)
    os.symlink(os.path.relpath(target_abs, os.path.dirname(link_abs)), link_abs)


def build(root, spec):
    """Create the tree under root (which must not hold an earlier tree) and return root."""
    sysdir = os.path.join(root, "sys")
    _write(os.path.join(root, "proc", "cmdline"), spec.get("cmdline", "BOOT_IMAGE=/boot/vmlinuz ro quiet"))
    os.makedirs(os.path.join(sysdir, "class", "iommu"), exist_ok=True)
    for unit, attrs in spec.get("iommu_units", {}).items():
        unit_dir = os.path.join(sysdir, "devices", "virtual", "iommu", unit)
        os.makedirs(unit_dir, exist_ok=True)
        if "ecap" in attrs:
            _write(os.path.join(unit_dir, "intel-iommu", "ecap"), attrs["ecap"])
        _symlink(unit_dir, os.path.join(sysdir, "class", "iommu", unit))
    for dev in spec.get("devices", []):
        dev_dir = os.path.join(sysdir, "devices", "pci0000:00", dev["address"])
        for attr in ("vendor", "device", "class", "subsystem_vendor", "subsystem_device"):
            if attr in dev:
                _write(os.path.join(dev_dir, attr), str(dev[attr]))
        _symlink(dev_dir, os.path.join(sysdir, "bus", "pci", "devices", dev["address"]))
        if dev.get("driver"):
            drv_dir = os.path.join(sysdir, "bus", "pci", "drivers", dev["driver"])
            os.makedirs(drv_dir, exist_ok=True)
            _symlink(drv_dir, os.path.join(dev_dir, "driver"))
        # SR-IOV and vGPU attributes as files relative to the device (sriov_totalvfs, sriov_numvfs,
        # nvidia/creatable_vgpu_types, mdev_supported_types/<type>/...), and a VF's physfn link to its PF.
        for rel, text in dev.get("files", {}).items():
            _write(os.path.join(dev_dir, rel), str(text))
        if dev.get("physfn"):
            _symlink(os.path.join(sysdir, "devices", "pci0000:00", dev["physfn"]), os.path.join(dev_dir, "physfn"))
        if dev.get("group") is not None:
            group_dir = os.path.join(sysdir, "kernel", "iommu_groups", str(dev["group"]))
            os.makedirs(os.path.join(group_dir, "devices"), exist_ok=True)
            _symlink(dev_dir, os.path.join(group_dir, "devices", dev["address"]))
            _symlink(group_dir, os.path.join(dev_dir, "iommu_group"))
    for name, params in spec.get("modules", {}).items():
        mod_dir = os.path.join(sysdir, "module", name)
        os.makedirs(mod_dir, exist_ok=True)
        for key, value in params.items():
            if key == "parameters":
                for pname, pvalue in value.items():
                    _write(os.path.join(mod_dir, "parameters", pname), str(pvalue))
            else:
                _write(os.path.join(mod_dir, key), str(value))
    return root


if __name__ == "__main__":
    # python lab/sysfs/fake_tree.py SPEC.json ROOT
    with open(sys.argv[1], encoding="utf-8") as spec_file:
        build(sys.argv[2], json.load(spec_file))
