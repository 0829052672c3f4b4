# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""dcgm-exporter series -> per-GPU / per-MIG-instance figures (issue 43 point 1), and the query arithmetic."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from ansible_collections.gpuops.provision.plugins.module_utils._usage import series as U

from prometheus_fake import gpu_labels  # pylint: disable=import-error


def series(labels, values, start=0.0, step=300.0):
    return {"labels": labels, "points": [(start + i * step, v) for i, v in enumerate(values)]}


def answers_for(labels, n=4, sm=0.5, used=1000.0, free=3000.0, peak=None, util=50.0, pods=()):
    out = {f: [series(labels, [sm] * n)] for f in ("sm_active", "sm_occupancy", "dram_active")}
    out["fb_used"] = [series(labels, [used] * n)]
    out["fb_free"] = [series(labels, [free] * n)]
    out["fb_used_peak"] = [series(labels, [peak or used] * n)]
    out["gpu_util"] = [series(labels, [util] * n)] if util is not None else []
    return out


@pytest.mark.parametrize("text, seconds", [("7d", 604800), ("36h", 129600), ("90m", 5400), ("45s", 45), ("2w", 1209600)])
def test_parse_duration(text, seconds):
    assert U.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["0d", "7", "7x", "1h30m", "", None, True, "-1d"])
def test_parse_duration_refuses(text):
    with pytest.raises(U.UsageError, match=r"^window %s is not a duration like 7d, 36h or 90m" % repr(text).replace("(", r"\(")):
        U.parse_duration(text)


@pytest.mark.parametrize("window, step", [(3600, 30), (60480, 30), (60481, 60), (86400, 60), (604800, 300), (604801, 600),
                                          (2592000, 1800)])
def test_choose_step_keeps_the_window_within_2016_points(window, step):
    assert U.choose_step(window) == step


def test_choose_step_given_and_refused():
    assert U.choose_step(604800, 60) == 60
    with pytest.raises(U.UsageError, match=r"^a 604800 s window at a 30 s step is 20161 points per series; Prometheus answers "
                                           r"at most 11000 \(web/api/v1/api.go queryRange\): use a larger step$"):
        U.choose_step(604800, 30)
    assert U.choose_step(10999 * 30, 30) == 30
    with pytest.raises(U.UsageError, match=r"^step must be at least 1 second, got 0$"):
        U.choose_step(600, 0)
    with pytest.raises(U.UsageError, match=r"^a 174182401 s window is longer than 2016 days at the largest step"):
        U.choose_step(86400 * 2016 + 1)
    assert U.choose_step(86400 * 2016) == 86400


def test_promql_and_matchers():
    assert U.check_matchers(['cluster="prod"', ' Hostname=~"gpu-.*" ', 'a!="x\\"y"']) == ['cluster="prod"', 'Hostname=~"gpu-.*"', 'a!="x\\"y"']
    assert U.check_matchers(None) == []
    assert U.promql("DCGM_FI_PROF_SM_ACTIVE", "avg_over_time", 300, ['a="b"', 'c!~"d"']) == \
        'avg_over_time(DCGM_FI_PROF_SM_ACTIVE{a="b",c!~"d"}[300s])'
    assert U.promql("M", "max_over_time", 60) == "max_over_time(M{}[60s])"
    for bad in ['a="b"}', 'a="b",c="d"', "a=b", '1a="b"', 3]:
        with pytest.raises(U.UsageError, match=r"^match: .* is not one PromQL label matcher"):
            U.check_matchers([bad])


def test_answer_shapes():
    assert U.answer_data({"status": "success", "data": {"x": 1}}, "q") == {"x": 1}
    with pytest.raises(U.UsageError, match=r"^q: Prometheus answered bad_data: parse error$"):
        U.answer_data({"status": "error", "errorType": "bad_data", "error": "parse error"}, "q")
    with pytest.raises(U.UsageError, match=r"^q: Prometheus answered error: no reason given$"):
        U.answer_data({"status": "error"}, "q")
    with pytest.raises(U.UsageError, match=r"^q: the answer is not a Prometheus API response \(no status\): \[\]$"):
        U.answer_data([], "q")
    data = {"resultType": "matrix", "result": [{"metric": {"a": "b"}, "values": [[1, "0.5"], [2, "NaN"], [3.5, "1"]]}]}
    assert U.matrix(data, "q") == [{"labels": {"a": "b"}, "points": [(1.0, 0.5), (3.5, 1.0)]}]
    for bad in ({"resultType": "vector", "result": []}, {"resultType": "matrix"}, None):
        with pytest.raises(U.UsageError, match=r"^q: expected a matrix answer, got "):
            U.matrix(bad, "q")
    with pytest.raises(U.UsageError, match=r"^q: a series without metric and values: "):
        U.matrix({"resultType": "matrix", "result": [{"metric": {}}]}, "q")
    with pytest.raises(U.UsageError, match=r"^q: \[1\] is not a \[time, \"value\"\] sample$"):
        U.matrix({"resultType": "matrix", "result": [{"metric": {}, "values": [[1]]}]}, "q")
    assert U.scalar({"resultType": "scalar", "result": [12.5, "12.5"]}, "q") == 12.5
    for bad in ({"resultType": "vector", "result": []}, {"resultType": "scalar", "result": []}, None):
        with pytest.raises(U.UsageError, match=r"^q: expected a scalar answer, got "):
            U.scalar(bad, "q")


def test_missing_profiling_metrics_name_the_counters_to_enable():
    assert U.missing_message(U.REQUIRED) is None
    assert U.missing_message(["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_DEV_GPU_UTIL"]) == (
        "dcgm-exporter publishes no DCGM_FI_PROF_SM_ACTIVE, DCGM_FI_PROF_SM_OCCUPANCY: DCGM_FI_PROF_SM_ACTIVE, "
        "DCGM_FI_PROF_SM_OCCUPANCY are commented out in dcgm-exporter's default counters (etc/default-counters.csv, "
        "Datacenter Profiling metrics); enable them in the counters file dcgm-exporter reads (-f / "
        "DCGM_EXPORTER_COLLECTORS, or the chart's metrics ConfigMap), as etc/dcp-metrics-included.csv does")
    assert U.missing_message(["DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_DEV_FB_USED",
                              "DCGM_FI_DEV_FB_FREE"]) == "dcgm-exporter publishes no DCGM_FI_PROF_DRAM_ACTIVE"
    assert U.missing_message([]).startswith("Prometheus holds no dcgm-exporter series (DCGM_FI_PROF_SM_ACTIVE, ")
    assert U.missing_message(["DCGM_FI_DEV_GPU_UTIL"]).startswith("dcgm-exporter publishes no DCGM_FI_PROF_SM_ACTIVE, ")


def test_device_key_reads_both_host_label_spellings_and_names_what_is_missing():
    assert U.device_key(gpu_labels(), "q") == ("gpu-node-1", "0", "GPU-aaaa", "")
    new = dict(gpu_labels(profile="3g.40gb", gi="2"), hostname="n2")
    del new["Hostname"]
    new["uuid"] = new.pop("UUID")
    assert U.device_key(new, "q") == ("n2", "0", "GPU-aaaa", "2")
    with pytest.raises(U.UsageError, match=r"^q: a series without Hostname, UUID: \{'gpu': '1'\} \(dcgm-exporter labels every "
                                           r"GPU series with Hostname, gpu and UUID\)$"):
        U.device_key({"gpu": "1"}, "q")
    with pytest.raises(U.UsageError, match=r"^q: a series without gpu: "):
        U.device_key({"Hostname": "h", "UUID": "u", "gpu": ""}, "q")


def test_stats_nearest_rank_p95():
    assert U.stats([3.0]) == {"mean": 3.0, "p95": 3.0, "max": 3.0}
    assert U.stats([float(i) for i in range(1, 21)]) == {"mean": 10.5, "p95": 19.0, "max": 20.0}
    assert U.stats([float(i) for i in range(100, 0, -1)])["p95"] == 95.0


def test_aggregate_one_gpu_exactly():
    answers = answers_for(gpu_labels(), n=4, sm=0.5, used=1000.0, free=3000.0, peak=2000.0)
    (gpu,) = U.aggregate(answers, 300)
    assert gpu == {
        "host": "gpu-node-1", "gpu": "0", "uuid": "GPU-aaaa", "model": "NVIDIA H100 80GB HBM3", "mig_profile": None,
        "gi_id": None, "samples": 4, "hours": 4 * 300 / 3600.0,
        "sm_active": {"mean": 0.5, "p95": 0.5, "max": 0.5}, "sm_occupancy": {"mean": 0.5, "p95": 0.5, "max": 0.5},
        "dram_active": {"mean": 0.5, "p95": 0.5, "max": 0.5}, "gpu_util": {"mean": 50.0, "p95": 50.0, "max": 50.0},
        "fb_used_mib": {"mean": 1000.0, "p95": 1000.0, "max": 2000.0},
        "memory_used": {"mean": 0.25, "p95": 0.25, "max": 0.5}, "fb_total_mib": 4000.0,
        "pods": [], "namespaces": [], "max_concurrent_pods": 0, "hours_with_pods": 0.0, "namespace_hours": {},
    }


def test_no_gpu_util_is_none_and_the_peak_never_lowers_the_max():
    answers = answers_for(gpu_labels(), util=None, used=1000.0, peak=10.0)
    answers["fb_used_peak"] = []
    (gpu,) = U.aggregate(answers, 60)
    assert gpu["gpu_util"] is None and gpu["fb_used_mib"]["max"] == 1000.0 and gpu["memory_used"]["max"] == 0.25


def test_pod_copies_take_the_device_value_and_pods_keep_their_own_peak():
    dev = gpu_labels()
    a, b = gpu_labels(pod=("ml", "a-1", "c")), gpu_labels(pod=("nb", "b-1", "c"))
    answers = answers_for(dev, n=2, used=3000.0, free=1000.0)
    # PodMapper.Process: the device-level series stays beside the per-pod ones of a per-process field
    answers["fb_used_peak"] = [series(dev, [3000.0, 3000.0]), series(a, [2500.0, 1000.0]), series(b, [None, 500.0][1:], start=300.0)]
    answers["sm_active"] = [series(a, [0.2, 0.9]), series(b, [0.4], start=300.0)]
    (gpu,) = U.aggregate(answers, 300)
    assert gpu["sm_active"] == {"mean": (0.2 + 0.9) / 2, "p95": 0.9, "max": 0.9}
    assert gpu["pods"] == [{"namespace": "ml", "pod": "a-1", "container": "c", "fb_used_max_mib": 2500.0},
                           {"namespace": "nb", "pod": "b-1", "container": "c", "fb_used_max_mib": 500.0}]
    assert gpu["namespaces"] == ["ml", "nb"] and gpu["max_concurrent_pods"] == 2


def test_a_pod_without_its_own_memory_series_is_charged_the_gpus_peak_while_it_ran():
    dev, old = gpu_labels(), dict(gpu_labels())
    old.update(pod_namespace="ns", pod_name="p", container_name="c")
    answers = answers_for(dev, n=3, used=100.0)
    answers["fb_used_peak"] = [series(dev, [100.0, 7000.0, 200.0])]
    answers["sm_active"] = [series(old, [0.1, 0.1], start=300.0)]
    (gpu,) = U.aggregate(answers, 300)
    assert gpu["pods"] == [{"namespace": "ns", "pod": "p", "container": "c", "fb_used_max_mib": 7000.0}]
    assert gpu["samples"] == 2 and gpu["max_concurrent_pods"] == 1


def test_mig_instances_are_their_own_devices_and_their_parent_is_left_out():
    parent = gpu_labels(uuid="GPU-mig")
    i1, i2 = gpu_labels(uuid="GPU-mig", profile="3g.40gb", gi="1"), gpu_labels(uuid="GPU-mig", profile="2g.20gb", gi="5")
    answers = {f: [] for f, _m, _fn in U.QUERIES}
    for labels in (i1, i2):
        for f, v in answers_for(labels, util=None).items():
            v and answers[f].extend(v)
    answers["fb_used"].append(series(parent, [1.0] * 4))  # parent GPU's own FB series, no profiling fields
    out = U.aggregate(answers, 300)
    assert [(d["gi_id"], d["mig_profile"]) for d in out] == [("1", "3g.40gb"), ("5", "2g.20gb")]


def test_gpus_sort_by_host_then_numeric_index():
    answers = {f: [] for f, _m, _fn in U.QUERIES}
    for host, gpu in (("b", "0"), ("a", "10"), ("a", "2")):
        for f, v in answers_for(gpu_labels(host=host, gpu=gpu, uuid="U-%s-%s" % (host, gpu))).items():
            answers[f].extend(v)
    assert [(d["host"], d["gpu"]) for d in U.aggregate(answers, 300)] == [("a", "2"), ("a", "10"), ("b", "0")]


def test_a_gpu_lacking_a_required_figure_is_named():
    answers = answers_for(gpu_labels())
    answers["sm_occupancy"] = []
    with pytest.raises(U.UsageError, match=r"^gpu-node-1 GPU 0: no DCGM_FI_PROF_SM_OCCUPANCY in the window \(the other figures "
                                           r"of this GPU are there\)$"):
        U.aggregate(answers, 300)
    mig = answers_for(gpu_labels(profile="1g.10gb", gi="9"))
    mig["fb_free"] = [series(gpu_labels(profile="1g.10gb", gi="9"), [1.0], start=99.0)]
    with pytest.raises(U.UsageError, match=r"^gpu-node-1 GPU 0 GPU instance 9: DCGM_FI_DEV_FB_USED and DCGM_FI_DEV_FB_FREE have "
                                           r"no sample at the same time$"):
        U.aggregate(mig, 300)
    zero = answers_for(gpu_labels(), used=0.0, free=0.0)
    with pytest.raises(U.UsageError, match=r"^gpu-node-1 GPU 0: framebuffer used \+ free is 0 MiB: no memory figures to read$"):
        U.aggregate(zero, 300)


def test_check_nodes():
    devs = [{"host": "a"}, {"host": "b"}]
    assert U.check_nodes(devs, None) == devs and U.check_nodes(devs, ["b"]) == [{"host": "b"}]
    with pytest.raises(U.UsageError, match=r"^no dcgm-exporter series for node\(s\) c, d \(Hostname labels seen: a, b\)$"):
        U.check_nodes(devs, ["c", "a", "d"])
    with pytest.raises(U.UsageError, match=r"\(Hostname labels seen: none\)$"):
        U.check_nodes([], ["c"])


# --- charts and GPU-hours (issue 43 point 3) -------------------------------------------------------------------------

@pytest.mark.parametrize("window, step, bucket", [
    (604800, 300, 3600),    # a week: 168 hours, 169-170 hourly buckets
    (604800, 3600, 3600),
    (604800, 7200, 7200),   # never below the step
    (129600, 120, 900),     # 36 h: 144 quarter hours
    (3600, 30, 300),        # an hour: 12 five-minute buckets (none finer)
    (2592000, 1800, 21600),  # 30 days: 120 six-hour buckets
    (86400 * 168, 86400, 86400),
    (86400 * 400, 86400, 86400 * 3),  # beyond the list: whole days
])
def test_chart_bucket_keeps_a_window_within_170_points(window, step, bucket):
    assert U.chart_bucket(window, step) == bucket
    assert window // bucket + 2 <= U.CHART_POINTS


def test_downsample_buckets_align_to_the_epoch_and_skip_empty_ones():
    # 5-minute points from 00:50 to 02:05 with a gap over the 01:00-02:00 hour.
    values = {3000.0: 0.1, 3300.0: 0.3, 7200.0: 0.5, 7500.0: 0.9}
    assert U.downsample(values, 3600, "mean") == {0.0: pytest.approx(0.2), 7200.0: pytest.approx(0.7)}
    assert U.downsample(values, 3600, "max") == {0.0: 0.3, 7200.0: 0.9}
    assert list(U.downsample({7500.0: 1.0, 3300.0: 2.0}, 3600, "max")) == [0.0, 7200.0]  # in time order
    assert U.downsample({}, 3600, "mean") == {}
    with pytest.raises(ValueError):
        U.downsample(values, 3600, "median")


def test_a_week_at_five_minutes_is_169_hourly_points_mean_of_activity_max_of_memory():
    start = 1_000_002_000.0  # 20 minutes past an hour: the first and last buckets are cut
    times = [start + i * 300 for i in range(2017)]
    sm = {t: (0.2 if (t // 300) % 2 else 0.4) for t in times}
    peak = {t: 1000.0 + (t - start) / 300 for t in times}
    chart = U.chart_series(sm, peak, 4000.0, U.chart_bucket(604800, 300))
    assert chart["bucket"] == 3600 and len(chart["t"]) == 169 <= U.CHART_POINTS
    assert chart["t"][0] == 1_000_000_800.0 and chart["t"][-1] == 1_000_000_800.0 + 168 * 3600
    assert all(b - a == 3600 for a, b in zip(chart["t"], chart["t"][1:]))
    # the first bucket holds 8 points (00:20-00:55), alternating 0.2 / 0.4, the last 1 (the window's end)
    assert chart["sm_active"][0] == 0.3 and chart["sm_active"][1] == 0.3
    assert chart["fb_used_mib"][0] == 1007.0 and chart["fb_used_mib"][1] == 1019.0 and chart["fb_used_mib"][-1] == 3016.0
    assert chart["memory_used"][0] == round(1007.0 / 4000, 4) and chart["memory_used"][-1] == 0.754
    assert len(chart["sm_active"]) == len(chart["fb_used_mib"]) == len(chart["memory_used"]) == 169


def test_chart_series_marks_a_bucket_one_figure_lacks_with_none():
    chart = U.chart_series({0.0: 0.123456}, {0.0: 10.04, 3600.0: 20.0}, 100.0, 3600)
    assert chart == {"bucket": 3600, "t": [0.0, 3600.0], "sm_active": [0.1235, None], "fb_used_mib": [10.0, 20.0],
                     "memory_used": [0.1004, 0.2]}


def test_aggregate_counts_namespace_hours_per_step_once_and_returns_the_chart_series():
    dev = gpu_labels()
    a1, a2 = gpu_labels(pod=("ml", "a-1", "c")), gpu_labels(pod=("ml", "a-2", "c"))
    b = gpu_labels(pod=("nb", "b-1", "c"))
    answers = answers_for(dev, n=12, sm=0.5, used=1000.0, free=3000.0)
    # 12 five-minute steps: ml's two pods in steps 0-5 (together in 2-3), nb's pod in steps 4-7, nothing after
    answers["sm_active"] += [series(a1, [0.5] * 4), series(a2, [0.5] * 4, start=600.0), series(b, [0.5] * 4, start=1200.0)]
    (gpu,) = U.aggregate(answers, 300, 3600)
    assert gpu["hours"] == 1.0 and gpu["namespace_hours"] == {"ml": 0.5, "nb": 4 * 300 / 3600.0}
    assert gpu["hours_with_pods"] == 8 * 300 / 3600.0
    assert gpu["series"] == {"bucket": 3600, "t": [0.0], "sm_active": [0.5], "fb_used_mib": [1000.0], "memory_used": [0.25]}
    assert "series" not in U.aggregate(answers, 300)[0]


def test_gpu_hours_per_profile_and_namespace_exactly():
    def dev(model, profile, hours, with_pods, ns):
        return {"model": model, "mig_profile": profile, "hours": hours, "hours_with_pods": with_pods, "namespace_hours": ns}
    h100, a100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"
    devices = [
        dev(h100, "3g.40gb", 168.0, 100.0, {"serving": 100.0}),
        dev(h100, "3g.40gb", 168.0, 168.0, {"serving": 50.0, "research": 168.0}),  # shared: 218 namespace hours
        dev(h100, None, 168.0833, 0.0, {}),
        dev(a100, "2g.10gb", 24.0, 12.0, {"": 12.0}),
        dev(h100, "1g.10gb", 10.0, 10.0, {"serving": 10.0}),
    ]
    assert U.gpu_hours(devices) == {
        "by_profile": [
            {"model": a100, "profile": "2g.10gb", "devices": 1, "hours": 24.0, "hours_with_pods": 12.0},
            {"model": h100, "profile": "1g.10gb", "devices": 1, "hours": 10.0, "hours_with_pods": 10.0},
            {"model": h100, "profile": "3g.40gb", "devices": 2, "hours": 336.0, "hours_with_pods": 268.0},
            {"model": h100, "profile": "whole", "devices": 1, "hours": 168.0833, "hours_with_pods": 0.0},
        ],
        "by_namespace": [
            {"model": a100, "profile": "2g.10gb", "namespace": "", "hours": 12.0},
            {"model": h100, "profile": "1g.10gb", "namespace": "serving", "hours": 10.0},
            {"model": h100, "profile": "3g.40gb", "namespace": "research", "hours": 168.0},
            {"model": h100, "profile": "3g.40gb", "namespace": "serving", "hours": 150.0},
        ],
    }
    assert U.gpu_hours([]) == {"by_profile": [], "by_namespace": []}


def test_gpu_hours_of_a_mig_card_count_its_instances_not_the_card():
    parent = gpu_labels(uuid="GPU-mig")
    i1 = gpu_labels(uuid="GPU-mig", profile="3g.40gb", gi="1", pod=("serving", "llm-0", "s"))
    i2 = gpu_labels(uuid="GPU-mig", profile="3g.40gb", gi="2")
    answers = {f: [] for f, _m, _fn in U.QUERIES}
    for labels in (i1, i2):
        for f, v in answers_for(labels, n=24, util=None).items():
            v and answers[f].extend(v)
    answers["fb_used"].append(series(parent, [1.0] * 24))
    hours = U.gpu_hours(U.aggregate(answers, 300))
    assert hours == {"by_profile": [{"model": "NVIDIA H100 80GB HBM3", "profile": "3g.40gb", "devices": 2, "hours": 4.0,
                                     "hours_with_pods": 2.0}],
                     "by_namespace": [{"model": "NVIDIA H100 80GB HBM3", "profile": "3g.40gb", "namespace": "serving",
                                       "hours": 2.0}]}


@given(st.dictionaries(st.integers(min_value=0, max_value=10 ** 6).map(float), st.floats(min_value=0, max_value=1),
                       min_size=1, max_size=60), st.sampled_from(U.CHART_BUCKETS))
def test_property_downsampled_values_stay_within_their_bucket(values, bucket):
    mean, peak = U.downsample(values, bucket, "mean"), U.downsample(values, bucket, "max")
    assert list(mean) == list(peak) == sorted(mean)
    for start, m in mean.items():
        inside = [v for t, v in values.items() if start <= t < start + bucket]
        assert inside and min(inside) - 1e-12 <= m <= max(inside) + 1e-12 and peak[start] == max(inside)
    assert max(peak.values()) == max(values.values())


@given(st.lists(st.floats(min_value=0, max_value=1, allow_nan=False), min_size=1, max_size=50))
def test_property_stats_are_ordered_and_within_the_values(values):
    s = U.stats(values)
    assert min(values) - 1e-12 <= s["mean"] <= s["max"] + 1e-12 and min(values) <= s["p95"] <= s["max"] == max(values)
    assert s["p95"] in values
