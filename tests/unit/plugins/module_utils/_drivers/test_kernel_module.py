# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/_drivers/kernel_module.py: dkms status, mokutil, the next boot kernel, headers packages, the
module check and the Secure Boot plan (issue 22 points 3 and 9).

Where each output sample comes from is said next to it; upstream formats are quoted from the sources named in
_drivers/kernel_module.py (github:dell/dkms dkms.in do_status(), run_test.sh; github:lcp/mokutil src/mokutil.c).
"""

from __future__ import annotations

import re

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._drivers import kernel_module as K

# --- samples -------------------------------------------------------------------------------------------------------

# dkms >= 3.1.3 ("module/version" form, notes in their current wording): expected outputs in github:dell/dkms
# run_test.sh ("dkms_test/1.0, ${KERNEL_VER}, ${KERNEL_ARCH}: installed (Original modules exist)" and the lines around
# it), with KERNEL_VER/KERNEL_ARCH filled in as a Debian 12 host would.
DKMS_NEW = """\
dkms_replace_test/2.0, 6.1.0-28-amd64, x86_64: installed (Original modules exist)
dkms_test/1.0, 6.1.0-28-amd64, x86_64: installed (Differences between built and installed modules)
dkms_test/1.0: added
"""
# dkms 2.x ("module, version" form): `dkms status` of a RHEL 7 host, quoted in the blog post "Resolving nvidia/cuda
# driver conflicts" (Rajesh Pandian M, 2020-12-16): one warning per module file, then a built-only version.
DKMS_OLD_RHEL7 = """\
nvidia, 396.44, 3.10.0-862.3.2.el7.x86_64, x86_64: installed (WARNING! Diff between built and installed module!) \
(WARNING! Diff between built and installed module!) (WARNING! Diff between built and installed module!)
nvidia, 440.31, 3.10.0-862.3.2.el7.x86_64, x86_64: built
"""
# dkms 2.2 on Ubuntu 12.04, Ubuntu Forums thread of 2012-07-16 (post by Jonners59): "added" in the comma form, and an
# error message that dkms printed into the middle of a status line.
DKMS_OLD_UBUNTU = """\
backfire, 0.73-1, 3.2.0-26-generic, x86_64: built
blcr, 0.8.2: added
dahdi, 2.5.0.1+dfsg-1ubuntu2, 3.2.0-24-generic, x86_64: installed (WARNING! Diff between built and installed module!)Error! \
Could not locate dkms.conf file.
File:  does not exist.

oss4, 4.2-build2005: added
"""
# Weak modules on RHEL 7 (dkms do_status_weak(), comma form in every dkms version), from a Vagrant provisioning note
# that quotes `sudo dkms status` of a CentOS 7 box.
DKMS_WEAK = """\
vboxguest, 4.3.14, 3.10.0-123.20.1.el7.x86_64, x86_64: installed
vboxguest, 4.3.14, 3.10.0-123.el7.x86_64, x86_64: installed-weak from 3.10.0-123.20.1.el7.x86_64
"""
# dkms 3.x samples: AMD's amdgpu-dkms install guide ("Sample output for Debian 13") and an Acronis forum post (RHEL 9),
# plus Debian's nvidia-kernel-dkms module name, from a README quoting `/usr/sbin/dkms status` on Debian 13.
DKMS_AMD_DEBIAN13 = "amdgpu/6.16.6-2238411.24.04, 6.12.48+deb13-amd64, x86_64: installed (Original modules exist)\n"
DKMS_RHEL9 = "file_protector/1.1-1522, 5.14.0-362.18.1.el9_3.x86_64, x86_64: installed\n"
DKMS_DEBIAN_CURRENT = "nvidia-current/550.163.01, 6.12.74+deb13+1-amd64, x86_64: installed\n"

# The case: Debian 12 upgraded its kernel from 6.1.0-28 to 6.1.0-30 in the same run as the driver; DKMS built
# the module for the running kernel only (the newer kernel's headers were missing). Old and new dkms formats.
UPGRADE_NEW = "nvidia/535.261.03, 6.1.0-28-amd64, x86_64: installed\n"
UPGRADE_OLD = "nvidia, 535.261.03, 6.1.0-28-amd64, x86_64: installed\n"
BOOT = ["/boot/vmlinuz-6.1.0-28-amd64", "/boot/vmlinuz-6.1.0-30-amd64"]


# --- dkms status ---------------------------------------------------------------------------------------------------

def test_dkms_status_new_format_with_notes():
    entries = K.parse_dkms_status(DKMS_NEW)
    assert [(e["module"], e["version"], e["kernel"], e["arch"], e["state"]) for e in entries] == [
        ("dkms_replace_test", "2.0", "6.1.0-28-amd64", "x86_64", "installed"),
        ("dkms_test", "1.0", "6.1.0-28-amd64", "x86_64", "installed"),
        ("dkms_test", "1.0", None, None, "added"),
    ]
    assert entries[0]["warnings"] == ["Original modules exist"]
    assert entries[1]["warnings"] == ["Differences between built and installed modules"]
    assert {e["format"] for e in entries} == {"slash"}


def test_dkms_status_old_format_warning_once_and_built():
    entries = K.parse_dkms_status(DKMS_OLD_RHEL7)
    assert [(e["module"], e["version"], e["kernel"], e["state"]) for e in entries] == [
        ("nvidia", "396.44", "3.10.0-862.3.2.el7.x86_64", "installed"),
        ("nvidia", "440.31", "3.10.0-862.3.2.el7.x86_64", "built"),
    ]
    assert entries[0]["warnings"] == ["WARNING! Diff between built and installed module!"]
    assert entries[0]["format"] == "comma"


def test_dkms_status_old_added_lines_and_interleaved_errors():
    entries = K.parse_dkms_status(DKMS_OLD_UBUNTU)
    assert [(e["module"], e["version"], e["state"]) for e in entries] == [
        ("backfire", "0.73-1", "built"), ("blcr", "0.8.2", "added"),
        ("dahdi", "2.5.0.1+dfsg-1ubuntu2", "installed"), ("oss4", "4.2-build2005", "added"),
    ]
    assert entries[2]["warnings"] == ["WARNING! Diff between built and installed module!"]


def test_dkms_status_weak_and_other_samples():
    weak = K.parse_dkms_status(DKMS_WEAK)
    assert weak[1]["state"] == "installed-weak" and weak[1]["kernel"] == "3.10.0-123.el7.x86_64"
    assert weak[1]["built_for"] == "3.10.0-123.20.1.el7.x86_64"
    amd = K.parse_dkms_status(DKMS_AMD_DEBIAN13)[0]
    assert (amd["module"], amd["version"], amd["kernel"]) == ("amdgpu", "6.16.6-2238411.24.04", "6.12.48+deb13-amd64")
    assert K.parse_dkms_status(DKMS_RHEL9)[0]["kernel"] == "5.14.0-362.18.1.el9_3.x86_64"
    assert K.parse_dkms_status("") == [] and K.parse_dkms_status(None) == []
    # dkms 3.0.13+ "broken" (the module source is gone) and a deprecation notice, which is no status line.
    broken = K.parse_dkms_status("Deprecated feature: REMAKE_INITRD (/usr/src/nvidia-535.261.03/dkms.conf)\n"
                                 "nvidia/535.261.03: broken\n")
    assert [(e["module"], e["state"], e["kernel"]) for e in broken] == [("nvidia", "broken", None)]


def test_dkms_version():
    assert K.parse_dkms_version("dkms-3.0.10\n") == (3, 0, 10)      # dkms 3.x: "@RELEASE_STRING@"
    assert K.parse_dkms_version("dkms:2.8.4") == (2, 8, 4)          # dkms 2.x: $"dkms:[INSERT_VERSION_HERE]"
    assert K.parse_dkms_version("3.2.2") == (3, 2, 2)
    assert K.parse_dkms_version("") is None


# --- mokutil -------------------------------------------------------------------------------------------------------

# Messages of github:lcp/mokutil src/mokutil.c (sb_state_internal(), main()); "SecureBoot enabled" is also the
# sample in github:dell/dkms README.md ("# mokutil --sb-state").
@pytest.mark.parametrize("text,rc,secure_boot,efi", [
    ("SecureBoot enabled\n", 0, True, True),
    ("SecureBoot disabled\n", 0, False, True),
    ("SecureBoot disabled\nPlatform is in Setup Mode\n", 0, False, True),
    ("SecureBoot enabled\nSecureBoot validation is disabled in shim\n", 0, False, True),
    ("EFI variables are not supported on this system\n", 1, None, False),
    ("This system doesn't support Secure Boot\n", 255, False, True),
    ("This system does't support Secure Boot\n", 255, False, True),          # mokutil 0.3.0's spelling
    ("Cannot determine secure boot state.\n", 0, None, True),
    ('Failed to read "SecureBoot" variable: No such file or directory\n', 255, None, True),
])
def test_sb_state(text, rc, secure_boot, efi):
    st = K.parse_sb_state(text, rc)
    assert st["secure_boot"] is secure_boot and st["efi"] is efi and st["mokutil_missing"] is False
    assert st["detail"]


@pytest.mark.parametrize("text,rc", [
    ("\n\nError executing command.", 2),                          # ansible.builtin.command, ansible-core 2.21
    ("[Errno 2] No such file or directory: b'mokutil'", 2),       # older ansible-core
    ("sh: 1: mokutil: not found", 127),                           # a shell
])
def test_sb_state_mokutil_missing_is_unknown(text, rc):
    st = K.parse_sb_state(text, rc)
    assert st == dict(secure_boot=None, detail="mokutil is not installed", efi=None, mokutil_missing=True)


def test_sb_state_unrecognised_output_is_unknown_and_quoted():
    st = K.parse_sb_state("something else\n", 3)
    assert st["secure_boot"] is None and "something else" in st["detail"] and "rc 3" in st["detail"]


# mokutil test_key() / print_skip_message() messages (github:lcp/mokutil src/mokutil.c).
@pytest.mark.parametrize("text,rc,expected", [
    ("/var/lib/dkms/mok.pub is already enrolled\n", 0, dict(enrolled=True, pending=False, blocked=False)),
    ("SKIP: /var/lib/dkms/mok.pub is already enrolled\n", 0, dict(enrolled=True, pending=False, blocked=False)),
    ("/var/lib/dkms/mok.pub is not enrolled\n", 1, dict(enrolled=False, pending=False, blocked=False)),
    ("/var/lib/dkms/mok.pub is already in the enrollment request\n", 0, dict(enrolled=False, pending=True, blocked=False)),
    ("/var/lib/dkms/mok.pub is blocked in dbx\n", 0, dict(enrolled=False, pending=False, blocked=True)),
    ("/var/lib/dkms/mok.pub is already in db\n", 0, dict(enrolled=True, pending=False, blocked=False, in_db=True)),
])
def test_mok_test_key(text, rc, expected):
    got = K.parse_mok_test_key(text, rc)
    assert {k: got[k] for k in expected} == expected and got["error"] is None


def test_mokutil_output_as_a_list_of_stdout_and_stderr():
    """The task file passes [stdout, stderr, msg] of the command result; lines are read across all three."""
    assert K.parse_mok_test_key(["", "Failed to open /etc/missing.der", ""], 255)["error"] == "Failed to open /etc/missing.der"
    assert K.parse_mok_test_key(["/c is already in the enrollment request", "", ""], 0)["pending"] is True
    assert K.parse_sb_state(["", "EFI variables are not supported on this system", "non-zero return code"], 1)["efi"] is False


@pytest.mark.parametrize("text,rc,error", [
    ("\nFailed to open /etc/missing.der\n", 255, "Failed to open /etc/missing.der"),
    ("\nNot a valid x509 certificate\n", 255, "Not a valid x509 certificate"),
    ("\n\nError executing command.", 2, "mokutil is not installed"),
])
def test_mok_test_key_errors(text, rc, error):
    got = K.parse_mok_test_key(text, rc)
    assert got["enrolled"] is False and got["error"] == error


# --- the next boot kernel ------------------------------------------------------------------------------------------

def test_next_kernel_debian_is_the_newest_by_dpkg_order():
    assert K.next_boot_kernel(BOOT, "6.1.0-28-amd64", "deb") == "6.1.0-30-amd64"
    # dpkg order, not text order: 6.1.0-9 < 6.1.0-28; an -rc sorts before the release (GRUB's "~rc" rewrite).
    assert K.next_boot_kernel(["vmlinuz-6.1.0-9-amd64", "vmlinuz-6.1.0-28-amd64"], None, "deb") == "6.1.0-28-amd64"
    assert K.next_boot_kernel(["6.1.0-28-amd64", "6.1.0-rc7-amd64"], None, "deb") == "6.1.0-28-amd64"
    # Debian 13 and backports releases.
    assert K.next_boot_kernel(["6.12.48+deb13-amd64", "6.12.57+deb13-amd64"], None) == "6.12.57+deb13-amd64"
    assert K.next_boot_kernel(["5.15.0-119-generic", "5.15.0-125-generic"], None, "deb") == "5.15.0-125-generic"


def test_next_kernel_rhel_default_wins():
    rhel = ["/boot/vmlinuz-5.14.0-427.13.1.el9_4.x86_64", "/boot/vmlinuz-5.14.0-503.14.1.el9_5.x86_64",
            "/boot/vmlinuz-0-rescue-4f1e2a3b5c6d7e8f9a0b1c2d3e4f5a6b"]
    assert K.next_boot_kernel(rhel, "5.14.0-427.13.1.el9_4.x86_64", "rpm") == "5.14.0-503.14.1.el9_5.x86_64"
    # `grubby --default-kernel` prints the image path; an operator pinned the older kernel.
    assert K.next_boot_kernel(rhel, None, "rpm", "/boot/vmlinuz-5.14.0-427.13.1.el9_4.x86_64\n") == \
        "5.14.0-427.13.1.el9_4.x86_64"
    # rpm order: 503.14.1 > 503.9.1 (numeric segments), which text order gets wrong.
    assert K.next_boot_kernel(["5.14.0-503.9.1.el9_5.x86_64", "5.14.0-503.14.1.el9_5.x86_64"], None, "rpm") == \
        "5.14.0-503.14.1.el9_5.x86_64"


def test_next_kernel_falls_back_to_running_and_skips_junk():
    assert K.next_boot_kernel([], "6.1.0-28-amd64") == "6.1.0-28-amd64"
    assert K.next_boot_kernel(None, None) is None
    assert K.next_boot_kernel(["vmlinuz-6.1.0-30-amd64.old", "vmlinuz-0-rescue-abc"], "6.1.0-28-amd64") == "6.1.0-28-amd64"
    assert K.next_boot_kernel([{"path": "/boot/vmlinuz-6.1.0-30-amd64"}], None) == "6.1.0-30-amd64"
    with pytest.raises(K.KmodError, match="scheme must be deb or rpm"):
        K.next_boot_kernel(BOOT, None, "apk")


# --- headers packages ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("release,dist,family,expected", [
    ("6.1.0-28-amd64", "Debian", "Debian", ["linux-headers-6.1.0-28-amd64", "linux-headers-amd64"]),
    ("6.1.0-28-cloud-amd64", "Debian", "Debian", ["linux-headers-6.1.0-28-cloud-amd64", "linux-headers-cloud-amd64"]),
    ("6.1.0-28-rt-amd64", "Debian", "Debian", ["linux-headers-6.1.0-28-rt-amd64", "linux-headers-rt-amd64"]),
    ("6.1.0-28-arm64", "Debian", "Debian", ["linux-headers-6.1.0-28-arm64", "linux-headers-arm64"]),
    ("6.12.48+deb13-amd64", "Debian", "Debian", ["linux-headers-6.12.48+deb13-amd64", "linux-headers-amd64"]),
    ("5.15.0-119-generic", "Ubuntu", "Debian", ["linux-headers-5.15.0-119-generic", "linux-headers-generic"]),
    ("6.8.0-1015-aws", "Ubuntu", "Debian", ["linux-headers-6.8.0-1015-aws", "linux-headers-aws"]),
    ("6.5.0-1025-azure", "Ubuntu", "Debian", ["linux-headers-6.5.0-1025-azure", "linux-headers-azure"]),
    ("6.8.0-1019-gcp", "Ubuntu", "Debian", ["linux-headers-6.8.0-1019-gcp", "linux-headers-gcp"]),
    ("5.15.0-1063-nvidia", "Ubuntu", "Debian", ["linux-headers-5.15.0-1063-nvidia", "linux-headers-nvidia"]),
    ("6.8.0-45-lowlatency", "Ubuntu", "Debian", ["linux-headers-6.8.0-45-lowlatency", "linux-headers-lowlatency"]),
    # NVIDIA: `dnf install kernel-devel-$(uname -r) kernel-headers`; kernel-devel follows upgrades (installonly).
    ("5.14.0-503.14.1.el9_5.x86_64", "RedHat", "RedHat",
     ["kernel-devel-5.14.0-503.14.1.el9_5.x86_64", "kernel-devel", "kernel-headers"]),
    ("5.14.0-362.8.1.el9_3.x86_64+rt", "RedHat", "RedHat",
     ["kernel-rt-devel-5.14.0-362.8.1.el9_3.x86_64", "kernel-rt-devel", "kernel-headers"]),
    ("5.14.0-427.13.1.el9_4.aarch64+64k", "Rocky", "RedHat",
     ["kernel-64k-devel-5.14.0-427.13.1.el9_4.aarch64", "kernel-64k-devel", "kernel-headers"]),
    ("5.15.0-200.131.27.el9uek.x86_64", "OracleLinux", "RedHat",
     ["kernel-uek-devel-5.15.0-200.131.27.el9uek.x86_64", "kernel-uek-devel", "kernel-headers"]),
])
def test_headers_packages(release, dist, family, expected):
    assert K.headers_packages(release, dist, family) == expected


def test_headers_packages_meta_override_and_refusals():
    assert K.headers_packages("6.8.0-45-generic", "Ubuntu", "Debian", meta="linux-headers-generic-hwe-22.04") == [
        "linux-headers-6.8.0-45-generic", "linux-headers-generic-hwe-22.04"]
    assert K.headers_packages("6.1.0-28-amd64", "Debian", "Debian", meta=False) == ["linux-headers-6.1.0-28-amd64"]
    with pytest.raises(K.KmodError, match="Debian and RedHat OS families"):
        K.headers_packages("6.4.0-150600.23.25-default", "SLES", "Suse")
    with pytest.raises(K.KmodError, match="Proxmox VE kernel"):
        K.headers_packages("6.8.12-4-pve", "Debian", "Debian")
    with pytest.raises(K.KmodError, match="not a kernel release"):
        K.headers_packages("", "Debian", "Debian")


# --- module present for the next kernel? ---------------------------------------------------------------------------

@pytest.mark.parametrize("status", [UPGRADE_NEW, UPGRADE_OLD], ids=["dkms3", "dkms2"])
def test_kernel_upgrade_with_module_for_running_kernel_only_fails_naming_the_next_kernel(status):
    nxt = K.next_boot_kernel(BOOT, "6.1.0-28-amd64", "deb")
    check = K.module_check(status, nxt, "nvidia", "535.261.03-1")
    assert check["ok"] is False
    assert check["reason"] == ("no nvidia 535.261.03-1 module for kernel 6.1.0-30-amd64 "
                               "(dkms: built for 6.1.0-28-amd64 only)")
    assert [e["kernel"] for e in check["entries"]] == ["6.1.0-28-amd64"]
    # Without a version the reason has the example wording of the issue.
    assert K.module_check(status, nxt)["reason"] == \
        "no nvidia module for kernel 6.1.0-30-amd64 (dkms: built for 6.1.0-28-amd64 only)"


@pytest.mark.parametrize("status", [
    UPGRADE_NEW + "nvidia/535.261.03, 6.1.0-30-amd64, x86_64: installed\n",
    UPGRADE_OLD + "nvidia, 535.261.03, 6.1.0-30-amd64, x86_64: installed\n",
], ids=["dkms3", "dkms2"])
def test_module_installed_for_next_kernel_is_ok(status):
    check = K.module_check(status, "6.1.0-30-amd64", "nvidia", "535.261.03")
    assert check["ok"] is True
    assert check["reason"] == "nvidia/535.261.03 is installed for kernel 6.1.0-30-amd64"


def test_module_check_states_versions_and_names():
    # Built but not installed for the next kernel.
    built = K.module_check("nvidia/535.261.03, 6.1.0-30-amd64, x86_64: built\n", "6.1.0-30-amd64")
    assert not built["ok"] and "is built but not installed" in built["reason"]
    # Only added (no build at all).
    added = K.module_check("nvidia/535.261.03: added\n", "6.1.0-30-amd64")
    assert added["reason"] == "no nvidia module for kernel 6.1.0-30-amd64 (dkms: nvidia/535.261.03 added but not built)"
    # Another driver version for the next kernel.
    other = K.module_check("nvidia/535.216.03, 6.1.0-30-amd64, x86_64: installed\n", "6.1.0-30-amd64", version="535.261.03")
    assert not other["ok"] and "only other versions: nvidia/535.216.03 on 6.1.0-30-amd64" in other["reason"]
    # Nothing at all.
    assert K.module_check("", "6.1.0-30-amd64")["reason"] == \
        "no nvidia module for kernel 6.1.0-30-amd64 (dkms: no nvidia module known to dkms)"
    # Debian's nvidia-kernel-dkms registers nvidia-current; nvidia-fs (GPUDirect Storage) is not the driver.
    assert K.module_check(DKMS_DEBIAN_CURRENT, "6.12.74+deb13+1-amd64", "nvidia", "550.163.01-2")["ok"] is True
    fs = K.module_check("nvidia-fs/2.22.3, 6.1.0-30-amd64, x86_64: installed\n", "6.1.0-30-amd64")
    assert fs["ok"] is False
    assert K.module_check(DKMS_AMD_DEBIAN13, "6.12.48+deb13-amd64", "amdgpu")["reason"].endswith(
        "(dkms notes: Original modules exist)")
    # RHEL 7 weak module: present for the kernel through weak-updates.
    weak = K.module_check(DKMS_WEAK, "3.10.0-123.el7.x86_64", "vboxguest")
    assert weak["ok"] and "weak module from 3.10.0-123.20.1.el7.x86_64" in weak["reason"]
    # Unknown next kernel.
    assert K.module_check(UPGRADE_NEW, None)["ok"] is False


def test_module_check_rhel_default_kernel():
    """RHEL: the module exists for the newest kernel only, but grubby's default is the older one (and vice versa)."""
    boot = ["/boot/vmlinuz-5.14.0-427.13.1.el9_4.x86_64", "/boot/vmlinuz-5.14.0-503.14.1.el9_5.x86_64"]
    status = "nvidia/550.163.01, 5.14.0-503.14.1.el9_5.x86_64, x86_64: installed\n"
    pinned = K.next_boot_kernel(boot, "5.14.0-503.14.1.el9_5.x86_64", "rpm", "/boot/vmlinuz-5.14.0-427.13.1.el9_4.x86_64")
    check = K.module_check(status, pinned, "nvidia", "3:550.163.01-1.el9")
    assert check["ok"] is False and "kernel 5.14.0-427.13.1.el9_4.x86_64" in check["reason"]
    newest = K.next_boot_kernel(boot, "5.14.0-427.13.1.el9_4.x86_64", "rpm")
    assert K.module_check(status, newest, "nvidia", "3:550.163.01-1.el9")["ok"] is True


def test_module_check_bad_input():
    with pytest.raises(K.KmodError, match="dkms_status must be"):
        K.module_check(42, "6.1.0-30-amd64")


# --- Secure Boot plan ----------------------------------------------------------------------------------------------

SB_ON = K.parse_sb_state("SecureBoot enabled\n", 0)
KEY, CERT = "/var/lib/dkms/mok.key", "/var/lib/dkms/mok.pub"


def test_plan_secure_boot_off_or_without_efi_needs_nothing():
    off = K.secure_boot_plan(K.parse_sb_state("SecureBoot disabled\n", 0), "", "", None)
    assert off["ok"] and off["action"] == "none" and not off["warn"]
    bios = K.secure_boot_plan(K.parse_sb_state("EFI variables are not supported on this system\n", 1))
    assert bios["ok"] and bios["action"] == "none" and not bios["warn"] and "legacy BIOS" in bios["message"]


def test_plan_unknown_state_passes_with_a_warning():
    unknown = K.secure_boot_plan(K.parse_sb_state("\n\nError executing command.", 2), "", "")
    assert unknown["ok"] and unknown["action"] == "none" and unknown["warn"]
    assert "mokutil is not installed" in unknown["message"]


def test_plan_secure_boot_on_without_key_lists_the_enrolment():
    plan = K.secure_boot_plan(SB_ON, "", "", None)
    assert plan["ok"] is False and plan["action"] == "enroll_key"
    msg = plan["message"]
    assert "mokutil --import /var/lib/dkms/mok.pub" in msg
    assert "openssl req -new -x509" in msg and "MokManager" in msg and "password" in msg
    assert "nvidia_driver_mok_signing_key" in msg and "nvidia_driver_mok_certificate" in msg


@pytest.mark.parametrize("test_key_out,rc,action,needle", [
    ("/var/lib/dkms/mok.pub is not enrolled\n", 1, "enroll", "mokutil --import /var/lib/dkms/mok.pub"),
    ("/var/lib/dkms/mok.pub is already in the enrollment request\n", 0, "confirm_enrolment", "MokManager"),
    ("/var/lib/dkms/mok.pub is blocked in MokListX\n", 0, "replace_key", "blocked"),
    ("\nFailed to open /var/lib/dkms/mok.pub\n", 255, "configure", "Failed to open"),
])
def test_plan_secure_boot_on_with_key_not_enrolled(test_key_out, rc, action, needle):
    plan = K.secure_boot_plan(SB_ON, KEY, CERT, K.parse_mok_test_key(test_key_out, rc), "dkms-3.0.10", True)
    assert plan["ok"] is False and plan["action"] == action and needle in plan["message"]


def test_plan_secure_boot_on_with_enrolled_key_signs():
    enrolled = K.parse_mok_test_key("/var/lib/dkms/mok.pub is already enrolled\n", 0)
    plan = K.secure_boot_plan(SB_ON, KEY, CERT, enrolled, "dkms-3.0.10", True)
    assert plan["ok"] and plan["action"] == "sign" and KEY in plan["message"]
    # dkms 2.8 reads no framework.conf.d and signs only with Ubuntu's update-secureboot-policy key.
    old = K.secure_boot_plan(SB_ON, KEY, CERT, enrolled, "dkms-2.8.7", True)
    assert not old["ok"] and old["action"] == "upgrade_dkms"
    ubuntu = K.secure_boot_plan(SB_ON, K.UBUNTU_MOK_KEY, K.UBUNTU_MOK_CERT, enrolled, "dkms-2.8.7", True)
    assert ubuntu["ok"] and ubuntu["action"] == "sign"
    # Unknown dkms version: not held against the plan.
    assert K.secure_boot_plan(SB_ON, KEY, CERT, True, None, None)["action"] == "sign"


def test_plan_refuses_half_configured_or_missing_key():
    assert K.secure_boot_plan(SB_ON, KEY, "", None)["action"] == "configure"
    missing = K.secure_boot_plan(SB_ON, KEY, CERT, True, "dkms-3.0.10", False)
    assert not missing["ok"] and "overwriting /var/lib/dkms/mok.pub" in missing["message"]
    # A PKCS#11 key has no file to look for.
    assert K.secure_boot_plan(SB_ON, "pkcs11:token=mok", CERT, True, None, False)["action"] == "sign"
    assert K.secure_boot_plan(SB_ON, KEY, CERT, None)["ok"] is False
    with pytest.raises(K.KmodError, match="sb_state must be"):
        K.secure_boot_plan("enabled")


def test_dkms_signing_config_text():
    text = K.dkms_signing_config(KEY, CERT)
    # dkms_framework.conf.in's variable names, double-quoted for bash.
    assert 'mok_signing_key="/var/lib/dkms/mok.key"\n' in text and 'mok_certificate="/var/lib/dkms/mok.pub"\n' in text
    assert all(line.startswith("#") for line in text.splitlines() if not line.startswith("mok_"))
    assert 'mok_signing_key="/etc/mok/${kernelver}.key"' in K.dkms_signing_config("/etc/mok/${kernelver}.key", CERT)
    for bad in ('/etc/mok".key', "relative/mok.key", "/etc/$(reboot).key", "/etc/`id`.key", ""):
        with pytest.raises(K.KmodError):
            K.dkms_signing_config(bad, CERT)
    with pytest.raises(K.KmodError, match="certificate"):
        K.dkms_signing_config(KEY, "pkcs11:token=mok")


# --- issue 23: whole records, whole messages, both sides of each boundary -----------------------------------------

def _dkms(module, version, kernel, arch, state, warnings=(), built_for=None, fmt="slash"):
    return dict(module=module, version=version, kernel=kernel, arch=arch, state=state, warnings=list(warnings),
                built_for=built_for, format=fmt)


def test_dkms_status_whole_records():
    assert K.parse_dkms_status(DKMS_WEAK) == [
        _dkms("vboxguest", "4.3.14", "3.10.0-123.20.1.el7.x86_64", "x86_64", "installed", fmt="comma"),
        _dkms("vboxguest", "4.3.14", "3.10.0-123.el7.x86_64", "x86_64", "installed-weak",
              built_for="3.10.0-123.20.1.el7.x86_64", fmt="comma"),
    ]
    assert K.parse_dkms_status("nvidia/535.261.03: added\n") == [_dkms("nvidia", "535.261.03", None, None, "added")]
    # Bytes (a raw command result) are decoded; an installed-weak line without "from <kernel>" has no built_for.
    assert K.parse_dkms_status(b"nvidia, 535.261.03, 6.1.0-30-amd64, x86_64: installed-weak\n") == [
        _dkms("nvidia", "535.261.03", "6.1.0-30-amd64", "x86_64", "installed-weak", fmt="comma")]


@pytest.mark.parametrize("call,what", [
    (K.parse_dkms_status, "dkms status"),
    (K.parse_dkms_version, "dkms --version"),
    (K.parse_sb_state, "mokutil --sb-state output"),
    (K.parse_mok_test_key, "mokutil --test-key output"),
    (lambda v: K.next_boot_kernel([v]), "kernel name"),
    (lambda v: K.headers_packages(v, "Debian", "Debian"), "kernel release"),
    (lambda v: K.dkms_signing_config(v, "/var/lib/dkms/mok.pub"), "key path"),
    (lambda v: K.dkms_signing_config("/var/lib/dkms/mok.key", v), "certificate path"),
])
def test_non_text_input_is_refused_naming_the_input(call, what):
    with pytest.raises(K.KmodError, match=r"^%s must be text \(command output\), got int$" % re.escape(what)):
        call(42)
    # Inside a list ([stdout, stderr]) too.
    with pytest.raises(K.KmodError, match=r"^%s must be text \(command output\), got float$" % re.escape(what)):
        call(["", 1.5])


def test_bytes_output_with_invalid_utf8_is_read_not_refused():
    st = K.parse_sb_state(b"\xffweird\n", 3)
    assert st == dict(secure_boot=None, efi=None, mokutil_missing=False,
                      detail="unrecognised mokutil --sb-state output (rc 3): \ufffdweird")
    assert K.parse_sb_state(b"SecureBoot enabled\n\xfe", 0)["secure_boot"] is True


@pytest.mark.parametrize("rc,shown", [(None, "None"), ("", "None"), ("3", "3"), (0, "0")])
def test_rc_empty_means_unknown(rc, shown):
    assert K.parse_sb_state(None, rc) == dict(secure_boot=None, efi=None, mokutil_missing=False,
                                              detail="unrecognised mokutil --sb-state output (rc %s): no output" % shown)


@pytest.mark.parametrize("rc,shown", [(True, "True"), ("abc", "'abc'"), ([1], r"\[1\]")])
def test_rc_that_is_no_exit_status_is_refused(rc, shown):
    with pytest.raises(K.KmodError, match=r"^rc must be an exit status, got %s$" % shown):
        K.parse_sb_state("SecureBoot enabled", rc)
    with pytest.raises(K.KmodError, match=r"^rc must be an exit status, got %s$" % shown):
        K.parse_mok_test_key("x is already enrolled", rc)


@pytest.mark.parametrize("text,rc,expected", [
    ("SecureBoot enabled\n", 0, dict(secure_boot=True, efi=True, detail="SecureBoot enabled")),
    ("SecureBoot disabled\n", 0, dict(secure_boot=False, efi=True, detail="SecureBoot disabled")),
    ("SecureBoot disabled\nPlatform is in Setup Mode\n", 0,
     dict(secure_boot=False, efi=True, detail="SecureBoot disabled (platform in Setup Mode)")),
    ("SecureBoot enabled\nSecureBoot validation is disabled in shim\n", 0,
     dict(secure_boot=False, efi=True,
          detail="SecureBoot enabled in firmware, validation disabled in shim: module signatures not enforced")),
    ("EFI variables are not supported on this system\n", 1,
     dict(secure_boot=None, efi=False, detail="no EFI variables (legacy BIOS boot): Secure Boot does not apply")),
    ("This system doesn't support Secure Boot\n", 255,
     dict(secure_boot=False, efi=True, detail="the firmware does not support Secure Boot")),
    ("Cannot determine secure boot state.\n", 0,
     dict(secure_boot=None, efi=True, detail="mokutil cannot determine the Secure Boot state")),
    # The detail is the mokutil line that says so, not the first line of the output.
    (["", 'Failed to read "SecureBoot" variable: Permission denied'], 255,
     dict(secure_boot=None, efi=True, detail='Failed to read "SecureBoot" variable: Permission denied')),
    # mokutil missing is read from rc 2 (ansible.builtin.command) or 127 (a shell) only.
    ("Error executing command.", 1,
     dict(secure_boot=None, efi=None, detail="unrecognised mokutil --sb-state output (rc 1): Error executing command.")),
    ("\n  first line  \nsecond line\n", 4,
     dict(secure_boot=None, efi=None, detail="unrecognised mokutil --sb-state output (rc 4): first line")),
])
def test_sb_state_whole_record(text, rc, expected):
    assert K.parse_sb_state(text, rc) == dict(expected, mokutil_missing=False)


def _mok(**kw):
    return dict(dict(enrolled=False, pending=False, blocked=False, in_db=False, error=None, detail=""), **kw)


@pytest.mark.parametrize("text,rc,expected", [
    ("SKIP: /c.der is already enrolled\n", 0, _mok(enrolled=True, detail="/c.der is already enrolled")),
    ("/c.der is already in the built-in trusted keyring\n", 0,
     _mok(enrolled=True, detail="/c.der is already in the built-in trusted keyring")),
    ("/c.der is already in db\n", 0, _mok(enrolled=True, in_db=True, detail="/c.der is already in db")),
    ("/c.der is not enrolled\n", 1, _mok(detail="/c.der is not enrolled")),
    ("/c.der is already in the enrollment request\n", 0,
     _mok(pending=True, detail="/c.der is already in the enrollment request")),
    ("/c.der is blocked in dbx\n", 0, _mok(blocked=True, detail="/c.der is blocked in dbx")),
    ("CA of /c.der is blocked\n", 255, _mok(blocked=True, detail="CA of /c.der is blocked")),
    ("Failed to read /c.der\n", 255, _mok(error="Failed to read /c.der", detail="Failed to read /c.der")),
    ("EFI variables are not supported on this system\n", 1,
     _mok(error="EFI variables are not supported on this system",
          detail="EFI variables are not supported on this system")),
    ("sh: 1: mokutil: not found\n", 127, _mok(error="mokutil is not installed", detail="mokutil is not installed")),
    ("odd\nother\n", 7, _mok(error="unrecognised mokutil --test-key output (rc 7): odd",
                             detail="unrecognised mokutil --test-key output (rc 7): odd")),
    ("", None, _mok(error="unrecognised mokutil --test-key output (rc None): no output",
                    detail="unrecognised mokutil --test-key output (rc None): no output")),
])
def test_mok_test_key_whole_record(text, rc, expected):
    assert K.parse_mok_test_key(text, rc) == expected


def test_dkms_version_inside_other_text_and_none():
    assert K.parse_dkms_version(["", "dkms-3.0.10"]) == (3, 0, 10)
    assert K.parse_dkms_version(None) is None


# --- next boot kernel: boundaries ----------------------------------------------------------------------------------

def test_next_kernel_single_name_paths_and_order_of_skips():
    assert K.next_boot_kernel("/boot/vmlinuz-6.1.0-30-amd64", "6.1.0-28-amd64") == "6.1.0-30-amd64"
    assert K.next_boot_kernel({"name": "vmlinuz-6.1.0-30-amd64"}, None) == "6.1.0-30-amd64"
    # vmlinux- images (e.g. ppc64le) count as kernels too.
    assert K.next_boot_kernel(["/boot/vmlinux-5.14.0-503.14.1.el9_5.ppc64le"], None, "rpm") == "5.14.0-503.14.1.el9_5.ppc64le"
    # A skipped name (rescue image, unreadable version) does not end the search.
    assert K.next_boot_kernel(["vmlinuz-0-rescue-abc", "vmlinuz-6.1.0-30-amd64"], "6.1.0-28-amd64") == "6.1.0-30-amd64"
    assert K.next_boot_kernel(["vmlinuz-custom", "vmlinuz-6.1.0-30-amd64"], "6.1.0-28-amd64") == "6.1.0-30-amd64"
    # A find result without a path or name is no kernel.
    assert K.next_boot_kernel([{}], "6.1.0-28-amd64") == "6.1.0-28-amd64"
    # An empty default is no default.
    assert K.next_boot_kernel(BOOT, None, "deb", "") == "6.1.0-30-amd64"


def test_next_kernel_scheme_decides_the_order():
    # GRUB's "~rc" rewrite makes 6.1.0-rc7 older than 6.1.0 for Debian; rpm order has it newer.
    kernels = ["6.1.0", "6.1.0-rc7-amd64"]
    assert K.next_boot_kernel(kernels, None, "deb") == "6.1.0"
    assert K.next_boot_kernel(kernels, None, "rpm") == "6.1.0-rc7-amd64"
    with pytest.raises(K.KmodError, match=r"^scheme must be deb or rpm, got 'apk'$"):
        K.next_boot_kernel(kernels, None, "apk")


@pytest.mark.parametrize("scheme,kernels", [
    ("deb", ["6.1.0-28-amd64", "6.1.00-28-amd64"]),
    ("rpm", ["5.14.0-503.14.1.el9_5.x86_64", "5.14.0-503.014.1.el9_5.x86_64"]),
])
def test_next_kernel_ties_keep_the_first(scheme, kernels):
    # GRUB's version_find_latest replaces its pick only on version_test_gt (strictly greater).
    assert K.next_boot_kernel(kernels, None, scheme) == kernels[0]
    assert K.next_boot_kernel(kernels[::-1], None, scheme) == kernels[1]


# --- headers packages: boundaries and messages ---------------------------------------------------------------------

@pytest.mark.parametrize("dist,expected", [
    ("Debian", ["linux-headers-6.1.0-28-amd64", "linux-headers-amd64"]),
    ("Ubuntu", ["linux-headers-6.1.0-28-amd64", "linux-headers-amd64"]),
])
def test_headers_packages_from_the_distribution_alone_debian(dist, expected):
    assert K.headers_packages("6.1.0-28-amd64", dist) == expected
    assert K.headers_packages("6.1.0-28-amd64", dist, "") == expected


@pytest.mark.parametrize("dist", ["RedHat", "CentOS", "Rocky", "AlmaLinux", "OracleLinux", "Fedora"])
def test_headers_packages_from_the_distribution_alone_redhat(dist):
    assert K.headers_packages("5.14.0-503.14.1.el9_5.x86_64", dist) == [
        "kernel-devel-5.14.0-503.14.1.el9_5.x86_64", "kernel-devel", "kernel-headers"]


@pytest.mark.parametrize("release,dist,family,message", [
    ("5.14.0-503.14.1.el9_5.x86_64", "SLES", None,
     "kernel headers packages are known for the Debian and RedHat OS families, not None (SLES)"),
    ("6.1.0-28-amd64", None, None,
     "kernel headers packages are known for the Debian and RedHat OS families, not None (unknown distribution)"),
    # The OS family wins over the distribution.
    ("6.1.0-28-amd64", "Debian", "Suse",
     "kernel headers packages are known for the Debian and RedHat OS families, not 'Suse' (Debian)"),
    ("5.14.0-503.14.1.el9_5.x86_64", "Rocky", "Suse",
     "kernel headers packages are known for the Debian and RedHat OS families, not 'Suse' (Rocky)"),
    ("6.1.0", "Debian", "Debian",
     "kernel release '6.1.0' has no flavour suffix (expected e.g. 6.1.0-28-amd64 or 5.15.0-119-generic)"),
    ("6.8.12-4-pve", "Debian", "Debian",
     "kernel 6.8.12-4-pve is a Proxmox VE kernel: its headers are not linux-headers-* packages; give the headers "
     "packages explicitly"),
    ("6.8.12-4-custom-pve", "Debian", "Debian",
     "kernel 6.8.12-4-custom-pve is a Proxmox VE kernel: its headers are not linux-headers-* packages; give the "
     "headers packages explicitly"),
    ("amd64", "Debian", "Debian", "kernel release 'amd64' is not a kernel release (expected e.g. 6.1.0-28-amd64)"),
    (" ", "Debian", "Debian", "kernel release ' ' is not a kernel release (expected e.g. 6.1.0-28-amd64)"),
])
def test_headers_packages_refusals_name_release_and_reason(release, dist, family, message):
    with pytest.raises(K.KmodError, match="^%s$" % re.escape(message)):
        K.headers_packages(release, dist, family)


def test_headers_packages_redhat_variants_and_meta():
    # RHEL 8 real-time kernels carry ".rt<N>" in the release instead of a "+rt" suffix.
    assert K.headers_packages("4.18.0-553.rt7.342.el8_10.x86_64", "RedHat", "RedHat") == [
        "kernel-rt-devel-4.18.0-553.rt7.342.el8_10.x86_64", "kernel-rt-devel", "kernel-headers"]
    # NVIDIA's RHEL 9 command uses kernel-devel-matched; meta=False leaves the metapackage out.
    assert K.headers_packages("5.14.0-503.14.1.el9_5.x86_64", "RedHat", "RedHat", meta="kernel-devel-matched") == [
        "kernel-devel-5.14.0-503.14.1.el9_5.x86_64", "kernel-devel-matched", "kernel-headers"]
    assert K.headers_packages("5.14.0-503.14.1.el9_5.x86_64", "RedHat", "RedHat", meta=False) == [
        "kernel-devel-5.14.0-503.14.1.el9_5.x86_64", "kernel-headers"]
    # A custom CONFIG_LOCALVERSION may carry capitals.
    assert K.headers_packages("5.14.0-503.14.1.el9_5.x86_64.MyBuild", "RedHat", "RedHat")[0] == \
        "kernel-devel-5.14.0-503.14.1.el9_5.x86_64.MyBuild"
    # A package named twice is listed once.
    assert K.headers_packages("6.1.0-28-amd64", "Debian", "Debian", meta="linux-headers-6.1.0-28-amd64") == [
        "linux-headers-6.1.0-28-amd64"]


# --- module check: whole results and messages ----------------------------------------------------------------------

def test_module_check_whole_result_ok_and_unknown_kernel():
    assert K.module_check(UPGRADE_NEW, "/boot/vmlinuz-6.1.0-28-amd64", "nvidia", "535.261.03") == dict(
        ok=True, reason="nvidia/535.261.03 is installed for kernel 6.1.0-28-amd64", kernel="6.1.0-28-amd64",
        module="nvidia", version="535.261.03", entries=[_dkms("nvidia", "535.261.03", "6.1.0-28-amd64", "x86_64", "installed")])
    for unknown in (None, "", {}):
        assert K.module_check(UPGRADE_NEW, unknown, "nvidia", "") == dict(
            ok=False, reason="the kernel the host boots next is unknown, so the nvidia module cannot be checked",
            kernel=None, module="nvidia", version=None,
            entries=[_dkms("nvidia", "535.261.03", "6.1.0-28-amd64", "x86_64", "installed")])
    with pytest.raises(K.KmodError, match=r"^dkms_status must be dkms status text or the list parse_dkms_status returns$"):
        K.module_check([42], "6.1.0-30-amd64")


def test_module_check_reasons_in_full():
    k30 = "6.1.0-30-amd64"
    built = K.module_check("nvidia/535.261.03, 6.1.0-30-amd64, x86_64: built\n", k30, version="535.261.03")
    assert built["reason"] == ("nvidia 535.261.03 module for kernel 6.1.0-30-amd64 is built but not installed "
                               "(dkms: nvidia/535.261.03 built for 6.1.0-30-amd64)")
    # Everything dkms knows of the module, by state; each kernel once.
    status = ("nvidia/535.261.03, 6.1.0-28-amd64, x86_64: installed\n"
              "nvidia/550.163.01, 6.1.0-28-amd64, x86_64: built\n"
              "nvidia, 550.163.01, 6.1.0-29-amd64, x86_64: installed-weak from 6.1.0-28-amd64\n"
              "nvidia/570.86.15: added\nnvidia/575.51.03: added\n"
              "nvidia/470.256.02: broken\nnvidia/418.226.00: broken\n")
    assert K.module_check(status, k30)["reason"] == (
        "no nvidia module for kernel 6.1.0-30-amd64 (dkms: built for 6.1.0-28-amd64, 6.1.0-29-amd64 only; "
        "nvidia/570.86.15, nvidia/575.51.03 added but not built; nvidia/470.256.02, nvidia/418.226.00 broken)")
    assert K.module_check("nvidia/535.261.03, 6.1.0-27-amd64, x86_64: built\n", k30)["reason"] == \
        "no nvidia module for kernel 6.1.0-30-amd64 (dkms: built for 6.1.0-27-amd64 only)"
    assert K.module_check("nvidia/470.256.02: broken\n", k30)["reason"] == \
        "no nvidia module for kernel 6.1.0-30-amd64 (dkms: nvidia/470.256.02 broken)"
    other = K.module_check("nvidia/535.216.03, 6.1.0-30-amd64, x86_64: installed\nnvidia/535.216.03: added\n"
                           "nvidia/550.163.01: added\n", k30, version="535.261.03")
    assert other["reason"] == ("no nvidia 535.261.03 module for kernel 6.1.0-30-amd64 (dkms: only other versions: "
                               "nvidia/535.216.03 on 6.1.0-30-amd64, nvidia/535.216.03, nvidia/550.163.01)")
    # An empty version is no version.
    assert K.module_check("", k30, version="")["reason"] == \
        "no nvidia module for kernel 6.1.0-30-amd64 (dkms: no nvidia module known to dkms)"


def test_module_check_prefers_installed_and_lists_notes_and_weak_source():
    k = "3.10.0-123.el7.x86_64"
    status = ("nvidia, 535.261.03, 3.10.0-123.el7.x86_64, x86_64: installed-weak from 3.10.0-123.20.1.el7.x86_64\n"
              "nvidia, 550.163.01, 3.10.0-123.el7.x86_64, x86_64: installed (original_module exists) "
              "(WARNING! Missing some built modules!)\n")
    assert K.module_check(status, k)["reason"] == (
        "nvidia/550.163.01 is installed for kernel 3.10.0-123.el7.x86_64 (dkms notes: original_module exists; "
        "WARNING! Missing some built modules!)")
    assert K.module_check(DKMS_WEAK, k, "vboxguest")["reason"] == \
        "vboxguest/4.3.14 is installed as weak module from 3.10.0-123.20.1.el7.x86_64 for kernel 3.10.0-123.el7.x86_64"


def test_module_check_several_names_and_unversioned_modules():
    status = "nvidia-open/570.86.15, 6.1.0-30-amd64, x86_64: installed\n"
    ok = K.module_check(status, "6.1.0-30-amd64", ["nvidia-open", "nvidia-current-open"], "570.86.15")
    assert ok["ok"] is True and ok["reason"] == "nvidia-open/570.86.15 is installed for kernel 6.1.0-30-amd64"
    assert K.module_check(status, "6.1.0-31-amd64", ["nvidia-open", "nvidia-current-open"])["reason"] == (
        "no nvidia-open/nvidia-current-open module for kernel 6.1.0-31-amd64 (dkms: built for 6.1.0-30-amd64 only)")
    assert K.module_check(status, "6.1.0-31-amd64", ["amdgpu"])["reason"] == \
        "no amdgpu module for kernel 6.1.0-31-amd64 (dkms: no amdgpu module known to dkms)"
    # Versions that carry no NVIDIA driver version are compared as text.
    amd = K.module_check(DKMS_AMD_DEBIAN13, "6.12.48+deb13-amd64", "amdgpu", " 6.16.6-2238411.24.04 ")
    assert amd["ok"] is True
    assert K.module_check(DKMS_AMD_DEBIAN13, "6.12.48+deb13-amd64", "amdgpu", "6.16.5-2238411.24.04")["ok"] is False


# --- Secure Boot plan: whole plans ---------------------------------------------------------------------------------

HEAD = ("Secure Boot is enabled, so the kernel refuses an unsigned nvidia module and the driver will not load after "
        "the reboot. ")


def _steps(cert, key):
    return ("(1) create the key pair as DKMS does (skip if it exists; dkms >= 3.1: `dkms generate_mok`): openssl req "
            "-new -x509 -nodes -days 36500 -subj \"/CN=DKMS module signing key\" -newkey rsa:2048 -keyout %s -addext "
            "\"extendedKeyUsage=codeSigning\" -outform DER -out %s; (2) queue the certificate for enrolment: mokutil "
            "--import %s (choose a one-time password); (3) reboot and, on the console, in MokManager choose Enroll MOK "
            "> Continue > Yes, enter that password and reboot; (4) set nvidia_driver_mok_signing_key: %s and "
            "nvidia_driver_mok_certificate: %s and run the role again." % (key, cert, cert, key, cert))


def _plan(ok, action, message, warn=False, secure_boot=True):
    return dict(ok=ok, action=action, message=message, warn=warn, secure_boot=secure_boot)


def test_plan_off_unknown_and_bios_in_full():
    assert K.secure_boot_plan(False) == _plan(
        True, "none", "Secure Boot is off (mokutil): the kernel module needs no signature.", secure_boot=False)
    assert K.secure_boot_plan(K.parse_sb_state("SecureBoot disabled\n", 0)) == _plan(
        True, "none", "Secure Boot is off (SecureBoot disabled): the kernel module needs no signature.", secure_boot=False)
    assert K.secure_boot_plan(None) == _plan(True, "none", (
        "Secure Boot state unknown (not checked): the kernel module is not signed. If Secure Boot is on, the kernel "
        "refuses the nvidia module after the reboot; install mokutil to have this checked."), warn=True, secure_boot=None)
    assert K.secure_boot_plan(K.parse_sb_state("\n\nError executing command.", 2))["message"] == (
        "Secure Boot state unknown (mokutil is not installed): the kernel module is not signed. If Secure Boot is on, "
        "the kernel refuses the nvidia module after the reboot; install mokutil to have this checked.")
    assert K.secure_boot_plan(K.parse_sb_state("EFI variables are not supported on this system", 1)) == _plan(
        True, "none", "No EFI variables (legacy BIOS boot): Secure Boot does not apply, nothing is signed.",
        secure_boot=None)
    with pytest.raises(K.KmodError, match=r"^sb_state\.secure_boot must be True, False or None, got 'yes'$"):
        K.secure_boot_plan(dict(secure_boot="yes"))
    with pytest.raises(K.KmodError,
                       match=r"^sb_state must be the result of parse_sb_state, True, False or None, got 'enabled'$"):
        K.secure_boot_plan("enabled")


def test_plan_without_or_with_half_a_key_in_full():
    assert K.secure_boot_plan(True) == _plan(False, "enroll_key", HEAD + (
        "Enrol a Machine Owner Key (MOK) once and let DKMS sign the module with it: "
        + _steps("/var/lib/dkms/mok.pub", "/var/lib/dkms/mok.key")))
    assert K.secure_boot_plan(SB_ON, KEY, " ") == _plan(False, "configure", HEAD + (
        "Set both nvidia_driver_mok_signing_key (private key) and nvidia_driver_mok_certificate (DER certificate); "
        "only the key is set."))
    assert K.secure_boot_plan(SB_ON, None, CERT) == _plan(False, "configure", HEAD + (
        "Set both nvidia_driver_mok_signing_key (private key) and nvidia_driver_mok_certificate (DER certificate); "
        "only the certificate is set."))
    assert K.secure_boot_plan(SB_ON, KEY, CERT, True, None, False) == _plan(False, "configure", HEAD + (
        "The signing key /var/lib/dkms/mok.key does not exist on the host; DKMS would then generate a new key pair "
        "at these paths, overwriting /var/lib/dkms/mok.pub, and sign with a key the firmware does not trust. Put the "
        "enrolled key pair there or fix nvidia_driver_mok_signing_key."))


def test_plan_enrolment_states_in_full():
    assert K.secure_boot_plan(SB_ON, KEY, CERT, None) == _plan(False, "enroll", HEAD + (
        "The enrolment of /var/lib/dkms/mok.pub was not checked (mokutil --test-key /var/lib/dkms/mok.pub)."))
    assert K.secure_boot_plan(SB_ON, KEY, CERT, False) == _plan(False, "enroll", HEAD + (
        "The certificate /var/lib/dkms/mok.pub is not enrolled: mokutil --import /var/lib/dkms/mok.pub (choose a "
        "one-time password), reboot and, on the console, in MokManager choose Enroll MOK > Continue > Yes, enter that "
        "password and reboot; then run the role again."))
    failed = K.parse_mok_test_key("Failed to open /var/lib/dkms/mok.pub", 255)
    assert K.secure_boot_plan(SB_ON, KEY, CERT, failed) == _plan(False, "configure", HEAD + (
        "mokutil cannot test the certificate /var/lib/dkms/mok.pub: Failed to open /var/lib/dkms/mok.pub. "
        "nvidia_driver_mok_certificate must be the DER certificate of the signing key."))
    blocked = K.parse_mok_test_key("/var/lib/dkms/mok.pub is blocked in dbx", 0)
    assert K.secure_boot_plan(SB_ON, KEY, CERT, blocked) == _plan(False, "replace_key", HEAD + (
        "The certificate /var/lib/dkms/mok.pub is blocked (/var/lib/dkms/mok.pub is blocked in dbx): create a new "
        "key pair and enrol it: " + _steps(CERT, KEY)))
    assert K.secure_boot_plan(SB_ON, "/k", "/c", dict(blocked=True))["message"] == HEAD + (
        "The certificate /c is blocked (dbx/MokListX): create a new key pair and enrol it: " + _steps("/c", "/k"))
    pending = K.parse_mok_test_key("/var/lib/dkms/mok.pub is already in the enrollment request", 0)
    assert K.secure_boot_plan(SB_ON, KEY, CERT, pending) == _plan(False, "confirm_enrolment", HEAD + (
        "The certificate /var/lib/dkms/mok.pub is imported but its enrolment is not confirmed yet: reboot and, on the "
        "console, in MokManager choose Enroll MOK > Continue > Yes, enter the password given to mokutil --import and "
        "reboot; then run the role again."))
    with pytest.raises(K.KmodError,
                       match=r"^enrolled must be the result of parse_mok_test_key, True, False or None, got 'yes'$"):
        K.secure_boot_plan(SB_ON, KEY, CERT, "yes")


def test_plan_sign_and_dkms_version_boundary_in_full():
    signs = _plan(True, "sign", "Secure Boot is enabled and /var/lib/dkms/mok.pub is enrolled: DKMS signs the module "
                  "with /var/lib/dkms/mok.key.")
    assert K.secure_boot_plan(SB_ON, KEY, CERT, True, "dkms-3.0.4", True) == signs      # the first that reads conf.d
    assert K.secure_boot_plan(SB_ON, KEY, CERT, True, (3, 0, 4), True) == signs
    assert K.secure_boot_plan(SB_ON, KEY, CERT, True, "", True) == signs
    old = _plan(False, "upgrade_dkms", HEAD + (
        "dkms 3.0.3 reads no /etc/dkms/framework.conf.d (dkms >= 3.0.4 does) and signs only with "
        "/var/lib/shim-signed/mok/MOK.priv: upgrade dkms or enrol and use that key pair."))
    assert K.secure_boot_plan(SB_ON, KEY, CERT, True, "dkms-3.0.3", True) == old
    assert K.secure_boot_plan(SB_ON, KEY, CERT, True, (3, 0, 3), True) == old
    in_db = K.parse_mok_test_key("/var/lib/dkms/mok.pub is already in db", 0)
    assert K.secure_boot_plan(SB_ON, KEY, CERT, in_db, None, True)["message"] == (
        "Secure Boot is enabled and /var/lib/dkms/mok.pub is enrolled (in the firmware db, not MokList: make sure "
        "this kernel accepts db keys for modules): DKMS signs the module with /var/lib/dkms/mok.key.")


def test_dkms_signing_config_whole_text_and_refusals():
    assert K.dkms_signing_config(" /var/lib/dkms/mok.key ", b"/var/lib/dkms/mok.pub") == (
        "# Managed by gpuops.provision (role nvidia_driver): DKMS signs the modules it builds with this Machine\n"
        "# Owner Key, which is enrolled for Secure Boot. Read by dkms >= 3.0.4 from /etc/dkms/framework.conf.d/.\n"
        'mok_signing_key="/var/lib/dkms/mok.key"\n'
        'mok_certificate="/var/lib/dkms/mok.pub"\n')
    with pytest.raises(K.KmodError, match=r"^the MOK signing key path is empty$"):
        K.dkms_signing_config(" ", CERT)
    with pytest.raises(K.KmodError, match=r"^the MOK certificate path is empty$"):
        K.dkms_signing_config(KEY, None)
    with pytest.raises(K.KmodError, match=re.escape(
            "the MOK signing key 'mok.key' must be an absolute path or a pkcs11: URI without quotes, backslashes, "
            "backticks or $ (except ${kernelver})")):
        K.dkms_signing_config("mok.key", CERT)
    with pytest.raises(K.KmodError, match=re.escape(
            "the MOK certificate 'pkcs11:token=mok' must be an absolute path without quotes, backslashes, "
            "backticks or $ (except ${kernelver})")):
        K.dkms_signing_config(KEY, "pkcs11:token=mok")


# --- issue 37 point 2: headers from the packages that carry the running and the next kernel ---------------------------
# dpkg-query -W -f='${Package}\t${Version}\t${db:Status-Abbrev}\t${Depends}\n' output of real hosts' package names:
# Debian (src:linux-signed-amd64), Ubuntu HWE and cloud flavours (src:linux-meta), Proxmox VE 8.

DEBIAN_PKGS = (
    "linux-image-6.1.0-28-amd64\t6.1.119-1\tii \tkmod, linux-base (>= 4.3~), initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool\n"
    "linux-image-6.1.0-30-amd64\t6.1.124-1\tii \tkmod, linux-base (>= 4.3~)\n"
    "linux-image-amd64\t6.1.124-1\tii \tlinux-image-6.1.0-30-amd64 (= 6.1.124-1)\n"
    "linux-image-6.1.0-25-amd64\t6.1.106-3\trc \t\n"
    "linux-image-cloud-amd64\t\tun \t\n")
UBUNTU_HWE = (
    "linux-image-6.8.0-45-generic\t6.8.0-45.45~22.04.1\tii \tlinux-modules-6.8.0-45-generic, linux-base\n"
    "linux-image-generic-hwe-22.04\t6.8.0-45.45~22.04.1\tii \tlinux-image-6.8.0-45-generic, linux-firmware\n"
    "linux-image-virtual-hwe-22.04\t6.8.0-45.45~22.04.1\tii \tlinux-image-6.8.0-45-generic\n")
UBUNTU_AWS = ("linux-image-unsigned-6.8.0-1015-aws\t6.8.0-1015.16\tii \t\n"
              "linux-image-aws\t6.8.0.1015.16\tii \tlinux-image-unsigned-6.8.0-1015-aws | linux-image-6.8.0-1015-aws\n")
PROXMOX = (
    "proxmox-kernel-6.8.12-4-pve-signed\t6.8.12-4\tii \tproxmox-kernel-helper\n"
    "proxmox-kernel-6.8\t6.8.12-4\tii \tproxmox-kernel-6.8.12-4-pve-signed | proxmox-kernel-6.8.12-4-pve\n"
    "proxmox-default-kernel\t1.1.0\tii \tproxmox-kernel-6.8\n"
    "pve-kernel-5.15.158-2-pve\t5.15.158-2\tii \t\n")


def test_parse_kernel_packages_installed_only_with_flat_depends():
    pkgs = K.parse_kernel_packages(DEBIAN_PKGS)
    assert [p["name"] for p in pkgs] == ["linux-image-6.1.0-28-amd64", "linux-image-6.1.0-30-amd64", "linux-image-amd64"]
    assert pkgs[0]["depends"] == ["kmod", "linux-base", "initramfs-tools", "linux-initramfs-tool"]
    assert pkgs[2] == {"name": "linux-image-amd64", "version": "6.1.124-1", "depends": ["linux-image-6.1.0-30-amd64"]}
    assert K.parse_kernel_packages("a\t1\thi \tb:any (>= 1), c\nshort\tline\nd\t1\tiU\n") == [
        {"name": "a", "version": "1", "depends": ["b", "c"]}, {"name": "d", "version": "1", "depends": []}]
    assert K.parse_kernel_packages(None) == []


@pytest.mark.parametrize("pkgs, running, nxt, packages, flavours, warnings, ok", [
    # Debian: the kernel upgrade installed 6.1.0-30, which boots next; headers of both, and the metapackage's twin
    (DEBIAN_PKGS, "6.1.0-28-amd64", "/boot/vmlinuz-6.1.0-30-amd64",
     ["linux-headers-6.1.0-30-amd64", "linux-headers-amd64", "linux-headers-6.1.0-28-amd64"], ["amd64"], 0, True),
    # Ubuntu HWE: the flavour is the metapackage's (generic-hwe-22.04), not a fixed linux-headers-generic
    (UBUNTU_HWE, "6.8.0-45-generic", None,
     ["linux-headers-6.8.0-45-generic", "linux-headers-generic-hwe-22.04", "linux-headers-virtual-hwe-22.04"],
     ["generic-hwe-22.04", "virtual-hwe-22.04"], 0, True),
    # Ubuntu cloud kernel from the unsigned image package
    (UBUNTU_AWS, "6.8.0-1015-aws", "6.8.0-1015-aws", ["linux-headers-6.8.0-1015-aws", "linux-headers-aws"], ["aws"], 0, True),
    # Proxmox VE: proxmox-headers-<release>, the series and the default metapackage
    (PROXMOX, "6.8.12-4-pve", None, ["proxmox-headers-6.8.12-4-pve", "proxmox-headers-6.8"], ["pve"], 0, True),
    (PROXMOX, "5.15.158-2-pve", None, ["pve-headers-5.15.158-2-pve"], ["pve"], 0, True),
    # a container or a custom kernel: the running one is no package (warned), the next one is
    (DEBIAN_PKGS, "6.18.44-fc-v1272", "6.1.0-30-amd64", ["linux-headers-6.1.0-30-amd64", "linux-headers-amd64"],
     ["amd64"], 1, True),
])
def test_kernel_headers_plan(pkgs, running, nxt, packages, flavours, warnings, ok):
    plan = K.kernel_headers_plan(pkgs, running, nxt)
    assert plan["packages"] == packages
    assert plan["flavours"] == flavours
    assert len(plan["warnings"]) == warnings and plan["ok"] is ok and plan["reason"] == ""


def test_kernel_headers_plan_next_kernel_without_package_fails_naming_it():
    plan = K.kernel_headers_plan(K.parse_kernel_packages(DEBIAN_PKGS), "6.1.0-30-amd64", "/boot/vmlinuz-6.5.0-custom")
    assert plan["ok"] is False and plan["packages"] == ["linux-headers-6.1.0-30-amd64", "linux-headers-amd64"]
    assert plan["reason"] == ("kernel 6.5.0-custom (the next one) comes from no installed linux-image/proxmox-kernel "
                              "package, so its headers package is unknown: set nvidia_driver_kernel_headers_packages")
    assert plan["kernels"]["6.5.0-custom"] == {"image": None, "headers": None, "role": "next"}
    assert plan["kernels"]["6.1.0-30-amd64"] == {"image": "linux-image-6.1.0-30-amd64",
                                                 "headers": "linux-headers-6.1.0-30-amd64", "role": "running"}
    running = K.kernel_headers_plan("", "6.18.44-fc-v1272")
    assert running["ok"] is False and running["warnings"] == [] and "6.18.44-fc-v1272 (the next one)" in running["reason"]
    assert K.kernel_headers_plan("", "", None) == {"packages": [], "kernels": {}, "flavours": [], "warnings": [],
                                                   "ok": True, "reason": ""}
    warned = K.kernel_headers_plan(DEBIAN_PKGS, "6.18.44-fc-v1272", "6.1.0-30-amd64")["warnings"]
    assert warned == ["kernel 6.18.44-fc-v1272 (the running one) comes from no installed linux-image/proxmox-kernel "
                      "package, so its headers package is unknown; the module is built for the kernel that boots next"]
