# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_usage_info against an in-process server answering like Prometheus's HTTP API (tests/helpers/prometheus_fake.py):
the figures and advice of a week, and the errors: unreachable, profiling metrics missing, too little data."""

from __future__ import annotations

import socket

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._usage import prometheus
from ansible_collections.gpuops.provision.plugins.modules import gpu_usage_info

from prometheus_fake import FakePrometheus, gpu_labels  # pylint: disable=import-error

NOW = 1_000_000_000.0
WEEK = 7 * 86400


def fleet(days=7, sm_active=True):
    """Three nodes: bursty notebooks (A100 40GB), inference at 18 GB of an H100's 80 GB, saturated training."""
    since = NOW - days * 86400

    def live(f):
        return lambda t: f(t) if t >= since else None

    nb, inf, train = (gpu_labels("nb-1", uuid="GPU-nb", model="NVIDIA A100-SXM4-40GB", pod=("notebooks", "jl-1", "lab")),
                      gpu_labels("infer-1", uuid="GPU-inf", pod=("serving", "llm-0", "server")),
                      gpu_labels("train-1", uuid="GPU-tr", pod=("research", "trainer-0", "main")))
    # bursts: 30 minutes of 60 % SM activity every 12 hours

    def burst(t):
        return 0.6 if t % 43200 < 1800 else 0.02
    series = {
        "DCGM_FI_PROF_SM_ACTIVE": [(nb, live(burst)), (inf, live(lambda t: 0.25)), (train, live(lambda t: 0.95))],
        "DCGM_FI_PROF_SM_OCCUPANCY": [(nb, live(burst)), (inf, live(lambda t: 0.2)), (train, live(lambda t: 0.7))],
        "DCGM_FI_PROF_DRAM_ACTIVE": [(nb, live(lambda t: 0.01)), (inf, live(lambda t: 0.3)), (train, live(lambda t: 0.8))],
        "DCGM_FI_DEV_FB_USED": [(nb, live(lambda t: 3000.0)), (inf, live(lambda t: 18432.0 if t % 7200 < 600 else 12000.0)),
                                (train, live(lambda t: 70000.0))],
        "DCGM_FI_DEV_FB_FREE": [(nb, live(lambda t: 37960.0)), (inf, live(lambda t: 81559.0 - 12000.0)), (train, live(lambda t: 11559.0))],
        "DCGM_FI_DEV_GPU_UTIL": [(nb, live(lambda t: 100.0)), (inf, live(lambda t: 60.0)), (train, live(lambda t: 100.0))],
    }
    if not sm_active:
        del series["DCGM_FI_PROF_SM_ACTIVE"], series["DCGM_FI_PROF_SM_OCCUPANCY"]
    return series


@pytest.fixture
def run(run_module):
    def _run(server, check_mode=False, **args):
        return run_module(gpu_usage_info, dict(dict(url=server.url if server else args.pop("url")), **args), check_mode=check_mode)
    return _run


def test_a_week_gives_each_nodes_figures_and_advice(run):
    with FakePrometheus(fleet(), now=NOW) as prom:
        res = run(prom, check_mode=True)
    assert res["changed"] is False and "failed" not in res, res
    assert res["window"] == {"start": NOW - WEEK, "end": NOW, "step": 300}
    assert res["queries"]["sm_active"] == "avg_over_time(DCGM_FI_PROF_SM_ACTIVE{}[300s])"
    assert res["queries"]["fb_used_peak"] == "max_over_time(DCGM_FI_DEV_FB_USED{}[300s])"
    gpus = {g["host"]: g for g in res["gpus"]}
    assert gpus["infer-1"]["hours"] == pytest.approx(168.0833, abs=1e-3)
    assert gpus["infer-1"]["pods"] == [{"namespace": "serving", "pod": "llm-0", "container": "server", "fb_used_max_mib": 18432.0}]
    assert gpus["nb-1"]["namespaces"] == ["notebooks"]
    advice = {a["name"]: a for a in res["advice"]}
    assert {n: a["advice"] for n, a in advice.items()} == {"infer-1": "mig", "nb-1": "time-slicing", "train-1": "saturated"}
    assert advice["nb-1"]["pool"] == {"name": "nb-1", "nodes": ["nb-1"], "sharing": "time-slicing", "replicas": 8}
    assert advice["infer-1"]["mig_config"]["mig-configs"]["infer-1"][0]["mig-devices"] == {"3g.40gb": 2}
    assert advice["train-1"]["action"] == "add capacity"


def test_series_and_gpu_hours_of_a_week(run):
    # issue 43 point 3: the fleet report's charts and chargeback. The week starts 2800 s into an hour: 169 hourly buckets.
    with FakePrometheus(fleet(), now=NOW) as prom:
        res = run(prom, series=True, advise=False)
        small = run(prom, advise=False)
    assert res["window"] == {"start": NOW - WEEK, "end": NOW, "step": 300, "bucket": 3600} and "advice" not in res
    gpus = {g["host"]: g for g in res["gpus"]}
    inf, nb = gpus["infer-1"]["series"], gpus["nb-1"]["series"]
    assert inf["bucket"] == 3600 and len(inf["t"]) == 169 and inf["t"][0] == 999_392_400.0 and inf["t"][-1] == 999_997_200.0
    # memory: the 18 GB peak of the first 10 minutes of every even hour is kept by the hourly max
    assert set(inf["fb_used_mib"]) == {18432.0, 12000.0} and inf["fb_used_mib"][1] == 18432.0 and inf["fb_used_mib"][0] == 12000.0
    assert inf["memory_used"][1] == round(18432.0 / gpus["infer-1"]["fb_total_mib"], 4) and inf["sm_active"] == [0.25] * 169
    # activity: a 30-minute burst at 60 % in an hour of 2 % averages to 31 %
    assert nb["sm_active"].count(0.31) == 14 and max(nb["sm_active"]) == 0.31 and min(nb["sm_active"]) == 0.02
    assert "series" not in small["gpus"][0] and small["window"] == {"start": NOW - WEEK, "end": NOW, "step": 300}
    hours = 2017 * 300 / 3600.0
    assert res["gpu_hours"] == small["gpu_hours"] == {
        "by_profile": [{"model": "NVIDIA A100-SXM4-40GB", "profile": "whole", "devices": 1, "hours": round(hours, 4),
                        "hours_with_pods": round(hours, 4)},
                       {"model": "NVIDIA H100 80GB HBM3", "profile": "whole", "devices": 2, "hours": round(2 * hours, 4),
                        "hours_with_pods": round(2 * hours, 4)}],
        "by_namespace": [{"model": "NVIDIA A100-SXM4-40GB", "profile": "whole", "namespace": "notebooks", "hours": round(hours, 4)},
                         {"model": "NVIDIA H100 80GB HBM3", "profile": "whole", "namespace": "research", "hours": round(hours, 4)},
                         {"model": "NVIDIA H100 80GB HBM3", "profile": "whole", "namespace": "serving", "hours": round(hours, 4)}]}


def test_pools_nodes_matchers_thresholds_and_the_requests_sent(run):
    with FakePrometheus(fleet(), now=NOW, token="s3cret") as prom:
        res = run(prom, bearer_token="s3cret", window="7d", end=NOW, step=600, match=['cluster="lab"'],
                  nodes=["infer-1", "nb-1"], pools={"mixed": ["infer-1", "nb-1"]}, thresholds={"headroom": 0.1})
        requests = prom.requests
    assert [a["name"] for a in res["advice"]] == ["mixed"] and res["advice"][0]["thresholds"]["headroom"] == 0.1
    assert sorted(g["host"] for g in res["gpus"]) == ["infer-1", "nb-1"]
    assert all(r[2]["Authorization"] == "Bearer s3cret" for r in requests)
    # end given: no time() query; every query_range carries step, timeout and the matcher
    assert [r[0] for r in requests] == ["/api/v1/query_range"] * 7
    assert requests[0][1] == {"query": 'avg_over_time(DCGM_FI_PROF_SM_ACTIVE{cluster="lab"}[600s])', "start": "%.3f" % (NOW - WEEK),
                              "end": "%.3f" % NOW, "step": "600s", "timeout": "30s"}


def test_the_token_is_never_in_the_result(run):
    with FakePrometheus(fleet(), now=NOW, token="s3cret") as prom:
        res = run(prom, bearer_token="s3cret", advise=False)
    assert "s3cret" not in str(res) and "advice" not in res


def test_wrong_token_fails_with_the_http_status(run):
    with FakePrometheus(fleet(), now=NOW, token="s3cret") as prom:
        res = run(prom, bearer_token="wrong")
    assert res["failed"] and res["msg"] == "query time() at %s: HTTP 401: Unauthorized" % prom.url


def test_two_days_of_a_seven_day_window_is_refused_naming_each_gpu(run):
    with FakePrometheus(fleet(days=2), now=NOW) as prom:
        res = run(prom)
    assert res["failed"]
    assert res["msg"].startswith("infer-1: too little data to advise: infer-1 GPU 0 observed 48.1 h (at least 144 hours")
    with FakePrometheus(fleet(days=2), now=NOW) as prom:
        assert "failed" not in run(prom, advise=False)


def test_profiling_metrics_missing_says_which_counters_to_enable(run):
    with FakePrometheus(fleet(sm_active=False), now=NOW) as prom:
        res = run(prom)
    assert res["failed"] and res["msg"].startswith(
        "dcgm-exporter publishes no DCGM_FI_PROF_SM_ACTIVE, DCGM_FI_PROF_SM_OCCUPANCY: DCGM_FI_PROF_SM_ACTIVE, "
        "DCGM_FI_PROF_SM_OCCUPANCY are commented out in dcgm-exporter's default counters (etc/default-counters.csv")


def test_no_series_at_all(run):
    with FakePrometheus({}, now=NOW) as prom:
        res = run(prom)
    assert res["failed"] and res["msg"].startswith("Prometheus holds no dcgm-exporter series")


def test_unreachable_prometheus_is_named(run):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = run(None, url="http://127.0.0.1:%d/" % port, api_timeout=2)
    assert res["failed"] and res["msg"].startswith("Prometheus at http://127.0.0.1:%d is unreachable (" % port)
    assert res["msg"].endswith(") while asking query time()")


def test_an_error_answer_is_reported_as_prometheus_sends_it(run):
    with FakePrometheus(fleet(), now=NOW) as prom:
        client = prometheus.Client({"url": prom.url, "validate_certs": True})
        with pytest.raises(prometheus.PrometheusError) as e:
            client.query_range("rate(", 0, 1, 1)
    assert str(e.value) == 'query_range rate( at %s: HTTP 400: bad_data: invalid parameter "query": parse error' % prom.url


def test_a_non_prometheus_answer(run):
    with FakePrometheus(fleet(), now=NOW) as prom:
        client = prometheus.Client({"url": prom.url + "/nothing"})
        with pytest.raises(prometheus.PrometheusError, match=r"^query time\(\) at .*/nothing: HTTP 404: 404 page not found$"):
            client.query("time()")


def test_bad_options_fail_before_any_request(run):
    with FakePrometheus(fleet(), now=NOW) as prom:
        assert run(prom, api_timeout=0)["msg"] == "api_timeout=0 is out of range: 1 to 3600 (seconds per API request)"
        assert run(prom, window="a week")["msg"].startswith("window 'a week' is not a duration like 7d")
        assert run(prom, match=['a="b"}'])["msg"].startswith("match: 'a=\"b\"}' is not one PromQL label matcher")
        assert run(prom, thresholds={"share_sm": 0.9})["msg"] == "thresholds: share_sm (0.9) must be below saturated_sm (0.85)"
        assert prom.requests == [] or all(r[1].get("query") == "time()" or "query_range" in r[0] for r in prom.requests)


def test_verification_off_warns(run):
    with FakePrometheus(fleet(), now=NOW) as prom:
        res = run(prom, validate_certs=False, ca_path="/tmp/ca.pem", advise=False)
    text = str(res["warnings"])  # a list of strings or, on newer ansible-core, of warning summaries
    assert "TLS certificate verification is off" in text and "ca_path /tmp/ca.pem is not used" in text
