# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side MIG roll filters (thin: the logic is in module_utils/_k8s/mig_roll.py).

Role-internal: the collection's roles and playbooks call these through ``gpuops.provision.internal('<name>', ...)``
(see ``__init__.py``); not a public interface.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpuops.provision.plugins.module_utils._k8s import mig_roll as R
from ansible_collections.gpuops.provision.plugins.module_utils._mig import geometry
from ansible_collections.gpuops.provision.plugins.plugin_utils import _role_messages as M
from ansible_collections.gpuops.provision.plugins.plugin_utils._hostvars import host_vars
from ansible_collections.gpuops.provision.plugins.plugin_utils._plain import plain as _plain


def _wrap(name, fn, *args, **kwargs):
    try:
        return fn(*[_plain(a) for a in args], **dict((k, _plain(v)) for k, v in kwargs.items()))
    except (R.RollError, geometry.MigError) as e:
        raise AnsibleFilterError("gpuops.provision.%s: %s" % (name, e))


def mig_expected_resources(gpus, strategy="mixed", ci_profiles_served=False):
    return _wrap("mig_expected_resources", R.expected_resources, gpus, strategy, bool(ci_profiles_served))


def mig_advertised_resources(allocatable):
    return _wrap("mig_advertised_resources", R.advertised_resources, allocatable)


def mig_operand_labels(node_labels, operands, phase):
    return _wrap("mig_operand_labels", R.operand_labels, node_labels, operands, phase)


def mig_roll_waves(plans, max_parallel=1, max_unavailable=None, floors=None, max_failures=0):
    """The roll's waves from the plan records of every targeted node (plan.yml's __mig_reconfigure_plan)."""
    nodes = [dict(name=p.get("node"), changing=bool(p.get("changed")), unavailable=bool(p.get("unavailable")),
                  current=p.get("current") or {}, target=p.get("target") or {}) for p in _plain(plans) or []]
    return _wrap("mig_roll_waves", R.roll_waves, nodes, max_parallel, max_unavailable, floors, max_failures)


def mig_node_facts(nodes, name, selected="", skip_label="", backend="nvml", mig_manager_pods=None, mig_manager=None):
    # Only this host's Node (and pods) are made plain: every Node of the cluster, deep-copied once per host, costs
    # seconds. With node_info's index, only this host's Node and pods are even read (ansible-core templates every
    # element a filter walks: a thousand Nodes walked per host cost the 1,000-node plan minutes).
    nodes = nodes or {}
    index = nodes.get("index")
    if index is None:  # kubernetes.core.k8s_info's result
        mine = R.nodes_named(nodes, name)
    else:
        at = (index.get("nodes") or {}).get(name)
        mine = [] if at is None else [nodes["resources"][at]]
    if mig_manager_pods is None and index is not None:
        listed = nodes.get("pods") or []
        pods = [listed[i] for i in (index.get("pods") or {}).get(name) or []]
    else:
        listed = mig_manager_pods if mig_manager_pods is not None else nodes.get("pods") or []
        pods = [p for p in listed
                if ((p or {}).get("spec") or {}).get("nodeName") == name]
    return _wrap("mig_node_facts", R.node_facts, dict(failed=nodes.get("failed"), msg=nodes.get("msg"), resources=mine),
                 name, selected or "", skip_label or "", backend, pods, mig_manager)


def mig_manager_config_file(pods, node, config_map, kubelet_root="/var/lib/kubelet"):
    return _wrap("mig_manager_config_file", R.mig_manager_config_file, pods, node, config_map, kubelet_root)


def mig_node_plan(facts, check, strategy="mixed", ci_profiles_served=False, force=False, sharing=None):
    return _wrap("mig_node_plan", R.node_plan, facts, check, strategy, bool(ci_profiles_served), bool(force), sharing or {})


def mig_plan_report(plans, roll, skip_label="", gpu_reset=True, reboot=False):
    return _wrap("mig_plan_report", R.plan_report, plans, roll, skip_label or "", boolean(gpu_reset), boolean(reboot))


def mig_previous_geometry(gpus):
    return _wrap("mig_previous_geometry", R.previous_geometry, gpus)


def mig_plan_groups(hosts, hostvars, superseded=""):
    """plan.yml's outcome over every host: invalid plans, the hosts' groups, the stale per-host locks to clear."""
    rows = []
    for host in hosts or []:
        hv = host_vars(hostvars, host)
        plan = hv.get("__mig_reconfigure_plan")
        if plan is None:  # a host whose plan did not run (failed before it)
            continue
        rows.append((str(host), _plain(plan), boolean(hv.get("__mig_reconfigure_boot_wanted"), strict=False),
                     _plain(hv.get("__mig_reconfigure_stale_lock") or {})))
    return _wrap("mig_plan_groups", R.plan_groups, rows, superseded or "")


def mig_invalid_plans_message(plans):
    return M.mig_invalid_plans(_plain(plans))


def filters():
    """This file's role-internal filters by name (called through gpuops.provision.internal)."""
    return {
        "mig_expected_resources": mig_expected_resources,
        "mig_advertised_resources": mig_advertised_resources,
        "mig_operand_labels": mig_operand_labels,
        "mig_roll_waves": mig_roll_waves,
        "mig_node_facts": mig_node_facts,
        "mig_manager_config_file": mig_manager_config_file,
        "mig_node_plan": mig_node_plan,
        "mig_plan_report": mig_plan_report,
        "mig_previous_geometry": mig_previous_geometry,
        "mig_plan_groups": mig_plan_groups,
        "mig_invalid_plans_message": mig_invalid_plans_message,
    }
