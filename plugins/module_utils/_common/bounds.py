# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ranges of numeric options and the TLS rule shared by the API modules; pure logic, no I/O.

AnsibleModule checks types only: a -1 timeout or a port of 10**9 would reach the network code. Each range is the
one the real system accepts (or, for our own waits, one that ends); a value outside it fails before any call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional, Union

DAY = 86400

# option -> (lowest, highest, what the range is)
PORT = (1, 65535, "a TCP port")
API_TIMEOUT = (1, 3600, "seconds per API request")
TASK_TIMEOUT = (1, DAY, "seconds to wait")
SHUTDOWN_TIMEOUT = (0, DAY, "seconds to wait for a guest shutdown")
PVE_VMID = (100, 999999999, "Proxmox VE's pve-vmid range")
# Writes in flight at once in a batch: each holds a task worker on the node (PVE's pvedaemon has 3 workers per node
# by default, more are queued); beyond 64 a run only adds load on the API.
MAX_CONCURRENT = (1, 64, "VMs in flight at once")
PVE_IOMMU_GROUP = (0, 2 ** 31 - 1, "an IOMMU group number")
# ESXi's pciPassthru.64bitMMIOSizeGB: NVIDIA asks for 64 GB and more for C-series vGPUs; 16 TB is beyond every
# documented configuration (and beyond what the CPUs of current ESXi hosts can address for a guest).
MMIO_SIZE_GB = (1, 16384, "GB of 64-bit MMIO space")
# vSphere 8: "up to 8 virtual GPUs (vGPUs) to one VM" (VMware, vSphere 8 Device Groups, 2022-08-16).
MAX_VGPUS = (1, 8, "vGPUs per VM, the most vSphere 8 allows")


def out_of_range(params: Mapping[str, Any], bounds: Mapping[str, tuple[int, int, str]], where: str = "") -> list[str]:
    """Messages for every ``params[name]`` outside ``bounds[name]`` (None values are not set, so not checked)."""
    problems = []
    for name in sorted(bounds):
        value = params.get(name)
        if value is None or isinstance(value, bool):
            continue
        low, high, what = bounds[name]
        if not low <= value <= high:
            problems.append("%s%s=%s is out of range: %d to %d (%s)" % (where, name, value, low, high, what))
    return problems


def tls_verify(validate_certs: Optional[bool], ca_path: Optional[str]) -> tuple[Union[str, bool], Optional[str]]:
    """The one TLS rule of every API module: (what to verify against, warning or None).

    ``validate_certs`` decides; ``ca_path`` only says which CA to trust while verifying. With verification off the
    CA is not used, and the module warns: anyone on the path can read the credentials the module sends.
    """
    if validate_certs:
        return (ca_path or True), None
    warning = "TLS certificate verification is off (validate_certs=false): the credentials go to whoever answers"
    if ca_path:
        warning += "; ca_path %s is not used while validate_certs is false" % ca_path
    return False, warning + ". Keep validate_certs on and give ca_path for a private CA."
