"""vsphere_vm_class (in this process) against the stand-in's VM class and namespace REST layer (govmomi's
vapi/namespace/simulator behind the vCenter rules of lab/vcsim/namespaces.go): the VCF / VKS workflow of issue 40."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.modules import vsphere_vm_class, vsphere_vm_vgpu

pytestmark = pytest.mark.slow

# The Supervisor cluster DC0_C0: two A100 hosts in MIG mode for vGPU; DC0_C1 (no Supervisor) has L40S. Two namespaces
# exist already; one VM of the VM Service runs on DC0_C0_H0.
FIXTURE = {"defaults": {"graphics_type": "sharedDirect"},
           "hosts": {"DC0_C0_*": {"model": "a100-40", "mig_gpus": ["0000:3b:00.0", "0000:5e:00.0"]},
                     "DC0_C1_*": {"model": "l40s"}},
           "clusters": {"DC0_C0": {"supervisor": True}},
           "namespaces": [{"name": "team-a", "cluster": "DC0_C0"}, {"name": "team-b", "cluster": "DC0_C0"}],
           "vm_service_vms": ["DC0_C0_H0_VM0"]}
CLASS = dict(name="gpu-infer", cpu_count=8, memory_mb=65536, vgpu_profiles=["grid_a100-3-20c", "grid_a100-2-10c"],
             namespaces=["team-a"])


@pytest.fixture
def sim(vcsim_factory):
    return vcsim_factory(clusters=2, hosts=2, vms=1, fixture=FIXTURE)


def classes(sim, run_module, *specs, check_mode=False, **args):
    return run_module(vsphere_vm_class, dict(sim.auth, cluster="DC0_C0", classes=list(specs), _ansible_diff=True, **args),
                      check_mode=check_mode)


def test_a_class_with_two_vgpus_bound_to_a_namespace_then_no_change(sim, run_module):
    r = classes(sim, run_module, CLASS, check_mode=True)
    assert r["changed"] and r["classes"][0]["operation"] == "create" and r["classes"][0]["before"] is None, r
    r = classes(sim, run_module, CLASS)
    assert not r.get("failed"), r
    assert r["classes"][0]["after"]["vgpu_profiles"] == ["grid_a100-2-10c", "grid_a100-3-20c"]
    assert r["device_api"] == "config_spec"  # vCenter 8.0.2: devices.vgpu_devices is deprecated
    assert [(n["name"], n["before"], n["after"]) for n in r["namespaces"]] == [
        ("team-a", [], ["gpu-infer"]), ("team-b", [], [])]
    assert r["exposure"] == dict(
        namespaces={"team-a": {"gpu-infer": ["grid_a100-2-10c", "grid_a100-3-20c"]}, "team-b": {}},
        profiles={"grid_a100-2-10c": dict(classes=["gpu-infer"], namespaces=["team-a"]),
                  "grid_a100-3-20c": dict(classes=["gpu-infer"], namespaces=["team-a"])})
    r = classes(sim, run_module, CLASS)
    assert not r["changed"], r
    # only what is given changes: memory stays, the class moves to team-b
    r = classes(sim, run_module, dict(name="gpu-infer", cpu_count=16, namespaces=["team-b"]))
    assert r["changed"] and r["classes"][0]["after"]["memory_mb"] == 65536 and r["classes"][0]["after"]["cpu_count"] == 16
    assert r["diff"]["after"]["namespaces"] == {"team-a": [], "team-b": ["gpu-infer"]}


def test_a_profile_no_host_of_the_supervisor_offers_is_refused_before_anything_changes(sim, run_module):
    r = classes(sim, run_module, dict(CLASS, name="gpu-ok", namespaces=[]),
                dict(CLASS, name="gpu-l40s", vgpu_profiles=["grid_l40s-8q"], namespaces=["team-b"]))
    assert r.get("failed"), r
    assert "VM class gpu-l40s: profile grid_l40s-8q is not offered by any host in the cluster of DC0_C0" in r["msg"]
    listed = classes(sim, run_module, dict(name="gpu-ok", state="absent"), check_mode=True)
    assert not listed["changed"]  # gpu-ok was not created either
    # a time-sliced profile on GPUs in MIG mode is refused too (the hosts offer MIG-backed ones only)
    r = classes(sim, run_module, dict(CLASS, vgpu_profiles=["grid_a100-8c"]))
    assert r.get("failed") and "grid_a100-8c is not offered" in r["msg"], r


def test_a_class_still_bound_is_not_deleted_until_it_is_unbound(sim, run_module):
    assert not classes(sim, run_module, CLASS).get("failed")
    r = classes(sim, run_module, dict(name="gpu-infer", state="absent"))
    assert r.get("failed") and "VM class gpu-infer is still bound to namespace(s) team-a" in r["msg"], r
    assert not classes(sim, run_module, CLASS)["changed"]  # still there, still bound
    r = classes(sim, run_module, dict(name="gpu-infer", state="absent", namespaces=[]))
    assert not r.get("failed") and r["changed"] and r["classes"][0]["operation"] == "delete", r
    assert r["namespaces"][0]["after"] == [] and r["exposure"]["profiles"] == {}
    assert not classes(sim, run_module, dict(name="gpu-infer", state="absent"))["changed"]


def test_bad_input_fails_naming_the_class_or_namespace(sim, run_module):
    r = classes(sim, run_module, dict(CLASS, name="GPU_Infer"))
    assert r.get("failed") and "VM class 'GPU_Infer': the name must be a DNS label" in r["msg"], r
    r = classes(sim, run_module, dict(CLASS, namespaces=["team-z"]))
    assert r.get("failed") and "namespace(s) team-z not found" in r["msg"], r
    r = classes(sim, run_module, dict(name="gpu-new", vgpu_profiles=["grid_a100-3-20c"]))
    assert r.get("failed") and "VM class gpu-new does not exist; creating it needs cpu_count and memory_mb" in r["msg"], r
    r = run_module(vsphere_vm_class, dict(sim.auth, classes=[CLASS]))
    assert r.get("failed") and "cluster (the Supervisor cluster whose hosts run its VMs) is required" in r["msg"], r


def test_the_deprecated_devices_field_before_vsphere_8_0_2(sim, run_module):
    r = classes(sim, run_module, CLASS, device_api="devices")
    assert not r.get("failed") and r["device_api"] == "devices", r
    # moving to config_spec is a change of where the vGPUs sit, not of what they are
    r = classes(sim, run_module, CLASS, device_api="config_spec")
    assert not r["changed"], r


def test_vm_service_vms_are_refused_by_vsphere_vm_vgpu(sim, run_module):
    r = run_module(vsphere_vm_vgpu, dict(sim.auth, name="DC0_C0_H0_VM0", profiles=["grid_a100-3-20c"]))
    assert r.get("failed") and "belongs to the vSphere VM Service" in r["msg"] and "vsphere_vm_class" in r["msg"], r
