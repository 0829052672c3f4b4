# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU usage from dcgm-exporter's series in Prometheus: the queries, their answers, and the per-GPU / per-MIG-instance
figures the advice reads; pure logic, no I/O (``_usage/prometheus.py`` asks, this file reads the answers).

dcgm-exporter (github.com/NVIDIA/dcgm-exporter, release 4.5.3-4.8.2 and its main branch; cited by file and function):
* Metric names and types: ``etc/default-counters.csv``. DCGM_FI_DEV_GPU_UTIL, DCGM_FI_DEV_FB_USED / FB_FREE (MiB) and
  DCGM_FI_PROF_DRAM_ACTIVE are on by default; DCGM_FI_PROF_SM_ACTIVE and DCGM_FI_PROF_SM_OCCUPANCY are commented out
  there ("Datacenter Profiling (DCP) metrics"), so they must be enabled. The DCP fields are ratios 0-1
  (``internal/pkg/collector/gpu_collector.go`` toString prints doubles with %f), GPU_UTIL a percentage.
* Labels: ``internal/pkg/rendermetrics/render_metrics.go`` gpuMetricsFormat: ``gpu`` (index), ``UUID`` (``uuid``
  with --use-old-namespace, gpu_collector.go toMetric), ``pci_bus_id``, ``device``, ``modelName``, for a MIG
  instance ``GPU_I_PROFILE`` and ``GPU_I_ID`` (toMetric: InstanceInfo.ProfileName / NvmlInstanceId), and the host:
  ``Hostname`` up to 4.5.3-4.8.2, ``hostname`` from commit d5e5f51 ("Rename Hostname label to hostname"); both are
  read. In Kubernetes the host is the node name (``internal/pkg/hostname/hostname.go`` getLocalHostname: NODE_NAME).
* Pod attribution: ``internal/pkg/transformation/const.go`` ``pod``/``namespace``/``container`` (``pod_name``/
  ``pod_namespace``/``container_name`` with --use-old-namespace). ``kubernetes.go`` PodMapper.Process copies a
  device's metric once per pod using it, and for the per-process fields (GPU_UTIL, FB_USED) keeps the device-level
  series beside the per-pod ones (createPerProcessMetrics): so a device's value at a time is the largest of its
  series, and a pod's own memory is its own series.

Prometheus (github.com/prometheus/prometheus ``web/api/v1/api.go``): every answer is ``{"status": "success"|"error",
"data", "errorType", "error", "warnings"}`` (``Response``, ``respond``/``respondError``); ``queryRange`` answers
``{"resultType": "matrix", "result": [{"metric": {...}, "values": [[<unix seconds>, "<value>"], ...]}]}`` and refuses
more than 11,000 points per series ("exceeded maximum resolution of 11,000 points per timeseries").

For charts (``series``): each device's points downsampled into buckets aligned to the Unix epoch (a week: hourly, at
most CHART_POINTS per series) - the mean of SM activity and the max of memory used in each bucket.

GPU-hours (``gpu_hours``), the seeds' chargeback unit: GPU-hours per profile, not per card. Every device
``aggregate`` returns counts one GPU-hour per hour it was observed (``hours``: its SM-activity steps x step): a whole
GPU (no MIG) as an hour of profile ``whole`` of its model, a MIG instance as an hour of its own profile (a 3g.40gb
instance for an hour is one 3g.40gb GPU-hour, never 3/7 of a card; the MIG card's own series is left out as for the
figures, so a card is not counted beside its instances). Per namespace: the steps in which a series of the device
carried a pod of that namespace x step (several pods of one namespace in a step count once); on a shared
(time-sliced) device every namespace seen in a step is charged the whole step, so a device's namespace hours may add
up to more than its hours. ``hours_with_pods`` is the steps with any pod; the rest of ``hours`` ran no attributed pod.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

REQUIRED = ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_DEV_FB_USED",
            "DCGM_FI_DEV_FB_FREE")
# Reported beside the others, never decisive; NVML has no GPU utilisation for a MIG instance, so it may be absent.
OPTIONAL = ("DCGM_FI_DEV_GPU_UTIL",)
# Off in dcgm-exporter's etc/default-counters.csv (commented out): the fields a user has to enable.
DEFAULT_OFF = ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY")

# (figure, metric, PromQL function over one step). Activity is averaged over each step, so the mean is exact and the
# p95 is of sustained use; memory is also read at its peak within each step, so a short spike is not stepped over.
QUERIES = (
    ("sm_active", "DCGM_FI_PROF_SM_ACTIVE", "avg_over_time"),
    ("sm_occupancy", "DCGM_FI_PROF_SM_OCCUPANCY", "avg_over_time"),
    ("dram_active", "DCGM_FI_PROF_DRAM_ACTIVE", "avg_over_time"),
    ("fb_used", "DCGM_FI_DEV_FB_USED", "avg_over_time"),
    ("fb_free", "DCGM_FI_DEV_FB_FREE", "avg_over_time"),
    ("fb_used_peak", "DCGM_FI_DEV_FB_USED", "max_over_time"),
    ("gpu_util", "DCGM_FI_DEV_GPU_UTIL", "avg_over_time"),
)
_REQUIRED_FIGURES = ("sm_active", "sm_occupancy", "dram_active", "fb_used", "fb_free")
HOST_LABELS = ("Hostname", "hostname")
POD_LABELS = (("namespace", "pod", "container"), ("pod_namespace", "pod_name", "container_name"))
# Steps a query may use, seconds: the smallest that keeps a window within MAX_POINTS points per series (7 days: 5
# minutes), never below dcgm-exporter's default 30 s collection interval (appconfig: --collect-interval 30000 ms).
STEPS = (30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)
MAX_POINTS = 2016
# api.go queryRange: "exceeded maximum resolution of 11,000 points per timeseries".
PROMETHEUS_MAX_POINTS = 11000
# Chart buckets, seconds: the smallest not below the query step whose window needs at most CHART_POINTS buckets
# (a bucket cut at each end of the window counts: a week is 168 hours, 169 or 170 hourly buckets).
CHART_BUCKETS = (300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
CHART_POINTS = 170
# gpu_hours' profile of a device without MIG.
WHOLE = "whole"
_DURATION = re.compile(r"^([0-9]+)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_MATCHER = re.compile(r'^\s*[A-Za-z_][A-Za-z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*$')


class UsageError(Exception):
    """An answer or input the figures cannot be made from; the message is for the user."""


def parse_duration(value: Any, what: str = "window") -> int:
    """'7d', '36h', '90m' (Prometheus duration units s, m, h, d, w; one unit) -> seconds."""
    m = _DURATION.match(str(value).strip()) if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    if m is None or int(m.group(1)) == 0:
        raise UsageError("%s %r is not a duration like 7d, 36h or 90m (a whole number above 0 and one of s, m, h, d, w)" % (what, value))
    return int(m.group(1)) * _UNITS[m.group(2)]


def choose_step(window_s: int, step_s: Optional[int] = None) -> int:
    """The query step: ``step_s`` when given (refused when the window would need more points than Prometheus
    answers), else the smallest of STEPS that keeps the window within MAX_POINTS."""
    if step_s is not None:
        if step_s < 1:
            raise UsageError("step must be at least 1 second, got %d" % step_s)
        if window_s // step_s + 1 > PROMETHEUS_MAX_POINTS:
            points = window_s // step_s + 1
            raise UsageError("a %d s window at a %d s step is %d points per series; Prometheus answers at most %d "
                             "(web/api/v1/api.go queryRange): use a larger step" % (window_s, step_s, points, PROMETHEUS_MAX_POINTS))
        return step_s
    for step in STEPS:
        if window_s <= step * MAX_POINTS:
            return step
    raise UsageError("a %d s window is longer than %d days at the largest step; use a shorter window" % (window_s, STEPS[-1] * MAX_POINTS // 86400))


def check_matchers(matchers: Optional[Sequence[str]]) -> list[str]:
    """PromQL label matchers (``cluster="prod"``, ``Hostname=~"gpu-.*"``) checked one by one, so a stray brace or
    quote cannot change the query."""
    out = []
    for m in matchers or []:
        if not isinstance(m, str) or not _MATCHER.match(m):
            raise UsageError('match: %r is not one PromQL label matcher like cluster="prod" or Hostname=~"gpu-.*"' % (m,))
        out.append(m.strip())
    return out


def promql(metric: str, function: str, step_s: int, matchers: Sequence[str] = ()) -> str:
    """The query for one figure: ``<function>(<metric>{<matchers>}[<step>s])``."""
    return "%s(%s{%s}[%ds])" % (function, metric, ",".join(matchers), step_s)


def answer_data(body: Any, what: str) -> Any:
    """``data`` of a Prometheus API answer; UsageError naming ``what`` for an error answer or an unknown shape."""
    if not isinstance(body, Mapping) or body.get("status") not in ("success", "error"):
        raise UsageError("%s: the answer is not a Prometheus API response (no status): %s" % (what, str(body)[:200]))
    if body["status"] == "error":
        raise UsageError("%s: Prometheus answered %s: %s" % (what, body.get("errorType") or "error", body.get("error") or "no reason given"))
    return body.get("data")


def matrix(data: Any, what: str) -> list[dict[str, Any]]:
    """The series of a query_range answer: [{labels, points: [(unix seconds, float)]}]; NaN samples dropped."""
    if not isinstance(data, Mapping) or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        raise UsageError("%s: expected a matrix answer, got %s" % (what, str(data)[:200]))
    out = []
    for s in data["result"]:
        if not isinstance(s, Mapping) or not isinstance(s.get("metric"), Mapping) or not isinstance(s.get("values"), list):
            raise UsageError("%s: a series without metric and values: %s" % (what, str(s)[:200]))
        points = []
        for p in s["values"]:
            try:
                ts, value = float(p[0]), float(p[1])
            except (TypeError, ValueError, IndexError, KeyError):
                raise UsageError("%s: %r is not a [time, \"value\"] sample" % (what, p)) from None
            if not math.isnan(value):
                points.append((ts, value))
        out.append({"labels": dict(s["metric"]), "points": points})
    return out


def scalar(data: Any, what: str) -> float:
    """The value of an instant query answering a scalar (``time()``): ``{"resultType": "scalar", "result": [t, "v"]}``."""
    try:
        if data["resultType"] != "scalar":
            raise TypeError(data["resultType"])
        return float(data["result"][1])
    except (TypeError, ValueError, IndexError, KeyError):
        raise UsageError("%s: expected a scalar answer, got %s" % (what, str(data)[:200])) from None


def missing_message(present: Iterable[str]) -> Optional[str]:
    """What to tell the user when required metrics are missing from Prometheus (None when none is)."""
    present = set(present)
    missing = [m for m in REQUIRED if m not in present]
    if not missing:
        return None
    if not present & set(REQUIRED + OPTIONAL):
        return ("Prometheus holds no dcgm-exporter series (%s) for the selected window and matchers: is dcgm-exporter "
                "running on the GPU nodes and scraped by this Prometheus?" % ", ".join(REQUIRED))
    off = [m for m in missing if m in DEFAULT_OFF]
    msg = "dcgm-exporter publishes no %s" % ", ".join(missing)
    if off:
        msg += (": %s are commented out in dcgm-exporter's default counters (etc/default-counters.csv, Datacenter "
                "Profiling metrics); enable them in the counters file dcgm-exporter reads (-f / DCGM_EXPORTER_COLLECTORS, "
                "or the chart's metrics ConfigMap), as etc/dcp-metrics-included.csv does" % ", ".join(off))
    return msg


def _host(labels: Mapping[str, Any]) -> Optional[str]:
    for key in HOST_LABELS:
        if labels.get(key):
            return str(labels[key])
    return None


def device_key(labels: Mapping[str, Any], what: str) -> tuple[str, str, str, str]:
    """(host, gpu index, UUID, GPU_I_ID or '') of a series; UsageError naming the series when it lacks them."""
    host, gpu = _host(labels), labels.get("gpu")
    uuid = labels.get("UUID") or labels.get("uuid")
    if not host or gpu in (None, "") or not uuid:
        raise UsageError("%s: a series without %s: %s (dcgm-exporter labels every GPU series with Hostname, gpu and UUID)"
                         % (what, ", ".join(k for k, v in (("Hostname", host), ("gpu", gpu), ("UUID", uuid)) if not v),
                            dict(labels)))
    return host, str(gpu), str(uuid), str(labels.get("GPU_I_ID") or "")


def _pod(labels: Mapping[str, Any]) -> Optional[tuple[str, str, str]]:
    for ns, pod, container in POD_LABELS:
        if labels.get(pod):
            return str(labels.get(ns) or ""), str(labels[pod]), str(labels.get(container) or "")
    return None


def stats(values: Sequence[float]) -> dict[str, float]:
    """mean, p95 (nearest rank) and max of ``values`` (not empty)."""
    ordered = sorted(values)
    rank = max(1, int(math.ceil(0.95 * len(ordered))))
    return {"mean": sum(ordered) / len(ordered), "p95": ordered[rank - 1], "max": ordered[-1]}


def chart_bucket(window_s: int, step_s: int) -> int:
    """The bucket of a chart series: the smallest of CHART_BUCKETS not below ``step_s`` that cuts ``window_s`` into at
    most CHART_POINTS epoch-aligned buckets (floor(window / bucket) + 2, the two cut ones included); beyond them whole
    days."""
    for bucket in CHART_BUCKETS:
        if bucket >= step_s and window_s // bucket + 2 <= CHART_POINTS:
            return bucket
    days = int(math.ceil(window_s / float(CHART_POINTS - 2) / 86400.0))
    return max(days * 86400, int(math.ceil(step_s / 86400.0)) * 86400)


def downsample(values: Mapping[float, float], bucket_s: int, how: str) -> dict[float, float]:
    """{bucket start: the mean (``how="mean"``) or max (``"max"``) of the values whose time falls in it}; buckets
    start at multiples of ``bucket_s`` since the Unix epoch, and a bucket without values is left out."""
    if how not in ("mean", "max"):
        raise ValueError("how must be mean or max, got %r" % (how,))
    buckets: dict[float, list[float]] = {}
    for ts, v in values.items():
        buckets.setdefault(float(math.floor(ts / bucket_s) * bucket_s), []).append(v)
    return {b: (sum(vs) / len(vs) if how == "mean" else max(vs)) for b, vs in sorted(buckets.items())}


def chart_series(sm_active: Mapping[float, float], fb_used_peak: Mapping[float, float], fb_total_mib: float,
                 bucket_s: int) -> dict[str, Any]:
    """A device's chart: {bucket, t (bucket starts, Unix seconds), sm_active (mean ratio per bucket), fb_used_mib (max
    per bucket), memory_used (that max / fb_total_mib)}, aligned on ``t``; a bucket one of them lacks holds None there.
    Ratios rounded to 4 decimals, MiB to 1 (a result stays small: a week is at most 170 points)."""
    sm, mem = downsample(sm_active, bucket_s, "mean"), downsample(fb_used_peak, bucket_s, "max")
    times = sorted(set(sm) | set(mem))
    return {"bucket": bucket_s, "t": times,
            "sm_active": [round(sm[t], 4) if t in sm else None for t in times],
            "fb_used_mib": [round(mem[t], 1) if t in mem else None for t in times],
            "memory_used": [round(mem[t] / fb_total_mib, 4) if t in mem else None for t in times]}


def gpu_hours(devices: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """GPU-hours per profile and per namespace (see the module docstring for the unit) from ``aggregate``'s records.

    ``by_profile``: [{model, profile (a MIG profile, or WHOLE), devices, hours, hours_with_pods}];
    ``by_namespace``: [{model, profile, namespace ('' for pods without one), hours}]; both sorted by model, profile
    (and namespace), hours rounded to 4 decimals."""
    profiles: dict[tuple[str, str], dict[str, Any]] = {}
    namespaces: dict[tuple[str, str, str], float] = {}
    for d in devices:
        key = (str(d.get("model") or ""), str(d.get("mig_profile") or WHOLE))
        row = profiles.setdefault(key, {"devices": 0, "hours": 0.0, "hours_with_pods": 0.0})
        row["devices"] += 1
        row["hours"] += float(d.get("hours") or 0.0)
        row["hours_with_pods"] += float(d.get("hours_with_pods") or 0.0)
        for ns, hours in (d.get("namespace_hours") or {}).items():
            namespaces[key + (ns,)] = namespaces.get(key + (ns,), 0.0) + float(hours)
    return {
        "by_profile": [{"model": m, "profile": p, "devices": r["devices"], "hours": round(r["hours"], 4),
                        "hours_with_pods": round(r["hours_with_pods"], 4)} for (m, p), r in sorted(profiles.items())],
        "by_namespace": [{"model": m, "profile": p, "namespace": ns, "hours": round(h, 4)}
                         for (m, p, ns), h in sorted(namespaces.items())],
    }


def aggregate(answers: Mapping[str, Sequence[Mapping[str, Any]]], step_s: int,
              bucket_s: Optional[int] = None) -> list[dict[str, Any]]:
    """The figures per GPU and per MIG instance from the series of each QUERIES figure (``matrix`` output).

    A device's value at a time is the largest of its series then (PodMapper copies, see the docstring). A whole-GPU
    key whose GPU has MIG instances in the answers is the parent of those instances and is left out. Each record:
    host, gpu, uuid, model, mig_profile, gi_id, hours (distinct SM-activity steps x step), samples, sm_active,
    sm_occupancy, dram_active (ratios), gpu_util (percent, or None), fb_used_mib, memory_used (ratio of used to
    used + free), fb_total_mib, pods [{namespace, pod, container, fb_used_max_mib}], namespaces, max_concurrent_pods,
    hours_with_pods and namespace_hours {namespace: hours} (see gpu_hours), and with ``bucket_s`` a chart ``series``
    (chart_series of SM activity and the per-step memory peak)."""
    values: dict[tuple[str, str, str, str], dict[str, dict[float, float]]] = {}
    info: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    pods_at: dict[tuple[str, str, str, str], dict[float, set[tuple[str, str, str]]]] = {}
    pod_peak: dict[tuple[str, str, str, str], dict[tuple[str, str, str], float]] = {}
    for figure, _metric, _fn in QUERIES:
        for series in answers.get(figure) or []:
            key = device_key(series["labels"], figure)
            labels = series["labels"]
            meta = info.setdefault(key, {"model": "", "mig_profile": None})
            meta["model"] = meta["model"] or str(labels.get("modelName") or "")
            meta["mig_profile"] = meta["mig_profile"] or labels.get("GPU_I_PROFILE") or None
            per_ts = values.setdefault(key, {}).setdefault(figure, {})
            pod = _pod(labels)
            for ts, v in series["points"]:
                per_ts[ts] = max(per_ts.get(ts, v), v)
                if pod is not None:
                    pods_at.setdefault(key, {}).setdefault(ts, set()).add(pod)
            if pod is not None and figure == "fb_used_peak" and series["points"]:
                peaks = pod_peak.setdefault(key, {})
                peaks[pod] = max([peaks.get(pod, 0.0)] + [v for _ts, v in series["points"]])
    parents = set((k[0], k[2]) for k in values if k[3])
    out = []
    for key in sorted(values, key=lambda k: (k[0], int(k[1]) if k[1].isdigit() else 0, k[1], k[3])):
        host, gpu, uuid, gi = key
        if not gi and (host, uuid) in parents:
            continue
        figures = values[key]
        where = "%s GPU %s%s" % (host, gpu, " GPU instance %s" % gi if gi else "")
        # fb_used_peak reads the same metric as fb_used: never missing on its own.
        lacking = [m for f, m, _fn in QUERIES if f in _REQUIRED_FIGURES and not figures.get(f)]
        if lacking:
            raise UsageError("%s: no %s in the window (the other figures of this GPU are there)" % (where, ", ".join(lacking)))
        used, free = figures["fb_used"], figures["fb_free"]
        both = sorted(set(used) & set(free))
        if not both:
            raise UsageError("%s: DCGM_FI_DEV_FB_USED and DCGM_FI_DEV_FB_FREE have no sample at the same time" % where)
        total = max(used[ts] + free[ts] for ts in both)
        if total <= 0:
            raise UsageError("%s: framebuffer used + free is %g MiB: no memory figures to read" % (where, total))
        peak = figures["fb_used_peak"] if figures.get("fb_used_peak") else used
        memory = stats([used[ts] / total for ts in both])
        memory["max"] = max(memory["max"], max(peak.values()) / total)
        # A pod without its own memory series (attributed on other fields only) is charged its GPU's peak while it ran.
        seen: dict[tuple[str, str, str], float] = {}
        for ts, running in pods_at.get(key, {}).items():
            for pod in running:
                seen[pod] = max(seen.get(pod, 0.0), peak.get(ts, 0.0))
        seen.update(pod_peak.get(key, {}))
        pods = sorted(seen.items())
        steps_of: dict[str, int] = {}
        for running in pods_at.get(key, {}).values():
            for ns in set(p[0] for p in running):
                steps_of[ns] = steps_of.get(ns, 0) + 1
        record: dict[str, Any] = {
            "host": host, "gpu": gpu, "uuid": uuid, "model": info[key]["model"], "mig_profile": info[key]["mig_profile"],
            "gi_id": gi or None, "samples": len(figures["sm_active"]), "hours": len(figures["sm_active"]) * step_s / 3600.0,
            "sm_active": stats(list(figures["sm_active"].values())),
            "sm_occupancy": stats(list(figures["sm_occupancy"].values())),
            "dram_active": stats(list(figures["dram_active"].values())),
            "gpu_util": stats(list(figures["gpu_util"].values())) if figures.get("gpu_util") else None,
            "fb_used_mib": dict(stats(list(used.values())), max=max(peak.values())),
            "memory_used": memory, "fb_total_mib": total,
            "pods": [{"namespace": p[0], "pod": p[1], "container": p[2], "fb_used_max_mib": v} for p, v in pods],
            "namespaces": sorted(set(p[0] for p, _v in pods)),
            "max_concurrent_pods": max((len(s) for s in pods_at.get(key, {}).values()), default=0),
            "hours_with_pods": sum(1 for s in pods_at.get(key, {}).values() if s) * step_s / 3600.0,
            "namespace_hours": {ns: n * step_s / 3600.0 for ns, n in sorted(steps_of.items())},
        }
        if bucket_s:
            record["series"] = chart_series(figures["sm_active"], peak, total, bucket_s)
        out.append(record)
    return out


def check_nodes(devices: Sequence[Mapping[str, Any]], nodes: Optional[Sequence[str]]) -> list[Mapping[str, Any]]:
    """The devices of ``nodes`` (all when None); a node with no series is an error naming it."""
    if nodes is None:
        return list(devices)
    absent = [n for n in nodes if not any(d["host"] == n for d in devices)]
    if absent:
        raise UsageError("no dcgm-exporter series for node(s) %s (Hostname labels seen: %s)" % (
            ", ".join(absent), ", ".join(sorted(set(str(d["host"]) for d in devices))) or "none"))
    return [d for d in devices if d["host"] in nodes]
