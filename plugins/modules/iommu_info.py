#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: iommu_info
short_description: Report IOMMU state, IOMMU groups and GPU isolation of a Linux host
version_added: 0.1.0
description:
  - Reads C(/proc/cmdline), C(/sys/class/iommu) and C(/sys/kernel/iommu_groups) and reports whether the IOMMU is active,
    its kind (Intel VT-d or AMD-Vi), passthrough mode and interrupt remapping where the host exposes it.
  - Lists every IOMMU group with its PCI functions (address, vendor and device id, class, bound driver).
  - For each NVIDIA GPU tells whether its IOMMU group is isolated, that is holds only the card's own functions
    (such as its audio controller) and PCI bridges, which is what whole-GPU passthrough to a VM needs.
extends_documentation_fragment:
  - gpuops.provision._attributes
  - gpuops.provision._attributes.INFO_MODULE
options:
  root:
    description:
      - Directory under which C(sys/) and C(proc/) are read. Point it at a copy of a host's tree to inspect it offline.
    type: path
    default: /
  cmdline_path:
    description:
      - File holding the kernel command line. Defaults to C(proc/cmdline) under O(root).
      - Containers cannot bind-mount over C(/proc/cmdline); this lets tests supply one elsewhere.
    type: path
notes:
  - Interrupt remapping is reported from the Intel VT-d extended capability register and the C(intremap) kernel
    argument. AMD hosts expose no such register in sysfs, so it is V(null) there unless turned off on the command line.
seealso:
  - name: Kernel documentation of vfio
    description: Why IOMMU groups are the unit of device assignment.
    link: https://docs.kernel.org/driver-api/vfio.html
"""

EXAMPLES = r"""
- name: Read IOMMU facts
  gpuops.provision.iommu_info:
  register: iommu

- name: Refuse to continue unless every NVIDIA GPU can be passed through on its own
  ansible.builtin.assert:
    that:
      - iommu.active
      - iommu.gpus | rejectattr('isolated') | list | length == 0
    fail_msg: "{{ iommu.gpus | rejectattr('isolated') | map(attribute='isolation_reason') | list }}"

- name: Inspect a copy of another host's sysfs
  gpuops.provision.iommu_info:
    root: /srv/captures/gpu-node-7
    cmdline_path: /srv/captures/gpu-node-7.cmdline
"""

RETURN = r"""
active:
  description: Whether an IOMMU is translating DMA (a unit is registered and IOMMU groups exist).
  returned: success
  type: bool
  sample: true
kind:
  description: V(intel), V(amd), V(arm-smmu), V(other), or V(null) when there is no IOMMU and none is asked for.
  returned: success
  type: str
  sample: intel
passthrough:
  description: Whether host devices bypass translation (C(iommu=pt) or C(iommu.passthrough=1)).
  returned: success
  type: bool
  sample: true
interrupt_remapping:
  description: Whether interrupt remapping is available; V(null) when the host does not expose it.
  returned: success
  type: bool
  sample: true
allow_unsafe_interrupts:
  description: The C(vfio_iommu_type1) module parameter, V(null) when the module is not loaded.
  returned: success
  type: bool
  sample: false
units:
  description: Names of the IOMMU units in C(/sys/class/iommu).
  returned: success
  type: list
  elements: str
  sample: [dmar0, dmar1]
kernel_args:
  description: The IOMMU- and VFIO-related kernel arguments present on the command line (a bare flag maps to V(null)).
  returned: success
  type: dict
  sample: {intel_iommu: "on", iommu: pt}
cmdline:
  description: The whole kernel command line.
  returned: success
  type: str
  sample: BOOT_IMAGE=/boot/vmlinuz-6.8.12-4-pve root=/dev/mapper/pve-root ro quiet intel_iommu=on iommu=pt
groups:
  description: Every IOMMU group and its PCI functions.
  returned: success
  type: list
  elements: dict
  contains:
    id:
      description: Group number.
      type: int
    devices:
      description: PCI functions with C(address), C(vendor), C(device), C(class), C(subsystem_vendor), C(subsystem_device), C(driver), C(iommu_group).
      type: list
      elements: dict
  sample:
    - id: 14
      devices:
        - {address: "0000:17:00.0", vendor: "0x10de", device: "0x20b0", class: "0x030200",
           subsystem_vendor: "0x10de", subsystem_device: "0x134f", driver: vfio-pci, iommu_group: 14}
gpus:
  description: NVIDIA GPUs (display-class functions of vendor 0x10de) with their isolation verdict.
  returned: success
  type: list
  elements: dict
  contains:
    address:
      description: PCI address.
      type: str
    iommu_group:
      description: Group number.
      type: int
    isolated:
      description: Whether the group holds only this card's functions and bridges.
      type: bool
    isolation_reason:
      description: Why, naming the foreign devices when not isolated.
      type: str
    group_members:
      description: Addresses of every function in the group.
      type: list
      elements: str
    driver:
      description: Bound kernel driver (V(vfio-pci), V(nvidia), V(nouveau)) or V(null).
      type: str
  sample:
    - {address: "0000:17:00.0", iommu_group: 14, isolated: true, driver: vfio-pci,
       isolation_reason: "IOMMU group 14 holds only this card's functions and bridges",
       group_members: ["0000:17:00.0", "0000:17:00.1"]}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.provision.plugins.module_utils._gpu import iommu, sysfs


def gather(root, cmdline_path=None):
    units = sysfs.class_iommu_units(root)
    return iommu.summarize(
        cmdline_text=sysfs.kernel_cmdline(root, cmdline_path),
        class_iommu_names=units,
        intel_ecaps=sysfs.intel_ecaps(root, units),
        groups=sysfs.iommu_groups(root),
        unsafe_interrupts=sysfs.unsafe_interrupts(root),
    )


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", default="/"),
            cmdline_path=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    try:
        facts = gather(module.params["root"], module.params["cmdline_path"])
    except sysfs.SysfsError as exc:
        module.fail_json(msg="Cannot read IOMMU state: %s" % exc)
    module.exit_json(changed=False, **facts)


if __name__ == "__main__":
    main()
