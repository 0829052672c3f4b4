# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write preflight reports on the controller: one JSON file per node and one JUnit XML file, in one task.

Runs entirely in the controller process (no module is sent anywhere): a copy task per node would cost two module runs
each, which dominates the preflight's run time on large fleets.
"""

from __future__ import annotations

import json
import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.provision.plugins.module_utils._preflight import checks as P
from ansible_collections.gpuops.provision.plugins.plugin_utils._plain import plain
from ansible_collections.gpuops.provision.plugins.plugin_utils._report_files import write_report


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("reports", "report_dir", "junit_file", "suite_name"))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self._task.args
        reports = plain(args.get("reports"))
        report_dir = args.get("report_dir")
        if not isinstance(reports, list) or not all(isinstance(r, dict) and "node" in r and "checks" in r for r in reports):
            raise AnsibleActionFail("reports must be a list of preflight reports (gpuops.provision.preflight_reports)")
        if not report_dir:
            raise AnsibleActionFail("report_dir is required")
        # Relative: from the directory ansible-playbook runs in (the controller process's), reported absolute.
        report_dir = os.path.abspath(os.path.expanduser(str(report_dir)))
        files, changed = [], []
        try:
            for rep in reports:
                name = str(rep["node"])
                if os.sep in name or name in (".", ".."):
                    raise AnsibleActionFail("node name %r cannot be a file name" % name)
                path = os.path.join(report_dir, name + ".json")
                files.append(path)
                if write_report(path, json.dumps(rep, indent=2, sort_keys=True) + "\n", self._task.check_mode):
                    changed.append(path)
            junit = args.get("junit_file")
            if junit:
                junit = os.path.abspath(os.path.expanduser(str(junit)))
                files.append(junit)
                if write_report(junit, P.junit_xml(reports, str(args.get("suite_name") or "node_preflight")), self._task.check_mode):
                    changed.append(junit)
        except OSError as e:
            raise AnsibleActionFail("writing the preflight reports failed: %s" % e)
        result.update(changed=bool(changed), files=files, written=changed, summary=P.fleet_summary(reports))
        return result
