# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""verify.yml's views of the product's requests, read from the lab control plane's audit log (lab/kube/requestlog.py,
as the pytest drivers read it), plus the failures of a nested ansible-playbook run."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "lab", "kube"))
import requestlog  # noqa: E402  pylint: disable=import-error,wrong-import-position


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
            "k8s_requests": requestlog.from_audit,
            "k8s_writes": requestlog.writes,
            "k8s_node_patches": requestlog.node_patches,
            "k8s_timeline": requestlog.timeline,
            "k8s_evictions": requestlog.evictions,
            "k8s_mig_allocatable": requestlog.mig_allocatable,
            "playbook_failures": playbook_failures,
        }
