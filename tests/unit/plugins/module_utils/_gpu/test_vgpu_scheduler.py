"""Unit tests for the pure vGPU scheduler policy (plugins/module_utils/_gpu/vgpu_scheduler.py).

Expected values come from NVIDIA's documentation, not from the code: the user guide's RmPVMRL examples
(0x01, 0x11, 0x00030003, 0x3c3c0001, 0x3c3c0011) and nvrm_registry.h's field layout.
"""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._gpu import vgpu_scheduler as vs
from ansible_collections.gpuops.provision.plugins.module_utils._gpu.vgpu_scheduler import SchedulerError

H = "pve-1"


def spec(**kw):
    out = dict.fromkeys(vs.SPEC_KEYS)
    out.update(kw)
    return out


# ---- normalize ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("given,expect", [
    ({"policy": "best_effort"}, spec(policy="best_effort")),
    ({"policy": "equal_share"}, spec(policy="equal_share")),                 # arr None: the driver's default
    ({"policy": "fixed_share"}, spec(policy="fixed_share")),
    ({"policy": "fixed_share", "arr": True}, spec(policy="fixed_share", arr=True)),
    ({"policy": "fixed_share", "timeslice_ms": 3}, spec(policy="fixed_share", arr=False, timeslice_ms=3)),
    ({"policy": "fixed_share", "arr": False}, spec(policy="fixed_share", arr=False)),
    ({"policy": "equal_share", "arr": True, "frequency_hz": 960, "averaging_factor": 60},
     spec(policy="equal_share", arr=True, frequency_hz=960, averaging_factor=60)),
    ({"policy": "fixed_share", "frequency_hz": 63}, spec(policy="fixed_share", arr=True, frequency_hz=63)),
    ({"policy": "fixed_share", "timeslice_ms": 1}, spec(policy="fixed_share", arr=False, timeslice_ms=1)),
    ({"policy": "fixed_share", "timeslice_ms": 30, "arr": False}, spec(policy="fixed_share", arr=False, timeslice_ms=30)),
    ({"policy": "fixed_share", "timeslice_ms": None}, spec(policy="fixed_share")),
    ({"policy": "fixed_share", "averaging_factor": 5}, spec(policy="fixed_share", arr=True, averaging_factor=5)),
])
def test_normalize(given, expect):
    assert vs.normalize(given, H) == expect


@pytest.mark.parametrize("given,match", [
    (None, r"^host pve-1: vGPU scheduler: the spec must be a mapping"),
    ("fixed_share", r"^host pve-1: .*must be a mapping"),
    ({}, r"^host pve-1: vGPU scheduler: unknown policy None"),
    ({"policy": "fair_share"}, r"^host pve-1: vGPU scheduler: unknown policy 'fair_share' \(expected one of best_effort, equal_share, fixed_share\)"),
    ({"policy": "FIXED_SHARE"}, r"unknown policy 'FIXED_SHARE'"),
    ({"policy": 3}, r"unknown policy 3"),
    ({"policy": "fixed_share", "slice": 3}, r"^host pve-1: vGPU scheduler: unknown option\(s\) slice"),
    ({"policy": "fixed_share", "timeslice_ms": 0}, r"timeslice_ms 0 is outside the driver's range 1-30"),
    ({"policy": "fixed_share", "timeslice_ms": 31}, r"timeslice_ms 31 is outside the driver's range 1-30"),
    ({"policy": "fixed_share", "timeslice_ms": True}, r"timeslice_ms must be an integer, got True"),
    ({"policy": "fixed_share", "timeslice_ms": "3"}, r"timeslice_ms must be an integer, got '3'"),
    ({"policy": "fixed_share", "timeslice_ms": 2.5}, r"timeslice_ms must be an integer, got 2.5"),
    ({"policy": "fixed_share", "frequency_hz": 62}, r"frequency_hz 62 is outside the driver's range 63-960"),
    ({"policy": "fixed_share", "frequency_hz": 961}, r"frequency_hz 961 is outside"),
    ({"policy": "fixed_share", "averaging_factor": 0}, r"averaging_factor 0 is outside the driver's range 1-60"),
    ({"policy": "fixed_share", "averaging_factor": 61}, r"averaging_factor 61 is outside"),
    ({"policy": "fixed_share", "averaging_factor": False}, r"averaging_factor must be an integer, got False"),
    ({"policy": "fixed_share", "arr": "yes"}, r"arr must be true or false, got 'yes'"),
    ({"policy": "best_effort", "timeslice_ms": 3}, r"^host pve-1: vGPU scheduler: timeslice_ms cannot be set for best_effort"),
    ({"policy": "best_effort", "arr": True, "frequency_hz": 480}, r"arr, frequency_hz cannot be set for best_effort"),
    ({"policy": "fixed_share", "timeslice_ms": 3, "frequency_hz": 480}, r"timeslice_ms .* and frequency_hz/averaging_factor .* exclude each other"),
    ({"policy": "fixed_share", "timeslice_ms": 3, "arr": True}, r"timeslice_ms needs arr false"),
    ({"policy": "equal_share", "arr": False, "averaging_factor": 5}, r"frequency_hz and averaging_factor need arr true"),
])
def test_normalize_rejects_naming_host(given, match):
    with pytest.raises(SchedulerError, match=match):
        vs.normalize(given, H)


def test_normalize_without_host_has_no_host_prefix():
    with pytest.raises(SchedulerError, match=r"^vGPU scheduler: unknown policy"):
        vs.normalize({"policy": "x"})


def test_scheduler_error_is_a_value_error():
    assert issubclass(SchedulerError, ValueError)


# ---- RmPVMRL -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("given,value", [
    ({"policy": "best_effort"}, 0x0),
    ({"policy": "equal_share"}, 0x01),                                                     # user guide example
    ({"policy": "fixed_share"}, 0x11),                                                     # user guide example
    ({"policy": "equal_share", "timeslice_ms": 3}, 0x00030003),                            # user guide example
    ({"policy": "fixed_share", "timeslice_ms": 24}, 0x00180013),                           # bit 1 = ARR off [reg]
    ({"policy": "equal_share", "frequency_hz": 960, "averaging_factor": 60}, 0x3C3C0001),  # user guide example
    ({"policy": "fixed_share", "frequency_hz": 960, "averaging_factor": 60}, 0x3C3C0011),  # user guide example
    ({"policy": "fixed_share", "arr": False}, 0x13),
    ({"policy": "fixed_share", "arr": True}, 0x11),
    ({"policy": "fixed_share", "frequency_hz": 256}, 0x00100011),                          # FFF = 0x100 -> 256 Hz
])
def test_rmpvmrl_matches_documented_values(given, value):
    assert vs.rmpvmrl(given) == value
    assert vs.matches(given, vs.spec_of_rmpvmrl(value))
    assert vs.rmpvmrl(vs.spec_of_rmpvmrl(value)) == value


def test_rmpvmrl_validates():
    with pytest.raises(SchedulerError, match="unknown policy 'x'"):
        vs.rmpvmrl({"policy": "x"})


@pytest.mark.parametrize("value,expect", [
    ("0x11", spec(policy="fixed_share", arr=True)),
    ("17", spec(policy="fixed_share", arr=True)),
    ("021", spec(policy="fixed_share", arr=True)),                     # os_strtoul base 0: leading 0 is octal
    ("0X11", spec(policy="fixed_share", arr=True)),
    (" 0x11 ", spec(policy="fixed_share", arr=True)),
    ("0x11zz", spec(policy="fixed_share", arr=True)),                  # strtoul stops at the first non-digit
    ("junk", spec(policy="best_effort")),                              # strtoul of no digits is 0
    ("0", spec(policy="best_effort")),
    (0x10, spec(policy="best_effort")),                                # bit 0 off: policy bits ignored
    (0x1F0013, spec(policy="fixed_share", arr=False, timeslice_ms=30)),  # TT 31 capped at 30 [ug]
    (0x00FF0013, spec(policy="fixed_share", arr=False, timeslice_ms=30)),
    (0x00001011, spec(policy="fixed_share", arr=True, frequency_hz=63)),   # FFF 1 raised to 63 [ug]
    (0x003FF011, spec(policy="fixed_share", arr=True, frequency_hz=960)),  # FFF 0x3FF capped at 960
    (0xFF000001, spec(policy="equal_share", arr=True, averaging_factor=60)),  # AA capped at 60
    (0x00180011, spec(policy="fixed_share", arr=True, frequency_hz=384)),  # bits 21:12 with ARR on [reg]
    (0x1_0000_0011, spec(policy="fixed_share", arr=True)),            # a DWORD: bits above 31 are lost
    (0x21, spec(policy="equal_share", arr=True)),                     # policy 2 is not fixed share
])
def test_spec_of_rmpvmrl_decodes_like_the_driver(value, expect):
    assert vs.spec_of_rmpvmrl(value) == expect


@pytest.mark.parametrize("value", [None, True, 1.0, ["0x11"]])
def test_spec_of_rmpvmrl_rejects_non_integers(value):
    with pytest.raises(SchedulerError, match="RmPVMRL value must be an integer"):
        vs.spec_of_rmpvmrl(value)


@pytest.mark.parametrize("text,value", [("0x1f", 31), ("0777", 511), ("42", 42), ("", 0), ("0", 0), ("0x", 0),
                                        ("0xFFFFFFFFF", 0xFFFFFFFF)])
def test_strtoul(text, value):
    assert vs.strtoul(text) == value


@pytest.mark.parametrize("value,text", [(0, "0x00"), (0x11, "0x11"), (0x13, "0x13"), (0x00030003, "0x00030003"),
                                        (0x3C3C0011, "0x3c3c0011")])
def test_format_value_follows_the_guide(value, text):
    assert vs.format_value(value) == text


# ---- option strings ----------------------------------------------------------------------------------------------

OPTS = 'NVreg_RegistryDwords="RmPVMRL=0x11;RMIntrLockingMode=1" NVreg_OpenRmEnableUnsupportedGpus=1'


@pytest.mark.parametrize("opts,dwords", [
    (OPTS, "RmPVMRL=0x11;RMIntrLockingMode=1"),
    ("NVreg_OpenRmEnableUnsupportedGpus=1", ""),
    ("", ""),
    (None, ""),
    ("NVreg_RegistryDwords=RmPVMRL=0x01", "RmPVMRL=0x01"),
    ('NVreg-RegistryDwords="RmPVMRL=0x01"', "RmPVMRL=0x01"),            # kernel: '-' and '_' are equal in names
    ('NVreg_RegistryDwords="A=1" NVreg_RegistryDwords="B=2"', "B=2"),     # the kernel applies the last one
    ('NVreg_RegistryDwords="A=1; B=2"  X=1', "A=1; B=2"),                 # spaces inside quotes stay
    ("NVreg_RegistryDwords", ""),
])
def test_registry_dwords(opts, dwords):
    assert vs.registry_dwords(opts) == dwords


@pytest.mark.parametrize("opts,text", [
    (OPTS, "0x11"),
    ('NVreg_RegistryDwords="rmpvmrl = 0x01"', "0x01"),                  # names case-insensitive, spaces dropped
    ('NVreg_RegistryDwords="RmPVMRL=0x01;RmPVMRL=0x11"', "0x11"),       # the last entry wins
    ('NVreg_RegistryDwords="RmPVMRL=0x01=2"', None),                    # not exactly one '=': skipped
    ('NVreg_RegistryDwords="RmPVMRL="', None),
    ("", None),
])
def test_configured_rmpvmrl(opts, text):
    assert vs.configured_rmpvmrl(opts) == text


def test_configured_spec_absent_is_best_effort():
    assert vs.configured_spec("NVreg_X=1") == spec(policy="best_effort")
    assert vs.configured_spec(OPTS) == spec(policy="fixed_share", arr=True)


def test_per_device_rmpvmrl():
    opts = ('NVreg_RegistryDwordsPerDevice="pci=0000:3B:00.0;RmPVMRL=0x01;pci=0000:5e:00.0;RMX=1;'
            'junk;pci=0000:88:00.0;rmpvmrl=0x11" NVreg_RegistryDwords="RmPVMRL=0x11"')
    assert vs.per_device_rmpvmrl(opts) == {"0000:3b:00.0": "0x01", "0000:88:00.0": "0x11"}
    assert vs.per_device_rmpvmrl('NVreg_RegistryDwordsPerDevice="RmPVMRL=0x11"') == {}
    assert vs.per_device_rmpvmrl(OPTS) == {}


@pytest.mark.parametrize("opts,given,expect", [
    # already so: the same string back, whatever spelling
    (OPTS, {"policy": "fixed_share"}, OPTS),
    ('NVreg_RegistryDwords="RmPVMRL=17"', {"policy": "fixed_share"}, 'NVreg_RegistryDwords="RmPVMRL=17"'),
    ("NVreg_X=1", {"policy": "best_effort"}, "NVreg_X=1"),
    ("", {"policy": "best_effort"}, ""),
    # changed: only RmPVMRL moves, every other key and parameter stays in place
    (OPTS, {"policy": "equal_share", "timeslice_ms": 3},
     'NVreg_RegistryDwords="RmPVMRL=0x00030003;RMIntrLockingMode=1" NVreg_OpenRmEnableUnsupportedGpus=1'),
    (OPTS, {"policy": "best_effort"}, 'NVreg_RegistryDwords="RMIntrLockingMode=1" NVreg_OpenRmEnableUnsupportedGpus=1'),
    ('NVreg_RegistryDwords="RmPVMRL=0x11"', {"policy": "best_effort"}, ""),
    ("NVreg_OpenRmEnableUnsupportedGpus=1", {"policy": "fixed_share"},
     'NVreg_OpenRmEnableUnsupportedGpus=1 NVreg_RegistryDwords="RmPVMRL=0x11"'),
    ("", {"policy": "fixed_share"}, 'NVreg_RegistryDwords="RmPVMRL=0x11"'),
    (None, {"policy": "fixed_share"}, 'NVreg_RegistryDwords="RmPVMRL=0x11"'),
    ('NVreg_RegistryDwords="A=1;rmpvmrl=0x01;B=2;RmPVMRL=0x01"', {"policy": "fixed_share"},
     'NVreg_RegistryDwords="A=1;RmPVMRL=0x11;B=2"'),
    ('NVreg_RegistryDwords=A=1', {"policy": "fixed_share"}, 'NVreg_RegistryDwords="A=1;RmPVMRL=0x11"'),
    ('NVreg_RegistryDwords="A=1" X=1 NVreg_RegistryDwords="B=2"', {"policy": "fixed_share"},
     'NVreg_RegistryDwords="A=1" X=1 NVreg_RegistryDwords="B=2;RmPVMRL=0x11"'),
    ('NVreg_RegistryDwords="RmPVMRL=0x3c3c0011"', {"policy": "fixed_share"}, 'NVreg_RegistryDwords="RmPVMRL=0x11"'),
])
def test_options_with_policy(opts, given, expect):
    out = vs.options_with_policy(opts, given)
    assert out == expect
    assert vs.matches(given, vs.configured_spec(out))
    assert vs.options_with_policy(out, given) == out            # idempotent


def test_options_with_policy_validates_before_touching():
    with pytest.raises(SchedulerError, match="unknown policy 'x'"):
        vs.options_with_policy(OPTS, {"policy": "x"})


# ---- NVML --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw,ms", [(0, None), (None, None), (2, 2.0), (2000, 2.0), (2000000, 2.0), (1041667, 1.041667),
                                    (30000000, 30.0), (99, 99.0), (100, 0.1)])
def test_timeslice_ms_reads_any_unit(raw, ms):
    assert vs.timeslice_ms(raw) == ms


@pytest.mark.parametrize("state,expect", [
    ({"scheduler_policy": 1, "arr_mode": 0, "timeslice": 0}, dict(policy="best_effort", timeslice_observed_ms=None)),
    ({"scheduler_policy": 3, "arr_mode": 2, "timeslice": 2083333, "avg_factor": 33},
     dict(policy="fixed_share", arr=True, frequency_hz=480, averaging_factor=33, timeslice_observed_ms=2.083333)),
    ({"scheduler_policy": 3, "arr_mode": 0, "timeslice": 1041667, "avg_factor": 0},
     dict(policy="fixed_share", arr=True, frequency_hz=960, timeslice_observed_ms=1.041667)),
    ({"scheduler_policy": 2, "arr_mode": 1, "timeslice": 3000000},
     dict(policy="equal_share", arr=False, timeslice_ms=3, timeslice_observed_ms=3.0)),
    ({"scheduler_policy": 2, "arr_mode": 1, "timeslice": 0},
     dict(policy="equal_share", arr=False, timeslice_observed_ms=None)),
    ({"scheduler_policy": "fixed_share", "arr_mode": 2, "timeslice": 0},
     dict(policy="fixed_share", arr=True, timeslice_observed_ms=None)),
    ({"scheduler_policy": 0}, dict(policy="unknown", timeslice_observed_ms=None)),
    ({"scheduler_policy": 9}, dict(policy="unknown", timeslice_observed_ms=None)),
])
def test_spec_of_nvml(state, expect):
    want = dict.fromkeys(vs.SPEC_KEYS)
    want.update(expect)
    assert vs.spec_of_nvml(state) == want


@pytest.mark.parametrize("given,observed,ok", [
    ({"policy": "fixed_share"}, spec(policy="fixed_share", arr=True, frequency_hz=480), True),
    ({"policy": "fixed_share"}, spec(policy="equal_share", arr=True), False),
    ({"policy": "fixed_share"}, spec(policy="fixed_share", arr=False, timeslice_ms=2), True),   # arr: driver default
    ({"policy": "fixed_share", "arr": True}, spec(policy="fixed_share", arr=False, timeslice_ms=2), False),
    ({"policy": "fixed_share", "arr": False}, spec(policy="fixed_share", arr=True), False),
    ({"policy": "fixed_share", "arr": True}, spec(policy="fixed_share"), True),        # arr not reported
    ({"policy": "fixed_share", "timeslice_ms": 3}, spec(policy="fixed_share", arr=False), True),  # idle: slice 0
    ({"policy": "best_effort"}, spec(policy="best_effort"), True),
    ({"policy": "best_effort"}, spec(policy="unknown"), False),
    ({"policy": "fixed_share", "timeslice_ms": 3}, spec(policy="fixed_share", arr=False, timeslice_ms=3), True),
    ({"policy": "fixed_share", "timeslice_ms": 3}, spec(policy="fixed_share", arr=False, timeslice_ms=2), False),
    ({"policy": "fixed_share", "arr": False}, spec(policy="fixed_share", arr=False, timeslice_ms=2), True),
    ({"policy": "fixed_share", "frequency_hz": 960}, spec(policy="fixed_share", arr=True, frequency_hz=958), True),
    ({"policy": "fixed_share", "frequency_hz": 960}, spec(policy="fixed_share", arr=True, frequency_hz=940), False),
    ({"policy": "fixed_share", "frequency_hz": 63}, spec(policy="fixed_share", arr=True, frequency_hz=64), True),
    ({"policy": "fixed_share", "frequency_hz": 63}, spec(policy="fixed_share", arr=True), True),  # not reported
    ({"policy": "fixed_share", "frequency_hz": 63}, spec(policy="fixed_share", arr=True, frequency_hz=70), False),
    ({"policy": "equal_share", "timeslice_ms": 3}, spec(policy="fixed_share", arr=False, timeslice_ms=3), False),
    ({"policy": "fixed_share", "averaging_factor": 60}, spec(policy="fixed_share", arr=True, averaging_factor=60), True),
    ({"policy": "fixed_share", "averaging_factor": 60}, spec(policy="fixed_share", arr=True, averaging_factor=33), False),
])
def test_matches(given, observed, ok):
    assert vs.matches(given, observed) is ok


def test_matches_round_trip_through_nvml_state():
    # what gpusim/the driver reports for RmPVMRL=0x3c3c0011: 960 Hz -> a 1041667 ns slice
    observed = vs.spec_of_nvml({"scheduler_policy": 3, "arr_mode": 2, "timeslice": 1041667, "avg_factor": 60})
    assert vs.matches({"policy": "fixed_share", "frequency_hz": 960, "averaging_factor": 60}, observed)


CAPS = {"supported_policies": ["best_effort", "equal_share", "fixed_share"], "arr_supported": True,
        "min_timeslice": 1000000, "max_timeslice": 30000000}


@pytest.mark.parametrize("given,caps,reason", [
    ({"policy": "fixed_share"}, CAPS, None),
    ({"policy": "fixed_share"}, None, None),
    ({"policy": "fixed_share"}, {}, None),
    ({"policy": "best_effort"}, dict(CAPS, supported_policies=["best_effort"]), None),
    ({"policy": "fixed_share"}, dict(CAPS, supported_policies=["best_effort", "equal_share"]),
     "policy fixed_share is not supported (the GPU supports best_effort, equal_share)"),
    ({"policy": "fixed_share", "arr": True}, dict(CAPS, arr_supported=False), "adaptive round robin (arr) is not supported"),
    ({"policy": "fixed_share"}, dict(CAPS, arr_supported=False), None),                # default: the driver picks
    ({"policy": "fixed_share", "timeslice_ms": 3}, dict(CAPS, arr_supported=False), None),
    ({"policy": "fixed_share", "timeslice_ms": 20}, dict(CAPS, max_timeslice=10000000),
     "timeslice_ms 20 is outside this GPU's range 1-10 ms"),
])
def test_unsupported_reason(given, caps, reason):
    got = vs.unsupported_reason(given, caps)
    assert got == reason if reason is None else got.startswith(reason)


@pytest.mark.parametrize("given,text", [
    (spec(policy="best_effort"), "best_effort"),
    (spec(policy="fixed_share", arr=True), "fixed_share (arr)"),
    (spec(policy="fixed_share", arr=True, frequency_hz=960, averaging_factor=60), "fixed_share (arr, 960 Hz, averaging factor 60)"),
    (spec(policy="equal_share", arr=False, timeslice_ms=3), "equal_share (3 ms)"),
    (spec(policy="equal_share", arr=False), "equal_share (default time slice)"),
    (spec(policy="unknown"), "unknown"),
    (spec(policy="fixed_share"), "fixed_share (driver default scheduling)"),
])
def test_describe(given, text):
    assert vs.describe(given) == text


# ---- modprobe.d (KVM / Proxmox VE) -------------------------------------------------------------------------------

def test_modprobe_files_in_order_follows_modprobe():
    files = [{"path": p, "content": p} for p in (
        "/lib/modprobe.d/b.conf", "/etc/modprobe.d/b.conf", "/usr/lib/modprobe.d/a.conf", "/run/modprobe.d/c.conf",
        "/etc/modprobe.d/a.txt", "/opt/elsewhere/a.conf")]
    # /etc hides /lib's b.conf; a path outside the modprobe.d directories loses to any of them; lexical by name
    assert [f["path"] for f in vs.modprobe_files_in_order(files)] == [
        "/usr/lib/modprobe.d/a.conf", "/etc/modprobe.d/b.conf", "/run/modprobe.d/c.conf"]
    assert [f["path"] for f in vs.modprobe_files_in_order(files[-1:])] == ["/opt/elsewhere/a.conf"]


@pytest.mark.parametrize("content,opts", [
    ("options nvidia A=1\noptions nvidia B=2 C=3\n", ["A=1", "B=2 C=3"]),
    ("options nvidia \\\n  A=1 # comment\n#options nvidia B=1\n", ["A=1"]),
    ("options nvidia-drm modeset=1\noptions nvidia_vgpu_vfio X=1\nblacklist nouveau\noptions nvidia\n", []),
    ("", []),
    (None, []),
])
def test_module_options(content, opts):
    assert vs.module_options(content) == opts


def test_module_options_treats_dash_and_underscore_alike():
    assert vs.module_options("options nvidia-vgpu-vfio X=1\n", "nvidia_vgpu_vfio") == ["X=1"]


def test_modprobe_plan_rerun_finds_its_own_file_under_another_spelling_of_the_path():
    # The lab's root is relative to the inventory (".../inventories/lab/../../build/..."); find and slurp may report
    # the role's file under the normalised path. A re-run must see its own file once and change nothing.
    given = "/srv/inventories/lab/../../build/root//etc/modprobe.d/zz-gpuops-vgpu-scheduler.conf"
    found = "/srv/build/root/etc/modprobe.d/zz-gpuops-vgpu-scheduler.conf"
    own = vs.render_conf("RmPVMRL=0x11")
    for mine, on_disk in ((given, found), (found, given)):
        plan = vs.modprobe_plan([{"path": on_disk, "content": own}], {"policy": "fixed_share"}, mine, H)
        assert (plan["changed"], plan["registry_dwords"], plan["path"]) == (False, "RmPVMRL=0x11", found)


def test_modprobe_plan_carries_its_own_other_keys_and_reports_before():
    mine = "/etc/modprobe.d/zz-gpuops-vgpu-scheduler.conf"
    own = vs.render_conf("RmPVMRL=0x01;Keep=1")
    plan = vs.modprobe_plan([{"path": mine, "content": own}], {"policy": "fixed_share", "timeslice_ms": 4}, mine, H)
    assert plan["registry_dwords"] == "RmPVMRL=0x00040013;Keep=1"
    assert plan["configured_before"]["policy"] == "equal_share" and plan["changed"] is True
    assert plan["content"] == vs.render_conf("RmPVMRL=0x00040013;Keep=1")
    with pytest.raises(SchedulerError, match=r"^host pve-1: vGPU scheduler: unknown policy 'x'"):
        vs.modprobe_plan([], {"policy": "x"}, mine, H)


def test_running_lists_the_gpus_that_answer_the_scheduler_queries():
    gpus = [{"pci_address": "0000:17:00.0", "vgpu_scheduler": {"supported": True, "description": "fixed_share (arr)"}},
            {"pci_address": "0000:65:00.0", "vgpu_scheduler": {"supported": False, "description": "x"}},
            {"pci_address": "0000:b3:00.0", "vgpu_scheduler": None},
            {"pci_address": "0000:ca:00.0"},
            {"pci_address": "0000:e3:00.0", "vgpu_scheduler": {"supported": True}}]
    assert vs.running(gpus) == [{"address": "0000:17:00.0", "running": "fixed_share (arr)"},
                                {"address": "0000:e3:00.0", "running": None}]
    assert vs.running([]) == []
