# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU health checks (plugins/module_utils/_health.py): each reading on both sides of its threshold, the
evidence naming the GPU, NVML errors that are not a pass, and the options."""

from __future__ import annotations

import copy
import json

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils import _health as H, _xid

from health_readings import healthy  # pylint: disable=import-error  # tests/helpers

HEALTHY = healthy("h100")


def gpu(index=0, mig="disabled", instances=None, **health):
    h = copy.deepcopy(HEALTHY)
    for key, value in health.items():
        h[key] = dict(h[key], **value) if isinstance(value, dict) else value
    return {"index": index, "model": "NVIDIA H100 80GB HBM3", "uuid": "GPU-%d" % index,
            "pci_address": "0000:%02x:00.0" % (0x17 + 0x1a * index), "mig_mode": {"current": mig, "pending": mig},
            "instances": instances, "health": h}


def facts(*gpus, log=None):
    return {"gpu": {"nvml": {"available": True}, "gpus": list(gpus),
                    "kernel_log": log if log is not None else {"read": True, "error": None, "xid_events": []}}}


def run(check_id, fx, **options):
    return H.CHECKS[check_id][1](fx, H.normalize_options(options))


def test_every_check_fails_naming_the_reason_when_nvml_is_not_there():
    for check_id in (c for c in H.CHECKS if c != "gpu_dcgm"):  # DCGM's diagnostic does not read NVML's facts
        res = run(check_id, {"gpu": {"nvml": {"available": False, "reason": "the NVIDIA kernel driver is not loaded"}}})
        assert res["status"] == "fail" and res["id"] == check_id and res["title"] == H.TITLES[check_id]
        assert res["evidence"] == "NVML is not available: the NVIDIA kernel driver is not loaded"
        assert run(check_id, {})["evidence"] == "GPU facts (gpu_info) were not gathered"
        assert run(check_id, {"gpu": {"failed": True, "msg": "boom"}})["evidence"] == \
            "reading GPU facts (gpu_info) failed: boom"


def test_a_gpu_nvml_could_not_read_fails_every_per_gpu_check():
    lost = {"index": 1, "model": "NVIDIA H100 80GB HBM3", "pci_address": "0000:31:00.0",
            "error": "GPU is lost (NVML_ERROR_GPU_IS_LOST)"}
    for check_id in ("gpu_ecc", "gpu_memory", "gpu_pcie", "gpu_thermal", "gpu_persistence", "gpu_count"):
        res = run(check_id, facts(gpu(0), lost))
        assert res["status"] == "fail", check_id
        assert "GPU 1" in res["evidence"] and "NVML_ERROR_GPU_IS_LOST" in res["evidence"], res["evidence"]
        assert [g["status"] for g in res["gpus"]] == ["pass", "fail"]
    # Readings switched off: not a pass either.
    no_health = dict(gpu(0), health=None)
    assert run("gpu_ecc", facts(no_health))["evidence"].endswith("no health readings (gpu_info ran with health=false)")


# --- gpu_count ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("expected, count, status, words", [
    (None, 2, "pass", "NVML enumerates 2 GPU(s)"),
    (2, 2, "pass", "NVML enumerates 2 GPU(s)"),
    (3, 2, "fail", "NVML enumerates 2 GPU(s), the inventory expects 3: 1 missing"),
    (1, 2, "warn", "NVML enumerates 2 GPU(s), more than the 1 the inventory expects"),
    (None, 0, "fail", "NVML enumerates no GPU"),
])
def test_gpu_count(expected, count, status, words):
    res = run("gpu_count", facts(*[gpu(i) for i in range(count)]), expected_gpus=expected)
    assert res["status"] == status and res["evidence"].startswith(words), res
    assert bool(res["remedy"]) == (status != "pass")


# --- gpu_ecc --------------------------------------------------------------------------------------------------------

def test_ecc_volatile_uncorrected_on_both_sides_of_the_threshold():
    ok = run("gpu_ecc", facts(gpu(0)))
    assert ok["status"] == "pass" and ok["evidence"] == "no uncorrectable ECC errors above the thresholds on 1 GPU(s)"
    assert ok["gpus"][0]["evidence"] == "uncorrectable ECC errors: 0 since the last reset, 0 in its life"
    storm = run("gpu_ecc", facts(gpu(0), gpu(1, ecc={"volatile_uncorrected": 12, "aggregate_uncorrected": 12})))
    assert storm["status"] == "fail"
    assert storm["evidence"] == ("GPU 1 (NVIDIA H100 80GB HBM3, 0000:31:00.0): uncorrectable ECC errors: 12 since the "
                                 "last reset, 12 in its life (more than 0 since the last reset)")
    assert "reset the GPU" in storm["remedy"]
    assert run("gpu_ecc", facts(gpu(0, ecc={"volatile_uncorrected": 2})), ecc_volatile_max=2)["status"] == "pass"
    assert run("gpu_ecc", facts(gpu(0, ecc={"volatile_uncorrected": 3})), ecc_volatile_max=2)["status"] == "fail"


def test_ecc_aggregate_is_judged_only_with_a_threshold():
    old = gpu(0, ecc={"aggregate_uncorrected": 4})
    assert run("gpu_ecc", facts(old))["status"] == "pass"
    assert run("gpu_ecc", facts(old), ecc_aggregate_max=4)["status"] == "pass"
    res = run("gpu_ecc", facts(old), ecc_aggregate_max=3)
    assert res["status"] == "fail" and res["evidence"].endswith("(more than 3 in its life)")


def test_ecc_disabled_unsupported_and_unreadable():
    off = run("gpu_ecc", facts(gpu(0, ecc={"enabled": False, "pending": True})))
    assert off["status"] == "warn" and off["evidence"].endswith("ECC is disabled (enabled after the next reboot)")
    assert "nvidia-smi -e 1" in off["remedy"]
    none = run("gpu_ecc", facts(gpu(0, ecc={"error": "NVML_ERROR_NOT_SUPPORTED", "enabled": None})))
    assert none["status"] == "pass" and none["gpus"][0]["evidence"] == "no ECC on this GPU (NVML_ERROR_NOT_SUPPORTED)"
    # Volatile counters NVML does not give (a MIG GPU on some drivers): unknown, so a warning, not a pass.
    mig = run("gpu_ecc", facts(gpu(0, ecc={"volatile_uncorrected": None,
                                           "volatile_uncorrected_error": "NVML_ERROR_NOT_SUPPORTED"})))
    assert mig["status"] == "warn" and "unreadable (NVML_ERROR_NOT_SUPPORTED) since the last reset" in mig["evidence"]
    bad = run("gpu_ecc", facts(gpu(0, ecc={"error": "NVML_ERROR_UNKNOWN"})))
    assert bad["status"] == "warn" and bad["evidence"].endswith("ECC state unreadable: NVML_ERROR_UNKNOWN")


# --- gpu_memory -----------------------------------------------------------------------------------------------------

def test_row_remapping_failure_pending_and_counts():
    assert run("gpu_memory", facts(gpu(0, remapped_rows={"uncorrectable": 2})))["status"] == "pass"
    failed = run("gpu_memory", facts(gpu(0, remapped_rows={"failure": True, "uncorrectable": 2})))
    assert failed["status"] == "fail" and "row remapping FAILED (2 rows remapped for uncorrectable" in failed["evidence"]
    assert "RMA" in failed["remedy"]
    pending = run("gpu_memory", facts(gpu(0, remapped_rows={"pending": True, "uncorrectable": 1})))
    assert pending["status"] == "fail" and "a row remap is pending" in pending["evidence"]
    assert "next GPU reset" in pending["evidence"]


def test_row_remapping_unreadable_on_a_mig_gpu_is_reported_not_passed():
    rows = {"error": "NVML_ERROR_NOT_SUPPORTED"}
    res = run("gpu_memory", facts(gpu(0, mig="enabled", instances=[{}, {}], remapped_rows=rows)))
    assert res["status"] == "warn"
    assert res["evidence"].endswith("row remapping cannot be read while MIG is enabled (2 GPU instance(s), "
                                    "NVML_ERROR_NOT_SUPPORTED): pending or failed remaps are unknown")
    assert "before MIG instances are created" in res["remedy"]


def test_page_retirement_on_gpus_without_row_remapping():
    old = {"remapped_rows": {"error": "NVML_ERROR_NOT_SUPPORTED"}}
    pending = run("gpu_memory", facts(gpu(0, retired_pages={"pending": True, "error": None}, **old)))
    assert pending["status"] == "fail" and "retired pages are pending" in pending["evidence"]
    clean = run("gpu_memory", facts(gpu(0, retired_pages={"pending": False, "error": None}, **old)))
    assert clean["status"] == "pass"
    assert clean["gpus"][0]["evidence"] == "no retired pages pending (row remapping: NVML_ERROR_NOT_SUPPORTED)"
    neither = run("gpu_memory", facts(gpu(0, **old)))
    assert neither["status"] == "pass" and "neither row remapping nor page retirement" in neither["gpus"][0]["evidence"]
    odd = run("gpu_memory", facts(gpu(0, remapped_rows={"error": "NVML_ERROR_UNKNOWN"})))
    assert odd["status"] == "warn" and "row remapping NVML_ERROR_UNKNOWN" in odd["evidence"]


# --- gpu_pcie -------------------------------------------------------------------------------------------------------

def test_pcie_width_below_its_maximum_fails():
    res = run("gpu_pcie", facts(gpu(0), gpu(1, pcie={"width": 8})))
    assert res["status"] == "fail"
    assert res["evidence"] == ("GPU 1 (NVIDIA H100 80GB HBM3, 0000:31:00.0): PCIe link trained at x8, below its "
                               "x16: Gen5 x8 (max Gen5 x16)")
    assert [g["status"] for g in res["gpus"]] == ["pass", "fail"]


def test_pcie_generation_below_maximum_fails_only_when_busy():
    idle = {"active": ["GpuIdle"], "mask": 1}
    res = run("gpu_pcie", facts(gpu(0, pcie={"gen": 1}, clock_event_reasons=idle)))
    assert res["status"] == "pass" and "lower generation while idle" in res["gpus"][0]["evidence"]
    busy = run("gpu_pcie", facts(gpu(0, pcie={"gen": 4})))
    assert busy["status"] == "fail" and "PCIe link at Gen4 while busy, below its Gen5" in busy["evidence"]


def test_pcie_slot_below_the_gpu_and_unreadable():
    slot = run("gpu_pcie", facts(gpu(0, pcie={"gen": 4, "max_gen": 4, "gpu_max_gen": 5})))
    assert slot["status"] == "warn" and "the slot limits the link to Gen4, the GPU does Gen5" in slot["evidence"]
    gone = run("gpu_pcie", facts(gpu(0, pcie={"gen": None, "errors": {"gen": "NVML_ERROR_NOT_SUPPORTED"}})))
    assert gone["status"] == "warn" and "PCIe link unreadable" in gone["evidence"]


# --- gpu_thermal ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("current, reasons, status, words", [
    (40, [], "pass", "40 C (slowdown at 89 C); clock event reasons: none"),
    (83, [], "pass", "83 C"),
    (84, [], "warn", "within 5 C of the slowdown temperature"),
    (88, [], "warn", "within 5 C"),
    (89, [], "fail", "at or above the slowdown temperature"),
    (60, ["SwThermalSlowdown"], "warn", "the driver slows the clocks for temperature"),
    (60, ["HwSlowdown", "SwPowerCap"], "fail", "hardware slowdown active (HwSlowdown)"),
    (60, ["HwPowerBrakeSlowdown"], "fail", "hardware slowdown active (HwPowerBrakeSlowdown)"),
    (60, ["SwPowerCap"], "pass", "clock event reasons: SwPowerCap"),
    (None, [], "warn", "temperature unreadable"),
])
def test_thermal(current, reasons, status, words):
    res = run("gpu_thermal", facts(gpu(0, temperature={"current": current},
                                       clock_event_reasons={"active": reasons})))
    assert res["status"] == status and words in res["gpus"][0]["evidence"], res["gpus"][0]


def test_thermal_margin_is_an_option():
    hot = facts(gpu(0, temperature={"current": 84}))
    assert run("gpu_thermal", hot, temperature_margin=4)["status"] == "pass"
    assert run("gpu_thermal", hot, temperature_margin=5)["status"] == "warn"


# --- gpu_persistence ------------------------------------------------------------------------------------------------

def test_persistence():
    off = facts(gpu(0, persistence_mode={"enabled": False}))
    assert run("gpu_persistence", off)["status"] == "warn"
    res = run("gpu_persistence", off, persistence_required=True)
    assert res["status"] == "fail" and "nvidia-persistenced" in res["remedy"]
    assert run("gpu_persistence", facts(gpu(0)))["status"] == "pass"
    windows = facts(gpu(0, persistence_mode={"enabled": None, "error": "NVML_ERROR_NOT_SUPPORTED"}))
    assert run("gpu_persistence", windows)["status"] == "pass"


# --- gpu_xid --------------------------------------------------------------------------------------------------------

def xid_log(*lines):
    return {"read": True, "error": None, "xid_events": _xid.parse("\n".join(lines))}


def test_xid_that_takes_the_node_out_fails_naming_the_gpu():
    log = xid_log("[  812.113312] NVRM: Xid (PCI:0000:31:00): 79, pid=1234, name=python, GPU has fallen off the bus.")
    res = run("gpu_xid", facts(gpu(0), gpu(1), log=log))
    assert res["status"] == "fail"
    assert res["evidence"].startswith("GPU 1 (NVIDIA H100 80GB HBM3, 0000:31:00.0): 1 Xid event(s) since boot: 79 (")
    assert [g["status"] for g in res["gpus"]] == ["pass", "fail"]
    assert "drain the node" in res["remedy"]


def test_application_xids_pass_with_their_evidence():
    log = xid_log("[  10.0] NVRM: Xid (PCI:0000:17:00): 13, pid=99, name=train, Graphics Exception: ESR 0x404490",
                  "[  11.0] NVRM: Xid (PCI:0000:17:00): 43, pid=99, name=train, Ch 00000010")
    res = run("gpu_xid", facts(gpu(0), log=log))
    assert res["status"] == "pass" and res["evidence"].startswith("only application Xids since boot")
    assert "13 (" in res["evidence"] and "43 (" in res["evidence"]


def test_xid_of_a_gpu_nvml_no_longer_enumerates_and_an_unread_log():
    log = xid_log("NVRM: Xid (PCI:0000:b3:00): 79, GPU has fallen off the bus.")
    res = run("gpu_xid", facts(gpu(0), log=log))
    assert res["status"] == "fail" and res["evidence"] == "PCI 0000:b3:00 (not enumerated by NVML): Xid 79"
    unread = run("gpu_xid", facts(gpu(0), log={"read": False, "error": "dmesg exited 1: Operation not permitted"}))
    assert unread["status"] == "warn"
    assert unread["evidence"] == ("the kernel log was not read (dmesg exited 1: Operation not permitted): Xid events "
                                  "unknown")
    assert run("gpu_xid", facts(gpu(0)))["evidence"] == "no Xid since boot on 1 GPU(s)"


# --- options --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("options, words", [
    ({"expected_gpus": "two"}, "expected_gpus must be a number, not 'two'"),
    ({"ecc_volatile_max": -1}, "ecc_volatile_max must be 0 or more, not -1"),
    ({"temperature_margin": True}, "temperature_margin must be a number, not True"),
    ({"persistence_required": "yes"}, "persistence_required must be true or false, not 'yes'"),
])
def test_bad_options_name_the_option(options, words):
    with pytest.raises(H.HealthError, match="^%s$" % words.replace("(", r"\(").replace(")", r"\)")):
        H.normalize_options(options)


def test_options_default_and_convert():
    assert H.normalize_options({}) == H.DEFAULT_OPTIONS
    assert H.normalize_options({"expected_gpus": "8", "other": 1})["expected_gpus"] == 8


# --- the health roll's fleet decision -------------------------------------------------------------------------------

KEY = "gpuops.io/gpu-health"


def report(node, failed=(), verdict=None):
    return {"node": node, "verdict": verdict or ("fail" if failed else "pass"), "failed_checks": list(failed)}


def k8s(name, taint=None):
    return {"metadata": {"name": name},
            "spec": {"taints": [{"key": KEY, "value": taint, "effect": "NoSchedule"}] if taint else []}}


def test_roll_plan_taints_the_sick_untaints_the_recovered_and_leaves_the_unknown():
    reports = [report("a", ["gpu_ecc", "gpu_xid"]), report("b"), report("c"), report("d", ["facts"]),
               report("e", ["gpu_pcie"])]
    nodes = [k8s("a"), k8s("b", "gpu_ecc"), k8s("c"), k8s("d", "gpu_xid"), k8s("e", "gpu_pcie")]
    plan = H.roll_plan(reports, nodes, KEY, max_unhealthy=2)
    assert not plan["stopped"] and plan["message"] == ""
    assert plan["taint"] == [{"host": "a", "node": "a", "value": "gpu_ecc"}]
    assert plan["untaint"] == [{"host": "b", "node": "b"}]
    assert plan["unhealthy"] == ["a", "e"] and plan["unknown"] == ["d"]
    assert plan["summary"] == "a: gpu_ecc, gpu_xid; e: gpu_pcie"
    assert {h: r["action"] for h, r in plan["nodes"].items()} == {"a": "taint", "b": "untaint", "c": "none",
                                                                  "d": "unknown", "e": "keep"}
    # Another check fails now on a tainted node: the value follows it.
    changed = H.roll_plan([report("e", ["gpu_thermal"])], [k8s("e", "gpu_pcie")], KEY, max_unhealthy=1)
    assert changed["taint"] == [{"host": "e", "node": "e", "value": "gpu_thermal"}]


def test_roll_plan_stops_when_more_fail_than_the_fleet_may_lose():
    reports = [report(n, ["gpu_ecc"] if n in "abc" else []) for n in "abcdefgh"]
    nodes = [k8s(n, "gpu_xid" if n == "h" else None) for n in "abcdefgh"]
    plan = H.roll_plan(reports, nodes, KEY, max_unhealthy="25%")  # 25% of 8 = 2
    assert plan["stopped"] and plan["max_unhealthy"] == 2
    assert plan["taint"] == [] and plan["untaint"] == []
    assert plan["message"].startswith("3 of 8 nodes fail their GPU health checks (a, b, c), more than the 2 "
                                      "(max_unhealthy 25%) one run may take out of service")
    assert plan["nodes"]["a"]["action"] == "held" and plan["nodes"]["h"]["action"] == "held"
    # At the limit the run goes on.
    ok = H.roll_plan(reports[:2] + reports[3:], nodes, KEY, max_unhealthy="25%")  # 2 of 7, 25% of 7 = 2
    assert not ok["stopped"] and [t["host"] for t in ok["taint"]] == ["a", "b"]


def test_roll_plan_names_nodes_kubernetes_does_not_know_and_bad_budgets():
    plan = H.roll_plan([report("gpu-a", ["gpu_ecc"])], [], KEY, max_unhealthy=1, node_names={"gpu-a": "node-a"})
    assert plan["not_in_kubernetes"] == ["gpu-a"] and plan["taint"] == []
    assert plan["nodes"]["gpu-a"]["k8s_node"] == "node-a"
    with pytest.raises(H.HealthError, match="max_unhealthy must be a count or a percentage such as 25%, got 'lots'"):
        H.roll_plan([], [], KEY, max_unhealthy="lots")


# --- gpu_dcgm -------------------------------------------------------------------------------------------------------

def dcgm_run(status="Pass", warning=None, rc=0):
    """dcgmi diag -r 2 -j of DCGM 4.x (dcgmi/Diag.cpp HelperJsonBuildOutput), one GPU, the memory test."""
    result = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": status}
    if warning:
        result["warnings"] = [{"warning": warning, "error_id": 57, "error_category": 1, "error_severity": 2}]
    doc = {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
        {"name": "memory", "results": [result], "test_summary": {"status": status}}]}]},
        "metadata": {"version": "4.6.0"}}
    return {"stdout": json.dumps(doc), "stderr": "", "rc": rc}


def test_dcgm_is_skipped_unless_asked_for_and_fails_when_not_run():
    assert run("gpu_dcgm", {"dcgm": dcgm_run()})["status"] == "skip"
    missing = run("gpu_dcgm", {}, dcgm_diag_level=1)
    assert missing["status"] == "fail" and missing["evidence"] == "dcgmi diag was not run"


def test_dcgm_verdicts_follow_the_diagnostic():
    assert run("gpu_dcgm", {"dcgm": dcgm_run()}, dcgm_diag_level=2)["status"] == "pass"
    res = run("gpu_dcgm", {"dcgm": dcgm_run("Fail", "a double-bit ECC error has occured on GPU 0", rc=205)},
              dcgm_diag_level=2)
    assert res["status"] == "fail" and "GPU 0" in res["evidence"] and "double-bit ECC" in res["evidence"]
    assert res["remedy"]
    mig = run("gpu_dcgm", {"dcgm": {"stdout": "", "rc": 226, "stderr": (
        "Error: GPU 0's MIG configuration is incompatible with the diagnostic because it prevents access to the "
        "entire GPU.")}}, dcgm_diag_level=1)
    assert mig["status"] == "warn" and "MIG" in mig["evidence"]


def test_dcgm_level_is_checked():
    with pytest.raises(H.HealthError, match="^dcgm_diag_level must be 0 \\(not run\\) or a dcgmi diag level 1 to 4, "
                                            "not 5$"):
        H.normalize_options({"dcgm_diag_level": 5})
