# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/filter/vgpu_scheduler.py and roles/pve_gpu_host/tasks/vgpu_scheduler.yml (issue 18, KVM/Proxmox side).

The filters as registered with their documentation files; the role's entry point run for real is
tests/integration/proxmox/test_pve_vgpu_scheduler_role.py.
"""

from __future__ import annotations

import base64
import os

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.plugin_utils._role_filters import vgpu_scheduler as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
FILTER_DIR = os.path.join(ROOT, "plugins", "filter")
NAMES = ["vgpu_scheduler_mismatches", "vgpu_scheduler_modprobe", "vgpu_scheduler_precheck", "vgpu_scheduler_running",
         "vgpu_scheduler_spec"]
MINE = "/etc/modprobe.d/zz-gpuops-vgpu-scheduler.conf"
FILTERS = F.filters()


def test_filters_are_registered():
    assert sorted(FILTERS) == NAMES


def test_spec_error_names_the_filter_and_host():
    want = r"^gpuops.provision.vgpu_scheduler_spec: host pve-9: vGPU scheduler: timeslice_ms 31 is outside the driver's range 1-30"
    with pytest.raises(AnsibleFilterError, match=want):
        FILTERS["vgpu_scheduler_spec"]({"policy": "fixed_share", "timeslice_ms": 31}, "pve-9")
    with pytest.raises(AnsibleFilterError, match="bad arguments"):
        FILTERS["vgpu_scheduler_spec"]()


def slurped(path, text):
    return {"source": path, "content": base64.b64encode(text.encode()).decode(), "encoding": "base64"}


def test_modprobe_plan_keeps_the_keys_the_driver_reads_and_is_idempotent():
    nvidia = slurped("/etc/modprobe.d/nvidia.conf", 'options nvidia NVreg_RegistryDwords="RMIntrLockingMode=1;RmPVMRL=0x01"\n'
                                                    "options nvidia NVreg_OpenRmEnableUnsupportedGpus=1\n")
    plan = FILTERS["vgpu_scheduler_modprobe"]([nvidia], {"policy": "fixed_share"}, MINE, "pve-1")
    assert plan["changed"] is True and plan["rmpvmrl"] == "0x11"
    assert plan["registry_dwords"] == "RMIntrLockingMode=1;RmPVMRL=0x11"
    assert 'options nvidia NVreg_RegistryDwords="RMIntrLockingMode=1;RmPVMRL=0x11"\n' in plan["content"]
    assert plan["configured_before"]["policy"] == "equal_share"
    files = [nvidia, {"path": MINE, "content": plan["content"]}]
    again = FILTERS["vgpu_scheduler_modprobe"](files, {"policy": "fixed_share"}, MINE, "pve-1")
    assert again["changed"] is False and again["content"] == plan["content"]
    assert again["configured_before"]["policy"] == "fixed_share"


@pytest.mark.parametrize("files,match", [
    ([{"path": "/etc/modprobe.d/zzz.conf", "content": "options nvidia NVreg_RegistryDwords=X=1\n"}],
     r"^gpuops.provision.vgpu_scheduler_modprobe: host pve-1: vGPU scheduler: /etc/modprobe.d/zzz.conf sets "
     r"NVreg_RegistryDwords for nvidia after /etc/modprobe.d/zz-gpuops-vgpu-scheduler.conf"),
    ([{"path": "/etc/modprobe.d/a.conf",
       "content": 'options nvidia NVreg_RegistryDwordsPerDevice="pci=0000:17:00.0;RmPVMRL=0x01"\n'}],
     r"host pve-1: vGPU scheduler: NVreg_RegistryDwordsPerDevice sets RmPVMRL per GPU \(0000:17:00.0\)"),
])
def test_modprobe_plan_refuses_what_would_defeat_it(files, match):
    with pytest.raises(AnsibleFilterError, match=match):
        FILTERS["vgpu_scheduler_modprobe"](files, {"policy": "fixed_share"}, MINE, "pve-1")


def test_modprobe_plan_reads_like_modprobe():
    files = [
        # a later file without NVreg_RegistryDwords is fine; a hidden /lib file with one is not read at all
        {"path": "/etc/modprobe.d/zzz.conf", "content": "options nvidia NVreg_EnableMSI=1\n"},
        {"path": "/lib/modprobe.d/zzz.conf", "content": "options nvidia NVreg_RegistryDwords=RmPVMRL=0x01\n"},
        {"path": "/usr/lib/modprobe.d/nvidia.conf", "content": "options nvidia NVreg_RegistryDwords=A=1\n"},
        {"path": "/etc/modprobe.d/nvidia.conf.bak", "content": "options nvidia NVreg_RegistryDwords=B=1\n"},
        {"path": "/etc/modprobe.d/b.conf", "content": "options nvidia-drm modeset=1\n# options nvidia NVreg_RegistryDwords=C=1\n"},
    ]
    plan = FILTERS["vgpu_scheduler_modprobe"](files, {"policy": "equal_share", "timeslice_ms": 3}, MINE, "pve-1")
    assert plan["registry_dwords"] == "A=1;RmPVMRL=0x00030003"


def gpu(addr, running=None, caps=None, supported=True):
    sched = {"supported": supported, "error": None if supported else "NVML_ERROR_NOT_SUPPORTED",
             "running": running, "capabilities": caps}
    return {"pci_address": addr, "uuid": "GPU-" + addr[-7:-5], "vgpu_scheduler": sched}


def test_mismatches_and_precheck_name_host_gpu_expected_and_observed():
    fixed = {"policy": "fixed_share", "arr": True, "timeslice_ms": None, "frequency_hz": 480, "averaging_factor": 33}
    best = dict.fromkeys(fixed)
    best["policy"] = "best_effort"
    gpus = [gpu("0000:17:00.0", fixed), gpu("0000:31:00.0", best), gpu("0000:4b:00.0", supported=False)]
    assert FILTERS["vgpu_scheduler_mismatches"](gpus, {"policy": "fixed_share"}, "pve-1") == [
        "host pve-1: GPU 0000:31:00.0 (GPU-31): expected fixed_share (driver default scheduling), observed best_effort"]
    assert FILTERS["vgpu_scheduler_mismatches"](gpus[2:], {"policy": "fixed_share"}, "pve-1") == [
        "host pve-1: no GPU answers NVML's vGPU scheduler queries (NVML_ERROR_NOT_SUPPORTED): not a vGPU host, or "
        "the NVIDIA vGPU manager is not loaded"]
    assert FILTERS["vgpu_scheduler_mismatches"]([], {"policy": "fixed_share"}, "pve-1")[0].startswith(
        "host pve-1: no GPU answers NVML's vGPU scheduler queries (no GPU)")
    mixed = gpu("0000:17:00.0", best, {"supported_policies": ["best_effort", "equal_share"]})
    assert FILTERS["vgpu_scheduler_precheck"]([mixed, gpus[2]], {"policy": "fixed_share"}, "pve-1") == [
        "host pve-1: GPU 0000:17:00.0 (GPU-17): policy fixed_share is not supported (the GPU supports best_effort, "
        "equal_share)"]
    assert FILTERS["vgpu_scheduler_precheck"]([mixed], {"policy": "equal_share"}, "pve-1") == []
