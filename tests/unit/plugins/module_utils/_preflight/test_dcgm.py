# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""DCGM's diagnostic in the gate (plugins/module_utils/_preflight/dcgm.py): dcgmi diag -j output of DCGM 3.x and 4.x as
dcgmi/Diag.cpp writes it (fixtures below follow the writers at the tags v3.1.8, v3.3.9 and v4.6.0), the refusals
(MIG, no host engine, no dcgmi), bad JSON, and the verdicts."""

from __future__ import annotations

import copy
import json
import re

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._preflight import dcgm

# dcgm_errors.h texts and ids (v4.6.0; the same texts in v3.3.9).
DBE = "CUDA APIs have indicated that a double-bit ECC error has occured on GPU 0."
WIDTH = ("GPU 1 is running at PCI link width 8X, which is below the minimum allowed link generation of 16 "
         "(parameter 'min_pci_width')")
REMAP = "GPU 1 had uncorrectable memory errors and row remapping failed."
PERSIST = "Persistence mode for GPU 0 is disabled."
MIG_MSG = ("GPU 0's MIG configuration is incompatible with the diagnostic because it prevents access to the entire "
           "GPU.")


def gpu_result(index, status="Pass", warnings=None, info=None):
    """4.x HelperJsonAddResult: entity_group/entity_group_id/entity_id, status, warnings [{warning, error_id,
    error_category, error_severity}], info [text]."""
    r = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": index, "status": status}
    if warnings:
        r["warnings"] = [{"warning": text, "error_id": code, "error_category": cat, "error_severity": sev}
                         for text, code, cat, sev in warnings]
    if info:
        r["info"] = info
    return r


def v4(categories, version="4.6.0"):
    """4.x HelperJsonBuildOutput: "DCGM Diagnostic".test_categories, entity_groups, metadata."""
    return {"DCGM Diagnostic": {"test_categories": categories},
            "entity_groups": [{"entity_group": "GPU", "entity_group_id": 1,
                               "entities": [{"entity_id": 0, "device_id": "2330", "serial_num": "1654922015566"},
                                            {"entity_id": 1, "device_id": "2330", "serial_num": "1654922015799"}]}],
            "metadata": {"version": version, "Driver Version Detected": "550.163.01"}}


def t4(name, results, summary="Pass", summary_warnings=None):
    t = {"name": name, "results": results, "test_summary": {"status": summary}}
    if summary_warnings:
        t["test_summary"]["warnings"] = [{"warning": w, "error_id": c, "error_category": 16, "error_severity": 3}
                                         for w, c in summary_warnings]
    return t


V4_PASS_L1 = v4([{"category": "Deployment", "tests": [t4("software", [gpu_result(0), gpu_result(1)])]}])
V4_FAIL_L2 = v4([
    {"category": "Deployment", "tests": [t4("software", [gpu_result(0), gpu_result(1)])]},
    {"category": "Hardware",
     "tests": [t4("memory", [gpu_result(0, "Fail", [(DBE, 57, 10, 2)]), gpu_result(1)], "Fail")]},
    {"category": "Integration",
     "tests": [t4("pcie", [gpu_result(0, info=["GPU 0 PCIe gen 5 x16"]), gpu_result(1, "Fail", [(WIDTH, 46, 13, 5)])],
                  "Fail")]},
])

# 3.3.9 HelperJsonBuildOutput: "DCGM GPU Diagnostic".test_categories plus top-level version, driver, ids, serials.
# Deployment (HelperJsonAddBasicTests): one result, "gpu_id" (int) only with an error, and the message under
# "warnings" inside each warning object. Per GPU (HelperJsonAddResult): "gpu_id" as a string, "warning", info text.
DEPLOYMENT_33 = ["Denylist", "NVML Library", "CUDA Main Library", "Permissions and OS Blocks", "Persistence Mode",
                 "Environment Variables", "Page Retirement/Row Remap", "Graphics Processes", "Inforom"]


def v3(categories, version="3.3.9"):
    return {"DCGM GPU Diagnostic": {"test_categories": categories}, "version": version,
            "Driver Version Detected": "535.183.01", "GPU Device IDs": ["20b0", "20b0"],
            "GPU Device Serials": {"0": "1564720004631", "1": "1564720004799"}}


def deployment33(failing=None):
    tests = []
    for name in DEPLOYMENT_33:
        result = {"status": "Pass"}
        if failing and name == failing[0]:
            result = {"status": "Fail", "gpu_id": failing[1],
                      "warnings": [None, {"warnings": failing[2], "error_id": failing[3], "error_category": 10,
                                          "error_severity": 2}]}
        tests.append({"name": name, "results": [result]})
    return {"category": "Deployment", "tests": tests}


V3_FAIL_L2 = v3([
    deployment33(("Page Retirement/Row Remap", 1, REMAP, 80)),
    {"category": "Integration", "tests": [{"name": "PCIe", "results": [
        {"gpu_id": "0", "status": "Pass", "info": "GPU 0 GPU to Host bandwidth:\t\t24.48 GB/s"},
        {"gpu_id": "1", "status": "Fail", "warnings": [{"warning": WIDTH, "error_id": 46, "error_category": 13,
                                                        "error_severity": 5}]}]}]},
    {"category": "Hardware", "tests": [{"name": "GPU Memory", "results": [{"gpu_id": "0", "status": "Pass"},
                                                                          {"gpu_id": "1", "status": "Pass"}]}]},
])
# 3.0-3.2 (v3.1.8 HelperJsonAddResult): "gpu_ids" and one warning string.
V31_FAIL = v3([{"category": "Deployment",
                "tests": [{"name": n, "results": [{"status": "Pass"}]} for n in DEPLOYMENT_33]},
               {"category": "Integration", "tests": [{"name": "PCIe", "results": [
                   {"gpu_ids": "0", "status": "Pass"}, {"gpu_ids": "1", "status": "Fail", "warnings": WIDTH}]}]}],
              version="3.1.8")


def styled(doc, before=""):
    """jsoncpp's toStyledString: 3-space indent, sorted keys."""
    return before + json.dumps(doc, indent=3, sort_keys=True, separators=(",", " : ")) + "\n"


def parse(doc, rc=0, **kw):
    return dcgm.parse_diag(styled(doc), "", rc, **kw)


# ---------------------------------------------------------------- DCGM 4.x JSON
def test_v4_pass_level1():
    p = parse(V4_PASS_L1)
    assert (p["ran"], p["refused"], p["error"], p["format"], p["version"], p["overall"]) == (
        True, None, None, "dcgm4", "4.6.0", "pass")
    assert p["tests"] == [
        {"category": "Deployment", "name": "software", "gpu": 0, "entity": "GPU 0", "status": "pass", "warning": "",
         "error_ids": [], "info": ""},
        {"category": "Deployment", "name": "software", "gpu": 1, "entity": "GPU 1", "status": "pass", "warning": "",
         "error_ids": [], "info": ""}]
    assert dcgm.judge(p, 1) == (
        "pass", "dcgmi diag -r 1 passed (DCGM 4.6.0): 2 result(s) on GPU(s) 0, 1; level 1 covers Deployment checks "
                "only (the memory and PCIe tests start at level 2)", "")


def test_v4_failures_name_gpu_test_and_dcgm_text():
    p = parse(V4_FAIL_L2, rc=205)
    assert p["overall"] == "fail"
    failed = [(t["gpu"], t["name"], t["category"], t["warning"], t["error_ids"]) for t in p["tests"]
              if t["status"] == "fail"]
    assert failed == [(0, "memory", "Hardware", DBE, [57]), (1, "pcie", "Integration", WIDTH, [46])]
    assert [t["info"] for t in p["tests"] if t["name"] == "pcie"] == ["GPU 0 PCIe gen 5 x16", ""]
    status, evidence, remedy = dcgm.judge(p, 2)
    assert status == "fail"
    assert evidence == ("dcgmi diag -r 2 failed (DCGM 4.6.0): GPU 0 memory (Hardware): %s; "
                        "GPU 1 pcie (Integration): %s" % (DBE, WIDTH))
    assert "DCGM asks to drain the GPU (exit 205, DCGM_ST_NVVS_ISOLATE_ERROR)" in remedy
    # the same failures with DCGM_ST_NVVS_ERROR (226): no isolate note
    assert "exit 205" not in dcgm.judge(parse(V4_FAIL_L2, rc=226), 2)[2]


def test_v4_cpu_entity_has_no_gpu_index():
    doc = v4([{"category": "Hardware", "tests": [t4("cpu_eud", [
        {"entity_group": "CPU", "entity_group_id": 7, "entity_id": 0, "status": "Fail",
         "warnings": [{"warning": "CPU EUD failed", "error_id": 116, "error_category": 15, "error_severity": 4}]}],
        "Fail")]}])
    t = parse(doc)["tests"][0]
    assert (t["gpu"], t["entity"], t["status"]) == (None, "CPU 0", "fail")
    assert dcgm.judge(parse(doc), 3)[1] == ("dcgmi diag -r 3 failed (DCGM 4.6.0): CPU 0 cpu_eud (Hardware): "
                                            "CPU EUD failed")


def test_v4_test_summary_error_without_entity_counts():
    """Errors not tied to an entity appear only in test_summary (4.6.0 HelperJsonAddTestSummary)."""
    bad = v4([{
        "category": "Integration",
        "tests": [t4("pcie", [gpu_result(0)], "Fail", [("There was an internal error during the test", 19)])]}])
    p = parse(bad)
    assert [(t["gpu"], t["status"], t["warning"]) for t in p["tests"]] == [
        (0, "pass", ""), (None, "fail", "There was an internal error during the test")]
    assert dcgm.judge(p, 2)[1].endswith("node pcie (Integration): There was an internal error during the test")
    good = v4([{"category": "Integration", "tests": [t4("pcie", [gpu_result(0)], "Pass")]}])
    assert [t["status"] for t in parse(good)["tests"]] == ["pass"]


def test_nvvs_warn_printed_as_fail_is_a_warn():
    """Software.cpp checkPersistenceMode sets WARN; dcgmi -j prints it "Fail" (HelperDisplayDiagResult)."""
    doc = v4([{"category": "Deployment", "tests": [t4("software", [gpu_result(0, "Fail", [(PERSIST, 29, 8, 5)]),
                                                                   gpu_result(1)], "Fail", [(PERSIST, 29)])]}])
    p = parse(doc)
    assert [t["status"] for t in p["tests"]] == ["warn", "pass"]
    assert dcgm.judge(p, 1) == (
        "warn", "dcgmi diag -r 1 passed with warnings (DCGM 4.6.0): GPU 0 software (Deployment): %s" % PERSIST,
        "fix what DCGM warns about (persistence mode, graphics processes, CUDA environment variables)")
    # a real failure code stays a failure, and so does 29 when the caller drops it from warn_codes
    remap = v4([{
        "category": "Deployment",
        "tests": [t4("software", [gpu_result(1, "Fail", [(REMAP, 80, 10, 6)])], "Fail")]}])
    assert parse(remap)["overall"] == "fail"
    assert parse(doc, warn_codes=())["overall"] == "fail"


# ---------------------------------------------------------------- DCGM 3.x JSON
def test_v33_deployment_and_per_gpu_shapes():
    p = parse(V3_FAIL_L2, rc=226)
    assert (p["format"], p["version"], p["overall"]) == ("dcgm3", "3.3.9", "fail")
    failed = [(t["gpu"], t["name"], t["category"], t["warning"], t["error_ids"]) for t in p["tests"]
              if t["status"] == "fail"]
    assert failed == [(1, "Page Retirement/Row Remap", "Deployment", REMAP, [80]),
                      (1, "PCIe", "Integration", WIDTH, [46])]
    assert [t["gpu"] for t in p["tests"] if t["name"] == "Denylist"] == [None]
    assert [t["info"] for t in p["tests"] if t["name"] == "PCIe"][0] == "GPU 0 GPU to Host bandwidth:\t\t24.48 GB/s"
    assert dcgm.judge(p, 2)[1] == ("dcgmi diag -r 2 failed (DCGM 3.3.9): GPU 1 Page Retirement/Row Remap "
                                   "(Deployment): %s; GPU 1 PCIe (Integration): %s" % (REMAP, WIDTH))


def test_v33_pass():
    doc = copy.deepcopy(V3_FAIL_L2)
    doc["DCGM GPU Diagnostic"]["test_categories"][0] = deployment33()
    doc["DCGM GPU Diagnostic"]["test_categories"][1]["tests"][0]["results"][1] = {"gpu_id": "1", "status": "Pass"}
    p = parse(doc)
    assert (p["overall"], p["format"]) == ("pass", "dcgm3")
    assert dcgm.judge(p, 2)[0] == "pass"
    assert "13 result(s) on GPU(s) 0, 1" in dcgm.judge(p, 2)[1]


def test_v31_legacy_keys():
    p = parse(V31_FAIL)
    assert (p["format"], p["version"]) == ("dcgm3-legacy", "3.1.8")
    assert [(t["gpu"], t["status"], t["warning"]) for t in p["tests"] if t["name"] == "PCIe"] == [
        (0, "pass", ""), (1, "fail", WIDTH)]


def test_iterations_merge_every_run():
    """-n N (Diag::RunStartDiag): {"iterations": [run, ...], "Overall Result": ...}."""
    doc = {"iterations": [V4_PASS_L1, V4_FAIL_L2], "Overall Result": "Fail", "warning": "DCGM GPU Diagnostic "
           "returned an error"}
    p = parse(doc)
    assert len(p["tests"]) == 2 + 6 and p["overall"] == "fail"


# ---------------------------------------------------------------- refusals
def runtime(root, message, version):
    return {root: {"runtime_error": message, "version": version}}


@pytest.mark.parametrize("doc", [
    # 4.6.0 RunDiagOnce: the return code line, then NVVS's system error
    runtime("DCGM Diagnostic", "Error: Unable to complete diagnostic for entities *,cpu:*. Return: (-30) : DCGM GPU "
                               "Diagnostic returned an error\n%s" % MIG_MSG, "4.6.0"),
    # 3.3.9 RunDiagOnce: systemError.msg as is
    runtime("DCGM GPU Diagnostic", "Cannot run diagnostic: CUDA does not support enumerating GPUs with MIG mode "
                                   "enabled, yet GPU 0 is MIG enabled and the diagnostic is attempting to run on 2 "
                                   "GPUs.", "3.3.9"),
])
def test_mig_refusal_is_a_warn(doc):
    p = parse(doc, rc=226)
    assert (p["ran"], p["refused"], p["overall"]) == (False, "mig", None)
    status, evidence, remedy = dcgm.judge(p, 1)
    assert status == "warn"
    assert evidence.startswith("DCGM refuses to run its diagnostic on GPUs in MIG mode (DCGM "
                               "nvvs/src/NvidiaValidationSuite.cpp BuildCommonGpusList): ")
    assert "MIG" in evidence.split("): ", 1)[1]
    assert remedy.startswith("run the DCGM diagnostic while MIG is disabled, e.g. before the MIG partitions are "
                             "applied")


def test_mig_refusal_in_plain_text():
    """Without -j dcgmi prints the message alone (NVIDIA/DCGM#94)."""
    p = dcgm.parse_diag(MIG_MSG + "\n", "", 226)
    assert (p["refused"], p["message"]) == ("mig", MIG_MSG)


def test_other_runtime_error_fails():
    p = parse(runtime("DCGM Diagnostic", "Error: Diagnostic could not be run while DCGM is paused.", "4.6.0"), 202)
    assert p["refused"] == "runtime_error"
    assert dcgm.judge(p, 1) == ("fail", "dcgmi diag -r 1 could not run: Error: Diagnostic could not be run while "
                                "DCGM is paused.", "run `dcgmi diag -r 1` on the node and fix what it reports")


@pytest.mark.parametrize("stdout,rc", [
    # Diag.cpp StartDiag::DoExecuteConnectionFailure: the embedded host engine did not start either
    ("Error: Unable to start an embedded host engine. DCGM initialization error.\n", 249),
    # Command.cpp (other subcommands; NVIDIA/DCGM#57)
    ("Error: unable to establish a connection to the specified host: localhost\nError: Unable to connect to host "
     "engine. Host engine connection invalid/disconnected.\n", 235),
])
def test_no_host_engine_fails_with_systemctl_remedy(stdout, rc):
    p = dcgm.parse_diag(stdout, "", rc)
    assert p["refused"] == "hostengine"
    status, evidence, remedy = dcgm.judge(p, 1)
    assert status == "fail"
    assert evidence.startswith("DCGM's host engine is not running and dcgmi could not start an embedded one: Error: ")
    assert remedy == dcgm.HOSTENGINE_REMEDY and "systemctl start nvidia-dcgm" in remedy


def test_connect_line_alone_is_a_refusal_but_not_before_a_run():
    p = dcgm.parse_diag("Error: unable to establish a connection to the specified host: 10.0.0.9\n", "", 235)
    assert (p["refused"], p["message"]) == (
        "hostengine", "Error: unable to establish a connection to the specified host: 10.0.0.9")
    p = dcgm.parse_diag("Error: unable to establish a connection to the specified host: 10.0.0.9\nSuccessfully ran "
                        "diagnostic for group.\n", "", 0)
    assert (p["refused"], p["error"][:26]) == (None, "dcgmi printed no JSON (was")


def test_embedded_host_engine_that_ran_is_not_a_refusal():
    """--host that does not answer: Command::Connect's line, then the embedded engine's run (trimJsonText)."""
    p = dcgm.parse_diag(styled(V4_PASS_L1, "Error: unable to establish a connection to the specified host: "
                               "localhost\n"), "", 0)
    assert (p["refused"], p["ran"], p["overall"]) == (None, True, "pass")


@pytest.mark.parametrize("stderr,rc", [
    ("/bin/sh: 1: dcgmi: not found\n", 127),          # shell module (dash)
    ("bash: line 1: dcgmi: command not found\n", 127),  # shell module (bash)
    ("zsh:1: command not found: dcgmi\n", 127),        # a shell that words it otherwise: the status decides
    ("[Errno 2] No such file or directory: b'dcgmi'", 2),  # command module's msg passed as stderr
    ("", 2),                                             # command module, ansible-core 2.21: rc 2, nothing printed
])
def test_not_installed_is_a_skip(stderr, rc):
    p = dcgm.parse_diag("", stderr, rc)
    assert p["refused"] == "not_installed"
    status, evidence, remedy = dcgm.judge(p, 1)
    assert (status, remedy) == ("skip", "")
    assert evidence.startswith("DCGM is not installed (no dcgmi on the node: ")


def test_an_empty_run_that_is_not_a_missing_command_fails():
    p = dcgm.parse_diag("", "", 1)
    assert (p["refused"], p["error"]) == (None, "dcgmi printed nothing on stdout")
    assert dcgm.judge(p, 1) == ("fail", "dcgmi diag -r 1: dcgmi printed nothing on stdout",
                                "run `dcgmi diag -r 1 -j` on the node by hand and check its output")


# ---------------------------------------------------------------- bad output
@pytest.mark.parametrize("stdout,message", [
    ('{"DCGM Diagnostic": {"test_categories": [', r"^dcgmi printed no JSON \(was -j given\?\)"),
    ('{"DCGM Diagnostic": {"test_categories": [}', r"^dcgmi's output is not valid JSON: Expecting value"),
    ("Successfully ran diagnostic for group.\n", r"^dcgmi printed no JSON \(was -j given\?\): 'Successfully ran"),
    ('[{"a": 1}]', r"^dcgmi's JSON is a list, not an object$"),
    ('Error: x\n[{"a": 1}]', r"the JSON has neither 'DCGM Diagnostic' \(DCGM 4\) nor .* \(keys: a\)$"),
    ('{"foo": {}}', r"^dcgmi's JSON is not the shape dcgmi diag writes: the JSON has neither 'DCGM Diagnostic' "
                    r"\(DCGM 4\) nor 'DCGM GPU Diagnostic' \(DCGM 3\) at its top level \(keys: foo\)$"),
    ('{"DCGM Diagnostic": {"test_categories": {}}}', r"DCGM Diagnostic\.test_categories is a dict, not a list$"),
    ('{"DCGM Diagnostic": {"version": "4.6.0"}}', r"'DCGM Diagnostic' has neither 'test_categories' nor "
                                                  r"'runtime_error'$"),
    ('{"DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [{"name": "software", '
     '"results": [{"entity_id": 0, "status": "Bogus"}]}]}]}}',
     r"test_categories\[0\] \(Deployment\) tests\[0\] 'software': status 'Bogus' is none of Pass, Fail, Skip, Warn"),
    ('{"DCGM Diagnostic": {"test_categories": [{"category": "Deployment"}]}}',
     r"writes: DCGM Diagnostic\.test_categories\[0\] has no 'tests' list$"),
    ('{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Integration", "tests": [{"name": "PCIe", '
     '"results": [{"gpu_id": "0", "status": "Fail", "warnings": 7}]}]}]}}', r"'warnings' is a int, not a list$"),
])
def test_bad_output_names_what_is_wrong(stdout, message):
    p = dcgm.parse_diag(stdout, "", 0)
    assert (p["ran"], p["refused"]) == (False, None)
    assert p["error"] is not None
    assert re.search(message, p["error"]), p["error"]
    status, evidence, _remedy = dcgm.judge(p, 2)
    assert status == "fail" and evidence == "dcgmi diag -r 2: %s" % p["error"]


# ---------------------------------------------------------------- verdict edges
def test_every_result_skipped_is_a_warn():
    doc = v4([{"category": "Deployment", "tests": [t4("software", [gpu_result(0, "Skip")], "Skip")]}])
    p = parse(doc)
    assert p["overall"] == "skip"
    assert dcgm.judge(p, 1)[:2] == ("warn", "dcgmi diag -r 1 ran no test (DCGM 4.6.0): every result was Skip (1)")
    one_ran = v4([{"category": "Deployment", "tests": [t4("software", [gpu_result(0, "Skip"), gpu_result(1)])]}])
    assert dcgm.judge(parse(one_ran), 1)[1].endswith("1 result(s) on GPU(s) 1, 1 skipped; level 1 covers Deployment "
                                                     "checks only (the memory and PCIe tests start at level 2)")


def test_nonzero_exit_with_every_test_passed_is_a_warn():
    status, evidence, _remedy = dcgm.judge(parse(V4_PASS_L1, rc=226), 1)
    assert status == "warn"
    assert evidence == ("dcgmi diag -r 1 exited 226 (DCGM_ST_NVVS_ERROR: the diagnostic ran and reported an error) "
                        "although every test passed (DCGM 4.6.0)")
    assert dcgm.judge(parse(V4_PASS_L1, rc=0), 1)[0] == "pass"


@pytest.mark.parametrize("level", [0, 5, "1", True, None])
def test_level_must_be_1_to_4(level):
    with pytest.raises(dcgm.DcgmError, match=r"^level must be 1-4 \(dcgmi diag -r: 1 quick, 2 medium, 3 long, "
                       r"4 extended\), got "):
        dcgm.judge(parse(V4_PASS_L1), level)


@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_levels_1_to_4_are_judged(level):
    status, evidence, _remedy = dcgm.judge(parse(V4_PASS_L1), level)
    assert status == "pass" and evidence.startswith("dcgmi diag -r %d passed" % level)
    assert evidence.endswith("level %d covers %s" % (level, dcgm.LEVEL_SCOPE[level]))


# ---------------------------------------------------------------- issue 23: every field, every message
def _run(tests, version="4.6.0"):
    return v4([{"category": "Deployment", "tests": tests}], version)


def _bad_result(results):
    return json.dumps({"DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [
        {"name": "software", "results": results}]}]}})


WHERE = "DCGM Diagnostic.test_categories[0] (Deployment) tests[0]"


@pytest.mark.parametrize("stdout,error", [
    ("{}", "the JSON has neither 'DCGM Diagnostic' (DCGM 4) nor 'DCGM GPU Diagnostic' (DCGM 3) at its top level "
           "(keys: none)"),
    ('{"b": 1, "a": 2}', "the JSON has neither 'DCGM Diagnostic' (DCGM 4) nor 'DCGM GPU Diagnostic' (DCGM 3) at its "
                         "top level (keys: a, b)"),
    ('{"DCGM Diagnostic": [1]}', "'DCGM Diagnostic' is a list, not an object"),
    ('{"iterations": [7]}', "an iteration is a int, not an object"),
    (_bad_result([5]), "%s 'software': a result is a int, not an object" % WHERE),
    (_bad_result([{"entity_id": 0, "status": "Pass", "info": 3}]), "%s 'software': 'info' is a int, not text" % WHERE),
    (_bad_result([{"entity_id": 0, "status": "Fail", "warnings": [3]}]),
     "%s 'software': a warning is a int, not an object" % WHERE),
    (_bad_result([{"entity_id": 0, "status": "Fail", "warnings": {"warning": "x"}}]),
     "%s 'software': 'warnings' is a dict, not a list" % WHERE),
    (_bad_result({"entity_id": 0}), "%s: 'results' is a dict, not a list" % WHERE),
    (json.dumps({"DCGM Diagnostic": {"test_categories": [{"tests": ["software"]}]}}),
     "DCGM Diagnostic.test_categories[0] (?) tests[0] has no 'name'"),
    (json.dumps({"DCGM Diagnostic": {"test_categories": [{"category": "Deployment", "tests": [
        {"name": "software", "results": [], "test_summary": {"status": "Maybe"}}]}]}}),
     "%s 'software' test_summary: status 'Maybe' is none of Pass, Fail, Skip, Warn (dcgmi/Diag.cpp "
     "HelperDisplayDiagResult)" % WHERE),
])
def test_bad_shapes_give_the_exact_place_and_reason(stdout, error):
    p = dcgm.parse_diag(stdout, "", 0)
    assert p == {"ran": False, "refused": None, "message": "", "error": "dcgmi's JSON is not the shape dcgmi diag writes: "
                 + error, "version": p["version"], "format": p["format"], "rc": 0, "tests": [], "overall": None}


def test_text_that_is_not_json_is_quoted_up_to_200_characters():
    text = "x" * 250
    assert dcgm.parse_diag(text, "", 0)["error"] == "dcgmi printed no JSON (was -j given?): %r" % ("x" * 200)
    assert dcgm.parse_diag("} then {", "", 0)["error"] == "dcgmi printed no JSON (was -j given?): '} then {'"


def test_a_result_without_results_or_rc_is_complete():
    assert dcgm.parse_diag("", "", 1) == {"ran": False, "refused": None, "message": "", "error": "dcgmi printed nothing on stdout",
                                          "version": None, "format": None, "rc": 1, "tests": [], "overall": None}
    p = dcgm.parse_diag(styled(V4_PASS_L1))
    assert (p["rc"], p["ran"], p["message"]) == (0, True, "")


def test_bytes_output_with_a_stray_byte_is_read():
    p = dcgm.parse_diag(b"\xff note\n" + styled(V4_PASS_L1).encode(), b"", 0)
    assert (p["ran"], p["overall"], p["version"]) == (True, "pass", "4.6.0")
    p = dcgm.parse_diag(b"", b"bash: dcgmi: command not found \xff\n", 127)
    assert (p["refused"], p["message"]) == ("not_installed", "bash: dcgmi: command not found \ufffd")


@pytest.mark.parametrize("stdout,stderr,rc,refused,message", [
    ("", "sh: 1: dcgmi: not found\nmore", 2, "not_installed", "sh: 1: dcgmi: not found"),
    ("", "sh: 1: dcgmi: not found", 1, "not_installed", "sh: 1: dcgmi: not found"),
    ("", "Error executing command.", 2, "not_installed", "Error executing command."),
    ("", None, 2, "not_installed", "exit status 2"),
    ("", "", 127, "not_installed", "exit status 127"),
    ("bash: dcgmi: command not found\n", "", 127, "not_installed", "bash: dcgmi: command not found"),
    ("", "Permission denied", 2, None, ""),  # rc 2 with another reason: dcgmi exists
    ("x", "", 2, None, ""),
])
def test_not_installed_and_its_message(stdout, stderr, rc, refused, message):
    p = dcgm.parse_diag(stdout, stderr, rc)
    assert (p["refused"], p["message"]) == (refused, message)


def test_plain_text_refusals_keep_every_matching_line():
    text = "GPU 0 has MIG mode enabled and one or more GPUs has MIG mode disabled\nnoise\n  " + MIG_MSG + "\n"
    p = dcgm.parse_diag(text, "", 226)
    assert (p["refused"], p["message"]) == (
        "mig", "GPU 0 has MIG mode enabled and one or more GPUs has MIG mode disabled\n" + MIG_MSG)


def test_json_runtime_error_about_the_host_engine_is_a_host_engine_refusal():
    msg = "Error: Unable to connect to host engine. Host engine connection invalid/disconnected."
    p = parse(runtime("DCGM Diagnostic", msg, "4.6.0"), 235)
    assert (p["refused"], p["message"], p["version"], p["format"]) == ("hostengine", msg, "4.6.0", "dcgm4")


def test_every_field_of_dcgm3_results():
    p = parse(V3_FAIL_L2, rc=226)
    assert p["tests"][0] == {"category": "Deployment", "name": "Denylist", "gpu": None, "entity": None, "status": "pass",
                             "warning": "", "error_ids": [], "info": ""}
    assert [t for t in p["tests"] if t["category"] != "Deployment"] == [
        {"category": "Integration", "name": "PCIe", "gpu": 0, "entity": "GPU 0", "status": "pass", "warning": "",
         "error_ids": [], "info": "GPU 0 GPU to Host bandwidth:\t\t24.48 GB/s"},
        {"category": "Integration", "name": "PCIe", "gpu": 1, "entity": "GPU 1", "status": "fail", "warning": WIDTH,
         "error_ids": [46], "info": ""},
        {"category": "Hardware", "name": "GPU Memory", "gpu": 0, "entity": "GPU 0", "status": "pass", "warning": "",
         "error_ids": [], "info": ""},
        {"category": "Hardware", "name": "GPU Memory", "gpu": 1, "entity": "GPU 1", "status": "pass", "warning": "",
         "error_ids": [], "info": ""}]


def test_entity_group_defaults_to_gpu_and_warnings_and_info_are_joined():
    result = {"entity_id": "1", "status": "Fail", "info": ["a", None, " ", "b "],
              "warnings": [None, "first", {"error_id": 20}, {"warning": "second", "error_id": "46"},
                           {"warnings": "third", "error_id": True}]}
    p = parse(_run([t4("software", [result], "Fail")]))
    assert p["tests"] == [{"category": "Deployment", "name": "software", "gpu": 1, "entity": "GPU 1", "status": "fail",
                           "warning": "first; second; third", "error_ids": [20], "info": "a; b"}]


def test_none_entries_are_skipped_not_the_rest():
    doc = v3([None, {"category": "Deployment", "tests": [None, {"name": "Denylist", "results": [None, {"status": "Pass"}]}]},
              {"tests": [{"name": "x", "results": [{"status": "Skip"}]}]}])
    p = parse(doc)
    assert (p["format"], p["version"], p["overall"]) == ("dcgm3", "3.3.9", "pass")
    assert [(t["category"], t["name"], t["status"]) for t in p["tests"]] == [
        ("Deployment", "Denylist", "pass"), ("?", "x", "skip")]
    assert dcgm.judge(p, 1)[1] == ("dcgmi diag -r 1 passed (DCGM 3.3.9): 1 result(s) on GPU(s) none named, 1 skipped; "
                                   "level 1 covers %s" % dcgm.LEVEL_SCOPE[1])


def test_version_from_the_root_or_none_at_all():
    doc = {"DCGM Diagnostic": {"version": "4.1.0", "test_categories": [
        {"category": "Deployment", "tests": [t4("software", [gpu_result(0)])]}]}}
    p = parse(doc)
    assert p["version"] == "4.1.0"
    del doc["DCGM Diagnostic"]["version"]
    p = parse(doc)
    assert p["version"] is None
    assert dcgm.judge(p, 1) == ("pass", "dcgmi diag -r 1 passed: 1 result(s) on GPU(s) 0; level 1 covers %s"
                                % dcgm.LEVEL_SCOPE[1], "")


def test_test_summary_stands_for_the_whole_test():
    # No per-entity results: the summary is the test's one result, naming no GPU even where it carries an id.
    only = parse(_run([{"name": "software", "test_summary": {"status": "Pass", "entity_id": 3}}]))
    assert only["tests"] == [{"category": "Deployment", "name": "software", "gpu": None, "entity": None,
                              "status": "pass", "warning": "", "error_ids": [], "info": ""}]
    # A WARN-class summary over passing entities counts, without a GPU.
    warn = parse(_run([t4("software", [gpu_result(0)], "Fail", [(PERSIST, 29)])]))
    warn["tests"][1].pop("entity")
    assert warn["overall"] == "warn"
    assert warn["tests"][1] == {"category": "Deployment", "name": "software", "gpu": None, "status": "warn",
                                "warning": PERSIST, "error_ids": [29], "info": ""}
    summary = {"status": "Fail", "gpu_id": "0", "warnings": [{"warning": "internal", "error_id": 19}]}
    failed = parse(_run([{"name": "software", "results": [gpu_result(0)], "test_summary": summary}]))
    assert [(t["gpu"], t["entity"], t["status"]) for t in failed["tests"]] == [(0, "GPU 0", "pass"), (None, None, "fail")]
    # Per-entity failures already tell it: the summary adds nothing.
    twice = parse(_run([t4("software", [gpu_result(0, "Fail", [(REMAP, 80, 10, 6)])], "Fail", [(REMAP, 80)])]))
    assert [(t["gpu"], t["status"]) for t in twice["tests"]] == [(0, "fail")]


def test_overall_is_the_worst_status():
    doc = _run([t4("software", [gpu_result(0, "Skip"), gpu_result(1, "Fail", [(PERSIST, 29, 8, 5)])], "Fail")])
    assert parse(doc)["overall"] == "warn"


def test_judge_messages_and_remedies():
    assert dcgm.judge({"refused": "not_installed"}) == ("skip", "DCGM is not installed (no dcgmi on the node: not found)", "")
    assert dcgm.judge({"refused": "not_installed", "message": "sh: dcgmi: not found"}, 2) == (
        "skip", "DCGM is not installed (no dcgmi on the node: sh: dcgmi: not found)", "")
    assert dcgm.judge({"refused": "hostengine"}) == (
        "fail", "DCGM's host engine is not running and dcgmi could not start an embedded one: ", dcgm.HOSTENGINE_REMEDY)
    assert dcgm.judge({"refused": "mig", "message": "m"}, 4) == (
        "warn", "DCGM refuses to run its diagnostic on GPUs in MIG mode (%s): m" % dcgm.MIG_SOURCE, dcgm.MIG_REMEDY)
    assert dcgm.judge({"refused": "runtime_error"}, 3) == (
        "fail", "dcgmi diag -r 3 could not run: dcgmi gave no reason", "run `dcgmi diag -r 3` on the node and fix what it reports")
    assert dcgm.judge({"ran": False}) == ("fail", "dcgmi diag -r 1: the diagnostic did not run",
                                          "run `dcgmi diag -r 1 -j` on the node by hand and check its output")
    assert dcgm.judge({"ran": True, "error": "boom", "tests": []}) == (
        "fail", "dcgmi diag -r 1: boom", "run `dcgmi diag -r 1 -j` on the node by hand and check its output")


def test_judge_failure_remedy_with_and_without_the_isolate_note():
    doc = _run([t4("software", [gpu_result(0, "Fail", [(REMAP, 80, 10, 6)]), gpu_result(1, "Fail")], "Fail")], None)
    doc["metadata"] = {}
    tail = ("rerun `dcgmi diag -r 2` (without -j) for DCGM's next steps on each failure and follow them (reset or "
            "replace the GPU, reseat or fix its PCIe link)")
    assert dcgm.judge(parse(doc, rc=226), 2) == (
        "fail", "dcgmi diag -r 2 failed: GPU 0 software (Deployment): %s; GPU 1 software (Deployment): no message from "
                "DCGM" % REMAP, "drain the node; " + tail)
    assert dcgm.judge(parse(doc, rc=205), 2)[2] == (
        "drain the node; DCGM asks to drain the GPU (exit 205, DCGM_ST_NVVS_ISOLATE_ERROR). " + tail)


def test_judge_labels_use_info_when_there_is_no_warning():
    doc = _run([t4("software", [gpu_result(0, "Fail", info=["link trained at x8"])], "Fail")])
    assert dcgm.judge(parse(doc), 1)[1] == ("dcgmi diag -r 1 failed (DCGM 4.6.0): GPU 0 software (Deployment): "
                                            "link trained at x8")


def test_judge_warnings_are_all_listed():
    doc = _run([t4("software", [gpu_result(0, "Fail", [(PERSIST, 29, 8, 5)]),
                                gpu_result(1, "Fail", [("graphics", 25, 8, 5)])], "Fail")])
    assert dcgm.judge(parse(doc), 1)[1] == ("dcgmi diag -r 1 passed with warnings (DCGM 4.6.0): GPU 0 software "
                                            "(Deployment): %s; GPU 1 software (Deployment): graphics" % PERSIST)


def test_judge_all_skipped_remedy_and_unknown_exit_status():
    doc = _run([t4("software", [gpu_result(0, "Skip")], "Skip")])
    assert dcgm.judge(parse(doc), 2)[2] == ("check why DCGM skipped its tests (`dcgmi diag -r 2 -v`; an unsupported GPU "
                                            "or driver skips them)")
    assert dcgm.judge(parse(V4_PASS_L1, rc=3), 1) == (
        "warn", "dcgmi diag -r 1 exited 3 (not a DCGM status) although every test passed (DCGM 4.6.0)",
        "run `dcgmi diag -r 1` on the node by hand and check its output")
    assert dcgm.judge(parse(V4_PASS_L1, rc=None), 1)[0] == "pass"


def test_stderr_defaults_to_nothing():
    assert dcgm.parse_diag("", rc=127)["message"] == "exit status 127"
