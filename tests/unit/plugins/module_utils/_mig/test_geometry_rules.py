# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""_mig/geometry.py rules that mutation testing (make mutation) found unpinned: exact messages (what, value, why), every field of
the returned records, and both sides of each boundary (device indexes, counts, slices, CI sizes)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._mig import geometry as m

ON = {"current": "enabled", "pending": "enabled"}
OFF = {"current": "disabled", "pending": "disabled"}
ENTRY_KEYS = "devices, device-filter, mig-enabled, mig-devices"


def a100():
    ones = [(i, 1) for i in range(7)]
    return m.ProfileTable([
        m.Profile("1g.5gb", 19, 1, ones, 7, 4864), m.Profile("1g.5gb+me", 20, 1, ones, 1, 4864),
        m.Profile("1g.10gb", 15, 1, [(0, 2), (2, 2), (4, 2), (6, 2)], 4, 9856),
        m.Profile("2g.10gb", 14, 2, [(0, 2), (2, 2), (4, 2)], 3, 9856),
        m.Profile("3g.20gb", 9, 3, [(0, 4), (4, 4)], 2, 19968), m.Profile("4g.20gb", 5, 4, [(0, 4)], 1, 19968),
        m.Profile("7g.40gb", 0, 7, [(0, 8)], 1, 40192),
    ])


def gi(gi_id, profile, start, size, cis=None):
    prof = a100().get(profile)
    cis = cis if cis is not None else [prof.slices]
    return {"gi_id": gi_id, "profile": profile, "profile_id": prof.id, "slices": prof.slices,
            "placement": {"start": start, "size": size},
            "compute_instances": [{"ci_id": i, "slices": c, "profile": m.ci_profile_name(c, profile, prof.slices),
                                   "placement": {"start": 0, "size": c}} for i, c in enumerate(cis)]}


def entry(**kw):
    e = {"devices": "all", "mig-enabled": False}
    e.update(kw)
    return e


def target(devices, enabled=True):
    return {"mig_enabled": enabled, "mig_devices": devices, "devices": "all", "device_filter": None}


# --- profile names --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,parsed", [(" 1g.5gb ", (None, 1, 5, "")), ("10c.10g.100gb+gfx", (10, 10, 100, "+gfx")),
                                         ("1g.5gb+me-x.y", (None, 1, 5, "+me-x.y"))])
def test_parse_profile_name_fields(name, parsed):
    assert m.parse_profile_name(name) == parsed


@pytest.mark.parametrize("bad", ["2g", "0g.5gb", "1g.0gb", "0c.1g.5gb", "1g.5gb+", "1g.5gb+ME", "1g.5gbx", "x1g.5gb", "1g.5gb\nx"])
def test_parse_profile_name_message(bad):
    with pytest.raises(m.MigError, match=r"^'%s' is not a MIG profile name \(expected \[<C>c\.\]<G>g\.<M>gb\[\+attr\], "
                                         r"e\.g\. 1g\.5gb or 1c\.3g\.20gb\)$" % bad.replace("+", r"\+").replace(".", r"\.")):
        m.parse_profile_name(bad)


@pytest.mark.parametrize("bad", [None, 5, ["1g.5gb"]])
def test_parse_profile_name_not_a_string(bad):
    with pytest.raises(m.MigError, match=r"^MIG profile name %s is not a string$" % repr(bad).replace("[", r"\[").replace("]", r"\]")):
        m.parse_profile_name(bad)


@pytest.mark.parametrize("mem_mib,total_bytes,gb", [
    (2560, 20 * 2 ** 30, 3),           # 1/8 of 20 GB = 2.5: Go rounds halves away from zero
    (512, 4 * 2 ** 30, 1),             # 0.5 -> 1
    (1, 16 * 2 ** 30, 2),              # any size is at least one eighth
    (2049, 16 * 2 ** 30, 4),           # just over one eighth: two eighths
    (2048, 16 * 2 ** 30, 2),           # exactly one eighth
    (1024, 8 * 2 ** 30 + 1, 1),        # the GB total rounds up: 9 GB, 1/8 of it = 1.125
    (8192, 8 * 2 ** 30, 8),
    (8192, 8 * 2 ** 30 + 1, 9),        # one byte over 8 GiB is a 9 GB device
])
def test_memory_size_gb_rounding(mem_mib, total_bytes, gb):
    assert m.memory_size_gb(mem_mib, total_bytes) == gb


def test_gi_and_ci_profile_names():
    assert m.gi_profile_name(3, 19968, 40537 * 2 ** 20) == "3g.20gb"
    assert m.gi_profile_name(1, 4864, 40537 * 2 ** 20, "+me") == "1g.5gb+me"
    assert m.ci_profile_name(3, "3g.20gb", 3) == "3g.20gb"
    assert m.ci_profile_name(1, "3g.20gb", 3) == "1c.3g.20gb"


@pytest.mark.parametrize("c,g,ok", [(1, 1, True), (2, 1, False), (2, 2, True), (3, 2, False), (1, 2, True), (2, 3, True),
                                    (3, 4, False), (2, 4, True), (4, 7, True), (5, 7, False), (3, 3, True)])
def test_ci_size_allowed_bounds(c, g, ok):
    assert m.ci_size_allowed(c, g) is ok


@pytest.mark.parametrize("c,g,placements", [(1, 1, [(0, 1)]), (2, 3, [(0, 2)]), (3, 4, [(0, 3)]), (4, 7, [(0, 4)]),
                                            (2, 4, [(0, 2), (2, 2)]), (1, 2, [(0, 1), (1, 1)]), (4, 4, [(0, 4)])])
def test_modelled_ci_placements_bounds(c, g, placements):
    assert m.modelled_ci_placements(c, g) == placements


# --- profiles and the table -----------------------------------------------------------------------------------------

def test_profile_record_round_trip():
    p = m.Profile("3g.20gb", 9, 3, [("4", "4"), (0, 4)], 2, 19968, aliases=("", "3g.20gb", "MIG 3g.20gb"), index=2)
    assert (p.placements, p.aliases, p.index, p.memory_slices) == (((0, 4), (4, 4)), ("MIG 3g.20gb",), 2, 4)
    d = p.to_dict()
    assert d == {"name": "3g.20gb", "id": 9, "slices": 3, "memory_slices": 4, "max_count": 2, "memory_mb": 19968,
                 "placements": [{"start": 0, "size": 4}, {"start": 4, "size": 4}]}
    q = m.Profile.from_dict(dict(d, aliases=["MIG 3g.20gb"], index=2))
    assert (q.name, q.id, q.slices, q.placements, q.max_count, q.memory_mb, q.aliases, q.index) == (
        "3g.20gb", 9, 3, ((0, 4), (4, 4)), 2, 19968, ("MIG 3g.20gb",), 2)
    assert m.Profile("x", 1, 1, [], 0).memory_mb == 0
    r = m.Profile.from_dict({"name": "x", "id": 1, "slices": 1, "placements": [], "max_count": 0})
    assert (r.memory_mb, r.aliases, r.index, r.memory_slices) == (0, (), None, 0)
    assert repr(p) == "Profile(3g.20gb id=9)"


def test_format_placements_groups_by_size():
    assert m.format_placements([(4, 4), (0, 4), (6, 1), (2, 1)]) == "{2,6}:1 {0,4}:4"
    assert m.format_placements([]) == ""


def test_profile_table_lookups():
    first = m.Profile("1g.5gb", 19, 1, [(0, 1)], 7, aliases=("MIG 1g.5gb",))
    second = m.Profile("MIG 1g.5gb", 99, 1, [(1, 1)], 1)
    table = m.ProfileTable([first, second])
    assert table.get("1g.5gb") is first and table.get("MIG 1g.5gb") is first and table.get("2g.10gb") is None
    assert table.by_id(99) is second and table.by_id(19) is first and table.by_id(5) is None
    assert table.names() == ["1g.5gb", "MIG 1g.5gb"]
    assert table.memory_slices == 2 and m.ProfileTable([]).memory_slices == 0
    assert a100().memory_slices == 8


# --- documents ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value,parsed,bad", [
    ("0x1", [(1,)], []), ("0x12345678", [(0x12345678,)], []), ("0x123456789", None, ["0x123456789"]), ("0x", None, ["0x"]),
    ("0x20B010DE:0x134F10DE:0x1", None, ["0x20B010DE:0x134F10DE:0x1"]), (["", "0x20B010DE"], [(0x20B010DE,)], []),
    ([""], None, [""]), ([], None, [""]), (["0x1", "junk", "0x2:0x3"], [(1,), (2, 3)], ["junk"]), ("0X1", None, ["0X1"]),
])
def test_device_filter_parsing(value, parsed, bad):
    e = m.validate_entry(entry(**{"device-filter": value}), "here")
    assert (e["device_filter"], e["bad_filters"]) == (parsed, bad)


@pytest.mark.parametrize("value", [5, ["0x1", 2], {"a": 1}, True])
def test_device_filter_type_message(value):
    with pytest.raises(m.MigError, match=r"^here: device-filter must be a string or a list of strings like '0x20B010DE', got "):
        m.validate_entry(entry(**{"device-filter": value}), "here")


@pytest.mark.parametrize("bad,msg", [
    ("x", r"^e: an entry must be a mapping with keys %s$" % ENTRY_KEYS),
    (entry(zz=1, aa=2), r"^e: unknown key\(s\) aa, zz \(allowed: %s\)$" % ENTRY_KEYS),
    ({"mig-enabled": False}, r"^e: missing required key 'devices' \('all' or a list of GPU indexes\)$"),
    (entry(devices="some"), r"^e: devices must be 'all' or a list of GPU indexes, got 'some'$"),
    (entry(devices=[0, True]), r"^e: devices must be 'all' or a list of GPU indexes, got True$"),
    (entry(devices=[0, "1"]), r"^e: devices must be 'all' or a list of GPU indexes, got '1'$"),
    (entry(devices=3), r"^e: devices must be 'all' or a list of GPU indexes, got 3$"),
    ({"devices": "all"}, r"^e: missing required key 'mig-enabled'$"),
    (entry(**{"mig-enabled": "yes"}), r"^e: mig-enabled must be true or false, got 'yes'$"),
    (entry(**{"mig-enabled": 1}), r"^e: mig-enabled must be true or false, got 1$"),
    (entry(**{"mig-enabled": True}), r"^e: 'mig-enabled' is true but 'mig-devices' is missing \(use \{\} for MIG enabled with no instances\)$"),
    (entry(**{"mig-devices": {"1g.5gb": 1}}), r"^e: MIG devices included when 'mig-enabled' is false$"),
    (entry(**{"mig-enabled": True, "mig-devices": ["1g.5gb"]}), r"^e: mig-devices must be a mapping of profile name to count$"),
    (entry(**{"mig-enabled": True, "mig-devices": {"1g.5gb": True}}), r"^e: count for 1g\.5gb must be an integer >= 0, got True$"),
    (entry(**{"mig-enabled": True, "mig-devices": {"1g.5gb": -1}}), r"^e: count for 1g\.5gb must be an integer >= 0, got -1$"),
    (entry(**{"mig-enabled": True, "mig-devices": {"1g.5gb": 1.0}}), r"^e: count for 1g\.5gb must be an integer >= 0, got 1\.0$"),
    (entry(**{"mig-enabled": True, "mig-devices": {"1g.5gb": 0}}), r"^e: mig-devices has no profile with a count > 0$"),
])
def test_validate_entry_messages(bad, msg):
    with pytest.raises(m.MigError, match=msg):
        m.validate_entry(bad, "e")


def test_validate_entry_records():
    assert m.validate_entry(entry(devices=[3, 0, 3]), "e") == {
        "devices": [0, 3], "device_filter": None, "bad_filters": [], "mig_enabled": False, "mig_devices": {}}
    assert m.validate_entry(entry(devices=[], **{"mig-devices": {}}), "e")["devices"] == []
    assert m.validate_entry(entry(**{"mig-devices": None, "device-filter": None}), "e")["device_filter"] is None
    e = m.validate_entry(entry(**{"mig-enabled": True, "mig-devices": {"1g.5gb": 0, "2g.10gb": 1}}), "e")
    assert e == {"devices": "all", "device_filter": None, "bad_filters": [], "mig_enabled": True, "mig_devices": {"2g.10gb": 1}}
    assert m.validate_entry(entry(**{"mig-enabled": True, "mig-devices": {}}), "e")["mig_devices"] == {}


@pytest.mark.parametrize("document,selected,msg", [
    ([], None, r"^config must be a mig-parted document \(a mapping with 'version' and 'mig-configs'\)$"),
    ({"version": "v1", "mig-configs": {"a": []}, "x": 1, "b": 2}, None, r"^config: unknown key\(s\) b, x \(allowed: version, mig-configs\)$"),
    ({"mig-configs": {"a": []}}, None, r"^config: unknown version None \(only 'v1' is supported\)$"),
    ({"version": "v2", "mig-configs": {"a": []}}, None, r"^config: unknown version 'v2' \(only 'v1' is supported\)$"),
    ({"version": "v1", "mig-configs": {}}, None, r"^config: 'mig-configs' must be a non-empty mapping of config names to entry lists$"),
    ({"version": "v1", "mig-configs": [1]}, None, r"^config: 'mig-configs' must be a non-empty mapping"),
    ({"version": "v1", "mig-configs": {"b": [], "a": []}}, None, r"^config has 2 mig-configs \(a, b\); choose one with 'selected'$"),
    ({"version": "v1", "mig-configs": {"b": [], "a": []}}, "c", r"^selected config 'c' is not in mig-configs \(available: a, b\)$"),
    ({"version": "v1", "mig-configs": {"a": []}}, None, r"^mig-configs\['a'\]: must be a non-empty list of entries$"),
    ({"version": "v1", "mig-configs": {"a": {"devices": "all"}}}, None, r"^mig-configs\['a'\]: must be a non-empty list"),
    ({"version": "v1", "mig-configs": {"a": [entry(), entry(x=1)]}}, None, r"^mig-configs\['a'\]\[1\]: unknown key\(s\) x "),
])
def test_parse_config_messages(document, selected, msg):
    with pytest.raises(m.MigError, match=msg):
        m.parse_config(document, selected)


def test_parse_entries_default_location():
    with pytest.raises(m.MigError, match=r"^devices: must be a non-empty list of entries$"):
        m.parse_entries([])
    with pytest.raises(m.MigError, match=r"^devices\[0\]: "):
        m.parse_entries([{}])


def test_entry_matches_rules():
    assert m.entry_matches({"devices": [1, 2], "device_filter": None}, 2, 0x1)
    assert not m.entry_matches({"devices": [1, 2], "device_filter": None}, 0, 0x1)
    assert m.entry_matches({"devices": "all", "device_filter": None, "bad_filters": [""]}, 0, 0x1)
    assert not m.entry_matches({"devices": "all", "device_filter": None, "bad_filters": ["junk"]}, 0, 0x1)
    flt = {"devices": "all", "device_filter": [(0x2,), (0x1, 0x9)]}
    assert m.entry_matches(flt, 0, 0x2, 0x5) and m.entry_matches(flt, 0, 0x1, 0x9)
    assert not m.entry_matches(flt, 0, 0x1, 0x8) and not m.entry_matches(flt, 0, 0x3)
    assert not m.entry_matches(flt, 0, 0x1)


def test_select_entry_none_and_last():
    a, b = {"devices": "all", "device_filter": None}, {"devices": [0], "device_filter": None}
    assert m.select_entry([a, b], 0, 1) is b and m.select_entry([b, a], 0, 1) is a
    assert m.select_entry([b], 1, 1) is None and m.select_entry([], 0, 1) is None


def test_check_entries_bounds_and_messages():
    m.check_entries(m.parse_entries([entry(devices=[0, 3])]), 4)          # the last index is in range
    with pytest.raises(m.MigError, match=r"^entry 1: devices names GPU index -1, 4 but this host has 4 GPU\(s\) \(indexes 0-3\)$"):
        m.check_entries(m.parse_entries([entry(), entry(devices=[-1, 0, 4])]), 4)
    with pytest.raises(m.MigError, match=r"^entry 0: devices names GPU index 0 but this host has 0 GPU\(s\) \(indexes 0--1\)$"):
        m.check_entries(m.parse_entries([entry(devices=[0])]), 0)
    m.check_entries(m.parse_entries([entry(devices="all")]), 0)
    with pytest.raises(m.MigError, match=r"^entry 0: device-filter is empty, which mig-parted reads as no filter \(every GPU\); "
                                         r"remove it or name the PCI ids it should select$"):
        m.check_entries(m.parse_entries([entry(**{"device-filter": ""})]), 1)
    with pytest.raises(m.MigError, match=r"^entry 0: device-filter 'a', 'b' is not a PCI id like '0x20B010DE' or "
                                         r"'0x20B010DE:0x134F10DE' \(mig-parted would match no GPU with it\)$"):
        m.check_entries(m.parse_entries([entry(**{"device-filter": ["a", "0x1", "b"]})]), 1)
    m.check_entries([{"devices": [0]}], 1)   # an entry without bad_filters (built by hand) is fine


# --- solver and targets ---------------------------------------------------------------------------------------------

def test_solve_placements_limits():
    assert m.solve_placements([]) == []
    assert m.solve_placements([("a", [(0, 2)])], occupied=[(1, 1)]) is None
    assert m.solve_placements([("a", [(0, 2), (2, 2)])], occupied=[(1, 1)]) == [(2, 2)]
    # the total-slice limit: a placement that ends past it is not used; one that ends on it is
    assert m.solve_placements([("a", [(6, 2)])], total_slices=7) is None
    assert m.solve_placements([("a", [(6, 2)])], total_slices=8) == [(6, 2)]
    assert m.solve_placements([("a", [(6, 2)])]) == [(6, 2)]
    assert m.solve_placements([("b", [(0, 1), (1, 1)]), ("a", [(0, 2)])]) is None
    assert m.solve_placements([("b", [(0, 1), (2, 1)]), ("a", [(0, 2)])]) == [(2, 1), (0, 2)]
    assert m.solve_placements([("x", [(0, 1), (1, 1)]), ("x", [(0, 1), (1, 1)])]) == [(0, 1), (1, 1)]
    # every occupied placement blocks, not only the last one
    assert m.solve_placements([("a", [(0, 1), (1, 1)])], occupied=[(0, 1), (1, 1)]) is None
    # the symmetry pruning of equal items must not spill over to the next, different item
    items = [("a", [(0, 1), (1, 1)]), ("a", [(0, 1), (1, 1)]), ("b", [(2, 1), (5, 1)])]
    placed = m.solve_placements(items, occupied=[(5, 1)])
    assert placed is not None and sorted(placed[:2]) == [(0, 1), (1, 1)] and placed[2] == (2, 1)


def test_resolve_target_messages_and_bounds():
    t = a100()
    with pytest.raises(m.MigError, match=r"^3c\.4g\.20gb: a 3-slice compute instance is not possible in a 4g\.20gb GPU instance$"):
        m.resolve_target(t, {"3c.4g.20gb": 1})
    with pytest.raises(m.MigError, match=r"^8 x 1g\.5gb requested but this GPU allows at most 7$"):
        m.resolve_target(t, {"1g.5gb": 8})
    assert len(m.resolve_target(t, {"1g.5gb": 7})) == 7
    # CIs: two 1c placements per 2g GI, three 2g GIs
    assert len(m.resolve_target(t, {"1c.2g.10gb": 6})) == 3
    with pytest.raises(m.MigError, match=r"^7 x 1c\.2g\.10gb requested but this GPU allows at most 6$"):
        m.resolve_target(t, {"1c.2g.10gb": 7})
    with pytest.raises(m.MigError, match=r"^unknown profile\(s\) 1c\.9g\.9gb, 9g\.99gb; this GPU offers 1g\.5gb, 1g\.5gb\+me, "
                                         r"1g\.10gb, 2g\.10gb, 3g\.20gb, 4g\.20gb, 7g\.40gb$"):
        m.resolve_target(t, {"9g.99gb": 1, "1c.9g.9gb": 1, "1g.5gb": 1})
    groups = m.resolve_target(t, {"1c.3g.20gb": 2, "2c.3g.20gb": 1, "1g.5gb": 1, "7g.40gb": 1})
    assert [(p.name, sizes) for p, sizes in groups] == [("7g.40gb", (7,)), ("3g.20gb", (2, 1)), ("3g.20gb", (1,)),
                                                        ("1g.5gb", (1,))]


def test_request_helpers():
    assert m.gi_profile_of("1c.3g.20gb") == (1, "3g.20gb") and m.gi_profile_of("3g.20gb") == (None, "3g.20gb")
    assert m.gi_profile_names({"1c.3g.20gb": 1, "3g.20gb": 1, "1g.5gb": 2}) == {"3g.20gb", "1g.5gb"}
    assert m.unknown_profiles(a100(), {"9g.1gb": 1, "1c.3g.20gb": 1, "2c.8g.1gb": 1}) == ["2c.8g.1gb", "9g.1gb"]
    assert m.describe_request({}) == "no instances"
    assert m.describe_request({"b": 2, "a": 1}) == "a: 1, b: 2"
    t = a100()
    counts = m.counts_of_groups([(t.get("3g.20gb"), (2, 1)), (t.get("3g.20gb"), (3,))])
    assert counts == {"2c.3g.20gb": 1, "1c.3g.20gb": 1, "3g.20gb": 1}


def test_place_groups_messages_and_bounds():
    t = a100()
    g3 = t.get("3g.20gb")
    with pytest.raises(m.MigError, match=r"^3 x 3g\.20gb requested but this GPU allows at most 2$"):
        m.place_groups(t, [(g3, (3,))] * 3)
    assert m.place_groups(t, [(g3, (3,))] * 2) == [(0, 4), (4, 4)]   # 8 of 8 memory slices: fits exactly
    with pytest.raises(m.MigError, match=r"^the instances need 9 memory slices but the GPU has 8$"):
        m.place_groups(t, [(g3, (3,))] * 2, occupied=[(7, 1)])
    with pytest.raises(m.MigError, match=r"^no non-overlapping placement exists for these instances \(possible placements: "
                                         r"2g\.10gb \{0,2,4\}:2; 4g\.20gb \{0\}:4\)$"):
        m.place_groups(t, [(t.get("4g.20gb"), (4,)), (t.get("2g.10gb"), (2,))], occupied=[(0, 1)])
    assert m.place_groups(t, [(t.get("4g.20gb"), (4,))], occupied=[(4, 4)]) == [(0, 4)]


def test_geometry_counts():
    assert m.current_counts([{"gi_id": 1}, gi(2, "3g.20gb", 0, 4, cis=[1, 1])]) == {"1c.3g.20gb": 2}
    assert m.geometry_matches([gi(1, "7g.40gb", 0, 8)], {"7g.40gb": 1, "1g.5gb": 0})
    assert not m.geometry_matches([gi(1, "7g.40gb", 0, 8)], {"7g.40gb": 2})
    assert not m.geometry_matches([gi(1, "7g.40gb", 0, 8), {"gi_id": 2}], {"7g.40gb": 1})
    assert m.geometry_matches([], {})


# --- plans, check mode, rollback ------------------------------------------------------------------------------------

def test_disable_plans_every_mode_combination():
    cur = [gi(1, "7g.40gb", 0, 8)]
    off = target({}, enabled=False)
    plan = m.plan_gpu(a100(), ON, cur, off)
    assert plan == {"changed": True, "reset_required": False, "keep": [], "target_counts": {}, "actions": [
        {"action": "destroy_ci", "gi_id": 1, "ci_id": 0, "profile": "7g.40gb"},
        {"action": "destroy_gi", "gi_id": 1, "profile": "7g.40gb", "placement": {"start": 0, "size": 8}},
        {"action": "set_mig_mode", "mode": "disabled"}]}
    assert m.plan_gpu(a100(), ON, cur, off, mode_change_resets=True)["reset_required"] is True
    # disable pending: the instances go, and only a reset finishes it
    plan = m.plan_gpu(a100(), {"current": "enabled", "pending": "disabled"}, cur, off)
    assert [a["action"] for a in plan["actions"]] == ["destroy_ci", "destroy_gi"] and plan["reset_required"] is True
    # enable pending, wanted off: cancel it; nothing was enabled, so no reset
    plan = m.plan_gpu(a100(), {"current": "disabled", "pending": "enabled"}, [], off, mode_change_resets=True)
    assert plan["actions"] == [{"action": "set_mig_mode", "mode": "disabled"}] and plan["reset_required"] is False
    plan = m.plan_gpu(a100(), OFF, cur, off)
    assert plan == {"changed": False, "actions": [], "reset_required": False, "keep": [], "target_counts": {}}


def test_enable_plan_records():
    plan = m.plan_gpu(a100(), OFF, [gi(9, "1g.5gb", 0, 1)], target({"1c.3g.20gb": 2}), mode_change_resets=True)
    assert plan == {"changed": True, "reset_required": True, "keep": [], "target_counts": {"1c.3g.20gb": 2}, "actions": [
        {"action": "set_mig_mode", "mode": "enabled"},
        {"action": "create_gi", "ref": 0, "profile": "3g.20gb", "profile_id": 9, "placement": {"start": 0, "size": 4}},
        {"action": "create_ci", "gi_ref": 0, "profile": "1c.3g.20gb", "slices": 1, "gi_slices": 3},
        {"action": "create_ci", "gi_ref": 0, "profile": "1c.3g.20gb", "slices": 1, "gi_slices": 3}]}
    # current enabled, pending disabled: enabling again needs no reset
    plan = m.plan_gpu(a100(), {"current": "enabled", "pending": "disabled"}, [], target({"7g.40gb": 1}), mode_change_resets=True)
    assert plan["reset_required"] is False and [a["action"] for a in plan["actions"]] == ["set_mig_mode", "create_gi", "create_ci"]


def test_matching_geometry_keeps_every_instance():
    cur = [gi(4, "3g.20gb", 4, 4), gi(2, "3g.20gb", 0, 4)]
    plan = m.plan_gpu(a100(), ON, cur, target({"3g.20gb": 2}))
    assert plan == {"changed": False, "actions": [], "reset_required": False, "keep": [4, 2], "target_counts": {"3g.20gb": 2}}
    plan = m.plan_gpu(a100(), {"current": "enabled", "pending": "disabled"}, cur, target({"3g.20gb": 2}))
    assert plan["changed"] is True and plan["keep"] == [4, 2] and plan["actions"] == [{"action": "set_mig_mode", "mode": "enabled"}]


def test_partial_keep_plan_and_check_mode_after():
    cur = [gi(1, "3g.20gb", 4, 4), gi(2, "1g.5gb", 0, 1), gi(3, "1g.5gb", 1, 1, cis=[])]
    plan = m.plan_gpu(a100(), ON, cur, target({"3g.20gb": 1, "2g.10gb": 1}))
    assert plan["keep"] == [1]
    assert plan["actions"] == [
        {"action": "destroy_ci", "gi_id": 2, "ci_id": 0, "profile": "1g.5gb"},
        {"action": "destroy_gi", "gi_id": 2, "profile": "1g.5gb", "placement": {"start": 0, "size": 1}},
        {"action": "destroy_gi", "gi_id": 3, "profile": "1g.5gb", "placement": {"start": 1, "size": 1}},
        {"action": "create_gi", "ref": 0, "profile": "2g.10gb", "profile_id": 14, "placement": {"start": 0, "size": 2}},
        {"action": "create_ci", "gi_ref": 0, "profile": "2g.10gb", "slices": 2, "gi_slices": 2}]
    after = m.predicted_after(ON, cur, plan, a100())
    assert after == {"mig_mode": ON, "mig_devices": {"3g.20gb": 1, "2g.10gb": 1}, "instances": [
        {"profile": "2g.10gb", "placement": {"start": 0, "size": 2}, "compute_instances": ["2g.10gb"]},
        {"profile": "3g.20gb", "placement": {"start": 4, "size": 4}, "compute_instances": ["3g.20gb"]}]}


def test_kept_instance_with_other_ci_layout_is_rebuilt():
    cur = [gi(1, "3g.20gb", 4, 4, cis=[1, 1, 1])]
    plan = m.plan_gpu(a100(), ON, cur, target({"3g.20gb": 1}))
    assert plan["keep"] == [] and [a["action"] for a in plan["actions"]] == [
        "destroy_ci", "destroy_ci", "destroy_ci", "destroy_gi", "create_gi", "create_ci"]


def test_predicted_after_unchanged_and_disable():
    cur = [gi(1, "7g.40gb", 0, 8)]
    unchanged = {"changed": False, "actions": [], "reset_required": False}
    assert m.predicted_after(ON, cur, unchanged, a100()) == m.summarize(ON, cur)
    plan = m.plan_gpu(a100(), ON, cur, target({}, enabled=False))
    assert m.predicted_after(ON, cur, plan, a100()) == {"mig_mode": OFF, "mig_devices": {}, "instances": []}
    plan = m.plan_gpu(a100(), ON, cur, target({}, enabled=False), mode_change_resets=True)
    assert m.predicted_after(ON, cur, plan, a100()) == {"mig_mode": {"current": "enabled", "pending": "disabled"},
                                                        "mig_devices": {}, "instances": []}
    plan = m.plan_gpu(a100(), ON, cur, target({}))
    assert m.predicted_after(ON, cur, plan, a100()) == {"mig_mode": ON, "mig_devices": {}, "instances": []}


def test_summarize_orders_and_mode():
    cur = [gi(1, "1g.5gb", 6, 1), gi(2, "1g.5gb+me", 0, 1), gi(3, "1g.10gb", 0, 2, cis=[1]), gi(4, "3g.20gb", 2, 4, cis=[2, 1])]
    s = m.summarize(ON, cur)
    assert s == {"mig_mode": {"current": "enabled", "pending": "enabled"},
                 "mig_devices": {"1g.5gb": 1, "1g.5gb+me": 1, "1g.10gb": 1, "1c.3g.20gb": 1, "2c.3g.20gb": 1},
                 "instances": [
                     {"profile": "1g.10gb", "placement": {"start": 0, "size": 2}, "compute_instances": ["1g.10gb"]},
                     {"profile": "1g.5gb+me", "placement": {"start": 0, "size": 1}, "compute_instances": ["1g.5gb+me"]},
                     {"profile": "3g.20gb", "placement": {"start": 2, "size": 4}, "compute_instances": ["1c.3g.20gb", "2c.3g.20gb"]},
                     {"profile": "1g.5gb", "placement": {"start": 6, "size": 1}, "compute_instances": ["1g.5gb"]}]}
    assert m.summarize({"current": "disabled", "pending": "enabled"}, cur)["mig_devices"] == {}


def test_rollback_action_records():
    cur = [gi(7, "3g.20gb", 4, 4, cis=[1]),
           {"gi_id": 8, "profile": "1g.5gb", "profile_id": 19, "placement": {"start": 0, "size": 1},
            "compute_instances": [{"ci_id": 0, "profile": "1g.5gb", "slices": 1}]}]
    assert m.rollback_actions(cur) == [
        {"action": "create_gi", "ref": 0, "profile": "3g.20gb", "profile_id": 9, "placement": {"start": 4, "size": 4}},
        {"action": "create_ci", "gi_ref": 0, "profile": "1c.3g.20gb", "slices": 1, "gi_slices": 3, "placement": {"start": 0, "size": 1}},
        {"action": "create_gi", "ref": 1, "profile": "1g.5gb", "profile_id": 19, "placement": {"start": 0, "size": 1}},
        {"action": "create_ci", "gi_ref": 1, "profile": "1g.5gb", "slices": 1, "gi_slices": 1, "placement": None}]
    assert m.rollback_actions([]) == []


def test_entry_matches_tries_every_filter():
    flt = {"devices": "all", "device_filter": [(0x1, 0x8), (0x1, 0x9)]}
    assert m.entry_matches(flt, 0, 0x1, 0x9) and not m.entry_matches(flt, 0, 0x1, 0x7)


def test_instance_without_compute_instance_list():
    bare = {"gi_id": 5, "profile": "1g.5gb", "profile_id": 19, "placement": {"start": 0, "size": 1}}
    plan = m.plan_gpu(a100(), ON, [bare], target({}, enabled=False))
    assert plan["actions"] == [{"action": "destroy_gi", "gi_id": 5, "profile": "1g.5gb", "placement": {"start": 0, "size": 1}},
                               {"action": "set_mig_mode", "mode": "disabled"}]
    plan = m.plan_gpu(a100(), ON, [bare], target({"1g.5gb": 1}))
    assert plan["keep"] == [] and [a["action"] for a in plan["actions"]] == ["destroy_gi", "create_gi", "create_ci"]
    assert m.rollback_actions([bare]) == [{"action": "create_gi", "ref": 0, "profile": "1g.5gb", "profile_id": 19,
                                           "placement": {"start": 0, "size": 1}}]
    assert m.summarize(ON, [bare])["instances"] == [{"profile": "1g.5gb", "placement": {"start": 0, "size": 1},
                                                     "compute_instances": []}]
