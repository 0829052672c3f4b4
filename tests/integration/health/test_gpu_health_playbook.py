# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/gpu_health.yml end to end: GPU nodes as local hosts with their own gpusim state (faults injected there,
read through gpusim's NVML and dmesg) and Kubernetes nodes of the same names in the lab's upstream control plane.
The taints are read back from the API server; the writes from its audit log."""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "preflight"))
from preflight_lab import ROOT, ansible_env, make_node, run_playbook, write_inventory  # noqa: E402  pylint: disable=import-error,wrong-import-position

sys.path.insert(0, os.path.join(ROOT, "lab", "kube"))
from kube_harness import kube_lab  # noqa: E402  pylint: disable=import-error,wrong-import-position

pytestmark = pytest.mark.slow

PLAYBOOK = os.path.join(ROOT, "playbooks", "gpu_health.yml")
KEY = "gpuops.io/gpu-health"
NODES = ("gpu-1", "gpu-2", "gpu-3", "gpu-4")
SYSFS = {"cmdline": "ro", "modules": {"nvidia": {"version": "550.163.01"}}}
ECC_STORM = {"volatile": {"uncorrected": 12}, "aggregate": {"uncorrected": 12}}


def state(**gpu):
    return {"driver_version": "550.163.01", "gpus": [dict({"model": "NVIDIA H100 80GB HBM3", "mig_mode": "disabled"},
                                                          **gpu)]}


def write_state(base, name, st):
    with open(os.path.join(str(base), name, "gpusim.json"), "w", encoding="utf-8") as fh:
        json.dump(st, fh)


def health_taints(lab, name):
    node = lab.get_json("/api/v1/nodes/%s" % name)
    return [t for t in node["spec"].get("taints") or [] if t["key"] == KEY]


def failed_msgs(out):
    return [r.get("msg", "") for p in out["plays"] for t in p["tasks"] for r in t["hosts"].values() if r.get("failed")]


@pytest.fixture()
def fleet(tmp_path):
    hosts = {n: make_node(tmp_path, n, SYSFS, state(), {"node_preflight_expected_gpus": 1}) for n in NODES}
    inventory = write_inventory(tmp_path / "hosts.yml", hosts)
    with kube_lab({"nodes": [{"metadata": {"name": n}} for n in NODES]}) as lab:
        env = ansible_env(lab.ansible_env(), {"ANSIBLE_SHOW_CUSTOM_STATS": "1"})

        def run(**extra):
            extra.setdefault("gpu_health_report_dir", str(tmp_path / "reports"))
            return run_playbook(PLAYBOOK, inventory, extra, env=env)
        yield {"base": tmp_path, "lab": lab, "run": run}


def test_a_sick_node_is_tainted_and_untainted_once_it_recovers(fleet):
    base, lab, run = fleet["base"], fleet["lab"], fleet["run"]
    write_state(base, "gpu-2", state(ecc=ECC_STORM))
    rc, out, _stdout, stderr = run()
    assert rc != 0, stderr
    assert health_taints(lab, "gpu-2") == [{"key": KEY, "value": "gpu_ecc", "effect": "NoSchedule"}]
    assert all(health_taints(lab, n) == [] for n in ("gpu-1", "gpu-3", "gpu-4"))
    # The run fails (AWX notifies) naming the node and the check; only one node was written.
    assert any(m == "unhealthy GPU nodes (tainted %s): gpu-2: gpu_ecc" % KEY for m in failed_msgs(out)), failed_msgs(out)
    patches = [r for r in lab.requests() if r["method"] in ("PATCH", "PUT") and r["resource"] == "nodes"]
    assert [r["name"] for r in patches] == ["gpu-2"], patches
    stats = out["global_custom_stats"]["gpu_health"]
    assert stats["unhealthy"] == ["gpu-2"] and stats["taint"] == [{"host": "gpu-2", "node": "gpu-2", "value": "gpu_ecc"}]
    assert stats["nodes"]["gpu-1"]["action"] == "none" and stats["pool"] == 4
    report = json.load(open(os.path.join(str(base), "reports", "gpu-2.json"), encoding="utf-8"))
    assert report["failed_checks"] == ["gpu_ecc"] and "12 since the last reset" in \
        [c for c in report["checks"] if c["id"] == "gpu_ecc"][0]["evidence"]
    assert os.path.exists(os.path.join(str(base), "reports", "preflight-junit.xml"))

    # The GPU was reset (volatile ECC counts gone): the next run removes the taint and passes.
    write_state(base, "gpu-2", state())
    rc, out, _stdout, stderr = run()
    assert rc == 0, failed_msgs(out) or stderr
    assert health_taints(lab, "gpu-2") == []
    assert out["global_custom_stats"]["gpu_health"]["untaint"] == [{"host": "gpu-2", "node": "gpu-2"}]
    # A third run finds nothing to change and writes nothing.
    before = len([r for r in lab.requests() if r["method"] in ("PATCH", "PUT")])
    rc, out, _stdout, _stderr = run()
    assert rc == 0 and len([r for r in lab.requests() if r["method"] in ("PATCH", "PUT")]) == before


def test_more_unhealthy_nodes_than_allowed_taints_none_and_fails_fleet_wide(fleet):
    base, lab, run = fleet["base"], fleet["lab"], fleet["run"]
    write_state(base, "gpu-1", state(pcie={"width": 8}))
    write_state(base, "gpu-3", state(xid_events=[{"xid": 79, "t": 12.5, "msg": "GPU has fallen off the bus."}]))
    write_state(base, "gpu-4", state(temperature=93))
    rc, out, _stdout, stderr = run(gpu_health_max_unhealthy="25%")  # 25% of 4 = 1
    assert rc != 0, stderr
    assert all(health_taints(lab, n) == [] for n in NODES)
    assert [r for r in lab.requests() if r["method"] in ("PATCH", "PUT")] == []
    msgs = failed_msgs(out)
    assert any(m.startswith("3 of 4 nodes fail their GPU health checks (gpu-1, gpu-3, gpu-4), more than the 1 "
                            "(max_unhealthy 25%)") for m in msgs), msgs
    stats = out["global_custom_stats"]["gpu_health"]
    assert stats["stopped"] and {n: stats["nodes"][n]["failed_checks"] for n in ("gpu-1", "gpu-3", "gpu-4")} == \
        {"gpu-1": ["gpu_pcie"], "gpu-3": ["gpu_xid"], "gpu-4": ["gpu_thermal"]}
    # With room for three, the same run taints the three, each with its check.
    rc, out, _stdout, _stderr = run(gpu_health_max_unhealthy=3, gpu_health_fail_on_unhealthy=False)
    assert rc == 0, failed_msgs(out)
    assert [health_taints(lab, n)[0]["value"] if health_taints(lab, n) else None for n in NODES] == \
        ["gpu_pcie", None, "gpu_xid", "gpu_thermal"]


def test_check_mode_writes_nothing(fleet):
    base, lab, run = fleet["base"], fleet["lab"], fleet["run"]
    write_state(base, "gpu-2", state(remapped_rows={"failure": True}))
    rc, out, _stdout, _stderr = run_playbook(PLAYBOOK, os.path.join(str(base), "hosts.yml"),
                                             {"gpu_health_report_dir": str(base / "reports"),
                                              "gpu_health_fail_on_unhealthy": False},
                                             env=ansible_env(lab.ansible_env()), check=True)
    assert rc == 0, failed_msgs(out)
    assert health_taints(lab, "gpu-2") == []
    assert [r for r in lab.requests() if r["method"] in ("PATCH", "PUT", "POST", "DELETE")] == []


def test_a_drained_sick_node_is_uncordoned_once_it_recovers_but_an_operators_cordon_stays(fleet):
    # Issue 45 point 6: the health roll drained without marking its cordon, so a node that recovered stayed
    # unschedulable for good. gpu-3 was cordoned by an operator and is sick too: it stays cordoned afterwards.
    base, lab, run = fleet["base"], fleet["lab"], fleet["run"]
    lab.core.patch_node("gpu-3", {"spec": {"unschedulable": True}})
    for name in ("gpu-2", "gpu-3"):
        write_state(base, name, state(ecc=ECC_STORM))
    rc, out, _stdout, stderr = run(gpu_health_drain=True, gpu_health_max_unhealthy=2)
    assert rc != 0, stderr
    for name in ("gpu-2", "gpu-3"):
        node = lab.get_json("/api/v1/nodes/%s" % name)
        notes = node["metadata"].get("annotations") or {}
        assert node["spec"]["unschedulable"] is True
        assert notes["gpuops.provision/roll"] == "gpu_health" and notes["gpuops.provision/roll-phase"] == "drained"
    assert "gpuops.provision/cordoned-by" in lab.get_json("/api/v1/nodes/gpu-2")["metadata"]["annotations"]
    assert "gpuops.provision/cordoned-by" not in lab.get_json("/api/v1/nodes/gpu-3")["metadata"]["annotations"]

    for name in ("gpu-2", "gpu-3"):
        write_state(base, name, state())
    rc, out, _stdout, stderr = run(gpu_health_drain=True, gpu_health_max_unhealthy=2)
    assert rc == 0, failed_msgs(out) or stderr
    gpu2, gpu3 = lab.get_json("/api/v1/nodes/gpu-2"), lab.get_json("/api/v1/nodes/gpu-3")
    assert not gpu2["spec"].get("unschedulable") and health_taints(lab, "gpu-2") == []
    assert gpu2["metadata"]["annotations"]["gpuops.provision/roll-phase"] == "released"
    assert "gpuops.provision/cordoned-by" not in gpu2["metadata"]["annotations"]
    assert gpu3["spec"]["unschedulable"] is True and health_taints(lab, "gpu-3") == []
    # gpu-1 and gpu-4 were never drained: no roll state was written on them.
    for name in ("gpu-1", "gpu-4"):
        assert "gpuops.provision/roll" not in (lab.get_json("/api/v1/nodes/%s" % name)["metadata"].get("annotations") or {})
