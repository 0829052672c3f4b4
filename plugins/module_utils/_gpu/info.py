# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the gpu_info module reports: every GPU through the NVML adapter, sysfs, and the kernel log's Xid events.

The I/O goes through what the caller passes (the Nvml adapter, the module's command runner, a sysfs root), so the
module stays an argument spec and one call.
"""

from __future__ import annotations

from typing import Any, Iterable

from ansible_collections.gpuops.provision.plugins.module_utils._gpu import vgpu_scheduler, xid
from ansible_collections.gpuops.provision.plugins.module_utils._mig import geometry, models
from ansible_collections.gpuops.provision.plugins.module_utils._gpu.nvml import Nvml, NvmlError, pci_sysfs


# journalctl -k -b 0: this boot's kernel messages; -o short-monotonic keeps dmesg's [seconds] stamp.
KERNEL_LOG_COMMANDS = {"dmesg": ["dmesg"], "journal": ["journalctl", "-k", "-b", "0", "--no-pager", "-o",
                                                       "short-monotonic"]}


def read_kernel_log(module: Any, source: str) -> dict[str, Any]:
    """{source, read, error, xid_events}: the driver's Xid events since boot (module_utils/_gpu/xid.py parses them)."""
    out: dict[str, Any] = {"source": source, "read": False, "error": None, "xid_events": []}
    if source == "none":
        out["error"] = "kernel_log=none"
        return out
    argv = list(KERNEL_LOG_COMMANDS[source])
    path = module.get_bin_path(argv[0])
    if not path:
        out["error"] = "%s is not installed" % argv[0]
        return out
    rc, stdout, stderr = module.run_command([path] + argv[1:])
    if rc != 0:
        out["error"] = "%s exited %d: %s" % (argv[0], rc, (stderr or stdout).strip()[:300])
        return out
    out["read"] = True
    out["xid_events"] = xid.parse(stdout)
    return out


def gather(nvml: Nvml, sysfs_root: str, with_profiles: bool, with_health: bool = False,
           xid_events: Iterable[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """Read every GPU; NVML errors on one GPU become that GPU's 'error' rather than failing the host."""
    gpus: list[dict[str, Any]] = []
    for index in range(nvml.count()):
        try:
            device = nvml.device(index)
        except nvml.nv.NVMLError as e:
            gpus.append({"index": index, "error": nvml.describe(e)})
            continue
        info = device.info
        try:
            nvml.fill(device)
        except nvml.nv.NVMLError as e:
            # Keep what was read (identity); MIG queries can need privileges the rest does not.
            info["error"] = nvml.describe(e)
            for key, empty in (("instances", []), ("processes", []), ("virtualization", None), ("license", None),
                               ("vgpu_scheduler", None)):
                info.setdefault(key, empty)
        sched = info.get("vgpu_scheduler")
        if sched and sched.get("state"):
            sched["running"] = vgpu_scheduler.spec_of_nvml(sched["state"])
            sched["description"] = vgpu_scheduler.describe(sched["running"])
        if with_health:
            try:
                info["health"] = nvml.health(device)
            except nvml.nv.NVMLError as e:  # the GPU was lost while it was read
                info["error"] = nvml.describe(e)
            else:
                slot = xid.slot_of(info["pci_address"])
                info["health"]["xid"] = sorted({e["xid"] for e in xid_events if e["pci"] == slot})
        # CUDA compute capability, "major.minor" (None where NVML does not say): gpu_pools checks MPS needs Volta.
        info["compute_capability"] = nvml.compute_capability(device)
        mode = info["mig_mode"]
        info["mig_devices"] = geometry.current_counts(info["instances"]) if mode and mode["current"] == "enabled" else {}
        if with_profiles:
            # Instance counts as NVIDIA documents them where the driver reports wrong ones (A30, models).
            table = models.with_documented_counts(info["pci_device_id"], device.table)
            info["profiles"] = [p.to_dict() for p in table.profiles]
        sysfs = pci_sysfs(sysfs_root, info["pci_address"])
        info["kernel_driver"] = sysfs["driver"]
        info["iommu_group"] = sysfs["iommu_group"]
        gpus.append(info)
    return gpus


def collect(module: Any, nvml: Nvml) -> tuple[dict[str, Any], str | None]:
    """The module's result, and the failure message when NVML failed after it was opened (else None)."""
    params = module.params
    result: dict[str, Any] = {"changed": False, "nvml": {"available": False, "reason": None}, "gpus": [],
                              "kernel_log": read_kernel_log(module, params["kernel_log"])}
    opened = nvml.open()
    result["nvml"]["binding"] = nvml.binding
    if not opened:
        result["nvml"]["reason"] = nvml.reason
        result["nvml"]["calls"] = nvml.calls
        return result, None
    try:
        result["nvml"].update(nvml.system())
        result["nvml"]["available"] = True
        result["gpus"] = gather(nvml, params["sysfs_root"], params["profiles"], params["health"],
                                result["kernel_log"]["xid_events"])
    except (nvml.nv.NVMLError, NvmlError) as e:
        return result, "reading NVML failed: %s" % (nvml.describe(e) if isinstance(e, nvml.nv.NVMLError) else e)
    finally:
        nvml.close()
    result["nvml"]["calls"] = nvml.calls
    return result, None
