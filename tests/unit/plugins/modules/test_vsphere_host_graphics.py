# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vsphere_host_graphics module in-process: the vSphere session is faked at its PropertyCollector read (collect),
so the module's own host selection, planning and write path run; writes are recorded, nothing connects."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api
from ansible_collections.gpuops.provision.plugins.modules import vsphere_host_graphics
from vsphere_fake import AUTH, Host, Vm, use_fake_vcenter  # pylint: disable=import-error

PCI = "0000:3b:00.0"


@pytest.fixture
def calls():
    return []


@pytest.fixture
def inventory(monkeypatch, calls):
    esx1 = Host(calls, "esx1", gpus=(PCI,))
    return use_fake_vcenter(monkeypatch, [esx1, Host(calls, "esx2", gpus=(PCI,)), Host(calls, "esx3")],
                            [Vm(calls, "vm-on", esx1), Vm(calls, "vm-off", esx1, power="poweredOff")],
                            clusters=[("C0", "domain-c1")])


@pytest.fixture
def run(run_module, inventory):
    def _run(args, check_mode=False):
        full = dict(AUTH, _ansible_diff=True)
        full.update(args)
        return run_module(vsphere_host_graphics, full, check_mode=check_mode)
    return _run


def warnings(res):
    return [w["event"]["msg"] if isinstance(w, dict) else w for w in res.get("warnings", [])]


def by_name(res):
    return {h["name"]: h for h in res["hosts"]}


def writes(calls):
    return [c for c in calls if c[0] == "UpdateGraphicsConfig"]


def test_check_mode_reports_the_change_and_writes_nothing(run, calls):
    res = run({"esxi_hostname": ["esx1", "esx2"], "default_graphics_type": "sharedDirect"}, check_mode=True)
    assert res["changed"] is True and calls == [], res
    hosts = by_name(res)
    assert hosts["esx1"]["before"]["default_graphics_type"] == "shared"
    assert hosts["esx1"]["after"]["default_graphics_type"] == "sharedDirect" and hosts["esx1"]["running_vms"] == ["vm-on"]
    assert any("host esx1: 1 powered-on VM(s) (vm-on)" in w for w in warnings(res)), res


def test_diff_names_only_the_changed_hosts(run, inventory):
    inventory["hosts"][1].config.hostDefaultGraphicsType = "sharedDirect"
    res = run({"esxi_hostname": ["esx1", "esx2"], "default_graphics_type": "sharedDirect"}, check_mode=True)
    assert set(res["diff"]["before"]) == set(res["diff"]["after"]) == {"esx1"}, res
    assert res["diff"]["before"]["esx1"]["default_graphics_type"] == "shared"
    assert res["diff"]["after"]["esx1"]["default_graphics_type"] == "sharedDirect"
    assert by_name(res)["esx2"]["changed"] is False


def test_apply_writes_each_changed_host_once_then_rerun_is_idempotent(run, calls, inventory):
    args = {"cluster": "C0", "default_graphics_type": "sharedDirect", "assignment_policy": "consolidation",
            "devices": [{"pci_id": PCI, "graphics_type": "sharedDirect", "vgpu_mode": "mixedSize"}]}
    res = run(args)
    assert res["changed"] is True, res
    assert [(c[1], c[2].hostDefaultGraphicsType, c[2].sharedPassthruAssignmentPolicy) for c in writes(calls)] == [
        ("esx1", "sharedDirect", "consolidation"), ("esx2", "sharedDirect", "consolidation")]
    sent = writes(calls)[0][2].deviceType
    assert [(d.deviceId, d.graphicsType, d.vgpuMode) for d in sent] == [(PCI, "sharedDirect", "mixedSize")]
    hosts = by_name(res)
    assert hosts["esx3"] == dict(name="esx3", changed=False, skipped=True, before=None, after=None, running_vms=[],
                                 disruptions=[])
    assert hosts["esx1"]["after"]["vgpu_modes"] == {PCI: "mixedSize"}
    again = run(args)
    assert again["changed"] is False and len(writes(calls)) == 2, again
    assert "diff" in again and again["diff"] == {"before": {}, "after": {}}


def test_restart_xorg_restarts_only_changed_hosts(run, calls, inventory):
    inventory["hosts"][1].config.hostDefaultGraphicsType = "sharedDirect"
    res = run({"esxi_hostname": ["esx1", "esx2"], "default_graphics_type": "sharedDirect", "restart_xorg": True})
    assert res["changed"] is True
    assert [c for c in calls if c[0] == "RestartService"] == [("RestartService", "esx1", "xorg")]


def test_the_xorg_restart_is_a_disruption_named_first_in_check_mode_and_done_in_the_run(run, calls, inventory):
    inventory["hosts"][1].config.hostDefaultGraphicsType = "sharedDirect"
    args = {"esxi_hostname": ["esx1", "esx2"], "default_graphics_type": "sharedDirect", "restart_xorg": True}
    res = run(args, check_mode=True)
    # Only esx1 changes, and its GPU was in shared (vSGA) mode: Xorg is restarted there, nowhere else.
    assert calls == [] and res["disruptions"] == ["restart the Xorg service of host esx1"], res
    assert by_name(res)["esx1"]["disruptions"] == res["disruptions"] and by_name(res)["esx2"]["disruptions"] == []
    assert res["diff"][0] == {"prepared": "Disruptive actions, in order:\n1. restart the Xorg service of host esx1\n"}
    assert set(res["diff"][1]["after"]) == {"esx1"}
    done = run(args)
    assert done["disruptions"] == res["disruptions"]
    assert [c for c in calls if c[0] == "RestartService"] == [("RestartService", "esx1", "xorg")]
    again = run(args)
    assert again["changed"] is False and again["disruptions"] == [] and again["diff"] == {"before": {}, "after": {}}


def test_without_restart_xorg_or_vsga_nothing_is_disruptive(run, inventory):
    res = run({"esxi_hostname": ["esx1"], "default_graphics_type": "sharedDirect"}, check_mode=True)
    assert res["changed"] is True and res["disruptions"] == [] and not isinstance(res["diff"], list), res
    # A GPU that is neither before nor after in shared (vSGA) mode needs no Xorg (VMware KB 318047).
    inventory["hosts"][0].config.hostDefaultGraphicsType = "sharedDirect"
    res = run({"esxi_hostname": ["esx1"], "assignment_policy": "consolidation", "restart_xorg": True}, check_mode=True)
    assert res["changed"] is True and res["disruptions"] == [], res


def test_unknown_host_fails_naming_it_and_writes_nothing(run, calls):
    res = run({"esxi_hostname": ["esx1", "esx9"], "default_graphics_type": "sharedDirect"})
    assert res["failed"] is True and calls == [], res
    assert res["msg"] == "ESXi host(s) not found in scope: esx9"


def test_unknown_device_fails_naming_host_and_device_and_writes_nothing(run, calls):
    res = run({"esxi_hostname": ["esx1", "esx2"], "devices": [{"pci_id": "0000:af:00.0", "graphics_type": "shared"}]})
    assert res["failed"] is True and calls == [], res
    assert res["msg"].startswith("host esx1: graphics device 0000:af:00.0 not found"), res


def test_invalid_host_later_in_scope_stops_before_any_write(run, calls, inventory):
    inventory["hosts"][1].state = "disconnected"
    res = run({"esxi_hostname": ["esx1", "esx2"], "default_graphics_type": "sharedDirect"})
    assert res["failed"] is True and calls == [], res
    assert res["msg"] == "host esx2: disconnected, cannot change graphics settings"


def test_non_gpu_host_fails_when_not_skipped(run, calls):
    res = run({"esxi_hostname": ["esx3"], "default_graphics_type": "sharedDirect", "skip_non_gpu_hosts": False})
    assert res["failed"] is True and calls == [] and res["msg"] == "host esx3: no graphics devices", res


def test_vgpu_mode_on_a_host_older_than_8_0_3_fails_naming_it(run, calls, inventory):
    inventory["hosts"][0].version = "8.0.2"
    res = run({"esxi_hostname": ["esx1"], "devices": [{"pci_id": PCI, "vgpu_mode": "mixedSize"}]})
    assert res["failed"] is True and calls == [], res
    assert res["msg"] == ("host esx1: device %s: vgpu_mode needs vSphere 8.0 Update 3 (API 8.0.3.0): host esx1 ESXi 8.0.2" % PCI)


@pytest.mark.parametrize("args,match", [
    ({"cluster": "C0", "default_graphics_type": "vsga"}, "value of default_graphics_type must be one of: shared, sharedDirect"),
    ({"cluster": "C0", "devices": [{"pci_id": PCI}]}, "one of the following is required: graphics_type, vgpu_mode"),
    ({"default_graphics_type": "shared"}, "one of the following is required: cluster, esxi_hostname"),
])
def test_bad_options_fail_before_any_connection(run, calls, monkeypatch, args, match):
    def no_session(params):
        raise AssertionError("connected despite invalid options")
    monkeypatch.setattr(api, "Session", no_session)
    res = run(args)
    assert res["failed"] is True and calls == [], res
    assert match in res["msg"], res


def test_update_fault_names_host_and_hosts_already_changed(run, calls, inventory):
    from pyVmomi import vmodl

    def refuse(config):
        raise vmodl.fault.SystemError(reason="busy", msg="busy")
    inventory["hosts"][1].graphics_manager.UpdateGraphicsConfig = refuse
    res = run({"esxi_hostname": ["esx1", "esx2"], "default_graphics_type": "sharedDirect"})
    assert res["failed"] is True and [c[1] for c in writes(calls)] == ["esx1"], res
    assert res["msg"].startswith("host esx2: UpdateGraphicsConfig failed: ") and res["msg"].endswith("(already changed: esx1)")
