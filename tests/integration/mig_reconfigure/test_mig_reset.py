# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role's GPU reset (issue 38 point 10), end to end over gpusim and the Kubernetes stand-in: every GPU whose MIG
mode change is pending is reset together, by PCI bus id, in one `nvidia-smi -r -i` (NVIDIA/mig-parted
cmd/nvidia-mig-parted/util/device.go nvmlResetAllGPUs), in the apply and in the rollback, each time with the same
steps around it (roles/mig_reconfigure/tasks/reset_gpus.yml: the kubelet stopped, the fabric manager settled)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mig_reconfigure_lab import A100, Fleet, failures, gpu  # noqa: E402  pylint: disable=import-error,wrong-import-position

pytestmark = pytest.mark.slow

BUSES = ["00000000:17:00.0", "00000000:31:00.0"]


def task_results(out, host, name):
    """The results on ``host`` of the role's tasks called ``name`` (the callback prefixes the role's name)."""
    return [t["hosts"][host] for play in out["plays"] for t in play["tasks"]
            if t["task"]["name"].split(" : ", 1)[-1] == name and host in t["hosts"]]


def test_pending_gpus_are_reset_together_by_bus_id_in_the_apply_and_in_the_rollback(tmp_path):
    """Two A100s whose driver leaves the mode change pending (gpusim mig_mode_self_reset=false, mig.md P1). The
    apply resets both in one request, then creating the instances fails (an injected fault): the rollback disables
    MIG again, which is pending too, and resets both the same way before it checks the restored geometry."""
    a100 = dict(gpu(A100, "disabled"), mig_mode_self_reset=False)
    node = {"gpus": [a100, dict(a100)],
            "faults": {"fail_gi_create_after": 1, "fail_gi_create_error": "INSUFFICIENT_RESOURCES",
                       "fail_gi_create_times": 1}}
    fleet = Fleet(tmp_path, {"node-1": node})
    with fleet.start():
        rc, out = fleet.run()
        assert rc != 0, out
        assert "stage apply" in " ".join(failures(out)["node-1"])
        stats = out["global_custom_stats"]["mig_reconfigure"]["nodes"]["node-1"]
        assert stats["result"] == "failed" and stats["restored"] is True, stats
        resets = [r for r in task_results(out, "node-1", "Reset the GPUs whose MIG mode change is pending") if "cmd" in r]
        assert [r["cmd"] for r in resets] == [["nvidia-smi", "-r", "-i", ",".join(BUSES)]] * 2
        state = fleet.state("node-1")
        assert state["reset_log"] == [BUSES, BUSES]  # two requests, each with both GPUs
        assert [(g["mig_mode"], g["mig_mode_pending"]) for g in state["gpus"]] == [(0, 0), (0, 0)]
        # The rollback's reset runs the same steps as the apply's: the kubelet stop is decided there too (no kubelet
        # unit on this machine, so skipped both times; molecule/mig_reconfigure has one).
        assert len(task_results(out, "node-1", "Stop the kubelet while the GPUs are reset")) == 2
