# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side Proxmox VE filters (thin: the logic is in module_utils/_pve_vm.py and _pve_host.py).

Documentation of each filter is in the ``<filter>.yml`` file next to this one.
"""

from __future__ import annotations

from ansible_collections.gpuops.provision.plugins.module_utils import _pve_host, _pve_vm
from ansible_collections.gpuops.provision.plugins.plugin_utils._plain import plain as _plain


def pve_vm_batch(vms, restart="never", new_mappings=None):
    return _pve_vm.batch_items(_plain(vms), restart=_plain(restart), new_mappings=_plain(new_mappings or []))


def pve_host_cmdline(lines, kernel_args, remove=None):
    return _pve_host.merge_cmdline(_plain(lines), _plain(kernel_args), _plain(remove or []))


def pve_host_pci(lines):
    return _pve_host.parse_pci_listing(_plain(lines))


def pve_host_card_functions(pci, gpus):
    return _pve_host.card_functions(_plain(pci), _plain(gpus))


def pve_host_vfio_stolen(pci, taken, ids):
    return _pve_host.stolen_functions(_plain(pci), _plain(taken), _plain(ids))


def pve_host_problems(iommu, kernel_args, gpus):
    return _pve_host.passthrough_problems(_plain(iommu), _plain(kernel_args), _plain(gpus))


class FilterModule:
    """gpuops.provision Proxmox VE filters."""

    def filters(self):
        return {"pve_vm_batch": pve_vm_batch, "pve_host_cmdline": pve_host_cmdline, "pve_host_pci": pve_host_pci,
                "pve_host_card_functions": pve_host_card_functions, "pve_host_vfio_stolen": pve_host_vfio_stolen,
                "pve_host_problems": pve_host_problems}
