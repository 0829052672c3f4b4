# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How `make integration` shares its tests between two workers: tests/conftest.py's pytest_collection_modifyitems
puts the tests marked ``long`` first, so that pytest-xdist (which hands tests out in collection order: a first chunk
to each worker, then one or two at a time) starts them before the short ones instead of leaving one to run alone at
the end.

Run for real: pytest -n 2 over a scratch tree whose conftest.py takes that hook from tests/conftest.py, with tests
that write down when each starts."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

CONFTEST = """
import importlib.util
spec = importlib.util.spec_from_file_location("gpuops_tests_conftest", {path!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
pytest_collection_modifyitems = module.pytest_collection_modifyitems
"""

# Collected in this order: twelve short tests, then two marked long.
TESTS = """
import os, time
import pytest

def note(what):
    with open(os.path.join(os.path.dirname(__file__), "events.log"), "a", encoding="utf-8") as fh:
        fh.write(what + "\\n")

@pytest.mark.parametrize("n", range(12))
def test_short(n):
    note("test_short[%d]" % n)
    time.sleep(0.2)

@pytest.mark.long
def test_long_one():
    note("test_long_one")
    time.sleep(0.3)

@pytest.mark.long
def test_long_two():
    note("test_long_two")
    time.sleep(0.3)
"""


def started(tmp_path):
    """The order in which the tests started under pytest -n 2."""
    (tmp_path / "conftest.py").write_text(CONFTEST.format(path=os.path.join(ROOT, "tests", "conftest.py")))
    (tmp_path / "test_scratch.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    long: long\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "xdist", "-p", "no:cacheprovider",
                           str(tmp_path)], cwd=str(tmp_path), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "14 passed" in proc.stdout, proc.stdout
    return (tmp_path / "events.log").read_text().splitlines()


def test_the_long_tests_start_first_on_both_workers(tmp_path):
    events = started(tmp_path)
    assert sorted(events) == sorted(["test_long_one", "test_long_two"] + ["test_short[%d]" % n for n in range(12)])
    # Collected last, started early: both before the second half of the short tests (without the sort, after all
    # of them). xdist's first chunks here are two tests a worker: the long ones go to one worker, run one after the
    # other, while the other worker runs short ones.
    for name in ("test_long_one", "test_long_two"):
        assert events.index(name) < events.index("test_short[6]"), events
