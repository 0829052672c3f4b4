# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""`ansible localhost -m gpuops.provision.mig_geometry / gpu_info` against gpusim, one process per run."""

from __future__ import annotations

A100 = "NVIDIA A100-SXM4-40GB"
TARGET = {"3g.20gb": 1, "2g.10gb": 2}


def apply_args(mig_devices, devices="all", **extra):
    args = {"devices": [{"devices": devices, "mig-enabled": True, "mig-devices": mig_devices}]}
    args.update(extra)
    return args


def layout(gpu):
    return sorted((gi["profile"], gi["placement"]["start"], gi["placement"]["size"], tuple(gi["compute_instances"] and
                   [c["profile"] for c in gi["compute_instances"]])) for gi in gpu["instances"])


def test_acceptance_check_apply_idempotent_and_gpu_info(host):
    host.write({"gpus": [{"model": A100, "mig_mode": "enabled"}, {"model": "NVIDIA L40S"}]})
    before = host.raw()
    plan = host.run("mig_geometry", apply_args(TARGET), check=True, diff=True)
    assert plan["changed"] is True and not plan.get("failed")
    assert plan["gpus"][0]["after"]["mig_devices"] == TARGET
    assert host.raw() == before, "check mode changed the simulated GPU"

    applied = host.run("mig_geometry", apply_args(TARGET))
    assert applied["changed"] is True and not applied.get("failed"), applied.get("msg")
    assert applied["gpus"][1]["skipped"] == "GPU does not support MIG"

    again = host.run("mig_geometry", apply_args(TARGET))
    assert again["changed"] is False

    info = host.run("gpu_info")
    assert info["nvml"]["available"] is True
    a100 = info["gpus"][0]
    assert a100["mig_devices"] == TARGET
    assert layout(a100) == [("2g.10gb", 0, 2, ("2g.10gb",)), ("2g.10gb", 2, 2, ("2g.10gb",)), ("3g.20gb", 4, 4, ("3g.20gb",))]
    assert info["gpus"][1]["mig_capable"] is False


def test_impossible_layout_fails_and_state_is_byte_identical(host):
    host.write({"gpus": [{"model": A100, "mig_mode": "enabled",
                          "gpu_instances": [{"profile_id": 0, "start": 0, "compute_instances": [{}]}]}]})
    before = host.raw()
    res = host.run("mig_geometry", apply_args({"3g.20gb": 2, "1g.5gb": 1}))
    assert res["failed"] is True and res["changed"] is False
    assert "GPU 0 (NVIDIA A100-SXM4-40GB): cannot apply {1g.5gb: 1, 3g.20gb: 2}" in res["msg"]
    assert "9 memory slices but the GPU has 8" in res["msg"]
    assert host.raw() == before


def test_mig_parted_document_with_selected_config(host):
    host.write({"gpus": [{"model": "NVIDIA H100 80GB HBM3", "mig_mode": "disabled"}]})
    config = {"version": "v1", "mig-configs": {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-balanced": [{"devices": "all", "device-filter": ["0x233010DE", "0x233110DE"], "mig-enabled": True,
                          "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}],
    }}
    res = host.run("mig_geometry", {"config": config, "selected": "all-balanced"})
    assert res["changed"] is True and res["reset_required"] is False, res.get("msg")
    assert res["gpus"][0]["after"]["mig_devices"] == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    off = host.run("mig_geometry", {"config": config, "selected": "all-disabled"})
    assert off["changed"] is True
    assert host.state()["gpus"][0]["mig_mode"] == 0


def test_processes_without_force_fail_naming_pids(host):
    host.write({"gpus": [{"model": A100, "mig_mode": "enabled",
                          "gpu_instances": [{"profile_id": 0, "start": 0, "id": 0, "compute_instances": [{}]}],
                          "processes": [{"pid": 4242, "gpu_instance_id": 0, "compute_instance_id": 0}]}]})
    before = host.raw()
    res = host.run("mig_geometry", apply_args(TARGET))
    assert res["failed"] is True and res["changed"] is False
    assert "GPU 0 (NVIDIA A100-SXM4-40GB) has running processes (PID 4242)" in res["msg"]
    assert "force=true" in res["msg"]
    assert host.raw() == before


def test_mid_apply_gi_failure_restores_previous_geometry(host):
    previous = [{"profile_id": 19, "start": s, "compute_instances": [{}]} for s in range(7)]
    host.write({"gpus": [{"model": A100, "mig_mode": "enabled", "gpu_instances": previous}],
                "faults": {"fail_gi_create_after": 2, "fail_gi_create_times": 1}})
    res = host.run("mig_geometry", apply_args(TARGET))
    assert res["failed"] is True
    assert "creating GPU instance" in res["msg"] and "previous geometry was restored" in res["msg"]
    info = host.run("gpu_info", {"profiles": False})
    assert info["gpus"][0]["mig_devices"] == {"1g.5gb": 7}
    assert sorted(gi["placement"]["start"] for gi in info["gpus"][0]["instances"]) == list(range(7))


def test_reset_required_on_ampere(host):
    # A pass-through VM: the driver cannot reset the GPU itself (mig.md P2), so the mode change stays pending.
    host.write({"gpus": [{"model": A100, "mig_mode": "disabled", "reset_supported": False}]})
    res = host.run("mig_geometry", apply_args(TARGET))
    assert res["changed"] is True and res["reset_required"] is True
    assert res["gpus"][0]["pending_reason"] == "reset_required"
    assert res["gpus"][0]["after"]["mig_mode"] == {"current": "disabled", "pending": "enabled"}
    assert "GPU reset" in " ".join(str(w) for w in res.get("warnings", []))
    info = host.run("gpu_info", {"profiles": False})
    assert info["gpus"][0]["mig_mode"] == {"current": "disabled", "pending": "enabled"}
    assert info["gpus"][0]["instances"] == []


def test_gpu_info_without_driver(host):
    host.write({"gpus": [{"model": A100}], "driver_loaded": False})
    info = host.run("gpu_info")
    assert info.get("failed") is not True
    assert info["nvml"] == {"available": False, "reason": "the NVIDIA kernel driver is not loaded", "calls": 1}
    res = host.run("mig_geometry", apply_args(TARGET))
    assert res["failed"] is True and "NVML is not available: the NVIDIA kernel driver is not loaded" in res["msg"]
