# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: pve_pci_mapping
short_description: Declarative Proxmox VE cluster PCI resource mappings
version_added: 0.1.0
description:
  - Creates, updates or deletes one entry of C(/cluster/mapping/pci) so that it has exactly the given per-node C(map) entries,
    description, mdev and live-migration flags.
  - Entries can be written out (O(map)) or built from the discovered hardware (O(build_from)) with a JMESPath selector over
    the facts that M(gpuops.provision.pve_gpu_info) returns.
  - Before writing, every entry is checked against the node's hardware the way Proxmox VE checks it at VM start
    (C(PVE::Mapping::PCI::assert_valid)). The device must be present; its vendor:device id, subsystem id and IOMMU group
    must be in the entry exactly when the hardware has them, and equal; the mapping's C(mdev) flag must equal whether each
    device provides mediated devices (Proxmox VE 8.4 and newer check this in both directions).
    A mismatch fails naming node, path and reason, and nothing is changed.
  - Entries on nodes that are not online cannot be read or checked. Giving such a node in O(map) or O(build_from.nodes)
    fails naming the node; entries already stored for it are kept unchanged, with a warning.
  - Options that the server's release does not know are not sent (the release is read from C(GET /version));
    setting one of them fails naming both versions.
  - Equivalent entries compare equal (key order, upper/lower case, C(0x) prefixes), so a re-run changes nothing.
    Updates carry the mapping's C(digest), so a concurrent change makes the update fail instead of being overwritten.
extends_documentation_fragment:
  - gpuops.provision._proxmox_auth
  - gpuops.provision._attributes
  - gpuops.provision._attributes.CHANGE_FULL
  - gpuops.provision._attributes.ACTIONGROUP_PROXMOX
options:
  id:
    description: Mapping id (C([a-z][a-z0-9_-]+)).
    type: str
    required: true
    aliases: [name]
  state:
    description: Whether the mapping exists.
    type: str
    choices: [present, absent]
    default: present
  description:
    description: Description of the mapping (one line, at most 4096 characters). Left as it is when not given; V("") removes it.
    type: str
  mdev:
    description:
      - Devices provide mediated devices (vGPU). Proxmox VE 8.4 and newer compare this flag with every mapped device at
        VM start, both ways, so a GPU or VF that can provide mediated devices needs V(true) even for whole-device passthrough.
      - When not given, it follows the hardware of the mapped devices on the online nodes; devices that differ fail.
      - Proxmox VE 8.0-8.3 do not compare the flag with the hardware and start such mappings, so on those servers
        (C(GET /version)) a flag unlike the hardware is not refused.
    type: bool
  live_migration_capable:
    description:
      - Mark the devices as live-migratable (experimental in Proxmox VE). Left as it is when not given.
      - Proxmox VE knows this option from 8.4 (libpve-guest-common-perl 5.1.7). On older servers V(true) fails before any
        write and V(false) is what the server does anyway, so nothing is sent.
    type: bool
  map:
    description:
      - The exact list of per-node entries. Several entries for one node form a pool; at VM start Proxmox VE takes the
        first entry none of whose functions is in use.
      - Mutually exclusive with O(build_from).
    type: list
    elements: dict
    suboptions:
      node:
        description: Cluster node name.
        type: str
        required: true
      path:
        description:
          - PCI address(es), C(0000:01:00.0) or C(01:00.0); without function the whole multifunction device is mapped.
          - Each device of the list becomes a map entry of its own, so a list of several devices (or SR-IOV virtual
            functions) is a pool. Functions of one device (C(01:00.0), C(01:00.1)) are joined with C(;) into one entry,
            which Proxmox VE passes to the VM together as one multifunction device; C(;) never means alternatives.
          - A joined entry cannot provide mediated devices, so with O(mdev=true) it fails before any write.
        type: list
        elements: str
        required: true
      pci_id:
        description: Expected vendor:device id (C(10de:20b5)). Read from the node's hardware when not given.
        type: str
      subsystem_id:
        description: Expected subsystem vendor:device id. Read from the node's hardware when not given and the hardware has one.
        type: str
      iommu_group:
        description:
          - Expected IOMMU group of the first path. Read from the node's hardware when not given (Proxmox VE refuses a VM
            start when the hardware has a group and the entry has none). Given for paths of several devices, it fails.
        type: int
      description:
        description:
          - Description of this node's entry; one line, at most 4096 characters, no comma (the entry is a Proxmox VE
            property string, which has no quoting).
        type: str
      allow_non_gpu:
        description:
          - Map devices that are not NVIDIA GPUs. Without it, a path whose function is neither an NVIDIA display or 3D
            controller nor another function of such a GPU (its audio) fails naming the device, before any write.
        type: bool
        default: false
  build_from:
    description: Build the entries from discovered hardware. Mutually exclusive with O(map).
    type: dict
    suboptions:
      selector:
        description:
          - JMESPath expression evaluated over the list of GPU facts (RV(gpuops.provision.pve_gpu_info#module:gpus)) of O(build_from.nodes).
          - It must return a list of device facts (GPUs or their C(vfs)); each becomes one entry on its own node.
          - For example V([?pci_id=='10de:20b5']) or, for a vGPU pool of virtual functions, V([?pci_id=='10de:2330'].vfs[]).
        type: str
        required: true
      nodes:
        description: Nodes to search. Default is every online node; an empty list selects no node and fails.
        type: list
        elements: str
      whole_device:
        description: Map the whole multifunction device (path without function, for example GPU plus HDMI audio).
        type: bool
        default: false
      with_iommu_group:
        description:
          - Deprecated, the IOMMU group is always recorded. V(false) fails for a device that has a group, because
            Proxmox VE refuses such an entry at VM start.
        type: bool
        default: true
      with_subsystem:
        description:
          - Deprecated, the subsystem id is always recorded. V(false) fails for a device that has one, because
            Proxmox VE refuses such an entry at VM start.
        type: bool
        default: true
  validate_hardware:
    description: Check the entries against the nodes' hardware before writing.
    type: bool
    default: true
  force:
    description:
      - With O(state=absent), delete the mapping even when VMs use it. Without it, a mapping that a VM of an online node
        has in a C(hostpciN) entry (pending changes included) is not deleted and the run fails naming the VMs, since
        they could not start without it. VMs of nodes that are not online cannot be read; a warning names those nodes.
    type: bool
    default: false
requirements:
  - jmespath (for O(build_from))
"""

EXAMPLES = r"""
- name: Map the A100 of two nodes under one name
  gpuops.provision.pve_pci_mapping:
    id: a100
    description: A100 for ML guests
    map:
      - {node: pve1, path: ["0000:01:00.0"]}
      - {node: pve2, path: ["0000:41:00.0"]}

- name: Map the A100 with an explicit IOMMU group (checked against the hardware before writing)
  gpuops.provision.pve_pci_mapping:
    id: a100-pinned
    map:
      - {node: pve1, path: ["0000:01:00.0"], iommu_group: 12}

- name: vGPU pool of all L40S virtual functions of every node (mdev follows the hardware)
  gpuops.provision.pve_pci_mapping:
    id: l40s-vgpu
    build_from:
      selector: "[?pci_id=='10de:26b9'].vfs[]"

- name: Remove a mapping
  gpuops.provision.pve_pci_mapping:
    id: old-gpu
    state: absent
"""

RETURN = r"""
mapping:
  description: The mapping after the run (null when absent); C(map) entries in canonical form.
  returned: always
  type: dict
  sample: {id: a100, map: ["id=10de:20b5,iommugroup=12,node=pve1,path=0000:01:00.0"], mdev: false, description: A100}
before:
  description: The mapping before the run (null when it did not exist).
  returned: always
  type: dict
writes:
  description: Number of write calls made (0 in check mode and when nothing changed).
  returned: always
  type: int
users:
  description: With O(state=absent) and no O(force), the VMs that use the mapping (when the run fails for them).
  returned: on failure
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.provision.plugins.module_utils._proxmox import mapping
from ansible_collections.gpuops.provision.plugins.module_utils._proxmox.api import PveClient, module_kwargs


def main():
    module = AnsibleModule(**module_kwargs(
        dict(
            id=dict(type="str", required=True, aliases=["name"]),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            description=dict(type="str"),
            mdev=dict(type="bool"),
            live_migration_capable=dict(type="bool"),
            map=dict(type="list", elements="dict", options=dict(
                node=dict(type="str", required=True),
                path=dict(type="list", elements="str", required=True),
                pci_id=dict(type="str"),
                subsystem_id=dict(type="str"),
                iommu_group=dict(type="int"),
                description=dict(type="str"),
                allow_non_gpu=dict(type="bool", default=False),
            )),
            build_from=dict(type="dict", options=dict(
                selector=dict(type="str", required=True),
                nodes=dict(type="list", elements="str"),
                whole_device=dict(type="bool", default=False),
                with_iommu_group=dict(type="bool", default=True, removed_in_version="2.0.0",
                                      removed_from_collection="gpuops.provision"),
                with_subsystem=dict(type="bool", default=True, removed_in_version="2.0.0",
                                    removed_from_collection="gpuops.provision"),
            )),
            validate_hardware=dict(type="bool", default=True),
            force=dict(type="bool", default=False),
        ),
        mutually_exclusive=[("map", "build_from")],
        supports_check_mode=True,
    ))
    failed, result, warnings = mapping.module_run(module.params, module.check_mode, PveClient.from_params)
    for warning in warnings:
        module.warn(warning)
    (module.fail_json if failed else module.exit_json)(**result)


if __name__ == "__main__":
    main()
