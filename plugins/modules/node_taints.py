#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_taints
short_description: Put the collection's own taints on a Kubernetes node without touching anyone else's
version_added: 0.1.0
description:
  - Reads the node and writes, in one PATCH carrying the resourceVersion it read, its taint list with O(taints) in
    place (a taint of the same key and effect replaced), the taints whose key is in O(managed_keys) but not in
    O(taints) removed, and every other taint kept as it is; O(labels) are merged in the same PATCH.
  - When another writer changed the node between the read and the write (the node lifecycle controller's
    C(node.kubernetes.io/*) taints, a cluster autoscaler's), the API server refuses the PATCH (409 Conflict) and the
    module reads the node again and works the list out again, so nobody else's taint is reverted.
extends_documentation_fragment:
  - gpuops.provision._attributes
  - gpuops.provision._kubernetes_auth
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
options:
  name:
    description:
      - Name of the node.
    type: str
    required: true
  taints:
    description:
      - The taints this run owns on the node, each V(key), V(value) (optional) and V(effect).
    type: list
    elements: dict
    default: []
  managed_keys:
    description:
      - Taint keys this run owns; a taint with one of them that O(taints) does not list is removed.
    type: list
    elements: str
    default: [gpuops.io/gpu-pool]
  labels:
    description:
      - Labels merged in the same PATCH; a V(null) value removes the label.
    type: dict
    default: {}
notes:
  - The identity needs C(get) and C(patch) on C(nodes).
seealso:
  - module: kubernetes.core.k8s_taint
"""

EXAMPLES = r"""
- name: The pool's taint on the node, other taints kept
  gpuops.provision.node_taints:
    name: gpu-node-1
    taints:
      - {key: gpuops.io/gpu-pool, value: notebooks, effect: NoSchedule}
    labels:
      gpuops.io/gpu-pool: notebooks
  delegate_to: localhost
"""

RETURN = r"""
before:
  description: The node's taints before the run.
  returned: success
  type: list
  elements: dict
after:
  description: Its taints after the run (as they would be, in check mode).
  returned: success
  type: list
  elements: dict
labels:
  description: The label changes written (or that would be).
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.provision.plugins.module_utils._common import bounds
from ansible_collections.gpuops.provision.plugins.module_utils._k8s import api

BOUNDS = {"timeout": bounds.API_TIMEOUT}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            taints=dict(type="list", elements="dict", default=[]),
            managed_keys=dict(type="list", elements="str", default=["gpuops.io/gpu-pool"], no_log=False),
            labels=dict(type="dict", default={}),
            **api.ARGUMENT_SPEC
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not api.HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=str(api.KUBERNETES_ERROR))
    problems = bounds.out_of_range(p, BOUNDS) + api.label_problems(p, ("labels",))
    problems += ["taints: %r needs a key and an effect" % (t,) for t in p["taints"] if not t.get("key") or not t.get("effect")]
    if problems:
        module.fail_json(msg="node %s: %s; nothing was changed" % (p["name"], "; ".join(problems)))
    try:
        before, after, labels = api.set_taints(api.api_client(p["kubeconfig"], p["context"]), p["name"], p["taints"],
                                               p["managed_keys"], p["labels"], p["timeout"], module.check_mode)
    except api.NodeStepError as e:
        module.fail_json(msg=str(e))
    except Exception as e:  # pylint: disable=broad-except  # API, urllib3 and kubeconfig errors: report, never a traceback
        module.fail_json(msg=api.describe_failure(p["name"], e))
    result = dict(changed=before != after or bool(labels), before=before, after=after, labels=labels)
    if module._diff:
        result["diff"] = dict(before={"taints": before}, after={"taints": after},
                              before_header="node/%s" % p["name"], after_header="node/%s" % p["name"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
