# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig_geometry and the GPU reset (issue 38 point 10): host GPU clients that hold an Ampere GPU (nvidia-persistenced,
DCGM's nv-hostengine, the nvidia_drm module) keep a MIG mode change pending, so the plan predicts the reset; the
GPUs to reset are named by PCI bus id, together. gpusim serves the same host clients to NVML and to /proc."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._gpu import nvml
from ansible_collections.gpuops.provision.plugins.modules import mig_geometry

from gpusim_nvml import use_gpusim  # pylint: disable=import-error

A100 = "NVIDIA A100-SXM4-40GB"
H100 = "NVIDIA H100 80GB HBM3"
TARGET = {"3g.20gb": 1, "2g.10gb": 2}
ENTRY = {"devices": "all", "mig-enabled": True, "mig-devices": TARGET}
BUSES = ["00000000:17:00.0", "00000000:31:00.0"]


@pytest.fixture(autouse=True)
def lock_path(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUOPS_MIG_LOCK", str(tmp_path / "locks" / "mig.lock"))


@pytest.mark.parametrize("clients", [["nvidia-persistenced"], ["nv-hostengine"], ["nvidia_drm"]])
def test_host_clients_make_the_plan_predict_the_reset_the_apply_meets(monkeypatch, tmp_path, run_module, clients):
    """gpu-operator#118 (persistenced), mig-parted hooks.sh (DCGM), mig-parted#181 (nvidia_drm): the mode change on an
    idle A100 stays pending (IN_USE) while they hold it. Check mode must say so, not promise the instances."""
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "disabled"}] * 2, "host_clients": clients})
    plan = run_module(mig_geometry, {"devices": [ENTRY]}, check_mode=True)
    assert [g["reset_required"] for g in plan["gpus"]] == [True, True], plan
    assert plan["gpus"][0]["after"]["mig_mode"] == {"current": "disabled", "pending": "enabled"}
    assert plan["host_clients"] == clients
    res = run_module(mig_geometry, {"devices": [ENTRY]})
    assert res["reset_required"] is True and [g["pending_reason"] for g in res["gpus"]] == ["host_clients"] * 2
    assert res["reset_bus_ids"] == BUSES
    assert "host GPU clients hold it: %s" % clients[0] in json.dumps(res["warnings"])


def test_without_host_clients_the_idle_a100_resets_itself(monkeypatch, tmp_path, run_module):
    """The other way: nothing holds the GPU, the driver resets it itself (nvml.h nvmlDeviceSetMigMode), one run."""
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "disabled"}]})
    plan = run_module(mig_geometry, {"devices": [ENTRY]}, check_mode=True)
    assert plan["gpus"][0]["reset_required"] is False and plan["host_clients"] == []
    res = run_module(mig_geometry, {"devices": [ENTRY]})
    assert res["reset_required"] is False and res["reset_bus_ids"] == []
    assert res["gpus"][0]["after"]["mig_devices"] == TARGET


def test_hopper_is_not_held_by_host_clients(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": H100, "mig_mode": "disabled"}],
                                       "host_clients": ["nvidia-persistenced"]})
    res = run_module(mig_geometry, {"devices": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]})
    assert res["reset_required"] is False and res["gpus"][0]["after"]["mig_devices"] == {"1g.10gb": 7}


def test_reset_bus_ids_name_only_the_pending_gpus(monkeypatch, tmp_path, run_module):
    """GPU 0 is a pass-through A100 (RESET_REQUIRED), GPU 1 an H100 that switches at once: only GPU 0 is reset."""
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": A100, "mig_mode": "disabled", "reset_supported": False},
                                                {"model": H100, "mig_mode": "disabled"}]})
    res = run_module(mig_geometry, {"devices": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}]})
    assert [g["pci_bus_id"] for g in res["gpus"]] == BUSES
    assert res["reset_bus_ids"] == [BUSES[0]]


def test_host_gpu_clients_reads_modules_and_truncated_comm(tmp_path):
    """/proc/<pid>/comm is cut at 15 characters ("nvidia-persiste"); a module counts when /proc/modules lists it."""
    proc = tmp_path / "proc"
    for pid, comm in ((1, "systemd"), (812, "nvidia-persiste"), (900, "nv-hostengine"), (901, "nvidia-persistenced")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "comm").write_text(comm + "\n")
    (proc / "self").mkdir()  # not a pid
    (proc / "77").mkdir()  # a process that ended: no comm
    (proc / "modules").write_text("nvidia_drm 126976 4 - Live 0x0 (POE)\nnvidia_modeset 1 1 nvidia_drm, Live 0x0\n")
    assert nvml.host_gpu_clients(str(proc)) == ["nv-hostengine", "nvidia-persistenced", "nvidia_drm"]
    (proc / "modules").write_text("nvidia_drmx 1 0 - Live 0x0\n\n")
    for pid in (812, 900):
        (proc / str(pid) / "comm").write_text("bash\n")
    assert nvml.host_gpu_clients(str(proc)) == []
    assert nvml.host_gpu_clients(str(tmp_path / "none")) == []


def test_host_gpu_clients_defaults_to_proc_root(monkeypatch, tmp_path):
    (tmp_path / "modules").write_text("nvidia_drm 1 0 - Live 0x0\n")
    monkeypatch.setattr(nvml, "PROC_ROOT", str(tmp_path))
    assert nvml.host_gpu_clients() == ["nvidia_drm"]
