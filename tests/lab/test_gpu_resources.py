"""What the device-plugin stand-in advertises per MIG strategy (lab/kube/gpu_resources.py), each rule against
NVIDIA/k8s-device-plugin's internal/rm/rm.go."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "lab", "kube")))

import gpu_resources as R  # noqa: E402  pylint: disable=wrong-import-position


A100 = "NVIDIA A100-SXM4-40GB"


def test_device_plugin_mixed_with_named_entries_and_defensive_modes():
    state = {"gpus": [
        {"model": A100, "mig_mode": "enabled", "gpu_instances": [
            {"profile": "MIG 1g.5gb"}, {"profile": "1g.5gb"}, {"profile": "3g.20gb", "compute_instances": [{"profile": "3g.20gb"}]},
        ]},
        {"model": A100, "mig_mode": {"current": "disabled", "pending": "enabled"}},
        {"model": A100, "mig_mode": 1, "gpu_instances": [{"profile": "2g.10gb", "compute_instances": []}]},
        "garbage",
    ]}
    res, err = R.device_plugin_resources(state, "mixed")
    assert err is None
    # Empty GI (no compute instance) is no device; pending-enable still counts as a full GPU.
    assert res == {"nvidia.com/mig-1g.5gb": 2, "nvidia.com/mig-3g.20gb": 1, "nvidia.com/gpu": 1}
    assert R.device_plugin_resources({}, "mixed") == ({}, None)
    assert R.device_plugin_resources({"gpus": "x"}, "mixed") == ({}, None)
    assert R.device_plugin_resources({"driver_loaded": False, "gpus": state["gpus"]}, "mixed") == ({}, "NVML is not available on the node")


def test_mixed_fails_the_whole_device_map_on_a_compute_instance_profile():
    """internal/rm/rm.go AddDefaultResourcesToConfig registers no resource for C != G profiles under mixed, and
    internal/rm/device_map.go buildMigDeviceMap fails on a MIG device no resource matches: nothing is served."""
    state = {"gpus": [{"model": A100, "mig_mode": 1, "gpu_instances": [
        {"profile": "1g.5gb"}, {"profile": "3g.20gb", "compute_instances": [{"profile": "1c.3g.20gb"}]}]}]}
    assert R.device_plugin_resources(state, "mixed") == (
        {}, "error building MIG device map: MIG profile '1c.3g.20gb' does not match any resource patterns")
    # single: AddMIGResource("*", "gpu") matches every profile, the compute-instance ones too.
    uniform = {"gpus": [{"model": A100, "mig_mode": 1, "gpu_instances": [
        {"profile": "3g.20gb", "compute_instances": [{"profile": "1c.3g.20gb"}] * 3}]}]}
    assert R.device_plugin_resources(uniform, "single") == ({"nvidia.com/gpu": 3}, None)


def test_device_plugin_single_and_none():
    homogeneous = {"gpus": [{"mig_mode": 1, "gpu_instances": [{"profile": "1g.10gb"}] * 7}] * 2}
    assert R.device_plugin_resources(homogeneous, "single") == ({"nvidia.com/gpu": 14}, None)
    assert R.device_plugin_resources(homogeneous, "none") == ({"nvidia.com/gpu": 2}, None)
    mixed = {"gpus": [{"mig_mode": 1, "gpu_instances": [{"profile": "1g.10gb"}, {"profile": "2g.20gb"}]}]}
    assert R.device_plugin_resources(mixed, "single") == ({"nvidia.com/gpu": 0}, "more than one MIG device type present on node")
    with pytest.raises(ValueError):
        R.device_plugin_resources(mixed, "bogus")


def test_device_plugin_names_gpusim_id_only_state():
    namer = R.gpusim_namer()
    if namer is None:
        pytest.skip("lab/gpusim model table not present")
    state = {"gpus": [{"model": A100, "mig_mode": 1, "gpu_instances": [
        {"profile_id": 19, "compute_instances": [{"slices": 1}]},
        {"profile_id": 14, "compute_instances": [{"profile_id": 0}, {"profile_id": 0}]},
        {"profile_id": 9, "compute_instances": [{"slices": 3}]},
    ]}]}
    # The 1c.2g.10gb CIs fail the mixed device map (see above); under single the three profiles differ.
    assert R.device_plugin_resources(state, "mixed", namer) == (
        {}, "error building MIG device map: MIG profile '1c.2g.10gb' does not match any resource patterns")
    state["gpus"][0]["gpu_instances"][1]["compute_instances"] = [{"profile_id": 1}]
    assert R.device_plugin_resources(state, "mixed", namer)[0] == {
        "nvidia.com/mig-1g.5gb": 1, "nvidia.com/mig-2g.10gb": 1, "nvidia.com/mig-3g.20gb": 1}
