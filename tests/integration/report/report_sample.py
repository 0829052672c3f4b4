# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The representative fleet report of docs/images/fleet-report.png, built from facts shaped as the collection's
modules return them (the lab's names: lab/pvesim/fixtures/lab.json, lab/vcsim/fixtures/lab.json):

* gpu-node-1: two MIG A100s whose row remapping NVML cannot read with MIG on (gpu_memory not applicable), node
  preflight WARN for that alone (the report shows PASS, saying what the node reported);
* gpu-node-2: a MIG H100 running 3 degrees under its slowdown temperature: health WARN and preflight WARN, the one
  warned node and GPU of the summary band;
* lab-pve-1: a Proxmox VE passthrough host, both GPUs on vfio-pci, no NVML by design;
* the Proxmox VE cluster's VMs with whole GPUs, a mapping and vGPUs; a vCenter whose GPU cluster drifts.

``python tests/integration/report/report_sample.py docs/images/fleet-report.png`` writes the screenshot (headless
Chromium); tests/integration/report/test_report_render.py renders the same model and checks it.
"""

from __future__ import annotations

import copy
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
for path in (os.path.join(ROOT, "build", "collections"), os.path.join(ROOT, "tests", "helpers"), HERE):
    if path not in sys.path:
        sys.path.insert(0, path)

from ansible_collections.gpuops.provision.plugins.module_utils import _health  # noqa: E402
from ansible_collections.gpuops.provision.plugins.plugin_utils import _report as R  # noqa: E402
from health_readings import healthy  # noqa: E402  pylint: disable=import-error
from report_lab import screenshot  # noqa: E402  pylint: disable=import-error

WIDTH, HEIGHT = 1200, 2300
RUNS = ("2026-12-03T22:55:17Z", "2026-12-05T23:10:17Z", "2026-12-06T08:30:00Z")
MIG_REMAP = {"error": "NVML_ERROR_NOT_SUPPORTED", "correctable": None, "uncorrectable": None, "pending": None,
             "failure": None}


def _gi(gi_id, profile, start, size):
    return {"gi_id": gi_id, "profile": profile, "placement": {"start": start, "size": size}, "compute_instances": [{}]}


def _gpu(index, model, address, layout, board="a100", **health):
    h = healthy(board)
    h["remapped_rows"] = dict(MIG_REMAP)
    for key, value in health.items():
        h[key].update(value)
    return {"index": index, "uuid": "GPU-%s-%d" % (board, index), "model": model, "pci_address": address,
            "kernel_driver": "nvidia", "mig_capable": True, "mig_mode": {"current": "enabled", "pending": "enabled"},
            "instances": [_gi(i + 1, p, s, z) for i, (p, s, z) in enumerate(layout)], "health": h}


def _preflight(gpu_result, generated_at):
    opts = _health.normalize_options(None)
    checks = [{"id": "driver_version", "status": "pass", "evidence": "installed = loaded = pinned 550.163.01",
               "remedy": ""}]
    checks += [_health.CHECKS[c][1]({"gpu": gpu_result}, opts) for c in _health.PER_GPU_CHECKS]
    statuses = [c["status"] for c in checks]
    verdict = "fail" if "fail" in statuses else "warn" if "warn" in statuses else "pass"
    return {"verdict": verdict, "ready": verdict != "fail", "generated_at": generated_at, "checks": checks,
            "failed_checks": [c["id"] for c in checks if c["status"] == "fail"],
            "warned_checks": [c["id"] for c in checks if c["status"] == "warn"]}


def _node(gpus, addresses, installed):
    res = {"nvml": {"available": True, "driver_version": "550.163.01"}, "gpus": gpus,
           "kernel_log": {"read": True, "error": None, "xid_events": []}}
    return {"gpu": res, "preflight": _preflight(res, RUNS[-1]),
            "iommu": {"active": True, "kind": "intel", "passthrough": True, "gpus": [
                {"address": a, "iommu_group": 20 + 20 * i, "isolated": True, "driver": "nvidia",
                 "isolation_reason": "only this card"} for i, a in enumerate(addresses)]},
            "driver": {"installed_version": "550.163.01-2", "loaded_version": "550.163.01", "pin": "550.163.01-2",
                       "on_pin": installed == "550.163.01-2"},
            "license": {"licensed": None, "vgpu_guest": False, "gpus": []}}


def hosts(hot=True):
    """Host facts; ``hot=False`` cools gpu-node-2 (no warning left anywhere: the band's warn colour must go)."""
    a100 = [("2g.10gb", 0, 2), ("1g.5gb", 2, 1), ("1g.5gb", 3, 1), ("3g.20gb", 4, 4)]
    h100 = [("2g.20gb", 0, 2), ("1g.10gb", 2, 1), ("1g.10gb", 3, 1), ("3g.40gb", 4, 4)]
    node1 = _node([_gpu(0, "NVIDIA A100-SXM4-40GB", "0000:17:00.0", a100),
                   _gpu(1, "NVIDIA A100-SXM4-40GB", "0000:31:00.0", a100)], ["0000:17:00.0", "0000:31:00.0"],
                  "550.163.01-2")
    temp = {"current": 84 if hot else 45, "slowdown": 87}
    node2 = _node([_gpu(0, "NVIDIA H100 80GB HBM3", "0000:17:00.0", h100, board="h100", temperature=temp)],
                  ["0000:17:00.0"], "550.163.01-2")
    pve = {"gpu": {"nvml": {"available": False, "reason": "NVML library (libnvidia-ml.so.1) not found: the NVIDIA "
                                                          "driver is not installed"}, "gpus": []},
           "iommu": {"active": True, "kind": "intel", "passthrough": True, "gpus": [
               {"address": "0000:17:00.0", "iommu_group": 13, "isolated": True, "driver": "vfio-pci",
                "isolation_reason": "only this card"},
               {"address": "0000:65:00.0", "iommu_group": 77, "isolated": True, "driver": "vfio-pci",
                "isolation_reason": "only this card"}]}}
    return {"gpu-node-1": node1, "gpu-node-2": node2, "lab-pve-1": pve}


def _hostpci(vmid, slot, via, paths, gpus, mapping=None, mdev=None, mdev_name=None):
    return {"vmid": vmid, "slot": slot, "via": via, "mapping": mapping, "paths": paths, "mdev": mdev,
            "mdev_name": mdev_name, "gpus": gpus}


def proxmox():
    """pve_gpu_info of the lab's two-node cluster (lab/pvesim/fixtures/lab.json), trimmed to what the report reads."""
    def gpu(addr, name, vfs=()):
        return {"id": addr, "device_name": name, "vfs": [{"id": v, "device_name": name} for v in vfs]}

    def vm(vmid, name, status, node, *hostpci):
        return {"vmid": vmid, "name": name, "status": status, "node": node, "hostpci": list(hostpci)}
    vfs = ["0000:02:00.4", "0000:02:00.5", "0000:02:00.6", "0000:02:00.7"]
    pve1 = {"gpus": [gpu("0000:01:00.0", "GA100 [A100 PCIe 80GB]"), gpu("0000:02:00.0", "AD102GL [L40S]", vfs),
                     gpu("0000:41:00.0", "TU104GL [Quadro RTX 4000]")],
            "vms": [vm(100, "k8s-gpu-a", "running", "pve1",
                       _hostpci(100, "hostpci0", "mapping", ["0000:01:00.0"], ["0000:01:00.0"], mapping="a100")),
                    vm(102, "vdi-l40s-1", "running", "pve1",
                       _hostpci(102, "hostpci0", "mapping", vfs, vfs[:1], mapping="l40s-vgpu", mdev="nvidia-1150",
                                mdev_name="NVIDIA L40S-8Q")),
                    vm(103, "ws-rtx4000", "stopped", "pve1",
                       _hostpci(103, "hostpci0", "host", ["0000:41:00"], ["0000:41:00.0"]))]}
    pve2 = {"gpus": [gpu("0000:01:00.0", "GA100 [A100 PCIe 80GB]"), gpu("0000:21:00.0", "TU104GL [Tesla T4]")],
            "vms": [vm(201, "vdi-t4-1", "running", "pve2",
                       _hostpci(201, "hostpci0", "host", ["0000:21:00.0"], ["0000:21:00.0"], mdev="nvidia-223",
                                mdev_name="GRID T4-2Q"))]}
    return {"lab-pve-cluster": {"changed": False, "nodes": {"pve1": pve1, "pve2": pve2}, "skipped_nodes": {}}}


def vsphere():
    """vsphere_gpu_info of the lab's vCenter (lab/vcsim/fixtures/lab.json), H1 left on an older driver: drift."""
    def host(name, gpus, version, vms):
        return {"name": name, "cluster": "DC0_C0", "connection_state": "connected", "in_maintenance_mode": False,
                "esxi_version": "8.0.3", "gpu_host": True, "gpus": [{"device_name": g} for g in gpus],
                "driver": {"version": version}, "vgpu_vms": vms}
    train = [{"name": "ml-train-01", "power_state": "poweredOn", "profiles": ["grid_a100-20c"]},
             {"name": "ml-infer-02", "power_state": "poweredOn", "profiles": ["grid_a100-10c"]}]
    vdi = [{"name": "vdi-03", "power_state": "poweredOff", "profiles": ["nvidia_l40s-8q"]}]
    hosts_ = [host("DC0_C0_H0", ["NVIDIA A100-PCIE-40GB"] * 2, "550.90.05", train),
              host("DC0_C0_H1", ["NVIDIA L40S"] * 2, "535.216.01", vdi),
              dict(host("DC0_C0_H2", [], None, []), gpu_host=False)]
    drift = {"consistent": False, "drifting_clusters": ["DC0_C0"], "clusters": {"DC0_C0": {
        "consistent": False, "versions": {"535.216.01": ["DC0_C0_H1"], "550.90.05": ["DC0_C0_H0"]}, "missing": [],
        "majority": "535.216.01"}}}
    return {"lab-vcenter": {"changed": False, "hosts": hosts_, "drift": drift}}


def sample_model(hot=True):
    """The report as three runs left it: the first still counted gpu_memory as a warning (the history keeps that)."""
    history = {"health_history": [{"generated_at": RUNS[0], "gpus": {
        "gpu-node-1 GPU 0 (GPU-a100-0)": "warn", "gpu-node-1 GPU 1 (GPU-a100-1)": "warn",
        "gpu-node-2 GPU 0 (GPU-h100-0)": "warn"}}]}
    cool = R.fleet_model(hosts(hot=False), generated_at=RUNS[1], driver_pin="550.163.01-2")
    history = R.with_health_history(cool, history)
    model = R.fleet_model(copy.deepcopy(hosts(hot)), title="GPU fleet report (lab)", generated_at=RUNS[2],
                          driver_pin="550.163.01-2", proxmox=proxmox(), vsphere=vsphere())
    return R.with_health_history(model, history)


def write(png_path, model=None, width=WIDTH, height=HEIGHT):
    """Render ``model`` (default: the sample) to HTML next to a temporary profile and screenshot it to png_path."""
    with tempfile.TemporaryDirectory() as tmp:
        html_path = os.path.join(tmp, "report.html")
        with open(html_path, "w", encoding="utf-8") as fh:
            fh.write(R.render_html(model or sample_model()))
        # Chromium's profile goes next to the picture it takes: both in the temporary directory, then the picture out.
        shot = os.path.join(tmp, "report.png")
        proc = screenshot(html_path, shot, width=width, height=height)
        if proc.returncode != 0 or not os.path.exists(shot):
            raise RuntimeError("chromium failed: %s" % proc.stderr[-2000:])
        shutil.copyfile(shot, png_path)
    return png_path


if __name__ == "__main__":
    print(write(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "docs", "images", "fleet-report.png")))
