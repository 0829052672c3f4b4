# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Proxmox VE: the API adapter, the hostpci and mapping property strings, PVE's rules, and the workflows.

- ``api.py``: adapter. The Proxmox VE API over proxmoxer: session, error mapping, task waiting, fact gathering.
- ``property_strings.py``: pure. PCI ids and the property strings (``hostpciN``, a cluster mapping's ``map=``);
  a new hostpci option starts here.
- ``rules.py``: pure. PVE's rules beyond the property strings (an HA-managed VM's states, device collisions
  between VMs, the privileges of each call).
- ``host.py``: pure. The pve_gpu_host role's decisions (kernel command line, VFIO ids, card functions).
- ``mapping.py``: workflow. One cluster PCI mapping made to match (module pve_pci_mapping).
- ``vm.py``: workflow. The GPUs (hostpciN) of VMs: plan, apply, batch (module pve_vm_gpu).
"""
