"""Pure part of the ESXi vGPU scheduler (plugins/module_utils/_vsphere/scheduler.py): specs per host, the option
string in ESXi's spelling, plans and verification, and the planner and results over the host rows (the I/O around
them: test_vsphere_scheduler_apply.py)."""

from __future__ import annotations

import datetime
import re

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._gpu import vgpu_scheduler as vs
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import scheduler as sched

FIXED = vs.normalize({"policy": "fixed_share"})


def test_option_string_is_written_unquoted_as_nvidias_esxcli_sets_it():
    assert sched.esxi_option_string("", FIXED) == "NVreg_RegistryDwords=RmPVMRL=0x11"
    # other parameters and other registry keys stay, RmPVMRL is replaced in place
    assert sched.esxi_option_string("NVreg_EnableGpuFirmware=0 NVreg_RegistryDwords=RmFoo=1;RmPVMRL=0x01", FIXED) == \
        "NVreg_EnableGpuFirmware=0 NVreg_RegistryDwords=RmFoo=1;RmPVMRL=0x11"
    # already fixed share in another spelling (decimal 17, quoted): the same string back, nothing to write
    for same in ("NVreg_RegistryDwords=RmPVMRL=17", 'NVreg_RegistryDwords="RmPVMRL=0x11"'):
        assert sched.esxi_option_string(same, FIXED) == same
    # best effort is the driver default: the key goes, the rest stays
    assert sched.esxi_option_string("NVreg_RegistryDwords=RmPVMRL=0x11 NVreg_X=1", vs.normalize({"policy": "best_effort"})) == \
        "NVreg_X=1"


def test_host_specs_validate_every_host_and_name_the_bad_one():
    params = dict(policy="fixed_share", host_policies={"esx2": {"policy": "equal_share", "timeslice_ms": 3}})
    specs = sched.host_specs(params, ["esx1", "esx2"])
    assert specs["esx1"] == (FIXED, False)
    assert specs["esx2"][0]["timeslice_ms"] == 3 and specs["esx2"][0]["arr"] is False
    with pytest.raises(vs.SchedulerError, match=r"^host esx2: vGPU scheduler: timeslice_ms 31 is outside"):
        sched.host_specs(dict(policy="fixed_share", host_policies={"esx2": {"policy": "fixed_share", "timeslice_ms": 31}}),
                         ["esx1", "esx2"])
    with pytest.raises(vs.SchedulerError, match=r"^host esx1: vGPU scheduler: no policy"):
        sched.host_specs({}, ["esx1"])
    with pytest.raises(vs.SchedulerError, match="host_policies names host\\(s\\) not in scope: esx9"):
        sched.host_specs(dict(policy="fixed_share", host_policies={"esx9": {"policy": "fixed_share"}}), ["esx1"])
    # best effort takes no time slice: the task-wide combination fails naming the first host
    with pytest.raises(vs.SchedulerError, match=r"^host esx1: .*cannot be set for best_effort"):
        sched.host_specs(dict(policy="best_effort", timeslice_ms=2), ["esx1"])
    # production per host overrides the task's flag
    specs = sched.host_specs(dict(policy="fixed_share", production=True,
                                  host_policies={"esx2": {"policy": "best_effort", "production": False}}), ["esx1", "esx2"])
    assert specs["esx1"][1] is True and specs["esx2"][1] is False


def test_plan_host_reports_change_overrides_and_the_production_warning():
    plan = sched.plan_host("esx1", "", FIXED)
    assert plan["changed"] and plan["after"] == "NVreg_RegistryDwords=RmPVMRL=0x11" and plan["policy_before"] == "best_effort"
    assert plan["warnings"] == []
    again = sched.plan_host("esx1", plan["after"], FIXED)
    assert not again["changed"] and again["after"] == again["before"]
    best = sched.plan_host("esx1", "", vs.normalize({"policy": "best_effort"}), production=True)
    assert not best["changed"] and best["warnings"] == [
        "host esx1 carries production tenants and is set to best_effort: a vGPU's share of the GPU then depends on its "
        "neighbours' load; fixed_share is the only policy with a stable per-tenant share"]
    per_device = sched.plan_host("esx1", "NVreg_RegistryDwordsPerDevice=pci=0000:3b:00.0;RmPVMRL=0x01", FIXED)
    assert per_device["per_device_overrides"] == {"0000:3b:00.0": "0x01"}
    assert "NVreg_RegistryDwordsPerDevice sets RmPVMRL for 0000:3b:00.0" in per_device["warnings"][0]


def test_verify_host_needs_the_policy_and_no_reboot_pending():
    assert sched.verify_host("esx1", FIXED, "NVreg_RegistryDwords=RmPVMRL=0x11", False) is None
    assert "reboot pending" in sched.verify_host("esx1", FIXED, "NVreg_RegistryDwords=RmPVMRL=0x11", True)
    msg = sched.verify_host("esx1", FIXED, "NVreg_RegistryDwords=RmPVMRL=0x01", False)
    assert msg.startswith("host esx1: the nvidia module is configured for equal_share") and "not fixed_share" in msg
    # a time slice asked for must be the configured one
    three = vs.normalize({"policy": "equal_share", "timeslice_ms": 3})
    assert sched.verify_host("esx1", three, "NVreg_RegistryDwords=RmPVMRL=0x00030003", False) is None
    assert sched.verify_host("esx1", three, "NVreg_RegistryDwords=RmPVMRL=0x00040003", False) is not None


class FakeKms:
    """A HostKernelModuleSystem stand-in raising the faults pyVmomi declares for it (_typeinfo_vim.py)."""

    def __init__(self, fault=None, value=""):
        self.fault, self.value, self.updates = fault, value, []

    def QueryConfiguredModuleOptionString(self, name):  # noqa: N802 (pyVmomi's name)
        if self.fault:
            raise self.fault
        return self.value

    def UpdateModuleOptionString(self, name, options):  # noqa: N802
        if self.fault:
            raise self.fault
        self.updates.append((name, options))


def test_module_option_string_reads_none_for_a_missing_module_and_names_the_host_on_refusal():
    from pyVmomi import vim
    from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api

    row = {"name": "esx1", "configManager.kernelModuleSystem": FakeKms(value="NVreg_X=1")}
    assert api.module_option_string(row, "nvidia") == "NVreg_X=1"
    assert api.module_option_string({"name": "esx1", "configManager.kernelModuleSystem": None}, "nvidia") is None
    row["configManager.kernelModuleSystem"] = FakeKms(fault=vim.fault.NotFound())
    assert api.module_option_string(row, "nvidia") is None
    row["configManager.kernelModuleSystem"] = FakeKms(fault=vim.fault.NoPermission(privilegeId="Host.Config.Settings"))
    with pytest.raises(api.VsphereError, match=r"^host esx1: reading the nvidia module options was refused .*Host.Config.Settings"):
        api.module_option_string(row, "nvidia")
    kms = FakeKms()
    api.set_module_option_string({"name": "esx1", "configManager.kernelModuleSystem": kms}, "nvidia", "a=1")
    assert kms.updates == [("nvidia", "a=1")]
    with pytest.raises(api.VsphereError, match=r"^host esx1: UpdateModuleOptionString\(nvidia\) failed: NotFound"):
        api.set_module_option_string({"name": "esx1", "configManager.kernelModuleSystem": FakeKms(fault=vim.fault.NotFound())},
                                     "nvidia", "a=1")


# ---- the planner over host rows: which hosts, what to write, what to report ------------------------------------

BOOT = datetime.datetime(2026, 12, 1, 8, 0, tzinfo=datetime.timezone.utc)
NOT_INSTALLED = "host %s: vGPU scheduler: the nvidia kernel module is not installed (no NVIDIA vGPU host driver); nothing changed"
FIXED_STRING = "NVreg_RegistryDwords=RmPVMRL=0x11"


def host_row(name, gpu=True, state="connected", reboot=False, boot=None):
    """A host as api.Session.hosts returns it, with the properties the scheduler reads."""
    return {"name": name, "config.graphicsInfo": ["gpu"] if gpu else None, "runtime.connectionState": state,
            "summary.rebootRequired": reboot, "runtime.bootTime": boot}


def test_check_hosts_skips_plain_hosts_without_the_module_and_keeps_an_empty_option_string():
    rows = [host_row("esx1"), host_row("esx2", gpu=False, reboot=None), host_row("esx3", gpu=False, reboot=True)]
    candidates, skipped = sched.check_hosts(rows, ["", None, None], {})
    # an empty option string is a module without options (a host to set), not a missing module
    assert candidates == [(rows[0], "")]
    assert skipped == [
        dict(name="esx2", skipped=True, changed=False, before=None, after=None, reboot_required=False),
        dict(name="esx3", skipped=True, changed=False, before=None, after=None, reboot_required=True)]
    assert sched.check_hosts(rows, ["", None, None], dict(skip_non_gpu_hosts=True)) == (candidates, skipped)


def test_check_hosts_refuses_a_gpu_host_without_the_module_and_a_plain_one_unless_skipped():
    with pytest.raises(vs.SchedulerError, match="^%s$" % re.escape(NOT_INSTALLED % "esx2")):
        sched.check_hosts([host_row("esx1"), host_row("esx2"), host_row("esx3", state="disconnected")], ["", None, ""], {})
    with pytest.raises(vs.SchedulerError, match="^%s$" % re.escape(NOT_INSTALLED % "esx1")):
        sched.check_hosts([host_row("esx1", gpu=False)], [None], dict(skip_non_gpu_hosts=False))


@pytest.mark.parametrize("state", ["disconnected", "notResponding", None])
def test_check_hosts_refuses_a_host_that_is_not_connected(state):
    rows = [host_row("esx1"), host_row("esx2", state=state)]
    with pytest.raises(vs.SchedulerError, match=r"^host esx2: vGPU scheduler: host is %s; nothing changed$" % state):
        sched.check_hosts(rows, ["", FIXED_STRING], {})
    # a host without the module is skipped whatever its state: nothing would be written to it
    assert sched.check_hosts([host_row("esx2", gpu=False, state=state)], [None], {})[0] == []


def test_check_hosts_looks_only_at_the_hosts_whose_option_string_was_read():
    rows = [host_row("esx1"), host_row("esx2", state="disconnected")]
    assert sched.check_hosts(rows, [FIXED_STRING], {}) == ([(rows[0], FIXED_STRING)], [])


def test_plan_writes_the_changed_hosts_in_order_and_collects_the_warnings_of_every_host():
    rows = [host_row("esx1"), host_row("esx2"), host_row("esx3"), host_row("esx4", gpu=False)]
    per_device = "NVreg_RegistryDwordsPerDevice=pci=0000:3b:00.0;RmPVMRL=0x01"
    params = dict(policy="fixed_share", production=True, host_policies={"esx2": {"policy": "best_effort"}})
    plan = sched.plan(rows, [per_device, "", "NVreg_X=1", None], params)
    assert [h.row["name"] for h in plan.hosts] == ["esx1", "esx2", "esx3"]
    assert [h.spec for h in plan.hosts] == [FIXED, vs.normalize({"policy": "best_effort"}), FIXED]
    assert plan.hosts[2].plan == dict(host="esx3", before="NVreg_X=1", after="NVreg_X=1 " + FIXED_STRING, changed=True,
                                      policy="fixed_share (driver default scheduling)", policy_before="best_effort",
                                      per_device_overrides={})
    assert plan.writes == [(rows[0], per_device + " " + FIXED_STRING), (rows[2], "NVreg_X=1 " + FIXED_STRING)]
    assert plan.skipped == [dict(name="esx4", skipped=True, changed=False, before=None, after=None, reboot_required=False)]
    assert plan.warnings == [
        "host esx1: NVreg_RegistryDwordsPerDevice sets RmPVMRL for 0000:3b:00.0, which takes precedence over the "
        "host-wide policy on those GPUs",
        "host esx2 carries production tenants and is set to best_effort: a vGPU's share of the GPU then depends on its "
        "neighbours' load; fixed_share is the only policy with a stable per-tenant share"]


def test_plan_refuses_before_any_write_and_names_the_host():
    rows = [host_row("esx1"), host_row("esx2")]
    with pytest.raises(vs.SchedulerError, match=r"^host esx2: vGPU scheduler: unknown policy 'fastest'"):
        sched.plan(rows, ["", ""], dict(policy="fixed_share", host_policies={"esx2": {"policy": "fastest"}}))
    with pytest.raises(vs.SchedulerError, match="^%s$" % re.escape(NOT_INSTALLED % "esx1")):
        sched.plan(rows, [None, ""], dict(policy="fastest"))
    # the policy is checked for the hosts to set only: a skipped host needs none
    assert sched.plan([host_row("esx1", gpu=False)], [None], {}).skipped[0]["name"] == "esx1"


def test_plan_with_verify_writes_nothing_and_fails_naming_every_host_that_is_not_ready():
    rows = [host_row("esx1"), host_row("esx2", reboot=True), host_row("esx3")]
    with pytest.raises(vs.SchedulerError) as e:
        sched.plan(rows, ["NVreg_RegistryDwords=RmPVMRL=0x01", FIXED_STRING, FIXED_STRING], dict(policy="fixed_share", verify=True))
    assert str(e.value) == (
        "host esx1: the nvidia module is configured for equal_share (arr), not fixed_share "
        "(driver default scheduling) (option string 'NVreg_RegistryDwords=RmPVMRL=0x01'); host esx2: configured for "
        "fixed_share (driver default scheduling) but the host reports a reboot pending, so the driver may still run the "
        "previous policy")
    plan = sched.plan(rows[:1], [""], dict(policy="best_effort", production=True, verify=True))
    assert plan.writes == [] and plan.hosts[0].plan["before"] == "" and len(plan.warnings) == 1
    # verify compares what is configured, not what a write would make of it
    with pytest.raises(vs.SchedulerError, match=r"^host esx1: the nvidia module is configured for best_effort, not fixed_share"):
        sched.plan(rows[:1], ["NVreg_X=1"], dict(policy="fixed_share", verify=True))


def test_results_report_every_host_sorted_with_the_reboot_a_change_needs():
    rows = [host_row("esx3", boot=BOOT), host_row("esx1", reboot=None), host_row("esx2", reboot=True),
            host_row("esx0", gpu=False, reboot=True)]
    plan = sched.plan(rows, ["", FIXED_STRING, FIXED_STRING, None], dict(policy="fixed_share"))
    results, warnings = sched.results(plan, dict(policy="fixed_share"))
    assert warnings is plan.warnings
    # 0x11 leaves bit 1 (ARR disabled) clear: configured, it reads back as ARR
    policy, configured = "fixed_share (driver default scheduling)", "fixed_share (arr)"
    assert results == [
        dict(name="esx0", skipped=True, changed=False, before=None, after=None, reboot_required=True),
        dict(name="esx1", skipped=False, changed=False, before=FIXED_STRING, after=FIXED_STRING, policy=policy,
             policy_before=configured, per_device_overrides={}, reboot_required=False, boot_time=None),
        # unchanged, but the host itself reports a reboot pending
        dict(name="esx2", skipped=False, changed=False, before=FIXED_STRING, after=FIXED_STRING, policy=policy,
             policy_before=configured, per_device_overrides={}, reboot_required=True, boot_time=None),
        # changed now: the driver reads the key at the next boot
        dict(name="esx3", skipped=False, changed=True, before="", after=FIXED_STRING, policy=policy,
             policy_before="best_effort", per_device_overrides={}, reboot_required=True,
             boot_time="2026-12-01T08:00:00+00:00")]
    assert [type(r["reboot_required"]) for r in results] == [bool] * 4


def test_results_of_a_verification_mark_the_hosts_verified_and_report_the_string_as_it_is():
    rows = [host_row("esx1", boot=BOOT)]
    params = dict(policy="fixed_share", verify=True)
    results, warnings = sched.results(sched.plan(rows, [FIXED_STRING], params), params)
    assert results == [dict(name="esx1", skipped=False, changed=False, before=FIXED_STRING, after=FIXED_STRING,
                            policy="fixed_share (driver default scheduling)", policy_before="fixed_share (arr)", per_device_overrides={}, reboot_required=False,
                            boot_time="2026-12-01T08:00:00+00:00", verified=True)]
    assert warnings == []
    # a plan that would change the host, reported under verify: nothing changed, the string as configured, no reboot
    plan = sched.plan(rows, [""], dict(policy="fixed_share"))
    results, _warnings = sched.results(plan, params)
    assert results[0]["changed"] is False and results[0]["after"] == "" and results[0]["reboot_required"] is False
    assert results[0]["verified"] is True
    assert "verified" not in sched.results(plan, dict(policy="fixed_share"))[0][0]


def test_host_specs_name_every_unknown_host_and_a_host_policy_that_is_not_a_mapping():
    with pytest.raises(vs.SchedulerError, match=r"^host_policies names host\(s\) not in scope: esx8, esx9; nothing changed$"):
        sched.host_specs(dict(policy="fixed_share", host_policies={"esx9": {}, "esx8": {}, "esx1": {}}), ["esx1"])
    with pytest.raises(vs.SchedulerError, match=r"^host esx1: vGPU scheduler: host_policies entry must be a mapping, got 'fixed_share'$"):
        sched.host_specs(dict(host_policies={"esx1": "fixed_share"}), ["esx1"])


def test_plan_host_and_verify_host_read_no_option_string_as_an_empty_one():
    best_effort = vs.normalize({"policy": "best_effort"})
    # production defaults to false: best effort alone deserves no warning
    assert sched.plan_host("esx1", "", best_effort)["warnings"] == []
    assert sched.plan_host("esx1", None, FIXED) == dict(
        host="esx1", before="", after="NVreg_RegistryDwords=RmPVMRL=0x11", changed=True,
        policy="fixed_share (driver default scheduling)", policy_before="best_effort", per_device_overrides={}, warnings=[])
    assert sched.verify_host("esx1", FIXED, None, False) == (
        "host esx1: the nvidia module is configured for best_effort, not fixed_share (driver default scheduling) "
        "(option string '')")
    assert sched.verify_host("esx1", best_effort, None, False) is None


def test_the_per_device_warning_lists_every_gpu_sorted():
    per_device = "NVreg_RegistryDwordsPerDevice=pci=0000:af:00.0;RmPVMRL=0x01;pci=0000:3b:00.0;RmPVMRL=0x11"
    assert sched.plan_host("esx1", per_device, FIXED)["warnings"] == [
        "host esx1: NVreg_RegistryDwordsPerDevice sets RmPVMRL for 0000:3b:00.0, 0000:af:00.0, which takes precedence "
        "over the host-wide policy on those GPUs"]
