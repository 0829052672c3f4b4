# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vsphere_host_maintenance
short_description: Put ESXi hosts with vGPU VMs into maintenance mode, or take them out, without waiting on VMs DRS cannot move
version_added: 0.1.0
description:
  - C(EnterMaintenanceMode_Task) waits until every powered-on VM has left the host, or fails when its timeout expires.
    DRS moves a VM only at automation level V(fullyAutomated) (a V(manual) or V(partiallyAutomated) override, as
    P(gpuops.provision.vsphere_vm_vgpu#module) sets with O(gpuops.provision.vsphere_vm_vgpu#module:drs_behavior),
    only yields recommendations). It moves vGPU VMs only when the cluster's DRS advanced option
    C(VgpuMMAutomationTimeoutSecs) is V(-1) and vCenter's advanced setting C(vgpu.hotmigrate.enabled) is V(true)
    (VMware KB 88271), and only to a host whose GPUs take their vGPUs. A standalone host has no DRS.
  - Before any host is touched the module reads every host in scope and lists each powered-on VM with its vGPUs, its
    DRS automation level and the two settings. When one would stay, it fails naming each host, VM and reason, and
    changes nothing, unless O(vgpu_vms) says what to do with vGPU VMs.
  - Then it enters maintenance mode host by host, in name order. With O(state=absent) it exits maintenance mode and
    powers on the VMs it shut down.
options:
  state:
    description: V(present) puts the hosts into maintenance mode, V(absent) takes them out of it.
    type: str
    choices: [present, absent]
    default: present
  vgpu_vms:
    description:
      - What to do with powered-on vGPU VMs DRS would not move.
      - V(fail) changes nothing and fails, naming them.
      - V(shutdown) shuts them down (VMware Tools guest shutdown, O(shutdown_timeout)) before the host enters
        maintenance mode, and marks them (C(gpuops.provision.restorePowerState) in their extraConfig); O(state=absent)
        powers them on again, also in a later run.
      - V(migrate) sets C(VgpuMMAutomationTimeoutSecs=-1) on the clusters and C(vgpu.hotmigrate.enabled=true) on vCenter
        first, so that DRS migrates them. VMs whose DRS automation level is not V(fullyAutomated) still fail.
      - VMs without vGPUs that DRS would not move always fail.
    type: str
    choices: [fail, shutdown, migrate]
    default: fail
  timeout:
    description: Seconds C(EnterMaintenanceMode_Task) and C(ExitMaintenanceMode_Task) may take.
    type: int
    default: 3600
  shutdown_timeout:
    description: Seconds to wait for each guest shutdown with O(vgpu_vms=shutdown).
    type: int
    default: 300
  evacuate_powered_off:
    description: Have DRS move powered-off VMs off the host as well (C(evacuatePoweredOffVms)).
    type: bool
    default: false
  rolling:
    description:
      - How the hosts of one plan follow each other. V(false) (one run of this module) puts them in one after the
        other and leaves them in, so VMs of a later host cannot move to an earlier one. V(true) plans a rolling change
        where each host is back in service before the next goes in (as the P(gpuops.provision.vsphere_vgpu_host#role)
        role does), so the other hosts in scope count as targets. Use V(true) with check mode to plan a roll.
    type: bool
    default: false
extends_documentation_fragment:
  - gpuops.provision._vsphere_auth
  - gpuops.provision._vsphere_auth.HOST_SCOPE
  - gpuops.provision._attributes
  - gpuops.provision._attributes.CHANGE_FULL
  - gpuops.provision._attributes.ACTIONGROUP_VSPHERE
notes:
  - vSphere 8 DRS places vGPU VMs at power-on but does not load-balance them. A per-VM override of V(manual) or
    V(partiallyAutomated) therefore does not stop load balancing; it stops automatic evacuation here (and V(manual) also
    stops the automatic placement at power-on).
"""

EXAMPLES = r"""
- name: Refuse (and name the VMs) when a GPU host cannot be emptied by DRS
  gpuops.provision.vsphere_host_maintenance:
    esxi_hostname: [esx1.example.com]
  check_mode: true

- name: Shut the vGPU VMs down for the reboot, then bring them back
  block:
    - name: Enter maintenance mode
      gpuops.provision.vsphere_host_maintenance:
        esxi_hostname: [esx1.example.com]
        vgpu_vms: shutdown
    - name: Exit maintenance mode and power the VMs on again
      gpuops.provision.vsphere_host_maintenance:
        esxi_hostname: [esx1.example.com]
        state: absent
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
    changed: {description: Whether the host was (or in check mode would be) changed., type: bool}
    actions: {description: "What was (or would be) done, in order.", type: list, elements: str}
    disruptions: {description: "The host's part of RV(disruptions).", type: list, elements: str}
    before: {description: "C(in_maintenance_mode) before.", type: dict}
    after: {description: "C(in_maintenance_mode) after.", type: dict}
    vms:
      description:
        - The powered-on VMs of a host entering maintenance mode, each with C(name), C(vgpu), C(profiles),
          C(drs_behavior) (the automation level in force), C(fate) (C(migrate) by DRS or C(shutdown)) and C(why) DRS
          would not move it (null when it would).
      type: list
      elements: dict
disruptions:
  description:
    - What the run does (in check mode would do) to the hosts and their VMs, host by host in order - the guest
      shutdowns of O(vgpu_vms=shutdown), the VMs DRS migrates, the entry into maintenance mode; with O(state=absent)
      the exit and the VMs powered on again. Empty for hosts already in the state asked for.
    - With diff mode they come first in the diff, in an entry of their own, before the configuration diff.
  returned: always
  type: list
  elements: str
  sample: ["shut down the guest of VM train-01 on host esx1 (VMware Tools, up to 300 s)", "enter maintenance mode on host esx1"]
settings:
  description: The vGPU migration settings changed (or to change) with O(vgpu_vms=migrate) (C(scope), C(key), C(before), C(after)).
  returned: always
  type: list
  elements: dict
  sample: [{scope: gpu-cluster, key: VgpuMMAutomationTimeoutSecs, before: null, after: "-1"}]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.provision.plugins.module_utils._common import bounds, connection
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import maintenance, module as vsphere_module


def main():
    spec = connection.vsphere_argument_spec()
    spec.update(connection.vsphere_host_scope_spec())
    spec.update(
        state=dict(type="str", default="present", choices=["present", "absent"]),
        vgpu_vms=dict(type="str", default="fail", choices=["fail", "shutdown", "migrate"]),
        timeout=dict(type="int", default=3600),
        shutdown_timeout=dict(type="int", default=300),
        evacuate_powered_off=dict(type="bool", default=False),
        rolling=dict(type="bool", default=False),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True, required_one_of=[("cluster", "esxi_hostname")])
    problems = bounds.out_of_range(module.params, {"timeout": bounds.TASK_TIMEOUT, "shutdown_timeout": bounds.TASK_TIMEOUT})
    if problems:
        module.fail_json(msg="; ".join(problems) + "; nothing changed")
    fields = vsphere_module.run(module, lambda session, warnings: maintenance.run(
        session, module.params, module.check_mode))
    module.exit_json(**maintenance.outcome(fields, module._diff))


if __name__ == "__main__":
    main()
