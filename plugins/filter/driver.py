# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side NVIDIA driver filters for playbooks: fleet drift, drift table, branches, version comparison and
selection, vGPU branch compatibility.

Thin wrappers: the logic is in module_utils (_drivers/fleet.py: drift, table; _common/drift.py: the drift rule shared with the ESXi
VIB drift; _drivers/versions.py). The roles' own driver filters are in plugins/plugin_utils/_role_filters/driver.py.
Documentation of each filter is in the ``<filter>.yml`` file next to this one.
"""

from __future__ import annotations

from ansible_collections.gpuops.provision.plugins.module_utils._drivers import fleet as D
from ansible_collections.gpuops.provision.plugins.module_utils._drivers import versions as V
# The same error wrapping as the role's driver filters: module_utils input, version and package errors read as
# "gpuops.provision driver filter: ..." errors.
from ansible_collections.gpuops.provision.plugins.plugin_utils._role_filters.driver import _input, _wrap


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
