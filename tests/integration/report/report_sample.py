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

With a GPU usage section (issue 43 point 3; docs/images/fleet-report-usage.png, ``--usage``): a week of
dcgm-exporter series read by gpu_usage_info's own code (``prometheus.read_usage`` with ``series``, ``advice``)
from an in-process client answering Prometheus's query_range, shaped like the lab's workload profiles
(lab/dcgm/exposition.py KINDS, lab/dcgm/workloads.json): the notebook pool nb-node-1/nb-node-2 (L40S, two 30-minute
bursts a day), infer-node-1 (a whole H100 serving up to 18 GB), train-node-1 (two saturated A100s) and gpu-node-2's MIG
instances (the layout of its host facts above).
"""

from __future__ import annotations

import calendar
import copy
import math
import os
import re
import shutil
import sys
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
for path in (os.path.join(ROOT, "build", "collections"), os.path.join(ROOT, "tests", "helpers"), HERE):
    if path not in sys.path:
        sys.path.insert(0, path)

from ansible_collections.gpuops.provision.plugins.module_utils._preflight import health as preflight_health  # noqa: E402
from ansible_collections.gpuops.provision.plugins.module_utils._usage import advice, prometheus
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
    opts = preflight_health.normalize_options(None)
    checks = [{"id": "driver_version", "status": "pass", "evidence": "installed = loaded = pinned 550.163.01",
               "remedy": ""}]
    checks += [preflight_health.CHECKS[c][1]({"gpu": gpu_result}, opts) for c in preflight_health.PER_GPU_CHECKS]
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


# --- GPU usage: a week of dcgm-exporter series -------------------------------------------------------------------------

DAY = 86400
USAGE_END = calendar.timegm((2026, 12, 6, 8, 30, 0))
USAGE_POOLS = {"notebooks": ["nb-node-1", "nb-node-2"], "infer-node-1": ["infer-node-1"], "train-node-1": ["train-node-1"],
               "gpu-node-2": ["gpu-node-2"]}


def _jitter(key, t, scale):
    """A deterministic jitter in [-scale, scale] (cheaper than the lab's sha256, same role)."""
    x = math.sin((zlib.crc32(key.encode()) % 997 + 1) * 12.9898 + t * 0.000113) * 43758.5453
    return (x - math.floor(x)) * 2 * scale - scale


def _work(kind, key, t, mem):
    """(SM activity, framebuffer used MiB) at t: lab/dcgm/exposition.py's kinds."""
    hour = (t % DAY) / 3600.0
    if kind == "notebook":
        burst = 9 <= hour < 9.5 or 14 <= hour < 14.5
        return max(0.0, (0.6 if burst else 0.02) + _jitter(key, t, 0.02)), (0.12 if burst else 0.07) * mem
    if kind == "inference":
        day = 0.5 - 0.5 * math.cos(2 * math.pi * (t % DAY) / DAY)
        return 0.1 + 0.15 * day + _jitter(key, t, 0.02), min(mem, 12288 + 6144 * day)
    if kind == "training":
        return min(1.0, 0.95 + _jitter(key, t, 0.03)), 0.9 * mem
    return max(0.0, 0.04 + _jitter(key, t, 0.02)), 0.08 * mem  # steady


# (host, gpu, uuid, model, MIG profile, GI, memory MiB, kind, (namespace, pod, container))
USAGE_DEVICES = (
    ("nb-node-1", "0", "GPU-l40s-nb1", "NVIDIA L40S", None, None, 46068, "notebook", ("notebooks", "jupyter-carol", "notebook")),
    ("nb-node-2", "0", "GPU-l40s-nb2", "NVIDIA L40S", None, None, 46068, "notebook", ("notebooks", "jupyter-dave", "notebook")),
    ("infer-node-1", "0", "GPU-h100-inf", "NVIDIA H100 80GB HBM3", None, None, 81559, "inference", ("serving", "llm-0", "server")),
    ("train-node-1", "0", "GPU-a100-tr0", "NVIDIA A100-SXM4-80GB", None, None, 81920, "training", ("research", "trainer-1", "pytorch")),
    ("train-node-1", "1", "GPU-a100-tr1", "NVIDIA A100-SXM4-80GB", None, None, 81920, "training", ("research", "trainer-1", "pytorch")),
    ("gpu-node-2", "0", "GPU-h100-0", "NVIDIA H100 80GB HBM3", "2g.20gb", "1", 20096, "steady", ("serving", "embed-0", "server")),
    ("gpu-node-2", "0", "GPU-h100-0", "NVIDIA H100 80GB HBM3", "1g.10gb", "2", 9856, "notebook", ("notebooks", "jupyter-erin", "notebook")),
    ("gpu-node-2", "0", "GPU-h100-0", "NVIDIA H100 80GB HBM3", "1g.10gb", "3", 9856, "steady", ("ci", "cuda-tests", "runner")),
    ("gpu-node-2", "0", "GPU-h100-0", "NVIDIA H100 80GB HBM3", "3g.40gb", "4", 40192, "inference", ("serving", "llm-1", "server")),
)


class UsageClient:
    """Answers read_usage's queries as Prometheus's query_range would over USAGE_DEVICES: avg_over_time as the value
    at the step, max_over_time of FB_USED as the largest of the step's 60 s samples (dcgm-exporter's 30 s collection
    thinned), GPU_UTIL for whole GPUs only (NVML has none for a MIG instance)."""

    _Q = re.compile(r"^(\w+)\((\w+)\{\}\[(\d+)s\]\)$")

    def query(self, q):
        return {"resultType": "scalar", "result": [USAGE_END, str(USAGE_END)]}

    def query_range(self, q, start, end, step):
        fn, metric, _step = self._Q.match(q).groups()
        result = []
        for host, gpu, uuid, model, profile, gi, mem, kind, pod in USAGE_DEVICES:
            if metric == "DCGM_FI_DEV_GPU_UTIL" and profile:
                continue
            labels = {"gpu": gpu, "UUID": uuid, "modelName": model, "Hostname": host, "namespace": pod[0], "pod": pod[1],
                      "container": pod[2]}
            if profile:
                labels.update(GPU_I_PROFILE=profile, GPU_I_ID=gi)
            key = "%s/%s" % (uuid, gi)
            values, t = [], start
            while t <= end:
                sm, used = _work(kind, key, t, mem)
                if fn == "max_over_time":
                    used = max(_work(kind, key, t - s, mem)[1] for s in range(0, int(step), 60))
                v = {"DCGM_FI_PROF_SM_ACTIVE": sm, "DCGM_FI_PROF_SM_OCCUPANCY": sm * 0.7, "DCGM_FI_PROF_DRAM_ACTIVE": sm * 0.5,
                     "DCGM_FI_DEV_FB_USED": round(used), "DCGM_FI_DEV_FB_FREE": mem - round(used),
                     "DCGM_FI_DEV_GPU_UTIL": 100 if sm > 0.01 else 0}[metric]
                values.append([t, "%f" % v])
                t += step
            result.append({"metric": labels, "values": values})
        return {"resultType": "matrix", "result": result}


def usage_result():
    """What gpu_usage_info returns with series: true and pools USAGE_POOLS over the week before USAGE_END."""
    read = prometheus.read_usage(UsageClient(), 7 * DAY, series=True)
    return {"changed": False, "gpus": read["gpus"], "queries": read["queries"], "gpu_hours": read["gpu_hours"],
            "window": {"start": read["start"], "end": read["end"], "step": read["step"], "bucket": read["bucket"]},
            "advice": advice.advise_all(read["gpus"], USAGE_POOLS)}


def sample_model(hot=True, usage=None):
    """The report as three runs left it: the first still counted gpu_memory as a warning (the history keeps that)."""
    history = {"health_history": [{"generated_at": RUNS[0], "gpus": {
        "gpu-node-1 GPU 0 (GPU-a100-0)": "warn", "gpu-node-1 GPU 1 (GPU-a100-1)": "warn",
        "gpu-node-2 GPU 0 (GPU-h100-0)": "warn"}}]}
    cool = R.fleet_model(hosts(hot=False), generated_at=RUNS[1], driver_pin="550.163.01-2")
    history = R.with_health_history(cool, history)
    model = R.fleet_model(copy.deepcopy(hosts(hot)), title="GPU fleet report (lab)", generated_at=RUNS[2],
                          driver_pin="550.163.01-2", proxmox=proxmox(), vsphere=vsphere(), usage=usage)
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


# The usage screenshot: the summary band, the health over runs and the GPU usage section (the hosts follow below).
USAGE_HEIGHT = 1900


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--usage"]
    if "--usage" in sys.argv[1:]:
        print(write(args[0] if args else os.path.join(ROOT, "docs", "images", "fleet-report-usage.png"),
                    model=sample_model(usage=usage_result()), height=USAGE_HEIGHT))
    else:
        print(write(args[0] if args else os.path.join(ROOT, "docs", "images", "fleet-report.png")))
