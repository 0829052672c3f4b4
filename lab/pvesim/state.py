"""In-memory cluster model of pvesim: hardware, PCI mappings, VMs with pending config, UPID tasks.

Messages follow qemu-server / pve-manager / pve-guest-common wording (see ../shared/reference/proxmox.md), because
clients match on them. All public methods take the lock; the HTTP layer only parses, validates and formats.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import threading
import time

from . import schema

DEFAULT_BLACKLIST = "05;06;0b"
DEFAULT_ROMFILES = ("efi-e1000.rom", "efi-virtio.rom", "pxe-e1000.rom", "pxe-virtio.rom", "vgabios-stdvga.bin")
# Options PVE applies at once even on a running VM ($fast_plug_option in qemu-server); the default hotplug
# set (network,disk,usb) is treated as hot-pluggable too. Everything else (hostpci, machine, memory ...) goes pending.
FAST_PLUG = {"name", "description", "onboot", "protection", "tags", "lock", "hookscript", "vmstatestorage", "startup"}
HOTPLUG_PREFIXES = ("net", "scsi", "virtio", "ide", "sata", "usb")


class PveError(Exception):
    """A plain ``die`` in PVE: HTTP status (500 unless told) with the message as reason phrase."""

    def __init__(self, message, status=500):
        super().__init__(message)
        self.message = message
        self.status = status


def sha1(text):
    return hashlib.sha1(text.encode()).hexdigest()


def norm_pci(pciid):
    """Add the default domain like PVE does for hostpci/mdev ids (``01:00.0`` -> ``0000:01:00.0``)."""
    pciid = pciid.lower()
    if re.match(r"^[0-9a-f]{2}:[0-9a-f]{2}", pciid):
        pciid = "0000:" + pciid
    return pciid


def strip0x(value):
    return value[2:] if value and value.lower().startswith("0x") else value


class Sim:
    """The whole simulated cluster."""

    def __init__(self, fixture, task_seconds=0.0):
        if isinstance(fixture, (str, os.PathLike)):
            with open(fixture, encoding="utf-8") as handle:
                fixture = json.load(handle)
        fixture = copy.deepcopy(fixture)
        self.lock = threading.RLock()
        self.task_seconds = float(fixture.get("task_seconds", task_seconds))
        self.version = fixture.get("version", {"version": "9.1.1", "release": "9.1", "repoid": "42ee0c12a1d9f42a"})
        parts = re.match(r"(\d+)(?:\.(\d+))?", str(self.version.get("version", "9.1")))
        self.release = (int(parts.group(1)), int(parts.group(2) or 0))  # what the schema flavour and checks follow
        self.major = self.release[0]
        self.users = fixture.get("users", {"root@pam": {"password": "pvesim", "tokens": {"ansible": "pvesim-token"}}})
        self.nodes = {}
        for name, node in fixture["nodes"].items():
            devices = {}
            for dev in node.get("pci", []):
                dev = dict(dev)
                dev["id"] = norm_pci(dev["id"])
                devices[dev["id"]] = dev
            self.nodes[name] = {
                "status": node.get("status", "online"),
                "iommu": bool(node.get("iommu", True)),
                "maxcpu": node.get("maxcpu", 64),
                "maxmem": node.get("maxmem", 512 * 1024 ** 3),
                "pci": devices,
                # files in /usr/share/kvm (pve-qemu-kvm ships the option ROMs of its emulated NICs; a GPU ROM is
                # copied there by hand)
                "romfiles": list(node.get("romfiles", DEFAULT_ROMFILES)),
            }
        self._link_sriov()
        self.mappings = {}
        for mid, entry in fixture.get("mappings", {}).items():
            self.mappings[mid] = {k: v for k, v in entry.items() if v is not None}
        self.vms = {}
        for vmid, vm in fixture.get("vms", {}).items():
            self.vms[int(vmid)] = {
                "node": vm["node"],
                "status": "stopped",
                "conf": {k: str(v) for k, v in vm.get("config", {}).items()},
                "pending": {k: str(v) for k, v in vm.get("pending", {}).items()},
                "pending_delete": list(vm.get("pending_delete", [])),
                "devices": [],
                "mdevs": [],
                "started": None,
                # HA resource vm:<id> (ha-manager): the requested state and the CRM's service state
                "ha": ({"state": vm["ha"].get("state", "started"), "service": None, "due": None}
                       if vm.get("ha") is not None else None),
            }
        # How long the HA stack (CRM + LRM rounds, ~10 s each on a real cluster) takes to act on a queued request.
        self.ha_seconds = float(fixture.get("ha_seconds", 1.0))
        self.tasks = {}
        self.task_log = {}
        self.pid = 4000
        self.stats = {"requests": 0, "writes": 0, "by_method": {}, "by_route": {}}
        # Running VMs from the fixture claim their devices as a real start would; an invalid one fails loudly.
        for vmid, vm in fixture.get("vms", {}).items():
            if vm.get("status") == "running":
                try:
                    self._do_start(int(vmid), apply_pending=False)
                except PveError as exc:
                    raise ValueError(f"fixture: VM {vmid} cannot be running: {exc.message.strip()}") from None
        for vm in self.vms.values():
            if vm["ha"] is not None:
                vm["ha"]["service"] = "started" if vm["status"] == "running" else "stopped"

    # ---------------------------------------------------------------- hardware
    def _link_sriov(self):
        for node in self.nodes.values():
            for dev in node["pci"].values():
                if dev.get("physfn"):
                    dev["physfn"] = norm_pci(dev["physfn"])
                    parent = node["pci"].get(dev["physfn"])
                    if parent is not None:
                        vfs = parent.setdefault("virtfns", [])
                        if isinstance(vfs, list) and dev["id"] not in vfs:
                            vfs.append(dev["id"])
                    if parent is not None and parent.get("vgpu_types"):
                        dev.setdefault("nvidia", 1)
                if dev.get("mdev_types") or dev.get("nvidia"):
                    dev["mdev"] = 1

    def node(self, name):
        node = self.nodes.get(name)
        if node is None:
            raise PveError(f"hostname lookup '{name}' failed - failed to get address info for: {name}: Name or service not known")
        return node

    def require_reachable(self, name):
        """A call for another node is proxied to it (pve-http-server AnyEvent.pm proxy_request, AnyEvent::HTTP);
        for a node that is down the connection fails and the client gets AnyEvent::HTTP's pseudo status 595."""
        node = self.node(name)
        if node["status"] != "online":
            raise PveError("No route to host", 595)

    def device(self, node, pciid):
        pciid = norm_pci(pciid)
        devices = self.nodes[node]["pci"]
        if pciid in devices:
            return devices[pciid]
        if re.match(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}$", pciid):
            return devices.get(pciid + ".0")
        return None

    def functions(self, node, pciid):
        """All functions a hostpci/map path addresses (no function = the whole multifunction device)."""
        pciid = norm_pci(pciid)
        devices = self.nodes[node]["pci"]
        if "." in pciid.split(":")[-1]:
            return [pciid] if pciid in devices else []
        return sorted(d for d in devices if d.rsplit(".", 1)[0] == pciid)

    def _users_of(self, node):
        used = {}
        for vmid, vm in self.vms.items():
            if vm["node"] == node and vm["status"] == "running":
                for dev in vm["devices"]:
                    used[dev] = vmid
        return used

    def _mdev_use(self, node, extra=()):
        """{(pf or device id): {type: count}} of mediated devices in use on a node (plus ``extra`` being started)."""
        use = {}
        instances = [m for vm in self.vms.values() if vm["node"] == node and vm["status"] == "running" for m in vm["mdevs"]]
        for dev, typ in instances + list(extra):
            owner = self.nodes[node]["pci"][dev].get("physfn") or dev
            use.setdefault(owner, {}).setdefault(typ, 0)
            use[owner][typ] += 1
        return use

    def mdev_types(self, node, pciid, extra=()):
        """What ``hardware/pci/<id>/mdev`` lists for one device (currently creatable types)."""
        dev = self.device(node, pciid)
        if dev is None:
            return []
        used_dev = self._users_of(node)
        use = self._mdev_use(node, extra)
        if dev.get("nvidia") and dev.get("physfn"):
            # NVIDIA >= 6.8 interface (qemu-server PCI/Mdev.pm get_mdev_types): the types the PF can still create,
            # available always 1. Before qemu-server 9.1.11 they came from the VF's own nvidia/creatable_vgpu_types,
            # empty while the VF holds a vGPU; from then on from NVML for the parent GPU whatever the VF's state
            # (commit 008475ca).
            if dev["id"] in used_dev and not schema.has_feature(self.release, "vf-types-from-parent"):
                return []
            parent = self.nodes[node]["pci"].get(dev["physfn"], {})
            in_use = use.get(dev["physfn"], {})
            out = []
            for typ in parent.get("vgpu_types", []):
                others = [t for t, c in in_use.items() if c and t != typ["type"]]
                if others or in_use.get(typ["type"], 0) >= typ.get("max", 1):
                    continue
                out.append({"type": typ["type"], "available": 1, "name": typ["name"], "description": typ.get("description", "")})
            return sorted(out, key=lambda t: t["type"])
        out = []
        in_use = use.get(dev["id"], {})
        for typ in dev.get("mdev_types", []):
            others = [t for t, c in in_use.items() if c and t != typ["type"]]
            avail = 0 if others else max(0, typ.get("max", 1) - in_use.get(typ["type"], 0))
            item = {"type": typ["type"], "available": avail, "description": typ.get("description", "")}
            if typ.get("name"):
                item["name"] = typ["name"]
            out.append(item)
        return sorted(out, key=lambda t: t["type"])

    def pci_scan(self, node, blacklist=DEFAULT_BLACKLIST, verbose=1):
        with self.lock:
            self.node(node)
            prefixes = [p for p in re.split(r"[;,\s]+", blacklist or "") if p]
            out = []
            for pciid in sorted(self.nodes[node]["pci"]):
                dev = self.nodes[node]["pci"][pciid]
                if any(dev["class"].lower().startswith("0x" + p.lower()) for p in prefixes):
                    continue
                item = {"id": pciid, "class": dev["class"], "vendor": dev["vendor"], "device": dev["device"],
                        "iommugroup": dev.get("iommugroup", -1) if self.nodes[node]["iommu"] else -1}
                for flag in ("mdev", "nvidia"):
                    if dev.get(flag):
                        item[flag] = 1
                if verbose:
                    for key in ("subsystem_vendor", "subsystem_device", "vendor_name", "device_name",
                                "subsystem_vendor_name", "subsystem_device_name", "physfn"):
                        if dev.get(key) is not None:
                            item[key] = dev[key]
                    if dev.get("virtfns"):
                        item["virtfns"] = {f"virtfn{i}": vf for i, vf in enumerate(dev["virtfns"])}
                out.append(item)
            return out

    def mdev_scan(self, node, ident):
        with self.lock:
            self.node(node)
            if re.match(r"^(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F]$", ident):
                return self.mdev_types(node, ident)
            entry = self.mappings.get(ident)
            if entry is None:
                raise PveError(f"mapping '{ident}' not found")
            types = {}
            for item in entry.get("map", []):
                parsed = schema.parse_property_string(schema.MAP_FMT, item)
                if parsed["node"] != node or ";" in parsed["path"]:
                    continue
                for typ in self.mdev_types(node, parsed["path"]):
                    types.setdefault(typ["type"], typ)
            return [types[t] for t in sorted(types)]

    # ---------------------------------------------------------------- mappings
    def _mapping_text(self):
        lines = []
        for mid, entry in self.mappings.items():
            lines.append(mid)
            for item in entry.get("map", []):
                lines.append(f"\tmap {item}")
            for key in ("description", "mdev", "live-migration-capable"):
                if key in entry:
                    lines.append(f"\t{key} {entry[key]}")
            lines.append("")
        return "\n".join(lines)

    def mapping_digest(self):
        return sha1(self._mapping_text())

    def _mapping_out(self, mid, entry, digest):
        out = {"id": mid, "type": "pci", "map": list(entry.get("map", [])), "digest": digest}
        for key in ("description", "mdev", "live-migration-capable"):
            if key in entry:
                out[key] = entry[key]
        return out

    def mapping_list(self, check_node=None):
        with self.lock:
            if check_node is not None:
                self.node(check_node)
            digest = self.mapping_digest()
            out = []
            for mid in sorted(self.mappings):
                item = self._mapping_out(mid, self.mappings[mid], digest)
                if check_node is not None:
                    item["checks"] = self._checks(mid, check_node)
                out.append(item)
            return out

    def _checks(self, mid, node):
        entries = self._map_entries(mid, node)
        if not entries:
            return [{"severity": "warning", "message": f"No mapping for node {node}."}]
        checks = []
        for parsed in entries:
            try:
                self.assert_valid(mid, parsed)
            except PveError as exc:
                checks.append({"severity": "error", "message": f"Invalid configuration: {exc.message.strip()}"})
        return checks

    def _map_entries(self, mid, node):
        return [p for p in (schema.parse_property_string(schema.MAP_FMT, m) for m in self.mappings[mid].get("map", []))
                if p["node"] == node]

    def assert_valid(self, mid, parsed):
        """PVE::Mapping::PCI::assert_valid (pve-guest-common @ 4a8f6cbf), called by qemu-server PCI.pm parse_hostpci
        with the mapping's global config: every property the hardware has (vendor:device id, subsystem id, the IOMMU
        group of the first path; from 8.4 (libpve-guest-common-perl 5.1.7, commit 57cd454) also mdev) must be
        configured, none it lacks may be, and values compare as strings with '0x' removed (so case matters)."""
        node = parsed["node"]
        cfg = self.mappings.get(mid, {})
        for index, path in enumerate(parsed["path"].split(";")):
            if not re.search(r"\.[a-f0-9]", path, re.I):
                path += ".0"  # whole device: its function 0 must exist
            dev = self.nodes.get(node, {}).get("pci", {}).get(norm_pci(path))
            if dev is None:
                raise PveError(f"pci device '{path}' not found\n")
            # SysFSTools::pci_device_info($path, 1): iommugroup only with an iommu_group link, mdev 1 with
            # mdev_supported_types or the nvidia/ directory.
            expected = {"id": f"{strip0x(dev['vendor'])}:{strip0x(dev['device'])}",
                        "iommugroup": str(dev["iommugroup"]) if self.nodes[node]["iommu"] and dev.get("iommugroup", -1) >= 0 else None,
                        "subsystem-id": None}
            if dev.get("subsystem_vendor") is not None and dev.get("subsystem_device") is not None:
                expected["subsystem-id"] = f"{strip0x(dev['subsystem_vendor'])}:{strip0x(dev['subsystem_device'])}"
            configured = {k: parsed.get(k) for k in ("id", "iommugroup", "subsystem-id")}
            if schema.has_feature(self.release, "live-migration-capable"):  # same release as the mdev check
                expected["mdev"] = "1" if dev.get("mdev") else "0"
                configured["mdev"] = "1" if schema.parse_boolean(cfg.get("mdev", 0) or 0) else "0"
            for prop in sorted(expected):
                if prop == "iommugroup" and index > 0:
                    continue
                want, have = expected[prop], configured[prop]
                if want is None and have is None:
                    continue
                if want is not None and have is None:
                    raise PveError(f"missing expected property '{prop}' for device '{path}'\n")
                if want is None and have is not None:
                    raise PveError(f"unexpected property '{prop}' configured for device '{path}'\n")
                want, have = str(want).replace("0x", ""), str(have).replace("0x", "")
                if want != have:
                    raise PveError(f"'{prop}' does not match for '{mid}' ({want} != {have})\n")

    def mapping_get(self, mid):
        with self.lock:
            entry = self.mappings.get(mid)
            if entry is None:
                raise PveError(f"mapping '{mid}' not found")
            out = self._mapping_out(mid, entry, self.mapping_digest())
            del out["id"]
            return out

    def mapping_create(self, params):
        with self.lock:
            mid = params["id"]
            if mid in self.mappings:
                raise PveError(f"pci ID '{mid}' already defined\n")
            entry = {"map": list(params["map"])}
            for key in ("description", "mdev", "live-migration-capable"):
                if key in params:
                    entry[key] = params[key]
            self.mappings[mid] = entry

    def mapping_update(self, mid, params):
        with self.lock:
            entry = self.mappings.get(mid)
            if entry is None:
                raise PveError(f"pci ID '{mid}' does not exist\n")
            if params.get("digest") and params["digest"] != self.mapping_digest():
                raise PveError("detected modified configuration - file changed by other user? Try again.\n")
            deletes = schema.split_list(params.get("delete", ""))
            for key in ("map", "description", "mdev", "live-migration-capable"):
                if key in params and key in deletes:
                    raise schema.ParamError({"delete": f"you can't use '-{key}' and -delete {key}' at the same time"})
            for key in deletes:
                if key == "map":
                    raise schema.ParamError({"delete": "cannot delete required property 'map'"})
                entry.pop(key, None)
            for key in ("map", "description", "mdev", "live-migration-capable"):
                if key in params:
                    entry[key] = list(params[key]) if key == "map" else params[key]

    def mapping_delete(self, mid):
        with self.lock:
            self.mappings.pop(mid, None)

    # ---------------------------------------------------------------- VMs
    # ---------------------------------------------------------------- HA (pve-ha-manager)
    def _ha_tick(self):
        """Carry out the HA requests whose time has come, as the CRM/LRM rounds of pve-ha-manager do after a start or
        stop only queued one (src/PVE/HA/Manager.pm next_state_started: crm command 'stop' -> request_stop and the
        resource's state set to 'stopped'; next_state_stopped: state 'started' -> request_start -> started).
        A start that fails puts the service into 'error' (the relocation policy's retries on other nodes are not
        modelled: each node of a real cluster would fail the same check)."""
        now = time.monotonic()
        for vmid, vm in self.vms.items():
            ha = vm["ha"]
            if ha is None or ha["due"] is None or now < ha["due"]:
                continue
            ha["due"] = None
            if ha["service"] == "request_stop":
                self._do_stop(vm)
                ha["service"] = "stopped"
            elif ha["service"] == "request_start":
                try:
                    if vm["status"] != "running":
                        self._do_start(vmid)
                    ha["service"] = "started"
                except PveError as exc:
                    ha["service"] = "error"
                    ha["error"] = exc.message.strip()

    def _ha_request(self, vmid, vm, action, user):
        """qemu-server API2/Qemu.pm vm_start / vm_shutdown / vm_stop for a VM that PVE::HA::Config::vm_is_ha_managed:
        the worker ('hastart'/'hastop') only runs ha-manager ('set vm:<id> --state started' / 'crm-command stop
        vm:<id> <timeout>') and ends at once; the VM's state changes when HA acts on it."""
        ha = vm["ha"]
        if action == "start":
            ha["state"] = "started"
            if ha["service"] in ("stopped", "request_stop", "error"):
                ha["service"] = "request_start"
                ha["due"] = time.monotonic() + self.ha_seconds
                ha.pop("error", None)
            return self.new_task(vm["node"], "hastart", str(vmid), user,
                                 log=[f"Requesting HA start for VM {vmid}"])
        ha["state"] = "stopped"
        if ha["service"] in ("started", "request_start"):
            ha["service"] = "request_stop"
            ha["due"] = time.monotonic() + self.ha_seconds
        return self.new_task(vm["node"], "hastop", str(vmid), user, log=[f"Requesting HA stop for VM {vmid}"])

    def vm(self, node, vmid):
        self._ha_tick()
        self.node(node)
        vm = self.vms.get(vmid)
        if vm is None or vm["node"] != node:
            raise PveError(f"Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist")
        return vm

    @staticmethod
    def _conf_text(vm):
        lines = [f"{k}: {vm['conf'][k]}" for k in sorted(vm["conf"])]
        if vm["pending"] or vm["pending_delete"]:
            lines.append("")
            lines.append("[PENDING]")
            if vm["pending_delete"]:
                lines.append("delete: " + ",".join(vm["pending_delete"]))
            lines.extend(f"{k}: {vm['pending'][k]}" for k in sorted(vm["pending"]))
        return "\n".join(lines) + "\n"

    def vm_digest(self, vm):
        return sha1(self._conf_text(vm))

    @staticmethod
    def _typed(key, value):
        spec = schema.EXPANDED[("/nodes/{node}/qemu/{vmid}/config", "PUT")].get(key, {})
        if spec.get("type") in ("integer", "boolean"):
            try:
                return int(value)
            except ValueError:
                return value
        if spec.get("type") == "number":
            num = float(value)
            return int(num) if num.is_integer() else num
        return value

    @staticmethod
    def effective(vm):
        conf = dict(vm["conf"])
        conf.update(vm["pending"])
        for key in vm["pending_delete"]:
            conf.pop(key, None)
        return conf

    def vm_config(self, node, vmid, current=False):
        with self.lock:
            vm = self.vm(node, vmid)
            conf = dict(vm["conf"]) if current else self.effective(vm)
            out = {k: self._typed(k, v) for k, v in conf.items()}
            out["digest"] = self.vm_digest(vm)
            return out

    def vm_pending(self, node, vmid):
        with self.lock:
            vm = self.vm(node, vmid)
            out = []
            for key in sorted(set(vm["conf"]) | set(vm["pending"]) | set(vm["pending_delete"])):
                item = {"key": key}
                if key in vm["conf"]:
                    item["value"] = self._typed(key, vm["conf"][key])
                if key in vm["pending"]:
                    item["pending"] = self._typed(key, vm["pending"][key])
                if key in vm["pending_delete"]:
                    item["delete"] = 1
                out.append(item)
            return out

    def _hostpci_perm(self, user, privs, vmid, key, value):
        """check_hostpci_perm (qemu-server API2/Qemu.pm): root@pam passes; raw host devices are root@pam's alone
        (an API token is 'root@pam!<id>', not root@pam); mappings need Mapping.Use on /mapping/pci/<id> and
        VM.Config.HWType; a romfile is root@pam's alone. privs: httpd.Privs of the caller (None = all privileges)."""
        if user == "root@pam":
            return
        dev = schema.parse_property_string(schema.hostpci_fmt(self.release), value)
        if dev.get("host"):
            raise PveError(f"only root can set '{key}' config for non-mapped devices\n")
        if dev.get("mapping"):
            if privs is not None and not privs.has(f"/mapping/pci/{dev['mapping']}", "Mapping.Use"):
                raise PveError(f"Permission check failed (/mapping/pci/{dev['mapping']}, Mapping.Use)", 403)
            if privs is not None and not privs.has(f"/vms/{vmid}", "VM.Config.HWType"):
                raise PveError(f"Permission check failed (/vms/{vmid}, VM.Config.HWType)", 403)
        else:
            raise PveError("either 'host' or 'mapping' must be set.\n")
        if dev.get("romfile") is not None:
            raise schema.ParamError({key: "only root@pam can set 'romfile' option"})

    def vm_update(self, node, vmid, params, user, privs=None):
        """update_vm_api's $updatefn (qemu-server API2/Qemu.pm); returns warnings. Raises PveError/ParamError.

        As upstream, deletes are handled first and each is written before the next option is checked, then the sets,
        each checked (old and new value) and written in turn: a refusal part-way leaves the earlier changes in place."""
        with self.lock:
            vm = self.vm(node, vmid)
            meta = {"node", "vmid", "delete", "revert", "digest", "skiplock", "background_delay"}
            sets = {k: v for k, v in params.items() if k not in meta}
            deletes = schema.split_list(params.get("delete", ""))
            reverts = schema.split_list(params.get("revert", ""))
            for key in deletes:
                if key in sets:
                    raise schema.ParamError({"delete": f"you can't use '-{key}' and -delete {key}' at the same time"})
                if key in reverts:
                    raise schema.ParamError({"delete": f"you can't use '-{key}' and -revert {key}' at the same time"})
            if not sets and not deletes and not reverts:
                raise PveError("no options specified\n")
            if params.get("digest") and params["digest"] != self.vm_digest(vm):
                raise PveError("detected modified configuration - file changed by other user? Try again.\n")
            if vm["conf"].get("lock") and not params.get("skiplock"):
                raise PveError(f"VM is locked ({vm['conf']['lock']})\n")
            warnings = []
            for key in reverts:
                vm["pending"].pop(key, None)
                if key in vm["pending_delete"]:
                    vm["pending_delete"].remove(key)
            running = vm["status"] == "running"
            for key in deletes:
                if key not in vm["conf"] and key not in vm["pending"]:
                    warnings.append(f"cannot delete '{key}' - not set in current configuration!")
                    continue
                if re.match(r"^hostpci\d+$", key):
                    self._hostpci_perm(user, privs, vmid, key, vm["conf"].get(key, vm["pending"].get(key)))
                vm["pending"].pop(key, None)
                if key not in vm["conf"]:
                    continue
                if running and not self._hotpluggable(key):
                    if key not in vm["pending_delete"]:
                        vm["pending_delete"].append(key)
                else:
                    del vm["conf"][key]
                    if key in vm["pending_delete"]:
                        vm["pending_delete"].remove(key)
            for key, value in sorted(sets.items()):
                value = str(value)
                if vm["pending"].get(key) == value:
                    continue  # "skip if nothing changed", before any check
                if re.match(r"^hostpci\d+$", key):
                    if vm["conf"].get(key):
                        self._hostpci_perm(user, privs, vmid, key, vm["conf"][key])
                    self._hostpci_perm(user, privs, vmid, key, value)
                if key in vm["pending_delete"]:
                    vm["pending_delete"].remove(key)
                if running and not self._hotpluggable(key):
                    if vm["conf"].get(key) == value:
                        vm["pending"].pop(key, None)
                    else:
                        vm["pending"][key] = value
                else:
                    vm["conf"][key] = value
                    vm["pending"].pop(key, None)
            return warnings

    @staticmethod
    def _hotpluggable(key):
        if key in FAST_PLUG:
            return True
        base = re.sub(r"\d+$", "", key)
        return base in HOTPLUG_PREFIXES and key != base

    # ---------------------------------------------------------------- tasks
    def new_task(self, node, ttype, ident, user, exitstatus="OK", log=None):
        with self.lock:
            self.pid += 1
            now = int(time.time())
            pstart = int(time.monotonic() * 100) & 0xFFFFFFFF
            upid = f"UPID:{node}:{self.pid:08X}:{pstart:08X}:{now:08X}:{ttype}:{ident}:{user}:"
            self.tasks[upid] = {"upid": upid, "node": node, "pid": self.pid, "pstart": pstart, "starttime": now,
                                "type": ttype, "id": ident, "user": user, "exitstatus": exitstatus,
                                "end": time.monotonic() + self.task_seconds}
            self.task_log[upid] = list(log or []) + ([f"TASK ERROR: {exitstatus}"] if exitstatus != "OK" else ["TASK OK"])
            return upid

    def task_status(self, node, upid):
        with self.lock:
            task = self.tasks.get(upid)
            if task is None or task["node"] != node:
                raise PveError(f"unable to parse worker upid '{upid}'\n" if not upid.startswith("UPID:") else "no such task\n")
            out = {k: task[k] for k in ("upid", "node", "pid", "pstart", "starttime", "type", "id", "user")}
            if time.monotonic() < task["end"]:
                out["status"] = "running"
            else:
                out["status"] = "stopped"
                out["exitstatus"] = task["exitstatus"]
            return out

    def task_log_lines(self, node, upid):
        with self.lock:
            self.task_status(node, upid)
            return [{"n": i + 1, "t": line} for i, line in enumerate(self.task_log[upid])]

    # ---------------------------------------------------------------- power
    def vm_status(self, node, vmid):
        with self.lock:
            vm = self.vm(node, vmid)
            conf = vm["conf"]
            mem = int(re.match(r"(?:current=)?(\d+)", conf.get("memory", "512")).group(1)) * 1024 ** 2
            running = vm["status"] == "running"
            # PVE::HA::Config::get_service_status: managed, and the CRM's service state of vm:<id>
            ha = {"managed": 1, "state": vm["ha"]["service"]} if vm["ha"] is not None else {"managed": 0}
            out = {"vmid": vmid, "status": vm["status"], "qmpstatus": vm["status"], "ha": ha,
                   "cpus": int(conf.get("cores", 1)) * int(conf.get("sockets", 1)), "maxmem": mem,
                   "mem": mem // 2 if running else 0, "uptime": int(time.time() - vm["started"]) if running else 0,
                   "maxdisk": 0, "cpu": 0, "diskread": 0, "diskwrite": 0, "netin": 0, "netout": 0}
            if "name" in conf:
                out["name"] = conf["name"]
            if "tags" in conf:
                out["tags"] = conf["tags"]
            if running:
                out["pid"] = 10000 + vmid
                out["running-machine"] = "pc-q35-9.2+pve1" if self._is_q35(conf) else "pc-i440fx-9.2+pve1"
                out["running-qemu"] = "9.2.0"
            if conf.get("lock"):
                out["lock"] = conf["lock"]
            return out

    def vm_list(self, node):
        with self.lock:
            self.node(node)
            out = []
            for vmid in sorted(self.vms):
                if self.vms[vmid]["node"] == node:
                    item = self.vm_status(node, vmid)
                    item.pop("ha", None)
                    out.append(item)
            return out

    def resources(self, rtype=None):
        with self.lock:
            out = []
            if rtype in (None, "vm"):
                for vmid in sorted(self.vms):
                    vm = self.vms[vmid]
                    if self.nodes[vm["node"]]["status"] != "online":
                        # API2Tools::extract_vm_stats: no fresh RRD data from a node that is down
                        out.append({"id": f"qemu/{vmid}", "vmid": vmid, "type": "qemu", "node": vm["node"], "status": "unknown"})
                        continue
                    item = self.vm_status(vm["node"], vmid)
                    item.pop("ha", None)
                    item.update({"id": f"qemu/{vmid}", "type": "qemu", "node": vm["node"], "template": 0})
                    out.append(item)
            if rtype in (None, "node"):
                for name, node in sorted(self.nodes.items()):
                    out.append({"id": f"node/{name}", "type": "node", "node": name, "status": node["status"],
                                "maxcpu": node["maxcpu"], "maxmem": node["maxmem"]})
            return out

    @staticmethod
    def _is_q35(conf):
        machine = conf.get("machine", "")
        mtype = schema.parse_property_string(schema.MACHINE_FMT, machine).get("type", "") if machine else ""
        return "q35" in mtype

    def _apply_pending(self, vm):
        vm["conf"].update(vm["pending"])
        for key in vm["pending_delete"]:
            vm["conf"].pop(key, None)
        vm["pending"] = {}
        vm["pending_delete"] = []

    def _choose_devices(self, vmid, vm):
        """parse_hostpci_devices + choose_hostpci_devices of qemu-server: returns (devices, mdevs) or raises."""
        node = vm["node"]
        conf = vm["conf"]
        q35 = self._is_q35(conf)
        used = self._users_of(node)
        mdev_holders = self._mdev_holders(node)
        claimed = {}
        mdevs = []
        keys = sorted((k for k in conf if re.match(r"^hostpci\d+$", k)), key=lambda k: int(k[7:]))
        if keys and not self.nodes[node]["iommu"]:
            raise PveError("cannot prepare PCI pass-through, IOMMU not present\n")
        for key in keys:
            dev = schema.parse_property_string(schema.HOSTPCI_FMT, conf[key])
            if dev.get("host") and dev.get("mapping"):
                raise PveError("Cannot set both 'host' and 'mapping'.\n")
            if not dev.get("host") and not dev.get("mapping"):
                raise PveError("Either 'host' or 'mapping' must be set.\n")
            if schema.parse_boolean(dev.get("pcie", "0")) and not q35:
                raise PveError("q35 machine model is not enabled")
            # qemu-server PCI.pm parse_hostpci: each map entry of the node is one alternative (a pool), and the
            # ';'-separated paths of an entry, like those of a host= value, are ONE alternative whose functions all go
            # to the VM as one multifunction device (SysFSTools::lspci of each part); mdev on more than one function dies.
            alternatives = []
            if dev.get("mapping"):
                mid = dev["mapping"]
                if mid not in self.mappings or not self._map_entries(mid, node):
                    raise PveError(f"PCI device mapping not found for '{mid}'\n")
                for parsed in self._map_entries(mid, node):
                    try:
                        self.assert_valid(mid, parsed)
                    except PveError as exc:
                        raise PveError(f"PCI device mapping invalid (hardware probably changed): {exc.message}") from None
                    alternatives.append(parsed["path"].split(";"))
            else:
                alternatives = [dev["host"].split(";")]
            mdev = dev.get("mdev")
            candidates = []
            for alt in alternatives:
                funcs = []
                for part in alt:
                    found = self.functions(node, part)
                    if not found:
                        raise PveError(f"no PCI device found for '{part}'\n")
                    funcs.extend(found)
                if mdev and len(funcs) > 1:
                    raise PveError("cannot use mediated device with multifunction device\n")
                candidates.append(funcs)
            chosen, reason = None, None
            for funcs in candidates:
                mine = [f for f in funcs if f in claimed]
                if mine and len(candidates) == 1:
                    # choose_hostpci_devices: $add_used_device dies for a function this VM was already given
                    raise PveError(f"device '{mine[0]}' assigned more than once\n")
                taken = dict(used, **claimed)
                holders = [(f, self._holder(node, f, taken, mdev_holders, whole=not mdev)) for f in funcs]
                holders = [(f, h) for f, h in holders if h is not None]
                if holders:
                    reason = f"PCI device '{holders[0][0]}' already in use by VMID '{holders[0][1]}'\n"
                    continue
                if mdev:
                    avail = {t["type"]: t["available"] for t in self.mdev_types(node, funcs[0], extra=mdevs)}
                    if not avail.get(mdev):
                        reason = f"mediated device type '{mdev}' is not available on '{funcs[0]}'\n"
                        continue
                chosen = funcs
                break
            if chosen is None:
                raise PveError(reason if len(candidates) == 1 else f"could not find a free device for '{key}'\n")
            romfile = dev.get("romfile")
            if romfile and romfile not in self.nodes[node]["romfiles"]:
                # qemu-server PCI.pm print_hostpci_devices passes romfile=/usr/share/kvm/<romfile>; QEMU's vfio-pci
                # (hw/pci/pci.c pci_add_option_rom) fails the start when the file is not there.
                raise PveError(f"start failed: QEMU exited with code 1 (kvm: -device vfio-pci,host={chosen[0]},"
                               f"romfile=/usr/share/kvm/{romfile}: failed to find romfile \"/usr/share/kvm/{romfile}\")\n")
            if mdev:
                mdevs.append((chosen[0], mdev))
            # NVIDIA VFs are passed through whole; classic mdevs share the parent device.
            if not mdev or self.nodes[node]["pci"][chosen[0]].get("physfn"):
                for func in chosen:
                    claimed[func] = vmid
            else:
                mdev_holders.setdefault(chosen[0], vmid)
        self._check_groups(node, vmid, claimed, used)
        return sorted(claimed), mdevs

    def _mdev_holders(self, node):
        """{device: vmid} for classic mdev instances (the parent stays with the host driver, shared)."""
        out = {}
        for vmid, vm in self.vms.items():
            if vm["node"] == node and vm["status"] == "running":
                for dev, _typ in vm["mdevs"]:
                    if not self.nodes[node]["pci"][dev].get("physfn"):
                        out.setdefault(dev, vmid)
        return out

    def _holder(self, node, func, taken, mdev_holders, whole):
        """VMID that holds func, its PF or one of its VFs; for whole-device use also a VM with mdevs on it."""
        pci = self.nodes[node]["pci"]
        related = [func] + ([pci[func]["physfn"]] if pci[func].get("physfn") else []) + list(pci[func].get("virtfns") or [])
        for item in related:
            if item in taken:
                return taken[item]
        if whole:
            for item in related:
                if item in mdev_holders:
                    return mdev_holders[item]
        return None

    def _check_groups(self, node, vmid, claimed, used):
        """VFIO refuses a group some of whose devices another VM holds (the kernel, not PVE, says so)."""
        pci = self.nodes[node]["pci"]
        for func in claimed:
            group = pci[func].get("iommugroup", -1)
            for other, owner in used.items():
                if owner != vmid and other not in claimed and group >= 0 and pci[other].get("iommugroup") == group:
                    raise PveError(f"start failed: QEMU exited with code 1 (vfio {func}: group {group} is not viable)\n")

    def _do_start(self, vmid, apply_pending=True):
        vm = self.vms[vmid]
        if vm["status"] == "running":
            raise PveError(f"VM {vmid} already running\n")
        if apply_pending:
            # PVE applies pending changes before the device checks; they stay applied if the start fails.
            self._apply_pending(vm)
        devices, mdevs = self._choose_devices(vmid, vm)
        vm["devices"] = devices
        vm["mdevs"] = mdevs
        vm["status"] = "running"
        vm["started"] = time.time()

    def vm_power(self, node, vmid, action, user):
        """start/stop/shutdown/reboot: the task carries the result, as in PVE (the POST itself succeeds)."""
        with self.lock:
            vm = self.vm(node, vmid)
            ttype = {"start": "qmstart", "stop": "qmstop", "shutdown": "qmshutdown", "reboot": "qmreboot"}[action]
            if action == "reboot" and vm["status"] != "running":
                raise PveError(f"VM {vmid} not running\n")  # checked before the worker forks
            if vm["ha"] is not None and action in ("start", "stop", "shutdown"):
                return self._ha_request(vmid, vm, action, user)
            try:
                if action == "start":
                    self._do_start(vmid)
                elif action in ("stop", "shutdown"):
                    self._do_stop(vm)  # vm_stop returns quietly when the VM is not running
                else:
                    self._do_stop(vm)
                    self._do_start(vmid)
            except PveError as exc:
                return self.new_task(node, ttype, str(vmid), user, exitstatus=exc.message.strip())
            return self.new_task(node, ttype, str(vmid), user)

    @staticmethod
    def _do_stop(vm):
        vm["status"] = "stopped"
        vm["devices"] = []
        vm["mdevs"] = []
        vm["started"] = None

    # ---------------------------------------------------------------- bookkeeping
    def count(self, method, route):
        with self.lock:
            self.stats["requests"] += 1
            self.stats["by_method"][method] = self.stats["by_method"].get(method, 0) + 1
            name = f"{method} {route}"
            self.stats["by_route"][name] = self.stats["by_route"].get(name, 0) + 1
            # logins are not writes: benchmarks count state-changing calls
            if method in ("POST", "PUT", "DELETE") and route != "/access/ticket":
                self.stats["writes"] += 1

    def reset_stats(self):
        with self.lock:
            self.stats = {"requests": 0, "writes": 0, "by_method": {}, "by_route": {}}

    def dump(self):
        """Whole state as plain JSON (for "check mode changed nothing" assertions)."""
        with self.lock:
            self._ha_tick()
            vms = {}
            for vmid, vm in sorted(self.vms.items()):
                vms[str(vmid)] = {"node": vm["node"], "status": vm["status"], "config": dict(vm["conf"]),
                                  "pending": dict(vm["pending"]), "pending_delete": list(vm["pending_delete"]),
                                  "devices": list(vm["devices"]), "mdevs": [list(m) for m in vm["mdevs"]],
                                  "digest": self.vm_digest(vm)}
                if vm["ha"] is not None:
                    vms[str(vmid)]["ha"] = {k: v for k, v in vm["ha"].items() if k != "due"}
            nodes = {}
            for name, node in self.nodes.items():
                nodes[name] = {"status": node["status"], "iommu": node["iommu"],
                               "pci": {k: dict(v) for k, v in node["pci"].items()}}
            return {"nodes": nodes, "mappings": copy.deepcopy(self.mappings), "mapping_digest": self.mapping_digest(),
                    "vms": vms, "tasks": len(self.tasks)}
