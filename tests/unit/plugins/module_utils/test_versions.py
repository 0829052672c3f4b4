# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/_versions.py (driver versions, branches, Debian/RPM ordering, vGPU)."""

from __future__ import annotations

import itertools
import shutil
import subprocess

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils import _versions as v


# --- parsing -------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,branch,minor,patch", [
    ("535.261.03", 535, 261, 3),
    ("580.65.06", 580, 65, 6),
    ("580.88", 580, 88, None),
    (" 550.163.01 ", 550, 163, 1),
])
def test_parse_driver_version(text, branch, minor, patch):
    d = v.parse_driver_version(text)
    assert (d.branch, d.minor, d.patch) == (branch, minor, patch)
    assert str(d) == text.strip()


@pytest.mark.parametrize("bad", ["", None, "535", "R535", "535.261.03-1", "abc", "535.x.03", "5.1.2.3"])
def test_parse_driver_version_rejects(bad):
    with pytest.raises(v.VersionError, match="not an NVIDIA driver version"):
        v.parse_driver_version(bad)


@pytest.mark.parametrize("text,expected", [("R535", 535), ("r550", 550), ("535", 535), (580, 580), (" R418 ", 418)])
def test_parse_branch(text, expected):
    assert v.parse_branch(text) == expected


@pytest.mark.parametrize("bad", ["", None, "R", "535.261.03", "branch-535", True, "R53x"])
def test_parse_branch_rejects(bad):
    with pytest.raises(v.VersionError, match="not a branch"):
        v.parse_branch(bad)


def test_parse_debian_backports_version():
    p = v.parse_package_version("535.216.03-2~bpo12+1")
    assert (p.epoch, p.upstream, p.revision) == (0, "535.216.03", "2~bpo12+1")
    assert str(p.driver) == "535.216.03" and p.driver.branch == 535
    assert p.as_dict()["branch"] == 535


def test_parse_rpm_evr():
    p = v.parse_package_version("3:550.163.01-1.el9", "rpm")
    assert (p.epoch, p.upstream, p.revision) == (3, "550.163.01", "1.el9")
    assert p.driver.branch == 550


def test_parse_vib_version():
    p = v.parse_package_version("535.154.02-1OEM.800.1.0.20613240")
    assert str(p.driver) == "535.154.02"


def test_parse_package_without_driver_version():
    # A non-driver package (e.g. glx-alternative-nvidia 1.2.2) parses but carries no driver version.
    assert v.parse_package_version("1.2.2").driver is None
    with pytest.raises(v.VersionError, match="does not carry an NVIDIA driver version"):
        v.branch_of("1.2.2")


@pytest.mark.parametrize("bad", ["", "x:535.1-1", "535.1 -1", "-1", "535.261.03-", "abc-1"])
def test_parse_package_version_rejects(bad):
    with pytest.raises(v.VersionError):
        v.parse_package_version(bad)


def test_unknown_scheme():
    with pytest.raises(v.VersionError, match="unknown version scheme"):
        v.parse_package_version("1.0", "apk")
    with pytest.raises(v.VersionError, match="unknown version scheme"):
        v.compare_versions("1.0", "1.1", "apk")


@pytest.mark.parametrize("text,branch", [
    ("535.261.03", 535), ("535.216.03-2~bpo12+1", 535), ("3:550.163.01-1.el9", 550),
    ("550.163.01-2", 550), ("535.183.01-0ubuntu0.22.04.1", 535), ("R570", None),
])
def test_branch_of(text, branch):
    if branch is None:
        with pytest.raises(v.VersionError):
            v.branch_of(text)
    else:
        assert v.branch_of(text) == branch


# --- Debian ordering -----------------------------------------------------------------------------

DEB_ORDERED = [
    # each element is strictly lower than the next, per dpkg
    "535.216.03-1~bpo12+1",
    "535.216.03-1",
    "535.216.03-2~bpo12+1",
    "535.216.03-2",
    "535.216.03-2+b1",
    "535.261.03~rc1-1",
    "535.261.03-1",
    "535.261.3a-1",
    "550.163.01-2",
    "1:418.226.00-1",
]


def test_debian_order_chain():
    for lo, hi in zip(DEB_ORDERED, DEB_ORDERED[1:]):
        assert v.compare_debian(lo, hi) == -1, (lo, hi)
        assert v.compare_debian(hi, lo) == 1, (hi, lo)
    for x in DEB_ORDERED:
        assert v.compare_debian(x, x) == 0


@pytest.mark.parametrize("a,b,expected", [
    ("1.0~", "1.0", -1),        # ~ before the end of the string
    ("1.0~~", "1.0~", -1),
    ("1.0~~a", "1.0~~", 1),
    ("1.0a", "1.0", 1),          # letters after the end
    ("1.0+", "1.0a", 1),         # non-letters after letters
    ("1.01", "1.1", 0),          # leading zeros do not count
    ("0:1.0", "1.0", 0),         # epoch 0 is the default
    ("1.0-1", "1.0", 1),
    ("535.261.03", "535.261.3", 0),
])
def test_debian_edge_cases(a, b, expected):
    assert v.compare_debian(a, b) == expected


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="dpkg not installed")
def test_debian_matches_dpkg():
    # Cross-check the pure implementation against dpkg itself on every pair.
    samples = DEB_ORDERED + ["1.0~", "1.0", "1.0a", "1.0+", "1.0~~", "2:0.1", "535.261.03+dfsg-1", "535.261.03-1.1"]
    for a, b in itertools.combinations(samples, 2):
        for op, want in (("lt", -1), ("eq", 0), ("gt", 1)):
            rc = subprocess.run(["dpkg", "--compare-versions", a, op, b], check=False).returncode
            assert (rc == 0) == (v.compare_debian(a, b) == want), (a, op, b)


# --- RPM ordering --------------------------------------------------------------------------------

@pytest.mark.parametrize("a,b,expected", [
    ("3:550.163.01-1.el9", "3:550.144.03-1.el9", 1),
    ("3:550.163.01-1.el9", "550.163.01-9.el9", 1),      # epoch wins
    ("550.163.01-1.el9", "550.163.01-1.el9", 0),
    ("550.163.01-1.el9", "550.163.01-1.el9_4", -1),
    ("1.0~rc1-1", "1.0-1", -1),                          # tilde: pre-release
    ("1.0^git1-1", "1.0-1", 1),                          # caret: post-release
    ("1.0^git1-1", "1.0.1-1", -1),
    ("1.0a", "1.0", 1),
    ("1.0.a", "1.0.1", -1),                              # numeric segments beat alphabetic ones
    ("1.010", "1.9", 1),
    ("1.0", "1.0-1", 0),                                 # a missing release matches any release
    ("1.0_1", "1.0.1", 0),                               # separators are all equal
])
def test_rpm_compare(a, b, expected):
    assert v.compare_rpm(a, b) == expected
    # The ordering is antisymmetric: swapping the operands flips the sign.
    first, second = b, a
    assert v.compare_rpm(first, second) == -expected


# --- branches, pins, selection -------------------------------------------------------------------

def test_version_in_branch():
    assert v.version_in_branch("535.261.03-1", "R535")
    assert not v.version_in_branch("535.261.03", 550)


def test_validate_version_branch_mismatch_names_both():
    with pytest.raises(v.VersionError) as err:
        v.validate_version_branch("535.261.03", "550")
    assert "535.261.03" in str(err.value) and "R535" in str(err.value) and "R550" in str(err.value)
    assert v.validate_version_branch("535.216.03-2~bpo12+1", "R535") == dict(driver_version="535.216.03", branch=535)
    assert v.validate_version_branch("550.163.01", None)["branch"] == 550


def test_matches_pin():
    assert v.matches_pin("535.261.03-1", "535.261.03-1")
    assert not v.matches_pin("535.216.03-2~bpo12+1", "535.261.03-1")
    assert v.matches_pin("535.216.03-2~bpo12+1", "535.216.03")   # driver-version pin: any packaging
    assert not v.matches_pin("535.216.03-2~bpo12+1", "535.261.03")
    assert v.matches_pin("3:550.163.01-1.el9", "3:550.163.01-1.el9", "rpm")
    assert not v.matches_pin(None, "535.261.03")


def test_select_version():
    offered = ["535.216.03-1", "535.216.03-2~bpo12+1", "535.261.03-1", "garbage version"]
    assert v.select_version(offered, "535.216.03") == "535.216.03-2~bpo12+1"
    assert v.select_version(offered, "535.216.03-1") == "535.216.03-1"
    assert v.select_version(offered, "535.261.03") == "535.261.03-1"
    assert v.select_version(offered, "550.163.01") is None
    assert v.select_version([], "535.261.03") is None


# --- vGPU compatibility --------------------------------------------------------------------------

@pytest.mark.parametrize("host,guest,ok,reason", [
    ("580.65.05", "580.65.06", True, "same branch"),
    ("R550", "R535", True, "before the host"),            # previous branch
    ("535.247.02", "525.85.05", True, "before the host"),
    ("R535", "R470", True, "long-term-support"),           # previous LTSB of an LTSB host
    ("R550", "R470", False, "too old"),                    # R550 is not LTSB
    ("R535", "R510", False, "too old"),                    # neither previous nor previous LTSB
    ("R535", "R550", False, "newer"),                      # guest newer: never
    ("R999", "R535", False, "not in the known branch table"),
    ("R999", "999.1.2", True, "same branch"),
])
def test_vgpu_compatibility(host, guest, ok, reason):
    r = v.vgpu_compatibility(host, guest)
    assert r["compatible"] is ok
    assert reason in r["reason"]


def test_vgpu_compatibility_custom_table():
    # R580 is an LTSB in the default table, so an R535 guest is acceptable (previous LTSB); a caller's table of the
    # older shape (branch/vgpu/lts) that does not mark R580 LTSB makes it too old.
    assert v.vgpu_compatibility("R580", "R535")["compatible"]
    table = [dict(branch=r["branch"], vgpu=r["vgpu"], lts=r["kind"] == "LTSB") for r in v.BRANCHES if r["kind"] != "NFB"]
    for row in table:
        if row["branch"] == 580:
            row["lts"] = False
    r = v.vgpu_compatibility("R580", "R535", table)
    assert not r["compatible"] and "too old" in r["reason"]
    assert v.vgpu_compatibility("R580", "R570", table)["compatible"]


def test_branch_info():
    info = v.branch_info("R535")
    assert {k: info[k] for k in ("branch", "kind", "vgpu", "lts")} == dict(branch=535, kind="LTSB", vgpu=16, lts=True)
    assert info["source"].startswith("https://")
    assert v.branch_info("R580")["lts"] is True
    assert v.branch_info(550, [dict(branch=550, vgpu=17, lts=False)]) == dict(branch=550, vgpu=17, lts=False, kind="PB")
    assert v.branch_info("R999") is None
