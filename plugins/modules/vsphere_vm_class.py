# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vsphere_vm_class
short_description: VM classes with NVIDIA vGPUs for vSphere with Tanzu / VKS, and the namespaces that may use them
version_added: 0.1.0
description:
  - Manages vSphere with Tanzu VM classes (the sizes VM Service VMs and VKS node pools are built from) through the
    vCenter REST API (C(/api/vcenter/namespace-management/virtual-machine-classes)). For each class it sets the CPU
    count and memory, the reservations, and the exact list of vGPU profiles (O(classes[].vgpu_profiles), repeats for
    several vGPUs).
  - Binds each class to exactly the vSphere Namespaces listed in O(classes[].namespaces), through each namespace's
    C(vm_service_spec.vm_classes) (C(/api/vcenter/namespaces/instances)). The namespace is the tenancy boundary. A
    namespace reaches a GPU profile only through a class bound to it, and RV(exposure) reports which namespace reaches
    which profile.
  - Every class's vGPUs are checked against the hosts of the Supervisor cluster O(cluster) before anything changes,
    with the rules P(gpuops.provision.vsphere_vm_vgpu#module) applies to one VM. Some connected host outside
    maintenance mode must offer all of a class's profiles, and its GPUs must take them together (vSGA, MIG mode,
    mixed sizes). Several vGPUs follow the multi-vGPU rules of that host's ESXi release and driver.
  - A class that a namespace still binds after the task, or that VMs use, is not deleted; the module fails naming it.
  - Order of changes, once everything is planned. Classes are created and updated first, then the namespaces are
    bound, then classes are deleted.
options:
  cluster:
    description:
      - The Supervisor cluster whose hosts the VMs of these classes run on. Required when a class has vGPU profiles.
    type: str
  device_api:
    description:
      - Where the vGPUs of a class go. V(config_spec) puts them into the class's C(config_spec) as
        C(VirtualPCIPassthrough) devices with a VMIOP backing (vSphere API 8.0.2 and later). V(devices) puts them
        into C(devices.vgpu_devices) (7.0.3; deprecated from 8.0.2). V(auto) picks V(config_spec) on vCenter 8.0.2 and
        later.
      - Either way the other devices and fields of the class are kept, and vGPUs in the other place are moved.
    type: str
    choices: [auto, devices, config_spec]
    default: auto
  classes:
    description: The VM classes to manage; classes not listed are left alone.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Class id, a DNS label (a-z, 0-9, C(-); at most 63 characters).
        type: str
        required: true
      state:
        description: V(present) creates or updates the class; V(absent) deletes it.
        type: str
        choices: [present, absent]
        default: present
      cpu_count:
        description: Virtual CPUs of the class's VMs. Required to create a class; unset keeps it.
        type: int
      memory_mb:
        description: Memory in MB. Required to create a class; unset keeps it.
        type: int
      cpu_reservation:
        description: Percent of the CPU reserved; unset keeps it.
        type: int
      memory_reservation:
        description: Percent of the memory reserved (vGPU VMs need all of it reserved; VM Service sets that); unset keeps it.
        type: int
      vgpu_profiles:
        description: The exact vGPU profiles of the class, for example V([grid_a100-3-20c, grid_a100-2-10c]); unset keeps them.
        type: list
        elements: str
      namespaces:
        description:
          - The exact namespaces that may use the class; V([]) unbinds it everywhere (needed before V(absent)).
            Unset leaves the bindings alone. The namespaces must exist.
        type: list
        elements: str
extends_documentation_fragment:
  - gpuops.provision._vsphere_auth
  - gpuops.provision._attributes
  - gpuops.provision._attributes.CHANGE_FULL
  - gpuops.provision._attributes.ACTIONGROUP_VSPHERE
notes:
  - Unlike the Terraform resource C(vsphere_virtual_machine_class) (C(vgpu_devices)), this module checks the profiles
    against the Supervisor's hosts and GPUs before any change. It uses C(config_spec) on vSphere 8.0.2 and later, where
    C(vgpu_devices) is deprecated. It manages which namespaces may use a class and keeps fields it is not given. It
    refuses to delete a class that is still bound. It reports the profiles each namespace can reach.
  - VMs of a class belong to the VM Service; P(gpuops.provision.vsphere_vm_vgpu#module) refuses them.
"""

EXAMPLES = r"""
- name: Two MIG-backed vGPUs for the inference node pool, usable by two teams
  gpuops.provision.vsphere_vm_class:
    hostname: vcenter.example.com
    username: administrator@vsphere.local
    password: "{{ vcenter_password }}"
    cluster: wcp-cluster
    classes:
      - name: gpu-a100-infer
        cpu_count: 16
        memory_mb: 131072
        memory_reservation: 100
        vgpu_profiles: [grid_a100-3-20c, grid_a100-3-20c]
        namespaces: [team-a, team-b]

- name: Retire a class (unbound first, deleted after)
  gpuops.provision.vsphere_vm_class:
    classes:
      - name: gpu-old
        state: absent
        namespaces: []
"""

RETURN = r"""
classes:
  description: One entry per class of O(classes), with C(operation) (C(create), C(update), C(delete) or null).
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: Class id., type: str}
    changed: {description: Whether the class was (or in check mode would be) changed., type: bool}
    before: {description: "C(cpu_count), C(memory_mb), C(cpu_reservation), C(memory_reservation), C(vgpu_profiles); null for a new class.", type: dict}
    after: {description: The same after; null for a deleted class., type: dict}
namespaces:
  description: Every namespace with the classes bound to it before and after (C(name), C(changed), C(before), C(after)).
  returned: always
  type: list
  elements: dict
exposure:
  description:
    - The tenancy boundary after the run. C(namespaces) maps each namespace to its vGPU classes and their profiles.
      C(profiles) maps each profile to the classes that hold it and the namespaces that reach it.
  returned: always
  type: dict
  sample: {namespaces: {team-a: {gpu-a100-infer: [grid_a100-3-20c, grid_a100-3-20c]}},
           profiles: {grid_a100-3-20c: {classes: [gpu-a100-infer], namespaces: [team-a]}}}
device_api:
  description: Where vGPUs were written (C(config_spec) or C(devices)).
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.provision.plugins.module_utils._common import connection
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import module as vsphere_module, vm_class, vm_class_apply


def main():
    spec = connection.vsphere_argument_spec()
    spec.update(
        cluster=dict(type="str"),
        device_api=dict(type="str", default="auto", choices=list(vm_class.DEVICE_APIS)),
        classes=dict(type="list", elements="dict", required=True, options=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            cpu_count=dict(type="int"),
            memory_mb=dict(type="int"),
            cpu_reservation=dict(type="int"),
            memory_reservation=dict(type="int"),
            vgpu_profiles=dict(type="list", elements="str"),
            namespaces=dict(type="list", elements="str"),
        )),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    fields = vsphere_module.run(module, lambda session, warnings: vm_class_apply.run(
        session, module.params, module.check_mode, warnings))
    module.exit_json(**vm_class_apply.outcome(fields, module._diff))


if __name__ == "__main__":
    main()
