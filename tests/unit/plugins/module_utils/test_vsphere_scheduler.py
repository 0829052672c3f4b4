"""Pure part of the ESXi vGPU scheduler (plugins/module_utils/_vsphere_scheduler.py): specs per host, the option
string in ESXi's spelling, plans and verification."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils import _vgpu_scheduler as vs
from ansible_collections.gpuops.provision.plugins.module_utils import _vsphere_scheduler as sched

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
    from ansible_collections.gpuops.provision.plugins.module_utils import _vsphere

    row = {"name": "esx1", "configManager.kernelModuleSystem": FakeKms(value="NVreg_X=1")}
    assert _vsphere.module_option_string(row, "nvidia") == "NVreg_X=1"
    assert _vsphere.module_option_string({"name": "esx1", "configManager.kernelModuleSystem": None}, "nvidia") is None
    row["configManager.kernelModuleSystem"] = FakeKms(fault=vim.fault.NotFound())
    assert _vsphere.module_option_string(row, "nvidia") is None
    row["configManager.kernelModuleSystem"] = FakeKms(fault=vim.fault.NoPermission(privilegeId="Host.Config.Settings"))
    with pytest.raises(_vsphere.VsphereError, match=r"^host esx1: reading the nvidia module options was refused .*Host.Config.Settings"):
        _vsphere.module_option_string(row, "nvidia")
    kms = FakeKms()
    _vsphere.set_module_option_string({"name": "esx1", "configManager.kernelModuleSystem": kms}, "nvidia", "a=1")
    assert kms.updates == [("nvidia", "a=1")]
    with pytest.raises(_vsphere.VsphereError, match=r"^host esx1: UpdateModuleOptionString\(nvidia\) failed: NotFound"):
        _vsphere.set_module_option_string({"name": "esx1", "configManager.kernelModuleSystem": FakeKms(fault=vim.fault.NotFound())},
                                          "nvidia", "a=1")
