"""The kernel files NVIDIA's Go tools read beside libnvidia-ml, written from a gpusim state (issue 42).

mig-parted lists GPUs from sysfs, not from NVML: ``cmd/nvidia-mig-parted/util/device.go`` GetGPUDeviceIDs asks
``util/nvml.go`` IsNvidiaModuleLoaded (an ``nvidia`` line in /proc/modules), then walks go-nvlib's
``pkg/nvpci/nvpci.go`` GetGPUs (/sys/bus/pci/devices/<bdf>/vendor, class, device, numa_node, resource; driver and
iommu_group optional) and keeps each address for which ``nvmlDeviceGetHandleByPciBusId_v2`` answers. This writes that
tree with lab/sysfs/fake_tree.py: the state's GPUs under their bus ids, bound to ``nvidia``; ``kernel-view.sh`` shows it
to a command as /sys and /proc/modules.
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "sysfs"))
import fake_tree  # noqa: E402  pylint: disable=wrong-import-position,import-error
from gpusim import machine, state  # noqa: E402  pylint: disable=wrong-import-position,import-error

SCRIPT = os.path.join(HERE, "kernel-view.sh")
# /proc/modules line format (kernel/module/procfs.c m_show): name size refcount deps state address [taint flags]
_MODULE_LINE = "nvidia 54071296 0 - Live 0x0000000000000000 (POE)\n"
# BAR0 16 MiB, memory, as a resource line (drivers/pci/pci-sysfs.c resource_show: start end flags)
_RESOURCE = "0x0000000091000000 0x0000000091ffffff 0x0000000000040200\n" + \
    "0x0000000000000000 0x0000000000000000 0x0000000000000000"


def build(root, state_path):
    """Write ROOT/sys and ROOT/proc/modules for the GPUs of the state file; returns ROOT."""
    st = state.load(state_path)
    devices = []
    for g in st["gpus"]:
        if not g.get("present", True):
            continue
        model = machine.model_of(g)
        devices.append({
            "address": g["pci_bus_id"][-12:].lower(),     # sysfs: 4-digit domain, lower case
            "vendor": "0x%04x" % (model.pci_device_id & 0xFFFF), "device": "0x%04x" % (model.pci_device_id >> 16),
            "subsystem_vendor": "0x%04x" % (model.pci_subsystem_id & 0xFFFF),
            "subsystem_device": "0x%04x" % (model.pci_subsystem_id >> 16),
            "class": "0x030200",                          # 3D controller, as nvmlDeviceGetPciInfoExt answers
            "driver": "nvidia", "files": {"numa_node": "0", "resource": _RESOURCE}})
    fake_tree.build(root, {"devices": devices, "modules": {"nvidia": {"version": st["driver_version"]}}})
    with open(os.path.join(root, "proc", "modules"), "w", encoding="utf-8") as fh:
        fh.write(_MODULE_LINE if st.get("driver_loaded", True) else "")
    return root


def command(root, argv):
    """argv run under ROOT's kernel view (a private mount namespace; needs root)."""
    return ["unshare", "-m", "--", "sh", SCRIPT, root, *argv]
