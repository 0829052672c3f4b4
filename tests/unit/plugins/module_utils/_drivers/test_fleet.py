# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/_drivers/fleet.py and _drivers/repo.py at the module_utils level.

The filter-level behaviour (through plugins/filter/driver.py) is in tests/unit/plugins/filter/test_driver.py; these
show the domain code stands alone: plain ValueError subclasses, no Ansible imports.
"""

from __future__ import annotations

import base64

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._drivers import fleet as D
from ansible_collections.gpuops.provision.plugins.module_utils._drivers import repo as R

PIN = "535.261.03-1"


def test_no_ansible_import():
    for mod in (D, R):
        src = open(mod.__file__, encoding="utf-8").read()
        assert "from ansible." not in src and "import ansible." not in src, mod.__name__
    assert issubclass(D.DriverInputError, ValueError)


def test_package_version_shapes():
    assert D.package_version("1.2") == "1.2"
    assert D.package_version(dict(version="550.163.01", release="1.el9", epoch=3, source="rpm")) == "3:550.163.01-1.el9"
    # release only counts for rpm; an epoch already in the text is not added twice; epoch 0 is none
    assert D.package_version(dict(version="535.261.03-1", release="x", source="apt")) == "535.261.03-1"
    assert D.package_version(dict(version="1:2.0", epoch=1)) == "1:2.0"
    assert D.package_version(dict(version="2.0", epoch="0")) == "2.0"
    assert D.package_version(dict(version="")) is None and D.package_version(7) is None


@pytest.mark.parametrize("epoch", [None, "None", "(none)"])
def test_an_rpm_without_an_epoch_as_package_facts_reports_it(epoch):
    """ansible-core's package_facts (RPM._none) reports rpm's '(none)' as the string 'None': NVIDIA's vGPU guest RPM has
    no epoch (molecule driver_rhel_dnf el9-grid failed reading 'None:535.261.04-1')."""
    entry = dict(name="nvidia-linux-grid-535", version="535.261.04", release="1", epoch=epoch, arch="x86_64", source="rpm")
    assert D.package_version(entry) == "535.261.04-1"
    assert D.version_locks({"nvidia-linux-grid-535": [entry]}, "535.261.04") == ["nvidia-linux-grid-535-0:535.261.04-1.*"]


def test_installed_packages_first_usable_entry_and_plain_versions():
    facts = {"a": [dict(version=""), dict(version="2")], "b": "3", "c": [], "d": None}
    assert D.installed_packages(facts, ["a", "b", "c", "d", "e"]) == {"a": "2", "b": "3"}
    assert D.all_installed(["not", "a", "mapping"]) == {}


def test_host_state_and_family_at_module_level():
    facts = {"nvidia-driver": [dict(version=PIN, source="apt")]}
    st = D.host_state(facts, None, "535.261.03", PIN)
    assert st["state"] == D.STATE_LOADED and st["on_pin"] is True and st["package"] == "nvidia-driver"
    assert D.installed_family(facts, "") == {}
    assert D.installed_family(facts, "535.261.03") == {"nvidia-driver": PIN}


@pytest.mark.parametrize("call, words", [
    (lambda: D.fleet_drift({}, scheme="zip"), "scheme must be deb or rpm, got 'zip'"),
    (lambda: D.fleet_drift({}, host_pin="q"), "'q'"),
    (lambda: D.fleet_drift("nope"), "driver_drift expects a mapping of host to facts or a list of dicts, got str"),
    (lambda: D.fleet_drift([1]), "list input needs dicts with a 'host' key, got 1"),
    (lambda: D.drift_table([]), "driver_drift_table expects the result of driver_drift"),
    (lambda: R.repo_versions("x", "yum"), "unknown repository listing format 'yum' (madison or repoquery)"),
    (lambda: R.host_flavour([], "auto", ""), "driver_flavour needs the driver branch"),
    (lambda: R.apt_sources("x", "http://x", ["b"], ["main"]), "driver_apt_sources expects {path: text} or slurp results, got str"),
])
def test_input_errors_are_driver_input_errors(call, words):
    with pytest.raises(D.DriverInputError) as err:
        call()
    assert words in str(err.value)


def test_apt_sources_reads_slurp_results_and_reports_conflicts():
    line = "deb [signed-by=/k.gpg] http://deb.example/debian bookworm main\n"
    slurp = [dict(source="/etc/apt/sources.list", content=base64.b64encode(line.encode()).decode()), dict(source="/skip")]
    out = R.apt_sources(slurp, "http://deb.example/debian", ["bookworm"], ["main"])
    assert out["signed_by"] == {"bookworm": "/k.gpg"}
    with pytest.raises(D.DriverInputError, match="/other.gpg"):
        R.apt_sources(slurp, "http://deb.example/debian", ["bookworm"], ["main"], signed_by="/other.gpg")


def test_package_plan_takes_a_flavour_result():
    plain = R.package_plan("open", "Debian", "Debian", "12", "distribution", "R535", "", True)
    assert R.package_plan(dict(flavour="open"), "Debian", "Debian", "12", "distribution", "R535", None, True) == plain


def test_drift_table_lists_every_host_and_the_groups():
    r = D.fleet_drift({"a": PIN, "b": PIN, "c": "535.216.03-2~bpo12+1"}, pin=PIN)
    lines = r["table"].splitlines()
    assert lines[1].split() == ["HOST", "INSTALLED", "BRANCH", "LOADED", "STATE", "STATUS"]
    assert lines[-1] == "versions: 535.261.03-1 x2 (a, b); 535.216.03-2~bpo12+1 x1 (c)"
    assert D.drift_table(r) == r["table"]


# ---- dnf versionlock entries (redhat_install.yml) ------------------------------------------------------------------

LOCK_LINES = [
    "cuda-drivers-3:550.163.01-1.x86_64",                 # family package, another release than the target
    "nvidia-driver-3:550.163.01-1.el9.x86_64",            # the target itself
    "nvidia-driver-cuda-3:535.261.03-1.el9.x86_64",       # an older driver
    "!nvidia-driver-3:535.0.0-1.el9.x86_64",              # an exclude entry, not a lock
    "nvidia-container-toolkit-0:1.17.4-1.x86_64",         # not a driver version
    "cuda-toolkit-12-4-0:12.4.1-1.x86_64",                # other software
    "kmod-nvidia-open-dkms-3:550.163.01-1.el9.noarch",
    "Versionlock list:",
]


def test_stale_locks_with_hold_drop_only_other_versions_of_the_driver():
    assert D.stale_locks(LOCK_LINES, "3:550.163.01-1.el9", True) == [
        "cuda-drivers-3:550.163.01-1.x86_64", "nvidia-driver-cuda-3:535.261.03-1.el9.x86_64"]
    assert D.stale_locks(LOCK_LINES, "550.163.01", True) == ["nvidia-driver-cuda-3:535.261.03-1.el9.x86_64"]


def test_stale_locks_without_hold_drop_every_driver_lock():
    assert D.stale_locks(LOCK_LINES, "3:550.163.01-1.el9", False) == [
        "cuda-drivers-3:550.163.01-1.x86_64", "nvidia-driver-3:550.163.01-1.el9.x86_64",
        "nvidia-driver-cuda-3:535.261.03-1.el9.x86_64", "kmod-nvidia-open-dkms-3:550.163.01-1.el9.noarch"]
    assert D.stale_locks([], "550.163.01", False) == []


RPM_FACTS = {
    "nvidia-driver": [{"version": "550.163.01", "release": "1.el9", "epoch": 3}],
    "cuda-drivers": [{"version": "550.163.01", "release": "1", "epoch": 3}],
    "nvidia-container-toolkit": [{"version": "1.17.4", "release": "1", "epoch": None}],
    "kmod-nvidia": [{"version": "535.261.03", "release": "1", "epoch": 3}],
    "nvidia-persistenced": [{"version": "550.163.01", "release": "1.el9", "epoch": None},
                            {"version": "550.163.01", "release": "1.el9", "epoch": None}, {"arch": "x86_64"}],
    "libnvidia-ml": [{"version": "550.163.01", "release": "1.el9", "epoch": "3"}],
}


def test_version_locks_hold_every_package_of_the_installed_driver_once():
    assert D.version_locks(RPM_FACTS, "550.163.01") == [
        "cuda-drivers-3:550.163.01-1.*", "libnvidia-ml-3:550.163.01-1.el9.*", "nvidia-driver-3:550.163.01-1.el9.*",
        "nvidia-persistenced-0:550.163.01-1.el9.*"]
    assert D.version_locks(RPM_FACTS, "535.261.03") == ["kmod-nvidia-3:535.261.03-1.*"]
    assert D.version_locks({}, "550.163.01") == [] and D.version_locks(None, "550.163.01") == []


# ---- _drivers/repo.py: every field, defaults and boundaries (issue 23) -------------------------------------------------

NO_VERSION = "no driver version given (expected e.g. 535.261.03 or a package version 535.261.03-1)"


@pytest.mark.parametrize("version", [None, ""])
def test_validate_without_a_version_returns_the_whole_record(version):
    assert R.validate(version, "R535") == dict(ok=False, errors=[NO_VERSION], driver_version=None, branch=None)


def test_repo_versions_madison_by_default_skips_incomplete_lines_and_reads_on():
    text = "\n".join([
        "nvidia-driver | 535.261.03-1 | http://deb.example/debian bookworm/non-free amd64 Packages",
        " | 535.0-1 | http://deb.example/debian bookworm/main amd64 Packages",     # no package name
        "nvidia-driver |  | http://deb.example/debian bookworm/main amd64 Packages",   # no version
        "nvidia-driver | 535.216.03-2",                                              # no source column
        "nvidia-smi | 535.261.03-1 | ",                                              # empty source column still counts
        "nvidia-driver | 535.216.03-1 | http://deb.example/debian bookworm/main amd64 Packages",
        "nvidia-driver | 535.261.03-1 | http://mirror.example/debian bookworm/non-free amd64 Packages",
    ])
    assert R.repo_versions(text) == {"nvidia-driver": ["535.261.03-1", "535.216.03-1"], "nvidia-smi": ["535.261.03-1"]}
    assert R.repo_versions(None) == {} and R.repo_versions(None, "repoquery") == {}


def test_repo_versions_repoquery_skips_odd_lines_and_reads_on():
    text = "Last metadata expiration check\nnvidia-driver 3:550.163.01-1.el9\nnvidia-driver 0:550.90.07-1.el9\n"
    assert R.repo_versions(text, "repoquery") == {"nvidia-driver": ["3:550.163.01-1.el9", "550.90.07-1.el9"]}


def test_resolve_deb_by_default_and_rpm_order_for_rpm():
    out = R.resolve({"nvidia-driver": ["535.216.03-1", "535.216.03-2~bpo12+1"]}, ["nvidia-driver", "nvidia-smi"], "535.216.03")
    assert out == dict(versions={"nvidia-driver": "535.216.03-2~bpo12+1"}, specs=["nvidia-driver=535.216.03-2~bpo12+1"],
                       missing=["nvidia-smi"], offered={"nvidia-driver": ["535.216.03-1", "535.216.03-2~bpo12+1"], "nvidia-smi": []})
    # rpmvercmp: a numeric segment is newer than an alphabetic one (1.1 > 1.el9); dpkg orders them the other way
    rpm = R.resolve({"cuda-drivers": ["550.163.01-1.1", "550.163.01-1.el9"]}, ["cuda-drivers"], "550.163.01", "rpm")
    assert rpm["versions"] == {"cuda-drivers": "550.163.01-1.1"} and rpm["specs"] == ["cuda-drivers-550.163.01-1.1"]
    deb = R.resolve({"cuda-drivers": ["550.163.01-1.1", "550.163.01-1.el9"]}, ["cuda-drivers"], "550.163.01", "deb")
    assert deb["versions"] == {"cuda-drivers": "550.163.01-1.el9"}


def test_host_flavour_requests_auto_by_default():
    out = R.host_flavour([], branch="R580")
    assert out["requested"] == "auto" and out["flavour"] == "open" and out["branch"] == 580
    assert R.host_flavour(None, branch="535")["flavour"] == "proprietary"


def test_package_plan_passes_every_argument_through():
    # persistence is on by default: Debian names nvidia-persistenced (Recommends are off)
    debian = R.package_plan("open", "Debian", "Debian", "12", "distribution", "R535")
    assert debian["install"] == ["nvidia-driver", "nvidia-open-kernel-dkms", "nvidia-persistenced"]
    assert R.package_plan("open", "Debian", "Debian", "12", "distribution", "R535", None, True)["install"] == debian["install"]
    # the exact driver version picks its pinning package; persistence off leaves nvidia-persistenced out
    cuda = R.package_plan("open", "Debian", "Debian", "12", "cuda", "R580", "580.65.06", False)
    assert cuda["install"] == ["nvidia-open"] and cuda["pinning_packages"] == ["nvidia-driver-pinning-580.65.06"]
    assert R.package_plan("open", "Debian", "Debian", "12", "cuda", "R580", "", True)["pinning_packages"] == []
    ubuntu = R.package_plan("proprietary", "Ubuntu", "Debian", "24.04", "distribution", "535")
    assert ubuntu["platform"] == "ubuntu" and ubuntu["install"][0] == "nvidia-headless-535-server"
    # RHEL: the family fact decides the platform, the major version the module stream
    el10 = R.package_plan("open", "RedHat", "RedHat", "10", "cuda", "R580")
    assert el10["platform"] == "redhat" and el10["module_stream"] is None and el10["extra_repos"] == ["epel", "crb"]
    assert R.package_plan("open", "Rocky", "RedHat", "9.4", "cuda", "R580")["module_stream"] == "nvidia-driver:580-open"


def test_apt_sources_slurp_with_bad_bytes_and_our_own_file_ignored():
    ours = "deb [signed-by=/old.gpg] http://deb.example/debian bookworm main\n"
    theirs = b"# caf\xe9 (latin-1)\ndeb [signed-by=/k.gpg] http://deb.example/debian bookworm main\n"
    slurp = [dict(source="/etc/apt/sources.list.d/nvidia.list", content=base64.b64encode(ours.encode()).decode()),
             dict(source="/etc/apt/sources.list", content=base64.b64encode(theirs).decode())]
    with pytest.raises(D.DriverInputError, match="disagree on Signed-By for http://deb.example/debian bookworm"):
        R.apt_sources(slurp, "http://deb.example/debian", ["bookworm"], ["main"])
    out = R.apt_sources(slurp, "http://deb.example/debian", ["bookworm"], ["main"], ignore="/etc/apt/sources.list.d/nvidia.list")
    assert out["signed_by"] == {"bookworm": "/k.gpg"} and out["host"] == {"bookworm": "/etc/apt/sources.list"}


# ---- _drivers/fleet.py: every field of a host record, per input shape (issue 23) ---------------------------------------

def record(host, **fields):
    """A host_record result: the empty record of ``host`` with ``fields`` set."""
    rec = dict(host=host, version=None, driver_version=None, branch=None, loaded_version=None, state=D.STATE_MISSING,
               reboot_pending=False, mixed=False, source=None, error=None, vgpu_host=None, role=None, packages={})
    rec.update(fields)
    return rec


NV_FACTS = {"installed_version": PIN, "packages": {"nvidia-driver": PIN}, "loaded_version": "535.261.03", "state": "loaded",
            "reboot_pending": 0, "mixed": 1, "vgpu_host": "pve1", "role": "guest"}
NV_RECORD = dict(source="nvidia_driver", version=PIN, driver_version="535.261.03", branch=535, packages={"nvidia-driver": PIN},
                 loaded_version="535.261.03", state="loaded", reboot_pending=False, mixed=True, vgpu_host="pve1", role="guest")
APT_MIXED = {"nvidia-driver": [dict(version=PIN, source="apt")], "cuda-drivers": [dict(version="535.216.03-1", source="apt")]}


@pytest.mark.parametrize("value, fact, expected", [
    (None, None, {}),
    (" 535.261.03-1 ", None, dict(source="version", version=PIN, driver_version="535.261.03", branch=535, state=D.STATE_NOT_LOADED)),
    ("  ", None, dict(source="version")),
    (NV_FACTS, None, NV_RECORD),
    ({"drv": NV_FACTS, "nvidia_driver_facts": {"installed_version": "1"}}, "drv", NV_RECORD),
    ({"nvidia_driver_facts": NV_FACTS}, "drv", NV_RECORD),
    ({"installed_version": None, "state": None}, None, dict(source="nvidia_driver")),
    ({"nvml": {"available": True, "driver_version": 550.163}}, None,
     dict(source="gpu_info", version="550.163", loaded_version="550.163", state=D.STATE_LOADED, driver_version="550.163", branch=550)),
    ({"nvml": {"available": False, "driver_version": "550.163.01", "reason": "driver/library version mismatch"}}, None,
     dict(source="gpu_info", error="NVML: driver/library version mismatch")),
    ({"nvml": {"available": True}}, None, dict(source="gpu_info", error="NVML: not available")),
    ({"driver_version": "550.163.01", "role": "vgpu_host"}, None,
     dict(source="driver_version", version="550.163.01", loaded_version="550.163.01", state=D.STATE_LOADED,
          driver_version="550.163.01", branch=550, role="vgpu_host")),
    ({"version": "550.163.01-1", "state": D.STATE_REBOOT}, None,
     dict(source="version", version="550.163.01-1", state=D.STATE_REBOOT, driver_version="550.163.01", branch=550)),
    ({"version": "550.163.01-1"}, None,
     dict(source="version", version="550.163.01-1", state=D.STATE_NOT_LOADED, driver_version="550.163.01", branch=550)),
    (7, None, dict(error="unsupported driver facts of type int")),
])
def test_host_record_every_field_per_input_shape(value, fact, expected):
    assert D.host_record("h1", value, fact, [], "deb") == record("h1", **expected)


def test_host_record_from_package_facts_named_or_by_pattern():
    both = dict(cuda="535.216.03-1", drv=PIN)
    pkgs = {"cuda-drivers": both["cuda"], "nvidia-driver": both["drv"]}
    # named packages: the first named one is the host's version; the other driver version makes the host mixed
    facts = {"packages": APT_MIXED, "loaded_version": "535.261.03", "ansible_facts": {"distribution": "Debian"}}
    assert D.host_record("h1", facts, None, ["cuda-drivers"], "deb") == record(
        "h1", source="package_facts", version="535.216.03-1", driver_version="535.216.03", branch=535, packages=pkgs,
        loaded_version="535.261.03", state=D.STATE_REBOOT, reboot_pending=True, mixed=True)
    # no names: the most telling driver package installed (nvidia-driver); package facts under ansible_facts
    facts = {"ansible_facts": {"packages": APT_MIXED}, "loaded_version": "535.261.03"}
    assert D.host_record("h1", facts, None, [], "deb") == record(
        "h1", source="package_facts", version=PIN, driver_version="535.261.03", branch=535, packages=pkgs,
        loaded_version="535.261.03", state=D.STATE_LOADED, mixed=True)
    r = D.fleet_drift({"h1": {"packages": APT_MIXED}}, packages=["cuda-drivers"])
    assert r["hosts"][0]["version"] == "535.216.03-1" and r["not_loaded"] == ["h1"]


def test_host_record_reports_a_version_it_cannot_read():
    rec = D.host_record("h1", "banana", None, [], "deb")
    assert rec["error"] and "banana" in rec["error"] and rec["driver_version"] is None and rec["branch"] is None


def test_host_state_every_field():
    facts = dict(APT_MIXED, **{"libnvidia-ml1": [dict(version=PIN)], "nvidia-container-toolkit": [dict(version="1.17.4-1")]})
    st = D.host_state(facts, None, "535.261.03\n", "535.261.03")
    assert st == dict(
        package="nvidia-driver", installed_version=PIN,
        packages={"cuda-drivers": "535.216.03-1", "libnvidia-ml1": PIN, "nvidia-driver": PIN},
        family={"libnvidia-ml1": PIN, "nvidia-driver": PIN}, off_driver=["cuda-drivers"],
        driver_version="535.261.03", branch=535, loaded_version="535.261.03", module_loaded=True, state=D.STATE_LOADED,
        reboot_pending=False, mixed=True, on_pin=False, pin="535.261.03")
    # named packages only: the named one decides, the other driver packages still count for mixed / off_driver
    named = D.host_state(facts, ["cuda-drivers"], "")
    assert named["package"] == "cuda-drivers" and named["installed_version"] == "535.216.03-1"
    assert named["loaded_version"] is None and named["module_loaded"] is False and named["state"] == D.STATE_NOT_LOADED
    assert named["off_driver"] == ["libnvidia-ml1", "nvidia-driver"] and named["on_pin"] is None and named["pin"] is None
    # nothing installed: loaded module without packages (a .run install) reads as loaded, else not installed
    assert D.host_state({}, None, "550.163.01")["state"] == D.STATE_LOADED
    empty = D.host_state(None, None, None, "")
    assert empty["state"] == D.STATE_MISSING and empty["family"] == {} and empty["driver_version"] is None and empty["pin"] is None
    assert D.host_state({"nvidia-driver": [dict(version=PIN)]}, None, None, PIN)["on_pin"] is True


def test_host_state_rpm_release_picks_rpm_ordering():
    # an .el release is read the rpm way (the driver version is the part before the release)
    st = D.host_state({"nvidia-driver": [dict(version="550.163.01", release="1.el9", epoch=3, source="rpm")]}, None, "550.163.01")
    assert st["installed_version"] == "3:550.163.01-1.el9" and st["driver_version"] == "550.163.01" and st["state"] == D.STATE_LOADED
    assert D.driver_of("3:550.163.01-1.el9").text == "550.163.01" and D.driver_of("535.261.03-1").text == "535.261.03"
    assert D.driver_of("banana") is None


# ---- _drivers/fleet.py: a whole fleet, every summary field and the table (issue 23) ------------------------------------

FLEET = {
    "a": PIN,
    "b": {"installed_version": "535.216.03-1", "loaded_version": "535.216.03", "state": "loaded", "packages": {"nvidia-driver": "535.216.03-1"}},
    "c": {"nvml": {"available": False, "reason": "driver not loaded"}, "vgpu_host": "pve1"},
    "d": None,
    "e": {"installed_version": PIN, "packages": {"nvidia-driver": PIN, "libcuda1": "535.216.03-1"}, "loaded_version": "535.216.03",
          "state": "reboot pending", "reboot_pending": True, "mixed": True, "vgpu_host": "pve1"},
    "f": {"version": "550.163.01-1"},
    "pve1": {"driver_version": "535.230.02"},                      # a manager because guests name it
    "pve2": {"driver_version": "535.230.02"},                      # a manager because vgpu_pairs names it
    "pve3": {"driver_version": "550.163.01", "role": "vgpu_host"},  # a manager by its role alone
}

FLEET_TABLE = """\
NVIDIA driver fleet: DRIFT - 9 host(s), 5 version(s), pin 535.261.03-1, branch R535, vGPU host pin 535.230.02
HOST              INSTALLED     BRANCH  LOADED      STATE                     STATUS
a                 535.261.03-1  R535    -           installed but not loaded  ok
b                 535.216.03-1  R535    535.216.03  loaded                    OFF PIN (older)
c                 -             -       -           not installed             ERROR: NVML: driver not loaded
d                 -             -       -           not installed             NO DRIVER
e                 535.261.03-1  R535    535.216.03  reboot pending            OFF PIN (mixed); MIXED PACKAGES libcuda1=535.216.03-1, \
nvidia-driver=535.261.03-1; REBOOT PENDING
f                 550.163.01-1  R550    -           installed but not loaded  OFF PIN (newer); WRONG BRANCH
pve1 [vGPU host]  535.230.02    R535    535.230.02  loaded                    ok
pve2 [vGPU host]  535.230.02    R535    535.230.02  loaded                    ok
pve3 [vGPU host]  550.163.01    R550    550.163.01  loaded                    OFF PIN (newer)
versions: 550.163.01-1 x1 (f); 550.163.01 x1 (pve3); 535.261.03-1 x2 (a, e); 535.230.02 x2 (pve1, pve2); 535.216.03-1 x1 (b)
vGPU c (R-) on host pve1 (R535): INCOMPATIBLE - no driver version known for c
vGPU d (R-) on host pve9 (R-): INCOMPATIBLE - no driver version known for pve9
vGPU e (R535) on host pve1 (R535): compatible - same branch
vGPU f (R550) on host pve2 (R535): INCOMPATIBLE - guest branch R550 is newer than the host's R535"""


def test_fleet_drift_every_summary_field_and_the_table():
    r = D.fleet_drift(FLEET, pin=PIN, branch="R535", host_pin="535.230.02", vgpu_pairs={"f": "pve2", "d": "pve9"})
    assert r["table"] == FLEET_TABLE and D.drift_table(r) == FLEET_TABLE
    summary = {k: v for k, v in r.items() if k not in ("hosts", "table", "vgpu")}
    assert summary == dict(
        consistent=False, drift=True, pin=PIN, host_pin="535.230.02", branch=535, target=PIN, host_target="535.230.02",
        host_count=9,
        groups=[dict(version="550.163.01-1", count=1, hosts=["f"], branch=550), dict(version="550.163.01", count=1, hosts=["pve3"], branch=550),
                dict(version=PIN, count=2, hosts=["a", "e"], branch=535), dict(version="535.230.02", count=2, hosts=["pve1", "pve2"], branch=535),
                dict(version="535.216.03-1", count=1, hosts=["b"], branch=535)],
        versions={"550.163.01-1": ["f"], "550.163.01": ["pve3"], PIN: ["a", "e"], "535.230.02": ["pve1", "pve2"], "535.216.03-1": ["b"]},
        off_pin=["b", "e", "f", "pve3"], off_branch=["f"], missing=["c", "d"], errors={"c": "NVML: driver not loaded"},
        mixed=["e"], reboot_pending=["e"], not_loaded=["a", "f"], vgpu_incompatible=["c", "d", "f"])
    assert r["vgpu"] == [
        dict(guest="c", host="pve1", guest_version=None, host_version="535.230.02", compatible=False,
             reason="no driver version known for c", host_branch=535, guest_branch=None),
        dict(guest="d", host="pve9", guest_version=None, host_version=None, compatible=False,
             reason="no driver version known for pve9", host_branch=None, guest_branch=None),
        dict(guest="e", host="pve1", guest_version=PIN, host_version="535.230.02", host_branch=535, guest_branch=535,
             compatible=True, reason="same branch"),
        dict(guest="f", host="pve2", guest_version="550.163.01-1", host_version="535.230.02", host_branch=535, guest_branch=550,
             compatible=False, reason="guest branch R550 is newer than the host's R535")]
    judged = {h["host"]: (h["kind"], h["on_target"], h.get("direction"), h["target"], h["branch_ok"]) for h in r["hosts"]}
    assert judged == {
        "a": ("driver", True, None, PIN, True), "b": ("driver", False, "older", PIN, True),
        "c": ("driver", None, None, PIN, None), "d": ("driver", None, None, PIN, None),
        "e": ("driver", False, "mixed", PIN, True), "f": ("driver", False, "newer", PIN, False),
        "pve1": ("vgpu_host", True, None, "535.230.02", None), "pve2": ("vgpu_host", True, None, "535.230.02", None),
        "pve3": ("vgpu_host", False, "newer", "535.230.02", None)}


def test_fleet_drift_without_pins_takes_the_newest_of_tied_versions_as_reference():
    r = D.fleet_drift(FLEET, hosts=["a", "b", "f", "pve3"])
    assert r["table"].splitlines()[0] == ("NVIDIA driver fleet: DRIFT - 4 host(s), 4 version(s), reference 550.163.01-1 (most common), "
                                          "vGPU host reference 550.163.01")
    assert r["table"].splitlines()[2] == "a                 535.261.03-1  R535    -           installed but not loaded  OFF REFERENCE (older)"
    assert r["target"] == "550.163.01-1" and r["host_target"] == "550.163.01" and r["pin"] is None and r["host_pin"] is None
    assert r["branch"] is None and [h["branch_ok"] for h in r["hosts"]] == [None] * 4


@pytest.mark.parametrize("fleet, drift", [
    ({"a": PIN}, False),
    ({"a": PIN, "b": None}, True),                                               # missing
    ({"a": PIN, "b": "banana"}, True),                                           # error
    ({"a": PIN, "b": "535.216.03-1"}, True),                                     # off pin
    ({"a": PIN, "b": dict(NV_FACTS, mixed=0, vgpu_host=None)}, False),
    ({"a": PIN, "b": dict(NV_FACTS, vgpu_host=None)}, True),                     # mixed
    ({"a": PIN, "b": dict(NV_FACTS, mixed=0, vgpu_host=None, reboot_pending=1)}, True),
])
def test_fleet_drift_each_reason_alone_is_drift(fleet, drift):
    r = D.fleet_drift(fleet, pin="535.261.03")
    assert (r["consistent"], r["drift"]) == (not drift, drift)


def test_fleet_drift_branch_or_vgpu_alone_is_drift_and_reboot_counts_only_when_asked():
    assert D.fleet_drift({"a": "550.163.01-1"}, branch="R535")["drift"] is True
    assert D.fleet_drift({"a": "550.163.01-1"}, branch="R550")["drift"] is False
    assert D.fleet_drift({"a": "550.163.01-1", "h": "535.230.02"}, vgpu_pairs={"a": "h"}, host_pin="535.230.02")["drift"] is True
    rebooting = {"a": dict(NV_FACTS, mixed=0, vgpu_host=None, reboot_pending=1)}
    assert D.fleet_drift(rebooting)["drift"] is True
    assert D.fleet_drift(rebooting, count_reboot_pending=False)["consistent"] is True


def test_fleet_drift_orders_versions_by_package_order_and_rpm_when_asked():
    deb = D.fleet_drift({"a": "535.216.03-9", "b": "535.216.03-10"})
    assert [g["version"] for g in deb["groups"]] == ["535.216.03-10", "535.216.03-9"] and deb["target"] == "535.216.03-10"
    # rpmvercmp: the numeric release 1.1 is newer than 1.el9 (dpkg: older)
    rpm = D.fleet_drift({"x": "550.163.01-1.1", "y": "550.163.01-10.el9"}, pin="550.163.01-1.el9", scheme="rpm")
    assert [g["version"] for g in rpm["groups"]] == ["550.163.01-10.el9", "550.163.01-1.1"]
    assert [(h["host"], h["direction"]) for h in rpm["hosts"]] == [("x", "newer"), ("y", "newer")]
    deb = D.fleet_drift({"x": "550.163.01-1.1"}, pin="550.163.01-1.el9", scheme="deb")
    assert deb["hosts"][0]["direction"] == "older"


def test_newest_first_package_order_then_text_order():
    assert D.newest_first(["535.216.03-9", "535.216.03-10", "535.216.03-2"], "deb") == ["535.216.03-10", "535.216.03-9", "535.216.03-2"]
    assert D.newest_first(["550.163.01-1.el9", "550.163.01-1.1"], "rpm") == ["550.163.01-1.1", "550.163.01-1.el9"]
    assert D.newest_first(["beta", "zeta", "alpha"], "deb") == ["zeta", "beta", "alpha"]


def test_iter_hosts_list_names_and_selection():
    items = [dict(host="a"), dict(inventory_hostname="b"), dict(name="c"), dict(inventory_hostname="d", name="x")]
    assert [h for h, _v in D.iter_hosts(items, None)] == ["a", "b", "c", "d"]
    assert [h for h, _v in D.iter_hosts(items, ["c", "a"])] == ["a", "c"]
    assert list(D.iter_hosts({"b": 1, "a": 2}, ["b", "z"])) == [("b", 1), ("z", None)]
    with pytest.raises(D.DriverInputError, match=r"^list input item without 'host': \{'version': '1'\}$"):
        list(D.iter_hosts([dict(version="1")], None))
    with pytest.raises(D.DriverInputError, match=r"^list input needs dicts with a 'host' key, got 1$"):
        list(D.iter_hosts([1], None))
    with pytest.raises(D.DriverInputError, match=r"^driver_drift expects a mapping of host to facts or a list of dicts, got int$"):
        list(D.iter_hosts(3, None))


def test_drift_table_renders_a_partial_result():
    table = D.drift_table(dict(hosts=[dict(host="x", version="1.0", loaded_version="", state="", on_target=False, branch=0)], target="1.1"))
    assert table.splitlines() == [
        "NVIDIA driver fleet: DRIFT - 1 host(s), 0 version(s), reference 1.1 (most common)",
        "HOST  INSTALLED  BRANCH  LOADED  STATE  STATUS",
        "x     1.0        -       -       -      OFF REFERENCE (differs)"]
    with pytest.raises(D.DriverInputError, match=r"^driver_drift_table expects the result of driver_drift$"):
        D.drift_table(dict(groups=[]))


def test_empty_pins_and_branch_read_as_none():
    r = D.fleet_drift({"a": PIN}, pin="", branch="", host_pin="")
    assert (r["pin"], r["branch"], r["host_pin"], r["target"]) == (None, None, None, PIN)


def test_vgpu_host_off_its_reference_while_guests_have_a_pin():
    r = D.fleet_drift({"g": PIN, "h1": "535.230.02", "h2": {"driver_version": "550.163.01", "role": "vgpu_host"}, "u": PIN},
                      pin=PIN, vgpu_pairs={"g": "h1", "u": "pve9"}, hosts=["g", "h1", "h2", "u"])
    assert "reference" in r["table"].splitlines()[0]
    rows = {line.split()[0]: line for line in r["table"].splitlines()[2:6]}
    assert rows["h1"].endswith("OFF REFERENCE (older)") and rows["g"].endswith("ok")
    assert r["vgpu"][1] == dict(guest="u", host="pve9", guest_version=PIN, host_version=None, compatible=False,
                                reason="no driver version known for pve9", host_branch=None, guest_branch=535)


# rpmvercmp compares alphanumeric segments and treats every other character as a separator, so a RHEL z-stream
# release 1.el9_4 is the same EVR as 1.el9.4; dpkg orders them apart.
def test_rpm_scheme_reads_releases_the_rpm_way_everywhere():
    fleet = {"x": {"installed_version": "3:550.163.01-1.el9_4", "packages": {"nvidia-driver": "3:550.163.01-1.el9_4"}},
             "y": {"installed_version": "3:550.163.01-1.el9_4",
                   "packages": {"nvidia-driver": "3:550.163.01-1.el9_4", "libnvidia-ml": "3:550.163.01-2.el9"}}}
    rpm = D.fleet_drift(fleet, pin="3:550.163.01-1.el9.4", scheme="rpm")
    assert [(h["on_target"], h.get("direction")) for h in rpm["hosts"]] == [(True, None), (False, "mixed")]
    deb = D.fleet_drift(fleet, pin="3:550.163.01-1.el9.4", scheme="deb")
    assert [(h["on_target"], h.get("direction")) for h in deb["hosts"]] == [(False, "newer"), (False, "newer")]
    facts = {"nvidia-driver": [dict(version="550.163.01", release="1.el9_4", epoch=3, source="rpm")]}
    assert D.host_state(facts, None, None, "3:550.163.01-1.el9.4", "rpm")["on_pin"] is True
    assert D.host_state(facts, None, None, "3:550.163.01-1.el9.4", "deb")["on_pin"] is False
    locks = ["nvidia-driver-3:550.163.01-1.el9_4.x86_64"]
    assert D.stale_locks(locks, "3:550.163.01-1.el9.4", True) == []
    pkgs = {"akmod-nvidia": [{"version": "550.163.01", "release": "1.el9_4", "epoch": 3}]}
    assert D.version_locks(pkgs, "3:550.163.01-1.el9.4") == ["akmod-nvidia-3:550.163.01-1.el9_4.*"]


def test_package_version_epoch_zero_or_empty_is_none():
    for epoch in (0, "", "0", None):
        assert D.package_version(dict(version="2.0", epoch=epoch)) == "2.0"
    assert D.package_version(dict(version="2.0", epoch=1)) == "1:2.0"


def test_installed_packages_reads_past_missing_names_and_needs_a_mapping():
    assert D.installed_packages({"b": "3"}, ["a", "b"]) == {"b": "3"}
    assert D.installed_packages(["b"], ["b"]) == {} and D.all_installed(None) == {}


def test_stale_locks_read_past_other_lines_and_take_any_nvidia_named_lock():
    # RPM Fusion's akmod-nvidia / xorg-x11-drv-nvidia are not NVIDIA's family names, but NVIDIA's lock glob *nvidia* holds them
    lines = ["Versionlock list:", "libfoo-3:535.261.03-1.el9.x86_64", "akmod-nvidia-3:535.261.03-1.el9.x86_64",
             "xorg-x11-drv-nvidia-3:550.163.01-1.el9.x86_64"]
    assert D.stale_locks(lines, "550.163.01", True) == ["akmod-nvidia-3:535.261.03-1.el9.x86_64"]
    assert D.stale_locks(lines, "550.163.01", False) == lines[2:]


def test_version_locks_read_past_entries_without_a_version():
    pkgs = {"nvidia-driver": [{"arch": "x86_64"}, {"version": "550.163.01", "release": "1.el9", "epoch": 3}]}
    assert D.version_locks(pkgs, "550.163.01") == ["nvidia-driver-3:550.163.01-1.el9.*"]
