"""Unit tests for the ConfigSpec that vsphere_vm_vgpu sends (module_utils/_vsphere/vm.py; pyvmomi objects, no network),
and the module in-process against a vCenter in memory (tests/helpers/vsphere_fake.py): its disruptions."""

from __future__ import annotations

import pytest

from pyVmomi import vim

from ansible_collections.gpuops.provision.plugins.module_utils._common import disruption
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import vgpu as vsphere_vgpu
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import vm as mod
from ansible_collections.gpuops.provision.plugins.modules import vsphere_vm_vgpu

from vsphere_fake import AUTH, Host, Vm, use_fake_vcenter  # pylint: disable=import-error


def existing(key, profile):
    d = vim.vm.device.VirtualPCIPassthrough(key=key, backing=vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo(vgpu=profile))
    return dict(key=key, profile=profile, device=d)


def test_spec_replaces_profile_and_locks_memory_and_sets_mmio():
    cur = [existing(203, "grid_a100-4c")]
    plan = vsphere_vgpu.plan_vm("vm1", "esx1", cur, ["grid_a100-40c"], {"esx1": ["grid_a100-4c", "grid_a100-40c"]},
                                "poweredOn", False, {}, use_64bit_mmio=True, mmio_size_gb=64, power_policy="power_off")
    spec = mod.build_spec(plan)
    ops = [(c.operation, c.device.key, c.device.backing.vgpu) for c in spec.deviceChange]
    assert ops == [("remove", 203, "grid_a100-4c"), ("add", -100, "grid_a100-40c")]
    assert spec.memoryReservationLockedToMax is True
    assert {o.key: o.value for o in spec.extraConfig} == {"pciPassthru.use64bitMMIO": "TRUE", "pciPassthru.64bitMMIOSizeGB": "64"}
    assert mod.actions_of(plan) == ["power_off", "remove grid_a100-4c (key 203)", "add grid_a100-40c", "reserve_all_memory",
                                    "set pciPassthru.64bitMMIOSizeGB=64", "set pciPassthru.use64bitMMIO=TRUE", "power_on"]


def test_spec_for_two_new_vgpus_uses_distinct_temp_keys_and_leaves_memory_alone_when_locked():
    plan = vsphere_vgpu.plan_vm("vm1", "esx1", [], ["grid_l40s-48q"] * 2, {"esx1": ["grid_l40s-48q"]}, "poweredOff", True, {})
    spec = mod.build_spec(plan)
    assert [c.device.key for c in spec.deviceChange] == [-100, -101]
    assert spec.memoryReservationLockedToMax is None and not spec.extraConfig


# ---- the module in-process against a vCenter in memory: disruptions first ---------------------------------------------


@pytest.fixture(name="vcenter")
def fixture_vcenter(monkeypatch):
    calls = []
    esx1 = Host(calls, "esx1")
    vms = [Vm(calls, "train-01", esx1), Vm(calls, "train-02", esx1), Vm(calls, "nb-01", esx1, power="poweredOff")]
    inv = use_fake_vcenter(monkeypatch, [esx1], vms)
    inv["calls"] = calls
    return inv


def vm_args(**args):
    return dict(AUTH, _ansible_diff=True, **args)


SHUTDOWN = "shut down the guest of VM train-01 (VMware Tools, up to 300 s)"
POWER_ON = "power on VM train-01 on host esx1"


def test_check_mode_names_the_guest_shutdown_and_power_on_first_in_the_diff(vcenter, run_module):
    res = run_module(vsphere_vm_vgpu, vm_args(name="train-01", profiles=["grid_a100-40c"], power_policy="shutdown_guest"),
                     check_mode=True)
    assert res["changed"] is True and vcenter["calls"] == [], res
    # The VM runs and its vGPUs change: it is shut down (guest, 300 s default), reconfigured and powered on again.
    assert res["disruptions"] == [SHUTDOWN, POWER_ON]
    assert res["diff"][0] == {"prepared": disruption.prepared([SHUTDOWN, POWER_ON])}
    assert res["diff"][1] == {"before": res["before"], "after": res["after"]}
    assert res["diff"][1]["after"]["profiles"] == ["grid_a100-40c"]


def test_a_hard_power_off_is_named_as_such_and_a_powered_off_vm_has_no_disruption(vcenter, run_module):
    res = run_module(vsphere_vm_vgpu, vm_args(name="train-01", profiles=["grid_a100-40c"], power_policy="power_off",
                                              shutdown_timeout=60), check_mode=True)
    assert res["disruptions"] == ["power off VM train-01 (hard, no guest shutdown)", POWER_ON]
    res = run_module(vsphere_vm_vgpu, vm_args(name="nb-01", profiles=["grid_a100-40c"], power_policy="shutdown_guest"),
                     check_mode=True)
    assert res["changed"] is True and res["disruptions"] == [], res
    # Nothing disruptive: the diff is the plain before/after it always was.
    assert res["diff"] == {"before": res["before"], "after": res["after"]}


def test_the_real_run_reports_what_it_did_and_a_rerun_disrupts_nothing(vcenter, run_module):
    args = vm_args(name="train-01", profiles=["grid_a100-40c"], power_policy="shutdown_guest")
    res = run_module(vsphere_vm_vgpu, args)
    assert res["changed"] is True and res["power_cycled"] is True and res["disruptions"] == [SHUTDOWN, POWER_ON], res
    done = [c for c in vcenter["calls"] if c[0] in ("shutdown_guest", "power_on")]
    assert done == [("shutdown_guest", "train-01"), ("power_on", "train-01")]
    again = run_module(vsphere_vm_vgpu, args)
    assert again["changed"] is False and again["disruptions"] == [] and "diff" in again, again
    assert not isinstance(again["diff"], list)


def test_batch_keeps_each_vms_disruptions_and_leads_the_diff_with_all_of_them(vcenter, run_module):
    items = [{"name": "train-01", "profiles": ["grid_a100-40c"]}, {"name": "nb-01", "profiles": ["grid_a100-40c"]},
             {"name": "train-02", "profiles": ["grid_a100-40c"], "power_policy": "power_off"}]
    res = run_module(vsphere_vm_vgpu, vm_args(vms=items, power_policy="shutdown_guest"), check_mode=True)
    assert res["changed"] is True and vcenter["calls"] == [], res
    per_vm = {r["vm"]: r["disruptions"] for r in res["vms"]}
    assert per_vm == {"train-01": [SHUTDOWN, POWER_ON], "nb-01": [],
                      "train-02": ["power off VM train-02 (hard, no guest shutdown)", "power on VM train-02 on host esx1"]}
    assert res["disruptions"] == per_vm["train-01"] + per_vm["train-02"]
    assert res["diff"][0] == {"prepared": disruption.prepared(res["disruptions"])}
    assert [d["before_header"] for d in res["diff"][1:]] == ["VM train-01", "VM nb-01", "VM train-02"]


def test_a_vm_an_earlier_run_left_powered_off_is_powered_on_and_says_why(vcenter, run_module):
    from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import placement  # pylint: disable=import-outside-toplevel
    esx1 = vcenter["hosts"][0]
    # Its vGPU is right already, but the restore marker says this module powered it off and was cut off.
    vcenter["vms"].append(Vm(vcenter["calls"], "train-03", esx1, power="poweredOff", profiles=["grid_a100-40c"],
                             extra={placement.RESTORE_KEY: "vsphere_vm_vgpu"}))
    res = run_module(vsphere_vm_vgpu, vm_args(name="train-03", profiles=["grid_a100-40c"]), check_mode=True)
    assert res["changed"] is True, res
    assert res["disruptions"] == ["power on VM train-03 on host esx1 (an earlier run powered it off)"]
