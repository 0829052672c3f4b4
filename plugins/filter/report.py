# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fleet report: pure logic. Host facts -> report model (JSON-able) -> self-contained HTML.

No I/O here; the action plugin ``fleet_report`` writes the files. The filter ``report_model`` exposes the model step
to templates and ``set_stats``.
"""

from __future__ import annotations

import html
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.module_utils import _health

# Where an A30 shows 4 memory slices NVML itself says so through the placements; without profiles we fall back to
# the model name (reference mig.md M3: 8 memory slices on A100/H100/H200/B200, 4 on A30).
DEFAULT_MEMORY_SLICES = 8
FOUR_SLICE_MODELS = ("A30",)

PIECES = ("gpu", "iommu", "driver", "license", "preflight", "changes", "driver_pin", "notes")


def _is_map(value):
    return isinstance(value, Mapping)


def _failed(result):
    """A registered result that failed or was skipped carries no facts; say why instead."""
    if not _is_map(result):
        return None
    if result.get("skipped"):
        return "skipped"
    if result.get("failed") or result.get("unreachable"):
        return str(result.get("msg") or "task failed")
    return None


def memory_slices(gpu):
    """Total memory slices of a GPU: from its profile placements when known, else from the model."""
    ends = []
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


def _instances(gpu, total):
    out = []
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


def _gpu_entry(gpu, iommu_by_addr, lic_by_index, health=None):
    total = memory_slices(gpu)
    mode = gpu.get("mig_mode") or None
    entry = {
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


def _changes(value):
    out = []
    for item in value or []:
        if _is_map(item):
            out.append({"task": str(item.get("task") or item.get("name") or "?"),
                        "detail": str(item.get("detail") or item.get("msg") or "")})
        elif item not in (None, ""):
            out.append({"task": str(item), "detail": ""})
    return out


def _host_health(gpu_res, preflight):
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


def host_model(host, facts):
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


def fleet_model(hosts, title="GPU fleet report", generated_at=None, driver_pin=None):
    """The whole report: ``hosts`` maps host name -> facts dict with the optional keys of PIECES."""
    if not _is_map(hosts):
        raise AnsibleFilterError("fleet report: hosts must be a mapping of host name to facts, got %s" % type(hosts).__name__)
    entries = []
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


# ---------------------------------------------------------------------------------------------------------------- HTML

CSS = """
body{font-family:DejaVu Sans,Arial,sans-serif;margin:16px;color:#222;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:18px 0 6px;border-bottom:2px solid #76b900}
table{border-collapse:collapse;margin:4px 0 8px}td,th{border:1px solid #bbb;padding:3px 6px;font-size:13px;text-align:left}
th{background:#eee}.ok{background:#d7f5c4}.bad{background:#ffc9c2}.warn{background:#ffeab0}.muted{color:#777}
.summary td{font-weight:bold}
.gpu{margin:6px 0 10px}.tags{margin-left:10px;font-size:13px}.slices{display:grid;width:640px;height:44px;border:2px solid #333;background:#f4f4f4;gap:0}
.slice{border-right:1px dashed #999;font-size:10px;color:#999;text-align:center;line-height:44px}
.gi{background:#76b900;color:#fff;border:2px solid #3d6000;font-size:12px;text-align:center;line-height:40px;
z-index:1;overflow:hidden;white-space:nowrap}.gi.invalid{background:#d33}
.nomig{width:640px;height:44px;border:2px solid #333;background:repeating-linear-gradient(45deg,#ddd,#ddd 8px,#eee 8px,#eee 16px);
text-align:center;line-height:44px;font-size:13px}
.slices.sick,.nomig.sick{border-color:#b00;background:#ffc9c2}.slices.sick .gi{background:#d33;border-color:#800}
.hist td{width:14px;height:14px;padding:0}.hist td.label{width:auto;padding:2px 6px}
"""


def _e(value):
    return html.escape("" if value is None else str(value), quote=True)


# A check's or a verdict's status as the CSS class its cell gets.
STATUS_CLASS = {"pass": "ok", "warn": "warn", "fail": "bad"}


def _cls(good):
    return "ok" if good is True else ("bad" if good is False else "muted")


def _health_attrs(health):
    """Class and hover text of a GPU's drawing: red when a health check fails; the title lists the checks that did not
    pass and their evidence (a browser shows it on hover). A warning is not drawn: on a MIG GPU with instances NVML
    cannot read row remapping at all, and every such GPU in amber would hide the red ones."""
    if not health or health["status"] not in ("fail", "warn"):
        return "", ""
    reasons = "; ".join("%s %s: %s" % (f["check"], f["status"], f["evidence"]) for f in health["failing"])
    attrs = ' title="%s" data-health="%s"' % (_e(reasons), _e(health["status"]))
    return (" sick" if health["status"] == "fail" else ""), attrs


def render_slices(mig, health=None):
    """The MIG layout: a grid of memory slices with each GI placed at its start/size (CSS grid, no JS)."""
    total = mig["memory_slices"]
    cls, attrs = _health_attrs(health)
    cells = ['<div class="slices%s"%s data-slices="%d" style="grid-template-columns:repeat(%d,1fr)">'
             % (cls, attrs, total, total)]
    for s in range(total):
        cells.append('<div class="slice" data-slice="%d" style="grid-row:1;grid-column:%d">%d</div>' % (s, s + 1, s))
    for gi in mig["instances"]:
        if not gi["valid"]:
            continue
        cells.append('<div class="gi" data-gi="%s" data-start="%d" data-size="%d" style="grid-row:1;grid-column:%d / span %d" '
                     'title="GI %s %s slices %d-%d">%s</div>'
                     % (_e(gi["gi_id"]), gi["start"], gi["size"], gi["start"] + 1, gi["size"], _e(gi["gi_id"]),
                        _e(gi["profile"]), gi["start"], gi["start"] + gi["size"] - 1, _e(gi["profile"])))
    cells.append("</div>")
    bad = [gi for gi in mig["instances"] if not gi["valid"]]
    if bad:
        cells.append('<div class="bad">placements outside the %d slices: %s</div>' % (
            total, _e(", ".join("GI %s %s start %d size %d" % (g["gi_id"], g["profile"], g["start"], g["size"]) for g in bad))))
    return "".join(cells)


def _gpu_html(g):
    head = "GPU %s %s %s" % ("" if g["index"] is None else g["index"], g["model"] or "", g["pci_address"] or "")
    parts = ['<div class="gpu" data-gpu-uuid="%s"><b>%s</b>' % (_e(g["uuid"]), _e(head.strip()))]
    tags = []
    if g["mig"]:
        m = g["mig"]
        tags.append(_e("MIG %s" % m["current"] + (" (pending %s, reset needed)" % m["pending"] if m["reset_pending"] else "")))
    if g["isolation"]:
        tags.append('<span class="%s">IOMMU group %s %s</span>' % (
            _cls(g["isolation"]["isolated"]), _e(g["isolation"]["iommu_group"]),
            "isolated" if g["isolation"]["isolated"] else "NOT isolated: " + _e(g["isolation"]["reason"])))
    if g["license"]:
        st = g["license"]["state"]
        tags.append('<span class="%s">licence %s</span>' % (
            _cls({"licensed": True, "unlicensed": False}.get(st)), _e(st)))
    if g["kernel_driver"]:
        tags.append("driver %s" % _e(g["kernel_driver"]))
    if g["error"]:
        tags.append('<span class="bad">%s</span>' % _e(g["error"]))
    health = g.get("health")
    if health:
        cls, attrs = _health_attrs(health)
        tags.append('<span class="%s"%s>health %s%s</span>' % (
            STATUS_CLASS.get(health["status"], "ok"), attrs, _e(health["status"].upper()),
            _e(": " + ", ".join(f["check"] for f in health["failing"])) if health["failing"] else ""))
    parts.append('<span class="tags"> %s</span>' % " &middot; ".join(tags))
    if g["mig"] and g["mig"]["current"] == "enabled":
        parts.append(render_slices(g["mig"], health))
    elif g["mig"]:
        cls, attrs = _health_attrs(health)
        parts.append('<div class="nomig%s"%s>MIG disabled (%d memory slices, whole GPU)</div>'
                     % (cls, attrs, g["mig"]["memory_slices"]))
    parts.append("</div>")
    return "".join(parts)


def _host_html(h):
    out = ['<section class="host" id="host-%s"><h2>%s</h2>' % (_e(h["host"]), _e(h["host"]))]
    rows = []
    d = h["driver"]
    if d:
        pin = "-" if not d["pin"] else "%s (%s)" % (d["pin"], "on pin" if d["on_pin"] else "OFF PIN")
        rows.append('<tr><th>driver</th><td class="%s">installed %s, loaded %s%s; pin %s</td></tr>' % (
            _cls(d["on_pin"] if d["pin"] else None), _e(d["installed"] or "none"), _e(d["loaded"] or "not loaded"),
            ", REBOOT PENDING" if d["reboot_pending"] else "", _e(pin)))
    lic = h["license"]
    if lic:
        rows.append('<tr><th>licence</th><td class="%s">%s%s</td></tr>' % (
            _cls(lic["licensed"]), {True: "licensed", False: "NOT licensed", None: "not applicable"}[lic["licensed"]],
            _e(" (gridd feature %s, %d token file(s))" % (lic["feature"], lic["tokens"]) if lic["feature"] else "")))
    io = h["iommu"]
    if io:
        rows.append('<tr><th>IOMMU</th><td class="%s">%s, %d/%d GPU(s) isolated%s</td></tr>' % (
            _cls(bool(io["active"]) and not io["not_isolated"]),
            _e(" ".join(x for x in ("active" if io["active"] else "INACTIVE", io["kind"]) if x)),
            io["isolated"], io["gpus"], _e("; not isolated: " + ", ".join(io["not_isolated"])) if io["not_isolated"] else ""))
    pf = h["preflight"]
    if pf:
        rows.append('<tr><th>preflight</th><td class="%s">%s%s</td></tr>' % (
            STATUS_CLASS.get(pf["verdict"], "muted"), _e(pf["verdict"].upper()),
            _e(" - failing: %s" % ", ".join(pf["failed_checks"])) if pf["failed_checks"] else ""))
    out.append("<table>%s</table>" % "".join(rows) if rows else '<p class="muted">no host facts</p>')
    for note in h["notes"]:
        out.append('<p class="warn">%s</p>' % _e(note))
    for g in h["gpus"]:
        out.append(_gpu_html(g))
    if pf and pf["checks"]:
        out.append("<table><tr><th>check</th><th>status</th><th>evidence</th><th>remedy</th></tr>%s</table>" % "".join(
            '<tr><td>%s</td><td class="%s">%s</td><td>%s</td><td>%s</td></tr>' % (
                _e(c["id"]), STATUS_CLASS.get(c["status"], "muted"), _e(c["status"]),
                _e(c["evidence"]), _e(c["remedy"])) for c in pf["checks"]))
    if h["changes"]:
        out.append('<table class="changes"><tr><th>changed by the last run</th><th>detail</th></tr>%s</table>' % "".join(
            "<tr><td>%s</td><td>%s</td></tr>" % (_e(c["task"]), _e(c["detail"])) for c in h["changes"]))
    else:
        out.append('<p class="muted">no changes recorded for the last run</p>')
    out.append("</section>")
    return "".join(out)


def render_html(model):
    """One self-contained HTML page (inline CSS, no scripts, no external assets)."""
    s = model["summary"]
    head = ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>%s</title><style>%s</style></head><body>'
            % (_e(model["title"]), CSS))
    summary = ('<h1>%s</h1><p class="muted">generated %s%s</p><table class="summary"><tr><th>hosts</th><th>GPUs</th>'
               '<th>MIG enabled</th><th>GPU instances</th><th>off pin</th><th>unlicensed</th><th>not isolated</th>'
               '<th>preflight failed</th><th>unhealthy GPUs</th><th>changed</th></tr><tr><td>%d</td><td>%d</td><td>%d</td>'
               '<td>%d</td><td class="%s">%s</td><td class="%s">%s</td><td class="%s">%s</td><td class="%s">%s</td>'
               '<td class="%s">%s</td><td>%s</td></tr></table>'
               % (_e(model["title"]), _e(model["generated_at"] or "-"),
                  _e(", driver pin %s" % model["driver_pin"]) if model["driver_pin"] else "",
                  s["hosts"], s["gpus"], s["mig_enabled"], s["gpu_instances"],
                  _cls(not s["off_pin"]), _e(", ".join(s["off_pin"]) or "none"),
                  _cls(not s["unlicensed"]), _e(", ".join(s["unlicensed"]) or "none"),
                  _cls(not s["not_isolated"]), _e(", ".join(s["not_isolated"]) or "none"),
                  _cls(not s["preflight_failed"]), _e(", ".join(s["preflight_failed"]) or "none"),
                  _cls(not s.get("unhealthy_gpus")), _e(", ".join(s.get("unhealthy_gpus") or []) or "none"),
                  _e(", ".join(s["changed"]) or "none")))
    return head + summary + render_history(model.get("health_history") or []) + \
        "".join(_host_html(h) for h in model["hosts"]) + "</body></html>\n"


# --- health over runs ----------------------------------------------------------------------------------------------

HISTORY_RUNS = 30


def health_snapshot(model):
    """{"<host> GPU <index> (<uuid>)": status} of every GPU with a health verdict."""
    return {"%s GPU %s (%s)" % (h["host"], g["index"], g["uuid"]): g["health"]["status"]
            for h in model["hosts"] for g in h["gpus"] if g.get("health")}


def with_health_history(model, previous):
    """``model`` with ``health_history``: the previous report's history, plus this run when the GPUs' health differs
    from the last entry (so an unchanged fleet leaves the report unchanged), the last HISTORY_RUNS kept."""
    history = list((previous or {}).get("health_history") or []) if _is_map(previous) else []
    snap = health_snapshot(model)
    if snap and (not history or history[-1].get("gpus") != snap):
        history.append({"generated_at": model.get("generated_at"), "gpus": snap})
    return dict(model, health_history=history[-HISTORY_RUNS:])


def render_history(history):
    """A GPU per row, a run per column (the runs where health changed), coloured by status."""
    if not history:
        return ""
    gpus = sorted({g for run in history for g in run["gpus"]})
    head = "".join('<th title="%s">%d</th>' % (_e(run.get("generated_at") or "?"), i + 1) for i, run in enumerate(history))
    rows = "".join('<tr><td class="label">%s</td>%s</tr>' % (_e(g), "".join(
        '<td class="%s" title="%s: %s"></td>' % (
            STATUS_CLASS.get(run["gpus"].get(g), "muted"),
            _e(run.get("generated_at") or "?"), _e(run["gpus"].get(g, "not seen")))
        for run in history)) for g in gpus)
    return ('<h2>GPU health over runs</h2><p class="muted">one column per run in which a GPU\'s health changed; hover for '
            'the time and status</p><table class="hist"><tr><th>GPU</th>%s</tr>%s</table>' % (head, rows))


def changes_from_run_log(log):
    """Changed tasks per host from an ``ansible.posix.json`` stdout callback document of the last run."""
    out = {}
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


def report_model(hosts, title="GPU fleet report", generated_at=None, driver_pin=None):
    return fleet_model(hosts, title=title, generated_at=generated_at, driver_pin=driver_pin)


class FilterModule(object):
    def filters(self):
        return {"report_model": report_model}
