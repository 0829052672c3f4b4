# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/fleet_report.yml with GPU usage (issue 43 point 3): gpu_usage_info read once through Prometheus's HTTP API
(tests/helpers/prometheus_fake.py in this process) with the advice playbook's connection variables, its charts, advice
and GPU-hours in report.json and report.html; a GPU with too little data refuses the advice but keeps the charts; the
PROMETHEUS_URL fallback (an AWX credential) is used when no variable is set, a failed read is shown with its reason,
and without either the section says it was not read. The play succeeds every time."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "preflight"))
from preflight_lab import ROOT, ansible_env  # noqa: E402  pylint: disable=import-error,wrong-import-position
from prometheus_fake import FakePrometheus, gpu_labels  # noqa: E402  pylint: disable=import-error,wrong-import-position

PLAYBOOK = os.path.join(ROOT, "playbooks", "fleet_report.yml")
NOW = 1_000_000_000.0


def fleet():
    """nb-1: a week of notebook bursts on an L40S; new-1: an H100 with two days of data (too little for the advice)."""
    nb = gpu_labels("nb-1", uuid="GPU-nb", model="NVIDIA L40S", pod=("notebooks", "jl-1", "lab"))
    new = gpu_labels("new-1", uuid="GPU-new", pod=("serving", "llm-0", "server"))

    def nb_sm(t):
        return 0.6 if t % 43200 < 1800 else 0.02

    def recent(f):
        return lambda t: f(t) if t >= NOW - 2 * 86400 else None
    return {
        "DCGM_FI_PROF_SM_ACTIVE": [(nb, nb_sm), (new, recent(lambda t: 0.3))],
        "DCGM_FI_PROF_SM_OCCUPANCY": [(nb, nb_sm), (new, recent(lambda t: 0.2))],
        "DCGM_FI_PROF_DRAM_ACTIVE": [(nb, lambda t: 0.01), (new, recent(lambda t: 0.2))],
        "DCGM_FI_DEV_FB_USED": [(nb, lambda t: 3000.0), (new, recent(lambda t: 18432.0))],
        "DCGM_FI_DEV_FB_FREE": [(nb, lambda t: 43068.0), (new, recent(lambda t: 63127.0))],
    }


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def report(tmp_path, name, host_vars, env):
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {"all": {"hosts": {"n1": dict(local, fleet_report_driver_facts=False,
                                              gpuops_sysfs_root=str(tmp_path / "empty-root"),
                                              fleet_report_environment={"PYTHONPATH": str(tmp_path / "no-nvml")},
                                              **host_vars)}}}
    (tmp_path / ("%s.yml" % name)).write_text(yaml.safe_dump(inventory))
    report_dir = tmp_path / name
    base = {k: v for k, v in os.environ.items() if not k.startswith("PROMETHEUS_")}
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(tmp_path / ("%s.yml" % name)), PLAYBOOK,
         "-e", json.dumps({"fleet_report_dir": str(report_dir), "fleet_report_hosts": "n1"})],
        cwd=ROOT, env=ansible_env(base=base, extra=dict(env, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
                                                        ANSIBLE_SHOW_CUSTOM_STATS="1")),
        capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    stats = json.loads(proc.stdout)["global_custom_stats"]["fleet_report"]
    return stats, json.loads((report_dir / "report.json").read_text()), (report_dir / "report.html").read_text()


def test_the_usage_section_from_the_variables_the_env_fallback_and_without_prometheus(tmp_path):
    with FakePrometheus(fleet(), now=NOW) as prom:
        stats, model, page = report(tmp_path, "vars", {"gpu_usage_advice_url": prom.url, "gpu_usage_advice_window": "7d"}, {})
        queries = [a.get("query") for path, a, _h in prom.requests if path == "/api/v1/query_range"]
    usage = model["usage"]
    # The advice was refused (new-1 holds two days): no advice invented, the reason shown, the charts read again.
    assert usage["error"] is None and usage["advice"] == [] and stats["summary"]["usage_advice"] == {}
    assert "new-1 GPU 0 observed 48.1 h" in usage["advice_error"] and "too little data" in usage["advice_error"]
    assert len(queries) == 2 * 7   # the read with the advice, then the one without: 7 figures each
    charts = {(n["host"], g["label"]): g["chart"] for n in usage["nodes"] for g in n["gpus"]}
    assert sorted(charts) == [("nb-1", "GPU 0"), ("new-1", "GPU 0")]
    assert charts[("nb-1", "GPU 0")]["points"] == 169 and charts[("new-1", "GPU 0")]["points"] == 49
    assert usage["gpu_hours"]["by_namespace"] == [
        {"model": "NVIDIA H100 80GB HBM3", "profile": "whole", "namespace": "serving", "hours": round(577 * 300 / 3600.0, 4)},
        {"model": "NVIDIA L40S", "profile": "whole", "namespace": "notebooks", "hours": round(2017 * 300 / 3600.0, 4)}]
    assert page.count('<svg class="chart"') == 2 and "<p class=\"warn\">no advice: " in page
    assert "GPU-hours per MIG profile and namespace" in page

    # PROMETHEUS_URL alone (an AWX credential) is read; nothing listens there: the reason is shown, the play goes on.
    gone = "http://127.0.0.1:%d" % closed_port()
    stats, model, page = report(tmp_path, "env", {}, {"PROMETHEUS_URL": gone})
    assert model["usage"]["error"].startswith("gpu_usage_info: ") and gone in model["usage"]["error"]
    assert model["usage"]["nodes"] == [] and "<h2>GPU usage</h2><p class=\"warn\">gpu_usage_info: " in page

    # Neither: not read, and the page says why.
    stats, model, page = report(tmp_path, "none", {}, {})
    assert model["usage"]["skipped"] == "no Prometheus configured (neither gpu_usage_advice_url nor PROMETHEUS_URL is set)"
    assert stats["summary"]["usage_advice"] == {} and "<p class=\"muted\">not read: no Prometheus configured" in page
