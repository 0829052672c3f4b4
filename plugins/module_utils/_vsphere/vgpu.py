# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure vSphere vGPU planning: profile parsing and validation, vGPU list diff, VM settings, power policy, drift.

Nothing here talks to vSphere; plugins/module_utils/_vsphere/api.py gathers the data and applies the plans.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from ansible_collections.gpuops.provision.plugins.module_utils._common import drift

# grid_a100-4c, grid_a100d-40c, grid_a100-3-20c (MIG-backed: <slices>-<fb>), nvidia_l40s-48q
_PROFILE_RE = re.compile(r"^(?P<prefix>[a-z]+)_(?P<board>[a-z0-9]+?)-(?:(?P<slices>\d+)-)?(?P<fb>\d+)(?P<series>[a-z])(?P<suffix>[a-z0-9]*)\Z",
                         re.IGNORECASE)

# Which vGPU combinations one VM may hold, by ESXi release and NVIDIA host driver branch. Newest first: with
# multi_vgpu_rules=auto the first entry whose minimums the VM's host meets applies; unknown versions get "legacy".
# Sources (read 2026-12-01):
#   [aie81] NVIDIA AI Enterprise 8.1, "Multi-vGPU" (docs.nvidia.com/ai-enterprise/release-8/8.1/infra-software/vgpu/
#           features/multi-vgpu.html): vGPUs "with differing amounts of frame buffer" on one VM "provided the board type
#           and the series of all the vGPUs are the same"; MIG-backed vGPUs of one board combine (A100-4-20C with
#           A100-2-10C); the board tables list VMware vSphere support "Since VMware vSphere 8.0".
#   [vgpu17] NVIDIA vGPU deployment guide, Citrix Virtual Apps, "Selecting the Correct vGPU Profiles": vGPUs of
#           different frame buffer sizes share a GPU only from vGPU 17 (R550) on, in mixed-size mode. A VM's differently
#           sized time-sliced vGPUs may land on one GPU, so mixed sizes are gated on R550.
#   [vmw8]  VMware, "vSphere 8 Expands Machine Learning Support: Device Groups for NVIDIA GPUs and NICs" (2022-08-16):
#           "With vSphere 8, you have the capability to add up to 8 virtual GPUs (vGPUs) to one VM".
#   [67u3]  The rule this collection shipped first (NVIDIA vGPU user guide, "vGPUs that support multiple vGPUs assigned
#           to a single VM", vSphere 6.7 U3 and 7.x): up to 4, all the same full-framebuffer Q- or C-series profile,
#           no MIG-backed vGPUs.
MULTI_VGPU_RULES: tuple[dict[str, Any], ...] = (
    dict(name="current", min_esxi=(8, 0, 0), min_driver=(550,), max_vgpus=8, mixed_sizes=True, mig_backed=True,
         source="NVIDIA AI Enterprise 8.1 Multi-vGPU; vGPU 17 (R550) mixed sizes; vSphere 8: 8 vGPUs per VM"),
    dict(name="vsphere8", min_esxi=(8, 0, 0), min_driver=None, max_vgpus=8, mixed_sizes=False, mig_backed=True,
         source="NVIDIA AI Enterprise 8.1 Multi-vGPU (MIG-backed since vSphere 8.0); vSphere 8: 8 vGPUs per VM"),
    dict(name="legacy", min_esxi=(6, 7, 3), min_driver=None, max_vgpus=4, mixed_sizes=False, mig_backed=False,
         source="vSphere 6.7 U3 and 7.x: up to 4 vGPUs of one full-framebuffer Q/C profile"),
    dict(name="single", min_esxi=None, min_driver=None, max_vgpus=1, mixed_sizes=False, mig_backed=False,
         source="before vSphere 6.7 U3: one vGPU per VM"),
)
MULTI_VGPU_CHOICES = ("auto", "current", "vsphere8", "legacy")
DEFAULT_MAX_VGPUS = 4  # what "legacy" allows; kept for callers that do not pass rules
MULTI_VGPU_SERIES = ("q", "c")

# C-series (NVIDIA vGPU for Compute) on ESXi. Source (read 2026-12-01): NVIDIA AI Enterprise 5.x, "Requirements for
# Using NVIDIA vGPU (C-Series)" (docs.nvidia.com/ai-enterprise/release-5/latest/appendix/appendix-misc.html):
# "64-bit MMIO and EFI boot must be enabled for the VM"; "The VM's MMIO space must be increased to 64 GB" (VMware KB
# 2142307), more where the GPU needs more. The size default follows VMware's passthrough sizing, the power of two at
# or above twice the devices' memory (VMware, "Using GPUs with Virtual Machines on vSphere - Part 2: VMDirectPath
# I/O"), never below NVIDIA's 64 GB; MMIO space is address space, not memory, so a generous value costs nothing.
C_SERIES = "c"
C_SERIES_MIN_MMIO_GB = 64

GRAPHICS_TYPES = ("shared", "sharedDirect")
# HostGraphicsConfigVgpuMode, "Since vSphere API Release 8.0.3.0" (pyVmomi _typeinfo_vim.py
# vim.host.GraphicsConfig.VgpuMode; govmomi vim25/types HostGraphicsConfigDeviceType.VgpuMode).
VGPU_MODES = ("sameSize", "mixedSize")
ASSIGNMENT_POLICIES = ("performance", "consolidation")
POWER_POLICIES = ("fail", "power_off", "shutdown_guest")

MMIO_ENABLE_KEY = "pciPassthru.use64bitMMIO"
MMIO_SIZE_KEY = "pciPassthru.64bitMMIOSizeGB"


class VgpuError(Exception):
    """Invalid input; the message names the object and the reason."""


def parse_profile(name: Optional[str]) -> Optional[dict[str, Any]]:
    """Split a vGPU profile name into board, framebuffer (GiB), series letter and MIG slices; None if unknown."""
    m = _PROFILE_RE.match(name or "")
    if not m:
        return None
    return dict(name=name, board=m.group("board").lower(), fb_gb=int(m.group("fb")),
                series=m.group("series").lower(), mig_slices=int(m.group("slices")) if m.group("slices") else None)


def max_framebuffer(offered: Iterable[str]) -> dict[str, int]:
    """Largest framebuffer per board among the offered time-sliced profiles: {board: GiB}."""
    best: dict[str, int] = {}
    for name in offered:
        p = parse_profile(name)
        if p and p["mig_slices"] is None:
            best[p["board"]] = max(best.get(p["board"], 0), p["fb_gb"])
    return best


def parse_version(text: object) -> Optional[tuple[int, ...]]:
    """(8, 0, 3) from '8.0.3' or '8.0.3.0', (550, 90, 5) from '550.90.05'; None when there is no number."""
    nums = re.findall(r"\d+", str(text or ""))
    return tuple(int(n) for n in nums[:3]) if nums else None


def multi_vgpu_rules(choice: str = "auto", esxi_version: Optional[str] = None, driver_version: Optional[str] = None) -> dict[str, Any]:
    """The multi-vGPU rule set for a host (an entry of MULTI_VGPU_RULES plus ``basis``, why it applies)."""
    if choice not in MULTI_VGPU_CHOICES:
        raise VgpuError("multi_vgpu_rules must be one of %s, got %r" % (", ".join(MULTI_VGPU_CHOICES), choice))
    if choice != "auto":
        rules = dict(next(r for r in MULTI_VGPU_RULES if r["name"] == choice))
        rules["basis"] = "multi_vgpu_rules=%s" % choice
        return rules
    esxi, driver = parse_version(esxi_version), parse_version(driver_version)
    basis = "ESXi %s, NVIDIA driver %s" % (esxi_version or "unknown", driver_version or "unknown")
    if esxi is None:
        # Without the host's release the oldest multi-vGPU rules are the ones every release accepts.
        rules = dict(next(r for r in MULTI_VGPU_RULES if r["name"] == "legacy"))
    else:
        rules = dict(next(r for r in MULTI_VGPU_RULES
                          if (r["min_esxi"] is None or esxi >= r["min_esxi"])
                          and (r["min_driver"] is None or (driver is not None and driver >= r["min_driver"]))))
    rules["basis"] = basis
    return rules


def facts_as_parsed(facts: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """A profile's facts from vCenter (_vsphere.placement.profile_facts, source "api") in parse_profile()'s shape; None
    for facts from the name (parse_profile reads those) or when vCenter does not say the frame buffer."""
    if facts.get("source") != "api" or facts.get("fb_gb") is None:
        return None
    return dict(name=facts["name"], board=facts["board"], fb_gb=facts["fb_gb"], series=facts["series"],
                mig_slices=1 if facts.get("mig") else None)


def multi_vgpu_errors(profiles: Sequence[str], offered: Iterable[str], max_vgpus: Optional[int] = None,
                      rules: Optional[Mapping[str, Any]] = None,
                      facts: Optional[Mapping[str, Mapping[str, Any]]] = None) -> list[str]:
    """Reasons why this list cannot be attached to one VM together (empty when fine).

    rules: from multi_vgpu_rules(); default the "legacy" rules. max_vgpus overrides the rules' limit.
    facts: {profile: _vsphere.placement.profile_facts}; vCenter's facts of a profile win over its name.
    """
    if len(profiles) <= 1:
        return []
    rules = rules or multi_vgpu_rules("legacy")
    limit = max_vgpus if max_vgpus is not None else rules["max_vgpus"]
    errors = []
    if len(profiles) > limit:
        errors.append("%d vGPUs requested, at most %d are allowed per VM" % (len(profiles), limit))
    parsed = {}
    for name in sorted(set(profiles)):
        p = facts_as_parsed((facts or {}).get(name) or {}) or parse_profile(name)
        if p is None:
            errors.append("profile %s: unrecognised name, cannot prove it allows multiple vGPUs" % name)
        else:
            parsed[name] = p
    boards = sorted({p["board"] for p in parsed.values()})
    if len(boards) > 1:
        errors.append("multiple vGPUs must be of one board type, got %s" % ", ".join(boards))
    series = sorted({p["series"].upper() for p in parsed.values()})
    if len(series) > 1:
        errors.append("multiple vGPUs must be of one series, got %s" % ", ".join(series))
    for name, p in sorted(parsed.items()):
        if p["series"] not in MULTI_VGPU_SERIES:
            errors.append("profile %s: only Q- and C-series profiles allow multiple vGPUs" % name)
        if p["mig_slices"] is not None and not rules["mig_backed"]:
            errors.append("profile %s: MIG-backed profiles cannot be combined on one VM before vSphere 8.0" % name)
    if not rules["mixed_sizes"]:
        # Time-sliced vGPUs of one VM: all the same profile, the one with the board's whole frame buffer.
        sliced = sorted(n for n, p in parsed.items() if p["mig_slices"] is None)
        if len(sliced) > 1:
            errors.append("multiple vGPUs must all use the same profile, got %s" % ", ".join(sorted(set(profiles))))
        full = max_framebuffer(offered)
        for name in sliced:
            p = parsed[name]
            # The board as the offered profiles' names give it: vCenter's facts name the device instead.
            board = (parse_profile(name) or p)["board"]
            if board in full and p["fb_gb"] != full[board]:
                errors.append("profile %s: multiple vGPUs need the full-framebuffer profile (%s-%d%s)"
                              % (name, name.split("-")[0], full[board], p["series"]))
    return errors


def hosts_offering(profiles: Iterable[str], host_offers: Mapping[str, Optional[Iterable[str]]]) -> list[str]:
    """Names of hosts that offer every profile in the list; host_offers is {host: [profile, ...]}."""
    wanted = set(profiles)
    return sorted(h for h, offered in host_offers.items() if wanted <= set(offered or []))


def validate_profiles(vm: str, profiles: Sequence[str], host: str, host_offers: Mapping[str, Sequence[str]], placement: str = "host",
                      max_vgpus: Optional[int] = None, host_rules: Optional[Mapping[str, Mapping[str, Any]]] = None,
                      host_errors: Optional[Mapping[str, Sequence[str]]] = None,
                      facts: Optional[Mapping[str, Mapping[str, Mapping[str, Any]]]] = None) -> list[str]:
    """Check a desired vGPU list for a VM against what its host (or cluster) offers.

    host_rules: {host: multi_vgpu_rules(...)}; hosts not in it get the "legacy" rules.
    host_errors: {host: [why its GPUs cannot take these vGPUs]} (_vsphere.placement.gpu_errors); such hosts are not
    eligible. facts: {host: {profile: facts}} where vCenter described the profiles (multi_vgpu_errors).
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
    offering = hosts_offering(profiles, scope)
    if not offering:
        raise VgpuError("VM %s: no single host offers all of %s" % (vm, ", ".join(sorted(set(profiles)))))
    # Full framebuffer is a property of the board: judged against the richest offer in scope.
    offered = sorted({p for h in offering for p in scope[h]})
    rejected = {}
    for h in offering:
        rules = (host_rules or {}).get(h) or multi_vgpu_rules("legacy")
        multi = multi_vgpu_errors(list(profiles), offered, max_vgpus, rules, (facts or {}).get(h))
        why = ["%s (multi-vGPU rules %s: %s)" % ("; ".join(multi), rules["name"], rules["basis"])] if multi else []
        why += list((host_errors or {}).get(h) or [])
        if why:
            rejected[h] = "; ".join(why)
    eligible = [h for h in offering if h not in rejected]
    if not eligible:
        shown = host if host in rejected else sorted(rejected)[0]
        raise VgpuError("VM %s on host %s: %s" % (vm, shown, rejected[shown]))
    return eligible


def diff_vgpus(current: Iterable[Mapping[str, Any]], desired: Iterable[str]) -> dict[str, Any]:
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


def plan_extra_config(current: Mapping[str, Any], use_64bit_mmio: Optional[bool] = None, mmio_size_gb: Optional[int] = None) -> dict[str, str]:
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


def plan_power(vm: str, power_state: Optional[str], needs_change: bool, policy: str) -> dict[str, Any]:
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


def next_power_of_two(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def c_series_mmio_gb(profiles: Iterable[str]) -> int:
    """Default pciPassthru.64bitMMIOSizeGB for a VM with these vGPUs (see C_SERIES_MIN_MMIO_GB)."""
    total = sum(p["fb_gb"] for p in (parse_profile(n) for n in profiles) if p)
    return max(C_SERIES_MIN_MMIO_GB, next_power_of_two(2 * total))


def plan_c_series(vm: str, profiles: Sequence[str], firmware: Optional[str], extra_config: Mapping[str, Any],
                  use_64bit_mmio: Optional[bool] = None, mmio_size_gb: Optional[int] = None) -> tuple[Optional[bool], Optional[int]]:
    """What C-series vGPUs need of the VM: EFI firmware, 64-bit MMIO and enough MMIO space.

    Returns (use_64bit_mmio, mmio_size_gb) for plan_extra_config: the caller's values, or for C-series lists the
    required ones where unset (a larger MMIO size already on the VM stays). Raises VgpuError for a BIOS VM or an
    explicit value below the requirement.
    """
    names = sorted({n for n in profiles if (parse_profile(n) or {}).get("series") == C_SERIES})
    if not names:
        return use_64bit_mmio, mmio_size_gb
    plural = len(names) > 1
    what = "VM %s: C-series vGPU profile%s %s %s" % (vm, "s" if plural else "", ", ".join(names), "need" if plural else "needs")
    if firmware is not None and firmware != "efi":
        raise VgpuError("%s EFI firmware, the VM boots with %s firmware; NVIDIA requires EFI boot and 64-bit MMIO "
                        "for C-series vGPUs on ESXi (the guest OS must be installed in EFI mode, so changing the "
                        "firmware needs a reinstall)" % (what, firmware.upper()))
    if use_64bit_mmio is False:
        raise VgpuError("%s 64-bit MMIO; use_64bit_mmio=false contradicts that" % what)
    need = c_series_mmio_gb(profiles)
    if mmio_size_gb is not None:
        if mmio_size_gb < C_SERIES_MIN_MMIO_GB:
            raise VgpuError("%s at least %d GB of MMIO space, mmio_size_gb=%d is less"
                            % (what, C_SERIES_MIN_MMIO_GB, mmio_size_gb))
        return True, mmio_size_gb
    try:
        have = int(str(extra_config.get(MMIO_SIZE_KEY)).strip())
    except (TypeError, ValueError):
        have = None
    return True, (None if have is not None and have >= need else need)


def plan_vm(vm: str, host: str, current_devices: Sequence[Mapping[str, Any]], desired: Sequence[str],
            host_offers: Mapping[str, Sequence[str]], power_state: Optional[str], memory_locked: bool, extra_config: Mapping[str, Any],
            placement: str = "host", reserve_all_memory: bool = True, use_64bit_mmio: Optional[bool] = None,
            mmio_size_gb: Optional[int] = None, power_policy: str = "fail", max_vgpus: Optional[int] = None,
            host_rules: Optional[Mapping[str, Mapping[str, Any]]] = None, firmware: Optional[str] = None,
            host_errors: Optional[Mapping[str, Sequence[str]]] = None, upgrade: Optional[Mapping[str, Any]] = None,
            restore: bool = False, facts: Optional[Mapping[str, Mapping[str, Mapping[str, Any]]]] = None) -> dict[str, Any]:
    """Full plan for one VM; pure, raises VgpuError on invalid input before anything is touched.

    upgrade: the hardware upgrade the vGPUs need (_vsphere.placement.plan_hardware), done while the VM is off.
    restore: an earlier run powered the VM off and did not power it on again (its marker is on the VM): the VM is
    powered on when it is off, and the marker goes either way.
    """
    eligible = validate_profiles(vm, desired, host, host_offers, placement, max_vgpus, host_rules, host_errors, facts)
    use_64bit_mmio, mmio_size_gb = plan_c_series(vm, desired, firmware, extra_config, use_64bit_mmio, mmio_size_gb)
    devices = diff_vgpus(current_devices, desired)
    extra = plan_extra_config(extra_config, use_64bit_mmio, mmio_size_gb)
    lock_memory = bool(desired) and reserve_all_memory and not memory_locked
    reconfigure = bool(devices["remove"] or devices["add"] or extra or lock_memory)
    needs_change = reconfigure or upgrade is not None
    power = plan_power(vm, power_state, needs_change, power_policy)
    if restore and power_state == "poweredOff":
        power = dict(power, power_on_after=True)
    before = sorted(d["profile"] for d in current_devices)
    after = sorted(desired)
    return dict(
        vm=vm, host=host, eligible_hosts=eligible, changed=needs_change or restore, reconfigure=reconfigure,
        upgrade=upgrade, restore=restore,
        remove=devices["remove"], add=devices["add"], keep=devices["keep"],
        lock_memory=lock_memory, extra_config=extra, power=power,
        before=dict(profiles=before, memory_reservation_locked_to_max=memory_locked,
                    extra_config={k: extra_config.get(k) for k in (MMIO_ENABLE_KEY, MMIO_SIZE_KEY) if k in extra_config}),
        after=dict(profiles=after, memory_reservation_locked_to_max=memory_locked or lock_memory,
                   extra_config=dict({k: extra_config.get(k) for k in (MMIO_ENABLE_KEY, MMIO_SIZE_KEY) if k in extra_config}, **extra)),
    )


def plan_graphics(host: str, current: Mapping[str, Any], default_graphics_type: Optional[str] = None,
                  assignment_policy: Optional[str] = None, devices: Optional[Iterable[Mapping[str, Any]]] = None,
                  known_devices: Optional[Sequence[str]] = None, vgpu_mode_unsupported: Optional[str] = None) -> dict[str, Any]:
    """Plan a HostGraphicsConfig change.

    current: dict(default_graphics_type, assignment_policy, devices={pci_id: graphics_type}, vgpu_modes={pci_id: mode}).
    devices: list of dict(pci_id, graphics_type, vgpu_mode) to set (graphics_type or vgpu_mode may be None = keep);
    other per-device entries stay.
    known_devices: PCI ids of the host's graphics devices; unknown ones are rejected.
    vgpu_mode_unsupported: None where the server has vgpuMode (API 8.0.3.0+), else the reason it does not.
    Returns dict(changed, before, after).
    """
    if default_graphics_type is not None and default_graphics_type not in GRAPHICS_TYPES:
        raise VgpuError("host %s: default_graphics_type must be one of %s" % (host, ", ".join(GRAPHICS_TYPES)))
    if assignment_policy is not None and assignment_policy not in ASSIGNMENT_POLICIES:
        raise VgpuError("host %s: assignment_policy must be one of %s" % (host, ", ".join(ASSIGNMENT_POLICIES)))

    def state(src: Mapping[str, Any]) -> dict[str, Any]:
        return dict(default_graphics_type=src.get("default_graphics_type"),
                    assignment_policy=src.get("assignment_policy"),
                    devices=dict(src.get("devices") or {}), vgpu_modes=dict(src.get("vgpu_modes") or {}))

    before, after = state(current), state(current)
    if default_graphics_type is not None:
        after["default_graphics_type"] = default_graphics_type
    if assignment_policy is not None:
        after["assignment_policy"] = assignment_policy
    seen: dict[str, int] = {}
    for dev in devices or []:
        pci = normalize_pci_id(dev.get("pci_id"))
        # The same device twice: the last entry used to win silently, whatever the first one said.
        if pci in seen:
            raise VgpuError("host %s: device %s is listed twice in devices (entries %d and %d); give each device once"
                            % (host, pci, seen[pci] + 1, len(seen) + 1))
        seen[pci] = len(seen)
        if known_devices is not None and pci not in {normalize_pci_id(k) for k in known_devices}:
            raise VgpuError("host %s: graphics device %s not found (devices: %s)"
                            % (host, dev.get("pci_id"), ", ".join(sorted(known_devices)) or "none"))
        gtype, mode = dev.get("graphics_type"), dev.get("vgpu_mode")
        if gtype is None and mode is None:
            raise VgpuError("host %s: device %s: set graphics_type, vgpu_mode or both" % (host, pci))
        if gtype is not None and gtype not in GRAPHICS_TYPES:
            raise VgpuError("host %s: device %s: graphics_type must be one of %s" % (host, pci, ", ".join(GRAPHICS_TYPES)))
        if mode is not None:
            if vgpu_mode_unsupported:
                raise VgpuError("host %s: device %s: vgpu_mode needs vSphere 8.0 Update 3 (API 8.0.3.0): %s"
                                % (host, pci, vgpu_mode_unsupported))
            if mode not in VGPU_MODES:
                raise VgpuError("host %s: device %s: vgpu_mode must be one of %s" % (host, pci, ", ".join(VGPU_MODES)))
            after["vgpu_modes"][pci] = mode
        # A device entry needs a graphics type; a mode-only entry keeps the device's effective one.
        after["devices"][pci] = gtype or after["devices"].get(pci) or after["default_graphics_type"]
    return dict(host=host, changed=before != after, before=before, after=after)


def vsga_involved(before: Mapping[str, Any], after: Mapping[str, Any], pci_ids: Iterable[str]) -> bool:
    """Whether a graphics device of the host is or was in shared (vSGA) mode across a graphics change.

    ``before``/``after``: plan_graphics states (default type and per-device types); ``pci_ids``: the host's devices,
    each of which runs its own entry's type, else the default. Only then does Xorg matter: "As of vSphere 7.0 Update 1,
    Xorg is no longer required for graphics devices in vGPU mode ... Xorg is still required ... in shared mode vSGA"
    (VMware KB 318047).
    """
    for state in (before, after):
        devices = state.get("devices") or {}
        for pci in pci_ids:
            if devices.get(normalize_pci_id(pci), state.get("default_graphics_type")) == "shared":
                return True
    return False


def normalize_pci_id(pci_id: object) -> str:
    """vSphere writes PCI ids as 0000:3b:00.0; accept 3b:00.0 and upper case too."""
    if not pci_id:
        raise VgpuError("pci_id is required for every device entry")
    pci = str(pci_id).strip().lower()
    if re.match(r"^[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z", pci):
        pci = "0000:" + pci
    return pci


_DRIVER_VERSION_RE = re.compile(r"(?<![\d.])(\d{3,}\.\d+(?:\.\d+)?)")


def driver_version(vib_version: Optional[str]) -> Optional[str]:
    """NVIDIA driver version (e.g. 535.154.02) from a VIB version such as 535.154.02-1OEM.800.1.0.20613240."""
    m = _DRIVER_VERSION_RE.search(vib_version or "")
    return m.group(1) if m else None


def match_driver_vib(packages: Iterable[Mapping[str, Any]], name_regex: str) -> Optional[Mapping[str, Any]]:
    """Pick the NVIDIA host driver from a list of dicts(name, vendor, version). Returns the package or None."""
    rx = re.compile(name_regex)
    found = [p for p in packages if rx.search(p.get("name") or "") or rx.search(p.get("vendor") or "")]
    # The host driver VIB carries "Driver" in its name; prefer it over companion VIBs (e.g. gpu management daemons).
    found.sort(key=lambda p: ("driver" not in (p.get("name") or "").lower(), p.get("name") or ""))
    return found[0] if found else None


def parse_sensor_component(sensor_name: Optional[str]) -> Optional[dict[str, str]]:
    """Parse a 'Software Components' health sensor name '<vendor> <name> <version> <date>'."""
    parts = (sensor_name or "").split()
    if len(parts) < 3:
        return None
    return dict(vendor=parts[0], name=parts[1], version=parts[2])


def drift_report(host_versions: Mapping[str, Optional[str]]) -> dict[str, Any]:
    """Group GPU hosts by NVIDIA driver version.

    host_versions: {host: version or None}. Returns dict(consistent, versions={version: [hosts]}, missing=[hosts]).
    A host without a driver counts as drift: it cannot run vGPU VMs that the others can.
    """
    return drift.drift_report(host_versions)   # the one drift rule; ties go to the version first as text


def drift_by_cluster(host_versions: Mapping[str, Optional[str]], host_cluster: Mapping[str, Optional[str]]) -> dict[str, Any]:
    """Driver drift judged per cluster: every GPU host of a cluster runs one driver (the seeds' rule), hosts of
    different clusters may differ.

    ``host_cluster``: {host: cluster name, None for a standalone host}; a standalone host is a group of its own. Returns
    the whole scope's drift_report (``versions``, ``missing``, ``majority``) with ``consistent`` true when every group
    is, plus ``clusters`` ({cluster: drift_report}) and ``drifting_clusters`` (names, sorted).
    """
    groups: dict[str, dict[str, Optional[str]]] = {}
    for host, version in host_versions.items():
        groups.setdefault(host_cluster.get(host) or "standalone host %s" % host, {})[host] = version
    clusters = {name: drift_report(versions) for name, versions in sorted(groups.items())}
    drifting = [name for name, report in clusters.items() if not report["consistent"]]
    return dict(drift_report(host_versions), consistent=not drifting, clusters=clusters, drifting_clusters=drifting)


def is_gpu_host(row: Mapping[str, Any]) -> bool:
    """Whether a host row (the properties _vsphere.api.HOST_PROPS reads) has a graphics device or offers vGPU types."""
    return bool(row.get("config.graphicsInfo") or row.get("config.sharedPassthruGpuTypes")
                or row.get("config.sharedGpuCapabilities"))
