#!/usr/bin/env python
"""Read-only hardware check: dump every MIG GPU-instance profile a GPU reports through
nvidia-ml-py and compare it with gpusim's model table.

It only calls NVML *Get* functions: it never changes MIG mode, never creates or destroys
GPU/compute instances. Compute-instance profiles are read only for GPU instances that
already exist.

    python3 bench/device/nvml_profiles.py [--table lab/gpusim/gpusim/models.py] [--json OUT]

Exit status: 0 no differences, 1 differences found, 2 NVML unavailable.
Run against gpusim itself with LD_LIBRARY_PATH=$(python lab/gpusim/libnvml/build.py) and GPUSIM_STATE set (expects zero
differences).
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_TABLE = os.path.join(HERE, "..", "..", "lab", "gpusim", "gpusim", "models.py")

GI_FIELDS = (("id", "id"), ("sliceCount", "slices"), ("instanceCount", "instances"), ("memorySizeMB", "memory_mib"),
             ("multiprocessorCount", "sms"), ("copyEngineCount", "ce"), ("decoderCount", "dec"),
             ("encoderCount", "enc"), ("jpegCount", "jpg"), ("ofaCount", "ofa"))


def load_table(path):
    """Import gpusim's models module by path (no PYTHONPATH games, no package import)."""
    spec = importlib.util.spec_from_file_location("gpusim_models_table", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses need the module registered
    spec.loader.exec_module(mod)
    return mod


def _text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def placements(nv, handle, profile_id):
    count = ctypes.c_uint()
    nv.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None, ctypes.byref(count))
    arr = (nv.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
    nv.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, arr, ctypes.byref(count))
    return [[arr[i].start, arr[i].size] for i in range(count.value)]


def dump_gpu(nv, handle):
    """Everything NVML says about the GPU's MIG profiles (read-only)."""
    out = {"name": _text(nv.nvmlDeviceGetName(handle)), "memory_mib": nv.nvmlDeviceGetMemoryInfo(handle).total // (1 << 20),
           "pci_device_id": "0x%08X" % nv.nvmlDeviceGetPciInfo(handle).pciDeviceId, "profiles": {}, "notes": []}
    try:
        cur, pend = nv.nvmlDeviceGetMigMode(handle)
        out["mig_mode"] = {"current": cur, "pending": pend}
    except nv.NVMLError_NotSupported:
        out["mig_mode"] = None
        return out
    for index in range(nv.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            try:
                info = nv.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
            except nv.NVMLError_FunctionNotFound:  # driver without the v2 call
                info = nv.nvmlDeviceGetGpuInstanceProfileInfo(handle, index, version=1)
        except (nv.NVMLError_NotSupported, nv.NVMLError_InvalidArgument):
            continue  # this index is not a profile of this GPU/driver
        except nv.NVMLError as e:
            out["notes"].append("profile index %d: %s (driver may need MIG enabled to list profiles)" % (index, e))
            continue
        p = {k: int(getattr(info, k)) for k, _attr in GI_FIELDS}
        p["name"] = _text(getattr(info, "name", ""))
        p["placements"] = placements(nv, handle, info.id)
        out["profiles"][index] = p
    if cur == 1:
        out["gpu_instances"] = existing_instances(nv, handle, out["profiles"])
    return out


def existing_instances(nv, handle, profiles):
    gis = []
    for p in profiles.values():
        arr = (nv.c_nvmlGpuInstance_t * max(p["instanceCount"], 1))()
        count = ctypes.c_uint()
        nv.nvmlDeviceGetGpuInstances(handle, p["id"], arr, ctypes.byref(count))
        for i in range(count.value):
            info = nv.nvmlGpuInstanceGetInfo(arr[i])
            cis = {}
            for ci_index in range(nv.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
                try:
                    c = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(arr[i], ci_index,
                                                                        nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
                except nv.NVMLError:
                    continue
                cis[ci_index] = {"id": c.id, "sliceCount": c.sliceCount, "instanceCount": c.instanceCount,
                                 "multiprocessorCount": c.multiprocessorCount, "name": _text(getattr(c, "name", ""))}
            gis.append({"id": info.id, "profileId": info.profileId,
                        "placement": [info.placement.start, info.placement.size], "ci_profiles": cis})
    return gis


def compare(table, gpu):
    """Differences between what the GPU reported and gpusim's table entry for that model."""
    diffs = []
    model = table.MODELS.get(gpu["name"])
    if model is None:
        return ["%s: no gpusim table entry for this model" % gpu["name"]]
    if gpu["memory_mib"] != model.memory_mib:
        diffs.append("total memory %d MiB, table %d MiB" % (gpu["memory_mib"], model.memory_mib))
    if "0x%08X" % model.pci_device_id != gpu["pci_device_id"]:
        diffs.append("PCI device id %s, table 0x%08X" % (gpu["pci_device_id"], model.pci_device_id))
    if (gpu["mig_mode"] is not None) != model.mig_capable:
        diffs.append("MIG capable %s, table %s" % (gpu["mig_mode"] is not None, model.mig_capable))
    if gpu["mig_mode"] is None or not gpu["profiles"]:
        return diffs  # nothing readable to compare (notes say why)
    table_by_index = {p.index: p for p in model.gi_profiles}
    for index in sorted(set(table_by_index) | set(gpu["profiles"])):
        real, sim = gpu["profiles"].get(index), table_by_index.get(index)
        if real is None or sim is None:
            diffs.append("profile index %d: %s" % (index, "missing on GPU" if real is None else "missing in table"))
            continue
        for nvml_field, attr in GI_FIELDS:
            # The table's nvml_instances: what NVML says where it differs from the documented count (A30).
            want = (getattr(sim, "nvml_instances", 0) or sim.instances) if attr == "instances" else getattr(sim, attr)
            if real[nvml_field] != want:
                diffs.append("profile index %d (%s) %s: GPU %s, table %s"
                             % (index, real["name"], nvml_field, real[nvml_field], want))
        want = [[s, sim.size] for s in sim.starts]
        if real["placements"] != want:
            diffs.append("profile %d placements: GPU %s, table %s" % (real["id"], real["placements"], want))
        name = "MIG " + table.gi_name(model, sim)
        if real["name"] and real["name"] != name:
            diffs.append("profile %d name: GPU %r, table %r" % (real["id"], real["name"], name))
    return diffs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    ap.add_argument("--table", default=DEFAULT_TABLE, help="path of gpusim's models.py")
    ap.add_argument("--json", help="also write the full dump and differences to this file")
    args = ap.parse_args(argv)
    table = load_table(args.table)
    try:
        import pynvml as nv  # pylint: disable=import-outside-toplevel
        nv.nvmlInit()
    except Exception as e:  # pylint: disable=broad-except
        print("NVML unavailable: %s" % e)
        return 2
    report = {"driver_version": _text(nv.nvmlSystemGetDriverVersion()), "gpus": []}
    total = 0
    try:
        for i in range(nv.nvmlDeviceGetCount()):
            gpu = dump_gpu(nv, nv.nvmlDeviceGetHandleByIndex(i))
            gpu["differences"] = compare(table, gpu)
            total += len(gpu["differences"])
            report["gpus"].append(gpu)
            print("GPU %d: %s, %d MiB, MIG %s" % (i, gpu["name"], gpu["memory_mib"], gpu["mig_mode"]))
            for index, p in sorted(gpu["profiles"].items()):
                print("  %-18s id %2d idx %2d slices %d count %d mem %6d MiB SM %3d placements %s"
                      % (p["name"], p["id"], index, p["sliceCount"], p["instanceCount"], p["memorySizeMB"],
                         p["multiprocessorCount"], " ".join("%d:%d" % tuple(x) for x in p["placements"])))
            for note in gpu["notes"]:
                print("  note: " + note)
            for d in gpu["differences"]:
                print("  DIFF " + d)
    finally:
        nv.nvmlShutdown()
    print("driver %s: %d difference(s)" % (report["driver_version"], total))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=1)
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
