"""Unit tests for the pure vGPU planner (plugins/module_utils/_vgpu.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils import _vgpu
from ansible_collections.gpuops.provision.plugins.module_utils._vgpu import VgpuError

A100 = ["grid_a100-4c", "grid_a100-8c", "grid_a100-20c", "grid_a100-40c", "grid_a100-3-20c", "grid_a100-7-40c"]
L40S = ["grid_l40s-8q", "grid_l40s-48q", "grid_l40s-48a", "grid_l40s-48c"]


@pytest.mark.parametrize("name,expect", [
    ("grid_a100-4c", dict(board="a100", fb_gb=4, series="c", mig_slices=None)),
    ("grid_a100d-80c", dict(board="a100d", fb_gb=80, series="c", mig_slices=None)),
    ("grid_a100-3-20c", dict(board="a100", fb_gb=20, series="c", mig_slices=3)),
    ("grid_l40s-48q", dict(board="l40s", fb_gb=48, series="q", mig_slices=None)),
])
def test_parse_profile(name, expect):
    p = _vgpu.parse_profile(name)
    assert {k: p[k] for k in expect} == expect


@pytest.mark.parametrize("name", ["", "a100-4c", "grid_a100", "grid_a100-c", None])
def test_parse_profile_rejects_garbage(name):
    assert _vgpu.parse_profile(name) is None


def test_max_framebuffer_ignores_mig_profiles():
    assert _vgpu.max_framebuffer(A100 + L40S) == {"a100": 40, "l40s": 48}


def test_single_vgpu_of_any_size_is_fine():
    assert _vgpu.multi_vgpu_errors(["grid_a100-4c"], A100) == []


def test_multi_vgpu_full_framebuffer_same_profile_allowed():
    assert _vgpu.multi_vgpu_errors(["grid_a100-40c"] * 4, A100) == []
    assert _vgpu.multi_vgpu_errors(["grid_l40s-48q"] * 2, L40S) == []


def test_multi_vgpu_rejects_partial_framebuffer():
    errs = _vgpu.multi_vgpu_errors(["grid_a100-20c", "grid_a100-20c"], A100)
    assert len(errs) == 1 and "full-framebuffer" in errs[0] and "grid_a100-40c" in errs[0]


def test_multi_vgpu_rejects_mixed_profiles_mig_series_and_count():
    errs = _vgpu.multi_vgpu_errors(["grid_a100-40c", "grid_a100-4c"], A100)
    assert any("same profile" in e for e in errs)
    errs = _vgpu.multi_vgpu_errors(["grid_a100-7-40c"] * 2, A100)
    assert any("MIG-backed" in e for e in errs)
    errs = _vgpu.multi_vgpu_errors(["grid_l40s-48a"] * 2, L40S)
    assert any("Q- and C-series" in e for e in errs)
    errs = _vgpu.multi_vgpu_errors(["grid_a100-40c"] * 5, A100)
    assert any("at most 4" in e for e in errs)
    assert _vgpu.multi_vgpu_errors(["grid_a100-40c"] * 5, A100, max_vgpus=8) == []


def test_validate_unknown_profile_names_vm_host_and_offer():
    with pytest.raises(VgpuError) as e:
        _vgpu.validate_profiles("vm1", ["grid_a100-99c"], "esx1", {"esx1": A100})
    msg = str(e.value)
    assert "vm1" in msg and "esx1" in msg and "grid_a100-99c" in msg and "grid_a100-4c" in msg


def test_validate_profile_on_other_host_only():
    offers = {"esx1": A100, "esx2": L40S}
    with pytest.raises(VgpuError) as e:
        _vgpu.validate_profiles("vm1", ["grid_l40s-8q"], "esx1", offers, placement="host")
    assert "only by esx2" in str(e.value) and "placement=cluster" in str(e.value)
    assert _vgpu.validate_profiles("vm1", ["grid_l40s-8q"], "esx1", offers, placement="cluster") == ["esx2"]


def test_validate_cluster_needs_one_host_with_all_profiles():
    offers = {"esx1": ["grid_a100-40c"], "esx2": ["grid_a100-4c"]}
    with pytest.raises(VgpuError, match="no single host"):
        _vgpu.validate_profiles("vm1", ["grid_a100-40c", "grid_a100-4c"], "esx1", offers, placement="cluster")


def test_validate_multi_vgpu_error_names_vm_and_host():
    with pytest.raises(VgpuError) as e:
        _vgpu.validate_profiles("vm1", ["grid_a100-8c", "grid_a100-8c"], "esx1", {"esx1": A100})
    assert "vm1" in str(e.value) and "esx1" in str(e.value) and "full-framebuffer" in str(e.value)


def dev(key, profile):
    return dict(key=key, profile=profile)


def test_diff_keeps_matching_and_replaces_others():
    d = _vgpu.diff_vgpus([dev(201, "grid_a100-4c"), dev(200, "grid_a100-8c")], ["grid_a100-8c", "grid_a100-40c"])
    assert [x["key"] for x in d["keep"]] == [200]
    assert [x["key"] for x in d["remove"]] == [201]
    assert d["add"] == ["grid_a100-40c"]


def test_diff_exact_list_counts_duplicates():
    d = _vgpu.diff_vgpus([dev(200, "grid_a100-40c")], ["grid_a100-40c", "grid_a100-40c"])
    assert d["add"] == ["grid_a100-40c"] and not d["remove"]
    d = _vgpu.diff_vgpus([dev(200, "grid_a100-40c"), dev(201, "grid_a100-40c")], ["grid_a100-40c"])
    assert [x["key"] for x in d["remove"]] == [201]
    d = _vgpu.diff_vgpus([dev(200, "grid_a100-40c")], [])
    assert [x["key"] for x in d["remove"]] == [200] and not d["add"]


def test_diff_no_change():
    d = _vgpu.diff_vgpus([dev(200, "grid_a100-4c")], ["grid_a100-4c"])
    assert not d["add"] and not d["remove"]


def test_extra_config_only_reports_differences():
    assert _vgpu.plan_extra_config({}, None, None) == {}
    assert _vgpu.plan_extra_config({}, True, 128) == {_vgpu.MMIO_ENABLE_KEY: "TRUE", _vgpu.MMIO_SIZE_KEY: "128"}
    assert _vgpu.plan_extra_config({_vgpu.MMIO_ENABLE_KEY: "true", _vgpu.MMIO_SIZE_KEY: "128"}, True, 128) == {}
    assert _vgpu.plan_extra_config({_vgpu.MMIO_ENABLE_KEY: "TRUE"}, False, None) == {_vgpu.MMIO_ENABLE_KEY: "FALSE"}
    with pytest.raises(VgpuError):
        _vgpu.plan_extra_config({}, None, 0)


@pytest.mark.parametrize("state,needs,policy,expect", [
    ("poweredOff", True, "fail", dict(power_off=None, power_on_after=False)),
    ("poweredOn", False, "fail", dict(power_off=None, power_on_after=False)),
    ("poweredOn", True, "power_off", dict(power_off="hard", power_on_after=True)),
    ("poweredOn", True, "shutdown_guest", dict(power_off="guest", power_on_after=True)),
])
def test_power_plan(state, needs, policy, expect):
    assert _vgpu.plan_power("vm1", state, needs, policy) == expect


def test_power_plan_refuses_running_vm_by_default_and_suspended_always():
    with pytest.raises(VgpuError, match="vm1 is poweredOn"):
        _vgpu.plan_power("vm1", "poweredOn", True, "fail")
    with pytest.raises(VgpuError, match="suspended"):
        _vgpu.plan_power("vm1", "suspended", True, "power_off")


def test_plan_vm_locks_memory_and_is_idempotent():
    offers = {"esx1": A100}
    plan = _vgpu.plan_vm("vm1", "esx1", [], ["grid_a100-40c"], offers, "poweredOff", False, {})
    assert plan["changed"] and plan["lock_memory"] and plan["add"] == ["grid_a100-40c"]
    assert plan["after"]["memory_reservation_locked_to_max"] is True
    mmio = {_vgpu.MMIO_ENABLE_KEY: "TRUE", _vgpu.MMIO_SIZE_KEY: "128"}
    again = _vgpu.plan_vm("vm1", "esx1", [dev(200, "grid_a100-40c")], ["grid_a100-40c"], offers, "poweredOn", True, mmio)
    assert not again["changed"] and again["power"]["power_off"] is None


def test_plan_vm_invalid_input_fails_before_power_decision():
    # A powered-on VM with a bad profile reports the profile, not the power state.
    with pytest.raises(VgpuError, match="grid_x-1q"):
        _vgpu.plan_vm("vm1", "esx1", [], ["grid_x-1q"], {"esx1": A100}, "poweredOn", False, {}, power_policy="power_off")


def test_plan_graphics_changes_and_idempotence():
    cur = dict(default_graphics_type="shared", assignment_policy="performance", devices={})
    p = _vgpu.plan_graphics("esx1", cur, "sharedDirect", "consolidation", [dict(pci_id="3B:00.0", graphics_type="shared")],
                            known_devices=["0000:3b:00.0"])
    assert p["changed"]
    assert p["after"] == dict(default_graphics_type="sharedDirect", assignment_policy="consolidation",
                              devices={"0000:3b:00.0": "shared"}, vgpu_modes={})
    again = _vgpu.plan_graphics("esx1", p["after"], "sharedDirect", "consolidation",
                                [dict(pci_id="0000:3b:00.0", graphics_type="shared")], known_devices=["0000:3b:00.0"])
    assert not again["changed"]
    assert not _vgpu.plan_graphics("esx1", cur)["changed"]


def test_plan_graphics_unknown_device_names_host_and_device():
    cur = dict(default_graphics_type="shared", assignment_policy="performance", devices={})
    with pytest.raises(VgpuError) as e:
        _vgpu.plan_graphics("esx1", cur, devices=[dict(pci_id="0000:99:00.0", graphics_type="shared")],
                            known_devices=["0000:3b:00.0"])
    assert "esx1" in str(e.value) and "0000:99:00.0" in str(e.value) and "0000:3b:00.0" in str(e.value)


@pytest.mark.parametrize("vib,expect", [
    ("535.154.02-1OEM.800.1.0.20613240", "535.154.02"),
    ("550.90.05-1OEM.800.1.0.20613240", "550.90.05"),
    ("8.0.0-1.0", None),
])
def test_driver_version(vib, expect):
    assert _vgpu.driver_version(vib) == expect


def test_match_driver_vib_prefers_driver_package():
    pkgs = [dict(name="vsan", vendor="VMware", version="8.0"),
            dict(name="NVD-AIE-gpu-mgmt-daemon", vendor="NVD", version="535.154.02-1"),
            dict(name="NVD-AIE_ESXi_8.0.0_Driver", vendor="NVD", version="535.154.02-1OEM")]
    assert _vgpu.match_driver_vib(pkgs, r"(?i)^(nvidia|nvd)")["name"] == "NVD-AIE_ESXi_8.0.0_Driver"
    assert _vgpu.match_driver_vib(pkgs[:1], r"(?i)^(nvidia|nvd)") is None


def test_sensor_component_parse():
    assert _vgpu.parse_sensor_component("NVIDIA NVD-AIE_ESXi_8.0.0_Driver 535.154.02-1OEM 2024-01-01") == dict(
        vendor="NVIDIA", name="NVD-AIE_ESXi_8.0.0_Driver", version="535.154.02-1OEM")
    assert _vgpu.parse_sensor_component("short") is None


def test_drift_report_groups_and_flags_missing():
    r = _vgpu.drift_report({"a": "535.154.02", "b": "535.154.02", "c": "550.54.10", "d": None})
    assert not r["consistent"]
    assert r["versions"] == {"535.154.02": ["a", "b"], "550.54.10": ["c"]}
    assert r["missing"] == ["d"] and r["majority"] == "535.154.02"
    assert _vgpu.drift_report({"a": "1.2.3", "b": "1.2.3"})["consistent"]
    assert _vgpu.drift_report({})["consistent"]


# ---- issue 14 point 8: multi-vGPU rules by ESXi release and NVIDIA driver (MULTI_VGPU_RULES) -----------------------

A40 = ["grid_a40-8c", "grid_a40-16c", "grid_a40-48c", "grid_a40-48q"]
A100_MIG = A100 + ["grid_a100-2-10c", "grid_a100-4-20c"]


@pytest.mark.parametrize("esxi,driver,name", [
    ("8.0.3", "550.90.05", "current"),
    ("9.0.0", "580.65.05", "current"),
    ("8.0.2", "535.154.02", "vsphere8"),  # mixed sizes need R550 (vGPU 17)
    ("8.0.3", None, "vsphere8"),  # driver unknown: no mixed sizes
    ("7.0.3", "550.90.05", "legacy"),  # the driver does not lift ESXi 7's rules
    ("6.7.3", None, "legacy"),
    ("6.7.0", None, "single"),
    (None, "550.90.05", "legacy"),  # host release unknown: the rules every release accepts
])
def test_multi_vgpu_rules_by_esxi_release_and_driver(esxi, driver, name):
    rules = _vgpu.multi_vgpu_rules("auto", esxi, driver)
    assert rules["name"] == name
    assert (esxi or "unknown") in rules["basis"] and (driver or "unknown") in rules["basis"]


def test_multi_vgpu_rules_explicit_choice_and_bad_choice():
    assert _vgpu.multi_vgpu_rules("current", "7.0.3", None)["name"] == "current"
    assert _vgpu.multi_vgpu_rules("legacy", "8.0.3", "550.90.05")["basis"] == "multi_vgpu_rules=legacy"
    with pytest.raises(VgpuError, match="multi_vgpu_rules must be one of"):
        _vgpu.multi_vgpu_rules("newest")


def test_current_rules_follow_nvidia_ai_enterprise_8_1_examples():
    current = _vgpu.multi_vgpu_rules("current")
    # "you can assign an A40-48C vGPU and an A40-16C time-sliced vGPUs to the same VM"
    assert _vgpu.multi_vgpu_errors(["grid_a40-48c", "grid_a40-16c"], A40, rules=current) == []
    # "an A100-4-20C vGPU and one A100-2-10C vGPU ... both on MIG instances from an A100 board"
    assert _vgpu.multi_vgpu_errors(["grid_a100-4-20c", "grid_a100-2-10c"], A100_MIG, rules=current) == []
    # "you cannot assign an A30-8C vGPU and an A16-8C vGPU to the same VM"
    errs = _vgpu.multi_vgpu_errors(["grid_a30-8c", "grid_a16-8c"], ["grid_a30-8c", "grid_a16-8c"], rules=current)
    assert errs == ["multiple vGPUs must be of one board type, got a16, a30"]
    errs = _vgpu.multi_vgpu_errors(["grid_a40-48c", "grid_a40-48q"], A40, rules=current)
    assert errs == ["multiple vGPUs must be of one series, got C, Q"]


def test_legacy_rules_still_refuse_what_vsphere_7_refuses():
    legacy = _vgpu.multi_vgpu_rules("auto", "7.0.3", "550.90.05")
    errs = _vgpu.multi_vgpu_errors(["grid_a40-48c", "grid_a40-16c"], A40, rules=legacy)
    assert any("same profile" in e for e in errs) and any("full-framebuffer" in e for e in errs)
    errs = _vgpu.multi_vgpu_errors(["grid_a100-4-20c", "grid_a100-2-10c"], A100_MIG, rules=legacy)
    assert any("MIG-backed profiles cannot be combined on one VM before vSphere 8.0" in e for e in errs)


def test_vsphere8_rules_allow_mig_combinations_but_not_mixed_time_sliced_sizes():
    v8 = _vgpu.multi_vgpu_rules("auto", "8.0.2", "535.154.02")
    assert _vgpu.multi_vgpu_errors(["grid_a100-4-20c", "grid_a100-2-10c"], A100_MIG, rules=v8) == []
    assert any("same profile" in e for e in _vgpu.multi_vgpu_errors(["grid_a40-48c", "grid_a40-16c"], A40, rules=v8))


def test_vgpu_count_limit_follows_the_vsphere_release():
    eight = ["grid_a100-40c"] * 8
    assert _vgpu.multi_vgpu_errors(eight, A100, rules=_vgpu.multi_vgpu_rules("auto", "8.0.3", "550.90.05")) == []
    errs = _vgpu.multi_vgpu_errors(eight + ["grid_a100-40c"], A100, rules=_vgpu.multi_vgpu_rules("current"))
    assert errs == ["9 vGPUs requested, at most 8 are allowed per VM"]
    assert _vgpu.multi_vgpu_errors(eight, A100, rules=_vgpu.multi_vgpu_rules("legacy")) == [
        "8 vGPUs requested, at most 4 are allowed per VM"]
    assert _vgpu.multi_vgpu_errors(["grid_a100-40c"] * 2, A100, rules=_vgpu.multi_vgpu_rules("auto", "6.5.0")) == [
        "2 vGPUs requested, at most 1 are allowed per VM"]


def test_validate_uses_each_hosts_rules_and_names_them():
    offers = {"esx7": A100_MIG, "esx8": A100_MIG}
    rules = {"esx7": _vgpu.multi_vgpu_rules("auto", "7.0.3", "550.90.05"),
             "esx8": _vgpu.multi_vgpu_rules("auto", "8.0.3", "550.90.05")}
    mig = ["grid_a100-4-20c", "grid_a100-2-10c"]
    assert _vgpu.validate_profiles("vm1", mig, "esx7", offers, placement="cluster", host_rules=rules) == ["esx8"]
    with pytest.raises(VgpuError) as e:
        _vgpu.validate_profiles("vm1", mig, "esx7", offers, placement="host", host_rules=rules)
    msg = str(e.value)
    assert "VM vm1 on host esx7" in msg and "multi-vGPU rules legacy: ESXi 7.0.3, NVIDIA driver 550.90.05" in msg


# ---- issue 14 point 9: C-series vGPUs need EFI, 64-bit MMIO and MMIO space -----------------------------------------

@pytest.mark.parametrize("profiles,size", [
    (["grid_a100-4c"], 64),  # NVIDIA's minimum
    (["grid_a100-40c"], 128),  # 2 x 40 -> 128
    (["grid_a100d-80c", "grid_a100d-80c"], 512),
    (["grid_a100-3-20c"], 64),
])
def test_c_series_mmio_size(profiles, size):
    assert _vgpu.c_series_mmio_gb(profiles) == size


def test_c_series_sets_mmio_by_default_and_keeps_larger_values():
    assert _vgpu.plan_c_series("vm1", ["grid_a100-40c"], "efi", {}) == (True, 128)
    assert _vgpu.plan_c_series("vm1", ["grid_a100-40c"], "efi", {_vgpu.MMIO_SIZE_KEY: "256"}) == (True, None)
    assert _vgpu.plan_c_series("vm1", ["grid_a100-40c"], "efi", {_vgpu.MMIO_SIZE_KEY: "64"}) == (True, 128)
    assert _vgpu.plan_c_series("vm1", ["grid_a100-40c"], "efi", {}, mmio_size_gb=96) == (True, 96)
    # Not C-series: the caller's values (unset) stay.
    assert _vgpu.plan_c_series("vm1", ["grid_l40s-48q"], "bios", {}) == (None, None)
    plan = _vgpu.plan_vm("vm1", "esx1", [], ["grid_a100-40c"], {"esx1": A100}, "poweredOff", False, {}, firmware="efi")
    assert plan["extra_config"] == {_vgpu.MMIO_ENABLE_KEY: "TRUE", _vgpu.MMIO_SIZE_KEY: "128"}


def test_c_series_on_bios_vm_fails_naming_vm_profile_and_firmware():
    with pytest.raises(VgpuError) as e:
        _vgpu.plan_vm("vm1", "esx1", [], ["grid_a100-40c"], {"esx1": A100}, "poweredOff", False, {}, firmware="bios")
    msg = str(e.value)
    assert msg.startswith("VM vm1: C-series vGPU profile grid_a100-40c needs EFI firmware, the VM boots with BIOS firmware")


def test_c_series_refuses_settings_below_the_requirement():
    with pytest.raises(VgpuError, match="use_64bit_mmio=false contradicts"):
        _vgpu.plan_c_series("vm1", ["grid_a100-4c"], "efi", {}, use_64bit_mmio=False)
    with pytest.raises(VgpuError, match="at least 64 GB of MMIO space, mmio_size_gb=32"):
        _vgpu.plan_c_series("vm1", ["grid_a100-4c"], "efi", {}, mmio_size_gb=32)


# ---- issue 14 point 10: vGPU mode per device (vSphere 8.0 U3) --------------------------------------------------------

def test_plan_graphics_sets_vgpu_mode_and_keeps_other_devices_modes():
    cur = dict(default_graphics_type="sharedDirect", assignment_policy="performance",
               devices={"0000:3b:00.0": "sharedDirect"}, vgpu_modes={"0000:3b:00.0": "mixedSize"})
    p = _vgpu.plan_graphics("esx1", cur, devices=[dict(pci_id="5e:00.0", vgpu_mode="mixedSize")],
                            known_devices=["0000:3b:00.0", "0000:5e:00.0"])
    assert p["changed"]
    assert p["after"]["vgpu_modes"] == {"0000:3b:00.0": "mixedSize", "0000:5e:00.0": "mixedSize"}
    assert p["after"]["devices"]["0000:5e:00.0"] == "sharedDirect"  # mode-only entry: the effective type
    again = _vgpu.plan_graphics("esx1", p["after"], devices=[dict(pci_id="0000:5e:00.0", vgpu_mode="mixedSize")],
                                known_devices=["0000:3b:00.0", "0000:5e:00.0"])
    assert not again["changed"]
    # A default type change alone leaves the modes as they are.
    p = _vgpu.plan_graphics("esx1", cur, "shared")
    assert p["after"]["vgpu_modes"] == cur["vgpu_modes"]


def test_plan_graphics_vgpu_mode_where_the_server_lacks_it_fails_naming_host_device_and_reason():
    cur = dict(default_graphics_type="sharedDirect", assignment_policy="performance", devices={})
    with pytest.raises(VgpuError) as e:
        _vgpu.plan_graphics("esx1", cur, devices=[dict(pci_id="0000:3b:00.0", vgpu_mode="mixedSize")],
                            known_devices=["0000:3b:00.0"], vgpu_mode_unsupported="host esx1 ESXi 8.0.2")
    assert str(e.value) == ("host esx1: device 0000:3b:00.0: vgpu_mode needs vSphere 8.0 Update 3 (API 8.0.3.0): "
                            "host esx1 ESXi 8.0.2")
    with pytest.raises(VgpuError, match="vgpu_mode must be one of sameSize, mixedSize"):
        _vgpu.plan_graphics("esx1", cur, devices=[dict(pci_id="0000:3b:00.0", vgpu_mode="equal")],
                            known_devices=["0000:3b:00.0"])
