"""lab/vcsim: HostKernelModuleSystem and RebootHost_Task, driven by pyvmomi (lab/vcsim/kmod.go).

The rules follow the vSphere API reference (HostKernelModuleSystem, KernelModuleInfo, HostListSummary.rebootRequired,
HostSystem.RebootHost_Task) and pyVmomi's type table (_typeinfo_vim.py: privileges and declared faults).
"""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "lab", "vcsim"))

import vcsim_lab  # noqa: E402  (lab helper, found through the path above)

pyVmomi = pytest.importorskip("pyVmomi")
from pyVim.connect import Disconnect  # noqa: E402
from pyVim.task import WaitForTask  # noqa: E402
from pyVmomi import vim  # noqa: E402

if not vcsim_lab.available():
    pytest.skip("vcsim-gpu cannot be built here (no Go >= 1.23, see lab/vcsim/README.md)", allow_module_level=True)

pytestmark = pytest.mark.slow  # starts the simulator

EQUAL = "NVreg_RegistryDwords=RmPVMRL=0x01"
FIXTURE = {"hosts": {"DC0_C0_H0": {"module_options": {"nvidia": EQUAL}},
                     "DC0_C0_H1": {"driver": ""}, "DC0_C0_H2": {}}}


def hosts_of(si):
    view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [vim.HostSystem], True)
    try:
        return {h.name: h for h in view.view}
    finally:
        view.Destroy()


@pytest.fixture(scope="module")
def sims():
    # one simulator per reboot-flag mode; -module-reboot-flag=none is a host that never raises rebootRequired
    with vcsim_lab.vcsim(clusters=1, hosts=3, vms=0, fixture=FIXTURE, readonly=("reader", "readpw")) as flagged, \
            vcsim_lab.vcsim(clusters=1, hosts=1, vms=0, fixture={"hosts": {"DC0_C0_H0": {}}},
                            extra_args=["-module-reboot-flag", "none"]) as quiet:
        yield flagged, quiet


@pytest.fixture()
def si(sims):
    conn = sims[0].connect()
    yield conn
    Disconnect(conn)


def test_gpu_hosts_list_the_nvidia_module_with_its_configured_options(si):
    hosts = hosts_of(si)
    kms = hosts["DC0_C0_H0"].configManager.kernelModuleSystem
    assert kms is not None and kms._moId == "kernelModuleSystem-" + hosts["DC0_C0_H0"]._moId
    mods = {m.name: m for m in kms.QueryModules()}
    assert {"vmkernel", "nvidia"} <= set(mods)
    # KernelModuleInfo.optionString is the configured string (API reference: "not necessarily ... in use")
    assert mods["nvidia"].optionString == EQUAL and mods["nvidia"].loaded
    assert kms.QueryConfiguredModuleOptionString("nvidia") == EQUAL
    # each host has its own system: the template's shared "kernelModuleSystem" moref is not reused
    other = hosts["DC0_C0_H2"].configManager.kernelModuleSystem
    assert other._moId != kms._moId
    assert other.QueryConfiguredModuleOptionString("nvidia") == ""


def test_unknown_module_is_not_found(si):
    hosts = hosts_of(si)
    kms = hosts["DC0_C0_H0"].configManager.kernelModuleSystem
    with pytest.raises(vim.fault.NotFound, match="DC0_C0_H0.*nvidia_typo"):
        kms.QueryConfiguredModuleOptionString("nvidia_typo")
    with pytest.raises(vim.fault.NotFound):
        kms.UpdateModuleOptionString("nvidia_typo", "x=1")
    # a host without the NVIDIA driver VIB has no nvidia module
    no_driver = hosts["DC0_C0_H1"].configManager.kernelModuleSystem
    assert "nvidia" not in {m.name for m in no_driver.QueryModules()}
    with pytest.raises(vim.fault.NotFound, match="DC0_C0_H1"):
        no_driver.QueryConfiguredModuleOptionString("nvidia")


def test_update_sets_reboot_required_until_the_host_reboots(si):
    host = hosts_of(si)["DC0_C0_H2"]
    kms = host.configManager.kernelModuleSystem
    assert host.summary.rebootRequired is False
    boot_before = host.runtime.bootTime
    fixed = "NVreg_RegistryDwords=RmPVMRL=0x11"
    kms.UpdateModuleOptionString("nvidia", fixed)
    assert kms.QueryConfiguredModuleOptionString("nvidia") == fixed
    assert host.summary.rebootRequired is True
    # setting it back to what the module runs with leaves nothing pending
    kms.UpdateModuleOptionString("nvidia", "")
    assert host.summary.rebootRequired is False
    kms.UpdateModuleOptionString("nvidia", fixed)
    assert host.summary.rebootRequired is True

    # not in maintenance mode and not forced: InvalidState, nothing happens
    with pytest.raises(vim.fault.InvalidState):
        WaitForTask(host.RebootHost_Task(force=False))
    assert host.summary.rebootRequired is True
    WaitForTask(host.EnterMaintenanceMode_Task(timeout=0))
    WaitForTask(host.RebootHost_Task(force=False))
    WaitForTask(host.ExitMaintenanceMode_Task(timeout=0))
    assert host.summary.rebootRequired is False
    assert host.runtime.bootTime is not None and (boot_before is None or host.runtime.bootTime > boot_before)
    assert kms.QueryConfiguredModuleOptionString("nvidia") == fixed
    # the next change is pending again; a forced reboot applies it without maintenance mode
    kms.UpdateModuleOptionString("nvidia", EQUAL)
    assert host.summary.rebootRequired is True
    WaitForTask(host.RebootHost_Task(force=True))
    assert host.summary.rebootRequired is False


def test_read_only_login_gets_no_permission(sims):
    sim = sims[0]
    conn = sim.connect("reader", "readpw")
    try:
        kms = hosts_of(conn)["DC0_C0_H0"].configManager.kernelModuleSystem
        with pytest.raises(vim.fault.NoPermission) as info:
            kms.UpdateModuleOptionString("nvidia", "")
        assert info.value.privilegeId == "Host.Config.Settings"
    finally:
        Disconnect(conn)


def test_hosts_that_do_not_flag_module_changes(sims):
    conn = sims[1].connect()
    try:
        host = hosts_of(conn)["DC0_C0_H0"]
        host.configManager.kernelModuleSystem.UpdateModuleOptionString("nvidia", "NVreg_RegistryDwords=RmPVMRL=0x11")
        assert host.summary.rebootRequired is False
    finally:
        Disconnect(conn)


def test_module_options_for_a_module_the_host_lacks_is_refused(tmp_path):
    with pytest.raises(Exception, match="DC0_C0_H0.*nvidia"):
        with vcsim_lab.vcsim(clusters=1, hosts=1, vms=0, run_dir=str(tmp_path),
                             fixture={"hosts": {"DC0_C0_H0": {"driver": "", "module_options": {"nvidia": "x=1"}}}}):
            pass
