# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fleet report filter ``report_model``: a thin wrapper over plugins/plugin_utils/_report.py.

Documentation of the filter is in ``report_model.yml`` next to this file. The model and the HTML page (rendered from
plugins/plugin_utils/templates/fleet_report.html.j2) live in plugin_utils; the action plugin ``fleet_report`` uses
them from there.
"""

from __future__ import annotations

from ansible_collections.gpuops.provision.plugins.plugin_utils import _report
# Re-exported: this module's names before the model moved to plugin_utils (tests and callers of the old path).
from ansible_collections.gpuops.provision.plugins.plugin_utils._report import (  # noqa: F401  pylint: disable=unused-import
    HISTORY_RUNS, changes_from_run_log, fleet_model, host_model, memory_slices, render_html, with_health_history)


def report_model(hosts, title="GPU fleet report", generated_at=None, driver_pin=None):
    return _report.fleet_model(hosts, title=title, generated_at=generated_at, driver_pin=driver_pin)


class FilterModule(object):
    def filters(self):
        return {"report_model": report_model}
