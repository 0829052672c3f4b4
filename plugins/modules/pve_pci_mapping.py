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
    (device present, vendor:device id, subsystem id, IOMMU group); a mismatch fails naming node, path and reason, and nothing is changed.
  - Equivalent entries compare equal (key order, upper/lower case, C(0x) prefixes), so a re-run changes nothing.
    Updates carry the mapping's C(digest), so a concurrent change makes the update fail instead of being overwritten.
author:
  - gpuops.provision maintainers (@gpuops)
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
    support: full
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
    description: Description of the mapping. Left as it is when not given; V("") removes it.
    type: str
  mdev:
    description:
      - Devices provide mediated devices (vGPU). Proxmox VE checks this against the hardware at VM start.
      - When not given, a new mapping built with O(build_from) gets V(true) if every selected device is mdev capable;
        an existing mapping keeps its value.
    type: bool
  live_migration_capable:
    description: Mark the devices as live-migratable (experimental in Proxmox VE). Left as it is when not given.
    type: bool
  map:
    description:
      - The exact list of per-node entries. Several entries for one node form a pool (the first free one is used at VM start).
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
          - A list makes a C(;)-separated alternative list.
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
        description: Expected IOMMU group of the first path.
        type: int
      description:
        description: Description of this node's entry.
        type: str
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
        description: Nodes to search. Default is every online node.
        type: list
        elements: str
      whole_device:
        description: Map the whole multifunction device (path without function, for example GPU plus HDMI audio).
        type: bool
        default: false
      with_iommu_group:
        description: Record the IOMMU group so that Proxmox VE notices hardware changes.
        type: bool
        default: true
      with_subsystem:
        description: Record the subsystem id.
        type: bool
        default: true
  validate_hardware:
    description: Check the entries against the nodes' hardware before writing.
    type: bool
    default: true
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

- name: vGPU pool of all L40S virtual functions of every node
  gpuops.provision.pve_pci_mapping:
    id: l40s-vgpu
    mdev: true
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
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.provision.plugins.module_utils import _pci
from ansible_collections.gpuops.provision.plugins.module_utils._proxmox import PveClient, PveError, module_kwargs

try:
    import jmespath
    HAS_JMESPATH = True
    JMESPATH_ERROR = None
except ImportError:  # pragma: no cover
    HAS_JMESPATH = False
    JMESPATH_ERROR = traceback.format_exc()


def _flag(value):
    return bool(int(_pci.parse_bool(value))) if value is not None else False


def _state(mid, stored):
    if stored is None:
        return None
    return {
        "id": mid,  # GET /cluster/mapping/pci/{id} does not repeat the id
        "map": [_pci.format_map_entry(e) for e in _pci.normalize_map_list(stored.get("map") or [])],
        "description": stored.get("description") or "",
        "mdev": _flag(stored.get("mdev")),
        "live_migration_capable": _flag(stored.get("live-migration-capable")),
    }


def _entries_from_map(module, hw):
    entries = []
    for item in module.params["map"]:
        node = item["node"]
        raw = {"node": node, "path": ";".join(item["path"]), "id": item.get("pci_id"),
               "subsystem-id": item.get("subsystem_id"), "iommugroup": item.get("iommu_group"),
               "description": item.get("description")}
        if not raw["id"] or not raw["subsystem-id"]:
            # Fill ids from the hardware as the PVE UI does; PVE rejects a missing subsystem id the hardware has.
            devices = hw(node)
            first = _pci.normalize_pci_address(item["path"][0], function="0")
            dev = next((d for d in devices if d["id"] == first), None)
            if dev is None:
                module.fail_json(msg="mapping %s: node %s has no PCI device %s" % (module.params["id"], node, item["path"][0]))
            raw["id"] = raw["id"] or dev["pci_id"]
            if not raw["subsystem-id"] and dev["subsystem_id"]:
                raw["subsystem-id"] = dev["subsystem_id"]
        try:
            entries.append(_pci.normalize_map_entry(raw))
        except _pci.PciError as exc:
            module.fail_json(msg="mapping %s: node %s: %s" % (module.params["id"], node, exc))
    return entries


def _entries_from_selector(module, client, facts_of):
    bf = module.params["build_from"]
    if not HAS_JMESPATH:
        module.fail_json(msg=missing_required_lib("jmespath"), exception=JMESPATH_ERROR)
    nodes = bf["nodes"] or client.nodes(online_only=True)
    facts = [g for node in nodes for g in facts_of(node)]
    try:
        selected = jmespath.search(bf["selector"], facts)
    except jmespath.exceptions.JMESPathError as exc:
        module.fail_json(msg="build_from.selector %r is not a valid JMESPath expression: %s" % (bf["selector"], exc))
    if isinstance(selected, dict):
        selected = [selected]
    if not selected or not isinstance(selected, list):
        module.fail_json(msg="build_from.selector %r selects no device on node(s) %s" % (bf["selector"], ", ".join(nodes)))
    entries = []
    mdev = []
    for dev in selected:
        if not isinstance(dev, dict) or not dev.get("node") or not dev.get("id") or not dev.get("pci_id"):
            module.fail_json(msg="build_from.selector must return device facts (dicts with node, id, pci_id); got %r" % (dev,))
        entries.append(_pci.map_entry_from_device(dev["node"], dev, whole_device=bf["whole_device"],
                                                  with_iommu_group=bf["with_iommu_group"], with_subsystem=bf["with_subsystem"]))
        mdev.append(bool(dev.get("mdev")))
    return entries, all(mdev)


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
            )),
            build_from=dict(type="dict", options=dict(
                selector=dict(type="str", required=True),
                nodes=dict(type="list", elements="str"),
                whole_device=dict(type="bool", default=False),
                with_iommu_group=dict(type="bool", default=True),
                with_subsystem=dict(type="bool", default=True),
            )),
            validate_hardware=dict(type="bool", default=True),
        ),
        mutually_exclusive=[("map", "build_from")],
        supports_check_mode=True,
    ))
    p = module.params
    mid = p["id"]
    if not _pci.is_configid(mid):
        module.fail_json(msg="invalid mapping id %r (expected [a-z][a-z0-9_-]+)" % mid)
    try:
        client = PveClient.from_params(p)
        stored = client.mapping(mid)
        before = _state(mid, stored)

        if p["state"] == "absent":
            if stored is not None and not module.check_mode:
                client.delete("cluster/mapping/pci/%s" % mid)
            module.exit_json(changed=stored is not None, before=before, mapping=None, writes=len(client.writes),
                             diff={"before": before or {}, "after": {}})

        hw_cache = {}
        mappings = None

        def hw(node):
            if node not in hw_cache:
                if node not in client.nodes():
                    module.fail_json(msg="mapping %s: unknown node %s" % (mid, node))
                hw_cache[node] = client.hardware(node)[1]
            return hw_cache[node]

        def facts_of(node):
            nonlocal mappings
            if mappings is None:
                mappings = client.mappings()
            return client.gpu_facts(node, gather_mdev=False, gather_vms=False, mappings=mappings)

        selected_mdev = None
        entries = []
        if p["map"] is not None:
            entries = _entries_from_map(module, hw)
        elif p["build_from"] is not None:
            entries, selected_mdev = _entries_from_selector(module, client, facts_of)
        elif stored is not None:
            entries = _pci.normalize_map_list(stored.get("map") or [])
        else:
            module.fail_json(msg="mapping %s does not exist; give map or build_from to create it" % mid)
        entries = sorted(entries, key=lambda e: e["node"])
        if not entries:
            module.fail_json(msg="mapping %s: map must not be empty" % mid)

        if p["validate_hardware"]:
            problems = []
            for e in entries:
                problems.extend("node %s: %s" % (e["node"], msg) for msg in _pci.check_map_entry(e, hw(e["node"])))
            if problems:
                module.fail_json(msg="mapping %s does not match the hardware, nothing changed: %s" % (mid, "; ".join(problems)))

        want_mdev = p["mdev"]
        if want_mdev is None:
            want_mdev = before["mdev"] if before else bool(selected_mdev)
        want_lm = p["live_migration_capable"]
        if want_lm is None:
            want_lm = before["live_migration_capable"] if before else False
        want_desc = p["description"]
        if want_desc is None:
            want_desc = before["description"] if before else ""
        after = {"id": mid, "map": [_pci.format_map_entry(e) for e in entries], "description": want_desc,
                 "mdev": want_mdev, "live_migration_capable": want_lm}

        changed = before != after
        if changed and not module.check_mode:
            params = {"map": after["map"], "mdev": int(want_mdev), "live-migration-capable": int(want_lm)}
            if stored is None:
                if want_desc:
                    params["description"] = want_desc
                client.post("cluster/mapping/pci", id=mid, **params)
            else:
                if want_desc:
                    params["description"] = want_desc
                elif before["description"]:
                    params["delete"] = "description"
                client.put("cluster/mapping/pci/%s" % mid, digest=stored.get("digest"), **params)
        module.exit_json(changed=changed, before=before, mapping=after, writes=len(client.writes),
                         diff={"before": before or {}, "after": after})
    except (PveError, _pci.PciError) as exc:
        module.fail_json(msg="mapping %s: %s" % (mid, exc))


if __name__ == "__main__":
    main()
