# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""PCI ids and Proxmox VE property strings (hostpciN, cluster mapping ``map=``); pure logic, no I/O.

Everything here works on plain strings/dicts so it can be unit tested without a Proxmox VE API.
Normalised forms are chosen so that two strings Proxmox VE treats the same compare equal.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Optional, Union

MAX_HOSTPCI = 16  # $MAX_HOSTPCI_DEVICES in qemu-server PCI.pm

# Every pattern is used with fullmatch(): "$" in re.match() (as in Perl's m/^...$/) lets a trailing newline through.
# A domain needs four or more digits as in PVE's $PCIRE (qemu-server PCI.pm), so "01:00:00" is refused rather than
# read as domain 0001; bus and device may drop their leading zero ("1:0.0"), which is unambiguous.
_ADDR_RE = re.compile(
    r"(?:(?P<domain>[0-9a-fA-F]{4,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<dev>[0-9a-fA-F]{1,2})(?:\.(?P<fn>[0-7]))?"
)
# Exactly four digits: "20b" could be 020b or a truncated 20b0 (PVE's map id pattern is [0-9A-Fa-f]{4}:[0-9A-Fa-f]{4}).
_HEX4_RE = re.compile(r"(?:0x)?([0-9a-fA-F]{4})")
_CONFIGID_RE = re.compile(r"[a-z][a-z0-9_-]+", re.IGNORECASE)  # $CONFIGID_RE, pve-common JSONSchema.pm
_NODE_RE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?")  # pve_verify_node_name, pve-common JSONSchema.pm
_MDEV_RE = re.compile(r"[^/.:,\s]+")  # qemu-server PCI.pm: pattern '[^/\.:]+' (commas and spaces cannot survive a property string)
# PVE's pattern is '[^,;]+' and qemu-server opens /usr/share/kvm/<romfile>; a file name only, so nothing can point elsewhere.
_ROMFILE_RE = re.compile(r"[^,;/\s]+")
# What PVE itself stores (its own patterns): existing configs are parsed with these, so no valid config is refused.
_MDEV_SERVER_RE = re.compile(r"[^/.:]+")
_ROMFILE_SERVER_RE = re.compile(r"[^,;]+")
MAX_DESCRIPTION = 4096  # maxLength of description in PVE::Mapping::PCI ($map_fmt and the mapping itself)

_TRUE = ("1", "on", "yes", "true")
_FALSE = ("0", "off", "no", "false")

# hostpciN keys with their kind and Proxmox VE default (defaults are dropped when normalising).
HOSTPCI_KEYS = {
    "host": ("host", None),
    "mapping": ("configid", None),
    "pcie": ("bool", "0"),
    "x-vga": ("bool", "0"),
    "rombar": ("bool", "1"),
    "romfile": ("romfile", None),
    "mdev": ("mdev", None),
    "legacy-igd": ("bool", "0"),
    "vendor-id": ("hexid", None),
    "device-id": ("hexid", None),
    "sub-vendor-id": ("hexid", None),
    "sub-device-id": ("hexid", None),
    "driver": ("driver", "vfio"),
}

# Values of the hostpci "driver" key (its enum in qemu-server PCI.pm; vfio is the default).
DRIVERS = ("vfio", "keep")

MAP_KEYS = ("node", "path", "id", "subsystem-id", "iommugroup", "description")


class PciError(ValueError):
    """Invalid PCI address, id or property string; the message says which value and why."""


# --------------------------------------------------------------------------- addresses and ids

def parse_pci_address(text: object) -> tuple[str, str, str, Optional[str]]:
    """Parse ``[domain:]bus:dev[.fn]`` into ``(domain, bus, dev, fn)`` (lower-case hex; fn None = all functions)."""
    if not isinstance(text, str):
        raise PciError("PCI address must be a string, got %r" % (text,))
    m = _ADDR_RE.fullmatch(text)
    if not m:
        raise PciError("invalid PCI address %r (expected [dddd:]bb:dd[.f], a domain has four digits)" % text)
    domain = (m.group("domain") or "0").lower().rjust(4, "0")
    return (domain, m.group("bus").lower().rjust(2, "0"), m.group("dev").lower().rjust(2, "0"), m.group("fn"))


def normalize_pci_address(text: object, function: Optional[str] = None) -> str:
    """Full lower-case form ``dddd:bb:dd[.f]``; ``function`` ('0'..'7') adds a function where none is given."""
    domain, bus, dev, fn = parse_pci_address(text)
    if fn is None and function is not None:
        fn = str(function)
    base = "%s:%s:%s" % (domain, bus, dev)
    return base if fn is None else "%s.%s" % (base, fn)


def pci_slot(text: object) -> str:
    """The device part of an address (``dddd:bb:dd``), shared by all functions of a multifunction device."""
    domain, bus, dev, dummy = parse_pci_address(text)
    return "%s:%s:%s" % (domain, bus, dev)


def address_covers(path: object, device_id: object) -> bool:
    """True when ``path`` (one address, function optional) selects ``device_id`` (a full function address)."""
    p = parse_pci_address(path)
    d = parse_pci_address(device_id)
    return p[:3] == d[:3] and (p[3] is None or p[3] == (d[3] or "0"))


def normalize_hex_id(text: object, what: str = "id") -> str:
    """``0x10DE``/``10de`` -> ``10de`` (four lower-case hex digits)."""
    if isinstance(text, int):
        text = "%04x" % text
    m = _HEX4_RE.fullmatch(str(text)) if text is not None else None
    if not m:
        raise PciError("invalid %s %r (expected four hex digits, optionally with 0x)" % (what, text))
    return m.group(1).lower()


def normalize_pci_id(text: object, what: str = "vendor:device id") -> str:
    """``10DE:20B0``/``0x10de:0x20b0`` -> ``10de:20b0``."""
    if not isinstance(text, str) or text.count(":") != 1:
        raise PciError("invalid %s %r (expected vvvv:dddd)" % (what, text))
    vendor, device = text.split(":")
    try:
        return "%s:%s" % (normalize_hex_id(vendor), normalize_hex_id(device))
    except PciError:
        raise PciError("invalid %s %r (expected vvvv:dddd)" % (what, text))


def is_configid(text: object) -> bool:
    """PVE ``pve-configid`` (mapping ids): a letter, then letters, digits, ``_`` or ``-``."""
    return isinstance(text, str) and bool(_CONFIGID_RE.fullmatch(text))


def is_node_name(text: object) -> bool:
    """PVE ``pve-node``: letters, digits and inner hyphens."""
    return isinstance(text, str) and bool(_NODE_RE.fullmatch(text))


def parse_bool(value: object, what: str = "value") -> str:
    """Proxmox VE booleans: 1|on|yes|true / 0|off|no|false (and Python bools) -> '1'/'0'."""
    if isinstance(value, bool):
        return "1" if value else "0"
    text = str(value).strip().lower()
    if text in _TRUE:
        return "1"
    if text in _FALSE:
        return "0"
    raise PciError("invalid boolean %r for %s" % (value, what))


# --------------------------------------------------------------------------- property strings

def split_property_string(text: object) -> list[tuple[Optional[str], str]]:
    """Split a property string into [(key or None, value)] exactly as PVE::JSONSchema::parse_property_string does.

    PVE splits on every comma and has no quoting; parts that are only whitespace are skipped; ``key=value`` needs a
    non-empty value; a part without ``=`` is the default key's value; a key may appear once.
    """
    if not isinstance(text, str):
        raise PciError("property string must be a string, got %r" % (text,))
    out = []
    seen = set()
    for part in text.split(","):
        if part.strip() == "":
            continue
        m = re.fullmatch(r"([^=]+)=(.+)", part, re.DOTALL)
        if m:
            key, value = m.group(1), m.group(2)
        elif "=" not in part:
            key, value = None, part
        else:
            raise PciError("missing key or value in %r of property string %r" % (part, text))
        if key in seen:
            raise PciError("duplicate key %r in property string %r" % (key or "(default)", text))
        seen.add(key)
        out.append((key, value))
    return out


def _plain(key: str, value: object) -> str:
    """A value as it goes into a property string; PVE cannot store a comma (print_property_string dies on one)."""
    value = str(value)
    if "," in value:
        raise PciError("%s %r contains a comma, which Proxmox VE property strings cannot hold" % (key, value))
    if "\n" in value or "\r" in value:
        raise PciError("%s %r contains a line break, which Proxmox VE config files cannot hold" % (key, value))
    return value


def _norm_host(value: object, strict: bool) -> str:
    parts = [p for p in str(value).split(";") if p.strip()]
    if not parts:
        raise PciError("empty host PCI address")
    norm = ";".join(normalize_pci_address(p) for p in parts)
    if strict:
        problem = joined_functions_problem(norm, "host")
        if problem:
            raise PciError(problem)
    return norm


def joined_functions_problem(paths: str, what: str) -> Optional[str]:
    """Why a ``;`` list of normalised addresses cannot be one device's functions (None when it can).

    qemu-server ``PCI.pm`` ``parse_hostpci`` splits a ``host=`` value, and each ``map`` entry's ``path``, on ``;`` into
    ONE alternative: every function is passed to the VM, together, as one multifunction device. Alternatives (a pool)
    come only from separate ``map`` entries of a node (``choose_hostpci_devices``). Functions of different devices in
    one list would give the VM all of them; a function named twice fails the start ("assigned more than once").
    """
    parts = paths.split(";")
    slots: list[str] = []
    for part in parts:
        if pci_slot(part) not in slots:
            slots.append(pci_slot(part))
    if len(slots) > 1:
        return ("%s %s joins functions of different devices (%s): Proxmox VE passes every ';'-separated function to "
                "the VM together, as one multifunction device, not as alternatives; a pool is a PCI mapping with one "
                "map entry per device" % (what, paths, ", ".join(slots)))
    for i, part in enumerate(parts):
        if any(address_covers(other, part) or address_covers(part, other) for other in parts[:i]):
            return ("%s %s names function %s more than once (a path without function is every function of the "
                    "device)" % (what, paths, part))
    return None


def group_functions(paths: Iterable[object], separate: Iterable[object] = ()) -> list[str]:
    """A list of addresses as ``map`` paths: the functions of each device joined with ``;`` (one multifunction
    device), the devices in the order first given; each is then one map entry, an alternative of the pool.
    Addresses in ``separate`` (SR-IOV virtual functions, devices of their own) are never joined with another."""
    alone = {normalize_pci_address(p) for p in separate}
    groups: dict[str, list[str]] = {}
    for path in paths:
        norm = normalize_pci_address(path)
        groups.setdefault(norm if norm in alone else pci_slot(norm), []).append(norm)
    out = []
    for funcs in groups.values():
        joined = ";".join(funcs)
        problem = joined_functions_problem(joined, "path")
        if problem:
            raise PciError(problem)
        out.append(joined)
    return out


def _norm_value(key: str, kind: str, value: object, strict: bool) -> str:
    if kind == "host":
        return _norm_host(value, strict)
    if kind == "configid":
        value = str(value)
        if not _CONFIGID_RE.fullmatch(value):
            raise PciError("invalid mapping id %r (expected [a-z][a-z0-9_-]+)" % value)
        return value
    if kind == "bool":
        return parse_bool(value, key)
    if kind == "hexid":
        return "0x" + normalize_hex_id(value, key)
    if kind == "mdev":
        value = str(value)
        if not (_MDEV_RE if strict else _MDEV_SERVER_RE).fullmatch(value):
            raise PciError("invalid mdev type %r (no '/', '.', ':', comma or white space allowed)" % value)
        return value
    if kind == "romfile":
        value = str(value)
        if strict and (not _ROMFILE_RE.fullmatch(value) or value in (".", "..")):
            raise PciError("invalid romfile %r: give a file name in /usr/share/kvm/ (no '/', ';', comma or white space)"
                           % value)
        if not strict and not _ROMFILE_SERVER_RE.fullmatch(value):
            raise PciError("invalid romfile %r" % value)
        return value
    if kind == "driver":
        value = str(value)
        if value not in DRIVERS:
            raise PciError("invalid driver %r (expected vfio or keep)" % value)
        return value
    # a kind added to HOSTPCI_KEYS without a branch above fails by name rather than passing its value unchecked
    raise PciError("unknown key %r" % key)


def normalize_hostpci(entry: Union[str, Mapping[str, Any]], strict: Optional[bool] = None) -> dict[str, str]:
    """Normalise a hostpciN value (string or dict of PVE keys) into a dict without defaults.

    ``01:00`` and ``host=0000:01:00`` give the same result; ``01:00`` (all functions) differs from ``01:00.0``.
    ``strict`` (default: True for dicts, the user's input; False for strings, what the server stored) also refuses
    values PVE stores but that are a guess or a risk to write (a romfile path, white space in an mdev type).
    """
    if strict is None:
        strict = not isinstance(entry, str)
    if isinstance(entry, str):
        pairs = split_property_string(entry)
    else:
        pairs = [(k, v) for k, v in entry.items() if v is not None]
    out = {}
    for key, value in pairs:
        if key is None:
            key = "host"
        if key not in HOSTPCI_KEYS:
            raise PciError("unknown hostpci property %r" % key)
        if key in out:
            raise PciError("duplicate hostpci property %r" % key)
        kind, default = HOSTPCI_KEYS[key]
        norm = _norm_value(key, kind, value, strict)
        if default is not None and norm == default:
            continue
        out[key] = norm
    if "host" in out and "mapping" in out:
        raise PciError("Cannot set both 'host' and 'mapping'.")
    if "host" not in out and "mapping" not in out:
        raise PciError("Either 'host' or 'mapping' must be set.")
    if strict and "mdev" in out and ";" in out.get("host", ""):
        raise PciError("host %s with mdev %s: cannot use mediated device with multifunction device (qemu-server "
                       "parse_hostpci); give one function" % (out["host"], out["mdev"]))
    return out


def format_hostpci(norm: Mapping[str, str]) -> str:
    """Canonical string of a normalised hostpci dict: device key first, then the rest sorted (as PVE prints)."""
    parts = []
    if "host" in norm:
        parts.append(norm["host"])
    else:
        parts.append("mapping=%s" % norm["mapping"])
    for key in sorted(k for k in norm if k not in ("host", "mapping")):
        parts.append("%s=%s" % (key, _plain(key, norm[key])))
    return ",".join(parts)


def hostpci_device_key(norm: Mapping[str, str]) -> tuple[str, str]:
    """Identity of the passed device (mapping id or host address list), ignoring options."""
    if "mapping" in norm:
        return ("mapping", norm["mapping"])
    return ("host", norm["host"])


def normalize_map_entry(entry: Union[str, Mapping[str, Any]]) -> dict[str, str]:
    """Normalise one cluster mapping ``map`` item (string or dict) into a dict of PVE keys ($map_fmt of PVE::Mapping::PCI)."""
    if isinstance(entry, str):
        pairs = split_property_string(entry)
    else:
        pairs = [(k, v) for k, v in entry.items() if v is not None and v != ""]
    out = {}
    for key, value in pairs:
        if key is None or key not in MAP_KEYS:
            raise PciError("unknown mapping property %r in %r" % (key, entry))
        if key == "path":
            parts = str(value).split(";")
            if not all(parts):
                raise PciError("invalid mapping path %r (empty function address)" % (value,))
            out[key] = ";".join(normalize_pci_address(p) for p in parts)
        elif key in ("id", "subsystem-id"):
            out[key] = normalize_pci_id(str(value), key)
        elif key == "iommugroup":
            text = str(value)
            # PVE's integer type check is ^[+-]?\d+$; "+12" and "012" mean 12, a negative group matches no device.
            if isinstance(value, bool) or not re.fullmatch(r"[+-]?\d+", text):
                raise PciError("invalid iommugroup %r (expected a number)" % (value,))
            out[key] = str(int(text))
        elif key == "node":
            if not is_node_name(value):
                raise PciError("invalid node name %r (letters, digits and inner '-' only)" % (value,))
            out[key] = value
        else:  # description
            value = _plain("description", value)
            if len(value) > MAX_DESCRIPTION:
                raise PciError("description of node entry is %d characters long, Proxmox VE allows %d"
                               % (len(value), MAX_DESCRIPTION))
            out[key] = value
    for req in ("node", "path", "id"):
        if req not in out:
            raise PciError("mapping entry %r lacks required property %r" % (entry, req))
    return out


def format_map_entry(norm: Mapping[str, str]) -> str:
    """Canonical ``map`` string: keys in the order PVE prints them (sorted)."""
    return ",".join("%s=%s" % (k, _plain(k, norm[k])) for k in sorted(norm))


def normalize_map_list(entries: Optional[Iterable[Union[str, Mapping[str, Any]]]]) -> list[dict[str, str]]:
    """Normalise a whole ``map`` list. Order across nodes does not matter; within a node it does (first free wins)."""
    norm = [normalize_map_entry(e) for e in entries or []]
    # sorted() is stable, so entries of one node keep their relative order.
    return sorted(norm, key=lambda e: e["node"])


# --------------------------------------------------------------------------- hostpci planner

def hostpci_from_config(config: Optional[Mapping[str, Any]]) -> dict[int, dict[str, str]]:
    """``{slot: normalised dict}`` for every ``hostpciN`` key of a VM config."""
    out = {}
    for key, value in (config or {}).items():
        m = re.match(r"^hostpci(\d+)\Z", key)
        if m:
            out[int(m.group(1))] = normalize_hostpci(value)
    return out


def plan_hostpci(current: Optional[Mapping[Any, Union[str, Mapping[str, str]]]], desired: Iterable[tuple[Any, Union[str, Mapping[str, Any]]]],
                 exclusive: bool = True) -> dict[str, Any]:
    """Decide the hostpci slots for a VM.

    ``current``: ``{slot: value}`` (strings or normalised dicts). ``desired``: list of ``(slot or None, value)``.
    An entry that already exists unchanged keeps its slot; an entry for the same device with other options is
    replaced in its slot; new entries take the lowest free slot. With ``exclusive`` every other slot is deleted.
    Returns dict ``set`` ({slot: canonical string}), ``delete`` (sorted slots), ``keep`` (slots), ``after``
    ({slot: canonical string}), ``before`` ({slot: canonical string}) and ``desired`` (the requested entries by slot).
    """
    cur = {int(s): (normalize_hostpci(v) if isinstance(v, str) else dict(v)) for s, v in (current or {}).items()}
    want: list[list[Any]] = []  # [slot or None, normalised dict], the slot filled in below
    for slot, value in desired:
        norm = normalize_hostpci(value)
        if slot is not None and not 0 <= int(slot) < MAX_HOSTPCI:
            raise PciError("hostpci slot %s out of range 0-%d" % (slot, MAX_HOSTPCI - 1))
        want.append([None if slot is None else int(slot), norm])
    explicit = [s for s, dummy in want if s is not None]
    if len(set(explicit)) != len(explicit):
        raise PciError("the same hostpci slot is requested twice")
    keys = [hostpci_device_key(n) for dummy, n in want]
    if len(set(keys)) != len(keys):
        raise PciError("the same device is requested twice: %s" % ", ".join(
            "%s=%s" % k for k in sorted(set(k for k in keys if keys.count(k) > 1))))

    assigned: dict[int, dict[str, str]] = {}  # slot -> norm
    taken = set(explicit)
    for slot, norm in want:
        if slot is not None:
            assigned[slot] = norm
    pending = [w for w in want if w[0] is None]

    def claim(matches: Callable[[dict[str, str], dict[str, str]], bool]) -> None:
        """Give each still unplaced entry the first free current slot whose entry ``matches`` it."""
        for w in pending:
            if w[0] is not None:
                continue
            for slot in sorted(cur):
                if slot not in taken and matches(cur[slot], w[1]):
                    w[0] = slot
                    taken.add(slot)
                    assigned[slot] = w[1]
                    break

    # 1) exact matches keep their slot
    claim(lambda have, want_: have == want_)
    # 2) same device, other options: replace in place so the guest sees it at the same slot
    claim(lambda have, want_: hostpci_device_key(have) == hostpci_device_key(want_))
    # 3) new entries: lowest slot that is neither requested nor (in non-exclusive mode) occupied
    for w in pending:
        if w[0] is not None:
            continue
        blocked = set(taken) | (set() if exclusive else set(cur))
        free = [s for s in range(MAX_HOSTPCI) if s not in blocked]
        if not free:
            raise PciError("no free hostpci slot (at most %d devices per VM)" % MAX_HOSTPCI)
        w[0] = free[0]
        taken.add(free[0])
        assigned[free[0]] = w[1]

    after: dict[int, dict[str, str]] = {}
    if not exclusive:
        after.update(cur)
    after.update(assigned)
    to_set = {s: format_hostpci(n) for s, n in sorted(assigned.items()) if cur.get(s) != n}
    to_delete = sorted(s for s in cur if s not in after)
    keep = sorted(s for s in after if s in cur and cur[s] == after[s])
    return {
        "before": {s: format_hostpci(n) for s, n in sorted(cur.items())},
        "after": {s: format_hostpci(n) for s, n in sorted(after.items())},
        "set": to_set,
        "delete": to_delete,
        "keep": keep,
        "desired": {s: format_hostpci(n) for s, n in sorted(assigned.items())},
    }


# --------------------------------------------------------------------------- hardware facts

def _hex(value: object) -> Optional[str]:
    if value is None:
        return None
    try:
        return normalize_hex_id(value)
    except PciError:
        return None


def is_gpu_class(cls: object) -> bool:
    """Display controllers: 0x0300 VGA, 0x0302 3D controller, 0x0380 other display."""
    return str(cls or "").lower().startswith(("0x0300", "0x0302", "0x0380"))


def is_bridge_class(cls: object) -> bool:
    return str(cls or "").lower().startswith("0x0604")


def device_facts(dev: Mapping[str, Any]) -> dict[str, Any]:
    """Flatten one ``hardware/pci`` item into the collection's device facts."""
    vendor, device = _hex(dev.get("vendor")), _hex(dev.get("device"))
    svendor, sdevice = _hex(dev.get("subsystem_vendor")), _hex(dev.get("subsystem_device"))
    try:
        group = int(dev.get("iommugroup", -1))
    except (TypeError, ValueError):
        group = -1
    nvidia = bool(int(dev.get("nvidia") or 0))
    return {
        "id": normalize_pci_address(dev["id"]),
        "slot": pci_slot(dev["id"]),
        "class": dev.get("class"),
        "vendor_id": vendor,
        "device_id": device,
        "pci_id": "%s:%s" % (vendor, device) if vendor and device else None,
        # Kept even when 0000:0000: assert_valid expects whatever sysfs has (pve-common SysFSTools::pci_device_info).
        "subsystem_id": "%s:%s" % (svendor, sdevice) if svendor and sdevice else None,
        "vendor_name": dev.get("vendor_name"),
        "device_name": dev.get("device_name"),
        "subsystem_name": dev.get("subsystem_device_name"),
        "iommu_group": group,
        "mdev": bool(int(dev.get("mdev") or 0)) or nvidia,
        # The API does not expose the bound driver; an nvidia/ sysfs dir (PVE's `nvidia` flag) implies the NVIDIA driver.
        "driver": dev.get("driver") or ("nvidia" if nvidia else None),
        "physfn": normalize_pci_address(dev["physfn"]) if dev.get("physfn") else None,
        "virtfns": sorted((normalize_pci_address(v) for v in (dev.get("virtfns") or {}).values()),
                          key=parse_pci_address),
    }


def iommu_isolation(devices: Sequence[Mapping[str, Any]], dev_id: str) -> tuple[bool, list[str]]:
    """(isolated, group members) for ``dev_id``: its group may hold only its own functions and bridges."""
    by_id = {d["id"]: d for d in devices}
    me = by_id.get(dev_id)
    if me is None:
        return False, []
    if me["iommu_group"] < 0:
        return False, []
    members = sorted(d["id"] for d in devices if d["iommu_group"] == me["iommu_group"])
    foreign = [m for m in members if by_id[m]["slot"] != me["slot"] and not is_bridge_class(by_id[m]["class"])]
    return not foreign, members


def gpu_facts(node: str, pci_list: Iterable[Mapping[str, Any]], mdev_types: Optional[Mapping[str, list[Any]]] = None,
              mappings: Optional[Sequence[Mapping[str, Any]]] = None,
              vm_configs: Optional[Mapping[Any, Mapping[str, Any]]] = None) -> list[dict[str, Any]]:
    """Build the per-node GPU facts that pve_gpu_info returns and pve_pci_mapping selectors run over.

    ``pci_list``: ``hardware/pci`` items (all classes); ``mdev_types``: {device id: [mdev items]};
    ``mappings``: ``/cluster/mapping/pci`` items; ``vm_configs``: {vmid: config dict}.
    """
    devices = [device_facts(d) for d in pci_list]
    by_id = {d["id"]: d for d in devices}
    mdev_types = mdev_types or {}
    usage = hostpci_usage(node, mappings or [], vm_configs or {})
    map_refs = mapping_refs(node, mappings or [])

    def enrich(d: Mapping[str, Any]) -> dict[str, Any]:
        isolated, members = iommu_isolation(devices, d["id"])
        out = dict(d)
        out["node"] = node
        out["functions"] = sorted(x["id"] for x in devices if x["slot"] == d["slot"] and not x["physfn"])
        out["iommu_isolated"] = isolated
        out["iommu_group_devices"] = members
        out["mdev_types"] = mdev_types.get(d["id"], [])
        out["mappings"] = sorted(set(mid for mid, path in map_refs if address_covers(path, d["id"])))
        out["used_by"] = [u for u in usage if any(address_covers(p, d["id"]) for p in u["paths"])]
        return out

    gpus = []
    for d in devices:
        if not is_gpu_class(d["class"]) or d["physfn"]:
            continue
        g = enrich(d)
        g["vfs"] = [enrich(by_id[v]) for v in d["virtfns"] if v in by_id]
        gpus.append(g)
    return gpus


def gpu_vms(node: str, gpus: Iterable[Mapping[str, Any]], vm_list: Iterable[Mapping[str, Any]],
            vm_configs: Mapping[Any, Mapping[str, Any]], mappings: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The node's VMs that hold a GPU, by vmid: ``{vmid, name, status, node, hostpci}``, each hostpci entry as
    hostpci_usage words it plus ``gpus`` (the GPUs and virtual functions of ``gpus``, gpu_facts' list, that its paths
    cover; empty for a mapping without an entry on this node) and ``mdev_name`` (the mdev type's name on that device).

    A VM is listed when one of its entries covers a GPU or names a mapping; ``vm_list``: ``GET /nodes/{node}/qemu``
    items (name and status), ``vm_configs``: {vmid: config}."""
    devices = [d for g in gpus for d in [g] + list(g.get("vfs") or [])]
    listed = {int(v["vmid"]): v for v in vm_list if v.get("vmid") is not None}
    by_vm: dict[int, dict[str, Any]] = {}
    for use in hostpci_usage(node, mappings, vm_configs):
        covered = [d for d in devices if any(address_covers(p, d["id"]) for p in use["paths"])]
        types = {t.get("type"): t.get("name") for d in covered for t in d.get("mdev_types") or []}
        by_vm.setdefault(use["vmid"], {"hostpci": [], "gpu": False})
        by_vm[use["vmid"]]["hostpci"].append(dict(use, gpus=[d["id"] for d in covered], mdev_name=types.get(use["mdev"])))
        by_vm[use["vmid"]]["gpu"] = by_vm[use["vmid"]]["gpu"] or bool(covered) or use["via"] == "mapping"
    out = []
    for vmid in sorted(by_vm):
        if not by_vm[vmid]["gpu"]:
            continue
        item, cfg = listed.get(vmid) or {}, vm_configs.get(vmid) or vm_configs.get(str(vmid)) or {}
        out.append({"vmid": vmid, "name": cfg.get("name") or item.get("name"), "status": item.get("status"), "node": node,
                    "hostpci": by_vm[vmid]["hostpci"]})
    return out


def mapping_refs(node: str, mappings: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """[(mapping id, path)] of every ``map`` path that a mapping defines on ``node``."""
    refs: list[tuple[str, str]] = []
    for m in mappings:
        for raw in m.get("map") or []:
            try:
                e = normalize_map_entry(raw)
            except PciError:
                continue
            if e["node"] == node:
                refs.extend((m["id"], p) for p in e["path"].split(";"))
    return refs


def hostpci_usage(node: str, mappings: Iterable[Mapping[str, Any]], vm_configs: Mapping[Any, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """[{vmid, slot, via, mapping?, paths}] for every hostpci entry of the node's VMs (paths resolved via mappings)."""
    refs = mapping_refs(node, mappings)
    usage = []
    for vmid, cfg in sorted(vm_configs.items(), key=lambda kv: int(kv[0])):
        try:
            entries = hostpci_from_config(cfg)
        except PciError:
            continue
        for slot, norm in sorted(entries.items()):
            if "mapping" in norm:
                paths = [p for mid, p in refs if mid == norm["mapping"]]
                usage.append({"vmid": int(vmid), "slot": "hostpci%d" % slot, "via": "mapping",
                              "mapping": norm["mapping"], "paths": paths, "mdev": norm.get("mdev")})
            else:
                usage.append({"vmid": int(vmid), "slot": "hostpci%d" % slot, "via": "host",
                              "mapping": None, "paths": norm["host"].split(";"), "mdev": norm.get("mdev")})
    return usage


def check_map_entry(entry: Mapping[str, Any], devices: Iterable[Mapping[str, Any]], mdev: Optional[bool] = None) -> list[str]:
    """Check one normalised ``map`` entry against a node's devices as PVE does when a VM starts.

    Follows ``PVE::Mapping::PCI::assert_valid`` (pve-guest-common): for every path the hardware's vendor:device id,
    subsystem id and (first path only) IOMMU group must be configured exactly when the hardware has them, and match;
    with the mapping's ``mdev`` flag given (PVE 8.4+, libpve-guest-common-perl 5.1.7 passes it), it must equal
    whether the device can provide mediated devices, in both directions.
    Returns a list of problems (empty = valid). ``devices``: device_facts() dicts of that node.
    """
    problems = []
    by_id = {d["id"]: d for d in devices}
    for i, path in enumerate(entry["path"].split(";")):
        dev = by_id.get(normalize_pci_address(path, function="0"))
        if dev is None:
            problems.append("pci device '%s' not found" % path)
            continue
        expected = {"id": dev["pci_id"], "subsystem-id": dev["subsystem_id"],
                    "iommugroup": str(dev["iommu_group"]) if dev["iommu_group"] >= 0 else None}
        configured = {k: entry.get(k) for k in expected}
        if mdev is not None:
            expected["mdev"] = "1" if dev["mdev"] else "0"
            configured["mdev"] = "1" if mdev else "0"
        for prop in sorted(expected):
            if prop == "iommugroup" and i > 0:
                continue  # assert_valid checks the group of the first device only
            want, have = expected[prop], configured[prop]
            if want is None and have is None:
                continue
            if have is None:
                problems.append("missing expected property '%s' for device '%s' (hardware has %s)" % (prop, path, want))
            elif want is None:
                problems.append("unexpected property '%s' configured for device '%s' (hardware has none)" % (prop, path))
            elif want != have:
                if prop == "mdev":
                    problems.append("'mdev' does not match for '%s': the mapping says %s, the device %s mediated devices"
                                    % (path, "mdev" if have == "1" else "no mdev", "provides" if want == "1" else "cannot provide"))
                else:
                    problems.append("'%s' does not match for '%s' (%s != %s)" % (prop, path, want, have))
    return problems


def path_functions(path: str, devices: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every function a ``host=`` value or ``map`` path addresses, part by part, as ``SysFSTools::lspci($part)``
    (pve-common) lists them for qemu-server's ``parse_hostpci``: a part without function is every function of that
    bus:slot (an SR-IOV PF's virtual functions on the same slot included). ``devices``: device_facts() dicts."""
    ids = sorted(d["id"] for d in devices)
    out: list[str] = []
    for part in path.split(";"):
        out.extend(i for i in ids if address_covers(part, i))
    return out


def map_entry_from_device(node: str, dev: Mapping[str, Any], whole_device: bool = False) -> dict[str, str]:
    """A ``map`` entry (normalised dict) for one device fact, with every property PVE's assert_valid expects."""
    entry = {"node": node, "path": dev["slot"] if whole_device else dev["id"], "id": dev["pci_id"]}
    if dev.get("subsystem_id"):
        entry["subsystem-id"] = dev["subsystem_id"]
    if dev.get("iommu_group", -1) >= 0:
        entry["iommugroup"] = str(dev["iommu_group"])
    return normalize_map_entry(entry)


def mdev_capability(devices: Iterable[Mapping[str, Any]]) -> Optional[bool]:
    """True/False when every device is/is not mdev capable; None when they differ (no mdev flag fits them all)."""
    flags = set(bool(d.get("mdev")) for d in devices)
    return flags.pop() if len(flags) == 1 else None


# --------------------------------------------------------------------------- server versions

# Options that only some Proxmox VE releases know; sending one to an older server fails the whole call.
# (option, first PVE release, where upstream added it) - read from the upstream repositories on 2026-12-01.
VERSION_GATED = {
    "live-migration-capable": ((8, 4), "libpve-guest-common-perl 5.1.7, pve-guest-common commit ef051db "
                                       "'mapping: pci: add live-migration-capable flag'"),
    "driver": ((9, 1), "qemu-server 9.0.25, commit aa47045f 'pci: add driver option'"),
    # Not an option: from this release assert_valid compares a mapping's mdev flag with the hardware at VM start.
    "mdev-check": ((8, 4), "libpve-guest-common-perl 5.1.7, pve-guest-common commit 57cd454 "
                           "'mapping: pci: check the mdev configuration on the device too'"),
}


def mdev_checked(version: Optional[Sequence[int]], mdev: bool) -> Optional[bool]:
    """The mdev flag to compare with the hardware (check_map_entry's ``mdev``) on a server of ``version``: None on
    releases before 8.4, whose assert_valid does not compare it (they start such mappings); an unknown version is
    taken as current."""
    return None if version_gate("mdev-check", version) else mdev


def parse_pve_version(text: object) -> Optional[tuple[int, ...]]:
    """``'8.4.1'``/``'9.0.0~11'`` -> (8, 4, 1)/(9, 0, 0); None when it is not a version."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", str(text or ""))
    return tuple(int(x or 0) for x in m.groups()) if m else None


def version_gate(option: str, version: Optional[Sequence[int]]) -> Optional[str]:
    """None when the server (version tuple) knows ``option``, else a message naming both versions."""
    first, source = VERSION_GATED[option]
    if version is None or tuple(version[:2]) >= first:
        return None
    return ("'%s' needs Proxmox VE %d.%d or newer (%s); the server runs %s"
            % (option, first[0], first[1], source, ".".join(str(x) for x in version)))


# --------------------------------------------------------------------------- permissions

def root_only_reasons(norm: Mapping[str, str]) -> list[str]:
    """Why only root@pam may set, replace or delete this hostpci value (check_hostpci_perm, qemu-server API2/Qemu.pm).

    A raw ``host=`` device and a ``romfile`` are root@pam's alone; an API token of root@pam is ``root@pam!<id>``,
    not root@pam. Returns a list of reasons (empty = any user with the VM and mapping privileges may).
    """
    reasons = []
    if "host" in norm:
        reasons.append("raw host device %s" % norm["host"])
    if "romfile" in norm:
        reasons.append("romfile %s" % norm["romfile"])
    return reasons


def permission_problems(plan: Mapping[str, Any], current: Mapping[int, Union[str, Mapping[str, str]]], is_root: bool) -> list[str]:
    """Every hostpci change of ``plan`` that PVE would refuse for a user who is not root@pam.

    PVE checks the new value of a set, the old value of a replaced entry and the old value of a deleted one, one
    option after another, writing as it goes; checking all of them first leaves the VM as it was on a refusal.
    """
    if is_root:
        return []
    problems = []
    for slot in sorted(set(plan["set"]) | set(plan["delete"])):
        old = current.get(slot)
        if old is not None:
            old = normalize_hostpci(old) if isinstance(old, str) else old
            for reason in root_only_reasons(old):
                problems.append("hostpci%d: %s the existing entry has a %s" % (
                    slot, "replacing" if slot in plan["set"] else "deleting", reason))
        if slot in plan["set"]:
            for reason in root_only_reasons(normalize_hostpci(plan["set"][slot])):
                problems.append("hostpci%d: the new entry has a %s" % (slot, reason))
    return problems
