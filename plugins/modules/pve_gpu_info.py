# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: pve_gpu_info
short_description: GPUs of Proxmox VE nodes, their IOMMU groups, SR-IOV functions, mdev types, mappings and users
version_added: 0.1.0
description:
  - Reads C(/nodes/{node}/hardware/pci) of each node and returns every GPU (display class C(0x0300), C(0x0302), C(0x0380))
    with its functions, IOMMU group and whether that group is isolated, SR-IOV virtual functions, mediated device
    (vGPU) types, the cluster PCI mappings that point at it and the VMs whose C(hostpciN) entries use it.
  - The facts are the input of the O(gpuops.provision.pve_pci_mapping#module:build_from.selector) JMESPath selectors.
extends_documentation_fragment:
  - gpuops.provision._proxmox_auth
  - gpuops.provision._attributes
  - gpuops.provision._attributes.INFO_MODULE
  - gpuops.provision._attributes.ACTIONGROUP_PROXMOX
options:
  nodes:
    description:
      - Nodes to read. Default is every node the API lists as online; the others are reported in RV(skipped_nodes).
      - An empty list selects no node and fails.
      - A node given here that is not online fails naming it (Proxmox VE cannot answer for a node that is down).
    type: list
    elements: str
  gather_mdev:
    description:
      - Query the mediated device types of every mdev-capable GPU and virtual function (one API call each).
    type: bool
    default: true
  gather_vms:
    description:
      - Read every VM configuration of the nodes to report which VM uses which device (one API call per VM), in
        RV(nodes.gpus[].used_by) and RV(nodes.vms).
    type: bool
    default: true
notes:
  - The Proxmox VE API does not report the bound kernel driver. RV(nodes.gpus[].driver) is V(nvidia) when Proxmox VE
    reports the NVIDIA sysfs interface and otherwise whatever the API returns, usually null.
"""

EXAMPLES = r"""
- name: Read the GPUs of all nodes
  gpuops.provision.pve_gpu_info:
    api_host: pve1.example.com
    api_user: ansible@pve
    api_token_id: gpuops
    api_token_secret: "{{ vault_pve_token }}"
    ca_path: /etc/ssl/pve-ca.pem
  register: gpu_info

- name: Every GPU that is not isolated in its IOMMU group
  ansible.builtin.debug:
    msg: "{{ gpu_info.gpus | json_query('[?!iommu_isolated].[node, id]') }}"
"""

RETURN = r"""
nodes:
  description: Facts per node name.
  returned: always
  type: dict
  contains:
    gpus:
      description: GPUs (physical functions) of the node.
      type: list
      elements: dict
      contains:
        node: {description: Node name., type: str}
        id: {description: PCI address of the function (C(0000:01:00.0))., type: str}
        slot: {description: PCI device without function (C(0000:01:00))., type: str}
        class: {description: PCI class as the API returns it., type: str}
        pci_id: {description: Vendor and device id (C(10de:20b0))., type: str}
        vendor_id: {description: Vendor id (C(10de))., type: str}
        device_id: {description: Device id., type: str}
        subsystem_id: {description: Subsystem vendor and device id or null., type: str}
        vendor_name: {description: Vendor name from pci.ids., type: str}
        device_name: {description: Device name from pci.ids., type: str}
        subsystem_name: {description: Subsystem name from pci.ids., type: str}
        iommu_group: {description: IOMMU group (-1 when the node has no IOMMU)., type: int}
        iommu_isolated: {description: The group holds only this device's functions and bridges., type: bool}
        iommu_group_devices: {description: Addresses in the same IOMMU group., type: list, elements: str}
        functions: {description: All functions of this PCI device (for example the HDMI audio)., type: list, elements: str}
        driver: {description: Bound driver where known (see notes)., type: str}
        mdev: {description: Device can provide mediated devices (or exposes the NVIDIA vGPU interface)., type: bool}
        mdev_types:
          description: Mediated device types, each with C(type), C(name), C(available) and C(description).
          type: list
          elements: dict
        physfn:
          description: Physical function of a virtual function; null for GPUs.
          type: str
        virtfns: {description: Addresses of the SR-IOV virtual functions., type: list, elements: str}
        vfs: {description: The virtual functions with the same fields as a GPU., type: list, elements: dict}
        mappings: {description: Cluster PCI mapping ids whose entries on this node select the device., type: list, elements: str}
        used_by:
          description: VMs of the node whose hostpci entries use the device (vmid, slot, via, mapping, paths, mdev).
          type: list
          elements: dict
    vms:
      description:
        - The node's VMs that hold a GPU (a C(hostpciN) entry covering one of its GPUs or their virtual functions, or
          naming a cluster mapping), by vmid; empty with O(gather_vms=false).
      type: list
      elements: dict
      contains:
        vmid: {description: VM id., type: int}
        name: {description: VM name from its configuration., type: str}
        status: {description: 'V(running) or V(stopped), as C(GET /nodes/{node}/qemu) gives it.', type: str}
        node: {description: Node name., type: str}
        hostpci:
          description:
            - Every C(hostpciN) entry of the VM - C(slot), C(via) (V(mapping) or V(host)), C(mapping), C(paths), C(mdev)
              (the mediated device type, the vGPU) - with C(gpus), the addresses of this node's GPUs and virtual
              functions the entry covers (empty when a mapping has no entry on this node), and C(mdev_name), the
              type's name on that device (null when unknown or O(gather_mdev=false)).
          type: list
          elements: dict
  sample:
    pve1:
      vms:
        - {vmid: 100, name: ml-01, status: running, node: pve1,
           hostpci: [{slot: hostpci0, via: mapping, mapping: a100, paths: ["0000:01:00.0"], mdev: null, mdev_name: null,
                      gpus: ["0000:01:00.0"]}]}
      gpus:
        - id: "0000:01:00.0"
          pci_id: "10de:20b5"
          iommu_group: 12
          iommu_isolated: true
          mappings: [a100]
          used_by: [{vmid: 100, slot: hostpci0, via: mapping, mapping: a100, paths: ["0000:01:00.0"], mdev: null}]
gpus:
  description: All GPUs of all nodes in one list (the same dicts as in RV(nodes)).
  returned: always
  type: list
  elements: dict
vms:
  description: The VMs of all nodes that hold a GPU, in one list (the same dicts as RV(nodes.vms)).
  returned: always
  type: list
  elements: dict
skipped_nodes:
  description: Nodes that were not read because they are not online, with the status C(GET /nodes) gives them.
  returned: always
  type: dict
  sample: {pve3: offline}
mappings:
  description: The cluster PCI mappings (C(/cluster/mapping/pci)).
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.provision.plugins.module_utils._proxmox.api import PveClient, PveError, module_kwargs


def main():
    module = AnsibleModule(**module_kwargs(
        dict(
            nodes=dict(type="list", elements="str"),
            gather_mdev=dict(type="bool", default=True),
            gather_vms=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    ))
    p = module.params
    try:
        client = PveClient.from_params(p)
        known = client.nodes()
        # By default an offline node is skipped rather than failing the whole report.
        if p["nodes"] is not None and not p["nodes"]:
            module.fail_json(msg="nodes is an empty list, which selects no node; leave it out to read every online node")
        nodes = p["nodes"] or client.nodes(online_only=True)
        unknown = [n for n in nodes if n not in known]
        if unknown:
            module.fail_json(msg="unknown node(s): %s (cluster has: %s)" % (", ".join(unknown), ", ".join(known)))
        down = ["%s (%s)" % (n, client.node_status(n)) for n in nodes if client.node_status(n) != "online"]
        if down:
            module.fail_json(msg="node(s) not online, their GPUs cannot be read: %s" % ", ".join(down))
        skipped = {} if p["nodes"] else {n: client.node_status(n) for n in known if client.node_status(n) != "online"}
        mappings = client.mappings()
        result = {}
        for node in nodes:
            result[node] = client.node_facts(node, gather_mdev=p["gather_mdev"], gather_vms=p["gather_vms"], mappings=mappings)
    except PveError as exc:
        module.fail_json(msg=str(exc))
    else:
        for warning in client.warnings:
            module.warn(warning)
        module.exit_json(changed=False, nodes=result, gpus=[g for n in nodes for g in result[n]["gpus"]],
                         vms=[v for n in nodes for v in result[n]["vms"]], mappings=mappings, skipped_nodes=skipped)


if __name__ == "__main__":
    main()
