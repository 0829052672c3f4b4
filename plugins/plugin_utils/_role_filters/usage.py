# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side usage-advice filters (thin: the logic is in module_utils/_usage/advice.py).

Role-internal: playbooks/gpu_usage_advice.yml calls these through ``gpuops.provision.internal('<name>', ...)`` (see
``__init__.py``); not a public interface.
"""

from __future__ import annotations

import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.module_utils._mig import geometry
from ansible_collections.gpuops.provision.plugins.module_utils._usage import advice as U
from ansible_collections.gpuops.provision.plugins.plugin_utils._plain import plain as _plain

_HEADER = ("# Proposed by gpuops.provision's gpu_usage_advice playbook from %s of dcgm-exporter's figures in Prometheus.\n"
           "# Review, then merge: %s\n")


def _dump(data):
    return yaml.safe_dump(data, default_flow_style=False, sort_keys=True, width=120)


def usage_advice_files(advice, window="7d", disabled_config="all-disabled"):
    """{file name: text} of the proposal: gpu_pools.yml (gpu_pools_pools) and mig-parted.yaml (a mig-parted v1
    document, mig_reconfigure_config). Deterministic for one advice: a second run writes the same bytes."""
    try:
        p = U.proposal(_plain(advice), disabled_config)
    except (U.AdviceError, geometry.MigError, TypeError, ValueError, KeyError) as e:
        raise AnsibleFilterError("gpuops.provision.usage_advice_files: %s" % e)
    advised = "".join("#   %s\n" % line for line in p["summary"])
    return {
        "gpu_pools.yml": (_HEADER % (window, "gpu_pools_pools of the gpu_pools role (group_vars of the GPU nodes).")
                          + "# The advice per pool:\n" + advised + _dump({"gpu_pools_pools": p["pools"]})),
        "mig-parted.yaml": (_HEADER % (window, "into mig_reconfigure_config (the mig_reconfigure role's mig-parted "
                                               "document; the pools' mig_config names these configurations).")
                            + _dump(p["mig_config"])),
    }


def filters():
    return {"usage_advice_files": usage_advice_files}
