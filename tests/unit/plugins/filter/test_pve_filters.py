# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/filter/pve.py: the pve_gpu_vm role's VM list as one batch task's items."""

from __future__ import annotations

from ansible_collections.gpuops.provision.plugins.plugin_utils._role_filters import pve


def test_registered():
    assert sorted(pve.filters()) == [
        "pve_host_card_functions", "pve_host_cmdline", "pve_host_passthrough_files", "pve_host_pci", "pve_host_problems",
        "pve_host_vfio_stolen", "pve_host_vgpu_conflicts", "pve_host_vgpu_evidence", "pve_host_vgpu_helper_done",
        "pve_host_vgpu_problems", "pve_vm_batch", "pve_vm_romfiles"]


def test_items_keep_module_keys_and_get_the_role_restart():
    vms = [{"vmid": 101, "gpus": [{"mapping": "a100"}], "comment": "team a", "node": None},
           {"vmid": 102, "gpus": [], "restart": "always", "timeout": 60}]
    assert pve.pve_vm_batch(vms, restart="if_needed") == [
        {"vmid": 101, "gpus": [{"mapping": "a100"}], "restart": "if_needed"},
        {"vmid": 102, "gpus": [], "restart": "always", "timeout": 60}]


def test_precheck_off_only_for_vms_on_a_mapping_this_run_creates():
    vms = [{"vmid": 101, "gpus": [{"mapping": "h100"}]}, {"vmid": 102, "gpus": [{"mapping": "a100"}, {"host": "01:00.0"}]},
           {"vmid": 103, "gpus": [{"mapping": "h100"}], "precheck": True}]
    out = pve.pve_vm_batch(vms, new_mappings=["h100"])
    assert [i.get("precheck") for i in out] == [False, None, False]
    assert pve.pve_vm_batch([], new_mappings=["h100"]) == []
