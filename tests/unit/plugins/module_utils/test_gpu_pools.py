# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/_gpu_pools.py: pool validation, the device plugin documents, per-node labels, taints and resources."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, strategies as st

from ansible_collections.gpuops.provision.plugins.filter import gpu_pools as F
from ansible_collections.gpuops.provision.plugins.module_utils import _gpu_pools as P

MIG_CONFIG = {"version": "v1", "mig-configs": {
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "all-balanced": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}],
    "all-3g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}],
}}
H100 = {"model": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "mig_capable": True,
        "mig_mode": {"current": "enabled", "pending": "enabled"}}
T4 = {"model": "Tesla T4", "compute_capability": "7.5", "mig_capable": False, "mig_mode": None}
V100 = {"model": "Tesla V100-SXM2-16GB", "compute_capability": "7.0", "mig_capable": False, "mig_mode": None}
P100 = {"model": "Tesla P100-PCIE-16GB", "compute_capability": "6.0", "mig_capable": False, "mig_mode": None}


def gpus(model, n):
    return [dict(model, index=i) for i in range(n)]


def node(gpu_list, labels=None, taints=None, allocatable=None, host="h"):
    return {"labels": labels or {}, "taints": taints or [], "allocatable": allocatable or {}, "host": host, "gpus": gpu_list}


def ts(name="notebooks", nodes=("gpu-a",), replicas=4, **kw):
    return dict(name=name, nodes=list(nodes), sharing="time-slicing", replicas=replicas, **kw)


def run(pools, nodes, **kw):
    kw.setdefault("mig_config", MIG_CONFIG)
    return P.plan(pools, nodes, **kw)


def test_time_slicing_pool_renders_config_labels_taint_and_expected_resources():
    out = run([ts()], {"gpu-a": node(gpus(H100, 2), labels={"nvidia.com/mig.config": "all-balanced"}), "cpu-1": node([], host="")})
    assert out["errors"] == []
    assert out["config_map"] == {
        "default": {"version": "v1", "flags": {"migStrategy": "mixed"}},
        "notebooks": {"version": "v1", "flags": {"migStrategy": "mixed"}, "sharing": {"timeSlicing": {
            "renameByDefault": False, "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}},
    }
    rec = out["nodes"]["gpu-a"]
    assert rec["config_labels"] == {"nvidia.com/device-plugin.config": "notebooks"}
    assert rec["labels"] == {"gpuops.io/gpu-pool": "notebooks", "gpuops.io/gpu-sharing": "time-slicing",
                             "gpuops.io/gpu-profile": "time-slicing-4"}
    assert rec["taints"] == [{"key": "gpuops.io/gpu-pool", "value": "notebooks", "effect": "NoSchedule"}]
    assert rec["mig_config"] == "all-disabled" and rec["roll"] is True
    assert rec["expected"] == {"nvidia.com/gpu": 8}
    assert rec["sharing_spec"] == {"replicas": 4, "rename_by_default": False}
    assert "cpu-1" not in out["nodes"] and out["pools"] == {"notebooks": ["gpu-a"]}


def test_rename_by_default_and_mps_defaults():
    out = run([ts(rename_by_default=True), dict(name="mps", nodes=["gpu-b"], sharing="mps", replicas=8)],
              {"gpu-a": node(gpus(T4, 1)), "gpu-b": node(gpus(V100, 2))})
    assert out["errors"] == []
    assert out["nodes"]["gpu-a"]["expected"] == {"nvidia.com/gpu.shared": 4}
    assert out["config_map"]["mps"]["sharing"] == {"mps": {"renameByDefault": False, "failRequestsGreaterThanOne": True,
                                                           "resources": [{"name": "nvidia.com/gpu", "replicas": 8}]}}
    assert out["nodes"]["gpu-b"]["expected"] == {"nvidia.com/gpu": 16}


def test_node_already_at_its_pool_does_not_roll():
    labels = {"nvidia.com/device-plugin.config": "notebooks", "nvidia.com/mig.config": "all-disabled"}
    out = run([ts()], {"gpu-a": node(gpus(T4, 2), labels=labels, allocatable={"nvidia.com/gpu": "8", "cpu": "8"})})
    assert out["nodes"]["gpu-a"]["roll"] is False
    # No nvidia.com/mig.config label: not a reason to drain (the roll's mig_geometry plan compares the geometry).
    out = run([ts()], {"gpu-a": node(gpus(T4, 2), labels={"nvidia.com/device-plugin.config": "notebooks"},
                                     allocatable={"nvidia.com/gpu": "8"})})
    assert out["nodes"]["gpu-a"]["roll"] is False
    # The same labels but the device plugin still advertising the old count (replicas changed): roll.
    out = run([ts(replicas=2)], {"gpu-a": node(gpus(T4, 2), labels=labels, allocatable={"nvidia.com/gpu": "8"})})
    assert out["nodes"]["gpu-a"]["roll"] is True


def test_mig_pool_uses_default_config_and_mig_label():
    out = run([dict(name="inference", selector={"pool": "inf"}, sharing="mig", mig_config="all-balanced")],
              {"gpu-a": node(gpus(H100, 1), labels={"pool": "inf"}), "gpu-b": node(gpus(H100, 1), labels={"pool": "x"})})
    assert out["errors"] == []
    rec = out["nodes"]["gpu-a"]
    assert rec["config_key"] == "default" and rec["mig_config"] == "all-balanced" and rec["expected"] is None
    assert rec["labels"]["gpuops.io/gpu-profile"] == "all-balanced" and rec["sharing_spec"] == {}
    assert list(out["nodes"]) == ["gpu-a"]


@pytest.mark.parametrize("pool, nodes, message", [
    (ts(replicas=1), None, r"pool notebooks: time-slicing needs replicas, a whole number >= 2 .*got 1"),
    (ts(replicas="4"), None, r"pool notebooks: time-slicing needs replicas.*got '4'"),
    (dict(name="m", nodes=["gpu-a"], sharing="mps", replicas=4), {"gpu-a": node(gpus(P100, 1))},
     r"node gpu-a: GPU 0 \(Tesla P100-PCIE-16GB\) has compute capability 6.0; pool m \(MPS\) needs Volta"),
    (dict(name="m", nodes=["gpu-a"], sharing="mps", replicas=20), {"gpu-a": node(gpus(V100, 1))},
     r"node gpu-a: GPU 0 .*pool m asks for 20 MPS replicas; an MPS server takes at most 16"),
    (dict(name="m", nodes=["gpu-a"], sharing="mps", replicas=4, mig_config="all-3g"), None,
     r"pool m: a mps pool needs MIG disabled on its GPUs, and MIG configuration all-3g enables it"),
    (dict(name="i", nodes=["gpu-a"], sharing="mig"), None, r"pool i: a mig pool needs mig_config"),
    (dict(name="i", nodes=["gpu-a"], sharing="mig", mig_config="nope"), None, r"MIG configuration nope is not in the mig-parted"),
    (dict(name="i", nodes=["gpu-a"], sharing="mig", mig_config="all-disabled"), None, r"disables MIG; a mig pool needs"),
    (dict(name="i", nodes=["gpu-a"], sharing="mig", mig_config="all-3g"), {"gpu-a": node(gpus(T4, 1))},
     r"node gpu-a: GPU 0 \(Tesla T4\) does not support MIG"),
    (dict(name="e", nodes=["gpu-a"], sharing="exclusive", replicas=2), None, r"replicas applies to time-slicing and mps"),
    (dict(name="e", nodes=["gpu-a"], sharing="shared"), None, r"pool e: sharing must be one of mig, time-slicing"),
    (dict(name="e", sharing="exclusive"), None, r"pool e: give either nodes .* or selector .*, not neither"),
    (dict(name="e", nodes=["gpu-a"], selector={"a": "b"}, sharing="exclusive"), None, r"not both"),
    (dict(name="e", nodes=["gpu-z"], sharing="exclusive"), None, r"pool e: node gpu-z is not a Kubernetes node"),
    (ts(labels={"nvidia.com/mig.config": "x"}), None, r"label nvidia.com/mig.config is set by the pool itself"),
    (ts(labels={"team": "a b"}), None, r"label team has the invalid value 'a b'"),
    (ts(taints=[{"key": "gpu", "effect": "Never"}]), None, r"taint gpu has the effect 'Never'"),
    (ts(colour="red"), None, r"unknown key\(s\) colour"),
    (ts(name="Bad Name"), None, r"name must be a label value"),
    (ts(device_plugin_config="default"), None, r"device_plugin_config default is the default configuration"),
])
def test_invalid_pools_name_pool_node_and_reason(pool, nodes, message):
    out = run([pool], nodes or {"gpu-a": node(gpus(H100, 1))})
    assert out["errors"], out
    assert any(__import__("re").search(message, e) for e in out["errors"]), out["errors"]


def test_node_errors():
    two = [ts(name="a"), dict(name="b", nodes=["gpu-a"], sharing="exclusive")]
    assert run(two, {"gpu-a": node(gpus(T4, 1))})["errors"] == ["node gpu-a: selected by more than one pool (a, b)"]
    out = run([ts()], {"gpu-a": node(gpus(T4, 1), host="")})
    assert out["errors"] == ["node gpu-a: selected by pool notebooks but no play host manages it (no GPU facts)"]
    assert run([ts()], {"gpu-a": node([])})["errors"] == ["node gpu-a: selected by pool notebooks but has no GPU"]
    orphan = {"gpu-a": node(gpus(T4, 1)), "gpu-b": node(gpus(T4, 1), labels={"nvidia.com/device-plugin.config": "old"})}
    assert run([ts()], orphan)["errors"] == [
        "node gpu-b: is in no pool and selects device plugin configuration old, which this run would remove from the ConfigMap"]
    cc = run([dict(name="m", nodes=["gpu-a"], sharing="mps", replicas=2)], {"gpu-a": node([dict(T4, compute_capability=None, index=0)])})
    assert cc["errors"] == ["node gpu-a: GPU 0 (Tesla T4): compute capability unknown; pool m (MPS) needs Volta (7.0) or later"]
    twice = run([ts(), ts(nodes=["gpu-b"])], {"gpu-a": node(gpus(T4, 1)), "gpu-b": node(gpus(T4, 1))})
    assert "pool notebooks: defined twice" in twice["errors"]


def test_mig_strategy_consistency():
    mig = [dict(name="i", nodes=["gpu-a"], sharing="mig", mig_config="all-balanced")]
    assert run(mig, {"gpu-a": node(gpus(H100, 1))}, strategy="none")["errors"] == [
        "pool i: MIG strategy none advertises no MIG devices; a mig pool needs single or mixed"]
    assert run(mig, {"gpu-a": node(gpus(H100, 1))}, strategy="single")["errors"] == [
        "pool i: MIG strategy single advertises one MIG profile per node, and all-balanced mixes profiles"]
    assert run([dict(mig[0], mig_config="all-3g")], {"gpu-a": node(gpus(H100, 1))}, strategy="single")["errors"] == []
    assert run([ts()], {"gpu-a": node(gpus(T4, 1))}, strategy="sometimes")["errors"][0].startswith("MIG strategy must be one of")
    single = run([ts()], {"gpu-a": node(gpus(T4, 1))}, strategy="single")
    assert single["config_map"]["notebooks"]["flags"] == {"migStrategy": "single"}


def test_empty_selector_selects_nothing():
    out = run([dict(name="e", selector={}, sharing="exclusive")], {"gpu-a": node(gpus(T4, 1))})
    assert out["errors"] == [] and out["nodes"] == {} and out["pools"] == {"e": []}


def test_taints_keep_foreign_replace_own_and_drop_stale_pool_taints():
    current = [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
               {"key": "gpuops.io/gpu-pool", "value": "old", "effect": "NoSchedule"},
               {"key": "gpuops.io/gpu-pool", "value": "old", "effect": "NoExecute"}]
    out = P.node_taints(current, [{"key": "gpuops.io/gpu-pool", "value": "new", "effect": "NoSchedule"}])
    assert out == [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
                   {"key": "gpuops.io/gpu-pool", "value": "new", "effect": "NoSchedule"}]
    rec = run([ts(taints=[])], {"gpu-a": node(gpus(T4, 1), taints=current)})["nodes"]["gpu-a"]
    assert rec["taints"] == [current[0]] and rec["taints_changed"] is True


@given(counts=st.dictionaries(st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"]),
                              st.integers(0, 16)),
       replicas=st.integers(2, 48), rename=st.booleans())
def test_share_resources_replicates_only_whole_gpus(counts, replicas, rename):
    out = P.share_resources(counts, {"replicas": replicas, "rename_by_default": rename})
    gpu_name = "nvidia.com/gpu.shared" if rename else "nvidia.com/gpu"
    assert out.get(gpu_name, 0) == counts.get("nvidia.com/gpu", 0) * replicas
    for k, v in counts.items():
        if k.startswith("nvidia.com/mig-"):
            assert out[k] == v
    assert P.share_resources(counts, {}) == counts


@given(replicas=st.integers(-3, 60), mode=st.sampled_from(["time-slicing", "mps"]))
def test_replicas_rule_matches_the_device_plugin(replicas, mode):
    out = run([dict(name="p", nodes=["gpu-a"], sharing=mode, replicas=replicas)], {"gpu-a": node(gpus(H100, 1))})
    valid = replicas >= 2 and (mode == "time-slicing" or replicas <= 48)
    assert (out["errors"] == []) is valid, out["errors"]


def test_filters_through_the_filter_plugin():
    f = F.FilterModule().filters()
    k8s = {"resources": [{"metadata": {"name": "gpu-a", "labels": {"x": "y"}}, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
                          "status": {"allocatable": {"nvidia.com/gpu": "1"}}}, {"metadata": {"name": "cpu"}}]}
    nodes = f["gpu_pools_nodes"](k8s, [{"host": "h1", "node": "gpu-a", "gpus": gpus(T4, 1)}])
    assert nodes["gpu-a"]["host"] == "h1" and nodes["cpu"]["host"] == "" and nodes["gpu-a"]["labels"] == {"x": "y"}
    plan = f["gpu_pools_plan"](nodes, [ts()], mig_config=MIG_CONFIG)
    data = f["gpu_pools_config_map"](plan["config_map"])
    assert sorted(data) == ["default", "notebooks"]
    assert yaml.safe_load(data["notebooks"])["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert f["gpu_pools_shared_resources"]({"nvidia.com/gpu": 2}, {"replicas": 3}) == {"nvidia.com/gpu": 6}
    assert f["gpu_pools_shared_resources"]({"nvidia.com/gpu": 2}, None) == {"nvidia.com/gpu": 2}


def test_mig_roll_plans_a_forced_sharing_change_with_replicated_target():
    from ansible_collections.gpuops.provision.plugins.module_utils import _mig_roll as R
    facts = {"node": "gpu-a", "selected": "all-disabled", "skip": False, "unavailable": False, "found": True,
             "failed": False, "msg": "", "plannable": True, "mig_manager": "", "backend": "nvml",
             "advertised": {"nvidia.com/gpu": 2}}
    check = {"changed": False, "gpus": [{"index": i, "mig_capable": True, "before": {"mig_mode": {"current": "disabled"}}}
                                        for i in range(2)]}
    plain = R.node_plan(facts, check)
    assert plain["changed"] is False and plain["target"] == {"nvidia.com/gpu": 2}
    forced = R.node_plan(facts, check, force=True, sharing={"replicas": 4, "rename_by_default": True})
    assert forced["changed"] is True and forced["target"] == {"nvidia.com/gpu.shared": 8}
    # The wait counts the renamed shared resource the device plugin advertises.
    assert R.advertised_resources({"nvidia.com/gpu.shared": "8", "cpu": "8", "nvidia.com/other": "1"}) == {"nvidia.com/gpu.shared": 8}


def test_filters_are_registered_and_documented():
    import os  # pylint: disable=import-outside-toplevel
    filters = F.FilterModule().filters()
    assert sorted(filters) == ["gpu_pools_config_map", "gpu_pools_nodes", "gpu_pools_plan", "gpu_pools_previous_labels",
                               "gpu_pools_shared_resources"]
    assert filters["gpu_pools_previous_labels"]({"nvidia.com/device-plugin.config": "default", "x": "y"},
                                                {"nvidia.com/device-plugin.config": "nb", "gone": "1"}) == {
        "gone": None, "nvidia.com/device-plugin.config": "default"}
    assert filters["gpu_pools_previous_labels"]({"a": "b"}, None) == {}
    for name in filters:
        with open(os.path.join(os.path.dirname(F.__file__), name + ".yml"), encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
        assert doc["DOCUMENTATION"]["name"] == name and set(doc) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}
