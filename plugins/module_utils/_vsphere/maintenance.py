# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vsphere_host_maintenance's workflow: plan maintenance mode for every host first (who moves each powered-on VM,
_vsphere.placement.evacuation), refuse what vCenter would wait on until its timeout, then shut down or enable migration
as the user chose, enter or exit maintenance mode host by host, and power on again the VMs this module shut down."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.gpuops.provision.plugins.module_utils._common import disruption
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api, vgpu
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import placement
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import vm as vsphere_vm

try:
    from pyVmomi import vim
except ImportError:
    pass  # reported through api.HAS_PYVMOMI

OWNER = "vsphere_host_maintenance"
HOST_PROPS = ["name", "parent", "runtime.connectionState", "runtime.inMaintenanceMode", "vm", "config.graphicsInfo",
              "config.sharedPassthruGpuTypes", "config.sharedGpuCapabilities", "config.product.version"]
VM_PROPS = ["name", "runtime.host", "runtime.powerState", "config.hardware.device", "config.extraConfig"]


def _vms(session: Any, hosts: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """{host moid: [VM rows]} of the hosts, in one retrieval."""
    objs = [v for h in hosts for v in (h.get("vm") or [])]
    out: dict[str, list[dict[str, Any]]] = {h["moid"]: [] for h in hosts}
    for row in session.vms(props=VM_PROPS, objects=objs):
        host = row.get("runtime.host")
        if host is not None and host._moId in out:
            row["profiles"] = sorted(d["profile"] for d in api.vm_vgpus(row.get("config.hardware.device")))
            row["extra"] = {o.key: o.value for o in (row.get("config.extraConfig") or [])}
            out[host._moId].append(row)
    return out


def _targets(session: Any, host: Mapping[str, Any], vms: Sequence[Mapping[str, Any]], leaving: set[str],
             cluster_hosts: dict[str, list[dict[str, Any]]]) -> dict[str, list[str]]:
    """{VM name: hosts DRS could move it to}: connected hosts of its cluster outside maintenance mode that stay in
    service, and for a vGPU VM only those whose GPUs take its vGPUs."""
    parent = host.get("parent")
    if not isinstance(parent, vim.ClusterComputeResource):
        return {}
    if parent._moId not in cluster_hosts:
        cluster_hosts[parent._moId] = session.collect(vim.HostSystem, session.host_props(HOST_PROPS), container=parent)
    others = [r for r in cluster_hosts[parent._moId] if r["name"] not in leaving
              and r.get("runtime.connectionState") == "connected" and not r.get("runtime.inMaintenanceMode")]
    out = {}
    for vm in vms:
        names = []
        for r in others:
            if vm["profiles"]:
                offer = api.host_offer(r)
                facts = {p: placement.profile_facts(p) for p in vm["profiles"]}
                if not set(vm["profiles"]) <= set(offer) or placement.gpu_errors(
                        r["name"], vm["profiles"], api.graphics_devices(r.get("config.graphicsInfo")), facts):
                    continue
            names.append(r["name"])
        out[vm["name"]] = names
    return out


def plan(session: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    """Read every host and plan it; raise VgpuError naming each host and VM that vCenter would wait on."""
    hosts = session.hosts(params.get("datacenter"), params.get("cluster"), params.get("esxi_hostname"), props=HOST_PROPS)
    vms = _vms(session, hosts)
    clusters = api.cluster_drs(session, objects=api.host_clusters(hosts))
    hotmigrate = api.vcenter_setting(session, placement.VGPU_HOTMIGRATE_SETTING)
    # Hosts that are away while a host enters: itself, and the hosts before it in this run unless each is back in
    # service before the next (rolling).
    leaving: set[str] = set()
    cluster_hosts: dict[str, list[dict[str, Any]]] = {}
    plans, problems = [], []
    for host in hosts:
        leaving = ({host["name"]} if params.get("rolling") else leaving | {host["name"]})
        parent = host.get("parent")
        cluster = clusters.get(parent._moId) if isinstance(parent, vim.ClusterComputeResource) else None
        running = [v for v in vms[host["moid"]] if v.get("runtime.powerState") == "poweredOn"]
        entry = dict(name=host["name"], moid=host["moid"], obj=host["obj"], cluster=cluster,
                     in_maintenance_mode=bool(host.get("runtime.inMaintenanceMode")), vms=[],
                     rows={v["name"]: v for v in vms[host["moid"]]},
                     restore=[v for v in vms[host["moid"]] if placement.restore_pending(v["extra"], OWNER)])
        if params["state"] == "present" and not entry["in_maintenance_mode"]:
            if host.get("runtime.connectionState") != "connected":
                problems.append("host %s is %s" % (host["name"], host.get("runtime.connectionState")))
            option = (cluster or {}).get("options", {}).get(placement.VGPU_MM_OPTION)
            entry["vms"] = placement.evacuation(host["name"], running, cluster, option, hotmigrate,
                                                _targets(session, host, running, leaving, cluster_hosts),
                                                params["vgpu_vms"])
            for vm in entry["vms"]:
                if vm["fate"] == "blocked":
                    problems.append("host %s: VM %s (%s, DRS %s) would stay: %s"
                                    % (host["name"], vm["name"], "vGPU " + ", ".join(vm["profiles"]) if vm["vgpu"] else "no vGPU",
                                       vm["drs_behavior"] or "none", vm["why"]))
        plans.append(entry)
    if problems:
        raise vgpu.VgpuError("maintenance mode would wait on powered-on VMs until it times out, so no host was "
                             "touched: %s. vgpu_vms=shutdown shuts vGPU VMs down (and powers them on after), "
                             "vgpu_vms=migrate sets %s=-1 and %s=true first (vGPU VMs then migrate at DRS automation "
                             "level fullyAutomated)" % ("; ".join(problems), placement.VGPU_MM_OPTION,
                                                        placement.VGPU_HOTMIGRATE_SETTING))
    settings = []
    if params["state"] == "present" and params["vgpu_vms"] == "migrate":
        for cid, cluster in sorted(clusters.items()):
            if any(p["cluster"] is cluster and any(v["vgpu"] for v in p["vms"]) for p in plans):
                have = cluster["options"].get(placement.VGPU_MM_OPTION)
                if have != "-1":
                    settings.append(dict(kind="cluster", cluster=cluster, key=placement.VGPU_MM_OPTION, before=have, after="-1"))
        if settings and str(hotmigrate).lower() != "true":
            settings.append(dict(kind="vcenter", key=placement.VGPU_HOTMIGRATE_SETTING, before=hotmigrate, after="true"))
    return dict(hosts=plans, settings=settings, hotmigrate=hotmigrate)


def disruptions_of(entry: Mapping[str, Any], state: str, shutdown_timeout: Any) -> list[str]:
    """What a host's change does to it and its VMs, in the order _enter/_exit do it: the guest shutdowns, the VMs
    DRS migrates while the host enters maintenance mode, the entry; or the exit and the VMs powered on again."""
    host = entry["name"]
    out = []
    if state == "present" and not entry["in_maintenance_mode"]:
        out += ["shut down the guest of VM %s on host %s (VMware Tools, up to %s s)" % (v["name"], host, shutdown_timeout)
                for v in entry["vms"] if v["fate"] == "shutdown"]
        out += ["migrate VM %s off host %s (DRS, while the host enters maintenance mode)" % (v["name"], host)
                for v in entry["vms"] if v["fate"] == "migrate"]
        out.append("enter maintenance mode on host %s" % host)
    if state == "absent":
        if entry["in_maintenance_mode"]:
            out.append("exit maintenance mode on host %s" % host)
        out += ["power on VM %s on host %s (shut down for maintenance)" % (v["name"], host) for v in entry["restore"]
                if v.get("runtime.powerState") == "poweredOff"]
    return out


def _result(entry: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    state = params["state"]
    changed = entry["in_maintenance_mode"] != (state == "present") or (state == "absent" and bool(entry["restore"]))
    actions = []
    if state == "present" and not entry["in_maintenance_mode"]:
        actions += ["shutdown_guest %s" % v["name"] for v in entry["vms"] if v["fate"] == "shutdown"]
        actions.append("enter_maintenance_mode")
    if state == "absent":
        if entry["in_maintenance_mode"]:
            actions.append("exit_maintenance_mode")
        actions += ["power_on %s (shut down for maintenance)" % v["name"] for v in entry["restore"]
                    if v.get("runtime.powerState") == "poweredOff"]
    return dict(name=entry["name"], changed=changed, actions=actions,
                disruptions=disruptions_of(entry, state, params.get("shutdown_timeout")),
                before=dict(in_maintenance_mode=entry["in_maintenance_mode"]),
                after=dict(in_maintenance_mode=state == "present"),
                vms=[dict(vm) for vm in entry["vms"]])


def run(session: Any, params: Mapping[str, Any], check_mode: bool) -> dict[str, Any]:
    """Plan every host, then (not in check mode) change them one by one; return the module's result fields."""
    the_plan = plan(session, params)
    results = [_result(e, params) for e in the_plan["hosts"]]
    settings = [dict(scope=s["cluster"]["name"] if s["kind"] == "cluster" else "vCenter", key=s["key"], before=s["before"],
                     after=s["after"]) for s in the_plan["settings"]]
    if check_mode:
        return dict(hosts=results, settings=settings)
    for s in the_plan["settings"]:
        if s["kind"] == "cluster":
            api.set_drs_option(session, s["cluster"]["obj"], s["cluster"]["name"], s["key"], s["after"])
        else:
            api.set_vcenter_setting(session, s["key"], s["after"])
    done: list[str] = []
    for entry, result in zip(the_plan["hosts"], results):
        try:
            if params["state"] == "present":
                _enter(session, entry, params)
            else:
                _exit(session, entry, params)
        except api.VsphereError as e:
            raise api.VsphereError("%s (hosts done: %s)" % (e, ", ".join(done) or "none"))
        if result["changed"]:
            done.append(entry["name"])
    return dict(hosts=results, settings=settings)


def _enter(session: Any, entry: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    if entry["in_maintenance_mode"]:
        return
    for vm in entry["vms"]:
        if vm["fate"] == "shutdown":
            obj = entry["rows"][vm["name"]]["obj"]
            # The marker first: a run cut off after the shutdown still knows which VMs to power on again.
            vsphere_vm.set_marker(session, obj, vm["name"], OWNER)
            vsphere_vm.power_off(session, obj, vm["name"], "guest", params["shutdown_timeout"])
    try:
        session.call_task("host %s: enter maintenance mode" % entry["name"], entry["obj"].EnterMaintenanceMode_Task,
                          timeout=params["timeout"], evacuatePoweredOffVms=params["evacuate_powered_off"])
    except api.VsphereError as e:
        left = [v["name"] for v in session.vms(props=["name", "runtime.powerState"], objects=_vm_objs(session, entry))
                if v.get("runtime.powerState") == "poweredOn"]
        raise api.VsphereError("%s; powered-on VMs still on it: %s" % (e, ", ".join(sorted(left)) or "none"))


def _exit(session: Any, entry: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    if entry["in_maintenance_mode"]:
        session.call_task("host %s: exit maintenance mode" % entry["name"], entry["obj"].ExitMaintenanceMode_Task,
                          timeout=params["timeout"])
    for vm in entry["restore"]:
        if vm.get("runtime.powerState") == "poweredOff":
            session.call_task("VM %s: power on after maintenance" % vm["name"], vm["obj"].PowerOnVM_Task)
        vsphere_vm.set_marker(session, vm["obj"], vm["name"], "")


def _vm_objs(session: Any, entry: Mapping[str, Any]) -> list[Any]:
    rows = session.collect(vim.HostSystem, ["vm"], objects=[entry["obj"]])
    return list(rows[0].get("vm") or []) if rows else []


def outcome(fields: Mapping[str, Any], diff: bool) -> dict[str, Any]:
    hosts = list(fields["hosts"])
    result: dict[str, Any] = dict(changed=any(h["changed"] for h in hosts) or bool(fields["settings"]), hosts=hosts,
                                  settings=list(fields["settings"]), disruptions=disruption.flatten(hosts))
    if diff:
        result["diff"] = disruption.diff_first(result["disruptions"], dict(
            before={h["name"]: h["before"] for h in hosts if h["changed"]},
            after={h["name"]: h["after"] for h in hosts if h["changed"]}))
    return result
