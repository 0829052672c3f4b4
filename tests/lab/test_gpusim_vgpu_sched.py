"""gpusim's vGPU scheduler queries (nvmlDeviceGetVgpuSchedulerState / ...Capabilities) and the module load that reads
RmPVMRL from the modprobe configuration (lab/gpusim/gpusim/vgpu_sched.py, sources cited there)."""

from __future__ import annotations

import pytest

from gpusim_loader import load_gpusim  # pylint: disable=import-error  # on sys.path via conftest.py

L40S = "NVIDIA L40S"
HOST = {"model": L40S, "virtualization_mode": "host_vgpu"}


def control():
    load_gpusim()
    from gpusim import control as ctl  # pylint: disable=import-error,import-outside-toplevel
    return ctl


def conf(root, name, text, where="etc/modprobe.d"):
    d = root / where
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(text)


def state_of(nv, index=0):
    s = nv.nvmlDeviceGetVgpuSchedulerState(nv.nvmlDeviceGetHandleByIndex(index))
    if s.arrMode == nv.NVML_VGPU_SCHEDULER_ARR_DISABLE:
        return s.schedulerPolicy, s.arrMode, s.schedulerParams.vgpuSchedData.timeslice, None
    return (s.schedulerPolicy, s.arrMode, s.schedulerParams.vgpuSchedDataWithARR.timeslice,
            s.schedulerParams.vgpuSchedDataWithARR.avgFactor)


def test_not_a_vgpu_host_is_not_supported(sim):
    nv = sim.start({"gpus": [{"model": L40S}, {"model": L40S, "virtualization_mode": "passthrough"}]})
    for i in range(2):
        dev = nv.nvmlDeviceGetHandleByIndex(i)
        with pytest.raises(nv.NVMLError_NotSupported):
            nv.nvmlDeviceGetVgpuSchedulerState(dev)
        with pytest.raises(nv.NVMLError_NotSupported):
            nv.nvmlDeviceGetVgpuSchedulerCapabilities(dev)


def test_default_is_best_effort_and_capabilities(sim):
    nv = sim.start({"gpus": [HOST]})
    assert state_of(nv) == (nv.NVML_VGPU_SCHEDULER_POLICY_BEST_EFFORT, nv.NVML_VGPU_SCHEDULER_ARR_DEFAULT, 0, 0)
    caps = nv.nvmlDeviceGetVgpuSchedulerCapabilities(nv.nvmlDeviceGetHandleByIndex(0))
    assert list(caps.supportedSchedulers) == [1, 2, 3]
    assert (caps.minTimeslice, caps.maxTimeslice, caps.isArrModeSupported) == (1000000, 30000000, 1)
    assert (caps.minFrequencyForARR, caps.maxFrequencyForARR, caps.minAvgFactorForARR, caps.maxAvgFactorForARR) == (63, 960, 1, 60)


def test_capabilities_options(sim):
    nv = sim.start({"driver_version": "470.256.02", "scheduler_timeslice_unit": "ms",
                    "gpus": [dict(HOST, vgpu_scheduler_policies=["best_effort", "equal_share"])]})
    caps = nv.nvmlDeviceGetVgpuSchedulerCapabilities(nv.nvmlDeviceGetHandleByIndex(0))
    assert list(caps.supportedSchedulers) == [1, 2, 0]
    assert (caps.minTimeslice, caps.maxTimeslice, caps.isArrModeSupported) == (1, 30, 0)


def test_the_file_counts_only_after_a_module_reload_or_reboot(sim, tmp_path):
    root = tmp_path / "root"
    nv = sim.start({"modprobe_root": str(root), "gpus": [dict(HOST, vgpus_running=2)]})
    conf(root, "gpuops-vgpu-scheduler.conf", 'options nvidia NVreg_RegistryDwords="RmPVMRL=0x11"\n')
    assert state_of(nv)[0] == nv.NVML_VGPU_SCHEDULER_POLICY_BEST_EFFORT        # written, not loaded
    ctl = control()
    with pytest.raises(Exception, match="Module nvidia is in use"):             # running vGPUs hold the module
        ctl.module_reload(str(sim.path))
    assert state_of(nv)[0] == nv.NVML_VGPU_SCHEDULER_POLICY_BEST_EFFORT
    ctl.reboot(str(sim.path))                                                  # the VMs go down with the host
    assert state_of(nv)[:2] == (nv.NVML_VGPU_SCHEDULER_POLICY_FIXED_SHARE, nv.NVML_VGPU_SCHEDULER_ARR_ENABLE)
    conf(root, "gpuops-vgpu-scheduler.conf", 'options nvidia NVreg_RegistryDwords="RmPVMRL=0x01"\n')
    ctl.module_reload(str(sim.path))
    assert state_of(nv)[0] == nv.NVML_VGPU_SCHEDULER_POLICY_EQUAL_SHARE
    assert sim.state()["counters"]["module_reload"] == 2


def test_reload_refused_while_a_process_holds_a_gpu(sim, tmp_path):
    sim.start({"modprobe_root": str(tmp_path), "gpus": [dict(HOST, processes=[{"pid": 7, "used_memory": 1}])]})
    with pytest.raises(Exception, match="in use"):
        control().module_reload(str(sim.path))


def test_without_modprobe_root_a_load_keeps_what_is_loaded(sim):
    nv = sim.start({"gpus": [dict(HOST, rmpvmrl_loaded=0x11)]})
    control().module_reload(str(sim.path))
    assert state_of(nv)[0] == nv.NVML_VGPU_SCHEDULER_POLICY_FIXED_SHARE


@pytest.mark.parametrize("files,policy", [
    # later files (lexical order) add options; the kernel keeps the last NVreg_RegistryDwords
    ([("a.conf", 'options nvidia NVreg_RegistryDwords="RmPVMRL=0x11"'), ("b.conf", 'options nvidia NVreg_RegistryDwords="X=1"')], 1),
    ([("b.conf", 'options nvidia NVreg_RegistryDwords="RmPVMRL=0x11"'), ("a.conf", 'options nvidia NVreg_RegistryDwords="X=1"')], 3),
    # names compare case-insensitively, the last entry wins, whitespace is dropped
    ([("a.conf", 'options nvidia NVreg_RegistryDwords="RmPVMRL=0x01; rmpvmrl = 0x11"')], 3),
    ([("a.conf", "options nvidia NVreg_RegistryDwords=RmPVMRL=17")], 3),                     # decimal
    ([("a.conf", "options nvidia NVreg_RegistryDwords=RmPVMRL=021")], 3),                    # octal
    ([("a.conf", "# options nvidia NVreg_RegistryDwords=RmPVMRL=0x11")], 1),                 # a comment
    ([("a.conf", "options nvidia-vgpu-vfio NVreg_RegistryDwords=RmPVMRL=0x11")], 1),         # another module
    ([("a.conf", "options nvidia \\\n  NVreg_RegistryDwords=RmPVMRL=0x11")], 3),             # continuation
    ([("a.conf", "options nvidia NVreg_RegistryDwords=RmPVMRL=0x11=1")], 1),                 # two '=': skipped
    ([("a.conf", "options nvidia NVreg_RegistryDwords=RmPVMRL=0x11"), ("a.txt", "options nvidia NVreg_RegistryDwords=RmPVMRL=0")], 3),
])
def test_modprobe_configuration_is_read_like_modprobe_and_the_driver(sim, tmp_path, files, policy):
    for name, text in files:
        conf(tmp_path, name, text + "\n")
    nv = sim.start({"modprobe_root": str(tmp_path), "gpus": [HOST]})
    control().module_reload(str(sim.path))
    assert state_of(nv)[0] == policy


def test_etc_hides_the_same_name_in_lib(sim, tmp_path):
    conf(tmp_path, "nvidia.conf", "options nvidia NVreg_RegistryDwords=RmPVMRL=0x01\n", "lib/modprobe.d")
    conf(tmp_path, "nvidia.conf", "options nvidia NVreg_RegistryDwords=RmPVMRL=0x11\n")
    conf(tmp_path, "other.conf", "options nvidia NVreg_EnableMSI=1\n", "usr/lib/modprobe.d")
    nv = sim.start({"modprobe_root": str(tmp_path), "gpus": [HOST]})
    control().module_reload(str(sim.path))
    assert state_of(nv)[0] == nv.NVML_VGPU_SCHEDULER_POLICY_FIXED_SHARE


def test_per_device_key_beats_the_global_one(sim, tmp_path):
    conf(tmp_path, "n.conf", 'options nvidia NVreg_RegistryDwords="RmPVMRL=0x11" '
                             'NVreg_RegistryDwordsPerDevice="pci=0000:31:00.0;RmPVMRL=0x01"\n')
    nv = sim.start({"modprobe_root": str(tmp_path), "gpus": [HOST, HOST]})
    control().module_reload(str(sim.path))
    assert (state_of(nv, 0)[0], state_of(nv, 1)[0]) == (3, 2)


@pytest.mark.parametrize("value,extra,gpu,expect", [
    # ARR (bit 1 clear): frequency -> slice in ns, averaging factor; defaults by density
    (0x11, {}, {}, (3, 2, 2083333, 33)),
    (0x11, {}, {"max_vgpus_per_gpu": 16}, (3, 2, 1041667, 33)),
    (0x3C3C0011, {}, {}, (3, 2, 1041667, 60)),
    (0x00001011, {}, {}, (3, 2, 15873016, 33)),           # FFF 1 raised to 63 Hz
    (0xFF3FF001, {}, {}, (2, 2, 1041667, 60)),             # FFF capped at 960, AA capped at 60
    # legacy (bit 1 set): the time slice in ms
    (0x00030003, {}, {}, (2, 1, 3000000, None)),
    (0x00180013, {}, {}, (3, 1, 24000000, None)),
    (0x001F0013, {}, {}, (3, 1, 30000000, None)),          # TT capped at 30
    (0x13, {}, {}, (3, 1, 2000000, None)),
    (0x13, {}, {"max_vgpus_per_gpu": 32}, (3, 1, 1000000, None)),
    # units
    (0x00030003, {"scheduler_timeslice_unit": "us"}, {}, (2, 1, 3000, None)),
    (0x00030003, {"scheduler_timeslice_unit": "ms"}, {}, (2, 1, 3, None)),
    (0x11, {"scheduler_timeslice_unit": "us"}, {}, (3, 2, 2083, 33)),
    # idle GPU: "0 when there is no active scheduling" (default) or the configured values
    (0x00030003, {"scheduler_params_idle": "zero"}, {"vgpus_running": 0}, (2, 1, 0, None)),
    (0x00030003, {"scheduler_params_idle": "configured"}, {"vgpus_running": 0}, (2, 1, 3000000, None)),
    (0x11, {}, {"vgpus_running": 0}, (3, 2, 0, 0)),
    # equal share with a time slice: honoured (user guide example) or not, by option
    (0x00030003, {"scheduler_equal_share_timeslice": False}, {}, (2, 1, 2000000, None)),
    (0x00030013, {"scheduler_equal_share_timeslice": False}, {}, (3, 1, 3000000, None)),
    # no ARR on the branch: everything runs the legacy scheduler
    (0x11, {"driver_version": "470.256.02"}, {}, (3, 1, 2000000, None)),
    (0x11, {"scheduler_arr_supported": False}, {}, (3, 1, 2000000, None)),
    # the guide's 0x00180011: the header reads ARR at 384 Hz, the guide 24 ms without ARR
    (0x00180011, {"rmpvmrl_tt_without_arr_bit": "frequency"}, {}, (3, 2, 2604167, 33)),
    (0x00180011, {"rmpvmrl_tt_without_arr_bit": "timeslice"}, {}, (3, 1, 24000000, None)),
    # what the collection writes for 24 ms (bit 1 set) runs the same under both readings
    (0x00180013, {"rmpvmrl_tt_without_arr_bit": "timeslice"}, {}, (3, 1, 24000000, None)),
    (0x10, {}, {}, (1, 0, 0, 0)),                          # bit 0 clear: best effort whatever the rest says
])
def test_running_scheduler(sim, value, extra, gpu, expect):
    st = dict({"gpus": [dict(HOST, rmpvmrl_loaded=value, **dict({"vgpus_running": 2}, **gpu))]}, **extra)
    nv = sim.start(st)
    assert state_of(nv) == expect


def test_bad_unit_is_an_nvml_unknown_error(sim):
    nv = sim.start({"scheduler_timeslice_unit": "s", "gpus": [HOST]})
    with pytest.raises(nv.NVMLError_Unknown):
        nv.nvmlDeviceGetVgpuSchedulerState(nv.nvmlDeviceGetHandleByIndex(0))
    with pytest.raises(nv.NVMLError_Unknown):
        nv.nvmlDeviceGetVgpuSchedulerCapabilities(nv.nvmlDeviceGetHandleByIndex(0))


def test_bad_policy_list_is_an_nvml_unknown_error(sim):
    nv = sim.start({"gpus": [dict(HOST, vgpu_scheduler_policies=["fair"])]})
    with pytest.raises(nv.NVMLError_Unknown):
        nv.nvmlDeviceGetVgpuSchedulerCapabilities(nv.nvmlDeviceGetHandleByIndex(0))


def test_cli_module_reload(sim, tmp_path, capsys):
    conf(tmp_path, "n.conf", "options nvidia NVreg_RegistryDwords=RmPVMRL=0x11\n")
    nv = sim.start({"modprobe_root": str(tmp_path), "gpus": [HOST]})
    assert control().main(["--state", str(sim.path), "module-reload"]) == 0
    assert state_of(nv)[0] == 3
    st = sim.state()
    st["gpus"][0]["vgpus_running"] = 1
    sim.path.write_text(__import__("json").dumps(st))
    assert control().main(["--state", str(sim.path), "module-reload"]) == 1
    assert "Module nvidia is in use" in capsys.readouterr().out
