# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Makefile's test targets, read from the Makefile itself: `make test` (what CI runs) and `make test-containers`
(Molecule, installed-lab) together run every suite under tests/ and Molecule, so that splitting them for CI's time
limit dropped nothing; and `make test` leaves out only the container tests."""

from __future__ import annotations

import os
import re
import shlex

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def makefile():
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as fh:
        return fh.read()


def rule(name):
    """(prerequisites, recipe) of the Makefile rule ``name``: the recipe's lines joined where they end in a backslash."""
    text = makefile()
    match = re.search(r"^%s:([^\n]*)\n((?:\t[^\n]*\n)*)" % re.escape(name), text, re.M)
    assert match, "no rule %r in the Makefile" % name
    recipe = match.group(2).replace("\\\n", " ")
    return match.group(1).split(), [line.strip() for line in recipe.splitlines() if line.strip()]


def phase_targets(name):
    """The make targets of the stages that rule ``name`` hands to tools/test_phases.py."""
    _prereqs, recipe = rule(name)
    calls = [line for line in recipe if "tools/test_phases.py" in line]
    assert len(calls) == 1, recipe
    args = shlex.split(calls[0].split("tools/test_phases.py", 1)[1])
    return {target for stage in args for job in stage.split("+") for target in job.split()}


def suites(targets):
    """The tests/<suite> folders (with their -m marker expression) and Molecule that ``targets`` run."""
    out = set()
    for target in targets:
        for line in rule(target)[1]:
            for suite, rest in re.findall(r"pytest (tests/\w+)([^;&|]*)", line):
                marker = re.search(r' -m "([^"]+)"| -m (\w+)', rest)  # pytest's marker option, after the suite
                out.add((suite, (marker.group(1) or marker.group(2)) if marker else None))
            if "tools/molecule_all.py" in line:
                out.add(("molecule", None))
    return out


def test_make_test_and_test_containers_run_every_suite():
    found = suites(phase_targets("test") | phase_targets("test-containers"))
    folders = sorted(d for d in os.listdir(os.path.join(ROOT, "tests"))
                     if os.path.isdir(os.path.join(ROOT, "tests", d)) and d not in ("helpers", "__pycache__"))
    assert folders == ["installed", "integration", "lab", "unit"]
    for folder in folders:
        assert any(suite == "tests/" + folder for suite, _marker in found), (folder, found)
    # tests/installed in two halves: without the lab (make installed) and with it (make installed-lab)
    assert {("tests/installed", "not lab"), ("tests/installed", "lab")} <= found
    assert ("molecule", None) in found


def test_make_test_leaves_out_only_the_container_tests():
    in_ci = phase_targets("test")
    assert {"sanity", "lint", "typecheck", "units", "lab-tests", "installed", "integration", "build", "docs-check"} <= in_ci
    assert not {"molecule", "installed-lab"} & in_ci
    assert {"molecule", "installed-lab"} <= phase_targets("test-containers")
    assert rule("test-all")[0] == ["test", "test-containers"]


def test_ci_runs_make_test():
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as fh:
        commands = [line.strip() for line in fh if line.strip() and not line.startswith("#")]
    assert commands[-1] == "exec make test"
