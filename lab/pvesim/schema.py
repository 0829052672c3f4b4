"""Parameter schemas of the simulated endpoints and PVE-style validation of form parameters.

The specs use the field names of PVE's JSON schema (``type``, ``optional``, ``pattern``, ``enum``,
``format``, ``minimum`` ...) so the conformance test can compare them with ``pve-api-subset.json``.
Formats PVE names but the simulator does not model in detail are marked ``OPAQUE`` (any string).
"""

from __future__ import annotations

import re

MAX_HOSTPCI = 16
OPAQUE = "opaque"

BOOL_TRUE = ("1", "on", "yes", "true")
BOOL_FALSE = ("0", "off", "no", "false")

PCI_HOST_RE = r"(?:[a-f0-9]{4,}:)?[a-f0-9]{2}:[a-f0-9]{2}(?:\.[a-f0-9])?"
HEX_ID_RE = r"^0x[0-9a-fA-F]{4}$"
MAP_ID_RE = r"^[0-9A-Fa-f]{4}:[0-9A-Fa-f]{4}$"

# pve-qm-hostpci (qemu-server PCI.pm $hostpci_fmt)
HOSTPCI_FMT = {
    "host": {"default_key": 1, "optional": 1, "type": "string",
             "pattern": PCI_HOST_RE + "(;" + PCI_HOST_RE + ")*"},
    "mapping": {"optional": 1, "type": "string", "format": "pve-configid"},
    "rombar": {"type": "boolean", "optional": 1, "default": 1},
    "romfile": {"type": "string", "pattern": "[^,;]+", "optional": 1},
    "pcie": {"type": "boolean", "optional": 1, "default": 0},
    "x-vga": {"type": "boolean", "optional": 1, "default": 0},
    "legacy-igd": {"type": "boolean", "optional": 1, "default": 0},
    "mdev": {"type": "string", "pattern": r"[^/\.:]+", "optional": 1},
    "vendor-id": {"type": "string", "pattern": HEX_ID_RE, "optional": 1},
    "device-id": {"type": "string", "pattern": HEX_ID_RE, "optional": 1},
    "sub-vendor-id": {"type": "string", "pattern": HEX_ID_RE, "optional": 1},
    "sub-device-id": {"type": "string", "pattern": HEX_ID_RE, "optional": 1},
    "driver": {"type": "string", "optional": 1, "default": "vfio", "enum": ["vfio", "keep"]},
}

# $map_fmt of PVE::Mapping::PCI
MAP_FMT = {
    "node": {"type": "string", "format": "pve-node"},
    "path": {"type": "string",
             "pattern": r"(?:[a-f0-9]{4,}:[a-f0-9]{2}:[a-f0-9]{2}(?:.[a-f0-9])?;)*[a-f0-9]{4,}:[a-f0-9]{2}:[a-f0-9]{2}(?:.[a-f0-9])?"},
    "id": {"type": "string", "pattern": MAP_ID_RE},
    "subsystem-id": {"type": "string", "pattern": MAP_ID_RE, "optional": 1},
    "iommugroup": {"type": "integer", "optional": 1},
    "description": {"type": "string", "maxLength": 4096, "optional": 1},
}

MACHINE_FMT = {
    "type": {"default_key": 1, "optional": 1, "type": "string", "maxLength": 40,
             "pattern": r"(pc|pc(-i440fx)?-\d+(\.\d+)+(\+pve\d+)?(\.pxe)?|q35|pc-q35-\d+(\.\d+)+(\+pve\d+)?(\.pxe)?|virt(?:-\d+(\.\d+)+)?(\+pve\d+)?)"},
    "viommu": {"optional": 1, "type": "string", "enum": ["intel", "virtio"]},
    "aw-bits": {"optional": 1, "type": "number", "minimum": 32, "maximum": 64},
    "enable-s3": {"optional": 1, "type": "boolean"},
    "enable-s4": {"optional": 1, "type": "boolean"},
}

MEMORY_FMT = {"current": {"default_key": 1, "type": "integer", "minimum": 16, "default": 512}}

VMID = {"type": "integer", "format": "pve-vmid", "minimum": 100, "maximum": 999999999}
NODE = {"type": "string", "format": "pve-node"}
OPT = {"optional": 1}


def _o(**kw):
    spec = dict(OPT)
    spec.update(kw)
    return spec


# VM config keys the simulator models; the indexed ones are expanded like PVE does (hostpci[n] -> hostpci0..15).
VM_CONFIG = {
    "acpi": _o(type="boolean", default=1),
    "agent": _o(type="string", format=OPAQUE),
    "args": _o(type="string"),
    "autostart": _o(type="boolean", default=0),
    "balloon": _o(type="integer", minimum=0),
    "bios": _o(type="string", enum=["seabios", "ovmf"], default="seabios"),
    "boot": _o(type="string", format=OPAQUE),
    "cores": _o(type="integer", minimum=1, default=1),
    "cpu": _o(type="string", format=OPAQUE),
    "cpulimit": _o(type="number", minimum=0, maximum=128, default=0),
    "description": _o(type="string", maxLength=8192),
    "efidisk0": _o(type="string", format=OPAQUE),
    "hostpci[n]": _o(type="string", format="pve-qm-hostpci"),
    "hotplug": _o(type="string", format=OPAQUE, default="network,disk,usb"),
    "ide[n]": _o(type="string", format=OPAQUE),
    "kvm": _o(type="boolean", default=1),
    "lock": _o(type="string", enum=["backup", "clone", "create", "migrate", "rollback", "snapshot", "snapshot-delete", "suspending", "suspended"]),
    "machine": _o(type="string", format=MACHINE_FMT),
    "memory": _o(type="string", format=MEMORY_FMT),
    "name": _o(type="string", format="dns-name"),
    "net[n]": _o(type="string", format=OPAQUE),
    "numa": _o(type="boolean", default=0),
    "onboot": _o(type="boolean", default=0),
    "ostype": _o(type="string", default="other",
                 enum=["other", "wxp", "w2k", "w2k3", "w2k8", "wvista", "win7", "win8", "win10", "win11", "l24", "l26", "solaris"]),
    "protection": _o(type="boolean", default=0),
    "sata[n]": _o(type="string", format=OPAQUE),
    "scsi[n]": _o(type="string", format=OPAQUE),
    "scsihw": _o(type="string", enum=["lsi", "lsi53c810", "virtio-scsi-pci", "virtio-scsi-single", "megasas", "pvscsi"],
                 default="lsi"),
    "smbios1": _o(type="string", format=OPAQUE, maxLength=512),
    "sockets": _o(type="integer", minimum=1, default=1),
    "tablet": _o(type="boolean", default=1),
    "tags": _o(type="string", format=OPAQUE),
    "template": _o(type="boolean", default=0),
    "tpmstate0": _o(type="string", format=OPAQUE),
    "vcpus": _o(type="integer", minimum=1, default=0),
    "vga": _o(type="string", format=OPAQUE),
    "virtio[n]": _o(type="string", format=OPAQUE),
    "vmgenid": _o(type="string", pattern=r"(?:[a-fA-F0-9]{8}(?:-[a-fA-F0-9]{4}){3}-[a-fA-F0-9]{12}|[01])"),
}
INDEX_MAX = {"hostpci": MAX_HOSTPCI, "net": 32, "scsi": 31, "virtio": 16, "ide": 4, "sata": 6}

CONFIG_UPDATE_EXTRA = {
    "node": NODE, "vmid": VMID,
    "delete": _o(type="string", format="pve-configid-list"),
    "revert": _o(type="string", format="pve-configid-list"),
    "digest": _o(type="string", maxLength=40),
    "skiplock": _o(type="boolean"),
}

# Route parameter specs: (schema path, method) -> properties
PARAMS = {
    ("/version", "GET"): {},
    ("/nodes", "GET"): {},
    ("/nodes/{node}/hardware", "GET"): {"node": NODE},
    ("/nodes/{node}/hardware/pci", "GET"): {
        "node": NODE,
        "pci-class-blacklist": _o(type="string", format="string-list", default="05;06;0b"),
        "verbose": _o(type="boolean", default=1),
    },
    ("/nodes/{node}/hardware/pci/{pci-id-or-mapping}", "GET"): {
        "node": NODE,
        "pci-id-or-mapping": {"type": "string",
                              "pattern": r"(?:(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F])|([a-zA-Z][a-zA-Z0-9_-]+)"},
    },
    ("/nodes/{node}/hardware/pci/{pci-id-or-mapping}/mdev", "GET"): {
        "node": NODE,
        "pci-id-or-mapping": {"type": "string",
                              "pattern": r"(?:(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F])|([a-zA-Z][a-zA-Z0-9_-]+)"},
    },
    ("/cluster/mapping", "GET"): {},
    ("/cluster/mapping/pci", "GET"): {"check-node": _o(type="string", format="pve-node")},
    ("/cluster/mapping/pci", "POST"): {
        "id": {"type": "string", "format": "pve-configid"},
        "map": {"type": "array", "optional": 0, "items": {"type": "string", "format": MAP_FMT}},
        "description": _o(type="string", maxLength=4096),
        "mdev": _o(type="boolean", default=0),
        "live-migration-capable": _o(type="boolean", default=0),
    },
    ("/cluster/mapping/pci/{id}", "GET"): {"id": {"type": "string", "format": "pve-configid"}},
    ("/cluster/mapping/pci/{id}", "DELETE"): {"id": {"type": "string", "format": "pve-configid"}},
    ("/cluster/mapping/pci/{id}", "PUT"): {
        "id": {"type": "string", "format": "pve-configid"},
        "map": {"type": "array", "optional": 1, "items": {"type": "string", "format": MAP_FMT}},
        "description": _o(type="string", maxLength=4096),
        "mdev": _o(type="boolean", default=0),
        "live-migration-capable": _o(type="boolean", default=0),
        "delete": _o(type="string", format="pve-configid-list", maxLength=4096),
        "digest": _o(type="string", maxLength=64),
    },
    ("/nodes/{node}/qemu", "GET"): {"node": NODE, "full": _o(type="boolean")},
    ("/nodes/{node}/qemu/{vmid}", "GET"): {"node": NODE, "vmid": VMID},
    ("/nodes/{node}/qemu/{vmid}/config", "GET"): {
        "node": NODE, "vmid": VMID,
        "current": _o(type="boolean", default=0),
        "snapshot": _o(type="string", format="pve-configid", maxLength=40),
    },
    ("/nodes/{node}/qemu/{vmid}/config", "PUT"): dict(VM_CONFIG, **CONFIG_UPDATE_EXTRA),
    ("/nodes/{node}/qemu/{vmid}/config", "POST"): dict(
        VM_CONFIG, background_delay=_o(type="integer", minimum=1, maximum=30), **CONFIG_UPDATE_EXTRA),
    ("/nodes/{node}/qemu/{vmid}/pending", "GET"): {"node": NODE, "vmid": VMID},
    ("/nodes/{node}/qemu/{vmid}/status", "GET"): {"node": NODE, "vmid": VMID},
    ("/nodes/{node}/qemu/{vmid}/status/current", "GET"): {"node": NODE, "vmid": VMID},
    ("/nodes/{node}/qemu/{vmid}/status/start", "POST"): {
        "node": NODE, "vmid": VMID, "skiplock": _o(type="boolean"), "timeout": _o(type="integer", minimum=0),
        "machine": _o(type="string", format=MACHINE_FMT), "force-cpu": _o(type="string"),
    },
    ("/nodes/{node}/qemu/{vmid}/status/shutdown", "POST"): {
        "node": NODE, "vmid": VMID, "skiplock": _o(type="boolean"), "timeout": _o(type="integer", minimum=0),
        "forceStop": _o(type="boolean", default=0), "keepActive": _o(type="boolean", default=0),
    },
    ("/nodes/{node}/qemu/{vmid}/status/stop", "POST"): {
        "node": NODE, "vmid": VMID, "skiplock": _o(type="boolean"), "timeout": _o(type="integer", minimum=0),
        "keepActive": _o(type="boolean", default=0), "overrule-shutdown": _o(type="boolean", default=0),
    },
    # not in the reference subset (proxmox_kvm uses it); schema as in PVE's apidoc
    ("/nodes/{node}/qemu/{vmid}/status/reboot", "POST"): {
        "node": NODE, "vmid": VMID, "timeout": _o(type="integer", minimum=0),
    },
    ("/nodes/{node}/tasks/{upid}", "GET"): {"node": NODE, "upid": {"type": "string"}},
    ("/nodes/{node}/tasks/{upid}/status", "GET"): {"node": NODE, "upid": {"type": "string"}},
    # outside the subset: proxmox_kvm looks VMs up through /cluster/resources
    ("/cluster/resources", "GET"): {"type": _o(type="string", enum=["vm", "storage", "node", "sdn"])},
    # outside the subset: the caller's own effective privileges (pve-access-control API2/AccessControl.pm permissions)
    ("/access/permissions", "GET"): {"userid": _o(type="string"), "path": _o(type="string")},
}
# Routes that are not part of pve-api-subset.json (the conformance test skips them).
EXTRA_ROUTES = {("/nodes/{node}/qemu/{vmid}/status/reboot", "POST"), ("/cluster/resources", "GET"),
                ("/access/permissions", "GET")}


class ParamError(Exception):
    """A parameter verification failure (HTTP 400, ``errors`` member)."""

    def __init__(self, errors):
        super().__init__("Parameter verification failed.")
        self.errors = errors


def expand_indexed(props):
    """Turn ``name[n]`` entries back into ``name0..nameN-1`` as PVE's RESTHandler does."""
    out = {}
    for name, spec in props.items():
        if name.endswith("[n]"):
            base = name[:-3]
            for i in range(INDEX_MAX[base]):
                out[base + str(i)] = spec
        else:
            out[name] = spec
    return out


# What each release lacks, read from the upstream repositories (2026-12-01):
# - hostpci 'driver': qemu-server commit aa47045f "pci: add 'driver' option", first in qemu-server 9.0.25 (PVE 9.1).
# - mapping 'live-migration-capable': pve-guest-common commit ef051db, libpve-guest-common-perl 5.1.7 (PVE 8.4).
# - machine 'aw-bits': PVE 9 (absent from the 8.4 API viewer, pve-api-subset.json paths_pve8).
# - ostype's default is not documented in 8.4's API viewer.
# - NVIDIA VF vGPU types read through NVML from the parent GPU, whatever the VF's own state: qemu-server commit
#   008475ca "pci: mdev: use PVE::RS::NVML for nvidia mdev information", qemu-server 9.1.11 (PVE 9.2).
FEATURES = {"hostpci-driver": (9, 1), "live-migration-capable": (8, 4), "aw-bits": (9, 0), "vf-types-from-parent": (9, 2)}


def has_feature(release, feature):
    return tuple(release[:2]) >= FEATURES[feature]


def hostpci_fmt(release):
    return HOSTPCI_FMT if has_feature(release, "hostpci-driver") else {k: v for k, v in HOSTPCI_FMT.items() if k != "driver"}


def _params_for(release):
    """The route parameters as a server of ``release`` (major, minor) declares them."""
    machine = MACHINE_FMT if has_feature(release, "aw-bits") else {k: v for k, v in MACHINE_FMT.items() if k != "aw-bits"}
    out = {}
    for key, props in PARAMS.items():
        out[key] = {}
        for name, spec in props.items():
            if spec.get("format") == "pve-qm-hostpci":
                spec = dict(spec, release=tuple(release[:2]))  # same named format, checked with this release's keys
            elif name == "ostype" and release[0] < 9:
                spec = {k: v for k, v in spec.items() if k != "default"}
            elif spec.get("format") is MACHINE_FMT:
                spec = dict(spec, format=machine)
            elif name == "live-migration-capable" and not has_feature(release, "live-migration-capable"):
                continue
            out[key][name] = spec
    return out


_EXPANDED_BY_RELEASE = {}


def expanded_params(release):
    """``{(path, method): props}`` with indexed keys expanded, for a server of ``release`` (cached)."""
    release = tuple(release[:2])
    if release not in _EXPANDED_BY_RELEASE:
        _EXPANDED_BY_RELEASE[release] = {key: expand_indexed(props) for key, props in _params_for(release).items()}
    return _EXPANDED_BY_RELEASE[release]


PARAMS_PVE8 = _params_for((8, 4))
HOSTPCI_FMT_PVE8 = hostpci_fmt((8, 4))
EXPANDED = {key: expand_indexed(props) for key, props in PARAMS.items()}
EXPANDED_PVE8 = expanded_params((8, 4))
NODE_RE = re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?$")
CONFIGID_RE = re.compile(r"^[a-z][a-z0-9_-]+$", re.I)
DNS_RE = re.compile(r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9\-]*[a-zA-Z0-9])?\.)*[A-Za-z0-9](?:[A-Za-z0-9\-]*[A-Za-z0-9])?$")


def parse_boolean(raw):
    low = str(raw).lower()
    if low in BOOL_TRUE:
        return 1
    if low in BOOL_FALSE:
        return 0
    return None


def split_list(raw):
    return [item for item in re.split(r"[,;\s]+", raw or "") if item]


def _check_named_format(fmt, value, release=None):
    if fmt == "pve-node":
        if not NODE_RE.match(value):
            return "value does not look like a valid node name"
    elif fmt == "pve-configid":
        if not CONFIGID_RE.match(value):
            return f"invalid configuration ID '{value}'"
    elif fmt == "pve-configid-list":
        for item in split_list(value):
            if not CONFIGID_RE.match(item):
                return f"invalid configuration ID '{item}'"
    elif fmt == "dns-name":
        if not DNS_RE.match(value):
            return f"value '{value}' does not look like a valid DNS name"
    elif fmt == "pve-qm-hostpci":
        try:
            parse_property_string(hostpci_fmt(release) if release else HOSTPCI_FMT, value)
        except ValueError as exc:
            return f"invalid format - {exc}"
    return None


def check_value(spec, raw):
    """Validate one raw (string) value; return (typed value, None) or (None, error message)."""
    typ = spec.get("type", "string")
    if typ == "boolean":
        val = parse_boolean(raw)
        if val is None:
            return None, f"type check ('boolean') failed - got '{raw}'"
        return val, None
    if typ == "integer":
        if not re.match(r"^[+-]?\d+$", str(raw)):
            return None, f"type check ('integer') failed - got '{raw}'"
        val = int(raw)
    elif typ == "number":
        try:
            val = float(raw)
        except ValueError:
            return None, f"type check ('number') failed - got '{raw}'"
    else:
        val = str(raw)
    if typ in ("integer", "number"):
        if "minimum" in spec and val < spec["minimum"]:
            return None, f"value must have a minimum value of {spec['minimum']}"
        if "maximum" in spec and val > spec["maximum"]:
            return None, f"value must have a maximum value of {spec['maximum']}"
        return val, None
    if "maxLength" in spec and len(val) > spec["maxLength"]:
        return None, f"value may only be {spec['maxLength']} characters long"
    if "enum" in spec and val not in spec["enum"]:
        return None, f"value '{val}' does not have a value in the enumeration '{', '.join(spec['enum'])}'"
    if "pattern" in spec and not re.match(r"^(?:" + spec["pattern"] + r")$", val):
        return None, "value does not match the regex pattern"
    fmt = spec.get("format")
    if isinstance(fmt, dict):
        try:
            parse_property_string(fmt, val)
        except ValueError as exc:
            return None, f"invalid format - {exc}"
    elif isinstance(fmt, str) and fmt != OPAQUE:
        err = _check_named_format(fmt, val, spec.get("release"))
        if err:
            return None, err
    return val, None


def parse_property_string(fmt, text):
    """PVE::JSONSchema::parse_property_string (pve-common): split on every comma (there is no quoting), skip parts
    that are only white space, ``key=value`` needs a non-empty value, a bare part is the default key's value."""
    result = {}
    default_key = next((k for k, s in fmt.items() if s.get("default_key")), None)
    for part in text.split(","):
        if re.fullmatch(r"\s*", part):
            continue
        match = re.fullmatch(r"([^=]+)=(.+)", part, re.DOTALL)
        if match:
            key, value = match.group(1), match.group(2)
            if key in result:
                raise ValueError(f"duplicate key in comma-separated list property: {key}\n")
            if key not in fmt:
                raise ValueError(f"invalid key in comma-separated list property: {key}\n")
        elif "=" not in part:
            if not default_key:
                raise ValueError("value without key, but schema does not define a default key\n")
            if default_key in result:
                raise ValueError(f"duplicate key in comma-separated list property: {default_key}\n")
            key, value = default_key, part
        else:
            raise ValueError("missing key in comma-separated list property\n")
        _val, err = check_value(fmt[key], value)
        if err:
            raise ValueError(f"{key}: {err}\n")
        result[key] = value
    for key, spec in fmt.items():
        if not spec.get("optional") and not spec.get("default_key") and key not in result:
            raise ValueError(f"{key}: property is missing and it is not optional\n")
    return result


def validate(props, params, path_params):
    """Validate request parameters like PVE's RESTHandler; returns typed values. Raises ParamError."""
    errors = {}
    out = {}
    merged = dict(params)
    for key, value in path_params.items():
        merged[key] = [value]
    for key, values in merged.items():
        spec = props.get(key)
        if spec is None:
            errors[key] = "property is not defined in schema and the schema does not allow additional properties"
            continue
        if spec.get("type") == "array":
            items = []
            for raw in values:
                val, err = check_value(spec["items"], raw)
                if err:
                    errors[key] = err
                    break
                items.append(val)
            out[key] = items
            continue
        if len(values) > 1:
            errors[key] = "duplicate parameter (not allowed)"
            continue
        val, err = check_value(spec, values[0])
        if err:
            errors[key] = err
        else:
            out[key] = val
    for key, spec in props.items():
        if not spec.get("optional") and key not in merged:
            errors[key] = "property is missing and it is not optional"
    if errors:
        raise ParamError(errors)
    return out
