# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""tools/molecule_all.py: a failed scenario runs once more, the table says so, and what failed is printed at the end
of the output (where a CI tail shows it: driver_roll failed in CI with its cause cut out of the tail)."""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import molecule_all  # noqa: E402  pylint: disable=import-error,wrong-import-position

FAILED_LOG = "TASK [Roll the nodes] ***\nok: [a]\nfatal: [drv-node-2]: FAILED! => {\"msg\": \"turn timeout\"}\nPLAY RECAP\n"


def fake_run(outcomes):
    """run() stand-in: the rc of each (scenario, attempt) from outcomes, a log written as molecule would."""
    def run(name, logs, _molecule, attempt=1):
        rc = outcomes.get((name, attempt), 0)
        path = os.path.join(logs, "%s.%d.log" % (name, attempt))
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(FAILED_LOG if rc else "PLAY RECAP\nok\n")
        return name, rc, 1.0, path, attempt
    return run


def test_a_scenario_that_fails_once_passes_on_retry_and_its_failure_is_printed_last(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(molecule_all, "run", fake_run({("driver_roll", 1): 2}))
    rc = molecule_all.main(["--logs", str(tmp_path), "driver_roll", "driver_pin"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "driver_roll          passed on retry" in out and "driver_pin           passed " in out
    tail = out[out.index("molecule: 2 scenarios"):]
    assert "molecule: driver_roll failed its first run (rc=2" in tail
    assert "    TASK [Roll the nodes] ***" in tail and 'fatal: [drv-node-2]: FAILED! => {"msg": "turn timeout"}' in tail


def test_a_scenario_that_fails_twice_fails_the_run(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(molecule_all, "run", fake_run({("driver_roll", 1): 2, ("driver_roll", 2): 2}))
    assert molecule_all.main(["--logs", str(tmp_path), "driver_roll"]) == 1
    assert "driver_roll          FAILED rc=2" in capsys.readouterr().out
    monkeypatch.setattr(molecule_all, "run", fake_run({("driver_roll", 1): 2}))
    assert molecule_all.main(["--logs", str(tmp_path), "--retries", "0", "driver_roll"]) == 1


def test_failing_lines_keep_the_task_of_each_failure_once():
    text = "TASK [a] ***\nfatal: [h1]: FAILED! => x\nfatal: [h2]: FAILED! => y\nTASK [b] ***\nok\n"
    assert molecule_all.failing_lines(text) == ["TASK [a] ***", "fatal: [h1]: FAILED! => x", "fatal: [h2]: FAILED! => y"]
