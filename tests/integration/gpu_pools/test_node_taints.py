# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpuops.provision.node_taints against the lab's upstream kube-apiserver (issue 45 point 7): gpu_pools wrote the
node's whole taint list as the plan had read it, with no resourceVersion, reverting taints that others (the node
lifecycle controller, an autoscaler) added or removed in between. The module writes only the pool's own taint from
a fresh read, with the node's resourceVersion, and works it out again on a 409."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "lab", "kube"))
import kube_harness  # noqa: E402  pylint: disable=import-error,wrong-import-position
from requestlog import node_patches  # noqa: E402  pylint: disable=import-error,wrong-import-position

from ansible_collections.gpuops.provision.plugins.module_utils._k8s import api as k8s_api  # noqa: E402
from ansible_collections.gpuops.provision.plugins.modules import node_taints  # noqa: E402

pytestmark = pytest.mark.slow

POOL = {"key": "gpuops.io/gpu-pool", "value": "notebooks", "effect": "NoSchedule"}
OLD_POOL = {"key": "gpuops.io/gpu-pool", "value": "training", "effect": "NoSchedule"}
# An operator's taint. The node lifecycle controller's own (node.kubernetes.io/*) come and go with the kwok node's
# Ready condition (kube-controller-manager pkg/controller/nodelifecycle), so the checks below leave them out.
OPERATOR = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
AUTOSCALER = {"key": "ToBeDeletedByClusterAutoscaler", "value": "1733300000", "effect": "NoSchedule"}


@pytest.fixture()
def lab(tmp_path):
    fixture = {"nodes": [{"metadata": {"name": "gpu-a"}, "spec": {"taints": [dict(OLD_POOL), dict(OPERATOR)]}}]}
    with kube_harness.kube_lab(fixture, run_dir=str(tmp_path / "k8s")) as running:
        yield running


def taints(lab):
    return [{k: v for k, v in t.items() if k != "timeAdded"} for t in lab.get_json("/api/v1/nodes/gpu-a")["spec"].get("taints") or []
            if not t["key"].startswith("node.kubernetes.io/")]


def test_another_writers_taint_added_between_the_read_and_the_write_is_kept(lab, monkeypatch):
    import kubernetes  # pylint: disable=import-outside-toplevel
    read = kubernetes.client.CoreV1Api.read_node
    raced = []

    def racing_read(self, name, **kwargs):
        out = read(self, name, **kwargs)
        if not raced:  # the autoscaler taints the node right after this run read it
            raced.append(True)
            current = lab.core.read_node(name).spec.taints or []
            lab.core.patch_node(name, {"spec": {"taints": [lab.api_client.sanitize_for_serialization(t) for t in current]
                                                + [AUTOSCALER]}})
        return out

    monkeypatch.setattr(kubernetes.client.CoreV1Api, "read_node", racing_read)
    api = k8s_api.api_client(lab.kubeconfig)
    before, after, labels = k8s_api.set_taints(api, "gpu-a", [POOL], ["gpuops.io/gpu-pool"], {"gpuops.io/gpu-pool": "notebooks"},
                                               30, False)
    # The write that carried the first read's resourceVersion was refused; the second read saw the autoscaler's taint.
    statuses = [r["status"] for r in node_patches(lab.requests(), "gpu-a")]
    assert statuses == [409, 200], statuses
    assert AUTOSCALER in before
    assert taints(lab) == [OPERATOR, AUTOSCALER, POOL]
    assert labels == {"gpuops.io/gpu-pool": "notebooks"}
    assert lab.get_json("/api/v1/nodes/gpu-a")["metadata"]["labels"]["gpuops.io/gpu-pool"] == "notebooks"


def test_the_module_replaces_only_its_own_taint_and_a_second_run_writes_nothing(lab, run_module):
    args = {"name": "gpu-a", "taints": [POOL], "kubeconfig": lab.kubeconfig}
    check = run_module(node_taints, args, check_mode=True)
    after = [t for t in check["after"] if not t["key"].startswith("node.kubernetes.io/")]
    assert check["changed"] is True and after == [OPERATOR, POOL] and taints(lab) == [OLD_POOL, OPERATOR]
    done = run_module(node_taints, args)
    assert done["changed"] is True and taints(lab) == [OPERATOR, POOL]
    writes = len(node_patches(lab.requests(), "gpu-a"))
    again = run_module(node_taints, args)
    assert again["changed"] is False and len(node_patches(lab.requests(), "gpu-a")) == writes
    bad = run_module(node_taints, dict(args, taints=[{"key": "x"}]))
    assert bad["failed"] is True and bad["msg"] == "node gpu-a: taints: {'key': 'x'} needs a key and an effect; nothing was changed"
