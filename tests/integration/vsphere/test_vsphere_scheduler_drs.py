"""Issue 18 on vSphere, in-process against vcsim (govmomi v0.52.0 + our HostKernelModuleSystem, lab/vcsim/kmod.go):
the vGPU scheduler policy through the nvidia module's option string, and the per-VM DRS override of vGPU VMs
through ClusterConfigSpecEx.drsVmConfigSpec (govmomi's own ReconfigureComputeResource_Task)."""

from __future__ import annotations

import json
import re

import pytest
from pyVmomi import vim

from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api, vm as vsphere_vm
from ansible_collections.gpuops.provision.plugins.modules import (vsphere_gpu_info, vsphere_host_vgpu_scheduler,
                                                                  vsphere_vm_vgpu)

pytestmark = pytest.mark.slow

OTHER = "NVreg_EnableGpuFirmware=0"
FIXTURE = {"defaults": {"graphics_type": "sharedDirect"},
           "hosts": {"DC0_C0_H0": {"module_options": {"nvidia": OTHER}}, "DC0_C0_H1": {},
                     "DC0_C0_H2": {"driver": ""}, "DC0_H0": {}}}
FIXED = "NVreg_EnableGpuFirmware=0 NVreg_RegistryDwords=RmPVMRL=0x11"


@pytest.fixture(scope="module")
def sim(vcsim_factory):
    # DC0_C0_H2 is a GPU host without the NVIDIA driver (no nvidia module); DC0_H0 is a standalone GPU host.
    return vcsim_factory(clusters=1, hosts=3, vms=2, standalone_hosts=1, fixture=FIXTURE)


def host_state(sim, name):
    with sim.connect() as s:
        row = s.hosts(names=[name], props=["name", "summary.rebootRequired", "configManager.kernelModuleSystem"])[0]
        return row["configManager.kernelModuleSystem"].QueryConfiguredModuleOptionString("nvidia"), \
            row["summary.rebootRequired"]


def reboot(sim, name):
    with sim.connect() as s:
        host = s.hosts(names=[name], props=["name"])[0]["obj"]
        s.call_task("reboot", host.RebootHost_Task, force=True)


def scheduler(sim, run_module, check_mode=False, **args):
    return run_module(vsphere_host_vgpu_scheduler, dict(sim.auth, _ansible_diff=True, **args), check_mode=check_mode)


def test_fixed_share_is_set_verified_after_the_reboot_and_a_rerun_changes_nothing(sim, run_module):
    hosts = ["DC0_C0_H0"]
    res = scheduler(sim, run_module, check_mode=True, esxi_hostname=hosts, policy="fixed_share")
    assert res["changed"] and res["hosts"][0]["after"] == FIXED
    assert host_state(sim, "DC0_C0_H0") == (OTHER, False)  # check mode wrote nothing

    res = scheduler(sim, run_module, esxi_hostname=hosts, policy="fixed_share", production=True)
    assert not res.get("failed"), res.get("msg")
    host = res["hosts"][0]
    assert res["changed"] and host["before"] == OTHER and host["after"] == FIXED
    assert host["policy"].startswith("fixed_share") and host["policy_before"] == "best_effort"
    assert host["reboot_required"] and res["reboot_required"] == ["DC0_C0_H0"]
    assert res["diff"] == {"before": {"DC0_C0_H0": OTHER}, "after": {"DC0_C0_H0": FIXED}}
    assert host_state(sim, "DC0_C0_H0") == (FIXED, True)

    # before the reboot, verification fails naming the host: the driver may still run the old policy
    res = scheduler(sim, run_module, esxi_hostname=hosts, policy="fixed_share", verify=True)
    assert res["failed"] and "DC0_C0_H0" in res["msg"] and "reboot pending" in res["msg"]

    reboot(sim, "DC0_C0_H0")
    res = scheduler(sim, run_module, esxi_hostname=hosts, policy="fixed_share", verify=True)
    assert not res.get("failed"), res.get("msg")
    assert res["hosts"][0]["verified"] and not res["hosts"][0]["reboot_required"] and not res["changed"]

    res = scheduler(sim, run_module, esxi_hostname=hosts, policy="fixed_share")
    assert not res["changed"] and res["hosts"][0]["before"] == FIXED and res["reboot_required"] == []
    # a different policy does not verify
    res = scheduler(sim, run_module, esxi_hostname=hosts, policy="equal_share", verify=True)
    assert res["failed"] and "DC0_C0_H0" in res["msg"] and "not equal_share" in res["msg"]


@pytest.mark.parametrize("host_policies, match", [
    ({"DC0_C0_H1": {"policy": "fastest"}}, "host DC0_C0_H1: vGPU scheduler: unknown policy 'fastest'"),
    ({"DC0_C0_H1": {"policy": "equal_share", "timeslice_ms": 99}}, "host DC0_C0_H1: .*timeslice_ms 99 is outside"),
])
def test_an_invalid_policy_or_time_slice_fails_naming_the_host_before_any_write(sim, run_module, host_policies, match):
    before = host_state(sim, "DC0_C0_H1")
    # Read, not assumed: under pytest-xdist the test that sets H0 to fixed share may run on another worker.
    before_h0 = host_state(sim, "DC0_C0_H0")
    assert before_h0[0] in (OTHER, FIXED)  # best effort or fixed share: equal share is a change on H0
    # DC0_C0_H1 sorts after DC0_C0_H0, whose plan is a change: nothing may be written to either
    res = scheduler(sim, run_module, esxi_hostname=["DC0_C0_H0", "DC0_C0_H1"], policy="equal_share",
                    host_policies=host_policies)
    assert res["failed"]
    assert re.search(match, res["msg"]), res["msg"]
    assert host_state(sim, "DC0_C0_H1") == before
    assert host_state(sim, "DC0_C0_H0") == before_h0


def test_a_gpu_host_without_the_nvidia_module_fails_and_plain_hosts_are_skipped(sim, run_module):
    res = scheduler(sim, run_module, esxi_hostname=["DC0_C0_H1", "DC0_C0_H2"], policy="fixed_share")
    assert res["failed"] and "host DC0_C0_H2" in res["msg"] and "nvidia kernel module is not installed" in res["msg"]
    assert host_state(sim, "DC0_C0_H1") == ("", False)


def test_best_effort_on_a_production_host_warns(sim, run_module):
    res = scheduler(sim, run_module, check_mode=True, esxi_hostname=["DC0_C0_H1"],
                    host_policies={"DC0_C0_H1": {"policy": "best_effort", "production": True}})
    assert not res["changed"]  # best effort is the driver default: nothing to write
    assert "host DC0_C0_H1 carries production tenants and is set to best_effort" in json.dumps(res.get("warnings"))


def drs_of(sim, vm_name):
    with sim.connect() as s:
        vm = [r for r in s.vms(props=["name"]) if r["name"] == vm_name][0]
        cluster = s.collect(vim.ClusterComputeResource, ["name"])[0]["obj"]
        return api.cluster_drs(s, objects=[cluster])[cluster._moId]["overrides"].get(vm["moid"])


def test_vgpu_vm_gets_its_drs_override_and_a_rerun_reports_no_change(sim, run_module, monkeypatch):
    args = dict(sim.auth, name="DC0_C0_H0_VM0", profiles=["grid_a100-40c"], power_policy="power_off",
                drs_behavior="partiallyAutomated", _ansible_diff=True)
    res = run_module(vsphere_vm_vgpu, args, check_mode=True)
    assert res["changed"] and res["actions"][0] == "drs_override behavior=partiallyAutomated (cluster DC0_C0)"
    assert drs_of(sim, "DC0_C0_H0_VM0") is None

    res = run_module(vsphere_vm_vgpu, args)
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] and res["before"]["drs_override"] is None
    assert res["after"]["drs_override"] == {"behavior": "partiallyAutomated", "enabled": None}
    assert drs_of(sim, "DC0_C0_H0_VM0")["behavior"] == "partiallyAutomated"

    res = run_module(vsphere_vm_vgpu, args)
    assert not res["changed"] and res["actions"] == []

    # an edit: only the asked field changes
    res = run_module(vsphere_vm_vgpu, dict(args, drs_behavior="manual"))
    assert res["changed"] and drs_of(sim, "DC0_C0_H0_VM0") == {"behavior": "manual", "enabled": None}

    info = run_module(vsphere_gpu_info, dict(sim.auth, cluster="DC0_C0", gather_driver=False))
    vm = [v for v in info["vgpu_vms"] if v["name"] == "DC0_C0_H0_VM0"][0]
    assert vm["drs_override"] == {"behavior": "manual", "enabled": None} and vm["drs_behavior"] == "manual"


def test_batch_sets_the_overrides_of_one_cluster_in_one_reconfigure(sim, run_module, monkeypatch):
    calls = []
    original = api.set_drs_overrides

    def counting(session, cluster_obj, name, changes):
        calls.append((name, len(changes)))
        return original(session, cluster_obj, name, changes)

    monkeypatch.setattr(api, "set_drs_overrides", counting)
    vms = [{"name": "DC0_C0_H1_VM0", "profiles": [], "drs_behavior": "manual"},
           {"name": "DC0_C0_H1_VM1", "profiles": [], "drs_enabled": False}]
    res = run_module(vsphere_vm_vgpu, dict(sim.auth, vms=vms))
    assert not res.get("failed"), res.get("msg")
    assert [r["changed"] for r in res["vms"]] == [True, True] and calls == [("DC0_C0", 2)]
    assert drs_of(sim, "DC0_C0_H1_VM1") == {"behavior": None, "enabled": False}
    res = run_module(vsphere_vm_vgpu, dict(sim.auth, vms=vms))
    assert not res["changed"] and calls == [("DC0_C0", 2)]


def test_drs_override_on_a_standalone_host_fails_naming_the_vm(sim, run_module):
    res = run_module(vsphere_vm_vgpu, dict(sim.auth, name="DC0_H0_VM0", profiles=[], drs_behavior="manual"))
    assert res["failed"] and "VM DC0_H0_VM0" in res["msg"] and "not in a cluster" in res["msg"]


def test_plan_drs_is_pure_and_leaves_unset_fields():
    cluster = {"name": "c1", "moid": "domain-c1"}
    assert vsphere_vm.plan_drs("vm", "h", cluster, None, None, None) is None
    add = vsphere_vm.plan_drs("vm", "h", cluster, None, "manual", None)
    assert add["operation"] == "add" and add["after"] == {"behavior": "manual", "enabled": None}
    same = vsphere_vm.plan_drs("vm", "h", cluster, {"behavior": "manual", "enabled": True}, "manual", None)
    assert same["operation"] is None and not same["changed"]
    edit = vsphere_vm.plan_drs("vm", "h", cluster, {"behavior": "manual", "enabled": True}, None, False)
    assert edit["operation"] == "edit" and edit["after"] == {"behavior": "manual", "enabled": False}
    with pytest.raises(Exception, match="VM vm: .*host h is not in a cluster"):
        vsphere_vm.plan_drs("vm", "h", None, None, "manual", None)


def test_an_override_in_a_cluster_without_drs_warns(sim, run_module):
    def set_drs(enabled):
        with sim.connect() as s:
            cluster = s.collect(vim.ClusterComputeResource, ["name"])[0]["obj"]
            spec = vim.cluster.ConfigSpecEx(drsConfig=vim.cluster.DrsConfigInfo(enabled=enabled))
            s.call_task("drs", cluster.ReconfigureComputeResource_Task, spec=spec, modify=True)

    set_drs(False)
    try:
        res = run_module(vsphere_vm_vgpu, dict(sim.auth, name="DC0_C0_H2_VM0", profiles=[], drs_behavior="manual"),
                         check_mode=True)
    finally:
        set_drs(True)
    assert res["changed"]
    assert "cluster DC0_C0: DRS is disabled, so DRS does not apply the per-VM overrides of DC0_C0_H2_VM0" in \
        json.dumps(res.get("warnings"))


def test_overrides_stay_set_for_a_vm_whose_reconfigure_fails_and_for_those_not_started(sim, run_module, monkeypatch):
    names = ["DC0_C0_H1_VM0", "DC0_C0_H1_VM1"]
    with sim.connect() as s:
        for row in s.vms(props=["name", "runtime.powerState"]):
            if row["name"] in names and row["runtime.powerState"] != "poweredOff":
                s.call_task("power off", row["obj"].PowerOffVM_Task)
    original = vsphere_vm.VmVgpu.apply

    def apply(self):
        # another client makes the VM a template between the plan and its write: vcsim's ReconfigVMTask then
        # answers NotSupported (govmomi simulator/virtual_machine.go), as vCenter does
        if self.name == names[0]:
            with sim.connect() as other:
                [r for r in other.vms(props=["name"]) if r["name"] == names[0]][0]["obj"].MarkAsTemplate()
        return original(self)

    monkeypatch.setattr(vsphere_vm.VmVgpu, "apply", apply)
    vms = [{"name": n, "profiles": ["grid_a100-4c"]} for n in names]
    res = run_module(vsphere_vm_vgpu, dict(sim.auth, vms=vms, drs_behavior="partiallyAutomated", max_concurrent=1,
                                           stop_on_error=True))
    assert res["failed"] and res["failed_vms"] == [names[0]]
    failed, skipped = res["vms"]
    # the overrides were set for both before the first reconfigure, and the results say so
    assert failed["changed"] and failed["after"]["drs_override"]["behavior"] == "partiallyAutomated"
    assert skipped["skipped"] and skipped["changed"] and skipped["after"]["profiles"] == []
    assert skipped["actions"] == ["drs_override behavior=partiallyAutomated, enabled=False (cluster DC0_C0)"]
    assert [drs_of(sim, n)["behavior"] for n in names] == ["partiallyAutomated", "partiallyAutomated"]
