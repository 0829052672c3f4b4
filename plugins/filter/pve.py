# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side Proxmox VE filters (thin: the logic is in module_utils/_pve_vm.py).

Documentation of each filter is in the ``<filter>.yml`` file next to this one.
"""

from __future__ import annotations

from ansible_collections.gpuops.provision.plugins.module_utils import _pve_vm
from ansible_collections.gpuops.provision.plugins.plugin_utils._plain import plain as _plain


def pve_vm_batch(vms, restart="never", new_mappings=None):
    return _pve_vm.batch_items(_plain(vms), restart=_plain(restart), new_mappings=_plain(new_mappings or []))


class FilterModule:
    """gpuops.provision Proxmox VE filters."""

    def filters(self):
        return {"pve_vm_batch": pve_vm_batch}
