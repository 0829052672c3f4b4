# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""An in-process HTTP server that answers like Prometheus's HTTP API, for the usage reader's tests.

Shapes from prometheus/prometheus web/api/v1/api.go: ``Response`` {status, data, errorType, error}; ``queryRange``
answers a matrix {resultType: "matrix", result: [{metric, values: [[t, "v"]]}]}, ``query`` of ``time()`` a scalar
[t, "t"]; errors come with HTTP 400 bad_data (``respondError``). Only the queries the reader sends are understood:
``<fn>(<metric>{<matchers>}[<n>s])`` and ``time()``; ``series`` maps a metric name to [(labels, f(t) or None)].
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

_Q = re.compile(r"^(?P<fn>\w+)\((?P<metric>\w+)\{(?P<match>[^}]*)\}\[(?P<step>\d+)s\]\)$")


class FakePrometheus:
    def __init__(self, series=None, now=1_000_000.0, token=None):
        self.series = series or {}
        self.now = now
        self.token = token
        self.requests = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):  # noqa: N802 (http.server's name)
                url = urlparse(self.path)
                args = {k: v[0] for k, v in parse_qs(url.query).items()}
                fake.requests.append((url.path, args, dict(self.headers)))
                if fake.token and self.headers.get("Authorization") != "Bearer %s" % fake.token:
                    return self.answer(401, None, raw=b"Unauthorized\n")
                if url.path == "/api/v1/query" and args.get("query") == "time()":
                    return self.answer(200, {"status": "success", "data": {"resultType": "scalar", "result": [fake.now, str(fake.now)]}})
                if url.path == "/api/v1/query_range":
                    m = _Q.match(args.get("query", ""))
                    if not m:
                        return self.answer(400, {"status": "error", "errorType": "bad_data",
                                                 "error": "invalid parameter \"query\": parse error"})
                    start, end, step = float(args["start"]), float(args["end"]), float(args["step"].rstrip("s"))
                    result = []
                    for labels, f in fake.series.get(m.group("metric"), []):
                        values, t = [], start
                        while t <= end:
                            v = f(t)
                            if v is not None:
                                values.append([t, "%f" % v])
                            t += step
                        if values:
                            result.append({"metric": dict(labels), "values": values})
                    return self.answer(200, {"status": "success", "data": {"resultType": "matrix", "result": result}})
                return self.answer(404, None, raw=b"404 page not found\n")

            def answer(self, code, body, raw=None):
                data = raw if raw is not None else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json" if raw is None else "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def gpu_labels(host="gpu-node-1", gpu="0", uuid="GPU-aaaa", model="NVIDIA H100 80GB HBM3", profile=None, gi=None, pod=None):
    """dcgm-exporter's label set for one series (rendermetrics/render_metrics.go gpuMetricsFormat)."""
    labels = {"gpu": gpu, "UUID": uuid, "pci_bus_id": "00000000:3B:00.0", "device": "nvidia%s" % gpu, "modelName": model,
              "Hostname": host, "DCGM_FI_DRIVER_VERSION": "550.163.01"}
    if profile:
        labels.update(GPU_I_PROFILE=profile, GPU_I_ID=gi)
    if pod:
        labels.update(namespace=pod[0], pod=pod[1], container=pod[2])
    return labels
