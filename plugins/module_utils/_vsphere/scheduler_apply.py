# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vsphere_host_vgpu_scheduler's workflow: read every host in scope and its nvidia option string, let the pure
planner (_vsphere/scheduler.py) decide, then write the changed hosts in order, through the HostKernelModuleSystem
helpers of _vsphere/api.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import scheduler as sched


def run(session: Any, params: Mapping[str, Any], check_mode: bool) -> tuple[list[dict[str, Any]], list[str]]:
    """Read, validate and plan every host in scope, then update the option string where it differs.

    Returns (per-host results, warnings). Raises SchedulerError or VsphereError, naming the host, before the first
    write when any host is invalid or cannot be read; a failed write names the hosts already changed.
    """
    rows = session.hosts(params.get("datacenter"), params.get("cluster"), params.get("esxi_hostname"),
                         props=api.HOST_PROPS + api.SCHEDULER_HOST_PROPS)
    configured: list[Optional[str]] = []
    for row in rows:
        try:
            configured.append(api.module_option_string(row, sched.MODULE))
        except api.VsphereError:
            # hosts are checked in order: a host before this one that cannot be set is the error to report
            sched.check_hosts(rows, configured, params)
            raise
    plan = sched.plan(rows, configured, params)
    done: list[str] = []
    for row, option_string in plan.writes if not check_mode else []:
        try:
            api.set_module_option_string(row, sched.MODULE, option_string)
        except api.VsphereError as e:
            raise api.VsphereError("%s (already changed: %s)" % (e, ", ".join(done) or "none"))
        done.append(row["name"])
    return sched.results(plan, params)
