# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vsphere_host_graphics
short_description: Set the graphics configuration of ESXi hosts for NVIDIA vGPU
version_added: 0.1.0
description:
  - Sets the default graphics type, the shared passthrough GPU assignment policy, per-device graphics types and,
    on vSphere 8.0 Update 3 and later, per-device vGPU modes of every host in scope through
    C(HostGraphicsManager.UpdateGraphicsConfig).
  - The configuration the host returns is edited and sent back, so fields the module does not set (for example
    the C(vgpuMode) of devices it does not touch) are kept.
  - Validates every host first (device PCI ids must exist on the host); nothing is changed when one host is invalid.
  - Only hosts whose configuration differs are updated.
  - Warns when powered-on VMs run on a host that is changed; vSphere applies graphics changes to VMs at their next power on,
    and a change of the default graphics type usually needs a host reboot or an Xorg restart.
options:
  default_graphics_type:
    description:
      - V(sharedDirect) is NVIDIA vGPU (vendor shared passthrough graphics); V(shared) is VMware vSGA.
      - Unset leaves the current value.
    type: str
    choices: [shared, sharedDirect]
  assignment_policy:
    description:
      - V(performance) spreads VMs across GPUs; V(consolidation) fills one GPU before the next.
      - Unset leaves the current value.
    type: str
    choices: [performance, consolidation]
  devices:
    description:
      - Per-device settings; a graphics type overrides O(default_graphics_type). Devices not listed keep their settings.
      - Each entry sets O(devices[].graphics_type), O(devices[].vgpu_mode) or both.
    type: list
    elements: dict
    default: []
    suboptions:
      pci_id:
        description: PCI id of the graphics device as the host reports it, for example V(0000:3b:00.0).
        type: str
        required: true
      graphics_type:
        description: Graphics type of this device. Unset keeps the device's current type.
        type: str
        choices: [shared, sharedDirect]
      vgpu_mode:
        description:
          - vGPU mode of this device (C(HostGraphicsConfigDeviceType.vgpuMode)). V(sameSize) allows only vGPUs of one
            frame buffer size on the GPU; V(mixedSize) allows vGPUs of different sizes on it (NVIDIA vGPU 17 and later).
          - Needs vSphere 8.0 Update 3 (API 8.0.3.0) on vCenter and on the host; older servers do not have the field
            and the module fails, naming the host, before any change. Unset keeps the device's current mode.
        type: str
        choices: [sameSize, mixedSize]
  skip_non_gpu_hosts:
    description: Leave hosts without graphics devices alone instead of failing on them.
    type: bool
    default: true
  restart_xorg:
    description:
      - Restart the C(xorg) service on a changed host where a graphics device is or was in V(shared) (vSGA) mode, so
        the change takes effect for vSGA. From vSphere 7.0 Update 1 Xorg is not needed for vGPU and may not start on a
        host without vSGA devices (VMware KB 318047), so hosts with only V(sharedDirect) devices before and after are
        not restarted.
      - A failed restart is a warning on the changed host; the other hosts go on.
    type: bool
    default: false
extends_documentation_fragment:
  - gpuops.provision._vsphere_auth
  - gpuops.provision._vsphere_auth.HOST_SCOPE
  - gpuops.provision._attributes
  - gpuops.provision._attributes.CHANGE_FULL
  - gpuops.provision._attributes.ACTIONGROUP_VSPHERE
"""

EXAMPLES = r"""
- name: NVIDIA vGPU on every GPU host of the cluster, spread VMs for performance
  gpuops.provision.vsphere_host_graphics:
    hostname: vcenter.example.com
    username: administrator@vsphere.local
    password: "{{ vcenter_password }}"
    cluster: gpu-cluster
    default_graphics_type: sharedDirect
    assignment_policy: performance

- name: One device per host as vSGA
  gpuops.provision.vsphere_host_graphics:
    esxi_hostname: [esx1.example.com]
    devices:
      - pci_id: "0000:af:00.0"
        graphics_type: shared

- name: Let one GPU hold vGPUs of different sizes (vSphere 8.0 Update 3)
  gpuops.provision.vsphere_host_graphics:
    esxi_hostname: [esx1.example.com]
    devices:
      - pci_id: "0000:3b:00.0"
        vgpu_mode: mixedSize
  module_defaults:
    group/gpuops.provision.vsphere:
      hostname: vcenter.example.com
      username: administrator@vsphere.local
      password: "{{ vcenter_password }}"
"""

RETURN = r"""
hosts:
  description: One entry per host in scope.
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: Host name., type: str}
    changed: {description: Whether the host's configuration was (or in check mode would be) changed., type: bool}
    skipped: {description: True for hosts without graphics devices when O(skip_non_gpu_hosts=true)., type: bool}
    before:
      description:
        - Configuration before; C(devices) maps PCI ids to graphics types, C(vgpu_modes) PCI ids to vGPU modes
          (only devices the host reports a mode for; empty before vSphere 8.0 Update 3).
      type: dict
    after: {description: Configuration after (predicted in check mode)., type: dict}
    running_vms: {description: Powered-on VMs on the host., type: list, elements: str}
    disruptions: {description: "The host's part of RV(disruptions).", type: list, elements: str}
  sample:
    - name: esx1
      changed: true
      skipped: false
      before: {default_graphics_type: shared, assignment_policy: performance, devices: {}, vgpu_modes: {}}
      after: {default_graphics_type: sharedDirect, assignment_policy: performance, devices: {"0000:3b:00.0": sharedDirect},
              vgpu_modes: {"0000:3b:00.0": mixedSize}}
      running_vms: []
      disruptions: []
disruptions:
  description:
    - What the run does (in check mode would do) beyond the configuration, host by host - the restart of the Xorg
      service that O(restart_xorg) asks for, on a changed host where a device is or was in shared (vSGA) mode; empty
      otherwise. Powered-on VMs keep their settings until they are power-cycled (a warning); the module does not
      power-cycle them.
    - With diff mode they come first in the diff, in an entry of their own, before the configuration diff.
  returned: always
  type: list
  elements: str
  sample: ["restart the Xorg service of host esx1"]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.provision.plugins.module_utils._common import connection
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import graphics, module as vsphere_module, vgpu


def main():
    spec = connection.vsphere_argument_spec()
    spec.update(connection.vsphere_host_scope_spec())
    spec.update(
        default_graphics_type=dict(type="str", choices=list(vgpu.GRAPHICS_TYPES)),
        assignment_policy=dict(type="str", choices=list(vgpu.ASSIGNMENT_POLICIES)),
        devices=dict(type="list", elements="dict", default=[], options=dict(
            pci_id=dict(type="str", required=True),
            graphics_type=dict(type="str", choices=list(vgpu.GRAPHICS_TYPES)),
            vgpu_mode=dict(type="str", choices=list(vgpu.VGPU_MODES)),
        ), required_one_of=[("graphics_type", "vgpu_mode")]),
        skip_non_gpu_hosts=dict(type="bool", default=True),
        restart_xorg=dict(type="bool", default=False),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True, required_one_of=[("cluster", "esxi_hostname")])
    hosts = vsphere_module.run(module, lambda session, warnings: graphics.run(
        session, module.params, module.check_mode, module.warn))
    module.exit_json(**vsphere_module.host_result(hosts, module._diff, disrupts=True))


if __name__ == "__main__":
    main()
