# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""`ansible localhost -m gpuops.provision.mig_geometry / gpu_info` against gpusim, one process per run."""

from __future__ import annotations

import os

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
    # The binding it imported is reported even without a driver (issue 37 point 4): nvidia-ml-py from site-packages
    # (over gpusim's libnvidia-ml.so.1, whose nvmlInit answers DRIVER_NOT_LOADED as a real library without its module).
    binding = info["nvml"].pop("binding")
    assert binding["module"].endswith(os.path.join("site-packages", "pynvml.py")) and binding["python"], binding
    assert info["nvml"] == {"available": False, "reason": "the NVIDIA kernel driver is not loaded", "calls": 1}
    res = host.run("mig_geometry", apply_args(TARGET))
    assert res["failed"] is True and "NVML is not available: the NVIDIA kernel driver is not loaded" in res["msg"]


def test_drivers_without_the_v3_process_symbol_plan_and_apply(host):
    """Before 510.39.01 and in 535.98 the driver exports no nvmlDevice*RunningProcesses_v3, and nvidia-ml-py's
    unversioned process lists raise NVMLLibraryMismatchError (lab/gpusim/gpusim/symbols.py): the modules fall back
    to _v2 instead of ending in a traceback."""
    for driver, model, target in (("505.86.01", A100, TARGET),
                                  ("535.98", "NVIDIA H100 80GB HBM3", {"3g.40gb": 1, "2g.20gb": 2})):
        host.write({"driver_version": driver, "gpus": [{"model": model, "mig_mode": "enabled"}]})
        plan = host.run("mig_geometry", apply_args(target), check=True)
        assert plan["changed"] is True and not plan.get("failed"), (driver, plan.get("msg"), plan.get("exception"))
        applied = host.run("mig_geometry", apply_args(target))
        assert applied["changed"] is True and not applied.get("failed"), (driver, applied.get("msg"))
        assert applied["gpus"][0]["after"]["mig_devices"] == target
        info = host.run("gpu_info")
        assert not info.get("failed") and info["gpus"][0]["processes"] == [] and info["gpus"][0]["mig_devices"] == target


def test_an_a30_on_r535_with_mig_off_applies_four_1g_instances(host):
    """R535 lists no GPU instance profiles while MIG is off, so the plan uses the documented A30 table; after the
    mode change NVML's own table is read, whose instance counts are wrong on the A30 (mig-parted discovery.go
    getHardcodedA30Profiles; gpusim answers an assumed wrong set, models.py). The documented counts decide, so the
    driver's table is not taken for a disagreement. With gpusim answering the documented counts, the same."""
    for counts in ("nvml", "documented"):
        host.write({"driver_version": "535.230.02", "a30_nvml_counts": counts,
                    "gpus": [{"model": "NVIDIA A30", "mig_mode": "disabled"}]})
        res = host.run("mig_geometry", apply_args({"1g.6gb": 4}))
        assert res["changed"] is True and not res.get("failed"), (counts, res.get("msg"))
        assert res["gpus"][0]["profile_table"] == "documented"
        assert res["gpus"][0]["after"]["mig_devices"] == {"1g.6gb": 4}
        info = host.run("gpu_info", {"profiles": True})
        assert {p["name"]: p["max_count"] for p in info["gpus"][0]["profiles"]} == {
            "1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1}


def test_an_h20_and_a_b200_on_their_minimum_drivers_with_mig_off_plan_and_apply(host):
    """The H20 on R525 (the Hopper row of the MIG User Guide; R525 lists no profiles while MIG is off, so the plan
    uses the documented table, _mig/models.py, and the driver's is checked against it after the mode change) and the
    B200 on 570.133.20 (documented minimum; the driver lists its profiles with MIG off)."""
    for driver, model, target, table in (
            ("525.85.12", "NVIDIA H20", {"3g.48gb": 1, "2g.24gb": 1, "1g.12gb": 2}, "documented"),
            ("570.133.20", "NVIDIA B200", {"3g.90gb": 1, "2g.45gb": 1, "1g.23gb": 2}, "nvml")):
        host.write({"driver_version": driver, "gpus": [{"model": model, "mig_mode": "disabled"}]})
        plan = host.run("mig_geometry", apply_args(target), check=True)
        assert plan["changed"] is True and not plan.get("failed"), (model, plan.get("msg"))
        assert plan["gpus"][0]["profile_table"] == table
        applied = host.run("mig_geometry", apply_args(target))
        assert applied["changed"] is True and not applied.get("failed"), (model, applied.get("msg"))
        assert applied["gpus"][0]["after"]["mig_devices"] == target
        assert host.run("mig_geometry", apply_args(target))["changed"] is False
        older = host.write({"driver_version": "520.61.05" if model == "NVIDIA H20" else "565.57.01",
                            "gpus": [{"model": model, "mig_mode": "disabled"}]})
        del older
        refused = host.run("mig_geometry", apply_args(target))
        assert refused["failed"] and "the minimum NVIDIA documents for MIG on" in refused["msg"], refused.get("msg")
