# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documented MIG profile tables per GPU model, keyed by PCI device id (pure data, no I/O).

Why it exists: R535 and older drivers answer ``NVML_ERROR_NOT_SUPPORTED`` to GPU-instance profile queries while
MIG mode is disabled (NVIDIA/mig-parted commit 219e780d, ``pkg/mig/discovery/discovery.go``
``ErrNoProfilesDiscovered``; mig-manager then falls back to a static config, ``cmd/nvidia-mig-manager/main.go``
``setupMigConfig``). A plan must still be validated before anything is disrupted, so it is validated against the
table NVIDIA documents for the model, and re-checked against the live table right after the mode change.

Sources: NVIDIA MIG User Guide, "Supported MIG Profiles" (names, instance counts, memory fractions) and "Getting
Started" (``nvidia-smi mig -lgipp`` placements, profile ids), "Deployment Considerations" (minimum drivers:
A100 R450 450.80.02, A30 R460 460.73.01, H100 R525 525.85.12, H200 R550 550.90.07, B200 R570 570.133.20, RTX PRO
6000 Blackwell R575 575.51.03). A30 ``+me`` profiles need R470 (1g.6gb+me) and R525 (2g.12gb+me) per the same page.
PCI device ids and each family's profile names as mig-parted's ``deployments/systemd/config-default.yaml`` spells
them; every row of MODELS says where its data comes from, and which parts are inferred. lab/gpusim/gpusim/models.py
keeps its own table of the same GPUs, written separately; tests/unit/plugins/module_utils/_mig/test_models_table.py
compares the two.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from typing import Any, Optional, Union

from ansible_collections.gpuops.provision.plugins.module_utils._drivers import versions
from ansible_collections.gpuops.provision.plugins.module_utils._mig import geometry

# Placements in memory slices, {starts}:size as ``nvidia-smi mig -lgipp`` prints them.
_P8 = {
    "1g": (tuple(range(7)), 1), "1g+me": (tuple(range(7)), 1), "1g2x": ((0, 2, 4, 6), 2),
    "2g": ((0, 2, 4), 2), "3g": ((0, 4), 4), "4g": ((0,), 4), "7g": ((0,), 8),
}
_P4 = {"1g": (tuple(range(4)), 1), "1g+me": (tuple(range(4)), 1), "2g": ((0, 2), 2), "2g+me": ((0, 2), 2), "4g": ((0,), 4)}

# (kind, nvidia-smi profile id, SM slices, max instances, NVML profile index) of the 8-memory-slice parts.
_LAYOUT8 = (("1g", 19, 1, 7, 0), ("1g+me", 20, 1, 1, 7), ("1g2x", 15, 1, 4, 9), ("2g", 14, 2, 3, 1),
            ("3g", 9, 3, 2, 2), ("4g", 5, 4, 1, 3), ("7g", 0, 7, 1, 4))


def _eight(gb: tuple[int, int, int, int]) -> tuple[dict[str, Any], ...]:
    """Profiles of an 8-memory-slice GPU; gb = the GB figures of (1g, 1g double memory/2g, 3g/4g, 7g) names."""
    g1, g2, g4, g7 = gb
    names = {"1g": "1g.%dgb" % g1, "1g+me": "1g.%dgb+me" % g1, "1g2x": "1g.%dgb" % g2, "2g": "2g.%dgb" % g2,
             "3g": "3g.%dgb" % g4, "4g": "4g.%dgb" % g4, "7g": "7g.%dgb" % g7}
    return tuple({"name": names[k], "id": pid, "slices": s, "max_count": n, "index": idx,
                  "placements": tuple((start, _P8[k][1]) for start in _P8[k][0]), "min_branch": None}
                 for k, pid, s, n, idx in _LAYOUT8)


_A30 = tuple({"name": name, "id": pid, "slices": s, "max_count": n, "index": idx, "min_branch": mind,
              "placements": tuple((start, _P4[k][1]) for start in _P4[k][0])}
             for k, name, pid, s, n, idx, mind in (
                 ("1g", "1g.6gb", 14, 1, 4, 0, None), ("1g+me", "1g.6gb+me", 21, 1, 1, 7, 470),
                 ("2g", "2g.12gb", 5, 2, 2, 1, None), ("2g+me", "2g.12gb+me", 6, 2, 1, 8, 525),
                 ("4g", "4g.24gb", 0, 4, 1, 3, None)))

# RTX PRO 6000 Blackwell: 4 memory slices and, beside the plain and +me profiles, +gfx (graphics capable), -me (no
# media engines) and +me.all (every media engine of the GPU: nvml.h NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME
# "prevents allocation of all but _NO_ME profiles", see geometry.check_me_all). NVML indexes from nvml.h
# (1_SLICE 0, 2_SLICE 1, 4_SLICE 3, 1_SLICE_REV1 7, 1/2/4_SLICE_GFX 10/11/12, 1/2_SLICE_NO_ME 13/14, 1/2_SLICE_ALL_ME
# 15/16). Ids 14, 21, 47 and 65 from real `nvidia-smi mig -lgip` outputs (GoogleCloudPlatform/container-engine-
# accelerators#564, bottlerocket-os/bottlerocket-kernel-kit#300, bigstack-oss/cubecos#312); 2g.48gb 5 and 4g.96gb 0 as
# on the A30 (same 4-slice layout, inferred); the other ids are not published (None: not compared). Counts from
# NVIDIA/mig-parted pkg/mig/builder/builder_test.go (RTX PRO 6000 profiles); placements inferred from the A30's
# 4-slice table ({0..3}:1, {0,2}:2, {0}:4), no real `-lgipp` output is published.
_RTX = tuple({"name": name, "id": pid, "slices": s, "max_count": n, "index": idx, "min_branch": None,
              "placements": tuple((start, _P4[k][1]) for start in _P4[k][0])}
             for k, name, pid, s, n, idx in (
                 ("1g", "1g.24gb", 14, 1, 4, 0), ("1g+me", "1g.24gb+me", 21, 1, 1, 7),
                 ("1g", "1g.24gb+gfx", 47, 1, 4, 10), ("1g", "1g.24gb-me", None, 1, 4, 13),
                 ("1g", "1g.24gb+me.all", 65, 1, 1, 15),
                 ("2g", "2g.48gb", 5, 2, 2, 1), ("2g", "2g.48gb+gfx", None, 2, 2, 11), ("2g", "2g.48gb-me", None, 2, 2, 14),
                 ("2g", "2g.48gb+me.all", None, 2, 1, 16),
                 ("4g", "4g.96gb", 0, 4, 1, 3), ("4g", "4g.96gb+gfx", None, 4, 1, 12)))

_A100_40 = _eight((5, 10, 20, 40))
_A100_80 = _eight((10, 20, 40, 80))
_H100_80 = _eight((10, 20, 40, 80))
_H100_NVL = _eight((12, 24, 47, 94))
_H100_96 = _eight((12, 24, 48, 96))
_H200 = _eight((18, 35, 71, 141))
_GH200_144 = _eight((18, 36, 72, 144))
_B200 = _eight((23, 45, 90, 180))
_GB200 = _eight((23, 47, 93, 186))
_B300 = _eight((34, 67, 135, 269))
_GB300 = _eight((35, 70, 139, 278))

# PCI device id (device << 16 | vendor, as NVML's pciDeviceId) -> documented model. Each row's source:
#   ids and names: NVIDIA/mig-parted deployments/systemd/config-default.yaml (device filters and the all-<profile>
#     configs of each family; "H100-96GB, PG506-96GB, GH200, H20" share one family), NVIDIA MIG User Guide
#     "Supported MIG Profiles".
#   8-slice placements: the A100/H100 `-lgipp` block (UG "Getting Started"); for every later 8-slice model no real
#     `-lgipp` is published and the UG gives the same 1/8-memory-slice layout and ids: inferred from it.
#   min_driver: UG "Deployment Considerations" (A100 450.80.02, A30 460.73.01, H100 525.85.12, H200 550.90.07,
#     B200 570.133.20, RTX PRO 6000 Blackwell 575.51.03). Rows marked "inferred" have no documented minimum and take
#     their family's: Ampere variants A100's, Hopper variants H100's, GB200 B200's; B300/GB300 580.65.06, the first
#     R580 release (Blackwell Ultra came with R580).
MODELS: dict[int, dict[str, Any]] = {
    0x20B010DE: {"family": "A100", "name": "A100-SXM4-40GB", "min_driver": "450.80.02", "profiles": _A100_40},
    0x20B110DE: {"family": "A100", "name": "A100-PCIE-40GB", "min_driver": "450.80.02", "profiles": _A100_40},
    0x20F110DE: {"family": "A100", "name": "A100-PCIE-40GB", "min_driver": "450.80.02", "profiles": _A100_40},
    0x20B210DE: {"family": "A100", "name": "A100-SXM4-80GB", "min_driver": "450.80.02", "profiles": _A100_80},
    0x20B510DE: {"family": "A100", "name": "A100-PCIE-80GB", "min_driver": "450.80.02", "profiles": _A100_80},
    0x20F610DE: {"family": "A100", "name": "A800-40GB", "min_driver": "450.80.02", "profiles": _A100_40},  # inferred min
    0x20F310DE: {"family": "A100", "name": "A800-SXM4-80GB", "min_driver": "450.80.02", "profiles": _A100_80},  # inferred min
    0x20F510DE: {"family": "A100", "name": "A800-PCIE-80GB", "min_driver": "450.80.02", "profiles": _A100_80},  # inferred min
    0x20B610DE: {"family": "A100", "name": "PG506-96GB", "min_driver": "450.80.02", "profiles": _H100_96},  # inferred min
    # counts: NVML's instanceCount is wrong on the A30 (mig-parted discovery.go getHardcodedA30Profiles).
    0x20B710DE: {"family": "A30", "name": "A30", "min_driver": "460.73.01", "profiles": _A30, "counts": "documented"},
    0x233010DE: {"family": "H100", "name": "H100 80GB HBM3", "min_driver": "525.85.12", "profiles": _H100_80},
    0x233110DE: {"family": "H100", "name": "H100 PCIe", "min_driver": "525.85.12", "profiles": _H100_80},
    0x232210DE: {"family": "H100", "name": "H800 PCIe", "min_driver": "525.85.12", "profiles": _H100_80},  # inferred min
    0x232410DE: {"family": "H100", "name": "H800", "min_driver": "525.85.12", "profiles": _H100_80},  # inferred min
    0x232110DE: {"family": "H100", "name": "H100 NVL", "min_driver": "525.85.12", "profiles": _H100_NVL},
    0x233A10DE: {"family": "H100", "name": "H800 NVL", "min_driver": "525.85.12", "profiles": _H100_NVL},  # inferred min
    0x234210DE: {"family": "H100", "name": "H100 96GB", "min_driver": "525.85.12", "profiles": _H100_96},  # inferred min
    0x233D10DE: {"family": "H100", "name": "GH200 96GB", "min_driver": "525.85.12", "profiles": _H100_96},  # inferred min
    0x232910DE: {"family": "H100", "name": "H20", "min_driver": "525.85.12", "profiles": _H100_96},  # inferred min
    0x233510DE: {"family": "H200", "name": "H200", "min_driver": "550.90.07", "profiles": _H200},
    0x233B10DE: {"family": "H200", "name": "H200 NVL", "min_driver": "550.90.07", "profiles": _H200},
    0x234810DE: {"family": "H200", "name": "GH200 144GB HBM3e", "min_driver": "550.90.07", "profiles": _GH200_144},  # inferred min
    0x290110DE: {"family": "B200", "name": "B200", "min_driver": "570.133.20", "profiles": _B200},
    0x294110DE: {"family": "B200", "name": "GB200", "min_driver": "570.133.20", "profiles": _GB200},  # inferred min
    0x318210DE: {"family": "B300", "name": "B300", "min_driver": "580.65.06", "profiles": _B300},  # inferred min
    0x31C210DE: {"family": "B300", "name": "GB300", "min_driver": "580.65.06", "profiles": _GB300},  # inferred min
    0x2BB510DE: {"family": "RTX PRO 6000 Blackwell", "name": "RTX PRO 6000 Blackwell Server Edition",
                 "min_driver": "575.51.03", "profiles": _RTX},
}


def with_documented_counts(pci_device_id: Union[int, str], table: geometry.ProfileTable) -> geometry.ProfileTable:
    """``table`` (NVML's) with the documented instance counts for a model whose driver reports wrong ones (``counts``
    'documented' in MODELS: the A30, where GetGpuInstanceProfileInfo's instanceCount is wrong and mig-parted
    hard-codes the counts, NVIDIA/mig-parted pkg/mig/discovery/discovery.go getHardcodedA30Profiles); the counts decide
    the capacity and the check against the documented table. Other models, and profiles the table does not
    document, keep NVML's."""
    model = documented(pci_device_id)
    if model is None or model.get("counts") != "documented":
        return table
    counts = dict((p["name"], p["max_count"]) for p in model["profiles"])
    return geometry.ProfileTable([geometry.Profile(p.name, p.id, p.slices, p.placements, counts.get(p.name, p.max_count),
                                                   p.memory_mb, p.aliases, p.index) for p in table.profiles])


def documented(pci_device_id: Union[int, str]) -> Optional[dict[str, Any]]:
    """The documented model for a PCI device id (int or '0x...' string), or None."""
    if isinstance(pci_device_id, str):
        pci_device_id = int(pci_device_id, 16)
    return MODELS.get(pci_device_id)


def _driver(version: Optional[str]) -> Optional[versions.DriverVersion]:
    try:
        return versions.parse_driver_version(version)
    except versions.VersionError:
        return None


def documented_table(pci_device_id: Union[int, str], driver_version: Optional[str] = None) -> Optional[geometry.ProfileTable]:
    """A ProfileTable built from the documented model (profiles the driver branch lacks left out), or None."""
    model = documented(pci_device_id)
    if model is None:
        return None
    drv = _driver(driver_version)
    profiles = [geometry.Profile(p["name"], p["id"], p["slices"], p["placements"], p["max_count"], 0, (), p["index"])
                for p in model["profiles"]
                if not (p["min_branch"] and drv is not None and drv.branch < p["min_branch"])]
    return geometry.ProfileTable(profiles)


def below_minimum(pci_device_id: Union[int, str], driver_version: Optional[str]) -> Optional[str]:
    """A sentence when the driver is older than NVIDIA's documented minimum for MIG on this model, else None."""
    model = documented(pci_device_id)
    drv = _driver(driver_version)
    if model is None or drv is None:
        return None
    if drv < versions.parse_driver_version(model["min_driver"]):
        return "driver %s is older than %s, the minimum NVIDIA documents for MIG on %s (R%s)" % (
            driver_version, model["min_driver"], model["name"], model["min_driver"].split(".")[0])
    return None


def missing_profiles_hint(pci_device_id: Union[int, str], driver_version: Optional[str], names: Container[str]) -> str:
    """Why profiles may be missing from the live table: the model's and each profile's documented minimum driver."""
    model = documented(pci_device_id)
    if model is None:
        return "driver %s; the collection has no documented MIG table for PCI device 0x%08X" % (
            driver_version, pci_device_id if isinstance(pci_device_id, int) else int(pci_device_id, 16))
    needs = []
    for p in model["profiles"]:
        if p["name"] in names and p["min_branch"]:
            needs.append("%s needs R%d or newer" % (p["name"], p["min_branch"]))
    below = below_minimum(pci_device_id, driver_version)
    parts = ["the loaded driver is %s" % driver_version]
    parts.append(below or "NVIDIA documents MIG on %s from driver %s" % (model["name"], model["min_driver"]))
    return "; ".join(parts + needs)


def disagreements(documented_table_: geometry.ProfileTable, live_table: geometry.ProfileTable, names: Iterable[str]) -> list[str]:
    """Differences between the documented and the live table for the profiles a target uses (empty: they agree)."""
    out = []
    for name in sorted(names):
        doc, live = documented_table_.get(name), live_table.get(name)
        if doc is None:
            continue
        if live is None:
            out.append("%s is documented but the driver does not offer it" % name)
            continue
        for attr in ("id", "slices", "max_count", "placements"):
            # An id NVIDIA does not publish is None in the table: nothing to compare.
            if getattr(doc, attr) is not None and getattr(doc, attr) != getattr(live, attr):
                out.append("%s: %s documented %s, NVML reports %s" % (name, attr, getattr(doc, attr), getattr(live, attr)))
    return out
