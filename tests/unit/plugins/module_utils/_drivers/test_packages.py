# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kernel-module flavour, package plans per platform, the driver family and deb822 sources (issue 22 points 1, 2, 4, 6).

Facts under test, with their sources (also in plugins/module_utils/_drivers/packages.py):
- open modules are NVIDIA's default from R560; Grace Hopper and Blackwell need them; pre-Turing GPUs cannot use them
  (NVIDIA Driver Installation Guide "Kernel Modules"; NVIDIA/open-gpu-kernel-modules README "Compatible GPUs").
- Debian's nvidia-driver Depends "nvidia-kernel-dkms (= v) | nvidia-kernel-<v> | nvidia-open-kernel-<v>"
  (apt-cache show nvidia-driver, bookworm), so naming the module package picks the flavour.
- apt refuses conflicting Signed-By values for one source (apt-pkg/sourcelist.cc).
"""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.plugin_utils._role_filters import driver as F
from ansible_collections.gpuops.provision.plugins.module_utils._drivers import apt_sources as S
from ansible_collections.gpuops.provision.plugins.module_utils._drivers import fleet as D
from ansible_collections.gpuops.provision.plugins.module_utils._drivers import packages as P
from ansible_collections.gpuops.provision.plugins.module_utils._drivers import repo as R

H100, GH200, B200, V100, T4 = "0x2330", "0x2342", "0x2901", "0x1db4", "0x1eb8"


@pytest.mark.parametrize("requested, branch, gpus, flavour", [
    ("auto", "R535", [H100], "proprietary"),       # NVIDIA's default before R560
    ("auto", "R560", [H100], "open"),              # ... and from R560
    ("auto", "R580", [], "open"),
    ("auto", "R535", [GH200], "open"),             # Grace Hopper: open only, whatever the branch default
    ("auto", "R570", [B200], "open"),              # Blackwell: open only
    ("auto", "R580", [V100], "proprietary"),       # Volta is older than Turing
    ("open", "R535", [T4], "open"),                # Turing runs the open modules
    ("proprietary", "R580", [H100], "proprietary"),
    ("auto", "R580", [{"vendor": "0x10de", "device": "0x2330"}, {"vendor": "0x8086", "device": "0x0001"}], "open"),
])
def test_flavour(requested, branch, gpus, flavour):
    assert P.kernel_flavour(requested, branch, gpus)["flavour"] == flavour


@pytest.mark.parametrize("requested, branch, gpus, words", [
    ("proprietary", "R580", [B200], ["0x2901", "open kernel modules only"]),
    ("proprietary", "R535", [GH200], ["0x2342", "open kernel modules only"]),
    ("open", "R580", [V100], ["0x1db4", "older than Turing"]),
    ("auto", "R580", [B200, V100], ["0x2901", "0x1db4", "cannot load both"]),
    ("open", "R470", [], ["R470 has no open kernel modules"]),
    ("closed", "R580", [], ["auto, open or proprietary"]),
])
def test_flavour_refused(requested, branch, gpus, words):
    with pytest.raises(P.PackageError) as err:
        P.kernel_flavour(requested, branch, gpus)
    for word in words:
        assert word in str(err.value)


def test_flavour_filter_error_names_devices():
    with pytest.raises(AnsibleFilterError, match="0x2901"):
        F.filters()["driver_flavour"]([B200], "proprietary", "R580")


@pytest.mark.parametrize("args, install, extra", [
    (("Debian", "Debian", "12", "distribution", "proprietary", "535"), ["nvidia-driver", "nvidia-kernel-dkms"], {}),
    (("Debian", "Debian", "12", "distribution", "open", "535"), ["nvidia-driver", "nvidia-open-kernel-dkms"], {}),
    (("Ubuntu", "Debian", "22", "distribution", "open", "535"), ["nvidia-headless-535-server-open", "nvidia-utils-535-server"], {}),
    (("Ubuntu", "Debian", "22", "distribution", "proprietary", "550"), ["nvidia-headless-550-server", "nvidia-utils-550-server"], {}),
    (("Debian", "Debian", "12", "cuda", "proprietary", "535", "535.261.03"), ["cuda-drivers"], {"pinning_packages": []}),
    (("Debian", "Debian", "12", "cuda", "open", "580", "580.82.07"), ["nvidia-open"],
     {"pinning_packages": ["nvidia-driver-pinning-580.82.07"]}),
    (("Ubuntu", "Debian", "24", "cuda", "open", "580", "580.82.07"), ["nvidia-open-580"], {}),   # suffixed up to 580
    (("Ubuntu", "Debian", "24", "cuda", "proprietary", "590", "590.44.01"), ["cuda-drivers"], {}),  # unsuffixed from 590
    (("Rocky", "RedHat", "9", "cuda", "open", "580"), ["nvidia-open"],
     {"module_stream": "nvidia-driver:580-open", "extra_repos": ["epel", "crb"]}),
    (("RedHat", "RedHat", "8", "cuda", "proprietary", "535"), ["cuda-drivers"],
     {"module_stream": "nvidia-driver:535-dkms", "extra_repos": ["epel", "powertools"]}),
    (("Rocky", "RedHat", "10", "cuda", "open", "580"), ["nvidia-open"],
     {"module_stream": None, "version_lock": ["*nvidia*580*"]}),           # RHEL 10: no module streams
])
def test_package_plan(args, install, extra):
    plan = P.package_plan(*args, persistence=False)
    assert plan["install"] == install
    for key, value in extra.items():
        assert plan[key] == value


def test_persistenced_is_named_where_recommends_are_off():
    assert "nvidia-persistenced" in P.package_plan("Debian", "Debian", "12", "distribution", "open", "535")["install"]
    assert "nvidia-persistenced" not in P.package_plan("Debian", "Debian", "12", "distribution", "open", "535",
                                                       persistence=False)["install"]


def test_rhel_distribution_source_refused():
    with pytest.raises(P.PackageError, match="source cuda"):
        P.package_plan("Rocky", "RedHat", "9", "distribution", "open", "580")


# Ubuntu's branch-suffixed names and the vGPU guest package are driver packages (point 6).
@pytest.mark.parametrize("name", ["nvidia-headless-535-server", "nvidia-utils-535-server", "nvidia-driver-580-open",
                                  "nvidia-linux-grid-535", "nvidia-open", "cuda-drivers-580", "libnvidia-compute-535",
                                  "nvidia-dkms-580-open", "kmod-nvidia-open-dkms"])
def test_driver_package_names(name):
    assert P.driver_package_rank(name) is not None


def test_family_leaves_out_what_versions_on_its_own():
    installed = {"cuda-drivers": "535.261.03-1", "nvidia-driver": "535.261.03-0ubuntu1", "nvidia-container-toolkit": "1.17.8-1",
                 "nvidia-driver-pinning-580.82.07": "580.82.07-1", "nvidia-persistenced": "535.171.04-1~deb12u1",
                 "firmware-nvidia-gsp": "535.261.03-0ubuntu1", "libcuda1": "535.216.03-2~bpo12+1", "bash": "5.2.15-2"}
    assert P.family_members(installed, "535.261.03") == {
        "cuda-drivers": "535.261.03-1", "nvidia-driver": "535.261.03-0ubuntu1", "firmware-nvidia-gsp": "535.261.03-0ubuntu1"}


def test_apt_pin_covers_every_revision():
    assert F.filters()["driver_apt_pin"]("535.261.03-1") == "535.261.03-*"


def apt(**versions):
    return {k.replace("_", "-"): [dict(version=v, source="apt")] for k, v in versions.items()}


def test_host_state_sees_the_module_moved_under_the_metapackage():
    """Point 2: cuda-drivers on the pin while nvidia-driver (pulled in with >=) moved to 580 is not on the pin."""
    facts = apt(cuda_drivers="535.261.03-1", cuda_drivers_535="535.261.03-1", nvidia_driver="580.95.05-0ubuntu1",
                nvidia_kernel_dkms="580.95.05-0ubuntu1")
    state = F.driver_host_state(facts, ["cuda-drivers"], None, "535.261.03-1")
    assert state["installed_version"] == "535.261.03-1"
    assert state["on_pin"] is False
    assert state["mixed"] is True
    assert state["off_driver"] == ["nvidia-driver", "nvidia-kernel-dkms"]


def test_host_state_on_pin_with_family_at_other_revisions():
    facts = apt(cuda_drivers="535.261.03-1", nvidia_driver="535.261.03-0ubuntu1", nvidia_kernel_dkms="535.261.03-0ubuntu1")
    state = F.driver_host_state(facts, ["cuda-drivers"], None, "535.261.03")
    assert state["on_pin"] is True and state["mixed"] is False
    assert set(state["family"]) == {"cuda-drivers", "nvidia-driver", "nvidia-kernel-dkms"}


@pytest.mark.parametrize("facts, package, driver", [
    (apt(nvidia_linux_grid_535="535.261.04"), "nvidia-linux-grid-535", "535.261.04"),
    (apt(nvidia_headless_535_server="535.261.03-0ubuntu0.22.04.1", nvidia_utils_535_server="535.261.03-0ubuntu0.22.04.1"),
     "nvidia-headless-535-server", "535.261.03"),
])
def test_host_state_finds_driver_without_names(facts, package, driver):
    """Point 6: the gate's facts know Ubuntu's and the vGPU guest's package names (no 'no driver package')."""
    state = F.driver_host_state(facts, None, None, None)
    assert state["package"] == package
    assert state["driver_version"] == driver


def test_package_file_identity():
    ident = P.package_file_identity("/tmp/x/nvidia-linux-grid-535_535.261.04_amd64.deb", "535.261.04")
    assert ident == dict(name="nvidia-linux-grid-535", version="535.261.04", arch="amd64",
                         file="nvidia-linux-grid-535_535.261.04_amd64.deb", format="deb")
    with pytest.raises(P.PackageError, match="not the requested 535.261.03"):
        P.package_file_identity("nvidia-linux-grid-535_535.261.04_amd64.deb", "535.261.03")
    with pytest.raises(P.PackageError, match="not a package file name"):
        P.package_file_identity("NVIDIA-Linux-x86_64-535.261.04-grid.run", "535.261.04")


@pytest.mark.parametrize("path, driver, ident", [
    # NVIDIA's vGPU guest driver for the RHEL family (rpm's %_rpmfilename: NAME-VERSION-RELEASE.ARCH.rpm).
    ("files/nvidia-linux-grid-570-570.133.20-1.x86_64.rpm", "570.133.20",
     dict(name="nvidia-linux-grid-570", version="570.133.20-1", arch="x86_64", file="nvidia-linux-grid-570-570.133.20-1.x86_64.rpm",
          format="rpm")),
    ("C:\\dl\\nvidia-linux-grid-535-535.261.04-1.el9.aarch64.rpm", "3:535.261.04-1.el9",
     dict(name="nvidia-linux-grid-535", version="535.261.04-1.el9", arch="aarch64",
          file="nvidia-linux-grid-535-535.261.04-1.el9.aarch64.rpm", format="rpm")),
    ("kmod-nvidia-open-dkms-580.82.07-1.el9.x86_64.rpm", "580.82.07",
     dict(name="kmod-nvidia-open-dkms", version="580.82.07-1.el9", arch="x86_64",
          file="kmod-nvidia-open-dkms-580.82.07-1.el9.x86_64.rpm", format="rpm")),
])
def test_package_file_identity_of_an_rpm(path, driver, ident):
    """Point 10(c): the package-file path takes NVIDIA's guest RPM on the RHEL family, as its defaults promise."""
    assert P.package_file_identity(path, driver) == ident


@pytest.mark.parametrize("args, extra", [
    (("Rocky", "RedHat", "9.6"), ["epel", "crb"]),
    (("AlmaLinux", "RedHat", "8"), ["epel", "powertools"]),
    (("Debian", "Debian", "12"), []),
    (("Ubuntu", "Debian", "24.04"), []),
])
def test_package_plan_of_a_package_file(args, extra):
    """Point 10(c): a package file is the driver: nothing from a repository, whatever the source says elsewhere (the RHEL
    family is no longer refused for source 'distribution'); its dependency dkms still needs EPEL and CRB there."""
    plan = P.package_plan(*args, "file", "open", "R535", "535.261.04", True)
    assert plan == dict(platform=P.platform_key(args[0], args[1]), flavour="open", branch=535, module_stream=None,
                        pinning_packages=[], version_lock=[], extra_repos=extra, module_switch=False, builds_module=False,
                        install=[])


STOCK = {"/etc/apt/sources.list.d/debian.sources": (
    "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\n"
    "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
    "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\n"
    "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")}
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


def test_sources_agree_with_stock_deb822():
    """Point 4: beside the stock debian.sources, our suites carry its Signed-By (apt refuses a mismatch)."""
    out = S.agreeing_sources(STOCK, "http://deb.debian.org/debian/", ["bookworm", "bookworm-updates", "bookworm-backports"],
                             ["main", "contrib", "non-free"])
    assert out["signed_by"] == {"bookworm": KEYRING, "bookworm-updates": KEYRING, "bookworm-backports": KEYRING}
    assert out["text"].count("Signed-By: %s" % KEYRING) == 1
    assert "Suites: bookworm bookworm-updates bookworm-backports" in out["text"]


def test_sources_one_line_without_signed_by():
    out = S.agreeing_sources({"/etc/apt/sources.list": "deb http://deb.debian.org/debian bookworm main # stock\n"},
                             "http://deb.debian.org/debian", ["bookworm"], ["main", "contrib"])
    assert "Signed-By" not in out["text"]
    out = S.agreeing_sources({"/etc/apt/sources.list": "deb [arch=amd64 signed-by=/k.gpg] http://deb.debian.org/debian bookworm main\n"},
                             "http://deb.debian.org/debian", ["bookworm"], ["main"])
    assert out["signed_by"] == {"bookworm": "/k.gpg"}


def test_sources_conflict_refused_with_both_named():
    with pytest.raises(S.SourcesError) as err:
        S.agreeing_sources(STOCK, "http://deb.debian.org/debian", ["bookworm"], ["main"], signed_by="/etc/apt/keyrings/x.gpg")
    assert "debian.sources" in str(err.value) and "/etc/apt/keyrings/x.gpg" in str(err.value) and KEYRING in str(err.value)


def test_sources_ignore_disabled_and_other_uris():
    files = {"/etc/apt/sources.list.d/old.sources": "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\n"
             "Components: main\nEnabled: no\nSigned-By: /old.gpg\n",
             "/etc/apt/sources.list.d/mirror.list": "deb [signed-by=/m.gpg] http://mirror.example/debian bookworm main\n"}
    assert S.agreeing_sources(files, "http://deb.debian.org/debian", ["bookworm"], ["main"])["signed_by"] == {"bookworm": ""}


# --- issue 23: every field of the records, both sides of each boundary, the whole messages ---------------------------

@pytest.mark.parametrize("device, cls", [
    (0x1DFF, "pre-turing"), (0x1E00, "any"),          # Turing starts at 0x1E00
    (0x28FF, "any"), (0x2900, "open-only"),           # Blackwell starts at 0x2900
    (0x2341, "any"), (0x2342, "open-only"), (0x2343, "any"),   # GH200 alone among the Hopper ids
])
def test_architecture_class_boundaries(device, cls):
    assert P.architecture_class(device) == cls


@pytest.mark.parametrize("gpu", [0x1DB4, "0x1db4", "1db4", "0X1DB4", " 10DE:1DB4 ", "10de:0x1db4",
                                 {"vendor": "0x10de", "device": "0x1db4"}, {"vendor": "10de", "device": 0x1DB4},
                                 {"vendor": "", "device": "1db4"}, {"device": "1db4"}, {"vendor": 0x10DE, "device": "1db4"},
                                 {"vendor": " 0x10DE ", "device": "1db4"}])
def test_device_id_forms(gpu):
    # V100 (0x1db4) in every form the role and iommu_info give; an int vendor is a number, not hex digits
    assert P.kernel_flavour("auto", "R580", [gpu])["pre_turing"] == ["0x1db4"]


@pytest.mark.parametrize("gpu", ["8086:1db4", {"vendor": "0x8086", "device": "0x1db4"}, {"vendor": "1002", "device": "1db4"},
                                 {"vendor": 0x8086, "device": "1db4"}])
def test_other_vendors_are_left_out(gpu):
    # 0x1db4 would be a pre-Turing NVIDIA GPU; from another vendor it says nothing about the NVIDIA driver
    assert P.kernel_flavour("open", "R580", [gpu])["pre_turing"] == []


@pytest.mark.parametrize("gpu, shown", [("zz", "'zz'"), ("0x12345", "'0x12345'"), (True, "True"), (None, "None"), ("", "''"),
                                        ("10de:", "'10de:'"), ("10de:23:30", "'10de:23:30'"),
                                        ({"vendor": "0x10de", "device": "0xgg"}, "'0xgg'")])
def test_bad_device_id_refused(gpu, shown):
    with pytest.raises(P.PackageError, match=r"^%s is not a PCI device id \(0x2330, 10de:2330\)$" % shown.replace("(", r"\(")):
        P.kernel_flavour("auto", "R580", [gpu])


@pytest.mark.parametrize("gpu, message", [
    ("pci:2330", "'pci:2330' is not a PCI vendor:device id (0x2330, 10de:2330)"),
    (":2330", "':2330' is not a PCI vendor:device id (0x2330, 10de:2330)"),
    ({"vendor": "nvidia", "device": "2330"}, "'nvidia' is not a PCI vendor id (0x2330, 10de:2330)"),
])
def test_bad_vendor_id_refused(gpu, message):
    """A malformed vendor is the user's error like a malformed device (it was a bare int() ValueError the filter let through)."""
    with pytest.raises(P.PackageError) as err:
        P.kernel_flavour("auto", "R580", [gpu])
    assert str(err.value) == message
    with pytest.raises(AnsibleFilterError, match="is not a PCI vendor"):
        F.filters()["driver_flavour"]([gpu], "auto", "R580")


def test_flavour_record_for_open_only_gpus():
    assert P.kernel_flavour(" AUTO ", 535, [B200, GH200, 0x2901, H100]) == dict(
        open_only=["0x2342", "0x2901"], pre_turing=[], branch=535, requested="auto", flavour="open",
        reason="GPUs 0x2342, 0x2901 need the open kernel modules")


def test_flavour_record_for_pre_turing_gpus():
    assert P.kernel_flavour(None, "R580", [V100, "0x1b38", T4]) == dict(
        open_only=[], pre_turing=["0x1b38", "0x1db4"], branch=580, requested="auto", flavour="proprietary",
        reason="GPUs 0x1b38, 0x1db4 are older than Turing")
    assert P.kernel_flavour("proprietary", "R580", [V100])["reason"] == "GPUs 0x1db4 are older than Turing"


@pytest.mark.parametrize("requested, branch, flavour, reason", [
    ("auto", 559, "proprietary", "NVIDIA's default before R560"),
    ("", 560, "open", "NVIDIA's default from R560"),
    ("Open", 515, "open", "requested"),
    ("PROPRIETARY", 580, "proprietary", "requested"),
])
def test_flavour_record_without_gpu_constraints(requested, branch, flavour, reason):
    assert P.kernel_flavour(requested, branch, None) == dict(open_only=[], pre_turing=[], branch=branch,
                                                             requested=(requested or "auto").lower(), flavour=flavour, reason=reason)


@pytest.mark.parametrize("requested, branch, gpus, message", [
    ("open", 514, (), "R514 has no open kernel modules (they start with R515)"),
    ("auto", 514, [GH200, B200], "GPUs 0x2342, 0x2901 need the open kernel modules, which R514 does not have"),
    ("proprietary", 580, [B200, GH200], "GPUs 0x2342, 0x2901 (Grace Hopper or Blackwell) are supported with the open kernel "
                                        "modules only; set the flavour to open or auto"),
    ("open", 580, [V100, "0x1b38"], "GPUs 0x1b38, 0x1db4 are older than Turing; the open kernel modules do not support "
                                    "them, use proprietary"),
    ("auto", 580, [B200, GH200, V100, "0x1b38"], "GPUs 0x2342, 0x2901 need the open kernel modules and GPUs 0x1b38, 0x1db4 "
                                                 "the proprietary ones; one host cannot load both"),
    ("closed", 580, (), "flavour must be auto, open or proprietary, not 'closed'"),
])
def test_flavour_refused_whole_message(requested, branch, gpus, message):
    with pytest.raises(P.PackageError) as err:
        P.kernel_flavour(requested, branch, gpus)
    assert str(err.value) == message


def test_open_only_gpus_from_the_first_open_branch():
    assert P.kernel_flavour("auto", 515, [GH200])["flavour"] == "open"


@pytest.mark.parametrize("distribution, family, key", [
    ("Ubuntu", "Debian", "ubuntu"), (" ubuntu ", None, "ubuntu"), ("Debian", None, "debian"), ("Linuxmint", " DEBIAN ", "debian"),
    ("Rocky", "RedHat", "redhat"), ("AlmaLinux", "redhat", "redhat"),
])
def test_platform_key(distribution, family, key):
    assert P.platform_key(distribution, family) == key


@pytest.mark.parametrize("distribution, family, shown", [("Archlinux", "Archlinux", "Archlinux (Archlinux)"), (None, None, "? (?)"),
                                                         ("", "Suse", "? (Suse)"), ("SLES", "", "SLES (?)")])
def test_platform_key_refused(distribution, family, shown):
    with pytest.raises(P.PackageError) as err:
        P.platform_key(distribution, family)
    assert str(err.value) == "no NVIDIA driver packaging known for %s" % shown


def _plan(platform, flavour, branch, install, **extra):
    return dict(dict(platform=platform, flavour=flavour, branch=branch, module_stream=None, pinning_packages=[], version_lock=[], builds_module=True,
                     extra_repos=[], module_switch=False, install=install), **extra)


@pytest.mark.parametrize("args, kwargs, plan", [
    (("Debian", "Debian", "12", "distribution", "open", "R535"), {},
     _plan("debian", "open", 535, ["nvidia-driver", "nvidia-open-kernel-dkms", "nvidia-persistenced"])),
    (("Ubuntu", "Debian", "22.04", " distribution ", "proprietary", 550), {},
     _plan("ubuntu", "proprietary", 550, ["nvidia-headless-550-server", "nvidia-utils-550-server", "nvidia-persistenced"])),
    (("Debian", "Debian", "12", "cuda", "open", "580"), {},       # no driver version: no pinning package
     _plan("debian", "open", 580, ["nvidia-open", "nvidia-persistenced"])),
    (("Debian", "Debian", "12", "cuda", "proprietary", "579", "579.10.01"), {"persistence": False},
     _plan("debian", "proprietary", 579, ["cuda-drivers"])),      # pinning packages start with 580
    (("Debian", "Debian", "12", "cuda", "proprietary", "580", "580.82.07"), {"persistence": False},
     _plan("debian", "proprietary", 580, ["cuda-drivers"], pinning_packages=["nvidia-driver-pinning-580.82.07"])),
    (("Ubuntu", "Debian", "24.04", "cuda", "proprietary", "589", "589.01.02"), {"persistence": False},
     _plan("ubuntu", "proprietary", 589, ["cuda-drivers-589"], pinning_packages=["nvidia-driver-pinning-589.01.02"])),
    (("Ubuntu", "Debian", "24.04", "cuda", "open", "590", "590.44.01"), {"persistence": False},
     _plan("ubuntu", "open", 590, ["nvidia-open"], pinning_packages=["nvidia-driver-pinning-590.44.01"])),
    (("Rocky", "RedHat", "9.4", "cuda", "proprietary", "R535", "535.261.03"), {},   # no persistenced, no pinning package
     _plan("redhat", "proprietary", 535, ["cuda-drivers"], module_stream="nvidia-driver:535-dkms", version_lock=["*nvidia*535*"],
           extra_repos=["epel", "crb"])),
    (("AlmaLinux", "RedHat", "8", "cuda", "open", "580"), {},
     _plan("redhat", "open", 580, ["nvidia-open"], module_stream="nvidia-driver:580-open", version_lock=["*nvidia*580*"],
           extra_repos=["epel", "powertools"])),
    (("Rocky", "RedHat", "10.0", "cuda", "proprietary", "580"), {},
     _plan("redhat", "proprietary", 580, ["cuda-drivers"], version_lock=["*nvidia*580*"], extra_repos=["epel", "crb"])),
    (("Rocky", "RedHat", "9", "cuda", "open", "580"), {},
     _plan("redhat", "open", 580, ["nvidia-open"], module_stream="nvidia-driver:580-open", version_lock=["*nvidia*580*"],
           extra_repos=["epel", "crb"])),
    (("Rocky", "RedHat", None, "cuda", "open", "580"), {},       # unknown major version: treated as before RHEL 10
     _plan("redhat", "open", 580, ["nvidia-open"], module_stream="nvidia-driver:580-open", version_lock=["*nvidia*580*"],
           extra_repos=["epel", "crb"])),
    (("Rocky", "RedHat", "8.10.1", "cuda", "open", "580"), {},   # a full version is read by its major number
     _plan("redhat", "open", 580, ["nvidia-open"], module_stream="nvidia-driver:580-open", version_lock=["*nvidia*580*"],
           extra_repos=["epel", "powertools"])),
    (("Rocky", "RedHat", "", "cuda", "open", "580"), {},
     _plan("redhat", "open", 580, ["nvidia-open"], module_stream="nvidia-driver:580-open", version_lock=["*nvidia*580*"],
           extra_repos=["epel", "crb"])),
])
def test_package_plan_whole_record(args, kwargs, plan):
    assert P.package_plan(*args, **kwargs) == plan


@pytest.mark.parametrize("args, message", [
    (("Debian", "Debian", "12", "distribution", "auto", "580"), "flavour must be open or proprietary, not 'auto'"),
    (("Debian", "Debian", "12", "ppa", "open", "580"), "source must be distribution, cuda or file, not 'ppa'"),
    (("Debian", "Debian", "12", None, "open", "580"), "source must be distribution, cuda or file, not ''"),
    (("Rocky", "RedHat", "9", "distribution", "open", "580"), "the RHEL family gets NVIDIA drivers from NVIDIA's CUDA repository "
                                                              "(source cuda), not from the distribution"),
    (("Gentoo", "Gentoo", "1", "cuda", "open", "580"), "no NVIDIA driver packaging known for Gentoo (Gentoo)"),
])
def test_package_plan_refused_whole_message(args, message):
    with pytest.raises(P.PackageError) as err:
        P.package_plan(*args)
    assert str(err.value) == message


def test_driver_package_ranks_follow_the_pattern_order():
    names = ["nvidia-linux-grid-535", "nvidia-driver", "nvidia-open-580", "cuda-drivers-535", "nvidia-driver-535-server-open",
             "nvidia-headless-535-server", "nvidia-headless-no-dkms-535-server-open", "nvidia-utils-535-server", "nvidia-kernel-dkms",
             "nvidia-open-kernel-dkms", "nvidia-kernel-open-dkms", "nvidia-dkms-535-server-open", "kmod-nvidia-latest-dkms",
             "nvidia-driver-cuda", "nvidia-driver-libs", "libnvidia-compute-535-server", "nvidia-smi", "libnvidia-ml1", "libcuda1"]
    assert [P.driver_package_rank(n) for n in names] == list(range(len(P.DRIVER_PACKAGE_PATTERNS)))
    assert [P.driver_package_rank(n) for n in ("nvidia-open", "cuda-drivers", "libnvidia-ml", "libcuda")] == [2, 3, 17, 18]


@pytest.mark.parametrize("name", ["nvidia-driver-pinning-580", "xnvidia-driver", "nvidia-driver-extra", "nvidia-container-toolkit",
                                  "nvidia-persistenced", "libcuda1-dbg", "nvidia-utils", "bash", "NVIDIA-driver"])
def test_not_driver_packages(name):
    assert P.driver_package_rank(name) is None


def test_driver_packages_in_order_most_telling_first():
    installed = {"libcuda1": "1", "nvidia-smi": "1", "bash": "1", "nvidia-driver": "1", "nvidia-linux-grid-535": "1",
                 "cuda-drivers-535": "1", "cuda-drivers": "1", "nvidia-container-toolkit": "1"}
    assert P.driver_packages_in(installed) == ["nvidia-linux-grid-535", "nvidia-driver", "cuda-drivers", "cuda-drivers-535",
                                               "nvidia-smi", "libcuda1"]
    assert P.driver_packages_in({}) == []


@pytest.mark.parametrize("name, member", [
    ("nvidia-kernel-common-535", True), ("libnvidia-gl-535", True), ("libcuda1", True), ("libnvcuvid1", True),
    ("libnvoptix1", True), ("libegl-nvidia0", True), ("libgles-nvidia2", True), ("libgl1-nvidia-glvnd-glx", True),
    ("libglx-nvidia0", True), ("xserver-xorg-video-nvidia", True), ("firmware-nvidia-gsp", True), ("cuda-drivers-fabricmanager-535", True),
    ("libxnvctrl0", True), ("libnvsdm-580", True), ("kmod-nvidia-open-dkms", True), ("xorg-x11-nvidia", True),
    ("nvidia-container-toolkit", False), ("libnvidia-container1", False), ("nvidia-driver-pinning-580.82.07", False),
    ("nvidia-fabricmanager-535", False), ("nvidia-mig-manager", False), ("nvidia-persistenced", False),
    ("cuda-toolkit-12-8", False), ("bash", False), ("xnvidia-foo", False),
])
def test_family_package(name, member):
    assert P.is_family_package(name) is member


def test_family_members_skip_unversioned_and_foreign_versions():
    installed = {"nvidia-driver": "535.261.03-1", "libnvidia-ml1": "", "nvidia-smi": None, "libnvidia-common": "1.2-1",
                 "libcuda1": "1:535.261.03-0ubuntu1", "nvidia-utils-535": "535.261.04-1", "bash": "535.261.03-1",
                 "nvidia-persistenced": "535.261.03-1"}
    assert P.family_members(installed, "535.261.03") == {"libcuda1": "1:535.261.03-0ubuntu1", "nvidia-driver": "535.261.03-1"}
    assert P.family_members(None, "535.261.03") == {}


def test_apt_pin_is_the_driver_version_with_any_revision():
    assert P.apt_version_pin(" 580.82.07 ") == "580.82.07-*"


@pytest.mark.parametrize("path, driver, ident", [
    ("C:\\dl\\nvidia-linux-grid-580_580.82.07-1_arm64.deb", "580.82.07",
     dict(name="nvidia-linux-grid-580", version="580.82.07-1", arch="arm64", file="nvidia-linux-grid-580_580.82.07-1_arm64.deb",
          format="deb")),
    ("nvidia-driver_535.261.03-0ubuntu1_amd64.deb", "535.261.03-1",
     dict(name="nvidia-driver", version="535.261.03-0ubuntu1", arch="amd64", file="nvidia-driver_535.261.03-0ubuntu1_amd64.deb",
          format="deb")),
])
def test_package_file_identity_record(path, driver, ident):
    assert P.package_file_identity(path, driver) == ident


@pytest.mark.parametrize("path, message", [
    ("/dl/nvidia-tools_1.0-1_amd64.deb", "nvidia-tools_1.0-1_amd64.deb: version 1.0-1 carries no NVIDIA driver version"),
    ("/dl/nvidia-linux-grid-535_535.261.04_amd64.deb", "nvidia-linux-grid-535_535.261.04_amd64.deb is driver 535.261.04, "
                                                       "not the requested 535.261.03"),
    (None, "'' is not a package file name (Debian <name>_<version>_<arch>.deb or RPM <name>-<version>-<release>.<arch>.rpm)"),
    ("/dl/Nvidia_535.261.03_amd64.deb", "'Nvidia_535.261.03_amd64.deb' is not a package file name (Debian <name>_<version>_<arch>.deb "
                                        "or RPM <name>-<version>-<release>.<arch>.rpm)"),
    ("/dl/nvidia_535.261.03_amd64.deb.part", "'nvidia_535.261.03_amd64.deb.part' is not a package file name (Debian "
                                             "<name>_<version>_<arch>.deb or RPM <name>-<version>-<release>.<arch>.rpm)"),
    # RPM file names (point 10(c))
    ("nvidia-linux-grid-570-570.133.20-1.x86_64.rpm", "nvidia-linux-grid-570-570.133.20-1.x86_64.rpm is driver 570.133.20, "
                                                      "not the requested 535.261.03"),
    ("nvidia-tools-1.0-1.noarch.rpm", "nvidia-tools-1.0-1.noarch.rpm: version 1.0-1 carries no NVIDIA driver version"),
    # No release: the last two '-' fields are read as version and release, which carry no driver version.
    ("nvidia-linux-grid-535-535.261.03.x86_64.rpm", "nvidia-linux-grid-535-535.261.03.x86_64.rpm: version 535-535.261.03 "
                                                    "carries no NVIDIA driver version"),
    # No architecture: not what rpm writes.
    ("nvidia-linux-grid-535-535.261.03-1.rpm", "'nvidia-linux-grid-535-535.261.03-1.rpm' is not a package file name "
                                               "(Debian <name>_<version>_<arch>.deb or RPM <name>-<version>-<release>.<arch>.rpm)"),
    ("nvidia-linux-grid-535-535.261.03-1.x86_64.rpm.part", "'nvidia-linux-grid-535-535.261.03-1.x86_64.rpm.part' is not a "
                                                           "package file name (Debian <name>_<version>_<arch>.deb or RPM "
                                                           "<name>-<version>-<release>.<arch>.rpm)"),
    ("-535.261.03-1.x86_64.rpm", "'-535.261.03-1.x86_64.rpm' is not a package file name (Debian <name>_<version>_<arch>.deb "
                                 "or RPM <name>-<version>-<release>.<arch>.rpm)"),
])
def test_package_file_identity_refused_whole_message(path, message):
    with pytest.raises(P.PackageError) as err:
        P.package_file_identity(path, "535.261.03")
    assert str(err.value) == message


# --- apt sources (_drivers/apt_sources.py): which entries count, the whole record, the whole messages ---------------------------

DEBIAN = "http://deb.debian.org/debian"


def test_host_signed_by_reads_one_line_entries_as_sources_list_5_says():
    text = ("\n# deb [signed-by=/commented.gpg] http://deb.debian.org/debian bookworm main\n"
            "   \n"
            "garbage line\n"
            "deb-src [signed-by=/src.gpg] http://deb.debian.org/debian bookworm main\n"
            "deb [arch=amd64 Signed-By=/k=1.gpg] http://deb.debian.org/debian// bookworm#not-a-suite main # trailing # comment\n"
            "deb http://deb.debian.org/debian/ bookworm-updates main\n"
            "deb\thttp://mirror.example/debian-X trixie main\n")
    assert S.host_signed_by({"/etc/apt/sources.list": text}) == {
        ("http://deb.debian.org/debian/", "bookworm"): {"/k=1.gpg": "/etc/apt/sources.list"},
        ("http://deb.debian.org/debian/", "bookworm-updates"): {"": "/etc/apt/sources.list"},
        ("http://mirror.example/debian-X/", "trixie"): {"": "/etc/apt/sources.list"},
    }


def test_host_signed_by_reads_deb822_paragraphs():
    text = ("Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nSigned-By: /src.gpg\n\n"
            "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nEnabled: NO\nSigned-By: /off.gpg\n\n"
            "URIs: http://deb.debian.org/debian\nSuites: bookworm\nSigned-By: /no-types.gpg\n\n"
            "Types: deb\nSuites: bookworm\nSigned-By: /no-uris.gpg\n\n"
            "Types: deb\nURIs: http://deb.debian.org/debian\nSigned-By: /no-suites.gpg\n\n"
            "Types: deb deb-src\nURIs: http://deb.debian.org/debian http://mirror.example/debian/\nSuites: bookworm trixie\n"
            "Enabled: yes\nSigned-By:  /k.gpg \n\n"
            "Types: deb\nURIs: http://security.debian.org/debian-security\nSuites: bookworm-security\n")
    seen = S.host_signed_by({"/etc/apt/sources.list.d/x.sources": text})
    where = {"/k.gpg": "/etc/apt/sources.list.d/x.sources"}
    assert seen == {
        ("http://deb.debian.org/debian/", "bookworm"): where, ("http://deb.debian.org/debian/", "trixie"): where,
        ("http://mirror.example/debian/", "bookworm"): where, ("http://mirror.example/debian/", "trixie"): where,
        ("http://security.debian.org/debian-security/", "bookworm-security"): {"": "/etc/apt/sources.list.d/x.sources"},
    }


def test_host_signed_by_needs_python_debian(monkeypatch):
    monkeypatch.setattr(S, "HAS_DEB822", False)
    with pytest.raises(S.SourcesError) as err:
        S.host_signed_by({})
    assert str(err.value) == "python-debian is required on the controller to read deb822 sources (pip install python-debian)"


def test_agreeing_sources_whole_record():
    ours = "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nSigned-By: /ours.gpg\n"
    files = dict(STOCK, **{"/etc/apt/sources.list.d/ours.sources": ours})
    out = S.agreeing_sources(files, DEBIAN + "/", ["bookworm", "bookworm-backports"], ["main", "non-free-firmware"],
                             signed_by=" %s " % KEYRING, ignore=["/etc/apt/sources.list.d/ours.sources"])
    assert out == dict(
        text=("Types: deb\nURIs: http://deb.debian.org/debian/\nSuites: bookworm bookworm-backports\n"
              "Components: main non-free-firmware\nSigned-By: %s\n" % KEYRING),
        signed_by={"bookworm": KEYRING, "bookworm-backports": KEYRING},
        host={"bookworm": "/etc/apt/sources.list.d/debian.sources"})


def test_agreeing_sources_one_paragraph_per_keyring():
    # each suite keeps the host's value (none for bookworm, /u.gpg for bookworm-updates); trixie, which the host lacks,
    # finds two values among the URI's suites, so it names none
    files = {"/etc/apt/sources.list": "deb http://deb.debian.org/debian bookworm main\n",
             "/etc/apt/sources.list.d/u.list": "deb [signed-by=/u.gpg] http://deb.debian.org/debian bookworm-updates main\n"}
    out = S.agreeing_sources(files, DEBIAN, ["bookworm", "bookworm-updates", "trixie"], ["main", "contrib"])
    assert out == dict(
        text=("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm trixie\nComponents: main contrib\n\n"
              "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-updates\nComponents: main contrib\n"
              "Signed-By: /u.gpg\n"),
        signed_by={"bookworm": "", "bookworm-updates": "/u.gpg", "trixie": ""},
        host={"bookworm": "/etc/apt/sources.list", "bookworm-updates": "/etc/apt/sources.list.d/u.list"})
    # with only the keyed suite on the host, the new suites take its keyring
    out = S.agreeing_sources({"/etc/apt/sources.list.d/u.list": files["/etc/apt/sources.list.d/u.list"]}, DEBIAN,
                             ["trixie", "bookworm-updates"], ["main"])
    assert out["signed_by"] == {"trixie": "/u.gpg", "bookworm-updates": "/u.gpg"}
    assert out["text"] == ("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie bookworm-updates\nComponents: main\n"
                           "Signed-By: /u.gpg\n")


def test_agreeing_sources_new_suite_without_one_keyring_gets_none():
    # the URI's other suites disagree (/a.gpg, /b.gpg): no keyring to copy, so the new suite names none
    files = {"/etc/apt/sources.list": "deb [signed-by=/a.gpg] http://deb.debian.org/debian bookworm main\n"
                                      "deb [signed-by=/b.gpg] http://deb.debian.org/debian bookworm-updates main\n"
                                      "deb [signed-by=/c.gpg] http://mirror.example/debian trixie main\n"}
    out = S.agreeing_sources(files, DEBIAN, ["trixie"], ["main"])
    assert out == dict(text="Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\n",
                       signed_by={"trixie": ""}, host={})
    assert S.agreeing_sources(None, DEBIAN, ["trixie"], ["main"], signed_by="/n.gpg")["signed_by"] == {"trixie": "/n.gpg"}


def test_agreeing_sources_host_disagreeing_with_itself_refused():
    files = {"/etc/apt/sources.list": "deb http://deb.debian.org/debian bookworm main\n",
             "/etc/apt/sources.list.d/a.list": "deb [signed-by=/a.gpg] http://deb.debian.org/debian/ bookworm main\n",
             "/etc/apt/sources.list.d/b.list": "deb [signed-by=/b.gpg] http://deb.debian.org/debian bookworm main\n"}
    with pytest.raises(S.SourcesError) as err:
        S.agreeing_sources(files, DEBIAN, ["bookworm"], ["main"])
    assert str(err.value) == ("the host's own sources disagree on Signed-By for http://deb.debian.org/debian bookworm: "
                              "none in /etc/apt/sources.list; /a.gpg in /etc/apt/sources.list.d/a.list; "
                              "/b.gpg in /etc/apt/sources.list.d/b.list")
    two = {p: files[p] for p in ("/etc/apt/sources.list", "/etc/apt/sources.list.d/a.list")}
    with pytest.raises(S.SourcesError, match=r"^the host's own sources disagree on Signed-By for http://deb.debian.org/debian "
                                             r"bookworm: none in /etc/apt/sources.list; /a.gpg in /etc/apt/sources.list.d/a.list$"):
        S.agreeing_sources(two, DEBIAN, ["bookworm"], ["main"])


@pytest.mark.parametrize("line, shown", [("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]", KEYRING),
                                         ("deb", "(none)")])
def test_agreeing_sources_conflict_whole_message(line, shown):
    files = {"/etc/apt/sources.list": "%s http://deb.debian.org/debian bookworm main\n" % line}
    with pytest.raises(S.SourcesError) as err:
        S.agreeing_sources(files, DEBIAN, ["bookworm"], ["main"], signed_by="/x.gpg")
    assert str(err.value) == ("http://deb.debian.org/debian bookworm is already configured in /etc/apt/sources.list with "
                              "Signed-By %s; nvidia_driver_debian_signed_by=/x.gpg would make apt refuse both" % shown)


# --- issue 37 point 1: NVIDIA's own CUDA repository source is already there ------------------------------------------
# NVIDIA's cuda-keyring_1.1-1 writes this file (NVIDIA Driver Installation Guide, "Network Repository Installation";
# NVIDIA/cuda-repo-management#4 quotes it); a second entry for the URI with another keyring makes apt refuse updates.
CUDA_URI = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
CUDA_KEYRING = "/usr/share/keyrings/cuda-archive-keyring.gpg"
CUDA_LIST = {"/etc/apt/sources.list.d/cuda-debian12-x86_64.list": "deb [signed-by=%s] %s /\n" % (CUDA_KEYRING, CUDA_URI)}
OURS = "/etc/apt/sources.list.d/gpuops-nvidia-cuda.sources"


def test_existing_cuda_keyring_list_is_found_with_its_keyring():
    files = dict(STOCK, **CUDA_LIST)
    assert S.existing_source(files, CUDA_URI) == {"path": "/etc/apt/sources.list.d/cuda-debian12-x86_64.list",
                                                  "signed_by": CUDA_KEYRING}
    # the same URI without the trailing slash is the same source
    assert S.existing_source(files, CUDA_URI.rstrip("/"))["signed_by"] == CUDA_KEYRING


def test_existing_deb822_source_and_one_without_keyring():
    deb822 = {"/etc/apt/sources.list.d/cuda.sources": "Types: deb\nURIs: %s\nSuites: /\nSigned-By: %s\n" % (CUDA_URI, CUDA_KEYRING)}
    assert S.existing_source(deb822, CUDA_URI) == {"path": "/etc/apt/sources.list.d/cuda.sources", "signed_by": CUDA_KEYRING}
    old = {"/etc/apt/sources.list.d/cuda.list": "deb %s /\n" % CUDA_URI}   # apt-key era: no signed-by
    assert S.existing_source(old, CUDA_URI) == {"path": "/etc/apt/sources.list.d/cuda.list", "signed_by": None}


def test_no_existing_source_other_uri_disabled_or_ours():
    assert S.existing_source(STOCK, CUDA_URI) is None
    assert S.existing_source(CUDA_LIST, CUDA_URI.replace("debian12", "ubuntu2204")) is None
    assert S.existing_source(CUDA_LIST, CUDA_URI, suite="bookworm") is None
    disabled = {"/etc/apt/sources.list.d/cuda.sources":
                "Types: deb\nURIs: %s\nSuites: /\nEnabled: no\nSigned-By: %s\n" % (CUDA_URI, CUDA_KEYRING)}
    assert S.existing_source(disabled, CUDA_URI) is None
    ours = {OURS: "Types: deb\nURIs: %s\nSuites: /\nSigned-By: /etc/apt/keyrings/gpuops-nvidia-cuda.asc\n" % CUDA_URI}
    assert S.existing_source(ours, CUDA_URI, ignore=[OURS]) is None
    # without ignoring it, our own file is an entry like any other
    assert S.existing_source(ours, CUDA_URI)["path"] == OURS


def test_existing_source_refuses_a_host_that_already_disagrees():
    files = dict(CUDA_LIST, **{"/etc/apt/sources.list.d/cuda.list": "deb [signed-by=/other.gpg] %s /\n" % CUDA_URI})
    with pytest.raises(S.SourcesError, match=r"^the host's own sources disagree on Signed-By for %s /: "
                       r"/other.gpg in /etc/apt/sources.list.d/cuda.list; %s in /etc/apt/sources.list.d/"
                       r"cuda-debian12-x86_64.list$" % (CUDA_URI, CUDA_KEYRING)):
        S.existing_source(files, CUDA_URI)


def test_driver_apt_source_existing_filter_reads_slurp_results():
    import base64
    slurp = [dict(source=p, content=base64.b64encode(t.encode()).decode()) for p, t in CUDA_LIST.items()]
    slurp.append(dict(source=OURS, content=base64.b64encode(b"Types: deb\nURIs: x\nSuites: /\n").decode()))
    got = F.filters()["driver_apt_source_existing"](slurp, CUDA_URI, "/", [OURS])
    assert got == {"path": "/etc/apt/sources.list.d/cuda-debian12-x86_64.list", "signed_by": CUDA_KEYRING}
    assert F.filters()["driver_apt_source_existing"]([], CUDA_URI) is None
    with pytest.raises(AnsibleFilterError, match="driver_apt_source_existing expects"):
        F.filters()["driver_apt_source_existing"]("x", CUDA_URI)
    bad = dict(CUDA_LIST, **{"/etc/apt/sources.list": "deb [signed-by=/o.gpg] %s /\n" % CUDA_URI})
    with pytest.raises(AnsibleFilterError, match="disagree on Signed-By"):
        F.filters()["driver_apt_source_existing"](bad, CUDA_URI)


# --- issue 37 points 2 and 9: what the install would do, from apt's own simulation ------------------------------------
# apt-get -s install prints one line per action (apt-pkg/algorithms.cc pkgSimulate::Install / ::Remove / ::Configure).

SIM_BOOKWORM = """NOTE: This is only a simulation!
      apt-get needs root privileges for real execution.
The following NEW packages will be installed:
  firmware-nvidia-gsp nvidia-kernel-dkms
Inst nvidia-installer-cleanup (20220217+3~deb12u1 Debian:12.15/oldstable [amd64])
Inst nvidia-modprobe (535.309.01-0+deb12u1 Debian-Security:12/oldstable-security [amd64])
Inst firmware-nvidia-gsp (535.261.03-1 Debian:12.15/oldstable [amd64])
Inst nvidia-kernel-dkms (535.261.03-1 Debian:12.15/oldstable [amd64])
Inst libc6:i386 [2.36-9] (2.36-10 Debian:12.15/oldstable [i386])
Conf nvidia-kernel-dkms (535.261.03-1 Debian:12.15/oldstable [amd64])
"""
# Ubuntu noble: nvidia-headless-565-server became a transitional package depending on the 580 branch.
SIM_TRANSITIONAL = """Inst nvidia-headless-565-server (580.95.05-0ubuntu0.24.04.2 Ubuntu:24.04/noble-updates [amd64])
Inst nvidia-dkms-580-server (580.95.05-0ubuntu0.24.04.2 Ubuntu:24.04/noble-updates [amd64])
Inst nvidia-utils-565-server (565.57.01-0ubuntu0.24.04.4 Ubuntu:24.04/noble-updates [amd64])
Remv nvidia-driver-pinning-565.57.01 [565.57.01-1]
Purg old-thing [1.0]
"""


def test_parse_apt_simulation_every_line_kind():
    assert R.parse_apt_simulation(SIM_BOOKWORM) == [
        {"action": "Inst", "name": "nvidia-installer-cleanup", "version": "20220217+3~deb12u1", "old": None},
        {"action": "Inst", "name": "nvidia-modprobe", "version": "535.309.01-0+deb12u1", "old": None},
        {"action": "Inst", "name": "firmware-nvidia-gsp", "version": "535.261.03-1", "old": None},
        {"action": "Inst", "name": "nvidia-kernel-dkms", "version": "535.261.03-1", "old": None},
        {"action": "Inst", "name": "libc6", "version": "2.36-10", "old": "2.36-9"},
        {"action": "Conf", "name": "nvidia-kernel-dkms", "version": "535.261.03-1", "old": None}]
    assert R.parse_apt_simulation(SIM_TRANSITIONAL)[3:] == [
        {"action": "Remv", "name": "nvidia-driver-pinning-565.57.01", "version": None, "old": "565.57.01-1"},
        {"action": "Purg", "name": "old-thing", "version": None, "old": "1.0"}]
    assert R.parse_apt_simulation(None) == [] and R.parse_apt_simulation("") == []


@pytest.mark.parametrize("name, dkms", [
    ("nvidia-kernel-dkms", True), ("nvidia-open-kernel-dkms", True), ("nvidia-kernel-open-dkms", True),
    ("nvidia-dkms-535", True), ("nvidia-dkms-580-server-open", True), ("nvidia-dkms", True),
    ("nvidia-tesla-535-kernel-dkms", True), ("kmod-nvidia-latest-dkms", True), ("kmod-nvidia-open-dkms", True),
    ("dkms", False), ("nvidia-driver", False), ("linux-modules-nvidia-535-server-generic", False),
    ("nvidia-headless-no-dkms-535-server", False), ("nvidia-dkmsx", False), ("xnvidia-kernel-dkms", False),
    ("kmod-nvidia-latest", False),
])
def test_is_dkms_package(name, dkms):
    assert R.is_dkms_package(name) is dkms


def test_install_check_builds_module_from_the_simulation_or_what_stays_installed():
    out = R.install_check(SIM_BOOKWORM, {}, "535.261.03-1", ["nvidia-kernel-dkms=535.261.03-1"])
    assert out == {"ok": True, "reason": "", "builds_module": True, "dkms_packages": ["nvidia-kernel-dkms"],
                   "installs": {"nvidia-installer-cleanup": "20220217+3~deb12u1", "nvidia-modprobe": "535.309.01-0+deb12u1",
                                "firmware-nvidia-gsp": "535.261.03-1", "nvidia-kernel-dkms": "535.261.03-1",
                                "libc6": "2.36-10"},
                   "removes": [], "off_branch": []}
    # A rerun: nothing to install, the DKMS package already there still builds the module for new kernels.
    again = R.install_check("", {"nvidia-kernel-dkms": [{"version": "535.261.03-1"}], "nvidia-smi": []}, "535.261.03")
    assert again["builds_module"] is True and again["dkms_packages"] == ["nvidia-kernel-dkms"] and again["installs"] == {}
    # Userspace only: nothing to build.
    user = R.install_check("Inst nvidia-smi (535.261.03-1 Debian [amd64])\n", {"libnvidia-ml1": []}, "535.261.03")
    assert user["builds_module"] is False and user["dkms_packages"] == [] and user["ok"] is True
    # A DKMS package the install removes builds nothing any more.
    gone = R.install_check("Remv nvidia-kernel-dkms [535.261.03-1]\nInst nvidia-smi (535.261.03-1 D [amd64])\n",
                           {"nvidia-kernel-dkms": []}, "535.261.03")
    assert gone["builds_module"] is False and gone["removes"] == ["nvidia-kernel-dkms"]


def test_install_check_refuses_a_transitional_package_naming_both():
    out = R.install_check(SIM_TRANSITIONAL, None, "565.57.01", ["nvidia-headless-565-server=580.95.05-0ubuntu0.24.04.2"])
    assert out["ok"] is False and out["builds_module"] is True
    assert out["off_branch"] == ["nvidia-dkms-580-server 580.95.05-0ubuntu0.24.04.2 (R580)",
                                 "nvidia-headless-565-server 580.95.05-0ubuntu0.24.04.2 (R580)"]
    assert out["reason"] == (
        "nvidia-headless-565-server=580.95.05-0ubuntu0.24.04.2 for R565 would install packages of another branch: "
        "nvidia-dkms-580-server 580.95.05-0ubuntu0.24.04.2 (R580); nvidia-headless-565-server 580.95.05-0ubuntu0.24.04.2 "
        "(R580). A package of the requested branch that depends on another one is a transitional package; ask for a "
        "version of R565 that the repositories still offer, or for the other branch")
    # the branch alone as the request, and without package names
    assert R.install_check(SIM_TRANSITIONAL, {}, "R565")["reason"].startswith("the driver packages for R565 would")
    assert R.install_check(SIM_TRANSITIONAL, {}, "R580")["off_branch"] == ["nvidia-utils-565-server 565.57.01-0ubuntu0.24.04.4 (R565)"]
    # parsed entries work as well as the text; versions that name no driver are skipped
    assert R.install_check(R.parse_apt_simulation(SIM_BOOKWORM), {}, "R535")["ok"] is True


@pytest.mark.parametrize("policy, sim, method, plan", [
    # bookworm: contrib's 11.525.112 is older than the collection's minimum -> the pinned wheel
    ("python3-pynvml:\n  Installed: (none)\n  Candidate: 11.525.112-1\n  Version table:\n", "", "auto",
     {"method": "virtualenv", "reason": "the distribution's python3-pynvml 11.525.112-1 is older than 12.535",
      "package_version": "11.525.112-1"}),
    # trixie: 12.550.89, nothing else pulled in -> the distribution's package
    ("python3-pynvml:\n  Installed: (none)\n  Candidate: 12.550.89-3\n", "Inst python3-pynvml (12.550.89-3 Debian [all])\n",
     "auto", {"method": "distribution", "reason": "the distribution's python3-pynvml 12.550.89-3",
              "package_version": "12.550.89-3"}),
    ("python3-pynvml:\n  Installed: 12.535.161-1\n  Candidate: 12.550.89-3\n", "", "auto",
     {"method": "distribution", "reason": "the distribution's python3-pynvml 12.535.161-1", "package_version": "12.535.161-1"}),
    # a host whose driver has no libnvidia-ml1 package: apt would pull the distribution's NVML library
    ("python3-pynvml:\n  Candidate: 12.550.89-3\n",
     "Inst libnvidia-ml1 (550.163.01-2 Debian [amd64])\nInst python3-pynvml (12.550.89-3 Debian [all])\nInst zz (1 D [all])\n",
     "auto", {"method": "virtualenv", "package_version": "12.550.89-3",
              "reason": "installing python3-pynvml would also install libnvidia-ml1 beside the driver"}),
    ("N: Unable to locate package python3-pynvml\n", "", "auto",
     {"method": "virtualenv", "reason": "the distribution has no python3-pynvml", "package_version": None}),
    ("", "", "auto", {"method": "virtualenv", "reason": "the distribution has no python3-pynvml", "package_version": None}),
    ("python3-pynvml:\n  Installed: (none)\n  Candidate: (none)\n", "", "distribution",
     {"method": "distribution", "reason": "requested", "package_version": None}),
    ("python3-pynvml:\n  Candidate: 12.550.89-3\n", "", "virtualenv",
     {"method": "virtualenv", "reason": "requested", "package_version": "12.550.89-3"}),
])
def test_nvml_binding_plan(policy, sim, method, plan):
    assert R.nvml_binding_plan(policy, sim, "12.535", method) == plan


def test_nvml_binding_plan_boundary_and_bad_method():
    at = "python3-pynvml:\n  Candidate: 12.535\n"
    assert R.nvml_binding_plan(at, "", "12.535")["method"] == "distribution"
    assert R.nvml_binding_plan("python3-pynvml:\n  Candidate: 12.534.99-1\n", "", "12.535")["method"] == "virtualenv"
    with pytest.raises(D.DriverInputError, match=r"^nvml method must be auto, distribution or virtualenv, not 'pip'$"):
        R.nvml_binding_plan(at, "", "12.535", "pip")
    assert R.apt_policy("x:\n  Installed: 1.0-1\n  Candidate: (none)\nOther: y\n") == {"installed": "1.0-1", "candidate": None}


def test_package_plan_precompiled_ubuntu_signed_modules():
    """Point 8: Ubuntu's precompiled, Canonical-signed modules (NVIDIA GPU Operator docs, "Precompiled and Canonical
    Signed Drivers on Ubuntu"): nothing is built on the host, so Secure Boot needs no key of ours."""
    plan = P.package_plan("Ubuntu", "Debian", "24", "distribution", "proprietary", "R580", "580.95.05", True,
                          "precompiled", ["generic", "generic-hwe-24.04"])
    assert plan["install"] == ["linux-modules-nvidia-580-server-generic", "linux-modules-nvidia-580-server-generic-hwe-24.04",
                               "nvidia-headless-no-dkms-580-server", "nvidia-utils-580-server", "nvidia-persistenced"]
    assert plan["builds_module"] is False
    opened = P.package_plan("Ubuntu", "Debian", "24", "distribution", "open", "R580", None, False, "precompiled", ["aws"])
    assert opened["install"] == ["linux-modules-nvidia-580-server-open-aws", "nvidia-headless-no-dkms-580-server-open",
                                 "nvidia-utils-580-server"]
    with pytest.raises(P.PackageError, match=r"^precompiled signed kernel modules come from Ubuntu's own archive \(source "
                                             r"distribution on Ubuntu\), not from debian with source distribution$"):
        P.package_plan("Debian", "Debian", "12", "distribution", "open", "R580", None, True, "precompiled", ["amd64"])
    with pytest.raises(P.PackageError, match=r"^precompiled kernel modules need the host's kernel flavour"):
        P.package_plan("Ubuntu", "Debian", "24", "distribution", "open", "R580", None, True, "precompiled", ["", None])
    with pytest.raises(P.PackageError, match=r"^kernel modules must be dkms or precompiled, not 'signed'$"):
        P.package_plan("Ubuntu", "Debian", "24", "distribution", "open", "R580", None, True, "signed")
    assert R.package_plan("open", "Ubuntu", "Debian", "24", "distribution", "R580", None, True, "precompiled",
                          ["generic"])["builds_module"] is False
    assert R.package_plan("open", "Ubuntu", "Debian", "24", "distribution", "R580", None, True, None)["builds_module"] is True


# --- issue 37 point 3: Fabric Manager on NVSwitch systems --------------------------------------------------------------
DEV = "/sys/bus/pci/devices"


def test_nvswitch_addresses_need_nvidia_and_the_bridge_class():
    vendor = ["%s/0000:05:00.0/vendor" % DEV, "%s/0000:18:00.0/vendor" % DEV, "/r%s/0000:06:00.0/vendor" % DEV]
    klass = ["%s/0000:05:00.0/class" % DEV, "%s/0000:00:1f.0/class" % DEV, "/r%s/0000:06:00.0/class/" % DEV]
    assert P.nvswitch_addresses(vendor, klass) == ["0000:05:00.0", "0000:06:00.0"]
    assert P.nvswitch_addresses(None, klass) == [] and P.nvswitch_addresses(vendor, None) == []
    assert P.nvswitch_addresses(["vendor"], ["class"]) == []
    assert P.fabric_manager_packages("R580") == ["nvidia-fabricmanager-580"]
    assert P.fabric_manager_packages(535) == ["nvidia-fabricmanager-535"]


def test_fabric_manager_plan_from_find_results_or_the_setting():
    vendor = {"files": [{"path": "%s/0000:05:00.0/vendor" % DEV}, {"path": "%s/0000:18:00.0/vendor" % DEV}]}
    klass = {"files": [{"path": "%s/0000:05:00.0/class" % DEV}]}
    assert R.fabric_manager_plan(vendor, klass, "580.95.05") == {
        "needed": True, "nvswitches": ["0000:05:00.0"], "reason": "NVSwitches 0000:05:00.0",
        "service": "nvidia-fabricmanager", "packages": ["nvidia-fabricmanager-580"]}
    none = R.fabric_manager_plan(vendor, {"files": []}, "R580")
    assert none == {"needed": False, "nvswitches": [], "reason": "no NVSwitch", "service": "nvidia-fabricmanager",
                    "packages": []}
    skipped = {"skipped": True}   # find did not run (the setting decides)
    assert R.fabric_manager_plan(skipped, skipped, "R535", True)["packages"] == ["nvidia-fabricmanager-535"]
    assert R.fabric_manager_plan(skipped, skipped, "R535", "yes")["reason"] == "requested"
    assert R.fabric_manager_plan(vendor, klass, "R535", "false")["needed"] is False
    assert R.fabric_manager_plan([], [], "R535", "no")["packages"] == []
    with pytest.raises(D.DriverInputError, match=r"^nvidia_driver_fabric_manager must be auto, true or false, not 'maybe'$"):
        R.fabric_manager_plan([], [], "R535", "maybe")
    assert F.filters()["driver_fabric_manager"](vendor, klass, "R580")["needed"] is True
