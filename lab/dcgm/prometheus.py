#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lab's GPU metrics (issue 43): a real Prometheus with a week of backfilled dcgm-exporter history, scraping one
dcgm-exporter endpoint per lab node.

    prometheus.py up RUN_DIR [--node NAME ...] [--history 7d] [--step 300] [--omit METRIC ...] [--run-states DIR]
    prometheus.py down RUN_DIR
    prometheus.py status RUN_DIR

``up`` (idempotent: a running one is left as it is):
1. starts the exporters: one HTTP server per node (a process of ours, ``RUN_DIR/exporters/``), each serving
   ``/metrics`` as dcgm-exporter does (``lab/dcgm/exposition.py``: its metric names, types and labels) from the
   node's gpusim state read at each scrape and its workload profile (``lab/dcgm/workloads.json``);
2. writes the history of the same series (``--history``, default a week, one sample per ``--step``) in OpenMetrics
   and backfills it as Prometheus documents (docs/storage.md "Backfilling from OpenMetrics format"):
   ``promtool tsdb create-blocks-from openmetrics``, with ``--max-block-duration`` spanning the whole history;
3. starts Debian's ``prometheus`` on 127.0.0.1 (a free port) on that TSDB, scraping every exporter (job
   ``dcgm-exporter``, ``instance`` = the node name, the labels the history carries, so a backfilled series and its
   scraped continuation are one series), and waits until ``/-/ready``.

Files in RUN_DIR: ``pid``, ``port``, ``url`` (Prometheus), ``exporters/pid`` and ``exporters/ports.json``
({node: port}), ``prometheus.yml``, ``data/``, ``prometheus.log``, ``timings.json`` (seconds each phase took).

Why a 300 s history step and one block: a 7-day read queries at a 300 s step (plugins/module_utils/_usage/series.py
choose_step), so finer samples change no figure; and promtool reads the whole input once per block it writes
(cmd/promtool/backfill.go createBlocks loops over 2 h block ranges by default), so one block over the week is what
makes the start fast. Measured on the 2-core lab machine under a parallel test suite, five nodes (21 series):
60 s step, 2 h blocks: 453,658 lines, 3.2 s to write, 94.5 s to backfill; 60 s step, one block: 8.9 s; 300 s step,
2 h blocks: 90,778 lines, 0.6 s + 13.5 s; 300 s step, one block: 0.6 s + 1.3 s.

``--omit DCGM_FI_PROF_SM_ACTIVE --omit DCGM_FI_PROF_SM_OCCUPANCY`` is a dcgm-exporter on its default counters
(etc/default-counters.csv leaves those two commented out); ``--history 2d`` a Prometheus that holds two days.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import exposition  # noqa: E402  pylint: disable=wrong-import-position

JOB = "dcgm-exporter"
# dcgm-exporter collects every 30 s by default (--collect-interval 30000); the lab scrapes a little more often.
SCRAPE_INTERVAL = "15s"


def _alive(pidfile):
    try:
        with open(pidfile, encoding="utf-8") as f:
            pid = int(f.read())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


def _stop(pidfile):
    try:
        with open(pidfile, encoding="utf-8") as f:
            pid = int(f.read())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            os.kill(pid, 0)
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    os.unlink(pidfile)
    return pid


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(check, what, timeout, proc=None, log=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if proc is not None and proc.poll() is not None:
            raise SystemExit("%s exited (rc %s); see %s" % (what, proc.returncode, log))
        time.sleep(0.1)
    raise SystemExit("%s not up within %d s; see %s" % (what, timeout, log))


def _config(run):
    with open(os.path.join(run, "config.json"), encoding="utf-8") as f:
        return json.load(f)


def serve_exporters(run):
    """The exporters' process: one ThreadingHTTPServer per node, ``/metrics`` rendered at each scrape."""
    cfg = _config(run)
    with open(cfg["profile"], encoding="utf-8") as f:
        profile = json.load(f)
    servers = {}
    for node, state in cfg["nodes"].items():
        def handler_for(node=node, state=state):
            class Handler(BaseHTTPRequestHandler):
                def log_message(self, *args):  # quiet
                    pass

                def do_GET(self):  # noqa: N802 (http.server's name)
                    if self.path.split("?")[0] != "/metrics":
                        self.send_error(404)
                        return
                    try:
                        body = exposition.render([(node, state)], profile, [time.time()], omit=cfg["omit"]).encode()
                        code, ctype = 200, "text/plain; version=0.0.4; charset=utf-8"
                    except (SystemExit, Exception) as exc:  # pylint: disable=broad-except
                        body, code, ctype = ("%s\n" % exc).encode(), 500, "text/plain; charset=utf-8"
                    self.send_response(code)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
            return Handler
        servers[node] = ThreadingHTTPServer(("127.0.0.1", 0), handler_for())
    for srv in servers.values():
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    tmp = os.path.join(run, "exporters", "ports.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({n: s.server_address[1] for n, s in servers.items()}, f)
    os.rename(tmp, os.path.join(run, "exporters", "ports.json"))
    signal.signal(signal.SIGTERM, lambda *_a: sys.exit(0))
    while True:
        time.sleep(3600)


def _ready(url):
    try:
        with urllib.request.urlopen(url + "/-/ready", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def up(args):
    run = os.path.abspath(args.run_dir)
    if _alive(os.path.join(run, "pid")) and _alive(os.path.join(run, "exporters", "pid")):
        with open(os.path.join(run, "url"), encoding="utf-8") as f:
            print("prometheus already up at %s" % f.read().strip())
        return
    if shutil.which(args.prometheus) is None or shutil.which(args.promtool) is None:
        raise SystemExit("prometheus/promtool not found: apt-get install prometheus (Debian's package has both; "
                         "the Makefile's deps installs it)")
    down(run, quiet=True)
    shutil.rmtree(run, ignore_errors=True)
    os.makedirs(os.path.join(run, "exporters"))
    with open(args.profile, encoding="utf-8") as f:
        profile = json.load(f)
    nodes = args.node or sorted(profile)
    cfg = {"nodes": {n: exposition.state_path(n, args.run_states) for n in nodes}, "omit": args.omit,
           "profile": os.path.abspath(args.profile)}
    with open(os.path.join(run, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=1)
    timings = {}
    t0 = time.monotonic()
    with open(os.path.join(run, "exporters", "exporters.log"), "w", encoding="utf-8") as log:
        exp = subprocess.Popen([sys.executable, os.path.abspath(__file__), "exporters", run], stdout=log,  # pylint: disable=consider-using-with
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    with open(os.path.join(run, "exporters", "pid"), "w", encoding="utf-8") as f:
        f.write(str(exp.pid))
    ports_file = os.path.join(run, "exporters", "ports.json")
    _wait(lambda: os.path.exists(ports_file), "the exporters", 30, exp, os.path.join(run, "exporters", "exporters.log"))
    with open(ports_file, encoding="utf-8") as f:
        ports = json.load(f)

    # The history, ending now, in the labels a scrape adds (job, instance).
    window = exposition.duration_seconds(args.history)
    end = int(time.time())
    end -= end % args.step
    times = range(end - window, end + 1, args.step)
    extra = {n: [("instance", n), ("job", JOB)] for n in nodes}
    history = os.path.join(run, "history.om")
    with open(history, "w", encoding="utf-8") as f:
        f.write(exposition.render(sorted(cfg["nodes"].items()), profile, times, openmetrics=True, extra=extra,
                                  omit=args.omit))
    timings["history_s"] = round(time.monotonic() - t0, 2)
    t1 = time.monotonic()
    hours = -(-(window + args.step) // 3600)
    subprocess.run([args.promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet",
                    "--max-block-duration=%dh" % hours, history, os.path.join(run, "data")], check=True,
                   stdout=subprocess.DEVNULL)
    timings["backfill_s"] = round(time.monotonic() - t1, 2)
    timings["history_lines"] = sum(1 for _line in open(history, encoding="utf-8"))  # pylint: disable=consider-using-with
    os.unlink(history)

    lines = ["global:", "  scrape_interval: %s" % SCRAPE_INTERVAL, "  scrape_timeout: 10s", "scrape_configs:",
             "  - job_name: %s" % JOB, "    static_configs:"]
    for node in nodes:
        lines += ["      - targets: ['127.0.0.1:%d']" % ports[node], "        labels: {instance: '%s'}" % node]
    with open(os.path.join(run, "prometheus.yml"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    port = _free_port()
    url = "http://127.0.0.1:%d" % port
    t2 = time.monotonic()
    with open(os.path.join(run, "prometheus.log"), "w", encoding="utf-8") as log:
        prom = subprocess.Popen([  # pylint: disable=consider-using-with
            args.prometheus, "--config.file=%s" % os.path.join(run, "prometheus.yml"),
            "--storage.tsdb.path=%s" % os.path.join(run, "data"), "--storage.tsdb.retention.time=30d",
            "--web.listen-address=127.0.0.1:%d" % port, "--web.console.templates=%s" % run,
            "--web.console.libraries=%s" % run], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=run, start_new_session=True)
    with open(os.path.join(run, "pid"), "w", encoding="utf-8") as f:
        f.write(str(prom.pid))
    _wait(lambda: _ready(url), "prometheus", 120, prom, os.path.join(run, "prometheus.log"))
    timings["ready_s"] = round(time.monotonic() - t2, 2)
    timings["total_s"] = round(time.monotonic() - t0, 2)
    with open(os.path.join(run, "timings.json"), "w", encoding="utf-8") as f:
        json.dump(timings, f)
    for name, value in (("port", str(port)), ("url", url)):
        with open(os.path.join(run, name), "w", encoding="utf-8") as f:
            f.write(value)
    print("prometheus up at %s (%s)" % (url, ", ".join("%s %s" % kv for kv in timings.items())))


def down(run, quiet=False):
    for pidfile, what in ((os.path.join(run, "pid"), "prometheus"), (os.path.join(run, "exporters", "pid"), "exporters")):
        pid = _stop(pidfile)
        if pid and not quiet:
            print("stopped %s (pid %d)" % (what, pid))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up")
    u.add_argument("run_dir")
    u.add_argument("--node", action="append", help="a node of the profile (default: every node in it); repeatable")
    u.add_argument("--profile", default=os.path.join(HERE, "workloads.json"))
    u.add_argument("--run-states", help="the running lab's gpusim states (lab/up.sh's RUN/gpusim), read before the seeds")
    u.add_argument("--history", default="7d", help="history to backfill, a duration with one unit (default 7d)")
    u.add_argument("--step", type=int, default=300, help="seconds between history samples (default 300)")
    u.add_argument("--omit", action="append", default=[], metavar="METRIC", help="a metric the exporters lack")
    u.add_argument("--prometheus", default="prometheus")
    u.add_argument("--promtool", default="promtool")
    for name in ("down", "status", "exporters"):
        sub.add_parser(name).add_argument("run_dir")
    args = ap.parse_args(argv)
    if args.cmd == "up":
        up(args)
    elif args.cmd == "down":
        down(os.path.abspath(args.run_dir))
    elif args.cmd == "status":
        run = os.path.abspath(args.run_dir)
        sys.exit(0 if _alive(os.path.join(run, "pid")) and _alive(os.path.join(run, "exporters", "pid")) else 1)
    else:
        serve_exporters(os.path.abspath(args.run_dir))


if __name__ == "__main__":
    main()
