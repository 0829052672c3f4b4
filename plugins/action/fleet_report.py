# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write the fleet report (report.json + self-contained report.html) on the controller in one task.

The model and the HTML come from plugins/plugin_utils/_report.py (the page from its template
plugins/plugin_utils/templates/fleet_report.html.j2); this file only reads the optional run log and writes files
(atomically, and only when the content differs).
"""

from __future__ import annotations

import json
import os

from ansible.errors import AnsibleActionFail, AnsibleFilterError
from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.provision.plugins.plugin_utils import _report as R
from ansible_collections.gpuops.provision.plugins.plugin_utils._plain import plain
from ansible_collections.gpuops.provision.plugins.plugin_utils._report_files import write_report


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("hosts", "dest", "title", "driver_pin", "run_log", "generated_at", "proxmox", "vsphere", "usage"))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self._task.args
        unknown = sorted(set(args) - self._VALID_ARGS)
        if unknown:
            raise AnsibleActionFail("fleet_report: unsupported parameters %s" % ", ".join(unknown))
        hosts = plain(args.get("hosts"))
        dest = args.get("dest")
        if not isinstance(hosts, dict):
            raise AnsibleActionFail("fleet_report: hosts must be a dict of host name to facts; nothing was written")
        if not dest:
            raise AnsibleActionFail("fleet_report: dest is required; nothing was written")
        for name, facts in hosts.items():
            if facts is not None and not isinstance(facts, dict):
                raise AnsibleActionFail("fleet_report: facts of host %s must be a dict, got %s; nothing was written"
                                        % (name, type(facts).__name__))
        apis = {}
        for key in ("proxmox", "vsphere"):
            apis[key] = plain(args.get(key)) or None
            if apis[key] is not None and not isinstance(apis[key], dict):
                raise AnsibleActionFail("fleet_report: %s must be a dict of inventory entry to its read, got %s; nothing "
                                        "was written" % (key, type(apis[key]).__name__))
        usage = plain(args.get("usage")) or None
        if usage is not None and not isinstance(usage, dict):
            raise AnsibleActionFail("fleet_report: usage must be a registered gpuops.provision.gpu_usage_info result (a "
                                    "dict), got %s; nothing was written" % type(usage).__name__)
        run_log = args.get("run_log")
        if run_log:
            run_log = os.path.expanduser(str(run_log))
            try:
                with open(run_log, encoding="utf-8") as fh:
                    changes = R.changes_from_run_log(json.load(fh))
            except FileNotFoundError:
                changes = {}
                result["warnings"] = ["fleet_report: run log %s not found; changes come from the hosts' facts only" % run_log]
            except (OSError, ValueError, AnsibleFilterError) as e:
                raise AnsibleActionFail("fleet_report: cannot read the run log %s: %s; nothing was written" % (run_log, e))
            for name, items in changes.items():
                if name in hosts:
                    facts = dict(hosts[name] or {})
                    facts["changes"] = list(facts.get("changes") or []) + items
                    hosts[name] = facts
        try:
            model = R.fleet_model(hosts, title=str(args.get("title") or "GPU fleet report"),
                                  generated_at=args.get("generated_at") or None, driver_pin=args.get("driver_pin") or None,
                                  proxmox=apis["proxmox"], vsphere=apis["vsphere"], usage=usage)
        except (AnsibleFilterError, TypeError, ValueError) as e:
            raise AnsibleActionFail("fleet_report: %s; nothing was written" % e)
        # Relative: from the directory ansible-playbook runs in (the controller process's), reported absolute.
        dest = os.path.abspath(os.path.expanduser(str(dest)))
        json_path, html_path = os.path.join(dest, "report.json"), os.path.join(dest, "report.html")
        # The health history carries on from the last report in the same place (an unreadable one starts afresh).
        try:
            with open(json_path, encoding="utf-8") as fh:
                previous = json.load(fh)
        except (OSError, ValueError):
            previous = None
        model = R.with_health_history(model, previous)
        written = []
        try:
            # The HTML follows the JSON: when the model is the same but for its generation time, both stay as they are.
            if write_report(json_path, json.dumps(model, indent=2, sort_keys=True) + "\n", self._task.check_mode):
                written.append(json_path)
                if write_report(html_path, R.render_html(model), self._task.check_mode):
                    written.append(html_path)
            elif not os.path.exists(html_path) and write_report(html_path, R.render_html(model), self._task.check_mode):
                written.append(html_path)
        except OSError as e:
            raise AnsibleActionFail("fleet_report: writing the report to %s failed: %s" % (dest, e))
        result.update(changed=bool(written), json=json_path, html=html_path, written=written, summary=model["summary"])
        return result
