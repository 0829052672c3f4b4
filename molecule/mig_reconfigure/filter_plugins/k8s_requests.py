# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""verify.yml's views of the Kubernetes stand-in's request log: the ones the pytest drivers use (lab/k8s/k8s_harness.py),
plus the failures of a nested ansible-playbook run."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "lab", "k8s"))
import k8s_harness  # noqa: E402  pylint: disable=import-error,wrong-import-position


def playbook_failures(out):
    """ansible.builtin's json callback output -> {host: [msg, ...]} of failed tasks (ignored ones aside)."""
    res = {}
    for play in out.get("plays", []):
        for task in play.get("tasks", []):
            for host, r in task.get("hosts", {}).items():
                if r.get("failed") and not r.get("_ansible_ignore_errors"):
                    res.setdefault(host, []).append(r.get("msg", ""))
    return res


class FilterModule:
    def filters(self):
        return {
            "k8s_requests": k8s_harness.parse_requests,
            "k8s_writes": k8s_harness.writes,
            "k8s_node_patches": k8s_harness.node_patches,
            "k8s_timeline": k8s_harness.timeline,
            "k8s_evictions": k8s_harness.evictions,
            "k8s_mig_allocatable": k8s_harness.mig_allocatable,
            "playbook_failures": playbook_failures,
        }
