# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: pve_vm_gpu
short_description: Exact set of passed-through GPUs (hostpciN) of a Proxmox VE VM
version_added: 0.1.0
description:
  - Makes the C(hostpciN) entries of one VM, or of each VM of a batch (O(vms)), exactly the given list of devices, by cluster
    mapping, raw PCI address or SR-IOV virtual function, with their options (C(pcie), C(x-vga), C(rombar), C(mdev), ...).
  - A batch uses one API session and one C(/cluster/resources) read for all its VMs. Every VM is read and checked before the
    first write; one invalid VM fails the task naming it, and nothing is written. The writes then run O(max_concurrent) at a
    time, each VM's task waited for. A VM whose write fails is named and read back; the others go on unless O(stop_on_error).
  - Existing entries are parsed and normalised, so equivalent spellings (C(01:00) and C(0000:01:00), option order, C(on)/C(1))
    do not cause a change and a re-run makes no write call. An entry for the same device keeps its slot.
  - Checks before any write what Proxmox VE only checks when the VM starts, and fails naming node, VM and device when
    C(pcie) is set on a non-q35 machine, a mapping is missing on the VM's node or does not match the node's hardware,
    the mdev type is not available, or the device's IOMMU group is shared with other devices.
  - On a running VM the change stays pending until the VM restarts (hostpci is not hot-pluggable); O(restart) decides whether
    the module restarts it.
extends_documentation_fragment:
  - gpuops.provision._proxmox_auth
  - gpuops.provision._attributes
  - gpuops.provision._attributes.ACTIONGROUP_PROXMOX
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: partial
    details:
      - Idempotent except with O(restart=always), which restarts a running VM on every run.
options:
  vmid:
    description:
      - VM id (single-VM form). Exactly one of O(vmid) and O(vms) is needed.
    type: int
  node:
    description:
      - Node of the VM. Found through C(/cluster/resources) when not given.
      - A VM on a node that is not online fails naming the node; nothing is changed.
    type: str
  gpus:
    description:
      - The devices the VM O(vmid) must have. V([]) removes every hostpci entry (with O(exclusive=true)).
      - Each entry needs exactly one of O(gpus[].mapping) and O(gpus[].host).
      - Required with O(vmid).
    type: list
    elements: dict
    suboptions: &gpu_suboptions
      slot:
        description: Fixed hostpci index (0-15). Default is the slot the device already has, else the lowest free one.
        type: int
      mapping:
        description: Cluster PCI mapping id (works with API tokens; Proxmox VE checks the hardware at start).
        type: str
      host:
        description:
          - Raw PCI address (C(0000:01:00.0), C(01:00.0); C(01:00) passes all functions). C(;) joins functions of one
            device (C(01:00.0;01:00.1)), which all reach the VM as one multifunction device; addresses of different
            devices, a function named twice, or C(;) with O(gpus[].mdev) fail before any write. For a pool of devices
            use a mapping (M(gpuops.provision.pve_pci_mapping) writes one map entry per device).
          - With O(gpus[].vf), the physical function whose virtual function to use.
          - Proxmox VE only lets C(root@pam) with a password (not a token) set raw addresses, and replace or delete an
            entry that has one; the module checks this for every entry it would set, replace or delete before any write.
        type: str
      vf:
        description: Index of the SR-IOV virtual function of O(gpus[].host) (0 = first VF).
        type: int
      pcie:
        description: Attach to the PCI express bus (needs machine type q35).
        type: bool
      x_vga:
        description: Primary GPU (vfio-vga).
        type: bool
      rombar:
        description: Make the device ROM visible to the guest (Proxmox VE default true).
        type: bool
      romfile:
        description:
          - File name of a ROM under C(/usr/share/kvm/) (no C(/), no white space, no comma or C(;)).
          - Only C(root@pam) with a password may set it, and replace or delete an entry that has one.
        type: str
      mdev:
        description: Mediated device (vGPU) type, for example V(nvidia-1034).
        type: str
      legacy_igd:
        description: Legacy IGD mode (Intel integrated graphics, i440fx only).
        type: bool
      vendor_id:
        description: Vendor id the guest sees (C(0x10de)).
        type: str
      device_id:
        description: Device id the guest sees.
        type: str
      sub_vendor_id:
        description: Subsystem vendor id the guest sees.
        type: str
      sub_device_id:
        description: Subsystem device id the guest sees.
        type: str
      driver:
        description:
          - V(keep) leaves the host driver bound. Proxmox VE knows this option from 9.1 (qemu-server 9.0.25); on older
            servers V(keep) fails before any write.
        type: str
        choices: [vfio, keep]
  vms:
    description:
      - Batch form. The VMs and the devices each must have, as O(vmid), O(node) and O(gpus) are for one VM.
      - O(vms[].exclusive), O(vms[].restart), O(vms[].precheck), O(vms[].shutdown_timeout) and O(vms[].timeout) default to
        the task's own option.
      - V([]) selects no VM and changes nothing.
    type: list
    elements: dict
    suboptions:
      vmid:
        description: VM id. Each VM at most once.
        type: int
        required: true
      node:
        description: Node of the VM. Found through the batch's one C(/cluster/resources) read when not given.
        type: str
      gpus:
        description: The devices the VM must have, with the suboptions of O(gpus).
        type: list
        elements: dict
        required: true
        suboptions: *gpu_suboptions
      exclusive:
        description: O(exclusive) for this VM.
        type: bool
      restart:
        description: O(restart) for this VM.
        type: str
        choices: [never, if_needed, always]
      precheck:
        description: O(precheck) for this VM.
        type: bool
      shutdown_timeout:
        description: O(shutdown_timeout) for this VM.
        type: int
      timeout:
        description: O(timeout) for this VM.
        type: int
      vm_settings:
        description: O(vm_settings) for this VM (replaces the task's).
        type: dict
        suboptions: &vm_settings_suboptions
          machine:
            description: Machine type; V(q35) is met by every q35 version, V(pc) or V(i440fx) by every i440fx one.
            type: str
          bios:
            description: Firmware. V(ovmf) needs an EFI disk; one is created on O(vm_settings.efidisk_storage) when the VM has none.
            type: str
            choices: [seabios, ovmf]
          vga:
            description: Display type; V(none) when the passed-through GPU is the VM's primary display.
            type: str
          efidisk_storage:
            description: Storage on which Proxmox VE creates the EFI disk (C(<storage>:1,efitype=4m)) of an OVMF VM that has none.
            type: str
  max_concurrent:
    description:
      - Batch form. How many VMs are read, and then written, at the same time (each write is one config task, plus a
        restart where one is due). Proxmox VE runs the tasks of different VMs in parallel.
    type: int
    default: 4
  stop_on_error:
    description:
      - Batch form. After a VM's write fails, start no further writes (those already running finish). The VMs not written
        are reported with RV(vms[].skipped). With V(false) the other VMs go on.
      - Either way the task fails when any VM failed, naming each.
    type: bool
    default: false
  exclusive:
    description: Delete hostpci entries that are not in O(gpus). With V(false), other entries stay.
    type: bool
    default: true
  restart:
    description:
      - V(never) leaves changes of a running VM pending (RV(pending) says so).
      - V(if_needed) restarts a running VM when hostpci changes are pending (made now or before).
      - V(always) restarts a running VM on every run. A stopped VM is never started.
      - An HA-managed VM is restarted through HA, the module waiting until HA has stopped it (up to O(shutdown_timeout) +
        O(timeout)) and until it runs again with the service state C(started) (up to O(timeout)).
    type: str
    choices: [never, if_needed, always]
    default: never
  shutdown_timeout:
    description: Seconds to wait for a clean shutdown before the VM is stopped.
    type: int
    default: 180
  timeout:
    description: Seconds to wait for each Proxmox VE task (config, shutdown, start).
    type: int
    default: 300
  precheck:
    description: Run the hardware pre-checks (mapping, mdev type, IOMMU group, machine type). Turn off only to force a configuration.
    type: bool
    default: true
  vm_settings:
    description:
      - VM settings a passed-through GPU wants, made on request in the same config call as the hostpci entries and planned
        with them before any write (pve-docs qm-pci-passthrough - C(machine) q35, C(bios) ovmf with an EFI disk, C(vga)
        none where the GPU is the primary display). A setting the VM already has is not written; a running VM gets
        them at its next start like the hostpci entries (O(restart)).
      - The pre-checks judge the VM as it will be (C(pcie) with a q35 machine requested here is fine).
      - Needs VM.Config.HWType (machine, vga), VM.Config.Options (bios), VM.Config.Disk and Datastore.AllocateSpace on the
        storage (EFI disk).
    type: dict
    suboptions: *vm_settings_suboptions
"""

EXAMPLES = r"""
- name: One A100 through a mapping on the PCIe bus, restart if needed
  gpuops.provision.pve_vm_gpu:
    vmid: 101
    gpus:
      - {mapping: a100, pcie: true}
    restart: if_needed

- name: vGPU from a mapped pool of virtual functions
  gpuops.provision.pve_vm_gpu:
    vmid: 102
    gpus:
      - {mapping: l40s-vgpu, mdev: nvidia-1155}

- name: Remove all GPUs
  gpuops.provision.pve_vm_gpu:
    vmid: 101
    gpus: []

- name: A pool of VMs in one task (one session, all checked first, 8 writes at a time)
  gpuops.provision.pve_vm_gpu:
    vms:
      - {vmid: 300, gpus: [{mapping: l40s-vgpu, mdev: nvidia-1155}]}
      - {vmid: 301, gpus: [{mapping: l40s-vgpu, mdev: nvidia-1155}]}
      - {vmid: 302, node: pve2, gpus: [{mapping: a100, pcie: true}], restart: if_needed}
    max_concurrent: 8
"""

RETURN = r"""
node:
  description: Node of the VM.
  returned: with O(vmid)
  type: str
hostpci:
  description: The VM's hostpci entries after the run (pending ones included), canonical form.
  returned: with O(vmid)
  type: dict
  sample: {hostpci0: "mapping=a100,pcie=1"}
before:
  description: The hostpci entries before the run.
  returned: with O(vmid)
  type: dict
set:
  description: Entries written (or that would be written in check mode).
  returned: with O(vmid)
  type: dict
deleted:
  description: Entries deleted (or that would be).
  returned: with O(vmid)
  type: list
  elements: str
pending:
  description: The VM runs and hostpci changes wait for its next start.
  returned: with O(vmid)
  type: bool
restarted:
  description:
    - The module restarted (or in check mode would restart) the VM. For an HA-managed VM (RV(ha_managed)) the module
      waited until HA had stopped it and then had it running with the service state C(started).
  returned: with O(vmid)
  type: bool
disruptions:
  description:
    - What the run does (in check mode would do) to the running VM, in order - the shutdown (a stop after
      O(shutdown_timeout) seconds) and the start of the restart O(restart) asks for, through HA for an HA resource;
      empty without a restart.
    - With diff mode they come first in the diff, in an entry of their own, before the configuration diff.
    - Batch form - every VM's, in the order of O(vms) (each VM's own are in RV(vms[].disruptions)).
  returned: always
  type: list
  elements: str
  sample: ["shut down VM 100 on node pve1 (stopped after 180 s if still running)", "start VM 100 on node pve1"]
vm_settings:
  description: The VM settings written (or that would be in check mode), config key to value.
  returned: with O(vmid)
  type: dict
  sample: {machine: q35, bios: ovmf, efidisk0: "local-lvm:1,efitype=4m"}
ha_managed:
  description:
    - The VM is an HA resource (C(status/current) C(ha.managed)). Proxmox VE then only queues a start or shutdown with
      ha-manager and its task ends at once, so the module restarts it through HA and polls the VM's state (and HA's
      service state) until it is there; an HA service that ends in C(error) (or C(fence), C(recovery), C(freeze))
      fails the VM naming that state.
  returned: with O(vmid)
  type: bool
vms:
  description:
    - Batch form. One result per VM of O(vms), in their order, with the keys of the single-VM form (RV(node), RV(hostpci),
      RV(before), RV(set), RV(deleted), RV(pending), RV(restarted), RV(disruptions)) and these.
    - For a VM whose write failed, RV(vms[].hostpci) is its configuration read back after the failure.
  returned: with O(vms)
  type: list
  elements: dict
  contains:
    vmid:
      description: VM id.
      type: int
    changed:
      description: This VM was (or in check mode would be) changed or restarted.
      type: bool
    disruptions:
      description: This VM's shutdown and start (empty for a VM not written because of O(stop_on_error)).
      type: list
      elements: str
    writes:
      description: API write calls made for this VM.
      type: int
    hostpci:
      description: The VM's hostpci entries after the run; for a VM whose write failed, as read back after the failure.
      type: dict
    failed:
      description: This VM's write failed (RV(vms[].msg) says why).
      type: bool
      returned: on failure
    skipped:
      description: Not written because an earlier VM failed and O(stop_on_error) is set.
      type: bool
      returned: when skipped
    msg:
      description: Why the VM failed or was skipped.
      type: str
      returned: on failure or skip
failed_vms:
  description: Batch form. Ids of the VMs whose write failed.
  returned: with O(vms)
  type: list
  elements: int
writes:
  description: Number of API write calls made.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.provision.plugins.module_utils._proxmox import vm
from ansible_collections.gpuops.provision.plugins.module_utils._proxmox.api import PveClient, module_kwargs


def main():
    per_vm = dict(
        vmid=dict(type="int", required=True),
        node=dict(type="str"),
        gpus=dict(type="list", elements="dict", required=True, options=vm.gpu_options_spec()),
        exclusive=dict(type="bool"),
        restart=dict(type="str", choices=["never", "if_needed", "always"]),
        precheck=dict(type="bool"),
        shutdown_timeout=dict(type="int"),
        timeout=dict(type="int"),
        vm_settings=vm.vm_settings_spec(),
    )
    module = AnsibleModule(**module_kwargs(
        dict(
            vmid=dict(type="int"),
            node=dict(type="str"),
            gpus=dict(type="list", elements="dict", options=vm.gpu_options_spec()),
            vms=dict(type="list", elements="dict", options=per_vm),
            max_concurrent=dict(type="int", default=4),
            stop_on_error=dict(type="bool", default=False),
            exclusive=dict(type="bool", default=True),
            restart=dict(type="str", default="never", choices=["never", "if_needed", "always"]),
            shutdown_timeout=dict(type="int", default=180),
            timeout=dict(type="int", default=300),
            precheck=dict(type="bool", default=True),
            vm_settings=vm.vm_settings_spec(),
        ),
        supports_check_mode=True,
        required_one_of=[("vmid", "vms")],
        mutually_exclusive=[("vmid", "vms"), ("gpus", "vms"), ("node", "vms")],
        required_by={"vmid": "gpus"},
    ))
    failed, result, warnings = vm.module_run(module.params, module.check_mode, PveClient.from_params)
    for warning in warnings:
        module.warn(warning)
    (module.fail_json if failed else module.exit_json)(**result)


if __name__ == "__main__":
    main()
