"""vsphere_vm_vgpu's batch form (issue 16 point 1) in-process against vcsim (govmomi v0.52.0 + our GPU managers):
one session and a few bulk reads for many VMs, every VM planned before the first write, bounded concurrency,
per-VM results and diffs, partial failure judged by vcsim's own reconfigure rules."""

from __future__ import annotations

import threading

import pytest
from pyVmomi import vim

from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api, vm as vsphere_vm
from ansible_collections.gpuops.provision.plugins.modules import vsphere_vm_vgpu

pytestmark = pytest.mark.slow

FIXTURE = {"defaults": {"graphics_type": "sharedDirect"},
           "hosts": {"DC0_C0_H0": {"model": "a100-40"}, "DC0_C0_H1": {"model": "a100-40"},
                     "DC0_C0_H2": {"model": "l40s"}}}
A100_VMS = ["DC0_C0_H%d_VM%d" % (h, v) for h in (0, 1) for v in range(4)]


@pytest.fixture(scope="module")
def sim(vcsim_factory):
    return vcsim_factory(hosts=3, vms=4, fixture=FIXTURE)


@pytest.fixture
def vms_off(sim):
    """Every VM powered off and without vGPUs (vcsim starts them powered on); yields the session."""
    with sim.connect() as s:
        for row in s.vms(props=["name", "runtime.powerState", "config.hardware.device", "config.template"]):
            if row["config.template"]:
                row["obj"].MarkAsVirtualMachine(pool=s.collect(vim.ResourcePool, ["name"])[0]["obj"])
            if row["runtime.powerState"] != "poweredOff":
                s.call_task("power off", row["obj"].PowerOffVM_Task)
            remove = [vim.vm.device.VirtualDeviceSpec(operation="remove", device=d["device"])
                      for d in api.vm_vgpus(row["config.hardware.device"])]
            if remove:
                s.call_task("clean", row["obj"].ReconfigVM_Task, spec=vim.vm.ConfigSpec(deviceChange=remove))
        yield s


def profiles(session):
    return {r["name"]: sorted(d["profile"] for d in api.vm_vgpus(r["config.hardware.device"]))
            for r in session.vms(props=["name", "config.hardware.device"])}


def batch(*names, profile="grid_a100-40c"):
    return [{"name": n, "profiles": [profile]} for n in names]


def test_batch_reconfigures_each_vm_once_and_rerun_changes_nothing(sim, vms_off, run_module, tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    monkeypatch.setenv(api.CALLS_FILE_ENV, str(calls))
    res = run_module(vsphere_vm_vgpu, dict(sim.auth, vms=batch(*A100_VMS), max_concurrent=4))
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] and res["failed_vms"] == [] and [r["vm"] for r in res["vms"]] == A100_VMS
    assert all(r["changed"] and r["actions"] == ["add grid_a100-40c", "reserve_all_memory",
                                                 "set pciPassthru.64bitMMIOSizeGB=128", "set pciPassthru.use64bitMMIO=TRUE"]
               for r in res["vms"])
    assert all(p == ["grid_a100-40c"] for n, p in profiles(vms_off).items() if n in A100_VMS)
    first = int(calls.read_text().split()[-1])
    # Bulk reads and a login cost the same for 1 or 100 VMs; per VM: the reconfigure and its task polls.
    assert first <= 3 * len(A100_VMS) + 20, first

    again = run_module(vsphere_vm_vgpu, dict(sim.auth, vms=batch(*A100_VMS)))
    assert again["changed"] is False and not any(r["changed"] for r in again["vms"])
    rerun = int(calls.read_text().split()[-1])
    assert rerun < first - len(A100_VMS)  # no reconfigure, no poll


def test_batch_check_mode_gives_a_diff_per_vm_and_changes_nothing(sim, vms_off, run_module):
    before = profiles(vms_off)
    args = dict(sim.auth, vms=batch("DC0_C0_H0_VM0") + batch("DC0_C0_H2_VM0", profile="grid_l40s-48q"))
    args["_ansible_diff"] = True
    res = run_module(vsphere_vm_vgpu, args, check_mode=True)
    assert res["changed"] and profiles(vms_off) == before
    assert [(d["before_header"], d["before"]["profiles"], d["after"]["profiles"]) for d in res["diff"]] == [
        ("VM DC0_C0_H0_VM0", [], ["grid_a100-40c"]), ("VM DC0_C0_H2_VM0", [], ["grid_l40s-48q"])]


def test_one_invalid_vm_fails_the_batch_before_any_write_and_is_named(sim, vms_off, run_module):
    before = profiles(vms_off)
    # H2 has L40S only: an A100 profile cannot go there. "nope" does not exist. The others are fine.
    vms = batch("DC0_C0_H0_VM0", "DC0_C0_H2_VM1", "DC0_C0_H1_VM0", "nope")
    res = run_module(vsphere_vm_vgpu, dict(sim.auth, vms=vms))
    assert res["failed"] and profiles(vms_off) == before
    assert res["msg"].startswith("2 VMs cannot be configured, nothing changed")
    assert "DC0_C0_H2_VM1" in res["problems"][0] and "grid_a100-40c" in res["problems"][0]
    assert res["problems"][1] == "VM nope not found"


def test_template_is_refused_in_the_plan(sim, vms_off, run_module):
    vm = [r for r in vms_off.vms(props=["name"]) if r["name"] == "DC0_C0_H1_VM3"][0]["obj"]
    vm.MarkAsTemplate()
    res = run_module(vsphere_vm_vgpu, dict(sim.auth, vms=batch("DC0_C0_H0_VM3", "DC0_C0_H1_VM3")))
    assert res["failed"] and "VM DC0_C0_H1_VM3 is a template" in res["msg"]
    assert profiles(vms_off)["DC0_C0_H0_VM3"] == []


def _turn_into_template_before_its_write(monkeypatch, sim, victim):
    """Between the plan and the write of ``victim``, another client makes it a template: vcsim's ReconfigVMTask then
    answers NotSupported for that VM (govmomi simulator/virtual_machine.go), as vCenter does."""
    original = vsphere_vm.VmVgpu.apply

    def apply(self):
        if self.name == victim:
            with sim.connect() as other:
                obj = [r for r in other.vms(props=["name"]) if r["name"] == victim][0]["obj"]
                obj.MarkAsTemplate()
        return original(self)

    monkeypatch.setattr(vsphere_vm.VmVgpu, "apply", apply)


def test_a_failed_reconfigure_leaves_that_vm_unchanged_and_the_others_done(sim, vms_off, run_module, monkeypatch):
    _turn_into_template_before_its_write(monkeypatch, sim, "DC0_C0_H0_VM2")
    res = run_module(vsphere_vm_vgpu, dict(sim.auth, vms=batch(*A100_VMS), max_concurrent=2))
    assert res["failed"] and res["failed_vms"] == ["DC0_C0_H0_VM2"]
    assert "VM DC0_C0_H0_VM2: reconfigure failed" in res["msg"] and "the other VMs are done" in res["msg"]
    bad = res["vms"][2]
    assert bad["vm"] == "DC0_C0_H0_VM2" and bad["failed"] and bad["changed"] is False and bad["vgpus"] == []
    now = profiles(vms_off)
    assert now["DC0_C0_H0_VM2"] == []
    assert all(now[n] == ["grid_a100-40c"] for n in A100_VMS if n != "DC0_C0_H0_VM2")


def test_stop_on_error_starts_no_vm_after_the_failure(sim, vms_off, run_module, monkeypatch):
    _turn_into_template_before_its_write(monkeypatch, sim, "DC0_C0_H0_VM1")
    res = run_module(vsphere_vm_vgpu, dict(sim.auth, vms=batch(*A100_VMS[:4]), max_concurrent=1, stop_on_error=True))
    assert res["failed"] and res["failed_vms"] == ["DC0_C0_H0_VM1"]
    assert "not started (stop_on_error): VMs DC0_C0_H0_VM2, DC0_C0_H0_VM3" in res["msg"]
    assert [bool(r.get("skipped")) for r in res["vms"]] == [False, False, True, True]
    assert all(r["after"]["profiles"] == [] and r["actions"] == [] and not r["changed"] for r in res["vms"][2:])
    now = profiles(vms_off)
    assert [now[n] for n in A100_VMS[:4]] == [["grid_a100-40c"], [], [], []]


@pytest.mark.parametrize("workers, low, high", [(1, 1, 1), (4, 2, 4)])
def test_reconfigures_run_at_most_max_concurrent_at_a_time(sim, vms_off, run_module, monkeypatch, workers, low, high):
    # Each VM's apply is held 0.3 s; the most applies seen at once is the concurrency the module used.
    original, lock, state = vsphere_vm.VmVgpu.apply, threading.Lock(), {"now": 0, "max": 0}

    def apply(self):
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        try:
            threading.Event().wait(0.3)
            return original(self)
        finally:
            with lock:
                state["now"] -= 1

    monkeypatch.setattr(vsphere_vm.VmVgpu, "apply", apply)
    res = run_module(vsphere_vm_vgpu, dict(sim.auth, vms=batch(*A100_VMS), max_concurrent=workers))
    assert not res.get("failed"), res.get("msg")
    assert low <= state["max"] <= high


@pytest.mark.parametrize("args, words", [
    ({"vms": batch("DC0_C0_H0_VM0", "DC0_C0_H0_VM0")}, ["VM DC0_C0_H0_VM0 is listed twice", "nothing changed"]),
    ({"vms": [{"profiles": ["grid_a100-40c"]}]}, ["vms[0]: needs exactly one of name, uuid and moid (has none)"]),
    ({"vms": [{"name": "a", "moid": "vm-1", "profiles": []}]}, ["vms[0]: needs exactly one of name, uuid and moid (has name, moid)"]),
    ({"vms": [{"name": "DC0_C0_H0_VM0", "profiles": [], "max_vgpus": 9}]}, ["vms[0]: max_vgpus=9 is out of range"]),
    ({"vms": batch("DC0_C0_H0_VM0"), "max_concurrent": 65}, ["max_concurrent=65 is out of range"]),
    ({"vms": batch("DC0_C0_H0_VM0"), "name": "x"}, ["mutually exclusive"]),
    ({"name": "DC0_C0_H0_VM0"}, ["profiles"]),
    ({"vms": [{"moid": "vm-99999", "profiles": []}]}, ["VM with moid vm-99999 not found"]),
])
def test_batch_bad_input_is_refused_with_nothing_changed(sim, vms_off, run_module, args, words):
    before = profiles(vms_off)
    res = run_module(vsphere_vm_vgpu, dict(sim.auth, **args))
    assert res["failed"] and profiles(vms_off) == before
    for word in words:
        assert word in res["msg"], res["msg"]


def test_empty_batch_selects_nothing(sim, vms_off, run_module):
    before = profiles(vms_off)
    res = run_module(vsphere_vm_vgpu, dict(sim.auth, vms=[]))
    assert res["changed"] is False and res["vms"] == [] and profiles(vms_off) == before
