# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Will the NVIDIA kernel module load after the reboot? (pure: no I/O; issue 22 points 3 and 9).

Two things decide it before a host is rebooted into a new driver:

* DKMS must have a module installed for the kernel the host boots *next*, which after a kernel upgrade is not
  the running one (``parse_dkms_status``, ``next_boot_kernel``, ``module_check``, ``headers_packages``).
* With UEFI Secure Boot on, the kernel refuses modules not signed by a key it trusts, so DKMS must sign with a
  Machine Owner Key (MOK) that is enrolled (``parse_sb_state``, ``parse_mok_test_key``, ``secure_boot_plan``,
  ``dkms_signing_config``).

Every parser names, next to it, the upstream source whose output it reads. Version ordering is the one in
``_drivers/versions.py`` (dpkg and rpm rules); none is reimplemented here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, Optional, Union

from ansible_collections.gpuops.provision.plugins.module_utils._drivers.versions import (
    VersionError, compare_debian, compare_rpm, driver_version_of,
)

__all__ = [
    "KmodError", "parse_dkms_status", "parse_dkms_version", "parse_sb_state", "parse_mok_test_key",
    "next_boot_kernel", "headers_packages", "parse_kernel_packages", "kernel_headers_plan", "module_check", "secure_boot_plan", "dkms_signing_config",
    "DKMS_SIGNING_CONFIG_MIN", "DEFAULT_MOK_KEY", "DEFAULT_MOK_CERT", "UBUNTU_MOK_KEY", "UBUNTU_MOK_CERT",
]


class KmodError(ValueError):
    """Input these functions cannot work with; the message says what and why."""


def _text(value: object, what: str) -> str:
    """Command output as one string; a list (e.g. [stdout, stderr]) is joined line by line."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return "\n".join(_text(v, what) for v in value)
    if not isinstance(value, str):
        raise KmodError("%s must be text (command output), got %s" % (what, type(value).__name__))
    return value


def _rc(rc: Any) -> Optional[int]:
    if rc in (None, ""):
        return None
    if isinstance(rc, bool):
        raise KmodError("rc must be an exit status, got %r" % (rc,))
    try:
        return int(rc)
    except (TypeError, ValueError):
        raise KmodError("rc must be an exit status, got %r" % (rc,)) from None


# --- dkms status ------------------------------------------------------------------------------------------
#
# Source: github:dell/dkms, dkms.in, do_status() and module_status_built_extra() (and do_status_weak()):
#   built|installed)  echo -n "$m/$v, $k, $a: $status"; module_status_built_extra ...   (dkms >= 2.8.6)
#                     echo -n "$m, $v, $k, $a: $status"                                  (before: commit f83b758)
#   added)            echo "$m/$v: $status"     (dkms >= 2.8.7, commit 65f01a0; before: "$m, $v: $status")
#   broken)           echo "$m/$v: $status"     (dkms >= 3.0.13, commit ef7dfa4)
#   weak modules      echo "$m, $v, $k, $a: installed-weak from $kern"   (comma form in every version)
# module_status_built_extra() appends parenthesised notes: " (Original modules exist)" (dkms >= 3.1.3; before
# " (original_module exists)"), " (Differences between built and installed modules)" (before 3.1.3:
# " (WARNING! Diff between built and installed module!)", once per module file), " (Built modules are missing in
# the kernel modules folder)" (before: " (WARNING! Missing some built modules!)").
# Other lines (errors, "Deprecated feature: ..." notices) are not status lines and are skipped.

DKMS_STATES = ("added", "built", "installed", "installed-weak", "broken")
# Module field: no comma, slash, colon or blank; version: no comma or blank; kernel/arch: no comma, colon, blank.
_DKMS_BUILT_RE = re.compile(
    r"^(?P<module>[^\s,/:]+)(?P<sep>/|, )(?P<version>[^\s,]+), (?P<kernel>[^\s,:]+), (?P<arch>[^\s,:]+): "
    r"(?P<state>installed-weak|installed|built)(?P<rest>.*)$")
_DKMS_ADDED_RE = re.compile(r"^(?P<module>[^\s,/:]+)(?P<sep>/|, )(?P<version>[^\s,]+): (?P<state>added|broken)\b(?P<rest>.*)$")
_WEAK_FROM_RE = re.compile(r"^\s*from\s+(?P<kernel>\S+)")
_NOTE_RE = re.compile(r"\(([^()]*)\)")


def parse_dkms_status(text: object) -> list[dict[str, Any]]:
    """``dkms status`` output -> list of dict(module, version, kernel, arch, state, warnings, built_for, format).

    ``state``: added, built, installed, installed-weak or broken; ``kernel``/``arch`` are None for added and broken
    entries; ``warnings``: the parenthesised notes after the state, each once; ``built_for``: for installed-weak,
    the kernel the module was built for; ``format``: ``slash`` (dkms >= 2.8.6) or ``comma`` (older, and weak lines).
    """
    entries = []
    for raw in _text(text, "dkms status").splitlines():
        line = raw.strip()
        if not line:
            continue
        m = _DKMS_BUILT_RE.match(line) or _DKMS_ADDED_RE.match(line)
        if not m:
            continue
        groups = m.groupdict()
        rest = groups.get("rest") or ""
        built_for = None
        if groups["state"] == "installed-weak":
            weak = _WEAK_FROM_RE.match(rest)
            built_for = weak.group("kernel") if weak else None
        warnings = []
        for note in _NOTE_RE.findall(rest):
            note = note.strip()
            if note and note not in warnings:
                warnings.append(note)
        entries.append(dict(
            module=groups["module"], version=groups["version"], kernel=groups.get("kernel"), arch=groups.get("arch"),
            state=groups["state"], warnings=warnings, built_for=built_for,
            format="slash" if groups["sep"] == "/" else "comma",
        ))
    return entries


# dkms --version. Source: github:dell/dkms, dkms.in main option loop: --version|-V) echo "@RELEASE_STRING@", with
# Makefile RELEASE_STRING := $(RELEASE_NAME)-$(RELEASE_VERSION) -> "dkms-3.0.10"; dkms 2.x printed
# $"dkms:[INSERT_VERSION_HERE]" with the version filled in at build time.
_DKMS_VERSION_RE = re.compile(r"(?:^|\bdkms\b[-: ]*)(?P<v>\d+(?:\.\d+){1,3})")


def parse_dkms_version(text: object) -> Optional[tuple[int, ...]]:
    """Version tuple out of ``dkms --version`` (``dkms-3.0.10`` -> (3, 0, 10)); None when there is none."""
    m = _DKMS_VERSION_RE.search(_text(text, "dkms --version").strip())
    if not m:
        return None
    return tuple(int(x) for x in m.group("v").split("."))


# --- Secure Boot: mokutil ---------------------------------------------------------------------------------
#
# Source: github:lcp/mokutil, src/mokutil.c.
#   main():                "EFI variables are not supported on this system" (stderr, exit 1) when efivarfs is
#                          absent (legacy BIOS boot); "This system doesn't support Secure Boot" (stderr; 0.3.0
#                          spelled it "does't") when the firmware has no SecureBoot variable.
#   sb_state_internal():   "SecureBoot enabled" (+ "SecureBoot validation is disabled in shim" when MokSBStateRT
#                          exists), "SecureBoot disabled" (+ "Platform is in Setup Mode"), "Cannot determine secure
#                          boot state.", or 'Failed to read "SecureBoot" variable: ...' (stderr).
# Shim validation disabled: the kernel then runs as if Secure Boot were off and does not enforce module signatures
# (linux drivers/firmware/efi/libstub/secureboot.c, efi_get_secureboot(): MokSBStateRT set ->
# efi_secureboot_mode_disabled).
# mokutil not installed: ansible.builtin.command reports rc 2 and "Error executing command." (ansible-core 2.21;
# older releases "[Errno 2] No such file or directory"), a shell rc 127 and "mokutil: not found".

_MISSING_RE = re.compile(r"No such file or directory|command not found|mokutil: not found|Error executing command")


def _tool_missing(text: str, rc: Optional[int]) -> bool:
    return rc == 127 or (rc == 2 and bool(_MISSING_RE.search(text)))


def parse_sb_state(text: object, rc: Any = None) -> dict[str, Any]:
    """``mokutil --sb-state`` (stdout and stderr) -> dict(secure_boot, detail, efi, mokutil_missing).

    ``secure_boot``: True (enforced), False (off, setup mode, shim validation disabled, firmware without Secure
    Boot) or None (unknown: no EFI variables, mokutil missing, unreadable state). ``efi``: True when the host booted
    with EFI variables, False when mokutil says there are none (legacy BIOS boot), None when unknown.
    """
    text = _text(text, "mokutil --sb-state output")
    code = _rc(rc)
    out = dict(secure_boot=None, detail="", efi=None, mokutil_missing=False)
    if "EFI variables are not supported on this system" in text:
        out.update(efi=False, detail="no EFI variables (legacy BIOS boot): Secure Boot does not apply")
    elif "SecureBoot enabled" in text and "SecureBoot validation is disabled in shim" in text:
        out.update(secure_boot=False, efi=True,
                   detail="SecureBoot enabled in firmware, validation disabled in shim: module signatures not enforced")
    elif "SecureBoot enabled" in text:
        out.update(secure_boot=True, efi=True, detail="SecureBoot enabled")
    elif "SecureBoot disabled" in text:
        setup = "Platform is in Setup Mode" in text
        out.update(secure_boot=False, efi=True,
                   detail="SecureBoot disabled" + (" (platform in Setup Mode)" if setup else ""))
    elif re.search(r"does(?:n'|')t support Secure Boot", text):
        out.update(secure_boot=False, efi=True, detail="the firmware does not support Secure Boot")
    elif "Cannot determine secure boot state" in text:
        out.update(efi=True, detail="mokutil cannot determine the Secure Boot state")
    elif 'Failed to read "SecureBoot"' in text:
        out.update(efi=True, detail=_first_line(text, 'Failed to read "SecureBoot"'))
    elif _tool_missing(text, code):
        out.update(mokutil_missing=True, detail="mokutil is not installed")
    else:
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "no output")
        out.update(detail="unrecognised mokutil --sb-state output (rc %s): %s" % (code, first))
    return out


def _first_line(text: str, needle: str) -> str:
    for line in text.splitlines():
        if needle in line:
            return line.strip()
    return needle


# mokutil --test-key <der>. Source: github:lcp/mokutil, src/mokutil.c, test_key() and print_skip_message():
#   "%s is not enrolled" (exit 1); otherwise exit 0 and print_skip_message(): "%s is already in db",
#   "%s is already enrolled" (MokListRT), "%s is already in the enrollment request" (MokNew: imported, waiting for
#   confirmation in MokManager at the next boot), "%s is blocked in dbx", "%s is blocked in MokListX".
#   Errors (exit 255): "Failed to open %s", "Failed to read %s", "Not a valid x509 certificate", "CA of %s is already
#   enrolled" / "CA of %s is blocked" (--ca-check only). mokutil 0.3.0 prefixed skip messages with "SKIP: ".
#   A certificate in the firmware db counts as enrolled, with a note: the firmware trusts it, but whether the kernel
#   accepts db keys for modules depends on the kernel build (the plan's message says so).

def parse_mok_test_key(text: object, rc: Any = None) -> dict[str, Any]:
    """``mokutil --test-key <cert>`` (stdout and stderr) -> dict(enrolled, pending, blocked, in_db, error, detail)."""
    text = _text(text, "mokutil --test-key output")
    code = _rc(rc)
    out = dict(enrolled=False, pending=False, blocked=False, in_db=False, error=None, detail="")
    lines = [re.sub(r"^SKIP:\s*", "", ln.strip()) for ln in text.splitlines() if ln.strip()]

    def has(pattern: str) -> Optional[str]:
        return next((ln for ln in lines if re.search(pattern, ln)), None)

    line = has(r"\bis already in the enrollment request$")
    if line:
        out.update(pending=True, detail=line)
        return out
    line = has(r"\bis blocked in (?:dbx|MokListX)$") or has(r"^CA of .* is blocked$")
    if line:
        out.update(blocked=True, detail=line)
        return out
    line = has(r"\bis not enrolled$")
    if line:
        out.update(detail=line)
        return out
    line = has(r"\bis already in db$")
    if line:
        out.update(enrolled=True, in_db=True, detail=line)
        return out
    line = has(r"\bis already enrolled$") or has(r"\bis already in the built-in trusted keyring$")
    if line:
        out.update(enrolled=True, detail=line)
        return out
    line = (has(r"^Failed to (?:open|read) ") or has(r"^Not a valid x509 certificate")
            or has(r"EFI variables are not supported on this system"))
    if line:
        out.update(error=line, detail=line)
    elif _tool_missing(text, code):
        out.update(error="mokutil is not installed", detail="mokutil is not installed")
    else:
        first = lines[0] if lines else "no output"
        out.update(error="unrecognised mokutil --test-key output (rc %s): %s" % (code, first))
        out["detail"] = out["error"]
    return out


# --- the kernel that boots next ---------------------------------------------------------------------------

def _release_of(name: object) -> str:
    """Kernel release from '/boot/vmlinuz-6.1.0-28-amd64', 'vmlinuz-6.1.0-28-amd64' or '6.1.0-28-amd64'."""
    if isinstance(name, Mapping):
        name = name.get("path") or name.get("name") or ""
    text = os.path.basename(_text(name, "kernel name").strip())
    for prefix in ("vmlinuz-", "vmlinux-"):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text


# Debian GRUB: /etc/grub.d/10_linux takes the newest kernel by version_find_latest(), whose version_test_gt()
# (util/grub-mkconfig_lib.in, as patched by Debian's debian/patches/dpkg-version-comparison.patch) strips up to the
# first '-' of the file name, rewrites "[._-](pre|rc|test|git|old|trunk)" to "~\1" and compares with
# `dpkg --compare-versions`. GRUB_DEFAULT other than 0 (or GRUB_FLAVOUR_ORDER on newer Ubuntu) is not read here:
# pass ``default`` for such hosts.
_GRUB_SEDEXP = re.compile(r"[._-](pre|rc|test|git|old|trunk)")


def _grub_key(release: str) -> str:
    return _GRUB_SEDEXP.sub(lambda m: "~" + m.group(1), release)


def next_boot_kernel(installed_kernels: Any, running: Optional[str] = None, scheme: str = "deb", default: object = None) -> Optional[str]:
    """The kernel release the host boots next.

    ``installed_kernels``: release strings or /boot/vmlinuz-* paths (``find`` results work too); ``running``: the
    running release (returned when nothing else is known); ``scheme``: ``deb`` (Debian/Ubuntu GRUB: the newest by
    dpkg version order) or ``rpm`` (RHEL: the newest by rpm order, which is what kernel-install makes the default);
    ``default``: an explicit default (e.g. ``grubby --default-kernel`` output) that wins over both.
    Rescue images (vmlinuz-0-rescue-*) and *.old files are no candidates.
    """
    if scheme not in ("deb", "rpm"):
        raise KmodError("scheme must be deb or rpm, got %r" % (scheme,))
    if default not in (None, ""):
        chosen = _release_of(default)
        if chosen:
            return chosen
    if installed_kernels is None:
        installed_kernels = []
    if isinstance(installed_kernels, (str, bytes, Mapping)):
        installed_kernels = [installed_kernels]
    releases = []
    for item in installed_kernels:
        rel = _release_of(item)
        if not rel or "rescue" in rel or rel.endswith(".old") or rel in releases:
            continue
        releases.append(rel)

    def newer(a: str, b: str) -> bool:
        if scheme == "deb":
            return compare_debian(_grub_key(a), _grub_key(b)) > 0
        return compare_rpm(a, b) > 0

    best = None
    for rel in releases:
        try:
            # Comparing with itself parses it: a name no version ordering accepts is skipped, never chosen.
            newer(rel, rel)
            if best is None or newer(rel, best):
                best = rel
        except VersionError:
            continue
    if best is not None:
        return best
    running = _release_of(running) if running not in (None, "") else ""
    return running or None


# --- kernel headers packages ------------------------------------------------------------------------------
#
# NVIDIA Driver Installation Guide, "Pre-installation Actions" > "Verify the System has the Correct Kernel Packages
# Installed" (https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/pre-installation-actions.html):
# the kernel headers and development packages *for the running kernel* must be installed at driver installation
# and whenever the driver is rebuilt; the packages' own dependency would pull the latest ones, which may not match
# the running kernel. The distribution pages give the commands, e.g. for the RHEL family (Oracle Linux page):
# "dnf install kernel-devel-matched kernel-headers" (9/10), "dnf install kernel-devel-$(uname -r) kernel-headers"
# (8), "kernel-uek-devel-$(uname -r)" for UEK. Debian/Ubuntu: linux-headers-$(uname -r).
# So: the running kernel's package, plus the unversioned metapackage that brings the headers of every kernel an
# upgrade installs, so that DKMS can build for the *next* kernel too:
#   Debian  linux-headers-<release> + linux-headers-<flavour>   (6.1.0-28-cloud-amd64 -> cloud-amd64;
#           6.12.48+deb13-amd64 / 6.12.12+bpo-amd64 -> amd64)
#   Ubuntu  linux-headers-<release> + linux-headers-<flavour>   (5.15.0-119-generic -> generic, 6.8.0-1015-aws -> aws).
#           HWE kernels follow linux-headers-generic-hwe-<release> instead: pass ``meta`` for those.
#   RHEL    kernel[-<variant>]-devel-<uname -r> (the NEVRA without epoch, which dnf installs as is) +
#           kernel[-<variant>]-devel (installonly: each kernel upgrade adds its own) + kernel-headers.
#           <variant>: the "+rt", "+64k", "+debug" uname suffix (RHEL 9.3+), "uek" in the release (Oracle UEK).

_DEB_RELEASE_RE = re.compile(r"^(?P<upstream>\d[^-]*)-(?:(?P<abi>\d+)-)?(?P<flavour>[a-z][a-z0-9-]*)$")


def _deb_flavour(release: str) -> Optional[str]:
    m = _DEB_RELEASE_RE.match(release)
    return m.group("flavour") if m else None


def headers_packages(kernel_release: object, distribution: Optional[str] = None, os_family: Optional[str] = None,
                     meta: Union[str, Literal[False], None] = None) -> list[str]:
    """Packages that give DKMS the headers of the running kernel and of the kernels upgrades install.

    ``meta``: the metapackage to use instead of the derived one (e.g. ``linux-headers-generic-hwe-22.04``), or
    False for none. Raises KmodError for a release it cannot read or an unsupported OS family.
    """
    release = _text(kernel_release, "kernel release").strip()
    if not release or not re.match(r"^\d[A-Za-z0-9._+~-]*\Z", release):
        raise KmodError("kernel release %r is not a kernel release (expected e.g. 6.1.0-28-amd64)" % (kernel_release,))
    family = str(os_family or "").strip()
    dist = str(distribution or "").strip()
    if family == "Debian" or (not family and dist in ("Debian", "Ubuntu")):
        flavour = _deb_flavour(release)
        if flavour is None:
            raise KmodError("kernel release %r has no flavour suffix (expected e.g. 6.1.0-28-amd64 or "
                            "5.15.0-119-generic)" % (release,))
        if flavour == "pve" or flavour.endswith("-pve"):
            raise KmodError("kernel %s is a Proxmox VE kernel: its headers are not linux-headers-* packages; "
                            "give the headers packages explicitly" % release)
        pkgs = ["linux-headers-%s" % release]
        metapkg = "linux-headers-%s" % flavour if meta is None else meta
    elif family == "RedHat" or (not family and dist in ("RedHat", "CentOS", "Rocky", "AlmaLinux", "OracleLinux", "Fedora")):
        base, _sep, variant = release.partition("+")
        if variant:
            name = "kernel-%s-devel" % variant
        elif "uek" in base.split("-")[-1]:
            name = "kernel-uek-devel"
        elif re.search(r"\.rt\d", base):
            name = "kernel-rt-devel"  # RHEL 8 / early 9 real-time kernels: 4.18.0-553.rt7.342.el8_10.x86_64
        else:
            name = "kernel-devel"
        pkgs = ["%s-%s" % (name, base)]
        metapkg = name if meta is None else meta
        if metapkg:
            pkgs.append(metapkg)
        pkgs.append("kernel-headers")
        return _dedupe(pkgs)
    else:
        raise KmodError("kernel headers packages are known for the Debian and RedHat OS families, not %r (%s)"
                        % (family or None, dist or "unknown distribution"))
    if metapkg:
        pkgs.append(metapkg)
    return _dedupe(pkgs)


# The headers of a Debian/Ubuntu/Proxmox kernel follow from the package that installed it, not from a fixed name
# (issue 37 point 2): the image package's name carries the release, and the metapackage that depends on it (what an
# upgrade follows: linux-image-amd64, linux-image-cloud-amd64, Ubuntu's linux-image-generic-hwe-22.04 or
# linux-image-aws, Proxmox's proxmox-kernel-6.8 / proxmox-default-kernel) has a headers twin of the same name.
# Names: Debian linux-signed-amd64 / linux source packages (packages.debian.org: linux-image-6.1.0-28-amd64,
# linux-image-6.1.0-28-amd64-unsigned, linux-image-amd64 -> linux-headers-6.1.0-28-amd64, linux-headers-amd64);
# Ubuntu linux-meta (linux-image-generic-hwe-22.04 -> linux-headers-generic-hwe-22.04; signed images
# linux-image-<rel>, unsigned linux-image-unsigned-<rel>); Proxmox VE 8.2+ proxmox-kernel-<rel>-signed /
# proxmox-headers-<rel>, proxmox-kernel-<series> / proxmox-headers-<series>, proxmox-default-kernel /
# proxmox-default-headers (pve-kernel-* / pve-headers-* before 8.1). dpkg-query's ${Depends} gives each one's deps.
_IMAGE_RES = (
    (re.compile(r"^linux-image-(?:unsigned-)?(?P<rel>\d.*?)(?:-unsigned)?\Z"), "linux-headers-"),
    (re.compile(r"^proxmox-kernel-(?P<rel>\d+\.\d+\.\d+-\d+-pve)(?:-signed)?\Z"), "proxmox-headers-"),
    (re.compile(r"^pve-kernel-(?P<rel>\d+\.\d+\.\d+-\d+-pve)(?:-signed)?\Z"), "pve-headers-"),
)
_META_TWINS = (("linux-image-", "linux-headers-"), ("proxmox-kernel-", "proxmox-headers-"),
               ("proxmox-default-kernel", "proxmox-default-headers"), ("pve-kernel-", "pve-headers-"))
_INSTALLED_STATES = ("ii", "hi", "iU", "hU")


def parse_kernel_packages(text: object) -> list[dict[str, Any]]:
    """``dpkg-query -W -f='${Package}\\t${Version}\\t${db:Status-Abbrev}\\t${Depends}\\n' <patterns>`` ->
    list of dict(name, version, depends: [package names, alternatives flattened]) of the installed packages."""
    out = []
    for line in _text(text, "dpkg-query output").splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[2].strip()[:2] not in _INSTALLED_STATES:
            continue
        depends = []
        for clause in (parts[3] if len(parts) > 3 else "").split(","):
            for alt in clause.split("|"):
                name = alt.strip().split(" ", 1)[0].split("(", 1)[0].split(":", 1)[0].strip()
                if name:
                    depends.append(name)
        out.append(dict(name=parts[0].strip(), version=parts[1].strip(), depends=depends))
    return out


def _image_of(release: str, packages: Sequence[Mapping[str, Any]]) -> Optional[tuple[str, str]]:
    """(image package, headers package) of the installed package that carries ``release``, or None."""
    for pkg in packages:
        for rx, headers in _IMAGE_RES:
            m = rx.match(str(pkg.get("name") or ""))
            if m and m.group("rel") == release:
                return str(pkg["name"]), headers + release
    return None


def _metas(image: str, packages: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(prefix, rest) of the installed metapackages that depend on ``image`` (linux-image-<rest>, ...)."""
    found = []
    for pkg in packages:
        name = str(pkg.get("name") or "")
        if name == image or image not in (pkg.get("depends") or []):
            continue
        for prefix, _twin in _META_TWINS:
            if name.startswith(prefix):
                found.append((prefix, name[len(prefix):]))
                break
    return found


def kernel_headers_plan(kernel_packages: Any, running: object, next_kernel: object = None) -> dict[str, Any]:
    """The headers packages DKMS needs for the running kernel and the one that boots next (Debian, Ubuntu, Proxmox).

    ``kernel_packages``: ``parse_kernel_packages`` entries (or its input text). Returns dict(packages, kernels,
    warnings, ok, reason, flavours): per kernel its image and headers package; ``flavours`` the kernel
    metapackages' flavours (generic, generic-hwe-22.04, aws; else the release's own suffix); a running kernel that no installed package
    carries (a custom build, or one removed since the boot) warns; the next kernel without one fails (``ok`` False,
    ``reason`` names it), because its module could not be built.
    """
    pkgs = kernel_packages if isinstance(kernel_packages, (list, tuple)) else parse_kernel_packages(kernel_packages)
    run = _release_of(running) if running not in (None, "") else ""
    nxt = _release_of(next_kernel) if next_kernel not in (None, "") else run
    out: dict[str, Any] = dict(packages=[], kernels={}, flavours=[], warnings=[], ok=True, reason="")
    for role, release in (("next", nxt), ("running", run)):
        if not release or release in out["kernels"]:
            continue
        found = _image_of(release, pkgs)
        if found is None:
            why = ("kernel %s (the %s one) comes from no installed linux-image/proxmox-kernel package, so its headers "
                   "package is unknown" % (release, role))
            if role == "next":
                out.update(ok=False, reason=why + ": set nvidia_driver_kernel_headers_packages")
            else:
                out["warnings"].append(why + "; the module is built for the kernel that boots next")
            out["kernels"][release] = dict(image=None, headers=None, role=role)
            continue
        image, headers = found
        metas = _metas(image, pkgs)
        out["kernels"][release] = dict(image=image, headers=headers, role=role)
        out["packages"].extend([headers] + [dict(_META_TWINS)[prefix] + rest for prefix, rest in metas])
        # The flavour names Ubuntu's precompiled module metapackages follow (linux-modules-nvidia-<b>-server-<flavour>).
        out["flavours"].extend([rest for prefix, rest in metas if prefix == "linux-image-"]
                               or [f for f in [_deb_flavour(release)] if f])
    out["packages"] = _dedupe(out["packages"])
    out["flavours"] = _dedupe(out["flavours"])
    return out


def _dedupe(items: Iterable[str]) -> list[str]:
    out = []
    for item in items:
        if item and item not in out:
            out.append(item)
    return out


# --- module present for the next kernel? ------------------------------------------------------------------

# The module name ``nvidia`` stands for the names NVIDIA's and the distributions' DKMS packages register: nvidia
# (NVIDIA CUDA repository, Ubuntu nvidia-dkms-*), nvidia-open, nvidia-current / nvidia-current-open (Debian
# nvidia-kernel-dkms), nvidia-tesla-<branch> (Debian tesla drivers). Never nvidia-fs, nvidia-peermem and the like.
_NVIDIA_ALIASES_RE = re.compile(r"^nvidia(?:-current|-tesla(?:-\d+)?)?(?:-open)?\Z")
_AVAILABLE = ("installed", "installed-weak")


def _name_matches(name: str, wanted: Union[str, Sequence[str]]) -> bool:
    if isinstance(wanted, (list, tuple)):
        return any(_name_matches(name, w) for w in wanted)
    if wanted == "nvidia":
        return bool(_NVIDIA_ALIASES_RE.match(name))
    return name == wanted


def _version_matches(have: object, want: object) -> bool:
    if want in (None, ""):
        return True
    try:
        return driver_version_of(have) == driver_version_of(want)
    except VersionError:
        return str(have).strip() == str(want).strip()


def _describe(entries: Iterable[Mapping[str, Any]]) -> str:
    """Short 'what dkms said' text for a set of entries of one module."""
    by_state: dict[str, list[str]] = {}
    for e in entries:
        label = e["kernel"] if e["kernel"] else "%s/%s" % (e["module"], e["version"])
        by_state.setdefault(e["state"], [])
        if label not in by_state[e["state"]]:
            by_state[e["state"]].append(label)
    parts = []
    kernels = by_state.get("installed", []) + by_state.get("built", []) + by_state.get("installed-weak", [])
    kernels = _dedupe(kernels)
    if kernels:
        parts.append("built for %s only" % ", ".join(kernels))
    if by_state.get("added"):
        parts.append("%s added but not built" % ", ".join(by_state["added"]))
    if by_state.get("broken"):
        parts.append("%s broken" % ", ".join(by_state["broken"]))
    return "; ".join(parts)


def module_check(dkms_status: object, next_kernel: object, module: Union[str, Sequence[str]] = "nvidia",
                 version: Optional[str] = None) -> dict[str, Any]:
    """Is a DKMS module ``module`` (driver ``version`` when given) installed for ``next_kernel``?

    ``dkms_status``: ``parse_dkms_status`` entries or the raw text. Returns dict(ok, reason, kernel, module,
    version, entries): ``entries`` are the status entries of that module (and version) on any kernel, e.g. to
    rebuild them; ``reason`` names the kernel and what dkms said.
    """
    if isinstance(dkms_status, (str, bytes)) or dkms_status is None:
        dkms_status = parse_dkms_status(dkms_status)
    if not isinstance(dkms_status, (list, tuple)) or not all(isinstance(e, Mapping) for e in dkms_status):
        raise KmodError("dkms_status must be dkms status text or the list parse_dkms_status returns")
    kernel = _release_of(next_kernel) if next_kernel not in (None, "") else ""
    label = module if isinstance(module, str) else "/".join(module)
    what = "%s %s" % (label, version) if version not in (None, "") else label
    out = dict(ok=False, reason="", kernel=kernel or None, module=module, version=version or None, entries=[])
    named = [dict(e) for e in dkms_status if _name_matches(str(e.get("module", "")), module)]
    wanted = [e for e in named if _version_matches(e.get("version"), version)]
    out["entries"] = wanted
    if not kernel:
        out["reason"] = "the kernel the host boots next is unknown, so the %s module cannot be checked" % label
        return out
    here = [e for e in wanted if e.get("kernel") == kernel]
    ready = [e for e in here if e.get("state") in _AVAILABLE]
    if ready:
        best = next((e for e in ready if e["state"] == "installed"), ready[0])
        note = " (dkms notes: %s)" % "; ".join(best["warnings"]) if best.get("warnings") else ""
        how = "installed" if best["state"] == "installed" else "installed as weak module from %s" % best["built_for"]
        out.update(ok=True, reason="%s/%s is %s for kernel %s%s" % (best["module"], best["version"], how, kernel, note))
        return out
    if here:
        out["reason"] = "%s module for kernel %s is %s but not installed (dkms: %s/%s %s for %s)" % (
            what, kernel, here[0]["state"], here[0]["module"], here[0]["version"], here[0]["state"], kernel)
        return out
    if wanted:
        said = _describe(wanted)
    elif named:
        said = "only other versions: %s" % ", ".join(_dedupe(
            "%s/%s%s" % (e["module"], e["version"], " on %s" % e["kernel"] if e.get("kernel") else "") for e in named))
    else:
        said = "no %s module known to dkms" % label
    out["reason"] = "no %s module for kernel %s (dkms: %s)" % (what, kernel, said)
    return out


# --- Secure Boot plan -------------------------------------------------------------------------------------

# The paths DKMS uses when it makes its own MOK key pair (github:dell/dkms dkms_framework.conf.in:
# "# mok_signing_key=/var/lib/dkms/mok.key", "# mok_certificate=/var/lib/dkms/mok.pub"), and Ubuntu's
# update-secureboot-policy pair, the only one dkms 2.x signs with (dkms 2.8.7 sign_build(): kmodsign with
# /var/lib/shim-signed/mok/MOK.priv and MOK.der).
DEFAULT_MOK_KEY = "/var/lib/dkms/mok.key"
DEFAULT_MOK_CERT = "/var/lib/dkms/mok.pub"
UBUNTU_MOK_KEY = "/var/lib/shim-signed/mok/MOK.priv"
UBUNTU_MOK_CERT = "/var/lib/shim-signed/mok/MOK.der"
# /etc/dkms/framework.conf.d/*.conf and the mok_signing_key / mok_certificate variables: dkms 3.0.4 (commits 1c79926
# "Add /etc/dkms/framework.conf.d directory" and 3323033 "Rework signing").
DKMS_SIGNING_CONFIG_MIN = (3, 0, 4)


def _enrol_steps(cert: str, key: str) -> str:
    """The MOK enrolment procedure of github:dell/dkms README.md, "Module signing" and "Secure Boot"."""
    return (
        "(1) create the key pair as DKMS does (skip if it exists; dkms >= 3.1: `dkms generate_mok`): "
        "openssl req -new -x509 -nodes -days 36500 -subj \"/CN=DKMS module signing key\" -newkey rsa:2048 "
        "-keyout %(key)s -addext \"extendedKeyUsage=codeSigning\" -outform DER -out %(cert)s; "
        "(2) queue the certificate for enrolment: mokutil --import %(cert)s (choose a one-time password); "
        "(3) reboot and, on the console, in MokManager choose Enroll MOK > Continue > Yes, enter that password "
        "and reboot; "
        "(4) set nvidia_driver_mok_signing_key: %(key)s and nvidia_driver_mok_certificate: %(cert)s and run the "
        "role again." % dict(cert=cert, key=key))


def _as_sb(sb_state: object) -> Mapping[str, Any]:
    if isinstance(sb_state, Mapping):
        return sb_state
    if sb_state is None or isinstance(sb_state, bool):
        return dict(secure_boot=sb_state, efi=None, detail="", mokutil_missing=False)
    raise KmodError("sb_state must be the result of parse_sb_state, True, False or None, got %r" % (sb_state,))


def _as_enrolment(enrolled: object) -> Optional[Mapping[str, Any]]:
    if enrolled is None or isinstance(enrolled, Mapping):
        return enrolled
    if isinstance(enrolled, bool):
        return dict(enrolled=enrolled, pending=False, blocked=False, in_db=False, error=None, detail="")
    raise KmodError("enrolled must be the result of parse_mok_test_key, True, False or None, got %r" % (enrolled,))


def secure_boot_plan(sb_state: object, key_path: Optional[str] = None, cert_path: Optional[str] = None, enrolled: object = None,
                     dkms_version: Union[str, tuple[int, ...], None] = None, key_exists: Optional[bool] = None) -> dict[str, Any]:
    """What to do about module signing before the reboot: dict(ok, action, message, warn).

    ``sb_state``: ``parse_sb_state`` result (or True/False/None); ``key_path``/``cert_path``: the MOK private key and
    DER certificate DKMS should sign with; ``enrolled``: ``parse_mok_test_key`` result for ``cert_path`` (or a bool,
    None = not tested); ``dkms_version``: ``dkms --version`` output or tuple (None = unknown); ``key_exists``: whether
    the key file exists on the host (None = unknown; a ``pkcs11:`` key has no file).

    ``action``: ``none`` (Secure Boot off or unknown: nothing is signed), ``sign`` (write ``dkms_signing_config``),
    or, with ``ok`` False, ``enroll_key`` (no key given), ``configure`` (key or certificate missing), ``enroll``
    (certificate not enrolled), ``confirm_enrolment`` (enrolment pending), ``replace_key`` (certificate blocked),
    ``upgrade_dkms`` (dkms too old for framework.conf.d).
    """
    sb = _as_sb(sb_state)
    key = str(key_path or "").strip()
    cert = str(cert_path or "").strip()
    state = sb.get("secure_boot")
    detail = sb.get("detail") or ""
    plan = dict(ok=True, action="none", message="", warn=False, secure_boot=state)
    if state is False:
        plan["message"] = "Secure Boot is off (%s): the kernel module needs no signature." % (detail or "mokutil")
        return plan
    if state is None:
        if sb.get("efi") is False:
            plan["message"] = "No EFI variables (legacy BIOS boot): Secure Boot does not apply, nothing is signed."
            return plan
        plan.update(warn=True, message=(
            "Secure Boot state unknown (%s): the kernel module is not signed. If Secure Boot is on, the kernel "
            "refuses the nvidia module after the reboot; install mokutil to have this checked."
            % (detail or "not checked")))
        return plan
    if state is not True:
        raise KmodError("sb_state.secure_boot must be True, False or None, got %r" % (state,))
    head = "Secure Boot is enabled, so the kernel refuses an unsigned nvidia module and the driver will not load " \
           "after the reboot. "
    if not key and not cert:
        plan.update(ok=False, action="enroll_key", message=head + (
            "Enrol a Machine Owner Key (MOK) once and let DKMS sign the module with it: "
            + _enrol_steps(DEFAULT_MOK_CERT, DEFAULT_MOK_KEY)))
        return plan
    if not key or not cert:
        plan.update(ok=False, action="configure", message=head + (
            "Set both nvidia_driver_mok_signing_key (private key) and nvidia_driver_mok_certificate (DER "
            "certificate); only %s is set." % ("the key" if key else "the certificate")))
        return plan
    if key_exists is False and not key.startswith("pkcs11:"):
        plan.update(ok=False, action="configure", message=head + (
            "The signing key %s does not exist on the host; DKMS would then generate a new key pair at these paths, "
            "overwriting %s, and sign with a key the firmware does not trust. Put the enrolled key pair there or "
            "fix nvidia_driver_mok_signing_key." % (key, cert)))
        return plan
    enrol = _as_enrolment(enrolled)
    if enrol is None:
        plan.update(ok=False, action="enroll", message=head + (
            "The enrolment of %s was not checked (mokutil --test-key %s)." % (cert, cert)))
        return plan
    if enrol.get("error"):
        plan.update(ok=False, action="configure", message=head + (
            "mokutil cannot test the certificate %s: %s. nvidia_driver_mok_certificate must be the DER certificate "
            "of the signing key." % (cert, enrol["error"])))
        return plan
    if enrol.get("blocked"):
        plan.update(ok=False, action="replace_key", message=head + (
            "The certificate %s is blocked (%s): create a new key pair and enrol it: %s"
            % (cert, enrol.get("detail") or "dbx/MokListX", _enrol_steps(cert, key))))
        return plan
    if enrol.get("pending"):
        plan.update(ok=False, action="confirm_enrolment", message=head + (
            "The certificate %s is imported but its enrolment is not confirmed yet: reboot and, on the console, in "
            "MokManager choose Enroll MOK > Continue > Yes, enter the password given to mokutil --import and reboot; "
            "then run the role again." % cert))
        return plan
    if not enrol.get("enrolled"):
        plan.update(ok=False, action="enroll", message=head + (
            "The certificate %s is not enrolled: mokutil --import %s (choose a one-time password), reboot and, on "
            "the console, in MokManager choose Enroll MOK > Continue > Yes, enter that password and reboot; then run "
            "the role again." % (cert, cert)))
        return plan
    version = dkms_version if isinstance(dkms_version, tuple) else (
        parse_dkms_version(dkms_version) if dkms_version not in (None, "") else None)
    if version is not None and version < DKMS_SIGNING_CONFIG_MIN and (key, cert) != (UBUNTU_MOK_KEY, UBUNTU_MOK_CERT):
        have, need = ".".join(map(str, version)), ".".join(map(str, DKMS_SIGNING_CONFIG_MIN))
        plan.update(ok=False, action="upgrade_dkms", message=head + (
            "dkms %s reads no /etc/dkms/framework.conf.d (dkms >= %s does) and signs only with %s: upgrade dkms or "
            "enrol and use that key pair." % (have, need, UBUNTU_MOK_KEY)))
        return plan
    plan.update(action="sign", message="Secure Boot is enabled and %s is enrolled%s: DKMS signs the module with %s."
                % (cert, " (in the firmware db, not MokList: make sure this kernel accepts db keys for modules)"
                   if enrol.get("in_db") else "", key))
    return plan


# DKMS reads /etc/dkms/framework.conf and /etc/dkms/framework.conf.d/*.conf with safe_source() (a bash `.` of the
# file in a subshell), accepting only sign_file, mok_signing_key and mok_certificate for signing
# (github:dell/dkms dkms.in: dkms_framework_signing_variables="sign_file mok_signing_key mok_certificate",
# read_framework_conf(); dkms_framework.conf.in documents both variables and that ${kernelver} may appear in them).
# The values are written double-quoted, so ${kernelver} still expands; nothing else a shell would expand is allowed.
_PATH_RE = re.compile(r'^(?:/|pkcs11:)[^"`\\\n\r$]*(?:\$\{?kernelver\}?[^"`\\\n\r$]*)*\Z')


def dkms_signing_config(key_path: object, cert_path: object) -> str:
    """Text of /etc/dkms/framework.conf.d/<name>.conf that makes DKMS sign with this MOK key pair."""
    key = _text(key_path, "key path").strip()
    cert = _text(cert_path, "certificate path").strip()
    for what, value in (("signing key", key), ("certificate", cert)):
        if not value:
            raise KmodError("the MOK %s path is empty" % what)
        if not _PATH_RE.match(value) or (what == "certificate" and value.startswith("pkcs11:")):
            raise KmodError("the MOK %s %r must be an absolute path%s without quotes, backslashes, backticks or $ "
                            "(except ${kernelver})" % (what, value, " or a pkcs11: URI" if what == "signing key" else ""))
    return (
        "# Managed by gpuops.provision (role nvidia_driver): DKMS signs the modules it builds with this Machine\n"
        "# Owner Key, which is enrolled for Secure Boot. Read by dkms >= 3.0.4 from /etc/dkms/framework.conf.d/.\n"
        'mok_signing_key="%s"\n'
        'mok_certificate="%s"\n' % (key, cert))
