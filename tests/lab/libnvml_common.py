"""What the tests of gpusim's libnvidia-ml.so.1 (lab/gpusim/libnvml, issue 42) share: the build and kernel-view
scripts loaded by path, the skip when the library cannot be built, the environment of a process on the library, and
gpusim's reason for a refused call as the library's GPUSIM_TRACE prints it."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
from pathlib import Path

import pytest
from gpusim_nvml import load_lab_script  # pylint: disable=import-error

REPO = Path(__file__).resolve().parents[2]
GPUSIM = REPO / "lab" / "gpusim"
EXPECTED = Path(__file__).resolve().parent / "libnvml_expected"

libnvml_build = load_lab_script("gpusim_libnvml_build", GPUSIM / "libnvml" / "build.py")
kernel_view = load_lab_script("gpusim_libnvml_kernel_view", GPUSIM / "libnvml" / "kernel_view.py")

NEEDS_BUILD = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("go") is None,
                                 reason="the library build needs gcc and go (nvml.h from the Go module proxy)")


def clean_env():
    """This process's environment without what selects a binding, a library or a state."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "GPUSIM_STATE", "GPUSIM_HOME", "GPUSIM_TRACE")}


def lib_env(libdir, state_path):
    """A process whose ``import pynvml`` is nvidia-ml-py on the library in ``libdir``, reading ``state_path``."""
    return dict(clean_env(), LD_LIBRARY_PATH=libdir, GPUSIM_HOME=str(GPUSIM), GPUSIM_STATE=str(state_path))


# gpusim/capi.py call(): "gpusim libnvidia-ml: <name><inputs> -> <answer tuple> <why>" (why: "" on success)
TRACE_PREFIX = re.compile(r"^gpusim libnvidia-ml: (\w+)(\(.*?\)) -> (.*)$")
REFUSED = re.compile(r"^\((\d+),\) (.*)$")


def traced_calls(text):
    """[(entry point, inputs, answer, why)] of the GPUSIM_TRACE=1 lines in ``text`` (a process's stderr)."""
    out = []
    for line in text.splitlines():
        m = TRACE_PREFIX.match(line)
        if not m:
            continue
        refused = REFUSED.match(m.group(3))
        answer, why = ((int(refused.group(1)),), refused.group(2)) if refused else (ast.literal_eval(m.group(3).strip()), "")
        out.append((m.group(1), ast.literal_eval(m.group(2)), answer, why))
    return out


def refusal(text, name):
    """(NVML return code, gpusim's reason) of the last refused call of entry point ``name`` in a GPUSIM_TRACE=1 text."""
    refused = [(answer[0], why) for called, _inputs, answer, why in traced_calls(text) if called == name and answer[0]]
    assert refused, "no refused %s in the trace:\n%s" % (name, text)
    return refused[-1]


def _expected_path(group, case):
    return EXPECTED / group / (case.replace("/", "__") + ".json")


def write_expected(group, case, doc):
    """Write ``doc`` ({"calls": [...], other keys}) as the expectation of ``case``: one call a line, for diffs."""
    path = _expected_path(group, case)
    path.parent.mkdir(parents=True, exist_ok=True)
    parts = []
    for key in sorted(doc):
        if key == "calls":
            body = "[\n" + ",\n".join("  " + json.dumps(c, sort_keys=True) for c in doc[key]) + "\n ]"
        else:
            body = json.dumps(doc[key], indent=1, sort_keys=True).replace("\n", "\n ")
        parts.append(" %s: %s" % (json.dumps(key), body))
    path.write_text("{\n" + ",\n".join(parts) + "\n}\n")


def expected(group, case, got):
    """The recorded answers of ``case`` (libnvml_expected/<group>/<case>.json): what gpusim's Python stand-in of
    nvidia-ml-py answered when the library's answers were last checked equal to it (issue 42, before the stand-in was
    deleted); a rule changed on purpose changes its expected answer there. GPUSIM_RECORD=1 writes ``got`` (the
    library's answers) as the expectation instead, and the test skips: a recording never passes."""
    if os.environ.get("GPUSIM_RECORD"):
        write_expected(group, case, got)
        pytest.skip("recorded %s" % _expected_path(group, case))
    return json.loads(_expected_path(group, case).read_text())


def assert_answers(got, want):
    """Call by call (named in the failure), then the count of calls and the rest of the document (state files)."""
    for mine, theirs in zip(want["calls"], got["calls"]):
        assert theirs == mine, "%s: expected %r, nvidia-ml-py on libnvidia-ml answered %r" % (mine[0], mine, theirs)
    assert len(got["calls"]) == len(want["calls"])
    assert {k: v for k, v in got.items() if k != "calls"} == {k: v for k, v in want.items() if k != "calls"}
