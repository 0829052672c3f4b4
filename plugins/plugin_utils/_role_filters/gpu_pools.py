# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side GPU pool filters (thin: the logic is in module_utils/_k8s/gpu_pools.py).

Role-internal: the collection's roles and playbooks call these through ``gpuops.provision.internal('<name>', ...)``
(see ``__init__.py``); not a public interface.
"""

from __future__ import annotations

import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.module_utils._k8s import gpu_pools as P
from ansible_collections.gpuops.provision.plugins.plugin_utils._plain import plain as _plain


def _wrap(name, fn, *args, **kwargs):
    try:
        return fn(*[_plain(a) for a in args], **dict((k, _plain(v)) for k, v in kwargs.items()))
    except (P.PoolError, TypeError, ValueError) as e:
        raise AnsibleFilterError("gpuops.provision.%s: %s" % (name, e))


def gpu_pools_nodes(k8s_nodes, hosts):
    return _wrap("gpu_pools_nodes", P.node_inputs, k8s_nodes, hosts)


def gpu_pools_plan(nodes, pools, mig_config=None, strategy="mixed", default_config="default", disabled_config="all-disabled",
                   operator=None):
    return _wrap("gpu_pools_plan", P.plan, pools, nodes, mig_config, strategy, default_config, disabled_config, operator)


def gpu_pools_untolerating(daemonsets, names, taints):
    return _wrap("gpu_pools_untolerating", P.operands_tolerate, daemonsets, names or [], taints or [])


def gpu_pools_config_map(config_map):
    """{key: YAML text}: the device plugin reads each key of the ConfigMap as a file (config-manager)."""
    docs = _plain(config_map) or {}
    return dict((k, yaml.safe_dump(v, default_flow_style=False, sort_keys=False)) for k, v in sorted(docs.items()))


def gpu_pools_shared_resources(resources, sharing=None):
    return _wrap("gpu_pools_shared_resources", P.share_resources, resources, sharing or {})


def gpu_pools_summary(plan):
    return _wrap("gpu_pools_summary", P.summary, (plan or {}).get("nodes") or {})


def gpu_pools_previous_labels(current, wanted=None):
    return _wrap("gpu_pools_previous_labels", P.previous_labels, current, wanted or {})


def filters():
    """This file's role-internal filters by name (called through gpuops.provision.internal)."""
    return {
        "gpu_pools_nodes": gpu_pools_nodes,
        "gpu_pools_plan": gpu_pools_plan,
        "gpu_pools_untolerating": gpu_pools_untolerating,
        "gpu_pools_config_map": gpu_pools_config_map,
        "gpu_pools_shared_resources": gpu_pools_shared_resources,
        "gpu_pools_previous_labels": gpu_pools_previous_labels,
        "gpu_pools_summary": gpu_pools_summary,
    }
