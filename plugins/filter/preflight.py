# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side node preflight filters: per-node report, fleet collection, summary and JUnit XML.

Documentation of each filter is in the ``<filter>.yml`` file next to this one.
"""

from __future__ import annotations

from collections.abc import Mapping


from ansible_collections.gpuops.provision.plugins.module_utils._preflight import checks as P
from ansible_collections.gpuops.provision.plugins.plugin_utils._hostvars import host_vars
from ansible_collections.gpuops.provision.plugins.plugin_utils._plain import plain as _plain


def preflight_reports(hostvars, hosts, fact="node_preflight_report"):
    """The report of every host in ``hosts``; a host without one gets a failing 'facts' report."""
    out = []
    for host in hosts or []:
        rep = host_vars(hostvars, host).get(fact)
        if isinstance(rep, Mapping) and "checks" in rep:
            out.append(_plain(rep))
        else:
            out.append(P.missing_report(str(host), "no preflight report: gathering facts failed or the host was unreachable"))
    return out


def preflight_summary(reports):
    return P.fleet_summary(_plain(reports or []))


def preflight_junit(reports, suite_name="node_preflight"):
    return P.junit_xml(_plain(reports or []), suite_name)


class FilterModule:
    """gpuops.provision preflight filters for playbooks (documented in <filter>.yml beside this file)."""

    def filters(self):
        return {
            "preflight_reports": preflight_reports,
            "preflight_summary": preflight_summary,
            "preflight_junit": preflight_junit,
        }
