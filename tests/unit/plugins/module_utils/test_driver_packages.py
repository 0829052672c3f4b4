# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kernel-module flavour, package plans per platform, the driver family and deb822 sources (issue 22 points 1, 2, 4, 6).

Facts under test, with their sources (also in plugins/module_utils/_driver_packages.py):
- open modules are NVIDIA's default from R560; Grace Hopper and Blackwell need them; pre-Turing GPUs cannot use them
  (NVIDIA Driver Installation Guide "Kernel Modules"; NVIDIA/open-gpu-kernel-modules README "Compatible GPUs").
- Debian's nvidia-driver Depends "nvidia-kernel-dkms (= v) | nvidia-kernel-<v> | nvidia-open-kernel-<v>"
  (apt-cache show nvidia-driver, bookworm), so naming the module package picks the flavour.
- apt refuses conflicting Signed-By values for one source (apt-pkg/sourcelist.cc).
"""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.filter import driver as F
from ansible_collections.gpuops.provision.plugins.module_utils import _apt_sources as S
from ansible_collections.gpuops.provision.plugins.module_utils import _driver_packages as P

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
        F.FilterModule().filters()["driver_flavour"]([B200], "proprietary", "R580")


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
    assert F.FilterModule().filters()["driver_apt_pin"]("535.261.03-1") == "535.261.03-*"


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
                         file="nvidia-linux-grid-535_535.261.04_amd64.deb")
    with pytest.raises(P.PackageError, match="not the requested 535.261.03"):
        P.package_file_identity("nvidia-linux-grid-535_535.261.04_amd64.deb", "535.261.03")
    with pytest.raises(P.PackageError, match="not a Debian package file name"):
        P.package_file_identity("NVIDIA-Linux-x86_64-535.261.04-grid.run", "535.261.04")


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
