# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""_pve_rules: Proxmox VE rules beyond property strings (pure)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils import _pve_rules as R


@pytest.mark.parametrize("status,managed", [
    ({"ha": {"managed": 1, "state": "started"}}, True),
    ({"ha": {"managed": "1"}}, True),
    ({"ha": {"managed": 0}}, False),
    ({"ha": {"managed": "0"}}, False),
    ({"ha": {}}, False),
    ({"ha": None}, False),
    ({}, False),
    (None, False),
])
def test_ha_managed(status, managed):
    assert R.ha_managed(status) is managed


@pytest.mark.parametrize("status,want,verdict", [
    ({"status": "running", "ha": {"managed": 1, "state": "request_stop"}}, "stopped", ""),
    ({"status": "stopped", "ha": {"managed": 1, "state": "request_stop"}}, "stopped", None),
    ({"status": "stopped", "ha": {"managed": 1, "state": "stopped"}}, "stopped", None),
    ({"status": "stopped", "ha": {"managed": 1, "state": "request_start"}}, "running", ""),
    ({"status": "running", "ha": {"managed": 1, "state": "request_start"}}, "running", ""),
    ({"status": "running", "ha": {"managed": 1, "state": "started"}}, "running", None),
    ({"status": "running", "ha": {"managed": 0}}, "running", None),
    ({"status": "stopped", "ha": {"managed": 0}}, "running", ""),
    ({"status": "stopped"}, "stopped", None),
])
def test_ha_verdict_waits_until_vm_and_service_agree(status, want, verdict):
    assert R.ha_verdict(status, want) == verdict


@pytest.mark.parametrize("state", ["error", "fence", "recovery", "freeze"])
@pytest.mark.parametrize("want", ["stopped", "running"])
def test_ha_verdict_names_a_stuck_service(state, want):
    assert R.ha_verdict({"vmid": 7, "status": "stopped", "ha": {"managed": 1, "state": state}}, want) == (
        "HA service vm:7 is in state '%s' (ha-manager status shows why)" % state)
    assert R.ha_verdict({"status": "stopped", "ha": {"state": state}}, want).startswith("HA service vm:? is in state")
