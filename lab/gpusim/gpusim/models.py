"""GPU model table for gpusim: MIG profiles, NVML ids, placements, memory.

Data comes from ``shared/reference/mig.md`` (section numbers in the comments).
Placements are in *memory slices* (NVML ``nvmlGpuInstancePlacement_t``); the
go-nvml H100/H200 mock placements are wrong and are deliberately not used.

This module is pure data plus two small pure helpers; bench/device/nvml_profiles.py
imports it by path to compare a real GPU against it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

MIB = 1024 * 1024
GIB = 1024 * MIB

# NVML GI profile *index* constants (argument of nvmlDeviceGetGpuInstanceProfileInfo).
GI_1_SLICE = 0
GI_2_SLICE = 1
GI_3_SLICE = 2
GI_4_SLICE = 3
GI_7_SLICE = 4
GI_1_SLICE_REV1 = 7
GI_2_SLICE_REV1 = 8
GI_1_SLICE_REV2 = 9

# NVML CI profile index constants; the CI profile id equals the index (mig.md §0).
CI_INDEX_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}

ARCH_AMPERE = 7
ARCH_ADA = 8
ARCH_HOPPER = 9


@dataclass(frozen=True)
class GiProfile:
    """One GPU-instance profile as `nvidia-smi mig -lgip` / NVML report it."""

    index: int          # NVML GPU_INSTANCE_PROFILE_* constant
    id: int             # unique profile id (19, 20, 15, 14, 9, 5, 0 ...)
    slices: int         # compute (SM) slices = sliceCount
    instances: int      # max instance count
    memory_mib: int     # memorySizeMB
    sms: int
    ce: int
    dec: int
    enc: int
    jpg: int
    ofa: int
    starts: tuple       # possible placement starts (memory slices)
    size: int           # memory slices occupied
    suffix: str = ""    # "+me" for REV1
    p2p: int = 0


@dataclass(frozen=True)
class Model:
    name: str                   # nvidia-smi product name
    pci_device_id: int          # NVML pciDeviceId (device << 16 | vendor)
    pci_subsystem_id: int
    memory_mib: int             # total framebuffer as NVML reports it
    arch: int
    cuda_cc: tuple
    mig_reset_required: bool    # Ampere: MIG mode change needs a GPU reset (mig.md P1)
    memory_slices: int = 0      # 0 = not MIG capable
    max_mig_devices: int = 0
    gi_profiles: tuple = field(default_factory=tuple)

    @property
    def mig_capable(self):
        return self.memory_slices > 0


def _gi(index, pid, slices, inst, mem, sms, ce, engines, starts, size, suffix=""):
    dec, enc, jpg, ofa = engines
    return GiProfile(index, pid, slices, inst, mem, sms, ce, dec, enc, jpg, ofa, tuple(starts), size, suffix)


# Placements shared by the 8-memory-slice parts (mig.md §1.1; H200 inferred).
P8_1G = range(0, 7)
P8_1G2X = (0, 2, 4, 6)
P8_2G = (0, 2, 4)
P8_3G = (0, 4)


def _a100(mem):
    """A100 40GB/80GB: mem = MiB for (1g, 1g-2x/2g, 3g/4g, 7g) (mig.md §1.2, §1.3)."""
    m1, m2, m4, m7 = mem
    return (
        _gi(GI_1_SLICE, 19, 1, 7, m1, 14, 1, (0, 0, 0, 0), P8_1G, 1),
        _gi(GI_1_SLICE_REV1, 20, 1, 1, m1, 14, 1, (1, 0, 1, 1), P8_1G, 1, "+me"),
        _gi(GI_1_SLICE_REV2, 15, 1, 4, m2, 14, 1, (1, 0, 0, 0), P8_1G2X, 2),
        _gi(GI_2_SLICE, 14, 2, 3, m2, 28, 2, (1, 0, 0, 0), P8_2G, 2),
        _gi(GI_3_SLICE, 9, 3, 2, m4, 42, 3, (2, 0, 0, 0), P8_3G, 4),
        _gi(GI_4_SLICE, 5, 4, 1, m4, 56, 4, (2, 0, 0, 0), (0,), 4),
        _gi(GI_7_SLICE, 0, 7, 1, m7, 98, 7, (5, 0, 1, 1), (0,), 8),
    )


def _hopper(mem):
    """H100/H200 family: SM/CE/engine columns from mig.md §1.5-1.7."""
    m1, m2, m4, m7 = mem
    return (
        _gi(GI_1_SLICE, 19, 1, 7, m1, 16, 1, (1, 0, 1, 0), P8_1G, 1),
        _gi(GI_1_SLICE_REV1, 20, 1, 1, m1, 16, 1, (1, 0, 1, 1), P8_1G, 1, "+me"),
        _gi(GI_1_SLICE_REV2, 15, 1, 4, m2, 26, 1, (1, 0, 1, 0), P8_1G2X, 2),
        _gi(GI_2_SLICE, 14, 2, 3, m2, 32, 2, (2, 0, 2, 0), P8_2G, 2),
        _gi(GI_3_SLICE, 9, 3, 2, m4, 60, 3, (3, 0, 3, 0), P8_3G, 4),
        _gi(GI_4_SLICE, 5, 4, 1, m4, 64, 4, (4, 0, 4, 0), (0,), 4),
        _gi(GI_7_SLICE, 0, 7, 1, m7, 132, 8, (7, 0, 7, 1), (0,), 8),
    )


# A30: 4 memory slices, 4 SM slices, no 3g/7g (mig.md §1.4).
_A30 = (
    _gi(GI_1_SLICE, 14, 1, 4, 5836, 14, 1, (1, 0, 0, 0), range(0, 4), 1),
    _gi(GI_1_SLICE_REV1, 21, 1, 1, 5836, 14, 1, (1, 0, 1, 1), range(0, 4), 1, "+me"),
    _gi(GI_2_SLICE, 5, 2, 2, 11672, 28, 2, (2, 0, 0, 0), (0, 2), 2),
    _gi(GI_2_SLICE_REV1, 6, 2, 1, 11672, 28, 2, (2, 0, 1, 1), (0, 2), 2, "+me"),
    _gi(GI_4_SLICE, 0, 4, 1, 23344, 56, 4, (4, 0, 1, 1), (0,), 4),
)

MODELS = {
    m.name: m for m in (
        Model("NVIDIA A100-SXM4-40GB", 0x20B010DE, 0x134F10DE, 40537, ARCH_AMPERE, (8, 0), True, 8, 7,
              _a100((4864, 9856, 19968, 40192))),
        Model("NVIDIA A100-SXM4-80GB", 0x20B210DE, 0x147F10DE, 81920, ARCH_AMPERE, (8, 0), True, 8, 7,
              _a100((9856, 19968, 40192, 80384))),
        Model("NVIDIA A30", 0x20B710DE, 0x153210DE, 24576, ARCH_AMPERE, (8, 0), True, 4, 4, _A30),
        # MiB values = GiB column of the real -lgip output * 1024 (mig.md §1.5-1.7).
        Model("NVIDIA H100 80GB HBM3", 0x233010DE, 0x16C110DE, 81559, ARCH_HOPPER, (9, 0), False, 8, 7,
              _hopper((9984, 20096, 40448, 81152))),
        Model("NVIDIA H100 NVL", 0x232110DE, 0x183910DE, 95830, ARCH_HOPPER, (9, 0), False, 8, 7,
              _hopper((11008, 22144, 47488, 95360))),
        Model("NVIDIA H200", 0x233510DE, 0x18BE10DE, 143771, ARCH_HOPPER, (9, 0), False, 8, 7,
              _hopper((16384, 33024, 71168, 143104))),
        Model("NVIDIA L40S", 0x26B910DE, 0x185110DE, 46068, ARCH_ADA, (8, 9), False),
    )
}

# Compute-instance sizes allowed inside a GI of G compute slices, with their
# placements (compute slices within the GI) (mig.md §1.10; counts = len(starts)).
CI_PLACEMENTS = {
    7: {1: (0, 1, 2, 3, 4, 5, 6), 2: (0, 2, 4), 3: (0, 4), 4: (0,), 7: (0,)},
    4: {1: (0, 1, 2, 3), 2: (0, 2), 4: (0,)},
    3: {1: (0, 1, 2), 2: (0,), 3: (0,)},
    2: {1: (0, 1), 2: (0,)},
    1: {1: (0,)},
}


def gi_profile_by_id(model, profile_id):
    for p in model.gi_profiles:
        if p.id == profile_id:
            return p
    return None


def gi_profile_by_index(model, index):
    for p in model.gi_profiles:
        if p.index == index:
            return p
    return None


def memory_gb(memory_mib, total_mib):
    """mig-parted/go-nvlib getMigMemorySizeGB (mig.md "Profile naming algorithm")."""
    frac = (memory_mib * MIB) / (total_mib * MIB)
    frac = math.ceil(frac * 8) / 8
    # Go math.Round rounds half away from zero; Python round() would not.
    return int(math.floor(frac * math.ceil(total_mib * MIB / GIB) + 0.5))


def gi_name(model, profile):
    return "%dg.%dgb%s" % (profile.slices, memory_gb(profile.memory_mib, model.memory_mib), profile.suffix)


def ci_name(model, profile, ci_slices):
    gname = gi_name(model, profile)
    if ci_slices == profile.slices:
        return gname
    return "%dc.%s" % (ci_slices, gname)


def ci_sms(profile, ci_slices, model):
    """SMs of a CI: the whole GI when C == G, else C times the 1g SM count."""
    if ci_slices == profile.slices:
        return profile.sms
    return ci_slices * gi_profile_by_index(model, GI_1_SLICE).sms


def full_profile(model):
    """The profile that spans the whole GPU; its engines are the GPU's engine budget."""
    return max(model.gi_profiles, key=lambda p: (p.size, p.slices))
