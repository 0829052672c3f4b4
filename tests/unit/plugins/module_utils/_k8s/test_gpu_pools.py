# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/_k8s/gpu_pools.py: pool validation, the device plugin documents, per-node labels, taints and resources."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, strategies as st

from ansible_collections.gpuops.provision.plugins.plugin_utils._role_filters import gpu_pools as F
from ansible_collections.gpuops.provision.plugins.module_utils._k8s import gpu_pools as P

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
    f = F.filters()
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
    from ansible_collections.gpuops.provision.plugins.module_utils._k8s import mig_roll as R
    facts = {"node": "gpu-a", "selected": "all-disabled", "skip": False, "unavailable": False, "found": True,
             "failed": False, "msg": "", "plannable": True, "mig_manager": "", "mig_manager_pod": "", "mig_manager_config_error": "",
             "backend": "nvml",
             "advertised": {"nvidia.com/gpu": 2}}
    check = {"changed": False, "gpus": [{"index": i, "mig_capable": True, "before": {"mig_mode": {"current": "disabled"}}}
                                        for i in range(2)]}
    plain = R.node_plan(facts, check)
    assert plain["changed"] is False and plain["target"] == {"nvidia.com/gpu": 2}
    forced = R.node_plan(facts, check, force=True, sharing={"replicas": 4, "rename_by_default": True})
    assert forced["changed"] is True and forced["target"] == {"nvidia.com/gpu.shared": 8}
    # The wait counts the renamed shared resource the device plugin advertises.
    assert R.advertised_resources({"nvidia.com/gpu.shared": "8", "cpu": "8", "nvidia.com/other": "1"}) == {"nvidia.com/gpu.shared": 8}


def test_filters_are_registered():
    filters = F.filters()
    assert sorted(filters) == ["gpu_pools_config_map", "gpu_pools_nodes", "gpu_pools_plan", "gpu_pools_previous_labels",
                               "gpu_pools_shared_resources", "gpu_pools_summary", "gpu_pools_untolerating"]
    assert filters["gpu_pools_previous_labels"]({"nvidia.com/device-plugin.config": "default", "x": "y"},
                                                {"nvidia.com/device-plugin.config": "nb", "gone": "1"}) == {
        "gone": None, "nvidia.com/device-plugin.config": "default"}
    assert filters["gpu_pools_previous_labels"]({"a": "b"}, None) == {}


# --- Exact messages and whole records (tools/mutation.toml: every message names pool or node, value and reason) ---

KNOWN = ("name, nodes, selector, sharing, mig_config, replicas, rename_by_default, fail_requests_greater_than_one, labels, taints, "
         "device_plugin_config")
DEFAULT_TAINT = [{"key": "gpuops.io/gpu-pool", "value": "p", "effect": "NoSchedule"}]


def test_normalize_fills_defaults_into_a_whole_pool():
    pool, errors = P.normalize(dict(name="p", nodes=["a"], sharing="exclusive"), 0)
    assert errors == []
    assert pool == dict(name="p", nodes=["a"], sharing="exclusive", mig_config="all-disabled", labels={}, taints=DEFAULT_TAINT)
    pool, errors = P.normalize(dict(name="p", selector={"x": "y"}, sharing="time-slicing", replicas=2, taints=[]), 1, "off")
    assert errors == []
    assert pool == dict(name="p", selector={"x": "y"}, sharing="time-slicing", replicas=2, mig_config="off", labels={}, taints=[])
    pool, errors = P.normalize(dict(name="p", nodes=["a"], sharing="mps", replicas=2, mig_config="mine"), 0)
    assert errors == [] and pool["mig_config"] == "mine"
    pool, errors = P.normalize(dict(name="p", nodes=["a"], sharing="mig", mig_config="all-3g"), 0)
    assert errors == [] and pool["mig_config"] == "all-3g"


@pytest.mark.parametrize("raw, errors", [
    ("x", ["pool #3: a pool is a mapping, got 'x'"]),
    (dict(nodes=["a"], sharing="exclusive"),
     ["pool #3: name must be a label value (letters, digits, '-', '_', '.'; 63 at most), got None"]),
    (dict(name="", nodes=["a"], sharing="exclusive"),
     ["pool #3: name must be a label value (letters, digits, '-', '_', '.'; 63 at most), got ''"]),
    (dict(name=7, nodes=["a"], sharing="exclusive"),
     ["pool 7: name must be a label value (letters, digits, '-', '_', '.'; 63 at most), got 7"]),
    (dict(name="a" * 64, nodes=["a"], sharing="exclusive"),
     ["pool %s: name must be a label value (letters, digits, '-', '_', '.'; 63 at most), got '%s'" % ("a" * 64, "a" * 64),
      "pool %s: taint gpuops.io/gpu-pool has the invalid value '%s'" % ("a" * 64, "a" * 64)]),
    (dict(name="-a", nodes=["a"], sharing="exclusive"),
     ["pool -a: name must be a label value (letters, digits, '-', '_', '.'; 63 at most), got '-a'",
      "pool -a: taint gpuops.io/gpu-pool has the invalid value '-a'"]),
    (dict(name="p", nodes=["a"], sharing="exclusive", size=1, colour="red"),
     ["pool p: unknown key(s) colour, size (known: %s)" % KNOWN]),
    (dict(name="p", nodes=["a"]), ["pool p: sharing must be one of mig, time-slicing, mps, exclusive, got None"]),
    (dict(name="p", nodes=["a"], sharing="shared"), ["pool p: sharing must be one of mig, time-slicing, mps, exclusive, got 'shared'"]),
    (dict(name="p", sharing="exclusive"), ["pool p: give either nodes (a list of node names) or selector (node labels), not neither"]),
    (dict(name="p", nodes=["a"], selector={}, sharing="exclusive"),
     ["pool p: give either nodes (a list of node names) or selector (node labels), not both"]),
    (dict(name="p", nodes="a", sharing="exclusive"), ["pool p: nodes must be a list of node names"]),
    (dict(name="p", nodes=["a", ""], sharing="exclusive"), ["pool p: nodes must be a list of node names"]),
    (dict(name="p", nodes=["a", 1], sharing="exclusive"), ["pool p: nodes must be a list of node names"]),
    (dict(name="p", selector=["a"], sharing="exclusive"), ["pool p: selector must be a mapping of node labels to values"]),
    (dict(name="p", nodes=["a"], sharing="time-slicing", replicas=1),
     ["pool p: time-slicing needs replicas, a whole number >= 2 (the device plugin refuses fewer), got 1"]),
    (dict(name="p", nodes=["a"], sharing="mps", replicas=True),
     ["pool p: mps needs replicas, a whole number >= 2 (the device plugin refuses fewer), got True"]),
    (dict(name="p", nodes=["a"], sharing="mps"),
     ["pool p: mps needs replicas, a whole number >= 2 (the device plugin refuses fewer), got None"]),
    (dict(name="p", nodes=["a"], sharing="time-slicing", replicas=2.5),
     ["pool p: time-slicing needs replicas, a whole number >= 2 (the device plugin refuses fewer), got 2.5"]),
    (dict(name="p", nodes=["a"], sharing="exclusive", replicas=2), ["pool p: replicas applies to time-slicing and mps pools only, not exclusive"]),
    (dict(name="p", nodes=["a"], sharing="mig", mig_config="c", replicas=0), ["pool p: replicas applies to time-slicing and mps pools only, not mig"]),
    (dict(name="p", nodes=["a"], sharing="exclusive", rename_by_default=False),
     ["pool p: rename_by_default applies to time-slicing and mps pools only"]),
    (dict(name="p", nodes=["a"], sharing="exclusive", fail_requests_greater_than_one="yes"),
     ["pool p: fail_requests_greater_than_one applies to time-slicing and mps pools only",
      "pool p: fail_requests_greater_than_one must be true or false"]),
    (dict(name="p", nodes=["a"], sharing="mps", replicas=2, rename_by_default=1), ["pool p: rename_by_default must be true or false"]),
    (dict(name="p", nodes=["a"], sharing="mig"),
     ["pool p: a mig pool needs mig_config, the name of a configuration in the mig-parted config"]),
    (dict(name="p", nodes=["a"], sharing="exclusive", labels=["a"]), ["pool p: labels must be a mapping of label keys to values"]),
    (dict(name="p", nodes=["a"], sharing="exclusive", labels={"a b": "x", "ok/": "y"}),
     ["pool p: 'a b' is not a valid label key", "pool p: 'ok/' is not a valid label key"]),
    (dict(name="p", nodes=["a"], sharing="exclusive", labels={"gpuops.io/gpu-pool": "x"}),
     ["pool p: label gpuops.io/gpu-pool is set by the pool itself"]),
    (dict(name="p", nodes=["a"], sharing="exclusive", labels={"team": 5, "b": "x" * 64, "c": "x" * 63, "d": ""}),
     ["pool p: label team has the invalid value 5 (63 characters at most: letters, digits, '-', '_', '.')",
      "pool p: label b has the invalid value '%s' (63 characters at most: letters, digits, '-', '_', '.')" % ("x" * 64)]),
    (dict(name="p", nodes=["a"], sharing="exclusive", taints={"key": "k"}), ["pool p: taints must be a list of {key, value, effect}"]),
    (dict(name="p", nodes=["a"], sharing="exclusive", taints=["k", {"effect": "NoSchedule"}, {"key": "a b", "effect": "x"},
                                                              {"key": "k", "value": "a b", "effect": "Never"}]),
     ["pool p: taint 'k' needs a valid key", "pool p: taint {'effect': 'NoSchedule'} needs a valid key",
      "pool p: taint {'key': 'a b', 'effect': 'x'} needs a valid key",
      "pool p: taint k has the effect 'Never'; use one of NoSchedule, PreferNoSchedule, NoExecute",
      "pool p: taint k has the invalid value 'a b'"]),
    (dict(name="p", nodes=["a"], sharing="exclusive", taints=[{"key": "k", "value": "", "effect": "NoExecute"},
                                                              {"key": "k", "effect": "PreferNoSchedule"},
                                                              {"key": "k", "value": "-x", "effect": "NoSchedule"}]),
     ["pool p: taint k has the invalid value '-x'"]),
    (dict(name="p", nodes=["a"], sharing="exclusive", device_plugin_config="a b"),
     ["pool p: device_plugin_config 'a b' is not a valid ConfigMap key and label value"]),
    (dict(name="p", nodes=["a"], sharing="exclusive", device_plugin_config=3),
     ["pool p: device_plugin_config 3 is not a valid ConfigMap key and label value"]),
    (dict(name="p", nodes=["a"], sharing="exclusive", device_plugin_config="x" * 64),
     ["pool p: device_plugin_config '%s' is not a valid ConfigMap key and label value" % ("x" * 64)]),
])
def test_normalize_errors_exactly(raw, errors):
    assert P.normalize(raw, 3)[1] == errors


def test_normalize_default_taint_and_mig_config_for_a_pool_without_name():
    pool, errors = P.normalize(dict(nodes=["a"], sharing="time-slicing", replicas=2), 0, "off")
    assert len(errors) == 1
    assert pool == dict(nodes=["a"], sharing="time-slicing", replicas=2, mig_config="off", labels={},
                        taints=[{"key": "gpuops.io/gpu-pool", "value": "", "effect": "NoSchedule"}])
    pool, errors = P.normalize(dict(name="p", nodes=["a"], sharing="odd"), 0)
    assert "mig_config" not in pool


def test_plan_pool_level_errors_exactly():
    assert P.plan("x", {}) == {"errors": ["pools must be a list, got 'x'"], "config_map": {}, "nodes": {}}
    # Every error at once: a bad MIG strategy is not lost behind the pools that are not a list.
    assert P.plan({"a": 1}, {}, strategy="x")["errors"] == [
        "MIG strategy must be one of none, single, mixed, got 'x'", "pools must be a list, got {'a': 1}"]
    assert run([ts()], {"gpu-a": node(gpus(T4, 1))}, strategy="x")["errors"] == ["MIG strategy must be one of none, single, mixed, got 'x'"]
    out = run([ts(), ts(nodes=["gpu-b"])], {"gpu-a": node(gpus(T4, 1)), "gpu-b": node(gpus(T4, 1))})
    assert out["errors"] == ["pool notebooks: defined twice"]
    same = run([ts(name="a", device_plugin_config="k"), ts(name="b", nodes=["gpu-b"], device_plugin_config="k")],
               {"gpu-a": node(gpus(T4, 1)), "gpu-b": node(gpus(T4, 1))})
    assert same["errors"] == [] and sorted(same["config_map"]) == ["default", "k"]
    assert same["nodes"]["gpu-b"]["config_key"] == "k"
    other = run([ts(name="a", device_plugin_config="k"), ts(name="b", nodes=["gpu-b"], replicas=3, device_plugin_config="k")],
                {"gpu-a": node(gpus(T4, 1)), "gpu-b": node(gpus(T4, 1))})
    assert other["errors"] == ["pool b: device_plugin_config k is used by another pool with other settings"]
    excl = run([dict(name="e", nodes=["gpu-a"], sharing="exclusive", device_plugin_config="mine")], {"gpu-a": node(gpus(T4, 1))})
    assert excl["errors"] == ["pool e: sharing exclusive uses the default device plugin configuration default, not mine"]
    ok = run([dict(name="e", nodes=["gpu-a"], sharing="exclusive", device_plugin_config="base")], {"gpu-a": node(gpus(T4, 1))},
             default_config="base")
    assert ok["errors"] == [] and ok["nodes"]["gpu-a"]["config_key"] == "base" and sorted(ok["config_map"]) == ["base"]
    dflt = run([ts(device_plugin_config="base")], {"gpu-a": node(gpus(T4, 1))}, default_config="base")
    assert dflt["errors"] == ["pool notebooks: device_plugin_config base is the default configuration (no sharing)"]
    assert run([dict(name="i", nodes=["gpu-a"], sharing="mig", mig_config="nope")], {"gpu-a": node(gpus(H100, 1))})["errors"] == [
        "pool i: MIG configuration nope is not in the mig-parted config"]
    assert run([ts(mig_config="nope")], {"gpu-a": node(gpus(T4, 1))})["errors"] == [
        "pool notebooks: MIG configuration nope is not in the mig-parted config"]
    assert run([dict(name="i", nodes=["gpu-a"], sharing="mig", mig_config="all-disabled")], {"gpu-a": node(gpus(H100, 1))})["errors"] == [
        "pool i: MIG configuration all-disabled disables MIG; a mig pool needs MIG devices"]
    assert run([ts(mig_config="all-3g")], {"gpu-a": node(gpus(T4, 1))})["errors"] == [
        "pool notebooks: a time-slicing pool needs MIG disabled on its GPUs, and MIG configuration all-3g enables it"]
    # Without a mig-parted config the MIG configuration cannot be checked: no error either way.
    assert run([ts(mig_config="nope"), dict(name="i", nodes=["gpu-b"], sharing="mig", mig_config="nope")],
               {"gpu-a": node(gpus(T4, 1)), "gpu-b": node(gpus(H100, 1))}, mig_config=None)["errors"] == []
    assert run([dict(name="i", nodes=["gpu-a"], sharing="mig", mig_config="nope")], {"gpu-a": node(gpus(H100, 1))},
               mig_config=None, strategy="single")["errors"] == []


def test_mig_strategy_single_with_one_profile_and_mixed_disabled_entries():
    cfg = {"mig-configs": {"c": [{"devices": [0], "mig-enabled": False, "mig-devices": {"a": 1, "b": 1}},
                                 {"devices": [1], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
                           "off": [{"devices": "all", "mig-enabled": False}, {"devices": [1]}]}}
    mig = [dict(name="i", nodes=["gpu-a"], sharing="mig", mig_config="c")]
    assert run(mig, {"gpu-a": node(gpus(H100, 1))}, mig_config=cfg, strategy="single")["errors"] == []
    assert run(mig, {"gpu-a": node(gpus(H100, 1))}, mig_config=cfg, strategy="none")["errors"] == [
        "pool i: MIG strategy none advertises no MIG devices; a mig pool needs single or mixed"]
    assert run([ts(mig_config="off")], {"gpu-a": node(gpus(T4, 1))}, mig_config=cfg)["errors"] == []
    assert P.disables_mig(cfg, "off") is True and P.disables_mig(cfg, "c") is False and P.disables_mig(cfg, "x") is False
    assert P.disables_mig(None, "off") is False


@pytest.mark.parametrize("cc, replicas, errors", [
    ("7.0", 16, []),
    ("7.0", 17, ["node gpu-a: GPU 0 (X): pool m asks for 17 MPS replicas; an MPS server takes at most 16 clients on it"]),
    ("7.4", 17, ["node gpu-a: GPU 0 (X): pool m asks for 17 MPS replicas; an MPS server takes at most 16 clients on it"]),
    ("7.5", 48, []),
    ([7, 5], 48, []),
    ((7, 4), 17, ["node gpu-a: GPU 0 (X): pool m asks for 17 MPS replicas; an MPS server takes at most 16 clients on it"]),
    ("7.5", 49, ["node gpu-a: GPU 0 (X): pool m asks for 49 MPS replicas; an MPS server takes at most 48 clients on it"]),
    ("8", 48, []),
    (8.6, 48, []),
    ("7", 17, ["node gpu-a: GPU 0 (X): pool m asks for 17 MPS replicas; an MPS server takes at most 16 clients on it"]),
    ("6.9", 2, ["node gpu-a: GPU 0 (X) has compute capability 6.9; pool m (MPS) needs Volta (7.0) or later"]),
    ([6, 1], 2, ["node gpu-a: GPU 0 (X) has compute capability 6.1; pool m (MPS) needs Volta (7.0) or later"]),
    ("", 2, ["node gpu-a: GPU 0 (X): compute capability unknown; pool m (MPS) needs Volta (7.0) or later"]),
    ("sm", 2, ["node gpu-a: GPU 0 (X): compute capability unknown; pool m (MPS) needs Volta (7.0) or later"]),
    ("7.x", 2, ["node gpu-a: GPU 0 (X): compute capability unknown; pool m (MPS) needs Volta (7.0) or later"]),
    ([7, 5, 0], 2, ["node gpu-a: GPU 0 (X): compute capability unknown; pool m (MPS) needs Volta (7.0) or later"]),
])
def test_mps_compute_capability_boundaries(cc, replicas, errors):
    gpu = {"index": 0, "model": "X", "compute_capability": cc, "mig_capable": False}
    out = run([dict(name="m", nodes=["gpu-a"], sharing="mps", replicas=replicas)], {"gpu-a": node([gpu])})
    assert out["errors"] == errors


def test_gpu_without_model_and_mig_capability_messages():
    out = run([dict(name="i", nodes=["gpu-a"], sharing="mig", mig_config="all-3g")],
              {"gpu-a": node([{"index": 1}, dict(H100, index=2), {"index": 3, "model": "T", "mig_capable": False}])})
    assert out["errors"] == ["node gpu-a: GPU 1 (unknown model) does not support MIG; pool i is a mig pool",
                             "node gpu-a: GPU 3 (T) does not support MIG; pool i is a mig pool"]


def test_plan_whole_records_and_result():
    current = [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]
    nodes = {"gpu-a": {"labels": {"team": "x", "gpuops.io/gpu-pool": "mps"}, "taints": current, "host": "ha", "gpus": gpus(V100, 2),
                       "allocatable": {"nvidia.com/gpu.shared": "8", "cpu": "4", "nvidia.com/x": "0", "nvidia.com/y": "a"}},
             "gpu-b": node(gpus(H100, 1), labels={"nvidia.com/device-plugin.config": "default"}),
             "gpu-c": None}
    pools = [dict(name="mps", nodes=["gpu-a"], sharing="mps", replicas=4, rename_by_default=True, labels={"tier": "a"}),
             dict(name="inf", nodes=["gpu-b"], sharing="mig", mig_config="all-3g",
                  taints=[{"key": "gpu", "value": 1, "effect": "NoExecute"}, {"key": "t", "effect": "NoSchedule"}])]
    out = run(pools, nodes)
    assert out == {
        "errors": [],
        "config_map": {"default": {"version": "v1", "flags": {"migStrategy": "mixed"}},
                       "mps": {"version": "v1", "flags": {"migStrategy": "mixed"}, "sharing": {"mps": {
                           "renameByDefault": True, "failRequestsGreaterThanOne": True,
                           "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}},
        "nodes": {
            "gpu-a": {"node": "gpu-a", "host": "ha", "pool": "mps", "sharing": "mps", "mig_config": "all-disabled", "config_key": "mps",
                      "labels": {"tier": "a", "gpuops.io/gpu-pool": "mps", "gpuops.io/gpu-sharing": "mps", "gpuops.io/gpu-profile": "mps-4"},
                      "config_labels": {"nvidia.com/device-plugin.config": "mps"},
                      "taints": current + [{"key": "gpuops.io/gpu-pool", "value": "mps", "effect": "NoSchedule"}],
                      "pool_taints": [{"key": "gpuops.io/gpu-pool", "value": "mps", "effect": "NoSchedule"}],
                      "taints_changed": True,
                      "label_patch": {"tier": "a", "gpuops.io/gpu-sharing": "mps", "gpuops.io/gpu-profile": "mps-4"},
                      "sharing_spec": {"replicas": 4, "rename_by_default": True}, "expected": {"nvidia.com/gpu.shared": 8}, "roll": True},
            "gpu-b": {"node": "gpu-b", "host": "h", "pool": "inf", "sharing": "mig", "mig_config": "all-3g", "config_key": "default",
                      "labels": {"gpuops.io/gpu-pool": "inf", "gpuops.io/gpu-sharing": "mig", "gpuops.io/gpu-profile": "all-3g"},
                      "config_labels": {"nvidia.com/device-plugin.config": "default"},
                      "taints": [{"key": "gpu", "value": "1", "effect": "NoExecute"}, {"key": "t", "effect": "NoSchedule"}],
                      # The pool's own taints, as node_taints writes them (values as strings).
                      "pool_taints": [{"key": "gpu", "value": "1", "effect": "NoExecute"}, {"key": "t", "effect": "NoSchedule"}],
                      "taints_changed": True,
                      "label_patch": {"gpuops.io/gpu-pool": "inf", "gpuops.io/gpu-sharing": "mig", "gpuops.io/gpu-profile": "all-3g"},
                      "sharing_spec": {}, "expected": None, "roll": False}},
        "pools": {"mps": ["gpu-a"], "inf": ["gpu-b"]},
    }
    # At its pool: labels and taints in place, the plugin advertising the replicated count: nothing to change.
    at = dict(nodes["gpu-a"], labels=dict(out["nodes"]["gpu-a"]["labels"], **out["nodes"]["gpu-a"]["config_labels"]),
              taints=[dict(t) for t in reversed(out["nodes"]["gpu-a"]["taints"])])
    rec = run(pools[:1], {"gpu-a": at})["nodes"]["gpu-a"]
    assert rec["taints_changed"] is False and rec["label_patch"] == {} and rec["roll"] is False
    at["taints"] = current + [{"key": "gpuops.io/gpu-pool", "value": "other", "effect": "NoSchedule"}]
    assert run(pools[:1], {"gpu-a": at})["nodes"]["gpu-a"]["taints_changed"] is True
    # Exclusive: whole GPUs, the profile says so, and a stale count rolls.
    ex = run([dict(name="e", nodes=["gpu-a"], sharing="exclusive")],
             {"gpu-a": node(gpus(T4, 3), labels={"nvidia.com/device-plugin.config": "default"}, allocatable={"nvidia.com/gpu": "3"})})
    rec = ex["nodes"]["gpu-a"]
    assert rec["expected"] == {"nvidia.com/gpu": 3} and rec["roll"] is False and rec["labels"]["gpuops.io/gpu-profile"] == "exclusive"
    assert rec["sharing_spec"] == {} and ex["config_map"] == {"default": {"version": "v1", "flags": {"migStrategy": "mixed"}}}


def test_render_config_fail_requests_and_rename():
    base = dict(sharing="time-slicing", replicas=3)
    assert P.render_config(base, "none") == {"version": "v1", "flags": {"migStrategy": "none"}, "sharing": {"timeSlicing": {
        "renameByDefault": False, "resources": [{"name": "nvidia.com/gpu", "replicas": 3}]}}}
    assert P.render_config(dict(base, rename_by_default=True, fail_requests_greater_than_one=True))["sharing"] == {"timeSlicing": {
        "renameByDefault": True, "failRequestsGreaterThanOne": True, "resources": [{"name": "nvidia.com/gpu", "replicas": 3}]}}
    assert P.render_config(dict(base, sharing="mps", fail_requests_greater_than_one=False))["sharing"] == {"mps": {
        "renameByDefault": False, "failRequestsGreaterThanOne": False, "resources": [{"name": "nvidia.com/gpu", "replicas": 3}]}}
    assert P.render_config({"sharing": "mig"}) == {"version": "v1", "flags": {"migStrategy": "mixed"}}


def test_share_resources_and_profile_edges():
    assert P.share_resources({"nvidia.com/gpu.shared": 2, "nvidia.com/gpu": 1}, {"replicas": 3, "rename_by_default": True}) == {
        "nvidia.com/gpu.shared": 5}
    assert P.share_resources({"nvidia.com/gpu": 2}, {"rename_by_default": True}) == {"nvidia.com/gpu.shared": 2}
    assert P.share_resources({"x": 1}, {"replicas": 2}) == {"x": 1}
    assert P.share_resources(None, {"replicas": 2}) == {}
    assert P.profile({"sharing": "exclusive"}) == "exclusive"
    assert P.profile({"sharing": "mps", "replicas": 2}) == "mps-2"


def test_node_taints_and_same_taints_edges():
    cur = [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoExecute", "value": "v"}, {"key": "m", "effect": "NoSchedule"}]
    assert P.node_taints(cur, [{"key": "a", "effect": "NoExecute"}], managed_keys=("m",)) == [
        {"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoExecute"}]
    assert P.node_taints(None, None) == []
    assert P._same_taints([{"key": "a", "effect": "NoSchedule"}], [{"key": "a", "value": "", "effect": "NoSchedule"}]) is True
    assert P._same_taints([{"key": "a", "effect": "NoSchedule"}], [{"key": "b", "effect": "NoSchedule"}]) is False
    assert P._same_taints([{"key": "a", "value": "x", "effect": "NoSchedule"}], [{"key": "a", "effect": "NoSchedule"}]) is False
    assert P._same_taints([{"key": "a", "effect": "NoSchedule"}], [{"key": "a", "effect": "NoExecute"}]) is False
    assert P._same_taints([{"key": "a", "effect": "NoSchedule"}], None) is False
    assert P._same_taints(None, [{"key": "a", "effect": "NoSchedule"}]) is False


def test_node_inputs_whole():
    k8s = {"resources": [
        {"metadata": {"name": "gpu-a", "labels": {"x": "y"}}, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
         "status": {"allocatable": {"nvidia.com/gpu": "1"}}},
        {"metadata": {"name": "gpu-b"}, "spec": {}, "status": {}},
        {"metadata": {"name": "h2"}}]}
    hosts = [{"host": "h1", "node": "gpu-a", "gpus": [gpus(T4, 1)[0], "junk"]}, {"host": "h2", "gpus": gpus(V100, 1)}]
    assert P.node_inputs(k8s, hosts) == {
        "gpu-a": {"labels": {"x": "y"}, "taints": [{"key": "k", "effect": "NoSchedule"}], "allocatable": {"nvidia.com/gpu": "1"},
                  "host": "h1", "gpus": gpus(T4, 1)},
        "gpu-b": {"labels": {}, "taints": [], "allocatable": {}, "host": "", "gpus": []},
        "h2": {"labels": {}, "taints": [], "allocatable": {}, "host": "h2", "gpus": gpus(V100, 1)}}
    assert P.node_inputs(None, None) == {}


def test_errors_on_one_pool_or_node_do_not_stop_the_others():
    # A broken pool (not a mapping, nameless at #1, invalid) before a valid one: the valid one is still planned.
    out = run(["x", dict(nodes=["gone"], sharing="exclusive", taints=[]), ts(name="bad", nodes=["gpu-b"], replicas=1),
               ts(nodes=["gpu-z"])],
              {"gpu-a": node(gpus(T4, 1)), "gpu-b": node(gpus(T4, 1)), "gpu-z": node(gpus(T4, 1))})
    assert out["errors"] == ["pool #0: a pool is a mapping, got 'x'",
                             "pool #1: name must be a label value (letters, digits, '-', '_', '.'; 63 at most), got None",
                             "pool bad: time-slicing needs replicas, a whole number >= 2 (the device plugin refuses fewer), got 1"]
    assert sorted(out["config_map"]) == ["default", "notebooks"] and list(out["nodes"]) == ["gpu-z"]
    assert out["pools"] == {"bad": ["gpu-b"], "notebooks": ["gpu-z"]}
    # Node errors of every kind on nodes sorted before a good one.
    nodes = {"a1": node(gpus(T4, 1)), "a2": node(gpus(T4, 1), host=""), "a3": node([]),
             "a4": node([dict(P100, index=0)]), "a5": node(gpus(T4, 1), labels={"nvidia.com/device-plugin.config": "old"}),
             "zz": node(gpus(T4, 1))}
    pools = [dict(name="m", nodes=["a1", "a2", "a3", "a4", "zz"], sharing="mps", replicas=2),
             dict(name="e", nodes=["a1"], sharing="exclusive")]
    out = run(pools, nodes)
    assert out["errors"] == ["node a1: selected by more than one pool (m, e)",
                             "node a2: selected by pool m but no play host manages it (no GPU facts)",
                             "node a3: selected by pool m but has no GPU",
                             "node a4: GPU 0 (Tesla P100-PCIE-16GB) has compute capability 6.0; pool m (MPS) needs Volta (7.0) or later",
                             "node a5: is in no pool and selects device plugin configuration old, which this run would remove from the ConfigMap"]
    assert sorted(out["nodes"]) == ["a4", "zz"] and out["pools"] == {"m": ["a2", "a3", "a4", "zz"], "e": []}
    # Two missing nodes are both reported, in the pool's order.
    assert run([dict(name="e", nodes=["n2", "n1"], sharing="exclusive")], {})["errors"] == [
        "pool e: node n2 is not a Kubernetes node", "pool e: node n1 is not a Kubernetes node"]


def test_mig_strategy_single_refuses_two_profiles():
    cfg = {"mig-configs": {"two": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 4, "3g.40gb": 1}}]}}
    mig = [dict(name="i", nodes=["gpu-a"], sharing="mig", mig_config="two")]
    assert run(mig, {"gpu-a": node(gpus(H100, 1))}, mig_config=cfg, strategy="single")["errors"] == [
        "pool i: MIG strategy single advertises one MIG profile per node, and two mixes profiles"]
    assert run(mig, {"gpu-a": node(gpus(H100, 1))}, mig_config=cfg, strategy="mixed")["errors"] == []


def test_roll_compares_only_positive_nvidia_counts():
    labels = {"nvidia.com/device-plugin.config": "default"}
    pool = [dict(name="e", nodes=["gpu-a"], sharing="exclusive")]
    alloc = {"nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "0", "cpu": "4", "example.com/gpu": "2"}
    assert run(pool, {"gpu-a": node(gpus(T4, 1), labels=labels, allocatable=alloc)})["nodes"]["gpu-a"]["roll"] is False
    assert run(pool, {"gpu-a": node(gpus(T4, 1), labels=labels, allocatable={"nvidia.com/gpu": "2"})})["nodes"]["gpu-a"]["roll"] is True
    assert run(pool, {"gpu-a": node(gpus(T4, 1), labels=labels, allocatable={})})["nodes"]["gpu-a"]["roll"] is True


def test_strategy_reaches_every_document_and_the_sharing_comparison():
    pools = [ts(name="a", device_plugin_config="k"), ts(name="b", nodes=["gpu-b"], device_plugin_config="k")]
    out = run(pools, {"gpu-a": node(gpus(T4, 1)), "gpu-b": node(gpus(T4, 1))}, strategy="single")
    assert out["errors"] == []
    assert out["config_map"]["default"] == {"version": "v1", "flags": {"migStrategy": "single"}}
    assert out["config_map"]["k"]["flags"] == {"migStrategy": "single"}


def test_major_only_compute_capability_reads_as_minor_zero():
    gpu = {"index": 0, "model": "X", "compute_capability": "6", "mig_capable": False}
    assert run([dict(name="m", nodes=["gpu-a"], sharing="mps", replicas=2)], {"gpu-a": node([gpu])})["errors"] == [
        "node gpu-a: GPU 0 (X) has compute capability 6.0; pool m (MPS) needs Volta (7.0) or later"]


def test_a_taint_value_differs_from_none():
    assert P._same_taints([{"key": "a", "value": "XXXX", "effect": "NoSchedule"}], [{"key": "a", "effect": "NoSchedule"}]) is False


def test_disabled_config_is_the_target_of_sharing_pools():
    cfg = {"mig-configs": {"off": [{"devices": "all", "mig-enabled": False}]}}
    out = run([ts()], {"gpu-a": node(gpus(T4, 1))}, mig_config=cfg, disabled_config="off")
    assert out["errors"] == [] and out["nodes"]["gpu-a"]["mig_config"] == "off"


def test_a_pool_without_a_name_that_selects_a_node_is_an_error_not_a_crash():
    # It used to raise KeyError('name') while grouping the nodes by pool.
    out = P.plan([{"nodes": ["n"], "sharing": "exclusive"}], {"n": {"host": "h", "gpus": [{}]}})
    assert out["errors"] and all(e.startswith("pool #0: ") for e in out["errors"]), out["errors"]
    both = P.plan([{"nodes": ["n"], "sharing": "exclusive"}, {"name": "b", "nodes": ["n"], "sharing": "exclusive"}],
                  {"n": {"host": "h", "gpus": [{}]}})
    assert "node n: selected by more than one pool (one without a name, b)" in both["errors"]


def test_summary_says_per_node_pool_sharing_and_roll():
    def rec(pool, sharing, spec, roll, key="k", mig="m"):
        return {"pool": pool, "sharing": sharing, "sharing_spec": spec, "roll": roll, "config_key": key, "mig_config": mig}
    nodes = {"gpu-a": rec("notebooks", "time-slicing", {"replicas": 4, "rename_by_default": False}, True,
                          "notebooks", "all-disabled"),
             "gpu-b": rec("training", "mig", {}, False),
             "gpu-c": rec("batch", "exclusive", {}, True, "default", "all-disabled")}
    assert P.summary(nodes) == (
        "gpu-a: pool notebooks (time-slicing, 4 replicas), rolls to device plugin config notebooks and MIG config "
        "all-disabled; gpu-b: pool training (mig), sharing unchanged; gpu-c: pool batch (exclusive), rolls to device "
        "plugin config default and MIG config all-disabled")
    assert P.summary({}) == ""
    assert F.filters()["gpu_pools_summary"]({"nodes": {"gpu-b": nodes["gpu-b"]}}) == (
        "gpu-b: pool training (mig), sharing unchanged")
    assert F.filters()["gpu_pools_summary"](None) == ""


# --- the GPU Operator's tolerations of the pools' taints (issue 38, point 1) --------------------------------------

POOL_TAINT = {"key": "gpuops.io/gpu-pool", "value": "notebooks", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
POOL_TOLERATION = {"key": "gpuops.io/gpu-pool", "operator": "Exists", "effect": "NoSchedule"}


def daemonset(name, tolerations, selector=None, namespace="gpu-operator", rv="7"):
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": rv},
            "spec": {"template": {"spec": {"tolerations": tolerations,
                                           "nodeSelector": selector or {"nvidia.com/gpu.deploy.%s" % name: "true"}}}}}


@pytest.mark.parametrize("toleration,taint,want", [
    ({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, True),
    ({"key": "k", "operator": "Exists"}, {"key": "k", "value": "v", "effect": "NoExecute"}, True),          # no effect: all
    ({"key": "k", "operator": "Exists", "effect": "NoExecute"}, {"key": "k", "effect": "NoSchedule"}, False),
    ({"operator": "Exists"}, {"key": "any", "value": "v", "effect": "NoSchedule"}, True),                   # empty key + Exists
    ({"operator": "Equal", "value": "v"}, {"key": "any", "value": "v", "effect": "NoSchedule"}, False),     # empty key, Equal
    ({"key": "k", "value": "v", "effect": "NoSchedule"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, True),  # Equal default
    ({"key": "k", "value": "v"}, {"key": "k", "value": "w", "effect": "NoSchedule"}, False),
    ({"key": "k"}, {"key": "k", "effect": "NoSchedule"}, True),                                            # "" == no value
    ({"key": "j", "operator": "Exists"}, {"key": "k", "effect": "NoSchedule"}, False),
    ({"key": "k", "operator": "Bogus"}, {"key": "k", "effect": "NoSchedule"}, False),
])
def test_tolerates_follows_tolerates_taint(toleration, taint, want):
    assert P.tolerates(toleration, taint) is want


def test_untolerated_counts_only_the_effects_that_keep_a_daemonset_pod_off():
    soft = {"key": "x", "effect": "PreferNoSchedule"}
    hard = {"key": "y", "value": "1", "effect": "NoExecute"}
    assert P.untolerated([GPU_TOLERATION], [POOL_TAINT, soft, hard, dict(POOL_TAINT)]) == [POOL_TAINT, hard]
    assert P.untolerated(None, [soft]) == []
    assert P.with_tolerations([GPU_TOLERATION], [POOL_TAINT, dict(POOL_TAINT, value="other")]) == [GPU_TOLERATION, POOL_TOLERATION]
    assert P.with_tolerations(None, [hard]) == [{"key": "y", "operator": "Exists", "effect": "NoExecute"}]


def test_operator_tolerations_extend_the_cluster_policy_list_keeping_others():
    mine = {"key": "example.com/dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    policy = {"spec": {"daemonsets": {"tolerations": [GPU_TOLERATION, mine]}}}
    dsets = [daemonset("device-plugin", [GPU_TOLERATION]), daemonset("other", [], selector={"app": "x"})]
    nfd = [daemonset("nfd-worker", [GPU_TOLERATION], selector={}, namespace="nfd", rv="42")]
    out, errors = P.operator_tolerations([POOL_TAINT], "cluster-policy", policy, dsets, nfd)
    assert errors == []
    assert out == {"cluster_policy_tolerations": [GPU_TOLERATION, mine, POOL_TOLERATION],
                   "nfd_workers": [{"name": "nfd-worker", "namespace": "nfd", "resource_version": "42",
                                    "tolerations": [GPU_TOLERATION, POOL_TOLERATION]}],
                   "wait_taints": [POOL_TAINT], "operands": ["device-plugin"]}
    # An empty list means the assets' tolerations: the written list keeps nvidia.com/gpu.
    out = P.operator_tolerations([POOL_TAINT], "cluster-policy", {"spec": {}}, dsets, [])[0]
    assert out["cluster_policy_tolerations"] == [GPU_TOLERATION, POOL_TOLERATION] and out["nfd_workers"] == []
    # Tolerated already: nothing to write; nothing at all for a soft taint.
    policy = {"spec": {"daemonsets": {"tolerations": [GPU_TOLERATION, POOL_TOLERATION]}}}
    assert P.operator_tolerations([POOL_TAINT], "cp", policy, dsets, [])[0]["cluster_policy_tolerations"] is None
    out, errors = P.operator_tolerations([{"key": "x", "effect": "PreferNoSchedule"}], "", None, dsets, nfd)
    assert (out, errors) == ({"cluster_policy_tolerations": None, "nfd_workers": [], "wait_taints": [],
                              "operands": ["device-plugin"]}, [])


def test_a_taint_the_operator_cannot_be_made_to_tolerate_is_refused():
    dsets = [daemonset("device-plugin", [GPU_TOLERATION]), daemonset("dcgm-exporter", [GPU_TOLERATION]),
             daemonset("validator", [POOL_TOLERATION])]
    _out, errors = P.operator_tolerations([POOL_TAINT], "", None, dsets, [])
    assert errors == ["taint gpuops.io/gpu-pool=notebooks:NoSchedule would keep the GPU Operator's dcgm-exporter, "
                      "device-plugin off the pool's nodes (they do not tolerate it) and gpu_pools_cluster_policy is "
                      "empty, so the role leaves the ClusterPolicy alone; name the ClusterPolicy in "
                      "gpu_pools_cluster_policy, add the toleration to its spec.daemonsets.tolerations, or give the "
                      "pool other taints"]
    errors = P.operator_tolerations([POOL_TAINT], "cluster-policy", None, dsets, [])[1]
    assert len(errors) == 1 and "and ClusterPolicy cluster-policy was not found;" in errors[0]
    # Every operand tolerates it already (an operator configured by hand): no error without a ClusterPolicy.
    assert P.operator_tolerations([POOL_TAINT], "", None, [daemonset("device-plugin", [POOL_TOLERATION])], [])[1] == []
    assert P.operands_tolerate(dsets, ["device-plugin", "validator"], [POOL_TAINT]) == ["device-plugin"]
    assert P.operands_tolerate(dsets, ["validator"], [POOL_TAINT]) == []


def test_plan_names_the_pool_whose_taint_cannot_be_tolerated_and_hands_the_tolerations_on():
    dsets = [daemonset("device-plugin", [GPU_TOLERATION])]
    nodes = {"gpu-a": node(gpus(H100, 2)), "gpu-b": node(gpus(H100, 2))}
    operator = {"policy_name": "", "policy": None, "daemonsets": dsets, "nfd_workers": []}
    res = run([ts(), ts("idle", nodes=(), taints=[{"key": "idle", "effect": "NoExecute"}])], nodes, operator=operator)
    assert res["errors"] == [
        "pool notebooks: taint gpuops.io/gpu-pool=notebooks:NoSchedule would keep the GPU Operator's device-plugin off "
        "the pool's nodes (they do not tolerate it) and gpu_pools_cluster_policy is empty, so the role leaves the "
        "ClusterPolicy alone; name the ClusterPolicy in gpu_pools_cluster_policy, add the toleration to its "
        "spec.daemonsets.tolerations, or give the pool other taints"]
    operator = dict(operator, policy_name="cp", policy={"spec": {}})
    res = run([ts(), ts("quiet", nodes=("gpu-b",), taints=[])], nodes, operator=operator)
    assert res["errors"] == []
    assert res["operator"]["cluster_policy_tolerations"] == [GPU_TOLERATION, POOL_TOLERATION]
    assert res["operator"]["wait_taints"] == [POOL_TAINT] and res["operator"]["operands"] == ["device-plugin"]
    assert "operator" not in run([ts()], nodes)
    missing = run([ts()], nodes, operator=dict(operator, policy=None))["errors"]
    assert missing[0] == ("ClusterPolicy cp (gpu_pools_cluster_policy) was not found: the role points it at the device "
                          "plugin ConfigMap; name the GPU Operator's ClusterPolicy, or set it empty to leave the "
                          "ClusterPolicy alone")
    assert len(missing) == 2 and missing[1].startswith("pool notebooks: taint gpuops.io/gpu-pool=notebooks:NoSchedule")


def test_the_untolerating_filter_names_the_daemonsets_still_to_render():
    dsets = [daemonset("device-plugin", [GPU_TOLERATION]), daemonset("validator", [POOL_TOLERATION])]
    assert F.gpu_pools_untolerating(dsets, ["device-plugin", "validator"], [POOL_TAINT]) == ["device-plugin"]
    assert F.gpu_pools_untolerating(dsets, None, None) == []
