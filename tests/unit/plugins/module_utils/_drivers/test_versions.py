# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/_drivers/versions.py (driver versions, branches, Debian/RPM ordering, vGPU)."""

from __future__ import annotations

import itertools
import shutil
import subprocess

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._drivers import versions as v


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


@pytest.mark.parametrize("bad", ["", None, "R", "535.261.03", "branch-535", True, "R53x", "00", "R0535", 0])
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


# --- what mutation testing (make mutation) found unpinned: exact messages, records, boundaries ----------------------

@pytest.mark.parametrize("bad,shown", [
    ("R53x", "'R53x'"), (True, "True"), (None, "None"), (5, "5"), (12345, "12345"), ("R5", "'R5'"), ("R12345", "'R12345'"),
])
def test_parse_branch_message_quotes_value(bad, shown):
    with pytest.raises(v.VersionError, match=r"^driver branch %s is not a branch \(expected e\.g\. R535 or 535\)$" % shown):
        v.parse_branch(bad)


@pytest.mark.parametrize("text,expected", [("10", 10), ("R9999", 9999), (99, 99), ("r10", 10)])
def test_parse_branch_digit_bounds(text, expected):
    # two to four digits, both ends inclusive
    assert v.parse_branch(text) == expected


@pytest.mark.parametrize("bad", ["1.2", "12345.1", "535.12345", "535.1.12345", "535..1", ".535.1", "535.1."])
def test_parse_driver_version_field_bounds(bad):
    with pytest.raises(v.VersionError, match=r"^driver version %r is not an NVIDIA driver version \(expected e\.g\. 535\.261\.03\)$"
                       % bad):
        v.parse_driver_version(bad)


@pytest.mark.parametrize("text,fields", [("10.1", (10, 1, None)), ("9999.9999.9999", (9999, 9999, 9999)), ("535.0.0", (535, 0, 0))])
def test_parse_driver_version_field_bounds_accepted(text, fields):
    d = v.parse_driver_version(text)
    assert (d.branch, d.minor, d.patch, d.text) == fields + (text,)
    assert repr(d) == "DriverVersion(%r)" % text


def test_parse_driver_version_none_message():
    with pytest.raises(v.VersionError, match=r"^driver version None is not"):
        v.parse_driver_version(None)


def test_driver_version_ordering_and_identity():
    a, b = v.parse_driver_version("535.261.03"), v.parse_driver_version("535.261.3")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != "535.261.03" and (a == "535.261.03") is False
    assert (a < b) is False and (b < a) is False
    # a missing patch sorts before patch 0, which sorts before patch 1; minor before patch; branch before minor
    assert v.parse_driver_version("580.88") < v.parse_driver_version("580.88.0") < v.parse_driver_version("580.88.1")
    assert (v.parse_driver_version("580.88.0") < v.parse_driver_version("580.88")) is False
    assert v.parse_driver_version("580.88") != v.parse_driver_version("580.88.0")
    assert v.parse_driver_version("535.999.99") < v.parse_driver_version("550.1.1")
    assert v.parse_driver_version("550.2.1") < v.parse_driver_version("550.10.0")
    assert sorted([v.parse_driver_version(t) for t in ("550.10", "550.9.9", "418.1")]) == [
        v.parse_driver_version(t) for t in ("418.1", "550.9.9", "550.10")]


@pytest.mark.parametrize("text,scheme,record", [
    ("535.216.03-2~bpo12+1", "deb", dict(text="535.216.03-2~bpo12+1", epoch=0, upstream="535.216.03", revision="2~bpo12+1",
                                         scheme="deb", driver_version="535.216.03", branch=535)),
    (" 3:550.163.01-1.el9 ", "rpm", dict(text="3:550.163.01-1.el9", epoch=3, upstream="550.163.01", revision="1.el9",
                                         scheme="rpm", driver_version="550.163.01", branch=550)),
    ("1:2.0-3-4", "deb", dict(text="1:2.0-3-4", epoch=1, upstream="2.0-3", revision="4", scheme="deb", driver_version=None,
                              branch=None)),
    ("1.2.2", "deb", dict(text="1.2.2", epoch=0, upstream="1.2.2", revision="", scheme="deb", driver_version=None, branch=None)),
    ("10.2", "deb", dict(text="10.2", epoch=0, upstream="10.2", revision="", scheme="deb", driver_version="10.2", branch=10)),
    ("535.261.03+dfsg", "deb", dict(text="535.261.03+dfsg", epoch=0, upstream="535.261.03+dfsg", revision="", scheme="deb",
                                    driver_version="535.261.03", branch=535)),
    # the driver ends where a digit cannot follow: 5 digits of patch are no patch, the driver is branch.minor
    ("535.261.12345", "deb", dict(text="535.261.12345", epoch=0, upstream="535.261.12345", revision="", scheme="deb",
                                  driver_version="535.261", branch=535)),
    ("53512.1", "deb", dict(text="53512.1", epoch=0, upstream="53512.1", revision="", scheme="deb", driver_version=None,
                            branch=None)),
])
def test_package_version_record(text, scheme, record):
    p = v.parse_package_version(text, scheme)
    assert p.as_dict() == record
    assert repr(p) == "PackageVersion(%r, scheme=%r)" % (record["text"], scheme)


@pytest.mark.parametrize("bad,reason", [
    ("", r"^package version '' is empty or has characters a package version cannot have$"),
    (None, r"^package version None is empty or has characters"),
    ("535.1 -1", r"^package version '535\.1 -1' is empty or has characters"),
    ("535.1é", r"^package version '535\.1é' is empty or has characters"),
    ("x:535.1-1", r"^package version 'x:535\.1-1' has a non-numeric epoch 'x'$"),
    (":535.1-1", r"^package version ':535\.1-1' has a non-numeric epoch ''$"),
    ("535.261.03-", r"^package version '535\.261\.03-' ends with '-' \(empty revision\)$"),
    ("-1", r"^package version '-1' must start with a digit after the epoch$"),
    ("1:abc-1", r"^package version '1:abc-1' must start with a digit after the epoch$"),
    ("1:", r"^package version '1:' must start with a digit after the epoch$"),
])
def test_parse_package_version_messages(bad, reason):
    with pytest.raises(v.VersionError, match=reason):
        v.parse_package_version(bad)


def test_epoch_is_split_at_the_first_colon():
    # dpkg: the epoch ends at the first ':'; the upstream part may hold more colons
    p = v.parse_package_version("1:2.0:1-3")
    assert (p.epoch, p.upstream, p.revision) == (1, "2.0:1", "3")
    with pytest.raises(v.VersionError, match=r"^package version '1a:2:3' has a non-numeric epoch '1a'$"):
        v.parse_package_version("1a:2:3")


def test_unknown_scheme_messages_quote_scheme():
    with pytest.raises(v.VersionError, match=r"^unknown version scheme 'apk' \(deb or rpm\)$"):
        v.parse_package_version("1.0", "apk")
    with pytest.raises(v.VersionError, match=r"^unknown version scheme 'apk' \(deb or rpm\)$"):
        v.compare_versions("1.0", "1.1", "apk")


def test_driver_version_of_each_input_kind():
    d = v.parse_driver_version("535.261.03")
    assert v.driver_version_of(d) is d
    p = v.parse_package_version("3:550.163.01-1.el9", "rpm")
    assert v.driver_version_of(p) is p.driver
    assert v.driver_version_of(" 535.261.03 ") == d
    assert v.driver_version_of("3:550.163.01-1.el9").text == "550.163.01"
    with pytest.raises(v.VersionError, match=r"^package version '1\.2\.2' does not carry an NVIDIA driver version$"):
        v.driver_version_of(v.parse_package_version("1.2.2"))
    with pytest.raises(v.VersionError, match=r"^version '1\.2\.2' does not carry an NVIDIA driver version \(expected e\.g\. 535\.261\.03\)$"):
        v.driver_version_of("1.2.2")
    with pytest.raises(v.VersionError, match=r"^package version '' is empty"):
        v.driver_version_of(None)


# dpkg's order(): ~ < end < digits-run boundary < letters < everything else, each group by character code.
@pytest.mark.parametrize("a,b,expected", [
    ("1.0+", "1.0.", -1),       # non-letters among themselves: by code ('+' 43 < '.' 46)
    ("1.0.", "1.0+", 1),
    ("1.0a", "1.0b", -1),       # letters among themselves: by code
    ("1.0B", "1.0a", -1),
    ("1.0z", "1.0+", -1),       # any letter before any non-letter
    ("1.0~a", "1.0~b", -1),
    ("1.0~", "1.0~", 0),
    ("1.0~", "1.0", -1),
    ("1.0", "1.0~", 1),
    ("1.0", "1.0a", -1),
    ("1.0", "1.0+", -1),
    ("1.00", "1.0", 0),
    ("1.09", "1.10", -1),       # a longer digit run is larger...
    ("1.10", "1.9", 1),
    ("1.010", "1.9", 1),        # ...after its leading zeros are dropped
    ("1.19", "1.21", -1),       # the first differing digit decides among equal lengths
    ("1.21", "1.19", 1),
    ("1a1", "1a2", -1),
    ("1a2", "1a1", 1),
    ("2", "10", -1),
    ("10", "2", 1),
    ("1.0-1", "1.0-1", 0),
    ("1.0-1a", "1.0-1", 1),
    ("1.0-1~", "1.0-1", -1),
    ("1:1.0", "2:0.1", -1),
    ("2:0.1", "1:1.0", 1),
    ("1.0-10", "1.0-9", 1),
    ("1.0-9", "1.0-10", -1),
])
def test_debian_ordering_rules(a, b, expected):
    assert v.compare_debian(a, b) == expected


@pytest.mark.parametrize("a,b,expected", [
    ("1.0~rc1", "1.0~rc2", -1),      # tilde against tilde: the rest decides
    ("1.0~rc2", "1.0~rc1", 1),
    ("1.0~~", "1.0~", -1),
    ("1.0~", "1.0~~", 1),
    ("1.0~", "1.0", -1),
    ("1.0", "1.0~", 1),
    ("1.0^a", "1.0^b", -1),          # caret against caret: the rest decides
    ("1.0^b", "1.0^a", 1),
    ("1.0^", "1.0", 1),              # caret after the end of the string...
    ("1.0", "1.0^", -1),
    ("1.0^1", "1.0a", -1),           # ...but before anything else
    ("1.0a", "1.0^1", 1),
    ("1.0^1", "1.0.1", -1),
    ("1.0.1", "1.0^1", 1),
    ("1.0.", "1.0", 0),              # trailing separators do not count
    ("1.0", "1.0.", 0),
    ("1.0", "1.0.0", -1),
    ("1.0.0", "1.0", 1),
    ("1.a", "1.1", -1),              # alphabetic segment against numeric: numeric is newer
    ("1.1", "1.a", 1),
    ("1.0a", "1.0b", -1),
    ("1.0b", "1.0a", 1),
    ("1.001", "1.01", 0),
    ("1.09", "1.10", -1),
    ("1.19", "1.21", -1),
    ("1.21", "1.19", 1),
    ("2", "10", -1),
    ("10", "2", 1),
    ("1.0-1", "1.0-2", -1),          # releases compared when both have one
    ("1.0-2", "1.0-1", 1),
    ("1.0-2", "1.0", 0),
    ("1:1.0", "2:0.1", -1),
    ("2:0.1", "1:1.0", 1),
    ("1.0-1_1", "1.0-1.1", 0),
    ("1.0-1a", "1.0-1", 1),
])
def test_rpm_ordering_rules(a, b, expected):
    assert v.compare_rpm(a, b) == expected


def test_compare_versions_follows_the_scheme():
    # rpm treats all separators alike, dpkg orders them by character code
    assert v.compare_versions("1.0_1", "1.0.1", "rpm") == 0
    assert v.compare_versions("1.0_1", "1.0.1", "deb") == 1
    assert v.compare_versions("1.0_1", "1.0.1") == 1


def test_validate_version_branch_message_and_result():
    with pytest.raises(v.VersionError, match=r"^driver version 535\.261\.03 belongs to branch R535, not to the requested branch R550$"):
        v.validate_version_branch("535.261.03", "550")
    assert v.validate_version_branch("550.163.01", "") == dict(driver_version="550.163.01", branch=550)
    assert v.validate_version_branch("550.163.01-1", "R550") == dict(driver_version="550.163.01", branch=550)
    with pytest.raises(v.VersionError, match=r"^driver branch 'R5' is not a branch"):
        v.validate_version_branch("550.163.01", "R5")


def test_matches_pin_edges():
    assert v.matches_pin("535.216.03-2", " 535.216.03 ")
    assert not v.matches_pin("", "535.216.03")
    # a pin with a revision follows the scheme's ordering
    assert v.matches_pin("535.1.0-1_1", "535.1.0-1.1", "rpm")
    assert not v.matches_pin("535.1.0-1_1", "535.1.0-1.1", "deb")
    assert not v.matches_pin("535.1.0-1_1", "535.1.0-1.1")
    assert v.matches_pin("0:535.1.0-1", "535.1.0-1")


def test_select_version_rpm_and_ties():
    offered = ["550.163.01-9.el9", "3:550.163.01-1.el9", "3:550.163.01-2.el9", "3:550.144.03-5.el9", "not a version!"]
    assert v.select_version(offered, "550.163.01", "rpm") == "3:550.163.01-2.el9"
    assert v.select_version(offered, "3:550.163.01-1.el9", "rpm") == "3:550.163.01-1.el9"
    # rpm sees these two as equal: the first offered stays; dpkg orders '_' after '.'
    tie = ["535.1.0-1.1", "535.1.0-1_1"]
    assert v.select_version(tie, "535.1.0", "rpm") == "535.1.0-1.1"
    assert v.select_version(tie, "535.1.0", "deb") == "535.1.0-1_1"
    assert v.select_version(list(reversed(tie)), "535.1.0", "rpm") == "535.1.0-1_1"
    # the best is found wherever it stands in the list
    assert v.select_version(["535.1.0-3", "535.1.0-1", "535.1.0-2"], "535.1.0") == "535.1.0-3"
    assert v.select_version(["535.1.0-1", "535.1.0-3", "535.1.0-2"], "535.1.0") == "535.1.0-3"
    assert v.select_version(None, "535.1.0") is None
    # an offer that does not parse is skipped, not the end of the list
    assert v.select_version(["535.1.0-1", "not a version!", "535.1.0-3"], "535.1.0") == "535.1.0-3"
    # a full package version is matched in the scheme's ordering
    assert v.select_version(["535.1.0-1_1"], "535.1.0-1.1", "rpm") == "535.1.0-1_1"
    assert v.select_version(["535.1.0-1_1"], "535.1.0-1.1", "deb") is None


def test_branch_info_kinds_and_copies():
    rows = [dict(branch=418, vgpu=8, lts=True), dict(branch=575, kind="NFB", vgpu=None), dict(branch=600, kind="odd"),
            dict(branch="610", kind="LTSB")]
    assert v.branch_info("R418", rows) == dict(branch=418, vgpu=8, lts=True, kind="LTSB")
    assert v.branch_info("R575", rows) == dict(branch=575, vgpu=None, lts=False, kind="NFB")
    assert v.branch_info("R600", rows) == dict(branch=600, lts=False, kind="PB")
    assert v.branch_info(610, rows) == dict(branch="610", lts=True, kind="LTSB")
    info = v.branch_info("R418", rows)
    info["vgpu"] = 99
    assert rows[0] == dict(branch=418, vgpu=8, lts=True)
    assert v.branch_info("R595") == dict(v.BRANCHES[[r["branch"] for r in v.BRANCHES].index(595)], lts=False)


@pytest.mark.parametrize("host,guest,record", [
    ("R550", "R535", dict(compatible=True, reason="guest on the branch before the host's")),
    ("R535", "R470", dict(compatible=True, reason="guest on the previous long-term-support branch of an LTSB host")),
    ("R580", "R570", dict(compatible=True, reason="guest on the branch before the host's")),        # R575 (NFB) skipped
    ("R580", "R535", dict(compatible=True, reason="guest on the previous long-term-support branch of an LTSB host")),
    ("R580", "R550", dict(compatible=False, reason="guest branch R550 is too old for host branch R580")),
    ("R535", "R550", dict(compatible=False, reason="guest branch R550 is newer than the host's R535")),
    ("R536", "R535", dict(compatible=False,
                          reason="branch R536 is not in the known branch table; only equal branches are accepted")),
    ("R550", "R400", dict(compatible=False,
                          reason="branch R400 is not in the known branch table; only equal branches are accepted")),
    ("R590", "R580", dict(compatible=False,
                          reason="branch R590 is a new feature branch without vGPU software; only equal branches are accepted")),
    ("R580", "R575", dict(compatible=False,
                          reason="branch R575 is a new feature branch without vGPU software; only equal branches are accepted")),
    ("R590", "R590", dict(compatible=True, reason="same branch")),
    ("R430", "R418", dict(compatible=True, reason="guest on the branch before the host's")),
    ("R440", "R418", dict(compatible=False, reason="guest branch R418 is too old for host branch R440")),
    ("R450", "R418", dict(compatible=True, reason="guest on the previous long-term-support branch of an LTSB host")),
    ("R418", "R418", dict(compatible=True, reason="same branch")),
])
def test_vgpu_compatibility_records(host, guest, record):
    r = v.vgpu_compatibility(host, guest)
    assert r == dict(record, host_branch=int(host[1:]), guest_branch=int(guest[1:]))


def test_vgpu_compatibility_nfb_with_vgpu_release_counts():
    # A row of kind NFB that names a vGPU release is a vGPU branch (the table is the caller's).
    table = [dict(branch=570, kind="PB", vgpu=18), dict(branch=575, kind="NFB", vgpu=18.5), dict(branch=580, kind="PB", vgpu=19)]
    assert v.vgpu_compatibility("R580", "R575", table)["compatible"] is True
    assert v.vgpu_compatibility("R580", "R570", table)["reason"] == "guest branch R570 is too old for host branch R580"


@pytest.mark.parametrize("value,branch", [(535, 535), ("R535", 535), (" 550 ", 550), ("535.216.03-2~bpo12+1", 535)])
def test_vgpu_compatibility_inputs(value, branch):
    assert v.vgpu_compatibility(value, value) == dict(compatible=True, reason="same branch", host_branch=branch,
                                                      guest_branch=branch)


@pytest.mark.parametrize("bad,shown", [(True, "True"), ("", "''"), (None, "None"), ("latest", "'latest'"), ("x5", "'x5'")])
def test_vgpu_compatibility_rejects(bad, shown):
    with pytest.raises(v.VersionError, match=r"^%s is not a driver branch \(R535\) nor a driver version \(535\.261\.03\)$" % shown):
        v.vgpu_compatibility(bad, "R535")
    with pytest.raises(v.VersionError, match=r"^%s is not a driver branch" % shown):
        v.vgpu_compatibility("R535", bad)


def test_vgpu_compatibility_version_without_driver():
    # starts with a digit, so it is read as a version: the message says it carries no driver version
    with pytest.raises(v.VersionError, match=r"^version '5' does not carry an NVIDIA driver version"):
        v.vgpu_compatibility("5", "R535")
