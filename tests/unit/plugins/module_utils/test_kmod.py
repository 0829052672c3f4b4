# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/_kmod.py: dkms status, mokutil, the next boot kernel, headers packages, the
module check and the Secure Boot plan (issue 22 points 3 and 9).

Where each output sample comes from is said next to it; upstream formats are quoted from the sources named in
_kmod.py (github:dell/dkms dkms.in do_status(), run_test.sh; github:lcp/mokutil src/mokutil.c).
"""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils import _kmod as K

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
