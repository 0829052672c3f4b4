"""_vsphere/placement.py: where a vGPU VM can run, start and move (pure)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import vgpu as vsphere_vgpu
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import placement as pl


def gpu(mode=None, gtype="sharedDirect", pci="0000:3b:00.0"):
    return dict(pci_id=pci, graphics_type=gtype, vgpu_mode=mode)


def facts(*names):
    return {n: pl.profile_facts(n) for n in names}


# ---- profile facts -------------------------------------------------------------------------------------------------

def test_profile_facts_from_the_name():
    assert pl.profile_facts("grid_a100-3-20c") == dict(name="grid_a100-3-20c", board="a100", fb_gb=20, series="c",
                                                       mig=True, source="name")
    assert pl.profile_facts("grid_l40s-8q") == dict(name="grid_l40s-8q", board="l40s", fb_gb=8, series="q", mig=False,
                                                    source="name")
    assert pl.profile_facts("custom") == dict(name="custom", board=None, fb_gb=None, series=None, mig=None, source="name")


def test_profile_facts_from_vcenter_win_over_the_name():
    api = dict(fb_gb=12, sharing="mig", profile_class="compute", device=0x20f110de)
    assert pl.profile_facts("grid_a100-8q", api) == dict(name="grid_a100-8q", board="device-552669406", fb_gb=12,
                                                         series="c", mig=True, source="api")
    quadro = pl.profile_facts("odd-name", dict(fb_gb=4, sharing="timeSliced", profile_class="quadro", device=7))
    assert quadro == dict(name="odd-name", board="device-7", fb_gb=4, series="q", mig=False, source="api")
    assert pl.profile_facts("grid_l40s-8b", dict(fb_gb=8, sharing="timeSliced", profile_class="quadro", device=1))["series"] == "b"


# ---- GPUs of a host ------------------------------------------------------------------------------------------------

def test_no_profiles_or_no_reported_gpus_need_nothing():
    assert pl.gpu_errors("h", [], [gpu()], {}) == []
    assert pl.gpu_errors("h", ["grid_a100-8c"], [], facts("grid_a100-8c")) == []


@pytest.mark.parametrize("types, named", [(["shared"], "shared (VMware vSGA)"), (["basic"], "basic (no vGPU)"),
                                          (["shared", "basic"], "basic, shared (no vGPU)")])
def test_gpus_without_shared_direct_run_no_vgpu(types, named):
    gpus = [gpu(gtype=t, pci="0000:%02x:00.0" % i) for i, t in enumerate(types)]
    assert pl.gpu_errors("esx1", ["grid_a100-8c"], gpus, facts("grid_a100-8c")) == [
        "host esx1: its GPUs are in graphics type %s, which cannot run vGPUs; NVIDIA vGPU needs sharedDirect "
        "(vsphere_host_graphics)" % named]


def test_a_shared_direct_gpu_next_to_a_vsga_one_is_enough():
    assert pl.gpu_errors("h", ["grid_a100-8c"], [gpu(gtype="shared"), gpu("sameSize", pci="x")], facts("grid_a100-8c")) == []


def test_all_gpus_in_mig_mode_take_no_time_sliced_vgpu():
    gpus = [gpu("multiInstanceGpu"), gpu("multiInstanceGpu", pci="x")]
    assert pl.gpu_errors("esx1", ["grid_a100-8c", "grid_a100-3-20c"], gpus, facts("grid_a100-8c", "grid_a100-3-20c")) == [
        "host esx1: all its GPUs are in MIG mode (vgpuMode multiInstanceGpu) and offer MIG-backed vGPUs only, not grid_a100-8c"]
    # one GPU with MIG off is enough, and an unknown mode (before 8.0.3) is not judged
    assert pl.gpu_errors("h", ["grid_a100-8c"], [gpu("multiInstanceGpu"), gpu("sameSize", pci="x")], facts("grid_a100-8c")) == []
    assert pl.gpu_errors("h", ["grid_a100-8c"], [gpu(None)], facts("grid_a100-8c")) == []


def test_mig_backed_vgpus_need_a_gpu_in_mig_mode_where_modes_are_known():
    assert pl.gpu_errors("esx1", ["grid_a100-3-20c"], [gpu("sameSize")], facts("grid_a100-3-20c")) == [
        "host esx1: no GPU is in MIG mode (vgpuMode multiInstanceGpu), which MIG-backed grid_a100-3-20c need"]
    assert pl.gpu_errors("h", ["grid_a100-3-20c"], [gpu(None)], facts("grid_a100-3-20c")) == []
    assert pl.gpu_errors("h", ["grid_a100-3-20c"], [gpu("sameSize"), gpu("multiInstanceGpu", pci="x")],
                         facts("grid_a100-3-20c")) == []


def test_different_sizes_need_mixed_size_mode_or_a_gpu_each():
    two = ["grid_l40s-8q", "grid_l40s-16q"]
    assert pl.gpu_errors("esx1", two, [gpu(None)], facts(*two)) == [
        "host esx1: vGPUs of different sizes (grid_l40s-16q, grid_l40s-8q) share a GPU only in mixed-size mode (vgpuMode "
        "mixedSize, vSphere 8.0 U3); its 1 GPU(s) for time-sliced vGPUs run equal-size mode, one size per GPU"]
    assert pl.gpu_errors("h", two, [gpu("sameSize"), gpu("sameSize", pci="x")], facts(*two)) == []
    assert pl.gpu_errors("h", two, [gpu("mixedSize")], facts(*two)) == []
    # a MIG GPU does not count as one for time-sliced sizes
    assert len(pl.gpu_errors("h", two, [gpu("sameSize"), gpu("multiInstanceGpu", pci="x")], facts(*two))) == 1
    # one size twice, or MIG-backed sizes, need nothing of the kind
    assert pl.gpu_errors("h", ["grid_l40s-8q"] * 2, [gpu("sameSize")], facts("grid_l40s-8q")) == []
    mig = ["grid_a100-3-20c", "grid_a100-2-10c"]
    assert pl.gpu_errors("h", mig, [gpu("multiInstanceGpu")], facts(*mig)) == []


# ---- hardware version ----------------------------------------------------------------------------------------------

def test_hardware_version():
    assert pl.hardware_version("vmx-15") == 15
    assert pl.hardware_version("vmx-9") == 9
    assert pl.hardware_version(None) is None
    assert pl.hardware_version("15") is None
    assert pl.hardware_version("vmx-15a") is None


def test_several_vgpus_need_hardware_15():
    assert pl.plan_hardware("vm1", ["a"], "vmx-13", False) is None
    assert pl.plan_hardware("vm1", ["a", "a"], "vmx-15", False) is None
    assert pl.plan_hardware("vm1", ["a", "a"], None, False) is None
    assert pl.plan_hardware("vm1", ["a", "a"], "vmx-14", True) == dict(before="vmx-14", after="the host's newest")
    with pytest.raises(vsphere_vgpu.VgpuError, match=r"^VM vm1 has hardware version vmx-14; 2 vGPUs on one VM need version 15 "
                       r"or later \(vSphere 6.7 U2 compatibility\); set upgrade_hardware to upgrade "
                       r"it while it is powered off$"):
        pl.plan_hardware("vm1", ["a", "b"], "vmx-14", False)


# ---- DRS and the start host ----------------------------------------------------------------------------------------

CLUSTER = dict(name="c1", enabled=True, default_behavior=None, overrides_enabled=None, overrides={})


def test_drs_for_a_vm():
    assert pl.drs_for(None, "vm-1") == dict(acts=False, behavior=None)
    assert pl.drs_for(dict(CLUSTER, enabled=False), "vm-1") == dict(acts=False, behavior=None)
    assert pl.drs_for(CLUSTER, "vm-1") == dict(acts=True, behavior="fullyAutomated")
    assert pl.drs_for(dict(CLUSTER, default_behavior="manual"), "vm-1") == dict(acts=True, behavior="manual")
    pinned = dict(CLUSTER, overrides={"vm-1": dict(behavior="partiallyAutomated", enabled=None)})
    assert pl.drs_for(pinned, "vm-1") == dict(acts=True, behavior="partiallyAutomated")
    assert pl.drs_for(pinned, "vm-2") == dict(acts=True, behavior="fullyAutomated")
    assert pl.drs_for(dict(pinned, overrides_enabled=False), "vm-1") == dict(acts=True, behavior="fullyAutomated")
    off = dict(CLUSTER, overrides={"vm-1": dict(behavior=None, enabled=False)})
    assert pl.drs_for(off, "vm-1") == dict(acts=False, behavior="fullyAutomated")
    kept = dict(CLUSTER, overrides={"vm-1": dict(behavior=None, enabled=True)})
    assert pl.drs_for(kept, "vm-1") == dict(acts=True, behavior="fullyAutomated")


def test_start_host():
    places = dict(acts=True, behavior="partiallyAutomated")
    assert pl.start_host("h1", ["h1", "h2"], dict(acts=False)) == dict(start_host="h1", power_on_host=None)
    assert pl.start_host("h1", [], dict(acts=False)) == dict(start_host="h1", power_on_host=None)
    assert pl.start_host("h1", ["h2", "h3"], places) == dict(start_host=None, power_on_host=None)
    assert pl.start_host("h1", ["h2", "h3"], dict(places, behavior="fullyAutomated")) == dict(start_host=None, power_on_host=None)
    assert pl.start_host("h1", ["h2", "h3"], dict(places, behavior="manual")) == dict(start_host="h2", power_on_host="h2")
    assert pl.start_host("h1", ["h2"], dict(acts=False, behavior="fullyAutomated")) == dict(start_host="h2", power_on_host="h2")


def test_restore_marker():
    assert pl.restore_pending({pl.RESTORE_KEY: "mod"}, "mod")
    assert not pl.restore_pending({pl.RESTORE_KEY: "other"}, "mod")
    assert not pl.restore_pending({pl.RESTORE_KEY: ""}, "mod")
    assert not pl.restore_pending({}, "mod")
    assert pl.RESTORE_KEY == "gpuops.provision.restorePowerState"


# ---- maintenance-mode evacuation -----------------------------------------------------------------------------------

VGPU_VM = dict(name="gpu", moid="vm-1", profiles=["grid_a100-8c"])
PLAIN_VM = dict(name="plain", moid="vm-2", profiles=[])
SETTINGS_WHY = ("vGPU VMs migrate on maintenance mode only with VgpuMMAutomationTimeoutSecs=-1 on the cluster (is None) "
                "and vgpu.hotmigrate.enabled=true on vCenter (is None) (KB 88271)")


def evac(vms, cluster=None, option=None, hot=None, targets=None, policy="fail", standalone=False):
    cluster = None if standalone else (cluster or CLUSTER)
    targets = {"gpu": ["h2"], "plain": ["h2"]} if targets is None else targets
    return pl.evacuation("h1", vms, cluster, option, hot, targets, policy)


def test_plain_vm_at_fully_automated_migrates_and_vms_are_sorted():
    assert evac([VGPU_VM, PLAIN_VM], option="-1", hot="True") == [
        dict(name="gpu", vgpu=True, profiles=["grid_a100-8c"], drs_behavior="fullyAutomated", fate="migrate", why=None),
        dict(name="plain", vgpu=False, profiles=[], drs_behavior="fullyAutomated", fate="migrate", why=None)]


def test_vgpu_vm_needs_both_settings():
    for option, hot in ((None, None), ("-1", "false"), ("0", "true")):
        out = evac([VGPU_VM], option=option, hot=hot)[0]
        assert out["fate"] == "blocked" and "KB 88271" in out["why"]
    assert evac([VGPU_VM])[0]["why"] == SETTINGS_WHY
    assert evac([VGPU_VM], policy="migrate")[0]["fate"] == "migrate"
    assert evac([VGPU_VM], policy="shutdown")[0] == dict(name="gpu", vgpu=True, profiles=["grid_a100-8c"],
                                                         drs_behavior="fullyAutomated", fate="shutdown", why=SETTINGS_WHY)


def test_who_else_keeps_a_vm_on_the_host():
    pinned = dict(CLUSTER, overrides={"vm-2": dict(behavior="partiallyAutomated", enabled=None)})
    assert evac([PLAIN_VM], cluster=pinned)[0]["why"] == "DRS automation level partiallyAutomated only recommends migrations"
    assert evac([PLAIN_VM], standalone=True)[0] == dict(name="plain", vgpu=False, profiles=[], drs_behavior=None,
                                                        fate="blocked", why="its host is not in a cluster, so DRS cannot move it")
    assert evac([PLAIN_VM], cluster=dict(CLUSTER, enabled=False))[0]["why"] == "DRS is off in cluster c1"
    off = dict(CLUSTER, overrides={"vm-2": dict(behavior=None, enabled=False)})
    assert evac([PLAIN_VM], cluster=off)[0]["why"] == "DRS is off for it"
    assert evac([PLAIN_VM], targets={})[0]["why"] == "no other connected host outside maintenance mode can take it"
    # shutdown is for vGPU VMs only
    assert evac([PLAIN_VM], targets={}, policy="shutdown")[0]["fate"] == "blocked"
    both = evac([VGPU_VM], cluster=pinned | {"overrides": {"vm-1": dict(behavior="manual", enabled=None)}})[0]
    assert both["why"] == "DRS automation level manual only recommends migrations; " + SETTINGS_WHY
