# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fleet report (private): host facts -> report model (JSON-able) -> self-contained HTML page.

Pure logic apart from reading the page template (templates/fleet_report.html.j2 next to this file). The action
plugin ``fleet_report`` writes the files; the filter ``report_model`` exposes the model step to templates and
``set_stats``.
"""

from __future__ import annotations

import datetime
import functools
import html
import os
import re
from collections.abc import Mapping
from typing import Any, Optional, TypeGuard

import jinja2
from ansible.errors import AnsibleFilterError
from markupsafe import Markup

from ansible_collections.gpuops.provision.plugins.module_utils._preflight import health as preflight_health

Model = dict[str, Any]

# Where an A30 shows 4 memory slices NVML itself says so through the placements; without profiles we fall back to
# the model name (reference mig.md M3: 8 memory slices on A100/H100/H200/B200, 4 on A30).
DEFAULT_MEMORY_SLICES = 8
FOUR_SLICE_MODELS = ("A30",)

PIECES = ("gpu", "iommu", "driver", "license", "preflight", "changes", "driver_pin", "notes")


def _is_map(value: Any) -> TypeGuard[Mapping[str, Any]]:
    return isinstance(value, Mapping)


def _failed(result: Any) -> Optional[str]:
    """A registered result that failed or was skipped carries no facts; say why instead."""
    if not _is_map(result):
        return None
    if result.get("skipped"):
        return "skipped"
    if result.get("failed") or result.get("unreachable"):
        return str(result.get("msg") or "task failed")
    return None


def memory_slices(gpu: Mapping[str, Any]) -> int:
    """Total memory slices of a GPU: from its profile placements when known, else from the model."""
    ends: list[int] = []
    for prof in gpu.get("profiles") or []:
        for pl in prof.get("placements") or []:
            if _is_map(pl):
                ends.append(int(pl.get("start", 0)) + int(pl.get("size", 0)))
    if ends:
        return max(ends)
    model = str(gpu.get("model") or "")
    if any(m in model.split() or model.endswith(" " + m) for m in FOUR_SLICE_MODELS):
        return 4
    return DEFAULT_MEMORY_SLICES


def _instances(gpu: Mapping[str, Any], total: int) -> list[Model]:
    out: list[Model] = []
    for gi in gpu.get("instances") or []:
        if not _is_map(gi):
            continue
        pl = gi.get("placement") or {}
        start, size = int(pl.get("start", 0)), int(pl.get("size", 0))
        out.append({
            "gi_id": gi.get("gi_id"), "profile": gi.get("profile"), "start": start, "size": size,
            "compute_instances": len(gi.get("compute_instances") or []),
            # Outside the slice range means the facts and the drawing disagree; flag rather than draw garbage.
            "valid": size > 0 and start >= 0 and start + size <= total,
        })
    return sorted(out, key=lambda x: (x["start"], x["size"]))


def _gpu_entry(gpu: Mapping[str, Any], iommu_by_addr: Mapping[str, Any], lic_by_index: Mapping[Any, Any],
               health: Optional[Model] = None) -> Model:
    total = memory_slices(gpu)
    mode = gpu.get("mig_mode") or None
    entry: Model = {
        "index": gpu.get("index"), "uuid": gpu.get("uuid"), "model": gpu.get("model"),
        "pci_address": gpu.get("pci_address"), "kernel_driver": gpu.get("kernel_driver"),
        "error": gpu.get("error"),
        "mig": None, "isolation": None, "license": None,
        # {status, failing: [{check, status, evidence}]} (module_utils/_preflight/health.py); None without health readings.
        "health": health,
    }
    if gpu.get("mig_capable") or mode:
        current = mode.get("current") if _is_map(mode) else None
        pending = mode.get("pending") if _is_map(mode) else None
        entry["mig"] = {
            "current": current, "pending": pending, "reset_pending": bool(current and pending and current != pending),
            "memory_slices": total, "instances": _instances(gpu, total) if current == "enabled" else [],
            "devices": dict(gpu.get("mig_devices") or {}),
        }
        used = sorted((i["start"], i["size"]) for i in entry["mig"]["instances"] if i["valid"])
        free = [s for s in range(total) if not any(a <= s < a + z for a, z in used)]
        entry["mig"]["free_slices"] = free
    io = iommu_by_addr.get(str(gpu.get("pci_address") or "").lower())
    if io is not None:
        entry["isolation"] = {"isolated": io.get("isolated"), "iommu_group": io.get("iommu_group"),
                              "reason": io.get("isolation_reason"), "driver": io.get("driver")}
    lic = lic_by_index.get(gpu.get("index"))
    if lic is not None:
        entry["license"] = {"state": lic.get("state"), "feature": lic.get("feature"), "product": lic.get("product"),
                            "expiry": lic.get("expiry"), "days_left": lic.get("days_left"), "error": lic.get("error")}
    elif _is_map(gpu.get("license")):
        state = {True: "licensed", False: "unlicensed"}.get(gpu["license"].get("licensed"), "not licensable")
        entry["license"] = {"state": state}
    return entry


def _not_applicable(check_id: Any, gpu: Optional[Mapping[str, Any]]) -> Optional[str]:
    """Why a check's warning on this GPU is not applicable (nothing an operator can act on), else None: only
    gpu_memory on a MIG-enabled GPU, whose row remapping NVML cannot read (module_utils/_preflight/health.py)."""
    if check_id != "gpu_memory" or not _is_map(gpu):
        return None
    return preflight_health.remapping_hidden_by_mig(gpu)


def _health_entry(verdict: Optional[Model], gpu: Mapping[str, Any]) -> Optional[Model]:
    """A GPU's health verdict with its not-applicable warnings moved out of ``failing`` into ``not_applicable`` and
    the status recomputed from what is left, so a MIG GPU is not yellow for what nobody can fix."""
    if verdict is None:
        return None
    failing: list[Model] = []
    not_applicable: list[Model] = []
    for f in verdict.get("failing") or []:
        reason = _not_applicable(f.get("check"), gpu) if f.get("status") == "warn" else None
        if reason:
            not_applicable.append({"check": f.get("check"), "reason": reason})
        else:
            failing.append(f)
    status = verdict.get("status")
    if not_applicable:
        status = max((str(f.get("status")) for f in failing), key=lambda st: preflight_health.WORST.get(st, 0), default="pass")
    return {"status": status, "failing": failing, "not_applicable": not_applicable}


def _preflight_entry(pf: Mapping[str, Any], gpus_by_index: Mapping[Any, Mapping[str, Any]]) -> Model:
    """The node's preflight report as the page shows it: a check whose every warning is not applicable (see
    _not_applicable) shows as ``n/a`` with the reason, and a node that warned only for such checks passes here;
    ``reported_verdict`` keeps what the node said. A failed node stays failed (fail_on_warn may have made it)."""
    checks: list[Model] = []
    for c in pf.get("checks") or []:
        if not _is_map(c) or c.get("status") == "skip":
            continue
        status, evidence, remedy = c.get("status"), c.get("evidence"), c.get("remedy") or ""
        per_gpu = [g for g in c.get("gpus") or [] if _is_map(g) and g.get("status") in ("warn", "fail")]
        reasons = [(g.get("index"), _not_applicable(c.get("id"), gpus_by_index.get(g.get("index"))))
                   for g in per_gpu if g.get("status") == "warn"]
        if status == "warn" and per_gpu and len(reasons) == len(per_gpu) and all(r for _i, r in reasons):
            status, remedy = "n/a", ""
            evidence = "not applicable: " + "; ".join("GPU %s: %s" % (i, r) for i, r in reasons)
        checks.append({"id": c.get("id"), "status": status, "evidence": evidence, "remedy": remedy})
    reported = pf.get("verdict")
    warned = [c["id"] for c in checks if c["status"] == "warn"]
    verdict = "pass" if reported == "warn" and not warned and not any(c["status"] == "fail" for c in checks) else reported
    return {"verdict": verdict, "reported_verdict": reported, "ready": pf.get("ready"), "generated_at": pf.get("generated_at"),
            "failed_checks": list(pf.get("failed_checks") or []),
            "warned_checks": warned if checks else list(pf.get("warned_checks") or []),
            "not_applicable_checks": [c["id"] for c in checks if c["status"] == "n/a"], "checks": checks}


def vfio_passthrough(nvml: Mapping[str, Any], iommu_gpus: list[Mapping[str, Any]]) -> Optional[str]:
    """Why NVML is absent by design, or None: every NVIDIA GPU of the host is bound to vfio-pci (a passthrough host
    such as a Proxmox VE node: the GPUs belong to VMs and no NVIDIA driver is loaded). Without IOMMU facts, or with
    any GPU on another driver (or none), a missing NVML stays a warning."""
    if nvml.get("available", True) or not iommu_gpus or any(g.get("driver") != "vfio-pci" for g in iommu_gpus):
        return None
    return ("NVML not loaded: all %d GPU(s) are bound to vfio-pci for passthrough, so no NVIDIA driver runs on this "
            "host by design (gpu_info: %s)" % (len(iommu_gpus), nvml.get("reason") or "not available"))


def _changes(value: Any) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for item in value or []:
        if _is_map(item):
            out.append({"task": str(item.get("task") or item.get("name") or "?"),
                        "detail": str(item.get("detail") or item.get("msg") or "")})
        elif item not in (None, ""):
            out.append({"task": str(item), "detail": ""})
    return out


def _host_health(gpu_res: Any, preflight: Any) -> dict[Any, Model]:
    """Per-GPU health verdicts: the node's preflight results when its gpu_* checks ran (with the inventory's
    thresholds), else the checks' defaults over the gpu_info readings; {} without readings."""
    if _is_map(preflight):
        results = [c for c in preflight.get("checks") or [] if _is_map(c) and c.get("id") in preflight_health.PER_GPU_CHECKS
                   and c.get("status") != "skip" and c.get("gpus")]
        if results:
            return preflight_health.gpu_verdicts(results)
    if not _is_map(gpu_res) or not any(_is_map(g) and g.get("health") for g in gpu_res.get("gpus") or []):
        return {}
    return preflight_health.evaluate_gpus(gpu_res)


def host_model(host: Any, facts: Any) -> Model:
    """One host's report entry from the collection's facts; every piece is optional."""
    facts = facts if _is_map(facts) else {}
    notes = [str(n) for n in facts.get("notes") or []]
    gpu_res = facts.get("gpu")
    iommu = facts.get("iommu")
    lic = facts.get("license")
    for name, res in (("gpu_info", gpu_res), ("iommu_info", iommu), ("nvidia_license_info", lic)):
        why = _failed(res)
        if why:
            notes.append("%s: %s" % (name, why))
    gpu_res = gpu_res if _is_map(gpu_res) and not _failed(gpu_res) else None
    iommu = iommu if _is_map(iommu) and not _failed(iommu) else None
    lic = lic if _is_map(lic) and not _failed(lic) else None

    iommu_by_addr = dict((str(g.get("address") or "").lower(), g) for g in (iommu or {}).get("gpus") or [] if _is_map(g))
    lic_by_index = dict((g.get("index"), g) for g in (lic or {}).get("gpus") or [] if _is_map(g))
    nvml = (gpu_res or {}).get("nvml") or {}
    info: list[str] = []
    if gpu_res is not None and not nvml.get("available", True):
        why = vfio_passthrough(nvml, list(iommu_by_addr.values()))
        if why:
            info.append(why)
        else:
            notes.append("NVML: %s" % (nvml.get("reason") or "not available"))
    health = _host_health(gpu_res, facts.get("preflight"))
    gpu_facts = [g for g in (gpu_res or {}).get("gpus") or [] if _is_map(g)]
    gpus = [_gpu_entry(g, iommu_by_addr, lic_by_index, _health_entry(health.get(g.get("index")), g)) for g in gpu_facts]
    if not gpus and iommu_by_addr:
        # A passthrough host with GPUs bound to vfio-pci has no NVML view: show them from the IOMMU side.
        for addr, io in sorted(iommu_by_addr.items()):
            gpus.append({"index": None, "uuid": None, "model": None, "pci_address": addr, "kernel_driver": io.get("driver"),
                         "error": None, "mig": None, "license": None,
                         "isolation": {"isolated": io.get("isolated"), "iommu_group": io.get("iommu_group"),
                                       "reason": io.get("isolation_reason"), "driver": io.get("driver")}})

    drv = facts.get("driver") if _is_map(facts.get("driver")) else {}
    driver = None
    if drv or nvml.get("driver_version"):
        pin = drv.get("pin") or facts.get("driver_pin") or None
        installed = drv.get("installed_version") or drv.get("driver_version")
        loaded = drv.get("loaded_version") or nvml.get("driver_version")
        on_pin = drv.get("on_pin")
        if on_pin is None and pin:
            on_pin = str(pin) in (str(drv.get("driver_version") or ""), str(installed or ""), str(loaded or ""))
        driver = {"installed": installed, "loaded": loaded or None, "version": drv.get("driver_version") or loaded,
                  "pin": pin, "on_pin": on_pin if pin else None, "state": drv.get("state"),
                  "reboot_pending": bool(drv.get("reboot_pending"))}

    licence = None
    if lic is not None:
        licence = {"licensed": lic.get("licensed"), "vgpu_guest": lic.get("vgpu_guest"),
                   "feature": ((lic.get("gridd") or {}).get("feature_name")),
                   "tokens": len(((lic.get("gridd") or {}).get("tokens")) or [])}

    iommu_summary = None
    if iommu is not None:
        io_gpus = [g for g in iommu.get("gpus") or [] if _is_map(g)]
        iommu_summary = {"active": iommu.get("active"), "kind": iommu.get("kind"), "passthrough": iommu.get("passthrough"),
                         "gpus": len(io_gpus), "isolated": sum(1 for g in io_gpus if g.get("isolated")),
                         "not_isolated": [g.get("address") for g in io_gpus if not g.get("isolated")]}

    pf = facts.get("preflight")
    preflight = None
    if _is_map(pf) and pf.get("verdict"):
        preflight = _preflight_entry(pf, dict((g.get("index"), g) for g in gpu_facts))
    return {"host": str(host), "gpus": gpus, "driver": driver, "license": licence, "iommu": iommu_summary,
            "preflight": preflight, "changes": _changes(facts.get("changes")), "notes": notes, "info": info}


# --- Proxmox VE VMs and vSphere hosts (the API-managed half of the fleet) ------------------------------------------

def _vms_from_used_by(node: str, gpus: list[Mapping[str, Any]]) -> list[Model]:
    """VMs from the GPUs' ``used_by`` where pve_gpu_info returned no ``vms`` (before it did): no names or states."""
    by_vm: dict[int, Model] = {}
    for g in gpus:
        for dev in [g] + [v for v in g.get("vfs") or [] if _is_map(v)]:
            for u in dev.get("used_by") or []:
                vm = by_vm.setdefault(int(u["vmid"]), {"vmid": int(u["vmid"]), "name": None, "status": None, "node": node,
                                                       "hostpci": []})
                if not any(h["slot"] == u.get("slot") for h in vm["hostpci"]):
                    vm["hostpci"].append(dict(u, mdev_name=None, gpus=[dev.get("id")]))
    return [by_vm[k] for k in sorted(by_vm)]


def proxmox_model(name: Any, result: Any) -> Model:
    """One Proxmox VE cluster entry from its registered pve_gpu_info result: per node its GPUs and the VMs whose
    hostpci entries hold them (a mapping or a raw PCI address, the mdev/vGPU type); a failed read keeps its reason."""
    entry: Model = {"name": str(name), "error": _failed(result) if _is_map(result) else "not read", "nodes": [],
                    "skipped_nodes": {}}
    if entry["error"] or not _is_map(result):
        return entry
    entry["skipped_nodes"] = dict(result.get("skipped_nodes") or {})
    for node, facts in sorted((result.get("nodes") or {}).items()):
        gpus = [g for g in (facts or {}).get("gpus") or [] if _is_map(g)]
        names = {}
        for g in gpus:
            for dev in [g] + [v for v in g.get("vfs") or [] if _is_map(v)]:
                names[dev.get("id")] = "%s %s" % (dev.get("id"), dev.get("device_name") or dev.get("pci_id") or "")
        raw_vms = (facts or {}).get("vms")
        vms: list[Model] = []
        for vm in raw_vms if raw_vms is not None else _vms_from_used_by(node, gpus):
            if not _is_map(vm):
                continue
            devices = [{"slot": h.get("slot"), "via": h.get("via"), "mapping": h.get("mapping"),
                        "paths": list(h.get("paths") or []), "mdev": h.get("mdev"), "mdev_name": h.get("mdev_name"),
                        "gpus": [names.get(i, i) for i in h.get("gpus") or []]}
                       for h in vm.get("hostpci") or [] if _is_map(h)]
            vms.append({"vmid": vm.get("vmid"), "name": vm.get("name"), "status": vm.get("status"), "devices": devices})
        used = {i for vm in vms for d in vm["devices"] for i in d["gpus"]}
        entry["nodes"].append({"node": str(node), "gpus": [names[g.get("id")] for g in gpus],
                               "free_gpus": [names[g.get("id")] for g in gpus if names[g.get("id")] not in used
                                             and not any(names.get(v.get("id")) in used for v in g.get("vfs") or [])],
                               "vms": vms})
    return entry


def vsphere_model(name: Any, result: Any) -> Model:
    """One vCenter entry from its registered vsphere_gpu_info result: per cluster its GPU hosts with their vGPU VMs
    (profiles) and the cluster's driver drift (one driver per cluster); a failed read keeps its reason."""
    entry: Model = {"name": str(name), "error": _failed(result) if _is_map(result) else "not read", "clusters": []}
    if entry["error"] or not _is_map(result):
        return entry
    drift: Mapping[str, Any] = result["drift"] if _is_map(result.get("drift")) else {}
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for h in result.get("hosts") or []:
        if _is_map(h):
            # vsphere_gpu_info names a standalone host's drift group so (module_utils/_vsphere/vgpu.py drift_by_cluster).
            groups.setdefault(h.get("cluster") or "standalone host %s" % h.get("name"), []).append(h)
    for cluster, hosts in sorted(groups.items()):
        c_drift = (drift.get("clusters") or {}).get(cluster)
        gpu_hosts = [h for h in hosts if h.get("gpu_host")]
        entry["clusters"].append({
            "cluster": cluster, "other_hosts": len(hosts) - len(gpu_hosts),
            "drift": None if not _is_map(c_drift) else {
                "consistent": c_drift.get("consistent"), "versions": dict(c_drift.get("versions") or {}),
                "missing": list(c_drift.get("missing") or []), "majority": c_drift.get("majority")},
            "hosts": [{"name": h.get("name"), "connection_state": h.get("connection_state"),
                       "maintenance": bool(h.get("in_maintenance_mode")), "esxi_version": h.get("esxi_version"),
                       "driver": ((h.get("driver") or {}).get("version")),
                       "gpus": [g.get("device_name") for g in h.get("gpus") or [] if _is_map(g)],
                       "vgpu_vms": [{"name": v.get("name"), "power_state": v.get("power_state"),
                                     "profiles": list(v.get("profiles") or [])}
                                    for v in h.get("vgpu_vms") or [] if _is_map(v)]}
                      for h in sorted(gpu_hosts, key=lambda h: str(h.get("name")))]})
    return entry


# --- GPU usage (gpu_usage_info: issue 43 point 3) -------------------------------------------------------------------

# The chart of one GPU or MIG instance, in SVG user units (= CSS px): the plot inside the margins holds 0-100 % on y
# and the window on x; SM activity (mean per bucket) and memory used (max per bucket, as a share of the device's
# framebuffer) are two polylines on the same 0-100 % axis.
CHART = {"width": 360, "height": 124, "left": 34, "right": 8, "top": 18, "bottom": 18}
# Day ticks on x: at most this many labels (every n-th UTC midnight).
CHART_TICKS = 8
# Saturated is a capacity finding (add GPUs), not a failure: the warn colour; sharing advice green.
ADVICE_CLASS = {"saturated": "warn", "time-slicing": "ok", "mig": "ok", "whole": "muted"}
ADVICE_ORDER = ("saturated", "mig", "time-slicing", "whole")


def _utc(ts: float, fmt: str) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime(fmt)


def usage_chart(series: Mapping[str, Any], start: float, end: float, fb_total_mib: Any = None) -> Model:
    """A device's chart geometry from its gpu_usage_info ``series`` over [start, end]: ``sm`` and ``memory``, lists of
    polylines ("x,y x,y ..." with one decimal; a line breaks at a bucket missing a value or a gap of more than one
    bucket; a lone point as a 2-unit dash), each point at the middle of its bucket (clamped to the window); ``y_ticks``
    0/50/100 %; ``x_ticks`` at UTC midnights before the window's end, every n-th day to keep at most CHART_TICKS
    (``MM-DD``; six-hourly ``HH:MM`` for a window of two days or less); ``points`` (the SM points drawn),
    ``sm_max``, ``memory_max`` (ratios) and ``fb_max_mib`` (the largest bucket's memory) for the labels."""
    c = CHART
    plot_w, plot_h = c["width"] - c["left"] - c["right"], c["height"] - c["top"] - c["bottom"]
    span = float(end) - float(start) if end > start else 1.0
    bucket = float(series.get("bucket") or 0)

    def x(t: float) -> float:
        return round(c["left"] + min(max((t + bucket / 2 - start) / span, 0.0), 1.0) * plot_w, 1)

    def y(ratio: float) -> float:
        return round(c["top"] + (1 - min(max(float(ratio), 0.0), 1.0)) * plot_h, 1)

    def lines(values: list[Any]) -> list[str]:
        out: list[list[tuple[float, float]]] = []
        last = None
        for t, v in zip(series.get("t") or [], values):
            if v is None:
                last = None
                continue
            if last is None or t - last > bucket:
                out.append([])
            out[-1].append((x(t), y(v)))
            last = t
        # A lone point (a bucket between gaps) is drawn as a 2-unit dash: a polyline of one point draws nothing.
        return [" ".join("%g,%g" % p for p in (pts if len(pts) > 1 else [(pts[0][0] - 1, pts[0][1]), (pts[0][0] + 1, pts[0][1])]))
                for pts in out]

    sm = list(series.get("sm_active") or [])
    mem = list(series.get("memory_used") or [])
    fb = [v for v in series.get("fb_used_mib") or [] if v is not None]
    days = span / 86400.0
    if days <= 2:
        every, fmt = 6 * 3600, "%H:%M"
    else:
        every, fmt = 86400 * max(1, int(-(-days // CHART_TICKS))), "%m-%d"
    first = (int(start) // every + 1) * every
    x_ticks = [{"x": round(c["left"] + (t - start) / span * plot_w, 1), "label": _utc(t, fmt)}
               for t in range(first, int(end), every)]
    sm_values = [v for v in sm if v is not None]
    mem_values = [v for v in mem if v is not None]
    return {"width": c["width"], "height": c["height"], "left": c["left"], "top": c["top"], "plot_width": plot_w,
            "plot_height": plot_h, "sm": lines(sm), "memory": lines(mem),
            "points": sum(1 for v in sm if v is not None),
            "y_ticks": [{"y": y(r), "label": "%d%%" % (r * 100)} for r in (0, 0.5, 1)], "x_ticks": x_ticks,
            "sm_max": max(sm_values) if sm_values else None, "memory_max": max(mem_values) if mem_values else None,
            "fb_max_mib": max(fb) if fb else None, "fb_total_mib": fb_total_mib}


def _duration_text(seconds: Any) -> Optional[str]:
    """3600 -> 'hour', 900 -> '15 min', 21600 -> '6 h', 172800 -> '2 days' (a chart bucket in words)."""
    if not isinstance(seconds, (int, float)) or seconds <= 0:
        return None
    seconds = int(seconds)
    for unit, name, plural in ((86400, "day", "days"), (3600, "hour", "h"), (60, "min", "min")):
        if seconds % unit == 0:
            n = seconds // unit
            return name if n == 1 else "%d %s" % (n, plural)
    return "%d s" % seconds


def _usage_device(d: Mapping[str, Any], start: float, end: float) -> Model:
    inst = " MIG %s (GI %s)" % (d.get("mig_profile"), d.get("gi_id")) if d.get("mig_profile") else ""
    stat = {k: dict(d[k]) if _is_map(d.get(k)) else {} for k in ("sm_active", "memory_used", "fb_used_mib")}
    return {"host": str(d.get("host")), "gpu": d.get("gpu"), "uuid": d.get("uuid"), "model": d.get("model"),
            "mig_profile": d.get("mig_profile"), "gi_id": d.get("gi_id"), "label": "GPU %s%s" % (d.get("gpu"), inst),
            "hours": d.get("hours"), "sm_active": stat["sm_active"], "memory_used": stat["memory_used"],
            "fb_used_max_mib": stat["fb_used_mib"].get("max"), "fb_total_mib": d.get("fb_total_mib"),
            "namespaces": list(d.get("namespaces") or []),
            "chart": usage_chart(d["series"], start, end, d.get("fb_total_mib")) if _is_map(d.get("series")) else None}


def _proposal(a: Mapping[str, Any]) -> str:
    """What an advice proposes, in a few words: the time-slicing replicas, the MIG geometry, or whole GPUs."""
    pool: Mapping[str, Any] = a["pool"] if _is_map(a.get("pool")) else {}
    if a.get("advice") == "time-slicing":
        return "time-slicing, %s replicas per GPU" % pool.get("replicas")
    if a.get("advice") == "mig" and _is_map(a.get("mig_config")):
        parts = []
        for entries in (a["mig_config"].get("mig-configs") or {}).values():
            for e in entries or []:
                parts.append(", ".join("%d x %s" % (n, p) for p, n in sorted((e.get("mig-devices") or {}).items())))
        return "MIG: " + "; ".join(parts) + " per GPU"
    return "exclusive (whole GPUs)"


def usage_model(result: Any) -> Model:
    """The report's GPU usage section from a registered gpu_usage_info result (run with ``series: true`` for charts):
    ``nodes`` [{host, gpus: [device entry with its ``chart``]}], ``advice`` [{name, nodes, advice, action, rule, reason,
    proposal, figures, cls}], ``gpu_hours`` (the result's, {by_profile, by_namespace}), ``window`` (with UTC
    ``from``/``to`` texts and ``bucket_text``); ``skipped`` (why it was not read, e.g. no Prometheus configured) or
    ``error`` (the failed read's message) instead when so; ``advice_error``: why the advice was refused when the
    result carries one (the playbook reads the charts again without advice then: too little data for a GPU). A plain
    ``{"skipped": true, "msg": ...}`` says it was not read."""
    empty: Model = {"skipped": None, "error": None, "advice_error": None, "window": None, "nodes": [], "advice": [],
                    "gpu_hours": None}
    if not _is_map(result):
        return dict(empty, error="gpu_usage_info: no result")
    if result.get("skipped"):
        return dict(empty, skipped=str(result.get("msg") or result.get("skip_reason") or "not read"))
    if result.get("failed") or result.get("unreachable"):
        return dict(empty, error="gpu_usage_info: %s" % (result.get("msg") or "failed"))
    window: Mapping[str, Any] = result["window"] if _is_map(result.get("window")) else {}
    start, end = float(window.get("start") or 0), float(window.get("end") or 0)
    devices = [_usage_device(d, start, end) for d in result.get("gpus") or [] if _is_map(d)]
    nodes: list[Model] = []
    for d in devices:
        if not nodes or nodes[-1]["host"] != d["host"]:
            nodes.append({"host": d["host"], "gpus": []})
        nodes[-1]["gpus"].append(d)
    advice = []
    for a in result.get("advice") or []:
        if not _is_map(a):
            continue
        f: Mapping[str, Any] = a["figures"] if _is_map(a.get("figures")) else {}
        advice.append({"name": a.get("name"), "nodes": list(a.get("nodes") or []), "advice": a.get("advice"),
                       "action": a.get("action"), "rule": a.get("rule"), "reason": a.get("reason"),
                       "proposal": _proposal(a), "cls": ADVICE_CLASS.get(str(a.get("advice")), "muted"),
                       "figures": {k: f.get(k) for k in ("gpus", "hours_min", "sm_active_mean", "sm_active_p95",
                                                         "memory_used_p95", "peak_workload_mib", "max_concurrent_pods")}})
    hours: Optional[Mapping[str, Any]] = result["gpu_hours"] if _is_map(result.get("gpu_hours")) else None
    return dict(empty, nodes=nodes, advice=advice, advice_error=str(result["advice_error"]) if result.get("advice_error") else None,
                gpu_hours={"by_profile": list(hours.get("by_profile") or []),
                           "by_namespace": list(hours.get("by_namespace") or [])} if hours else None,
                window=dict(window, **{"from": _utc(start, "%Y-%m-%d %H:%M") if start else None,
                                       "bucket_text": _duration_text(window.get("bucket")),
                                       "to": _utc(end, "%Y-%m-%d %H:%M") if end else None,
                                       "days": round((end - start) / 86400.0, 2) if end > start else None}))


def _entries(value: Any, build: Any, what: str) -> list[Model]:
    if value is None:
        return []
    if not _is_map(value):
        raise AnsibleFilterError("fleet report: %s must be a mapping of inventory entry to its read, got %s"
                                 % (what, type(value).__name__))
    return [build(k, value[k]) for k in sorted(value)]


def fleet_model(hosts: Any, title: str = "GPU fleet report", generated_at: Optional[str] = None,
                driver_pin: Optional[str] = None, proxmox: Any = None, vsphere: Any = None, usage: Any = None) -> Model:
    """The whole report: ``hosts`` maps host name -> facts dict with the optional keys of PIECES; ``proxmox`` and
    ``vsphere`` map a cluster / vCenter inventory entry to its registered pve_gpu_info / vsphere_gpu_info result;
    ``usage`` is a registered gpu_usage_info result (see usage_model), None leaving the section out."""
    if not _is_map(hosts):
        raise AnsibleFilterError("fleet report: hosts must be a mapping of host name to facts, got %s" % type(hosts).__name__)
    entries: list[Model] = []
    for name in sorted(hosts):
        facts = hosts[name]
        if driver_pin and _is_map(facts) and not facts.get("driver_pin"):
            facts = dict(facts, driver_pin=driver_pin)
        entries.append(host_model(name, facts))
    pve = _entries(proxmox, proxmox_model, "proxmox")
    use = usage_model(usage) if usage is not None else None
    vsp = _entries(vsphere, vsphere_model, "vsphere")
    gpus = [g for h in entries for g in h["gpus"]]
    summary: Model = {
        "hosts": len(entries),
        "gpus": len(gpus),
        "mig_enabled": sum(1 for g in gpus if g["mig"] and g["mig"]["current"] == "enabled"),
        "gpu_instances": sum(len(g["mig"]["instances"]) for g in gpus if g["mig"]),
        "off_pin": [h["host"] for h in entries if h["driver"] and h["driver"]["on_pin"] is False],
        "unlicensed": [h["host"] for h in entries if h["license"] and h["license"]["licensed"] is False],
        "not_isolated": [h["host"] for h in entries if h["iommu"] and h["iommu"]["not_isolated"]],
        "preflight_failed": [h["host"] for h in entries if h["preflight"] and h["preflight"]["verdict"] == "fail"],
        "preflight_warned": [h["host"] for h in entries if h["preflight"] and h["preflight"]["verdict"] == "warn"],
        "unhealthy_gpus": ["%s GPU %s" % (h["host"], g["index"]) for h in entries for g in h["gpus"]
                           if (g.get("health") or {}).get("status") == "fail"],
        "warned_gpus": ["%s GPU %s" % (h["host"], g["index"]) for h in entries for g in h["gpus"]
                        if (g.get("health") or {}).get("status") == "warn"],
        "not_applicable_gpus": ["%s GPU %s" % (h["host"], g["index"]) for h in entries for g in h["gpus"]
                                if (g.get("health") or {}).get("not_applicable")],
        "changed": [h["host"] for h in entries if h["changes"]],
        "proxmox_gpu_vms": sum(len(n["vms"]) for c in pve for n in c["nodes"]),
        "vsphere_vgpu_vms": sum(len(h["vgpu_vms"]) for v in vsp for c in v["clusters"] for h in c["hosts"]),
        "driver_drift": ["%s %s" % (v["name"], c["cluster"]) for v in vsp for c in v["clusters"]
                         if c["drift"] and c["drift"]["consistent"] is False],
        "unread": [e["name"] for e in pve + vsp if e["error"]],
    }
    if use is not None:
        # Advice per node or pool name (saturated, time-slicing, mig, whole); {} when the usage was not read.
        summary["usage_advice"] = {str(a["name"]): a["advice"] for a in use["advice"]}
        summary["usage_advice_counts"] = [{"advice": k, "names": [n for n, v in summary["usage_advice"].items() if v == k]}
                                          for k in ADVICE_ORDER if k in summary["usage_advice"].values()]
    # The counts AWX shows (set_stats) and the band colours come from: fail beats warn beats ok.
    counted = ("preflight_failed", "preflight_warned", "unhealthy_gpus", "warned_gpus", "not_applicable_gpus")
    summary["counts"] = {key: len(summary[key]) for key in counted}
    model = {"title": title, "generated_at": generated_at, "driver_pin": driver_pin, "summary": summary, "hosts": entries,
             "proxmox": pve, "vsphere": vsp}
    if use is not None:
        model["usage"] = use
    return model


# --- health over runs ----------------------------------------------------------------------------------------------

HISTORY_RUNS = 30


def health_snapshot(model: Mapping[str, Any]) -> dict[str, str]:
    """{"<host> GPU <index> (<uuid>)": status} of every GPU with a health verdict."""
    return {"%s GPU %s (%s)" % (h["host"], g["index"], g["uuid"]): g["health"]["status"]
            for h in model["hosts"] for g in h["gpus"] if g.get("health")}


def with_health_history(model: Model, previous: Any) -> Model:
    """``model`` with ``health_history``: the previous report's history, plus this run when the GPUs' health differs
    from the last entry (so an unchanged fleet leaves the report unchanged), the last HISTORY_RUNS kept."""
    history = list((previous or {}).get("health_history") or []) if _is_map(previous) else []
    snap = health_snapshot(model)
    if snap and (not history or history[-1].get("gpus") != snap):
        history.append({"generated_at": model.get("generated_at"), "gpus": snap})
    return dict(model, health_history=history[-HISTORY_RUNS:])


def changes_from_run_log(log: Any) -> dict[str, list[dict[str, str]]]:
    """Changed tasks per host from an ``ansible.posix.json`` stdout callback document of the last run."""
    out: dict[str, list[dict[str, str]]] = {}
    if not _is_map(log):
        raise AnsibleFilterError("fleet report: the run log is not an ansible.posix.json document")
    for play in log.get("plays") or []:
        for task in play.get("tasks") or []:
            name = ((task.get("task") or {}).get("name")) or "?"
            for host, res in (task.get("hosts") or {}).items():
                if _is_map(res) and res.get("changed"):
                    detail = res.get("msg") if isinstance(res.get("msg"), str) else ""
                    out.setdefault(host, []).append({"task": name, "detail": detail or ""})
    return out


# ---------------------------------------------------------------------------------------------------------------- HTML

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
PAGE = "fleet_report.html.j2"

# A check's or a verdict's status as the CSS class its cell gets.
STATUS_CLASS = {"pass": "ok", "warn": "warn", "fail": "bad", "n/a": "na"}


def _finalize(value: Any) -> Any:
    """Every printed value escaped as html.escape(quote=True) does (&#x27; for ', as the page always had; markupsafe
    would write &#39;), None as nothing; markup the template made itself passes as it is."""
    if hasattr(value, "__html__"):
        return value
    return Markup(html.escape("" if value is None else str(value), quote=True))


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    # Built once, on first use: the loader reads the template next to this file (jinja2 is on every controller).
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined, finalize=_finalize)
    env.globals["STATUS_CLASS"] = STATUS_CLASS
    return env


def run_label(generated_at: Any) -> str:
    """A run's column heading in the health-over-runs table: ``MM-DD HH:MM`` of its ISO 8601 time (UTC as written,
    ``2026-12-05T23:10:17Z`` -> ``12-05 23:10``); a time in another form as it is, a missing one as ``?``."""
    text = str(generated_at or "")
    m = re.match(r"\d{4}-(\d\d)-(\d\d)[T ](\d\d):(\d\d)", text)
    if m:
        return "%s-%s %s:%s" % m.groups()
    return text or "?"


def render_html(model: Mapping[str, Any]) -> str:
    """One self-contained HTML page (inline CSS, no scripts, no external assets), from templates/fleet_report.html.j2."""
    runs = list(model.get("health_history") or [])
    return _environment().get_template(PAGE).render(
        model=model, history_runs=runs, history_gpus=sorted({g for run in runs for g in run["gpus"]}),
        history_labels=[run_label(r.get("generated_at")) for r in runs])
