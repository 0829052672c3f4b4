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


# --- issue 41: the representative report of docs/images/fleet-report.png -----------------------------------------------

# The warn colour of the report's CSS (.warn background #ffeab0) and the band's height from the page's top at 1x:
# the title, the generated line and the two-row summary table end well before y=150.
WARN_RGB = (0xFF, 0xEA, 0xB0)
BAND = 150
DOC_PNG = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                       "docs", "images", "fleet-report.png")


def band_warn_pixels(png_path):
    width, _height, bpp, rows = png_info(png_path)
    return sum(1 for y in range(0, BAND) for x in range(0, width) if pixel(rows, bpp, x, y) == WARN_RGB)


def test_the_sample_report_counts_its_warnings_and_lists_the_vm_sections():
    import report_sample  # noqa: E402  pylint: disable=import-error,import-outside-toplevel
    model = report_sample.sample_model()
    s = model["summary"]
    # One warned node and GPU (gpu-node-2 runs hot); the MIG GPUs' gpu_memory is not applicable, not a warning.
    assert (s["preflight_warned"], s["warned_gpus"]) == (["gpu-node-2"], ["gpu-node-2 GPU 0"])
    assert s["not_applicable_gpus"] == ["gpu-node-1 GPU 0", "gpu-node-1 GPU 1", "gpu-node-2 GPU 0"]
    assert s["counts"]["preflight_warned"] == 1 and s["counts"]["warned_gpus"] == 1
    assert s["proxmox_gpu_vms"] == 4 and s["vsphere_vgpu_vms"] == 3 and s["driver_drift"] == ["lab-vcenter DC0_C0"]
    page = R.render_html(model)
    assert '<td class="warn" data-failed="0" data-warned="1">0 failed &middot; 1 warned: gpu-node-2</td>' in page
    assert "<h2>Proxmox VE VMs with GPUs</h2>" in page and "<h2>vSphere GPU hosts and vGPU VMs</h2>" in page
    for text in ("k8s-gpu-a", "nvidia-1150 (NVIDIA L40S-8Q)", "ml-train-01 (poweredOn): grid_a100-20c",
                 "DRIFT - 535.216.01 on DC0_C0_H1, 550.90.05 on DC0_C0_H0", "NVML not loaded: all 2 GPU(s) are bound to vfio-pci",
                 '>12-06 08:30</th>'):
        assert text in page, text


def test_the_warn_badge_is_drawn_in_the_band_and_only_while_something_warns(tmp_path):
    import report_sample  # noqa: E402  pylint: disable=import-error,import-outside-toplevel
    warned = report_sample.write(str(tmp_path / "warned.png"))
    calm = report_sample.write(str(tmp_path / "calm.png"), model=report_sample.sample_model(hot=False))
    assert png_info(warned)[:2] == (report_sample.WIDTH, report_sample.HEIGHT)
    # Two counted cells in the warn colour (nodes and GPUs), each well over a thousand pixels at this width.
    assert band_warn_pixels(warned) > 2000, "the summary band shows no warn colour"
    assert band_warn_pixels(calm) == 0, "nothing warns, yet the band has the warn colour"


@pytest.mark.skipif(not os.path.exists(DOC_PNG), reason="docs/images/fleet-report.png not generated")
def test_the_documented_screenshot_shows_the_warn_badge_and_the_api_sections():
    # docs/images/fleet-report.png comes from report_sample.py: it must show the warn colour in its band and be tall
    # enough for the Proxmox VE and vSphere sections below the hosts (the page's last ~600 px at 1x).
    width, height, bpp, rows = png_info(DOC_PNG)
    assert band_warn_pixels(DOC_PNG) > 2000
    lower = [pixel(rows, bpp, x, y) for y in range(height - 700, height, 3) for x in range(0, width, 3)]
    assert sum(1 for p in lower if p != (0xFF, 0xFF, 0xFF)) > 5000, "the bottom of the screenshot is empty"


# --- issue 43: the GPU usage section of docs/images/fleet-report-usage.png ----------------------------------------------

USAGE_PNG = os.path.join(os.path.dirname(DOC_PNG), "fleet-report-usage.png")


def sm_orange(p):
    """The SM activity line (#e07b00) and its anti-aliased edges on the plot's #fafafa; no other part of the page is
    orange (the warn #ffeab0 and bad #ffc9c2 backgrounds fail g - b > 40 or r - g > 40)."""
    return p[0] - p[1] > 40 and p[1] - p[2] > 40


def memory_blue(p):
    """The memory line (#2f6fd6) and its edges; the page's other blues (.info #e1ecfa, .na #e6eaf0) are far paler."""
    return p[2] - p[0] > 80 and p[2] - p[1] > 50


def chart_pixels(png_path):
    """SM and memory pixels, the 100-px bands of rows and the thirds of the width holding SM pixels, and the SM or
    memory pixels above BAND (the summary band, where no chart belongs)."""
    width, height, bpp, rows = png_info(png_path)
    sm = mem = in_band = 0
    bands, thirds = set(), set()
    for y in range(height):
        for x in range(width):
            p = pixel(rows, bpp, x, y)
            if sm_orange(p):
                sm += 1
                bands.add(y // 100)
                thirds.add(x * 3 // width)
            elif memory_blue(p):
                mem += 1
            else:
                continue
            in_band += y < BAND
    return sm, mem, bands, thirds, in_band


def test_the_usage_sample_advises_the_acceptance_cases_and_draws_a_week_per_device():
    import report_sample  # noqa: E402  pylint: disable=import-error,import-outside-toplevel
    usage = report_sample.usage_result()
    model = report_sample.sample_model(usage=usage)
    # issue 43's acceptance: notebooks -> time-slicing with replicas, an inference node peaking at 18 GB on an 80 GB GPU
    # -> 3g instances that fit, a saturated node -> add capacity; gpu-node-2's MIG instances hold more pods than MIG could.
    assert model["summary"]["usage_advice"] == {"gpu-node-2": "whole", "infer-node-1": "mig", "notebooks": "time-slicing",
                                                "train-node-1": "saturated"}
    proposals = {a["name"]: a["proposal"] for a in model["usage"]["advice"]}
    assert proposals["infer-node-1"] == "MIG: 2 x 3g.40gb per GPU" and proposals["notebooks"] == "time-slicing, 6 replicas per GPU"
    charts = [g["chart"] for n in model["usage"]["nodes"] for g in n["gpus"]]
    assert len(charts) == 9 and all(c["points"] == 169 and len(c["sm"]) == 1 for c in charts)
    by_profile = {(r["model"], r["profile"]): (r["devices"], r["hours"]) for r in usage["gpu_hours"]["by_profile"]}
    week = 2017 * 300 / 3600.0   # 2017 five-minute steps, both ends of the week included
    assert by_profile[("NVIDIA H100 80GB HBM3", "1g.10gb")] == (2, round(2 * week, 4)) == (2, 336.1667)
    assert by_profile[("NVIDIA H100 80GB HBM3", "3g.40gb")] == (1, round(week, 4)) and by_profile[("NVIDIA L40S", "whole")][0] == 2
    page = R.render_html(model)
    assert page.count('data-points="169"') == 9 and page.count('<polyline class="sm"') == 9 and "<script" not in page
    assert page.index('<section class="usage"') < page.index('<section class="host"')  # above the hosts: in the screenshot


def test_the_usage_charts_are_drawn_in_headless_chromium(tmp_path):
    import report_sample  # noqa: E402  pylint: disable=import-error,import-outside-toplevel
    png = report_sample.write(str(tmp_path / "usage.png"), model=report_sample.sample_model(usage=report_sample.usage_result()),
                              height=report_sample.USAGE_HEIGHT)
    sm, mem, bands, thirds, in_band = chart_pixels(png)
    # 9 charts of 318-px lines, 3 to a row: both lines drawn, in the three columns and three rows of charts, none in the band.
    assert sm > 3000 and mem > 3000, (sm, mem)
    assert thirds == {0, 1, 2} and len(bands) >= 3 and in_band == 0, (thirds, bands, in_band)


@pytest.mark.skipif(not os.path.exists(USAGE_PNG), reason="docs/images/fleet-report-usage.png not generated")
def test_the_documented_usage_screenshot_shows_the_charts():
    # docs/images/fleet-report-usage.png comes from report_sample.py --usage: the charts and the band's warn colour
    # (narrower cells than fleet-report.png's: the band has a usage advice column, amber for a saturated node).
    sm, mem, bands, thirds, in_band = chart_pixels(USAGE_PNG)
    assert sm > 3000 and mem > 3000 and thirds == {0, 1, 2} and len(bands) >= 3 and in_band == 0, (sm, mem, thirds, bands, in_band)
    assert band_warn_pixels(USAGE_PNG) > 1000
