# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fleet report (private): host facts -> report model (JSON-able) -> self-contained HTML page.

Pure logic apart from reading the page template (templates/fleet_report.html.j2 next to this file). The action
plugin ``fleet_report`` writes the files; the filter ``report_model`` exposes the model step to templates and
``set_stats``.
"""

from __future__ import annotations

import functools
import html
import os
from collections.abc import Mapping
from typing import Any, Optional, TypeGuard

import jinja2
from ansible.errors import AnsibleFilterError
from markupsafe import Markup

from ansible_collections.gpuops.provision.plugins.module_utils import _health

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
        # {status, failing: [{check, status, evidence}]} (module_utils/_health.py); None without health readings.
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
        results = [c for c in preflight.get("checks") or [] if _is_map(c) and c.get("id") in _health.PER_GPU_CHECKS
                   and c.get("status") != "skip" and c.get("gpus")]
        if results:
            return _health.gpu_verdicts(results)
    if not _is_map(gpu_res) or not any(_is_map(g) and g.get("health") for g in gpu_res.get("gpus") or []):
        return {}
    return _health.evaluate_gpus(gpu_res)


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
    if gpu_res is not None and not nvml.get("available", True):
        notes.append("NVML: %s" % (nvml.get("reason") or "not available"))
    health = _host_health(gpu_res, facts.get("preflight"))
    gpus = [_gpu_entry(g, iommu_by_addr, lic_by_index, health.get(g.get("index"))) for g in (gpu_res or {}).get("gpus") or []
            if _is_map(g)]
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
        preflight = {"verdict": pf.get("verdict"), "ready": pf.get("ready"), "generated_at": pf.get("generated_at"),
                     "failed_checks": list(pf.get("failed_checks") or []), "warned_checks": list(pf.get("warned_checks") or []),
                     "checks": [{"id": c.get("id"), "status": c.get("status"), "evidence": c.get("evidence"),
                                 "remedy": c.get("remedy") or ""}
                                for c in pf.get("checks") or [] if _is_map(c) and c.get("status") != "skip"]}
    return {"host": str(host), "gpus": gpus, "driver": driver, "license": licence, "iommu": iommu_summary,
            "preflight": preflight, "changes": _changes(facts.get("changes")), "notes": notes}


def fleet_model(hosts: Any, title: str = "GPU fleet report", generated_at: Optional[str] = None,
                driver_pin: Optional[str] = None) -> Model:
    """The whole report: ``hosts`` maps host name -> facts dict with the optional keys of PIECES."""
    if not _is_map(hosts):
        raise AnsibleFilterError("fleet report: hosts must be a mapping of host name to facts, got %s" % type(hosts).__name__)
    entries: list[Model] = []
    for name in sorted(hosts):
        facts = hosts[name]
        if driver_pin and _is_map(facts) and not facts.get("driver_pin"):
            facts = dict(facts, driver_pin=driver_pin)
        entries.append(host_model(name, facts))
    gpus = [g for h in entries for g in h["gpus"]]
    summary = {
        "hosts": len(entries),
        "gpus": len(gpus),
        "mig_enabled": sum(1 for g in gpus if g["mig"] and g["mig"]["current"] == "enabled"),
        "gpu_instances": sum(len(g["mig"]["instances"]) for g in gpus if g["mig"]),
        "off_pin": [h["host"] for h in entries if h["driver"] and h["driver"]["on_pin"] is False],
        "unlicensed": [h["host"] for h in entries if h["license"] and h["license"]["licensed"] is False],
        "not_isolated": [h["host"] for h in entries if h["iommu"] and h["iommu"]["not_isolated"]],
        "preflight_failed": [h["host"] for h in entries if h["preflight"] and h["preflight"]["verdict"] == "fail"],
        "unhealthy_gpus": ["%s GPU %s" % (h["host"], g["index"]) for h in entries for g in h["gpus"]
                           if (g.get("health") or {}).get("status") == "fail"],
        "changed": [h["host"] for h in entries if h["changes"]],
    }
    return {"title": title, "generated_at": generated_at, "driver_pin": driver_pin, "summary": summary, "hosts": entries}


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
STATUS_CLASS = {"pass": "ok", "warn": "warn", "fail": "bad"}


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


def render_html(model: Mapping[str, Any]) -> str:
    """One self-contained HTML page (inline CSS, no scripts, no external assets), from templates/fleet_report.html.j2."""
    runs = list(model.get("health_history") or [])
    return _environment().get_template(PAGE).render(
        model=model, history_runs=runs, history_gpus=sorted({g for run in runs for g in run["gpus"]}))
