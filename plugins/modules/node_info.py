#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_info
short_description: Read every Kubernetes node in one paginated LIST, keeping what a GPU roll plans with
version_added: 0.1.0
description:
  - One LIST of the cluster's nodes in pages (C(limit)/C(continue), a consistent snapshot, as C(kubectl get nodes
    --chunk-size) reads), returned as node objects cut down to what the collection's rolls plan with - name, labels,
    annotations, C(spec.unschedulable) and C(spec.taints), the C(Ready) condition and C(status.allocatable) - so that a
    plan over a thousand nodes passes megabytes less through Ansible than C(kubernetes.core.k8s_info) (no
    C(managedFields), images or addresses).
  - The result has the shape of C(kubernetes.core.k8s_info)'s (RV(resources)), so filters written for that read it.
extends_documentation_fragment:
  - gpuops.provision._attributes
  - gpuops.provision._attributes.INFO_MODULE
  - gpuops.provision._kubernetes_auth
options:
  page_size:
    description:
      - Nodes per page of the LIST.
    type: int
    default: 500
  pods:
    description:
      - Also list the pods of O(pods.namespace) that match O(pods.label_selector), in the same API session (one module
        run less than a C(kubernetes.core.k8s_info) of them), cut down to name, namespace, labels, C(deletionTimestamp),
        C(spec.nodeName) and C(status.phase) (RV(pods)).
    type: dict
    suboptions:
      namespace:
        description: Namespace of the pods.
        type: str
        required: true
      label_selector:
        description: Label selector (as C(kubectl get -l) takes it).
        type: str
        default: ""
notes:
  - The identity needs C(list) on C(nodes), and with O(pods) C(list) on C(pods) in O(pods.namespace).
seealso:
  - module: kubernetes.core.k8s_info
"""

EXAMPLES = r"""
- name: Read the nodes once for the whole play
  gpuops.provision.node_info:
  register: nodes
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
resources:
  description: The nodes, each cut down to C(metadata) (V(name), V(labels), V(annotations), V(resourceVersion)),
    C(spec) (V(unschedulable), V(taints)) and C(status) (the V(Ready) condition, V(allocatable)).
  returned: success
  type: list
  elements: dict
pods:
  description: With O(pods), the pods listed, each cut down to C(metadata) (V(name), V(namespace), V(labels),
    V(deletionTimestamp) when set), C(spec.nodeName) and C(status.phase).
  returned: when O(pods) is set
  type: list
  elements: dict
index:
  description:
    - Where each node and its pods are in RV(resources) and RV(pods) - C(nodes) (name to position) and C(pods) (node
      name to the positions of its pods) - so that a filter run for each host of a large fleet reads only its own
      node (the mig_reconfigure role does).
  returned: success
  type: dict
  sample: {"nodes": {"gpu-1": 0, "gpu-2": 1}, "pods": {"gpu-2": [0]}}
  version_added: 0.1.0
pages:
  description: How many pages the LIST took.
  returned: success
  type: int
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.provision.plugins.module_utils._common import bounds
from ansible_collections.gpuops.provision.plugins.module_utils._k8s import api as k8s_api, node_roll, node_roll_apply

BOUNDS = {"timeout": bounds.API_TIMEOUT, "page_size": (1, 5000, "nodes per page")}


def main():
    module = AnsibleModule(argument_spec=dict(page_size=dict(type="int", default=500),
                                              pods=dict(type="dict", options=dict(
                                                  namespace=dict(type="str", required=True),
                                                  label_selector=dict(type="str", default=""))),
                                              **k8s_api.ARGUMENT_SPEC),
                           supports_check_mode=True)
    p = module.params
    if not k8s_api.HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=str(k8s_api.KUBERNETES_ERROR))
    problems = bounds.out_of_range(p, BOUNDS)
    if problems:
        module.fail_json(msg="; ".join(problems))
    what = "the Kubernetes nodes"
    out = {}
    try:
        pages: list[int] = []
        api = k8s_api.api_client(p["kubeconfig"], p["context"])
        nodes = node_roll_apply.list_nodes(api, p["timeout"], page=p["page_size"], pages=pages)
        if p["pods"]:
            what = "the pods of %s (%s)" % (p["pods"]["namespace"], p["pods"]["label_selector"] or "all")
            out["pods"] = [node_roll.slim_pod(x) for x in node_roll_apply.list_pods(
                api, p["pods"]["namespace"], p["pods"]["label_selector"], p["timeout"])]
    except Exception as e:  # pylint: disable=broad-except  # API, urllib3 and kubeconfig errors: report, never a traceback
        module.fail_json(msg="cannot list %s: %s" % (what, k8s_api.api_message(e) if isinstance(e, k8s_api.ApiException) else e))
    resources = [node_roll.slim(n) for n in nodes]
    module.exit_json(changed=False, resources=resources, pages=len(pages),
                     index=node_roll.positions(resources, out.get("pods") or []), **out)


if __name__ == "__main__":
    main()
