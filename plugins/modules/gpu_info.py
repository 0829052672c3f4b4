#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_info
short_description: Report NVIDIA GPUs, their MIG geometry, processes, virtualization and licence state through NVML
version_added: 0.1.0
description:
  - Reads, through NVML (the C(pynvml) module of the C(nvidia-ml-py) package), the driver, CUDA and NVML versions
    and every GPU of the host, with index, UUID, model, PCI bus id and memory.
  - For MIG-capable GPUs reports the current and pending MIG mode, the GPU-instance profiles with the placements
    NVML offers, and every GPU instance with its profile name, placement and compute instances.
  - Also lists running processes, the virtualization mode (bare metal, pass-through, vGPU guest or host),
    the vGPU licence state, on vGPU hosts the vGPU scheduler the driver runs (policy, adaptive round robin, time
    slice) and what the GPU supports, and from sysfs the kernel driver bound to each GPU and its IOMMU group.
  - When the NVML library or the NVIDIA driver is missing the module does not fail;
    it returns RV(nvml.available=false) with the reason.
extends_documentation_fragment:
  - gpuops.provision._attributes
  - gpuops.provision._attributes.INFO_MODULE
options:
  sysfs_root:
    description:
      - Directory under which C(sys/bus/pci/devices) is read for the bound driver and IOMMU group.
    type: path
    default: /
  profiles:
    description:
      - Whether to list each MIG-capable GPU's GPU-instance profiles and their possible placements.
      - Turning it off keeps the result short on large hosts when only the current geometry is needed.
    type: bool
    default: true
  health:
    description:
      - Whether to read each GPU's health through NVML (RV(gpus[].health)), that is ECC mode and error counts, row
        remapping, retired pages, PCIe link, temperatures and thresholds, clock event (throttle) reasons and
        persistence mode.
    type: bool
    default: true
  kernel_log:
    description:
      - Where to read the NVIDIA driver's Xid events since boot (RV(kernel_log)); they are not in NVML.
      - V(dmesg) runs C(dmesg) (the kernel ring buffer; root or C(kernel.dmesg_restrict=0)), V(journal) runs
        C(journalctl -k -b 0) (the whole boot, also when the ring buffer has wrapped), V(none) does not read it.
    type: str
    choices: [dmesg, journal, none]
    default: dmesg
requirements:
  - nvidia-ml-py (import name C(pynvml)) on the managed host
notes:
  - The health readings are what NVML answers, with the NVML error in place of a reading it does not give (for
    example C(NVML_ERROR_NOT_SUPPORTED) for row remapping on a MIG-enabled GPU); gpuops.provision.node_preflight
    judges them.
  - Profile names are computed as mig-parted computes them (from the profile memory and the GPU total memory),
    so they can be used unchanged in a mig-parted configuration and in M(gpuops.provision.mig_geometry).
seealso:
  - module: gpuops.provision.mig_geometry
  - name: NVML API reference
    description: The device queries this module makes.
    link: https://docs.nvidia.com/deploy/nvml-api/
"""

EXAMPLES = r"""
- name: Read GPU facts
  gpuops.provision.gpu_info:
  register: gpu

- name: Fail early on hosts without a working NVIDIA driver
  ansible.builtin.assert:
    that: gpu.nvml.available
    fail_msg: "{{ inventory_hostname }}: {{ gpu.nvml.reason }}"

- name: Show the MIG instances of every GPU
  ansible.builtin.debug:
    msg: "GPU {{ item.index }} {{ item.model }}: {{ item.mig_devices }}"
  loop: "{{ gpu.gpus }}"
  loop_control:
    label: "{{ item.index }}"

- name: Select A100 GPUs with MIG enabled (JMESPath over the returned facts)
  ansible.builtin.set_fact:
    mig_a100: "{{ gpu.gpus | community.general.json_query(\"[?starts_with(model, 'NVIDIA A100') && mig_mode.current == 'enabled']\") }}"
"""

RETURN = r"""
nvml:
  description: NVML availability and versions.
  returned: always
  type: dict
  contains:
    available:
      description: Whether NVML could be loaded and initialised.
      type: bool
      sample: true
    reason:
      description: Why NVML is not available (library missing, driver not loaded, version mismatch); V(null) otherwise.
      type: str
      sample: the NVIDIA kernel driver is not loaded
    binding:
      description:
        - The Python binding this run used - C(module) (the file of C(pynvml), the distribution's package, the
          collection's virtualenv C(/opt/gpuops/nvml) or another install; V(null) when there is none) - and C(python),
          the interpreter that ran the module.
        - The P(gpuops.provision.nvidia_driver#role) role's C(nvml) step installs the binding.
      type: dict
      sample: {module: /usr/lib/python3/dist-packages/pynvml.py, python: /usr/bin/python3}
    driver_version:
      description: NVIDIA driver version.
      type: str
      sample: 550.163.01
    cuda_driver_version:
      description: Highest CUDA version the driver supports.
      type: str
      sample: "12.4"
    nvml_version:
      description: NVML library version.
      type: str
      sample: 12.550.163.01
    calls:
      description: Number of NVML calls this run made.
      type: int
      sample: 42
gpus:
  description: One entry per GPU, in NVML index order. Empty when NVML is not available.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: NVML index.
      type: int
      sample: 0
    error:
      description: Set when NVML failed to answer for this GPU (for example a lost GPU, or MIG queries without
        root privileges); the keys read before the failure are still returned.
      type: str
      sample: GPU is lost (NVML_ERROR_GPU_IS_LOST)
    uuid:
      description: GPU UUID.
      type: str
      sample: GPU-5b7f0e1c-8c3f-4d0a-9a51-3c1d2e4f5a6b
    model:
      description: Product name as nvidia-smi prints it.
      type: str
      sample: NVIDIA A100-SXM4-40GB
    pci_bus_id:
      description: PCI bus id as NVML reports it.
      type: str
      sample: "00000000:17:00.0"
    pci_address:
      description: The same address in sysfs form.
      type: str
      sample: "0000:17:00.0"
    pci_device_id:
      description: PCI device and vendor id as mig-parted C(device-filter) uses it.
      type: str
      sample: "0x20B010DE"
    pci_subsystem_id:
      description: PCI subsystem device and vendor id.
      type: str
      sample: "0x134F10DE"
    memory:
      description: Framebuffer memory in bytes (C(total_bytes), C(used_bytes), C(free_bytes)).
      type: dict
    kernel_driver:
      description: Kernel driver bound to the GPU (for example V(nvidia) or V(vfio-pci)); V(null) when unknown.
      type: str
      sample: nvidia
    iommu_group:
      description: IOMMU group number; V(null) without IOMMU or when sysfs does not show the device.
      type: int
      sample: 42
    mig_capable:
      description: Whether the GPU supports MIG.
      type: bool
    compute_capability:
      description: CUDA compute capability as C(major.minor); V(null) where NVML does not report it.
      type: str
      sample: "9.0"
    mig_mode:
      description: Current and pending MIG mode (V(enabled)/V(disabled)); V(null) on GPUs without MIG.
        A differing pending mode waits for a GPU reset.
      type: dict
      sample: {current: enabled, pending: enabled}
    mig_devices:
      description: Compute instances per profile name, the way mig-parted counts them.
      type: dict
      sample: {"3g.20gb": 1, "2g.10gb": 2}
    instances:
      description: GPU instances with C(gi_id), C(profile), C(profile_id), C(placement) (C(start), C(size) in memory slices)
        and C(compute_instances) (C(ci_id), C(profile), C(slices), C(placement)).
      type: list
      elements: dict
    profiles:
      description: GPU-instance profiles NVML offers (C(name), C(id), C(slices), C(memory_slices), C(max_count),
        C(memory_mb), C(placements)). Only with O(profiles=true).
      type: list
      elements: dict
    processes:
      description: Running processes (C(pid), C(type), C(used_memory_bytes), C(gpu_instance_id), C(compute_instance_id)).
      type: list
      elements: dict
    virtualization:
      description: C(mode) (V(none), V(passthrough), V(vgpu), V(host_vgpu), V(host_vsga)) and C(host_vgpu_mode)
        (V(sriov)/V(non_sriov) on vGPU hosts).
      type: dict
    license:
      description: vGPU licence state. C(supported), C(licensed) (V(null) when not applicable) and C(features)
        (C(feature), C(product), C(licensed), C(enabled), C(expiry_status), C(expiry)).
      type: dict
    vgpu_scheduler:
      description:
        - The vGPU scheduler of a vGPU host's GPU, from NVML's C(nvmlDeviceGetVgpuSchedulerState) and
          C(nvmlDeviceGetVgpuSchedulerCapabilities).
        - C(supported) is V(false) with C(error) (V(NVML_ERROR_NOT_SUPPORTED)) on bare-metal GPUs, pass-through
          GPUs, vGPU guests and drivers without the queries.
        - C(state) is NVML's answer as read (C(scheduler_policy) 1 best effort, 2 equal share, 3 fixed share;
          C(arr_mode) 0 default, 1 disabled, 2 enabled; C(timeslice) as NVML gives it, in ns; C(avg_factor));
          C(running) the same as a policy (C(policy), C(arr), C(timeslice_ms), C(frequency_hz), C(averaging_factor),
          C(timeslice_observed_ms)) and C(description) one line of it. NVML reads the time slice and averaging factor
          as 0 while no vGPU runs; they are V(null) then.
        - C(capabilities) (C(supported_policies), C(min_timeslice), C(max_timeslice), C(arr_supported),
          C(min_frequency), C(max_frequency), C(min_avg_factor), C(max_avg_factor)).
      type: dict
      sample: {"supported": true, "error": null, "running": {"policy": "fixed_share", "arr": true, "frequency_hz": 480},
               "description": "fixed_share (arr, 480 Hz, averaging factor 33)"}
    health:
      description:
        - NVML's health readings, each with C(error) (the NVML error name) where NVML gave none. Only with
          O(health=true).
        - C(ecc) (C(enabled), C(pending), C(volatile_uncorrected), C(aggregate_uncorrected), C(volatile_corrected),
          C(aggregate_corrected)); C(remapped_rows) (C(correctable), C(uncorrectable), C(pending), C(failure));
          C(retired_pages) (C(pending)); C(pcie) (C(gen), C(width), C(max_gen), C(max_width), C(gpu_max_gen));
          C(temperature) (C(current), C(slowdown), C(shutdown), C(gpu_max), degrees C); C(clock_event_reasons)
          (C(mask), C(active) names such as V(GpuIdle), V(HwThermalSlowdown)); C(persistence_mode) (C(enabled));
          C(xid) (the Xid codes of RV(kernel_log) on this GPU).
      type: dict
      sample: {"ecc": {"enabled": true, "volatile_uncorrected": 0}, "pcie": {"gen": 5, "width": 16}}
kernel_log:
  description: The kernel log read for Xid events.
  returned: always
  type: dict
  contains:
    source:
      description: O(kernel_log).
      type: str
    read:
      description: Whether it could be read.
      type: bool
    error:
      description: Why not (the command's error); V(null) when read.
      type: str
    xid_events:
      description: The Xid events since boot, oldest first (C(xid), C(pci), C(pid), C(process), C(message), C(line)).
      type: list
      elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.provision.plugins.module_utils._gpu import info
from ansible_collections.gpuops.provision.plugins.module_utils._gpu.nvml import Nvml


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysfs_root=dict(type="path", default="/"),
            profiles=dict(type="bool", default=True),
            health=dict(type="bool", default=True),
            kernel_log=dict(type="str", default="dmesg", choices=["dmesg", "journal", "none"]),
        ),
        supports_check_mode=True,
    )
    result, error = info.collect(module, Nvml())
    if error:
        module.fail_json(msg=error, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
