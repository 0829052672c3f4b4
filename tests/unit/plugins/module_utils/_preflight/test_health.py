# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPU health checks (plugins/module_utils/_preflight/health.py): each reading on both sides of its threshold, the
evidence naming the GPU, NVML errors that are not a pass, and the options."""

from __future__ import annotations

import copy
import json

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._gpu import xid
from ansible_collections.gpuops.provision.plugins.module_utils._preflight import health as H

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
    return {"read": True, "error": None, "xid_events": xid.parse("\n".join(lines))}


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


# --- whole results: every field a report or the fleet roll reads ---------------------------------------------------

NO_NVML_REMEDY = "make NVML usable on the node (driver loaded, nvidia-ml-py installed) and rerun"


def rec(g, status, evidence):
    """The per-GPU verdict a check writes for the GPU ``g`` of its facts."""
    return {"index": g.get("index"), "uuid": g.get("uuid"), "pci_address": g.get("pci_address"), "status": status,
            "evidence": evidence}


def whole(check_id, status, evidence, remedy="", gpus=()):
    return {"id": check_id, "title": H.TITLES[check_id], "status": status, "evidence": evidence, "remedy": remedy,
            "gpus": list(gpus)}


@pytest.mark.parametrize("gpu_facts, evidence", [
    ({"nvml": {"available": False, "reason": "the NVIDIA kernel driver is not loaded"}},
     "NVML is not available: the NVIDIA kernel driver is not loaded"),
    ({"nvml": {"available": False}}, "NVML is not available: unknown reason"),
    ({"nvml": None}, "NVML is not available: unknown reason"),
    ({"failed": True}, "reading GPU facts (gpu_info) failed: unknown error"),
    ({"failed": True, "msg": "boom"}, "reading GPU facts (gpu_info) failed: boom"),
    (None, "GPU facts (gpu_info) were not gathered"),
])
def test_without_nvml_every_check_fails_whole(gpu_facts, evidence):
    for check_id in (c for c in H.CHECKS if c != "gpu_dcgm"):
        assert run(check_id, {"gpu": gpu_facts}) == whole(check_id, "fail", evidence, NO_NVML_REMEDY)


def test_a_gpu_without_model_or_address_is_still_named():
    lost = {"index": 2, "error": "GPU is lost (NVML_ERROR_GPU_IS_LOST)"}
    res = run("gpu_ecc", facts(lost))
    assert res == whole("gpu_ecc", "fail", "GPU 2 (?, ?): NVML cannot read it: GPU is lost (NVML_ERROR_GPU_IS_LOST)",
                        H.RESET_REMEDY, [rec(lost, "fail", "NVML cannot read it: GPU is lost (NVML_ERROR_GPU_IS_LOST)")])


def test_a_node_without_gpus_has_nothing_to_judge():
    for check_id in ("gpu_ecc", "gpu_memory", "gpu_pcie", "gpu_thermal", "gpu_persistence"):
        assert run(check_id, facts()) == whole(check_id, "pass", "no GPU to check"), check_id


def test_gpu_count_whole_results():
    g0, g1 = gpu(0), gpu(1)
    lost = {"index": 2, "model": "NVIDIA H100 80GB HBM3", "uuid": "GPU-2", "pci_address": "0000:4b:00.0",
            "error": "GPU is lost (NVML_ERROR_GPU_IS_LOST)"}
    present = [rec(g0, "pass", "present"), rec(g1, "pass", "present")]
    assert run("gpu_count", facts(g0, g1)) == whole("gpu_count", "pass", "NVML enumerates 2 GPU(s)", gpus=present)
    missing_remedy = ("check lspci for the missing or lost GPUs and the kernel log for Xid 79; reboot the node (drain it "
                      "first); reseat or replace a GPU that stays missing")
    assert run("gpu_count", facts(g0, g1), expected_gpus=3) == whole(
        "gpu_count", "fail", "NVML enumerates 2 GPU(s), the inventory expects 3: 1 missing (a GPU that fell off the PCI "
        "bus or did not come back after a reboot is not enumerated)", missing_remedy, present)
    assert run("gpu_count", facts(g0, g1), expected_gpus=1) == whole(
        "gpu_count", "warn", "NVML enumerates 2 GPU(s), more than the 1 the inventory expects",
        "set the node's expected GPU count (node_preflight_expected_gpus)", present)
    # a lost GPU is named with its error, after the count problem
    assert run("gpu_count", facts(g0, lost), expected_gpus=3) == whole(
        "gpu_count", "fail", "NVML enumerates 2 GPU(s), the inventory expects 3: 1 missing (a GPU that fell off the PCI "
        "bus or did not come back after a reboot is not enumerated); GPU 2: GPU is lost (NVML_ERROR_GPU_IS_LOST)",
        missing_remedy, [rec(g0, "pass", "present"), rec(lost, "fail", "GPU is lost (NVML_ERROR_GPU_IS_LOST)")])


def test_ecc_whole_results():
    storm = gpu(1, ecc={"volatile_uncorrected": 12, "aggregate_uncorrected": 12})
    text = "uncorrectable ECC errors: 12 since the last reset, 12 in its life (more than 0 since the last reset)"
    assert run("gpu_ecc", facts(storm)) == whole("gpu_ecc", "fail", "GPU 1 (NVIDIA H100 80GB HBM3, 0000:31:00.0): " + text,
                                                 H.RESET_REMEDY, [rec(storm, "fail", text)])
    off = gpu(0, ecc={"enabled": False, "pending": False})
    assert run("gpu_ecc", facts(off)) == whole(
        "gpu_ecc", "warn", "GPU 0 (NVIDIA H100 80GB HBM3, 0000:17:00.0): ECC is disabled",
        "enable ECC (nvidia-smi -e 1, then reboot) on datacenter GPUs; see the evidence", [rec(off, "warn", "ECC is disabled")])
    none = gpu(0, ecc={"error": "NVML_ERROR_NOT_SUPPORTED", "enabled": None})
    assert run("gpu_ecc", facts(none)) == whole(
        "gpu_ecc", "pass", "no uncorrectable ECC errors above the thresholds on 1 GPU(s)",
        gpus=[rec(none, "pass", "no ECC on this GPU (NVML_ERROR_NOT_SUPPORTED)")])


def test_ecc_lifetime_counter_unreadable_is_said_and_not_judged():
    g = gpu(0, ecc={"aggregate_uncorrected": None, "aggregate_uncorrected_error": "NVML_ERROR_NOT_SUPPORTED"})
    res = run("gpu_ecc", facts(g), ecc_aggregate_max=0)
    assert res["status"] == "pass"
    assert res["gpus"] == [rec(g, "pass", "uncorrectable ECC errors: 0 since the last reset, unreadable "
                                          "(NVML_ERROR_NOT_SUPPORTED) in its life")]


def test_memory_whole_results():
    counts = "2 rows remapped for uncorrectable and 3 for correctable errors"
    ok = gpu(0, remapped_rows={"uncorrectable": 2, "correctable": 3})
    assert run("gpu_memory", facts(ok)) == whole("gpu_memory", "pass", "no failed or pending memory repairs on 1 GPU(s)",
                                                 gpus=[rec(ok, "pass", counts)])
    # counts NVML left out read as 0
    bare = gpu(0, remapped_rows={"uncorrectable": 0, "correctable": 0})
    del bare["health"]["remapped_rows"]["uncorrectable"], bare["health"]["remapped_rows"]["correctable"]
    assert run("gpu_memory", facts(bare))["gpus"][0]["evidence"] == \
        "0 rows remapped for uncorrectable and 0 for correctable errors"
    failed = gpu(0, remapped_rows={"failure": True, "uncorrectable": 2, "correctable": 3})
    text = "row remapping FAILED (%s): the GPU cannot repair its memory any more" % counts
    assert run("gpu_memory", facts(failed)) == whole(
        "gpu_memory", "fail", "GPU 0 (NVIDIA H100 80GB HBM3, 0000:17:00.0): " + text,
        H.RESET_REMEDY + "; a failed row remap needs an RMA", [rec(failed, "fail", text)])
    pending = gpu(0, remapped_rows={"pending": True, "uncorrectable": 2, "correctable": 3})
    assert run("gpu_memory", facts(pending))["gpus"] == [
        rec(pending, "fail", "a row remap is pending (%s): it takes effect at the next GPU reset" % counts)]


def test_memory_mig_gpu_without_an_instance_list_and_the_warn_remedy():
    g = gpu(0, mig="enabled", instances=None, remapped_rows={"error": "NVML_ERROR_NOT_SUPPORTED"})
    text = ("row remapping cannot be read while MIG is enabled (MIG enabled, NVML_ERROR_NOT_SUPPORTED): pending or "
            "failed remaps are unknown")
    assert run("gpu_memory", facts(g)) == whole(
        "gpu_memory", "warn", "GPU 0 (NVIDIA H100 80GB HBM3, 0000:17:00.0): " + text,
        "read the state before MIG instances are created (or with MIG disabled)", [rec(g, "warn", text)])


def test_memory_page_retirement_whole_per_gpu_verdicts():
    old = {"remapped_rows": {"error": "NVML_ERROR_NOT_SUPPORTED"}}
    pending = gpu(0, retired_pages={"pending": True, "error": None}, **old)
    assert run("gpu_memory", facts(pending))["gpus"] == [
        rec(pending, "fail", "retired pages are pending: they take effect at the next GPU reset or reboot")]
    clean = gpu(0, retired_pages={"pending": False, "error": None}, **old)
    assert run("gpu_memory", facts(clean))["gpus"] == [
        rec(clean, "pass", "no retired pages pending (row remapping: NVML_ERROR_NOT_SUPPORTED)")]
    neither = gpu(0, **old)
    assert run("gpu_memory", facts(neither))["gpus"] == [
        rec(neither, "pass", "neither row remapping nor page retirement is supported on this GPU")]
    odd = gpu(0, remapped_rows={"error": "NVML_ERROR_UNKNOWN"})
    assert run("gpu_memory", facts(odd))["gpus"] == [
        rec(odd, "warn", "memory repair state unreadable: row remapping NVML_ERROR_UNKNOWN, page retirement "
                         "NVML_ERROR_NOT_SUPPORTED")]


PCIE_FAIL_REMEDY = ("reseat the GPU or its riser, check the slot's BIOS link settings; replace the GPU or the riser if it "
                    "stays degraded")
PCIE_WARN_REMEDY = "move the GPU to a slot of its generation, or accept the lower bandwidth"


def test_pcie_whole_results():
    full = gpu(0)
    assert run("gpu_pcie", facts(full)) == whole("gpu_pcie", "pass", "PCIe links at full width on 1 GPU(s)",
                                                 gpus=[rec(full, "pass", "Gen5 x16 (max Gen5 x16)")])
    busy = gpu(0, pcie={"gen": 4})
    text = "PCIe link at Gen4 while busy, below its Gen5: Gen4 x16 (max Gen5 x16)"
    assert run("gpu_pcie", facts(busy)) == whole("gpu_pcie", "fail", "GPU 0 (NVIDIA H100 80GB HBM3, 0000:17:00.0): " + text,
                                                 PCIE_FAIL_REMEDY, [rec(busy, "fail", text)])
    slot = gpu(0, pcie={"gen": 4, "max_gen": 4, "gpu_max_gen": 5})
    text = "the slot limits the link to Gen4, the GPU does Gen5: Gen4 x16 (max Gen4 x16)"
    assert run("gpu_pcie", facts(slot)) == whole("gpu_pcie", "warn", "GPU 0 (NVIDIA H100 80GB HBM3, 0000:17:00.0): " + text,
                                                 PCIE_WARN_REMEDY, [rec(slot, "warn", text)])
    idle = gpu(0, pcie={"gen": 1}, clock_event_reasons={"active": ["GpuIdle"]})
    assert run("gpu_pcie", facts(idle))["gpus"] == [
        rec(idle, "pass", "Gen1 x16 (max Gen5 x16), lower generation while idle (power saving)")]


def test_pcie_unreadable_says_what_nvml_answered():
    nothing = gpu(0, pcie={"gen": None})
    assert run("gpu_pcie", facts(nothing))["gpus"] == [rec(nothing, "warn", "PCIe link unreadable: no reading")]
    errors = gpu(0, pcie={"width": None, "errors": {"width": "NVML_ERROR_NOT_SUPPORTED"}})
    res = run("gpu_pcie", facts(errors))
    assert res["status"] == "warn" and res["remedy"] == PCIE_WARN_REMEDY
    assert res["gpus"][0]["evidence"].startswith("PCIe link unreadable: ")
    assert "NVML_ERROR_NOT_SUPPORTED" in res["gpus"][0]["evidence"]


THERMAL_REMEDY = ("check the node's cooling (fans, airflow, inlet temperature) and power supplies; an idle GPU that is "
                  "hot has a cooling fault")


@pytest.mark.parametrize("temperature, reasons, status, evidence", [
    ({"current": 40}, [], "pass", "40 C (slowdown at 89 C); clock event reasons: none"),
    ({"current": 60}, ["HwSlowdown", "SwPowerCap", "HwThermalSlowdown"], "fail",
     "hardware slowdown active (HwSlowdown, HwThermalSlowdown): 60 C (slowdown at 89 C); clock event reasons: "
     "HwSlowdown, SwPowerCap, HwThermalSlowdown"),
    ({"current": 89}, [], "fail", "at or above the slowdown temperature: 89 C (slowdown at 89 C); clock event reasons: none"),
    ({"current": 60}, ["SwThermalSlowdown"], "warn",
     "the driver slows the clocks for temperature: 60 C (slowdown at 89 C); clock event reasons: SwThermalSlowdown"),
    ({"current": 84}, [], "warn", "within 5 C of the slowdown temperature: 84 C (slowdown at 89 C); clock event reasons: none"),
    ({"current": None}, [], "warn", "temperature unreadable: ? C (slowdown at 89 C); clock event reasons: none"),
    ({"current": None, "slowdown": None}, [], "warn",
     "temperature unreadable: ? C (slowdown at ? C); clock event reasons: none"),
    # without a slowdown threshold the current temperature alone is no verdict
    ({"current": 95, "slowdown": None}, [], "pass", "95 C (slowdown at ? C); clock event reasons: none"),
])
def test_thermal_whole_results(temperature, reasons, status, evidence):
    g = gpu(0, temperature=temperature, clock_event_reasons={"active": reasons})
    label = "GPU 0 (NVIDIA H100 80GB HBM3, 0000:17:00.0): "
    expected = whole("gpu_thermal", status, label + evidence if status != "pass" else
                     "no GPU near its slowdown temperature or slowed by hardware (1 GPU(s))",
                     THERMAL_REMEDY if status != "pass" else "", [rec(g, status, evidence)])
    assert run("gpu_thermal", facts(g)) == expected


def test_persistence_whole_results():
    remedy = "enable the nvidia-persistenced service (systemctl enable --now nvidia-persistenced)"
    on = gpu(0)
    assert run("gpu_persistence", facts(on)) == whole("gpu_persistence", "pass", "persistence mode on for 1 GPU(s)",
                                                      gpus=[rec(on, "pass", "persistence mode on")])
    off = gpu(0, persistence_mode={"enabled": False})
    label = "GPU 0 (NVIDIA H100 80GB HBM3, 0000:17:00.0): "
    assert run("gpu_persistence", facts(off)) == whole("gpu_persistence", "warn", label + "persistence mode off", remedy,
                                                       [rec(off, "warn", "persistence mode off")])
    assert run("gpu_persistence", facts(off), persistence_required=True) == whole(
        "gpu_persistence", "fail", label + "persistence mode off", remedy, [rec(off, "fail", "persistence mode off")])
    na = gpu(0, persistence_mode={"enabled": None, "error": "NVML_ERROR_NOT_SUPPORTED"})
    assert run("gpu_persistence", facts(na))["gpus"] == [
        rec(na, "pass", "persistence mode not applicable (NVML_ERROR_NOT_SUPPORTED)")]


XID_FAIL_REMEDY = ("drain the node; act on the Xid catalog's immediate action (reset the GPU or reboot), replace the GPU "
                   "when it recurs")
XID_WARN_REMEDY = "look the code up in NVIDIA's Xid catalog"


def test_xid_names_each_code_from_the_catalog():
    g0, g1 = gpu(0), gpu(1)
    log = xid_log("[10.0] NVRM: Xid (PCI:0000:31:00): 79, GPU has fallen off the bus.",
                  "[11.0] NVRM: Xid (PCI:0000:31:00): 48, DBE")
    text = ("2 Xid event(s) since boot: 48 (ROBUST_CHANNEL_GPU_ECC_DBE), 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS); "
            "last: [11.0] NVRM: Xid (PCI:0000:31:00): 48, DBE")
    assert run("gpu_xid", facts(g0, g1, log=log)) == whole(
        "gpu_xid", "fail", "GPU 1 (NVIDIA H100 80GB HBM3, 0000:31:00.0): " + text, XID_FAIL_REMEDY,
        [rec(g0, "pass", "no Xid since boot"), rec(g1, "fail", text)])


def test_xid_code_outside_the_catalog_warns():
    g = gpu(0)
    log = xid_log("NVRM: Xid (PCI:0000:17:00): 9999, future code", "NVRM: Xid (PCI:0000:17:00): 13, pid=1, name=a, x")
    text = ("2 Xid event(s) since boot: 13 (ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY), "
            "9999 (unknown); last: NVRM: Xid (PCI:0000:17:00): 13, pid=1, name=a, x")
    assert run("gpu_xid", facts(g, log=log)) == whole(
        "gpu_xid", "warn", "GPU 0 (NVIDIA H100 80GB HBM3, 0000:17:00.0): " + text, XID_WARN_REMEDY, [rec(g, "warn", text)])


def test_xid_application_codes_on_several_gpus_pass_naming_each():
    g0, g1 = gpu(0), gpu(1)
    log = xid_log("NVRM: Xid (PCI:0000:17:00): 13, pid=1, name=a, x", "NVRM: Xid (PCI:0000:31:00): 43, pid=2, name=b, y")
    t0 = ("1 Xid event(s) since boot: 13 (ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY); last: "
          "NVRM: Xid (PCI:0000:17:00): 13, pid=1, name=a, x")
    t1 = ("1 Xid event(s) since boot: 43 (ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR); last: NVRM: Xid (PCI:0000:31:00): "
          "43, pid=2, name=b, y")
    assert run("gpu_xid", facts(g0, g1, log=log)) == whole(
        "gpu_xid", "pass", "only application Xids since boot (the application's fault, NVIDIA's catalog: RESTART_APP): "
        "GPU 0 (NVIDIA H100 80GB HBM3, 0000:17:00.0): %s; GPU 1 (NVIDIA H100 80GB HBM3, 0000:31:00.0): %s" % (t0, t1),
        gpus=[rec(g0, "pass", t0), rec(g1, "pass", t1)])


def test_xid_of_addresses_nvml_does_not_enumerate():
    g = gpu(0)
    gone = xid_log("NVRM: Xid (PCI:0000:b3:00): 79, GPU has fallen off the bus.", "NVRM: Xid (PCI:0000:b3:00): 13, x")
    assert run("gpu_xid", facts(g, log=gone)) == whole(
        "gpu_xid", "fail", "PCI 0000:b3:00 (not enumerated by NVML): Xid 13, 79", XID_FAIL_REMEDY,
        [rec(g, "pass", "no Xid since boot")])
    # only codes outside the catalog there: not known to take the node out, a warning
    odd = xid_log("NVRM: Xid (PCI:0000:b3:00): 9999, future code", "NVRM: Xid (PCI:0000:c4:00): 13, x")
    assert run("gpu_xid", facts(g, log=odd)) == whole(
        "gpu_xid", "warn", "PCI 0000:b3:00 (not enumerated by NVML): Xid 9999; PCI 0000:c4:00 (not enumerated by NVML): "
        "Xid 13", XID_WARN_REMEDY, [rec(g, "pass", "no Xid since boot")])


def test_xid_log_not_asked_for():
    assert run("gpu_xid", facts(gpu(0), log={"read": False})) == whole(
        "gpu_xid", "warn", "the kernel log was not read (not asked): Xid events unknown",
        "let gpu_info read the kernel log (kernel_log=dmesg or journal, as root)")


def test_dcgm_whole_results():
    assert run("gpu_dcgm", {}) == whole("gpu_dcgm", "skip",
                                        "DCGM's diagnostic not asked for (node_preflight_dcgm_diag_level 0)")
    assert run("gpu_dcgm", {}, dcgm_diag_level=2) == whole(
        "gpu_dcgm", "fail", "dcgmi diag was not run", "rerun the preflight with the gpu_dcgm check selected")
    passed = run("gpu_dcgm", {"dcgm": dcgm_run()}, dcgm_diag_level=2)
    assert passed["status"] == "pass" and passed["remedy"] == "" and passed["gpus"] == []
    assert passed["evidence"].startswith("dcgmi diag -r 2 passed (DCGM 4.6.0): 1 result(s) on GPU(s) 0; level 2 covers ")


def test_dcgm_exit_status_reaches_the_verdict():
    # every test passed, but dcgmi exited 1: not a clean pass
    res = run("gpu_dcgm", {"dcgm": dcgm_run(rc=1)}, dcgm_diag_level=2)
    assert res == whole("gpu_dcgm", "warn", "dcgmi diag -r 2 exited 1 (not a DCGM status) although every test passed "
                        "(DCGM 4.6.0)", "run `dcgmi diag -r 2` on the node by hand and check its output")
    # Ansible's command module on a node without dcgmi: rc 2, no stdout or stderr: DCGM is not installed
    assert run("gpu_dcgm", {"dcgm": {"rc": 2}}, dcgm_diag_level=1) == whole(
        "gpu_dcgm", "skip", "DCGM is not installed (no dcgmi on the node: exit status 2)")
    assert run("gpu_dcgm", {"dcgm": {"stdout": None, "stderr": None, "rc": 2}}, dcgm_diag_level=1)["status"] == "skip"
    # no output at all and rc 0: the diagnostic did not run
    assert run("gpu_dcgm", {"dcgm": {"stdout": "", "stderr": "", "rc": None}}, dcgm_diag_level=1) == whole(
        "gpu_dcgm", "fail", "dcgmi diag -r 1: dcgmi printed nothing on stdout",
        "run `dcgmi diag -r 1 -j` on the node by hand and check its output")


def test_options_ignore_others_and_none():
    assert H.normalize_options({"other": 1, "ecc_volatile_max": None, "expected_gpus": None}) == H.DEFAULT_OPTIONS
    assert H.normalize_options(None) == H.DEFAULT_OPTIONS
    assert H.normalize_options({"dcgm_diag_level": 4})["dcgm_diag_level"] == 4
    assert H.normalize_options({"ecc_aggregate_max": "0"})["ecc_aggregate_max"] == 0


# --- roll_plan: the whole plan --------------------------------------------------------------------------------------

def test_roll_plan_whole():
    reports = [report("a", ["gpu_ecc"]), report("b"), report("c", ["gpu_xid"]), report("d", ["facts"], verdict="fail")]
    nodes = [k8s("a"), k8s("b", "gpu_ecc"), k8s("c", "gpu_xid")]
    plan = H.roll_plan(reports, nodes, KEY, max_unhealthy=2)
    assert plan == {
        "pool": 4, "max_unhealthy": 2, "unhealthy": ["a", "c"], "unknown": ["d"],
        "taint": [{"host": "a", "node": "a", "value": "gpu_ecc"}], "untaint": [{"host": "b", "node": "b"}],
        "not_in_kubernetes": [], "stopped": False, "message": "", "summary": "a: gpu_ecc; c: gpu_xid",
        "nodes": {
            "a": {"k8s_node": "a", "verdict": "fail", "failed_checks": ["gpu_ecc"], "tainted": None, "action": "taint",
                  "taint_value": "gpu_ecc"},
            "b": {"k8s_node": "b", "verdict": "pass", "failed_checks": [], "tainted": "gpu_ecc", "action": "untaint"},
            "c": {"k8s_node": "c", "verdict": "fail", "failed_checks": ["gpu_xid"], "tainted": "gpu_xid", "action": "keep",
                  "taint_value": "gpu_xid"},
            "d": {"k8s_node": "d", "verdict": "fail", "failed_checks": [], "tainted": None, "action": "unknown"},
        },
    }


def test_roll_plan_default_budget_is_a_quarter_of_the_pool():
    reports = [report(n, ["gpu_ecc"] if n in "ab" else []) for n in "abcdefgh"]
    plan = H.roll_plan(reports, [k8s(n) for n in "abcdefgh"], KEY)
    assert plan["max_unhealthy"] == 2 and not plan["stopped"]
    assert [t["host"] for t in plan["taint"]] == ["a", "b"]
    # 3 failing of 9: 25% of 9 rounds up to 3, so the run goes on; a fourth stops it
    nine = [report(n, ["gpu_ecc"] if n in "abc" else []) for n in "abcdefghi"]
    assert (H.roll_plan(nine, [], KEY)["max_unhealthy"], H.roll_plan(nine, [], KEY)["stopped"]) == (3, False)
    nine[3] = report("d", ["gpu_xid"])
    assert H.roll_plan(nine, [], KEY)["stopped"] is True


def test_roll_plan_reads_only_its_own_taint_key_and_effect():
    nodes = [{"metadata": {"name": "a"}, "spec": {"taints": [
        {"key": "other.io/x", "value": "v", "effect": "NoSchedule"},
        {"key": KEY, "value": "gpu_ecc", "effect": "NoExecute"}]}}]
    plan = H.roll_plan([report("a")], nodes, KEY, max_unhealthy=1)
    assert plan["nodes"]["a"]["tainted"] is None and plan["nodes"]["a"]["action"] == "none" and plan["untaint"] == []
    execute = H.roll_plan([report("a")], nodes, KEY, max_unhealthy=1, effect="NoExecute")
    assert execute["nodes"]["a"]["tainted"] == "gpu_ecc" and execute["untaint"] == [{"host": "a", "node": "a"}]


def test_roll_plan_a_node_kubernetes_does_not_know_is_named_and_left_alone():
    plan = H.roll_plan([report("gpu-a", ["gpu_ecc"]), report("gpu-b")], [], KEY, max_unhealthy=1)
    assert plan["not_in_kubernetes"] == ["gpu-a"] and plan["taint"] == [] and plan["untaint"] == []
    assert plan["nodes"]["gpu-a"]["action"] == "not_in_kubernetes" and plan["nodes"]["gpu-b"]["action"] == "none"


def test_roll_plan_stop_message_whole():
    reports = [report("a", ["gpu_ecc"]), report("b", ["gpu_xid"]), report("c")]
    plan = H.roll_plan(reports, [k8s("a"), k8s("b"), k8s("c", "gpu_pcie")], KEY, max_unhealthy=1)
    assert plan["stopped"] and plan["taint"] == [] and plan["untaint"] == []
    assert plan["message"] == (
        "2 of 3 nodes fail their GPU health checks (a, b), more than the 1 (max_unhealthy 1) one run may take out of "
        "service: a fault this wide is more likely in monitoring, the driver or the checks than in that many GPUs. No "
        "node was tainted or untainted; look at the reports.")
    assert plan["summary"] == "a: gpu_ecc; b: gpu_xid"
    assert [plan["nodes"][h]["action"] for h in "abc"] == ["held", "held", "held"]


# --- per GPU, for the fleet report ----------------------------------------------------------------------------------

def test_gpu_verdicts_worst_status_and_the_checks_that_did_not_pass():
    results = [
        {"id": "gpu_ecc", "gpus": [{"index": 0, "status": "pass", "evidence": "e0"},
                                   {"index": 1, "status": "warn", "evidence": "ECC is disabled"}]},
        {"id": "gpu_pcie", "gpus": [{"index": 0, "status": "pass", "evidence": "p0"},
                                    {"index": 1, "status": "fail", "evidence": "x8"}]},
        {"id": "gpu_thermal", "gpus": [{"index": 0, "status": "warn", "evidence": "hot"},
                                       {"index": 1, "status": "warn", "evidence": "warm"}]},
        {"id": "gpu_dcgm", "gpus": []},
        {"id": "gpu_count"},
    ]
    assert H.gpu_verdicts(results) == {
        0: {"status": "warn", "failing": [{"check": "gpu_thermal", "status": "warn", "evidence": "hot"}]},
        1: {"status": "fail", "failing": [{"check": "gpu_ecc", "status": "warn", "evidence": "ECC is disabled"},
                                          {"check": "gpu_pcie", "status": "fail", "evidence": "x8"},
                                          {"check": "gpu_thermal", "status": "warn", "evidence": "warm"}]},
    }
    # a fail is not lowered by a later warn; skip and a status this version does not know rank below pass
    later = [{"id": "a", "gpus": [{"index": 3, "status": "fail", "evidence": "f"}]},
             {"id": "b", "gpus": [{"index": 3, "status": "warn", "evidence": "w"}, {"index": 4, "status": "skip"},
                                  {"index": 5, "status": "degraded"}]}]
    assert H.gpu_verdicts(later) == {
        3: {"status": "fail", "failing": [{"check": "a", "status": "fail", "evidence": "f"},
                                          {"check": "b", "status": "warn", "evidence": "w"}]},
        4: {"status": "pass", "failing": []},
        5: {"status": "pass", "failing": []},
    }
    assert H.gpu_verdicts(None) == {} and H.gpu_verdicts([]) == {}


def test_evaluate_gpus_runs_the_per_gpu_checks_with_the_options():
    storm = gpu(1, ecc={"volatile_uncorrected": 3})
    gpu_result = facts(gpu(0), storm)["gpu"]
    text = "uncorrectable ECC errors: 3 since the last reset, 0 in its life (more than 0 since the last reset)"
    assert H.evaluate_gpus(gpu_result) == {
        0: {"status": "pass", "failing": []},
        1: {"status": "fail", "failing": [{"check": "gpu_ecc", "status": "fail", "evidence": text}]},
    }
    assert H.evaluate_gpus(gpu_result, {"ecc_volatile_max": 3}) == {
        0: {"status": "pass", "failing": []}, 1: {"status": "pass", "failing": []}}
    with pytest.raises(H.HealthError, match="^ecc_volatile_max must be 0 or more, not -1$"):
        H.evaluate_gpus(gpu_result, {"ecc_volatile_max": -1})
