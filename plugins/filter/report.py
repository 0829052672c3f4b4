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


def report_model(hosts, title="GPU fleet report", generated_at=None, driver_pin=None, proxmox=None, vsphere=None):
    return _report.fleet_model(hosts, title=title, generated_at=generated_at, driver_pin=driver_pin, proxmox=proxmox,
                               vsphere=vsphere)


class FilterModule(object):
    def filters(self):
        return {"report_model": report_model}
