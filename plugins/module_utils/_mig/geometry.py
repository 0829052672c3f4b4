# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""MIG domain logic without I/O.

* mig-parted ``v1`` documents: parsing and validation with mig-parted's own rules, and selection of the
  entry that applies to a GPU (index, PCI device id).
* Profile names (mig-parted's naming algorithm) and resolution of requested names against a GPU's own profiles.
* A placement solver: given a GPU's profile table read from NVML and a requested multiset of profiles, find
  explicit non-overlapping placements (order independent, unlike NVML's automatic placement) or a reason.
* Geometry diff: current GPU instances vs target -> ordered action list.

Everything here works on plain data (dicts, tuples) so it can be unit tested exhaustively.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

# \Z, not $: "$" also matches before a trailing newline, so "0x20B010DE\n" passed as a filter (issue 15).
MIG_NAME_RE = re.compile(r"^(?:(?P<c>[1-9][0-9]*)c\.)?(?P<g>[1-9][0-9]*)g\.(?P<gb>[1-9][0-9]*)gb(?P<attr>(?:[+-][a-z]+(?:\.[a-z]+)*)*)\Z")
PCI_ID_RE = re.compile(r"^0x[0-9a-fA-F]{1,8}\Z")

CONFIG_ENTRY_KEYS = ("devices", "device-filter", "mig-enabled", "mig-devices")


class MigError(Exception):
    """Invalid input or an impossible layout; the message is meant for the user."""


# ---------------------------------------------------------------------------------------------------------------
# Profile names
# ---------------------------------------------------------------------------------------------------------------

def parse_profile_name(name: object) -> tuple[Optional[int], int, int, str]:
    """Split a mig-parted profile name into (c, g, gb, attrs); c is None when the name has no 'Nc.' part."""
    if not isinstance(name, str):
        raise MigError("MIG profile name %r is not a string" % (name,))
    m = MIG_NAME_RE.match(name.strip())
    if not m:
        raise MigError("'%s' is not a MIG profile name (expected [<C>c.]<G>g.<M>gb[+attr], e.g. 1g.5gb or 1c.3g.20gb)" % name)
    c = int(m.group("c")) if m.group("c") else None
    return c, int(m.group("g")), int(m.group("gb")), m.group("attr") or ""


def memory_size_gb(memory_mb: float, total_memory_bytes: int) -> int:
    """mig-parted/go-nvlib getMigMemorySizeGB: the GB figure of a profile name depends on the device's total memory."""
    one_mb = 1024 * 1024
    one_gb = 1024 * 1024 * 1024
    frac = (float(memory_mb) * one_mb) / float(total_memory_bytes)
    frac = math.ceil(frac * 8) / 8
    total_gb = float((total_memory_bytes + one_gb - 1) // one_gb)
    # Go's math.Round rounds halves away from zero; Python's round() would round them to even.
    return int(math.floor(frac * total_gb + 0.5))


def gi_profile_name(slices: int, memory_mb: float, total_memory_bytes: int, attrs: str = "") -> str:
    return "%dg.%dgb%s" % (slices, memory_size_gb(memory_mb, total_memory_bytes), attrs)


def ci_profile_name(ci_slices: int, gi_name: str, gi_slices: int) -> str:
    """A full-size CI carries the GI's name, a smaller one is '<C>c.<GI name>' (mig-parted's convention)."""
    if ci_slices == gi_slices:
        return gi_name
    return "%dc.%s" % (ci_slices, gi_name)


def ci_size_allowed(c: int, g: int) -> bool:
    """go-nvlib VisitMigProfiles heuristic for valid compute-instance sizes within a G-slice GPU instance."""
    if c > g:
        return False
    if c < g and 2 * c > g + 1:
        return False
    return True


def modelled_ci_placements(c: int, g: int) -> list[tuple[int, int]]:
    """CI placements (in compute slices within the GI) as NVML reports them: starts aligned to the next power of two.

    Only used to validate a target before the GPU instance exists; the apply step reads the real placements
    from NVML once the GI has been created.
    """
    align = 1
    while align < c:
        align *= 2
    return [(s, c) for s in range(0, g - c + 1, align)]


class Profile:
    """One GPU-instance profile of one GPU, as read from NVML."""

    __slots__ = ("name", "id", "slices", "placements", "max_count", "memory_mb", "aliases", "index")

    def __init__(self, name: str, profile_id: int, slices: int, placements: Iterable[Sequence[Any]], max_count: int, memory_mb: int = 0,
                 aliases: Iterable[str] = (), index: Optional[int] = None) -> None:
        self.name = name
        self.id = profile_id
        self.slices = slices
        self.placements = tuple(sorted((int(s), int(z)) for s, z in placements))
        self.max_count = max_count
        self.memory_mb = memory_mb
        self.aliases = tuple(a for a in aliases if a and a != name)
        self.index = index

    @property
    def memory_slices(self) -> int:
        return self.placements[0][1] if self.placements else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "id": self.id, "slices": self.slices, "memory_slices": self.memory_slices,
            "max_count": self.max_count, "memory_mb": self.memory_mb,
            "placements": [{"start": s, "size": z} for s, z in self.placements],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Profile:
        return cls(d["name"], d["id"], d["slices"], [(p["start"], p["size"]) for p in d["placements"]],
                   d["max_count"], d.get("memory_mb", 0), d.get("aliases", ()), d.get("index"))

    def __repr__(self) -> str:
        return "Profile(%s id=%s)" % (self.name, self.id)


def format_placements(placements: Iterable[tuple[int, int]]) -> str:
    """'{0,4}:4' as nvidia-smi -lgipp prints them."""
    by_size: dict[int, list[int]] = {}
    for s, z in placements:
        by_size.setdefault(z, []).append(s)
    return " ".join("{%s}:%d" % (",".join(str(s) for s in sorted(starts)), z) for z, starts in sorted(by_size.items()))


class ProfileTable:
    """A GPU's GI profiles, looked up by the names mig-parted accepts (computed name or NVML's own name)."""

    def __init__(self, profiles: Iterable[Profile]) -> None:
        self.profiles = list(profiles)
        self._by_name: dict[str, Profile] = {}
        for p in self.profiles:
            for n in (p.name,) + p.aliases:
                self._by_name.setdefault(n, p)

    def get(self, name: str) -> Optional[Profile]:
        return self._by_name.get(name)

    def by_id(self, profile_id: int) -> Optional[Profile]:
        for p in self.profiles:
            if p.id == profile_id:
                return p
        return None

    def names(self) -> list[str]:
        return [p.name for p in self.profiles]

    @property
    def memory_slices(self) -> int:
        """Total memory slices of the GPU: the end of the furthest placement (8 on A100/H100, 4 on A30)."""
        return max((s + z for p in self.profiles for s, z in p.placements), default=0)


# ---------------------------------------------------------------------------------------------------------------
# mig-parted v1 documents
# ---------------------------------------------------------------------------------------------------------------

def _parse_pci_filter(value: Any, where: str) -> tuple[Optional[list[tuple[int, ...]]], list[str]]:
    """A device-filter as mig-parted reads it (api/spec/v1/spec.go MigConfigSpec.UnmarshalJSON: a string or a list of
    strings; nothing else). Returns (parsed [(device_id,) | (device_id, subsystem_id)] or None, the strings that are
    not PCI ids). mig-parted accepts those in the document and then matches no GPU with them (its
    NewDeviceIDFromString error is dropped); an empty string or list is no filter at all (helpers.go
    MatchesDeviceFilter), recorded as the bad string "". check_entries refuses both before anything is planned."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise MigError("%s: device-filter must be a string or a list of strings like '0x20B010DE', got %r" % (where, value))
    out, bad = [], []
    if not [i for i in items if i != ""]:
        # No filter to mig-parted, so the entry selects every GPU; an operator who wrote it meant some GPUs.
        bad.append("")
    for item in (i for i in items if i != ""):
        parts = item.split(":")
        if len(parts) > 2 or not all(PCI_ID_RE.match(p) for p in parts):
            bad.append(item)
        else:
            out.append(tuple(int(p, 16) for p in parts))
    return out or None, bad


def validate_entry(entry: Any, where: str) -> dict[str, Any]:
    """Validate one mig-parted config entry; returns a normalized dict.

    Normalized: {'devices': 'all' | [int], 'device_filter': None | [(device_id,) | (device_id, subsystem_id)],
    'bad_filters': [str], 'mig_enabled': bool, 'mig_devices': {name: count>0}}.

    What is valid is what NVIDIA's parser accepts (github.com/NVIDIA/mig-parted api/spec/v1/spec.go
    MigConfigSpec.UnmarshalJSON, checked against `nvidia-mig-parted assert --valid-config` by
    tests/lab/test_mig_parted_oracle.py). A document can still be wrong for a host: check_entries says so at plan time.
    """
    if not isinstance(entry, dict):
        raise MigError("%s: an entry must be a mapping with keys %s" % (where, ", ".join(CONFIG_ENTRY_KEYS)))
    unknown = sorted(set(entry) - set(CONFIG_ENTRY_KEYS))
    if unknown:
        raise MigError("%s: unknown key(s) %s (allowed: %s)" % (where, ", ".join(unknown), ", ".join(CONFIG_ENTRY_KEYS)))
    if "devices" not in entry:
        raise MigError("%s: missing required key 'devices' ('all' or a list of GPU indexes)" % where)
    devices = entry["devices"]
    if isinstance(devices, str):
        if devices != "all":
            raise MigError("%s: devices must be 'all' or a list of GPU indexes, got '%s'" % (where, devices))
    elif isinstance(devices, list):
        # mig-parted reads a list as []int: an empty list selects no GPU, and any integer parses (check_entries
        # refuses indexes the host does not have, negative ones included).
        for d in devices:
            if isinstance(d, bool) or not isinstance(d, int):
                raise MigError("%s: devices must be 'all' or a list of GPU indexes, got %r" % (where, d))
        devices = sorted(set(devices))
    else:
        raise MigError("%s: devices must be 'all' or a list of GPU indexes, got %r" % (where, devices))
    if "mig-enabled" not in entry:
        raise MigError("%s: missing required key 'mig-enabled'" % where)
    enabled = entry["mig-enabled"]
    if not isinstance(enabled, bool):
        raise MigError("%s: mig-enabled must be true or false, got %r" % (where, enabled))
    mig_devices = entry.get("mig-devices")
    if enabled and mig_devices is None:
        raise MigError("%s: 'mig-enabled' is true but 'mig-devices' is missing (use {} for MIG enabled with no instances)" % where)
    if not enabled and mig_devices:
        raise MigError("%s: MIG devices included when 'mig-enabled' is false" % where)
    counts: dict[str, int] = {}
    if mig_devices:
        if not isinstance(mig_devices, dict):
            raise MigError("%s: mig-devices must be a mapping of profile name to count" % where)
        for name, count in mig_devices.items():
            parse_profile_name(name)
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise MigError("%s: count for %s must be an integer >= 0, got %r" % (where, name, count))
            if count:
                counts[name] = count
        if not counts:
            raise MigError("%s: mig-devices has no profile with a count > 0" % where)
    bad: list[str]
    dfilter, bad = None, []
    if entry.get("device-filter") is not None:
        dfilter, bad = _parse_pci_filter(entry["device-filter"], where)
    return {"devices": devices, "device_filter": dfilter, "bad_filters": bad, "mig_enabled": enabled, "mig_devices": counts}


def parse_config(document: Any, selected: Optional[str] = None) -> list[dict[str, Any]]:
    """Parse a mig-parted v1 document and return the normalized entries of the selected config."""
    if not isinstance(document, dict):
        raise MigError("config must be a mig-parted document (a mapping with 'version' and 'mig-configs')")
    unknown = sorted(set(document) - {"version", "mig-configs"})
    if unknown:
        raise MigError("config: unknown key(s) %s (allowed: version, mig-configs)" % ", ".join(unknown))
    if document.get("version") != "v1":
        raise MigError("config: unknown version %r (only 'v1' is supported)" % (document.get("version"),))
    configs = document.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        raise MigError("config: 'mig-configs' must be a non-empty mapping of config names to entry lists")
    if selected is None:
        if len(configs) != 1:
            raise MigError("config has %d mig-configs (%s); choose one with 'selected'" % (len(configs), ", ".join(sorted(configs))))
        selected = next(iter(configs))
    if selected not in configs:
        raise MigError("selected config '%s' is not in mig-configs (available: %s)" % (selected, ", ".join(sorted(configs))))
    return parse_entries(configs[selected], "mig-configs['%s']" % selected)


def parse_entries(entries: Any, where: str = "devices") -> list[dict[str, Any]]:
    if not isinstance(entries, list) or not entries:
        raise MigError("%s: must be a non-empty list of entries" % where)
    return [validate_entry(e, "%s[%d]" % (where, i)) for i, e in enumerate(entries)]


def entry_matches(entry: Mapping[str, Any], index: int, pci_device_id: int, pci_subsystem_id: Optional[int] = None) -> bool:
    if entry["devices"] != "all" and index not in entry["devices"]:
        return False
    if entry["device_filter"] or [b for b in entry.get("bad_filters", ()) if b]:
        for f in entry["device_filter"] or ():
            if f[0] != pci_device_id:
                continue
            if len(f) == 2 and f[1] != pci_subsystem_id:
                continue
            return True
        return False
    return True


def select_entry(entries: Iterable[dict[str, Any]], index: int, pci_device_id: int,
                 pci_subsystem_id: Optional[int] = None) -> Optional[dict[str, Any]]:
    """Entry applying to a GPU, or None. mig-parted applies matching entries in order, so the last match wins."""
    found = None
    for e in entries:
        if entry_matches(e, index, pci_device_id, pci_subsystem_id):
            found = e
    return found


def selection_notes(entries: Sequence[Mapping[str, Any]], gpus: Iterable[Mapping[str, Any]]) -> list[str]:
    """Warnings about what ``entries`` select among ``gpus`` ([{index, model, pci_device_id, pci_subsystem_id (ints),
    mig_capable}]): each GPU that more than one entry selects (mig-parted walks the entries in order and applies each
    to the GPUs it matches, so the last one wins: cmd/nvidia-mig-parted/assert/assert.go
    WalkSelectedMigConfigForEachGPU; kept, and named), and one line for the GPUs the configuration leaves as they are
    (no entry selects them, or they have no MIG, as an L40S under ``devices: all``)."""
    notes, left = [], []
    for gpu in gpus:
        matched = [i for i, e in enumerate(entries)
                   if entry_matches(e, gpu["index"], gpu["pci_device_id"], gpu.get("pci_subsystem_id"))]
        where = "GPU %d (%s)" % (gpu["index"], gpu["model"])
        if len(matched) > 1:
            notes.append("%s is selected by entries %s; mig-parted applies the last one, entry %d"
                         % (where, ", ".join(str(i) for i in matched), matched[-1]))
        if not matched:
            left.append("%s: no entry selects it" % where)
        elif not gpu.get("mig_capable"):
            left.append("%s: no MIG" % where)
    if left:
        notes.insert(0, "the configuration leaves %d GPU(s) as they are: %s" % (len(left), "; ".join(left)))
    return notes


def check_entries(entries: Iterable[Mapping[str, Any]], gpu_count: int) -> None:
    """Refuse what mig-parted accepts in a document but would silently get wrong on this host: a GPU index the host
    does not have (negative ones included), a device-filter string that is not a PCI id (matches no GPU), or an
    empty device-filter (no filter: every GPU)."""
    for i, e in enumerate(entries):
        if "" in e.get("bad_filters", ()):
            raise MigError("entry %d: device-filter is empty, which mig-parted reads as no filter (every GPU); "
                           "remove it or name the PCI ids it should select" % i)
        if e.get("bad_filters"):
            raise MigError("entry %d: device-filter %s is not a PCI id like '0x20B010DE' or '0x20B010DE:0x134F10DE' "
                           "(mig-parted would match no GPU with it)" % (i, ", ".join("'%s'" % b for b in e["bad_filters"])))
        if e["devices"] != "all":
            missing = [d for d in e["devices"] if d < 0 or d >= gpu_count]
            if missing:
                raise MigError("entry %d: devices names GPU index %s but this host has %d GPU(s) (indexes 0-%d)"
                               % (i, ", ".join(str(d) for d in missing), gpu_count, gpu_count - 1))


# ---------------------------------------------------------------------------------------------------------------
# Placement solver
# ---------------------------------------------------------------------------------------------------------------

def _mask(start: int, size: int) -> int:
    return ((1 << size) - 1) << start


def solve_placements(items: Sequence[tuple[object, Sequence[tuple[int, int]]]], occupied: Iterable[tuple[int, int]] = (),
                     total_slices: Optional[int] = None) -> Optional[list[tuple[int, int]]]:
    """Assign every item a non-overlapping placement.

    items: list of (key, [(start, size), ...]) -- key identifies the profile; items with equal keys are
    interchangeable. occupied: placements already taken. Returns a list of (start, size) aligned with items, or
    None when no assignment exists. Exhaustive (with memoisation) so it never misses a layout that
    NVML's creation-order-dependent automatic placement would miss.
    """
    used = 0
    for s, z in occupied:
        used |= _mask(s, z)
    limit = None if total_slices is None else (1 << total_slices) - 1
    # Fewest alternatives and largest first prunes fastest; equal keys stay adjacent for symmetry breaking.
    order = sorted(range(len(items)), key=lambda i: (len(items[i][1]), -max((z for _s, z in items[i][1]), default=0), str(items[i][0])))
    cands = [sorted(set(items[i][1])) for i in order]
    keys = [items[i][0] for i in order]
    failed: set[tuple[int, int, int]] = set()
    result: list[Optional[tuple[int, int]]] = [None] * len(order)

    def dfs(pos: int, used_mask: int, min_idx: int) -> bool:
        if pos == len(order):
            return True
        memo = (pos, used_mask, min_idx)
        if memo in failed:
            return False
        for ci in range(min_idx, len(cands[pos])):
            s, z = cands[pos][ci]
            m = _mask(s, z)
            if used_mask & m or (limit is not None and m & ~limit):
                continue
            result[pos] = (s, z)
            same_next = pos + 1 < len(order) and keys[pos + 1] == keys[pos]
            if dfs(pos + 1, used_mask | m, ci + 1 if same_next else 0):
                return True
        failed.add(memo)
        return False

    if not dfs(0, used, 0):
        return None
    # Any: the loop below fills every slot, so none stays None.
    out: list[Any] = [None] * len(items)
    for pos, i in enumerate(order):
        out[i] = result[pos]
    return out


# ---------------------------------------------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------------------------------------------

def gi_profile_of(name: str) -> tuple[Optional[int], str]:
    """(compute slices or None, GPU-instance profile name) of a requested name: '1c.3g.20gb' -> (1, '3g.20gb')."""
    c = parse_profile_name(name)[0]
    return c, (name.split(".", 1)[1] if c is not None else name)


def resolve_target(table: ProfileTable, mig_devices: Mapping[str, int]) -> list[tuple[Profile, tuple[int, ...]]]:
    """Turn mig-devices {name: count} into GPU-instance groups [(Profile, (ci sizes, largest first))].

    Compute instances of one GI profile are packed like mig-parted does (largest first, added to the current GI
    while it has room), so '1c.2g.10gb: 2' means one 2g GI with two 1c CIs.
    """
    per_profile: dict[str, tuple[Profile, list[int]]] = {}
    unknown = []
    for name, count in sorted(mig_devices.items()):
        c, gi_name = gi_profile_of(name)
        prof = table.get(gi_name)
        if prof is None:
            unknown.append(name)
            continue
        size = prof.slices if c is None else c
        if not ci_size_allowed(size, prof.slices):
            raise MigError("%s: a %d-slice compute instance is not possible in a %s GPU instance" % (name, size, prof.name))
        # Bounded before anything is built: a count of 10**15 must be a clear error, not a MemoryError.
        limit = prof.max_count * (len(modelled_ci_placements(size, prof.slices)) if c is not None else 1)
        if count > limit:
            raise MigError("%d x %s requested but this GPU allows at most %d" % (count, name, limit))
        per_profile.setdefault(prof.name, (prof, []))[1].extend([size] * count)
    if unknown:
        raise MigError("unknown profile(s) %s; this GPU offers %s" % (", ".join(unknown), ", ".join(table.names())))
    groups = []
    for pname in sorted(per_profile, key=lambda n: (-per_profile[n][0].slices, n)):
        prof, sizes = per_profile[pname]
        sizes.sort(reverse=True)
        current: list[int] = []
        for size in sizes:
            trial = current + [size]
            if current and _ci_fit(trial, prof.slices):
                current = trial
            else:
                if current:
                    groups.append((prof, tuple(current)))
                current = [size]
        if current:
            groups.append((prof, tuple(current)))
    return groups


def gi_profile_names(mig_devices: Iterable[str]) -> set[str]:
    """GPU-instance profile names a mig-devices request uses ('1c.3g.20gb' uses '3g.20gb')."""
    return set(gi_profile_of(name)[1] for name in mig_devices)


def unknown_profiles(table: ProfileTable, mig_devices: Iterable[str]) -> list[str]:
    """Requested names whose GPU-instance profile the table does not have, sorted."""
    return [name for name in sorted(mig_devices) if table.get(gi_profile_of(name)[1]) is None]


def _ci_fit(sizes: Iterable[int], g: int) -> bool:
    items = [(c, modelled_ci_placements(c, g)) for c in sizes]
    return solve_placements(items, total_slices=g) is not None


def counts_of_groups(groups: Iterable[tuple[Profile, Iterable[int]]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for prof, sizes in groups:
        for c in sizes:
            n = ci_profile_name(c, prof.name, prof.slices)
            counts[n] = counts.get(n, 0) + 1
    return counts


def describe_request(mig_devices: Mapping[str, int]) -> str:
    return ", ".join("%s: %d" % (k, v) for k, v in sorted(mig_devices.items())) or "no instances"


def place_groups(table: ProfileTable, groups: Sequence[tuple[Profile, Sequence[int]]],
                 occupied: Sequence[tuple[int, int]] = ()) -> list[tuple[int, int]]:
    """Placements for the groups' GPU instances, or raise MigError saying why none exist."""
    need: dict[str, int] = {}
    for prof, _sizes in groups:
        need[prof.name] = need.get(prof.name, 0) + 1
    for name, n in sorted(need.items()):
        # The names are the groups' own profiles, all from this table: get() finds each one.
        prof = table.get(name)  # type: ignore[assignment]
        if n > prof.max_count:
            raise MigError("%d x %s requested but this GPU allows at most %d" % (n, name, prof.max_count))
    total = table.memory_slices
    used = sum(z for _s, z in occupied) + sum(prof.memory_slices for prof, _sizes in groups)
    if used > total:
        raise MigError("the instances need %d memory slices but the GPU has %d" % (used, total))
    items = [(prof.name, prof.placements) for prof, _sizes in groups]
    placed = solve_placements(items, occupied, total or None)
    if placed is None:
        # As above: every name in need is one of this table's profiles.
        detail = "; ".join("%s %s" % (n, format_placements(table.get(n).placements)) for n in sorted(need))  # type: ignore[union-attr]
        raise MigError("no non-overlapping placement exists for these instances (possible placements: %s)" % detail)
    return placed


def check_me_all(mig_devices: Mapping[str, int]) -> None:
    """nvml.h NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME / 2_SLICE_ALL_ME: a GPU instance with every media engine of
    the GPU ("+me.all") "prevents allocation of all but _NO_ME profiles": beside it only "-me" instances, and one
    "+me.all" at most. Raises MigError naming the profiles."""
    wanted = dict((name, int(count)) for name, count in mig_devices.items() if count)
    all_me = sorted(n for n in wanted if parse_profile_name(n)[3].endswith("+me.all"))
    if not all_me:
        return
    if sum(wanted[n] for n in all_me) > 1:
        raise MigError("%s: one +me.all GPU instance holds every media engine of the GPU, so at most one fits "
                       "(nvml.h NVML_GPU_INSTANCE_PROFILE_*_ALL_ME)" % describe_request(dict((n, wanted[n]) for n in all_me)))
    others = sorted(n for n in wanted if n not in all_me and not parse_profile_name(n)[3].endswith("-me"))
    if others:
        raise MigError("%s takes every media engine of the GPU, and only -me profiles can be created beside it "
                       "(nvml.h NVML_GPU_INSTANCE_PROFILE_*_ALL_ME), not %s" % (all_me[0], ", ".join(others)))


def validate_target(table: ProfileTable, mig_devices: Mapping[str, int]) -> tuple[list[tuple[Profile, tuple[int, ...]]], list[tuple[int, int]]]:
    """Check a target against one GPU's profiles; returns (groups, placements) or raises MigError."""
    check_me_all(mig_devices)
    groups = resolve_target(table, mig_devices)
    return groups, place_groups(table, groups)


# ---------------------------------------------------------------------------------------------------------------
# Geometry: current state, comparison and the action plan
# ---------------------------------------------------------------------------------------------------------------

def current_counts(instances: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """mig-parted's view of a GPU: profile name -> number of compute instances."""
    counts: dict[str, int] = {}
    for gi in instances:
        for ci in gi.get("compute_instances", []):
            counts[ci["profile"]] = counts.get(ci["profile"], 0) + 1
    return counts


def geometry_matches(instances: Sequence[Mapping[str, Any]], target_counts: Mapping[str, int]) -> bool:
    """Same counts per profile name, and no GPU instance without compute instances (it would hold slices unseen)."""
    if any(not gi.get("compute_instances") for gi in instances):
        return False
    return current_counts(instances) == dict((k, v) for k, v in target_counts.items() if v)


def _group_key(prof_name: str, sizes: Iterable[int]) -> tuple[str, tuple[int, ...]]:
    return (prof_name, tuple(sorted(sizes, reverse=True)))


def plan_gpu(table: ProfileTable, mode: Mapping[str, Any], instances: Sequence[Mapping[str, Any]], target: Mapping[str, Any],
             mode_change_resets: bool = False) -> dict[str, Any]:
    """Plan one GPU.

    table: ProfileTable; mode: {'current': 'enabled'|'disabled', 'pending': ...}; instances: current GIs as
    [{'gi_id', 'profile', 'profile_id', 'placement': {'start','size'}, 'compute_instances': [{'ci_id', 'profile',
    'slices', ...}]}]; target: normalized entry (mig_enabled, mig_devices).
    Returns {'changed', 'actions', 'reset_required', 'target_counts', 'keep'}; raises MigError when the target
    is impossible on this GPU (before anything is touched).
    """
    cur, pend = mode["current"], mode["pending"]
    actions: list[dict[str, Any]] = []
    plan: dict[str, Any] = {"changed": False, "actions": actions, "reset_required": False, "keep": [], "target_counts": {}}

    def destroy(gi: Mapping[str, Any]) -> None:
        for ci in gi.get("compute_instances", []):
            actions.append({"action": "destroy_ci", "gi_id": gi["gi_id"], "ci_id": ci["ci_id"], "profile": ci["profile"]})
        actions.append({"action": "destroy_gi", "gi_id": gi["gi_id"], "profile": gi["profile"], "placement": dict(gi["placement"])})

    if not target["mig_enabled"]:
        if cur == "enabled":
            for gi in instances:
                destroy(gi)
        if pend == "enabled":
            actions.append({"action": "set_mig_mode", "mode": "disabled"})
            plan["reset_required"] = cur == "enabled" and mode_change_resets
        elif cur == "enabled":
            # Disable already requested; only a reset finishes it.
            plan["reset_required"] = True
        plan["changed"] = bool(actions)
        return plan

    groups, _placements = validate_target(table, target["mig_devices"])
    plan["target_counts"] = counts_of_groups(groups)

    if pend != "enabled":
        actions.append({"action": "set_mig_mode", "mode": "enabled"})
        if cur != "enabled":
            plan["reset_required"] = mode_change_resets
    elif cur != "enabled":
        # Enable is pending a reset: instances cannot be created before it.
        plan["reset_required"] = True
        plan["changed"] = False
        return plan

    live = instances if cur == "enabled" else []
    if cur == "enabled" and geometry_matches(live, plan["target_counts"]):
        plan["changed"] = bool(actions)
        plan["keep"] = [gi["gi_id"] for gi in live]
        return plan

    # Keep GIs that already have a wanted profile and CI layout, if the rest still fits around them.
    remaining = list(groups)
    kept = []
    for gi in live:
        key = _group_key(gi["profile"], [ci["slices"] for ci in gi.get("compute_instances", [])])
        for i, (prof, sizes) in enumerate(remaining):
            if gi.get("compute_instances") and _group_key(prof.name, sizes) == key:
                kept.append(gi)
                del remaining[i]
                break
    placements: Optional[list[tuple[int, int]]] = None
    if kept:
        try:
            placements = place_groups(table, remaining, [(gi["placement"]["start"], gi["placement"]["size"]) for gi in kept])
        except MigError:
            placements = None
    if placements is None:
        kept = []
        remaining = list(groups)
        placements = place_groups(table, remaining)
    kept_ids = set(gi["gi_id"] for gi in kept)
    plan["keep"] = sorted(kept_ids)
    for gi in live:
        if gi["gi_id"] not in kept_ids:
            destroy(gi)
    # Destroy before creating: freed slices are needed for the new placements.
    destroys = [a for a in actions if a["action"] != "set_mig_mode"]
    modes = [a for a in actions if a["action"] == "set_mig_mode"]
    actions[:] = destroys + modes
    for ref, ((prof, sizes), (start, size)) in enumerate(zip(remaining, placements)):
        actions.append({"action": "create_gi", "ref": ref, "profile": prof.name, "profile_id": prof.id,
                        "placement": {"start": start, "size": size}})
        for c in sizes:
            actions.append({"action": "create_ci", "gi_ref": ref, "profile": ci_profile_name(c, prof.name, prof.slices),
                            "slices": c, "gi_slices": prof.slices})
    plan["changed"] = bool(actions)
    return plan


def rollback_actions(instances: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Actions recreating a GPU's previous GIs (same profiles and placements) and their CIs."""
    actions: list[dict[str, Any]] = []
    for ref, gi in enumerate(instances):
        actions.append({"action": "create_gi", "ref": ref, "profile": gi["profile"], "profile_id": gi["profile_id"],
                        "placement": dict(gi["placement"])})
        for ci in gi.get("compute_instances", []):
            actions.append({"action": "create_ci", "gi_ref": ref, "profile": ci["profile"], "slices": ci["slices"],
                            "gi_slices": gi.get("slices", ci["slices"]),
                            "placement": dict(ci["placement"]) if ci.get("placement") else None})
    return actions


def summarize(mode: Mapping[str, Any], instances: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The per-GPU 'before'/'after' shape the modules return."""
    return {
        "mig_mode": {"current": mode["current"], "pending": mode["pending"]},
        "mig_devices": current_counts(instances) if mode["current"] == "enabled" else {},
        "instances": [
            {"profile": gi["profile"], "placement": dict(gi["placement"]),
             "compute_instances": sorted(ci["profile"] for ci in gi.get("compute_instances", []))}
            for gi in sorted(instances, key=lambda g: (g["placement"]["start"], g["profile"]))
        ],
    }


def predicted_after(mode: Mapping[str, Any], instances: Iterable[Mapping[str, Any]], plan: Mapping[str, Any], table: ProfileTable) -> dict[str, Any]:
    """What check mode reports as 'after'."""
    if not plan["changed"]:
        return summarize(mode, instances)
    new_mode = dict(mode)
    for a in plan["actions"]:
        if a["action"] == "set_mig_mode":
            new_mode["pending"] = a["mode"]
            if not plan["reset_required"]:
                new_mode["current"] = a["mode"]
    if new_mode["current"] != "enabled":
        return summarize(new_mode, [])
    gone = set(a["gi_id"] for a in plan["actions"] if a["action"] == "destroy_gi")
    result = [gi for gi in instances if gi["gi_id"] not in gone]
    created: dict[int, dict[str, Any]] = {}
    for a in plan["actions"]:
        if a["action"] == "create_gi":
            created[a["ref"]] = {"gi_id": None, "profile": a["profile"], "profile_id": a["profile_id"],
                                 "placement": dict(a["placement"]), "compute_instances": []}
            result.append(created[a["ref"]])
        elif a["action"] == "create_ci":
            created[a["gi_ref"]]["compute_instances"].append({"profile": a["profile"], "slices": a["slices"]})
    return summarize(new_mode, result)


def gpu_disruptions(gpu: Mapping[str, Any], pids: Sequence[int] = ()) -> list[str]:
    """What a GPU's change does to what runs on it, in the order the apply takes it (destroys before the mode change):
    the GPU instances destroyed (their compute instances with them) and the MIG mode switched, each naming the GPU.

    ``gpu``: the GPU's result row (``index``, ``model``, ``actions``, ``reset_required``); ``pids``: the processes on
    what goes (force), named with the destroys, or with the mode change when nothing is destroyed. Creations take
    nothing away and are not listed.
    """
    where = "GPU %s (%s)" % (gpu["index"], gpu["model"])
    named = ", ".join(str(p) for p in sorted(pids))
    held = " (processes %s use them)" % named if pids else ""
    out = []
    destroyed: dict[str, int] = {}
    for a in gpu.get("actions") or []:
        if a["action"] == "destroy_gi":
            destroyed[a["profile"]] = destroyed.get(a["profile"], 0) + 1
    if destroyed:
        out.append("destroy the GPU instances %s of %s with their compute instances%s" % (
            ", ".join("%s x%d" % kv for kv in sorted(destroyed.items())), where, held))
        named = ""
    for a in gpu.get("actions") or []:
        if a["action"] == "set_mig_mode":
            out.append("turn MIG mode %s for %s%s%s" % (
                "on" if a["mode"] == "enabled" else "off", where, " (processes %s run on it)" % named if named else "",
                ": pending until a GPU reset or reboot, which this module does not do" if gpu.get("reset_required")
                else ""))
    return out
