"""vsphere_gpu_info, vsphere_host_graphics and vsphere_vm_vgpu run by ansible against the vcsim-gpu stand-in."""

from __future__ import annotations

import pytest
from pyVmomi import vim

from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api

pytestmark = pytest.mark.slow

OLD_DRIVER = "535.154.02-1OEM.800.1.0.20613240"
# Cluster DC0_C0: H0 and H1 have A100s (H1 on an older driver), H2 has L40S; one VM per host, powered on.
FIXTURE = {"hosts": {"DC0_C0_H0": {"model": "a100-40"},
                     "DC0_C0_H1": {"model": "a100-40", "driver": OLD_DRIVER},
                     "DC0_C0_H2": {"model": "l40s"}}}
# The same hosts set up for vGPU (vendor shared passthrough graphics), as the host role leaves them.
VGPU_FIXTURE = {"defaults": {"graphics_type": "sharedDirect"}, "hosts": FIXTURE["hosts"]}


@pytest.fixture
def sim(vcsim_factory):
    return vcsim_factory(hosts=3, vms=1, fixture=FIXTURE)


@pytest.fixture
def vsim(vcsim_factory):
    return vcsim_factory(hosts=3, vms=1, fixture=VGPU_FIXTURE)


def graphics_state(sim):
    with sim.connect() as s:
        return {r["name"]: api.graphics_config(r["config.graphicsConfig"])
                for r in s.hosts(props=["name", "config.graphicsConfig"])}


def vm_state(sim, name):
    with sim.connect() as s:
        row = [r for r in s.vms(props=["name", "runtime.powerState", "config.hardware.device",
                                       "config.memoryReservationLockedToMax", "config.extraConfig"]) if r["name"] == name][0]
        return dict(power=row["runtime.powerState"], locked=bool(row["config.memoryReservationLockedToMax"]),
                    profiles=sorted(d["profile"] for d in api.vm_vgpus(row["config.hardware.device"])),
                    extra={o.key: o.value for o in row["config.extraConfig"] or [] if o.key.startswith("pciPassthru")})


def power_off(sim, name):
    with sim.connect() as s:
        vm = [r for r in s.vms(props=["name"]) if r["name"] == name][0]["obj"]
        s.call_task("power off", vm.PowerOffVM_Task)


def test_gpu_info_profiles_vms_and_driver_drift(sim, ansible):
    r = ansible.module("gpuops.provision.vsphere_gpu_info", dict(sim.auth, cluster="DC0_C0"))
    assert not r.get("failed"), r
    hosts = {h["name"]: h for h in r["hosts"]}
    assert set(hosts) == {"DC0_C0_H0", "DC0_C0_H1", "DC0_C0_H2"}
    assert "grid_a100-40c" in hosts["DC0_C0_H0"]["profiles"] and "grid_l40s-48q" in hosts["DC0_C0_H2"]["profiles"]
    assert [g["pci_id"] for g in hosts["DC0_C0_H0"]["gpus"]] == ["0000:3b:00.0", "0000:5e:00.0"]
    assert hosts["DC0_C0_H0"]["graphics_config"]["default_graphics_type"] == "shared"
    assert hosts["DC0_C0_H1"]["driver"]["version"] == "535.154.02"
    assert hosts["DC0_C0_H0"]["driver"]["source"] == "software_packages"
    assert r["drift"]["consistent"] is False
    assert r["drift"]["versions"] == {"550.90.05": ["DC0_C0_H0", "DC0_C0_H2"], "535.154.02": ["DC0_C0_H1"]}
    # Scope narrowed to hosts on one driver: no drift.
    r = ansible.module("gpuops.provision.vsphere_gpu_info", dict(sim.auth, esxi_hostname=["DC0_C0_H0", "DC0_C0_H2"]))
    assert r["drift"]["consistent"] is True and [h["name"] for h in r["hosts"]] == ["DC0_C0_H0", "DC0_C0_H2"]


def test_gpu_info_lists_vgpu_vms(vsim, ansible):
    power_off(vsim, "DC0_C0_H0_VM0")
    r = ansible.module("gpuops.provision.vsphere_vm_vgpu", dict(vsim.auth, name="DC0_C0_H0_VM0", profiles=["grid_a100-8c"]))
    assert r["changed"], r
    r = ansible.module("gpuops.provision.vsphere_gpu_info", dict(vsim.auth, cluster="DC0_C0", gather_driver=False))
    assert r["vgpu_vms"] == [dict(name="DC0_C0_H0_VM0", moid=r["vgpu_vms"][0]["moid"], host="DC0_C0_H0",
                                  power_state="poweredOff", profiles=["grid_a100-8c"], drs_override=None,
                                  drs_behavior="fullyAutomated")]
    assert "drift" not in r


def test_tls_is_verified(sim, ansible):
    args = dict(sim.auth)
    del args["ca_path"]
    r = ansible.module("gpuops.provision.vsphere_gpu_info", args)
    assert r.get("failed") and "TLS verification" in r["msg"]


def test_host_graphics_check_diff_apply_idempotent(sim, ansible):
    before = graphics_state(sim)
    args = dict(sim.auth, cluster="DC0_C0", default_graphics_type="sharedDirect", assignment_policy="consolidation",
                devices=[dict(pci_id="0000:5e:00.0", graphics_type="shared")])
    args["esxi_hostname"] = ["DC0_C0_H0", "DC0_C0_H1"]
    r = ansible.module("gpuops.provision.vsphere_host_graphics", args, check=True, diff=True)
    assert r["changed"] and set(r["diff"]["after"]) == {"DC0_C0_H0", "DC0_C0_H1"}
    assert r["diff"]["before"]["DC0_C0_H0"]["default_graphics_type"] == "shared"
    assert r["diff"]["after"]["DC0_C0_H0"]["devices"] == {"0000:5e:00.0": "shared"}
    assert any("powered-on VM" in w for w in r.get("warnings", [])), r
    assert graphics_state(sim) == before  # check mode changed nothing

    r = ansible.module("gpuops.provision.vsphere_host_graphics", args)
    assert r["changed"]
    after = graphics_state(sim)
    assert after["DC0_C0_H0"] == dict(default_graphics_type="sharedDirect", assignment_policy="consolidation",
                                      devices={"0000:5e:00.0": "shared"}, vgpu_modes={})
    assert after["DC0_C0_H2"] == before["DC0_C0_H2"]  # out of scope

    r = ansible.module("gpuops.provision.vsphere_host_graphics", args)
    assert not r["changed"] and not r.get("warnings")


def test_host_graphics_unknown_device_fails_without_changes(sim, ansible):
    before = graphics_state(sim)
    r = ansible.module("gpuops.provision.vsphere_host_graphics",
                       dict(sim.auth, cluster="DC0_C0", default_graphics_type="sharedDirect",
                            devices=[dict(pci_id="0000:99:00.0", graphics_type="sharedDirect")]))
    assert r.get("failed") and "DC0_C0_H0" in r["msg"] and "0000:99:00.0" in r["msg"]
    assert graphics_state(sim) == before


def test_vm_vgpu_powered_on_fails_and_changes_nothing(vsim, ansible):
    r = ansible.module("gpuops.provision.vsphere_vm_vgpu", dict(vsim.auth, name="DC0_C0_H0_VM0", profiles=["grid_a100-40c"]))
    assert r.get("failed") and "DC0_C0_H0_VM0 is poweredOn" in r["msg"]
    assert vm_state(vsim, "DC0_C0_H0_VM0") == dict(power="poweredOn", locked=False, profiles=[], extra={})


def test_vm_vgpu_power_cycle_policy(vsim, ansible):
    r = ansible.module("gpuops.provision.vsphere_vm_vgpu",
                       dict(vsim.auth, name="DC0_C0_H0_VM0", profiles=["grid_a100-40c"], power_policy="power_off"))
    assert r["changed"] and r["power_cycled"] and r["actions"][0] == "power_off" and r["actions"][-1] == "power_on"
    # C-series: 64-bit MMIO and 2 x 40 GB rounded up to a power of two, by default (issue 14 point 9).
    assert vm_state(vsim, "DC0_C0_H0_VM0") == dict(power="poweredOn", locked=True, profiles=["grid_a100-40c"],
                                                   extra={"pciPassthru.use64bitMMIO": "TRUE", "pciPassthru.64bitMMIOSizeGB": "128"})


def test_vm_vgpu_check_diff_apply_idempotent_replace_remove(vsim, ansible):
    vm = "DC0_C0_H1_VM0"
    power_off(vsim, vm)
    args = dict(vsim.auth, name=vm, profiles=["grid_a100-40c", "grid_a100-40c"], use_64bit_mmio=True, mmio_size_gb=128)
    r = ansible.module("gpuops.provision.vsphere_vm_vgpu", args, check=True, diff=True)
    assert r["changed"] and r["diff"]["before"]["profiles"] == [] and r["diff"]["after"]["profiles"] == ["grid_a100-40c"] * 2
    assert vm_state(vsim, vm) == dict(power="poweredOff", locked=False, profiles=[], extra={})

    r = ansible.module("gpuops.provision.vsphere_vm_vgpu", args, diff=True)
    assert r["changed"] and [v["profile"] for v in r["vgpus"]] == ["grid_a100-40c"] * 2
    want_extra = {"pciPassthru.use64bitMMIO": "TRUE", "pciPassthru.64bitMMIOSizeGB": "128"}
    assert vm_state(vsim, vm) == dict(power="poweredOff", locked=True, profiles=["grid_a100-40c"] * 2, extra=want_extra)

    r = ansible.module("gpuops.provision.vsphere_vm_vgpu", args)
    assert not r["changed"] and r["actions"] == []

    # Exact list: one smaller profile replaces both devices.
    r = ansible.module("gpuops.provision.vsphere_vm_vgpu", dict(vsim.auth, name=vm, profiles=["grid_a100-20c"]))
    assert r["changed"] and sorted(a.split(" (")[0] for a in r["actions"]) == [
        "add grid_a100-20c", "remove grid_a100-40c", "remove grid_a100-40c"]
    assert vm_state(vsim, vm)["profiles"] == ["grid_a100-20c"]

    # community.vmware reads back what we wrote (its trust store is pointed at the stand-in's CA).
    cv = ansible.module("community.vmware.vmware_guest_vgpu_info",
                        dict(hostname=vsim.address, port=int(vsim.port), username=vsim.info["username"],
                             password=vsim.info["password"], datacenter="DC0", name=vm),
                        env=dict(SSL_CERT_FILE=vsim.info["ca"]))
    assert not cv.get("failed"), cv
    assert [v["Vgpu"] for v in cv["vgpu"]] == ["grid_a100-20c"]

    r = ansible.module("gpuops.provision.vsphere_vm_vgpu", dict(vsim.auth, name=vm, profiles=[]))
    assert r["changed"] and vm_state(vsim, vm)["profiles"] == []


def test_vm_vgpu_unknown_profile_and_multi_rule_fail_without_changes(vsim, ansible):
    vm = "DC0_C0_H1_VM0"
    power_off(vsim, vm)
    r = ansible.module("gpuops.provision.vsphere_vm_vgpu", dict(vsim.auth, name=vm, profiles=["grid_a100-99c"]))
    assert r.get("failed") and "grid_a100-99c" in r["msg"] and "DC0_C0_H1" in r["msg"]
    r = ansible.module("gpuops.provision.vsphere_vm_vgpu", dict(vsim.auth, name=vm, profiles=["grid_a100-20c"] * 2))
    assert r.get("failed") and "full-framebuffer" in r["msg"]
    assert vm_state(vsim, vm) == dict(power="poweredOff", locked=False, profiles=[], extra={})


def test_vm_vgpu_profile_offered_by_other_host_only(vsim, ansible):
    vm = "DC0_C0_H0_VM0"
    power_off(vsim, vm)
    r = ansible.module("gpuops.provision.vsphere_vm_vgpu", dict(vsim.auth, name=vm, profiles=["grid_l40s-48q"]))
    assert r.get("failed") and "only by DC0_C0_H2" in r["msg"]
    assert vm_state(vsim, vm)["profiles"] == []
    r = ansible.module("gpuops.provision.vsphere_vm_vgpu",
                       dict(vsim.auth, name=vm, profiles=["grid_l40s-48q"], placement="cluster"), check=True)
    assert r["changed"] and r["eligible_hosts"] == ["DC0_C0_H2"]
    assert vm_state(vsim, vm)["profiles"] == []


def test_vm_lookup_errors(sim, ansible):
    r = ansible.module("gpuops.provision.vsphere_vm_vgpu", dict(sim.auth, name="nope", profiles=[]))
    assert r.get("failed") and "VM nope not found" in r["msg"]


def test_pyvmomi_session_reads_hosts_in_one_retrieval(sim):
    with sim.connect() as s:
        before = s.counter.calls
        rows = s.hosts(cluster="DC0_C0")
        # cluster lookup (view, retrieve, destroy) + host retrieval (view, retrieve, destroy)
        assert len(rows) == 3 and s.counter.calls - before == 6
        assert isinstance(rows[0]["obj"], vim.HostSystem)
