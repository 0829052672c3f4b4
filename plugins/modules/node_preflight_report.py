#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_preflight_report
short_description: Write node preflight reports (JSON per node, JUnit XML) on the controller
version_added: 0.1.0
description:
  - Writes each report made by the P(gpuops.provision.node_preflight#role) role to C(<report_dir>/<node>.json)
    and all of them to one JUnit XML file (one C(testsuite) per node, one C(testcase) per check), and returns the
    fleet summary.
  - Runs on the controller as an action plugin; nothing is sent to the managed node. Files are replaced atomically
    and only when their content differs.
extends_documentation_fragment:
  - gpuops.provision._attributes
attributes:
  check_mode:
    support: full
    details:
      - Reports which files would change without writing them.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  reports:
    description:
      - Reports, for example C(hostvars | gpuops.provision.preflight_reports(ansible_play_hosts_all)).
    type: list
    elements: dict
    required: true
  report_dir:
    description:
      - Controller directory for the JSON files; created when missing. A relative path is taken from the directory
        C(ansible-playbook) runs in.
    type: path
    required: true
  junit_file:
    description:
      - Controller path of the JUnit XML file; none is written when omitted. A relative path is taken from the
        directory C(ansible-playbook) runs in.
    type: path
  suite_name:
    description:
      - Name of the JUnit C(testsuites) element and prefix of every C(testsuite).
    type: str
    default: node_preflight
seealso:
  - name: The node_preflight role
    description: Gathers the facts, decides and calls this action.
    link: https://github.com/gpuops/provision/tree/main/roles/node_preflight
"""

EXAMPLES = r"""
- name: Write the reports of every host of the play
  gpuops.provision.node_preflight_report:
    reports: "{{ hostvars | gpuops.provision.preflight_reports(ansible_play_hosts_all) }}"
    report_dir: "{{ playbook_dir }}/preflight-reports"
    junit_file: "{{ playbook_dir }}/preflight-reports/preflight-junit.xml"
  run_once: true
  check_mode: false
  register: preflight
"""

RETURN = r"""
files:
  description: Every file this task is responsible for.
  returned: always
  type: list
  elements: str
  sample: [/srv/reports/gpu-node-1.json, /srv/reports/preflight-junit.xml]
written:
  description: The files whose content changed (or would change in check mode).
  returned: always
  type: list
  elements: str
summary:
  description: Fleet summary with C(nodes) (per node C(verdict), C(ready), C(failed_checks), C(warned_checks)),
    C(total), C(passed), C(warned), C(failed), C(ready), C(not_ready) and a readable C(table).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    # The work happens in the action plugin of the same name on the controller; reaching this means it was bypassed.
    module = AnsibleModule(
        argument_spec=dict(
            reports=dict(type="list", elements="dict", required=True),
            report_dir=dict(type="path", required=True),
            junit_file=dict(type="path"),
            suite_name=dict(type="str", default="node_preflight"),
        ),
        supports_check_mode=True,
    )
    module.fail_json(msg="gpuops.provision.node_preflight_report runs on the controller as an action plugin; "
                         "it cannot run as a module on %s" % "the managed node")


if __name__ == "__main__":
    main()
