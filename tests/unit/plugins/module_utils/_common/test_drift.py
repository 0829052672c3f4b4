# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/_common/drift.py: the one drift rule behind driver_drift and the ESXi VIB drift."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._common import drift
from ansible_collections.gpuops.provision.plugins.module_utils._drivers import fleet as drivers_fleet
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import vgpu


def test_group_hosts_keeps_first_seen_versions_and_input_host_order():
    versions, missing = drift.group_hosts([("c", "2"), ("a", "1"), ("b", "2"), ("d", None), ("e", "")])
    assert list(versions) == ["2", "1"] and versions == {"2": ["c", "b"], "1": ["a"]}
    assert missing == ["d", "e"]


def test_majority_most_hosts_wins_and_ties_follow_order():
    groups = {"535.261.03": ["a"], "550.163.01": ["b"], "470.256.02": ["c", "d"]}
    assert drift.majority(groups) == "470.256.02"
    tie = {"550.163.01": ["b"], "535.261.03": ["a"]}
    assert drift.majority(tie) == "535.261.03"                               # default: first as text
    assert drift.majority(tie, ["550.163.01", "535.261.03"]) == "550.163.01"  # caller's order (newest first)
    # Only versions named in the order are candidates.
    assert drift.majority({"1": ["a", "b"], "2": ["c"]}, ["2"]) == "2"
    assert drift.majority({}) is None and drift.majority({"1": ["a"]}, []) is None


# vgpu.drift_report (vsphere_gpu_info's ESXi VIB drift) is to become `return drift.drift_report(host_versions)`:
# the core gives its exact results, key order included.
VIB_CASES = [
    # hosts without a driver (None and empty) are drift, listed sorted
    ({"esx-b": None, "esx-a": "", "esx-c": "535.154.02-1OEM.800.1.0.2"},
     dict(consistent=False, versions={"535.154.02-1OEM.800.1.0.2": ["esx-c"]}, missing=["esx-a", "esx-b"],
          majority="535.154.02-1OEM.800.1.0.2")),
    # a tie goes to the version first as text, not the one first seen (esx-a's)
    ({"esx-a": "550.54.10", "esx-b": "535.154.02", "esx-c": "550.54.10", "esx-d": "535.154.02"},
     dict(consistent=False, versions={"550.54.10": ["esx-a", "esx-c"], "535.154.02": ["esx-b", "esx-d"]}, missing=[],
          majority="535.154.02")),
    # more hosts beat text order
    ({"a": "535.154.02", "b": "550.54.10", "c": "550.54.10", "d": None},
     dict(consistent=False, versions={"535.154.02": ["a"], "550.54.10": ["b", "c"]}, missing=["d"], majority="550.54.10")),
    # one version
    ({"b": "580.65.05", "a": "580.65.05"}, dict(consistent=True, versions={"580.65.05": ["a", "b"]}, missing=[], majority="580.65.05")),
    # none at all, and only hosts without a driver
    ({}, dict(consistent=True, versions={}, missing=[], majority=None)),
    ({"a": None}, dict(consistent=False, versions={}, missing=["a"], majority=None)),
]


@pytest.mark.parametrize("host_versions, expected", VIB_CASES)
def test_core_gives_vgpu_drift_report_results(host_versions, expected):
    core = drift.drift_report(host_versions)
    assert core == expected and list(core) == list(expected) and list(core["versions"]) == list(expected["versions"])
    vib = vgpu.drift_report(host_versions)
    assert vib == core and list(vib["versions"]) == list(core["versions"])


def test_fleet_drift_uses_the_core_with_newest_first_ties():
    fleet = {"a": "535.261.03", "b": "550.163.01"}
    # Same tie, different order: the text rule picks 535, the fleet driver drift the newest.
    assert drift.drift_report(fleet)["majority"] == "535.261.03"
    r = drivers_fleet.fleet_drift(fleet)
    assert r["target"] == "550.163.01" and r["off_pin"] == ["a"]
    assert r["versions"] == {"550.163.01": ["b"], "535.261.03": ["a"]} and r["missing"] == []


def test_fleet_drift_reference_ignores_hosts_with_errors():
    r = drivers_fleet.fleet_drift({"a": "garbage", "b": "garbage", "c": "535.261.03", "d": None})
    assert r["target"] == "535.261.03" and r["missing"] == ["d"] and sorted(r["errors"]) == ["a", "b"]
    # The erroneous version is still listed as a version group, as before.
    assert r["versions"] == {"garbage": ["a", "b"], "535.261.03": ["c"]}


def test_drift_report_breaks_a_tie_by_the_given_order():
    hosts = {"a": "535.261.03", "b": "550.163.01"}
    assert drift.drift_report(hosts)["majority"] == "535.261.03"                                   # text order
    assert drift.drift_report(hosts, ["550.163.01", "535.261.03"])["majority"] == "550.163.01"    # newest first
