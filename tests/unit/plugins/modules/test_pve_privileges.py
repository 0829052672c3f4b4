# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Least privilege (issue 39 point 6): a token with exactly the privileges docs/proxmox.md lists, by ACL path.

pvesim checks them per path with propagation (lab/pvesim/httpd.py Privs, as PVE's RPCEnvironment), lists only the VMs
and mappings the token may see, and answers GET /access/permissions (pve-access-control permissions).
"""

from __future__ import annotations

from ansible_collections.gpuops.provision.plugins.modules import pve_gpu_info, pve_vm_gpu

from pvesim_inproc import cluster, module_runner, use_pvesim, writes  # pylint: disable=import-error

# Exactly what pve_vm_gpu needs for VM 102 with mapping a100 and the default precheck (docs/proxmox.md).
EXACT = {"/": ["Sys.Audit"], "/vms/102": ["VM.Audit", "VM.Config.HWType", "VM.PowerMgmt"],
         "/mapping/pci/a100": ["Mapping.Use"], "/mapping/pci/l40s-vgpu": ["Mapping.Use"]}


def make_sim(monkeypatch, privs):
    fx = cluster()
    fx["users"] = {"root@pam": {"password": "pvesim", "tokens": {"ansible": "pvesim-token"}},
                   "ops@pve": {"password": "x", "privs": privs, "tokens": {"gpu": {"secret": "ops-token-0d9b8c7a", "privs": privs}}}}
    return use_pvesim(monkeypatch, fx)


def ops(run_module, module):
    run = module_runner(run_module, module)

    def _run(args, **kw):
        return run(dict(args, api_user="ops@pve", api_token_id="gpu", api_token_secret="ops-token-0d9b8c7a"), **kw)
    return _run


def test_a_token_with_exactly_the_documented_privileges_does_the_job(monkeypatch, run_module):
    sim = make_sim(monkeypatch, EXACT)
    res = ops(run_module, pve_vm_gpu)({"vmid": 102, "gpus": [{"mapping": "a100", "pcie": True}], "restart": "always"})
    assert res.get("failed") is not True and res["changed"] is True, res
    assert sim.vms[102]["conf"]["hostpci0"] == "mapping=a100,pcie=1"


def test_a_missing_privilege_is_found_before_deletes_are_written(monkeypatch, run_module):
    # update_vm_api writes each delete before it checks the sets: without the pre-check the delete of hostpci1 would
    # stay behind when Mapping.Use on a100 is refused.
    sim = make_sim(monkeypatch, dict(EXACT, **{"/mapping/pci/a100": []}))
    sim.vms[102]["conf"]["hostpci1"] = "mapping=l40s-vgpu"
    res = ops(run_module, pve_vm_gpu)({"vmid": 102, "gpus": [{"mapping": "a100"}], "precheck": False})
    assert res["failed"] is True and writes(sim) == 0, res
    assert sim.vms[102]["conf"]["hostpci1"] == "mapping=l40s-vgpu"
    assert res["msg"] == ("VM 102 on node pve1: this session (ops@pve with token gpu) lacks Mapping.Use on /mapping/pci/a100 "
                          "(hostpci0 sets mapping a100); nothing was sent, nothing changed")


def test_restart_needs_power_management(monkeypatch, run_module):
    sim = make_sim(monkeypatch, dict(EXACT, **{"/vms/100": ["VM.Audit", "VM.Config.HWType"]}))
    res = ops(run_module, pve_vm_gpu)({"vmid": 100, "gpus": [{"mapping": "a100"}], "restart": "if_needed"})
    assert res["failed"] is True and writes(sim) == 0, res
    assert "lacks VM.PowerMgmt on /vms/100 (to restart it (restart=if_needed))" in res["msg"], res


def test_a_403_names_the_privilege_path_and_what_it_was_for(monkeypatch, run_module):
    make_sim(monkeypatch, {"/vms": ["VM.Audit"]})
    res = ops(run_module, pve_gpu_info)({})
    assert res["failed"] is True, res
    assert ("HTTP 403: Permission check failed (/, Sys.Audit|Sys.Modify); this needs Sys.Audit|Sys.Modify on /, for the "
            "hardware read: pve_gpu_info" in res["msg"]), res
