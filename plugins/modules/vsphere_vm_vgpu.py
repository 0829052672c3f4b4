# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vsphere_vm_vgpu
short_description: Set the exact list of NVIDIA vGPU profiles of a vSphere VM
version_added: 0.1.0
description:
  - Makes the VM hold exactly the vGPU profiles in O(profiles) (an empty list removes all vGPUs).
    Devices whose profile is already right are kept; others are removed and the missing ones added, in one reconfigure.
  - Many VMs in one task with O(vms). One session; the VMs and their hosts are read with a few PropertyCollector
    retrievals for all of them; every VM is planned before the first write, and one that cannot be done fails the task
    naming it, with nothing changed. The changed VMs are then reconfigured O(max_concurrent) at a time (vCenter runs
    their tasks in parallel). A VM whose reconfigure fails is named and read back; the others go on unless
    O(stop_on_error).
  - Validates the profiles against what the VM's host offers, or with O(placement=cluster) what any connected host
    of the VM's cluster offers, before anything changes.
  - Several vGPUs on one VM must follow NVIDIA's multi-vGPU rules for the host's ESXi release and NVIDIA driver
    (O(multi_vgpu_rules)); with V(auto) they are read from the host.
  - C-series (compute) profiles need EFI firmware, 64-bit MMIO and enough MMIO space on ESXi. The module fails for
    a BIOS VM, and sets C(pciPassthru.use64bitMMIO) and C(pciPassthru.64bitMMIOSizeGB) unless O(use_64bit_mmio)
    or O(mmio_size_gb) say otherwise.
  - vGPUs can only be changed on a powered-off VM. By default the module fails for a powered-on VM;
    O(power_policy) allows a power cycle instead, after which the VM is powered on again.
  - Reserves all guest memory (C(memoryReservationLockedToMax)) when the VM gets vGPUs, as vGPU VMs require it,
    and optionally sets the 64-bit MMIO options large-BAR devices need.
options:
  name:
    description: VM name. Must be unique in scope.
    type: str
  uuid:
    description: VM BIOS UUID.
    type: str
  moid:
    description: VM managed object id, for example V(vm-42).
    type: str
  datacenter:
    description: Datacenter to search the VM in (by O(name)), also for the VMs of O(vms).
    type: str
  profiles:
    description:
      - The vGPU profiles the VM must hold, for example V([grid_a100-40c]). Repeat a profile for several vGPUs.
      - Required with O(name), O(uuid) or O(moid).
    type: list
    elements: str
  vms:
    description:
      - Batch form. The VMs and the profiles each must hold, each VM by exactly one of O(vms[].name), O(vms[].uuid) and
        O(vms[].moid).
      - The other suboptions default to the task's option of the same name.
      - V([]) selects no VM and changes nothing.
    type: list
    elements: dict
    suboptions:
      name:
        description: VM name, unique in scope.
        type: str
      uuid:
        description: VM BIOS UUID.
        type: str
      moid:
        description: VM managed object id.
        type: str
      profiles:
        description: The vGPU profiles the VM must hold.
        type: list
        elements: str
        required: true
      placement:
        description: O(placement) for this VM.
        type: str
        choices: [host, cluster]
      power_policy:
        description: O(power_policy) for this VM.
        type: str
        choices: [fail, power_off, shutdown_guest]
      reserve_all_memory:
        description: O(reserve_all_memory) for this VM.
        type: bool
      use_64bit_mmio:
        description: O(use_64bit_mmio) for this VM.
        type: bool
      mmio_size_gb:
        description: O(mmio_size_gb) for this VM.
        type: int
      max_vgpus:
        description: O(max_vgpus) for this VM.
        type: int
      multi_vgpu_rules:
        description: O(multi_vgpu_rules) for this VM.
        type: str
        choices: [auto, current, vsphere8, legacy]
      drs_behavior:
        description: O(drs_behavior) for this VM.
        type: str
        choices: [manual, partiallyAutomated, fullyAutomated]
      drs_enabled:
        description: O(drs_enabled) for this VM.
        type: bool
      upgrade_hardware:
        description: O(upgrade_hardware) for this VM.
        type: bool
  max_concurrent:
    description:
      - Batch form. How many VMs are reconfigured (with their power cycle, where one is due) at the same time.
    type: int
    default: 4
  stop_on_error:
    description:
      - Batch form. After a VM's reconfigure fails, start no further VM (those already running finish). The VMs not
        started are reported with RV(vms[].skipped). With V(false) the other VMs go on.
      - Either way the task fails when any VM failed, naming each.
    type: bool
    default: false
  placement:
    description:
      - V(host) accepts only profiles the VM's current host offers.
      - V(cluster) accepts profiles offered by any connected host of the VM's cluster that is not in maintenance mode
        and whose GPUs can take them. When the VM's host is not one of them, the VM starts where DRS places it if DRS
        may place it (DRS on, automation level V(partiallyAutomated) or V(fullyAutomated) in force for the VM);
        otherwise vCenter would start it on its current host, so the module names the first eligible host in
        C(PowerOnVM_Task). RV(eligible_hosts) lists the hosts, RV(start_host) the one it starts on.
    type: str
    choices: [host, cluster]
    default: host
  power_policy:
    description:
      - What to do when a change is needed and the VM is powered on.
      - V(fail) fails and changes nothing. V(power_off) powers the VM off hard, reconfigures and powers it on.
        V(shutdown_guest) shuts the guest down (VMware Tools needed), waits O(shutdown_timeout) seconds,
        reconfigures and powers it on.
    type: str
    choices: [fail, power_off, shutdown_guest]
    default: fail
  shutdown_timeout:
    description: Seconds to wait for a guest shutdown.
    type: int
    default: 300
  reserve_all_memory:
    description: Reserve all guest memory when the VM holds vGPUs (required by vSphere for vGPU VMs).
    type: bool
    default: true
  use_64bit_mmio:
    description:
      - Set C(pciPassthru.use64bitMMIO).
      - Unset leaves the VM as it is, except with C-series profiles, which need it V(true) (NVIDIA AI Enterprise,
        "Requirements for Using NVIDIA vGPU (C-Series)"); V(false) with C-series profiles fails.
    type: bool
  mmio_size_gb:
    description:
      - Set C(pciPassthru.64bitMMIOSizeGB) to this many GiB.
      - Unset leaves the VM as it is, except with C-series profiles, which get the power of two at or above twice the
        vGPUs' total frame buffer, at least 64 (a larger value already on the VM stays). Less than 64 with C-series
        profiles fails.
    type: int
  multi_vgpu_rules:
    description:
      - Which rules several vGPUs on one VM must follow.
      - V(auto) picks them by the host's ESXi release and NVIDIA host driver version (read with
        C(FetchSoftwarePackages), only when more than one vGPU is requested on ESXi 8.0 or later; the driver VIB is
        found as P(gpuops.provision.vsphere_gpu_info#module) finds it by default, and accounts without
        C(Host.Config.Image) fall back to the host's health sensors with a warning).
      - V(current) (NVIDIA AI Enterprise 8.1, ESXi 8.0 and later with driver R550 or later) allows up to 8 vGPUs of one
        board type and one series with different frame buffer sizes, MIG-backed ones included.
      - V(vsphere8) (ESXi 8.0 and later, older drivers) allows up to 8, MIG-backed vGPUs of one board in any sizes,
        time-sliced ones only as one full-framebuffer profile.
      - V(legacy) (vSphere 6.7 Update 3 and 7) allows up to 4 vGPUs of one full-framebuffer Q- or C-series profile.
      - Where the host's versions cannot be read, V(auto) applies V(legacy).
    type: str
    choices: [auto, current, vsphere8, legacy]
    default: auto
  max_vgpus:
    description: Most vGPUs one VM may hold; unset takes the limit of the O(multi_vgpu_rules) in force (4 or 8).
    type: int
  drs_behavior:
    description:
      - The VM's DRS automation level, as a per-VM override in its cluster (C(ClusterConfigSpecEx.drsVmConfigSpec)).
        A vGPU VM's vMotion stun time grows with its vGPU frame buffer, so pin it to V(manual) or
        V(partiallyAutomated) rather than letting DRS migrate it for load balancing.
      - Unset leaves the VM's override as it is. The VM must be in a cluster.
      - The overrides of the VMs of one cluster are set with one C(ReconfigureComputeResource_Task), before any VM is
        reconfigured. Warns when the cluster's DRS or its C(enableVmBehaviorOverrides) is off, since DRS then
        ignores the override.
    type: str
    choices: [manual, partiallyAutomated, fullyAutomated]
  drs_enabled:
    description:
      - V(false) excludes the VM from DRS (no migration or initial placement recommendations) through the same
        override; unset leaves it as it is.
    type: bool
  upgrade_hardware:
    description:
      - Several vGPUs on one VM need VM hardware version 15 or later (vSphere 6.7 U2 compatibility). With V(false) such
        a VM fails before anything changes; with V(true) the VM is upgraded (C(UpgradeVM_Task), to the newest version
        its host supports) while it is powered off for the change.
    type: bool
    default: false
extends_documentation_fragment:
  - gpuops.provision._vsphere_auth
  - gpuops.provision._attributes
  - gpuops.provision._attributes.CHANGE_FULL
  - gpuops.provision._attributes.ACTIONGROUP_VSPHERE
notes:
  - Exactly one of O(name), O(uuid), O(moid) and O(vms) is required.
  - Removing all vGPUs leaves the memory reservation as it is.
  - The module checks each host's GPUs as vSphere places vGPUs, not only its list of profiles. A host whose GPUs are in
    graphics type V(shared) (vSGA) runs no vGPU. In MIG mode (vgpuMode V(multiInstanceGpu)) a GPU takes MIG-backed
    vGPUs only. vGPUs of different sizes share a GPU only in mixed-size mode (vSphere 8.0 U3), so without it a host needs
    a GPU per size. Profile facts come from the host's C(RetrieveVgpuProfileInfo) (API 7.0.3 and later), otherwise
    from the profile names.
  - VMs of the vSphere VM Service (C(config.managedBy) C(com.vmware.vcenter.wcp)) are refused; their vGPUs come from
    their VM class (P(gpuops.provision.vsphere_vm_class#module)).
  - Before it powers a VM off the module writes C(gpuops.provision.restorePowerState) into the VM's extraConfig and
    removes it once the VM runs again. A run cut off in between (a lost connection, a reply cut short) leaves the key,
    and the next run powers the VM on again, also when its vGPUs are already right. A failed step names the VM and the
    power state it is left in.
"""

EXAMPLES = r"""
- name: One full A100 for the training VM, power-cycling it if needed
  gpuops.provision.vsphere_vm_vgpu:
    hostname: vcenter.example.com
    username: administrator@vsphere.local
    password: "{{ vcenter_password }}"
    name: train-01
    profiles: [grid_a100-40c]
    power_policy: shutdown_guest
    use_64bit_mmio: true
    mmio_size_gb: 128

- name: Two full-framebuffer vGPUs, any host of the cluster may offer them
  gpuops.provision.vsphere_vm_vgpu:
    name: train-02
    profiles: [grid_a100-40c, grid_a100-40c]
    placement: cluster

- name: Two MIG-backed vGPUs of different sizes (ESXi 8.0 and later)
  gpuops.provision.vsphere_vm_vgpu:
    name: infer-01
    profiles: [grid_a100-4-20c, grid_a100-2-10c]

- name: Remove all vGPUs
  gpuops.provision.vsphere_vm_vgpu:
    name: train-03
    profiles: []

- name: A training VM that DRS must not migrate on its own
  gpuops.provision.vsphere_vm_vgpu:
    name: train-05
    profiles: [grid_a100-40c]
    drs_behavior: manual

- name: Notebook VMs in one task, eight reconfigures at a time
  gpuops.provision.vsphere_vm_vgpu:
    vms:
      - {name: nb-01, profiles: [grid_l40s-4q]}
      - {name: nb-02, profiles: [grid_l40s-4q]}
      - {name: train-04, profiles: [grid_l40s-48c], power_policy: fail}
    max_concurrent: 8
    power_policy: shutdown_guest
"""

RETURN = r"""
vm:
  description: VM name.
  returned: with O(name), O(uuid) or O(moid)
  type: str
  sample: train-01
host:
  description: The host the VM is registered on.
  returned: with O(name), O(uuid) or O(moid)
  type: str
before:
  description:
    - Profiles, memory reservation flag and MMIO settings before.
    - With O(drs_behavior) or O(drs_enabled) also C(drs_override), the VM's DRS override (C({behavior, enabled}), null
      when it has none).
  returned: with O(name), O(uuid) or O(moid)
  type: dict
  sample: {profiles: [grid_a100-4c], memory_reservation_locked_to_max: false, extra_config: {}}
after:
  description: The same after the change (predicted in check mode).
  returned: with O(name), O(uuid) or O(moid)
  type: dict
  sample: {profiles: [grid_a100-40c], memory_reservation_locked_to_max: true, extra_config: {pciPassthru.use64bitMMIO: "TRUE"}}
actions:
  description: What was (or in check mode would be) done, in order.
  returned: with O(name), O(uuid) or O(moid)
  type: list
  elements: str
  sample: ["drs_override behavior=manual (cluster gpu-cluster)", power_off, "remove grid_a100-4c (key 203)", add grid_a100-40c,
           reserve_all_memory, power_on]
eligible_hosts:
  description: Hosts that offer every requested profile (only the VM's host with O(placement=host)).
  returned: with O(name), O(uuid) or O(moid)
  type: list
  elements: str
vgpus:
  description: vGPU devices of the VM after the run (as before in check mode).
  returned: with O(name), O(uuid) or O(moid)
  type: list
  elements: dict
  sample: [{key: 203, profile: grid_a100-40c, label: PCI device 0}]
power_cycled:
  description: Whether the VM was powered off and on again.
  returned: with O(name), O(uuid) or O(moid)
  type: bool
disruptions:
  description:
    - What the run does (in check mode would do) to running VMs, in order, one sentence each naming the VM - the guest
      shutdown or hard power-off that O(power_policy) allows, and the power-on on the host it starts on; empty when no
      VM's power is touched.
    - With diff mode they come first in the diff, in an entry of their own, before the configuration diff.
    - Batch form - every VM's, in the order of O(vms) (each VM's own are in RV(vms[].disruptions)).
  returned: always
  type: list
  elements: str
  sample: ["shut down the guest of VM train-01 (VMware Tools, up to 300 s)", "power on VM train-01 on host esx1"]
start_host:
  description:
    - The host the VM starts on after the change (its own host when that host can run the vGPUs); null when DRS places
      it on one of RV(eligible_hosts).
  returned: with O(name), O(uuid) or O(moid)
  type: str
multi_vgpu_rules:
  description: The multi-vGPU rules applied on the VM's host and why (null for fewer than two vGPUs).
  returned: with O(name), O(uuid) or O(moid)
  type: dict
  sample: {name: current, basis: "ESXi 8.0.3, NVIDIA driver 550.90.05"}
vms:
  description:
    - Batch form. One result per VM of O(vms), in their order, with the keys of the single-VM form (RV(vm), RV(host),
      RV(before), RV(after), RV(actions), RV(disruptions), RV(eligible_hosts), RV(start_host), RV(vgpus),
      RV(power_cycled), RV(multi_vgpu_rules)) and these.
    - For a VM whose reconfigure failed, RV(vms[].vgpus) is what it holds, read back after the failure.
  returned: with O(vms)
  type: list
  elements: dict
  contains:
    changed:
      description: This VM was (or in check mode would be) changed.
      type: bool
    disruptions:
      description: This VM's power-off and power-on (empty for a VM not started because of O(stop_on_error)).
      type: list
      elements: str
    vgpus:
      description: The VM's vGPU devices after the run; for a VM whose reconfigure failed, as read back after the failure.
      type: list
      elements: dict
    failed:
      description: This VM's change failed (RV(vms[].msg) says why).
      type: bool
      returned: on failure
    skipped:
      description: Not started because an earlier VM failed and O(stop_on_error) is set.
      type: bool
      returned: when skipped
    msg:
      description: Why the VM failed or was skipped.
      type: str
      returned: on failure or skip
failed_vms:
  description: Batch form. Names of the VMs whose change failed.
  returned: with O(vms)
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.provision.plugins.module_utils._common import batch as common_batch, connection
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api, module as vsphere_module, vgpu, vm


def main():
    spec = connection.vsphere_argument_spec()
    per_vm = dict(
        name=dict(type="str"),
        uuid=dict(type="str"),
        moid=dict(type="str"),
        profiles=dict(type="list", elements="str", required=True),
        placement=dict(type="str", choices=["host", "cluster"]),
        power_policy=dict(type="str", choices=list(vgpu.POWER_POLICIES)),
        reserve_all_memory=dict(type="bool"),
        use_64bit_mmio=dict(type="bool"),
        mmio_size_gb=dict(type="int"),
        max_vgpus=dict(type="int"),
        multi_vgpu_rules=dict(type="str", choices=list(vgpu.MULTI_VGPU_CHOICES)),
        drs_behavior=dict(type="str", choices=list(vm.DRS_BEHAVIORS)),
        drs_enabled=dict(type="bool"),
        upgrade_hardware=dict(type="bool"),
    )
    spec.update(
        name=dict(type="str"),
        uuid=dict(type="str"),
        moid=dict(type="str"),
        datacenter=dict(type="str"),
        profiles=dict(type="list", elements="str"),
        vms=dict(type="list", elements="dict", options=per_vm),
        max_concurrent=dict(type="int", default=4),
        stop_on_error=dict(type="bool", default=False),
        placement=dict(type="str", default="host", choices=["host", "cluster"]),
        power_policy=dict(type="str", default="fail", choices=list(vgpu.POWER_POLICIES)),
        shutdown_timeout=dict(type="int", default=300),
        reserve_all_memory=dict(type="bool", default=True),
        use_64bit_mmio=dict(type="bool"),
        mmio_size_gb=dict(type="int"),
        multi_vgpu_rules=dict(type="str", default="auto", choices=list(vgpu.MULTI_VGPU_CHOICES)),
        max_vgpus=dict(type="int"),
        drs_behavior=dict(type="str", choices=list(vm.DRS_BEHAVIORS)),
        drs_enabled=dict(type="bool"),
        upgrade_hardware=dict(type="bool", default=False),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True,
                           required_one_of=[("name", "uuid", "moid", "vms")],
                           mutually_exclusive=[("name", "uuid", "moid", "vms"), ("profiles", "vms")],
                           required_by={"name": "profiles", "uuid": "profiles", "moid": "profiles"})
    p = module.params
    batch = p["vms"] is not None
    problem = vm.bounds_message(p)
    if problem:
        module.fail_json(msg=problem)
    results = vsphere_module.run(module, lambda session, warnings: vsphere_module.keep(
        warnings, vm.run(session, p, module.check_mode)),
        errors=(common_batch.BatchInvalid, api.VsphereError, vgpu.VgpuError), failure=lambda e: vm.failure(batch, e))
    result, failed = vm.outcome(results, batch, module._diff)
    (module.fail_json if failed else module.exit_json)(**result)


if __name__ == "__main__":
    main()
