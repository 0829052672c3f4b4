# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Proxmox VE rules the API modules apply before and while they write, beyond the hostpci property strings of
``_pci``: what an HA-managed VM's state means while it restarts, which devices of a node's VMs collide, and which
privileges each call needs. Pure logic, no I/O: the workflows in ``_pve_vm`` and ``_pve_mapping`` ask these functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

# --------------------------------------------------------------------------- HA-managed VMs

# Service states of pve-ha-manager (src/PVE/HA/Manager.pm) in which the CRM will not bring the VM to the requested
# state by itself: 'error' after the recovery policy gave up, 'fence'/'recovery' around a failed node, 'freeze' while
# its node shuts down or is in maintenance.
HA_STUCK = ("error", "fence", "recovery", "freeze")


def ha_managed(status: Optional[Mapping[str, Any]]) -> bool:
    """Whether ``GET .../status/current`` says the VM is an HA resource (``ha.managed``, from
    PVE::HA::Config::get_service_status)."""
    ha = (status or {}).get("ha") or {}
    return str(ha.get("managed") or 0) not in ("0", "")


def ha_verdict(status: Mapping[str, Any], want: str) -> Optional[str]:
    """While an HA-managed VM is brought to ``want`` ('stopped' or 'running'): None when it is there, '' to keep
    waiting, or why it will not get there.

    For an HA resource, qemu-server's vm_shutdown/vm_start only queue a request (ha-manager crm-command stop / set
    --state started) and their task ends at once; the VM's ``status`` and the service state in ``ha.state`` change
    when HA acts. Running counts only once the service is 'started' as well (HA may still stop it otherwise).
    """
    state = str((status.get("ha") or {}).get("state") or "")
    if state in HA_STUCK:
        return "HA service vm:%s is in state '%s' (ha-manager status shows why)" % (status.get("vmid", "?"), state)
    current = status.get("status")
    if want == "stopped":
        return None if current == "stopped" else ""
    return None if current == "running" and state in ("started", "") else ""
