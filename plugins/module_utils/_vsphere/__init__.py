# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vSphere / VCF: the pyvmomi and REST adapters, vGPU planning and placement, host graphics and scheduler, VM classes.

- ``api.py``: adapter. pyvmomi: session, PropertyCollector bulk reads, task waiting, host and VM GPU facts.
- ``rest.py``: adapter. The vCenter REST (Automation) API, for VM classes and namespaces.
- ``module.py``: workflow. What every vSphere module does around its work (session, warnings, errors).
- ``vgpu.py``: pure. vGPU profiles, a VM's vGPU list diff, power policy, VIB drift.
- ``placement.py``: pure. Where a vGPU VM can run, start and move (DRS, hosts, profiles).
- ``vm.py``: adapter and workflow. Find and read VMs in bulk, apply each VM's plan (decided in vgpu.py).
- ``scheduler.py``: pure. The ``nvidia`` kernel module option string of ESXi hosts.
- ``vm_class.py``: pure. VM classes that carry vGPUs, and the namespaces that may use them.
- ``graphics.py``, ``info.py``, ``maintenance.py``, ``scheduler_apply.py``, ``vm_class_apply.py``: workflows of the
  modules vsphere_host_graphics, vsphere_gpu_info, vsphere_host_maintenance, vsphere_host_vgpu_scheduler and
  vsphere_vm_class.
"""
