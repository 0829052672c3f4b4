#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_release
short_description: Hand a Kubernetes node back after a GPU change, once it advertises the expected resources
version_added: 0.1.0
description:
  - The steps that follow a change of a node's GPUs (a MIG geometry, a sharing mode), in one API session and in this
    order, as NVIDIA's mig-manager takes them (C(mig-parted pkg/mig/reconfigure/reconfigure.go) C(Run)).
  - 1. Patches O(restore_labels) (for example the GPU Operator operand labels paused before the change, so that the
    device plugin DaemonSet comes back).
  - 2. Deletes O(restart_pods) (for example the operator validator, so that its DaemonSet recreates it and it
    validates the new geometry).
  - 3. Waits until the node's C(status.allocatable) advertises exactly O(resources) (C(nvidia.com/gpu) and
    C(nvidia.com/mig-*) above 0; others are ignored), watching the Node as C(kubectl wait) does.
  - 4. Patches O(labels) and C(spec.unschedulable) (O(unschedulable)) together, in one PATCH, as C(kubectl uncordon)
    writes it.
  - A step that would change nothing writes nothing. When the wait runs out, the final labels and the uncordon are
    not written, the task fails naming the node, the expected and the advertised resources, and the node stays as
    it was (cordoned).
extends_documentation_fragment:
  - gpuops.provision._attributes
  - gpuops.provision._kubernetes_auth
attributes:
  check_mode:
    support: full
    details:
      - Reads the node and reports the label and cordon changes it would write; deletes no pod and does not wait.
  diff_mode:
    support: full
  idempotent:
    support: partial
    details:
      - The label and cordon patches are idempotent. O(restart_pods) are deleted on every run, which is their purpose.
options:
  name:
    description:
      - Name of the node.
    type: str
    required: true
  restore_labels:
    description:
      - Labels patched first, before any wait; a V(null) value removes the label.
    type: dict
    default: {}
  restart_pods:
    description:
      - Label selectors (as C(kubectl get -l) takes them) of the pods on this node, in O(namespace), that are deleted
        after O(restore_labels) and before the wait, for example the operator validator, whose DaemonSet recreates
        it so that it validates the new geometry.
    type: list
    elements: str
    default: []
  namespace:
    description:
      - Namespace of O(restart_pods).
    type: str
    default: gpu-operator
  resources:
    description:
      - "The GPU resources the node must advertise, resource name to count, for example
        V({\"nvidia.com/mig-3g.40gb\": 2}). Every C(nvidia.com/gpu) and C(nvidia.com/mig-*) resource counts; one the
        node advertises above 0 that is not listed here is a mismatch."
      - Unset, the module does not wait.
    type: dict
  wait_timeout:
    description:
      - Seconds to wait for O(resources).
    type: int
    default: 300
  labels:
    description:
      - Labels patched at the end, with the cordon state; a V(null) value removes the label.
    type: dict
    default: {}
  unschedulable:
    description:
      - C(spec.unschedulable) written at the end with O(labels); V(false) uncordons, V(true) keeps or makes the node
        cordoned. Unset, the cordon state is left as it is, or with O(roll) decided by the roll's state on the node.
    type: bool
  roll:
    description:
      - The roll (M(gpuops.provision.node_roll)) whose turn on this node ends here. The first PATCH records phase
        V(applied) (so that a run killed during the wait does not drain the node again), the last one phase
        V(released), removes our cordon annotations and uncordons the node when the cordon is the roll's; an
        operator's cordon from before the roll stays.
    type: str
  lease:
    description:
      - With O(roll), the roll's Lease, in which the node's slot is given back after the last PATCH.
    type: dict
    suboptions:
      name:
        description: Name of the Lease.
        type: str
        required: true
      namespace:
        description: Its namespace.
        type: str
        default: kube-system
      holder:
        description: This run's holder identity.
        type: str
        required: true
notes:
  - The identity needs C(get), C(list), C(watch) and C(patch) on C(nodes), and C(list) and C(delete) on the pods of
    O(namespace) when O(restart_pods) is set.
seealso:
  - module: kubernetes.core.k8s_drain
  - name: NVIDIA mig-manager (mig-parted reconfigure)
    description: The order of the steps after a MIG change.
    link: https://github.com/NVIDIA/mig-parted/blob/main/pkg/mig/reconfigure/reconfigure.go
"""

EXAMPLES = r"""
- name: Restore the device plugin, wait for the new MIG devices, label the node and uncordon it
  gpuops.provision.node_release:
    name: gpu-node-1
    restore_labels:
      nvidia.com/gpu.deploy.device-plugin: "true"
      nvidia.com/gpu.deploy.gpu-feature-discovery: "true"
    restart_pods: [app=nvidia-operator-validator]
    namespace: gpu-operator
    resources:
      nvidia.com/mig-3g.40gb: 2
    labels:
      nvidia.com/mig.config: all-3g.40gb
      nvidia.com/mig.config.state: success
    unschedulable: false
  delegate_to: localhost
"""

RETURN = r"""
before:
  description: The node before the run.
  returned: success
  type: dict
  contains:
    labels:
      description: Its labels.
      type: dict
    unschedulable:
      description: Whether it was cordoned.
      type: bool
    advertised:
      description: The GPU resources it advertised (C(nvidia.com/gpu), C(nvidia.com/mig-*) above 0).
      type: dict
after:
  description: The node after the run (in check mode, as it would be; V(advertised) is then what it advertises now).
  returned: success
  type: dict
  sample: {"labels": {"nvidia.com/mig.config": "all-3g.40gb"}, "unschedulable": false,
           "advertised": {"nvidia.com/mig-3g.40gb": 2}}
restored:
  description: The labels the first patch changed (or would change).
  returned: always
  type: dict
pods_deleted:
  description: The pods deleted, as V(namespace/name).
  returned: always
  type: list
  elements: str
waited_seconds:
  description: Seconds until the node advertised O(resources); V(null) when there was no wait.
  returned: always
  type: float
final:
  description: The final PATCH (labels and C(spec.unschedulable)); empty when nothing changed.
  returned: always
  type: dict
disruptions:
  description:
    - What the run does (in check mode would do) to the node and its pods, in order - the O(restart_pods) deleted
      (naming the first 10), and a cordon (O(unschedulable=true) on a node that was not cordoned). Labels and the
      uncordon disrupt nothing and are not listed.
    - With diff mode they come first in the diff, in an entry of their own, before the configuration diff.
  returned: success
  type: list
  elements: str
  sample: ["restart pods of node gpu-node-1 (deleted for their controllers to recreate), 1 pod(s): gpu-operator/nvidia-operator-validator-x"]
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.provision.plugins.module_utils._common import bounds
from ansible_collections.gpuops.provision.plugins.module_utils._k8s import api as k8s_api, node_roll_apply

BOUNDS = {"wait_timeout": bounds.TASK_TIMEOUT, "timeout": bounds.API_TIMEOUT}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            restore_labels=dict(type="dict", default={}),
            restart_pods=dict(type="list", elements="str", default=[]),
            namespace=dict(type="str", default="gpu-operator"),
            resources=dict(type="dict"),
            wait_timeout=dict(type="int", default=300),
            labels=dict(type="dict", default={}),
            unschedulable=dict(type="bool"),
            roll=dict(type="str"),
            lease=dict(type="dict", options=dict(name=dict(type="str", required=True),
                                                 namespace=dict(type="str", default="kube-system"),
                                                 holder=dict(type="str", required=True))),
            **k8s_api.ARGUMENT_SPEC
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not k8s_api.HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=str(k8s_api.KUBERNETES_ERROR))
    problems = bounds.out_of_range(p, BOUNDS) + k8s_api.label_problems(p, ("restore_labels", "labels"))
    try:
        resources = None if p["resources"] is None else {k: int(v) for k, v in p["resources"].items()}
    except (TypeError, ValueError):
        problems.append("resources: every count must be an integer, got %r" % (p["resources"],))
    if problems:
        module.fail_json(msg="node %s: %s; nothing was changed" % (p["name"], "; ".join(problems)))
    release = None
    try:
        api = k8s_api.api_client(p["kubeconfig"], p["context"])
        release = k8s_api.NodeRelease(api, p["name"], p["timeout"])
        lease = node_roll_apply.RollLease(api, p["lease"]["namespace"], p["lease"]["name"], p["lease"]["holder"],
                                          p["timeout"]) if p["lease"] and p["roll"] else None
        before, after = release.run(p["restore_labels"], (p["namespace"], p["restart_pods"]), resources, p["labels"],
                                    p["unschedulable"], p["wait_timeout"], module.check_mode, roll=p["roll"] or "",
                                    lease=lease)
    except k8s_api.NodeStepError as e:
        module.fail_json(msg=str(e), **e.done)
    except Exception as e:  # pylint: disable=broad-except  # API, urllib3 and kubeconfig errors: report, never a traceback
        module.fail_json(msg=k8s_api.describe_failure(p["name"], e), **(release.done if release else {}))
    module.exit_json(**k8s_api.release_outcome(p["name"], release.done, before, after, module._diff))


if __name__ == "__main__":
    main()
