# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side NVIDIA driver filters: per-host driver state, fleet drift, drift table, vGPU branch compatibility.

Thin wrappers: the logic is in module_utils (_drivers/fleet.py: host state, drift, table; _common/drift.py: the drift rule shared
with the ESXi VIB drift; _drivers/repo.py: repository listings and requests; _drivers/packages.py, _drivers/versions.py).
Role-internal: the collection's roles and playbooks call these through ``gpuops.provision.internal('<name>', ...)``
(see ``__init__.py``); not a public interface.
"""

from __future__ import annotations

import functools

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.module_utils._drivers import fleet as D
from ansible_collections.gpuops.provision.plugins.module_utils._drivers import packages as P
from ansible_collections.gpuops.provision.plugins.module_utils._drivers import repo as R
from ansible_collections.gpuops.provision.plugins.module_utils._k8s import node_roll
from ansible_collections.gpuops.provision.plugins.module_utils._drivers import versions as V
from ansible_collections.gpuops.provision.plugins.plugin_utils import _role_messages as M
from ansible_collections.gpuops.provision.plugins.plugin_utils._plain import plain as _plain


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
def driver_host_state(packages, names=None, loaded_version=None, pin=None, scheme="deb"):
    return D.host_state(packages, names, loaded_version, pin, scheme)


@_input
def driver_flavour(gpus, requested="auto", branch=None):
    return R.host_flavour(gpus, requested, branch)


@_input
def driver_package_plan(flavour, distribution, os_family, major_version, source, branch, driver_version=None, persistence=True,
                        kernel_modules="dkms", kernel_flavours=None):
    return R.package_plan(flavour, distribution, os_family, major_version, source, branch, driver_version, persistence,
                          kernel_modules, kernel_flavours)


@_input
def driver_nvml_binding_plan(policy, simulation=None, minimum="12.535", method="auto"):
    return R.nvml_binding_plan(policy, simulation, minimum, method)


@_input
def driver_fabric_manager(vendor_files, class_files, branch, setting="auto"):
    return R.fabric_manager_plan(vendor_files, class_files, branch, setting)


def driver_dkms_packages(names):
    return [n for n in names or [] if R.is_dkms_package(n)]


@_input
def driver_install_check(simulation, installed, requested, packages=None):
    return R.install_check(simulation, installed, requested, packages)


@_input
def driver_family(packages, driver_version):
    return D.installed_family(packages, driver_version)


@_input
def driver_apt_pin(driver_version):
    return P.apt_version_pin(str(V.driver_version_of(driver_version)))


@_input
def driver_apt_sources(files, uri, suites, components, signed_by="", ignore=None):
    return R.apt_sources(files, uri, suites, components, signed_by, ignore)


@_input
def driver_apt_source_existing(files, uri, suite="/", ignore=None):
    return R.apt_source_existing(files, uri, suite, ignore)


@_input
def driver_package_file(path, driver_version):
    return P.package_file_identity(path, driver_version)


@_input
def driver_validate(version, branch=None):
    return R.validate(version, branch)


@_input
def driver_repo_versions(text, fmt="madison"):
    return R.repo_versions(text, fmt)


@_input
def driver_resolve(available, packages, requested, scheme="deb"):
    return R.resolve(available, packages, requested, scheme)


def driver_stale_locks(entries, target_evr, hold=True):
    return D.stale_locks(entries or [], target_evr, bool(hold))


def driver_version_locks(packages, driver_version):
    return D.version_locks(packages, driver_version)


def driver_roll_queue(nodes, names, changing, roll="nvidia_driver"):
    return node_roll.roll_queue(_plain(nodes), roll, _plain(names), _plain(changing))


def driver_unavailable_message(resolved, host, version):
    return M.driver_unavailable(_plain(resolved), _plain(host), _plain(version))


def driver_off_pin_message(facts, host, version):
    return M.driver_off_pin(_plain(facts), _plain(host), _plain(version))


def filters():
    """This file's role-internal filters by name (called through gpuops.provision.internal)."""
    return {
        "driver_host_state": _wrap(driver_host_state),
        "driver_flavour": _wrap(driver_flavour),
        "driver_package_plan": _wrap(driver_package_plan),
        "driver_nvml_binding_plan": _wrap(driver_nvml_binding_plan),
        "driver_fabric_manager": _wrap(driver_fabric_manager),
        "driver_dkms_packages": driver_dkms_packages,
        "driver_install_check": _wrap(driver_install_check),
        "driver_family": _wrap(driver_family),
        "driver_apt_pin": _wrap(driver_apt_pin),
        "driver_apt_sources": driver_apt_sources,
        "driver_apt_source_existing": driver_apt_source_existing,
        "driver_package_file": _wrap(driver_package_file),
        "driver_validate": driver_validate,
        "driver_repo_versions": driver_repo_versions,
        "driver_resolve": _wrap(driver_resolve),
        "driver_stale_locks": _wrap(driver_stale_locks),
        "driver_version_locks": _wrap(driver_version_locks),
        "driver_roll_queue": driver_roll_queue,
        "driver_unavailable_message": driver_unavailable_message,
        "driver_off_pin_message": driver_off_pin_message,
    }
