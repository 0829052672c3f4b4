# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""lab/dcgm/exposition.py writes dcgm-exporter's exposition (rendermetrics/render_metrics.go gpuMetricsFormat, the
metrics of etc/default-counters.csv) from gpusim's state, and a history for promtool's backfill."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GEN = ROOT / "lab" / "dcgm" / "exposition.py"
HOSTS = ["--host", "gpu-node-1=%s" % (ROOT / "lab/gpusim/states/gpu-node-1.json"),
         "--host", "gpu-node-2=%s" % (ROOT / "lab/gpusim/states/gpu-node-2.json")]
LINE = re.compile(r'^(?P<name>[A-Z_]+)\{(?P<labels>[^}]*)\} (?P<value>\S+)(?: (?P<ts>\d+))?$')


def run(*args):
    return subprocess.run([sys.executable, str(GEN)] + HOSTS + list(args), check=True, capture_output=True, text=True).stdout


def test_scrape_has_dcgm_exporters_names_types_and_label_order():
    text = run("--end", "1765000000")
    assert text == run("--end", "1765000000")  # deterministic
    lines = text.splitlines()
    assert lines[:2] == ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).", "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    names = [ln.split()[2] for ln in lines if ln.startswith("# TYPE")]
    assert names == ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_SM_ACTIVE",
                     "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_DRAM_ACTIVE"]
    samples = [LINE.match(ln) for ln in lines if not ln.startswith("#")]
    assert all(samples)
    keys = [[kv.split("=")[0] for kv in m.group("labels").split(",")] for m in samples]
    assert ["gpu", "UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE", "GPU_I_ID", "Hostname",
            "DCGM_FI_DRIVER_VERSION", "container", "namespace", "pod"] in keys
    assert ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION", "container",
            "namespace", "pod"] in keys
    # NVML has no GPU utilisation for a MIG instance: only the whole H100 has it
    util = [m for m in samples if m.group("name") == "DCGM_FI_DEV_GPU_UTIL"]
    assert len(util) == 1 and "GPU_I_ID" not in util[0].group("labels")
    ratios = [m for m in samples if m.group("name").startswith("DCGM_FI_PROF")]
    assert all(re.match(r"^\d\.\d{6}$", m.group("value")) for m in ratios)
    assert all(re.match(r"^\d+$", m.group("value")) for m in samples if m.group("name").startswith("DCGM_FI_DEV"))
    assert 'hostname="gpu-node-2"' in run("--end", "1765000000", "--hostname-label", "hostname")


def test_history_is_openmetrics_with_each_series_in_time_order():
    text = run("--end", "1765000000", "--history", "2h", "--step", "600")
    lines = text.splitlines()
    assert lines[-1] == "# EOF" and text.endswith("# EOF\n")
    series = {}
    for ln in lines:
        m = LINE.match(ln)
        if m:
            series.setdefault((m.group("name"), m.group("labels")), []).append(int(m.group("ts")))
    assert all(ts == sorted(ts) and len(ts) == 13 and ts[-1] == 1764999600 for ts in series.values())
    # each family's samples together (OpenMetrics): a family's TYPE line comes once
    assert len([ln for ln in lines if ln.startswith("# TYPE")]) == 6
