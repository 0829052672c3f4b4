# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Version drift across a set of hosts: the one grouping and majority rule (pure: no I/O).

Two callers share it: the fleet driver drift (``_drivers.fleet.fleet_drift``, behind the ``driver_drift`` filter),
which orders versions newest first by package ordering, and the ESXi VIB drift of ``vsphere_gpu_info``
(``_vsphere.vgpu.drift_report``), which orders them by their text. A host without a version counts as drift in both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Sized
from typing import Any, Optional


def group_hosts(pairs: Iterable[tuple[str, Optional[str]]]) -> tuple[dict[str, list[str]], list[str]]:
    """({version: [hosts]}, [hosts without a version]) from (host, version) pairs.

    Versions keep the order they are first seen in, hosts the order they come in; an empty version is none.
    """
    versions: dict[str, list[str]] = {}
    missing: list[str] = []
    for host, version in pairs:
        if version:
            versions.setdefault(version, []).append(host)
        else:
            missing.append(host)
    return versions, missing


def majority(groups: Mapping[str, Sized], order: Optional[Sequence[str]] = None) -> Optional[str]:
    """The version with the most hosts, or None when there are none.

    Ties go to the version that comes first in ``order`` (default: the versions sorted as text); versions that are
    not in ``order`` are not candidates.
    """
    candidates = [v for v in (sorted(groups) if order is None else order) if v in groups]
    # max() keeps the first of equal counts, which is what makes ``order`` the tie-break.
    return max(candidates, key=lambda v: len(groups[v])) if candidates else None


def drift_report(host_versions: Mapping[str, Optional[str]], order: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """dict(consistent, versions={version: [hosts]}, missing=[hosts], majority) for {host: version or None}.

    Hosts are taken in sorted order. Consistent: at most one version and no host without one.
    """
    versions, missing = group_hosts((host, host_versions[host]) for host in sorted(host_versions))
    return dict(consistent=len(versions) <= 1 and not missing, versions=versions, missing=missing,
                majority=majority(versions, order))
