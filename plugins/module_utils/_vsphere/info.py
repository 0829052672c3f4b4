# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU facts of ESXi hosts and their vGPU VMs (vsphere_gpu_info), read in bulk through one session."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api as vsphere_api, vgpu
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import placement


def vm_drs(cluster: Optional[Dict[str, Any]], moid: str) -> Dict[str, Any]:
    """The VM's DRS override and the automation level in force (the override's, else the cluster default)."""
    if cluster is None:
        return dict(drs_override=None, drs_behavior=None)
    override = cluster["overrides"].get(moid)
    behavior = (override or {}).get("behavior") or cluster["default_behavior"]
    return dict(drs_override=override, drs_behavior=behavior)


def gather(session: Any, params: Dict[str, Any], warnings: List[str]) -> Dict[str, Any]:
    hosts = session.hosts(params["datacenter"], params["cluster"], params["esxi_hostname"])
    clusters = vsphere_api.cluster_names(session)
    out: List[Dict[str, Any]] = []
    by_moid: Dict[str, Dict[str, Any]] = {}
    for row in hosts:
        parent = row.get("parent")
        entry = dict(
            name=row["name"], moid=row["moid"],
            cluster=clusters.get(parent._moId) if parent is not None else None,
            connection_state=row.get("runtime.connectionState"),
            in_maintenance_mode=bool(row.get("runtime.inMaintenanceMode")),
            esxi_version=vsphere_api.esxi_version(row),
            gpu_host=vgpu.is_gpu_host(row),
            gpus=vsphere_api.graphics_devices(row.get("config.graphicsInfo")),
            graphics_config=vsphere_api.graphics_config(row.get("config.graphicsConfig")),
            profiles=vsphere_api.host_offer(row),
            vgpu_vms=[],
            driver=dict(vib=None, vib_version=None, version=None, source=None),
        )
        if entry["gpu_host"] and entry["connection_state"] == "connected":
            api = vsphere_api.vgpu_profile_info(session, row, warnings)
            entry["profile_info"] = [dict(placement.profile_facts(p, api.get(p)), stun_time_s=(api.get(p) or {}).get("stun_time_s"))
                                     for p in entry["profiles"]]
        else:
            entry["profile_info"] = []
        if params["gather_driver"] and entry["gpu_host"] and entry["connection_state"] == "connected":
            entry["driver"] = vsphere_api.host_driver(session, row, params["driver_vib_regex"], warnings)
        out.append(entry)
        by_moid[row["moid"]] = entry
    result: Dict[str, Any] = dict(hosts=out)
    host_cluster = {row["moid"]: row["parent"]._moId for row in hosts if row.get("parent") is not None}
    if params["gather_vgpu_vms"]:
        container = session.scope_container(params["datacenter"], params["cluster"])
        vgpu_vms: List[Dict[str, Any]] = []
        # DRS overrides of the hosts' clusters, in one retrieval (ClusterConfigInfoEx.drsVmConfig).
        drs = vsphere_api.cluster_drs(session, objects=vsphere_api.host_clusters(hosts))
        for vm in session.vms(container):
            devs = vsphere_api.vm_vgpus(vm.get("config.hardware.device"))
            host = vm.get("runtime.host")
            if not devs or host is None or host._moId not in by_moid:
                continue
            item = dict(name=vm["name"], moid=vm["moid"], host=by_moid[host._moId]["name"],
                        power_state=vm.get("runtime.powerState"), profiles=[d["profile"] for d in devs])
            item.update(vm_drs(drs.get(host_cluster.get(host._moId)), vm["moid"]))
            by_moid[host._moId]["vgpu_vms"].append({k: v for k, v in item.items() if k != "host"})
            vgpu_vms.append(item)
        result["vgpu_vms"] = sorted(vgpu_vms, key=lambda v: v["name"])
    if params["gather_driver"]:
        judged = [h for h in out if h["gpu_host"] and h["connection_state"] == "connected"]
        result["drift"] = vgpu.drift_by_cluster({h["name"]: h["driver"]["version"] for h in judged},
                                                {h["name"]: h["cluster"] for h in judged})
    return result
