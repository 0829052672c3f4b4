"""gpusim's GPU health readings (ECC, row remapping, page retirement, PCIe link, temperature, clock event reasons,
missing and lost GPUs), the kernel log behind lab/gpusim/bin/dmesg, and the fault injection for each
(`python -m gpusim fault ...`). Rules and their upstream sources: lab/gpusim/gpusim/health.py and kernlog.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from gpusim_loader import LAB  # pylint: disable=import-error  # on sys.path via conftest.py
from gpusim_nvml import library_env  # pylint: disable=import-error  # tests/helpers, on sys.path via tests/conftest.py
from libnvml_common import refusal  # pylint: disable=import-error

A100 = "NVIDIA A100-SXM4-40GB"
H100 = "NVIDIA H100 80GB HBM3"
L40S = "NVIDIA L40S"
DMESG = LAB / "bin" / "dmesg"
SMI = LAB / "bin" / "nvidia-smi"
# DCGM's kmsg parser (ParseKmsgLineForXid) without the kmsg record prefix; NVSentinel's and gpud's are alike.
XID_RE = re.compile(r"NVRM: Xid \(PCI:([^)]*)\): (\d+),")


def cli(path, *args):
    env = dict(os.environ, PYTHONPATH=str(LAB))
    return subprocess.run([sys.executable, "-m", "gpusim", "--state", str(path), *args], env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def tool(exe, path, *args, tz="UTC"):
    """A lab tool (bin/dmesg, bin/nvidia-smi) on the state ``path``; NVML is nvidia-ml-py over gpusim's library."""
    env = dict(os.environ, TZ=tz, **library_env(path))
    env.pop("PYTHONPATH", None)
    return subprocess.run([sys.executable, str(exe), *args], env=env, capture_output=True, text=True, timeout=60,
                          check=False)


def dev(nv, i=0):
    return nv.nvmlDeviceGetHandleByIndex(i)


# ---------------------------------------------------------------- healthy defaults
@pytest.mark.parametrize("model, gen, thresholds", [
    (A100, 4, (92, 89, 85, 95)),
    ("NVIDIA A100-SXM4-80GB", 4, (92, 89, 85, 95)),
    ("NVIDIA A30", 4, (92, 89, 85, 95)),
    (H100, 5, (95, 89, 87, 95)),
    ("NVIDIA H100 NVL", 5, (95, 89, 87, 95)),
    ("NVIDIA H200", 5, (95, 89, 87, 95)),
])
def test_minimal_state_is_a_healthy_gpu(sim, model, gen, thresholds):
    nv = sim.start({"gpus": [{"model": model}]})
    d = dev(nv)
    assert nv.nvmlDeviceGetEccMode(d) == [nv.NVML_FEATURE_ENABLED, nv.NVML_FEATURE_ENABLED]
    assert nv.nvmlDeviceGetDefaultEccMode(d) == [nv.NVML_FEATURE_ENABLED]
    for err in (nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED):
        for counter in (nv.NVML_VOLATILE_ECC, nv.NVML_AGGREGATE_ECC):
            assert nv.nvmlDeviceGetTotalEccErrors(d, err, counter) == 0
    assert nv.nvmlDeviceGetRemappedRows(d) == (0, 0, 0, 0)
    assert (nv.nvmlDeviceGetCurrPcieLinkGeneration(d), nv.nvmlDeviceGetMaxPcieLinkGeneration(d),
            nv.nvmlDeviceGetGpuMaxPcieLinkGeneration(d)) == (gen, gen, gen)
    assert nv.nvmlDeviceGetCurrPcieLinkWidth(d) == nv.nvmlDeviceGetMaxPcieLinkWidth(d) == 16
    assert nv.nvmlDeviceGetTemperature(d, nv.NVML_TEMPERATURE_GPU) == 30
    with pytest.raises(nv.NVMLError_FunctionNotFound):  # nvidia-ml-py's ...V calls a symbol the pinned nvml.h lacks
        nv.nvmlDeviceGetTemperatureV(d, nv.NVML_TEMPERATURE_GPU)
    got = tuple(nv.nvmlDeviceGetTemperatureThreshold(d, t) for t in (
        nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
        nv.NVML_TEMPERATURE_THRESHOLD_GPU_MAX, nv.NVML_TEMPERATURE_THRESHOLD_MEM_MAX))
    assert got == thresholds
    assert nv.nvmlDeviceGetCurrentClocksEventReasons(d) == nv.nvmlClocksEventReasonGpuIdle
    assert nv.nvmlDeviceGetCurrentClocksThrottleReasons(d) == nv.nvmlClocksThrottleReasonGpuIdle
    assert nv.nvmlDeviceGetSupportedClocksEventReasons(d) == nv.nvmlClocksEventReasonAll
    assert nv.nvmlDeviceGetPersistenceMode(d) == nv.NVML_FEATURE_ENABLED


def test_row_remapping_parts_answer_not_supported_for_page_retirement(sim):
    """Ampere and later replaced page retirement with row remapping: Retired Pages read N/A on A100/H100/L40S."""
    nv = sim.start({"gpus": [{"model": A100}, {"model": H100}, {"model": L40S}]})
    for i in range(3):
        d = dev(nv, i)
        for call in (lambda: nv.nvmlDeviceGetRetiredPages(d, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
                     lambda: nv.nvmlDeviceGetRetiredPages_v2(d, 0),
                     lambda: nv.nvmlDeviceGetRetiredPagesPendingStatus(d)):
            with pytest.raises(nv.NVMLError_NotSupported):
                call()
    with pytest.raises(nv.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetRetiredPages(dev(nv), nv.NVML_PAGE_RETIREMENT_CAUSE_COUNT)


def test_l40s_idles_at_pcie_gen1_and_has_no_memory_sensor(sim):
    nv = sim.start({"gpus": [{"model": L40S}, {"model": L40S, "processes": [{"pid": 5, "used_memory": 1 << 20}]},
                             {"model": L40S, "pcie": {"idle_downtrain": False}}]})
    idle, busy, pinned = dev(nv, 0), dev(nv, 1), dev(nv, 2)
    assert (nv.nvmlDeviceGetCurrPcieLinkGeneration(idle), nv.nvmlDeviceGetMaxPcieLinkGeneration(idle)) == (1, 4)
    assert nv.nvmlDeviceGetCurrentClocksEventReasons(idle) == nv.nvmlClocksEventReasonGpuIdle
    assert nv.nvmlDeviceGetCurrPcieLinkGeneration(busy) == 4
    assert nv.nvmlDeviceGetCurrentClocksEventReasons(busy) == nv.nvmlClocksEventReasonNone
    assert nv.nvmlDeviceGetCurrPcieLinkGeneration(pinned) == 4
    assert [nv.nvmlDeviceGetTemperatureThreshold(idle, t) for t in (0, 1, 3)] == [92, 89, 87]
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceGetTemperatureThreshold(idle, nv.NVML_TEMPERATURE_THRESHOLD_MEM_MAX)


def test_idle_downtrain_is_an_option_for_any_gpu(sim):
    nv = sim.start({"gpus": [{"model": H100, "pcie": {"idle_downtrain": True}}]})
    d = dev(nv)
    assert (nv.nvmlDeviceGetCurrPcieLinkGeneration(d), nv.nvmlDeviceGetMaxPcieLinkGeneration(d)) == (1, 5)
    assert nv.nvmlDeviceGetCurrPcieLinkWidth(d) == 16  # the generation drops, not the width


def test_acoustic_thresholds_and_bad_arguments(sim):
    nv = sim.start({"gpus": [{"model": H100}]})
    d = dev(nv)
    for thr in (nv.NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MIN, nv.NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_CURR,
                nv.NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MAX, nv.NVML_TEMPERATURE_THRESHOLD_GPS_CURR):
        with pytest.raises(nv.NVMLError_NotSupported):
            nv.nvmlDeviceGetTemperatureThreshold(d, thr)
    with pytest.raises(nv.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetTemperatureThreshold(d, nv.NVML_TEMPERATURE_THRESHOLD_COUNT)
    with pytest.raises(nv.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetTemperature(d, nv.NVML_TEMPERATURE_GPU_MAX)
    with pytest.raises(nv.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetTotalEccErrors(d, nv.NVML_MEMORY_ERROR_TYPE_COUNT, nv.NVML_VOLATILE_ECC)
    with pytest.raises(nv.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetTotalEccErrors(d, 0, nv.NVML_ECC_COUNTER_TYPE_COUNT)


def test_minimal_state_fills_in_the_same_health_in_every_load(sim):
    sim.start({"gpus": [{"model": A100}]})
    res = cli(sim.path, "show")
    shown = json.loads(res.stdout)
    assert shown == json.loads(cli(sim.path, "show").stdout)
    g = shown["gpus"][0]
    assert (g["present"], g["lost"], g["xid_events"], g["temperature"]) == (True, False, [], 30)
    assert g["ecc"] == {"supported": True, "mode": 1, "pending": 1, "volatile": {"corrected": 0, "uncorrected": 0},
                        "aggregate": {"corrected": 0, "uncorrected": 0}}
    assert g["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert (shown["remapped_rows_in_mig"], shown["ecc_volatile_in_mig"]) == ("instances", "supported")


@pytest.mark.parametrize("gpu, why", [
    ({"model": A100, "ecc": {"mode": "sometimes"}}, "ecc.mode"),
    ({"model": A100, "ecc": {"volatile": {"uncorrected": -1}}}, "uncorrected"),
    ({"model": A100, "clocks_event_reasons": ["Bogus"]}, "unknown reason"),
    ({"model": A100, "xid_events": [{"msg": "no number"}]}, "xid"),
])
def test_invalid_health_state_is_reported(sim, gpu, why, monkeypatch, capfd):
    nv = sim.nv
    sim.path.write_text(json.dumps({"gpus": [gpu]}))
    monkeypatch.setenv("GPUSIM_TRACE", "1")
    with pytest.raises(nv.NVMLError_Unknown):
        nv.nvmlInit()
    code, reason = refusal(capfd.readouterr().err, "nvmlInitWithFlags")
    assert code == nv.NVML_ERROR_UNKNOWN and why in reason


# ---------------------------------------------------------------- ECC
def test_ecc_disabled_or_absent(sim):
    nv = sim.start({"gpus": [{"model": L40S, "ecc": {"mode": "disabled"}},
                             {"model": A100, "ecc": {"mode": "disabled", "pending": "enabled"}},
                             {"model": A100, "ecc": {"supported": False}}]})
    off, pending, none = dev(nv, 0), dev(nv, 1), dev(nv, 2)
    assert nv.nvmlDeviceGetEccMode(off) == [0, 0]
    with pytest.raises(nv.NVMLError_NotSupported):  # "Requires ECC Mode to be enabled"
        nv.nvmlDeviceGetTotalEccErrors(off, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)
    assert (nv.nvmlDeviceGetCurrentEccMode(pending), nv.nvmlDeviceGetPendingEccMode(pending)) == (0, 1)
    for call in (nv.nvmlDeviceGetEccMode, nv.nvmlDeviceGetDefaultEccMode,
                 lambda d: nv.nvmlDeviceGetTotalEccErrors(d, 1, 1)):
        with pytest.raises(nv.NVMLError_NotSupported):
            call(none)
    assert cli(sim.path, "reset", "-i", "1").returncode == 0
    assert nv.nvmlDeviceGetEccMode(pending) == [0, 1]  # an ECC mode change needs a reboot, not a GPU reset
    assert cli(sim.path, "reboot").returncode == 0
    assert nv.nvmlDeviceGetEccMode(pending) == [1, 1]
    assert nv.nvmlDeviceGetTotalEccErrors(pending, 1, 0) == 0


def test_ecc_storm_then_reset_then_reboot(sim):
    nv = sim.start({"gpus": [{"model": H100}, {"model": H100}]})
    res = cli(sim.path, "fault", "ecc-storm", "-i", "1", "--count", "12")
    assert res.returncode == 0, res.stdout + res.stderr
    d = dev(nv, 1)
    unc, corr = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED
    assert nv.nvmlDeviceGetTotalEccErrors(d, unc, nv.NVML_VOLATILE_ECC) == 12
    assert nv.nvmlDeviceGetTotalEccErrors(d, unc, nv.NVML_AGGREGATE_ECC) == 12
    assert nv.nvmlDeviceGetTotalEccErrors(d, corr, nv.NVML_VOLATILE_ECC) == 0
    assert nv.nvmlDeviceGetTotalEccErrors(dev(nv, 0), unc, nv.NVML_VOLATILE_ECC) == 0
    assert cli(sim.path, "reset", "-i", "1").returncode == 0
    assert nv.nvmlDeviceGetTotalEccErrors(d, unc, nv.NVML_VOLATILE_ECC) == 0      # since the last driver load
    assert nv.nvmlDeviceGetTotalEccErrors(d, unc, nv.NVML_AGGREGATE_ECC) == 12    # lifetime
    cli(sim.path, "fault", "ecc-storm", "-i", "1", "--count", "3")
    assert cli(sim.path, "reboot").returncode == 0
    assert nv.nvmlDeviceGetTotalEccErrors(d, unc, nv.NVML_VOLATILE_ECC) == 0
    assert nv.nvmlDeviceGetTotalEccErrors(d, unc, nv.NVML_AGGREGATE_ECC) == 15


@pytest.mark.parametrize("option, readable", [(None, True), ("supported", True), ("not_supported", False)])
def test_volatile_ecc_on_a_mig_gpu_is_an_option(sim, option, readable):
    st = {"gpus": [{"model": A100, "mig_mode": "enabled",
                    "ecc": {"volatile": {"uncorrected": 2}, "aggregate": {"uncorrected": 2}}},
                   {"model": A100, "ecc": {"volatile": {"uncorrected": 1}}}]}
    if option:
        st["ecc_volatile_in_mig"] = option
    nv = sim.start(st)
    mig, plain = dev(nv, 0), dev(nv, 1)
    assert nv.nvmlDeviceGetTotalEccErrors(mig, 1, nv.NVML_AGGREGATE_ECC) == 2
    assert nv.nvmlDeviceGetTotalEccErrors(plain, 1, nv.NVML_VOLATILE_ECC) == 1
    if readable:
        assert nv.nvmlDeviceGetTotalEccErrors(mig, 1, nv.NVML_VOLATILE_ECC) == 2
    else:
        with pytest.raises(nv.NVMLError_NotSupported):
            nv.nvmlDeviceGetTotalEccErrors(mig, 1, nv.NVML_VOLATILE_ECC)


# ---------------------------------------------------------------- row remapping
def test_pending_remap_takes_effect_on_reset_and_failure_sticks(sim):
    nv = sim.start({"gpus": [{"model": A100}]})
    d = dev(nv)
    assert cli(sim.path, "fault", "remap-pending").returncode == 0
    assert nv.nvmlDeviceGetRemappedRows(d) == (0, 1, 1, 0)
    assert cli(sim.path, "reset", "-i", "0").returncode == 0
    assert nv.nvmlDeviceGetRemappedRows(d) == (0, 1, 0, 0)
    assert cli(sim.path, "fault", "remap-failed").returncode == 0
    assert nv.nvmlDeviceGetRemappedRows(d) == (0, 1, 0, 1)
    assert cli(sim.path, "reboot").returncode == 0
    assert nv.nvmlDeviceGetRemappedRows(d) == (0, 1, 0, 1)  # "set if a row remapping ever failed in the past"


@pytest.mark.parametrize("option, readable_without_instances", [(None, True), ("instances", True), ("enabled", False)])
def test_remapped_rows_on_a_mig_gpu(sim, option, readable_without_instances):
    st = {"gpus": [{"model": A100, "mig_mode": "enabled", "remapped_rows": {"correctable": 3}},
                   {"model": A100, "mig_mode": "enabled", "gpu_instances": [{"profile_id": 9, "start": 0}]},
                   {"model": A100, "remapped_rows": {"correctable": 3}}]}
    if option:
        st["remapped_rows_in_mig"] = option
    nv = sim.start(st)
    empty, busy, plain = dev(nv, 0), dev(nv, 1), dev(nv, 2)
    with pytest.raises(nv.NVMLError_NotSupported):  # MIG enabled with an active GPU instance: both readings agree
        nv.nvmlDeviceGetRemappedRows(busy)
    assert nv.nvmlDeviceGetRemappedRows(plain) == (3, 0, 0, 0)
    if readable_without_instances:
        assert nv.nvmlDeviceGetRemappedRows(empty) == (3, 0, 0, 0)
    else:
        with pytest.raises(nv.NVMLError_NotSupported):
            nv.nvmlDeviceGetRemappedRows(empty)
    gi = nv.nvmlDeviceCreateGpuInstance(empty, 9)
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceGetRemappedRows(empty)
    nv.nvmlGpuInstanceDestroy(gi)


# ---------------------------------------------------------------- PCIe
def test_degraded_link_and_a_slower_slot(sim):
    nv = sim.start({"gpus": [{"model": H100}, {"model": A100, "pcie": {"host_max_gen": 3}},
                             {"model": H100, "pcie": {"gen": 4}}]})
    res = cli(sim.path, "fault", "link-degraded", "-i", "0")
    assert res.returncode == 0, res.stdout
    d = dev(nv, 0)
    assert (nv.nvmlDeviceGetCurrPcieLinkWidth(d), nv.nvmlDeviceGetMaxPcieLinkWidth(d)) == (8, 16)
    assert nv.nvmlDeviceGetCurrPcieLinkGeneration(d) == 5
    slow = dev(nv, 1)  # a Gen4 GPU in a Gen3 slot: max "possible with this device and system" is 3
    assert (nv.nvmlDeviceGetCurrPcieLinkGeneration(slow), nv.nvmlDeviceGetMaxPcieLinkGeneration(slow),
            nv.nvmlDeviceGetGpuMaxPcieLinkGeneration(slow)) == (3, 3, 4)
    assert nv.nvmlDeviceGetCurrPcieLinkGeneration(dev(nv, 2)) == 4
    cli(sim.path, "fault", "link-degraded", "-i", "2", "--width", "4", "--gen", "1")
    assert (nv.nvmlDeviceGetCurrPcieLinkGeneration(dev(nv, 2)), nv.nvmlDeviceGetCurrPcieLinkWidth(dev(nv, 2))) == (1, 4)


# ---------------------------------------------------------------- temperature and clock event reasons
def test_hot_gpu_sets_the_thermal_slowdown_reasons(sim):
    nv = sim.start({"gpus": [{"model": A100, "processes": [{"pid": 7, "used_memory": 0}]}, {"model": H100}]})
    assert cli(sim.path, "fault", "hot", "-i", "0").returncode == 0
    d = dev(nv, 0)
    assert nv.nvmlDeviceGetTemperature(d, 0) == 91 > nv.nvmlDeviceGetTemperatureThreshold(d, 1)
    reasons = nv.nvmlDeviceGetCurrentClocksEventReasons(d)
    assert reasons == (nv.nvmlClocksEventReasonHwSlowdown | nv.nvmlClocksEventReasonHwThermalSlowdown
                       | nv.nvmlClocksEventReasonSwThermalSlowdown)
    assert nv.nvmlDeviceGetCurrentClocksThrottleReasons(d) & nv.nvmlClocksThrottleReasonHwThermalSlowdown
    cli(sim.path, "fault", "hot", "-i", "1", "--temp", "88")  # above Max Operating (87), below slowdown (89)
    assert nv.nvmlDeviceGetCurrentClocksEventReasons(dev(nv, 1)) == (
        nv.nvmlClocksEventReasonGpuIdle | nv.nvmlClocksEventReasonSwThermalSlowdown)
    cli(sim.path, "fault", "heal", "-i", "0")
    assert nv.nvmlDeviceGetTemperature(d, 0) == 30
    assert nv.nvmlDeviceGetCurrentClocksEventReasons(d) == 0


def test_explicit_clock_event_reasons_win(sim):
    nv = sim.start({"gpus": [{"model": H100, "clocks_event_reasons": ["SwPowerCap", "hw_power_brake_slowdown"]},
                             {"model": H100, "clocks_event_reasons": 0x8}]})
    assert nv.nvmlDeviceGetCurrentClocksEventReasons(dev(nv, 0)) == (
        nv.nvmlClocksEventReasonSwPowerCap | nv.nvmlClocksEventReasonHwPowerBrakeSlowdown)
    assert nv.nvmlDeviceGetCurrentClocksEventReasons(dev(nv, 1)) == nv.nvmlClocksEventReasonHwSlowdown


def test_a_mig_enabled_gpu_does_not_report_idle(sim):
    nv = sim.start({"gpus": [{"model": A100, "mig_mode": "enabled"}]})
    assert nv.nvmlDeviceGetCurrentClocksEventReasons(dev(nv)) & nv.nvmlClocksEventReasonGpuIdle == 0


# ---------------------------------------------------------------- missing and lost GPUs
def test_missing_gpu_is_not_enumerated(sim):
    nv = sim.start({"gpus": [{"model": A100}, {"model": A100}, {"model": H100}]})
    uuid1 = nv.nvmlDeviceGetUUID(dev(nv, 1))
    assert cli(sim.path, "fault", "missing", "-i", "1").returncode == 0
    assert nv.nvmlDeviceGetCount() == 2
    assert nv.nvmlDeviceGetName(dev(nv, 1)) == H100
    assert nv.nvmlDeviceGetIndex(nv.nvmlDeviceGetHandleByPciBusId("00000000:4B:00.0")) == 1
    with pytest.raises(nv.NVMLError_NotFound):
        nv.nvmlDeviceGetHandleByUUID(uuid1)
    with pytest.raises(nv.NVMLError_NotFound):
        nv.nvmlDeviceGetHandleByPciBusId("00000000:31:00.0")
    with pytest.raises(nv.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetHandleByIndex(2)
    assert cli(sim.path, "reboot").returncode == 0
    assert nv.nvmlDeviceGetCount() == 2  # still not there after a reboot
    out = tool(SMI, sim.path, "-L").stdout.splitlines()
    assert [line.split(" (UUID")[0] for line in out] == ["GPU 0: " + A100, "GPU 1: " + H100]


def test_lost_gpu_fails_every_call_with_gpu_is_lost(sim):
    nv = sim.start({"gpus": [{"model": A100}, {"model": H100}]})
    lost, ok = dev(nv, 0), dev(nv, 1)
    ok_uuid = nv.nvmlDeviceGetUUID(ok)
    assert cli(sim.path, "fault", "lost", "-i", "0").returncode == 0
    assert nv.nvmlDeviceGetCount() == 2  # still counted: it fell off after the driver enumerated it
    with pytest.raises(nv.NVMLError_GpuIsLost) as exc:
        nv.nvmlDeviceGetHandleByIndex(0)
    assert exc.value.value == nv.NVML_ERROR_GPU_IS_LOST == 15 and str(exc.value) == "GPU is lost"
    for call in (nv.nvmlDeviceGetName, nv.nvmlDeviceGetUUID, nv.nvmlDeviceGetPersistenceMode, nv.nvmlDeviceGetEccMode,
                 nv.nvmlDeviceGetRemappedRows, nv.nvmlDeviceGetCurrPcieLinkWidth,
                 nv.nvmlDeviceGetCurrentClocksEventReasons, lambda d: nv.nvmlDeviceGetTemperature(d, 0)):
        with pytest.raises(nv.NVMLError_GpuIsLost):
            call(lost)
    assert nv.nvmlDeviceGetName(ok) == H100
    assert nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByPciBusId("00000000:31:00.0")) == H100
    with pytest.raises(nv.NVMLError_GpuIsLost):
        nv.nvmlDeviceGetHandleByPciBusId("00000000:17:00.0")
    with pytest.raises(nv.NVMLError_GpuIsLost):  # nvml.h: "if any GPU has fallen off the bus"
        nv.nvmlDeviceGetHandleByUUID(ok_uuid)
    res = cli(sim.path, "reset", "-i", "0")
    assert res.returncode == 1 and "NVML error 15" in res.stdout
    smi = tool(SMI, sim.path)
    assert smi.returncode == 15
    assert smi.stdout.strip() == ("Unable to determine the device handle for GPU 0000:17:00.0: GPU is lost. "
                                  "Reboot the system to recover this GPU")
    assert cli(sim.path, "reboot").returncode == 0
    assert nv.nvmlDeviceGetName(dev(nv, 0)) == A100


def test_lost_gpu_options(sim):
    nv = sim.start({"gpus": [{"model": A100, "lost": True, "lost_error": "UNKNOWN"},
                             {"model": A100, "lost": True, "missing_after_reboot": True}, {"model": H100}]})
    with pytest.raises(nv.NVMLError_Unknown):
        nv.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(nv.NVMLError_GpuIsLost):
        nv.nvmlDeviceGetHandleByIndex(1)
    assert cli(sim.path, "reboot").returncode == 0
    assert nv.nvmlDeviceGetCount() == 2
    assert [nv.nvmlDeviceGetName(dev(nv, i)) for i in range(2)] == [A100, H100]


# ---------------------------------------------------------------- Xid events: the kernel log and bin/dmesg
def xid_lines(text):
    return [line for line in text.splitlines() if XID_RE.search(line)]


def test_dmesg_prints_xids_in_the_driver_format(sim):
    sim.start({"gpus": [
        {"model": A100, "xid_events": [
            {"xid": 79, "t": 1234.56789},
            {"xid": 13, "pid": 1234, "name": "python", "t": 1300, "msg": "Graphics Exception"}]},
        {"model": H100, "pci_bus_id": "00000000:CB:00.0", "mig_mode": "enabled",
         "xid_events": [{"xid": 94, "t": 1500.5, "gpu_instance_id": 1, "compute_instance_id": 0}]}]})
    res = tool(DMESG, sim.path)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert xid_lines(res.stdout) == [
        "[ 1234.567890] NVRM: Xid (PCI:0000:17:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "[ 1300.000000] NVRM: Xid (PCI:0000:17:00): 13, pid=1234, name=python, Graphics Exception",
        "[ 1500.500000] NVRM: Xid (PCI:0000:cb:00 GPU-I:01 GPU-CI:00): 94, pid='<unknown>', name=<unknown>, "
        "Contained: CE User Channel (0x9). RST: No, D-RST: No",
    ]
    assert [(m.group(1), int(m.group(2))) for m in map(XID_RE.search, xid_lines(res.stdout))] == [
        ("0000:17:00", 79), ("0000:17:00", 13), ("0000:cb:00 GPU-I:01 GPU-CI:00", 94)]
    i = lines.index(xid_lines(res.stdout)[0])
    assert lines[i - 2].startswith("[ 1234.567890] NVRM: GPU at PCI:0000:17:00: GPU-")
    assert lines[i - 1].startswith("[ 1234.567890] NVRM: GPU Board Serial Number: ")
    assert lines[i + 1] == "[ 1234.567890] NVRM: GPU 0000:17:00.0: GPU has fallen off the bus."
    assert sum("GPU Board Serial Number" in line for line in lines) == 2  # once per GPU, not per Xid
    assert lines[0].startswith("[    0.000000] Linux version ")
    assert any("NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  550.163.01" in line for line in lines)
    assert sum("NVRM:" not in line for line in lines) >= 8  # a parser has to filter


def test_driver_570_omits_an_unknown_process(sim):
    sim.start({"driver_version": "570.133.20", "gpus": [{"model": H100, "xid_events": [
        {"xid": 48, "t": 50}, {"xid": 31, "pid": 99, "name": "train.py", "msg": "MMU Fault", "t": 60}]}]})
    assert xid_lines(tool(DMESG, sim.path, "--notime").stdout) == [
        "NVRM: Xid (PCI:0000:17:00): 48, An uncorrectable double bit error (DBE) has been detected on GPU in the "
        "framebuffer.",
        "NVRM: Xid (PCI:0000:17:00): 31, pid=99, name=train.py, MMU Fault"]


def test_dmesg_options(sim):
    sim.start({"boot_time": 1767225600, "gpus": [{"model": A100, "xid_events": [{"xid": 63, "t": 3661.25}]}],
               "kernel_log": [{"t": 12.5, "msg": ("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, "
                                                  "Link 32 egress non-posted PRIV error (First)")}]})
    plain = tool(DMESG, sim.path).stdout
    assert "[   12.500000] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028" in plain
    assert tool(DMESG, sim.path, "-k").stdout == tool(DMESG, sim.path, "--kernel").stdout == plain
    notime = tool(DMESG, sim.path, "-t").stdout
    assert notime == tool(DMESG, sim.path, "--notime").stdout
    assert "NVRM: Xid (PCI:0000:17:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row marked for " \
           "remapping, reset gpu to activate.\n" in notime and "[" not in notime.splitlines()[0][:1]
    ctime = tool(DMESG, sim.path, "-kT").stdout
    assert "[Thu Jan  1 01:01:01 2026] NVRM: Xid (PCI:0000:17:00): 63," in ctime
    assert tool(DMESG, sim.path, "--time-format", "ctime").stdout == ctime
    assert len(xid_lines(plain)) == 1  # the SXid line is an NVSwitch event, not a GPU Xid
    bad = tool(DMESG, sim.path, "--bogus")
    assert bad.returncode == 1 and bad.stderr.startswith("dmesg: unrecognized option '--bogus'")
    bad = tool(DMESG, sim.path, "-kz")
    assert bad.returncode == 1 and bad.stderr.startswith("dmesg: invalid option -- 'z'")


def test_dmesg_restricted_and_without_a_driver(sim, tmp_path):
    sim.start({"kernel_log_restricted": True, "gpus": [{"model": A100, "xid_events": [{"xid": 79}]}]})
    res = tool(DMESG, sim.path)
    assert res.returncode == 1 and res.stderr == "dmesg: read kernel buffer failed: Operation not permitted\n"
    res = tool(DMESG, tmp_path / "no-such-state.json")
    assert res.returncode == 0 and "Linux version" in res.stdout and "NVRM" not in res.stdout


def test_xid_fault_and_reboot_clears_the_log(sim):
    sim.start({"gpus": [{"model": A100}, {"model": A100}], "kernel_log": ["mlx5_core 0000:b1:00.0: link down"]})
    for args in (("xid", "48", "-i", "1"), ("xid", "43", "-i", "0", "--pid", "4242", "--name", "python3"),
                 ("xid", "95", "-i", "1", "--msg", "Uncontained: FBHUB. RST: Yes, D-RST: No", "--t", "900")):
        assert cli(sim.path, "fault", *args).returncode == 0
    got = [(m.group(1), int(m.group(2))) for m in map(XID_RE.search, xid_lines(tool(DMESG, sim.path).stdout))]
    assert got == [("0000:31:00", 95), ("0000:31:00", 48), ("0000:17:00", 43)]
    before = tool(DMESG, sim.path).stdout
    assert "pid=4242, name=python3, Ch 00000010" in before
    assert cli(sim.path, "reboot").returncode == 0
    after = tool(DMESG, sim.path).stdout
    assert xid_lines(after) == [] and "Linux version" in after and "NVRM: loading" in after
    assert "mlx5_core" not in after and "mlx5_core" in before
    assert cli(sim.path, "fault", "xid", "-i", "5").returncode == 1
    assert cli(sim.path, "fault", "xid").stdout.strip() == "gpusim: xid needs a number"


# ---------------------------------------------------------------- bin/nvidia-smi
def test_nvidia_smi_health_sections_and_fields(sim):
    sim.start({"gpus": [{"model": A100, "mig_mode": "enabled", "gpu_instances": [{"profile_id": 0}],
                         "remapped_rows": {"uncorrectable": 2}},
                        {"model": L40S, "ecc": {"mode": "disabled"}},
                        {"model": H100, "remapped_rows": {"uncorrectable": 1, "pending": True}}]})
    cli(sim.path, "fault", "hot", "-i", "2")
    q = tool(SMI, sim.path, "-q").stdout
    gpus = q.split("\nGPU ")[1:]
    assert "    Remapped Rows                         : N/A" in gpus[0]
    assert "        Single Bit ECC                    : N/A" in gpus[0]
    assert "        Current                           : Disabled" in gpus[1].split("ECC Mode")[1]
    assert "            DRAM Uncorrectable            : N/A" in gpus[1]
    assert "        Memory Max Operating Temp         : N/A" in gpus[1]
    assert "        Uncorrectable Error               : 1\n        Pending                           : Yes" in gpus[2]
    assert "        GPU Current Temp                  : 91 C" in gpus[2]
    assert "            HW Thermal Slowdown           : Active" in gpus[2]
    csv = tool(SMI, sim.path, "--query-gpu=index,temperature.gpu,pcie.link.gen.current,pcie.link.gen.max,"
                              "pcie.link.width.current,ecc.mode.current,ecc.errors.uncorrected.volatile.total,"
                              "clocks_event_reasons.active", "--format=csv,noheader")
    assert csv.stdout.splitlines() == ["0, 30, 4, 4, 16, Enabled, 0, 0x0000000000000000",
                                       "1, 30, 1, 4, 16, Disabled, [N/A], 0x0000000000000001",
                                       "2, 91, 5, 5, 16, Enabled, 0, 0x0000000000000069"]


def test_a_vgpu_guest_names_its_vgpu_type_only_when_the_state_gives_one(sim):
    nv = sim.start({"gpus": [
        {"model": L40S, "virtualization_mode": "vgpu", "vgpu_name": "NVIDIA L40S-24C"},
        {"model": L40S, "virtualization_mode": "vgpu"},
        {"model": L40S, "vgpu_name": "NVIDIA L40S-24C"},  # not a vGPU guest: the board's name
    ]})
    assert [nv.nvmlDeviceGetName(dev(nv, i)) for i in range(3)] == ["NVIDIA L40S-24C", L40S, L40S]
