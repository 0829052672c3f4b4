# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The usage advice (issue 43): each rule with its exact output, the thresholds at both sides, refusals."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from ansible_collections.gpuops.provision.plugins.module_utils._k8s import gpu_pools
from ansible_collections.gpuops.provision.plugins.module_utils._mig import geometry
from ansible_collections.gpuops.provision.plugins.module_utils._usage import advice as A

H100 = "NVIDIA H100 80GB HBM3"
H100_MIB = 81559.0


def dev(host="n1", gpu="0", model=H100, sm=(0.30, 0.40, 0.60), mem=(0.20, 0.22, 0.25), fb_max=18432.0, total=H100_MIB,
        hours=168.0, pods=None, profile=None, concurrent=1, util=(90.0, 100.0, 100.0)):
    return {"host": host, "gpu": gpu, "uuid": "GPU-%s-%s" % (host, gpu), "model": model, "mig_profile": profile,
            "gi_id": "1" if profile else None, "hours": hours,
            "sm_active": dict(zip(A.STATS, sm)), "sm_occupancy": {"mean": 0.1, "p95": 0.2, "max": 0.3},
            "dram_active": {"mean": 0.05, "p95": 0.1, "max": 0.2}, "memory_used": dict(zip(A.STATS, mem)),
            "fb_used_mib": {"mean": fb_max / 2, "p95": fb_max * 0.9, "max": fb_max}, "fb_total_mib": total,
            "gpu_util": dict(zip(A.STATS, util)) if util else None, "pods": pods or [], "max_concurrent_pods": concurrent}


FIGURES = {"gpus": 1, "hours_min": 168.0, "sm_active_mean": 0.30, "sm_active_p95": 0.40, "sm_occupancy_p95": 0.2,
           "dram_active_p95": 0.1, "memory_used_p95": 0.22, "fb_total_mib": H100_MIB, "peak_workload_mib": 18432.0,
           "max_concurrent_pods": 1, "gpu_util_mean": 90.0}


def test_inference_node_at_18_gb_gets_two_3g_instances_with_its_figures_and_rule():
    out = A.advise("infer", [dev()])
    assert out == {
        "name": "infer", "nodes": ["n1"], "figures": FIGURES, "thresholds": A.DEFAULTS, "devices": ["n1 GPU 0"],
        "advice": "mig", "action": "partition with MIG", "rule": "mig",
        "reason": "NVIDIA H100 80GB HBM3: 2 x 3g.40gb per GPU: the smallest plain profile of >= 2 compute slices holding "
                  "the largest workload's peak 18432 MiB + 20 % headroom = 22118 MiB, as many as fit",
        "mig_config": {"version": "v1", "mig-configs": {"infer": [
            {"devices": "all", "device-filter": "0x233010DE", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]}},
        "pool": {"name": "infer", "nodes": ["n1"], "sharing": "mig", "mig_config": "infer"},
    }


def test_the_mig_outputs_are_what_gpu_pools_and_mig_reconfigure_accept():
    out = A.advise("infer", [dev()])
    entries = geometry.parse_config(out["mig_config"], "infer")
    assert entries[0]["mig_devices"] == {"3g.40gb": 2} and entries[0]["device_filter"] == [(0x233010DE,)]
    pool, errors = gpu_pools.normalize(out["pool"], 0)
    assert errors == [] and pool["mig_config"] == "infer"


def test_low_compute_need_and_small_headroom_give_2g_instances():
    out = A.advise("infer", [dev(sm=(0.1, 0.2, 0.3))], {"headroom": 0.1})
    assert out["mig_config"]["mig-configs"]["infer"][0]["mig-devices"] == {"2g.20gb": 3}
    # 18432 x 1.1 = 20275 MiB <= 20 x 1024; 20 % headroom (22118 MiB) no longer fits 2g.20gb.
    assert A.advise("infer", [dev(sm=(0.1, 0.2, 0.3))])["mig_config"]["mig-configs"]["infer"][0]["mig-devices"] == {"3g.40gb": 2}


def test_never_1g_by_default_but_on_request():
    small = dev(sm=(0.05, 0.1, 0.2), mem=(0.1, 0.16, 0.2), fb_max=4000.0)
    assert A.advise("p", [small])["mig_config"]["mig-configs"]["p"][0]["mig-devices"] == {"2g.20gb": 3}
    assert A.advise("p", [small], {"min_slices": 1})["mig_config"]["mig-configs"]["p"][0]["mig-devices"] == {"1g.10gb": 7}


def test_a_workload_needing_26_gb_never_gets_a_10_gb_instance():
    out = A.advise("p", [dev(sm=(0.05, 0.1, 0.2), mem=(0.1, 0.3, 0.35), fb_max=26 * 1024.0)], {"min_slices": 1, "headroom": 0})
    assert out["mig_config"]["mig-configs"]["p"][0]["mig-devices"] == {"3g.40gb": 2}


def test_compute_need_from_p95_sm_activity_counts_slices():
    # p95 0.5 of 7 slices = 3.5 -> 4 slices: 4g.40gb fits once, so MIG would not share it.
    out = A.advise("p", [dev(sm=(0.3, 0.5, 0.6))])
    assert out["advice"] == "whole"
    assert out["reason"] == ("not shared: time-slicing: mean SM activity 30.0 % > 8.0 % or p95 memory used 22.0 % > 15.0 %; "
                             "mig: NVIDIA H100 80GB HBM3: 4g.40gb, the smallest profile that holds 22118 MiB and 4 compute "
                             "slices, fits once per GPU: MIG would not share it")
    assert out["pool"] == {"name": "p", "nodes": ["n1"], "sharing": "exclusive"} and out["mig_config"] is None
    # exactly 2/7 is 2 slices, not 3
    assert A._compute_slices(dev(sm=(0.1, 2 / 7.0, 0.5)), 7) == 2
    assert A._compute_slices(dev(sm=(0.0, 0.0, 0.0)), 7) == 1


def test_a_mig_instance_counts_its_own_slices():
    assert A._compute_slices(dev(sm=(0.5, 0.5, 0.5), profile="3g.40gb"), 7) == 2
    assert A._compute_slices(dev(sm=(0.5, 0.9, 0.9), profile="3g.40gb"), 7) == 3


def test_notebooks_share_by_time_slicing_with_replicas_from_the_peak_memory():
    out = A.advise("nb", [dev(sm=(0.05, 0.6, 0.95), mem=(0.05, 0.12, 0.14), fb_max=10000.0)])
    assert out["advice"] == "time-slicing" and out["rule"] == "time-slicing" and out["action"] == "share by time-slicing"
    assert out["pool"] == {"name": "nb", "nodes": ["n1"], "sharing": "time-slicing", "replicas": 6}
    assert out["reason"] == ("mean SM activity 5.0 % <= 8.0 % and p95 memory used 12.0 % <= 15.0 %; replicas = min(8, "
                             "floor(81559 MiB / (10000 MiB peak x 1.20 headroom))) = 6")
    assert out["mig_config"] is None
    assert gpu_pools.normalize(out["pool"], 0)[1] == []


def test_replicas_are_capped_and_the_pods_peak_wins_over_the_device():
    pods = [{"namespace": "a", "pod": "x", "container": "c", "fb_used_max_mib": 40000.0},
            {"namespace": "a", "pod": "y", "container": "c", "fb_used_max_mib": 100.0}]
    d = dev(sm=(0.05, 0.2, 0.3), mem=(0.05, 0.12, 0.14), fb_max=1.0, pods=pods)
    out = A.advise("nb", [d])
    assert out["figures"]["peak_workload_mib"] == 40000.0
    # 81559 / 48000 = 1 replica: no time-slicing; MIG then (4g.40gb holds 48000 MiB? no: 7g.80gb, once) -> whole
    assert out["advice"] == "whole"
    assert "time-slicing: mean SM activity 5.0 % <= 8.0 % and p95 memory used 12.0 % <= 15.0 %; replicas = min(8, " \
           "floor(81559 MiB / (40000 MiB peak x 1.20 headroom))) = 1, fewer than 2" in out["reason"]
    tiny = A.advise("nb", [dev(sm=(0.05, 0.2, 0.3), mem=(0.05, 0.12, 0.14), fb_max=10.0)], {"max_replicas": 3})
    assert tiny["pool"]["replicas"] == 3


def test_zero_peak_memory_shares_with_the_most_replicas():
    assert A.advise("idle", [dev(sm=(0, 0, 0), mem=(0, 0, 0), fb_max=0.0)])["pool"]["replicas"] == 8


@pytest.mark.parametrize("sm, mem, reason", [
    ((0.9, 0.97, 1.0), (0.2, 0.22, 0.3), "p95 SM activity 97.0 % >= 85.0 %: saturated, do not share; add GPUs"),
    ((0.1, 0.2, 0.3), (0.8, 0.85, 0.9), "p95 memory used 85.0 % >= 85.0 %: saturated, do not share; add GPUs"),
    ((0.8, 0.85, 0.9), (0.8, 0.9, 0.9), "p95 SM activity 85.0 % >= 85.0 % and p95 memory used 90.0 % >= 85.0 %: "
                                        "saturated, do not share; add GPUs"),
])
def test_saturated_training_adds_capacity(sm, mem, reason):
    out = A.advise("train", [dev(sm=sm, mem=mem)])
    assert (out["advice"], out["action"], out["rule"], out["reason"]) == ("saturated", "add capacity", "saturated", reason)
    assert out["pool"] == {"name": "train", "nodes": ["n1"], "sharing": "exclusive"} and out["mig_config"] is None


def test_just_below_saturation_is_not_saturated():
    assert A.advise("p", [dev(sm=(0.5, 0.8499, 0.9), mem=(0.5, 0.8499, 0.9))])["advice"] == "whole"


def test_share_thresholds_at_both_sides():
    at = dev(sm=(0.08, 0.3, 0.5), mem=(0.1, 0.15, 0.15), fb_max=8000.0)
    assert A.advise("p", [at])["advice"] == "time-slicing"
    assert A.advise("p", [dev(sm=(0.0801, 0.3, 0.5), mem=(0.1, 0.15, 0.15), fb_max=8000.0)])["advice"] == "mig"
    assert A.advise("p", [dev(sm=(0.08, 0.3, 0.5), mem=(0.1, 0.1501, 0.2), fb_max=8000.0)])["advice"] == "mig"


def test_gpu_util_is_reported_beside_and_never_decides():
    busy_flag = A.advise("p", [dev(sm=(0.05, 0.1, 0.2), mem=(0.05, 0.1, 0.1), fb_max=5000.0, util=(100.0, 100.0, 100.0))])
    no_util = A.advise("p", [dev(sm=(0.05, 0.1, 0.2), mem=(0.05, 0.1, 0.1), fb_max=5000.0, util=None)])
    assert busy_flag["advice"] == no_util["advice"] == "time-slicing"
    assert busy_flag["figures"]["gpu_util_mean"] == 100.0 and no_util["figures"]["gpu_util_mean"] is None


def test_gpu_without_mig_is_kept_whole_naming_why():
    out = A.advise("l40s", [dev(model="NVIDIA L40S", total=46068.0)])
    assert out["reason"] == ("not shared: time-slicing: mean SM activity 30.0 % > 8.0 % or p95 memory used 22.0 % > 15.0 %; "
                             "mig: NVIDIA L40S has no documented MIG profiles (plugins/module_utils/_mig/models.py)")


def test_no_profile_holds_the_workload():
    out = A.advise("p", [dev(sm=(0.3, 0.4, 0.5), mem=(0.3, 0.5, 0.6), fb_max=70000.0)])
    assert out["advice"] == "whole"
    assert out["reason"].endswith("mig: no NVIDIA H100 80GB HBM3 profile of at least 3 compute slices holds 84000 MiB "
                                  "(the largest workload's peak 70000 MiB + 20 % headroom)")


def test_instances_must_cover_the_pods_seen_at_once():
    out = A.advise("p", [dev(concurrent=3)])
    assert out["advice"] == "whole"
    assert out["reason"].endswith("mig: 2 MIG instances would not hold the 3 pods seen at once")
    assert A.advise("p", [dev(concurrent=2)])["advice"] == "mig"


def test_a_pool_of_two_models_gets_one_entry_each_and_counts_gpus_once():
    a100 = dev(host="n2", model="NVIDIA A100-SXM4-40GB", total=40960.0, fb_max=8000.0)
    # the pool's largest workload sizes every model's instances: the scheduler may place it on any of them
    out = A.advise("mixed", [dev(fb_max=8000.0), dev(gpu="1", fb_max=8000.0), a100])
    assert out["mig_config"]["mig-configs"]["mixed"] == [
        {"devices": "all", "device-filter": "0x20B010DE", "mig-enabled": True, "mig-devices": {"3g.20gb": 2}},
        {"devices": "all", "device-filter": "0x233010DE", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]
    assert out["nodes"] == ["n1", "n2"] and out["figures"]["gpus"] == 3
    assert out["figures"]["fb_total_mib"] == 40960.0 and out["figures"]["max_concurrent_pods"] == 3


def test_one_name_several_pci_ids_filters_on_all_of_them():
    assert A.documented_model("NVIDIA A100-PCIE-40GB")[0] == ["0x20B110DE", "0x20F110DE"]
    out = A.advise("p", [dev(model="NVIDIA A100 PCIe 40GB", total=40960.0, fb_max=8000.0)])
    assert out["mig_config"]["mig-configs"]["p"][0]["device-filter"] == ["0x20B110DE", "0x20F110DE"]
    geometry.parse_config(out["mig_config"])


@pytest.mark.parametrize("name, found", [
    ("NVIDIA H100 80GB HBM3", "0x233010DE"), ("NVIDIA-H100-80GB-HBM3", "0x233010DE"), ("NVIDIA A30", "0x20B710DE"),
    ("NVIDIA H200", "0x233510DE"), ("NVIDIA A100 80GB PCIe", "0x20B510DE"), ("NVIDIA L40S", None), ("H200 NVL", "0x233B10DE"),
])
def test_documented_model_matches_dcgm_product_names(name, found):
    got = A.documented_model(name)
    assert (got[0][0] if got else None) == found


def test_fit_count_uses_placements():
    table = A.documented_model(H100)[1]
    assert [A.fit_count(table, n) for n in ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")] == [7, 3, 2, 1, 1]


def test_too_little_data_is_refused_naming_each_gpu():
    with pytest.raises(A.AdviceError) as e:
        A.advise("p", [dev(hours=48.0), dev(gpu="1", hours=168.0), dev(gpu="2", hours=143.9, profile="3g.40gb")])
    assert str(e.value) == ("p: too little data to advise: n1 GPU 0 observed 48.0 h; n1 GPU 2 MIG 3g.40gb (GI 1) observed "
                            "143.9 h (at least 144 hours are needed; widen the window or wait until Prometheus holds them)")
    assert A.advise("p", [dev(hours=144.0)])["advice"] == "mig"
    assert A.advise("p", [dev(hours=24.0)], {"min_hours": 24})["advice"] == "mig"


@pytest.mark.parametrize("devices, message", [
    ([], "p: no GPU figures to advise on"),
    ("x", "p: no GPU figures to advise on"),
    (["x"], "figures[0]: a GPU's figures are a mapping, got 'x'"),
    ([dict(dev(), host="")], "figures[0] ( GPU 0): host must be a non-empty string, got ''"),
    ([dict(dev(), model=None)], "figures[0] (n1 GPU 0): model must be a non-empty string, got None"),
    ([dict(dev(), gpu=0)], "figures[0] (n1 GPU 0): gpu must be a non-empty string, got 0"),
    ([dict(dev(), hours="1")], "n1 GPU 0: hours must be a number, got '1'"),
    ([dict(dev(), hours=True)], "n1 GPU 0: hours must be a number, got True"),
    ([dict(dev(), hours=float("nan"))], "n1 GPU 0: hours must be a number, got nan"),
    ([dict(dev(), fb_total_mib=0)], "n1 GPU 0: fb_total_mib must be above 0, got 0"),
    ([dict(dev(), sm_active=None)], "n1 GPU 0: no sm_active figures"),
    ([dict(dev(), memory_used={"mean": 0.1, "p95": 0.1})], "n1 GPU 0: memory_used.max must be a number, got None"),
    ([dict(dev(), pods=[{"pod": "x"}])], "n1 GPU 0: pods[].fb_used_max_mib must be a number, got None"),
])
def test_bad_figures_name_host_gpu_and_reason(devices, message):
    with pytest.raises(A.AdviceError) as e:
        A.advise("p", devices)
    assert str(e.value) == message


@pytest.mark.parametrize("overrides, message", [
    ({"bogus": 1}, "unknown threshold(s) bogus (known: headroom, max_replicas, min_hours, min_slices, saturated_memory, "
                   "saturated_sm, share_memory, share_sm)"),
    ({"share_sm": 0}, "thresholds: share_sm must be a ratio above 0 and at most 1, got 0"),
    ({"saturated_sm": 1.5}, "thresholds: saturated_sm must be a ratio above 0 and at most 1, got 1.5"),
    ({"share_memory": "x"}, "thresholds: share_memory must be a number, got 'x'"),
    ({"share_sm": 0.9}, "thresholds: share_sm (0.9) must be below saturated_sm (0.85)"),
    ({"share_memory": 0.85}, "thresholds: share_memory (0.85) must be below saturated_memory (0.85)"),
    ({"headroom": -0.1}, "thresholds: headroom must be >= 0, got -0.1"),
    ({"min_hours": 0}, "thresholds: min_hours must be above 0, got 0"),
    ({"min_slices": 0}, "thresholds: min_slices must be a whole number >= 1, got 0"),
    ({"min_slices": True}, "thresholds: min_slices must be a whole number >= 1, got True"),
    ({"max_replicas": 1}, "thresholds: max_replicas must be a whole number >= 2, got 1"),
    ({"max_replicas": 2.0}, "thresholds: max_replicas must be a whole number >= 2, got 2.0"),
])
def test_bad_thresholds_are_refused(overrides, message):
    with pytest.raises(A.AdviceError) as e:
        A.check_thresholds(overrides)
    assert str(e.value) == message


def test_thresholds_none_keeps_the_default_and_edges_are_accepted():
    t = A.check_thresholds({"share_sm": None, "saturated_sm": 1, "headroom": 0, "min_slices": 1, "max_replicas": 2})
    assert t == dict(A.DEFAULTS, saturated_sm=1, headroom=0, min_slices=1, max_replicas=2)
    assert A.check_thresholds(None) == A.DEFAULTS


def test_group_by_node_and_by_pool():
    devs = [dev(host="b"), dev(host="a"), dev(host="b", gpu="1")]
    assert {k: [d["gpu"] for d in v] for k, v in A.group(devs).items()} == {"a": ["0"], "b": ["0", "1"]}
    assert list(A.group(devs)) == ["a", "b"]
    assert {k: len(v) for k, v in A.group(devs, {"p": ["a", "b"]}).items()} == {"p": 3}
    with pytest.raises(A.AdviceError, match=r"^pool p: no GPU figures for node c \(no dcgm-exporter series with that Hostname\)$"):
        A.group(devs, {"p": ["a", "c"]})
    with pytest.raises(A.AdviceError, match=r"^node a is in pools p and q$"):
        A.group(devs, {"p": ["a"], "q": ["a"]})
    for bad in ([], "a", [""], [1]):
        with pytest.raises(A.AdviceError, match=r"^pool p: nodes must be a non-empty list of node names, got "):
            A.group(devs, {"p": bad})


def test_advise_all_in_name_order():
    out = A.advise_all([dev(host="b", sm=(0.9, 0.9, 0.9)), dev(host="a")])
    assert [(a["name"], a["advice"]) for a in out] == [("a", "mig"), ("b", "saturated")]
    pooled = A.advise_all([dev(host="b"), dev(host="a")], {"infer": ["a", "b"]}, {"headroom": 0.1})
    assert [(a["name"], a["nodes"], a["thresholds"]["headroom"]) for a in pooled] == [("infer", ["a", "b"], 0.1)]


_ratio = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@given(sm=st.tuples(_ratio, _ratio, _ratio).map(sorted), mem=st.tuples(_ratio, _ratio, _ratio).map(sorted),
       fb=st.floats(min_value=0.0, max_value=H100_MIB), model=st.sampled_from([H100, "NVIDIA A30", "NVIDIA L40S", "NVIDIA H200"]))
def test_property_every_advice_is_applicable_and_consistent(sm, mem, fb, model):
    out = A.advise("p", [dev(sm=sm, mem=mem, fb_max=fb, model=model)])
    assert out["advice"] in ("saturated", "time-slicing", "mig", "whole")
    pool, errors = gpu_pools.normalize(out["pool"], 0)
    assert errors == []
    if out["advice"] == "saturated":
        assert sm[1] >= 0.85 or mem[1] >= 0.85
    else:
        assert sm[1] < 0.85 and mem[1] < 0.85
    if out["advice"] == "time-slicing":
        assert sm[0] <= 0.08 and mem[1] <= 0.15 and 2 <= pool["replicas"] <= 8
        assert pool["replicas"] * fb * 1.2 <= H100_MIB
    if out["advice"] == "mig":
        (entry,) = geometry.parse_config(out["mig_config"], "p")
        (name, count), = entry["mig_devices"].items()
        _c, g, gb, attrs = geometry.parse_profile_name(name)
        # never 1g by default, the workload fits with its headroom, and the layout is placeable
        assert g >= 2 and attrs == "" and gb * 1024 >= fb * 1.2 and count >= 2
        geometry.validate_target(A.documented_model(model)[1], entry["mig_devices"])
    else:
        assert out["mig_config"] is None


def test_proposal_merges_the_pools_and_the_mig_configurations_with_all_disabled():
    infer = A.advise("infer", [dev()])
    nb = A.advise("nb", [dev(host="n2", sm=(0.05, 0.6, 0.95), mem=(0.05, 0.12, 0.14), fb_max=10000.0)])
    out = A.proposal([infer, nb])
    assert out == {
        "pools": [{"name": "infer", "nodes": ["n1"], "sharing": "mig", "mig_config": "infer"},
                  {"name": "nb", "nodes": ["n2"], "sharing": "time-slicing", "replicas": 6}],
        "mig_config": {"version": "v1", "mig-configs": {
            "all-disabled": [{"devices": "all", "mig-enabled": False}],
            "infer": [{"devices": "all", "device-filter": "0x233010DE", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]}},
        "summary": ["infer (n1): mig, partition with MIG (rule mig)", "nb (n2): time-slicing, share by time-slicing (rule time-slicing)"],
    }
    assert A.proposal([], "off")["mig_config"] == {"version": "v1", "mig-configs": {"off": [{"devices": "all", "mig-enabled": False}]}}
    # What the gpu_pools role's plan is given: the pools and that document, no error.
    nodes = {n: {"labels": {}, "taints": [], "allocatable": {}, "host": n,
                 "gpus": [{"index": 0, "model": H100, "mig_capable": True}]} for n in ("n1", "n2")}
    assert gpu_pools.plan(out["pools"], nodes, out["mig_config"])["errors"] == []


@pytest.mark.parametrize("advices, message", [
    ({"name": "x"}, r"^advice must be a list \(gpu_usage_info's advice\), got \{'name': 'x'\}$"),
    ([{"name": "x"}], r"^an advice without name and pool: \{'name': 'x'\}$"),
    ([{"pool": {}}], r"^an advice without name and pool: \{'pool': \{\}\}$"),
    ([{"name": "all-disabled", "pool": {"name": "all-disabled"}}],
     r"^pool all-disabled: its name is the MIG configuration all-disabled already holds$"),
])
def test_proposal_refuses_what_is_not_an_advice(advices, message):
    with pytest.raises(A.AdviceError, match=message):
        A.proposal(advices)


def test_a_vanishing_peak_gives_the_most_replicas_not_an_overflow():
    # total / (1e-308 x 1.2) overflows to infinity; replicas are capped before they become a whole number.
    out = A.advise("nb", [dev(sm=(0.01, 0.02, 0.03), mem=(0.0, 0.0, 0.0), fb_max=1e-308)])
    assert out["pool"] == {"name": "nb", "nodes": ["n1"], "sharing": "time-slicing", "replicas": 8}
