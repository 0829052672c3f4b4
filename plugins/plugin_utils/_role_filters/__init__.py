# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The computations the collection's own roles and playbooks call from Jinja, kept out of the public filter surface.

A collection role cannot carry filter plugins of its own (ansible-core ``playbook/role/__init__.py``
``Role._load_role_data`` adds a role's plugin folders for legacy roles only), so these live here, one file per domain,
each a thin wrapper over module_utils (the logic and its tests) whose ``filters()`` names them. The roles reach them
through one public filter, ``gpuops.provision.internal('<name>', ...)`` (plugins/filter/internal.py): users see one
entry marked internal instead of eighty, and names and arguments here may change with the roles that use them.

All files here are controller-side wrappers (no I/O); the public, documented filters stay in plugins/filter/.
"""

from __future__ import annotations

from ansible_collections.gpuops.provision.plugins.plugin_utils._role_filters import (
    driver, gpu_pools, kmod, license, mig, preflight, pve, usage, vgpu_scheduler,
)

_DOMAINS = (driver, gpu_pools, kmod, license, mig, preflight, pve, usage, vgpu_scheduler)


def preload(data=""):
    """Its input unchanged, for a play's or a role entry point's first task name to call (``'' | ...`` where the name
    has no template of its own).

    The controller templates a task's and a play's name in its own process, before it forks the worker that runs the
    task, and workers inherit what that process has loaded. ansible-core compiles a collection's plugins and the
    module_utils they import from source in every process that loads them (no bytecode cache), so without this each
    task that calls one of the collection's filters spent about 0.4 s of CPU loading them anew in its worker
    (bench/filter_preload).
    """
    return data


def registry():
    """Every role-internal filter by name; a name defined twice is a programming error."""
    out = {"preload": preload}
    for domain in _DOMAINS:
        for name, func in domain.filters().items():
            if name in out:
                raise ValueError("role-internal filter %s defined twice (%s)" % (name, domain.__name__))
            out[name] = func
    return out
