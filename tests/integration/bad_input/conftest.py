"""Prints the bad-input suite's counts (build/bad_input/<module>.json, written by the tests) after the run."""

from __future__ import annotations

import glob
import json
import os

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                       "build", "bad_input")


def pytest_sessionstart(session):
    if not hasattr(session.config, "workerinput"):  # the controller, not an xdist worker
        for path in glob.glob(os.path.join(RESULTS, "*.json")):
            os.remove(path)


def pytest_terminal_summary(terminalreporter):
    rows = []
    for path in sorted(glob.glob(os.path.join(RESULTS, "*.json"))):
        with open(path, encoding="utf-8") as handle:
            rows.append((os.path.basename(path)[:-5], json.load(handle)))
    if not rows:
        return
    terminalreporter.section("bad input (issue 15)")
    total = {"tried": 0, "refused": 0, "unchanged": 0}
    for name, counts in rows:
        terminalreporter.write_line("%-24s tried %4d   refused cleanly %4d   state unchanged %4d"
                                    % (name, counts["tried"], counts["refused"], counts["unchanged"]))
        for key in total:
            total[key] += counts[key]
    terminalreporter.write_line("%-24s tried %4d   refused cleanly %4d   state unchanged %4d"
                                % ("all", total["tried"], total["refused"], total["unchanged"]))
