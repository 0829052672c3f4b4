# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure vSphere vGPU planning: profile parsing and validation, vGPU list diff, VM settings, power policy, drift.

Nothing here talks to vSphere; plugins/module_utils/_vsphere.py gathers the data and applies the plans.
"""

from __future__ import annotations

import re

# grid_a100-4c, grid_a100d-40c, grid_a100-3-20c (MIG-backed: <slices>-<fb>), nvidia_l40s-48q
_PROFILE_RE = re.compile(r"^(?P<prefix>[a-z]+)_(?P<board>[a-z0-9]+?)-(?:(?P<slices>\d+)-)?(?P<fb>\d+)(?P<series>[a-z])(?P<suffix>[a-z0-9]*)$",
                         re.IGNORECASE)

# vSphere 6.7U3+: up to 4 NVIDIA vGPUs per VM, only max-framebuffer Q/C profiles (reference/vsphere.md 1.3).
DEFAULT_MAX_VGPUS = 4
MULTI_VGPU_SERIES = ("q", "c")

GRAPHICS_TYPES = ("shared", "sharedDirect")
ASSIGNMENT_POLICIES = ("performance", "consolidation")
POWER_POLICIES = ("fail", "power_off", "shutdown_guest")

MMIO_ENABLE_KEY = "pciPassthru.use64bitMMIO"
MMIO_SIZE_KEY = "pciPassthru.64bitMMIOSizeGB"


class VgpuError(Exception):
    """Invalid input; the message names the object and the reason."""


def parse_profile(name):
    """Split a vGPU profile name into board, framebuffer (GiB), series letter and MIG slices; None if unknown."""
    m = _PROFILE_RE.match(name or "")
    if not m:
        return None
    return dict(name=name, board=m.group("board").lower(), fb_gb=int(m.group("fb")),
                series=m.group("series").lower(), mig_slices=int(m.group("slices")) if m.group("slices") else None)


def max_framebuffer(offered):
    """Largest framebuffer per board among the offered time-sliced profiles: {board: GiB}."""
    best = {}
    for name in offered:
        p = parse_profile(name)
        if p and p["mig_slices"] is None:
            best[p["board"]] = max(best.get(p["board"], 0), p["fb_gb"])
    return best


def multi_vgpu_errors(profiles, offered, max_vgpus=DEFAULT_MAX_VGPUS):
    """Reasons why this list cannot be attached to one VM together (empty when fine)."""
    if len(profiles) <= 1:
        return []
    errors = []
    if len(profiles) > max_vgpus:
        errors.append("%d vGPUs requested, at most %d are allowed per VM" % (len(profiles), max_vgpus))
    if len(set(profiles)) > 1:
        errors.append("multiple vGPUs must all use the same profile, got %s" % ", ".join(sorted(set(profiles))))
    full = max_framebuffer(offered)
    for name in sorted(set(profiles)):
        p = parse_profile(name)
        if p is None:
            errors.append("profile %s: unrecognised name, cannot prove it allows multiple vGPUs" % name)
            continue
        if p["mig_slices"] is not None:
            errors.append("profile %s: MIG-backed profiles cannot be combined on one VM" % name)
        if p["series"] not in MULTI_VGPU_SERIES:
            errors.append("profile %s: only Q- and C-series profiles allow multiple vGPUs" % name)
        if p["mig_slices"] is None and p["board"] in full and p["fb_gb"] != full[p["board"]]:
            errors.append("profile %s: multiple vGPUs need the full-framebuffer profile (%s-%d%s)"
                          % (name, name.split("-")[0], full[p["board"]], p["series"]))
    return errors


def hosts_offering(profiles, host_offers):
    """Names of hosts that offer every profile in the list; host_offers is {host: [profile, ...]}."""
    wanted = set(profiles)
    return sorted(h for h, offered in host_offers.items() if wanted <= set(offered or []))


def validate_profiles(vm, profiles, host, host_offers, placement="host", max_vgpus=DEFAULT_MAX_VGPUS):
    """Check a desired vGPU list for a VM against what its host (or cluster) offers.

    Returns the sorted list of hosts that could run the VM; raises VgpuError naming VM, host, profile and reason.
    """
    if placement not in ("host", "cluster"):
        raise VgpuError("VM %s: unknown placement %r" % (vm, placement))
    if not profiles:
        return sorted(host_offers) if placement == "cluster" else [host]
    scope = dict(host_offers) if placement == "cluster" else {host: host_offers.get(host, [])}
    errors = []
    for name in sorted(set(profiles)):
        where = hosts_offering([name], host_offers)
        if not hosts_offering([name], scope):
            if where and placement == "host":
                errors.append("profile %s is not offered by host %s, only by %s (use placement=cluster to allow them)"
                              % (name, host, ", ".join(where)))
            elif placement == "host":
                errors.append("profile %s is not offered by host %s (offered: %s)"
                              % (name, host, ", ".join(sorted(host_offers.get(host) or [])) or "none"))
            else:
                errors.append("profile %s is not offered by any host in the cluster of %s" % (name, host))
    if errors:
        raise VgpuError("VM %s: %s" % (vm, "; ".join(errors)))
    eligible = hosts_offering(profiles, scope)
    if not eligible:
        raise VgpuError("VM %s: no single host offers all of %s" % (vm, ", ".join(sorted(set(profiles)))))
    # Multi-vGPU rules judged against the richest offer in scope: full framebuffer is a property of the board.
    offered = sorted({p for h in eligible for p in scope[h]})
    multi = multi_vgpu_errors(list(profiles), offered, max_vgpus)
    if multi:
        raise VgpuError("VM %s on host %s: %s" % (vm, host, "; ".join(multi)))
    return eligible


def diff_vgpus(current, desired):
    """Plan the device changes that turn the VM's vGPU list into exactly ``desired``.

    current: list of dicts with ``key`` and ``profile`` (the VM's VirtualPCIPassthrough vGPU devices).
    desired: list of profile names (order irrelevant, duplicates mean several vGPUs).
    Returns dict(keep=[device], remove=[device], add=[profile]); a changed profile is a remove plus an add,
    which is the form real vCenter documents (edit of backing.vgpu is not verified there).
    """
    remaining = list(desired)
    keep, remove = [], []
    for dev in sorted(current, key=lambda d: d["key"]):
        if dev["profile"] in remaining:
            remaining.remove(dev["profile"])
            keep.append(dev)
        else:
            remove.append(dev)
    return dict(keep=keep, remove=remove, add=remaining)


def plan_extra_config(current, use_64bit_mmio=None, mmio_size_gb=None):
    """extraConfig changes for large-BAR devices; None options leave the VM as it is. Returns {key: value}."""
    want = {}
    if use_64bit_mmio is not None:
        want[MMIO_ENABLE_KEY] = "TRUE" if use_64bit_mmio else "FALSE"
    if mmio_size_gb is not None:
        if mmio_size_gb <= 0:
            raise VgpuError("mmio_size_gb must be a positive number of GiB, got %s" % mmio_size_gb)
        want[MMIO_SIZE_KEY] = str(mmio_size_gb)
    changes = {}
    for key, value in want.items():
        have = current.get(key)
        # vSphere treats TRUE/true alike; compare case-insensitively so a hand-set value is not rewritten.
        if have is None or str(have).lower() != value.lower():
            changes[key] = value
    return changes


def plan_power(vm, power_state, needs_change, policy):
    """Decide how to get a VM into a reconfigurable state.

    Returns dict(power_off=None|'hard'|'guest', power_on_after=bool); raises VgpuError when policy forbids it.
    """
    if policy not in POWER_POLICIES:
        raise VgpuError("VM %s: unknown power_policy %r" % (vm, policy))
    if not needs_change or power_state == "poweredOff":
        return dict(power_off=None, power_on_after=False)
    if power_state == "suspended":
        raise VgpuError("VM %s is suspended; resume and shut it down before changing vGPUs" % vm)
    if policy == "fail":
        raise VgpuError("VM %s is %s; vGPUs can only be changed on a powered-off VM "
                        "(set power_policy=power_off or shutdown_guest to allow a power cycle)" % (vm, power_state))
    return dict(power_off="hard" if policy == "power_off" else "guest", power_on_after=True)


def plan_vm(vm, host, current_devices, desired, host_offers, power_state, memory_locked, extra_config,
            placement="host", reserve_all_memory=True, use_64bit_mmio=None, mmio_size_gb=None,
            power_policy="fail", max_vgpus=DEFAULT_MAX_VGPUS):
    """Full plan for one VM; pure, raises VgpuError on invalid input before anything is touched."""
    eligible = validate_profiles(vm, desired, host, host_offers, placement, max_vgpus)
    devices = diff_vgpus(current_devices, desired)
    extra = plan_extra_config(extra_config, use_64bit_mmio, mmio_size_gb)
    lock_memory = bool(desired) and reserve_all_memory and not memory_locked
    needs_change = bool(devices["remove"] or devices["add"] or extra or lock_memory)
    power = plan_power(vm, power_state, needs_change, power_policy)
    before = sorted(d["profile"] for d in current_devices)
    after = sorted(desired)
    return dict(
        vm=vm, host=host, eligible_hosts=eligible, changed=needs_change,
        remove=devices["remove"], add=devices["add"], keep=devices["keep"],
        lock_memory=lock_memory, extra_config=extra, power=power,
        before=dict(profiles=before, memory_reservation_locked_to_max=memory_locked,
                    extra_config={k: extra_config.get(k) for k in (MMIO_ENABLE_KEY, MMIO_SIZE_KEY) if k in extra_config}),
        after=dict(profiles=after, memory_reservation_locked_to_max=memory_locked or lock_memory,
                   extra_config=dict({k: extra_config.get(k) for k in (MMIO_ENABLE_KEY, MMIO_SIZE_KEY) if k in extra_config}, **extra)),
    )


def plan_graphics(host, current, default_graphics_type=None, assignment_policy=None, devices=None, known_devices=None):
    """Plan a HostGraphicsConfig change.

    current: dict(default_graphics_type, assignment_policy, devices={pci_id: graphics_type}).
    devices: list of dict(pci_id, graphics_type) to set; other per-device entries stay.
    known_devices: PCI ids of the host's graphics devices; unknown ones are rejected.
    Returns dict(changed, before, after).
    """
    if default_graphics_type is not None and default_graphics_type not in GRAPHICS_TYPES:
        raise VgpuError("host %s: default_graphics_type must be one of %s" % (host, ", ".join(GRAPHICS_TYPES)))
    if assignment_policy is not None and assignment_policy not in ASSIGNMENT_POLICIES:
        raise VgpuError("host %s: assignment_policy must be one of %s" % (host, ", ".join(ASSIGNMENT_POLICIES)))
    after = dict(default_graphics_type=current.get("default_graphics_type"),
                 assignment_policy=current.get("assignment_policy"),
                 devices=dict(current.get("devices") or {}))
    if default_graphics_type is not None:
        after["default_graphics_type"] = default_graphics_type
    if assignment_policy is not None:
        after["assignment_policy"] = assignment_policy
    for dev in devices or []:
        pci = normalize_pci_id(dev.get("pci_id"))
        if known_devices is not None and pci not in {normalize_pci_id(k) for k in known_devices}:
            raise VgpuError("host %s: graphics device %s not found (devices: %s)"
                            % (host, dev.get("pci_id"), ", ".join(sorted(known_devices)) or "none"))
        if dev.get("graphics_type") not in GRAPHICS_TYPES:
            raise VgpuError("host %s: device %s: graphics_type must be one of %s" % (host, pci, ", ".join(GRAPHICS_TYPES)))
        after["devices"][pci] = dev["graphics_type"]
    before = dict(default_graphics_type=current.get("default_graphics_type"),
                  assignment_policy=current.get("assignment_policy"),
                  devices=dict(current.get("devices") or {}))
    return dict(host=host, changed=before != after, before=before, after=after)


def normalize_pci_id(pci_id):
    """vSphere writes PCI ids as 0000:3b:00.0; accept 3b:00.0 and upper case too."""
    if not pci_id:
        raise VgpuError("pci_id is required for every device entry")
    pci = str(pci_id).strip().lower()
    if re.match(r"^[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", pci):
        pci = "0000:" + pci
    return pci


_DRIVER_VERSION_RE = re.compile(r"(?<![\d.])(\d{3,}\.\d+(?:\.\d+)?)")


def driver_version(vib_version):
    """NVIDIA driver version (e.g. 535.154.02) from a VIB version such as 535.154.02-1OEM.800.1.0.20613240."""
    m = _DRIVER_VERSION_RE.search(vib_version or "")
    return m.group(1) if m else None


def match_driver_vib(packages, name_regex):
    """Pick the NVIDIA host driver from a list of dicts(name, vendor, version). Returns the package or None."""
    rx = re.compile(name_regex)
    found = [p for p in packages if rx.search(p.get("name") or "") or rx.search(p.get("vendor") or "")]
    # The host driver VIB carries "Driver" in its name; prefer it over companion VIBs (e.g. gpu management daemons).
    found.sort(key=lambda p: ("driver" not in (p.get("name") or "").lower(), p.get("name") or ""))
    return found[0] if found else None


def parse_sensor_component(sensor_name):
    """Parse a 'Software Components' health sensor name '<vendor> <name> <version> <date>'."""
    parts = (sensor_name or "").split()
    if len(parts) < 3:
        return None
    return dict(vendor=parts[0], name=parts[1], version=parts[2])


def drift_report(host_versions):
    """Group GPU hosts by NVIDIA driver version.

    host_versions: {host: version or None}. Returns dict(consistent, versions={version: [hosts]}, missing=[hosts]).
    A host without a driver counts as drift: it cannot run vGPU VMs that the others can.
    """
    versions, missing = {}, []
    for host in sorted(host_versions):
        v = host_versions[host]
        if v:
            versions.setdefault(v, []).append(host)
        else:
            missing.append(host)
    return dict(consistent=len(versions) <= 1 and not missing, versions=versions, missing=missing,
                majority=max(sorted(versions), key=lambda k: len(versions[k])) if versions else None)
