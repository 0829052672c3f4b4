# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The mdev comparison of assert_valid exists from PVE 8.4 only (issue 39 point 5).

pve-guest-common 57cd454 (libpve-guest-common-perl 5.1.7) added it; PVE 8.0-8.3 start a mapping whose mdev flag
differs from the hardware, so the modules must not refuse one there. pvesim plays the release (schema.FEATURES).
"""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.modules import pve_pci_mapping, pve_vm_gpu

from pvesim_inproc import cluster, module_runner, use_pvesim, writes  # pylint: disable=import-error

VFS = [{"node": "pve1", "path": ["41:00.4"]}, {"node": "pve1", "path": ["41:00.5"]}]


def make_sim(monkeypatch, version):
    fx = cluster(version=version)
    fx["mappings"]["l40s-vgpu"]["mdev"] = 0  # made before 8.4, where the flag was a UI hint only
    return use_pvesim(monkeypatch, fx)


@pytest.mark.parametrize("version", ["8.0.4", "8.3.2"])
def test_mapping_with_mdev_flag_unlike_the_hardware_is_kept_before_8_4(monkeypatch, run_module, version):
    sim = make_sim(monkeypatch, version)
    res = module_runner(run_module, pve_pci_mapping)({"id": "l40s-vgpu", "mdev": False, "map": VFS})
    assert res.get("failed") is not True and res["changed"] is False, res
    res = module_runner(run_module, pve_vm_gpu)({"vmid": 102, "gpus": [{"mapping": "l40s-vgpu", "mdev": "nvidia-1155"}],
                                                 "restart": "always"})
    assert res.get("failed") is not True, res
    upid = sim.vm_power("pve1", 102, "start", "root@pam")
    assert sim.task_status("pve1", upid)["exitstatus"] == "OK"  # and PVE starts it


def test_from_8_4_the_same_mapping_is_refused_before_any_write(monkeypatch, run_module):
    sim = make_sim(monkeypatch, "8.4.1")
    res = module_runner(run_module, pve_vm_gpu)({"vmid": 102, "gpus": [{"mapping": "l40s-vgpu", "mdev": "nvidia-1155"}]})
    assert res["failed"] is True and writes(sim) == 0, res
    assert "'mdev' does not match for '0000:41:00.4': the mapping says no mdev" in res["msg"], res
