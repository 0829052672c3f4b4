# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA driver branches and the vGPU software releases built on them (data only: no code, no I/O).

Checked 2026-12-01 against these sources (each row names the one its ``kind``/``eol`` come from):

- NVIDIA data center drivers, "Supported Drivers and CUDA Toolkit Versions", 620 edition: R580 Long Term Support
  Branch (end of life June 2028), R595 Production Branch (March 2027), R620 Long Term Support Branch (September 2029).
  https://docs.nvidia.com/datacenter/tesla/drivers/620/supported-drivers-and-cuda-toolkit-versions.html
- Same page, 615 edition: R535 LTSB (June 2026), R580 LTSB (June 2028), R595 PB (March 2027), R610 New Feature
  Branch (August 2026).
  https://docs.nvidia.com/datacenter/tesla/drivers/615/supported-drivers-and-cuda-toolkit-versions.html
- NVIDIA CUDA and Drivers Support (RN-08625-001 v02, March 2021): R418 LTSB (March 2022), R440 NFB (November 2020),
  R450 LTSB (July 2023), R460 PB (January 2022).
  https://docs.nvidia.com/datacenter/tesla/pdf/NVIDIA_CUDA_Drivers_Support.pdf
- vGPU release notes pairing a vGPU software release with its branch: 8.x = R418
  (https://docs.nvidia.com/vgpu/8.0/grid-vgpu-release-notes-red-hat-el-kvm/index.html), 12.x = R460
  (https://docs.nvidia.com/vgpu/12.0/grid-vgpu-release-notes-microsoft-windows-server/index.html), 15.x = R525
  (https://docs.nvidia.com/grid/latest/grid-vgpu-release-notes-generic-linux-kvm/index.html), 19.x = R580
  (https://docs.nvidia.com/vgpu/19.0/grid-vgpu-release-notes-vmware-vsphere/index.html). The 19.0 notes also give
  the compatibility rules that ``_drivers.versions.vgpu_compatibility`` encodes.
- NVIDIA's vGPU lifecycle table as quoted by a secondary source: vGPU 17 = R550 Production Branch (EOL June 2025),
  vGPU 16 = R535 Long-Term Support (EOL July 2026). https://cidian.kuaisou.com/virtual+gpu+driver
- vGPU 18.6 = 570.211.01 (secondary: Azure HPC driver manifest, quoted in https://github.com/Azure/aks-gpu/pull/154).
- vGPU software lifecycle terms: vGPU releases are Production Branches (1 year) or Long Term Support Branches
  (3 years). https://docs.nvidia.com/vgpu/faq/latest/hardware.html

Row fields:
  branch  driver branch number (R580 -> 580); rows are in strictly increasing order.
  kind    'LTSB', 'PB' or 'NFB'. For a branch with a vGPU software release, the designation the vGPU software
          lifecycle gives it (PB unless it is an LTSB); for other branches the data center driver designation.
          Only rows that are not 'NFB' (or that carry a ``vgpu`` number) take part in vGPU compatibility.
  vgpu    vGPU software major release built on the branch, or None where not verified.
  eol     end of life as the row's source states it, ISO month 'YYYY-MM', or None where not verified.
  source  URL for the row's ``kind`` and ``eol``.

The rows R430/R440/R470/R510 carry the vGPU numbers and LTSB flags of the earlier table (vGPU lifecycle table, not
re-checked on 2026-12-01); they are listed so that "the previous branch" of a vGPU release stays right. The NFB
rows are the new feature branches the sources above name; the list of NFBs is not complete (it need not be: an
NFB is never "the previous branch", and a branch missing from the table only matches itself).
"""

from __future__ import annotations

from typing import Any

CHECKED = "2026-12-01"

KINDS = ("LTSB", "PB", "NFB")

_DC_620 = "https://docs.nvidia.com/datacenter/tesla/drivers/620/supported-drivers-and-cuda-toolkit-versions.html"
_DC_615 = "https://docs.nvidia.com/datacenter/tesla/drivers/615/supported-drivers-and-cuda-toolkit-versions.html"
_DC_2021 = "https://docs.nvidia.com/datacenter/tesla/pdf/NVIDIA_CUDA_Drivers_Support.pdf"
_VGPU_FAQ = "https://docs.nvidia.com/vgpu/faq/latest/hardware.html"
_VGPU_LIFECYCLE_QUOTE = "https://cidian.kuaisou.com/virtual+gpu+driver"

BRANCHES: tuple[dict[str, Any], ...] = (
    # vGPU 8; data center LTSB, EOL March 2022.
    dict(branch=418, kind="LTSB", vgpu=8, eol="2022-03", source=_DC_2021),
    # vGPU 9 (earlier table); a vGPU release that is not an LTSB, so PB in vGPU terms; EOL unverified.
    dict(branch=430, kind="PB", vgpu=9, eol=None, source=_VGPU_FAQ),
    # vGPU 10 (earlier table). The data center driver docs call their R440 an NFB (EOL November 2020); as a vGPU
    # release it is a PB in vGPU terms, and it is the branch before R450. vGPU 10 EOL unverified.
    dict(branch=440, kind="PB", vgpu=10, eol=None, source=_VGPU_FAQ),
    # vGPU 11; data center LTSB, EOL July 2023.
    dict(branch=450, kind="LTSB", vgpu=11, eol="2023-07", source=_DC_2021),
    # vGPU 12 (12.x release notes list 460.x drivers); data center PB, EOL January 2022.
    dict(branch=460, kind="PB", vgpu=12, eol="2022-01", source=_DC_2021),
    # vGPU 13, LTSB per the earlier table (vGPU lifecycle table); EOL unverified.
    dict(branch=470, kind="LTSB", vgpu=13, eol=None, source=_VGPU_FAQ),
    # vGPU 14 (earlier table); PB in vGPU terms; EOL unverified.
    dict(branch=510, kind="PB", vgpu=14, eol=None, source=_VGPU_FAQ),
    # vGPU 15 (15.0 manager 525.60.12, Linux guest 525.60.13); PB in vGPU terms; EOL unverified.
    dict(branch=525, kind="PB", vgpu=15, eol=None,
         source="https://docs.nvidia.com/grid/latest/grid-vgpu-release-notes-generic-linux-kvm/index.html"),
    # vGPU 16; data center LTSB, EOL June 2026 (the vGPU lifecycle table gives vGPU 16 EOL July 2026).
    dict(branch=535, kind="LTSB", vgpu=16, eol="2026-06", source=_DC_615),
    # vGPU 17; Production Branch, vGPU 17 EOL June 2025 (vGPU lifecycle table, secondary quote).
    dict(branch=550, kind="PB", vgpu=17, eol="2025-06", source=_VGPU_LIFECYCLE_QUOTE),
    # vGPU 18 (18.6 = 570.211.01, secondary source); PB in vGPU terms; EOL unverified.
    dict(branch=570, kind="PB", vgpu=18, eol=None, source="https://github.com/Azure/aks-gpu/pull/154"),
    # New feature branch (Google COS treats R575 as an NFB, "Temp branch"); no vGPU release.
    dict(branch=575, kind="NFB", vgpu=None, eol=None,
         source="https://cos.googlesource.com/cos/overlays/board-overlays/+/af3ca4ea0fcfe33ea1c586f0ae63a16998532186%5E"),
    # vGPU 19 (19.0 manager 580.65.05, Linux guest 580.65.06); data center LTSB, EOL June 2028.
    dict(branch=580, kind="LTSB", vgpu=19, eol="2028-06", source=_DC_620),
    # New feature branch (NVIDIA forum: "Current new feature branch release: 590.48.01"); no vGPU release.
    dict(branch=590, kind="NFB", vgpu=None, eol=None,
         source="https://forums.developer.nvidia.com/t/current-graphics-driver-releases/28500/7"),
    # Data center PB, EOL March 2027. vGPU release number unverified (community reports pair vGPU 20.x with 595.x;
    # no NVIDIA page confirming it was found).
    dict(branch=595, kind="PB", vgpu=None, eol="2027-03", source=_DC_620),
    # Data center NFB, EOL August 2026; no vGPU release.
    dict(branch=610, kind="NFB", vgpu=None, eol="2026-08", source=_DC_615),
    # Data center LTSB, EOL September 2029 (newest LTSB). vGPU release number unverified.
    dict(branch=620, kind="LTSB", vgpu=None, eol="2029-09", source=_DC_620),
)
