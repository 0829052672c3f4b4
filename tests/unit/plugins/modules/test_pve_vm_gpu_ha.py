# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""pve_vm_gpu restarting an HA-managed VM (issue 39 point 2).

For an HA resource qemu-server's vm_shutdown/vm_start only queue a request with ha-manager ('hastop'/'hastart' tasks
that end at once); pvesim plays that (tests/lab/test_pvesim_upstream_rules.py), so the module must wait for the VM.
"""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.modules import pve_vm_gpu

from pvesim_inproc import cluster, module_runner, use_pvesim  # pylint: disable=import-error


@pytest.fixture
def sim(monkeypatch):
    fx = cluster()
    fx["ha_seconds"] = 0.3
    fx["vms"]["100"]["ha"] = {"state": "started"}
    return use_pvesim(monkeypatch, fx)


@pytest.fixture
def run(run_module):
    return module_runner(run_module, pve_vm_gpu)


def test_ha_vm_is_restarted_for_real_before_restarted_is_reported(sim, run):
    res = run({"vmid": 100, "gpus": [{"mapping": "a100", "pcie": True}], "restart": "if_needed"})
    assert res.get("failed") is not True, res
    vm = sim.vms[100]
    # The new hostpci entry reached the running VM: it went through a real stop and start.
    assert vm["status"] == "running" and vm["pending"] == {} and vm["devices"] == ["0000:01:00.0"], vm
    assert (res["restarted"], res["pending"], res["ha_managed"]) == (True, False, True), res
    assert vm["ha"]["service"] == "started"
    types = [t["type"] for t in sim.tasks.values()]
    assert types.count("hastop") == 1 and types.count("hastart") == 1 and "qmstart" not in types, types


def test_ha_start_that_fails_is_reported_with_the_service_state(sim, run):
    # pcie=1 on a VM without q35 fails its start; HA puts the service into 'error'.
    sim.vms[100]["conf"].pop("machine")
    res = run({"vmid": 100, "gpus": [{"mapping": "a100", "pcie": True}], "restart": "if_needed", "precheck": False})
    assert res["failed"] is True and res["ha_managed"] is True, res
    assert res["msg"] == ("VM 100 on node pve1 (HA-managed) did not become running: HA service vm:100 is in state "
                          "'error' (ha-manager status shows why) (the new hostpci configuration is saved; the VM is "
                          "stopped)")
    # The failed result still names the restart it set out to do: the VM was shut down, its start is what failed.
    assert res["disruptions"] == ["shut down VM 100 on node pve1 through HA (stopped after 180 s if still running)",
                                  "start VM 100 on node pve1 through HA"]


def test_vm_without_ha_says_so(sim, run):
    res = run({"vmid": 102, "gpus": [{"mapping": "a100"}]}, check_mode=True)
    assert res["ha_managed"] is False and res["restarted"] is False, res


def test_an_ha_restart_is_named_as_going_through_ha(sim, run):
    res = run({"vmid": 100, "gpus": [{"mapping": "a100", "pcie": True}], "restart": "if_needed"}, check_mode=True)
    assert res["disruptions"] == ["shut down VM 100 on node pve1 through HA (stopped after 180 s if still running)",
                                  "start VM 100 on node pve1 through HA"], res
