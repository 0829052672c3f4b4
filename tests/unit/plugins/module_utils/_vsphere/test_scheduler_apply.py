"""The ESXi vGPU scheduler's workflow (plugins/module_utils/_vsphere/scheduler_apply.py): it reads the hosts and their
option strings, writes what the pure planner says, in order, and names the hosts already changed when a write fails.
The hosts' HostKernelModuleSystem is a stand-in raising the faults pyVmomi declares for it (_typeinfo_vim.py)."""

from __future__ import annotations

import pytest
from pyVmomi import vim

from ansible_collections.gpuops.provision.plugins.module_utils._gpu import vgpu_scheduler as vs
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import scheduler_apply as apply

FIXED = "NVreg_RegistryDwords=RmPVMRL=0x11"


class Kms:
    def __init__(self, log, name, value="", read_fault=None, write_fault=None):
        self.log, self.name, self.value, self.read_fault, self.write_fault = log, name, value, read_fault, write_fault

    def QueryConfiguredModuleOptionString(self, module):  # noqa: N802 (pyVmomi's name)
        self.log.append(("read", self.name))
        if self.read_fault:
            raise self.read_fault
        return self.value

    def UpdateModuleOptionString(self, module, options):  # noqa: N802
        self.log.append(("write", self.name, module, options))
        if self.write_fault:
            raise self.write_fault


class Session:
    """api.Session.hosts over rows in memory (sorted by name, as the real one returns them)."""

    def __init__(self, rows):
        self.rows, self.asked = rows, []

    def hosts(self, datacenter=None, cluster=None, names=None, props=None):
        self.asked.append((datacenter, cluster, names, props))
        return sorted(self.rows, key=lambda r: r["name"])


def hosts(log, **kms):
    """Connected GPU hosts, one per keyword: name -> Kms keyword arguments (None: no kernel module system)."""
    return [{"name": name, "config.graphicsInfo": ["gpu"], "runtime.connectionState": "connected",
             "summary.rebootRequired": False, "runtime.bootTime": None,
             "configManager.kernelModuleSystem": None if kw is None else Kms(log, name, **kw)} for name, kw in kms.items()]


def test_run_reads_the_scope_and_writes_the_changed_hosts_in_order():
    log = []
    session = Session(hosts(log, esx2=dict(value="NVreg_X=1"), esx1=dict(value=""), esx3=dict(value=FIXED)))
    params = dict(cluster="c1", policy="fixed_share")
    results, warnings = apply.run(session, params, check_mode=False)
    assert session.asked == [(None, "c1", None, api.HOST_PROPS + api.SCHEDULER_HOST_PROPS)]
    assert log == [("read", "esx1"), ("read", "esx2"), ("read", "esx3"),
                   ("write", "esx1", "nvidia", FIXED), ("write", "esx2", "nvidia", "NVreg_X=1 " + FIXED)]
    assert [(r["name"], r["changed"], r["reboot_required"]) for r in results] == [
        ("esx1", True, True), ("esx2", True, True), ("esx3", False, False)]
    assert warnings == []


def test_check_mode_and_verify_write_nothing():
    log = []
    rows = hosts(log, esx1=dict(value=""))
    results, _warnings = apply.run(Session(rows), dict(policy="fixed_share"), check_mode=True)
    assert log == [("read", "esx1")] and results[0]["changed"] and results[0]["after"] == FIXED
    log.clear()
    rows = hosts(log, esx1=dict(value=FIXED))
    results, _warnings = apply.run(Session(rows), dict(policy="fixed_share", verify=True), check_mode=False)
    assert log == [("read", "esx1")] and results[0]["verified"]


def test_a_failed_write_names_the_hosts_already_changed_and_stops():
    log = []
    rows = hosts(log, esx1=dict(), esx2=dict(write_fault=vim.fault.NotFound()), esx3=dict())
    with pytest.raises(api.VsphereError, match=r"^host esx2: UpdateModuleOptionString\(nvidia\) failed: NotFound "
                       r"\(already changed: esx1\)$"):
        apply.run(Session(rows), dict(policy="fixed_share"), check_mode=False)
    assert [entry[:2] for entry in log if entry[0] == "write"] == [("write", "esx1"), ("write", "esx2")]
    rows = hosts([], esx1=dict(write_fault=vim.fault.NotFound()))
    with pytest.raises(api.VsphereError, match=r"failed: NotFound \(already changed: none\)$"):
        apply.run(Session(rows), dict(policy="fixed_share"), check_mode=False)


def test_a_refused_read_fails_before_any_write_unless_an_earlier_host_is_the_error():
    refused = vim.fault.NoPermission(privilegeId="Host.Config.Settings")
    log = []
    rows = hosts(log, esx1=dict(), esx2=dict(read_fault=refused), esx3=dict())
    with pytest.raises(api.VsphereError, match=r"^host esx2: reading the nvidia module options was refused"):
        apply.run(Session(rows), dict(policy="fixed_share"), check_mode=False)
    assert log == [("read", "esx1"), ("read", "esx2")]
    # esx1, read before esx2, is a GPU host without the nvidia module: that error comes first, as hosts are in order
    rows = hosts([], esx1=None, esx2=dict(read_fault=refused))
    with pytest.raises(vs.SchedulerError, match=r"^host esx1: vGPU scheduler: the nvidia kernel module is not installed"):
        apply.run(Session(rows), dict(policy="fixed_share"), check_mode=False)
