# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA DCGM's diagnostic in the pre-join gate: read what ``dcgmi diag -r <level> -j`` printed and judge it;
pure logic, no I/O.

``parse_diag(stdout, stderr, rc)`` turns dcgmi's output (DCGM 3.x or 4.x JSON, or the plain-text refusals) into
``{ran, refused, message, error, version, format, rc, tests, overall}``; ``judge(parsed, level)`` gives the preflight
verdict ``(status, evidence, remedy)`` with status pass/fail/warn/skip.

Sources (NVIDIA/DCGM at the tags v3.3.9 and v4.6.0, cited again where used):
* dcgmi/Diag.cpp: the JSON writer (HelperJsonBuildOutput, HelperJsonAddResult, 3.x HelperJsonAddBasicTests), the
  status words (HelperDisplayDiagResult), the refusal path (RunDiagOnce, HelperDisplayFailureMessage), the embedded
  host engine dcgmi starts when nv-hostengine does not answer (StartDiag::DoExecuteConnectionFailure).
* nvvs/include/NvvsJsonStrings.h: the JSON keys ("DCGM GPU Diagnostic" up to 3.3.9, "DCGM Diagnostic" from 4.0).
* nvvs/src/NvidiaValidationSuite.cpp: BuildCommonGpusList (the MIG refusals), FillTestVectors (the tests per level).
* dcgmlib/dcgm_structs.h dcgmReturn_enum: dcgmi's exit status (main() returns the dcgmReturn_t, the shell sees it
  modulo 256); dcgmlib/dcgm_errors.h: the error ids in "warnings".
"""

from __future__ import annotations

import json
import re
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any, Optional, Union

STATUSES = ("pass", "fail", "warn", "skip")
# dcgmi/CommandLineParser.cpp ProcessDiagCommandLine (-r help): 1 quick, 2 medium, 3 long, 4 extended.
# nvvs/src/NvidiaValidationSuite.cpp FillTestVectors: level 1 runs only the Deployment (software) checks; level 2 adds
# the memory and PCIe tests; level 3 diagnostic, targeted stress/power, memory bandwidth (and EUD as root); level 4
# memtest and pulse test.
LEVELS = {1: "quick", 2: "medium", 3: "long", 4: "extended"}
LEVEL_SCOPE = {
    1: "Deployment checks only (the memory and PCIe tests start at level 2)",
    2: "Deployment checks, memory and PCIe tests",
    3: "Deployment checks, memory, PCIe, diagnostic and stress tests",
    4: "Deployment checks, memory, PCIe, diagnostic, stress, memtest and pulse tests",
}
# The JSON's top-level key (nvvs/include/NvvsJsonStrings.h NVVS_NAME): DCGM 4.0 renamed it.
ROOT_V4 = "DCGM Diagnostic"
ROOT_V3 = "DCGM GPU Diagnostic"
# dcgmi/Diag.cpp HelperDisplayDiagResult: Pass, Skip, Fail (a WARN result prints "Fail" unless the caller asks for
# "Warn", which the JSON writer never does), "Not Run" (left out of the JSON by HelperJsonAddResult). NVVS's own JSON
# (nvvs/include/NvvsCommon.h) says PASS|FAIL|WARN|SKIPPED; both spellings are read, case-insensitively.
STATUS_WORDS = {"pass": "pass", "passed": "pass", "fail": "fail", "failed": "fail", "warn": "warn", "warning": "warn",
                "skip": "skip", "skipped": "skip", "not run": "skip"}
# Errors for which NVVS's software plugin sets a WARN result, printed "Fail" by dcgmi -j (nvvs/src/Software.cpp:
# checkPermissions DCGM_FR_DEVICE_COUNT_MISMATCH 20, checkForGraphicsProcesses DCGM_FR_GRAPHICS_PROCESSES 25,
# checkForBadEnvVaribles DCGM_FR_BAD_CUDA_ENV 28, checkPersistenceMode DCGM_FR_PERSISTENCE_MODE 29,
# checkForSramThreshold DCGM_FR_SRAM_THRESHOLD 118). A "Fail" whose every warning carries one of them is a warn.
WARN_CODES = frozenset((20, 25, 28, 29, 118))
# dcgmi's exit status = dcgmReturn_t & 0xff (dcgmi/main_dcgmi.cpp main; dcgmlib/dcgm_structs.h).
EXIT_CODES = {
    0: "DCGM_ST_OK",
    226: "DCGM_ST_NVVS_ERROR: the diagnostic ran and reported an error",
    205: "DCGM_ST_NVVS_ISOLATE_ERROR: the diagnostic returned an error that indicates the need to drain the GPU",
    235: "DCGM_ST_CONNECTION_NOT_VALID: host engine connection invalid/disconnected",
    249: "DCGM_ST_INIT_ERROR: DCGM initialization error",
    254: "dcgmi could not parse its command line",
}
# nvvs/src/NvidiaValidationSuite.cpp BuildCommonGpusList (3.3.9 and 4.6.0 alike): the diagnostic runs under MIG only
# on one GPU whose single GPU instance and compute instance span the whole GPU (Gpu::IsMigModeDiagCompatible);
# otherwise NVVS stops with one of these, which dcgmi prints as its runtime error.
MIG_PHRASES = (
    "MIG configuration is incompatible with the diagnostic",
    "does not support enumerating GPUs with MIG mode enabled",
    "MIG is enabled, but no compute instances are configured",
    "has MIG mode enabled and one or more GPUs has MIG mode disabled",
)
MIG_SOURCE = "DCGM nvvs/src/NvidiaValidationSuite.cpp BuildCommonGpusList"
# dcgmi/Command.cpp Command::DoExecuteConnectionFailure ("Error: Unable to connect to host engine. <errorString>.",
# every subcommand but diag); dcgmi/Diag.cpp StartDiag::DoExecuteConnectionFailure ("Error: Unable to start an
# embedded host engine. <errorString>.", diag's own fallback when nv-hostengine does not answer); dcgmi/Command.cpp
# Command::Connect ("Error: unable to establish a connection to the specified host: <host>", with --host).
HOSTENGINE_PHRASES = ("Unable to connect to host engine", "Unable to start an embedded host engine")
CONNECT_PHRASE = "unable to establish a connection to the specified host"
HOSTENGINE_REMEDY = ("start DCGM's host engine: systemctl start nvidia-dcgm (systemctl enable --now nvidia-dcgm keeps "
                     "it running), then rerun the gate")
MIG_REMEDY = ("run the DCGM diagnostic while MIG is disabled, e.g. before the MIG partitions are applied (or on a "
              "drained node with MIG turned off); DCGM accepts MIG only on a single GPU whose one GPU instance and "
              "compute instance span the whole GPU")


class DcgmError(ValueError):
    """An invalid argument (the diagnostic level); the message names it."""


class _Bad(Exception):
    """The JSON is not the shape dcgmi writes; the message says where."""


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _result(rc: Optional[int]) -> dict[str, Any]:
    return {"ran": False, "refused": None, "message": "", "error": None, "version": None, "format": None,
            "rc": rc, "tests": [], "overall": None}


def _not_installed(out: str, err: str, rc: Optional[int]) -> bool:
    """No dcgmi on the node. A shell (the shell module) answers 127 and "dcgmi: command not found" (bash) or
    "dcgmi: not found" (dash); Ansible's command module gets ENOENT from exec and reports rc 2 with empty stdout and
    stderr and msg "[Errno 2] No such file or directory: b'dcgmi'" (ansible-core before 2.19) or "Error executing
    command." (later; module_utils/basic.py run_command), which a caller may pass as stderr."""
    both = out + "\n" + err
    if rc == 127 or re.search(r"dcgmi: (command )?not found", both):
        return True
    missing = not err.strip() or "No such file or directory" in err or "Error executing command" in err
    return rc == 2 and not out.strip() and missing


def _classify(message: str) -> str:
    """The refusal a runtime error (or a plain-text failure) stands for."""
    if any(p in message for p in MIG_PHRASES):
        return "mig"
    if any(p in message for p in HOSTENGINE_PHRASES):
        return "hostengine"
    return "runtime_error"


def _lines_with(text: str, phrases: Sequence[str]) -> str:
    return "\n".join(line.strip() for line in text.splitlines() if any(p in line for p in phrases))


def _json_object(out: str) -> tuple[Optional[dict[str, Any]], Optional[str]]:
    """The JSON object in stdout. dcgmi may print a line before it ("Error: unable to establish a connection to the
    specified host: ..." when --host does not answer and the embedded engine runs the diagnostic), so when the whole
    text is not JSON, the text from the first "{" to the last "}" is read, as DCGM's own test harness does
    (testing/python3/DcgmiDiag.py trimJsonText)."""
    try:
        doc = json.loads(out)
    except ValueError:
        start, end = out.find("{"), out.rfind("}")
        if start < 0 or end < start:
            shown = out.strip()
            if not shown:
                return None, "dcgmi printed nothing on stdout"
            return None, "dcgmi printed no JSON (was -j given?): %r" % shown[:200]
        try:
            doc = json.loads(out[start:end + 1])
        except ValueError as e:
            return None, "dcgmi's output is not valid JSON: %s" % e
    if not isinstance(doc, dict):
        return None, "dcgmi's JSON is a %s, not an object" % type(doc).__name__
    return doc, None


def _status(value: object, where: str, warnings: Iterable[tuple[str, Optional[int]]], warn_codes: Container[int]) -> str:
    word = STATUS_WORDS.get(str(value).strip().lower()) if isinstance(value, str) else None
    if word is None:
        raise _Bad("%s: status %r is none of Pass, Fail, Skip, Warn (dcgmi/Diag.cpp HelperDisplayDiagResult)"
                   % (where, value))
    ids = [i for _t, i in warnings]
    if word == "fail" and ids and all(i in warn_codes for i in ids):
        return "warn"
    return word


def _warnings(value: object, where: str) -> list[tuple[str, Optional[int]]]:
    """[(text, error_id)]: 3.0-3.2 wrote one string; 3.3 a list of {"warning", "error_id", ...} per GPU and, for the
    Deployment tests, {"warnings": text, ...} (3.3.9 HelperJsonAddBasicTests); 4.x a list of {"warning", "error_id",
    "error_category", "error_severity"} (4.6.0 HelperJsonAddResult). jsoncpp fills gaps in an array with null."""
    if value is None:
        return []
    if isinstance(value, str):
        return [(value.strip(), None)] if value.strip() else []
    if not isinstance(value, list):
        raise _Bad("%s: 'warnings' is a %s, not a list" % (where, type(value).__name__))
    found = []
    text: object
    for item in value:
        if item is None:
            continue
        if isinstance(item, str):
            text, code = item, None
        elif isinstance(item, dict):
            text = item.get("warning", item.get("warnings", ""))
            code = item.get("error_id")
        else:
            raise _Bad("%s: a warning is a %s, not an object" % (where, type(item).__name__))
        code = code if isinstance(code, int) and not isinstance(code, bool) else None
        found.append((_text(text).strip(), code))
    return found


def _info(value: object, where: str) -> str:
    """3.x writes one string, 4.x a list of strings (4.6.0 HelperJsonAddResult NVVS_INFO)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list):
        return "; ".join(_text(v).strip() for v in value if v is not None and _text(v).strip())
    raise _Bad("%s: 'info' is a %s, not text" % (where, type(value).__name__))


def _index(value: object) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _entity(result: Mapping[str, Any]) -> tuple[Optional[int], Optional[str]]:
    """(gpu index or None, entity label). 4.x: entity_group/entity_id (e.g. "GPU", 0; "CPU" for the CPU EUD);
    3.3: "gpu_id" ("0" per GPU, an int on a failed Deployment check); 3.0-3.2: "gpu_ids" ("0")."""
    if "entity_id" in result:
        group = result.get("entity_group") or "GPU"
        ident = _index(result.get("entity_id"))
        return (ident if group == "GPU" else None), "%s %s" % (group, result.get("entity_id"))
    ident = _index(result.get("gpu_id", result.get("gpu_ids")))
    return ident, ("GPU %d" % ident if ident is not None else None)


def _entry(category: str, name: str, result: object, where: str, warn_codes: Container[int]) -> dict[str, Any]:
    if not isinstance(result, dict):
        raise _Bad("%s: a result is a %s, not an object" % (where, type(result).__name__))
    warnings = _warnings(result.get("warnings"), where)
    gpu, entity = _entity(result)
    return {"category": category, "name": name, "gpu": gpu, "entity": entity,
            "status": _status(result.get("status"), where, warnings, warn_codes),
            "warning": "; ".join(t for t, _i in warnings if t),
            "error_ids": [i for _t, i in warnings if i is not None],
            "info": _info(result.get("info"), where)}


def _tests(root: Mapping[str, Any], key: str, warn_codes: Container[int]) -> list[dict[str, Any]]:
    categories = root.get("test_categories")
    if not isinstance(categories, list):
        raise _Bad("%s.test_categories is a %s, not a list" % (key, type(categories).__name__))
    tests = []
    for c, cat in enumerate(categories):
        if cat is None:
            continue
        where = "%s.test_categories[%d]" % (key, c)
        if not isinstance(cat, dict) or not isinstance(cat.get("tests"), list):
            raise _Bad("%s has no 'tests' list" % where)
        category = _text(cat.get("category")) or "?"
        for t, test in enumerate(cat["tests"]):
            if test is None:
                continue
            twhere = "%s (%s) tests[%d]" % (where, category, t)
            if not isinstance(test, dict) or not isinstance(test.get("name"), str):
                raise _Bad("%s has no 'name'" % twhere)
            results = test.get("results", [])
            if not isinstance(results, list):
                raise _Bad("%s: 'results' is a %s, not a list" % (twhere, type(results).__name__))
            mine = [_entry(category, test["name"], r, "%s %r" % (twhere, test["name"]), warn_codes)
                    for r in results if r is not None]
            # 4.x test_summary (Diag::HelperJsonAddTestSummary): the test's overall result with every error, those
            # without an entity too. It counts when no per-entity result failed or warned already.
            summary = test.get("test_summary")
            if isinstance(summary, dict) and "status" in summary:
                entry = _entry(category, test["name"], summary, "%s %r test_summary" % (twhere, test["name"]),
                               warn_codes)
                if entry["status"] in ("fail", "warn") and not any(m["status"] in ("fail", "warn") for m in mine):
                    entry["gpu"], entry["entity"] = None, None
                    mine.append(entry)
                elif not mine:
                    mine.append(dict(entry, gpu=None, entity=None))
            tests.extend(mine)
    return tests


def _overall(tests: Iterable[Mapping[str, Any]]) -> str:
    statuses = set(t["status"] for t in tests)
    for status in ("fail", "warn", "pass"):
        if status in statuses:
            return status
    return "skip"


def _read_run(res: dict[str, Any], doc: Mapping[str, Any], warn_codes: Container[int]) -> list[dict[str, Any]]:
    """One run's JSON (one entry of "iterations" with -n): fills res, returns the tests."""
    if ROOT_V4 in doc:
        key, res["format"] = ROOT_V4, "dcgm4"
    elif ROOT_V3 in doc:
        key, res["format"] = ROOT_V3, "dcgm3"
    else:
        raise _Bad("the JSON has neither %r (DCGM 4) nor %r (DCGM 3) at its top level (keys: %s)"
                   % (ROOT_V4, ROOT_V3, ", ".join(sorted(doc)) or "none"))
    root = doc[key]
    if not isinstance(root, dict):
        raise _Bad("%r is a %s, not an object" % (key, type(root).__name__))
    meta: Any = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    version = meta.get("version") or doc.get("version") or root.get("version")
    res["version"] = res["version"] or (_text(version) if version else None)
    # HelperDisplayFailureMessage: {NVVS_NAME: {"version", "runtime_error": <message>}} and nothing else.
    if "runtime_error" in root:
        message = _text(root["runtime_error"]).strip()
        res["refused"], res["message"] = _classify(message), message
        return []
    if "test_categories" not in root:
        raise _Bad("%r has neither 'test_categories' nor 'runtime_error'" % key)
    tests = _tests(root, key, warn_codes)
    if key == ROOT_V3 and _legacy(root):
        res["format"] = "dcgm3-legacy"  # 3.0-3.2: "gpu_ids" and one warning string per result
    return tests


def _legacy(root: Mapping[str, Any]) -> bool:
    """DCGM 3.0-3.2 (dcgmi/Diag.cpp at v3.2.6 HelperJsonAddResult) keyed the GPU "gpu_ids"; 3.3 renamed it."""
    for cat in root.get("test_categories") or []:
        for test in (cat.get("tests") or []) if isinstance(cat, dict) else []:
            for result in (test.get("results") or []) if isinstance(test, dict) else []:
                if isinstance(result, dict) and "gpu_ids" in result:
                    return True
    return False


def parse_diag(stdout: Union[str, bytes, None], stderr: Union[str, bytes, None] = "", rc: Optional[int] = 0,
               warn_codes: Optional[Iterable[int]] = None) -> dict[str, Any]:
    """What ``dcgmi diag -r <level> -j`` printed -> {ran, refused, message, error, version, format, rc, tests,
    overall}.

    refused: None (the diagnostic ran), "not_installed", "hostengine" (no host engine, and dcgmi could not start an
    embedded one), "mig" (DCGM refuses the MIG configuration) or "runtime_error" (another error dcgmi reported);
    message: DCGM's text for it. error: what is wrong with output that is none of these (not JSON, not dcgmi's
    shape). tests: [{category, name, gpu (index or None), entity, status pass|fail|warn|skip, warning, error_ids,
    info}]; overall: the worst status (fail > warn > pass > skip), None when nothing ran. warn_codes: error ids whose
    "Fail" is NVVS's WARN (default WARN_CODES)."""
    out, err = _text(stdout), _text(stderr)
    codes = WARN_CODES if warn_codes is None else frozenset(warn_codes)
    res = _result(rc)
    if _not_installed(out, err, rc):
        res["refused"] = "not_installed"
        res["message"] = (err.strip() or out.strip() or "exit status %s" % rc).splitlines()[0]
        return res
    doc, problem = _json_object(out)
    if doc is None:
        # Plain text: the embedded host engine failed, or a refusal printed without -j.
        both = out + "\n" + err
        if any(p in both for p in MIG_PHRASES):
            res["refused"], res["message"] = "mig", _lines_with(both, MIG_PHRASES)
        elif any(p in both for p in HOSTENGINE_PHRASES) or (
                CONNECT_PHRASE in both and all(CONNECT_PHRASE in line for line in both.splitlines() if line.strip())):
            res["refused"] = "hostengine"
            res["message"] = _lines_with(both, HOSTENGINE_PHRASES + (CONNECT_PHRASE,))
        else:
            res["error"] = problem
        return res
    runs: Any = doc.get("iterations") if isinstance(doc.get("iterations"), list) else [doc]
    tests = []
    try:
        for run in runs:
            if not isinstance(run, dict):
                raise _Bad("an iteration is a %s, not an object" % type(run).__name__)
            tests.extend(_read_run(res, run, codes))
            if res["refused"]:
                return res
    except _Bad as e:
        res["error"] = "dcgmi's JSON is not the shape dcgmi diag writes: %s" % e
        return res
    res["ran"], res["tests"], res["overall"] = True, tests, _overall(tests)
    return res


def _label(test: Mapping[str, Any]) -> str:
    who = "GPU %d" % test["gpu"] if test["gpu"] is not None else test["entity"] or "node"
    text = test["warning"] or test["info"] or "no message from DCGM"
    return "%s %s (%s): %s" % (who, test["name"], test["category"], text)


def _gpus(tests: Iterable[Mapping[str, Any]]) -> str:
    found = sorted(set(t["gpu"] for t in tests if t["gpu"] is not None))
    return ", ".join(str(g) for g in found) if found else "none named"


def check_level(level: object) -> int:
    if isinstance(level, bool) or not isinstance(level, int) or level not in LEVELS:
        raise DcgmError("level must be 1-4 (dcgmi diag -r: 1 quick, 2 medium, 3 long, 4 extended), got %r" % (level,))
    return level


def judge(parsed: Mapping[str, Any], level: int = 1) -> tuple[str, str, str]:
    """The gate's verdict (status, evidence, remedy) on parse_diag's result for ``dcgmi diag -r <level>``."""
    level = check_level(level)
    run = "dcgmi diag -r %d" % level
    refused, message = parsed.get("refused"), parsed.get("message") or ""
    if refused == "not_installed":
        return "skip", "DCGM is not installed (no dcgmi on the node: %s)" % (message or "not found"), ""
    if refused == "hostengine":
        return ("fail", "DCGM's host engine is not running and dcgmi could not start an embedded one: %s" % message,
                HOSTENGINE_REMEDY)
    if refused == "mig":
        return ("warn", "DCGM refuses to run its diagnostic on GPUs in MIG mode (%s): %s" % (MIG_SOURCE, message),
                MIG_REMEDY)
    if refused:
        return ("fail", "%s could not run: %s" % (run, message or "dcgmi gave no reason"),
                "run `%s` on the node and fix what it reports" % run)
    if parsed.get("error") or not parsed.get("ran"):
        return ("fail", "%s: %s" % (run, parsed.get("error") or "the diagnostic did not run"),
                "run `%s -j` on the node by hand and check its output" % run)
    tests = parsed.get("tests") or []
    rc = parsed.get("rc")
    version = " (DCGM %s)" % parsed["version"] if parsed.get("version") else ""
    failed = [t for t in tests if t["status"] == "fail"]
    if failed:
        isolate = " DCGM asks to drain the GPU (exit 205, DCGM_ST_NVVS_ISOLATE_ERROR)." if rc == 205 else ""
        return ("fail", "%s failed%s: %s" % (run, version, "; ".join(_label(t) for t in failed)),
                "drain the node;%s rerun `%s` (without -j) for DCGM's next steps on each failure and follow them "
                "(reset or replace the GPU, reseat or fix its PCIe link)" % (isolate, run))
    warned = [t for t in tests if t["status"] == "warn"]
    if warned:
        return ("warn", "%s passed with warnings%s: %s" % (run, version, "; ".join(_label(t) for t in warned)),
                "fix what DCGM warns about (persistence mode, graphics processes, CUDA environment variables)")
    passed = [t for t in tests if t["status"] == "pass"]
    if not passed:
        return ("warn", "%s ran no test%s: every result was Skip (%d)" % (run, version, len(tests)),
                "check why DCGM skipped its tests (`%s -v`; an unsupported GPU or driver skips them)" % run)
    if rc not in (0, None):
        return ("warn", "%s exited %s (%s) although every test passed%s"
                % (run, rc, EXIT_CODES.get(rc, "not a DCGM status"), version),
                "run `%s` on the node by hand and check its output" % run)
    skipped = len(tests) - len(passed)
    return ("pass", "%s passed%s: %d result(s) on GPU(s) %s%s; level %d covers %s"
            % (run, version, len(passed), _gpus(passed), ", %d skipped" % skipped if skipped else "", level,
               LEVEL_SCOPE[level]), "")
