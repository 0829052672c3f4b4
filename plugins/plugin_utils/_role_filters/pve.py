# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side Proxmox VE filters (thin: the logic is in module_utils/_proxmox/vm.py and _proxmox/host.py).

Role-internal: the collection's roles and playbooks call these through ``gpuops.provision.internal('<name>', ...)``
(see ``__init__.py``); not a public interface.
"""

from __future__ import annotations

import base64

from ansible_collections.gpuops.provision.plugins.module_utils._proxmox import host, rules, vm
from ansible_collections.gpuops.provision.plugins.plugin_utils._plain import plain as _plain


def pve_vm_batch(vms, restart="never", new_mappings=None):
    return vm.batch_items(_plain(vms), restart=_plain(restart), new_mappings=_plain(new_mappings or []))


def pve_host_cmdline(lines, kernel_args, remove=None):
    return host.merge_cmdline(_plain(lines), _plain(kernel_args), _plain(remove or []))


def pve_host_pci(lines):
    return host.parse_pci_listing(_plain(lines))


def pve_host_card_functions(pci, gpus):
    return host.card_functions(_plain(pci), _plain(gpus))


def pve_host_vfio_stolen(pci, taken, ids):
    return host.stolen_functions(_plain(pci), _plain(taken), _plain(ids))


def pve_host_problems(iommu, kernel_args, gpus):
    return host.passthrough_problems(_plain(iommu), _plain(kernel_args), _plain(gpus))


def pve_host_vgpu_evidence(lines, manager_units):
    return host.vgpu_evidence(_plain(lines), _plain(manager_units))


def pve_host_vgpu_conflicts(evidence, gpus, blacklist):
    return host.vgpu_conflicts(_plain(evidence), _plain(gpus), _plain(blacklist))


def pve_host_vgpu_problems(pci, lines):
    return host.vgpu_host_problems(_plain(pci), _plain(lines))


def pve_host_vgpu_helper_done(lines):
    return host.helper_done(_plain(lines))


def pve_host_passthrough_files(slurped):
    """slurp results (loop) -> the paths of the passthrough files among them."""
    files = [(r["item"], base64.b64decode(r["content"]).decode("utf-8", "replace"))
             for r in _plain(slurped) if r.get("content")]
    return host.passthrough_files(files)


def pve_vm_romfiles(vms, node_hosts=None, folder=rules.ROMFILE_DIR):
    return rules.romfile_checks(_plain(vms), _plain(node_hosts or {}), _plain(folder))


def filters():
    """This file's role-internal filters by name (called through gpuops.provision.internal)."""
    return {"pve_vm_batch": pve_vm_batch, "pve_host_cmdline": pve_host_cmdline, "pve_host_pci": pve_host_pci,
            "pve_host_card_functions": pve_host_card_functions, "pve_host_vfio_stolen": pve_host_vfio_stolen,
            "pve_host_problems": pve_host_problems, "pve_host_vgpu_evidence": pve_host_vgpu_evidence,
            "pve_host_vgpu_conflicts": pve_host_vgpu_conflicts, "pve_host_vgpu_problems": pve_host_vgpu_problems,
            "pve_host_vgpu_helper_done": pve_host_vgpu_helper_done,
            "pve_host_passthrough_files": pve_host_passthrough_files, "pve_vm_romfiles": pve_vm_romfiles}
