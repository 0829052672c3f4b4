# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side GPU health filters (the health roll, playbooks/gpu_health.yml).

Documentation of each filter is in the ``<filter>.yml`` file next to this one.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.module_utils._preflight import health as H
from ansible_collections.gpuops.provision.plugins.plugin_utils._plain import plain as _plain


def gpu_health_plan(reports, nodes, taint_key, max_unhealthy="25%", effect="NoSchedule", node_names=None):
    try:
        return H.roll_plan(_plain(reports or []), _plain(nodes or []), str(taint_key), _plain(max_unhealthy),
                           str(effect), _plain(node_names or {}))
    except H.HealthError as e:
        raise AnsibleFilterError("gpuops.provision.gpu_health_plan: %s" % e)


class FilterModule:
    """gpuops.provision GPU health filters."""

    def filters(self):
        return {"gpu_health_plan": gpu_health_plan}
