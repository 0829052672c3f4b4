# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet report's GPU usage section (issue 43 point 3): the chart geometry of a device's series, the advice rows,
the GPU-hours tables, the section's states (not read, failed, advice refused) and the page they make."""

from __future__ import annotations

import re

from ansible_collections.gpuops.provision.plugins.plugin_utils import _report as R

H100 = "NVIDIA H100 80GB HBM3"


def test_chart_geometry_exactly():
    # 4 hours, hourly buckets; the 02:00 bucket is missing (a gap) and memory lacks 01:00 (a None).
    series = {"bucket": 3600, "t": [0.0, 3600.0, 10800.0, 14400.0], "sm_active": [0.0, 0.5, 1.0, 0.25],
              "memory_used": [0.25, None, 0.75, 0.5], "fb_used_mib": [1000.0, None, 3000.0, 2000.0]}
    c = R.usage_chart(series, 0.0, 14400.0, 4000.0)
    # plot: x 34..352 (318 wide) for the window, y 106 (0 %) .. 18 (100 %); a point at its bucket's middle, clamped.
    assert (c["left"], c["plot_width"], c["top"], c["plot_height"]) == (34, 318, 18, 88)
    assert c["sm"] == ["73.8,106 153.2,62", "312.2,18 352,84"]          # 00:30 0 %, 01:30 50 % | 03:30 100 %, end 25 %
    assert c["memory"] == ["72.8,84 74.8,84", "312.2,40 352,62"]        # a lone point is a 2-unit dash
    assert c["points"] == 4 and c["sm_max"] == 1.0 and c["memory_max"] == 0.75 and c["fb_max_mib"] == 3000.0
    assert c["y_ticks"] == [{"y": 106.0, "label": "0%"}, {"y": 62.0, "label": "50%"}, {"y": 18.0, "label": "100%"}]
    assert c["x_ticks"] == []                                            # no six-hour mark inside 4 hours


def test_chart_ticks_by_window():
    series = {"bucket": 3600, "t": [], "sm_active": [], "memory_used": [], "fb_used_mib": []}
    assert R.usage_chart(series, 0.0, 3 * 86400.0)["x_ticks"] == [{"x": 140.0, "label": "01-02"}, {"x": 246.0, "label": "01-03"}]
    assert [t["label"] for t in R.usage_chart(series, 0.0, 2 * 86400.0)["x_ticks"]] == [
        "06:00", "12:00", "18:00", "00:00", "06:00", "12:00", "18:00"]
    # 40 days: every 5th midnight, at most 8 labels
    assert [t["label"] for t in R.usage_chart(series, 0.0, 40 * 86400.0)["x_ticks"]] == [
        "01-06", "01-11", "01-16", "01-21", "01-26", "01-31", "02-05"]
    empty = R.usage_chart(series, 0.0, 86400.0)
    assert empty["sm"] == [] and empty["points"] == 0 and empty["sm_max"] is None and empty["fb_max_mib"] is None


def _week_series(start, step=3600, n=169):
    t = [start - start % step + i * step for i in range(n)]
    return {"bucket": step, "t": t, "sm_active": [(i % 24) / 23.0 for i in range(n)],
            "memory_used": [0.5] * n, "fb_used_mib": [40000.0] * n}


def _device(host, gpu, profile=None, gi=None, series=None):
    stat = {"mean": 0.1, "p95": 0.2, "max": 0.3}
    return {"host": host, "gpu": gpu, "uuid": "GPU-%s-%s" % (host, gpu), "model": H100, "mig_profile": profile, "gi_id": gi,
            "hours": 168.0833, "sm_active": stat, "memory_used": {"mean": 0.4, "p95": 0.5, "max": 0.5},
            "fb_used_mib": {"mean": 1.0, "p95": 1.0, "max": 40000.0}, "fb_total_mib": 81559.0, "namespaces": ["serving"],
            "series": series}


START, END = 999_395_200.0, 1_000_000_000.0   # a week ending 1e9 s (2001-09-09 01:46:40 UTC)


def result():
    entry = {"devices": "all", "device-filter": "0x233010DE", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}
    mig = {"version": "v1", "mig-configs": {"infer-1": [entry]}}
    figures = {"gpus": 1, "hours_min": 168.0833, "sm_active_mean": 0.175, "sm_active_p95": 0.255, "memory_used_p95": 0.226,
               "peak_workload_mib": 18432.0, "max_concurrent_pods": 1, "sm_occupancy_p95": 0.2, "dram_active_p95": 0.1,
               "fb_total_mib": 81559.0, "gpu_util_mean": None}
    return {
        "changed": False, "window": {"start": START, "end": END, "step": 300, "bucket": 3600},
        "gpus": [_device("infer-1", "0", series=_week_series(START)),
                 _device("mig-1", "0", "3g.40gb", "1", series=_week_series(START)),
                 _device("mig-1", "0", "3g.40gb", "2")],
        "advice": [
            {"name": "infer-1", "nodes": ["infer-1"], "advice": "mig", "action": "partition with MIG", "rule": "mig",
             "reason": "2 x 3g.40gb", "figures": figures, "pool": {"name": "infer-1", "sharing": "mig"}, "mig_config": mig},
            {"name": "notebooks", "nodes": ["nb-1", "nb-2"], "advice": "time-slicing", "action": "share by time-slicing",
             "rule": "time-slicing", "reason": "low", "figures": figures, "pool": {"sharing": "time-slicing", "replicas": 6},
             "mig_config": None},
            {"name": "train-1", "nodes": ["train-1"], "advice": "saturated", "action": "add capacity", "rule": "saturated",
             "reason": "p95 SM 97 %", "figures": figures, "pool": {"sharing": "exclusive"}, "mig_config": None}],
        "gpu_hours": {"by_profile": [{"model": H100, "profile": "3g.40gb", "devices": 2, "hours": 336.1667, "hours_with_pods": 300.0}],
                      "by_namespace": [{"model": H100, "profile": "3g.40gb", "namespace": "", "hours": 300.0}]},
    }


def test_the_usage_section_rows_exactly():
    u = R.usage_model(result())
    assert (u["skipped"], u["error"], u["advice_error"]) == (None, None, None)
    assert u["window"] == {"start": START, "end": END, "step": 300, "bucket": 3600, "bucket_text": "hour",
                           "from": "2001-09-02 01:46", "to": "2001-09-09 01:46", "days": 7.0}
    assert [(n["host"], [g["label"] for g in n["gpus"]]) for n in u["nodes"]] == [
        ("infer-1", ["GPU 0"]), ("mig-1", ["GPU 0 MIG 3g.40gb (GI 1)", "GPU 0 MIG 3g.40gb (GI 2)"])]
    g = u["nodes"][0]["gpus"][0]
    assert (g["fb_used_max_mib"], g["fb_total_mib"], g["sm_active"]["max"], g["namespaces"]) == (40000.0, 81559.0, 0.3, ["serving"])
    assert u["nodes"][1]["gpus"][1]["chart"] is None                    # no series: no chart, the figures only
    assert [(a["name"], a["advice"], a["cls"], a["proposal"]) for a in u["advice"]] == [
        ("infer-1", "mig", "ok", "MIG: 2 x 3g.40gb per GPU"),
        ("notebooks", "time-slicing", "ok", "time-slicing, 6 replicas per GPU"),
        ("train-1", "saturated", "warn", "exclusive (whole GPUs)")]
    assert u["advice"][0]["figures"] == {"gpus": 1, "hours_min": 168.0833, "sm_active_mean": 0.175, "sm_active_p95": 0.255,
                                         "memory_used_p95": 0.226, "peak_workload_mib": 18432.0, "max_concurrent_pods": 1}
    assert u["gpu_hours"] == result()["gpu_hours"]


def test_a_week_chart_has_its_169_points_within_the_plot_and_on_the_scale():
    c = R.usage_model(result())["nodes"][0]["gpus"][0]["chart"]
    assert c["points"] == 169 and len(c["sm"]) == 1 and len(c["memory"]) == 1
    pts = [tuple(float(v) for v in p.split(",")) for p in c["sm"][0].split(" ")]
    assert len(pts) == 169 and all(34 <= x <= 352 for x, _y in pts) and [p[0] for p in pts] == sorted(p[0] for p in pts)
    # SM runs 0..100 % over each day: y spans the whole plot, 106 (0 %) to 18 (100 %); memory flat at 50 % (y 62).
    assert min(y for _x, y in pts) == 18.0 and max(y for _x, y in pts) == 106.0
    assert set(p.split(",")[1] for p in c["memory"][0].split(" ")) == {"62"}
    assert [t["label"] for t in c["x_ticks"]] == ["09-03", "09-04", "09-05", "09-06", "09-07", "09-08", "09-09"]
    # a UTC midnight is 1 h 46 min 40 s before the end: 6400 s of 604800 before x=352
    assert c["x_ticks"][-1]["x"] == round(34 + (1 - 6400 / 604800.0) * 318, 1)


def test_the_summary_and_the_page():
    model = R.fleet_model({}, usage=result())
    assert model["summary"]["usage_advice"] == {"infer-1": "mig", "notebooks": "time-slicing", "train-1": "saturated"}
    assert model["summary"]["usage_advice_counts"] == [{"advice": "saturated", "names": ["train-1"]},
                                                       {"advice": "mig", "names": ["infer-1"]},
                                                       {"advice": "time-slicing", "names": ["notebooks"]}]
    page = R.render_html(model)
    assert "<script" not in page and "http" not in page.replace("http://www.w3.org", "")
    assert page.count('<svg class="chart"') == 2 and page.count('data-points="169"') == 2
    assert page.count('<polyline class="sm"') == 2 and page.count('<polyline class="mem"') == 2
    assert '<td class="warn" data-usage="saturated mig time-slicing">1 saturated: train-1 &middot; 1 mig &middot; 1 time-slicing</td>' in page
    assert "<h2>GPU usage (2001-09-02 01:46 to 2001-09-09 01:46 UTC)</h2>" in page
    assert ">SM max 100.0 %</text>" in page and ">memory max 50.0 % (39.1 GiB)</text>" in page
    assert '<td>notebooks (nb-1, nb-2)</td><td class="ok" data-advice="time-slicing">time-slicing: share by time-slicing</td>' in page
    assert "<td>saturated: p95 SM 97 %</td>" in page
    assert ("<tr><td>NVIDIA H100 80GB HBM3</td><td>3g.40gb</td><td>2</td><td>336.2</td><td>300.0</td></tr>" in page)
    assert "<tr><td>NVIDIA H100 80GB HBM3</td><td>3g.40gb</td><td>(none)</td><td>300.0</td></tr>" in page
    assert ".charts{" in page                                           # the usage CSS, only on a page with the section
    assert ".charts{" not in R.render_html(R.fleet_model({}))
    assert "usage" not in R.fleet_model({}) and "usage_advice" not in R.fleet_model({})["summary"]


def test_not_read_failed_and_advice_refused():
    skipped = R.fleet_model({}, usage={"skipped": True, "msg": "no Prometheus configured"})
    assert skipped["usage"]["skipped"] == "no Prometheus configured" and skipped["summary"]["usage_advice"] == {}
    page = R.render_html(skipped)
    assert '<h2>GPU usage</h2><p class="muted">not read: no Prometheus configured</p>' in page
    assert '<td class="muted" data-usage="">not read</td>' in page
    # a when: that was false registers {skipped, skip_reason}
    assert R.usage_model({"skipped": True, "skip_reason": "Conditional result was False"})["skipped"] == "Conditional result was False"
    failed = R.usage_model({"failed": True, "msg": "Prometheus at http://p:9090 is unreachable"})
    assert failed["error"] == "gpu_usage_info: Prometheus at http://p:9090 is unreachable" and failed["nodes"] == []
    assert R.usage_model("nonsense")["error"] == "gpu_usage_info: no result"
    refused = dict(result(), advice_error="new-1: too little data to advise")
    del refused["advice"]
    u = R.usage_model(refused)
    assert u["advice"] == [] and u["advice_error"] == "new-1: too little data to advise" and len(u["nodes"]) == 2
    page = R.render_html(R.fleet_model({}, usage=refused))
    assert '<p class="warn">no advice: new-1: too little data to advise</p>' in page and "<h3>Advice</h3>" not in page


def test_values_in_the_section_are_escaped():
    bad = result()
    bad["advice"][0]["reason"] = "<b>&'"
    bad["gpus"][0]["namespaces"] = ['"><script>']
    page = R.render_html(R.fleet_model({}, usage=bad))
    assert "<td>mig: &lt;b&gt;&amp;&#x27;</td>" in page and "&quot;&gt;&lt;script&gt;" in page and "<script>" not in page
    assert re.search(r'<polyline class="sm" points="[0-9., ]+"', page)
