# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The product's documented MIG tables (module_utils/_mig/models.py) against gpusim's own (lab/gpusim/gpusim/models.py),
written separately: gpusim computes the profile names from memory sizes as go-nvlib does, the product spells them
from NVIDIA's documents, so a data error shows up here as a disagreement rather than agreeing by construction."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._drivers import versions
from ansible_collections.gpuops.provision.plugins.module_utils._mig import geometry, models as mig_models

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 5))


@pytest.fixture(scope="module")
def sim():
    path = os.path.join(ROOT, "lab", "gpusim", "gpusim", "models.py")
    spec = importlib.util.spec_from_file_location("_gpusim_models_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(mod)
    return mod


# Every MIG GPU NVIDIA ships (mig-parted config-default.yaml device filters, MIG User Guide), by PCI device id.
ISSUE_38 = {0x20B1, 0x20F3, 0x20F5, 0x20F6, 0x2322, 0x2324, 0x233A, 0x2329, 0x2342, 0x233D, 0x2348, 0x2901, 0x2941,
            0x3182, 0x31C2, 0x2BB5, 0x20B6}
BEFORE = {0x20B0, 0x20F1, 0x20B2, 0x20B5, 0x20B7, 0x2330, 0x2331, 0x2321, 0x2335, 0x233B}


def test_the_table_covers_every_mig_gpu():
    assert {k >> 16 for k in mig_models.MODELS} == ISSUE_38 | BEFORE
    for pci, model in mig_models.MODELS.items():
        versions.parse_driver_version(model["min_driver"])
        assert model["profiles"] and all(p["placements"] for p in model["profiles"]), hex(pci)


@pytest.mark.parametrize("pci", sorted(mig_models.MODELS), ids=lambda v: "0x%08X" % v)
def test_gpusim_serves_the_documented_profiles(sim, pci):
    models = [m for m in sim.MODELS.values() if m.pci_device_id == pci]
    assert len(models) == 1, "gpusim has no model (or more than one) with PCI id 0x%08X" % pci
    model = models[0]
    served = dict((sim.gi_name(model, p), p) for p in model.gi_profiles)
    documented = mig_models.MODELS[pci]["profiles"]
    assert sorted(served) == sorted(p["name"] for p in documented)
    for doc in documented:
        p = served[doc["name"]]
        got = (p.slices, p.instances, tuple((start, p.size) for start in p.starts), p.index)
        assert got == (doc["slices"], doc["max_count"], doc["placements"], doc["index"]), doc["name"]
        if doc["id"] is not None:  # an id NVIDIA does not publish is None in the product's table
            assert p.id == doc["id"], doc["name"]


def test_documented_tables_use_every_memory_slice_once_at_most():
    for pci, model in mig_models.MODELS.items():
        table = mig_models.documented_table(pci)
        assert table is not None
        for prof in table.profiles:
            assert all(start + size <= table.memory_slices for start, size in prof.placements), (hex(pci), prof.name)


def test_rtx_pro_6000_me_all_leaves_room_for_no_me_profiles_only():
    table = mig_models.documented_table(0x2BB510DE)
    geometry.validate_target(table, {"1g.24gb+me.all": 1, "1g.24gb-me": 3})
    with pytest.raises(geometry.MigError, match=r"1g\.24gb\+me\.all takes every media engine of the GPU, and only -me "
                       r"profiles can be created beside it \(nvml\.h NVML_GPU_INSTANCE_PROFILE_\*_ALL_ME\), "
                       r"not 1g\.24gb\+gfx"):
        geometry.validate_target(table, {"1g.24gb+me.all": 1, "1g.24gb+gfx": 1})
    with pytest.raises(geometry.MigError, match=r"at most one fits"):
        geometry.validate_target(table, {"1g.24gb+me.all": 1, "2g.48gb+me.all": 1})


def test_with_documented_counts_replaces_the_a30s_counts_only():
    live = geometry.ProfileTable([geometry.Profile("1g.6gb", 14, 1, [(s, 1) for s in range(4)], 7, 5836, (), 0),
                                  geometry.Profile("2g.12gb", 5, 2, [(0, 2), (2, 2)], 3, 11672, ("x",), 1),
                                  geometry.Profile("9g.99gb", 99, 1, [(0, 1)], 5, 1, (), 2)])
    fixed = mig_models.with_documented_counts("0x20B710DE", live)
    assert [(p.name, p.id, p.slices, p.placements, p.max_count, p.memory_mb, p.aliases, p.index) for p in fixed.profiles] == [
        ("1g.6gb", 14, 1, ((0, 1), (1, 1), (2, 1), (3, 1)), 4, 5836, (), 0),
        ("2g.12gb", 5, 2, ((0, 2), (2, 2)), 2, 11672, ("x",), 1),
        ("9g.99gb", 99, 1, ((0, 1),), 5, 1, (), 2)]           # not documented: NVML's count stays
    assert mig_models.with_documented_counts(0x233010DE, live) is live
    assert mig_models.with_documented_counts(0x12345678, live) is live


def test_disagreements_skip_ids_nvidia_does_not_publish():
    doc = mig_models.documented_table(0x2BB510DE)
    live = geometry.ProfileTable([geometry.Profile(p.name, 1000 + i, p.slices, p.placements, p.max_count, 0, (), p.index)
                                  for i, p in enumerate(doc.profiles)])
    assert mig_models.disagreements(doc, live, ["1g.24gb-me", "2g.48gb+gfx"]) == []
    assert mig_models.disagreements(doc, live, ["1g.24gb"]) == ["1g.24gb: id documented 14, NVML reports 1000"]


def test_me_all_rule_cases():
    geometry.check_me_all({"1g.24gb": 4, "2g.48gb+gfx": 0})
    geometry.check_me_all({"2g.48gb+me.all": 1, "1g.24gb-me": 2})
    with pytest.raises(geometry.MigError, match=r"^1g\.24gb\+me\.all: 2: one \+me\.all GPU instance holds every media engine"):
        geometry.check_me_all({"1g.24gb+me.all": 2})
    with pytest.raises(geometry.MigError, match=r"^2g\.48gb\+me\.all takes every media engine of the GPU, and only -me "
                       r"profiles can be created beside it .*, not 1g\.24gb, 1g\.24gb\+me$"):
        geometry.check_me_all({"2g.48gb+me.all": 1, "1g.24gb": 1, "1g.24gb+me": 1, "1g.24gb-me": 0})
