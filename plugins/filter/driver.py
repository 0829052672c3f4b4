# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side NVIDIA driver filters: per-host driver state, fleet drift, drift table, vGPU branch compatibility.

Thin wrappers: the logic is in module_utils (_driver_fleet: host state, drift, table; _drift: the drift rule shared
with the ESXi VIB drift; _driver_repo: repository listings and requests; _driver_packages, _versions).
Documentation of each filter is in the ``<filter>.yml`` file next to this one.
"""

from __future__ import annotations

import functools

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.module_utils import _driver_fleet as D
from ansible_collections.gpuops.provision.plugins.module_utils import _driver_packages as P
from ansible_collections.gpuops.provision.plugins.module_utils import _versions as V


def _error(msg):
    raise AnsibleFilterError("gpuops.provision driver filter: %s" % msg)


def _raising(*errors):
    """Decorator: the given module_utils errors become AnsibleFilterError with the filter prefix."""
    def decorate(func):
        @functools.wraps(func)
        def inner(*args, **kwargs):
            try:
                return func(*args, **kwargs)
            except errors as exc:
                _error(str(exc))
        return inner
    return decorate


# Input errors always read as filter errors; direct callers (tests) see version and package errors as they are,
# the registered filters (FilterModule, through _wrap) see those as filter errors too.
_input = _raising(D.DriverInputError)
_wrap = _raising(V.VersionError, P.PackageError)


@_input
def driver_drift(data, pin=None, branch=None, hosts=None, fact=None, packages=None, vgpu_pairs=None, scheme="deb",
                 count_reboot_pending=True, host_pin=None):
    return D.fleet_drift(data, pin, branch, hosts, fact, packages, vgpu_pairs, scheme, count_reboot_pending, host_pin)


@_input
def driver_drift_table(drift):
    return D.drift_table(drift)


@_input
def driver_branch(version):
    return V.as_branch(version)


@_input
def driver_version_compare(a, b, scheme="deb"):
    return V.compare_versions(a, b, scheme)


@_input
def driver_version_select(available, requested, scheme="deb"):
    return V.select_version(available, requested, scheme)


@_input
def driver_vgpu_compat(host, guest):
    return V.vgpu_compatibility(host, guest)


class FilterModule:
    """gpuops.provision driver filters for playbooks (documented in <filter>.yml beside this file)."""

    def filters(self):
        return {
            "driver_drift": driver_drift,
            "driver_drift_table": driver_drift_table,
            "driver_branch": _wrap(driver_branch),
            "driver_version_compare": _wrap(driver_version_compare),
            "driver_version_select": _wrap(driver_version_select),
            "driver_vgpu_compat": _wrap(driver_vgpu_compat),
        }
