# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One Proxmox VE cluster PCI mapping (``/cluster/mapping/pci/{id}``) made to match what the module was given:
the entries from ``map`` or from discovered hardware (``build_from``), checked against each node's hardware the
way PVE checks them at VM start, then written with only what changes.

The I/O goes through :class:`~._proxmox.PveClient` (made by the ``connect`` callable the module passes); the
property-string and hardware rules are pure functions in ``property_strings``.
"""

from __future__ import annotations

import traceback
from typing import Any, Callable

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.gpuops.provision.plugins.module_utils._common import bounds
from ansible_collections.gpuops.provision.plugins.module_utils._proxmox import property_strings, rules
from ansible_collections.gpuops.provision.plugins.module_utils._proxmox.api import PveClient, PveError

try:
    import jmespath
    HAS_JMESPATH = True
    JMESPATH_ERROR = None
except ImportError:  # pragma: no cover
    HAS_JMESPATH = False
    JMESPATH_ERROR = traceback.format_exc()

Entry = dict[str, Any]  # a normalised map entry (property_strings.normalize_map_entry)
Hardware = Callable[[str], list[dict[str, Any]]]  # node -> its PCI device facts
# (failed, result keyword arguments of exit_json/fail_json, warnings to show first)
Outcome = tuple[bool, dict[str, Any], list[str]]


class Refused(Exception):
    """The request cannot be done as given; ``result`` goes to fail_json as it is (nothing was written)."""

    def __init__(self, msg: str, **extra: Any) -> None:
        super().__init__(msg)
        self.result = dict(msg=msg, **extra)


def _flag(value: Any) -> bool:
    return bool(int(property_strings.parse_bool(value))) if value is not None else False


def state_of(mid: str, stored: dict[str, Any] | None) -> dict[str, Any] | None:
    """The comparable state of a stored mapping (None when it does not exist)."""
    if stored is None:
        return None
    return {
        "id": mid,  # GET /cluster/mapping/pci/{id} does not repeat the id
        "map": [property_strings.format_map_entry(e) for e in property_strings.normalize_map_list(stored.get("map") or [])],
        "description": stored.get("description") or "",
        "mdev": _flag(stored.get("mdev")),
        "live_migration_capable": _flag(stored.get("live-migration-capable")),
    }


def entries_from_map(mid: str, items: list[dict[str, Any]], hw: Hardware) -> list[Entry]:
    """Entries from O(map): one entry per device of an item's paths (the functions of one device joined with ``;``,
    see property_strings.group_functions), with ids, subsystem id and IOMMU group of the entry's first path filled from the node's
    hardware, because PVE's assert_valid refuses a VM start when the hardware has one of them and the entry does not."""
    entries = []
    for item in items:
        node = item["node"]
        where = "mapping %s: node %s" % (mid, node)
        if not property_strings.is_node_name(node):
            raise property_strings.PciError("mapping %s: invalid node name %r" % (mid, node))
        if not item["path"]:
            raise property_strings.PciError("%s: path must not be empty" % where)
        try:
            # An SR-IOV virtual function is a device of its own: each one is an entry (a pool), never joined.
            vfs = [p for p in item["path"] if property_strings.normalize_pci_address(p, function="0") in
                   {d["id"] for d in hw(node) if d["physfn"]}]
            groups = property_strings.group_functions(item["path"], separate=vfs)
        except property_strings.PciError as exc:
            raise property_strings.PciError("%s: %s" % (where, exc))
        if len(groups) > 1 and item.get("iommu_group") is not None:
            raise property_strings.PciError("%s: iommu_group %s is given for paths of %d devices (%s); each device has its own "
                                            "group, give them as separate map items"
                                            % (where, item["iommu_group"], len(groups), ", ".join(groups)))
        for group in groups:
            first = property_strings.normalize_pci_address(group.split(";")[0], function="0")
            dev = next((d for d in hw(node) if d["id"] == first), None)
            if dev is None:
                raise property_strings.PciError("%s has no PCI device %s" % (where, group.split(";")[0]))
            if not item.get("allow_non_gpu"):
                foreign = rules.non_gpu_functions(group, hw(node))
                if foreign:
                    raise property_strings.PciError("%s: path %s is not an NVIDIA GPU: %s; a typo? Set allow_non_gpu: true on this "
                                                    "map item to map other devices; nothing changed"
                                                    % (where, group, "; ".join(foreign)))
            raw = {"node": node, "path": group,
                   "id": item.get("pci_id") or dev["pci_id"],
                   "subsystem-id": item.get("subsystem_id") or dev["subsystem_id"],
                   "iommugroup": item["iommu_group"] if item.get("iommu_group") is not None
                   else (dev["iommu_group"] if dev["iommu_group"] >= 0 else None),
                   "description": item.get("description")}
            try:
                entries.append(property_strings.normalize_map_entry(raw))
            except property_strings.PciError as exc:
                raise property_strings.PciError("%s: %s" % (where, exc))
    return entries


def entries_from_selector(mid: str, build_from: dict[str, Any], nodes: list[str], facts: list[dict[str, Any]]) -> list[Entry]:
    """Entries from O(build_from): the device facts the JMESPath selector picks out of ``facts``."""
    if not HAS_JMESPATH:
        raise Refused(missing_required_lib("jmespath"), exception=JMESPATH_ERROR)
    try:
        selected = jmespath.search(build_from["selector"], facts)
    except jmespath.exceptions.JMESPathError as exc:
        raise Refused("build_from.selector %r is not a valid JMESPath expression: %s" % (build_from["selector"], exc))
    if isinstance(selected, dict):
        selected = [selected]
    if not selected or not isinstance(selected, list):
        raise Refused("build_from.selector %r selects no device on node(s) %s" % (build_from["selector"], ", ".join(nodes)))
    entries = []
    for dev in selected:
        if not isinstance(dev, dict) or not dev.get("node") or not dev.get("id") or not dev.get("pci_id"):
            raise Refused("build_from.selector must return device facts (dicts with node, id, pci_id); got %r" % (dev,))
        entry = property_strings.map_entry_from_device(dev["node"], dev, whole_device=build_from["whole_device"])
        # Leaving out what the hardware has writes a mapping PVE refuses at VM start ("missing expected property").
        for flag, key in (("with_iommu_group", "iommugroup"), ("with_subsystem", "subsystem-id")):
            if not build_from[flag] and key in entry:
                raise Refused("mapping %s: node %s: device %s has %s %s; build_from.%s=false would write a mapping "
                              "Proxmox VE refuses at VM start (missing expected property '%s'); nothing changed"
                              % (mid, dev["node"], dev["id"], key, entry[key], flag, key))
        entries.append(entry)
    return entries


def hardware_mdev(mid: str, entries: list[Entry], hw: Hardware) -> bool | None:
    """The mdev flag the hardware asks for (PVE 8.4+ compares it with every mapped device)."""
    devices = []
    for e in entries:
        by_id = {d["id"]: d for d in hw(e["node"])}
        for path in e["path"].split(";"):
            dev = by_id.get(property_strings.normalize_pci_address(path, function="0"))
            if dev is not None:
                devices.append((e["node"], dev))
    flag = property_strings.mdev_capability([d for dummy, d in devices])
    if flag is None and devices:
        capable = ["%s %s" % (n, d["id"]) for n, d in devices if d["mdev"]]
        other = ["%s %s" % (n, d["id"]) for n, d in devices if not d["mdev"]]
        raise property_strings.PciError("mapping %s mixes devices that provide mediated devices (%s) with devices that do not (%s); "
                                        "one mdev flag cannot fit both, Proxmox VE would refuse one kind at VM start; nothing changed"
                                        % (mid, ", ".join(capable), ", ".join(other)))
    return flag


def refuse_if_used(client: PveClient, mid: str) -> list[str]:
    """Raise Refused when a VM of an online node uses the mapping; return warnings for the nodes that could not be read."""
    configs, warnings = {}, []
    for node in client.nodes():
        if client.node_status(node) != "online":
            warnings.append("mapping %s: node %s is %s; its VMs were not checked for the mapping before the delete"
                            % (mid, node, client.node_status(node)))
            continue
        configs[node] = client.vm_configs(node)
    users = rules.mapping_users(mid, configs)
    if users:
        raise Refused("mapping %s is used by %s; without it they cannot start (\"PCI device mapping not found\"); remove "
                      "it from their hostpci entries first, or set force: true; nothing changed" % (mid, ", ".join(users)),
                      users=users)
    return warnings


def write_params(client: PveClient, before: dict[str, Any] | None, after: dict[str, Any]) -> dict[str, Any]:
    """Parameters of the POST/PUT: only what changes, and options the server knows (GET /version)."""
    version = client.version()
    params: dict[str, Any] = {}
    if before is None or before["map"] != after["map"]:
        params["map"] = after["map"]
    if before is None or before["mdev"] != after["mdev"]:
        params["mdev"] = int(after["mdev"])
    if before is None or before["live_migration_capable"] != after["live_migration_capable"]:
        gate = property_strings.version_gate("live-migration-capable", version)
        if gate and after["live_migration_capable"]:
            raise property_strings.PciError("live_migration_capable: %s; nothing changed" % gate)
        if not gate:
            params["live-migration-capable"] = int(after["live_migration_capable"])
    if after["description"] and (before is None or before["description"] != after["description"]):
        params["description"] = after["description"]
    elif before is not None and before["description"] and not after["description"]:
        params["delete"] = "description"
    if before is None and "map" not in params:
        params["map"] = after["map"]
    return params


def check_params(p: dict[str, Any]) -> None:
    """Refuse what is wrong in the options alone, before any connection."""
    mid = p["id"]
    if not property_strings.is_configid(mid):
        raise Refused("invalid mapping id %r (expected [a-z][a-z0-9_-]+)" % mid)
    desc = p["description"]
    if desc is not None:
        if len(desc) > property_strings.MAX_DESCRIPTION or "\n" in desc or "\r" in desc:
            raise Refused("mapping %s: description must be one line of at most %d characters (got %d characters%s)"
                          % (mid, property_strings.MAX_DESCRIPTION, len(desc), " with a line break" if ("\n" in desc or "\r" in desc) else ""))
    texts = [("description", desc)] + [("map[%d].description" % i, item.get("description"))
                                       for i, item in enumerate(p["map"] or [])]
    for where, text in texts:
        bad = sorted(set("%r" % ch for ch in text or "" if (ord(ch) < 32 and ch not in "\n\r") or ord(ch) == 127))
        if bad:
            raise Refused("mapping %s: %s holds control characters (%s), which a Proxmox VE config file cannot keep; "
                          "nothing changed" % (mid, where, ", ".join(bad)))
    problems = [msg for item in (p["map"] or []) for msg in bounds.out_of_range(
        item, {"iommu_group": bounds.PVE_IOMMU_GROUP}, "node %s: map entry " % item["node"])]
    if problems:
        raise Refused("mapping %s: %s; nothing changed" % (mid, "; ".join(problems)))


def _duplicates(entries: list[Entry]) -> list[str]:
    """The same device twice in a pool is a typo PVE stores silently; the second entry can never be used."""
    seen, twice = set(), []
    for e in entries:
        for path in e["path"].split(";"):
            key = (e["node"], property_strings.normalize_pci_address(path, function="0"))
            if key in seen:
                twice.append("node %s path %s" % key)
            seen.add(key)
    return twice


def desired_entries(client: PveClient, p: dict[str, Any], stored: dict[str, Any] | None, hw: Hardware) -> list[Entry]:
    """The entries the mapping is to have, sorted by node: from O(map), O(build_from) or, without both, as stored."""
    mid = p["id"]
    if p["map"] is not None:
        entries = entries_from_map(mid, p["map"], hw)
    elif p["build_from"] is not None:
        if p["build_from"]["nodes"] is not None and not p["build_from"]["nodes"]:
            raise Refused("mapping %s: build_from.nodes is an empty list, which selects no node; leave it "
                          "out to search every online node" % mid)
        nodes = p["build_from"]["nodes"] or client.nodes(online_only=True)
        mappings = client.mappings()
        facts = []
        for node in nodes:
            client.require_online(node, "read its GPUs for build_from")
            facts.extend(client.gpu_facts(node, gather_mdev=False, gather_vms=False, mappings=mappings))
        entries = entries_from_selector(mid, p["build_from"], nodes, facts)
    elif stored is not None:
        entries = property_strings.normalize_map_list(stored.get("map") or [])
    else:
        raise Refused("mapping %s does not exist; give map or build_from to create it" % mid)
    entries = sorted(entries, key=lambda e: e["node"])
    if not entries:
        raise Refused("mapping %s: map must not be empty" % mid)
    if p["map"] is not None or p["build_from"] is not None:
        twice = _duplicates(entries)
        if twice:
            raise Refused("mapping %s lists the same device more than once (%s); nothing changed" % (mid, ", ".join(twice)))
    return entries


def apply(client: PveClient, p: dict[str, Any], check_mode: bool) -> Outcome:
    """Read, check and (unless ``check_mode``) write the mapping; raises Refused, PveError or PciError before any write."""
    mid = p["id"]
    warnings = []
    stored = client.mapping(mid)
    before = state_of(mid, stored)
    if p["state"] == "absent":
        if stored is not None and not p["force"]:
            warnings.extend(refuse_if_used(client, mid))
        if stored is not None and not check_mode:
            client.delete("cluster/mapping/pci/%s" % mid)
        return False, dict(changed=stored is not None, before=before, mapping=None, writes=len(client.writes),
                           diff={"before": before or {}, "after": {}}), client.warnings + warnings

    hw_cache: dict[str, list[dict[str, Any]]] = {}

    def hw(node: str) -> list[dict[str, Any]]:
        if node not in hw_cache:
            client.require_online(node, "read its PCI devices for mapping %s" % mid)
            hw_cache[node] = client.hardware(node)[1]
        return hw_cache[node]

    entries = desired_entries(client, p, stored, hw)
    # Entries kept from the server for nodes that are down cannot be checked now; they are left as they are.
    checkable = [e for e in entries if client.node_status(e["node"]) == "online"]
    for e in entries:
        if e not in checkable:
            warnings.append("mapping %s: node %s is %s; its entry %s was not checked against the hardware"
                            % (mid, e["node"], client.node_status(e["node"]) or "unknown", property_strings.format_map_entry(e)))

    want_mdev = p["mdev"]
    if want_mdev is None:
        want_mdev = hardware_mdev(mid, checkable, hw) if checkable else (before["mdev"] if before else False)
        want_mdev = bool(want_mdev)

    if p["validate_hardware"]:
        problems: list[str] = []
        for e in checkable:
            problems.extend("node %s: %s" % (e["node"], msg) for msg in property_strings.check_map_entry(
                e, hw(e["node"]), mdev=property_strings.mdev_checked(client.version(), want_mdev)))
        if problems:
            raise Refused("mapping %s does not match the hardware, nothing changed: %s" % (mid, "; ".join(problems)))

    joined = ["node %s path %s" % (e["node"], e["path"]) for e in entries if ";" in e["path"]]
    if want_mdev and joined:
        # The mdev flag is for devices that provide vGPUs, one function each: pve-manager's mdev scan skips a ';' path
        # (Hardware/PCI.pm mdevscan) and qemu-server's parse_hostpci dies on one with mdev=.
        raise Refused("mapping %s: mdev is set but %s joins several functions into one multifunction device, which "
                      "cannot provide a mediated device ('cannot use mediated device with multifunction device'); "
                      "a vGPU pool is one map entry per virtual function; nothing changed" % (mid, ", ".join(joined)))

    want_lm = p["live_migration_capable"]
    if want_lm is None:
        want_lm = before["live_migration_capable"] if before else False
    want_desc = p["description"]
    if want_desc is None:
        want_desc = before["description"] if before else ""
    after = {"id": mid, "map": [property_strings.format_map_entry(e) for e in entries], "description": want_desc,
             "mdev": want_mdev, "live_migration_capable": want_lm}

    changed = before != after
    if changed:
        params = write_params(client, before, after)  # version checks also in check mode
        if not check_mode:
            if stored is None:
                client.post("cluster/mapping/pci", id=mid, **params)
            else:
                client.put("cluster/mapping/pci/%s" % mid, digest=stored.get("digest"), **params)
    return False, dict(changed=changed, before=before, mapping=after, writes=len(client.writes),
                       diff={"before": before or {}, "after": after}), client.warnings + warnings


def module_run(p: dict[str, Any], check_mode: bool, connect: Callable[[dict[str, Any]], PveClient]) -> Outcome:
    """The module's run: options checked, a session from ``connect(params)``, then :func:`apply`.

    A failure writes nothing and shows no warnings; an API or PCI error is prefixed with the mapping it is about.
    """
    try:
        check_params(p)
        return apply(connect(p), p, check_mode)
    except Refused as exc:
        return True, exc.result, []
    except (PveError, property_strings.PciError) as exc:
        msg = str(exc)
        return True, dict(msg=msg if msg.startswith("mapping %s" % p["id"]) else "mapping %s: %s" % (p["id"], msg)), []
