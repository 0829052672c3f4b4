#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_roll
short_description: Take a Kubernetes node into a roll - a slot within the budget, the cordon, a kubectl-style drain - with its progress kept on the node
version_added: 0.1.0
description:
  - The Kubernetes side of one node's turn in a roll (a MIG change, a driver update, a health drain), written so that a
    run killed at any point leaves a node that the next run finishes, never skips. The node's progress lives on the
    node, as NVIDIA's k8s-operator-libs keeps its upgrade state (C(pkg/upgrade)), in annotations under
    C(gpuops.provision/) - C(roll) (which roll), C(roll-target), C(roll-phase) (V(cordoned), V(drained), V(applied),
    V(released), V(failed)), C(roll-initial) (the node's cordon before the roll), C(roll-failed-at) (when its turn
    failed, seconds since the epoch), C(cordoned-by) (our cordon; an operator's cordon is kept after the roll).
  - With O(state=drained), in this order
  - 1. Takes a slot in the roll, recounting the budget from the live nodes as k8s-operator-libs'
    C(GetUpgradesAvailable) does - cordoned and not-Ready nodes, nodes of this roll in any phase (a failed one keeps
    its slot), the capacity the other schedulable nodes advertise now - and writing the slot into the roll's Lease
    (O(lease)) with its resourceVersion, so that two hosts that both see a free slot cannot both take it. Waits while
    another node of the roll holds a slot (up to O(slot_timeout)); fails at once when the failure budget is spent or
    when no node of the roll is in progress, so that waiting would free nothing. A node of the roll that failed
    before the roll's Lease was taken (an earlier run's failure) does not spend this run's failure budget, since this
    run retries it.
  - 2. Cordons the node with its roll state and O(labels) in one PATCH carrying the node's resourceVersion.
  - 3. Drains it as C(kubectl drain) does (C(k8s.io/kubectl pkg/drain)) - DaemonSet and mirror pods left, pods
    without a controller only with O(drain.force), emptyDir data only with O(drain.delete_emptydir_data) - all
    evictions at once, an eviction refused by a PodDisruptionBudget (HTTP 429) tried again every 5 s until
    O(drain.timeout), then waits until the evicted pods are gone (a watch of the node's pods, not a poll); records
    phase V(drained).
  - 4. With O(stop_pods), deletes the GPU client pods on the node and waits until they are gone.
  - A node whose phase shows an earlier run got past the drain (V(drained), V(applied)) and that is still cordoned is
    not cordoned or drained again; it only takes its slot.
  - With O(state=failed), records phase V(failed) and O(labels), and leaves the node cordoned or uncordons it
    (O(failed_node_state)); its slot is kept, as a failed upgrade in k8s-operator-libs keeps counting.
  - M(gpuops.provision.node_release) with O(gpuops.provision.node_release#module:roll) ends the node's turn
    (phase V(released), the uncordon when the cordon is ours, the slot given back).
extends_documentation_fragment:
  - gpuops.provision._attributes
  - gpuops.provision._kubernetes_auth
attributes:
  check_mode:
    support: full
    details:
      - Reads the node, the Lease and the pods, and reports whether a slot is free, the cordon PATCH and the pods the
        drain would evict; writes nothing and does not wait.
  diff_mode:
    support: full
  idempotent:
    support: full
    details:
      - A node already past the drain is left as it is; a second run evicts only what came back.
options:
  name:
    description:
      - Name of the node.
    type: str
    required: true
  roll:
    description:
      - Name of the roll whose state the node carries, for example V(mig_reconfigure). A phase of another roll is not
        this roll's to finish.
    type: str
    required: true
  state:
    description:
      - V(drained) takes the node into the roll (slot, cordon, drain); V(cordoned) only takes its slot and cordons it
        (a later V(drained) run drains it); V(failed) marks it failed.
    type: str
    choices: [cordoned, drained, failed]
    default: drained
  target:
    description:
      - What the roll brings the node to (a MIG configuration, a driver version), recorded on the node.
    type: str
    default: ""
  reason:
    description:
      - The value of the C(gpuops.provision/cordoned-by) annotation on our cordon.
    type: str
    default: gpuops.provision
  labels:
    description:
      - Labels written with the cordon (O(state=drained)) or with the failure (O(state=failed)), for example the GPU
        Operator operand labels paused for the change; a V(null) value removes the label.
    type: dict
    default: {}
  lease:
    description:
      - The roll's Lease (M(gpuops.provision.roll_lock)), the book of slots; unset, the budget is recounted from the
        nodes alone, which two concurrent hosts could both pass.
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
        description: This run's holder identity; a Lease held by another holder stops the node (the roll lost its lock).
        type: str
        required: true
  max_parallel:
    description:
      - Nodes of the roll in progress at once (failed ones count); V(0) for no limit.
    type: int
    default: 1
  max_unavailable:
    description:
      - Targeted nodes unavailable at once, counting cordoned and not-Ready ones; unset for no limit.
    type: int
  max_failures:
    description:
      - Failed nodes of the roll beyond which no further node starts.
    type: int
    default: 0
  floors:
    description:
      - "Resources the other schedulable nodes must keep advertising while this node is out, for example
        V({\"nvidia.com/mig-3g.40gb\": 4})."
    type: dict
    default: {}
  slot_timeout:
    description:
      - Seconds to wait for a slot while other nodes of the roll hold them.
    type: int
    default: 3600
  turn_timeout:
    description:
      - The roll keeps the order of its queue (the Lease's C(gpuops.provision/roll-queue), the changing nodes in roll
        order, written by M(gpuops.provision.roll_lock) O(gpuops.provision.roll_lock#module:queue)) - a node waits
        until every node before it has had its turn. When no node's turn came for this many seconds (an earlier host
        unreachable, say), a waiting node goes ahead of it.
    type: int
    default: 300
  drain:
    description:
      - How the node is drained.
    type: dict
    default: {}
    suboptions:
      timeout:
        description: Seconds for the whole drain (evictions and their retries, and the wait until the pods are gone).
        type: int
        default: 300
      grace_period:
        description: Seconds each pod gets to terminate; unset, the pod's own (as C(kubectl drain)).
        type: int
      ignore_daemonsets:
        description: Leave DaemonSet pods (as C(kubectl drain --ignore-daemonsets)); V(false) fails on them.
        type: bool
        default: true
      delete_emptydir_data:
        description: Evict pods with emptyDir volumes (their data is lost).
        type: bool
        default: false
      force:
        description: Evict pods that no controller would recreate.
        type: bool
        default: false
      gpu_only:
        description:
          - Evict only the pods that use a GPU resource (C(nvidia.com/gpu), C(nvidia.com/mig-*),
            C(nvidia.com/gpu.shared)), as the GPU Operator's upgrade pod deletion does; other pods stay on the
            cordoned node.
        type: bool
        default: false
      pod_selectors:
        description: Only evict pods whose labels match any of these C(key=value) selectors.
        type: list
        elements: str
        default: []
  wait_for_jobs:
    description:
      - After the cordon and before the drain, wait until no pod on the node that matches O(wait_for_jobs.selector)
        is Running or Pending, as the GPU Operator upgrade policy's C(waitForCompletion) does.
    type: dict
    suboptions:
      selector:
        description: Label selector of the pods to wait for (as C(kubectl get -l) takes it); empty, no wait.
        type: str
        default: ""
      timeout:
        description: Seconds to wait; V(0) waits without limit, as upstream's C(timeoutSeconds).
        type: int
        default: 0
      delay:
        description: Seconds between two looks.
        type: int
        default: 10
      on_timeout:
        description: When the wait runs out, V(drain) (upstream's choice, the drain evicts them) or V(fail) the node.
        type: str
        choices: [drain, fail]
        default: drain
  stop_pods:
    description:
      - After the drain (and on a later run that finds the node past it), delete the pods on the node in
        O(stop_pods.namespace) whose labels match any of O(stop_pods.selectors) - the GPU clients, DaemonSet pods the
        drain leaves - and wait until they are gone, as mig-manager waits for the paused operands' pods to be deleted
        (C(NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go waitForPodsToBeDeleted)). A pod already being deleted
        is only waited for. The wait watches the node's pods rather than polling them.
    type: dict
    suboptions:
      namespace:
        description: Namespace of the pods (the GPU Operator's).
        type: str
        default: gpu-operator
      selectors:
        description: C(key=value) label selectors; empty, nothing is deleted.
        type: list
        elements: str
        default: []
      timeout:
        description: Seconds to wait until they are gone; the node fails (cordoned) when some are still there.
        type: int
        default: 300
  failed_node_state:
    description:
      - With O(state=failed), leave the node V(cordoned) or V(uncordoned) (an operator's cordon stays either way).
    type: str
    choices: [cordoned, uncordoned]
    default: cordoned
notes:
  - The identity needs C(get), C(list) and C(patch) on C(nodes), C(list) and C(watch) on C(pods) in all namespaces
    (C(delete) too with O(stop_pods)), C(create) on C(pods/eviction), and C(get) and C(update) on the Lease (see C(docs/rbac.md)).
seealso:
  - module: gpuops.provision.node_release
  - module: gpuops.provision.roll_lock
  - name: kubectl drain
    description: The pod filters and the eviction retries this drain follows.
    link: https://github.com/kubernetes/kubectl/blob/master/pkg/drain/drain.go
"""

EXAMPLES = r"""
- name: Take the node into the MIG roll (slot, cordon, drain)
  gpuops.provision.node_roll:
    name: gpu-node-1
    roll: mig_reconfigure
    target: all-balanced
    reason: gpuops.provision mig_reconfigure
    labels:
      nvidia.com/mig.config.state: pending
      nvidia.com/gpu.deploy.device-plugin: paused-for-mig-change
    lease: {name: gpuops-mig-reconfigure, namespace: kube-system, holder: "{{ roll_holder }}"}
    max_parallel: 2
    max_unavailable: 3
    floors: {nvidia.com/mig-3g.40gb: 4}
    drain: {timeout: 600}
  delegate_to: localhost

- name: Mark it failed, keeping it cordoned
  gpuops.provision.node_roll:
    name: gpu-node-1
    roll: mig_reconfigure
    state: failed
    labels: {nvidia.com/mig.config.state: failed}
  delegate_to: localhost
"""

RETURN = r"""
before:
  description: The node's roll state before the run.
  returned: success
  type: dict
  contains:
    phase:
      description: The phase of this roll found on the node; empty when none.
      type: str
    target:
      description: The recorded target.
      type: str
    was_cordoned:
      description: Whether an operator had cordoned the node before the roll (it stays cordoned afterwards).
      type: bool
slot:
  description: The budget decision (O(state=drained)) - V(take), the V(reasons) it waited for, and the V(counts) read.
  returned: when O(state) is V(drained) or V(cordoned)
  type: dict
jobs:
  description: With O(wait_for_jobs), the pods still running when the wait ended (V(left)) and the V(seconds) waited.
  returned: when O(wait_for_jobs.selector) is set and the node was drained
  type: dict
stopped:
  description: With O(stop_pods), the V(deleted) pods (V(namespace/name)) and the V(seconds) until they were gone.
  returned: when O(stop_pods.selectors) is set and O(state=drained)
  type: dict
drain:
  description: The drain - V(evicted) and V(skipped) pods (V(namespace/name)), eviction V(retries), V(seconds); V(null)
    when the node was past the drain.
  returned: when O(state=drained)
  type: dict
phase:
  description: The phase recorded (or that would be).
  returned: always
  type: str
disruptions:
  description:
    - What the run does (in check mode would do) to the node and its pods, in order - the cordon (not for a node
      cordoned already), the drain's evictions and the GPU client pods deleted (O(stop_pods)), naming the first 10 pods
      of each (RV(drain) and RV(stopped) list all). Empty for a node past the drain, and with O(state=failed).
    - With diff mode they come first in the diff, in an entry of their own, before the configuration diff.
  returned: success
  type: list
  elements: str
  sample: ["cordon node gpu-node-1", "drain node gpu-node-1, evicting 2 pod(s): ml/train-0, ml/train-1"]
waited_for_slot:
  description: Seconds waited for a slot.
  returned: always
  type: float
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.provision.plugins.module_utils._common import bounds
from ansible_collections.gpuops.provision.plugins.module_utils._k8s import api, node_roll, node_roll_apply

BOUNDS = {"slot_timeout": bounds.TASK_TIMEOUT, "turn_timeout": bounds.TASK_TIMEOUT, "timeout": bounds.API_TIMEOUT,
          "max_parallel": (0, 100000, "nodes"), "max_failures": (0, 100000, "nodes")}
DRAIN = dict(timeout=dict(type="int", default=300), grace_period=dict(type="int"),
             ignore_daemonsets=dict(type="bool", default=True), delete_emptydir_data=dict(type="bool", default=False),
             force=dict(type="bool", default=False), gpu_only=dict(type="bool", default=False),
             pod_selectors=dict(type="list", elements="str", default=[]))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            roll=dict(type="str", required=True),
            state=dict(type="str", default="drained", choices=["cordoned", "drained", "failed"]),
            target=dict(type="str", default=""),
            reason=dict(type="str", default="gpuops.provision"),
            labels=dict(type="dict", default={}),
            lease=dict(type="dict", options=dict(name=dict(type="str", required=True),
                                                 namespace=dict(type="str", default="kube-system"),
                                                 holder=dict(type="str", required=True))),
            max_parallel=dict(type="int", default=1),
            max_unavailable=dict(type="int"),
            max_failures=dict(type="int", default=0),
            floors=dict(type="dict", default={}),
            slot_timeout=dict(type="int", default=3600),
            turn_timeout=dict(type="int", default=300),
            drain=dict(type="dict", default={}, options=DRAIN),
            wait_for_jobs=dict(type="dict", options=dict(selector=dict(type="str", default=""),
                                                         timeout=dict(type="int", default=0),
                                                         delay=dict(type="int", default=10),
                                                         on_timeout=dict(type="str", default="drain",
                                                                         choices=["drain", "fail"]))),
            stop_pods=dict(type="dict", options=dict(namespace=dict(type="str", default="gpu-operator"),
                                                     selectors=dict(type="list", elements="str", default=[]),
                                                     timeout=dict(type="int", default=300))),
            failed_node_state=dict(type="str", default="cordoned", choices=["cordoned", "uncordoned"]),
            **api.ARGUMENT_SPEC
        ),
        supports_check_mode=True,
    )
    p = dict(module.params)
    if not api.HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=str(api.KUBERNETES_ERROR))
    p["drain"] = dict(p["drain"] or {}, selectors=(p["drain"] or {}).get("pod_selectors") or [])
    problems = bounds.out_of_range(p, BOUNDS) + bounds.out_of_range(p["drain"], {"timeout": bounds.TASK_TIMEOUT}, "drain.")
    if p["stop_pods"]:
        problems += bounds.out_of_range(p["stop_pods"], {"timeout": bounds.TASK_TIMEOUT}, "stop_pods.")
    problems += api.label_problems(p, ("labels",))
    if p["max_unavailable"] is not None and p["max_unavailable"] < 0:
        problems.append("max_unavailable must be 0 or more, got %d" % p["max_unavailable"])
    try:
        p["floors"] = {k: int(v) for k, v in (p["floors"] or {}).items()}
        node_roll.selector_pairs(p["drain"]["selectors"])
    except (TypeError, ValueError):
        problems.append("floors: every count must be an integer, got %r" % (p["floors"],))
    except node_roll.RollStateError as e:
        problems.append("drain.pod_selectors: %s" % e)
    try:
        node_roll.selector_pairs((p["stop_pods"] or {}).get("selectors"))
    except node_roll.RollStateError as e:
        problems.append("stop_pods.selectors: %s" % e)
    if problems:
        module.fail_json(msg="node %s: %s; nothing was changed" % (p["name"], "; ".join(problems)))
    try:
        result, _node = node_roll_apply.run(api.api_client(p["kubeconfig"], p["context"]), p, module.check_mode)
    except api.NodeStepError as e:
        module.fail_json(msg=str(e), **e.done)
    except (node_roll_apply.RollLost, node_roll.RollStateError) as e:
        module.fail_json(msg="node %s: %s" % (p["name"], e))
    except Exception as e:  # pylint: disable=broad-except  # API, urllib3 and kubeconfig errors: report, never a traceback
        module.fail_json(msg=api.describe_failure(p["name"], e))
    module.exit_json(**node_roll_apply.outcome(result, p, module._diff))


if __name__ == "__main__":
    main()
