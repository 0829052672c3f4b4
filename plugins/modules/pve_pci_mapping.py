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
    description: Description of the mapping (one line, at most 4096 characters). Left as it is when not given; V("") removes it.
    type: str
  mdev:
    description:
      - Devices provide mediated devices (vGPU). Proxmox VE 8.4 and newer compare this flag with every mapped device at
        VM start, both ways, so a GPU or VF that can provide mediated devices needs V(true) even for whole-device passthrough.
      - When not given, it follows the hardware of the mapped devices on the online nodes; devices that differ fail.
    type: bool
  live_migration_capable:
    description:
      - Mark the devices as live-migratable (experimental in Proxmox VE). Left as it is when not given.
      - Proxmox VE knows this option from 8.4 (libpve-guest-common-perl 5.1.7). On older servers V(true) fails before any
        write and V(false) is what the server does anyway, so nothing is sent.
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
        description:
          - Expected IOMMU group of the first path. Read from the node's hardware when not given (Proxmox VE refuses a VM
            start when the hardware has a group and the entry has none).
        type: int
      description:
        description:
          - Description of this node's entry; one line, at most 4096 characters, no comma (the entry is a Proxmox VE
            property string, which has no quoting).
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
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.provision.plugins.module_utils import _bounds, _pci
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


def _entries_from_map(mid, items, hw):
    """Entries from O(map): ids, subsystem id and IOMMU group of the first path filled from the node's hardware,
    because PVE's assert_valid refuses a VM start when the hardware has one of them and the entry does not."""
    entries = []
    for item in items:
        node = item["node"]
        where = "mapping %s: node %s" % (mid, node)
        if not _pci.is_node_name(node):
            raise _pci.PciError("mapping %s: invalid node name %r" % (mid, node))
        if not item["path"]:
            raise _pci.PciError("%s: path must not be empty" % where)
        try:
            first = _pci.normalize_pci_address(item["path"][0], function="0")
        except _pci.PciError as exc:
            raise _pci.PciError("%s: %s" % (where, exc))
        dev = next((d for d in hw(node) if d["id"] == first), None)
        if dev is None:
            raise _pci.PciError("%s has no PCI device %s" % (where, item["path"][0]))
        raw = {"node": node, "path": ";".join(item["path"]),
               "id": item.get("pci_id") or dev["pci_id"],
               "subsystem-id": item.get("subsystem_id") or dev["subsystem_id"],
               "iommugroup": item["iommu_group"] if item.get("iommu_group") is not None
               else (dev["iommu_group"] if dev["iommu_group"] >= 0 else None),
               "description": item.get("description")}
        try:
            entries.append(_pci.normalize_map_entry(raw))
        except _pci.PciError as exc:
            raise _pci.PciError("%s: %s" % (where, exc))
    return entries


def _entries_from_selector(module, nodes, facts):
    bf = module.params["build_from"]
    if not HAS_JMESPATH:
        module.fail_json(msg=missing_required_lib("jmespath"), exception=JMESPATH_ERROR)
    try:
        selected = jmespath.search(bf["selector"], facts)
    except jmespath.exceptions.JMESPathError as exc:
        module.fail_json(msg="build_from.selector %r is not a valid JMESPath expression: %s" % (bf["selector"], exc))
    if isinstance(selected, dict):
        selected = [selected]
    if not selected or not isinstance(selected, list):
        module.fail_json(msg="build_from.selector %r selects no device on node(s) %s" % (bf["selector"], ", ".join(nodes)))
    entries = []
    for dev in selected:
        if not isinstance(dev, dict) or not dev.get("node") or not dev.get("id") or not dev.get("pci_id"):
            module.fail_json(msg="build_from.selector must return device facts (dicts with node, id, pci_id); got %r" % (dev,))
        entry = _pci.map_entry_from_device(dev["node"], dev, whole_device=bf["whole_device"])
        # Leaving out what the hardware has writes a mapping PVE refuses at VM start ("missing expected property").
        for flag, key in (("with_iommu_group", "iommugroup"), ("with_subsystem", "subsystem-id")):
            if not bf[flag] and key in entry:
                module.fail_json(msg="mapping %s: node %s: device %s has %s %s; build_from.%s=false would write a mapping "
                                     "Proxmox VE refuses at VM start (missing expected property '%s'); nothing changed"
                                 % (module.params["id"], dev["node"], dev["id"], key, entry[key], flag, key))
        entries.append(entry)
    return entries


def _hardware_mdev(mid, entries, hw):
    """The mdev flag the hardware asks for (PVE 8.4+ compares it with every mapped device)."""
    devices = []
    for e in entries:
        by_id = {d["id"]: d for d in hw(e["node"])}
        for path in e["path"].split(";"):
            dev = by_id.get(_pci.normalize_pci_address(path, function="0"))
            if dev is not None:
                devices.append((e["node"], dev))
    flag = _pci.mdev_capability([d for dummy, d in devices])
    if flag is None and devices:
        capable = ["%s %s" % (n, d["id"]) for n, d in devices if d["mdev"]]
        other = ["%s %s" % (n, d["id"]) for n, d in devices if not d["mdev"]]
        raise _pci.PciError("mapping %s mixes devices that provide mediated devices (%s) with devices that do not (%s); "
                            "one mdev flag cannot fit both, Proxmox VE would refuse one kind at VM start; nothing changed"
                            % (mid, ", ".join(capable), ", ".join(other)))
    return flag


def _write_params(client, before, after):
    """Parameters of the POST/PUT: only what changes, and options the server knows (GET /version)."""
    version = client.version()
    params = {}
    if before is None or before["map"] != after["map"]:
        params["map"] = after["map"]
    if before is None or before["mdev"] != after["mdev"]:
        params["mdev"] = int(after["mdev"])
    if before is None or before["live_migration_capable"] != after["live_migration_capable"]:
        gate = _pci.version_gate("live-migration-capable", version)
        if gate and after["live_migration_capable"]:
            raise _pci.PciError("live_migration_capable: %s; nothing changed" % gate)
        if not gate:
            params["live-migration-capable"] = int(after["live_migration_capable"])
    if after["description"] and (before is None or before["description"] != after["description"]):
        params["description"] = after["description"]
    elif before is not None and before["description"] and not after["description"]:
        params["delete"] = "description"
    if before is None and "map" not in params:
        params["map"] = after["map"]
    return params


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
                with_iommu_group=dict(type="bool", default=True, removed_in_version="2.0.0",
                                      removed_from_collection="gpuops.provision"),
                with_subsystem=dict(type="bool", default=True, removed_in_version="2.0.0",
                                    removed_from_collection="gpuops.provision"),
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
    desc = p["description"]
    if desc is not None:
        if len(desc) > _pci.MAX_DESCRIPTION or "\n" in desc or "\r" in desc:
            module.fail_json(msg="mapping %s: description must be one line of at most %d characters (got %d characters%s)"
                             % (mid, _pci.MAX_DESCRIPTION, len(desc), " with a line break" if ("\n" in desc or "\r" in desc) else ""))
    warnings = []
    problems = [msg for item in (p["map"] or []) for msg in _bounds.out_of_range(
        item, {"iommu_group": _bounds.PVE_IOMMU_GROUP}, "node %s: map entry " % item["node"])]
    if problems:
        module.fail_json(msg="mapping %s: %s; nothing changed" % (mid, "; ".join(problems)))
    try:
        client = PveClient.from_params(p)
        stored = client.mapping(mid)
        before = _state(mid, stored)

        if p["state"] == "absent":
            if stored is not None and not module.check_mode:
                client.delete("cluster/mapping/pci/%s" % mid)
            for warning in client.warnings:
                module.warn(warning)
            module.exit_json(changed=stored is not None, before=before, mapping=None, writes=len(client.writes),
                             diff={"before": before or {}, "after": {}})

        hw_cache = {}

        def hw(node):
            if node not in hw_cache:
                client.require_online(node, "read its PCI devices for mapping %s" % mid)
                hw_cache[node] = client.hardware(node)[1]
            return hw_cache[node]

        entries = []
        if p["map"] is not None:
            entries = _entries_from_map(mid, p["map"], hw)
        elif p["build_from"] is not None:
            if p["build_from"]["nodes"] is not None and not p["build_from"]["nodes"]:
                module.fail_json(msg="mapping %s: build_from.nodes is an empty list, which selects no node; leave it "
                                     "out to search every online node" % mid)
            nodes = p["build_from"]["nodes"] or client.nodes(online_only=True)
            mappings = client.mappings()
            facts = []
            for node in nodes:
                client.require_online(node, "read its GPUs for build_from")
                facts.extend(client.gpu_facts(node, gather_mdev=False, gather_vms=False, mappings=mappings))
            entries = _entries_from_selector(module, nodes, facts)
        elif stored is not None:
            entries = _pci.normalize_map_list(stored.get("map") or [])
        else:
            module.fail_json(msg="mapping %s does not exist; give map or build_from to create it" % mid)
        entries = sorted(entries, key=lambda e: e["node"])
        if not entries:
            module.fail_json(msg="mapping %s: map must not be empty" % mid)
        if p["map"] is not None or p["build_from"] is not None:
            # The same device twice in a pool is a typo PVE stores silently; the second entry can never be used.
            seen, twice = set(), []
            for e in entries:
                for path in e["path"].split(";"):
                    key = (e["node"], _pci.normalize_pci_address(path, function="0"))
                    if key in seen:
                        twice.append("node %s path %s" % key)
                    seen.add(key)
            if twice:
                module.fail_json(msg="mapping %s lists the same device more than once (%s); nothing changed"
                                 % (mid, ", ".join(twice)))

        # Entries kept from the server for nodes that are down cannot be checked now; they are left as they are.
        checkable = [e for e in entries if client.node_status(e["node"]) == "online"]
        for e in entries:
            if e not in checkable:
                warnings.append("mapping %s: node %s is %s; its entry %s was not checked against the hardware"
                                % (mid, e["node"], client.node_status(e["node"]) or "unknown", _pci.format_map_entry(e)))

        want_mdev = p["mdev"]
        if want_mdev is None:
            want_mdev = _hardware_mdev(mid, checkable, hw) if checkable else (before["mdev"] if before else False)
            want_mdev = bool(want_mdev)

        if p["validate_hardware"]:
            problems = []
            for e in checkable:
                problems.extend("node %s: %s" % (e["node"], msg) for msg in _pci.check_map_entry(e, hw(e["node"]), mdev=want_mdev))
            if problems:
                module.fail_json(msg="mapping %s does not match the hardware, nothing changed: %s" % (mid, "; ".join(problems)))

        want_lm = p["live_migration_capable"]
        if want_lm is None:
            want_lm = before["live_migration_capable"] if before else False
        want_desc = desc
        if want_desc is None:
            want_desc = before["description"] if before else ""
        after = {"id": mid, "map": [_pci.format_map_entry(e) for e in entries], "description": want_desc,
                 "mdev": want_mdev, "live_migration_capable": want_lm}

        changed = before != after
        if changed:
            params = _write_params(client, before, after)  # version checks also in check mode
            if not module.check_mode:
                if stored is None:
                    client.post("cluster/mapping/pci", id=mid, **params)
                else:
                    client.put("cluster/mapping/pci/%s" % mid, digest=stored.get("digest"), **params)
        for warning in client.warnings + warnings:
            module.warn(warning)
        module.exit_json(changed=changed, before=before, mapping=after, writes=len(client.writes),
                         diff={"before": before or {}, "after": after})
    except (PveError, _pci.PciError) as exc:
        msg = str(exc)
        module.fail_json(msg=msg if msg.startswith("mapping %s" % mid) else "mapping %s: %s" % (mid, msg))


if __name__ == "__main__":
    main()
