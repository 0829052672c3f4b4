# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which packages carry an NVIDIA driver on each platform, and which kernel-module flavour a host gets.

Pure data and functions (no I/O): the nvidia_driver role and the driver filters use them. Sources, checked
2026-12-01:

- NVIDIA Driver Installation Guide, "Kernel Modules"
  (https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/kernel-modules.html): open GPU kernel modules
  are the default from R560; the per-distribution table names ``nvidia-open`` (open) and ``cuda-drivers``
  (proprietary), the DNF module streams ``nvidia-driver:<branch>-open`` / ``<branch>-dkms`` on RHEL 8/9, and no
  module streams on RHEL 10 (``dnf install nvidia-open`` plus ``dnf versionlock '*nvidia*<branch>*'``).
- Same guide, "Recent Updates" and "Version locking"
  (https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/version-locking.html): Debian and Ubuntu get
  ``nvidia-driver-pinning-<branch or version>`` packages, to be installed before the driver; from 590 the Ubuntu
  packages lose their branch suffix (``cuda-drivers-580`` is dropped, ``nvidia-dkms-580`` becomes ``nvidia-dkms``).
- NVIDIA/open-gpu-kernel-modules ``README.md`` "Compatible GPUs": the open modules run on Turing or later GPUs (its
  table starts at PCI device 0x1E02); NVIDIA's announcement of the transition (developer blog, 2024-07): Grace Hopper
  and Blackwell are supported with the open modules only.
- Debian: ``nvidia-driver`` with ``nvidia-kernel-dkms`` (proprietary) or ``nvidia-open-kernel-dkms`` (open),
  packages.debian.org bookworm/trixie; Ubuntu: ``nvidia-headless-<branch>-server[-open]`` and
  ``nvidia-utils-<branch>-server`` (NVIDIA/ansible-role-nvidia-driver ``tasks/install-ubuntu.yml``; deepops'
  ``nvidia-driver-ubuntu-packages.yml`` for the ``-open`` variants).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Optional, Union

from ansible_collections.gpuops.provision.plugins.module_utils._drivers import versions as V

FLAVOURS = ("open", "proprietary")
# Open kernel modules are NVIDIA's default from this branch on (installation guide, "Kernel Modules").
OPEN_DEFAULT_BRANCH = 560
# The first branch that ships the open modules (open-gpu-kernel-modules' first release, 515.43.04).
OPEN_FIRST_BRANCH = 515
# Turing is the oldest architecture the open modules support; its PCI device ids start at 0x1E00.
TURING_FIRST_DEVICE = 0x1E00
# Blackwell (GB100 onwards) device ids start at 0x2900; Grace Hopper's GH200 is 0x2342. Both: open modules only.
BLACKWELL_FIRST_DEVICE = 0x2900
GRACE_HOPPER_DEVICES = {0x2342: "GH200"}
# Pinning packages (nvidia-driver-pinning-*) exist from this branch on (installation guide, "Recent Updates").
PINNING_PACKAGE_BRANCH = 580
# From 590 the Ubuntu CUDA-repository packages have no branch suffix.
UBUNTU_UNSUFFIXED_BRANCH = 590
NVIDIA_VENDOR = 0x10DE


class PackageError(ValueError):
    """A request that no package set can satisfy (bad flavour for the GPUs, unknown platform)."""


def _device_id(value: Any) -> Optional[int]:
    """PCI device id out of 0x2330 / '2330' / '10de:2330' / an iommu_info gpu entry (dict with vendor, device)."""
    if isinstance(value, dict):
        vendor = value.get("vendor")
        if isinstance(vendor, int) and not isinstance(vendor, bool):
            if vendor != NVIDIA_VENDOR:
                return None
        elif vendor not in (None, "") and _hex_id(str(vendor).strip().lower(), vendor, "vendor") != NVIDIA_VENDOR:
            return None
        value = value.get("device")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value if value is not None else "").strip().lower()
    if ":" in text:
        vendor, _sep, text = text.partition(":")
        if _hex_id(vendor, value, "vendor:device") != NVIDIA_VENDOR:
            return None
    return _hex_id(text, value, "device")


def _hex_id(text: str, value: object, what: str) -> int:
    # A malformed id is the user's error (PackageError, which the filters report), not a bare int() ValueError.
    if not re.match(r"^(0x)?[0-9a-f]{1,4}\Z", text):
        raise PackageError("%r is not a PCI %s id (0x2330, 10de:2330)" % (value, what))
    return int(text, 16)


def architecture_class(device: int) -> str:
    """'pre-turing' | 'open-only' | 'any' for one NVIDIA PCI device id."""
    if device < TURING_FIRST_DEVICE:
        return "pre-turing"
    if device >= BLACKWELL_FIRST_DEVICE or device in GRACE_HOPPER_DEVICES:
        return "open-only"
    return "any"


def kernel_flavour(requested: Optional[str], branch: Union[int, str], gpus: Optional[Iterable[Any]] = ()) -> dict[str, Any]:
    """The kernel-module flavour for a host: dict(flavour, reason, open_only, pre_turing).

    ``requested``: 'auto' (NVIDIA's default for the branch, unless the GPUs need the other one), 'open' or
    'proprietary'. ``branch``: the driver branch (535, 'R580'). ``gpus``: PCI device ids or iommu_info gpu entries.
    Raises PackageError when no flavour fits (the message names the devices).
    """
    requested = str(requested or "auto").strip().lower()
    if requested not in ("auto",) + FLAVOURS:
        raise PackageError("flavour must be auto, open or proprietary, not %r" % (requested,))
    number = V.parse_branch(branch)
    devices = sorted({d for d in (_device_id(g) for g in (gpus or ())) if d is not None})
    classes = {d: architecture_class(d) for d in devices}
    open_only = ["0x%04x" % d for d in devices if classes[d] == "open-only"]
    pre_turing = ["0x%04x" % d for d in devices if classes[d] == "pre-turing"]
    result = dict(open_only=open_only, pre_turing=pre_turing, branch=number, requested=requested)
    if open_only and pre_turing:
        raise PackageError("GPUs %s need the open kernel modules and GPUs %s the proprietary ones; one host cannot load both"
                           % (", ".join(open_only), ", ".join(pre_turing)))
    if open_only:
        if requested == "proprietary":
            raise PackageError("GPUs %s (Grace Hopper or Blackwell) are supported with the open kernel modules only; "
                               "set the flavour to open or auto" % ", ".join(open_only))
        if number < OPEN_FIRST_BRANCH:
            raise PackageError("GPUs %s need the open kernel modules, which R%d does not have" % (", ".join(open_only), number))
        return dict(result, flavour="open", reason="GPUs %s need the open kernel modules" % ", ".join(open_only))
    if pre_turing:
        if requested == "open":
            raise PackageError("GPUs %s are older than Turing; the open kernel modules do not support them, use proprietary"
                               % ", ".join(pre_turing))
        return dict(result, flavour="proprietary", reason="GPUs %s are older than Turing" % ", ".join(pre_turing))
    if requested == "open":
        if number < OPEN_FIRST_BRANCH:
            raise PackageError("R%d has no open kernel modules (they start with R%d)" % (number, OPEN_FIRST_BRANCH))
        return dict(result, flavour="open", reason="requested")
    if requested == "proprietary":
        return dict(result, flavour="proprietary", reason="requested")
    if number >= OPEN_DEFAULT_BRANCH:
        return dict(result, flavour="open", reason="NVIDIA's default from R%d" % OPEN_DEFAULT_BRANCH)
    return dict(result, flavour="proprietary", reason="NVIDIA's default before R%d" % OPEN_DEFAULT_BRANCH)


def platform_key(distribution: Optional[str], os_family: Optional[str]) -> str:
    """'debian' | 'ubuntu' | 'redhat' for Ansible's distribution / os_family facts."""
    dist = str(distribution or "").strip().lower()
    family = str(os_family or "").strip().lower()
    if dist == "ubuntu":
        return "ubuntu"
    if dist == "debian" or family == "debian":
        return "debian"
    if family == "redhat":
        return "redhat"
    raise PackageError("no NVIDIA driver packaging known for %s (%s)" % (distribution or "?", os_family or "?"))


KERNEL_MODULES = ("dkms", "precompiled")
SOURCES = ("distribution", "cuda", "file")


def _major(major_version: Union[int, str, None]) -> int:
    return int(str(major_version or "0").split(".", maxsplit=1)[0] or 0)


def _rhel_extra_repos(major_version: Union[int, str, None]) -> list[str]:
    """dkms comes from EPEL; EPEL's dkms needs CRB (CodeReady Builder, 'powertools' on EL8 rebuilds)."""
    return ["epel", "powertools" if _major(major_version) == 8 else "crb"]


def package_plan(distribution: Optional[str], os_family: Optional[str], major_version: Union[int, str, None], source: Optional[str],
                 flavour: str, branch: Union[int, str], driver_version: Optional[str] = None, persistence: bool = True,
                 kernel_modules: str = "dkms", kernel_flavours: Iterable[str] = ()) -> dict[str, Any]:
    """What to install for one host: dict(install, module_stream, pinning_packages, version_lock, extra_repos,
    builds_module).

    ``kernel_modules``: ``dkms`` (the module is built on the host; every platform) or ``precompiled`` (Ubuntu's own
    archive only: Canonical's signed modules, the Secure Boot path without a Machine Owner Key; NVIDIA GPU Operator
    docs, "Installing Precompiled and Canonical Signed Drivers on Ubuntu": linux-modules-nvidia-<branch>-server-<kernel>
    with nvidia-utils-<branch>-server; the -<flavour> metapackages follow kernel upgrades). ``kernel_flavours``: the
    host's kernel flavours for those metapackages (generic, generic-hwe-22.04, aws). ``builds_module``: the plan has
    DKMS build a kernel module on the host.

    ``install``: the packages to ask for (the rest follows as their dependencies; the pin covers the whole family).
    ``pinning_packages``: NVIDIA's pinning package for the exact driver version (used when the repository offers it).
    ``module_stream``: the DNF module stream on RHEL 8/9 (None elsewhere and on RHEL 10).
    ``version_lock``: the dnf versionlock globs (RHEL family).
    ``extra_repos``: repositories the packages need besides the driver's (EPEL and CRB on the RHEL family).

    ``source`` ``file``: the driver comes from a package file (``package_file_identity``), nothing from a repository;
    on the RHEL family NVIDIA's vGPU guest RPM needs dkms from EPEL (and so CRB) all the same.
    """
    if flavour not in FLAVOURS:
        raise PackageError("flavour must be open or proprietary, not %r" % (flavour,))
    number = V.parse_branch(branch)
    platform = platform_key(distribution, os_family)
    source = str(source or "").strip()
    if source not in SOURCES:
        raise PackageError("source must be distribution, cuda or file, not %r" % (source,))
    is_open = flavour == "open"
    if kernel_modules not in KERNEL_MODULES:
        raise PackageError("kernel modules must be dkms or precompiled, not %r" % (kernel_modules,))
    precompiled = kernel_modules == "precompiled"
    if precompiled and not (platform == "ubuntu" and source == "distribution"):
        raise PackageError("precompiled signed kernel modules come from Ubuntu's own archive (source distribution on "
                           "Ubuntu), not from %s with source %s" % (platform, source))
    flavours = [f for f in (kernel_flavours or ()) if f]
    if precompiled and not flavours:
        raise PackageError("precompiled kernel modules need the host's kernel flavour (generic, aws, ...)")
    plan = dict(platform=platform, flavour=flavour, branch=number, module_stream=None, pinning_packages=[],
                version_lock=[], extra_repos=[], module_switch=False, builds_module=not precompiled)
    if source == "file":
        if platform == "redhat":
            plan["extra_repos"] = _rhel_extra_repos(major_version)
        # What a package file builds is its own business: the role checks no DKMS module for it.
        plan.update(install=[], builds_module=False)
        return plan
    if precompiled:
        suffix = "-server%s" % ("-open" if is_open else "")
        install = ["linux-modules-nvidia-%d%s-%s" % (number, suffix, f) for f in flavours]
        install += ["nvidia-headless-no-dkms-%d%s" % (number, suffix), "nvidia-utils-%d-server" % number]
    elif platform == "debian" and source == "distribution":
        # Debian's nvidia-driver depends on one of the kernel-module packages; naming it picks the flavour.
        install = ["nvidia-driver", "nvidia-open-kernel-dkms" if is_open else "nvidia-kernel-dkms"]
    elif platform == "ubuntu" and source == "distribution":
        install = ["nvidia-headless-%d-server%s" % (number, "-open" if is_open else ""), "nvidia-utils-%d-server" % number]
    elif platform in ("debian", "ubuntu"):
        suffix = "" if platform == "debian" or number >= UBUNTU_UNSUFFIXED_BRANCH else "-%d" % number
        install = [("nvidia-open" if is_open else "cuda-drivers") + suffix]
        if number >= PINNING_PACKAGE_BRANCH and driver_version:
            # The version's own pinning package; the branch one (-<branch>) would let the driver move within the branch.
            plan["pinning_packages"] = ["nvidia-driver-pinning-%s" % V.parse_driver_version(driver_version).text]
    else:
        if source != "cuda":
            raise PackageError("the RHEL family gets NVIDIA drivers from NVIDIA's CUDA repository (source cuda), "
                               "not from the distribution")
        install = ["nvidia-open" if is_open else "cuda-drivers"]
        major = _major(major_version)
        if major >= 10:
            # RHEL 10: no module streams; the branch is held by versionlock alone.
            plan["version_lock"] = ["*nvidia*%d*" % number]
        else:
            plan["module_stream"] = "nvidia-driver:%d-%s" % (number, "open" if is_open else "dkms")
            plan["version_lock"] = ["*nvidia*%d*" % number]
        plan["extra_repos"] = _rhel_extra_repos(major)
    if persistence and platform != "redhat":
        # Recommends are off: without naming it, nvidia-persistenced is never installed on Debian/Ubuntu.
        install.append("nvidia-persistenced")
    plan["install"] = install
    return plan


# Package names that belong to an NVIDIA driver installation, most telling first: the first one installed is a host's
# "driver package" in the facts. Ubuntu's names carry the branch (and -server/-open), vGPU guests get
# nvidia-linux-grid-<branch> from NVIDIA's licensing portal.
DRIVER_PACKAGE_PATTERNS = (
    r"nvidia-linux-grid-\d+",
    r"nvidia-driver",
    r"nvidia-open(-\d+)?",
    r"cuda-drivers(-\d+)?",
    r"nvidia-driver-\d+(-server)?(-open)?",
    r"nvidia-headless-\d+(-server)?(-open)?",
    r"nvidia-headless-no-dkms-\d+(-server)?(-open)?",
    r"nvidia-utils-\d+(-server)?",
    r"nvidia-kernel-dkms",
    r"nvidia-open-kernel-dkms",
    r"nvidia-kernel-open-dkms",
    r"nvidia-dkms(-\d+)?(-server)?(-open)?",
    r"kmod-nvidia-(latest|open)-dkms",
    r"nvidia-driver-cuda",
    r"nvidia-driver-libs",
    r"libnvidia-compute(-\d+)?(-server)?",
    r"nvidia-smi",
    r"libnvidia-ml1?",
    r"libcuda1?",
)
_DRIVER_PACKAGE_RES = tuple(re.compile("^%s\\Z" % p) for p in DRIVER_PACKAGE_PATTERNS)

# Every package of a driver installation (for pin, hold and facts): what the metapackages pull in on each platform.
FAMILY_PATTERNS = DRIVER_PACKAGE_PATTERNS + (
    r"nvidia-.*", r"libnvidia-.*", r"libcuda.*", r"libnvcuvid.*", r"libnvoptix.*", r"libegl-nvidia.*", r"libgles-nvidia.*",
    r"libgl1-nvidia.*", r"libglx-nvidia.*", r"xserver-xorg-video-nvidia.*", r"firmware-nvidia-gsp.*", r"cuda-drivers.*",
    r"libxnvctrl.*", r"libnvsdm.*", r"kmod-nvidia.*", r"xorg-x11-nvidia.*",
)
_FAMILY_RES = tuple(re.compile("^%s\\Z" % p) for p in FAMILY_PATTERNS)
# Never part of the driver: the container toolkit and the pinning packages version on their own.
_NOT_FAMILY_RE = re.compile(r"^(nvidia-container-.*|libnvidia-container.*|nvidia-driver-pinning-.*|nvidia-fabricmanager.*"
                            r"|nvidia-mig-manager.*|nvidia-persistenced)\Z")


def driver_package_rank(name: object) -> Optional[int]:
    """Position of ``name`` in DRIVER_PACKAGE_PATTERNS, or None when it is not a driver package."""
    for index, rx in enumerate(_DRIVER_PACKAGE_RES):
        if rx.match(str(name)):
            return index
    return None


def is_family_package(name: object) -> bool:
    name = str(name)
    return not _NOT_FAMILY_RE.match(name) and any(rx.match(name) for rx in _FAMILY_RES)


def driver_packages_in(installed: Iterable[str]) -> list[str]:
    """The driver packages among ``installed`` ({name: version}), most telling first."""
    ranked = [(driver_package_rank(n), n) for n in installed]
    return [n for rank, n in sorted((r, n) for r, n in ranked if r is not None)]


def family_members(installed: Optional[Mapping[str, Optional[str]]], driver_version: str) -> dict[str, str]:
    """{name: version} of the installed packages that belong to the driver ``driver_version`` (e.g. 535.261.03)."""
    want = V.parse_driver_version(driver_version)
    members: dict[str, str] = {}
    for name, version in sorted((installed or {}).items()):
        if not is_family_package(name) or not version:
            continue
        try:
            if V.driver_version_of(version) == want:
                members[name] = version
        except V.VersionError:
            continue
    return members


def apt_version_pin(driver_version: str) -> str:
    """The apt 'Pin: version' value for every package revision of a driver (apt's prefix match, versionmatch.cc)."""
    return "%s-*" % V.parse_driver_version(driver_version).text


_DEB_FILE_RE = re.compile(r"^(?P<name>[a-z0-9][a-z0-9+.-]+)_(?P<version>[0-9][A-Za-z0-9.+~:-]*)_(?P<arch>[a-z0-9-]+)\.deb\Z")
# rpm's default %_rpmfilename (rpm's macros.in): %{NAME}-%{VERSION}-%{RELEASE}.%{ARCH}.rpm; VERSION and RELEASE carry
# no '-'. NVIDIA's vGPU guest driver for the RHEL family: nvidia-linux-grid-570-570.133.20-1.x86_64.rpm.
_RPM_FILE_RE = re.compile(r"^(?P<name>[A-Za-z0-9_+][A-Za-z0-9_.+-]*)-(?P<version>[0-9][A-Za-z0-9._+~^]*)"
                          r"-(?P<release>[A-Za-z0-9._+~^]+)\.(?P<arch>[A-Za-z0-9_]+)\.rpm\Z")


def package_file_identity(path: Optional[str], driver_version: str) -> dict[str, str]:
    """dict(name, version, arch, file, format) of a driver package file from its name; the version must be
    ``driver_version``'s. ``format`` deb: Debian policy's <name>_<version>_<arch>.deb, the form NVIDIA's licensing
    portal uses (nvidia-linux-grid-535_535.261.04_amd64.deb); rpm: <name>-<version>-<release>.<arch>.rpm (version is
    <version>-<release>). The file's own header fields are compared on the host before it is installed."""
    base = str(path or "").replace("\\", "/").rsplit("/", 1)[-1]
    m = _DEB_FILE_RE.match(base)
    if m:
        ident = dict(name=m.group("name"), version=m.group("version"), arch=m.group("arch"), file=base, format="deb")
    else:
        m = _RPM_FILE_RE.match(base)
        if not m:
            raise PackageError("%r is not a package file name (Debian <name>_<version>_<arch>.deb or RPM "
                               "<name>-<version>-<release>.<arch>.rpm)" % (base,))
        ident = dict(name=m.group("name"), version="%s-%s" % (m.group("version"), m.group("release")),
                     arch=m.group("arch"), file=base, format="rpm")
    want = V.parse_driver_version(str(V.driver_version_of(driver_version)))
    try:
        got = V.driver_version_of(ident["version"])
    except V.VersionError:
        raise PackageError("%s: version %s carries no NVIDIA driver version" % (base, ident["version"]))
    if got != want:
        raise PackageError("%s is driver %s, not the requested %s" % (base, got, want))
    return ident


# --- Fabric Manager (issue 37 point 3) -------------------------------------------------------------------------------
# NVSwitch systems (HGX, DGX) need NVIDIA Fabric Manager running before CUDA can use the GPUs, and it must be the
# driver's exact version or it refuses to start (NVIDIA Fabric Manager User Guide, "Installing Fabric Manager";
# NVIDIA/gpu-operator#544). Package: nvidia-fabricmanager-<branch> (NVIDIA/apt-packaging-fabric-manager, the CUDA
# repository; Ubuntu's multiverse src:fabric-manager-<branch>; NVIDIA/yum-packaging-fabric-manager on the RHEL family),
# service nvidia-fabricmanager. An NVSwitch is an NVIDIA PCI function of class 0x0680 (bridge, other): the
# nvidia-nvswitch devices the driver creates exist only once it runs, the PCI function before it is installed.
FABRIC_MANAGER_SERVICE = "nvidia-fabricmanager"
NVSWITCH_CLASS_PREFIX = "0x0680"


def fabric_manager_packages(branch: Union[int, str]) -> list[str]:
    """The Fabric Manager package of a driver branch."""
    return ["nvidia-fabricmanager-%d" % V.as_branch(branch)]


def nvswitch_addresses(vendor_files: Optional[Iterable[str]], class_files: Optional[Iterable[str]]) -> list[str]:
    """PCI addresses of the NVSwitches from sysfs: ``vendor_files`` are the <device>/vendor paths that read 0x10de,
    ``class_files`` the <device>/class paths that read 0x0680xx (as ``find`` with ``contains`` lists them)."""
    def devices(paths: Optional[Iterable[str]]) -> set[str]:
        return {str(p).rstrip("/").rsplit("/", 2)[-2] for p in paths or () if str(p).count("/") >= 1}
    return sorted(devices(vendor_files) & devices(class_files))
