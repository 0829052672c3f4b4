# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/_drivers/branches.py (the branch table) and the vGPU rules that use it.

Rules (NVIDIA vGPU software 19.0 release notes, "Compatible NVIDIA vGPU Manager and Guest VM Driver Releases"):
  SAME     vGPU Manager with guest VM drivers from the same release
  PREV     vGPU Manager from a later major release branch with guest VM drivers from the previous branch
  PREVLTSB vGPU Manager from a later long-term support branch with guest VM drivers from the previous LTSB
  NEWER    a guest newer than the host is not listed: never compatible
"""

from __future__ import annotations

import re

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._drivers import branches as db
from ansible_collections.gpuops.provision.plugins.module_utils._drivers import versions as v

SAME = "same branch"
PREV = "before the host"
PREVLTSB = "previous long-term-support"
TOO_OLD = "too old"
NEWER = "newer"


@pytest.mark.parametrize("host,guest,ok,reason", [
    # R580 is an LTSB (until 2028-06); the LTSB before it is R535: PREVLTSB.
    ("R580", "R535", True, PREVLTSB),
    ("580.65.05", "535.261.03", True, PREVLTSB),                 # versions, not branches
    # R570 is the vGPU branch right before R580 (the NFB R575 does not count): PREV.
    ("R580", "R570", True, PREV),
    # R550 is neither the previous branch (R570) nor the previous LTSB (R535) of R580.
    ("R580", "R550", False, TOO_OLD),
    # R620 is an LTSB; the LTSB before it is R580: PREVLTSB.
    ("R620", "R580", True, PREVLTSB),
    # R595 is the vGPU branch before R620 (the NFB R610 does not count): PREV.
    ("R620", "R595", True, PREV),
    # R535 is two LTSBs back from R620.
    ("R620", "R535", False, TOO_OLD),
    # R580 is the vGPU branch before R595 (the NFB R590 does not count): PREV.
    ("R595", "R580", True, PREV),
    # R595 is a production branch, not an LTSB: PREVLTSB does not apply, and R535 is not its previous branch.
    ("R595", "R535", False, TOO_OLD),
    # NEWER: a guest newer than the host never is compatible, LTSB or not.
    ("R535", "R580", False, NEWER),
    ("R580", "R620", False, NEWER),
    # R450 is an LTSB; its previous branch is R440 (vGPU 10), the LTSB before it R418 (vGPU 8): PREVLTSB.
    ("R450", "R418", True, PREVLTSB),
    ("R450", "R440", True, PREV),
    # SAME: every branch accepts its own guests, whatever its kind.
    ("R418", "R418", True, SAME),
    ("R535", "535.288.01", True, SAME),
    ("580.82.07", "580.65.06", True, SAME),
    ("R595", "R595", True, SAME),
    ("R620", "R620", True, SAME),
    ("R610", "R610", True, SAME),                                 # an NFB only matches itself
])
def test_documented_pairings(host, guest, ok, reason):
    r = v.vgpu_compatibility(host, guest)
    assert r["compatible"] is ok, r
    assert reason in r["reason"]


@pytest.mark.parametrize("host,guest", [("R620", "R610"), ("R610", "R595"), ("R595", "R590"), ("R580", "R575")])
def test_new_feature_branches_are_not_vgpu_branches(host, guest):
    # An NFB has no vGPU software: never "the previous branch", and a host on one only takes its own branch.
    r = v.vgpu_compatibility(host, guest)
    assert r["compatible"] is False
    assert "new feature branch" in r["reason"]


def test_branches_is_the_data_table():
    assert v.BRANCHES is db.BRANCHES


def test_rows_have_sources_known_kinds_and_increasing_branches():
    assert db.CHECKED == "2026-12-01"
    numbers = [row["branch"] for row in db.BRANCHES]
    assert all(isinstance(n, int) and not isinstance(n, bool) for n in numbers)
    assert all(a < b for a, b in zip(numbers, numbers[1:])), numbers
    for row in db.BRANCHES:
        assert set(row) == {"branch", "kind", "vgpu", "eol", "source"}, row
        assert row["kind"] in db.KINDS, row
        assert re.match(r"^https://\S+\Z", row["source"]), row
        assert row["eol"] is None or re.match(r"^20\d\d-(0[1-9]|1[0-2])\Z", row["eol"]), row
        assert row["vgpu"] is None or (isinstance(row["vgpu"], int) and row["vgpu"] > 0), row
        # An NFB has no vGPU release.
        assert row["kind"] != "NFB" or row["vgpu"] is None, row


def test_vgpu_release_numbers_increase_with_the_branch():
    releases = [row["vgpu"] for row in db.BRANCHES if row["vgpu"] is not None]
    assert releases == sorted(releases) and len(set(releases)) == len(releases)


def test_required_branches_and_facts():
    rows = {row["branch"]: row for row in db.BRANCHES}
    for branch in (418, 450, 470, 535, 550, 570, 580, 595, 620):
        assert branch in rows
    # Kept from the earlier table so "previous branch" stays right.
    for branch, vgpu in ((430, 9), (440, 10), (460, 12), (510, 14), (525, 15)):
        assert rows[branch]["vgpu"] == vgpu
    assert [b for b, r in sorted(rows.items()) if r["kind"] == "LTSB"] == [418, 450, 470, 535, 580, 620]
    assert (rows[580]["vgpu"], rows[580]["eol"]) == (19, "2028-06")
    assert (rows[595]["kind"], rows[595]["eol"]) == ("PB", "2027-03")
    assert (rows[620]["kind"], rows[620]["eol"]) == ("LTSB", "2029-09")
    assert (rows[535]["vgpu"], rows[550]["vgpu"], rows[418]["vgpu"]) == (16, 17, 8)
