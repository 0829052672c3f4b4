# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controller settings that `make test` relies on for its CPU time, as ansible-core itself reads them: the
repository's ansible.cfg (the integration tests, `make lab`) and the ansible.cfg Molecule writes from each scenario's
``provisioner.config_options``. ansible-core's default ``internal_poll_interval`` (1 ms) is a busy wait in the
controller (plugins/strategy/__init__.py, StrategyBase._wait_on_pending_results; strategy/free.py): it took about a
third of the playbooks' CPU in a MIG roll test."""

from __future__ import annotations

import configparser
import glob
import os

import pytest
import yaml
from ansible.config.manager import ConfigManager

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCENARIOS = sorted(glob.glob(os.path.join(ROOT, "molecule", "*", "molecule.yml")))


def read(path):
    """The settings ansible-core takes from the ini file at ``path`` (its own config manager, not our parsing)."""
    manager = ConfigManager(conf_file=path)
    return {name: manager.get_config_value(name) for name in ("DEFAULT_INTERNAL_POLL_INTERVAL", "ANSIBLE_PIPELINING")}


def molecule_ini(scenario, tmp_path):
    """The ansible.cfg sections Molecule writes from the scenario's config_options (one ini section per key)."""
    with open(scenario, encoding="utf-8") as fh:
        options = (yaml.safe_load(fh).get("provisioner") or {}).get("config_options") or {}
    parser = configparser.ConfigParser()
    for section, values in options.items():
        parser[section] = {key: str(value).lower() if isinstance(value, bool) else str(value) for key, value in values.items()}
    path = tmp_path / "ansible.cfg"
    with open(path, "w", encoding="utf-8") as fh:
        parser.write(fh)
    return str(path)


def test_the_repository_config_polls_every_10_ms_and_pipes_modules():
    assert read(os.path.join(ROOT, "ansible.cfg")) == {"DEFAULT_INTERNAL_POLL_INTERVAL": 0.01, "ANSIBLE_PIPELINING": True}


def test_ansible_cores_default_is_the_busy_wait(tmp_path):
    """What a file without the setting gets: the reason the setting is needed at all."""
    empty = tmp_path / "ansible.cfg"
    empty.write_text("[defaults]\n", encoding="utf-8")
    assert read(str(empty))["DEFAULT_INTERNAL_POLL_INTERVAL"] == 0.001


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: os.path.basename(os.path.dirname(p)))
def test_every_molecule_scenario_polls_every_10_ms_and_pipes_modules(scenario, tmp_path):
    assert read(molecule_ini(scenario, tmp_path)) == {"DEFAULT_INTERNAL_POLL_INTERVAL": 0.01, "ANSIBLE_PIPELINING": True}


def test_the_scenarios_are_found():
    assert len(SCENARIOS) >= 7
