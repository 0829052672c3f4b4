# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vGPUs of vSphere VMs: find and read VMs in bulk, plan each VM (pure decisions in vsphere_vgpu), apply the plans.

One VM or a batch: every VM is found, read and planned before the first write (PropertyCollector reads for all VMs
and their hosts at once), then the changed VMs are reconfigured ``max_concurrent`` at a time, each VM's tasks waited
for; vCenter runs the reconfigure tasks of different VMs in parallel.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from ansible_collections.gpuops.provision.plugins.module_utils._common import batch as common_batch, bounds as common_bounds, disruption
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api, vgpu as vsphere_vgpu
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import placement
from ansible_collections.gpuops.provision.plugins.module_utils._common.batch import BatchInvalid, pool_map

try:
    from pyVmomi import vim, vmodl
except ImportError:
    pass  # reported through api.HAS_PYVMOMI

VM_READ = ["name", "runtime.host", "runtime.powerState", "config.hardware.device",
           "config.memoryReservationLockedToMax", "config.extraConfig", "config.firmware", "config.template",
           "config.version", "config.managedBy"]
OFFER_PROPS = ["name", "parent", "runtime.connectionState", "runtime.inMaintenanceMode", "config.sharedPassthruGpuTypes",
               "config.sharedGpuCapabilities", "config.graphicsInfo", "config.product.version",
               "configManager.imageConfigManager", "configManager.graphicsManager"]
# Options a batch item may set for itself; the task's value is the default.
PER_VM_OPTIONS = ("placement", "power_policy", "reserve_all_memory", "use_64bit_mmio", "mmio_size_gb", "max_vgpus",
                  "multi_vgpu_rules", "drs_behavior", "drs_enabled", "upgrade_hardware")
# The owner name this module writes into a VM's restore marker before it powers the VM off.
OWNER = "vsphere_vm_vgpu"
# ManagedByInfo of VMs that the vSphere VM Service (VM Operator) owns (vmware-tanzu/vm-operator, constants
# ManagedByExtensionKey and ManagedByExtensionType): their devices come from their VM class.
VM_SERVICE = ("com.vmware.vcenter.wcp", "VirtualMachine")
# ClusterDrsVmConfigInfo.behavior takes DrsBehavior (vim.cluster.DrsConfigInfo.DrsBehavior).
DRS_BEHAVIORS = ("manual", "partiallyAutomated", "fullyAutomated")
KEYS = ("name", "uuid", "moid")


def label(spec: Mapping[str, Any]) -> str:
    key = next(k for k in KEYS if spec.get(k))
    return spec[key] if key == "name" else "%s %s" % (key, spec[key])


def vm_specs(params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The VMs of a run with every option filled in: the batch list ``vms``, or the single-VM form."""
    items = params["vms"] if params.get("vms") is not None else [
        {k: params[k] for k in KEYS + ("profiles",)}]
    specs, seen, problems = [], set(), []
    for i, item in enumerate(items):
        spec = dict(item)
        given = [k for k in KEYS if spec.get(k)]
        if len(given) != 1:
            problems.append("vms[%d]: needs exactly one of name, uuid and moid (has %s)" % (i, ", ".join(given) or "none"))
            continue
        for key in PER_VM_OPTIONS:
            if spec.get(key) is None:
                spec[key] = params.get(key)
        ident = (given[0], spec[given[0]])
        if ident in seen:
            problems.append("VM %s is listed twice" % label(spec))
        seen.add(ident)
        specs.append(spec)
    if problems:
        raise BatchInvalid([p + "; nothing changed" for p in problems])
    return specs


class Inventory:
    """Bulk reads shared by the VMs of a run: VM names, VM properties, hosts, clusters, host driver rules."""

    def __init__(self, session: api.Session, datacenter: Optional[str] = None) -> None:
        self.session = session
        self.datacenter = datacenter
        self._names: Optional[dict[str, list[dict[str, Any]]]] = None
        self.hosts: dict[str, dict[str, Any]] = {}  # host moid -> row
        self.clusters: dict[str, dict[str, dict[str, Any]]] = {}  # cluster moid -> {host name: row} of its connected hosts
        self.rules: dict[tuple[str, str], dict[str, Any]] = {}  # (host name, rules choice) -> multi-vGPU rules (the driver is read once per host)
        self.drs: dict[Any, dict[str, Any]] = {}  # cluster moid -> DRS facts (api.cluster_drs) of the VMs' clusters
        self.profile_info: dict[str, dict[str, dict[str, Any]]] = {}  # host moid -> {profile: vCenter's facts}

    def by_name(self, name: str) -> Any:
        if self._names is None:
            container = self.session.scope_container(self.datacenter) if self.datacenter else None
            self._names = {}
            for row in self.session.collect(vim.VirtualMachine, ["name"], container):
                self._names.setdefault(row["name"], []).append(row)
        rows = self._names.get(name) or []
        if not rows:
            raise api.VsphereError("VM %s not found" % name)
        if len(rows) > 1:
            raise api.VsphereError("VM name %s is not unique (%s); use moid or uuid"
                                   % (name, ", ".join(sorted(r["moid"] for r in rows))))
        return rows[0]["obj"]

    def find(self, spec: Mapping[str, Any]) -> Any:
        if spec.get("moid"):
            return vim.VirtualMachine(spec["moid"], self.session.si._stub)  # checked by the bulk read
        if spec.get("uuid"):
            vm = self.session.content.searchIndex.FindByUuid(None, spec["uuid"], True, False)
            if vm is None:
                raise api.VsphereError("VM with uuid %s not found" % spec["uuid"])
            return vm
        return self.by_name(spec["name"])

    def read_vms(self, objects: Sequence[Any]) -> dict[str, dict[str, Any]]:
        """{moid: row} of VM_READ for ``objects`` in one retrieval. A moid vCenter does not know fails the whole
        retrieval (ManagedObjectNotFound), so then each is read alone to name the missing ones."""
        try:
            return {r["moid"]: r for r in self.session.vms(props=VM_READ, objects=objects)}
        except api.TransportError:
            raise  # no answer at all: reading them one by one would only call them missing
        except api.VsphereError:
            out = {}
            for obj in objects:
                try:
                    out.update({r["moid"]: r for r in self.session.vms(props=VM_READ, objects=[obj])})
                except api.VsphereError:
                    pass
            return out

    def read_hosts(self, host_objs: Iterable[Any]) -> None:
        new = [h for h in {h._moId: h for h in host_objs}.values() if h._moId not in self.hosts]
        for row in self.session.collect(vim.HostSystem, self.session.host_props(OFFER_PROPS), objects=new):
            self.hosts[row["moid"]] = row

    def cluster(self, cluster_obj: Any) -> dict[str, dict[str, Any]]:
        """{host name: row} of the cluster's hosts that can start a VM: connected and not in maintenance mode."""
        if cluster_obj._moId not in self.clusters:
            rows = self.session.collect(vim.HostSystem, self.session.host_props(OFFER_PROPS), container=cluster_obj)
            self.clusters[cluster_obj._moId] = {r["name"]: r for r in rows if r.get("runtime.connectionState") == "connected"
                                                and not r.get("runtime.inMaintenanceMode")}
        return self.clusters[cluster_obj._moId]

    def host_obj(self, name: Optional[str]) -> Any:
        """The HostSystem of a host read in this run, by name (None for None)."""
        if not name:
            return None
        for rows in [list(self.hosts.values())] + [list(c.values()) for c in self.clusters.values()]:
            for row in rows:
                if row["name"] == name:
                    return row["obj"]
        raise api.VsphereError("host %s was not read" % name)

    def facts(self, row: Mapping[str, Any], profiles: Sequence[str], warnings: list[str]) -> dict[str, dict[str, Any]]:
        """{profile: _vsphere.placement.profile_facts} for a host: vCenter's vgpuProfileInfo where it has it."""
        if row["moid"] not in self.profile_info:
            self.profile_info[row["moid"]] = api.vgpu_profile_info(self.session, row, warnings)
        info = self.profile_info[row["moid"]]
        return {p: placement.profile_facts(p, info.get(p)) for p in profiles}

    def gpu_errors(self, rows: Mapping[str, Mapping[str, Any]], profiles: Sequence[str],
                   warnings: list[str]) -> dict[str, list[str]]:
        """{host: why its GPUs cannot take the vGPUs} for the hosts that offer them all."""
        out = {}
        for name in vsphere_vgpu.hosts_offering(profiles, {n: api.host_offer(r) for n, r in rows.items()}):
            row = rows[name]
            gpus = api.graphics_devices(row.get("config.graphicsInfo"))
            errors = placement.gpu_errors(name, profiles, gpus, self.facts(row, profiles, warnings) if gpus else {})
            if errors:
                out[name] = errors
        return out

    def rules_of(self, rows: Mapping[str, Mapping[str, Any]], profiles: Sequence[str], choice: str,
                 warnings: list[str]) -> dict[str, dict[str, Any]]:
        """{host: multi-vGPU rules} for the hosts that offer every profile; the driver is read only where it matters."""
        if len(profiles) < 2:
            return {}
        out = {}
        for name in vsphere_vgpu.hosts_offering(profiles, {n: api.host_offer(r) for n, r in rows.items()}):
            if (name, choice) not in self.rules:
                row = rows[name]
                esxi = api.esxi_version(row)
                driver = None
                # Before ESXi 8.0 the driver does not change the rules (MULTI_VGPU_RULES).
                if choice == "auto" and (vsphere_vgpu.parse_version(esxi) or (0,)) >= (8, 0, 0):
                    driver = api.host_driver(self.session, row, warnings=warnings)["version"]
                self.rules[(name, choice)] = vsphere_vgpu.multi_vgpu_rules(choice, esxi, driver)
            out[name] = self.rules[(name, choice)]
        return out


def plan_drs(vm_name: str, host_name: str, cluster: Optional[Mapping[str, Any]], current: Optional[Mapping[str, Any]],
             behavior: Optional[str], enabled: Optional[bool]) -> Optional[dict[str, Any]]:
    """The per-VM DRS override a VM needs (pure); None when neither ``behavior`` nor ``enabled`` is asked for.

    ``cluster``: the VM's cluster facts (api.cluster_drs) or None for a standalone host; ``current``: the VM's
    override ({behavior, enabled}) or None. Unset fields are left as they are. Returns {cluster, before, after,
    operation ("add", "edit" or None), changed}.
    """
    if behavior is None and enabled is None:
        return None
    if cluster is None:
        raise vsphere_vgpu.VgpuError("VM %s: drs_behavior/drs_enabled need a VM in a DRS cluster; its host %s is not in a cluster"
                                     % (vm_name, host_name))
    if behavior is not None and behavior not in DRS_BEHAVIORS:
        raise vsphere_vgpu.VgpuError("VM %s: drs_behavior %r is not one of %s" % (vm_name, behavior, ", ".join(DRS_BEHAVIORS)))
    after: dict[str, Any] = dict(current) if current else dict(behavior=None, enabled=None)
    if behavior is not None:
        after["behavior"] = behavior
    if enabled is not None:
        after["enabled"] = enabled
    operation = "add" if current is None else ("edit" if after != current else None)
    return dict(cluster=cluster["name"], cluster_moid=cluster.get("moid"), before=current, after=after,
                operation=operation, changed=operation is not None)


def drs_action(drs: Mapping[str, Any]) -> str:
    fields = ", ".join("%s=%s" % (k, drs["after"][k]) for k in ("behavior", "enabled") if drs["after"].get(k) is not None)
    return "drs_override %s (cluster %s)" % (fields, drs["cluster"])


def build_spec(plan: Mapping[str, Any]) -> Any:
    changes = []
    for dev in plan["remove"]:
        changes.append(vim.vm.device.VirtualDeviceSpec(operation="remove", device=dev["device"]))
    for i, profile in enumerate(plan["add"]):
        dev = vim.vm.device.VirtualPCIPassthrough(
            key=-100 - i,
            backing=vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo(vgpu=profile),
            deviceInfo=vim.Description(summary="NVIDIA vGPU %s" % profile, label="vGPU %s" % profile))
        changes.append(vim.vm.device.VirtualDeviceSpec(operation="add", device=dev))
    spec = vim.vm.ConfigSpec(deviceChange=changes)
    if plan["lock_memory"]:
        spec.memoryReservationLockedToMax = True
    if plan["extra_config"]:
        spec.extraConfig = [vim.option.OptionValue(key=k, value=v) for k, v in sorted(plan["extra_config"].items())]
    return spec


def actions_of(plan: Mapping[str, Any]) -> list[str]:
    acts = []
    if plan["power"]["power_off"]:
        acts.append("shutdown_guest" if plan["power"]["power_off"] == "guest" else "power_off")
    if plan.get("upgrade"):
        acts.append("upgrade_hardware %s" % plan["upgrade"]["before"])
    acts += ["remove %s (key %s)" % (d["profile"], d["key"]) for d in plan["remove"]]
    acts += ["add %s" % prof for prof in plan["add"]]
    if plan["lock_memory"]:
        acts.append("reserve_all_memory")
    acts += ["set %s=%s" % kv for kv in sorted(plan["extra_config"].items())]
    if plan["power"]["power_on_after"]:
        host = plan.get("power_on_host")
        restored = plan.get("restore") and not plan["power"]["power_off"]
        acts.append("power_on" + (" on %s" % host if host else "") + (" (an earlier run powered it off)" if restored else ""))
    elif plan.get("restore"):
        acts.append("remove the restore marker of an earlier run")
    return acts


def disruptions_of(name: str, plan: Mapping[str, Any], shutdown_timeout: Any) -> list[str]:
    """The disruptive steps of a VM's plan, in the order apply() takes them: the power-off (a guest shutdown or a hard
    power-off) and the power-on; empty when the VM's power is not touched."""
    out = []
    power = plan["power"]
    if power["power_off"] == "guest":
        out.append("shut down the guest of VM %s (VMware Tools, up to %s s)" % (name, shutdown_timeout))
    elif power["power_off"]:
        out.append("power off VM %s (hard, no guest shutdown)" % name)
    if power["power_on_after"]:
        host = plan.get("start_host")
        out.append("power on VM %s%s%s" % (name, " on host %s" % host if host else " on the host DRS picks",
                                           "" if power["power_off"] else " (an earlier run powered it off)"))
    return out


class VmVgpu:
    """One VM: :meth:`plan` decides from the bulk-read rows (no writes), :meth:`apply` reconfigures."""

    def __init__(self, session: api.Session, inventory: Inventory, spec: dict[str, Any], params: Mapping[str, Any],
                 warnings: list[str]) -> None:
        self.session = session
        self.inv = inventory
        self.spec = spec
        self.params = params
        self.warnings = warnings
        self.obj: Any = None  # the VirtualMachine, once found
        self.row: Optional[dict[str, Any]] = None  # its properties (VM_READ), once read
        # Both set by plan(); run() reads them only for VMs it planned.
        self.plan_: dict[str, Any] = None  # type: ignore[assignment]
        self.drs: Optional[dict[str, Any]] = None
        self.result: dict[str, Any] = None  # type: ignore[assignment]

    @property
    def name(self) -> str:
        return (self.row or {}).get("name") or label(self.spec)

    def plan(self) -> VmVgpu:
        spec = self.spec
        vm: dict[str, Any] = self.row  # type: ignore[assignment]  # run() plans only the VMs it read
        if vm.get("config.template"):
            # vSphere changes only a template's name and annotation (govmomi simulator/virtual_machine.go
            # ReconfigVMTask answers NotSupported, as vCenter does).
            raise vsphere_vgpu.VgpuError("VM %s is a template, whose devices vSphere does not change; convert it to a VM first"
                                         % vm["name"])
        managed = vm.get("config.managedBy")
        if managed is not None and (managed.extensionKey, managed.type) == VM_SERVICE:
            raise vsphere_vgpu.VgpuError("VM %s belongs to the vSphere VM Service (managedBy %s), which sets its devices from "
                                         "its VM class; change the class's vGPUs with vsphere_vm_class instead"
                                         % (vm["name"], managed.extensionKey))
        if vm.get("runtime.host") is None:
            raise vsphere_vgpu.VgpuError("VM %s has no host; register it on a host first" % vm["name"])
        host = self.inv.hosts[vm["runtime.host"]._moId]
        host_name, parent = host["name"], host.get("parent")
        rows = {host_name: host}
        is_cluster = isinstance(parent, vim.ClusterComputeResource)
        if spec["placement"] == "cluster" and is_cluster:
            rows.update(self.inv.cluster(parent))
        current = api.vm_vgpus(vm.get("config.hardware.device"))
        extra = {o.key: o.value for o in (vm.get("config.extraConfig") or [])}
        upgrade = placement.plan_hardware(vm["name"], spec["profiles"], vm.get("config.version"),
                                          bool(spec.get("upgrade_hardware")))

        def plan_with(rows: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
            # A host in maintenance mode starts no VM: the VM's own host counts only for placement=host.
            if spec["placement"] == "cluster" and host.get("runtime.inMaintenanceMode"):
                rows = {k: v for k, v in rows.items() if k != host_name}
            offers = {n: api.host_offer(r) for n, r in rows.items()}
            offers.setdefault(host_name, [])
            scope = rows if spec["placement"] == "cluster" else {host_name: rows[host_name]}
            host_rules = self.inv.rules_of(scope, spec["profiles"], spec["multi_vgpu_rules"], self.warnings)
            plan = vsphere_vgpu.plan_vm(vm["name"], host_name, current, spec["profiles"], offers, vm.get("runtime.powerState"),
                                        bool(vm.get("config.memoryReservationLockedToMax")), extra,
                                        placement=spec["placement"], reserve_all_memory=spec["reserve_all_memory"],
                                        use_64bit_mmio=spec["use_64bit_mmio"], mmio_size_gb=spec["mmio_size_gb"],
                                        power_policy=spec["power_policy"], max_vgpus=spec["max_vgpus"], host_rules=host_rules,
                                        firmware=vm.get("config.firmware"),
                                        host_errors=self.inv.gpu_errors(scope, spec["profiles"], self.warnings),
                                        upgrade=upgrade, restore=placement.restore_pending(extra, OWNER),
                                        facts={n: self.inv.facts(r, spec["profiles"], self.warnings)
                                               for n, r in scope.items() if len(spec["profiles"]) > 1})
            rules = host_rules.get(host_name)
            plan["rules"] = dict(name=rules["name"], basis=rules["basis"]) if rules else None
            return plan

        try:
            plan = plan_with(rows)
        except vsphere_vgpu.VgpuError:
            if spec["placement"] != "host" or not is_cluster:
                raise
            # Only read the rest of the cluster on failure, to name the hosts that do offer the profile.
            rows.update({k: v for k, v in self.inv.cluster(parent).items() if k != host_name})
            plan = plan_with(rows)
        cluster = self.inv.drs.get(parent._moId) if is_cluster else None  # type: ignore[union-attr]  # is_cluster: it is one
        self.drs = plan_drs(vm["name"], host_name, cluster, (cluster or {}).get("overrides", {}).get(vm["moid"]),
                            spec.get("drs_behavior"), spec.get("drs_enabled"))
        # Where the VM will start: the override being set in this run counts.
        facts = dict(cluster, overrides=dict(cluster.get("overrides") or {}, **{vm["moid"]: self.drs["after"]})) \
            if cluster is not None and self.drs else cluster
        plan.update(placement.start_host(host_name, plan["eligible_hosts"] if spec["profiles"] else [host_name],
                                         placement.drs_for(facts, vm["moid"])))
        self.plan_ = plan
        before, after, actions = plan["before"], plan["after"], actions_of(plan)
        if self.drs:
            before = dict(before, drs_override=self.drs["before"])
            after = dict(after, drs_override=self.drs["after"])
            if self.drs["changed"]:
                actions.insert(0, drs_action(self.drs))
        self.result = dict(vm=vm["name"], host=host_name, before=before, after=after, actions=actions,
                           disruptions=disruptions_of(vm["name"], plan, self.params["shutdown_timeout"]),
                           eligible_hosts=plan["eligible_hosts"], power_cycled=False,
                           start_host=plan["start_host"],
                           changed=plan["changed"] or bool(self.drs and self.drs["changed"]), multi_vgpu_rules=plan["rules"],
                           vgpus=[api.public_vgpu(d) for d in current])
        return self

    def state(self) -> str:
        """The VM's power state as vCenter reports it now, for a failure message ("unknown" when it cannot tell)."""
        try:
            return str(self.session.vms(props=["runtime.powerState"], objects=[self.obj])[0]["runtime.powerState"])
        except (api.VsphereError, IndexError):
            return "unknown"

    def failed(self, step: str, error: Exception, was: Optional[str]) -> api.VsphereError:
        """The error of a failed step, naming the VM, its power state now and what the next run does."""
        now = self.state()
        msg = "VM %s: %s failed: %s; the VM is %s" % (self.name, step, error, now)
        if was == "poweredOn" and now != "poweredOn":
            msg += " (it was poweredOn; the next run powers it on again once its vGPUs are right)"
        return api.VsphereError(msg)

    def apply(self) -> VmVgpu:
        """Power off if the plan says so, reconfigure, power on again; VsphereError names the VM, the step and the
        VM's power state.

        Before a power-off the VM gets this module's restore marker (extraConfig), so that a run cut off after the
        power-off (a transport failure, a killed controller) leaves a VM the next run powers on again; the marker
        goes once the VM runs.
        """
        plan, name, session = self.plan_, self.name, self.session
        was = (self.row or {}).get("runtime.powerState")
        power = plan["power"]
        if power["power_off"]:
            set_marker(session, self.obj, name, OWNER)
            try:
                power_off(session, self.obj, name, power["power_off"], self.params["shutdown_timeout"])
            except api.VsphereError as e:
                raise self.failed("power-off", e, was)
        try:
            if plan["upgrade"]:
                session.call_task("VM %s: hardware upgrade" % name, self.obj.UpgradeVM_Task)
            if plan["reconfigure"]:
                session.call_task("VM %s: reconfigure" % name, self.obj.ReconfigVM_Task, spec=build_spec(plan))
        except api.VsphereError as e:
            if power["power_on_after"]:
                # Leave the VM running as it was. Whether the change was made is unknown after a transport failure:
                # the host for the new vGPUs first, then the VM's own host for the old ones.
                for host in dict.fromkeys([self.inv.host_obj(plan["power_on_host"]), None]):
                    try:
                        session.call_task("VM %s: power on after the failure" % name, self.obj.PowerOnVM_Task, host=host)
                        set_marker(session, self.obj, name, "")
                        break
                    except api.VsphereError:
                        continue  # failed() names the state it is left in; the marker stays for the next run
            raise self.failed("reconfigure", e, was)
        if power["power_on_after"]:
            host = self.inv.host_obj(plan["power_on_host"])
            try:
                session.call_task("VM %s: power on" % name, self.obj.PowerOnVM_Task, host=host)
            except api.VsphereError as e:
                raise self.failed("power-on" + (" on host %s" % plan["power_on_host"] if host is not None else ""), e,
                                  "poweredOn")
            self.result["power_cycled"] = bool(power["power_off"])
        if power["power_off"] or plan["restore"]:
            set_marker(session, self.obj, name, "")
        return self


def set_marker(session: api.Session, vm_obj: Any, name: str, owner: str) -> None:
    """Write (owner) or remove ("") the restore marker of a VM (_vsphere.placement.RESTORE_KEY); vSphere removes an
    extraConfig key set to an empty value, and takes extraConfig changes on a running VM."""
    spec = vim.vm.ConfigSpec(extraConfig=[vim.option.OptionValue(key=placement.RESTORE_KEY, value=owner)])
    session.call_task("VM %s: %s the restore marker" % (name, "set" if owner else "remove"), vm_obj.ReconfigVM_Task,
                      spec=spec)


def power_off(session: api.Session, vm_obj: Any, name: str, mode: str, timeout: float) -> None:
    if mode == "hard":
        session.call_task("VM %s: power off" % name, vm_obj.PowerOffVM_Task)
        return
    try:
        vm_obj.ShutdownGuest()
    except vmodl.MethodFault as e:
        raise api.VsphereError("VM %s: guest shutdown failed: %s" % (name, api.fault_message(e)))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if session.vms(props=["runtime.powerState"], objects=[vm_obj])[0]["runtime.powerState"] == "poweredOff":
            return
        time.sleep(1)
    raise api.VsphereError("VM %s: guest did not shut down within %ss; nothing was changed" % (name, timeout))


def run(session: api.Session, params: Mapping[str, Any], check_mode: bool) -> tuple[list[dict[str, Any]], list[str]]:
    """Find, read and plan every VM, then apply the changed ones; return (per-VM results, warnings).

    Raises BatchInvalid when any VM cannot be found or planned (nothing is written then). A failed write is that
    VM's result (``failed: true``, its vGPUs read back); the others go on unless ``stop_on_error``.
    """
    specs = vm_specs(params)
    warnings: list[str] = []
    inv = Inventory(session, params.get("datacenter"))
    vms = [VmVgpu(session, inv, s, params, warnings) for s in specs]
    problems = {}  # VM index -> why it cannot be done, reported in the task's order
    for i, vm in enumerate(vms):
        try:
            vm.obj = inv.find(vm.spec)
        except api.VsphereError as e:
            problems[i] = str(e)
    rows = inv.read_vms([vm.obj for vm in vms if vm.obj is not None])
    for i, vm in enumerate(vms):
        if vm.obj is not None:
            vm.row = rows.get(vm.obj._moId)
            if vm.row is None:
                problems[i] = "VM with moid %s not found" % vm.obj._moId
    inv.read_hosts([vm.row["runtime.host"] for vm in vms if vm.row and vm.row.get("runtime.host") is not None])
    # One read of DRS and its overrides in every cluster that holds a VM: where a changed VM starts depends on them.
    drs_clusters = {}
    for vm in vms:
        if vm.row and vm.row.get("runtime.host") is not None:
            parent = inv.hosts[vm.row["runtime.host"]._moId].get("parent")
            if isinstance(parent, vim.ClusterComputeResource):
                drs_clusters[parent._moId] = parent
    if drs_clusters:
        inv.drs = api.cluster_drs(session, objects=list(drs_clusters.values()))
    for i, vm in enumerate(vms):
        if vm.row is None:
            continue
        try:
            vm.plan()
        except (api.VsphereError, vsphere_vgpu.VgpuError) as e:
            problems[i] = str(e)
    if problems:
        raise BatchInvalid([problems[i] for i in sorted(problems)])
    by_cluster: dict[str, list[VmVgpu]] = {}
    for vm in vms:
        if vm.drs and vm.drs["changed"]:
            by_cluster.setdefault(vm.drs["cluster_moid"], []).append(vm)
    for moid, members in sorted(by_cluster.items()):
        facts = inv.drs[moid]
        name = facts["name"]
        if facts.get("enabled") is False or facts.get("overrides_enabled") is False:
            warnings.append("cluster %s: %s, so DRS does not apply the per-VM overrides of %s until it is turned on"
                            % (name, "DRS is disabled" if facts.get("enabled") is False else "enableVmBehaviorOverrides is false",
                               ", ".join(vm.name for vm in members)))
        if not check_mode:
            # One reconfigure per cluster, before any VM is touched: a VM about to be power-cycled is already pinned.
            # (members: VMs with a DRS override, so vm.drs is set.)
            api.set_drs_overrides(
                session, facts["obj"], name,
                [(vm.drs["operation"], vm.obj, vm.drs["after"]["behavior"] if vm.spec.get("drs_behavior") else None,  # type: ignore[index]
                  vm.spec.get("drs_enabled")) for vm in members])
    writes = [vm for vm in vms if vm.plan_["changed"]]
    if check_mode or not writes:
        return [vm.result for vm in vms], warnings

    stop = threading.Event()

    def apply(vm: VmVgpu) -> VmVgpu:
        # the DRS overrides were set for every VM before any reconfigure, and stay
        kept = dict(vm.result["before"], drs_override=vm.drs["after"]) if vm.drs else vm.result["before"]
        drs_done = [drs_action(vm.drs)] if vm.drs and vm.drs["changed"] else []
        if stop.is_set():
            vm.result.update(changed=bool(drs_done), skipped=True, after=kept, actions=drs_done, disruptions=[],
                             msg="not started: an earlier VM failed and stop_on_error is set")
            return vm
        try:
            return vm.apply()
        except api.VsphereError as e:
            if params.get("stop_on_error"):
                stop.set()
            # A failed ReconfigVM_Task changes nothing; the devices read back below show what the VM holds.
            vm.result.update(failed=True, msg=str(e), after=kept)
            return vm

    # pyVmomi's SoapStubAdapter hands each call a connection from its pool under a lock (SoapAdapter.py
    # GetConnection/ReturnConnection), so the workers share the session. apply() reports its own failures.
    pool_map(apply, writes, params.get("max_concurrent") or 1, ())
    # One read for every written VM: the devices as vCenter now has them (a failed VM shows what it kept).
    try:
        after = inv.read_vms([vm.obj for vm in writes])
    except api.VsphereError as e:
        warnings.append("the VMs could not be read back after the change (%s); vgpus shows them as planned" % e)
        after = {}
    for vm in writes:
        row = after.get(vm.obj._moId)
        if row is None:
            continue
        vgpus = [api.public_vgpu(d) for d in api.vm_vgpus(row.get("config.hardware.device"))]
        if vm.result.get("failed"):
            vm.result["changed"] = sorted(v["profile"] for v in vgpus) != vm.plan_["before"]["profiles"] or \
                bool(vm.drs and vm.drs["changed"])
        vm.result["vgpus"] = vgpus
    return [vm.result for vm in vms], warnings


# ---- around run(): option bounds before the session, the module result after it -----------------------------------

def bounds_message(params: dict[str, Any]) -> Optional[str]:
    """The failure message when a numeric option (of the task or of a batch item) is out of range, else None."""
    bounds = {"max_vgpus": common_bounds.MAX_VGPUS, "mmio_size_gb": common_bounds.MMIO_SIZE_GB}
    problems = common_bounds.out_of_range(params, dict(bounds, shutdown_timeout=common_bounds.TASK_TIMEOUT,
                                                       max_concurrent=common_bounds.MAX_CONCURRENT))
    for i, item in enumerate(params["vms"] or []):
        problems.extend(common_bounds.out_of_range(item, bounds, where="vms[%d]: " % i))
    if not problems:
        return None
    where = "VMs of vms" if params["vms"] is not None else "VM %s" % (params["name"] or params["uuid"] or params["moid"])
    return "%s: %s; nothing changed" % (where, "; ".join(problems))


def failure(batch: bool, error: Exception) -> dict[str, Any]:
    """The failed result for an error raised before any write (BatchInvalid lists each VM's problem)."""
    if isinstance(error, BatchInvalid):
        return dict(msg=common_batch.invalid_message(error, batch), problems=error.problems)
    return dict(msg=str(error))


def outcome(results: list[dict[str, Any]], batch: bool, diff: bool) -> tuple[dict[str, Any], bool]:
    """(module result, failed) from the per-VM results: one VM's result as it is, or the batch summary."""
    if not batch:
        result = results[0]
        if diff:
            result["diff"] = disruption.diff_first(result["disruptions"], dict(before=result["before"],
                                                                               after=result["after"]))
        return result, bool(result.pop("failed", False))
    diffs = [dict(before=r["before"], after=r["after"]) for r in results] if diff else None
    out, fail = common_batch.outcome(results, "vm", lambda r: "VM %s" % r["vm"], diffs)
    if fail:
        return dict(msg=fail, **out), True
    return out, False
