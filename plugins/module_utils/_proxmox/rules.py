# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Proxmox VE rules the API modules apply before and while they write, beyond the hostpci property strings of
``property_strings``: what an HA-managed VM's state means while it restarts, which devices of a node's VMs collide, and which
privileges each call needs. Pure logic, no I/O: the workflows in ``_proxmox/vm.py`` and ``_proxmox/mapping.py`` ask these functions.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from ansible_collections.gpuops.provision.plugins.module_utils._proxmox import property_strings

# --------------------------------------------------------------------------- HA-managed VMs

# Service states of pve-ha-manager (src/PVE/HA/Manager.pm) in which the CRM will not bring the VM to the requested
# state by itself: 'error' after the recovery policy gave up, 'fence'/'recovery' around a failed node, 'freeze' while
# its node shuts down or is in maintenance.
HA_STUCK = ("error", "fence", "recovery", "freeze")


def ha_managed(status: Optional[Mapping[str, Any]]) -> bool:
    """Whether ``GET .../status/current`` says the VM is an HA resource (``ha.managed``, from
    PVE::HA::Config::get_service_status)."""
    ha = (status or {}).get("ha") or {}
    return str(ha.get("managed") or 0) != "0"


def ha_verdict(status: Mapping[str, Any], want: str) -> Optional[str]:
    """While an HA-managed VM is brought to ``want`` ('stopped' or 'running'): None when it is there, '' to keep
    waiting, or why it will not get there.

    For an HA resource, qemu-server's vm_shutdown/vm_start only queue a request (ha-manager crm-command stop / set
    --state started) and their task ends at once; the VM's ``status`` and the service state in ``ha.state`` change
    when HA acts. Running counts only once the service is 'started' as well (HA may still stop it otherwise).
    """
    state = str((status.get("ha") or {}).get("state") or "")
    if state in HA_STUCK:
        return "HA service vm:%s is in state '%s' (ha-manager status shows why)" % (status.get("vmid", "?"), state)
    current = status.get("status")
    if want == "stopped":
        return None if current == "stopped" else ""
    return None if current == "running" and state in ("started", "") else ""


def restart_disruptions(where: str, shutdown_timeout: int, ha: bool) -> list[str]:
    """The disruptive steps of a VM restart for its new hostpci entries (``where``: "VM 100 on node pve1"), in order:
    the shutdown, which Proxmox VE turns into a stop after ``shutdown_timeout`` s (``forceStop``), and the start; both
    through ha-manager for an HA resource (``ha``)."""
    via = " through HA" if ha else ""
    return ["shut down %s%s (stopped after %d s if still running)" % (where, via, shutdown_timeout),
            "start %s%s" % (where, via)]


# --------------------------------------------------------------------------- devices that collide

def entry_alternatives(norm: Mapping[str, str], node: str, mappings: Mapping[str, Mapping[str, Any]],
                       devices: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """The functions a normalised hostpci entry can take on ``node``, one list per alternative: each map entry of the
    node for a mapping (a pool), the one ``host=`` value otherwise (qemu-server PCI.pm parse_hostpci, with
    SysFSTools::lspci of each part: property_strings.path_functions). A mapping PVE would not find gives no alternative."""
    if "mapping" in norm:
        mapping = mappings.get(norm["mapping"]) or {}
        paths = []
        for raw in mapping.get("map") or []:
            try:
                entry = property_strings.normalize_map_entry(raw)
            except property_strings.PciError:
                continue  # get_node_mapping warns and skips an entry it cannot parse
            if entry["node"] == node:
                paths.append(entry["path"])
    else:
        paths = [norm["host"]]
    return [funcs for funcs in (property_strings.path_functions(p, devices) for p in paths) if funcs]


def _clash(a: str, b: str, physfn: Mapping[str, str], same: bool) -> Optional[str]:
    """How functions ``a`` and ``b`` exclude each other: the same function (when ``same`` counts), or a physical
    function and one of its virtual functions (handing the PF to vfio-pci removes its VFs)."""
    if a == b:
        return "the same function %s" % a if same else None
    if physfn.get(b) == a:
        return "%s, the physical function of virtual function %s" % (a, b)
    if physfn.get(a) == b:
        return "%s, a virtual function of physical function %s" % (a, b)
    return None


def collision(a_alts: Sequence[Sequence[str]], b_alts: Sequence[Sequence[str]], physfn: Mapping[str, str],
              same: bool = True) -> Optional[str]:
    """Why two entries can never be given out together (None when some choice of alternatives fits): every
    alternative of ``a`` clashes with every alternative of ``b`` (choose_hostpci_devices skips a used alternative of
    a pool). ``physfn``: {VF id: PF id}. Names the first clash."""
    first = None  # no alternative on one side: nothing to clash with
    for a in a_alts:
        for b in b_alts:
            found = next((c for c in (_clash(x, y, physfn, same) for x in a for y in b) if c), None)
            if found is None:
                return None
            first = first or found
    return first


def vm_collisions(entries: Mapping[int, Sequence[Sequence[str]]], labels: Mapping[int, str],
                  physfn: Mapping[str, str]) -> list[str]:
    """Entries of one VM that name one device twice, or a PF and one of its VFs (issue 39 point 9): PVE would write
    both and the start would fail ('assigned more than once', or the VFs gone with their PF)."""
    out = []
    slots = sorted(entries)
    for i, a in enumerate(slots):
        for b in slots[i + 1:]:
            why = collision(entries[a], entries[b], physfn)
            if why:
                out.append("%s and %s both reach %s" % (labels[a], labels[b], why))
    return out


def cross_vm_collisions(mine: Mapping[int, Sequence[Sequence[str]]], labels: Mapping[int, str],
                        others: Iterable[tuple[str, str, Sequence[Sequence[str]]]], physfn: Mapping[str, str]) -> list[str]:
    """Entries of a VM whose device is the PF of a VF another VM of the node has, or one of the VFs of a PF another
    VM has (``others``: (VM description, its entry label, alternatives)). One of them could never start while the
    other runs ('already in use by VMID'), and handing the PF to vfio-pci removes the VFs. The same device in two
    VMs' configurations is not refused: only one of them runs at a time, which PVE checks at start."""
    out = []
    for slot in sorted(mine):
        for who, label, alts in others:
            why = collision(mine[slot], alts, physfn, same=False)
            if why:
                out.append("%s reaches %s, which %s has in %s" % (labels[slot], why, who, label))
    return out


def non_gpu_functions(path: str, devices: Sequence[Mapping[str, Any]]) -> list[str]:
    """The functions of a map path that are neither an NVIDIA display or 3D controller nor another function of such
    a GPU's device (its HDMI audio, USB-C controller), each described with its class and ids; a mapping of GPUs that
    lists anything else is most likely a typo (an NVMe controller's address, a NIC)."""
    funcs = property_strings.path_functions(path, devices)
    by_id = {d["id"]: d for d in devices}
    gpu_slots = {d["slot"] for d in devices
                 if d.get("vendor_id") == "10de" and property_strings.is_gpu_class(d.get("class"))}
    out = []
    for fid in funcs:
        dev = by_id[fid]
        if dev["slot"] in gpu_slots:
            continue
        out.append("%s (class %s, %s%s)" % (fid, dev.get("class"), dev.get("pci_id"),
                                            ", " + dev["device_name"] if dev.get("device_name") else ""))
    return out


def mapping_users(mid: str, configs: Mapping[str, Mapping[Any, Mapping[str, Any]]]) -> list[str]:
    """The VMs whose configuration (pending changes applied: what their next start uses) has a hostpci entry with
    ``mapping=<mid>``, as "VM <id> on <node> (hostpciN)"; ``configs``: {node: {vmid: config}}. Without the mapping
    such a VM cannot start (qemu-server parse_hostpci: "PCI device mapping not found for '<mid>'")."""
    out = []
    for node in sorted(configs):
        for vmid in sorted(configs[node], key=int):
            try:
                entries = property_strings.hostpci_from_config(configs[node][vmid])
            except property_strings.PciError:
                continue
            slots = ["hostpci%d" % s for s, n in sorted(entries.items()) if n.get("mapping") == mid]
            if slots:
                out.append("VM %s on %s (%s)" % (vmid, node, ", ".join(slots)))
    return out


# --------------------------------------------------------------------------- privileges

# What each call of the modules needs (the `permissions` of the upstream API method) and what the collection makes it
# for: docs/proxmox.md's privilege table is this list. (method, route pattern, ACL path, any of these privileges, why)
PRIVILEGES = (
    ("GET", "nodes/*/hardware/pci", "/", ("Sys.Audit", "Sys.Modify"),
     "the hardware read: pve_gpu_info, pve_pci_mapping (validate_hardware, build_from, map without ids), "
     "pve_vm_gpu (precheck)"),
    ("GET", "nodes/*/hardware/pci/*/mdev", "/", ("Sys.Audit", "Sys.Modify"),
     "the mdev types: pve_gpu_info (gather_mdev), pve_vm_gpu (precheck of an entry with mdev)"),
    ("GET", "cluster/mapping/pci*", "/mapping/pci/<id>", ("Mapping.Audit", "Mapping.Use", "Mapping.Modify"),
     "reading a mapping (the list shows only those with one of these)"),
    ("POST", "cluster/mapping/pci", "/mapping/pci", ("Mapping.Modify",), "pve_pci_mapping creating a mapping"),
    ("PUT", "cluster/mapping/pci/*", "/mapping/pci/<id>", ("Mapping.Modify",), "pve_pci_mapping changing a mapping"),
    ("DELETE", "cluster/mapping/pci/*", "/mapping/pci", ("Mapping.Modify",), "pve_pci_mapping state=absent"),
    ("GET", "nodes/*/qemu*", "/vms/<vmid>", ("VM.Audit",),
     "reading a VM (pve_vm_gpu; pve_gpu_info gather_vms; pve_pci_mapping state=absent looks for VMs using it): "
     "VMs without it are not listed"),
    ("POST", "nodes/*/qemu/*/config", "/vms/<vmid> and /mapping/pci/<id>", ("VM.Config.HWType", "Mapping.Use"),
     "pve_vm_gpu writing hostpciN: VM.Config.HWType on the VM and Mapping.Use on every mapping set, replaced or "
     "deleted (raw host= entries and romfile: root@pam with a password only)"),
    ("POST", "nodes/*/qemu/*/status/*", "/vms/<vmid>", ("VM.PowerMgmt",), "pve_vm_gpu restart"),
)


def forbidden_hint(method: str, path: str) -> str:
    """What the collection needed the refused call for, from PRIVILEGES ('' when the call is not listed)."""
    for meth, pattern, acl, privs, why in PRIVILEGES:
        if meth == method.upper() and fnmatch.fnmatchcase(path.strip("/"), pattern):
            return "this needs %s on %s, for %s" % ("|".join(privs), acl, why)
    return ""


def missing_privileges(needed: Iterable[tuple[str, str, str]], have: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The (ACL path, privilege, why) of ``needed`` that ``have`` (GET /access/permissions answers, merged:
    {path: {privilege: propagate}}) lacks, each as "<privilege> on <path> (<why>)", in order, once each."""
    out: list[str] = []
    for path, priv, why in needed:
        text = "%s on %s (%s)" % (priv, path, why)
        if priv not in (have.get(path) or {}) and text not in out:
            out.append(text)
    return out


# --------------------------------------------------------------------------- VM-side settings for a GPU

# The VM settings pve_vm_gpu makes on request, as pve-docs qm-pci-passthrough.adoc recommends for a passed-through
# GPU (machine q35 and OVMF with an EFI disk; vga none when the GPU is the VM's display) (module option -> config key).
VM_SETTING_KEYS = ("machine", "bios", "vga", "efidisk0")


def _default_value(text: Any) -> str:
    """The default-key value of a property string (``machine``: type, ``vga``: type): "std,memory=32" -> "std"."""
    for part in str(text or "").split(","):
        key, sep, value = part.partition("=")
        if not sep:
            return key.strip()
        if key.strip() == "type":
            return value.strip()
    return ""


def machine_is(current: Any, want: str) -> bool:
    """Whether the VM's ``machine`` (its type, e.g. "pc-q35-9.2+pve1"; empty = i440fx) is the requested kind: "q35"
    matches every q35 version, "pc"/"i440fx" every i440fx one, anything else only itself."""
    kind = _default_value(current)
    if want == "q35":
        return "q35" in kind
    if want in ("pc", "i440fx"):
        return "q35" not in kind and not kind.startswith("virt")
    return kind == want


def plan_vm_settings(config: Mapping[str, Any], want: Optional[Mapping[str, Any]]) -> tuple[dict[str, str], list[str]]:
    """The config keys to write for the requested VM settings (``want``: machine, bios, vga, efidisk_storage) and the
    problems that keep them from working. A bios of ovmf needs an EFI disk to keep its settings (without one OVMF
    starts with temporary variables and forgets the boot entries): one is created on ``efidisk_storage`` when the VM
    has none ("<storage>:1,efitype=4m", which Proxmox VE allocates)."""
    want = {k: v for k, v in (want or {}).items() if v is not None}
    sets: dict[str, str] = {}
    problems = []
    if "machine" in want and not machine_is(config.get("machine"), want["machine"]):
        sets["machine"] = want["machine"]
    if "bios" in want and str(config.get("bios") or "seabios") != want["bios"]:
        sets["bios"] = want["bios"]
    if "vga" in want and _default_value(config.get("vga")) != want["vga"]:
        sets["vga"] = want["vga"]
    ovmf = sets.get("bios", config.get("bios")) == "ovmf"
    if ovmf and not config.get("efidisk0") and ("bios" in want or "efidisk_storage" in want):
        if want.get("efidisk_storage"):
            sets["efidisk0"] = "%s:1,efitype=4m" % want["efidisk_storage"]
        else:
            problems.append("bios ovmf needs an EFI disk and the VM has none: give vm_settings.efidisk_storage "
                            "(the storage Proxmox VE creates it on)")
    return sets, problems


# --------------------------------------------------------------------------- ROM files

ROMFILE_DIR = "/usr/share/kvm"  # qemu-server PCI.pm print_hostpci_devices: romfile=/usr/share/kvm/<romfile>


def romfile_checks(vms: Iterable[Mapping[str, Any]], node_hosts: Optional[Mapping[str, str]],
                   folder: str = ROMFILE_DIR) -> dict[str, list[Any]]:
    """The ROM files the VMs' gpus name, each to be found on the VM's node before anything is written (QEMU fails
    the start when /usr/share/kvm/<romfile> is missing there, and the API cannot see that folder): {checks: [{vmid,
    node, host, romfile, missing (the message when it is not there)}], problems: [...]}. ``host`` is the inventory host of the node (``node_hosts``, else the
    node's name); a VM with a romfile but no node cannot be checked and is a problem."""
    checks: list[dict[str, Any]] = []
    problems: list[str] = []
    for vm in vms or []:
        files = sorted({str(g["romfile"]) for g in vm.get("gpus") or [] if isinstance(g, Mapping) and g.get("romfile")})
        if not files:
            continue
        node = vm.get("node")
        if not node:
            problems.append("VM %s names romfile %s but no node: give its node so that the file can be checked there"
                            % (vm.get("vmid"), ", ".join(files)))
            continue
        host = (node_hosts or {}).get(node, node)
        checks.extend({"vmid": vm.get("vmid"), "node": node, "host": host, "romfile": f,
                       "missing": "VM %s: romfile %s is not in %s on node %s (QEMU would fail its start)"
                       % (vm.get("vmid"), f, folder, node)} for f in files)
    return {"checks": checks, "problems": problems}
