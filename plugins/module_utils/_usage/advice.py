# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What to do with a node's or a pool's GPUs, from a week of their measured use; pure logic, no I/O.

Input: the per-GPU / per-MIG-instance figures ``_usage.series.aggregate`` makes of dcgm-exporter's series (mean, p95 and max
of SM activity, SM occupancy, DRAM activity, framebuffer used; GPU_UTIL beside; hours observed; the pods seen).
Output, per node or pool: one advice with the figures that drove it and the rule it applied, and what the rest of the
collection applies: a pool definition as roles/gpu_pools takes it (``_k8s.gpu_pools.normalize``) and, for MIG, a
mig-parted ``v1`` document that ``geometry.parse_config`` accepts.

The rules, first match wins (the thresholds are arguments; the defaults are the seed articles' numbers quoted in
issue 43: "a GPU at 8 % SM activity and 15 % of its memory over a rolling week is an obvious candidate for sharing; a
GPU at 85 % is not shared, you buy a second one"):

1. ``too-little-data``: a GPU observed for fewer than ``min_hours`` is refused (AdviceError), never guessed at.
2. ``saturated``: p95 SM activity >= ``saturated_sm`` or p95 memory used >= ``saturated_memory`` on any GPU: do not
   share, add capacity.
3. ``time-slicing``: mean SM activity <= ``share_sm`` and p95 memory used <= ``share_memory`` on every GPU; replicas
   from the observed peak: as many copies of the largest workload's peak memory plus ``headroom`` as the smallest
   GPU holds (time-slicing does not isolate memory), at most ``max_replicas``; fewer than 2 falls through.
4. ``mig``: every GPU's model has a documented MIG table (``mig_models``), and the smallest plain profile (no
   ``+me``/``-me``/``+gfx``) with at least ``min_slices`` compute slices (2 by default: never 1g unless asked, a
   workload needing 26 GB does not fit 10 GB) that holds the largest workload's peak memory plus ``headroom`` and its
   p95 compute fits at least twice per GPU (placements checked by ``geometry.validate_target``), and the instances cover
   the most pods seen at once.
5. ``whole``: otherwise keep the GPUs whole (``exclusive``), saying why sharing was not advised.

DCGM_FI_DEV_GPU_UTIL is reported beside the others and never decides: it only says a kernel ran (issue 43).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from ansible_collections.gpuops.provision.plugins.module_utils._mig import geometry, models as mig_models

# Defaults, with where each comes from (issue 43's seed numbers; the rest are this collection's choices, stated).
DEFAULTS: dict[str, Any] = {
    # 6 of 7 days: a rolling week with a day's scrape gaps still counts, two days do not.
    "min_hours": 144.0,
    "share_sm": 0.08,
    "share_memory": 0.15,
    "saturated_sm": 0.85,
    "saturated_memory": 0.85,
    # Above the largest peak seen: a week rarely shows the worst input a model gets.
    "headroom": 0.2,
    "min_slices": 2,
    # k8s-device-plugin takes any replicas >= 2; beyond 8 time-sliced clients per GPU each gets too thin a slice.
    "max_replicas": 8,
}
STATS = ("mean", "p95", "max")
METRICS = ("sm_active", "sm_occupancy", "dram_active", "memory_used")
_TOKEN = re.compile(r"[a-z0-9]+")


class AdviceError(Exception):
    """Input the advice cannot honour, or too little data; the message is for the user."""


def _where(device: Mapping[str, Any]) -> str:
    inst = " MIG %s (GI %s)" % (device.get("mig_profile"), device.get("gi_id")) if device.get("mig_profile") else ""
    return "%s GPU %s%s" % (device.get("host"), device.get("gpu"), inst)


def _number(value: Any, where: str, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise AdviceError("%s: %s must be a number, got %r" % (where, what, value))
    return float(value)


def check_thresholds(overrides: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """DEFAULTS with ``overrides`` (None values keep the default), checked: ratios within 0-1, sharing below
    saturation, whole numbers where counts are meant."""
    t = dict(DEFAULTS)
    unknown = sorted(set(overrides or {}) - set(DEFAULTS))
    if unknown:
        raise AdviceError("unknown threshold(s) %s (known: %s)" % (", ".join(unknown), ", ".join(sorted(DEFAULTS))))
    t.update((k, v) for k, v in (overrides or {}).items() if v is not None)
    for key in ("share_sm", "share_memory", "saturated_sm", "saturated_memory"):
        if not 0 < _number(t[key], "thresholds", key) <= 1:
            raise AdviceError("thresholds: %s must be a ratio above 0 and at most 1, got %r" % (key, t[key]))
    for share, full in (("share_sm", "saturated_sm"), ("share_memory", "saturated_memory")):
        if t[share] >= t[full]:
            raise AdviceError("thresholds: %s (%r) must be below %s (%r)" % (share, t[share], full, t[full]))
    if _number(t["headroom"], "thresholds", "headroom") < 0:
        raise AdviceError("thresholds: headroom must be >= 0, got %r" % t["headroom"])
    if _number(t["min_hours"], "thresholds", "min_hours") <= 0:
        raise AdviceError("thresholds: min_hours must be above 0, got %r" % t["min_hours"])
    for key, low in (("min_slices", 1), ("max_replicas", 2)):
        if isinstance(t[key], bool) or not isinstance(t[key], int) or t[key] < low:
            raise AdviceError("thresholds: %s must be a whole number >= %d, got %r" % (key, low, t[key]))
    return t


def _stat(device: Mapping[str, Any], metric: str, stat: str) -> float:
    where = _where(device)
    figures = device.get(metric)
    if not isinstance(figures, Mapping):
        raise AdviceError("%s: no %s figures" % (where, metric))
    return _number(figures.get(stat), where, "%s.%s" % (metric, stat))


def _check_device(device: Any, index: int) -> None:
    if not isinstance(device, Mapping):
        raise AdviceError("figures[%d]: a GPU's figures are a mapping, got %r" % (index, device))
    for key in ("host", "gpu", "model"):
        if not isinstance(device.get(key), str) or not device.get(key):
            raise AdviceError("figures[%d] (%s): %s must be a non-empty string, got %r" % (index, _where(device), key, device.get(key)))
    _number(device.get("hours"), _where(device), "hours")
    if _number(device.get("fb_total_mib"), _where(device), "fb_total_mib") <= 0:
        raise AdviceError("%s: fb_total_mib must be above 0, got %r" % (_where(device), device.get("fb_total_mib")))
    for metric in METRICS:
        for stat in STATS:
            _stat(device, metric, stat)


def _tokens(name: str) -> frozenset[str]:
    """'NVIDIA A100 80GB PCIe' and mig-parted's 'A100-PCIE-80GB' give the same set: dcgm-exporter's modelName is
    DCGM's product name (collector/gpu_collector.go getGPUModel), blanks optionally replaced by '-'."""
    return frozenset(t for t in _TOKEN.findall(name.lower()) if t != "nvidia")


def documented_model(model: str) -> Optional[tuple[list[str], geometry.ProfileTable]]:
    """(PCI device ids as mig-parted's device-filter spells them, the documented profile table) of a product name,
    or None when ``mig_models.MODELS`` has no such model (no MIG, or not documented)."""
    wanted = _tokens(model)
    ids = sorted(pci for pci, row in mig_models.MODELS.items() if _tokens(row["name"]) == wanted)
    if not ids:
        return None
    table = mig_models.documented_table(ids[0])
    # Every id of one name shares one table (MODELS lists the variants of a board under one name).
    return ["0x%08X" % pci for pci in ids], table  # type: ignore[return-value]


def _peak_workload_mib(device: Mapping[str, Any]) -> float:
    """The largest workload's peak framebuffer on a device: per pod where dcgm-exporter attributed it, else the
    device's own peak (one workload, or several that time-slicing cannot tell apart)."""
    pods = [_number(p.get("fb_used_max_mib"), _where(device), "pods[].fb_used_max_mib") for p in device.get("pods") or []]
    return max(pods) if pods else _stat(device, "fb_used_mib", "max")


def _compute_slices(device: Mapping[str, Any], full: int) -> int:
    """Compute slices the device's p95 SM activity needs: SM activity is a ratio of the device's own SMs, so a MIG
    instance counts its own slices and a whole GPU ``full`` (7 on 8-memory-slice parts)."""
    size = geometry.parse_profile_name(device["mig_profile"])[1] if device.get("mig_profile") else full
    # The 1e-9 keeps 0.2857142 x 7 = 2.0000000001 at 2 slices.
    return max(1, int(math.ceil(_stat(device, "sm_active", "p95") * size - 1e-9)))


def _pct(value: float) -> str:
    return "%.1f %%" % (value * 100)


def figures_of(devices: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The figures a rule reads, over the group's devices: the worst GPU decides each."""
    return {
        "gpus": len(devices),
        "hours_min": min(_number(d["hours"], _where(d), "hours") for d in devices),
        "sm_active_mean": max(_stat(d, "sm_active", "mean") for d in devices),
        "sm_active_p95": max(_stat(d, "sm_active", "p95") for d in devices),
        "sm_occupancy_p95": max(_stat(d, "sm_occupancy", "p95") for d in devices),
        "dram_active_p95": max(_stat(d, "dram_active", "p95") for d in devices),
        "memory_used_p95": max(_stat(d, "memory_used", "p95") for d in devices),
        "fb_total_mib": min(_number(d["fb_total_mib"], _where(d), "fb_total_mib") for d in devices),
        "peak_workload_mib": max(_peak_workload_mib(d) for d in devices),
        "max_concurrent_pods": sum(int(d.get("max_concurrent_pods") or 0) for d in devices),
        # Beside, never decisive (issue 43): a kernel ran, not how much of the GPU it used.
        "gpu_util_mean": max((_stat(d, "gpu_util", "mean") for d in devices if d.get("gpu_util")), default=None),
    }


def _pool(name: str, nodes: list[str], sharing: str, **extra: Any) -> dict[str, Any]:
    pool: dict[str, Any] = {"name": name, "nodes": nodes, "sharing": sharing}
    pool.update(extra)
    return pool


def _plain_profiles(table: geometry.ProfileTable, min_slices: int) -> list[geometry.Profile]:
    """Profiles without attributes (+me, -me, +gfx, +me.all: media or graphics engines, not capacity), with at least
    ``min_slices`` compute slices, smallest first (compute slices, then memory)."""
    plain = [p for p in table.profiles if not geometry.parse_profile_name(p.name)[3] and p.slices >= min_slices]
    return sorted(plain, key=lambda p: (p.slices, geometry.parse_profile_name(p.name)[2], p.name))


def fit_count(table: geometry.ProfileTable, profile: str) -> int:
    """How many instances of ``profile`` one GPU holds at once (non-overlapping placements, the model's count)."""
    # The table's own profile: get() finds it.
    count = table.get(profile).max_count  # type: ignore[union-attr]
    while count > 0:
        try:
            geometry.validate_target(table, {profile: count})
        except geometry.MigError:
            count -= 1
            continue
        return count
    return 0


def _mig_plan(name: str, devices: Sequence[Mapping[str, Any]], figures: Mapping[str, Any], t: Mapping[str, Any]
              ) -> tuple[Optional[dict[str, Any]], str]:
    """(the MIG part of the advice, or None, and the sentence saying why or why not)."""
    models = sorted(set(d["model"] for d in devices))
    need_mib = figures["peak_workload_mib"] * (1 + t["headroom"])
    entries, chosen, instances = [], [], 0
    for model in models:
        found = documented_model(model)
        if found is None:
            return None, "%s has no documented MIG profiles (plugins/module_utils/_mig/models.py)" % model
        ids, table = found
        mine = [d for d in devices if d["model"] == model]
        full = max(p.slices for p in table.profiles)
        slices = max(t["min_slices"], max(_compute_slices(d, full) for d in mine))
        fits = [p for p in _plain_profiles(table, slices) if geometry.parse_profile_name(p.name)[2] * 1024 >= need_mib]
        if not fits:
            return None, ("no %s profile of at least %d compute slices holds %.0f MiB (the largest workload's peak "
                          "%.0f MiB + %.0f %% headroom)" % (model, slices, need_mib, figures["peak_workload_mib"], t["headroom"] * 100))
        profile = fits[0].name
        count = fit_count(table, profile)
        if count < 2:
            return None, ("%s: %s, the smallest profile that holds %.0f MiB and %d compute slices, fits once per GPU: "
                          "MIG would not share it" % (model, profile, need_mib, slices))
        gpus = len(set((d["host"], d.get("uuid") or d["gpu"]) for d in mine))
        instances += count * gpus
        chosen.append("%s: %d x %s per GPU" % (model, count, profile))
        entries.append({"devices": "all", "device-filter": ids if len(ids) > 1 else ids[0], "mig-enabled": True,
                        "mig-devices": {profile: count}})
    if instances < figures["max_concurrent_pods"]:
        return None, ("%d MIG instances would not hold the %d pods seen at once" % (instances, figures["max_concurrent_pods"]))
    document = {"version": "v1", "mig-configs": {name: entries}}
    geometry.parse_config(document, name)  # the collection's own validator: what mig_reconfigure will be given
    why = ("%s: the smallest plain profile of >= %d compute slices holding the largest workload's peak %.0f MiB + "
           "%.0f %% headroom = %.0f MiB, as many as fit"
           % ("; ".join(chosen), t["min_slices"], figures["peak_workload_mib"], t["headroom"] * 100, need_mib))
    return {"mig_config": document, "instances": instances}, why


def advise(name: str, devices: Any, thresholds: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """The advice for one node or pool ``name`` (a Kubernetes label value: it becomes the pool's and the MIG
    configuration's name) from its devices' figures.

    Returns {name, nodes, advice (saturated | time-slicing | mig | whole), action, rule (the rule's id), reason (the
    rule with its numbers), figures, thresholds, pool (for gpu_pools), mig_config (a mig-parted v1 document for
    mig_reconfigure, or None), devices (host/GPU/MIG instance keys)}. Raises AdviceError on bad input or when a GPU
    was observed for too few hours."""
    t = check_thresholds(thresholds)
    if not isinstance(devices, (list, tuple)) or not devices:
        raise AdviceError("%s: no GPU figures to advise on" % name)
    for i, d in enumerate(devices):
        _check_device(d, i)
    short = [d for d in devices if d["hours"] < t["min_hours"]]
    if short:
        raise AdviceError("%s: too little data to advise: %s (at least %g hours are needed; widen the window or wait "
                          "until Prometheus holds them)" % (name, "; ".join(
                              "%s observed %.1f h" % (_where(d), d["hours"]) for d in short), t["min_hours"]))
    figures = figures_of(devices)
    nodes = sorted(set(d["host"] for d in devices))
    out: dict[str, Any] = {"name": name, "nodes": nodes, "figures": figures, "thresholds": t, "mig_config": None,
                           "devices": [_where(d) for d in devices]}
    sm95, mem95 = figures["sm_active_p95"], figures["memory_used_p95"]
    if sm95 >= t["saturated_sm"] or mem95 >= t["saturated_memory"]:
        over = ["%s %s >= %s" % (what, _pct(value), _pct(limit)) for what, value, limit in (
            ("p95 SM activity", sm95, t["saturated_sm"]), ("p95 memory used", mem95, t["saturated_memory"])) if value >= limit]
        out.update(advice="saturated", action="add capacity", rule="saturated", pool=_pool(name, nodes, "exclusive"),
                   reason="%s: saturated, do not share; add GPUs" % " and ".join(over))
        return out
    why_not = []
    low = figures["sm_active_mean"] <= t["share_sm"] and mem95 <= t["share_memory"]
    if low:
        need = figures["peak_workload_mib"] * (1 + t["headroom"])
        # A tiny peak makes the quotient infinite (float overflow): capped before int() sees it.
        fits = figures["fb_total_mib"] // need if need > 0 else t["max_replicas"]
        replicas = int(min(t["max_replicas"], fits))
        reason = ("mean SM activity %s <= %s and p95 memory used %s <= %s; replicas = min(%d, floor(%.0f MiB / (%.0f MiB "
                  "peak x %.2f headroom))) = %d" % (_pct(figures["sm_active_mean"]), _pct(t["share_sm"]), _pct(mem95),
                                                    _pct(t["share_memory"]), t["max_replicas"], figures["fb_total_mib"],
                                                    figures["peak_workload_mib"], 1 + t["headroom"], replicas))
        if replicas >= 2:
            out.update(advice="time-slicing", action="share by time-slicing", rule="time-slicing", reason=reason,
                       pool=_pool(name, nodes, "time-slicing", replicas=replicas))
            return out
        why_not.append("time-slicing: " + reason + ", fewer than 2")
    else:
        why_not.append("time-slicing: mean SM activity %s > %s or p95 memory used %s > %s" % (
            _pct(figures["sm_active_mean"]), _pct(t["share_sm"]), _pct(mem95), _pct(t["share_memory"])))
    mig, why = _mig_plan(name, devices, figures, t)
    if mig is not None:
        out.update(advice="mig", action="partition with MIG", rule="mig", reason=why, mig_config=mig["mig_config"],
                   pool=_pool(name, nodes, "mig", mig_config=name))
        return out
    why_not.append("mig: " + why)
    out.update(advice="whole", action="keep whole", rule="whole", pool=_pool(name, nodes, "exclusive"),
               reason="not shared: " + "; ".join(why_not))
    return out


def group(devices: Iterable[Mapping[str, Any]], pools: Optional[Mapping[str, Any]] = None) -> dict[str, list[Mapping[str, Any]]]:
    """Devices by node (``pools`` None) or by pool ({pool name: [node names]}); a pool node without figures, or a
    node in two pools, is an error naming it."""
    devices = list(devices)
    if pools is None:
        by_node: dict[str, list[Mapping[str, Any]]] = {}
        for d in devices:
            by_node.setdefault(str(d.get("host")), []).append(d)
        return dict(sorted(by_node.items()))
    seen: dict[str, str] = {}
    out: dict[str, list[Mapping[str, Any]]] = {}
    for pool, nodes in sorted(pools.items()):
        if not isinstance(nodes, list) or not nodes or not all(isinstance(n, str) and n for n in nodes):
            raise AdviceError("pool %s: nodes must be a non-empty list of node names, got %r" % (pool, nodes))
        for node in nodes:
            if node in seen:
                raise AdviceError("node %s is in pools %s and %s" % (node, seen[node], pool))
            seen[node] = pool
            mine = [d for d in devices if d.get("host") == node]
            if not mine:
                raise AdviceError("pool %s: no GPU figures for node %s (no dcgm-exporter series with that Hostname)" % (pool, node))
            out.setdefault(pool, []).extend(mine)
    return out


def advise_all(devices: Iterable[Mapping[str, Any]], pools: Optional[Mapping[str, Any]] = None,
               thresholds: Optional[Mapping[str, Any]] = None) -> list[dict[str, Any]]:
    """advise() for every node (or pool) of ``devices``, in name order."""
    return [advise(name, mine, thresholds) for name, mine in group(devices, pools).items()]


def proposal(advices: Any, disabled_config: str = "all-disabled") -> dict[str, Any]:
    """What the advices propose, as files for review: ``pools`` (gpu_pools_pools, in advice order) and ``mig_config``
    (one mig-parted v1 document: ``disabled_config`` for the pools that keep MIG off - gpu_pools' default for
    time-slicing and exclusive pools - and each MIG advice's configuration under its pool's name), checked by the
    collection's validator; ``summary``: one line per advice naming its rule (no figures: they move with the window)."""
    if not isinstance(advices, list):
        raise AdviceError("advice must be a list (gpu_usage_info's advice), got %r" % (advices,))
    configs: dict[str, Any] = {disabled_config: [{"devices": "all", "mig-enabled": False}]}
    pools, summary = [], []
    for a in advices:
        if not isinstance(a, Mapping) or not isinstance(a.get("pool"), Mapping) or not a.get("name"):
            raise AdviceError("an advice without name and pool: %r" % (a,))
        if a["name"] in configs:
            raise AdviceError("pool %s: its name is the MIG configuration %s already holds" % (a["name"], disabled_config))
        if a.get("mig_config"):
            configs.update(a["mig_config"]["mig-configs"])
        pools.append(dict(a["pool"]))
        nodes = ", ".join(a.get("nodes") or [])
        summary.append("%s (%s): %s, %s (rule %s)" % (a["name"], nodes, a.get("advice"), a.get("action"), a.get("rule")))
    document = {"version": "v1", "mig-configs": configs}
    for name in configs:
        geometry.parse_config(document, name)
    return {"pools": pools, "mig_config": document, "summary": summary}
