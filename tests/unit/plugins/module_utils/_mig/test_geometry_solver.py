# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Placement solver and target validation (plugins/module_utils/_mig/geometry.py) for every modelled GPU.

The profile tables come from gpusim's data module (lab/gpusim/gpusim/models.py, imported by path, as a test
fixture only). The cross-check enumerates every packing of non-overlapping placements independently of the
solver and compares, for every profile multiset, "some packing has exactly these profiles" with the solver.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import sys
from collections import Counter

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._mig import geometry as m

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 5))


def _load_models():
    path = os.path.join(ROOT, "lab", "gpusim", "gpusim", "models.py")
    spec = importlib.util.spec_from_file_location("gpusim_models_for_tests", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


MODELS = _load_models()
MIG_MODELS = sorted(name for name, model in MODELS.MODELS.items() if model.mig_capable)


def table_for(model_name):
    model = MODELS.MODELS[model_name]
    profiles = []
    for p in model.gi_profiles:
        name = m.gi_profile_name(p.slices, p.memory_mib, model.memory_mib * 1024 * 1024, p.suffix)
        profiles.append(m.Profile(name, p.id, p.slices, [(s, p.size) for s in p.starts], p.instances, p.memory_mib))
    return m.ProfileTable(profiles)


def test_every_mig_model_is_covered():
    assert set(MIG_MODELS) >= {"NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A30", "NVIDIA H100 80GB HBM3",
                               "NVIDIA H100 NVL", "NVIDIA H200"}


@pytest.mark.parametrize("model_name", MIG_MODELS)
def test_names_match_gpusim(model_name):
    model = MODELS.MODELS[model_name]
    assert sorted(table_for(model_name).names()) == sorted(MODELS.gi_name(model, p) for p in model.gi_profiles)


A100 = "NVIDIA A100-SXM4-40GB"


def placements_of(table, request):
    groups, placed = m.validate_target(table, request)
    return sorted((prof.name, pl) for (prof, _sizes), pl in zip(groups, placed))


def test_order_dependent_case_is_solved_with_explicit_placements():
    # NVML auto-placement in the order 1g,1g,2g,3g fails on A100 (reference/mig.md P11); the solver must not.
    got = placements_of(table_for(A100), {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1})
    assert [p for n, p in got if n == "3g.20gb"] == [(4, 4)]
    assert [p for n, p in got if n == "2g.10gb"][0][0] in (0, 2)
    _assert_disjoint([p for _n, p in got])


def _assert_disjoint(placements):
    used = set()
    for s, z in placements:
        cells = set(range(s, s + z))
        assert not used & cells
        used |= cells


def test_acceptance_layout_on_a100():
    got = placements_of(table_for(A100), {"3g.20gb": 1, "2g.10gb": 2})
    assert got == [("2g.10gb", (0, 2)), ("2g.10gb", (2, 2)), ("3g.20gb", (4, 4))]


@pytest.mark.parametrize("model_name,request_,reason", [
    (A100, {"3g.20gb": 2, "1g.5gb": 1}, "need 9 memory slices but the GPU has 8"),
    (A100, {"1g.5gb": 8}, "8 x 1g.5gb requested but this GPU allows at most 7"),
    (A100, {"4g.20gb": 1, "2g.10gb": 2}, "no non-overlapping placement"),
    (A100, {"1g.5gb": 7, "1g.5gb+me": 1}, "no non-overlapping placement"),   # no 1g fits memory slice 7
    (A100, {"1g.5gb+me": 2}, "at most 1"),
    (A100, {"3g.40gb": 1}, "unknown profile(s) 3g.40gb; this GPU offers 1g.5gb"),
    (A100, {"5c.7g.40gb": 1}, "5-slice compute instance is not possible"),
    ("NVIDIA A30", {"3g.12gb": 1}, "unknown profile"),
    ("NVIDIA A30", {"2g.12gb": 2, "1g.6gb": 1}, "need 5 memory slices but the GPU has 4"),
    ("NVIDIA H100 80GB HBM3", {"7g.80gb": 1, "1g.10gb": 1}, "need 9 memory slices"),
    ("NVIDIA H200", {"1g.35gb": 4, "1g.18gb": 1}, "need 9 memory slices"),
])
def test_impossible_layouts_say_why(model_name, request_, reason):
    with pytest.raises(m.MigError) as err:
        m.validate_target(table_for(model_name), request_)
    assert reason in str(err.value)


@pytest.mark.parametrize("model_name", MIG_MODELS)
def test_full_gpu_and_all_1g_layouts(model_name):
    table = table_for(model_name)
    full = max(table.profiles, key=lambda p: p.memory_slices)
    assert placements_of(table, {full.name: 1}) == [(full.name, (0, table.memory_slices))]
    one = [p for p in table.profiles if p.slices == 1 and p.memory_slices == 1 and not p.aliases and "+" not in p.name][0]
    got = placements_of(table, {one.name: one.max_count})
    assert len(got) == one.max_count
    _assert_disjoint([p for _n, p in got])


def test_compute_instances_pack_like_mig_parted():
    table = table_for(A100)
    groups = m.resolve_target(table, {"1c.2g.10gb": 2, "1c.3g.20gb": 4, "2c.7g.40gb": 1, "4c.7g.40gb": 1, "1c.7g.40gb": 1})
    got = sorted((p.name, sizes) for p, sizes in groups)
    # Two 1c fit one 2g GI; four 1c need two 3g GIs (3 + 1); 4c+2c+1c share one 7g GI.
    assert got == [("2g.10gb", (1, 1)), ("3g.20gb", (1,)), ("3g.20gb", (1, 1, 1)), ("7g.40gb", (4, 2, 1))]
    assert m.counts_of_groups(groups) == {"1c.2g.10gb": 2, "1c.3g.20gb": 4, "4c.7g.40gb": 1, "2c.7g.40gb": 1, "1c.7g.40gb": 1}


def test_nvml_name_is_accepted_as_alias():
    p = m.Profile("1g.10gb", 15, 1, [(0, 2), (2, 2), (4, 2), (6, 2)], 4, aliases=("1g.10gb", "1g.9gb"))
    table = m.ProfileTable([p])
    assert p.aliases == ("1g.9gb",)
    assert table.get("1g.9gb") is p
    assert m.counts_of_groups(m.resolve_target(table, {"1g.9gb": 2})) == {"1g.10gb": 2}


# --- independent exhaustive cross-check ---------------------------------------------------------------

def all_packings(table):
    """Every set of pairwise non-overlapping (profile, placement) choices, enumerated without the solver."""
    choices = [(p.name, pl) for p in table.profiles for pl in p.placements]
    found = set()

    def rec(start, used, chosen):
        found.add(tuple(sorted(Counter(n for n, _pl in chosen).items())))
        for i in range(start, len(choices)):
            name, (s, z) = choices[i]
            cells = frozenset(range(s, s + z))
            if used & cells:
                continue
            rec(i + 1, used | cells, chosen + [choices[i]])

    rec(0, frozenset(), [])
    return found


@pytest.mark.parametrize("model_name", MIG_MODELS)
def test_solver_agrees_with_exhaustive_search_for_every_multiset(model_name):
    table = table_for(model_name)
    packable = all_packings(table)
    names = [p.name for p in table.profiles]
    ranges = [range(0, table.get(n).max_count + 2) for n in names]  # one past the limit on purpose
    checked = feasible = 0
    for counts in itertools.product(*ranges):
        if sum(c * table.get(n).memory_slices for n, c in zip(names, counts)) > table.memory_slices + 2:
            continue
        request = dict((n, c) for n, c in zip(names, counts) if c)
        if not request:
            continue
        within_limits = all(c <= table.get(n).max_count for n, c in request.items())
        # nvml.h *_SLICE_ALL_ME: a +me.all instance "prevents allocation of all but _NO_ME profiles".
        me_all = sum(c for n, c in request.items() if n.endswith("+me.all"))
        me_all_ok = me_all == 0 or (me_all == 1 and all(n.endswith(("+me.all", "-me")) for n in request))
        expected = within_limits and me_all_ok and tuple(sorted(request.items())) in packable
        try:
            groups, placed = m.validate_target(table, request)
        except m.MigError:
            assert not expected, "solver rejected a packable layout %s" % request
        else:
            assert expected, "solver accepted an impossible layout %s" % request
            _assert_disjoint(placed)
            for (prof, _sizes), pl in zip(groups, placed):
                assert pl in prof.placements
            assert Counter(p.name for p, _sizes in groups) == Counter(request)
            feasible += 1
        checked += 1
    assert checked > 50 and feasible > 20


def test_solver_respects_occupied_slices():
    table = table_for(A100)
    three = table.get("3g.20gb")
    # With a 3g already at 0 only the placement at 4 remains.
    assert m.solve_placements([("3g", three.placements)], occupied=[(0, 4)]) == [(4, 4)]
    assert m.solve_placements([("3g", three.placements)] * 2, occupied=[(2, 1)]) is None
