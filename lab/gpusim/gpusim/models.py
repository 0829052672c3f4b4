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
    nvml_instances: int = 0  # what NVML's instanceCount says when it differs from ``instances`` (0: the same)


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


def _gi(index, pid, slices, inst, mem, sms, ce, engines, starts, size, suffix="", nvml_instances=0):
    dec, enc, jpg, ofa = engines
    return GiProfile(index, pid, slices, inst, mem, sms, ce, dec, enc, jpg, ofa, tuple(starts), size, suffix,
                     nvml_instances=nvml_instances)


# Placements shared by the 8-memory-slice parts (mig.md §1.1; H200 inferred).
P8_1G = range(0, 7)
P8_1G2X = (0, 2, 4, 6)
P8_2G = (0, 2, 4)
P8_3G = (0, 4)


# The 8-memory-slice layout: (NVML index, profile id, SM slices, max instances, which of the four memory figures,
# placement starts, memory slices, suffix), the same on every 8-slice part (mig.md §1.1).
_LAYOUT8 = ((GI_1_SLICE, 19, 1, 7, 0, P8_1G, 1, ""), (GI_1_SLICE_REV1, 20, 1, 1, 0, P8_1G, 1, "+me"),
            (GI_1_SLICE_REV2, 15, 1, 4, 1, P8_1G2X, 2, ""), (GI_2_SLICE, 14, 2, 3, 1, P8_2G, 2, ""),
            (GI_3_SLICE, 9, 3, 2, 2, P8_3G, 4, ""), (GI_4_SLICE, 5, 4, 1, 2, (0,), 4, ""),
            (GI_7_SLICE, 0, 7, 1, 3, (0,), 8, ""))


def _eight(mem, columns):
    """An 8-slice part's profiles: ``mem`` = MiB of the (1g, 1g-2x/2g, 3g/4g, 7g) profiles; ``columns`` = per layout
    row (SMs, copy engines, (DEC, ENC, JPG, OFA))."""
    return tuple(_gi(idx, pid, slices, inst, mem[m], sms, ce, engines, starts, size, suffix)
                 for (idx, pid, slices, inst, m, starts, size, suffix), (sms, ce, engines) in zip(_LAYOUT8, columns))


def _a100(mem):
    """A100 40GB/80GB: mem = MiB for (1g, 1g-2x/2g, 3g/4g, 7g) (mig.md §1.2, §1.3)."""
    return _eight(mem, ((14, 1, (0, 0, 0, 0)), (14, 1, (1, 0, 1, 1)), (14, 1, (1, 0, 0, 0)), (28, 2, (1, 0, 0, 0)),
                        (42, 3, (2, 0, 0, 0)), (56, 4, (2, 0, 0, 0)), (98, 7, (5, 0, 1, 1))))


def _hopper(mem):
    """H100/H200 family: SM/CE/engine columns from mig.md §1.5-1.7."""
    return _eight(mem, ((16, 1, (1, 0, 1, 0)), (16, 1, (1, 0, 1, 1)), (26, 1, (1, 0, 1, 0)), (32, 2, (2, 0, 2, 0)),
                        (60, 3, (3, 0, 3, 0)), (64, 4, (4, 0, 4, 0)), (132, 8, (7, 0, 7, 1))))


# A30: 4 memory slices, 4 SM slices, no 3g/7g (mig.md §1.4).
# NVML's instanceCount is wrong on the A30: NVIDIA/mig-parted pkg/mig/discovery/discovery.go hard-codes the counts
# ("NVML reports incorrect profiles for A30", getHardcodedA30Profiles: 4, 1, 2, 1, 1) and says no more. The wrong
# values are not published; gpusim answers those of the full GA100 die the A30 is cut from (7, 1, 3, 1, 1 as on the
# A100), an assumption, not an observation. A state with "a30_nvml_counts": "documented" answers the documented
# counts instead, so a consumer is tested both ways (nvml_instances below; api_mig._gi_profile_fields).
_A30 = (
    _gi(GI_1_SLICE, 14, 1, 4, 5836, 14, 1, (1, 0, 0, 0), range(0, 4), 1, nvml_instances=7),
    _gi(GI_1_SLICE_REV1, 21, 1, 1, 5836, 14, 1, (1, 0, 1, 1), range(0, 4), 1, "+me"),
    _gi(GI_2_SLICE, 5, 2, 2, 11672, 28, 2, (2, 0, 0, 0), (0, 2), 2, nvml_instances=3),
    _gi(GI_2_SLICE_REV1, 6, 2, 1, 11672, 28, 2, (2, 0, 1, 1), (0, 2), 2, "+me"),
    _gi(GI_4_SLICE, 0, 4, 1, 23344, 56, 4, (4, 0, 1, 1), (0,), 4),
)


def _blackwell(mem):
    """B200/GB200/B300/GB300: the 8-slice layout and profile ids of real B200 and GB200 `nvidia-smi mig -lgip`
    outputs (NVIDIA/mig-parted#166, #187; NVIDIA/gpu-operator#1303: 1g SM 18 CE 2, 1g-2x SM 30-32, 2g SM 36-38 CE 4);
    the larger profiles' SM/CE from UG "Supported MIG Profiles" (copy engines 2, 2, 2, 3/4, 6, 8, 16). Placements:
    no real `-lgipp` is published; the A100/H100 block (mig.md §1.1), inferred."""
    return _eight(mem, ((18, 2, (1, 0, 1, 0)), (18, 2, (1, 0, 1, 1)), (30, 2, (1, 0, 1, 0)), (36, 4, (2, 0, 2, 0)),
                        (66, 6, (3, 0, 3, 0)), (72, 8, (4, 0, 4, 0)), (144, 16, (7, 0, 7, 1))))


# RTX PRO 6000 Blackwell Server Edition (GB202): 4 memory slices. Real `nvidia-smi mig -lgip` (bigstack-oss/cubecos#312,
# GoogleCloudPlatform/container-engine-accelerators#564): 1g.24gb id 14 x4 23.62 GiB SM 46 (DEC 1 ENC 1 JPG 1),
# 1g.24gb+me 21 x1, 1g.24gb+gfx 47 x4, 1g.24gb+me.all 65 x1 (DEC 4). Counts of the others: NVIDIA/mig-parted
# pkg/mig/builder/builder_test.go. Ids not published are made up here (70-76, marked); NVML indexes are nvml.h's
# (GFX 10/11/12, NO_ME 13/14, ALL_ME 15/16). Placements as the A30's 4-slice table (inferred).
ARCH_BLACKWELL = 10
_RTX_ENGINES = (1, 1, 1, 0)
_RTX = (
    _gi(GI_1_SLICE, 14, 1, 4, 24186, 46, 1, _RTX_ENGINES, range(0, 4), 1),
    _gi(GI_1_SLICE_REV1, 21, 1, 1, 24186, 46, 1, (1, 1, 1, 1), range(0, 4), 1, "+me"),
    _gi(10, 47, 1, 4, 24186, 46, 1, _RTX_ENGINES, range(0, 4), 1, "+gfx"),
    _gi(13, 70, 1, 4, 24186, 46, 1, (0, 0, 0, 0), range(0, 4), 1, "-me"),          # id made up
    _gi(15, 65, 1, 1, 24186, 46, 1, (4, 4, 4, 1), range(0, 4), 1, "+me.all"),
    _gi(GI_2_SLICE, 5, 2, 2, 48512, 94, 2, (2, 2, 2, 0), (0, 2), 2),
    _gi(11, 71, 2, 2, 48512, 94, 2, (2, 2, 2, 0), (0, 2), 2, "+gfx"),               # id made up
    _gi(14, 72, 2, 2, 48512, 94, 2, (0, 0, 0, 0), (0, 2), 2, "-me"),                # id made up
    _gi(16, 73, 2, 1, 48512, 94, 2, (4, 4, 4, 1), (0, 2), 2, "+me.all"),            # id made up
    _gi(GI_4_SLICE, 0, 4, 1, 97024, 188, 4, (4, 4, 4, 1), (0,), 4),
    _gi(12, 74, 4, 1, 97024, 188, 4, (4, 4, 4, 1), (0,), 4, "+gfx"),                # id made up
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
        # Every other MIG GPU NVIDIA ships (mig-parted deployments/systemd/config-default.yaml device filters). Totals
        # in MiB as nvidia-smi prints them where a real output is cited, else chosen inside the GiB the profile names
        # need (go-nvlib naming: ceil of the total in GiB); profile MiB from the `-lgip` GiB column where one is
        # cited (B200 20.50/44.25, GB200 20.00/45.50, GH200 144G 17.50/35.25), else 1/8, 2/8, 4/8, 8/8 of it less a
        # margin, as the other parts show.
        Model("NVIDIA A100 PCIe 40GB", 0x20B110DE, 0x145F10DE, 40537, ARCH_AMPERE, (8, 0), True, 8, 7,
              _a100((4864, 9856, 19968, 40192))),
        Model("NVIDIA A100-PCIE-40GB", 0x20F110DE, 0x145F10DE, 40537, ARCH_AMPERE, (8, 0), True, 8, 7,
              _a100((4864, 9856, 19968, 40192))),
        Model("NVIDIA A100 80GB PCIe", 0x20B510DE, 0x153310DE, 81920, ARCH_AMPERE, (8, 0), True, 8, 7,
              _a100((9856, 19968, 40192, 80384))),
        Model("NVIDIA H100 PCIe", 0x233110DE, 0x162610DE, 81559, ARCH_HOPPER, (9, 0), False, 8, 7,
              _hopper((9984, 20096, 40448, 81152))),
        Model("NVIDIA A800 40GB PCIe", 0x20F610DE, 0x180610DE, 40537, ARCH_AMPERE, (8, 0), True, 8, 7,
              _a100((4864, 9856, 19968, 40192))),
        Model("NVIDIA A800-SXM4-80GB", 0x20F310DE, 0x17A210DE, 81920, ARCH_AMPERE, (8, 0), True, 8, 7,
              _a100((9856, 19968, 40192, 80384))),
        Model("NVIDIA A800 80GB PCIe", 0x20F510DE, 0x179910DE, 81920, ARCH_AMPERE, (8, 0), True, 8, 7,
              _a100((9856, 19968, 40192, 80384))),
        Model("NVIDIA PG506-232", 0x20B610DE, 0x14F210DE, 97871, ARCH_AMPERE, (8, 0), True, 8, 7,
              _a100((11008, 22144, 47488, 95360))),
        Model("NVIDIA H800", 0x232410DE, 0x17A610DE, 81559, ARCH_HOPPER, (9, 0), False, 8, 7,
              _hopper((9984, 20096, 40448, 81152))),
        Model("NVIDIA H800 PCIe", 0x232210DE, 0x17A410DE, 81559, ARCH_HOPPER, (9, 0), False, 8, 7,
              _hopper((9984, 20096, 40448, 81152))),
        Model("NVIDIA H800 NVL", 0x233A10DE, 0x183A10DE, 95830, ARCH_HOPPER, (9, 0), False, 8, 7,
              _hopper((11008, 22144, 47488, 95360))),
        Model("NVIDIA H100 96GB", 0x234210DE, 0x16EB10DE, 97871, ARCH_HOPPER, (9, 0), False, 8, 7,
              _hopper((11008, 22144, 47488, 95360))),
        Model("NVIDIA GH200 96GB HBM3", 0x233D10DE, 0x180710DE, 97871, ARCH_HOPPER, (9, 0), False, 8, 7,
              _hopper((11008, 22144, 47488, 95360))),
        Model("NVIDIA H20", 0x232910DE, 0x198B10DE, 97871, ARCH_HOPPER, (9, 0), False, 8, 7,
              _hopper((11008, 22144, 47488, 95360))),
        Model("NVIDIA H200 NVL", 0x233B10DE, 0x199610DE, 143771, ARCH_HOPPER, (9, 0), False, 8, 7,
              _hopper((16384, 33024, 71168, 143104))),
        Model("NVIDIA GH200 144G HBM3e", 0x234810DE, 0x18D810DE, 146944, ARCH_HOPPER, (9, 0), False, 8, 7,
              _hopper((17920, 36096, 72704, 145920))),
        Model("NVIDIA B200", 0x290110DE, 0x199910DE, 183359, ARCH_BLACKWELL, (10, 0), False, 8, 7,
              _blackwell((20992, 45312, 91648, 182784))),
        Model("NVIDIA GB200", 0x294110DE, 0x20D510DE, 190208, ARCH_BLACKWELL, (10, 0), False, 8, 7,
              _blackwell((20480, 46592, 94208, 189440))),
        Model("NVIDIA B300 SXM6 AC", 0x318210DE, 0x20E610DE, 275200, ARCH_BLACKWELL, (10, 3), False, 8, 7,
              _blackwell((32768, 67072, 134656, 272384))),
        Model("NVIDIA GB300", 0x31C210DE, 0x21E410DE, 284160, ARCH_BLACKWELL, (10, 3), False, 8, 7,
              _blackwell((33792, 69120, 139264, 281600))),
        Model("NVIDIA RTX PRO 6000 Blackwell Server Edition", 0x2BB510DE, 0x204E10DE, 97887, ARCH_BLACKWELL, (12, 0),
              False, 4, 4, _RTX),
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
