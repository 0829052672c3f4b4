# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The MIG roll's plan as plan.yml builds it, from what each node's plan really holds: mig_geometry's check-mode
result (run in-process against gpusim, two nodes of eight GPUs), through the filters mig_node_facts, mig_node_plan,
mig_roll_waves and mig_plan_report. The plan is a line per node and a line per GPU that changes, not the full
per-GPU diff."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.plugin_utils._role_filters import mig as role_mig
from ansible_collections.gpuops.provision.plugins.modules import mig_geometry

from gpusim_nvml import use_gpusim  # pylint: disable=import-error

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"
CONFIG = {"version": "v1", "mig-configs": {
    "all-3g.40gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}],
    "all-3g.20gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.20gb": 2}}]}}


@pytest.fixture(autouse=True)
def lock_path(monkeypatch, tmp_path):
    monkeypatch.setenv("GPUOPS_MIG_LOCK", str(tmp_path / "locks" / "mig.lock"))


def node(name, selected):
    return {"metadata": {"name": name, "labels": {"nvidia.com/mig.config": selected}},
            "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {}}}


def check(monkeypatch, tmp_path, run_module, gpus, selected):
    """mig_geometry's check-mode result on a host with ``gpus``, as plan.yml registers it (no --diff)."""
    folder = tmp_path / selected
    folder.mkdir()
    use_gpusim(monkeypatch, folder, {"gpus": gpus})
    res = run_module(mig_geometry, {"config": CONFIG, "selected": selected, "force": True}, check_mode=True)
    assert res["changed"] is True and "diff" not in res, res
    return res


@pytest.fixture(name="plans")
def fixture_plans(monkeypatch, tmp_path, run_module):
    sevens = [{"profile_id": 19, "start": s, "compute_instances": [{}]} for s in range(7)]
    # gpu-a: eight H100 with seven 1g.10gb each, to 3g.40gb x2 (Hopper changes no MIG mode here: no reset);
    # gpu-b: eight A100 with MIG off in a pass-through VM, to 3g.20gb x2: the mode change waits for a reset.
    checks = {"gpu-a": check(monkeypatch, tmp_path, run_module,
                             [{"model": H100, "mig_mode": "enabled", "gpu_instances": sevens}] * 8, "all-3g.40gb"),
              "gpu-b": check(monkeypatch, tmp_path, run_module,
                             [{"model": A100, "mig_mode": "disabled", "reset_supported": False}] * 8, "all-3g.20gb")}
    nodes = {"resources": [node("gpu-a", "all-3g.40gb"), node("gpu-b", "all-3g.20gb")]}
    return [role_mig.mig_node_plan(role_mig.mig_node_facts(nodes, name), checks[name]) for name in ("gpu-a", "gpu-b")]


def report(plans, **kw):
    roll = role_mig.mig_roll_waves(plans, max_parallel=1)
    return role_mig.mig_plan_report(plans, roll, "gpuops.io/mig-reconfigure=skip", **kw)


def test_two_nodes_of_eight_gpus_give_a_line_per_gpu_under_their_node_lines(plans):
    out = report(plans)
    # The 2 x 8 plan was a 1,375-line diff; here: one line per node, one header, one line per GPU.
    assert len(out["lines"]) == 2 + 1 + 16
    assert out["lines"][:3] == [
        "gpu-a: reconfigure to all-3g.40gb, 1 of 2 in roll order",
        "gpu-b: reconfigure to all-3g.20gb (MIG mode change, needs a GPU reset), 2 of 2 in roll order",
        "GPUs that change (node GPU: before → after, reset or reboot, drain):"]
    assert out["lines"][3:11] == ["  gpu-a GPU %d: 1g.10gb x7 → 3g.40gb x2, no reset, node drained" % i for i in range(8)]
    # Check mode's 'after' of a GPU waiting for the reset still has MIG off: the layout is the one planned after it.
    assert out["lines"][11:] == ["  gpu-b GPU %d: MIG off → 3g.20gb x2, GPU reset, node drained" % i for i in range(8)]


def test_the_published_records_say_the_same_per_gpu(plans):
    gpus = report(plans)["gpus"]
    assert len(gpus) == 16
    assert gpus[0] == {"node": "gpu-a", "gpu": 0, "model": H100, "before": "1g.10gb x7", "after": "3g.40gb x2",
                       "needs": "none", "drain": True}
    assert gpus[15] == {"node": "gpu-b", "gpu": 7, "model": A100, "before": "MIG off", "after": "3g.20gb x2",
                        "needs": "reset", "drain": True}
    # With the GPU reset off and the reboot allowed, the role reboots the node instead (tasks/reset.yml).
    assert {g["needs"] for g in report(plans, gpu_reset=False, reboot=True)["gpus"][8:]} == {"reboot"}
    assert {g["needs"] for g in report(plans, gpu_reset="yes", reboot="no")["gpus"][8:]} == {"reset"}
