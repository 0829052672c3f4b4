# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host graphics configuration of ESXi hosts (vsphere_host_graphics): read and plan every host in scope (pure
decisions in vgpu.plan_graphics), then update the hosts whose configuration differs."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api, vgpu

try:
    from pyVmomi import vim, vmodl
except ImportError:
    pass  # reported through api.HAS_PYVMOMI

Row = Dict[str, Any]


def plan_hosts(session: Any, params: Dict[str, Any]) -> List[Tuple[Row, Dict[str, Any]]]:
    """(host row, plan) for every host in scope; raises, naming the host, when any host is invalid."""
    p = params
    hosts = session.hosts(p["datacenter"], p["cluster"], p["esxi_hostname"])
    plans: List[Tuple[Row, Dict[str, Any]]] = []
    for row in hosts:
        gpus = api.graphics_devices(row.get("config.graphicsInfo"))
        if not gpus and p["skip_non_gpu_hosts"]:
            plans.append((row, dict(host=row["name"], changed=False, skipped=True, before=None, after=None)))
            continue
        if not gpus:
            raise vgpu.VgpuError("host %s: no graphics devices" % row["name"])
        if row.get("runtime.connectionState") != "connected":
            raise vgpu.VgpuError("host %s: %s, cannot change graphics settings"
                                 % (row["name"], row.get("runtime.connectionState")))
        wants_mode = any(d.get("vgpu_mode") for d in p["devices"])
        plan = vgpu.plan_graphics(row["name"], api.graphics_config(row.get("config.graphicsConfig")),
                                  p["default_graphics_type"], p["assignment_policy"], p["devices"],
                                  known_devices=[g["pci_id"] for g in gpus],
                                  vgpu_mode_unsupported=api.vgpu_mode_unsupported(session, row) if wants_mode else None)
        plan["skipped"] = False
        plans.append((row, plan))
    return plans


def running_vms(session: Any, rows: List[Row]) -> Dict[str, List[str]]:
    """Powered-on VMs by host moid, of the hosts ``rows``, in one retrieval."""
    running: Dict[str, List[str]] = {}
    if rows:
        vm_objs: List[Any] = []
        for row in session.collect(vim.HostSystem, ["vm"], objects=[r["obj"] for r in rows]):
            vm_objs.extend(row.get("vm") or [])
        for vm in session.vms(props=["name", "runtime.host", "runtime.powerState"], objects=vm_objs):
            if vm.get("runtime.powerState") == "poweredOn" and vm.get("runtime.host") is not None:
                running.setdefault(vm["runtime.host"]._moId, []).append(vm["name"])
    return running


def run(session: Any, params: Dict[str, Any], check_mode: bool, warn: Callable[[str], Any]) -> List[Dict[str, Any]]:
    """Plan every host, then update the changed ones (not in check mode); return the per-host results.

    ``warn`` is called at once for each changed host with powered-on VMs. A failed update names the host and the
    hosts already changed. A host's ``disruptions`` name the Xorg restart of ``restart_xorg`` (only where a device is
    or was in shared (vSGA) mode), also in check mode.
    """
    plans = plan_hosts(session, params)
    running = running_vms(session, [row for row, plan in plans if plan["changed"]])
    results: List[Dict[str, Any]] = []
    done: List[str] = []
    for row, plan in plans:
        vms = sorted(running.get(row["moid"], []))
        pcis = [g["pci_id"] for g in api.graphics_devices(row.get("config.graphicsInfo"))]
        xorg = bool(plan["changed"] and params["restart_xorg"] and vgpu.vsga_involved(plan["before"], plan["after"], pcis))
        if plan["changed"] and vms:
            warn("host %s: %d powered-on VM(s) (%s) keep the old graphics settings until they are power-cycled"
                 % (row["name"], len(vms), ", ".join(vms[:10])))
        if plan["changed"] and not check_mode:
            gm = row.get("configManager.graphicsManager")
            if gm is None:
                raise api.VsphereError("host %s: no HostGraphicsManager" % row["name"])
            try:
                gm.UpdateGraphicsConfig(api.edit_graphics_config(row.get("config.graphicsConfig"), plan["after"]))
            except vmodl.MethodFault as e:
                raise api.VsphereError("host %s: UpdateGraphicsConfig failed: %s (already changed: %s)"
                                       % (row["name"], api.fault_message(e), ", ".join(done) or "none"))
            except api.TransportError as e:
                raise api.VsphereError("host %s: whether UpdateGraphicsConfig was applied is unknown: %s; a re-run "
                                       "reads the host again and finishes (already changed: %s)"
                                       % (row["name"], e, ", ".join(done) or "none"))
            done.append(row["name"])
            if xorg:
                try:
                    row["obj"].configManager.serviceSystem.RestartService(id="xorg")
                except (vmodl.MethodFault, api.VsphereError) as e:
                    # The change is made; from vSphere 7.0 U1 Xorg serves vSGA only and may not start otherwise.
                    warn("host %s: the graphics settings are changed, but restarting Xorg failed (%s); from vSphere 7.0 "
                         "Update 1 Xorg is needed only for devices in shared (vSGA) mode (VMware KB 318047)"
                         % (row["name"], api.fault_message(e) if isinstance(e, vmodl.MethodFault) else e))
        results.append(dict(name=row["name"], changed=plan["changed"], skipped=plan["skipped"],
                            before=plan["before"], after=plan["after"], running_vms=vms,
                            disruptions=["restart the Xorg service of host %s" % row["name"]] if xorg else []))
    return results
