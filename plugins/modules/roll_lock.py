#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: roll_lock
short_description: Take, renew or release a roll's lock, a Kubernetes Lease with a time-to-live
version_added: 0.1.0
description:
  - Keeps one C(coordination.k8s.io/v1) Lease per roll, so that two runs (two AWX jobs, two operators) cannot roll
    the same nodes at once. The Lease names its holder, the nodes of the roll (annotation C(gpuops.io/roll-nodes))
    and a time-to-live; a run stopped without releasing it (controller killed) leaves a lock that expires.
  - O(state=held) takes the lock when it is free, renews it when this run (O(holder)) holds it, takes it over when
    the holder's lease has expired (naming that holder), and fails, naming the holder and its nodes, when another
    run holds a live lease. Nothing is written then.
  - O(state=absent) releases the lock when this run holds it (the holder is emptied, as client-go's leader election
    releases a Lease); a lock another run took over is left to it.
  - The rules follow client-go's leader election (C(tools/leaderelection/leaderelection.go) C(tryAcquireOrRenew)).
    Every write carries the C(resourceVersion) read before it, so of two runs that saw the lock free only one gets
    it; the other fails with the API server's conflict. A release or renewal of this run's own lock that meets a
    conflict (its renewer, O(keep_alive), wrote the Lease between the read and the write) reads it again and writes
    on the fresh copy, up to five times; after five conflicts in a row it fails and changes nothing.
extends_documentation_fragment:
  - gpuops.provision._attributes
  - gpuops.provision._kubernetes_auth
attributes:
  check_mode:
    support: full
    details:
      - Reads the Lease and reports what would be done, including a refusal; writes nothing.
  diff_mode:
    support: full
  idempotent:
    support: partial
    details:
      - O(state=absent) is idempotent. O(state=held) renews the lease (a new C(renewTime)) on every run, which is
        its purpose.
options:
  name:
    description:
      - Name of the Lease. One name per set of nodes that must not be rolled twice at once.
    type: str
    required: true
  namespace:
    description:
      - Namespace of the Lease. The identity that runs the roll needs C(get), C(create) and C(update) on
        C(leases) there.
    type: str
    default: kube-system
  state:
    description:
      - V(held) takes or renews the lock; V(absent) releases it.
    type: str
    choices: [held, absent]
    default: held
  holder:
    description:
      - Who this run is (C(holderIdentity)); unique per run, for example with the AWX job id and a random part.
    type: str
    required: true
  ttl:
    description:
      - Seconds the lease lives after each renewal (C(leaseDurationSeconds)). Longer than the longest gap between two
        renewals (a roll renews before each wave).
    type: int
    default: 3600
  nodes:
    description:
      - The nodes of the roll, recorded in the Lease so that a refused run can name them, and so that
        M(gpuops.provision.node_roll) counts the budget over them.
    type: list
    elements: str
    default: []
  queue:
    description:
      - The nodes the roll changes, in the order they should go (M(gpuops.provision.node_roll) keeps it). Written
        when the lock is taken; a renewal without it keeps the queue and the record of whose turn came.
    type: list
    elements: str
    default: []
  keep_alive:
    description:
      - With O(state=held) and a lock this run holds, keep renewing it for up to this many seconds, as client-go's
        leader election renews (every third of O(ttl); a failed renewal tried again every 2 s; given up when none
        succeeded for two thirds of O(ttl)). Meant for an asynchronous task (C(async), C(poll=0)) that runs beside
        the roll, so that the lock's time to live can be short and independent of how long a node takes.
      - The loop ends when the lock is no longer this run's (the roll released it), and when the controller process
        O(controller) is gone (then it releases the lock, so that the next run starts at once).
      - V(0) takes, renews or releases once.
    type: int
    default: 0
  controller:
    description:
      - The controller process whose lock this is (RV(controller) of the run that took it). With O(keep_alive), the
        renewal stops and the lock is released when that process is known to be gone; known only where the module
        runs on the same host and boot as that process.
    type: dict
notes:
  - The Lease records the controller process (host, boot, pid and start time of C(ansible-playbook)) when the module
    runs on the controller. A later run on the same host that finds that process gone takes the lock over at once,
    whatever its time to live, and returns the replaced holder as RV(superseded).
  - The expiry is read from the Lease's C(renewTime), so controllers whose clocks differ by more than a small part of
    O(ttl) may disagree about when a lease expired.
seealso:
  - name: Kubernetes Leases
    description: Leases as locks and for leader election.
    link: https://kubernetes.io/docs/concepts/architecture/leases/
"""

EXAMPLES = r"""
- name: Take the roll lock before the first cordon
  gpuops.provision.roll_lock:
    name: gpuops-mig-reconfigure
    holder: "awx-job-{{ awx_job_id | default('cli') }}-{{ 999999 | random(seed=inventory_hostname) }}"
    nodes: "{{ groups['gpu_nodes'] }}"
    ttl: 1800
  delegate_to: localhost
  run_once: true

- name: Release it at the end
  gpuops.provision.roll_lock:
    name: gpuops-mig-reconfigure
    holder: "{{ roll_holder }}"
    state: absent
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
action:
  description: What was done (or would be, in check mode) - V(create), V(update) or V(none).
  returned: always
  type: str
  sample: create
lease:
  description: The Lease as it is after the run (as it would be, in check mode); V(null) when there is none.
  returned: always
  type: dict
  contains:
    holder:
      description: C(holderIdentity); empty when released.
      type: str
    acquired:
      description: C(acquireTime).
      type: str
      sample: "2026-12-02T04:30:00.000000Z"
    renewed:
      description: C(renewTime).
      type: str
    duration:
      description: C(leaseDurationSeconds).
      type: int
      sample: 3600
    expires_at:
      description: Seconds since the epoch at which the lease expires unless renewed.
      type: float
    transitions:
      description: C(leaseTransitions), the times the lock changed hands.
      type: int
    nodes:
      description: The nodes recorded for the roll.
      type: list
      elements: str
    resource_version:
      description: C(metadata.resourceVersion).
      type: str
taken_over:
  description: The holder whose lease this run took over (expired, or its controller process gone); V(null) otherwise.
  returned: always
  type: str
superseded:
  description:
    - The holder of an interrupted earlier roll whose leftovers this run must finish (per-host locks, node states) -
      the one taken over now, or one whose controller died and whose renewer released the lock. Cleared by the next
      clean release. Empty when there is none.
  returned: when O(keep_alive=0)
  type: str
controller:
  description: This run's controller process (V(host), V(boot), V(pid), V(start)); V(null) where the module does not
    run below C(ansible-playbook) on this host.
  returned: when O(keep_alive=0)
  type: dict
ended:
  description: With O(keep_alive), why the renewal ended - V(released), V(controller_gone), V(renew_failed) or
    V(keep_alive_elapsed).
  returned: when O(keep_alive) is above 0
  type: str
renewals:
  description: With O(keep_alive), how many renewals were written.
  returned: when O(keep_alive) is above 0
  type: int
msg:
  description: What happened, in words.
  returned: always
  type: str
  sample: took the roll lock kube-system/gpuops-mig-reconfigure
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.provision.plugins.module_utils._common import bounds
from ansible_collections.gpuops.provision.plugins.module_utils._k8s import api as k8s_api
from ansible_collections.gpuops.provision.plugins.module_utils._k8s.api import ApiException

BOUNDS = {"ttl": (10, bounds.DAY, "seconds a lease lives"), "timeout": bounds.API_TIMEOUT,
          "keep_alive": (0, 7 * bounds.DAY, "seconds the lock is kept alive")}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            namespace=dict(type="str", default="kube-system"),
            state=dict(type="str", default="held", choices=["held", "absent"]),
            holder=dict(type="str", required=True),
            ttl=dict(type="int", default=3600),
            nodes=dict(type="list", elements="str", default=[]),
            queue=dict(type="list", elements="str", default=[]),
            keep_alive=dict(type="int", default=0),
            controller=dict(type="dict"),
            **k8s_api.ARGUMENT_SPEC
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not k8s_api.HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=str(k8s_api.KUBERNETES_ERROR))
    problems = bounds.out_of_range(p, BOUNDS)
    if problems:
        module.fail_json(msg="; ".join(problems))
    if p["keep_alive"] and (p["state"] != "held" or module.check_mode):
        module.fail_json(msg="keep_alive renews a lock this run holds: it needs state=held and no check mode")
    try:
        api = k8s_api.api_client(p["kubeconfig"], p["context"])
        if p["keep_alive"]:
            kept = k8s_api.keep_lock(api, p)
            if kept["ended"] == "renew_failed":
                module.fail_json(**kept)
            module.exit_json(changed=kept["renewals"] > 0 or kept["ended"] == "controller_gone", **kept)
        result, warning = k8s_api.roll_lock(api, p, module.check_mode, module._diff)
    except k8s_api.LockFailed as e:
        module.fail_json(msg=str(e), **e.extras)
    except ApiException as e:
        module.fail_json(msg="Kubernetes API error on Lease %s/%s: %s" % (p["namespace"], p["name"], k8s_api.api_message(e)))
    except Exception as e:  # pylint: disable=broad-except  # urllib3 and kubeconfig errors: report, never a traceback
        module.fail_json(msg="cannot reach the Kubernetes API for Lease %s/%s: %s" % (p["namespace"], p["name"], e))
    if warning:
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
