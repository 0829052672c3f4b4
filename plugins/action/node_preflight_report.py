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
import tempfile

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.provision.plugins.module_utils import _preflight as P


def _plain(value):
    if isinstance(value, dict):
        return dict((str(k), _plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


def _write(path, text, check_mode):
    """Atomic write when the content differs; returns whether it (would have) changed."""
    try:
        with open(path, encoding="utf-8") as fh:
            if fh.read() == text:
                return False
    except FileNotFoundError:
        pass
    if check_mode:
        return True
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".preflight-")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return True


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("reports", "report_dir", "junit_file", "suite_name"))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = self._task.args
        reports = _plain(args.get("reports"))
        report_dir = args.get("report_dir")
        if not isinstance(reports, list) or not all(isinstance(r, dict) and "node" in r and "checks" in r for r in reports):
            raise AnsibleActionFail("reports must be a list of preflight reports (gpuops.provision.preflight_reports)")
        if not report_dir:
            raise AnsibleActionFail("report_dir is required")
        report_dir = os.path.expanduser(str(report_dir))
        files, changed = [], []
        try:
            for rep in reports:
                name = str(rep["node"])
                if os.sep in name or name in (".", ".."):
                    raise AnsibleActionFail("node name %r cannot be a file name" % name)
                path = os.path.join(report_dir, name + ".json")
                files.append(path)
                if _write(path, json.dumps(rep, indent=2, sort_keys=True) + "\n", self._task.check_mode):
                    changed.append(path)
            junit = args.get("junit_file")
            if junit:
                junit = os.path.expanduser(str(junit))
                files.append(junit)
                if _write(junit, P.junit_xml(reports, str(args.get("suite_name") or "node_preflight")), self._task.check_mode):
                    changed.append(junit)
        except OSError as e:
            raise AnsibleActionFail("writing the preflight reports failed: %s" % e)
        result.update(changed=bool(changed), files=files, written=changed, summary=P.fleet_summary(reports))
        return result
