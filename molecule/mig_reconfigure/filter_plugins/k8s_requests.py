# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Views of the Kubernetes stand-in's request log (lab/k8s: one JSON object per line) for verify.yml."""

from __future__ import annotations

import json

WRITES = ("POST", "PATCH", "PUT", "DELETE")


def k8s_requests(text):
    """The request log's text -> list of requests."""
    return [json.loads(line) for line in (text or "").splitlines() if line.strip()]


def k8s_writes(log):
    return [r for r in log if r["method"] in WRITES]


def k8s_node_patches(log, node):
    return [r for r in log if r["method"] == "PATCH" and r["path"] == "/api/v1/nodes/" + node]


def _unschedulable(entry):
    """True/False when the PATCH sets spec.unschedulable, else None."""
    body = entry.get("body")
    if isinstance(body, dict) and "unschedulable" in (body.get("spec") or {}):
        return bool(body["spec"]["unschedulable"])
    if isinstance(body, list):
        for op in body:
            if op.get("path") == "/spec/unschedulable":
                return bool(op.get("value"))
    return None


def k8s_timeline(log, node):
    """{cordon, uncordon, cordons, uncordons, seconds}: first cordon and last uncordon times of the node."""
    cordon = uncordon = None
    cordons = uncordons = 0
    for r in k8s_node_patches(log, node):
        value = _unschedulable(r)
        if value is True:
            cordons += 1
            cordon = r["t"] if cordon is None else cordon
        elif value is False:
            uncordons += 1
            uncordon = r["t"]
    seconds = round(uncordon - cordon, 2) if cordon is not None and uncordon is not None else None
    return {"cordon": cordon, "uncordon": uncordon, "cordons": cordons, "uncordons": uncordons, "seconds": seconds}


def k8s_evictions(log, node=None, outcome=None):
    return [r for r in log if r["method"] == "POST" and r.get("subresource") == "eviction"
            and (node is None or r.get("node") == node) and (outcome is None or r.get("outcome") == outcome)]


def playbook_failures(out):
    """ansible.builtin's json callback output -> {host: [msg, ...]} of failed tasks (rescued or ignored ones aside)."""
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
            "k8s_requests": k8s_requests,
            "k8s_writes": k8s_writes,
            "k8s_node_patches": k8s_node_patches,
            "k8s_timeline": k8s_timeline,
            "k8s_evictions": k8s_evictions,
            "playbook_failures": playbook_failures,
        }
