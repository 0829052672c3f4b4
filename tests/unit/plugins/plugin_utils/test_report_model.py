# -*- coding: utf-8 -*-
"""Fleet report model and HTML rendering (plugins/plugin_utils/_report.py, behind the report_model filter and the
fleet_report action): facts in, slice blocks and verdicts out."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.filter import report as report_filter
from ansible_collections.gpuops.provision.plugins.plugin_utils import _report as R

from health_readings import healthy  # pylint: disable=import-error  # tests/helpers


def gi(gi_id, profile, start, size, cis=1):
    return {"gi_id": gi_id, "profile": profile, "profile_id": 0, "placement": {"start": start, "size": size},
            "compute_instances": [{"ci_id": i, "profile": profile} for i in range(cis)]}


def gpu(index, model, mode=None, instances=(), address=None, **extra):
    g = {"index": index, "uuid": "GPU-%d" % index, "model": model, "pci_address": address or "0000:%02x:00.0" % (0x17 + index),
         "mig_capable": mode is not None, "mig_mode": {"current": mode, "pending": mode} if mode else None,
         "instances": list(instances), "kernel_driver": "nvidia"}
    g.update(extra)
    return g


def gpu_result(*gpus, driver="550.163.01"):
    return {"changed": False, "nvml": {"available": True, "driver_version": driver}, "gpus": list(gpus)}


A100 = "NVIDIA A100-SXM4-40GB"


class Blocks(HTMLParser):
    """Collects the MIG drawing: per .slices grid its slice count and the GI blocks placed in it."""

    def __init__(self):
        super().__init__()
        self.grids = []
        self.scripts = 0
        self.external = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script":
            self.scripts += 1
        for key in ("src", "href"):
            if a.get(key):
                self.external.append(a[key])
        if tag == "link":
            self.external.append(a.get("href"))
        cls = (a.get("class") or "").split()
        if "slices" in cls:
            self.grids.append({"slices": int(a["data-slices"]), "cells": 0, "gis": []})
        elif "slice" in cls:
            self.grids[-1]["cells"] += 1
        elif "gi" in cls:
            m = re.search(r"grid-column:(\d+) / span (\d+)", a["style"])
            self.grids[-1]["gis"].append((int(a["data-start"]), int(a["data-size"]), int(m.group(1)), int(m.group(2))))


def parse(html_text):
    p = Blocks()
    p.feed(html_text)
    return p


def test_mig_gpu_drawn_as_eight_slices_with_gis_at_their_placement():
    gis = [gi(1, "3g.20gb", 4, 4), gi(2, "2g.10gb", 0, 2), gi(3, "1g.5gb", 3, 1)]
    facts = {"n1": {"gpu": gpu_result(gpu(0, A100, "enabled", gis))}}
    model = R.fleet_model(facts)
    mig = model["hosts"][0]["gpus"][0]["mig"]
    assert mig["memory_slices"] == 8
    assert [(i["profile"], i["start"], i["size"]) for i in mig["instances"]] == [
        ("2g.10gb", 0, 2), ("1g.5gb", 3, 1), ("3g.20gb", 4, 4)]
    assert mig["free_slices"] == [2]
    page = parse(R.render_html(model))
    assert len(page.grids) == 1
    grid = page.grids[0]
    assert grid["slices"] == 8 and grid["cells"] == 8
    # CSS grid columns are 1-based: a GI at start s spans columns s+1 .. s+size.
    assert sorted(grid["gis"]) == [(0, 2, 1, 2), (3, 1, 4, 1), (4, 4, 5, 4)]


def test_a30_has_four_slices_and_profiles_override_the_model_guess():
    g = gpu(0, "NVIDIA A30", "enabled", [gi(1, "2g.12gb", 2, 2)])
    assert R.memory_slices(g) == 4
    page = parse(R.render_html(R.fleet_model({"n": {"gpu": gpu_result(g)}})))
    assert page.grids[0]["slices"] == 4 and page.grids[0]["gis"] == [(2, 2, 3, 2)]
    # The placements NVML reports win over the model name.
    g2 = gpu(0, "NVIDIA A30", "enabled", profiles=[{"name": "x", "placements": [{"start": 0, "size": 8}]}])
    assert R.memory_slices(g2) == 8


def test_gi_outside_the_slices_is_flagged_not_drawn():
    g = gpu(0, A100, "enabled", [gi(1, "3g.20gb", 6, 4)])
    model = R.fleet_model({"n": {"gpu": gpu_result(g)}})
    assert model["hosts"][0]["gpus"][0]["mig"]["instances"][0]["valid"] is False
    text = R.render_html(model)
    assert parse(text).grids[0]["gis"] == []
    assert "placements outside the 8 slices: GI 1 3g.20gb start 6 size 4" in text


def test_mig_disabled_and_non_mig_gpus_have_no_slice_grid():
    model = R.fleet_model({"n": {"gpu": gpu_result(gpu(0, A100, "disabled"), gpu(1, "NVIDIA L40S"))}})
    gpus = model["hosts"][0]["gpus"]
    assert gpus[0]["mig"]["current"] == "disabled" and gpus[1]["mig"] is None
    text = R.render_html(model)
    assert parse(text).grids == []
    assert "MIG disabled (8 memory slices, whole GPU)" in text
    assert model["summary"]["mig_enabled"] == 0


def test_pending_mig_mode_is_shown_as_reset_needed():
    g = gpu(0, A100, "disabled")
    g["mig_mode"] = {"current": "disabled", "pending": "enabled"}
    model = R.fleet_model({"n": {"gpu": gpu_result(g)}})
    assert model["hosts"][0]["gpus"][0]["mig"]["reset_pending"] is True
    assert "MIG disabled (pending enabled, reset needed)" in R.render_html(model)


def test_iommu_isolation_license_driver_pin_and_preflight_per_host():
    io = {"active": True, "kind": "intel", "passthrough": True, "gpus": [
        {"address": "0000:17:00.0", "iommu_group": 14, "isolated": True, "isolation_reason": "only this card", "driver": "vfio-pci"},
        {"address": "0000:18:00.0", "iommu_group": 15, "isolated": False, "isolation_reason": "shares group 15 with 0000:18:00.2",
         "driver": "vfio-pci"}]}
    lic = {"licensed": False, "vgpu_guest": True, "gpus": [{"index": 0, "state": "unlicensed", "feature": "compute"}],
           "gridd": {"feature_name": "compute", "tokens": [{"name": "t.tok"}]}}
    drv = {"installed_version": "535.261.03-1", "driver_version": "535.261.03", "loaded_version": "535.261.03",
           "state": "loaded", "reboot_pending": False, "pin": "550.163.01", "on_pin": False}
    pf = {"node": "n1", "verdict": "fail", "ready": False, "failed_checks": ["iommu_isolation"], "warned_checks": [],
          "checks": [{"id": "iommu_isolation", "status": "fail", "evidence": "0000:18:00.0 shares", "remedy": "move the card"},
                     {"id": "license", "status": "skip", "evidence": "not selected", "remedy": ""}]}
    facts = {"n1": {"gpu": gpu_result(gpu(0, A100, None)), "iommu": io, "license": lic, "driver": drv, "preflight": pf},
             "n2": {"driver": dict(drv, installed_version="550.163.01-1", driver_version="550.163.01", on_pin=True)}}
    model = R.fleet_model(facts, driver_pin="550.163.01")
    s = model["summary"]
    assert s["off_pin"] == ["n1"] and s["unlicensed"] == ["n1"] and s["not_isolated"] == ["n1"]
    assert s["preflight_failed"] == ["n1"]
    n1 = model["hosts"][0]
    assert n1["gpus"][0]["isolation"]["isolated"] is True and n1["gpus"][0]["license"]["state"] == "unlicensed"
    assert n1["iommu"]["not_isolated"] == ["0000:18:00.0"]
    # Skipped checks are not noise in the report.
    assert [c["id"] for c in n1["preflight"]["checks"]] == ["iommu_isolation"]
    text = R.render_html(model)
    assert "pin 550.163.01 (OFF PIN)" in text and "pin 550.163.01 (on pin)" in text
    assert "NOT licensed" in text and "FAIL - failing: iommu_isolation" in text
    assert "not isolated: 0000:18:00.0" in text


def test_pin_without_driver_facts_compares_the_nvml_version():
    model = R.fleet_model({"a": {"gpu": gpu_result(driver="535.261.03")}, "b": {"gpu": gpu_result()}},
                          driver_pin="550.163.01")
    assert model["summary"]["off_pin"] == ["a"]
    assert model["hosts"][1]["driver"]["on_pin"] is True


def test_failed_and_unreachable_pieces_become_notes_and_host_still_listed():
    facts = {"bad": {"gpu": {"failed": True, "msg": "NVML is not available: driver not loaded"},
                     "iommu": {"unreachable": True, "msg": "ssh: connection refused"},
                     "license": {"skipped": True, "changed": False},
                     "notes": ["facts not gathered"]},
             "none": None}
    model = R.fleet_model(facts)
    bad = model["hosts"][0]
    assert bad["gpus"] == [] and bad["iommu"] is None
    assert bad["notes"] == ["facts not gathered", "gpu_info: NVML is not available: driver not loaded",
                            "iommu_info: ssh: connection refused", "nvidia_license_info: skipped"]
    assert [h["host"] for h in model["hosts"]] == ["bad", "none"]
    assert "NVML is not available: driver not loaded" in R.render_html(model)


def test_vfio_bound_gpus_without_nvml_come_from_iommu_facts():
    io = {"active": True, "gpus": [{"address": "0000:17:00.0", "iommu_group": 14, "isolated": True, "driver": "vfio-pci"}]}
    model = R.fleet_model({"pve": {"gpu": {"nvml": {"available": False, "reason": "no driver"}, "gpus": []}, "iommu": io}})
    h = model["hosts"][0]
    assert [g["pci_address"] for g in h["gpus"]] == ["0000:17:00.0"] and h["gpus"][0]["kernel_driver"] == "vfio-pci"
    # NVML is absent by design on a passthrough host: said why, as information rather than a warning (issue 41).
    assert h["notes"] == [] and h["info"] == [
        "NVML not loaded: all 1 GPU(s) are bound to vfio-pci for passthrough, so no NVIDIA driver runs on this host "
        "by design (gpu_info: no driver)"]


def test_html_is_self_contained_and_escapes_facts():
    g = gpu(0, "<script>alert(1)</script>", "enabled", [gi(1, '1g.5gb"><b>', 0, 1)])
    text = R.render_html(R.fleet_model({"<h>": {"gpu": gpu_result(g), "changes": ["apt <x>"]}}, title="T & <T>"))
    page = parse(text)
    assert page.scripts == 0 and page.external == []
    assert "<script>alert" not in text and "&lt;script&gt;" in text and "<title>T &amp; &lt;T&gt;</title>" in text
    assert "apt &lt;x&gt;" in text
    assert text.startswith("<!DOCTYPE html>") and "<style>" in text


def test_changes_from_run_log_and_model_is_json():
    log = {"plays": [{"tasks": [
        {"task": {"name": "Apply MIG"}, "hosts": {"n1": {"changed": True, "msg": "2 GIs"}, "n2": {"changed": False}}},
        {"task": {"name": "Label node"}, "hosts": {"n1": {"changed": True}}}]}]}
    changes = R.changes_from_run_log(log)
    assert changes == {"n1": [{"task": "Apply MIG", "detail": "2 GIs"}, {"task": "Label node", "detail": ""}]}
    model = R.fleet_model({"n1": {"changes": changes["n1"]}, "n2": {}})
    assert model["summary"]["changed"] == ["n1"]
    assert json.loads(json.dumps(model)) == model
    text = R.render_html(model)
    assert "<td>Apply MIG</td><td>2 GIs</td>" in text and "no changes recorded for the last run" in text
    with pytest.raises(AnsibleFilterError):
        R.changes_from_run_log(["not", "a", "log"])


def test_bad_input_is_a_clear_error():
    with pytest.raises(AnsibleFilterError, match="hosts must be a mapping"):
        R.fleet_model(["n1"])
    assert report_filter.FilterModule().filters()["report_model"]({"x": {}})["summary"]["hosts"] == 1


def test_report_files_are_kept_when_only_generation_times_differ(tmp_path):
    from ansible_collections.gpuops.provision.plugins.plugin_utils import _report_files as F

    def model(verdict, when):
        return json.dumps(R.fleet_model({"n1": {"preflight": {"verdict": verdict, "generated_at": when}}}, generated_at=when))

    path = tmp_path / "report.json"
    assert F.write_report(str(path), model("pass", "2026-01-01T00:00:00Z"), check_mode=False)
    assert not F.write_report(str(path), model("pass", "2026-01-02T00:00:00Z"), check_mode=False)
    assert "2026-01-01" in path.read_text()  # kept as it was
    assert F.write_report(str(path), model("fail", "2026-01-02T00:00:00Z"), check_mode=True)
    assert "2026-01-01" in path.read_text()  # check mode writes nothing
    assert F.write_report(str(path), model("fail", "2026-01-02T00:00:00Z"), check_mode=False)
    junit = '<testsuite name="x" timestamp="%s"><testcase name="a"/></testsuite>'
    assert F.same_report(junit % "2026-01-01", junit % "2026-01-02")
    assert not F.same_report(junit % "2026-01-01", junit.replace('"a"', '"b"') % "2026-01-01")


# --- GPU health per GPU and over runs -------------------------------------------------------------------------------

HEALTHY = healthy()


def sick(**change):
    h = json.loads(json.dumps(HEALTHY))
    for key, value in change.items():
        h[key].update(value)
    return h


def health_host(*healths, log=None):
    res = gpu_result(*[gpu(i, A100, "enabled", [gi(1, "3g.20gb", 0, 4)], health=h) for i, h in enumerate(healths)])
    res["kernel_log"] = log or {"read": True, "error": None, "xid_events": []}
    return {"gpu": res}


def test_a_gpu_failing_a_health_check_is_drawn_red_with_the_reason_on_hover():
    model = R.fleet_model({"n1": health_host(HEALTHY, sick(ecc={"volatile_uncorrected": 4}))})
    good, bad = model["hosts"][0]["gpus"]
    assert good["health"] == {"status": "pass", "failing": [], "not_applicable": []}
    assert bad["health"]["status"] == "fail"
    assert bad["health"]["failing"] == [{"check": "gpu_ecc", "status": "fail", "evidence": (
        "uncorrectable ECC errors: 4 since the last reset, 0 in its life (more than 0 since the last reset)")}]
    assert model["summary"]["unhealthy_gpus"] == ["n1 GPU 1"]
    page = R.render_html(model)
    grids = re.findall(r'<div class="slices([^"]*)"([^>]*)>', page)
    assert [cls for cls, _a in grids] == ["", " sick"]
    assert 'title="gpu_ecc fail: uncorrectable ECC errors: 4 since the last reset' in grids[1][1]
    assert "health FAIL: gpu_ecc" in page and "<th>GPU health</th>" in page


def test_a_warning_is_named_on_hover_but_not_drawn_and_a_whole_gpu_is_marked_too():
    res = gpu_result(gpu(0, "NVIDIA L40S", health=sick(persistence_mode={"enabled": False})),
                     gpu(1, A100, "disabled", health=sick(pcie={"width": 8})))
    res["kernel_log"] = {"read": True, "xid_events": []}
    page = R.render_html(R.fleet_model({"n1": {"gpu": res}}))
    assert re.search(r'<div class="nomig sick" title="gpu_pcie fail: PCIe link trained at x8', page)
    model = R.fleet_model({"n1": {"gpu": res}})
    assert model["hosts"][0]["gpus"][0]["health"]["status"] == "warn"
    assert re.search(r'<span class="warn" title="gpu_persistence warn: persistence mode off" data-health="warn">'
                     r'health WARN: gpu_persistence</span>', page)
    assert page.count('class="nomig sick"') == 1 and page.count(' sick"') == 1  # only the failing GPU is drawn red


def test_the_nodes_preflight_results_take_precedence_over_the_defaults():
    # With the inventory's ecc_volatile_max of 10, the node's preflight passed the 4 errors the defaults would fail.
    host = health_host(sick(ecc={"volatile_uncorrected": 4}))
    host["preflight"] = {"verdict": "pass", "failed_checks": [], "checks": [
        {"id": "gpu_ecc", "status": "pass", "evidence": "ok", "gpus": [{"index": 0, "status": "pass", "evidence": "4"}]}]}
    assert R.fleet_model({"n1": host})["hosts"][0]["gpus"][0]["health"] == {"status": "pass", "failing": [],
                                                                            "not_applicable": []}
    # Without readings there is no verdict rather than a pass.
    assert R.fleet_model({"n1": {"gpu": gpu_result(gpu(0, A100))}})["hosts"][0]["gpus"][0]["health"] is None


def test_health_history_grows_only_when_health_changes_and_is_drawn():
    first = R.with_health_history(dict(R.fleet_model({"n1": health_host(HEALTHY)}), generated_at="t1"), None)
    assert first["health_history"] == [{"generated_at": "t1", "gpus": {"n1 GPU 0 (GPU-0)": "pass"}}]
    same = R.with_health_history(dict(R.fleet_model({"n1": health_host(HEALTHY)}), generated_at="t2"), first)
    assert same["health_history"] == first["health_history"]
    worse = R.with_health_history(dict(R.fleet_model({"n1": health_host(sick(pcie={"width": 8}))}), generated_at="t3"),
                                  same)
    assert [r["generated_at"] for r in worse["health_history"]] == ["t1", "t3"]
    assert worse["health_history"][-1]["gpus"] == {"n1 GPU 0 (GPU-0)": "fail"}
    page = R.render_html(worse)
    assert "GPU health over runs" in page
    cells = re.findall(r'<td class="(ok|bad)" title="(t\d): (pass|fail)"></td>', page)
    assert cells == [("ok", "t1", "pass"), ("bad", "t3", "fail")]
    many = {"health_history": [{"generated_at": str(i), "gpus": {"g": "pass" if i % 2 else "fail"}}
                               for i in range(R.HISTORY_RUNS)]}
    capped = R.with_health_history(dict(R.fleet_model({"n1": health_host(HEALTHY)}), generated_at="new"), many)
    assert len(capped["health_history"]) == R.HISTORY_RUNS and capped["health_history"][-1]["generated_at"] == "new"


def test_preflight_cdi_files_turns_the_slurp_loop_into_node_paths():
    import base64  # pylint: disable=import-outside-toplevel
    from ansible_collections.gpuops.provision.plugins.plugin_utils._role_filters import preflight  # pylint: disable=import-outside-toplevel
    read = {"results": [
        {"item": {"path": "/lab/n1/etc/cdi/nvidia.yaml"}, "content": base64.b64encode(b"kind: nvidia.com/gpu").decode()},
        {"item": {"path": "/lab/n1/var/run/cdi/x.json"}, "failed": True, "msg": "Permission denied"},
    ]}
    assert preflight.preflight_cdi_files(read, "/lab/n1/") == [
        {"path": "/etc/cdi/nvidia.yaml", "text": "kind: nvidia.com/gpu"},
        {"path": "/var/run/cdi/x.json", "error": "Permission denied"}]
    assert preflight.preflight_cdi_files({}, "/") == [] and preflight.preflight_cdi_files({"skipped": True}) == []
    # The role passes the loop's results alone (a whole empty-loop result carries the deprecated skipped_reason).
    assert preflight.preflight_cdi_files(read["results"], "/lab/n1/") == preflight.preflight_cdi_files(read, "/lab/n1/")
    assert preflight.preflight_cdi_files([], "/") == []
