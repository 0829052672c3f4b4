"""Unit tests for the pure vGPU planner (plugins/module_utils/_vsphere/vgpu.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import vgpu
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere.vgpu import VgpuError

A100 = ["grid_a100-4c", "grid_a100-8c", "grid_a100-20c", "grid_a100-40c", "grid_a100-3-20c", "grid_a100-7-40c"]
L40S = ["grid_l40s-8q", "grid_l40s-48q", "grid_l40s-48a", "grid_l40s-48c"]


@pytest.mark.parametrize("name,expect", [
    ("grid_a100-4c", dict(board="a100", fb_gb=4, series="c", mig_slices=None)),
    ("grid_a100d-80c", dict(board="a100d", fb_gb=80, series="c", mig_slices=None)),
    ("grid_a100-3-20c", dict(board="a100", fb_gb=20, series="c", mig_slices=3)),
    ("grid_l40s-48q", dict(board="l40s", fb_gb=48, series="q", mig_slices=None)),
])
def test_parse_profile(name, expect):
    p = vgpu.parse_profile(name)
    assert {k: p[k] for k in expect} == expect


@pytest.mark.parametrize("name", ["", "a100-4c", "grid_a100", "grid_a100-c", None])
def test_parse_profile_rejects_garbage(name):
    assert vgpu.parse_profile(name) is None


def test_max_framebuffer_ignores_mig_profiles():
    assert vgpu.max_framebuffer(A100 + L40S) == {"a100": 40, "l40s": 48}


def test_single_vgpu_of_any_size_is_fine():
    assert vgpu.multi_vgpu_errors(["grid_a100-4c"], A100) == []


def test_multi_vgpu_full_framebuffer_same_profile_allowed():
    assert vgpu.multi_vgpu_errors(["grid_a100-40c"] * 4, A100) == []
    assert vgpu.multi_vgpu_errors(["grid_l40s-48q"] * 2, L40S) == []


def test_multi_vgpu_rejects_partial_framebuffer():
    errs = vgpu.multi_vgpu_errors(["grid_a100-20c", "grid_a100-20c"], A100)
    assert len(errs) == 1 and "full-framebuffer" in errs[0] and "grid_a100-40c" in errs[0]


def test_multi_vgpu_rejects_mixed_profiles_mig_series_and_count():
    errs = vgpu.multi_vgpu_errors(["grid_a100-40c", "grid_a100-4c"], A100)
    assert any("same profile" in e for e in errs)
    errs = vgpu.multi_vgpu_errors(["grid_a100-7-40c"] * 2, A100)
    assert any("MIG-backed" in e for e in errs)
    errs = vgpu.multi_vgpu_errors(["grid_l40s-48a"] * 2, L40S)
    assert any("Q- and C-series" in e for e in errs)
    errs = vgpu.multi_vgpu_errors(["grid_a100-40c"] * 5, A100)
    assert any("at most 4" in e for e in errs)
    assert vgpu.multi_vgpu_errors(["grid_a100-40c"] * 5, A100, max_vgpus=8) == []


def test_validate_unknown_profile_names_vm_host_and_offer():
    with pytest.raises(VgpuError) as e:
        vgpu.validate_profiles("vm1", ["grid_a100-99c"], "esx1", {"esx1": A100})
    msg = str(e.value)
    assert "vm1" in msg and "esx1" in msg and "grid_a100-99c" in msg and "grid_a100-4c" in msg


def test_validate_profile_on_other_host_only():
    offers = {"esx1": A100, "esx2": L40S}
    with pytest.raises(VgpuError) as e:
        vgpu.validate_profiles("vm1", ["grid_l40s-8q"], "esx1", offers, placement="host")
    assert "only by esx2" in str(e.value) and "placement=cluster" in str(e.value)
    assert vgpu.validate_profiles("vm1", ["grid_l40s-8q"], "esx1", offers, placement="cluster") == ["esx2"]


def test_validate_cluster_needs_one_host_with_all_profiles():
    offers = {"esx1": ["grid_a100-40c"], "esx2": ["grid_a100-4c"]}
    with pytest.raises(VgpuError, match="no single host"):
        vgpu.validate_profiles("vm1", ["grid_a100-40c", "grid_a100-4c"], "esx1", offers, placement="cluster")


def test_validate_multi_vgpu_error_names_vm_and_host():
    with pytest.raises(VgpuError) as e:
        vgpu.validate_profiles("vm1", ["grid_a100-8c", "grid_a100-8c"], "esx1", {"esx1": A100})
    assert "vm1" in str(e.value) and "esx1" in str(e.value) and "full-framebuffer" in str(e.value)


def dev(key, profile):
    return dict(key=key, profile=profile)


def test_diff_keeps_matching_and_replaces_others():
    d = vgpu.diff_vgpus([dev(201, "grid_a100-4c"), dev(200, "grid_a100-8c")], ["grid_a100-8c", "grid_a100-40c"])
    assert [x["key"] for x in d["keep"]] == [200]
    assert [x["key"] for x in d["remove"]] == [201]
    assert d["add"] == ["grid_a100-40c"]


def test_diff_exact_list_counts_duplicates():
    d = vgpu.diff_vgpus([dev(200, "grid_a100-40c")], ["grid_a100-40c", "grid_a100-40c"])
    assert d["add"] == ["grid_a100-40c"] and not d["remove"]
    d = vgpu.diff_vgpus([dev(200, "grid_a100-40c"), dev(201, "grid_a100-40c")], ["grid_a100-40c"])
    assert [x["key"] for x in d["remove"]] == [201]
    d = vgpu.diff_vgpus([dev(200, "grid_a100-40c")], [])
    assert [x["key"] for x in d["remove"]] == [200] and not d["add"]


def test_diff_no_change():
    d = vgpu.diff_vgpus([dev(200, "grid_a100-4c")], ["grid_a100-4c"])
    assert not d["add"] and not d["remove"]


def test_extra_config_only_reports_differences():
    assert vgpu.plan_extra_config({}, None, None) == {}
    assert vgpu.plan_extra_config({}, True, 128) == {vgpu.MMIO_ENABLE_KEY: "TRUE", vgpu.MMIO_SIZE_KEY: "128"}
    assert vgpu.plan_extra_config({vgpu.MMIO_ENABLE_KEY: "true", vgpu.MMIO_SIZE_KEY: "128"}, True, 128) == {}
    assert vgpu.plan_extra_config({vgpu.MMIO_ENABLE_KEY: "TRUE"}, False, None) == {vgpu.MMIO_ENABLE_KEY: "FALSE"}
    with pytest.raises(VgpuError):
        vgpu.plan_extra_config({}, None, 0)


@pytest.mark.parametrize("state,needs,policy,expect", [
    ("poweredOff", True, "fail", dict(power_off=None, power_on_after=False)),
    ("poweredOn", False, "fail", dict(power_off=None, power_on_after=False)),
    ("poweredOn", True, "power_off", dict(power_off="hard", power_on_after=True)),
    ("poweredOn", True, "shutdown_guest", dict(power_off="guest", power_on_after=True)),
])
def test_power_plan(state, needs, policy, expect):
    assert vgpu.plan_power("vm1", state, needs, policy) == expect


def test_power_plan_refuses_running_vm_by_default_and_suspended_always():
    with pytest.raises(VgpuError, match="vm1 is poweredOn"):
        vgpu.plan_power("vm1", "poweredOn", True, "fail")
    with pytest.raises(VgpuError, match="suspended"):
        vgpu.plan_power("vm1", "suspended", True, "power_off")


def test_plan_vm_locks_memory_and_is_idempotent():
    offers = {"esx1": A100}
    plan = vgpu.plan_vm("vm1", "esx1", [], ["grid_a100-40c"], offers, "poweredOff", False, {})
    assert plan["changed"] and plan["lock_memory"] and plan["add"] == ["grid_a100-40c"]
    assert plan["after"]["memory_reservation_locked_to_max"] is True
    mmio = {vgpu.MMIO_ENABLE_KEY: "TRUE", vgpu.MMIO_SIZE_KEY: "128"}
    again = vgpu.plan_vm("vm1", "esx1", [dev(200, "grid_a100-40c")], ["grid_a100-40c"], offers, "poweredOn", True, mmio)
    assert not again["changed"] and again["power"]["power_off"] is None


def test_plan_vm_invalid_input_fails_before_power_decision():
    # A powered-on VM with a bad profile reports the profile, not the power state.
    with pytest.raises(VgpuError, match="grid_x-1q"):
        vgpu.plan_vm("vm1", "esx1", [], ["grid_x-1q"], {"esx1": A100}, "poweredOn", False, {}, power_policy="power_off")


def test_plan_graphics_changes_and_idempotence():
    cur = dict(default_graphics_type="shared", assignment_policy="performance", devices={})
    p = vgpu.plan_graphics("esx1", cur, "sharedDirect", "consolidation", [dict(pci_id="3B:00.0", graphics_type="shared")],
                           known_devices=["0000:3b:00.0"])
    assert p["changed"]
    assert p["after"] == dict(default_graphics_type="sharedDirect", assignment_policy="consolidation",
                              devices={"0000:3b:00.0": "shared"}, vgpu_modes={})
    again = vgpu.plan_graphics("esx1", p["after"], "sharedDirect", "consolidation",
                               [dict(pci_id="0000:3b:00.0", graphics_type="shared")], known_devices=["0000:3b:00.0"])
    assert not again["changed"]
    assert not vgpu.plan_graphics("esx1", cur)["changed"]


def test_plan_graphics_unknown_device_names_host_and_device():
    cur = dict(default_graphics_type="shared", assignment_policy="performance", devices={})
    with pytest.raises(VgpuError) as e:
        vgpu.plan_graphics("esx1", cur, devices=[dict(pci_id="0000:99:00.0", graphics_type="shared")],
                           known_devices=["0000:3b:00.0"])
    assert "esx1" in str(e.value) and "0000:99:00.0" in str(e.value) and "0000:3b:00.0" in str(e.value)


@pytest.mark.parametrize("vib,expect", [
    ("535.154.02-1OEM.800.1.0.20613240", "535.154.02"),
    ("550.90.05-1OEM.800.1.0.20613240", "550.90.05"),
    ("8.0.0-1.0", None),
])
def test_driver_version(vib, expect):
    assert vgpu.driver_version(vib) == expect


def test_match_driver_vib_prefers_driver_package():
    pkgs = [dict(name="vsan", vendor="VMware", version="8.0"),
            dict(name="NVD-AIE-gpu-mgmt-daemon", vendor="NVD", version="535.154.02-1"),
            dict(name="NVD-AIE_ESXi_8.0.0_Driver", vendor="NVD", version="535.154.02-1OEM")]
    assert vgpu.match_driver_vib(pkgs, r"(?i)^(nvidia|nvd)")["name"] == "NVD-AIE_ESXi_8.0.0_Driver"
    assert vgpu.match_driver_vib(pkgs[:1], r"(?i)^(nvidia|nvd)") is None


def test_sensor_component_parse():
    assert vgpu.parse_sensor_component("NVIDIA NVD-AIE_ESXi_8.0.0_Driver 535.154.02-1OEM 2024-01-01") == dict(
        vendor="NVIDIA", name="NVD-AIE_ESXi_8.0.0_Driver", version="535.154.02-1OEM")
    assert vgpu.parse_sensor_component("short") is None


def test_drift_report_groups_and_flags_missing():
    r = vgpu.drift_report({"a": "535.154.02", "b": "535.154.02", "c": "550.54.10", "d": None})
    assert not r["consistent"]
    assert r["versions"] == {"535.154.02": ["a", "b"], "550.54.10": ["c"]}
    assert r["missing"] == ["d"] and r["majority"] == "535.154.02"
    assert vgpu.drift_report({"a": "1.2.3", "b": "1.2.3"})["consistent"]
    assert vgpu.drift_report({})["consistent"]


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
    rules = vgpu.multi_vgpu_rules("auto", esxi, driver)
    assert rules["name"] == name
    assert (esxi or "unknown") in rules["basis"] and (driver or "unknown") in rules["basis"]


def test_multi_vgpu_rules_explicit_choice_and_bad_choice():
    assert vgpu.multi_vgpu_rules("current", "7.0.3", None)["name"] == "current"
    assert vgpu.multi_vgpu_rules("legacy", "8.0.3", "550.90.05")["basis"] == "multi_vgpu_rules=legacy"
    with pytest.raises(VgpuError, match="multi_vgpu_rules must be one of"):
        vgpu.multi_vgpu_rules("newest")


def test_current_rules_follow_nvidia_ai_enterprise_8_1_examples():
    current = vgpu.multi_vgpu_rules("current")
    # "you can assign an A40-48C vGPU and an A40-16C time-sliced vGPUs to the same VM"
    assert vgpu.multi_vgpu_errors(["grid_a40-48c", "grid_a40-16c"], A40, rules=current) == []
    # "an A100-4-20C vGPU and one A100-2-10C vGPU ... both on MIG instances from an A100 board"
    assert vgpu.multi_vgpu_errors(["grid_a100-4-20c", "grid_a100-2-10c"], A100_MIG, rules=current) == []
    # "you cannot assign an A30-8C vGPU and an A16-8C vGPU to the same VM"
    errs = vgpu.multi_vgpu_errors(["grid_a30-8c", "grid_a16-8c"], ["grid_a30-8c", "grid_a16-8c"], rules=current)
    assert errs == ["multiple vGPUs must be of one board type, got a16, a30"]
    errs = vgpu.multi_vgpu_errors(["grid_a40-48c", "grid_a40-48q"], A40, rules=current)
    assert errs == ["multiple vGPUs must be of one series, got C, Q"]


def test_legacy_rules_still_refuse_what_vsphere_7_refuses():
    legacy = vgpu.multi_vgpu_rules("auto", "7.0.3", "550.90.05")
    errs = vgpu.multi_vgpu_errors(["grid_a40-48c", "grid_a40-16c"], A40, rules=legacy)
    assert any("same profile" in e for e in errs) and any("full-framebuffer" in e for e in errs)
    errs = vgpu.multi_vgpu_errors(["grid_a100-4-20c", "grid_a100-2-10c"], A100_MIG, rules=legacy)
    assert any("MIG-backed profiles cannot be combined on one VM before vSphere 8.0" in e for e in errs)


def test_vsphere8_rules_allow_mig_combinations_but_not_mixed_time_sliced_sizes():
    v8 = vgpu.multi_vgpu_rules("auto", "8.0.2", "535.154.02")
    assert vgpu.multi_vgpu_errors(["grid_a100-4-20c", "grid_a100-2-10c"], A100_MIG, rules=v8) == []
    assert any("same profile" in e for e in vgpu.multi_vgpu_errors(["grid_a40-48c", "grid_a40-16c"], A40, rules=v8))


def test_vgpu_count_limit_follows_the_vsphere_release():
    eight = ["grid_a100-40c"] * 8
    assert vgpu.multi_vgpu_errors(eight, A100, rules=vgpu.multi_vgpu_rules("auto", "8.0.3", "550.90.05")) == []
    errs = vgpu.multi_vgpu_errors(eight + ["grid_a100-40c"], A100, rules=vgpu.multi_vgpu_rules("current"))
    assert errs == ["9 vGPUs requested, at most 8 are allowed per VM"]
    assert vgpu.multi_vgpu_errors(eight, A100, rules=vgpu.multi_vgpu_rules("legacy")) == [
        "8 vGPUs requested, at most 4 are allowed per VM"]
    assert vgpu.multi_vgpu_errors(["grid_a100-40c"] * 2, A100, rules=vgpu.multi_vgpu_rules("auto", "6.5.0")) == [
        "2 vGPUs requested, at most 1 are allowed per VM"]


def test_validate_uses_each_hosts_rules_and_names_them():
    offers = {"esx7": A100_MIG, "esx8": A100_MIG}
    rules = {"esx7": vgpu.multi_vgpu_rules("auto", "7.0.3", "550.90.05"),
             "esx8": vgpu.multi_vgpu_rules("auto", "8.0.3", "550.90.05")}
    mig = ["grid_a100-4-20c", "grid_a100-2-10c"]
    assert vgpu.validate_profiles("vm1", mig, "esx7", offers, placement="cluster", host_rules=rules) == ["esx8"]
    with pytest.raises(VgpuError) as e:
        vgpu.validate_profiles("vm1", mig, "esx7", offers, placement="host", host_rules=rules)
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
    assert vgpu.c_series_mmio_gb(profiles) == size


def test_c_series_sets_mmio_by_default_and_keeps_larger_values():
    assert vgpu.plan_c_series("vm1", ["grid_a100-40c"], "efi", {}) == (True, 128)
    assert vgpu.plan_c_series("vm1", ["grid_a100-40c"], "efi", {vgpu.MMIO_SIZE_KEY: "256"}) == (True, None)
    assert vgpu.plan_c_series("vm1", ["grid_a100-40c"], "efi", {vgpu.MMIO_SIZE_KEY: "64"}) == (True, 128)
    assert vgpu.plan_c_series("vm1", ["grid_a100-40c"], "efi", {}, mmio_size_gb=96) == (True, 96)
    # Not C-series: the caller's values (unset) stay.
    assert vgpu.plan_c_series("vm1", ["grid_l40s-48q"], "bios", {}) == (None, None)
    plan = vgpu.plan_vm("vm1", "esx1", [], ["grid_a100-40c"], {"esx1": A100}, "poweredOff", False, {}, firmware="efi")
    assert plan["extra_config"] == {vgpu.MMIO_ENABLE_KEY: "TRUE", vgpu.MMIO_SIZE_KEY: "128"}


def test_c_series_on_bios_vm_fails_naming_vm_profile_and_firmware():
    with pytest.raises(VgpuError) as e:
        vgpu.plan_vm("vm1", "esx1", [], ["grid_a100-40c"], {"esx1": A100}, "poweredOff", False, {}, firmware="bios")
    msg = str(e.value)
    assert msg.startswith("VM vm1: C-series vGPU profile grid_a100-40c needs EFI firmware, the VM boots with BIOS firmware")


def test_c_series_refuses_settings_below_the_requirement():
    with pytest.raises(VgpuError, match="use_64bit_mmio=false contradicts"):
        vgpu.plan_c_series("vm1", ["grid_a100-4c"], "efi", {}, use_64bit_mmio=False)
    with pytest.raises(VgpuError, match="at least 64 GB of MMIO space, mmio_size_gb=32"):
        vgpu.plan_c_series("vm1", ["grid_a100-4c"], "efi", {}, mmio_size_gb=32)


# ---- issue 14 point 10: vGPU mode per device (vSphere 8.0 U3) --------------------------------------------------------

def test_plan_graphics_sets_vgpu_mode_and_keeps_other_devices_modes():
    cur = dict(default_graphics_type="sharedDirect", assignment_policy="performance",
               devices={"0000:3b:00.0": "sharedDirect"}, vgpu_modes={"0000:3b:00.0": "mixedSize"})
    p = vgpu.plan_graphics("esx1", cur, devices=[dict(pci_id="5e:00.0", vgpu_mode="mixedSize")],
                           known_devices=["0000:3b:00.0", "0000:5e:00.0"])
    assert p["changed"]
    assert p["after"]["vgpu_modes"] == {"0000:3b:00.0": "mixedSize", "0000:5e:00.0": "mixedSize"}
    assert p["after"]["devices"]["0000:5e:00.0"] == "sharedDirect"  # mode-only entry: the effective type
    again = vgpu.plan_graphics("esx1", p["after"], devices=[dict(pci_id="0000:5e:00.0", vgpu_mode="mixedSize")],
                               known_devices=["0000:3b:00.0", "0000:5e:00.0"])
    assert not again["changed"]
    # A default type change alone leaves the modes as they are.
    p = vgpu.plan_graphics("esx1", cur, "shared")
    assert p["after"]["vgpu_modes"] == cur["vgpu_modes"]


def test_plan_graphics_vgpu_mode_where_the_server_lacks_it_fails_naming_host_device_and_reason():
    cur = dict(default_graphics_type="sharedDirect", assignment_policy="performance", devices={})
    with pytest.raises(VgpuError) as e:
        vgpu.plan_graphics("esx1", cur, devices=[dict(pci_id="0000:3b:00.0", vgpu_mode="mixedSize")],
                           known_devices=["0000:3b:00.0"], vgpu_mode_unsupported="host esx1 ESXi 8.0.2")
    assert str(e.value) == ("host esx1: device 0000:3b:00.0: vgpu_mode needs vSphere 8.0 Update 3 (API 8.0.3.0): "
                            "host esx1 ESXi 8.0.2")
    with pytest.raises(VgpuError, match="vgpu_mode must be one of sameSize, mixedSize"):
        vgpu.plan_graphics("esx1", cur, devices=[dict(pci_id="0000:3b:00.0", vgpu_mode="equal")],
                           known_devices=["0000:3b:00.0"])


# ---- issue 23: every field, every message, both sides of each boundary ----------------------------------------------

@pytest.mark.parametrize("name,expect", [
    ("grid_a100-4c", dict(name="grid_a100-4c", board="a100", fb_gb=4, series="c", mig_slices=None)),
    ("GRID_A100-3-20C", dict(name="GRID_A100-3-20C", board="a100", fb_gb=20, series="c", mig_slices=3)),
    ("nvidia_l40s-48qx1", dict(name="nvidia_l40s-48qx1", board="l40s", fb_gb=48, series="q", mig_slices=None)),
])
def test_parse_profile_returns_every_field_and_lowers_board_and_series(name, expect):
    assert vgpu.parse_profile(name) == expect


@pytest.mark.parametrize("name", ["grid_a100-4c\n", "grid_a100-4c-", "grid_a100-4", "_a100-4c"])
def test_parse_profile_rejects_trailing_garbage(name):
    assert vgpu.parse_profile(name) is None


def test_max_framebuffer_keeps_the_largest_whatever_the_order_and_skips_unknown_names():
    assert vgpu.max_framebuffer(["grid_a100-40c", "grid_a100-4c", "bogus", "grid_a100-7-80c"]) == {"a100": 40}
    assert vgpu.max_framebuffer([]) == {}


@pytest.mark.parametrize("text,expect", [
    ("8.0.3", (8, 0, 3)), ("8.0.3.0", (8, 0, 3)), ("550.90.05", (550, 90, 5)), ("ESXi 7.0", (7, 0)), (8, (8,)),
    (None, None), ("", None), ("unknown", None),
])
def test_parse_version(text, expect):
    assert vgpu.parse_version(text) == expect


def test_multi_vgpu_rules_explicit_choice_is_the_whole_table_entry_plus_basis():
    for entry in vgpu.MULTI_VGPU_RULES[:3]:
        assert vgpu.multi_vgpu_rules(entry["name"], "6.0.0", "1.0") == dict(entry, basis="multi_vgpu_rules=%s" % entry["name"])
    current = dict(vgpu.MULTI_VGPU_RULES[0], basis="ESXi 8.0.3, NVIDIA driver 550.90.05")
    assert vgpu.multi_vgpu_rules("auto", "8.0.3", "550.90.05") == current
    assert vgpu.multi_vgpu_rules() == dict(vgpu.MULTI_VGPU_RULES[2], basis="ESXi unknown, NVIDIA driver unknown")
    # The shared table is never written into.
    assert not any("basis" in r for r in vgpu.MULTI_VGPU_RULES)


def test_multi_vgpu_rules_bad_choice_names_the_choices_and_the_value():
    with pytest.raises(VgpuError, match=r"^multi_vgpu_rules must be one of auto, current, vsphere8, legacy, got 'newest'$"):
        vgpu.multi_vgpu_rules("newest")


@pytest.mark.parametrize("esxi,driver,name", [
    ("8.0.0", "550", "current"),  # both minimums met exactly
    ("8.0.0", "549.99.99", "vsphere8"),  # one driver release short
    ("7.99.99", "550.90.05", "legacy"),  # one ESXi release short of 8.0.0
    ("6.7.3", "550.90.05", "legacy"),
    ("6.7.2", "550.90.05", "single"),
])
def test_multi_vgpu_rules_boundaries(esxi, driver, name):
    assert vgpu.multi_vgpu_rules("auto", esxi, driver)["name"] == name


def test_multi_vgpu_errors_one_vgpu_is_never_checked_two_are():
    assert vgpu.multi_vgpu_errors(["bogus"], A100) == []
    assert vgpu.multi_vgpu_errors(["bogus", "bogus"], A100) == [
        "profile bogus: unrecognised name, cannot prove it allows multiple vGPUs"]


def test_multi_vgpu_errors_count_limit_boundary_and_override():
    four, five = ["grid_a100-40c"] * 4, ["grid_a100-40c"] * 5
    assert vgpu.multi_vgpu_errors(four, A100) == []
    assert vgpu.multi_vgpu_errors(five, A100) == ["5 vGPUs requested, at most 4 are allowed per VM"]
    assert vgpu.multi_vgpu_errors(four, A100, max_vgpus=3) == ["4 vGPUs requested, at most 3 are allowed per VM"]
    assert vgpu.multi_vgpu_errors(five, A100, max_vgpus=5) == []


def test_multi_vgpu_errors_lists_every_reason_in_order():
    legacy = vgpu.multi_vgpu_rules("legacy")
    errs = vgpu.multi_vgpu_errors(["grid_l40s-8a", "grid_a100-3-20b", "grid_a100-4c", "x"], A100 + L40S, rules=legacy)
    assert errs == [
        "profile x: unrecognised name, cannot prove it allows multiple vGPUs",
        "multiple vGPUs must be of one board type, got a100, l40s",
        "multiple vGPUs must be of one series, got A, B, C",
        "profile grid_a100-3-20b: only Q- and C-series profiles allow multiple vGPUs",
        "profile grid_a100-3-20b: MIG-backed profiles cannot be combined on one VM before vSphere 8.0",
        "profile grid_l40s-8a: only Q- and C-series profiles allow multiple vGPUs",
        "multiple vGPUs must all use the same profile, got grid_a100-3-20b, grid_a100-4c, grid_l40s-8a, x",
        "profile grid_a100-4c: multiple vGPUs need the full-framebuffer profile (grid_a100-40c)",
        "profile grid_l40s-8a: multiple vGPUs need the full-framebuffer profile (grid_l40s-48a)",
    ]


def test_multi_vgpu_errors_full_framebuffer_only_for_boards_offered():
    # Nothing offered for the board: no full-framebuffer profile to demand.
    assert vgpu.multi_vgpu_errors(["grid_a100-20c"] * 2, L40S) == []
    assert vgpu.multi_vgpu_errors(["grid_a100-20c"] * 2, A100) == [
        "profile grid_a100-20c: multiple vGPUs need the full-framebuffer profile (grid_a100-40c)"]
    # One MIG-backed and one time-sliced: a single time-sliced profile is no "same profile" error under vsphere8.
    v8 = vgpu.multi_vgpu_rules("vsphere8")
    assert vgpu.multi_vgpu_errors(["grid_a100-3-20c", "grid_a100-40c"], A100, rules=v8) == []
    # Mixed sizes allowed: no full-framebuffer demand either.
    assert vgpu.multi_vgpu_errors(["grid_a100-20c"] * 2, A100, rules=vgpu.multi_vgpu_rules("current")) == []


def test_hosts_offering_needs_every_profile_and_tolerates_no_offer():
    offers = {"b": ["p1", "p2"], "a": ["p1", "p2", "p3"], "c": ["p1"], "d": None}
    assert vgpu.hosts_offering(["p1", "p2"], offers) == ["a", "b"]
    assert vgpu.hosts_offering([], offers) == ["a", "b", "c", "d"]


def test_validate_profiles_messages():
    offers = {"esx1": ["grid_a100-40c", "grid_a100-4c"], "esx2": ["grid_l40s-48q"]}
    with pytest.raises(VgpuError, match=r"^VM vm1: unknown placement 'rack'$"):
        vgpu.validate_profiles("vm1", ["grid_a100-4c"], "esx1", offers, placement="rack")
    with pytest.raises(VgpuError) as e:
        vgpu.validate_profiles("vm1", ["grid_l40s-48q", "grid_x-1q"], "esx1", offers)
    assert str(e.value) == ("VM vm1: profile grid_l40s-48q is not offered by host esx1, only by esx2 (use placement=cluster "
                            "to allow them); profile grid_x-1q is not offered by host esx1 (offered: grid_a100-40c, grid_a100-4c)")
    with pytest.raises(VgpuError, match=r"^VM vm1: profile grid_x-1q is not offered by host esx9 \(offered: none\)$"):
        vgpu.validate_profiles("vm1", ["grid_x-1q"], "esx9", offers)
    with pytest.raises(VgpuError, match=r"^VM vm1: profile grid_x-1q is not offered by any host in the cluster of esx1$"):
        vgpu.validate_profiles("vm1", ["grid_x-1q"], "esx1", offers, placement="cluster")
    with pytest.raises(VgpuError, match=r"^VM vm1: no single host offers all of grid_a100-4c, grid_l40s-48q$"):
        vgpu.validate_profiles("vm1", ["grid_l40s-48q", "grid_a100-4c"], "esx1", offers, placement="cluster")


def test_validate_profiles_empty_list_and_eligible_hosts():
    offers = {"esx2": A100, "esx1": A100, "esx3": L40S}
    assert vgpu.validate_profiles("vm1", [], "esx1", offers) == ["esx1"]
    assert vgpu.validate_profiles("vm1", [], "esx1", offers, placement="cluster") == ["esx1", "esx2", "esx3"]
    assert vgpu.validate_profiles("vm1", ["grid_a100-4c"], "esx1", offers) == ["esx1"]
    assert vgpu.validate_profiles("vm1", ["grid_a100-4c"], "esx1", offers, placement="cluster") == ["esx1", "esx2"]


def test_validate_profiles_rejection_names_the_requested_host_or_the_first_rejected():
    offers = {"esx1": A100, "esx2": A100}
    with pytest.raises(VgpuError) as e:
        vgpu.validate_profiles("vm1", ["grid_a100-4c"] * 2, "esx2", offers)
    assert str(e.value) == ("VM vm1 on host esx2: profile grid_a100-4c: multiple vGPUs need the full-framebuffer profile "
                            "(grid_a100-40c) (multi-vGPU rules legacy: multi_vgpu_rules=legacy)")
    with pytest.raises(VgpuError, match=r"^VM vm1 on host esx1: .*\(multi-vGPU rules legacy"):
        vgpu.validate_profiles("vm1", ["grid_a100-4c"] * 2, "esx9", offers, placement="cluster")
    # The count limit of one host's rules: the other host still qualifies.
    rules = {"esx1": vgpu.multi_vgpu_rules("current")}
    assert vgpu.validate_profiles("vm1", ["grid_a100-4c"] * 2, "esx1", offers, placement="cluster",
                                  host_rules=rules) == ["esx1"]
    assert vgpu.validate_profiles("vm1", ["grid_a100-40c"] * 5, "esx1", offers, placement="cluster", max_vgpus=5) == [
        "esx1", "esx2"]


def test_validate_profiles_full_framebuffer_is_judged_against_the_richest_offer_in_scope():
    offers = {"esx1": ["grid_a100-20c"], "esx2": ["grid_a100-20c", "grid_a100-40c"]}
    # On esx1 alone 20c is the biggest offer.
    assert vgpu.validate_profiles("vm1", ["grid_a100-20c"] * 2, "esx1", offers) == ["esx1"]
    with pytest.raises(VgpuError, match=r"full-framebuffer profile \(grid_a100-40c\)"):
        vgpu.validate_profiles("vm1", ["grid_a100-20c"] * 2, "esx1", offers, placement="cluster")


def test_diff_vgpus_returns_the_devices_sorted_by_key():
    cur = [dev(203, "b"), dev(201, "a"), dev(202, "c"), dev(200, "a")]
    assert vgpu.diff_vgpus(cur, ["a", "b", "d"]) == dict(keep=[dev(200, "a"), dev(203, "b")],
                                                         remove=[dev(201, "a"), dev(202, "c")], add=["d"])


def test_extra_config_boundaries_and_message():
    with pytest.raises(VgpuError, match=r"^mmio_size_gb must be a positive number of GiB, got 0$"):
        vgpu.plan_extra_config({}, None, 0)
    assert vgpu.plan_extra_config({}, None, 1) == {vgpu.MMIO_SIZE_KEY: "1"}
    assert vgpu.plan_extra_config({}, False, None) == {vgpu.MMIO_ENABLE_KEY: "FALSE"}
    assert vgpu.plan_extra_config({vgpu.MMIO_ENABLE_KEY: "false", vgpu.MMIO_SIZE_KEY: 64}, False, 64) == {}
    assert vgpu.plan_extra_config({vgpu.MMIO_SIZE_KEY: "64"}, None, 128) == {vgpu.MMIO_SIZE_KEY: "128"}


def test_power_plan_messages():
    with pytest.raises(VgpuError, match=r"^VM vm1: unknown power_policy 'reboot'$"):
        vgpu.plan_power("vm1", "poweredOff", False, "reboot")
    with pytest.raises(VgpuError, match=r"^VM vm1 is suspended; resume and shut it down before changing vGPUs$"):
        vgpu.plan_power("vm1", "suspended", True, "shutdown_guest")
    assert vgpu.plan_power("vm1", "suspended", False, "fail") == dict(power_off=None, power_on_after=False)
    with pytest.raises(VgpuError) as e:
        vgpu.plan_power("vm1", "poweredOn", True, "fail")
    assert str(e.value) == ("VM vm1 is poweredOn; vGPUs can only be changed on a powered-off VM "
                            "(set power_policy=power_off or shutdown_guest to allow a power cycle)")


@pytest.mark.parametrize("n,p", [(0, 1), (1, 1), (2, 2), (3, 4), (64, 64), (65, 128)])
def test_next_power_of_two(n, p):
    assert vgpu.next_power_of_two(n) == p


@pytest.mark.parametrize("profiles,size", [
    (["grid_a100-32c"], 64),  # 2 x 32 = 64 exactly
    (["grid_a100-33c"], 128),  # 66 -> 128
    (["grid_l40s-48c"], 128),  # 96 -> 128
    (["grid_l40s-48c", "bogus"], 128),  # unknown names add nothing
    ([], 64),
])
def test_c_series_mmio_size_boundaries(profiles, size):
    assert vgpu.c_series_mmio_gb(profiles) == size


def test_c_series_messages_name_every_profile_once():
    with pytest.raises(VgpuError) as e:
        vgpu.plan_c_series("vm1", ["grid_a100-40c", "grid_a100-20c", "grid_a100-40c", "grid_l40s-48q"], "bios", {})
    assert str(e.value) == ("VM vm1: C-series vGPU profiles grid_a100-20c, grid_a100-40c need EFI firmware, the VM boots "
                            "with BIOS firmware; NVIDIA requires EFI boot and 64-bit MMIO for C-series vGPUs on ESXi (the "
                            "guest OS must be installed in EFI mode, so changing the firmware needs a reinstall)")
    with pytest.raises(VgpuError, match=r"^VM vm1: C-series vGPU profile grid_a100-4c needs 64-bit MMIO; use_64bit_mmio=false "
                                        r"contradicts that$"):
        vgpu.plan_c_series("vm1", ["grid_a100-4c"], None, {}, use_64bit_mmio=False)
    with pytest.raises(VgpuError, match=r"^VM vm1: C-series vGPU profile grid_a100-4c needs at least 64 GB of MMIO space, "
                                        r"mmio_size_gb=63 is less$"):
        vgpu.plan_c_series("vm1", ["grid_a100-4c"], "efi", {}, mmio_size_gb=63)


def test_c_series_values():
    # Unknown firmware is not refused; explicit values at the minimum are kept.
    assert vgpu.plan_c_series("vm1", ["grid_a100-40c"], None, {}, True, 64) == (True, 64)
    # Not C-series: whatever the caller gave, even on BIOS.
    assert vgpu.plan_c_series("vm1", ["grid_l40s-48q", "bogus"], "bios", {}, False, 8) == (False, 8)
    # The size already on the VM: exactly enough stays, one less is raised, garbage is replaced.
    assert vgpu.plan_c_series("vm1", ["grid_a100-40c"], "efi", {vgpu.MMIO_SIZE_KEY: " 128 "}) == (True, None)
    assert vgpu.plan_c_series("vm1", ["grid_a100-40c"], "efi", {vgpu.MMIO_SIZE_KEY: "127"}) == (True, 128)
    assert vgpu.plan_c_series("vm1", ["grid_a100-40c"], "efi", {vgpu.MMIO_SIZE_KEY: "big"}) == (True, 128)


def test_plan_vm_returns_every_field():
    mmio = {vgpu.MMIO_ENABLE_KEY: "FALSE", "other": "x"}
    plan = vgpu.plan_vm("vm1", "esx1", [dev(201, "grid_a100-4c"), dev(200, "grid_a100-40c")],
                        ["grid_a100-40c", "grid_a100-40c"], {"esx1": A100, "esx2": A100}, "poweredOn", False, mmio,
                        placement="cluster", power_policy="shutdown_guest", firmware="efi")
    assert plan == dict(
        vm="vm1", host="esx1", eligible_hosts=["esx1", "esx2"], changed=True, reconfigure=True, upgrade=None,
        restore=False, remove=[dev(201, "grid_a100-4c")], add=["grid_a100-40c"], keep=[dev(200, "grid_a100-40c")],
        lock_memory=True, extra_config={vgpu.MMIO_ENABLE_KEY: "TRUE", vgpu.MMIO_SIZE_KEY: "256"},
        power=dict(power_off="guest", power_on_after=True),
        before=dict(profiles=["grid_a100-40c", "grid_a100-4c"], memory_reservation_locked_to_max=False,
                    extra_config={vgpu.MMIO_ENABLE_KEY: "FALSE"}),
        after=dict(profiles=["grid_a100-40c", "grid_a100-40c"], memory_reservation_locked_to_max=True,
                   extra_config={vgpu.MMIO_ENABLE_KEY: "TRUE", vgpu.MMIO_SIZE_KEY: "256"}))


@pytest.mark.parametrize("desired,reserve,locked,changed,lock", [
    ([], True, False, False, False),  # no vGPU: no memory lock needed
    (["grid_l40s-48q"], False, False, False, False),  # the caller does not want the reservation
    (["grid_l40s-48q"], True, True, False, False),  # already locked
    (["grid_l40s-48q"], True, False, True, True),
])
def test_plan_vm_memory_lock(desired, reserve, locked, changed, lock):
    current = [dev(200, p) for p in desired]
    plan = vgpu.plan_vm("vm1", "esx1", current, desired, {"esx1": L40S}, "poweredOn", locked, {},
                        reserve_all_memory=reserve, power_policy="power_off")
    assert (plan["changed"], plan["lock_memory"]) == (changed, lock)
    assert plan["power"] == dict(power_off="hard" if changed else None, power_on_after=changed)
    assert plan["after"]["memory_reservation_locked_to_max"] == (locked or lock)


def test_plan_vm_passes_placement_limits_and_rules_on():
    offers = {"esx1": A100, "esx2": A100}
    rules = {"esx1": vgpu.multi_vgpu_rules("current"), "esx2": vgpu.multi_vgpu_rules("current")}
    plan = vgpu.plan_vm("vm1", "esx1", [], ["grid_a100-4c"] * 2, offers, "poweredOff", False, {}, placement="cluster",
                        host_rules=rules, use_64bit_mmio=True, mmio_size_gb=64)
    assert plan["eligible_hosts"] == ["esx1", "esx2"]
    assert plan["extra_config"] == {vgpu.MMIO_ENABLE_KEY: "TRUE", vgpu.MMIO_SIZE_KEY: "64"}
    with pytest.raises(VgpuError, match=r"3 vGPUs requested, at most 2 are allowed per VM"):
        vgpu.plan_vm("vm1", "esx1", [], ["grid_a100-40c"] * 3, offers, "poweredOff", False, {}, max_vgpus=2)


def test_plan_graphics_messages():
    cur = dict(default_graphics_type="shared", assignment_policy="performance", devices={})
    with pytest.raises(VgpuError, match=r"^host esx1: default_graphics_type must be one of shared, sharedDirect$"):
        vgpu.plan_graphics("esx1", cur, "direct")
    with pytest.raises(VgpuError, match=r"^host esx1: assignment_policy must be one of performance, consolidation$"):
        vgpu.plan_graphics("esx1", cur, None, "spread")
    with pytest.raises(VgpuError, match=r"^host esx1: device 0000:3b:00.0 is listed twice in devices \(entries 1 and 3\); "
                                        r"give each device once$"):
        vgpu.plan_graphics("esx1", cur, devices=[dict(pci_id="3b:00.0", graphics_type="shared"),
                                                 dict(pci_id="5e:00.0", graphics_type="shared"),
                                                 dict(pci_id="0000:3B:00.0", graphics_type="sharedDirect")])
    with pytest.raises(VgpuError, match=r"^host esx1: graphics device 3b:00.0 not found \(devices: none\)$"):
        vgpu.plan_graphics("esx1", cur, devices=[dict(pci_id="3b:00.0", graphics_type="shared")], known_devices=[])
    with pytest.raises(VgpuError, match=r"^host esx1: device 0000:3b:00.0: set graphics_type, vgpu_mode or both$"):
        vgpu.plan_graphics("esx1", cur, devices=[dict(pci_id="3b:00.0")])
    with pytest.raises(VgpuError, match=r"^host esx1: device 0000:3b:00.0: graphics_type must be one of shared, sharedDirect$"):
        vgpu.plan_graphics("esx1", cur, devices=[dict(pci_id="3b:00.0", graphics_type="direct")])
    with pytest.raises(VgpuError, match=r"^pci_id is required for every device entry$"):
        vgpu.plan_graphics("esx1", cur, devices=[dict(graphics_type="shared")])


def test_plan_graphics_returns_every_field_and_leaves_the_input_alone():
    cur = dict(default_graphics_type="shared", assignment_policy="performance", devices={"0000:3b:00.0": "shared"},
               vgpu_modes={"0000:3b:00.0": "sameSize"})
    p = vgpu.plan_graphics("esx1", cur, devices=[dict(pci_id="3B:00.0", vgpu_mode="mixedSize"),
                                                 dict(pci_id="5e:00.0", vgpu_mode="sameSize"),
                                                 dict(pci_id="af:00.0", graphics_type="sharedDirect", vgpu_mode="sameSize")],
                           known_devices=["0000:3B:00.0", "0000:5e:00.0", "0000:af:00.0"], vgpu_mode_unsupported="")
    assert p == dict(host="esx1", changed=True,
                     before=dict(default_graphics_type="shared", assignment_policy="performance",
                                 devices={"0000:3b:00.0": "shared"}, vgpu_modes={"0000:3b:00.0": "sameSize"}),
                     after=dict(default_graphics_type="shared", assignment_policy="performance",
                                devices={"0000:3b:00.0": "shared", "0000:5e:00.0": "shared", "0000:af:00.0": "sharedDirect"},
                                vgpu_modes={"0000:3b:00.0": "mixedSize", "0000:5e:00.0": "sameSize",
                                            "0000:af:00.0": "sameSize"}))
    assert cur == dict(default_graphics_type="shared", assignment_policy="performance", devices={"0000:3b:00.0": "shared"},
                       vgpu_modes={"0000:3b:00.0": "sameSize"})
    assert vgpu.plan_graphics("esx1", {}) == dict(host="esx1", changed=False, before=dict(
        default_graphics_type=None, assignment_policy=None, devices={}, vgpu_modes={}), after=dict(
        default_graphics_type=None, assignment_policy=None, devices={}, vgpu_modes={}))


@pytest.mark.parametrize("given,expect", [
    ("3b:00.0", "0000:3b:00.0"), (" 3B:00.7 ", "0000:3b:00.7"), ("0000:3b:00.0", "0000:3b:00.0"),
    ("3b:00.8", "3b:00.8"), ("3b:00.0.1", "3b:00.0.1"),
])
def test_normalize_pci_id(given, expect):
    assert vgpu.normalize_pci_id(given) == expect


@pytest.mark.parametrize("vib,expect", [
    (None, None), ("", None), ("535.154", "535.154"), ("v535.154.02", "535.154.02"), ("10.535.1", None),
    ("99.154.02", None), ("1.2.3-535.154.02", "535.154.02"),
])
def test_driver_version_edges(vib, expect):
    assert vgpu.driver_version(vib) == expect


def test_match_driver_vib_by_vendor_and_name_order():
    pkgs = [dict(name="b-Driver", vendor="NVIDIA"), dict(name=None, vendor="NVIDIA"), dict(name="a-driver", vendor="NVIDIA"),
            dict(name="tools", vendor=None), dict(name="x", vendor="VMware")]
    assert vgpu.match_driver_vib(pkgs, r"NVIDIA") == dict(name="a-driver", vendor="NVIDIA")
    assert vgpu.match_driver_vib(pkgs[1:2], r"NVIDIA") == dict(name=None, vendor="NVIDIA")
    assert vgpu.match_driver_vib([dict(vendor="x"), dict(name="nvidia-mgmt"), dict(name="nvidia-a")], r"^nvidia") == dict(
        name="nvidia-a")
    assert vgpu.match_driver_vib([], r"NVIDIA") is None


def test_sensor_component_edges():
    assert vgpu.parse_sensor_component("NVIDIA drv 1.2") == dict(vendor="NVIDIA", name="drv", version="1.2")
    assert vgpu.parse_sensor_component("NVIDIA drv") is None
    assert vgpu.parse_sensor_component(None) is None


@pytest.mark.parametrize("hosts,expect", [
    ({}, dict(consistent=True, versions={}, missing=[], majority=None)),
    ({"a": "1"}, dict(consistent=True, versions={"1": ["a"]}, missing=[], majority="1")),
    ({"b": "1", "a": "1", "c": ""}, dict(consistent=False, versions={"1": ["a", "b"]}, missing=["c"], majority="1")),
    ({"a": None}, dict(consistent=False, versions={}, missing=["a"], majority=None)),
    ({"a": "2", "b": "1"}, dict(consistent=False, versions={"2": ["a"], "1": ["b"]}, missing=[], majority="1")),
    ({"a": "2", "b": "1", "c": "2"}, dict(consistent=False, versions={"2": ["a", "c"], "1": ["b"]}, missing=[], majority="2")),
])
def test_drift_report_every_field(hosts, expect):
    assert vgpu.drift_report(hosts) == expect


def test_max_framebuffer_of_a_board_whose_largest_profile_is_named_0():
    # M60-0Q/0B are the 512 MB profiles: the frame buffer in the name is 0.
    assert vgpu.max_framebuffer(["grid_m60-0q", "grid_m60-0b"]) == {"m60": 0}


def test_match_driver_vib_does_not_match_a_missing_name_or_vendor():
    assert vgpu.match_driver_vib([dict(vendor="VMware"), dict(name="esx-base")], r"X") is None


def test_plan_graphics_more_messages():
    cur = dict(default_graphics_type="shared", assignment_policy="performance", devices={})
    with pytest.raises(VgpuError, match=r"^host esx1: device 0000:3b:00.0: vgpu_mode must be one of sameSize, mixedSize$"):
        vgpu.plan_graphics("esx1", cur, devices=[dict(pci_id="3b:00.0", vgpu_mode="equal")])
    with pytest.raises(VgpuError, match=r"^host esx1: graphics device 0000:99:00.0 not found \(devices: 0000:3b:00.0, "
                                        r"0000:5e:00.0\)$"):
        vgpu.plan_graphics("esx1", cur, devices=[dict(pci_id="0000:99:00.0", graphics_type="shared")],
                           known_devices=["0000:5e:00.0", "0000:3b:00.0"])


def test_plan_graphics_mode_only_entry_keeps_the_devices_own_type():
    cur = dict(default_graphics_type="sharedDirect", assignment_policy="performance", devices={"0000:3b:00.0": "shared"})
    p = vgpu.plan_graphics("esx1", cur, devices=[dict(pci_id="3b:00.0", vgpu_mode="sameSize")])
    assert p["after"]["devices"] == {"0000:3b:00.0": "shared"}
    assert p["after"]["vgpu_modes"] == {"0000:3b:00.0": "sameSize"}


def test_plan_vm_after_keeps_the_unchanged_mmio_settings():
    have = {vgpu.MMIO_ENABLE_KEY: "FALSE", vgpu.MMIO_SIZE_KEY: "128", "other": "x"}
    plan = vgpu.plan_vm("vm1", "esx1", [dev(200, "grid_l40s-48q")], ["grid_l40s-48q"], {"esx1": L40S}, "poweredOff", True,
                        have, use_64bit_mmio=True)
    assert plan["changed"] is True
    assert plan["extra_config"] == {vgpu.MMIO_ENABLE_KEY: "TRUE"}
    assert plan["before"]["extra_config"] == {vgpu.MMIO_ENABLE_KEY: "FALSE", vgpu.MMIO_SIZE_KEY: "128"}
    assert plan["after"]["extra_config"] == {vgpu.MMIO_ENABLE_KEY: "TRUE", vgpu.MMIO_SIZE_KEY: "128"}


def test_plan_vm_an_added_vgpu_alone_is_a_change():
    plan = vgpu.plan_vm("vm1", "esx1", [], ["grid_l40s-48q"], {"esx1": L40S}, "poweredOff", True, {})
    assert (plan["changed"], plan["add"], plan["remove"], plan["extra_config"], plan["lock_memory"]) == (
        True, ["grid_l40s-48q"], [], {}, False)
    plan = vgpu.plan_vm("vm1", "esx1", [dev(200, "grid_l40s-48q")], [], {"esx1": L40S}, "poweredOff", True, {})
    assert (plan["changed"], plan["remove"]) == (True, [dev(200, "grid_l40s-48q")])


def test_plan_vm_passes_the_callers_mmio_values_to_the_c_series_rules():
    args = ("vm1", "esx1", [], ["grid_a100-40c"], {"esx1": A100}, "poweredOff", False, {})
    with pytest.raises(VgpuError, match=r"^VM vm1: C-series vGPU profile grid_a100-40c needs 64-bit MMIO; "
                                        r"use_64bit_mmio=false contradicts that$"):
        vgpu.plan_vm(*args, use_64bit_mmio=False)
    assert vgpu.plan_vm(*args, mmio_size_gb=256)["extra_config"] == {vgpu.MMIO_ENABLE_KEY: "TRUE", vgpu.MMIO_SIZE_KEY: "256"}


def test_plan_vm_errors_name_the_vm():
    with pytest.raises(VgpuError, match=r"^VM vm1 is poweredOn; vGPUs can only be changed on a powered-off VM"):
        vgpu.plan_vm("vm1", "esx1", [], ["grid_l40s-48q"], {"esx1": L40S}, "poweredOn", True, {})
    with pytest.raises(VgpuError, match=r"^VM vm1: profile grid_x-1q is not offered by host esx1"):
        vgpu.plan_vm("vm1", "esx1", [], ["grid_x-1q"], {"esx1": L40S}, "poweredOff", True, {})


def test_validate_profiles_lists_every_other_host_and_every_multi_vgpu_reason():
    offers = {"esx1": A100, "esx2": L40S, "esx3": L40S}
    with pytest.raises(VgpuError, match=r"^VM vm1: profile grid_l40s-48q is not offered by host esx1, only by esx2, esx3 "):
        vgpu.validate_profiles("vm1", ["grid_l40s-48q"], "esx1", offers)
    with pytest.raises(VgpuError) as e:
        vgpu.validate_profiles("vm1", ["grid_a100-4c"] * 5, "esx1", offers)
    assert str(e.value) == ("VM vm1 on host esx1: 5 vGPUs requested, at most 4 are allowed per VM; profile grid_a100-4c: "
                            "multiple vGPUs need the full-framebuffer profile (grid_a100-40c) (multi-vGPU rules legacy: "
                            "multi_vgpu_rules=legacy)")


def test_validate_profiles_cluster_rejection_names_the_requested_host_when_it_is_rejected_too():
    offers = {"esx1": A100, "esx2": A100}
    with pytest.raises(VgpuError, match=r"^VM vm1 on host esx2: "):
        vgpu.validate_profiles("vm1", ["grid_a100-4c"] * 2, "esx2", offers, placement="cluster")


@pytest.mark.parametrize("row,gpu", [
    ({"config.graphicsInfo": [{"deviceName": "NVIDIA A100"}]}, True),
    ({"config.sharedPassthruGpuTypes": ["grid_a100-4c"]}, True),
    ({"config.sharedGpuCapabilities": [{"vgpu": "grid_a100-40c"}]}, True),
    # The properties are read on every host: present but empty is a host without GPUs.
    ({"config.graphicsInfo": [], "config.sharedPassthruGpuTypes": [], "config.sharedGpuCapabilities": []}, False),
    ({"config.graphicsInfo": None, "name": "esx1"}, False),
    ({}, False),
])
def test_is_gpu_host_on_any_one_of_the_three_properties(row, gpu):
    assert vgpu.is_gpu_host(row) is gpu


# ---- issue 40: hosts whose GPUs cannot take the vGPUs, hardware upgrade, restore after a cut run -------------------

def test_hosts_with_gpu_errors_are_not_eligible_and_the_reason_is_named():
    offers = {"esx1": A100, "esx2": A100}
    assert vgpu.validate_profiles("vm1", ["grid_a100-40c"], "esx1", offers, "cluster",
                                  host_errors={"esx1": ["host esx1: vSGA"]}) == ["esx2"]
    with pytest.raises(vgpu.VgpuError, match=r"^VM vm1 on host esx1: host esx1: vSGA; second$"):
        vgpu.validate_profiles("vm1", ["grid_a100-40c"], "esx1", offers, "host",
                               host_errors={"esx1": ["host esx1: vSGA", "second"]})
    # a host failing both the multi-vGPU rules and its GPUs names both
    with pytest.raises(vgpu.VgpuError, match=r"multi-vGPU rules legacy: .*\); gpu reason$"):
        vgpu.validate_profiles("vm1", ["grid_a100-20c", "grid_a100-20c"], "esx1", {"esx1": A100}, "host",
                               host_errors={"esx1": ["gpu reason"]})


def test_plan_vm_upgrade_is_a_change_that_needs_the_vm_off():
    plan = vgpu.plan_vm("vm1", "esx1", [dev(200, "grid_a100-40c")] * 1, ["grid_a100-40c"], {"esx1": A100}, "poweredOn",
                        True, {vgpu.MMIO_ENABLE_KEY: "TRUE", vgpu.MMIO_SIZE_KEY: "128"}, power_policy="power_off",
                        upgrade={"before": "vmx-13"})
    assert (plan["changed"], plan["reconfigure"], plan["upgrade"]) == (True, False, {"before": "vmx-13"})
    assert plan["power"] == dict(power_off="hard", power_on_after=True)


@pytest.mark.parametrize("power, power_on", [("poweredOff", True), ("poweredOn", False)])
def test_plan_vm_restore_powers_on_a_vm_an_earlier_run_left_off(power, power_on):
    plan = vgpu.plan_vm("vm1", "esx1", [dev(200, "grid_l40s-48q")], ["grid_l40s-48q"], {"esx1": L40S}, power, True, {},
                        restore=True)
    assert (plan["changed"], plan["reconfigure"], plan["restore"]) == (True, False, True)
    assert plan["power"] == dict(power_off=None, power_on_after=power_on)
    quiet = vgpu.plan_vm("vm1", "esx1", [dev(200, "grid_l40s-48q")], ["grid_l40s-48q"], {"esx1": L40S}, power, True, {})
    assert (quiet["changed"], quiet["restore"], quiet["power"]["power_on_after"]) == (False, False, False)


def test_vsga_involved_is_any_device_in_shared_mode_before_or_after():
    direct = dict(default_graphics_type="sharedDirect", devices={})
    shared = dict(default_graphics_type="shared", devices={})
    pcis = ["0000:3b:00.0", "3b:00.1"]
    assert not vgpu.vsga_involved(direct, direct, pcis)
    assert vgpu.vsga_involved(shared, direct, pcis)
    assert vgpu.vsga_involved(direct, shared, pcis)
    one = dict(default_graphics_type="sharedDirect", devices={"0000:3b:00.1": "shared"})
    assert vgpu.vsga_involved(direct, one, pcis)  # the entry counts (ids normalized)
    assert not vgpu.vsga_involved(direct, one, ["0000:3b:00.0"])  # not a device of this host
    override = dict(default_graphics_type="shared", devices={"0000:3b:00.0": "sharedDirect"})
    assert not vgpu.vsga_involved(override, direct, ["0000:3b:00.0"])
    assert not vgpu.vsga_involved(shared, shared, [])  # no graphics device at all


def test_drift_is_judged_per_cluster_and_names_the_drifting_ones():
    versions = {"a1": "550.90.05", "a2": "550.90.05", "b1": "535.154.02", "b2": "535.154.02", "c1": "550.90.05",
                "c2": None, "s1": "535.154.02"}
    clusters = {"a1": "A", "a2": "A", "b1": "B", "b2": "B", "c1": "C", "c2": "C", "s1": None}
    out = vgpu.drift_by_cluster(versions, clusters)
    assert out["consistent"] is False and out["drifting_clusters"] == ["C"]
    assert out["clusters"]["A"] == dict(consistent=True, versions={"550.90.05": ["a1", "a2"]}, missing=[], majority="550.90.05")
    assert out["clusters"]["C"] == dict(consistent=False, versions={"550.90.05": ["c1"]}, missing=["c2"], majority="550.90.05")
    assert out["clusters"]["standalone host s1"]["consistent"] is True
    assert list(out["clusters"]) == ["A", "B", "C", "standalone host s1"]
    # the whole scope's groups are still reported
    assert out["versions"] == {"535.154.02": ["b1", "b2", "s1"], "550.90.05": ["a1", "a2", "c1"]} and out["missing"] == ["c2"]
    assert out["majority"] == "535.154.02"
    del versions["c2"]
    assert vgpu.drift_by_cluster(versions, clusters)["consistent"] is True
    assert vgpu.drift_by_cluster({}, {}) == dict(consistent=True, versions={}, missing=[], majority=None, clusters={},
                                                 drifting_clusters=[])


def test_vcenter_profile_facts_win_over_the_name_for_the_multi_vgpu_rules():
    api = dict(name="odd", board="device-7", fb_gb=4, series="q", mig=False, source="api")
    assert vgpu.facts_as_parsed(api) == dict(name="odd", board="device-7", fb_gb=4, series="q", mig_slices=None)
    assert vgpu.facts_as_parsed(dict(api, mig=True))["mig_slices"] == 1
    assert vgpu.facts_as_parsed(dict(api, source="name")) is None
    assert vgpu.facts_as_parsed(dict(api, fb_gb=None)) is None
    assert vgpu.facts_as_parsed({}) is None
    # the name alone cannot prove "odd" allows several vGPUs; vCenter's facts can
    assert vgpu.multi_vgpu_errors(["odd", "odd"], ["odd"]) == [
        "profile odd: unrecognised name, cannot prove it allows multiple vGPUs"]
    assert vgpu.multi_vgpu_errors(["odd", "odd"], ["odd"], facts={"odd": api}) == []
    assert vgpu.validate_profiles("vm", ["odd", "odd"], "h", {"h": ["odd"]}, facts={"h": {"odd": api}}) == ["h"]


def test_multi_vgpu_full_framebuffer_rule_holds_with_vcenters_profile_facts():
    # vCenter's facts name the board by its device, the offered profiles by their names: the half-size profile is
    # still refused (it passed unchecked when the boards were compared as given).
    api = {"grid_a100-20c": {"name": "grid_a100-20c", "board": "device-8384", "fb_gb": 20, "series": "c", "mig": False,
                             "source": "api"},
           "grid_a100-40c": {"name": "grid_a100-40c", "board": "device-8384", "fb_gb": 40, "series": "c", "mig": False,
                             "source": "api"}}
    rules = vgpu.multi_vgpu_rules("vsphere8")
    offered = ["grid_a100-20c", "grid_a100-40c"]
    assert vgpu.multi_vgpu_errors(["grid_a100-20c"] * 2, offered, rules=rules, facts=api) == [
        "profile grid_a100-20c: multiple vGPUs need the full-framebuffer profile (grid_a100-40c)"]
    assert vgpu.multi_vgpu_errors(["grid_a100-40c"] * 2, offered, rules=rules, facts=api) == []
