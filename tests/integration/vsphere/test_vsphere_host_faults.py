"""The host modules against vSphere as it is found (issue 40): Xorg that does not start on a host without vSGA devices
(point 5, KB 318047, lab/vcsim/services.go) and transport faults in the middle of a session (point 9,
lab/vcsim/faults.go). Modules run in this process (their main())."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.provision.plugins.modules import (vsphere_gpu_info, vsphere_host_graphics,
                                                                  vsphere_host_vgpu_scheduler)

pytestmark = pytest.mark.slow

FIXTURE = {"hosts": {"DC0_C0_*": {"model": "a100-40"}}}  # graphics type shared (vSGA), as a host is found


@pytest.fixture
def sim(vcsim_factory):
    return vcsim_factory(hosts=2, vms=0, fixture=FIXTURE)


def default_types(sim):
    with sim.connect() as s:
        return {r["name"]: r["config.graphicsConfig"].hostDefaultGraphicsType for r in s.hosts(props=["name", "config.graphicsConfig"])}


def warnings(res):
    return json.dumps(res.get("warnings") or [])


def test_a_failed_xorg_restart_is_a_warning_on_the_changed_host_and_the_others_go_on(sim, run_module):
    args = dict(sim.auth, cluster="DC0_C0", default_graphics_type="sharedDirect", restart_xorg=True)
    res = run_module(vsphere_host_graphics, args)
    assert not res.get("failed"), res
    assert res["changed"] and [h["changed"] for h in res["hosts"]] == [True, True]
    assert default_types(sim) == {"DC0_C0_H0": "sharedDirect", "DC0_C0_H1": "sharedDirect"}
    for host in ("DC0_C0_H0", "DC0_C0_H1"):
        assert "host %s: the graphics settings are changed, but restarting Xorg failed" % host in warnings(res)
    # no device is or was vSGA: Xorg is left alone (KB 318047)
    res = run_module(vsphere_host_graphics, dict(args, assignment_policy="consolidation"))
    assert res["changed"] and "Xorg" not in warnings(res), res


def test_xorg_is_restarted_where_a_device_stays_in_vsga_mode(sim, run_module):
    res = run_module(vsphere_host_graphics, dict(sim.auth, esxi_hostname=["DC0_C0_H0"], restart_xorg=True,
                                                 devices=[dict(pci_id="0000:5e:00.0", graphics_type="sharedDirect")]))
    assert res["changed"] and not res.get("warnings"), res


def test_a_graphics_update_whose_answer_is_lost_fails_naming_the_host_and_a_rerun_finishes(sim, run_module):
    args = dict(sim.auth, cluster="DC0_C0", default_graphics_type="sharedDirect")
    sim.arm_fault("UpdateGraphicsConfig", "truncate", skip=1)  # the second host's update is applied, its answer lost
    res = run_module(vsphere_host_graphics, args)
    assert res.get("failed"), res
    assert res["msg"].startswith("host DC0_C0_H1: whether UpdateGraphicsConfig was applied is unknown: "
                                 "UpdateGraphicsConfig on graphicsManager-"), res["msg"]
    assert "got no usable answer from vCenter (ExpatError" in res["msg"] and "(already changed: DC0_C0_H0)" in res["msg"]
    res = run_module(vsphere_host_graphics, args)
    assert not res.get("failed") and not res["changed"], res
    assert default_types(sim) == {"DC0_C0_H0": "sharedDirect", "DC0_C0_H1": "sharedDirect"}


def test_a_scheduler_write_answered_by_an_error_page_fails_cleanly_and_a_rerun_finishes(sim, run_module):
    args = dict(sim.auth, cluster="DC0_C0", policy="fixed_share")
    sim.arm_fault("UpdateModuleOptionString", "http500")
    res = run_module(vsphere_host_vgpu_scheduler, args)
    assert res.get("failed") and "UpdateModuleOptionString on kernelModuleSystem-" in res["msg"], res
    assert "(already changed: none)" in res["msg"]
    res = run_module(vsphere_host_vgpu_scheduler, args)
    assert not res.get("failed") and res["changed"] and res["reboot_required"] == ["DC0_C0_H0", "DC0_C0_H1"], res
    assert not run_module(vsphere_host_vgpu_scheduler, args)["changed"]


def test_gpu_info_fails_cleanly_when_a_read_gets_an_error_page(sim, run_module):
    sim.arm_fault("FetchSoftwarePackages", "http500")
    res = run_module(vsphere_gpu_info, dict(sim.auth, cluster="DC0_C0"))
    assert res.get("failed") and "fetchSoftwarePackages on imageConfigManager-" in res["msg"], res
    assert "got no usable answer from vCenter" in res["msg"]
    with sim.connect() as s:
        assert len(s.hosts(props=["name"])) == 2  # the stand-in still answers; the next run reads
