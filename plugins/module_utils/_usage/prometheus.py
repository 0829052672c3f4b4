# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prometheus HTTP API adapter: ``/api/v1/query`` and ``/api/v1/query_range`` with a bearer token, a CA file, TLS
verification on by default and a timeout on every call; and the read of dcgm-exporter's figures over a window
(``read_usage``), whose queries and arithmetic live in the pure ``usage_series``.

Answers and errors as prometheus/prometheus ``web/api/v1/api.go`` sends them: ``{"status": "success", "data": ...}``,
or ``{"status": "error", "errorType": "bad_data", "error": "..."}`` with HTTP 400 (bad_data), 422 (execution), 503
(timeout, canceled) or 500 (internal) (``respondError``, ``returnAPIError``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Optional
from urllib.parse import urlencode

from ansible.module_utils.urls import Request

from ansible_collections.gpuops.provision.plugins.module_utils._common import bounds
from ansible_collections.gpuops.provision.plugins.module_utils._usage import series as usage_series

try:  # Python 3
    from urllib.error import HTTPError, URLError
except ImportError:  # pragma: no cover
    HTTPError = URLError = Exception  # type: ignore[misc,assignment]

# What a call can raise short of an HTTP answer: refused/reset connections, DNS, TLS, timeouts.
TRANSPORT_ERRORS = (URLError, OSError, ValueError)


class PrometheusError(Exception):
    """No usable answer from Prometheus; the message names the server and the call."""


def error_text(body: bytes) -> str:
    """``<errorType>: <error>`` of an API error body (api.go respondError), else the start of the body as text."""
    text = body.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:200]
    if isinstance(data, dict) and data.get("error"):
        return "%s: %s" % (data.get("errorType") or "error", data["error"])
    return text.strip()[:200]


class Client:
    """One Prometheus server, from the module's connection options."""

    def __init__(self, params: Mapping[str, Any]) -> None:
        verify, self.warning = bounds.tls_verify(params.get("validate_certs", True), params.get("ca_path"))
        self.base = str(params["url"]).rstrip("/")
        self.timeout = params.get("api_timeout") or 30
        headers = {"Accept": "application/json"}
        if params.get("bearer_token"):
            headers["Authorization"] = "Bearer %s" % params["bearer_token"]
        self.request = Request(validate_certs=bool(verify), ca_path=verify if isinstance(verify, str) else None,
                               timeout=self.timeout, headers=headers)

    def get(self, path: str, args: Mapping[str, Any], what: str) -> Any:
        """``data`` of a GET answer; PrometheusError when there is none (unreachable, not JSON, an error answer)."""
        url = "%s%s?%s" % (self.base, path, urlencode(sorted(args.items())))
        try:
            resp = self.request.open("GET", url)
            raw = resp.read()
        except HTTPError as e:
            raise PrometheusError("%s at %s: HTTP %s: %s" % (what, self.base, e.code, error_text(e.read() if hasattr(e, "read") else b""))) from None
        except TRANSPORT_ERRORS as e:
            raise PrometheusError("Prometheus at %s is unreachable (%s: %s) while asking %s" % (self.base, type(e).__name__, e, what)) from None
        try:
            return usage_series.answer_data(json.loads(raw.decode("utf-8")), what)
        except ValueError as e:
            raise PrometheusError("%s at %s: the answer is not JSON (%s)" % (what, self.base, e)) from None
        except usage_series.UsageError as e:
            raise PrometheusError("%s at %s" % (e, self.base)) from None

    def query(self, promql: str, at: Optional[float] = None) -> Any:
        args: dict[str, Any] = {"query": promql, "timeout": "%ds" % self.timeout}
        if at is not None:
            args["time"] = "%.3f" % at
        return self.get("/api/v1/query", args, "query %s" % promql)

    def query_range(self, promql: str, start: float, end: float, step_s: int) -> Any:
        args = {"query": promql, "start": "%.3f" % start, "end": "%.3f" % end, "step": "%ds" % step_s,
                "timeout": "%ds" % self.timeout}
        return self.get("/api/v1/query_range", args, "query_range %s" % promql)


def read_usage(client: Client, window_s: int, end: Optional[float] = None, step_s: Optional[int] = None,
               matchers: Sequence[str] = (), nodes: Optional[Sequence[str]] = None, series: bool = False) -> dict[str, Any]:
    """The figures of every GPU and MIG instance over ``window_s`` seconds up to ``end`` (default: Prometheus's own
    clock, so the controller's does not matter), with each one's chart series when ``series``. Returns {start, end,
    step, bucket (None without series), queries, gpus, gpu_hours}; raises PrometheusError or usage_series.UsageError (a
    metric missing, a series without dcgm-exporter's labels)."""
    step = usage_series.choose_step(window_s, step_s)
    bucket = usage_series.chart_bucket(window_s, step) if series else None
    if end is None:
        end = usage_series.scalar(client.query("time()"), "query time()")
    start = end - window_s
    answers: dict[str, list[dict[str, Any]]] = {}
    queries = {}
    for figure, metric, function in usage_series.QUERIES:
        q = usage_series.promql(metric, function, step, matchers)
        queries[figure] = q
        answers[figure] = usage_series.matrix(client.query_range(q, start, end, step), "query_range %s" % q)
    message = usage_series.missing_message(metric for figure, metric, _fn in usage_series.QUERIES if answers[figure])
    if message:
        raise usage_series.UsageError(message)
    gpus = usage_series.check_nodes(usage_series.aggregate(answers, step, bucket), nodes)
    return {"start": start, "end": end, "step": step, "bucket": bucket, "queries": queries, "gpus": gpus,
            "gpu_hours": usage_series.gpu_hours(gpus)}
