# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vsphere_gpu_info
short_description: GPUs, graphics settings, vGPU profiles, vGPU VMs and NVIDIA driver drift of ESXi hosts
version_added: 0.1.0
description:
  - Reads, for every ESXi host in scope, the physical graphics devices, the host graphics configuration
    (default graphics type and shared passthrough assignment policy), the vGPU profiles the host offers,
    the VMs that hold vGPUs, and the NVIDIA host driver version from the host's VIB list.
  - Host and VM properties of the whole scope are read with one PropertyCollector retrieval each, not per host.
  - Reports whether the GPU hosts of each cluster run one NVIDIA driver version (drift report); hosts of different
    clusters may run different ones.
  - Profile facts (frame buffer, MIG backing, class, vMotion stun time estimates) come from the host's
    C(RetrieveVgpuProfileInfo) (vSphere API 7.0.3 and later), otherwise from the profile names.
options:
  datacenter:
    description: Limit the scope to this datacenter.
    type: str
  cluster:
    description: Limit the scope to this cluster.
    type: str
  esxi_hostname:
    description: Limit the scope to these hosts (names as vCenter shows them).
    type: list
    elements: str
  driver_vib_regex:
    description:
      - Python regular expression matched against the VIB name and vendor to find the NVIDIA host driver.
      - NVIDIA VIB names vary by release (C(NVD-AIE_ESXi_8.0.0_Driver), C(NVIDIA-VMware_ESXi_*_Host_Driver)).
    type: str
    default: '(?i)^(nvidia|nvd)'
  gather_driver:
    description: Read the driver VIB of each GPU host (one C(FetchSoftwarePackages) call per GPU host).
    type: bool
    default: true
  gather_vgpu_vms:
    description: List the VMs that hold vGPU devices.
    type: bool
    default: true
extends_documentation_fragment:
  - gpuops.provision._vsphere_auth
  - gpuops.provision._attributes
  - gpuops.provision._attributes.INFO_MODULE
  - gpuops.provision._attributes.ACTIONGROUP_VSPHERE
notes:
  - The driver version comes from C(HostImageConfigManager.FetchSoftwarePackages); where that manager is not
    available the host's C(Software Components) health sensors are read instead (the C(source) key of RV(hosts[].driver) says which).
  - C(FetchSoftwarePackages) needs the C(Host.Config.Image) privilege. Read-only accounts get C(NoPermission);
    the module then reads the health sensors as well and warns, naming the host and the missing privilege.
  - A GPU host without an NVIDIA driver VIB counts as drift.
"""

EXAMPLES = r"""
- name: GPU facts of a cluster
  gpuops.provision.vsphere_gpu_info:
    hostname: vcenter.example.com
    username: administrator@vsphere.local
    password: "{{ vcenter_password }}"
    ca_path: /etc/pki/vcenter-ca.pem
    cluster: gpu-cluster
  register: gpu

- name: Fail when the GPU hosts of a cluster run different NVIDIA drivers
  ansible.builtin.assert:
    that: gpu.drift.consistent
    fail_msg: "driver drift in {{ gpu.drift.drifting_clusters }}: {{ gpu.drift.clusters }}"
"""

RETURN = r"""
hosts:
  description: One entry per host in scope, sorted by name.
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: Host name., type: str}
    cluster: {description: 'Cluster name; null for standalone hosts.', type: str}
    connection_state: {description: 'C(connected), C(disconnected) or C(notResponding).', type: str}
    in_maintenance_mode: {description: Whether the host is in maintenance mode., type: bool}
    esxi_version: {description: 'ESXi release (C(config.product.version)), for example V(8.0.3).', type: str}
    gpu_host: {description: Whether the host has graphics devices or vGPU profiles., type: bool}
    gpus:
      description:
        - Physical graphics devices (C(config.graphicsInfo)). C(vgpu_mode) is the device's current vGPU mode
          (V(none), V(sameSize), V(mixedSize) or V(multiInstanceGpu)) on vSphere 8.0 Update 3 and later, else null.
      type: list
      elements: dict
      sample: [{device_name: NVIDIA A100-PCIE-40GB, vendor_name: NVIDIA, pci_id: "0000:3b:00.0",
                graphics_type: sharedDirect, vgpu_mode: null, memory_mb: 40960, vms: [vm-63]}]
    graphics_config:
      description:
        - Host graphics configuration. C(devices) maps PCI ids to per-device graphics types, C(vgpu_modes) PCI ids to
          per-device vGPU modes (V(sameSize) or V(mixedSize); vSphere 8.0 Update 3 and later, else empty).
      type: dict
      sample: {default_graphics_type: sharedDirect, assignment_policy: performance, devices: {"0000:3b:00.0": sharedDirect},
               vgpu_modes: {"0000:3b:00.0": mixedSize}}
    profiles: {description: vGPU profiles the host offers., type: list, elements: str, sample: [grid_a100-4c, grid_a100-40c]}
    vgpu_vms:
      description: VMs on this host that hold vGPUs.
      type: list
      elements: dict
      sample: [{name: ml-01, moid: vm-63, power_state: poweredOff, profiles: [grid_a100-40c],
                drs_override: {behavior: manual, enabled: null}, drs_behavior: manual}]
    profile_info:
      description:
        - Per offered profile C(name), C(board), C(fb_gb), C(series), C(mig) (MIG-backed), C(source) (V(api) from
          C(RetrieveVgpuProfileInfo), V(name) parsed from the name) and C(stun_time_s) (vMotion stun time estimate in
          seconds by link speed in Gbit/s, vSphere 8.0 Update 2 and later; null otherwise).
      type: list
      elements: dict
      sample: [{name: grid_a100-8c, board: device-552669406, fb_gb: 8, series: c, mig: false, source: api,
                stun_time_s: {"10": 7, "25": 3, "100": 1}}]
    driver:
      description: NVIDIA host driver; all values null when none was found or O(gather_driver=false).
      type: dict
      sample: {vib: NVD-AIE_ESXi_8.0.0_Driver, vib_version: 535.154.02-1OEM.800.1.0.20613240, version: 535.154.02,
               source: software_packages}
drift:
  description:
    - NVIDIA driver versions across the GPU hosts in scope, judged per cluster (one driver per cluster; a standalone
      host is a group of its own).
  returned: when O(gather_driver=true)
  type: dict
  contains:
    consistent: {description: True when the GPU hosts of every cluster run one driver version and none lacks it., type: bool}
    versions: {description: Driver version to host names over the whole scope., type: dict}
    missing: {description: GPU hosts without an NVIDIA driver VIB., type: list, elements: str}
    majority: {description: The version most GPU hosts run., type: str}
    clusters:
      description: Per cluster (C(standalone host <name>) for a standalone host) its own C(consistent), C(versions), C(missing), C(majority).
      type: dict
    drifting_clusters: {description: The clusters whose GPU hosts drift., type: list, elements: str}
  sample: {consistent: false, versions: {"535.154.02": [esx1], "550.54.10": [esx2, esx3]}, missing: [], majority: "550.54.10",
           drifting_clusters: [gpu-a],
           clusters: {gpu-a: {consistent: false, versions: {"535.154.02": [esx1], "550.54.10": [esx2]}, missing: [],
                              majority: "535.154.02"},
                      gpu-b: {consistent: true, versions: {"550.54.10": [esx3]}, missing: [], majority: "550.54.10"}}}
vgpu_vms:
  description:
    - All VMs in scope that hold vGPUs.
    - C(drs_override) is the VM's per-VM DRS override in its cluster (C({behavior, enabled}); null when it has none
      or is not in a cluster); C(drs_behavior) the automation level in force, the override's or else the cluster's
      default.
  returned: when O(gather_vgpu_vms=true)
  type: list
  elements: dict
  sample: [{name: ml-01, moid: vm-63, host: esx1, power_state: poweredOff, profiles: [grid_a100-40c],
            drs_override: {behavior: manual, enabled: null}, drs_behavior: manual}]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.provision.plugins.module_utils._common import connection
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api, info, module as vsphere_module


def main():
    spec = connection.vsphere_argument_spec()
    # the shared host scope without required_one_of: no scope reads every host
    spec.update(connection.vsphere_host_scope_spec())
    spec.update(
        driver_vib_regex=dict(type="str", default=api.DEFAULT_DRIVER_REGEX),
        gather_driver=dict(type="bool", default=True),
        gather_vgpu_vms=dict(type="bool", default=True),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    result = vsphere_module.run(module, lambda session, warnings: info.gather(session, module.params, warnings),
                                before=lambda: api.valid_regex(module.params["driver_vib_regex"]))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
