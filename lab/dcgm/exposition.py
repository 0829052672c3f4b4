#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""dcgm-exporter's exposition generated from gpusim's state and a per-GPU workload profile (issue 43, the lab).

What it copies (github.com/NVIDIA/dcgm-exporter, release 4.5.3-4.8.2):
* Metric names, types and help texts: ``etc/default-counters.csv`` (DCGM_FI_PROF_SM_ACTIVE / SM_OCCUPANCY from its
  commented "Datacenter Profiling" lines, enabled here as a user enables them).
* One series per GPU, or per MIG instance, labelled as ``internal/pkg/rendermetrics/render_metrics.go``
  gpuMetricsFormat writes them, in that order: gpu, UUID, pci_bus_id, device, modelName, GPU_I_PROFILE and GPU_I_ID
  (MIG instances only), Hostname (``hostname`` from commit d5e5f51: ``--hostname-label``), then the label counters
  (DCGM_FI_DRIVER_VERSION) and the attributes (pod attribution: container, namespace, pod), each group in key order as
  Go's text/template ranges over a map.
* Values as ``internal/pkg/collector/gpu_collector.go`` toString prints them: doubles with %f (the DCP ratios),
  integers with %d (FB_USED/FB_FREE in MiB, GPU_UTIL in %).
* NVML has no GPU utilisation for a MIG instance: GPU_UTIL is left out there (dcgm-exporter skips blank values).

Two outputs: the current scrape (Prometheus text format, as ``/metrics`` serves it) and, with ``--history``, a window of
samples with timestamps in OpenMetrics text (``# EOF`` at the end, each family's samples together and in time order)
for ``promtool tsdb create-blocks-from openmetrics``.

The profile (``lab/dcgm/workloads.json``): {host: {"<gpu index>": {"kind", "pod": [namespace, pod, container]} or
{"instances": [{"profile", "gi_id", "kind", "pod"}]}}}; kinds in KINDS. A MIG GPU's instance profiles must be ones
gpusim's model offers. Everything is a deterministic function of (uuid, GI, time): two runs give the same bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gpusim"))

from gpusim import models as gmodels  # noqa: E402  pylint: disable=wrong-import-position
from gpusim import state as gstate  # noqa: E402  pylint: disable=wrong-import-position

# (metric, type, help, value format): default-counters.csv, in its order.
METRICS = (
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "%d"),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "%d"),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "%d"),
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned.", "%f"),
    ("DCGM_FI_PROF_SM_OCCUPANCY", "gauge", "The ratio of number of warps resident on an SM.", "%f"),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the device memory interface is active sending or receiving data.", "%f"),
)
DAY = 86400.0
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration_seconds(text):
    """A history length with one unit (7d, 36h, 90m) in seconds, for this script's and prometheus.py's --history."""
    return int(text[:-1]) * _UNITS[text[-1]]


def _noise(key, t, scale):
    """A deterministic jitter in [-scale, scale] for one series at one time."""
    h = hashlib.sha256(("%s:%d" % (key, int(t))).encode()).digest()
    return (h[0] / 255.0 * 2 - 1) * scale


def _clip(x, low=0.0, high=1.0):
    return max(low, min(high, x))


def _steady(key, t, mem_mib):
    return {"sm": _clip(0.04 + _noise(key, t, 0.02)), "mem": 0.08 * mem_mib}


def _notebook(key, t, mem_mib):
    # a 30-minute burst at 09:00 and 14:00 each day; idle kernels otherwise
    hour = (t % DAY) / 3600.0
    burst = 9 <= hour < 9.5 or 14 <= hour < 14.5
    return {"sm": _clip((0.6 if burst else 0.02) + _noise(key, t, 0.02)), "mem": (0.12 if burst else 0.07) * mem_mib}


def _inference(key, t, mem_mib):
    # diurnal load; 18 GB of weights and KV cache at peak, 12 GB off-peak
    day = 0.5 - 0.5 * math.cos(2 * math.pi * (t % DAY) / DAY)
    return {"sm": _clip(0.1 + 0.15 * day + _noise(key, t, 0.02)), "mem": min(mem_mib, 12288 + 6144 * day)}


def _training(key, t, mem_mib):
    return {"sm": _clip(0.95 + _noise(key, t, 0.03)), "mem": 0.9 * mem_mib}


KINDS = {"steady": _steady, "notebook": _notebook, "inference": _inference, "training": _training, "idle":
         lambda key, t, mem_mib: {"sm": 0.0, "mem": 0.0}}


def _instance_memory(model, profile_name):
    for p in model.gi_profiles:
        if gmodels.gi_name(model, p) == profile_name:
            return p.memory_mib
    raise SystemExit("%s: no MIG profile %s (gpusim offers %s)" % (
        model.name, profile_name, ", ".join(gmodels.gi_name(model, p) for p in model.gi_profiles)))


def devices(state_path, host, profile):
    """[(labels, kind, memory MiB, is_mig)] of one host: its gpusim GPUs, whole or per MIG instance of the profile."""
    with open(state_path, encoding="utf-8") as f:
        st = gstate.normalize(json.load(f))
    out = []
    mine = profile.get(host) or {}
    for index, gpu in enumerate(st["gpus"]):
        model = gmodels.MODELS[gpu["model"]]
        base = {"gpu": str(index), "UUID": gpu["uuid"], "pci_bus_id": gpu["pci_bus_id"], "device": "nvidia%d" % index,
                "modelName": gpu["model"]}
        work = mine.get(str(index)) or {"kind": "idle"}
        if work.get("instances"):
            if gpu["mig_mode"] != 1:
                raise SystemExit("%s GPU %d: MIG instances in the profile but MIG is off in %s" % (host, index, state_path))
            for inst in work["instances"]:
                labels = dict(base, GPU_I_PROFILE=inst["profile"], GPU_I_ID=str(inst["gi_id"]))
                out.append((labels, inst, _instance_memory(model, inst["profile"]), True))
        else:
            out.append((base, work, model.memory_mib, False))
    return st["driver_version"], out


def _label_text(labels, host, host_label, driver, pod, extra=()):
    parts = ['%s="%s"' % (k, labels[k]) for k in ("gpu", "UUID", "pci_bus_id", "device", "modelName") if k in labels]
    if "GPU_I_PROFILE" in labels:
        parts += ['GPU_I_PROFILE="%s"' % labels["GPU_I_PROFILE"], 'GPU_I_ID="%s"' % labels["GPU_I_ID"]]
    parts.append('%s="%s"' % (host_label, host))
    parts.append('DCGM_FI_DRIVER_VERSION="%s"' % driver)
    if pod:
        parts += ['container="%s"' % pod[2], 'namespace="%s"' % pod[0], 'pod="%s"' % pod[1]]
    # The target labels Prometheus adds on a scrape (job, instance): a backfilled series carries them too, so that it
    # and the scraped one are one series.
    parts += ['%s="%s"' % kv for kv in extra]
    return "{%s}" % ",".join(parts)


def values(work, labels, mem_mib, mig, t):
    """{metric: value} of one device at time t."""
    key = "%s/%s" % (labels["UUID"], labels.get("GPU_I_ID", ""))
    w = KINDS[work.get("kind", "idle")](key, t, mem_mib)
    used = int(round(w["mem"]))
    out = {"DCGM_FI_DEV_FB_USED": used, "DCGM_FI_DEV_FB_FREE": mem_mib - used, "DCGM_FI_PROF_SM_ACTIVE": w["sm"],
           "DCGM_FI_PROF_SM_OCCUPANCY": _clip(w["sm"] * 0.7), "DCGM_FI_PROF_DRAM_ACTIVE": _clip(w["sm"] * 0.5)}
    if not mig:
        # "GPU utilization" only says a kernel ran: near 100 % whenever anything is resident (issue 43)
        out["DCGM_FI_DEV_GPU_UTIL"] = 100 if w["sm"] > 0.01 else 0
    return out


def render(hosts, profile, times, host_label="Hostname", openmetrics=False, extra=None, omit=()):
    """The exposition of ``hosts`` ([(host, state path)]) at ``times`` (one time and no timestamps for a scrape).
    ``extra``: {host: [(label, value)]} added to each of its series; ``omit``: metrics left out (a dcgm-exporter whose
    counters file lacks them)."""
    series = []
    for host, path in hosts:
        driver, devs = devices(path, host, profile)
        for labels, work, mem_mib, mig in devs:
            text = _label_text(labels, host, host_label, driver, work.get("pod"), (extra or {}).get(host, ()))
            series.append((text, labels, work, mem_mib, mig))
    lines = []
    for metric, kind, help_text, fmt in METRICS:
        if metric in omit:
            continue
        lines += ["# HELP %s %s" % (metric, help_text), "# TYPE %s %s" % (metric, kind)]
        for text, labels, work, mem_mib, mig in series:
            for t in times:
                v = values(work, labels, mem_mib, mig, t).get(metric)
                if v is None:
                    continue
                stamp = " %d" % t if openmetrics else ""
                lines.append("%s%s %s%s" % (metric, text, fmt % v, stamp))
    if openmetrics:
        lines.append("# EOF")
    return "\n".join(lines) + "\n"


def state_path(host, run_states=None):
    """A lab node's gpusim state: ``run_states``/<host>.json (the running lab's copy) when there, else the seed in
    lab/gpusim/states (the nodes lab/up.sh starts containers for), else lab/dcgm/states (nodes that exist only as
    metrics, for the usage advice's cases)."""
    for folder in (run_states, os.path.join(HERE, "..", "gpusim", "states"), os.path.join(HERE, "states")):
        if folder and os.path.isfile(os.path.join(folder, host + ".json")):
            return os.path.abspath(os.path.join(folder, host + ".json"))
    raise SystemExit("%s: no gpusim state in %s, lab/gpusim/states or lab/dcgm/states" % (host, run_states))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", action="append", required=True, metavar="NAME=STATE.json",
                    help="a node's name (its Hostname label) and its gpusim state file; repeat per node")
    ap.add_argument("--profile", default=os.path.join(HERE, "workloads.json"))
    ap.add_argument("--history", help="a window of samples with timestamps (OpenMetrics), e.g. 7d")
    ap.add_argument("--step", type=int, default=60, help="seconds between history samples (default 60)")
    ap.add_argument("--end", type=int, help="Unix seconds of the last sample (default now)")
    ap.add_argument("--hostname-label", default="Hostname", choices=("Hostname", "hostname"))
    ap.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                    help="a label added to every series (a scrape's job / instance); repeat per label")
    ap.add_argument("--omit", action="append", default=[], metavar="METRIC", help="leave a metric out; repeatable")
    args = ap.parse_args(argv)
    with open(args.profile, encoding="utf-8") as f:
        profile = json.load(f)
    hosts = [tuple(h.split("=", 1)) for h in args.host]
    extra = {h: [tuple(kv.split("=", 1)) for kv in args.label] for h, _path in hosts}
    end = args.end if args.end is not None else int(time.time())
    if args.history:
        window = duration_seconds(args.history)
        end -= end % args.step
        times = list(range(end - window, end + 1, args.step))
        sys.stdout.write(render(hosts, profile, times, args.hostname_label, True, extra, args.omit))
    else:
        sys.stdout.write(render(hosts, profile, [end], args.hostname_label, False, extra, args.omit))


if __name__ == "__main__":
    main()
