# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side MIG roll filters (thin: the logic is in module_utils/_k8s/mig_roll.py).

Documentation of each filter is in the ``<filter>.yml`` file next to this one.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.module_utils._k8s import mig_roll as R
from ansible_collections.gpuops.provision.plugins.module_utils._mig import geometry
from ansible_collections.gpuops.provision.plugins.plugin_utils._hostvars import host_vars
from ansible_collections.gpuops.provision.plugins.plugin_utils._plain import plain as _plain


def _wrap(name, fn, *args, **kwargs):
    try:
        return fn(*[_plain(a) for a in args], **dict((k, _plain(v)) for k, v in kwargs.items()))
    except (R.RollError, geometry.MigError) as e:
        raise AnsibleFilterError("gpuops.provision.%s: %s" % (name, e))


def mig_roll_summary(hosts, hostvars, check=False):
    """The playbook's per-node summary line from every host's plan and result facts."""
    rows = []
    for host in hosts or []:
        hv = host_vars(hostvars, host)
        rows.append((str(host), _plain(hv.get("__mig_reconfigure_plan") or {}), _plain(hv.get("__mig_reconfigure_result") or {})))
    return _wrap("mig_roll_summary", R.roll_summary, rows, bool(check))


class FilterModule:
    """gpuops.provision mig filters for playbooks (documented in <filter>.yml beside this file)."""

    def filters(self):
        return {
            "mig_roll_summary": mig_roll_summary,
        }
