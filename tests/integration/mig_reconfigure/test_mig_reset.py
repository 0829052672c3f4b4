# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role's GPU reset (issue 38 point 10), end to end over gpusim and the Kubernetes stand-in: every GPU whose MIG
mode change is pending is reset together, by PCI bus id, in one `nvidia-smi -r -i` (NVIDIA/mig-parted
cmd/nvidia-mig-parted/util/device.go nvmlResetAllGPUs), in the apply and in the rollback, each time with the same
steps around it (roles/mig_reconfigure/tasks/reset_gpus.yml: the kubelet stopped, the fabric manager settled)."""

from __future__ import annotations

import os
import stat
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mig_reconfigure_lab import A100, VENV_BIN, Fleet, failures, gpu  # noqa: E402  pylint: disable=import-error,wrong-import-position

pytestmark = pytest.mark.slow

BUSES = ["00000000:17:00.0", "00000000:31:00.0"]


def task_results(out, host, name):
    """The results on ``host`` of the role's tasks called ``name`` (the callback prefixes the role's name)."""
    return [t["hosts"][host] for play in out["plays"] for t in play["tasks"]
            if t["task"]["name"].split(" : ", 1)[-1] == name and host in t["hosts"]]


# Host units without systemd: `service --status-all` for service_facts (its sysv scan) and a `systemctl` that answers
# `show`, `is-active`, `start` and `stop` for ansible.builtin.systemd_service, over one directory of unit states. Each
# start and stop is logged with the number of GPU reset requests gpusim has seen by then (its reset_log), so the order
# of the kubelet's stops and starts around the resets shows (as molecule/mig_reconfigure's kubelet stand-in does).
FAKE_SERVICE = """#!/bin/sh
for f in "$UNITS"/*.service; do
  [ "$(cat "$f")" = active ] && s=+ || s=-
  echo " [ $s ]  $(basename "$f")"
done
"""
FAKE_SYSTEMCTL = """#!/bin/sh
action=$1; unit=$2
f="$UNITS/$unit"
[ -f "$f" ] || { [ "$action" = show ] && printf 'Id=%s\\nLoadState=not-found\\nActiveState=inactive\\n' "$unit"; exit 0; }
case "$action" in
  show) printf 'Id=%s\\nLoadState=loaded\\nActiveState=%s\\n' "$unit" "$(cat "$f")" ;;
  is-active) cat "$f"; [ "$(cat "$f")" = active ] ;;
  is-enabled) echo enabled ;;
  start|stop)
    [ "$action" = start ] && echo active > "$f" || echo inactive > "$f"
    n=$(@PYTHON@ -c 'import json, sys; print(len(json.load(open(sys.argv[1])).get("reset_log", [])))' "$GPUSIM_STATE_FILE")
    echo "$action $unit $n" >> "$UNITS/log" ;;
esac
"""


def fake_units(base, units):
    """A bin directory with the stand-ins above and the units (name -> active|inactive) they serve."""
    bindir, unitdir = os.path.join(str(base), "fakebin"), os.path.join(str(base), "units")
    os.makedirs(bindir)
    os.makedirs(unitdir)
    for name, body in (("service", FAKE_SERVICE), ("systemctl", FAKE_SYSTEMCTL.replace("@PYTHON@", os.path.join(VENV_BIN, "python")))):
        path = os.path.join(bindir, name)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(body)
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    for name, state in units.items():
        with open(os.path.join(unitdir, name), "w", encoding="utf-8") as fh:
            fh.write(state + "\n")
    return bindir, unitdir


def test_pending_gpus_are_reset_together_by_bus_id_with_the_kubelet_stopped_in_the_apply_and_in_the_rollback(tmp_path):
    """Two A100s whose driver leaves the mode change pending (gpusim mig_mode_self_reset=false, mig.md P1). The apply
    resets both in one request, then creating the instances fails (an injected fault): the rollback disables MIG again,
    which is pending too, and resets both the same way before it checks the restored geometry. mig-manager stops the
    kubelet whenever a mode change needs a reset (NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go
    checkMigModeChangeRequired) and waits for the fabric manager to settle after stopping host units
    (deployments/container/reconfigure-mig.sh "sleep 30"): the rollback's reset is such a reset too."""
    a100 = dict(gpu(A100, "disabled"), mig_mode_self_reset=False)
    node = {"gpus": [a100, dict(a100)],
            "faults": {"fail_gi_create_after": 1, "fail_gi_create_error": "INSUFFICIENT_RESOURCES",
                       "fail_gi_create_times": 1}}
    fleet = Fleet(tmp_path, {"node-1": node}, group_vars={"mig_reconfigure_fabricmanager_settle": 1})
    bindir, unitdir = fake_units(tmp_path, {"kubelet.service": "active", "nvidia-fabricmanager.service": "active"})
    env = {"PATH": bindir + os.pathsep + os.environ.get("PATH", ""), "UNITS": unitdir,
           "GPUSIM_STATE_FILE": fleet.states["node-1"]}
    with fleet.start():
        rc, out = fleet.run(env_extra=env)
        assert rc != 0 and "stage apply" in " ".join(failures(out)["node-1"]), out
        stats = out["global_custom_stats"]["mig_reconfigure"]["nodes"]["node-1"]
        assert stats["result"] == "failed" and stats["restored"] is True, stats
        resets = [r for r in task_results(out, "node-1", "Reset the GPUs whose MIG mode change is pending") if "cmd" in r]
        assert [r["cmd"] for r in resets] == [["nvidia-smi", "-r", "-i", ",".join(BUSES)]] * 2
        state = fleet.state("node-1")
        assert state["reset_log"] == [BUSES, BUSES]  # two requests, each with both GPUs
        assert [(g["mig_mode"], g["mig_mode_pending"]) for g in state["gpus"]] == [(0, 0), (0, 0)]
        with open(os.path.join(unitdir, "log"), encoding="utf-8") as fh:
            log = fh.read().splitlines()
        # Stopped before each of the two resets, started after each: the apply's, then the rollback's.
        assert log == ["stop kubelet.service 0", "start kubelet.service 1",
                       "stop kubelet.service 1", "start kubelet.service 2"], log
        settles = task_results(out, "node-1", "Let the fabric manager settle before the reset")
        assert [s.get("skipped", False) for s in settles] == [False, False], settles
        assert all(s["elapsed"] >= 1 for s in settles)
