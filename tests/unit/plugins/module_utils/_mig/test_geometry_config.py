# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig-parted v1 document parsing, validation and entry selection (plugins/module_utils/_mig/geometry.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._mig import geometry as m

A100_40 = 0x20B010DE
H100 = 0x233010DE


def doc(configs):
    return {"version": "v1", "mig-configs": configs}


def test_parse_selected_config_normalizes_entries():
    entries = m.parse_config(doc({
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "mixed": [
            {"devices": [2, 0, 2], "mig-enabled": True, "mig-devices": {"3g.20gb": 1, "2g.10gb": 2, "1g.5gb": 0}},
            {"devices": "all", "device-filter": ["0x233010DE", "0x20B010DE:0x134F10DE"], "mig-enabled": True, "mig-devices": {}},
        ],
    }), "mixed")
    assert entries[0] == {"devices": [0, 2], "device_filter": None, "bad_filters": [], "mig_enabled": True, "mig_devices": {"3g.20gb": 1, "2g.10gb": 2}}
    assert entries[1]["device_filter"] == [(H100,), (A100_40, 0x134F10DE)]
    assert entries[1]["mig_devices"] == {}


def test_single_config_needs_no_selection():
    entries = m.parse_config(doc({"only": [{"devices": "all", "mig-enabled": False}]}))
    assert entries[0]["mig_enabled"] is False


@pytest.mark.parametrize("document,selected,fragment", [
    ({"version": "v2", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False}]}}, None, "unknown version"),
    (doc({"a": [], "b": []}), None, "choose one with 'selected'"),
    (doc({"a": [{"devices": "all", "mig-enabled": False}]}), "b", "'b' is not in mig-configs"),
    (doc({"a": []}), "a", "non-empty list"),
    ({"version": "v1", "mig-configs": {}, "extra": 1}, None, "unknown key(s) extra"),
    (doc({"a": [{"devices": "all", "mig-enabled": False, "mig-device": {}}]}), "a", "unknown key(s) mig-device"),
    (doc({"a": [{"devices": "some", "mig-enabled": False}]}), "a", "devices must be 'all' or a list"),
    (doc({"a": [{"devices": [True], "mig-enabled": False}]}), "a", "devices must be 'all' or a list"),
    (doc({"a": [{"devices": "all", "device-filter": 0x20B010DE, "mig-enabled": False}]}), "a", "a string or a list of strings"),
    (doc({"a": [{"mig-enabled": False}]}), "a", "missing required key 'devices'"),
    (doc({"a": [{"devices": "all"}]}), "a", "missing required key 'mig-enabled'"),
    (doc({"a": [{"devices": "all", "mig-enabled": "yes"}]}), "a", "must be true or false"),
    (doc({"a": [{"devices": "all", "mig-enabled": True}]}), "a", "'mig-devices' is missing"),
    (doc({"a": [{"devices": "all", "mig-enabled": False, "mig-devices": {"1g.5gb": 1}}]}), "a",
     "MIG devices included when 'mig-enabled' is false"),
    (doc({"a": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 0}}]}), "a", "no profile with a count > 0"),
    (doc({"a": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": -1}}]}), "a", "must be an integer >= 0"),
    (doc({"a": [{"devices": "all", "mig-enabled": True, "mig-devices": {"big": 1}}]}), "a", "'big' is not a MIG profile name"),
])
def test_invalid_documents_are_rejected_with_reason(document, selected, fragment):
    with pytest.raises(m.MigError) as err:
        m.parse_config(document, selected)
    assert fragment in str(err.value)


def test_entry_location_is_named_in_errors():
    with pytest.raises(m.MigError, match=r"devices\[1\]: unknown key"):
        m.parse_entries([{"devices": "all", "mig-enabled": False}, {"devices": "all", "mig-enabled": False, "x": 1}])


def test_select_entry_by_index_and_filter_last_match_wins():
    entries = m.parse_entries([
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}},
        {"devices": [1], "mig-enabled": False},
        {"devices": "all", "device-filter": "0x233010DE", "mig-enabled": True, "mig-devices": {"7g.80gb": 1}},
        {"devices": "all", "device-filter": "0x20B010DE:0x00000001", "mig-enabled": False},
    ])
    assert m.select_entry(entries, 0, A100_40, 0x134F10DE) is entries[0]
    assert m.select_entry(entries, 1, A100_40, 0x134F10DE) is entries[1]
    assert m.select_entry(entries, 2, H100, 0) is entries[2]
    # The subsystem part must match too when given.
    assert m.select_entry(entries, 3, A100_40, 0x00000001) is entries[3]
    assert m.select_entry(entries, 3, A100_40, 0x00000002) is entries[0]
    only_h100 = m.parse_entries([{"devices": "all", "device-filter": ["0x233010DE"], "mig-enabled": False}])
    assert m.select_entry(only_h100, 0, A100_40) is None


def test_check_entries_names_missing_gpu():
    entries = m.parse_entries([{"devices": [0, 4], "mig-enabled": False}])
    m.check_entries(entries, 5)
    with pytest.raises(m.MigError, match="GPU index 4 but this host has 2 GPU"):
        m.check_entries(entries, 2)


# mig-parted's parser accepts these documents (tests/lab/test_mig_parted_oracle.py asks it), so ours does too; on a
# host they would select no GPU (or every GPU, for the empty filter) without a word, so planning refuses them.
@pytest.mark.parametrize("document,fragment", [
    (doc({"a": [{"devices": [-1], "mig-enabled": False}]}), "GPU index -1 but this host has 2 GPU"),
    (doc({"a": [{"devices": "all", "device-filter": "20B0", "mig-enabled": False}]}), "device-filter '20B0' is not a PCI id"),
    (doc({"a": [{"devices": "all", "device-filter": ["0x20B010DE", "x"], "mig-enabled": False}]}), "device-filter 'x' is not a PCI id"),
    (doc({"a": [{"devices": "all", "device-filter": [], "mig-enabled": False}]}), "device-filter is empty"),
    (doc({"a": [{"devices": "all", "device-filter": "", "mig-enabled": False}]}), "device-filter is empty"),
])
def test_documents_mig_parted_accepts_are_refused_at_plan_time(document, fragment):
    entries = m.parse_config(document)
    with pytest.raises(m.MigError) as err:
        m.check_entries(entries, 2)
    assert fragment in str(err.value)


def test_empty_device_list_selects_no_gpu():
    entries = m.parse_config(doc({"a": [{"devices": [], "mig-enabled": False}]}))
    m.check_entries(entries, 2)
    assert m.select_entry(entries, 0, A100_40) is None


def test_filter_of_only_bad_ids_matches_nothing_as_in_mig_parted():
    # api/spec/v1/helpers.go MatchesDeviceFilter: a filter string that does not parse matches no GPU.
    entries = m.parse_entries([{"devices": "all", "device-filter": "20B0", "mig-enabled": False}])
    assert m.select_entry(entries, 0, A100_40) is None


@pytest.mark.parametrize("name,parsed", [
    ("1g.5gb", (None, 1, 5, "")),
    ("1g.5gb+me", (None, 1, 5, "+me")),
    ("1c.3g.20gb", (1, 3, 20, "")),
    ("1g.23gb+me.all", (None, 1, 23, "+me.all")),
    ("2g.24gb-me", (None, 2, 24, "-me")),
])
def test_profile_names(name, parsed):
    assert m.parse_profile_name(name) == parsed


@pytest.mark.parametrize("mem_mib,total_mib,gb", [
    (4864, 40537, 5), (9856, 40537, 10), (19968, 40537, 20), (40192, 40537, 40),   # A100-40GB
    (9984, 81559, 10), (20096, 81559, 20), (40448, 81559, 40), (81152, 81559, 80),  # H100 80GB
    (11008, 95830, 12), (22144, 95830, 24), (47488, 95830, 47), (95360, 95830, 94),  # H100 NVL
    (16384, 143771, 18), (33024, 143771, 35), (71168, 143771, 71), (143104, 143771, 141),  # H200
    (5836, 24576, 6), (11672, 24576, 12), (23344, 24576, 24),  # A30
])
def test_memory_names_follow_mig_parted(mem_mib, total_mib, gb):
    # Expected values are the names in the real -lgip outputs quoted in reference/mig.md.
    assert m.memory_size_gb(mem_mib, total_mib * 1024 * 1024) == gb


def test_ci_sizes_follow_go_nvlib_heuristic():
    allowed = dict((g, [c for c in range(1, 9) if m.ci_size_allowed(c, g)]) for g in (1, 2, 3, 4, 7))
    assert allowed == {1: [1], 2: [1, 2], 3: [1, 2, 3], 4: [1, 2, 4], 7: [1, 2, 3, 4, 7]}
    assert m.modelled_ci_placements(3, 7) == [(0, 3), (4, 3)]
    assert m.modelled_ci_placements(2, 7) == [(0, 2), (2, 2), (4, 2)]
    assert m.modelled_ci_placements(1, 3) == [(0, 1), (1, 1), (2, 1)]


def test_selection_notes_name_overlapping_entries_and_the_gpus_left_alone():
    """mig-parted applies the entries in order (cmd/nvidia-mig-parted/assert/assert.go
    WalkSelectedMigConfigForEachGPU): the last match wins, kept and named; unselected and non-MIG GPUs in one line."""
    entries = m.parse_entries([{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
                               {"devices": [0], "mig-enabled": False},
                               {"devices": "all", "device-filter": "0x233010DE", "mig-enabled": True,
                                "mig-devices": {"3g.40gb": 2}}])
    h100 = {"model": "NVIDIA H100 80GB HBM3", "pci_device_id": 0x233010DE, "pci_subsystem_id": 0x16C110DE, "mig_capable": True}
    a100 = {"model": "NVIDIA A100-SXM4-40GB", "pci_device_id": 0x20B010DE, "mig_capable": True}
    l40s = {"model": "NVIDIA L40S", "pci_device_id": 0x26B910DE, "mig_capable": False}
    gpus = [dict(h100, index=0), dict(a100, index=1), dict(l40s, index=2), dict(h100, index=3)]
    assert m.selection_notes(entries, gpus) == [
        "the configuration leaves 1 GPU(s) as they are: GPU 2 (NVIDIA L40S): no MIG",
        "GPU 0 (NVIDIA H100 80GB HBM3) is selected by entries 0, 1, 2; mig-parted applies the last one, entry 2",
        "GPU 3 (NVIDIA H100 80GB HBM3) is selected by entries 0, 2; mig-parted applies the last one, entry 2"]
    only = m.parse_entries([{"devices": [1], "mig-enabled": False}])
    assert m.selection_notes(only, gpus) == [
        "the configuration leaves 3 GPU(s) as they are: GPU 0 (NVIDIA H100 80GB HBM3): no entry selects it; "
        "GPU 2 (NVIDIA L40S): no entry selects it; GPU 3 (NVIDIA H100 80GB HBM3): no entry selects it"]
    assert m.selection_notes(only, [dict(a100, index=1)]) == []
