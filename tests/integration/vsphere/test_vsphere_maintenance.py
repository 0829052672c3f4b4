"""Maintenance mode of GPU hosts with powered-on vGPU VMs (issue 40 point 1), against the stand-in's
EnterMaintenanceMode_Task that waits on what DRS cannot move (lab/vcsim/maintenance.go, KB 88271): the module
(vsphere_host_maintenance, in this process) and the host role's scheduler reboot (ansible-playbook)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api
from ansible_collections.gpuops.provision.plugins.modules import vsphere_vm_vgpu

pytestmark = pytest.mark.slow

# DC0_C0: two A100 hosts set up for vGPU; one VM each, powered on.
FIXTURE = {"defaults": {"graphics_type": "sharedDirect"}, "hosts": {"DC0_C0_*": {"model": "a100-40"}}}


@pytest.fixture
def sim(vcsim_factory):
    return vcsim_factory(hosts=2, vms=1, fixture=FIXTURE)


def give_vgpu(sim, run_module, vm="DC0_C0_H0_VM0", drs_behavior="partiallyAutomated"):
    r = run_module(vsphere_vm_vgpu, dict(sim.auth, name=vm, profiles=["grid_a100-8c"], power_policy="power_off",
                                         drs_behavior=drs_behavior))
    assert not r.get("failed"), r


def state(sim):
    with sim.connect() as s:
        hosts = {r["moid"]: r for r in s.hosts(props=["name", "runtime.inMaintenanceMode"])}
        vms = {r["name"]: dict(host=hosts[r["runtime.host"]._moId]["name"], power=r["runtime.powerState"])
               for r in s.vms(props=["name", "runtime.host", "runtime.powerState"])}
        cluster = api.host_clusters(s.hosts(props=["name", "parent"]))[0]
        options = api.cluster_drs(s, objects=[cluster])[cluster._moId]["options"]
        return dict(mm={h["name"]: h["runtime.inMaintenanceMode"] for h in hosts.values()}, vms=vms,
                    option=options.get("VgpuMMAutomationTimeoutSecs"),
                    hotmigrate=api.vcenter_setting(s, "vgpu.hotmigrate.enabled"))


def maintenance(sim, run_module, check_mode=False, **args):
    from ansible_collections.gpuops.provision.plugins.modules import vsphere_host_maintenance  # pylint: disable=import-outside-toplevel
    return run_module(vsphere_host_maintenance, dict(sim.auth, esxi_hostname=["DC0_C0_H0"], _ansible_diff=True, **args),
                      check_mode=check_mode)


def test_a_vgpu_vm_drs_would_not_move_fails_the_plan_naming_it_and_nothing_is_touched(sim, run_module):
    give_vgpu(sim, run_module)
    before = state(sim)
    r = maintenance(sim, run_module)
    assert r.get("failed"), r
    assert "host DC0_C0_H0: VM DC0_C0_H0_VM0 (vGPU grid_a100-8c, DRS partiallyAutomated) would stay" in r["msg"]
    assert "VgpuMMAutomationTimeoutSecs=-1 on the cluster (is None)" in r["msg"]
    assert "vgpu.hotmigrate.enabled=true on vCenter (is None)" in r["msg"]
    assert state(sim) == before and not before["mm"]["DC0_C0_H0"]


def test_shutdown_takes_the_host_in_and_the_exit_powers_the_vm_on_again(sim, run_module):
    give_vgpu(sim, run_module)
    r = maintenance(sim, run_module, check_mode=True, vgpu_vms="shutdown")
    assert r["changed"] and r["hosts"][0]["actions"] == ["shutdown_guest DC0_C0_H0_VM0", "enter_maintenance_mode"], r
    assert r["hosts"][0]["vms"][0]["fate"] == "shutdown" and r["diff"][1]["after"] == {"DC0_C0_H0": {"in_maintenance_mode": True}}
    # The disruptions come first in the diff, in an entry of their own (issue 41).
    assert r["disruptions"][0] == "shut down the guest of VM DC0_C0_H0_VM0 on host DC0_C0_H0 (VMware Tools, up to 300 s)"
    assert r["disruptions"][-1] == "enter maintenance mode on host DC0_C0_H0", r
    assert r["diff"][0]["prepared"].startswith("Disruptive actions, in order:\n1. shut down the guest of VM DC0_C0_H0_VM0")
    r = maintenance(sim, run_module, vgpu_vms="shutdown")
    assert not r.get("failed") and r["changed"], r
    now = state(sim)
    assert now["mm"]["DC0_C0_H0"] and now["vms"]["DC0_C0_H0_VM0"] == dict(host="DC0_C0_H0", power="poweredOff")
    # the plain VM of H1 was never touched
    assert now["vms"]["DC0_C0_H1_VM0"]["power"] == "poweredOn"
    assert not maintenance(sim, run_module, vgpu_vms="shutdown")["changed"]
    r = maintenance(sim, run_module, state="absent")
    assert r["changed"] and r["hosts"][0]["actions"] == [
        "exit_maintenance_mode", "power_on DC0_C0_H0_VM0 (shut down for maintenance)"], r
    now = state(sim)
    assert not now["mm"]["DC0_C0_H0"] and now["vms"]["DC0_C0_H0_VM0"] == dict(host="DC0_C0_H0", power="poweredOn")
    assert not maintenance(sim, run_module, state="absent")["changed"]


def test_migrate_sets_the_two_settings_and_drs_moves_a_fully_automated_vgpu_vm(sim, run_module):
    give_vgpu(sim, run_module, drs_behavior="fullyAutomated")
    r = maintenance(sim, run_module, check_mode=True, vgpu_vms="migrate")
    assert r["settings"] == [dict(scope="DC0_C0", key="VgpuMMAutomationTimeoutSecs", before=None, after="-1"),
                             dict(scope="vCenter", key="vgpu.hotmigrate.enabled", before=None, after="true")], r
    assert state(sim)["option"] is None
    r = maintenance(sim, run_module, vgpu_vms="migrate")
    assert not r.get("failed"), r
    now = state(sim)
    assert now["option"] == "-1" and now["hotmigrate"] == "true" and now["mm"]["DC0_C0_H0"]
    assert now["vms"]["DC0_C0_H0_VM0"] == dict(host="DC0_C0_H1", power="poweredOn")


def test_migrate_still_fails_for_a_vm_pinned_to_partially_automated(sim, run_module):
    give_vgpu(sim, run_module)
    r = maintenance(sim, run_module, vgpu_vms="migrate")
    assert r.get("failed") and "DRS automation level partiallyAutomated only recommends migrations" in r["msg"], r
    assert state(sim)["option"] is None


def test_the_host_role_plans_every_maintenance_before_it_touches_a_host(vcsim_factory, ansible, tmp_path):
    sim = vcsim_factory(hosts=2, vms=1, fixture=FIXTURE)
    r = ansible.module("gpuops.provision.vsphere_vm_vgpu", dict(sim.auth, name="DC0_C0_H0_VM0", profiles=["grid_a100-8c"],
                                                                drs_behavior="partiallyAutomated", power_policy="power_off"))
    assert not r.get("failed"), r
    book = tmp_path / "host.yml"
    book.write_text("- hosts: localhost\n  gather_facts: false\n  roles:\n    - role: gpuops.provision.vsphere_vgpu_host\n")
    conn = {"vsphere_vgpu_host_vcenter_hostname": sim.address, "vsphere_vgpu_host_vcenter_port": int(sim.port),
            "vsphere_vgpu_host_vcenter_username": sim.info["username"],
            "vsphere_vgpu_host_vcenter_password": sim.info["password"], "vsphere_vgpu_host_vcenter_ca_path": sim.info["ca"]}
    extra = dict(conn, vsphere_vgpu_host_cluster="DC0_C0", vsphere_vgpu_host_scheduler={"policy": "fixed_share"},
                 vsphere_vgpu_host_scheduler_reboot=True)

    def options():
        with sim.connect() as s:
            return {r["name"]: r["configManager.kernelModuleSystem"].QueryConfiguredModuleOptionString("nvidia")
                    for r in s.hosts(props=["name", "configManager.kernelModuleSystem"])}

    rc, out = ansible.playbook(str(book), extra)
    assert rc != 0
    # no host touched: no scheduler option written, no host in maintenance mode
    assert options() == {"DC0_C0_H0": "", "DC0_C0_H1": ""}
    assert not any(state(sim)["mm"].values())
    task = ansible.tasks(out)["Plan maintenance mode for every host the role takes (changes nothing)"]
    assert task["failed"] and "VM DC0_C0_H0_VM0 (vGPU grid_a100-8c, DRS partiallyAutomated) would stay" in task["msg"]

    rc, out = ansible.playbook(str(book), dict(extra, vsphere_vgpu_host_maintenance_vgpu_vms="shutdown"))
    assert rc == 0, out
    assert options() == {"DC0_C0_H0": "NVreg_RegistryDwords=RmPVMRL=0x11", "DC0_C0_H1": "NVreg_RegistryDwords=RmPVMRL=0x11"}
    now = state(sim)
    assert not any(now["mm"].values()) and now["vms"]["DC0_C0_H0_VM0"]["power"] == "poweredOn"
