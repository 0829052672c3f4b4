"""Unit tests for the ConfigSpec that vsphere_vm_vgpu sends (module_utils/_vsphere_vm.py; pyvmomi objects, no network)."""

from __future__ import annotations

from pyVmomi import vim

from ansible_collections.gpuops.provision.plugins.module_utils import _vgpu
from ansible_collections.gpuops.provision.plugins.module_utils import _vsphere_vm as mod


def existing(key, profile):
    d = vim.vm.device.VirtualPCIPassthrough(key=key, backing=vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo(vgpu=profile))
    return dict(key=key, profile=profile, device=d)


def test_spec_replaces_profile_and_locks_memory_and_sets_mmio():
    cur = [existing(203, "grid_a100-4c")]
    plan = _vgpu.plan_vm("vm1", "esx1", cur, ["grid_a100-40c"], {"esx1": ["grid_a100-4c", "grid_a100-40c"]},
                         "poweredOn", False, {}, use_64bit_mmio=True, mmio_size_gb=64, power_policy="power_off")
    spec = mod.build_spec(plan)
    ops = [(c.operation, c.device.key, c.device.backing.vgpu) for c in spec.deviceChange]
    assert ops == [("remove", 203, "grid_a100-4c"), ("add", -100, "grid_a100-40c")]
    assert spec.memoryReservationLockedToMax is True
    assert {o.key: o.value for o in spec.extraConfig} == {"pciPassthru.use64bitMMIO": "TRUE", "pciPassthru.64bitMMIOSizeGB": "64"}
    assert mod.actions_of(plan) == ["power_off", "remove grid_a100-4c (key 203)", "add grid_a100-40c", "reserve_all_memory",
                                    "set pciPassthru.64bitMMIOSizeGB=64", "set pciPassthru.use64bitMMIO=TRUE", "power_on"]


def test_spec_for_two_new_vgpus_uses_distinct_temp_keys_and_leaves_memory_alone_when_locked():
    plan = _vgpu.plan_vm("vm1", "esx1", [], ["grid_l40s-48q"] * 2, {"esx1": ["grid_l40s-48q"]}, "poweredOff", True, {})
    spec = mod.build_spec(plan)
    assert [c.device.key for c in spec.deviceChange] == [-100, -101]
    assert spec.memoryReservationLockedToMax is None and not spec.extraConfig
