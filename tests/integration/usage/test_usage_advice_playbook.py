# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/gpu_usage_advice.yml against a real Prometheus on a backfilled week of dcgm-exporter history
(lab/dcgm/prometheus.py): the issue 43 acceptance - a notebook pool gets time-slicing with replicas, an inference node
peaking at 18 GB on an 80 GB H100 gets MIG with 3g instances, a saturated trainer gets "add capacity", each with its
figures - and the written files plan cleanly: the mig-parted document by the collection's validator, NVIDIA's
nvidia-mig-parted and mig_geometry in check mode on the node's gpusim GPU; the pool file by the gpu_pools role's own
plan. Errors (Prometheus down, profiling counters missing, two days for a seven-day window) fail, naming why, and
write nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from usage_lab import (DEFAULT_OFF, ROOT, VENV_BIN, ansible_env, failures, run_playbook, start, stop,  # pylint: disable=import-error
                      task_results)  # noqa: E402

from ansible_collections.gpuops.provision.plugins.module_utils._k8s import gpu_pools  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.gpuops.provision.plugins.module_utils._mig import geometry
from gpusim_nvml import library_env  # noqa: E402  pylint: disable=import-error,wrong-import-position

PLAYBOOK = os.path.join(ROOT, "playbooks", "gpu_usage_advice.yml")
POOLS = {"notebooks": ["nb-node-1", "nb-node-2"], "inference": ["gpu-node-2"], "training": ["train-node-1"]}
STATES = {"nb-node-1": "lab/dcgm/states/nb-node-1.json", "nb-node-2": "lab/dcgm/states/nb-node-2.json",
          "gpu-node-2": "lab/gpusim/states/gpu-node-2.json", "train-node-1": "lab/dcgm/states/train-node-1.json"}
H100 = "0x233010DE"
MIG_DOC = {"version": "v1", "mig-configs": {
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "inference": [{"devices": "all", "device-filter": H100, "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]}}
PROPOSED = [{"name": "inference", "nodes": ["gpu-node-2"], "sharing": "mig", "mig_config": "inference"},
            {"name": "notebooks", "nodes": ["nb-node-1", "nb-node-2"], "sharing": "time-slicing", "replicas": 6},
            {"name": "training", "nodes": ["train-node-1"], "sharing": "exclusive"}]


def inventory(tmp_path, nodes, **settings):
    """The GPU nodes (local connection: the module runs on the controller anyway) with the playbook's settings in
    the group's variables, as a user's group_vars holds them."""
    group = {"hosts": {n: {"ansible_connection": "local"} for n in nodes},
             "vars": dict({"gpu_usage_advice_dir": str(tmp_path / "advice")}, **settings)}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": group}}}))
    return path


def query(url, promql):
    with urllib.request.urlopen("%s/api/v1/query?%s" % (url, urllib.parse.urlencode({"query": promql})), timeout=10) as r:
        return json.loads(r.read())["data"]["result"]


def written(tmp_path):
    folder = tmp_path / "advice"
    return sorted(os.listdir(folder)) if folder.exists() else []


@pytest.fixture(scope="module")
def advised(prometheus, tmp_path_factory):
    """One run of the playbook on the lab's three cases, the URL from PROMETHEUS_URL (no connection setting)."""
    tmp_path = tmp_path_factory.mktemp("advice")
    inv = inventory(tmp_path, STATES, gpu_usage_advice_pools=POOLS)
    env = ansible_env({"PROMETHEUS_URL": prometheus.url})
    rc, out, stdout, stderr = run_playbook(PLAYBOOK, inv, env)
    assert out is not None and rc == 0, (stdout[-3000:], stderr[-3000:])
    return {"tmp": tmp_path, "inventory": inv, "env": env, "out": out}


def test_lab_prometheus_holds_the_backfilled_week_and_scrapes_every_node(prometheus):
    print("lab prometheus start: %s" % prometheus.timings)
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        up = {r["metric"]["instance"]: r["value"][1] for r in query(prometheus.url, 'up{job="dcgm-exporter"}')}
        if len(up) == 5 and set(up.values()) == {"1"}:
            break
        time.sleep(1)
    assert up == {n: "1" for n in ("gpu-node-1", "gpu-node-2", "nb-node-1", "nb-node-2", "train-node-1")}
    # One series per device and metric: the backfilled history and the scrapes carry the same labels.
    week = query(prometheus.url, 'count_over_time(DCGM_FI_PROF_SM_ACTIVE{Hostname="gpu-node-2"}[7d])')
    assert len(week) == 1 and int(week[0]["value"][1]) >= 7 * 288
    assert week[0]["metric"]["modelName"] == "NVIDIA H100 80GB HBM3" and week[0]["metric"]["pod"] == "llm-0"


def test_the_three_acceptance_cases_with_their_figures(advised):
    out = advised["out"]
    read = task_results(out, "Read GPU use from Prometheus and advise")
    advice = {a["name"]: a for a in next(iter(read.values()))["advice"]}
    nb, inf, tr = advice["notebooks"], advice["inference"], advice["training"]
    assert (nb["advice"], nb["pool"]["replicas"]) == ("time-slicing", 6)
    assert nb["figures"]["sm_active_mean"] <= 0.08 and nb["figures"]["memory_used_p95"] <= 0.15
    assert nb["figures"]["peak_workload_mib"] == 5528 and nb["figures"]["fb_total_mib"] == 46068
    assert "replicas = min(8, floor(46068 MiB / (5528 MiB peak x 1.20 headroom))) = 6" in nb["reason"]
    assert inf["advice"] == "mig" and inf["figures"]["peak_workload_mib"] == 18432
    assert inf["mig_config"]["mig-configs"]["inference"] == MIG_DOC["mig-configs"]["inference"]
    assert "2 x 3g.40gb per GPU" in inf["reason"] and "18432 MiB + 20 % headroom = 22118 MiB" in inf["reason"]
    assert tr["advice"] == "saturated" and tr["action"] == "add capacity"
    assert tr["figures"]["sm_active_p95"] >= 0.85 and "p95 SM activity" in tr["reason"]
    assert all(a["figures"]["hours_min"] >= 168 for a in advice.values())
    stats = out["global_custom_stats"]["gpu_usage_advice"]
    assert [a["advice"] for a in stats["advice"]] == ["mig", "time-slicing", "saturated"]
    assert set(stats["advice"][0]) == {"name", "nodes", "advice", "action", "rule", "reason", "figures"}


def test_the_files_are_written_once_and_check_mode_only_shows_the_diff(advised):
    tmp, inv, env = advised["tmp"], advised["inventory"], advised["env"]
    pools = yaml.safe_load((tmp / "advice" / "gpu_pools.yml").read_text())
    assert pools == {"gpu_pools_pools": PROPOSED}
    text = (tmp / "advice" / "gpu_pools.yml").read_text()
    assert "#   notebooks (nb-node-1, nb-node-2): time-slicing, share by time-slicing (rule time-slicing)" in text
    assert yaml.safe_load((tmp / "advice" / "mig-parted.yaml").read_text()) == MIG_DOC

    rc, out, stdout, stderr = run_playbook(PLAYBOOK, inv, env)
    assert rc == 0, (stdout[-2000:], stderr[-2000:])
    assert all(s["changed"] == 0 for s in out["stats"].values()), "a second run on the same advice rewrote a file"

    reviewed = (tmp / "advice" / "gpu_pools.yml").read_text()
    (tmp / "advice" / "gpu_pools.yml").write_text("gpu_pools_pools: []\n")
    rc, out, stdout, stderr = run_playbook(PLAYBOOK, inv, env, "--check")
    assert rc == 0, (stdout[-2000:], stderr[-2000:])
    assert (tmp / "advice" / "gpu_pools.yml").read_text() == "gpu_pools_pools: []\n", "check mode wrote the file"
    [result] = [r["results"] for r in task_results(out, "Write the proposed files").values()]  # run_once: one host
    changed = {r["item"]["key"]: r for r in result}
    assert changed["gpu_pools.yml"]["changed"] and not changed["mig-parted.yaml"]["changed"]
    assert "sharing: time-slicing" in changed["gpu_pools.yml"]["diff"][0]["after"]
    assert changed["gpu_pools.yml"]["diff"][0]["before"] == "gpu_pools_pools: []\n"
    assert changed["gpu_pools.yml"]["diff"][0]["after"] == reviewed
    (tmp / "advice" / "gpu_pools.yml").write_text(reviewed)


def gpu_info(state):
    env = ansible_env(library_env(state))
    return module(env, "gpu_info", {"profiles": False, "health": False, "kernel_log": "none"})


def module(env, name, args, check=False):
    cmd = [os.path.join(VENV_BIN, "ansible"), "localhost", "-m", "gpuops.provision.%s" % name, "-a", json.dumps(args),
           "-e", "ansible_python_interpreter=%s" % sys.executable] + (["--check"] if check else [])
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_the_written_files_plan_cleanly(advised, tmp_path):
    folder = advised["tmp"] / "advice"
    doc = yaml.safe_load((folder / "mig-parted.yaml").read_text())
    for name in doc["mig-configs"]:
        geometry.parse_config(doc, name)  # the collection's validator, what mig_reconfigure is given
    sys.path.insert(0, os.path.join(ROOT, "lab"))
    import gobuild  # pylint: disable=import-error,import-outside-toplevel
    binary = os.path.join(gobuild.builder("mig-parted").ensure(), "bin", "nvidia-mig-parted")
    for name in doc["mig-configs"]:
        proc = subprocess.run([binary, "assert", "--valid-config", "-f", str(folder / "mig-parted.yaml"), "-c", name],
                              capture_output=True, text=True, timeout=30, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr

    # mig_reconfigure's plan step: mig_geometry in check mode on the inference node's GPU (gpusim, MIG off).
    state = tmp_path / "gpu-node-2.json"
    state.write_text(open(os.path.join(ROOT, STATES["gpu-node-2"]), encoding="utf-8").read())
    before = state.read_bytes()
    env = ansible_env(dict(library_env(state), GPUOPS_MIG_LOCK=str(tmp_path / "mig.lock")))
    plan = module(env, "mig_geometry", {"config": doc, "selected": "inference"}, check=True)
    assert not plan.get("failed") and plan["changed"], plan.get("msg")
    assert plan["gpus"][0]["after"]["mig_devices"] == {"3g.40gb": 2} and state.read_bytes() == before

    # The gpu_pools role's plan (its gpu_pools_plan filter) over the pool file, the MIG document and each node's GPUs.
    pools = yaml.safe_load((folder / "gpu_pools.yml").read_text())["gpu_pools_pools"]
    nodes = {}
    for node, path in STATES.items():
        gpus = gpu_info(os.path.join(ROOT, path))["gpus"]
        nodes[node] = {"labels": {}, "taints": [], "allocatable": {"nvidia.com/gpu": str(len(gpus))}, "host": node,
                       "gpus": gpus}
    planned = gpu_pools.plan(pools, nodes, doc)
    assert planned["errors"] == []
    assert {n: (r["pool"], r["sharing"], r["mig_config"]) for n, r in planned["nodes"].items()} == {
        "gpu-node-2": ("inference", "mig", "inference"), "nb-node-1": ("notebooks", "time-slicing", "all-disabled"),
        "nb-node-2": ("notebooks", "time-slicing", "all-disabled"), "train-node-1": ("training", "exclusive", "all-disabled")}
    assert planned["config_map"]["notebooks"]["sharing"]["timeSlicing"]["resources"][0]["replicas"] == 6


def test_gpu_pools_with_its_mig_roll_plans_the_written_files_in_check_mode(advised, tmp_path):
    """The loop's next step on the lab's Kubernetes: playbooks/gpu_pools.yml --check (the gpu_pools role, then the
    mig_reconfigure role's plan for the pools' members) with the two written files as the inventory's variables, as
    the playbook's header says to apply them: it plans every node, fails none and stores nothing."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "integration", "mig_reconfigure"))
    from mig_reconfigure_lab import (  # pylint: disable=import-error,import-outside-toplevel
        Fleet, create_cluster_policy, failures as roll_failures)
    folder = advised["tmp"] / "advice"
    group_vars = dict(yaml.safe_load((folder / "gpu_pools.yml").read_text()),
                      mig_reconfigure_config=yaml.safe_load((folder / "mig-parted.yaml").read_text()))
    states = {}
    for node, path in STATES.items():
        with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
            states[node] = json.load(fh)
    fleet = Fleet(tmp_path, states, selected="all-disabled", group_vars=group_vars)
    with fleet.start() as lab:
        create_cluster_policy(lab)  # the GPU Operator's, which the pools' tolerations go into
        before = {n: fleet.raw(n) for n in states}
        labels = {n: fleet.node(n)["metadata"]["labels"] for n in states}
        rc, out = fleet.run(playbook=os.path.join(ROOT, "playbooks", "gpu_pools.yml"), check=True)
        assert rc == 0, roll_failures(out)
        # Check mode sends the API server dry runs only (nothing stored) and leaves the GPUs as they are.
        assert all(r["query"].get("dryRun") == "All" for r in fleet.writes()), fleet.writes()
        assert {n: fleet.node(n)["metadata"]["labels"] for n in states} == labels
        assert {n: fleet.raw(n) for n in states} == before
        # The roll's plan: every node changes its sharing, so each goes through the roll (gpu_pools.yml's header);
        # the inference node to its MIG geometry, the time-slicing and whole-GPU nodes to all-disabled.
        nodes = out["global_custom_stats"]["mig_reconfigure"]["nodes"]
        assert {n: (r["result"], r["selected"], r["drained"]) for n, r in nodes.items()} == {
            "gpu-node-2": ("planned", "inference", False), "nb-node-1": ("planned", "all-disabled", False),
            "nb-node-2": ("planned", "all-disabled", False), "train-node-1": ("planned", "all-disabled", False)}


def test_prometheus_down_fails_naming_it_and_writes_nothing(tmp_path):
    import socket  # pylint: disable=import-outside-toplevel
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = "http://127.0.0.1:%d" % s.getsockname()[1]
    inv = inventory(tmp_path, ["nb-node-1"], gpu_usage_advice_url=url)
    rc, out, stdout, stderr = run_playbook(PLAYBOOK, inv, ansible_env())
    assert rc != 0 and out is not None, (stdout[-2000:], stderr[-2000:])
    [(task, _host, msg)] = failures(out)
    assert task == "Read GPU use from Prometheus and advise"
    assert msg.startswith("Prometheus at %s is unreachable (URLError" % url) and "query time()" in msg
    assert written(tmp_path) == [] and not task_results(out, "Show the advice with its figures")


@pytest.mark.parametrize("case", ["profiling-missing", "two-days"])
def test_no_advice_without_profiling_counters_or_with_two_days(tmp_path, case):
    run_dir = tmp_path / "prometheus"
    args = ["--node", "nb-node-1"] + (["--omit", DEFAULT_OFF[0], "--omit", DEFAULT_OFF[1]] if case == "profiling-missing"
                                      else ["--history", "2d"])
    prom = start(run_dir, *args)
    try:
        inv = inventory(tmp_path, ["nb-node-1"], gpu_usage_advice_url=prom.url)
        rc, out, stdout, stderr = run_playbook(PLAYBOOK, inv, ansible_env())
    finally:
        stop(run_dir)
    assert rc != 0 and out is not None, (stdout[-2000:], stderr[-2000:])
    [(task, _host, msg)] = failures(out)
    assert task == "Read GPU use from Prometheus and advise"
    if case == "profiling-missing":
        assert msg.startswith("dcgm-exporter publishes no DCGM_FI_PROF_SM_ACTIVE, DCGM_FI_PROF_SM_OCCUPANCY: ")
        assert "commented out in dcgm-exporter's default counters (etc/default-counters.csv" in msg
    else:
        assert msg.startswith("nb-node-1: too little data to advise: nb-node-1 GPU 0 observed 48.")
        assert "(at least 144 hours are needed; widen the window or wait until Prometheus holds them)" in msg
    assert written(tmp_path) == [] and not task_results(out, "Show the advice with its figures")
