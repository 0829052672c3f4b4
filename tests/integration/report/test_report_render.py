# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet report renders in headless Chromium: the screenshot is a real page with the MIG slice drawing in it."""

from __future__ import annotations

import os
import sys

import pytest

from ansible_collections.gpuops.provision.plugins.plugin_utils import _report as R

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_lab import chromium, png_info, pixel, screenshot  # noqa: E402  pylint: disable=import-error,wrong-import-position

pytestmark = pytest.mark.skipif(chromium() is None, reason="chromium is not installed (apt-get install chromium)")

# The GI colour of the report's CSS (.gi background #76b900).
GI_RGB = (0x76, 0xB9, 0x00)


def sample_model():
    def gi(gi_id, profile, start, size):
        return {"gi_id": gi_id, "profile": profile, "placement": {"start": start, "size": size}, "compute_instances": [{}]}

    gpus = [
        {"index": 0, "uuid": "GPU-0", "model": "NVIDIA A100-SXM4-40GB", "pci_address": "0000:17:00.0", "mig_capable": True,
         "mig_mode": {"current": "enabled", "pending": "enabled"},
         "instances": [gi(1, "3g.20gb", 0, 4), gi(2, "2g.10gb", 4, 2), gi(3, "1g.5gb", 6, 1)]},
        {"index": 1, "uuid": "GPU-1", "model": "NVIDIA L40S", "pci_address": "0000:31:00.0", "mig_capable": False},
    ]
    hosts = {"gpu-node-1": {"gpu": {"nvml": {"available": True, "driver_version": "550.163.01"}, "gpus": gpus},
                            "changes": ["Apply the MIG layout"]},
             "gpu-node-2": {"notes": ["facts not gathered (host failed or unreachable)"]}}
    return R.fleet_model(hosts, generated_at="2026-01-01T00:00:00Z", driver_pin="550.163.01")


def test_report_renders_in_headless_chromium(tmp_path):
    html_path = str(tmp_path / "report.html")
    png_path = str(tmp_path / "report.png")
    with open(html_path, "w", encoding="utf-8") as fh:
        fh.write(R.render_html(sample_model()))
    proc = screenshot(html_path, png_path, width=1000, height=900)
    assert proc.returncode == 0 and os.path.exists(png_path), proc.stderr[-2000:]
    assert os.path.getsize(png_path) > 10000
    width, height, bpp, rows = png_info(png_path)
    assert (width, height) == (1000, 900)
    colours = set()
    for y in range(0, height, 7):
        for x in range(0, width, 7):
            colours.add(pixel(rows, bpp, x, y))
    assert len(colours) > 20, "the screenshot is (nearly) uniform: %d colours" % len(colours)
    # The GI blocks are drawn: a fair share of the page has the GI colour (3 blocks over 7 of 8 slices of 640px).
    gi_pixels = sum(1 for y in range(0, height, 2) for x in range(0, width, 2) if pixel(rows, bpp, x, y) == GI_RGB)
    assert gi_pixels > 2000, "no MIG GI blocks visible (%d GI-coloured samples)" % gi_pixels


# The colour of a sick GPU's GI blocks (.slices.sick .gi background #d33).
SICK_RGB = (0xDD, 0x33, 0x33)


def test_a_gpu_failing_a_health_check_is_drawn_red(tmp_path):
    def gi(gi_id, profile, start, size):
        return {"gi_id": gi_id, "profile": profile, "placement": {"start": start, "size": size}, "compute_instances": [{}]}

    health = {"ecc": {"enabled": True, "volatile_uncorrected": 9, "aggregate_uncorrected": 9},
              "remapped_rows": {"error": None, "correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
              "pcie": {"gen": 4, "width": 16, "max_gen": 4, "max_width": 16},
              "temperature": {"current": 40, "slowdown": 89}, "clock_event_reasons": {"active": []},
              "persistence_mode": {"enabled": True}}
    gpu = {"index": 0, "uuid": "GPU-0", "model": "NVIDIA A100-SXM4-40GB", "pci_address": "0000:17:00.0",
           "mig_capable": True, "mig_mode": {"current": "enabled", "pending": "enabled"},
           "instances": [gi(1, "3g.20gb", 0, 4), gi(2, "3g.20gb", 4, 4)], "health": health}
    model = R.fleet_model({"gpu-node-1": {"gpu": {"nvml": {"available": True}, "gpus": [gpu],
                                                  "kernel_log": {"read": True, "xid_events": []}}}})
    html_path, png_path = str(tmp_path / "report.html"), str(tmp_path / "report.png")
    with open(html_path, "w", encoding="utf-8") as fh:
        fh.write(R.render_html(model))
    proc = screenshot(html_path, png_path, width=1000, height=700)
    assert proc.returncode == 0 and os.path.exists(png_path), proc.stderr[-2000:]
    width, height, bpp, rows = png_info(png_path)
    samples = [pixel(rows, bpp, x, y) for y in range(0, height, 2) for x in range(0, width, 2)]
    assert sum(1 for p in samples if p == SICK_RGB) > 2000, "the sick GPU's GI blocks are not red"
    # The healthy colour remains only in the headings' underline (the healthy drawing has several thousand samples).
    assert sum(1 for p in samples if p == GI_RGB) < 1000, "a sick GPU's blocks must not keep the healthy colour"
