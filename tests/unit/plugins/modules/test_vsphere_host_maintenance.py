# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vsphere_host_maintenance in-process against a vCenter in memory (tests/helpers/vsphere_fake.py): the guest
shutdowns, the entry into and exit from maintenance mode and the VMs powered on again are its disruptions, named
first in its diff; and what maintenance.disruptions_of says for VMs DRS migrates."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._common import disruption
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import maintenance
from ansible_collections.gpuops.provision.plugins.modules import vsphere_host_maintenance

from vsphere_fake import AUTH, Host, Vm, use_fake_vcenter  # pylint: disable=import-error


@pytest.fixture(name="vcenter")
def fixture_vcenter(monkeypatch):
    calls = []
    esx1, esx2 = Host(calls, "esx1"), Host(calls, "esx2")
    # A standalone host: DRS cannot move its powered-on vGPU VM, so vgpu_vms=shutdown shuts it down.
    vms = [Vm(calls, "train-01", esx1, profiles=["grid_a100-40c"]), Vm(calls, "idle-01", esx1, power="poweredOff"),
           Vm(calls, "train-02", esx2, profiles=["grid_a100-40c"])]
    inv = use_fake_vcenter(monkeypatch, [esx1, esx2], vms)
    inv["calls"] = calls
    return inv


def run(run_module, check_mode=False, **args):
    return run_module(vsphere_host_maintenance, dict(AUTH, esxi_hostname=["esx1"], _ansible_diff=True, **args),
                      check_mode=check_mode)


ENTER = ["shut down the guest of VM train-01 on host esx1 (VMware Tools, up to 300 s)",
         "enter maintenance mode on host esx1"]


def test_check_mode_names_the_shutdown_and_the_entry_before_the_diff(vcenter, run_module):
    res = run(run_module, check_mode=True, vgpu_vms="shutdown")
    assert res["changed"] is True and vcenter["calls"] == [], res
    # The powered-off VM is not touched, the other host's VM neither.
    assert res["disruptions"] == ENTER and res["hosts"][0]["disruptions"] == ENTER
    assert res["diff"] == [{"prepared": disruption.prepared(ENTER)},
                           {"before": {"esx1": {"in_maintenance_mode": False}},
                            "after": {"esx1": {"in_maintenance_mode": True}}}]


def test_enter_and_exit_report_what_they_did_and_a_rerun_disrupts_nothing(vcenter, run_module):
    res = run(run_module, vgpu_vms="shutdown", shutdown_timeout=120)
    assert res["changed"] is True, res
    assert res["disruptions"] == [ENTER[0].replace("300 s", "120 s"), ENTER[1]]
    assert [c for c in vcenter["calls"] if c[0] != "extraConfig"] == [
        ("shutdown_guest", "train-01"), ("enter_maintenance_mode", "esx1")]
    again = run(run_module, vgpu_vms="shutdown")
    assert again["changed"] is False and again["disruptions"] == [] and not isinstance(again["diff"], list), again
    back = run(run_module, state="absent")
    assert back["disruptions"] == ["exit maintenance mode on host esx1",
                                   "power on VM train-01 on host esx1 (shut down for maintenance)"], back
    assert back["diff"][0] == {"prepared": disruption.prepared(back["disruptions"])}
    assert run(run_module, state="absent")["disruptions"] == []


def test_vms_drs_migrates_are_named_between_the_shutdowns_and_the_entry():
    # _enter shuts the guests down first; DRS moves the others while EnterMaintenanceMode_Task runs.
    entry = dict(name="esx9", in_maintenance_mode=False, restore=[],
                 vms=[dict(name="a", fate="migrate"), dict(name="b", fate="shutdown"), dict(name="c", fate="migrate")])
    assert maintenance.disruptions_of(entry, "present", 60) == [
        "shut down the guest of VM b on host esx9 (VMware Tools, up to 60 s)",
        "migrate VM a off host esx9 (DRS, while the host enters maintenance mode)",
        "migrate VM c off host esx9 (DRS, while the host enters maintenance mode)",
        "enter maintenance mode on host esx9"]
    # Already in: nothing; taking it out powers on only the VMs still off.
    assert maintenance.disruptions_of(dict(entry, in_maintenance_mode=True), "present", 60) == []
    restore = [{"name": "b", "runtime.powerState": "poweredOff"}, {"name": "d", "runtime.powerState": "poweredOn"}]
    assert maintenance.disruptions_of(dict(entry, in_maintenance_mode=False, restore=restore), "absent", 60) == [
        "power on VM b on host esx9 (shut down for maintenance)"]
