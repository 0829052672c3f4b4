# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a vGPU VM can run, start and move on vSphere (pure: no I/O).

Over plain facts that _vsphere/api.py reads: which GPUs of a host can take a VM's vGPUs, what a profile is
(vCenter's VirtualMachineVgpuProfileInfo, else its name), the VM hardware version several vGPUs need, the host a VM
starts on after a change, whether DRS moves a powered-on VM off a host entering maintenance mode, and the marker a
module leaves on a VM it powered off.

Sources:
  - HostGraphicsConfigGraphicsType: "shared" is VMware's vSGA, "sharedDirect" the vendor's shared passthrough that
    NVIDIA vGPU uses (vSphere API). HostGraphicsInfoVgpuMode (8.0.3.0): sameSize, mixedSize, multiInstanceGpu,
    none.
  - "By default, a GPU operates in equal-size mode": vGPUs of different sizes share a GPU only in mixed-size mode
    (NVIDIA vGPU deployment guide, Citrix Virtual Apps, "Selecting the Correct vGPU Profiles"); mixed-size mode is
    vSphere 8.0 U3's vgpuMode=mixedSize. A GPU with MIG mode on offers MIG-backed vGPUs only.
  - Several vGPUs on one VM need VM hardware version 15 or later (vSphere 6.7 U2 compatibility; NVIDIA vGPU user
    guide, "Multiple vGPU support" on VMware vSphere).
  - VirtualMachine.PowerOnVM_Task: "DRS will be invoked if the virtual machine can be automatically placed by DRS";
    the host argument "If no host is specified, the current associated host is used" (vSphere API). DRS places at
    power-on with partiallyAutomated and fullyAutomated, only recommends with manual; enabled=false leaves the VM out
    of DRS (ClusterDrsVmConfigInfo). Unset defaultVmBehavior is fullyAutomated; enableVmBehaviorOverrides defaults
    to true (ClusterDrsConfigInfo).
  - Maintenance mode: DRS migrates a powered-on VM only at fullyAutomated; vGPU VMs only when the cluster's DRS
    advanced option VgpuMMAutomationTimeoutSecs is -1 and vCenter's vgpu.hotmigrate.enabled is true (VMware KB 88271);
    otherwise EnterMaintenanceMode_Task waits for them until its timeout (vim.fault.Timedout).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import vgpu as vsphere_vgpu

# extraConfig key a module writes on a VM before it powers it off, naming itself; the next run of that module powers
# the VM on again (and removes the key) when the run that powered it off did not get that far.
RESTORE_KEY = "gpuops.provision.restorePowerState"
MIN_MULTI_VGPU_HARDWARE = 15
VGPU_MM_OPTION = "VgpuMMAutomationTimeoutSecs"
VGPU_HOTMIGRATE_SETTING = "vgpu.hotmigrate.enabled"
DRS_PLACES = ("partiallyAutomated", "fullyAutomated")


def profile_facts(name: str, api: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """What a vGPU profile is: ``board``, ``fb_gb``, ``series`` (a letter), ``mig`` (MIG-backed) and ``source``.

    ``api``: vCenter's VirtualMachineVgpuProfileInfo of the profile as a dict (``fb_gb``, ``sharing``, ``profile_class``,
    ``device``: deviceVendorId) where the host has it; then the frame buffer, MIG backing and class come from vCenter,
    and the board is the device (profiles of one device are one board). Otherwise the name tells (NVIDIA's naming);
    an unknown name gives None for what it cannot tell.
    """
    parsed = vsphere_vgpu.parse_profile(name)
    if api is None:
        if parsed is None:
            return dict(name=name, board=None, fb_gb=None, series=None, mig=None, source="name")
        return dict(name=name, board=parsed["board"], fb_gb=parsed["fb_gb"], series=parsed["series"],
                    mig=parsed["mig_slices"] is not None, source="name")
    series = "c" if api.get("profile_class") == "compute" else ((parsed or {}).get("series") or "q")
    return dict(name=name, board="device-%s" % api.get("device"), fb_gb=api.get("fb_gb"), series=series,
                mig=api.get("sharing") == "mig", source="api")


def gpu_errors(host: str, profiles: Sequence[str], gpus: Sequence[Mapping[str, Any]],
               facts: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Why ``host``'s GPUs cannot take these vGPUs together (empty when they can, or when the host reports no GPU).

    ``gpus``: the host's graphics devices (``pci_id``, ``graphics_type``, ``vgpu_mode``: None before 8.0.3.0);
    ``facts``: profile_facts() per profile.
    """
    if not profiles or not gpus:
        return []
    direct = [g for g in gpus if g.get("graphics_type") == "sharedDirect"]
    if not direct:
        types = sorted({str(g.get("graphics_type")) for g in gpus})
        return ["host %s: its GPUs are in graphics type %s (%s), which cannot run vGPUs; NVIDIA vGPU needs sharedDirect "
                "(vsphere_host_graphics)" % (host, ", ".join(types), "VMware vSGA" if types == ["shared"] else "no vGPU")]
    errors = []
    modes = [g.get("vgpu_mode") for g in direct]
    mig_gpus = [m for m in modes if m == "multiInstanceGpu"]
    sliced = sorted({p for p in profiles if facts.get(p, {}).get("mig") is False})
    if sliced and modes and len(mig_gpus) == len(modes):
        errors.append("host %s: all its GPUs are in MIG mode (vgpuMode multiInstanceGpu) and offer MIG-backed vGPUs "
                      "only, not %s" % (host, ", ".join(sliced)))
    mig_wanted = sorted({p for p in profiles if facts.get(p, {}).get("mig")})
    known = [m for m in modes if m is not None]
    if mig_wanted and known and not mig_gpus:
        errors.append("host %s: no GPU is in MIG mode (vgpuMode multiInstanceGpu), which MIG-backed %s need"
                      % (host, ", ".join(mig_wanted)))
    if len(sliced) > 1 and "mixedSize" not in modes:
        equal = [m for m in modes if m != "multiInstanceGpu"]
        if len(equal) < len(sliced):
            errors.append("host %s: vGPUs of different sizes (%s) share a GPU only in mixed-size mode (vgpuMode "
                          "mixedSize, vSphere 8.0 U3); its %d GPU(s) for time-sliced vGPUs run equal-size mode, one "
                          "size per GPU" % (host, ", ".join(sliced), len(equal)))
    return errors


def hardware_version(text: object) -> Optional[int]:
    """15 from "vmx-15"; None when the VM reports no version."""
    m = re.match(r"^vmx-(\d+)$", str(text or ""))
    return int(m.group(1)) if m else None


def plan_hardware(vm: str, profiles: Sequence[str], version: object, upgrade: bool) -> Optional[dict[str, Any]]:
    """None when the VM's hardware version can hold the vGPUs; the upgrade to plan when ``upgrade`` allows it.

    Raises VgpuError for several vGPUs on a VM older than MIN_MULTI_VGPU_HARDWARE without ``upgrade``.
    """
    have = hardware_version(version)
    if len(profiles) < 2 or have is None or have >= MIN_MULTI_VGPU_HARDWARE:
        return None
    if not upgrade:
        raise vsphere_vgpu.VgpuError("VM %s has hardware version %s; %d vGPUs on one VM need version %d or later (vSphere "
                                     "6.7 U2 compatibility); set upgrade_hardware to upgrade it while it is powered off"
                                     % (vm, version, len(profiles), MIN_MULTI_VGPU_HARDWARE))
    return dict(before=str(version), after="the host's newest")


def drs_for(cluster: Optional[Mapping[str, Any]], vm_moid: str) -> dict[str, Any]:
    """DRS for one VM: ``acts`` (DRS looks after the VM at all) and ``behavior`` (the automation level in force).

    ``cluster``: _vsphere.api.cluster_drs() facts, None for a standalone host.
    """
    if cluster is None or not cluster.get("enabled"):
        return dict(acts=False, behavior=None)
    behavior = cluster.get("default_behavior") or "fullyAutomated"
    override = (cluster.get("overrides") or {}).get(vm_moid)
    if override and cluster.get("overrides_enabled") is not False:
        if override.get("enabled") is False:
            return dict(acts=False, behavior=behavior)
        behavior = override.get("behavior") or behavior
    return dict(acts=True, behavior=behavior)


def start_host(host: str, eligible: Sequence[str], drs: Mapping[str, Any]) -> dict[str, Any]:
    """The host a VM starts on after its vGPUs change, and the host to name in PowerOnVM_Task.

    ``host``: the VM's host now; ``eligible``: hosts that can take its vGPUs (for no vGPUs: any). When the current
    host is eligible the VM starts there. Otherwise DRS places it where it may (``start_host`` None: one of the
    eligible hosts), and where it may not, vCenter would use the current host, so the first eligible host is named.
    """
    if host in eligible or not eligible:
        return dict(start_host=host, power_on_host=None)
    if drs.get("acts") and drs.get("behavior") in DRS_PLACES:
        return dict(start_host=None, power_on_host=None)
    return dict(start_host=eligible[0], power_on_host=eligible[0])


def restore_pending(extra_config: Mapping[str, Any], owner: str) -> bool:
    """Whether ``owner`` powered this VM off and has not powered it on again (its RESTORE_KEY marker)."""
    return str(extra_config.get(RESTORE_KEY) or "") == owner


def evacuation(host: str, vms: Iterable[Mapping[str, Any]], cluster: Optional[Mapping[str, Any]],
               vgpu_mm_option: Optional[str], hotmigrate: Optional[str], targets: Mapping[str, Sequence[str]],
               policy: str) -> list[dict[str, Any]]:
    """What happens to each powered-on VM of ``host`` when it enters maintenance mode.

    ``vms``: dicts(name, moid, profiles); ``cluster``: the host's cluster DRS facts (None: standalone);
    ``vgpu_mm_option``/``hotmigrate``: the two vGPU settings as read (None: unset); ``targets``: {VM name: other hosts
    that could take it}; ``policy``: what the user chose for vGPU VMs DRS cannot move ("fail", "shutdown") or
    "migrate" (the two settings will be set first).
    Returns per VM: name, vgpu, profiles, drs_behavior, fate ("migrate", "shutdown" or "blocked") and why.
    """
    settings_ok = policy == "migrate" or (str(vgpu_mm_option) == "-1" and str(hotmigrate).lower() == "true")
    out = []
    for vm in sorted(vms, key=lambda v: v["name"]):
        drs = drs_for(cluster, vm["moid"])
        vgpu = bool(vm.get("profiles"))
        reasons = []
        if cluster is None:
            reasons.append("its host is not in a cluster, so DRS cannot move it")
        elif not drs["acts"]:
            reasons.append("DRS is off for it" if cluster.get("enabled") else "DRS is off in cluster %s" % cluster["name"])
        elif drs["behavior"] != "fullyAutomated":
            reasons.append("DRS automation level %s only recommends migrations" % drs["behavior"])
        if vgpu and not settings_ok:
            reasons.append("vGPU VMs migrate on maintenance mode only with %s=-1 on the cluster (is %s) and %s=true on "
                           "vCenter (is %s) (KB 88271)" % (VGPU_MM_OPTION, vgpu_mm_option, VGPU_HOTMIGRATE_SETTING, hotmigrate))
        if not reasons and not targets.get(vm["name"]):
            reasons.append("no other connected host outside maintenance mode can take it")
        fate = "migrate"
        if reasons:
            fate = "shutdown" if vgpu and policy == "shutdown" else "blocked"
        out.append(dict(name=vm["name"], vgpu=vgpu, profiles=list(vm.get("profiles") or []),
                        drs_behavior=drs["behavior"], fate=fate, why="; ".join(reasons) or None))
    return out
