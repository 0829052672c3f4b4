# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The GPUs (hostpciN) of Proxmox VE VMs: plan one VM (reads and pre-checks, no writes), apply it, and run a batch of
VMs over one API session: every VM planned before the first write, then the writes with bounded concurrency.

The I/O goes through :class:`~._proxmox.PveClient`; the hostpci rules themselves are pure functions in ``property_strings``.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Optional

from ansible_collections.gpuops.provision.plugins.module_utils._common import batch as common_batch, bounds as common_bounds, disruption
from ansible_collections.gpuops.provision.plugins.module_utils._proxmox import property_strings, rules
from ansible_collections.gpuops.provision.plugins.module_utils._common.batch import BatchInvalid, pool_map
from ansible_collections.gpuops.provision.plugins.module_utils._proxmox.api import PveClient, PveError

# The device keys of a hostpci entry; every other key of property_strings.HOSTPCI_KEYS is an option of a gpus item.
DEVICE_KEYS = ("mapping", "host")
# Module option name (gpus[].x_vga) -> hostpci key (x-vga), from property_strings's key table, in its order.
OPTION_KEYS = {key.replace("-", "_"): key for key in property_strings.HOSTPCI_KEYS if key not in DEVICE_KEYS}
# Argument spec of each value kind of property_strings.HOSTPCI_KEYS (what property_strings._norm_value accepts for it).
_KIND_SPEC: dict[str, dict[str, Any]] = {
    "host": {"type": "str"}, "configid": {"type": "str"}, "bool": {"type": "bool"}, "romfile": {"type": "str"},
    "mdev": {"type": "str"}, "hexid": {"type": "str"}, "driver": {"type": "str", "choices": list(property_strings.DRIVERS)},
}

# Options a batch item may set for itself; the task's value is the default.
PER_VM_OPTIONS = ("exclusive", "restart", "precheck", "shutdown_timeout", "timeout", "vm_settings")


def vm_settings_spec() -> dict[str, Any]:
    """Argument spec of ``vm_settings`` (the VM settings rules.plan_vm_settings plans)."""
    return dict(type="dict", options=dict(
        machine=dict(type="str"), bios=dict(type="str", choices=["seabios", "ovmf"]), vga=dict(type="str"),
        efidisk_storage=dict(type="str")))


def gpu_options_spec() -> dict[str, dict[str, Any]]:
    """Argument spec of one ``gpus`` item: slot, the device (mapping, or host with an optional vf) and every
    hostpci option of property_strings.HOSTPCI_KEYS under its option name."""
    spec: dict[str, dict[str, Any]] = {"slot": {"type": "int"}}
    for key in DEVICE_KEYS:
        spec[key] = dict(_KIND_SPEC[property_strings.HOSTPCI_KEYS[key][0]])
    spec["vf"] = {"type": "int"}
    for opt, key in OPTION_KEYS.items():
        spec[opt] = dict(_KIND_SPEC[property_strings.HOSTPCI_KEYS[key][0]])
    return spec


class Precheck(Exception):
    """The VM's request is invalid or cannot work on its node; nothing was written."""


class Cluster:
    """Reads every VM of a run shares, made once: PCI hardware per node and the cluster's PCI mappings."""

    def __init__(self, client: PveClient) -> None:
        self.client = client
        self._lock = threading.Lock()
        self._hw: dict[str, list[dict[str, Any]]] = {}
        self._mappings: Optional[dict[str, dict[str, Any]]] = None
        self._vms: dict[str, dict[int, dict[str, Any]]] = {}

    def hw(self, node: str) -> list[dict[str, Any]]:
        with self._lock:
            if node not in self._hw:
                self._hw[node] = self.client.hardware(node)[1]
            return self._hw[node]

    def mappings(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            if self._mappings is None:
                self._mappings = {m["id"]: m for m in self.client.mappings()}
            return self._mappings

    def vms(self, node: str) -> dict[int, dict[str, Any]]:
        """{vmid: {status, config}} of the node's VMs that this session may see (PVE lists only those with VM.Audit)."""
        with self._lock:
            if node not in self._vms:
                listing = self.client.get("nodes/%s/qemu" % node) or []
                self._vms[node] = {int(v["vmid"]): {"status": v.get("status"),
                                                    "config": self.client.get("nodes/%s/qemu/%s/config" % (node, v["vmid"]))}
                                   for v in listing}
            return self._vms[node]

    def physfn(self, node: str) -> dict[str, str]:
        """{VF id: PF id} of the node's SR-IOV virtual functions."""
        return {d["id"]: d["physfn"] for d in self.hw(node) if d["physfn"]}

    def alternatives(self, node: str, entries: Mapping[int, Any]) -> dict[int, list[list[str]]]:
        """rules.entry_alternatives of each hostpci entry ({slot: value}) of a VM on ``node``."""
        out = {}
        for slot, value in entries.items():
            norm = property_strings.normalize_hostpci(value) if isinstance(value, str) else value
            out[int(slot)] = rules.entry_alternatives(norm, node, self.mappings(), self.hw(node))
        return out


def pending_hostpci(items: Optional[Iterable[Mapping[str, Any]]]) -> set[str]:
    """hostpciN keys (and the VM settings this module makes) with a pending value or a pending delete, from
    GET .../pending."""
    return set(item["key"] for item in items or []
               if (re.match(r"^hostpci\d+\Z", item.get("key", "")) or item.get("key") in rules.VM_SETTING_KEYS)
               and ("pending" in item or item.get("delete")))


class VmGpu:
    """One VM: :meth:`plan` reads and checks (no writes), :meth:`apply` writes what the plan says."""

    def __init__(self, client: PveClient, cluster: Cluster, spec: dict[str, Any], is_root: bool, who: str, check_mode: bool) -> None:
        self.client = client
        self.cluster = cluster
        self.spec = spec  # vmid, node, gpus and the PER_VM_OPTIONS, defaults filled in
        self.vmid = spec["vmid"]
        # None when no node holds the VM: plan() refuses it then, before anything uses the node.
        self.node: str = spec.get("node")  # type: ignore[assignment]
        self.is_root = is_root
        self.who = who
        self.check_mode = check_mode
        self.warnings: list[str] = []
        self.writes = 0
        # Both set by plan(); apply() and the results run only for VMs that were planned.
        self.plan_: dict[str, Any] = None  # type: ignore[assignment]
        self.config: dict[str, Any] = None  # type: ignore[assignment]
        self.running = False
        self.ha = False  # an HA resource: start/shutdown only queue a request to ha-manager
        self.pending_keys: set[str] = set()
        self.restarted = False
        self.disruptions: list[str] = []  # the restart's steps, once apply() decided on one
        self.settings: dict[str, str] = {}  # VM settings (machine, bios, vga, efidisk0) the plan writes

    @property
    def base(self) -> str:
        return "nodes/%s/qemu/%s" % (self.node, self.vmid)

    def where(self) -> str:
        return "VM %s on node %s" % (self.vmid, self.node)

    def hw(self) -> list[dict[str, Any]]:
        return self.cluster.hw(self.node)

    def _post(self, path: str, **params: Any) -> Any:
        self.writes += 1
        return self.client.post(path, **params)

    def _wait(self, upid: Optional[str], what: str, timeout: Optional[float] = None) -> Optional[dict[str, Any]]:
        return self.client.wait_task(self.node, upid, timeout=timeout or self.spec["timeout"], what=what)

    # --------------------------------------------------------------- desired entries

    def desired(self) -> list[tuple[Optional[int], dict[str, str]]]:
        out = []
        for i, g in enumerate(self.spec["gpus"]):
            label = "gpus[%d]" % i
            if bool(g.get("mapping")) == bool(g.get("host")):
                raise Precheck("%s: %s needs exactly one of mapping and host" % (self.where(), label))
            entry = {}
            if g.get("mapping"):
                if g.get("vf") is not None:
                    raise Precheck("%s: %s: vf needs host (the physical function)" % (self.where(), label))
                entry["mapping"] = g["mapping"]
            else:
                host = g["host"]
                if g.get("vf") is not None:
                    host = self.resolve_vf(host, g["vf"], label)
                entry["host"] = host
            for opt, key in OPTION_KEYS.items():
                if g.get(opt) is not None:
                    entry[key] = g[opt]
            try:
                norm = property_strings.normalize_hostpci(entry)
            except property_strings.PciError as exc:
                raise Precheck("%s: %s: %s" % (self.where(), label, exc))
            out.append((g.get("slot"), norm))
        return out

    def resolve_vf(self, pf: str, index: int, label: str) -> str:
        try:
            pf_id = property_strings.normalize_pci_address(pf, function="0")
        except property_strings.PciError as exc:
            raise Precheck("%s: %s: %s" % (self.where(), label, exc))
        dev = next((d for d in self.hw() if d["id"] == pf_id), None)
        if dev is None:
            raise Precheck("%s: %s: no PCI device %s on the node" % (self.where(), label, pf_id))
        if index < 0 or index >= len(dev["virtfns"]):
            raise Precheck("%s: %s: device %s has %d virtual function(s), vf %d does not exist"
                           % (self.where(), label, pf_id, len(dev["virtfns"]), index))
        return dev["virtfns"][index]

    # --------------------------------------------------------------- pre-checks (no writes)

    def precheck(self, config: Mapping[str, Any], entries: Iterable[tuple[int, Mapping[str, str]]], changing: Collection[int]) -> None:
        machine = str(config.get("machine") or "")
        q35 = "q35" in machine
        ovmf = str(config.get("bios") or "seabios") == "ovmf"
        by_id = {d["id"]: d for d in self.hw()}
        for slot, norm in entries:
            label = "hostpci%s (%s)" % (slot, property_strings.format_hostpci(norm))
            fail = "%s: %s: %%s; nothing changed" % (self.where(), label)
            if norm.get("pcie") == "1" and not q35:
                raise Precheck(fail % ("pcie=1 needs the q35 machine type, the VM has machine '%s'" % (machine or "pc-i440fx (default)")))
            if (norm.get("pcie") == "1" or norm.get("x-vga") == "1") and not ovmf:
                self.warnings.append("%s: %s: GPUs usually work best with bios=ovmf (the VM uses %s)"
                                     % (self.where(), label, config.get("bios") or "seabios"))
            if "mapping" in norm:
                alternatives = self.check_mapping(norm, fail, by_id)
            else:
                alternatives = [norm["host"]]
                for path in norm["host"].split(";"):
                    if property_strings.normalize_pci_address(path, function="0") not in by_id:
                        raise Precheck(fail % ("no PCI device %s on the node" % path))
            paths = [pth for alt in alternatives for pth in alt.split(";")]
            if norm.get("mdev"):
                for alt in alternatives:
                    # parse_hostpci (qemu-server PCI.pm): an alternative of more than one function cannot carry mdev
                    funcs = property_strings.path_functions(alt, by_id.values())
                    if len(funcs) > 1:
                        raise Precheck(fail % ("cannot use mediated device with multifunction device: %s is %d functions "
                                               "(%s); give one function" % (alt, len(funcs), ", ".join(funcs))))
                if slot in changing:
                    # A running VM already holds its unchanged mdev, which then no longer counts as available.
                    self.check_mdev(norm, paths, fail)
            self.check_iommu(norm, paths, fail, by_id)

    def check_mapping(self, norm: Mapping[str, str], fail: str, by_id: Mapping[str, Mapping[str, Any]]) -> list[str]:
        mid = norm["mapping"]
        mapping = self.cluster.mappings().get(mid)
        if mapping is None:
            raise Precheck(fail % ("PCI mapping '%s' does not exist" % mid))
        entries = [e for e in property_strings.normalize_map_list(mapping.get("map") or []) if e["node"] == self.node]
        if not entries:
            raise Precheck(fail % ("PCI mapping '%s' has no entry for node %s" % (mid, self.node)))
        is_mdev = bool(int(property_strings.parse_bool(mapping.get("mdev") or 0)))
        problems = []
        for e in entries:
            # mdev both ways, as PVE 8.4+ checks it at start (assert_valid gets the mapping's global mdev flag);
            # older releases start such a mapping, so it is not refused there.
            problems.extend(property_strings.check_map_entry(e, list(by_id.values()),
                                                             mdev=property_strings.mdev_checked(self.client.version(), is_mdev)))
        if problems:
            raise Precheck(fail % ("PCI mapping '%s' does not match the hardware of node %s: %s" % (mid, self.node, "; ".join(problems))))
        if norm.get("mdev") and not is_mdev and property_strings.mdev_checked(self.client.version(), True):
            raise Precheck(fail % ("mdev is set but PCI mapping '%s' is not marked mdev" % mid))
        return [e["path"] for e in entries]

    def check_mdev(self, norm: Mapping[str, str], paths: Sequence[str], fail: str) -> None:
        target = norm["mapping"] if "mapping" in norm else None
        listed = []
        if target:
            listed.extend(self.client.mdev_types(self.node, target))
        else:
            for pth in paths:
                listed.extend(self.client.mdev_types(self.node, property_strings.normalize_pci_address(pth, function="0")))
        where = "mapping %s" % target if target else ", ".join(paths)
        types = sorted(set(t["type"] for t in listed))
        if norm["mdev"] not in types:
            raise Precheck(fail % ("mdev type '%s' is not available on %s (available: %s)"
                                   % (norm["mdev"], where, ", ".join(types) or "none")))
        # Classic mdev reports how many more instances can be created; 0 means the VM could not start.
        if not any(int(t.get("available") or 0) > 0 for t in listed if t["type"] == norm["mdev"]):
            raise Precheck(fail % ("mdev type '%s' has no free instance on %s" % (norm["mdev"], where)))

    def check_iommu(self, norm: Mapping[str, str], paths: Iterable[str], fail: str, by_id: Mapping[str, Mapping[str, Any]]) -> None:
        hw = list(by_id.values())
        for pth in paths:
            dev = by_id[property_strings.normalize_pci_address(pth, function="0")]
            if norm.get("mdev") and not dev["physfn"]:
                continue  # classic mdev: the host driver keeps the device, each mdev gets its own group
            if dev["iommu_group"] < 0:
                raise Precheck(fail % ("device %s has no IOMMU group (IOMMU not present on node %s)" % (dev["id"], self.node)))
            isolated, members = property_strings.iommu_isolation(hw, dev["id"])
            if not isolated:
                others = [m for m in members if by_id[m]["slot"] != dev["slot"]]
                raise Precheck(fail % ("device %s shares IOMMU group %d with %s; all of them would have to go to this VM"
                                       % (dev["id"], dev["iommu_group"], ", ".join(others))))

    def check_versions(self, plan: Mapping[str, Any]) -> None:
        """hostpci options the server's release lacks would fail the whole config call."""
        for slot, value in sorted(plan["set"].items()):
            if "driver" in property_strings.normalize_hostpci(value):  # the default (vfio) is dropped, so only driver=keep is sent
                gate = property_strings.version_gate("driver", self.client.version())
                if gate:
                    raise Precheck("%s: hostpci%d (%s): %s; nothing changed" % (self.where(), slot, value, gate))

    def check_permissions(self, plan: Mapping[str, Any], current: Mapping[int, Mapping[str, str]]) -> None:
        """check_hostpci_perm of qemu-server, for every entry set, replaced or deleted, before any write."""
        problems = property_strings.permission_problems(plan, current, self.is_root)
        if problems:
            raise Precheck("%s: only root@pam with a password may set, replace or delete raw host devices and romfiles "
                           "(this run is %s): %s; use a PCI mapping; nothing changed" % (self.where(), self.who, "; ".join(problems)))

    def check_privileges(self, plan: Mapping[str, Any], current: Mapping[int, Mapping[str, str]]) -> None:
        """The privileges the writes will need, read for this session (GET /access/permissions) before any write:
        Proxmox VE's update_vm_api writes each delete before it checks the next option, so a refusal part-way would
        leave deletes behind."""
        if self.is_root:
            return
        changing = sorted(set(plan["set"]) | set(plan["delete"]))
        needed = []
        vm_path = "/vms/%s" % self.vmid
        if changing:
            needed.append((vm_path, "VM.Config.HWType", "to write hostpci entries"))
        for slot in changing:
            for value in ([plan["set"][slot]] if slot in plan["set"] else []) + ([current[slot]] if slot in current else []):
                norm = property_strings.normalize_hostpci(value) if isinstance(value, str) else value
                if "mapping" in norm:
                    needed.append(("/mapping/pci/%s" % norm["mapping"], "Mapping.Use",
                                   "hostpci%d %s mapping %s" % (slot, "sets" if value is plan["set"].get(slot) else "replaces or deletes", norm["mapping"])))
        # qemu-server API2/Qemu.pm: machine and vga are hardware options, bios a general one, an EFI disk a disk
        # allocated on a storage.
        for key, priv in (("machine", "VM.Config.HWType"), ("vga", "VM.Config.HWType"), ("bios", "VM.Config.Options"),
                          ("efidisk0", "VM.Config.Disk")):
            if key in self.settings:
                needed.append((vm_path, priv, "to set %s" % key))
        if "efidisk0" in self.settings:
            storage = self.settings["efidisk0"].split(":", 1)[0]
            needed.append(("/storage/%s" % storage, "Datastore.AllocateSpace", "to create the EFI disk on %s" % storage))
        if self._restart_for(self.pending_keys | set("hostpci%d" % s for s in changing) | set(self.settings)):
            needed.append((vm_path, "VM.PowerMgmt", "to restart it (restart=%s)" % self.spec["restart"]))
        have: dict[str, Any] = {}
        for path in sorted(set(n[0] for n in needed)):
            have.update(self.client.permissions(path))
        missing = rules.missing_privileges(needed, have)
        if missing:
            raise Precheck("%s: this session (%s) lacks %s; nothing was sent, nothing changed"
                           % (self.where(), self.who, "; ".join(missing)))

    # --------------------------------------------------------------- plan (reads only)

    def plan(self) -> VmGpu:
        """Read the VM and decide its hostpci changes; raise Precheck or PveError before any write."""
        if self.node is None:
            raise Precheck("VM %s not found on any node" % self.vmid)
        self.client.require_online(self.node, "change VM %s" % self.vmid)
        self.config = self.client.get(self.base + "/config")  # pending values applied
        status = self.client.get(self.base + "/status/current") or {}
        self.running = status.get("status") == "running"
        self.ha = rules.ha_managed(status)
        if self.running:
            self.pending_keys = pending_hostpci(self.client.get(self.base + "/pending"))
        try:
            current = property_strings.hostpci_from_config(self.config)
        except property_strings.PciError as exc:
            raise Precheck("%s: cannot parse existing hostpci entry: %s" % (self.where(), exc))
        desired = self.desired()
        try:
            plan = property_strings.plan_hostpci(current, desired, exclusive=self.spec["exclusive"])
        except property_strings.PciError as exc:
            raise Precheck("%s: %s" % (self.where(), exc))
        self.settings, problems = rules.plan_vm_settings(self.config, self.spec.get("vm_settings"))
        if problems:
            raise Precheck("%s: %s; nothing changed" % (self.where(), "; ".join(problems)))
        self.check_versions(plan)
        self.check_permissions(plan, current)
        self.check_privileges(plan, current)
        if self.spec["precheck"]:
            # Checked against the settings as they will be (a q35 machine requested with pcie=1 is fine).
            self.precheck(dict(self.config, **self.settings),
                          [(s, property_strings.normalize_hostpci(v)) for s, v in plan["desired"].items()], set(plan["set"]))
            if plan["set"]:
                problems = rules.vm_collisions(self.cluster.alternatives(self.node, plan["after"]),
                                               self.labels(plan["after"]), self.cluster.physfn(self.node))
                if problems:
                    raise Precheck("%s: %s; nothing changed" % (self.where(), "; ".join(problems)))
        self.plan_ = plan
        return self

    @staticmethod
    def labels(entries: Mapping[int, str]) -> dict[int, str]:
        return {int(s): "hostpci%s (%s)" % (s, v) for s, v in entries.items()}

    def neighbour_problems(self, planned: Mapping[int, VmGpu]) -> list[str]:
        """Entries this plan sets that collide with another VM of the node (rules.cross_vm_collisions): the
        other VMs' configurations as read (pending applied), or, for VMs of this batch, as planned."""
        if not self.spec["precheck"] or not self.plan_["set"]:
            return []
        others = []
        for vmid, info in sorted(self.cluster.vms(self.node).items()):
            if vmid == int(self.vmid):
                continue
            other = planned.get(vmid)
            try:
                entries = (other.plan_["after"] if other is not None and other.node == self.node
                           else {s: property_strings.format_hostpci(n) for s, n in property_strings.hostpci_from_config(info["config"]).items()})
            except property_strings.PciError:
                continue  # a configuration PVE itself could not start is that VM's own problem
            alts = self.cluster.alternatives(self.node, entries)
            for slot, label in self.labels(entries).items():
                others.append(("VM %s (%s)" % (vmid, info["status"] or "unknown"), label, alts[slot]))
        mine = self.cluster.alternatives(self.node, self.plan_["set"])
        problems = rules.cross_vm_collisions(mine, self.labels(self.plan_["set"]), others,
                                             self.cluster.physfn(self.node))
        return ["%s: %s; nothing changed" % (self.where(), p) for p in problems]

    @property
    def changed_keys(self) -> list[str]:
        return (["hostpci%d" % s for s in self.plan_["set"]] + ["hostpci%d" % s for s in self.plan_["delete"]]
                + sorted(self.settings))

    def _restart_for(self, pending_keys: Collection[str]) -> bool:
        restart = self.spec["restart"]
        return self.running and (restart == "always" or (restart == "if_needed" and bool(pending_keys)))

    @property
    def needs_write(self) -> bool:
        """The plan writes a config or restarts (hostpci changes of a running VM always go pending first)."""
        changed = self.changed_keys
        return bool(changed) or self._restart_for(self.pending_keys | set(changed))

    # --------------------------------------------------------------- apply (writes)

    def apply(self) -> dict[str, Any]:
        """Write the plan (nothing in check mode); return the VM's result."""
        plan = self.plan_
        changed_keys = self.changed_keys
        if changed_keys and not self.check_mode:
            params = {"hostpci%d" % s: v for s, v in plan["set"].items()}
            params.update(self.settings)
            if plan["delete"]:
                params["delete"] = ",".join("hostpci%d" % s for s in plan["delete"])
            upid = self._post(self.base + "/config", digest=self.config.get("digest"), **params)
            if isinstance(upid, str) and upid.startswith("UPID:"):
                self._wait(upid, "config update of %s" % self.where())
        if self.running:
            if changed_keys and not self.check_mode:
                self.pending_keys = pending_hostpci(self.client.get(self.base + "/pending"))
            elif changed_keys:
                self.pending_keys.update(changed_keys)
        restart = self._restart_for(self.pending_keys)
        if restart:
            self.disruptions = rules.restart_disruptions(self.where(), self.spec["shutdown_timeout"], self.ha)
        if restart and not self.check_mode:
            self.restart()
            self.pending_keys = set()
        self.restarted = restart
        return self.result()

    def restart(self) -> None:
        shutdown = self.spec["shutdown_timeout"]
        upid = self._post(self.base + "/status/shutdown", forceStop=1, timeout=shutdown)
        self._wait(upid, "shutdown of %s" % self.where(), timeout=shutdown + self.spec["timeout"])
        if self.ha:
            # The task only queued 'ha-manager crm-command stop' (qemu-server vm_shutdown): wait for the VM itself.
            self._wait_state("stopped", shutdown + self.spec["timeout"], "")
        upid = self._post(self.base + "/status/start")
        saved = " (the new hostpci configuration is saved; the VM is stopped)"
        try:
            self._wait(upid, "start of %s" % self.where())
        except PveError as exc:
            raise PveError("%s%s" % (exc, saved))
        if self.ha:
            self._wait_state("running", self.spec["timeout"], saved)

    def _wait_state(self, want: str, timeout: float, saved: str) -> None:
        """Poll the HA-managed VM until it is ``want``; raise PveError when HA will not get it there in time."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.client.get(self.base + "/status/current") or {}
            verdict = rules.ha_verdict(status, want)
            if verdict is None:
                return
            if verdict:
                raise PveError("%s (HA-managed) did not become %s: %s%s" % (self.where(), want, verdict, saved))
            if time.monotonic() >= deadline:
                raise PveError("%s (HA-managed) did not become %s within %ss: it is %s, HA service state %s%s"
                               % (self.where(), want, timeout, status.get("status"),
                                  (status.get("ha") or {}).get("state"), saved))
            time.sleep(self.client.poll_interval)

    def result(self) -> dict[str, Any]:
        plan = self.plan_
        pending = bool(self.running and self.pending_keys and not self.restarted)
        if pending:
            self.warnings.append("%s runs; hostpci changes (%s) apply at its next start (restart=never)"
                                 % (self.where(), ", ".join(sorted(self.pending_keys))))
        before = {"hostpci%d" % s: v for s, v in plan["before"].items()}
        after = {"hostpci%d" % s: v for s, v in plan["after"].items()}
        diff_before, diff_after = dict(before), dict(after)
        for key in sorted(self.spec.get("vm_settings") and rules.VM_SETTING_KEYS or ()):
            if self.config.get(key) is not None:
                diff_before[key] = str(self.config[key])
            if self.settings.get(key, self.config.get(key)) is not None:
                diff_after[key] = str(self.settings.get(key, self.config.get(key)))
        return dict(
            vmid=self.vmid,
            node=self.node,
            changed=bool(self.changed_keys) or self.restarted,
            hostpci=after,
            before=before,
            set={"hostpci%d" % s: v for s, v in plan["set"].items()},
            deleted=["hostpci%d" % s for s in plan["delete"]],
            pending=pending,
            restarted=self.restarted,
            disruptions=list(self.disruptions),
            ha_managed=self.ha,
            vm_settings=dict(self.settings),
            writes=self.writes,
            diff={"before": diff_before, "after": diff_after},
        )

    def failed_result(self, exc: BaseException) -> dict[str, Any]:
        """What a VM whose write failed looks like now, read back (PVE may have written part of a config call)."""
        out = dict(vmid=self.vmid, node=self.node, changed=False, failed=True, msg=str(exc), writes=self.writes,
                   ha_managed=self.ha, disruptions=list(self.disruptions),
                   before={"hostpci%d" % s: v for s, v in self.plan_["before"].items()})
        try:
            now = property_strings.hostpci_from_config(self.client.get(self.base + "/config"))
            out["hostpci"] = {"hostpci%d" % s: property_strings.format_hostpci(v) for s, v in sorted(now.items())}
            out["changed"] = out["hostpci"] != out["before"]
        except (PveError, property_strings.PciError) as read_exc:
            out["hostpci"] = None
            out["msg"] += "; its configuration could not be read back: %s" % read_exc
        return out


def vm_specs(params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The VMs of a run as specs with every option filled in: the batch list ``vms``, or the single-VM form."""
    items = params["vms"] if params.get("vms") is not None else [
        dict(vmid=params["vmid"], node=params.get("node"), gpus=params["gpus"])]
    specs, seen, problems = [], set(), []
    for item in items:
        spec = dict(item)
        for key in PER_VM_OPTIONS:
            if spec.get(key) is None:
                spec[key] = params[key]
        if spec["vmid"] in seen:
            problems.append("VM %s is listed twice" % spec["vmid"])
        seen.add(spec["vmid"])
        specs.append(spec)
    if problems:
        raise BatchInvalid([p + "; nothing changed" for p in problems])
    return specs


def run(client: PveClient, params: Mapping[str, Any], check_mode: bool) -> tuple[list[dict[str, Any]], list[str]]:
    """Plan every VM, then apply those with changes; return (per-VM results, warnings).

    Raises BatchInvalid when any VM's plan failed (nothing is written then). A failed write is that VM's result
    (``failed: true``); the others go on unless ``stop_on_error``, which starts no further write after a failure.
    """
    specs = vm_specs(params)
    is_root = params["api_user"] == "root@pam" and not params["api_token_id"]
    who = "%s%s" % (params["api_user"], " with token %s" % params["api_token_id"] if params["api_token_id"] else "")
    if any(s.get("node") is None for s in specs):
        # One /cluster/resources read finds every VM (it lists those of offline nodes too).
        where = client.vm_nodes()
        for s in specs:
            if s.get("node") is None:
                s["node"] = where.get(int(s["vmid"]))
    cluster = Cluster(client)
    if specs:
        client.nodes()  # read once here, not by every worker
    vms = [VmGpu(client, cluster, s, is_root, who, check_mode) for s in specs]
    workers = params.get("max_concurrent") or 1
    planned = pool_map(lambda vm: vm.plan(), vms, workers, (Precheck, PveError))
    problems = [str(p) for p in planned if isinstance(p, Exception)]
    if problems:
        raise BatchInvalid(problems)
    by_vmid = {int(vm.vmid): vm for vm in vms}
    try:
        problems = [p for vm in vms for p in vm.neighbour_problems(by_vmid)]
    except PveError as exc:
        raise BatchInvalid([str(exc)])
    if problems:
        raise BatchInvalid(problems)

    stop = threading.Event()

    def apply(vm: VmGpu) -> dict[str, Any]:
        if not vm.needs_write:
            return vm.apply()  # no write: the result (and check mode's would-be changes)
        if stop.is_set():
            res = vm.result()
            res.update(changed=False, skipped=True, hostpci=res["before"], set={}, deleted=[], restarted=False,
                       disruptions=[],
                       diff=dict(before=res["before"], after=res["before"]),
                       msg="not written: an earlier VM failed and stop_on_error is set")
            return res
        try:
            return vm.apply()
        except PveError as exc:
            if params.get("stop_on_error"):
                stop.set()
            return vm.failed_result(exc)

    results = pool_map(apply, vms, workers, (Precheck, PveError))
    warnings = [w for vm in vms for w in vm.warnings]
    # No exception comes back: apply() makes a failed write the VM's result, and a VM without writes calls nothing.
    return results, warnings  # type: ignore[return-value]


def module_run(params: dict[str, Any], check_mode: bool,
               connect: Callable[..., PveClient]) -> tuple[bool, dict[str, Any], list[str]]:
    """The module's run: bounds, a session from ``connect(params, task_timeout=...)``, :func:`run`, and the task
    result (single-VM form or batch). Returns (failed, result for exit_json/fail_json, warnings to show first);
    a failure before any write shows no warnings."""
    batch = params["vms"] is not None
    bounds = {"vmid": common_bounds.PVE_VMID, "timeout": common_bounds.TASK_TIMEOUT, "shutdown_timeout": common_bounds.SHUTDOWN_TIMEOUT}
    problems = common_bounds.out_of_range(params, dict(bounds, max_concurrent=common_bounds.MAX_CONCURRENT))
    for item in params["vms"] or []:
        problems.extend(common_bounds.out_of_range(item, bounds, where="vms[vmid=%s]: " % item["vmid"]))
    if problems:
        who = "VMs %s" % ", ".join(str(v["vmid"]) for v in params["vms"]) if batch else "VM %s" % params["vmid"]
        return True, dict(msg="%s: %s; nothing changed" % (who, "; ".join(problems))), []
    try:
        client = connect(params, task_timeout=params["timeout"])
        results, warnings = run(client, params, check_mode)
    except BatchInvalid as exc:
        return True, dict(msg=common_batch.invalid_message(exc, batch), problems=exc.problems), []
    except PveError as exc:
        return True, dict(msg=str(exc)), []
    warnings = client.warnings + warnings
    writes = len(client.writes)
    if not batch:
        result = results[0]
        result.pop("vmid")
        result["writes"] = writes
        if "diff" in result:  # a failed write's result has none
            result["diff"] = disruption.diff_first(result["disruptions"], result["diff"])
        return bool(result.pop("failed", False)), result, warnings
    diffs = [r.pop("diff", None) for r in results]
    out, failure = common_batch.outcome(results, "vmid", lambda r: "VM %s on %s" % (r["vmid"], r["node"]), diffs)
    out["writes"] = writes
    if failure:
        return True, dict(msg=failure, **out), warnings
    return False, out, warnings


def batch_items(vms: Optional[Iterable[Mapping[str, Any]]], restart: str = "never",
                new_mappings: Optional[Iterable[str]] = ()) -> list[dict[str, Any]]:
    """The role's VM list as ``vms`` items for one batch task (pure).

    Each item keeps the keys the module takes (others, such as a comment, are dropped as the role always did);
    ``restart`` fills in where an item has none. In check mode a mapping this run would create does not exist yet,
    so the hardware pre-check of a VM that uses one is turned off (the mapping task already checked its hardware).
    """
    keys = ("vmid", "node", "gpus") + PER_VM_OPTIONS
    new = set(new_mappings or ())
    out = []
    for vm in vms or []:
        item = {k: vm[k] for k in keys if vm.get(k) is not None}
        item.setdefault("restart", restart)
        uses_new = any(g.get("mapping") in new for g in item.get("gpus") or [] if isinstance(g, dict))
        if uses_new:
            item["precheck"] = False
        out.append(item)
    return out
