# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vSphere with Tanzu VM classes carrying vGPUs and the namespaces that may use them (pure: no I/O).

Over the vCenter REST API's objects (vSphere Automation API, NamespaceManagement VirtualMachineClasses and Namespaces
Instances): what a class holds, the create or update body that makes it hold what the task asks, the namespaces'
``vm_service_spec.vm_classes`` that bind classes, and which GPU profiles each namespace can reach.

Sources:
  - VirtualMachineClasses CreateSpec: ``id`` "alphanumeric (a-z and 0-9) string and with maximum length of 63
    characters and with the '-' character allowed anywhere except the first or last character"; ``cpu_count`` and
    ``memory_MB`` required; ``devices.vgpu_devices[].profile_name`` (7.0.3.0; "deprecated as of vSphere API 8.0.2.0.
    Use device changes in VirtualMachineConfigSpec associated with the VM class to add vGPU devices");
    ``config_spec`` (8.0.2.0) a VirtualMachineConfigSpec in the vSphere JSON API's form (``_typeName``), a vGPU being a
    ``VirtualPCIPassthrough`` with a ``VirtualPCIPassthroughVmiopBackingInfo`` backing.
  - VirtualMachineClasses UpdateSpec: every field optional, unset ones stay.
  - Namespaces Instances VMServiceSpec: ``content_libraries`` and ``vm_classes``, set together in an update.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from ansible_collections.gpuops.provision.plugins.module_utils._vsphere.vgpu import VgpuError

_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z")
FIELDS = (("cpu_count", "cpu_count"), ("memory_mb", "memory_MB"), ("cpu_reservation", "cpu_reservation"),
          ("memory_reservation", "memory_reservation"))
VMIOP = "VirtualPCIPassthroughVmiopBackingInfo"
DEVICE_APIS = ("auto", "devices", "config_spec")


def check_name(name: str) -> str:
    if not _DNS_LABEL.match(name or ""):
        raise VgpuError("VM class %r: the name must be a DNS label (a-z, 0-9 and '-', at most 63 characters, no '-' at "
                        "either end)" % name)
    return name


def _is_vgpu_change(change: Any) -> bool:
    device = change.get("device") if isinstance(change, Mapping) else None
    backing = device.get("backing") if isinstance(device, Mapping) else None
    return isinstance(backing, Mapping) and backing.get("_typeName") == VMIOP


def profiles_of(info: Mapping[str, Any]) -> list[str]:
    """The vGPU profiles a class holds, from devices.vgpu_devices and config_spec (sorted; repeats kept)."""
    out = [str(d.get("profile_name")) for d in ((info.get("devices") or {}).get("vgpu_devices") or [])]
    for change in ((info.get("config_spec") or {}).get("deviceChange") or []):
        if _is_vgpu_change(change):
            out.append(str(change["device"]["backing"].get("vgpu")))
    return sorted(out)


def state_of(info: Optional[Mapping[str, Any]]) -> Optional[dict[str, Any]]:
    """A class as the module reports it (None for a class that does not exist)."""
    if info is None:
        return None
    memory = info.get("memory_MB", info.get("memory_mb"))
    return dict(cpu_count=info.get("cpu_count"), memory_mb=memory, cpu_reservation=info.get("cpu_reservation"),
                memory_reservation=info.get("memory_reservation"), vgpu_profiles=profiles_of(info))


def device_api(choice: str, api_version: Optional[Sequence[int]]) -> str:
    """Where vGPUs go: config_spec from vSphere API 8.0.2 (where devices.vgpu_devices is deprecated), else devices."""
    if choice not in DEVICE_APIS:
        raise VgpuError("device_api must be one of %s, got %r" % (", ".join(DEVICE_APIS), choice))
    if choice != "auto":
        return choice
    return "config_spec" if tuple(api_version or ()) >= (8, 0, 2) else "devices"


def vgpu_change(profile: str, key: int) -> dict[str, Any]:
    return {"_typeName": "VirtualDeviceConfigSpec", "operation": "add",
            "device": {"_typeName": "VirtualPCIPassthrough", "key": key,
                       "backing": {"_typeName": VMIOP, "vgpu": profile}}}


def device_fields(info: Optional[Mapping[str, Any]], profiles: Sequence[str], api: str) -> dict[str, Any]:
    """``devices`` and ``config_spec`` that hold exactly ``profiles``, the class's other devices and fields kept."""
    devices = copy.deepcopy(dict((info or {}).get("devices") or {}))
    config = copy.deepcopy(dict((info or {}).get("config_spec") or {}))
    changes = [c for c in (config.get("deviceChange") or []) if not _is_vgpu_change(c)]
    if api == "config_spec":
        devices.pop("vgpu_devices", None)
        changes += [vgpu_change(p, -100 - i) for i, p in enumerate(profiles)]
    else:
        devices["vgpu_devices"] = [{"profile_name": p} for p in profiles]
    out: dict[str, Any] = dict(devices=devices)
    if changes or config:
        config.setdefault("_typeName", "VirtualMachineConfigSpec")
        config["deviceChange"] = changes
        out["config_spec"] = config
    return out


def plan_class(spec: Mapping[str, Any], info: Optional[Mapping[str, Any]], api: str) -> dict[str, Any]:
    """The REST call that makes class ``spec["name"]`` what the task asks (pure).

    ``spec``: name, state, cpu_count, memory_mb, cpu_reservation, memory_reservation (None: keep), vgpu_profiles (None:
    keep). Returns dict(name, operation "create"|"update"|"delete"|None, body, before, after, changed).
    """
    name = check_name(spec["name"])
    before = state_of(info)
    if spec.get("state", "present") == "absent":
        return dict(name=name, operation="delete" if info is not None else None, body=None, before=before, after=None,
                    changed=info is not None)
    after = dict(before or dict(cpu_count=None, memory_mb=None, cpu_reservation=None, memory_reservation=None,
                                vgpu_profiles=[]))
    for ours, dummy in FIELDS:
        if spec.get(ours) is not None:
            after[ours] = spec[ours]
    if spec.get("vgpu_profiles") is not None:
        after["vgpu_profiles"] = sorted(spec["vgpu_profiles"])
    if info is None:
        missing = [o for o in ("cpu_count", "memory_mb") if after[o] is None]
        if missing:
            raise VgpuError("VM class %s does not exist; creating it needs %s" % (name, " and ".join(missing)))
        body = {"id": name}
        body.update({theirs: after[ours] for ours, theirs in FIELDS if after[ours] is not None})
        if after["vgpu_profiles"]:
            body.update(device_fields(None, after["vgpu_profiles"], api))
        return dict(name=name, operation="create", body=body, before=None, after=after, changed=True)
    body = {theirs: after[ours] for ours, theirs in FIELDS if after[ours] != before[ours]}  # type: ignore[index]
    if after["vgpu_profiles"] != before["vgpu_profiles"]:  # type: ignore[index]
        body.update(device_fields(info, after["vgpu_profiles"], api))
    return dict(name=name, operation="update" if body else None, body=body or None, before=before, after=after,
                changed=bool(body))


def plan_bindings(specs: Iterable[Mapping[str, Any]], namespaces: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """{namespace: dict(before, after, changed, body)} for the classes whose ``namespaces`` the task sets: the class is
    in exactly those namespaces' vm_classes afterwards; other classes of a namespace stay.

    ``namespaces``: {name: its vm_service_spec}. Raises VgpuError naming namespaces that do not exist.
    """
    after = {ns: list((spec or {}).get("vm_classes") or []) for ns, spec in namespaces.items()}
    missing = set()
    for spec in specs:
        if spec.get("namespaces") is None:
            continue
        wanted = set(spec["namespaces"])
        missing |= wanted - set(namespaces)
        for ns, classes in after.items():
            if ns in wanted and spec["name"] not in classes:
                classes.append(spec["name"])
            elif ns not in wanted and spec["name"] in classes:
                classes.remove(spec["name"])
    if missing:
        raise VgpuError("namespace(s) %s not found; create them (with their storage) first" % ", ".join(sorted(missing)))
    out = {}
    for ns in sorted(namespaces):
        before = list((namespaces[ns] or {}).get("vm_classes") or [])
        changed = sorted(before) != sorted(after[ns])
        body = None
        if changed:
            # content_libraries and vm_classes are one VMServiceSpec: the libraries go back as they are
            body = {"vm_service_spec": {"content_libraries": list((namespaces[ns] or {}).get("content_libraries") or []),
                                        "vm_classes": sorted(after[ns])}}
        out[ns] = dict(before=sorted(before), after=sorted(after[ns]), changed=changed, body=body)
    return out


def check_deletes(plans: Iterable[Mapping[str, Any]], bindings: Mapping[str, Mapping[str, Any]],
                  infos: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuse to delete a class a namespace still binds after this task, or that VMs use (VirtualMachineClasses.delete:
    ResourceInUse)."""
    problems = []
    for plan in plans:
        if plan["operation"] != "delete":
            continue
        bound = sorted(ns for ns, b in bindings.items() if plan["name"] in b["after"])
        if bound:
            problems.append("VM class %s is still bound to namespace(s) %s; set its namespaces to [] to unbind it"
                            % (plan["name"], ", ".join(bound)))
        vms = sorted((infos.get(plan["name"]) or {}).get("vms") or [])
        if vms:
            problems.append("VM class %s is used by VM(s) %s" % (plan["name"], ", ".join(vms)))
    if problems:
        raise VgpuError("; ".join(problems) + "; nothing changed")


def exposure(class_profiles: Mapping[str, Sequence[str]], bindings: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """Which namespace reaches which GPU profile through which class: the tenancy boundary.

    ``class_profiles``: {class: profiles}; ``bindings``: {namespace: classes}. Returns dict(namespaces={namespace:
    {class: profiles}} for classes with vGPUs, profiles={profile: dict(classes, namespaces)}).
    """
    namespaces: dict[str, dict[str, list[str]]] = {}
    profiles: dict[str, dict[str, set[str]]] = {}
    for cls, names in class_profiles.items():
        for p in names:
            profiles.setdefault(p, dict(classes=set(), namespaces=set()))["classes"].add(cls)
    for ns in sorted(bindings):
        namespaces[ns] = {}
        for cls in sorted(bindings[ns]):
            if class_profiles.get(cls):
                namespaces[ns][cls] = sorted(class_profiles[cls])
                for p in class_profiles[cls]:
                    profiles[p]["namespaces"].add(ns)
    return dict(namespaces=namespaces,
                profiles={p: dict(classes=sorted(v["classes"]), namespaces=sorted(v["namespaces"]))
                          for p, v in sorted(profiles.items())})
