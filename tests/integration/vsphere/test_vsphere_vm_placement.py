"""vsphere_vm_vgpu (its main(), in this process) against vSphere as it is found (issue 40): where a changed VM starts (point 2), what a host's GPUs can
place (points 3 and 7), the hardware version several vGPUs need (point 4), VMs of the VM Service, and transport faults
in the middle of a session (point 9). The stand-in enforces each rule as vCenter does (lab/vcsim/placement.go,
faults.go), so a module that ignores one leaves a VM off or crashes, as it would on vCenter."""

from __future__ import annotations

import pytest

from pyVmomi import vim

from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api
from ansible_collections.gpuops.provision.plugins.modules import vsphere_vm_vgpu

pytestmark = pytest.mark.slow

DIRECT = {"graphics_type": "sharedDirect"}
# DC0_C0: H0 two A100s, H1 two L40S, H2 one L40S, all set up for vGPU; H2's VM is old (hardware 13), H1's second VM
# belongs to the VM Service.
FIXTURE = {"defaults": DIRECT,
           "hosts": {"DC0_C0_H0": {"model": "a100-40"}, "DC0_C0_H1": {"model": "l40s"},
                     "DC0_C0_H2": {"model": "l40s", "count": 1}},
           "vm_hardware_version": {"DC0_C0_H2_VM0": "vmx-13"},
           "vm_service_vms": ["DC0_C0_H1_VM1"]}


@pytest.fixture
def sim(vcsim_factory):
    return vcsim_factory(hosts=3, vms=2, fixture=FIXTURE)


def vm(sim, name):
    with sim.connect() as s:
        row = [r for r in s.vms(props=["name", "runtime.host", "runtime.powerState", "config.hardware.device",
                                       "config.extraConfig", "config.version"]) if r["name"] == name][0]
        host = s.collect(vim.HostSystem, ["name"], objects=[row["runtime.host"]])[0]["name"]
        return dict(host=host, power=row["runtime.powerState"], version=row["config.version"],
                    profiles=sorted(d["profile"] for d in api.vm_vgpus(row["config.hardware.device"])),
                    extra={o.key: o.value for o in row["config.extraConfig"] or [] if o.key.startswith("gpuops.")})


def set_drs(sim, vm_name=None, behavior=None, enabled=True):
    with sim.connect() as s:
        cluster = s.collect(vim.ClusterComputeResource, ["name"])[0]["obj"]
        spec = vim.cluster.ConfigSpecEx(drsConfig=vim.cluster.DrsConfigInfo(enabled=enabled))
        if vm_name:
            obj = [r for r in s.vms(props=["name"]) if r["name"] == vm_name][0]["obj"]
            spec.drsVmConfigSpec = [vim.cluster.DrsVmConfigSpec(
                operation="add", info=vim.cluster.DrsVmConfigInfo(key=obj, behavior=behavior))]
        s.call_task("drs", cluster.ReconfigureComputeResource_Task, spec=spec, modify=True)


def set_maintenance(sim, host, on=True):
    with sim.connect() as s:
        obj = s.hosts(names=[host], props=["name"])[0]["obj"]
        s.call_task("mm", obj.EnterMaintenanceMode_Task if on else obj.ExitMaintenanceMode_Task, timeout=0)


def power_off(sim, name):
    with sim.connect() as s:
        obj = [r for r in s.vms(props=["name"]) if r["name"] == name][0]["obj"]
        s.call_task("power off", obj.PowerOffVM_Task)


# ---- point 2: placement: cluster names the host the VM starts on ---------------------------------------------------

@pytest.mark.parametrize("drs", ["override_manual", "drs_off"])
def test_a_vm_drs_will_not_place_starts_on_a_host_that_offers_its_profile(sim, run_module, drs):
    name = "DC0_C0_H0_VM0"
    if drs == "override_manual":
        set_drs(sim, name, "manual")
    else:
        set_drs(sim, enabled=False)
    r = run_module(vsphere_vm_vgpu, dict(sim.auth, name=name, profiles=["grid_l40s-8q"], placement="cluster",
                                         power_policy="power_off"))
    assert not r.get("failed"), r
    assert r["start_host"] == "DC0_C0_H1" and r["actions"][-1] == "power_on on DC0_C0_H1"
    assert vm(sim, name) == dict(host="DC0_C0_H1", power="poweredOn", version="vmx-21", profiles=["grid_l40s-8q"], extra={})
    r = run_module(vsphere_vm_vgpu, dict(sim.auth, name=name, profiles=["grid_l40s-8q"], placement="cluster"))
    assert not r["changed"], r


def test_drs_places_a_vm_it_may_place_and_the_result_says_so(sim, run_module):
    name = "DC0_C0_H0_VM0"
    r = run_module(vsphere_vm_vgpu, dict(sim.auth, name=name, profiles=["grid_l40s-8q"], placement="cluster",
                                         power_policy="power_off"))
    assert not r.get("failed"), r
    assert r["start_host"] is None and r["eligible_hosts"] == ["DC0_C0_H1", "DC0_C0_H2"]
    state = vm(sim, name)
    assert state["power"] == "poweredOn" and state["host"] in ("DC0_C0_H1", "DC0_C0_H2")


def test_hosts_in_maintenance_mode_are_not_eligible(sim, run_module):
    power_off(sim, "DC0_C0_H1_VM0")
    power_off(sim, "DC0_C0_H1_VM1")
    set_maintenance(sim, "DC0_C0_H1")
    set_maintenance(sim, "DC0_C0_H2")
    r = run_module(vsphere_vm_vgpu, dict(sim.auth, name="DC0_C0_H0_VM0", profiles=["grid_l40s-8q"], placement="cluster",
                                         power_policy="power_off"), check_mode=True)
    assert r.get("failed") and "grid_l40s-8q is not offered by any host in the cluster of DC0_C0_H0" in r["msg"], r
    set_maintenance(sim, "DC0_C0_H2", on=False)
    r = run_module(vsphere_vm_vgpu, dict(sim.auth, name="DC0_C0_H0_VM0", profiles=["grid_l40s-8q"], placement="cluster",
                                         power_policy="power_off"), check_mode=True)
    assert r["eligible_hosts"] == ["DC0_C0_H2"], r


# ---- points 3 and 7: what the host's GPUs can place -----------------------------------------------------------------

def test_mixed_sizes_on_a_single_equal_size_gpu_are_refused_before_anything_changes(sim, run_module):
    name = "DC0_C0_H2_VM1"  # one L40S in equal-size mode, ESXi 8.0.2 (no mixed-size mode there)
    r = run_module(vsphere_vm_vgpu, dict(sim.auth, name=name, profiles=["grid_l40s-8q", "grid_l40s-16q"],
                                         multi_vgpu_rules="current", power_policy="power_off"))
    assert r.get("failed") and "host DC0_C0_H2: vGPUs of different sizes (grid_l40s-16q, grid_l40s-8q)" in r["msg"], r
    assert vm(sim, name)["power"] == "poweredOn" and vm(sim, name)["profiles"] == []
    # two GPUs take one size each
    r = run_module(vsphere_vm_vgpu, dict(sim.auth, name="DC0_C0_H1_VM0", profiles=["grid_l40s-8q", "grid_l40s-16q"],
                                         multi_vgpu_rules="current", power_policy="power_off"))
    assert not r.get("failed"), r
    assert vm(sim, "DC0_C0_H1_VM0")["power"] == "poweredOn"


def test_vgpu_on_a_host_in_vsga_mode_is_refused_naming_the_host(vcsim_factory, run_module):
    sim = vcsim_factory(hosts=1, vms=1, fixture={"hosts": {"DC0_C0_H0": {"model": "a100-40"}}})  # graphics type shared
    r = run_module(vsphere_vm_vgpu, dict(sim.auth, name="DC0_C0_H0_VM0", profiles=["grid_a100-8c"], power_policy="power_off"))
    assert r.get("failed") and "host DC0_C0_H0: its GPUs are in graphics type shared (VMware vSGA)" in r["msg"], r
    assert vm(sim, "DC0_C0_H0_VM0")["profiles"] == []


def test_a_host_in_mig_mode_takes_mig_backed_vgpus_only(vcsim_factory, run_module):
    sim = vcsim_factory(hosts=1, vms=1, api_version="8.0.3.0",
                        fixture={"defaults": DIRECT, "hosts": {"DC0_C0_H0": {
                            "model": "a100-40", "count": 1, "mig_gpus": ["0000:3b:00.0"],
                            "profiles": ["grid_a100-8c", "grid_a100-3-20c"]}}})
    r = run_module(vsphere_vm_vgpu, dict(sim.auth, name="DC0_C0_H0_VM0", profiles=["grid_a100-8c"], power_policy="power_off"))
    assert r.get("failed") and "all its GPUs are in MIG mode" in r["msg"], r
    r = run_module(vsphere_vm_vgpu, dict(sim.auth, name="DC0_C0_H0_VM0", profiles=["grid_a100-3-20c"], power_policy="power_off"))
    assert not r.get("failed"), r
    assert vm(sim, "DC0_C0_H0_VM0")["power"] == "poweredOn"


# ---- point 4: several vGPUs need hardware version 15 --------------------------------------------------------------

def test_multi_vgpu_on_an_old_vm_fails_before_the_power_off_or_upgrades_when_asked(sim, run_module):
    name = "DC0_C0_H2_VM0"
    args = dict(sim.auth, name=name, profiles=["grid_l40s-24q", "grid_l40s-24q"], power_policy="power_off")
    r = run_module(vsphere_vm_vgpu, args)
    assert r.get("failed") and "VM DC0_C0_H2_VM0 has hardware version vmx-13" in r["msg"], r
    assert vm(sim, name) == dict(host="DC0_C0_H2", power="poweredOn", version="vmx-13", profiles=[], extra={})
    r = run_module(vsphere_vm_vgpu, dict(args, upgrade_hardware=True))
    assert not r.get("failed"), r
    assert "upgrade_hardware vmx-13" in r["actions"]
    state = vm(sim, name)
    assert state["profiles"] == ["grid_l40s-24q", "grid_l40s-24q"] and state["version"] != "vmx-13"


# ---- VMs of the VM Service -----------------------------------------------------------------------------------------

def test_a_vm_of_the_vm_service_is_refused(sim, run_module):
    r = run_module(vsphere_vm_vgpu, dict(sim.auth, name="DC0_C0_H1_VM1", profiles=["grid_l40s-8q"], power_policy="power_off"))
    assert r.get("failed") and "belongs to the vSphere VM Service" in r["msg"], r
    assert vm(sim, "DC0_C0_H1_VM1")["power"] == "poweredOn"


# ---- point 9: transport faults in the middle of the session --------------------------------------------------------

@pytest.mark.parametrize("method, contains, mode", [
    ("PowerOffVM_Task", None, "truncate"),               # powered off, the answer lost
    ("ReconfigVM_Task", "VmiopBackingInfo", "truncate"),  # vGPUs changed, the answer lost
    ("ReconfigVM_Task", "VmiopBackingInfo", "http500"),   # an HTML error page, nothing changed
])
def test_a_fault_mid_session_is_reported_and_the_next_run_finishes_with_the_vm_running(sim, run_module, method, contains, mode):
    name = "DC0_C0_H0_VM1"
    args = dict(sim.auth, name=name, profiles=["grid_a100-8c"], power_policy="power_off")
    sim.arm_fault(method, mode, contains=contains)
    r = run_module(vsphere_vm_vgpu, args)
    assert r.get("failed"), r
    assert "VM %s:" % name in r["msg"] and "the VM is " in r["msg"] and "got no usable answer" in r["msg"], r
    assert sim.faults()[0]["fired"] == 1
    for dummy in range(2):
        r = run_module(vsphere_vm_vgpu, args)
        assert not r.get("failed"), r
    assert vm(sim, name) == dict(host="DC0_C0_H0", power="poweredOn", version="vmx-21", profiles=["grid_a100-8c"], extra={})
    r = run_module(vsphere_vm_vgpu, args)
    assert not r["changed"], r


def test_a_vm_powered_off_by_a_cut_run_is_powered_on_by_the_next_even_when_its_vgpus_are_right(sim, run_module):
    name = "DC0_C0_H0_VM1"
    args = dict(sim.auth, name=name, profiles=["grid_a100-8c"], power_policy="power_off")
    # the reconfigure is done, its answer and the power-on after it are lost: the VM stays off with its new vGPU
    sim.arm_fault("ReconfigVM_Task", "truncate", contains="VmiopBackingInfo")
    sim.arm_fault("PowerOnVM_Task", "http500")
    r = run_module(vsphere_vm_vgpu, args)
    assert r.get("failed") and "the VM is poweredOff (it was poweredOn" in r["msg"], r
    assert vm(sim, name)["power"] == "poweredOff" and vm(sim, name)["profiles"] == ["grid_a100-8c"]
    r = run_module(vsphere_vm_vgpu, args)
    assert not r.get("failed") and r["changed"], r
    assert r["actions"] == ["power_on (an earlier run powered it off)"]
    assert vm(sim, name)["power"] == "poweredOn" and vm(sim, name)["extra"] == {}
    assert not run_module(vsphere_vm_vgpu, args)["changed"]
