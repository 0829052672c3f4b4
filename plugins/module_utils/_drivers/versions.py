# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA driver versions, branches and vGPU host/guest compatibility (pure: no I/O).

Version strings seen in the wild and accepted here:
  535.261.03                 driver (upstream) version; ``R535``/``535`` name its branch
  535.216.03-2~bpo12+1       Debian/Ubuntu package version (epoch:upstream-revision, dpkg ordering incl. ``~``)
  3:550.163.01-1.el9         RPM EVR (epoch:version-release, rpmvercmp ordering)
  535.154.02-1OEM.800.1.0.2  ESXi VIB version (handled like a package version)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Optional

from ansible_collections.gpuops.provision.plugins.module_utils._drivers import branches as drivers_branches

__all__ = [
    "VersionError", "DriverVersion", "PackageVersion", "BRANCHES",
    "parse_branch", "parse_driver_version", "parse_package_version", "branch_of",
    "compare_debian", "compare_rpm", "compare_versions", "version_in_branch", "validate_version_branch",
    "matches_pin", "select_version", "vgpu_compatibility", "branch_info", "driver_version_of",
]


class VersionError(ValueError):
    """A version or branch string that cannot be understood; the message quotes it and says why."""


# Driver (upstream) version: <branch>.<minor>[.<patch>], e.g. 535.261.03, Windows-style 580.88.
_DRIVER_RE = re.compile(r"^(?P<branch>\d{2,4})\.(?P<minor>\d{1,4})(?:\.(?P<patch>\d{1,4}))?\Z")
_BRANCH_RE = re.compile(r"^[Rr]?(?P<branch>[1-9]\d{1,3})\Z")  # no leading zero: "00" or "0535" is no branch
# Anything that may appear in a Debian or RPM version.
_PKG_CHARS_RE = re.compile(r"^[A-Za-z0-9.+~^_:-]+\Z")

# Known driver branches, their kind (LTSB/PB/NFB) and vGPU software release: data with sources and the date
# checked in _drivers/branches.py. Callers can pass their own table where NVIDIA publishes newer facts: rows
# with ``branch`` and ``kind`` (LTSB, PB, NFB), or the older shape ``branch``/``vgpu``/``lts`` (``lts`` true: LTSB).
BRANCHES = drivers_branches.BRANCHES


class DriverVersion:
    """An NVIDIA driver version such as 535.261.03; ordered numerically field by field."""

    __slots__ = ("branch", "minor", "patch", "text")

    def __init__(self, branch: int, minor: int, patch: Optional[int], text: str) -> None:
        self.branch = branch
        self.minor = minor
        self.patch = patch
        self.text = text

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.branch, self.minor, -1 if self.patch is None else self.patch)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DriverVersion) and self.key == other.key

    def __lt__(self, other: DriverVersion) -> bool:
        return self.key < other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return "DriverVersion(%r)" % self.text


class PackageVersion:
    """A distribution package version: epoch, upstream, revision/release, and the driver version inside it."""

    __slots__ = ("epoch", "upstream", "revision", "scheme", "text", "driver")

    def __init__(self, epoch: int, upstream: str, revision: str, scheme: str, text: str, driver: Optional[DriverVersion]) -> None:
        self.epoch = epoch
        self.upstream = upstream
        self.revision = revision
        self.scheme = scheme
        self.text = text
        self.driver = driver

    def as_dict(self) -> dict[str, Any]:
        return dict(text=self.text, epoch=self.epoch, upstream=self.upstream, revision=self.revision,
                    scheme=self.scheme, driver_version=str(self.driver) if self.driver else None,
                    branch=self.driver.branch if self.driver else None)

    def __repr__(self) -> str:
        return "PackageVersion(%r, scheme=%r)" % (self.text, self.scheme)


def parse_branch(value: object) -> int:
    """Branch number from ``R535``, ``r535``, ``535`` or 535. Raises VersionError otherwise."""
    if isinstance(value, bool):
        raise VersionError("driver branch %r is not a branch (expected e.g. R535 or 535)" % (value,))
    if isinstance(value, int):
        text = str(value)
    else:
        text = str(value if value is not None else "").strip()
    m = _BRANCH_RE.match(text)
    if not m:
        raise VersionError("driver branch %r is not a branch (expected e.g. R535 or 535)" % (value,))
    return int(m.group("branch"))


def parse_driver_version(value: object) -> DriverVersion:
    """Parse a plain driver version (``535.261.03``). Package versions are not accepted here."""
    text = str(value if value is not None else "").strip()
    m = _DRIVER_RE.match(text)
    if not m:
        raise VersionError("driver version %r is not an NVIDIA driver version (expected e.g. 535.261.03)" % (value,))
    patch = m.group("patch")
    return DriverVersion(int(m.group("branch")), int(m.group("minor")), int(patch) if patch is not None else None, text)


def _split_epoch(text: str) -> tuple[int, str]:
    if ":" in text:
        epoch, rest = text.split(":", 1)
        if not epoch.isdigit():
            raise VersionError("package version %r has a non-numeric epoch %r" % (text, epoch))
        return int(epoch), rest
    return 0, text


def parse_package_version(value: object, scheme: str = "deb") -> PackageVersion:
    """Parse a package version into a PackageVersion.

    scheme ``deb``: revision after the last ``-`` (dpkg); ``rpm``: release after the last ``-`` (version has none).
    ``driver`` is the DriverVersion at the start of the upstream part, or None when there is none (a package
    that is not a driver). A plain driver version is a valid package version without revision.
    """
    if scheme not in ("deb", "rpm"):
        raise VersionError("unknown version scheme %r (deb or rpm)" % (scheme,))
    text = str(value if value is not None else "").strip()
    if not text or not _PKG_CHARS_RE.match(text):
        raise VersionError("package version %r is empty or has characters a package version cannot have" % (value,))
    epoch, rest = _split_epoch(text)
    if "-" in rest:
        upstream, revision = rest.rsplit("-", 1)
        if not revision:
            raise VersionError("package version %r ends with '-' (empty revision)" % (value,))
    else:
        upstream, revision = rest, ""
    if not upstream or not upstream[0].isdigit():
        raise VersionError("package version %r must start with a digit after the epoch" % (value,))
    driver = None
    m = re.match(r"^(\d{2,4}\.\d{1,4}(?:\.\d{1,4})?)(?![\d])", upstream)
    if m:
        driver = parse_driver_version(m.group(1))
    return PackageVersion(epoch, upstream, revision, scheme, text, driver)


def driver_version_of(value: object) -> DriverVersion:
    """The DriverVersion inside a driver version or any package version string; raises VersionError."""
    if isinstance(value, DriverVersion):
        return value
    if isinstance(value, PackageVersion):
        if value.driver is None:
            raise VersionError("package version %r does not carry an NVIDIA driver version" % value.text)
        return value.driver
    text = str(value if value is not None else "").strip()
    if _DRIVER_RE.match(text):
        return parse_driver_version(text)
    pkg = parse_package_version(text, "rpm" if re.search(r"\.el\d|\.fc\d", text) else "deb")
    if pkg.driver is None:
        raise VersionError("version %r does not carry an NVIDIA driver version (expected e.g. 535.261.03)" % (value,))
    return pkg.driver


def branch_of(value: object) -> int:
    """Branch number of a driver or package version: 535 for ``535.216.03-2~bpo12+1``."""
    return driver_version_of(value).branch


# --- dpkg ordering (lib/dpkg/version.c: order() and verrevcmp()) ---------------------------------

_DIGITS = "0123456789"


def _deb_order(char: str) -> int:
    if char in _DIGITS:
        return 0
    if char.isascii() and char.isalpha():
        return ord(char)
    if char == "~":
        return -1
    return ord(char) + 256


def _deb_verrevcmp(a: str, b: str) -> int:
    i = j = 0
    la, lb = len(a), len(b)
    while i < la or j < lb:
        first_diff = 0
        while (i < la and a[i] not in _DIGITS) or (j < lb and b[j] not in _DIGITS):
            ac = _deb_order(a[i]) if i < la and a[i] not in _DIGITS else 0
            bc = _deb_order(b[j]) if j < lb and b[j] not in _DIGITS else 0
            if ac != bc:
                return ac - bc
            i += 1
            j += 1
        while i < la and a[i] == "0":
            i += 1
        while j < lb and b[j] == "0":
            j += 1
        while i < la and a[i] in _DIGITS and j < lb and b[j] in _DIGITS:
            if not first_diff:
                first_diff = ord(a[i]) - ord(b[j])
            i += 1
            j += 1
        if i < la and a[i] in _DIGITS:
            return 1
        if j < lb and b[j] in _DIGITS:
            return -1
        if first_diff:
            return first_diff
    return 0


def _sign(value: int) -> int:
    return (value > 0) - (value < 0)


def compare_debian(a: object, b: object) -> int:
    """dpkg --compare-versions: -1, 0 or 1. ``~`` sorts before everything, even the end of the string."""
    pa = a if isinstance(a, PackageVersion) else parse_package_version(a, "deb")
    pb = b if isinstance(b, PackageVersion) else parse_package_version(b, "deb")
    if pa.epoch != pb.epoch:
        return _sign(pa.epoch - pb.epoch)
    r = _deb_verrevcmp(pa.upstream, pb.upstream)
    if r:
        return _sign(r)
    return _sign(_deb_verrevcmp(pa.revision, pb.revision))


# --- rpm ordering (rpmio/rpmvercmp.c) -------------------------------------------------------------

def _rpm_alnum(char: str) -> bool:
    return char.isascii() and char.isalnum()


def _rpmvercmp(a: str, b: str) -> int:
    if a == b:
        return 0
    i = j = 0
    la, lb = len(a), len(b)
    while i < la or j < lb:
        while i < la and not _rpm_alnum(a[i]) and a[i] not in "~^":
            i += 1
        while j < lb and not _rpm_alnum(b[j]) and b[j] not in "~^":
            j += 1
        # A tilde sorts before anything, including the end of the string.
        if (i < la and a[i] == "~") or (j < lb and b[j] == "~"):
            if i >= la or a[i] != "~":
                return 1
            if j >= lb or b[j] != "~":
                return -1
            i += 1
            j += 1
            continue
        # A caret sorts after the end of the string but before anything else.
        if (i < la and a[i] == "^") or (j < lb and b[j] == "^"):
            if i >= la:
                return -1
            if j >= lb:
                return 1
            if a[i] != "^":
                return 1
            if b[j] != "^":
                return -1
            i += 1
            j += 1
            continue
        if not (i < la and j < lb):
            break
        isnum = a[i] in _DIGITS
        take = (lambda c: c in _DIGITS) if isnum else (lambda c: c.isascii() and c.isalpha())
        si = i
        while i < la and take(a[i]):
            i += 1
        sj = j
        while j < lb and take(b[j]):
            j += 1
        seg_a, seg_b = a[si:i], b[sj:j]
        if not seg_b:
            # Numeric segments are newer than alphabetic ones.
            return 1 if isnum else -1
        if isnum:
            seg_a, seg_b = seg_a.lstrip("0"), seg_b.lstrip("0")
            if len(seg_a) != len(seg_b):
                return 1 if len(seg_a) > len(seg_b) else -1
        if seg_a != seg_b:
            return 1 if seg_a > seg_b else -1
    if i >= la and j >= lb:
        return 0
    return -1 if i >= la else 1


def compare_rpm(a: object, b: object) -> int:
    """rpm EVR comparison: -1, 0 or 1 (epoch, then version, then release when both have one)."""
    pa = a if isinstance(a, PackageVersion) else parse_package_version(a, "rpm")
    pb = b if isinstance(b, PackageVersion) else parse_package_version(b, "rpm")
    if pa.epoch != pb.epoch:
        return _sign(pa.epoch - pb.epoch)
    r = _rpmvercmp(pa.upstream, pb.upstream)
    if r or not pa.revision or not pb.revision:
        return r
    return _rpmvercmp(pa.revision, pb.revision)


def compare_versions(a: object, b: object, scheme: str = "deb") -> int:
    """Compare two package (or driver) versions in the given scheme: -1, 0 or 1."""
    if scheme == "deb":
        return compare_debian(a, b)
    if scheme == "rpm":
        return compare_rpm(a, b)
    raise VersionError("unknown version scheme %r (deb or rpm)" % (scheme,))


def version_in_branch(version: object, branch: object) -> bool:
    """True when the driver inside ``version`` belongs to ``branch`` (R535 / 535)."""
    return branch_of(version) == parse_branch(branch)


def validate_version_branch(version: object, branch: object = None) -> dict[str, Any]:
    """Check a requested version (and optional branch). Returns dict(driver_version, branch); raises VersionError."""
    driver = driver_version_of(version)
    if branch not in (None, ""):
        wanted = parse_branch(branch)
        if driver.branch != wanted:
            raise VersionError("driver version %s belongs to branch R%d, not to the requested branch R%d"
                               % (version, driver.branch, wanted))
    return dict(driver_version=str(driver), branch=driver.branch)


def matches_pin(installed: object, pin: object, scheme: str = "deb") -> bool:
    """Does an installed package version satisfy a pin?

    A pin with a revision (``535.261.03-1``) must match exactly (same epoch, upstream and revision in the scheme's
    ordering); a plain driver version (``535.261.03``) matches any packaging of that driver version.
    """
    if installed in (None, ""):
        return False
    pin_text = str(pin).strip()
    if _DRIVER_RE.match(pin_text):
        return driver_version_of(installed) == parse_driver_version(pin_text)
    return compare_versions(installed, pin_text, scheme) == 0


def select_version(available: Optional[Iterable[object]], requested: object, scheme: str = "deb") -> Optional[str]:
    """Pick the exact package version for ``requested`` from the versions a repository offers.

    ``requested`` is either a full package version (must be offered as is) or a driver version (the highest
    packaging of it wins, e.g. 535.216.03-2~bpo12+1 over 535.216.03-1). Returns the chosen string or None.
    """
    offered = []
    for text in available or []:
        try:
            offered.append(parse_package_version(text, scheme))
        except VersionError:
            continue
    fits = [p for p in offered if matches_pin(p, requested, scheme)]
    if not fits:
        return None
    best = fits[0]
    for cand in fits[1:]:
        if compare_versions(cand, best, scheme) > 0:
            best = cand
    return best.text


def _is_lts(row: Mapping[str, Any]) -> bool:
    """Whether a table row is a long-term support branch: ``kind`` LTSB, or an older-shape row's ``lts``."""
    if "lts" in row:
        return bool(row["lts"])
    return row.get("kind") == "LTSB"


def _kind(row: Mapping[str, Any]) -> str:
    """A row's kind; rows of the older shape (``branch``/``vgpu``/``lts``) are vGPU releases: LTSB or PB."""
    if _is_lts(row):
        return "LTSB"
    kind = row.get("kind")
    return kind if kind in ("PB", "NFB") else "PB"


def _is_vgpu_branch(row: Mapping[str, Any]) -> bool:
    """Whether NVIDIA vGPU software is built on the branch: any branch that is not a new feature branch, or one
    whose row names a vGPU release. NFBs never are the "previous branch" of a vGPU manager."""
    return _kind(row) != "NFB" or row.get("vgpu") is not None


def branch_info(branch: object, branches: Iterable[Mapping[str, Any]] = BRANCHES) -> Optional[dict[str, Any]]:
    """The table row for a branch (a copy, with ``kind`` and ``lts`` filled in), or None."""
    number = parse_branch(branch)
    for row in branches:
        if int(row["branch"]) == number:
            info = dict(row)
            info["kind"] = _kind(row)
            info["lts"] = info["kind"] == "LTSB"
            return info
    return None


def vgpu_compatibility(host: object, guest: object, branches: Iterable[Mapping[str, Any]] = BRANCHES) -> dict[str, Any]:
    """vGPU manager (host) vs guest driver compatibility by branch.

    ``host``/``guest``: driver versions, package versions or branches. Compatible combinations (NVIDIA vGPU 19.0
    release notes): the same release (branch); a host on a later branch with the guest on the previous branch;
    a host on a later long-term support branch (LTSB) with the guest on the previous LTSB. A guest newer than the
    host never is. "Previous" counts only branches NVIDIA vGPU software is built on (new feature branches are
    skipped). ``branches``: the table (default BRANCHES from _drivers/branches.py).
    Returns dict(compatible, reason, host_branch, guest_branch).
    """
    hb = as_branch(host)
    gb = as_branch(guest)
    result: dict[str, Any] = dict(host_branch=hb, guest_branch=gb, compatible=False)
    rows = {int(r["branch"]): r for r in branches}
    if gb == hb:
        result.update(compatible=True, reason="same branch")
    elif gb > hb:
        result.update(reason="guest branch R%d is newer than the host's R%d" % (gb, hb))
    elif hb not in rows or gb not in rows:
        unknown = hb if hb not in rows else gb
        result.update(reason="branch R%d is not in the known branch table; only equal branches are accepted" % unknown)
    elif not _is_vgpu_branch(rows[hb]) or not _is_vgpu_branch(rows[gb]):
        nfb = hb if not _is_vgpu_branch(rows[hb]) else gb
        result.update(reason="branch R%d is a new feature branch without vGPU software; only equal branches are accepted"
                      % nfb)
    else:
        vgpu = sorted(b for b, r in rows.items() if _is_vgpu_branch(r))
        lts = [b for b in vgpu if _is_lts(rows[b])]
        previous = [b for b in vgpu if b < hb]
        prev_lts = [b for b in lts if b < hb]
        if previous and gb == previous[-1]:
            result.update(compatible=True, reason="guest on the branch before the host's")
        elif hb in lts and prev_lts and gb == prev_lts[-1]:
            result.update(compatible=True, reason="guest on the previous long-term-support branch of an LTSB host")
        else:
            result.update(reason="guest branch R%d is too old for host branch R%d" % (gb, hb))
    return result


def as_branch(value: object) -> int:
    """The branch number of a branch (R535, 535) or of a driver version (535.261.03); VersionError otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        return parse_branch(value)
    text = str(value if value is not None else "").strip()
    if _BRANCH_RE.match(text):
        return parse_branch(text)
    if not text or not text[0].isdigit():
        raise VersionError("%r is not a driver branch (R535) nor a driver version (535.261.03)" % (value,))
    return branch_of(text)
