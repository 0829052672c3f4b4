# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/filter/driver.py (fleet drift, drift table, per-host state, repository parsing)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.filter import driver as F
from collection_filters import every  # pylint: disable=import-error
from ansible_collections.gpuops.provision.plugins.plugin_utils._role_filters import driver as RF

PIN = "535.261.03-1"
BPO = "535.216.03-2~bpo12+1"
LAB_PKGS = ["nvidia-smi", "libnvidia-ml1"]


def apt_facts(**versions):
    """ansible_facts.packages shape for apt: {name: [{name, version, arch, source}]}."""
    return {name.replace("_", "-"): [dict(name=name.replace("_", "-"), version=ver, arch="amd64", source="apt")]
            for name, ver in versions.items()}


def lab_fleet(third=BPO, loaded=None):
    return {
        "lab-gpu-1": RF.driver_host_state(apt_facts(nvidia_smi=PIN, libnvidia_ml1=PIN), LAB_PKGS, loaded),
        "lab-gpu-2": RF.driver_host_state(apt_facts(nvidia_smi=PIN, libnvidia_ml1=PIN), LAB_PKGS, loaded),
        "lab-gpu-3": RF.driver_host_state(apt_facts(nvidia_smi=third, libnvidia_ml1=third), LAB_PKGS, loaded),
    }


# --- per-host state --------------------------------------------------------------------------------

def test_host_state_installed_not_loaded():
    st = RF.driver_host_state(apt_facts(nvidia_smi=BPO, libnvidia_ml1=BPO), LAB_PKGS, None, PIN)
    assert st["installed_version"] == BPO and st["package"] == "nvidia-smi"
    assert st["driver_version"] == "535.216.03" and st["branch"] == 535
    assert st["state"] == "installed but not loaded" and not st["reboot_pending"]
    assert st["on_pin"] is False and st["mixed"] is False


def test_host_state_loaded_and_reboot_pending():
    pkgs = apt_facts(nvidia_driver=PIN)
    assert RF.driver_host_state(pkgs, None, "535.261.03\n")["state"] == "loaded"
    st = RF.driver_host_state(pkgs, None, "535.216.03")
    assert st["state"] == "reboot pending" and st["reboot_pending"] is True
    assert RF.driver_host_state({}, None, None)["state"] == "not installed"


def test_host_state_mixed_packages_not_on_pin():
    st = RF.driver_host_state(apt_facts(nvidia_smi=PIN, libnvidia_ml1=BPO), LAB_PKGS, None, PIN)
    assert st["mixed"] is True
    assert st["on_pin"] is False   # primary package on the pin, but not all of them


def test_host_state_rpm_facts():
    pkgs = {"nvidia-driver": [dict(name="nvidia-driver", version="550.163.01", release="1.el9", epoch=3, source="rpm")]}
    st = RF.driver_host_state(pkgs, ["nvidia-driver"], None, "3:550.163.01-1.el9", "rpm")
    assert st["installed_version"] == "3:550.163.01-1.el9" and st["branch"] == 550 and st["on_pin"] is True


# --- drift ---------------------------------------------------------------------------------------

def test_drift_with_pin_names_the_host_off_pin():
    r = F.driver_drift(lab_fleet(), pin=PIN, branch="R535")
    assert r["drift"] and not r["consistent"]
    assert r["off_pin"] == ["lab-gpu-3"]
    assert r["versions"] == {PIN: ["lab-gpu-1", "lab-gpu-2"], BPO: ["lab-gpu-3"]}
    assert [g["version"] for g in r["groups"]] == [PIN, BPO]   # newest first
    rec = {h["host"]: h for h in r["hosts"]}
    assert rec["lab-gpu-3"]["direction"] == "older"
    lines = r["table"].splitlines()
    assert lines[0].startswith("NVIDIA driver fleet: DRIFT - 3 host(s), 2 version(s), pin 535.261.03-1, branch R535")
    row3 = next(line for line in lines if line.startswith("lab-gpu-3"))
    assert BPO in row3 and "OFF PIN (older)" in row3
    assert next(line for line in lines if line.startswith("lab-gpu-1")).endswith("ok")


def test_drift_consistent_after_converge():
    r = F.driver_drift(lab_fleet(third=PIN), pin=PIN)
    assert r["consistent"] and r["off_pin"] == [] and len(r["groups"]) == 1
    assert "CONSISTENT - 3 host(s), 1 version(s)" in r["table"]


def test_drift_without_pin_uses_majority_and_newer_direction():
    fleet = lab_fleet(third="550.163.01-2")
    r = F.driver_drift(fleet)
    assert r["target"] == PIN and r["off_pin"] == ["lab-gpu-3"]
    assert {h["host"]: h.get("direction") for h in r["hosts"]}["lab-gpu-3"] == "newer"
    assert "reference 535.261.03-1 (most common)" in r["table"]


def test_drift_driver_version_pin_accepts_any_packaging():
    r = F.driver_drift(lab_fleet(), pin="535.216.03")
    assert r["off_pin"] == ["lab-gpu-1", "lab-gpu-2"]


def test_drift_branch_mismatch_and_missing_and_errors():
    data = {"a": {"driver_version": "550.163.01"}, "b": None, "c": "garbage", "d": "535.261.03"}
    r = F.driver_drift(data, branch="535")
    assert r["missing"] == ["b"]
    assert "'garbage' must start with a digit" in r["errors"]["c"]
    assert r["off_branch"] == ["a"]
    assert "WRONG BRANCH" in r["table"] and "NO DRIVER" in r["table"] and "ERROR:" in r["table"]


def test_drift_reboot_pending_counts_unless_told_not_to():
    fleet = {h: RF.driver_host_state(apt_facts(nvidia_driver=PIN), None, "535.216.03") for h in ("x", "y")}
    assert F.driver_drift(fleet, pin=PIN)["drift"]
    assert F.driver_drift(fleet, pin=PIN, count_reboot_pending=False)["consistent"]
    assert "REBOOT PENDING" in F.driver_drift(fleet, pin=PIN)["table"]


def test_drift_mixed_host_is_drift():
    fleet = lab_fleet(third=PIN)
    fleet["lab-gpu-2"] = RF.driver_host_state(apt_facts(nvidia_smi=PIN, libnvidia_ml1=BPO), LAB_PKGS, None)
    r = F.driver_drift(fleet, pin=PIN)
    assert r["mixed"] == ["lab-gpu-2"] and r["off_pin"] == ["lab-gpu-2"]
    assert "MIXED PACKAGES libnvidia-ml1=535.216.03-2~bpo12+1, nvidia-smi=535.261.03-1" in r["table"]


def test_drift_from_package_facts_and_hostvars_shape():
    hostvars = {
        "n1": {"ansible_facts": {"packages": apt_facts(nvidia_driver=PIN)}},
        "n2": {"nvidia_driver_facts": RF.driver_host_state(apt_facts(nvidia_driver=BPO))},
        "n3": {"gpu_info": {"nvml": {"available": False, "reason": "the NVIDIA kernel driver is not loaded"}}},
    }
    r = F.driver_drift(hostvars, pin=PIN, hosts=["n1", "n2"])
    assert r["host_count"] == 2 and r["off_pin"] == ["n2"]
    r = F.driver_drift(hostvars, fact="gpu_info", hosts=["n3"])
    assert "driver is not loaded" in r["errors"]["n3"]


def test_drift_list_input():
    r = F.driver_drift([dict(host="a", driver_version="535.261.03"), dict(host="b", driver_version="535.261.03")])
    assert r["consistent"]
    with pytest.raises(AnsibleFilterError, match="host"):
        F.driver_drift([dict(driver_version="535.261.03")])


def test_vgpu_pairs_and_host_pin():
    data = {
        "esx1": {"version": "580.65.05-1OEM.800.1.0.2", "role": "vgpu_host"},
        "vm1": {"driver_version": "580.65.06", "vgpu_host": "esx1"},
        "vm2": {"driver_version": "570.124.06", "vgpu_host": "esx1"},
        "vm3": {"driver_version": "535.247.01", "vgpu_host": "esx1"},
        "vm4": {"driver_version": "550.163.01", "vgpu_host": "esx1"},
    }
    r = F.driver_drift(data, pin="580.65.06")
    # The manager's own version differs from the guests' by design: not drift against the guest pin.
    assert "esx1" not in r["off_pin"]
    assert sorted(r["off_pin"]) == ["vm2", "vm3", "vm4"]
    compat = {v["guest"]: v["compatible"] for v in r["vgpu"]}
    # R580 is an LTSB: R570 (previous branch) and R535 (previous LTSB) guests are compatible, R550 is too old.
    assert compat == {"vm1": True, "vm2": True, "vm3": True, "vm4": False}
    assert r["vgpu_incompatible"] == ["vm4"]
    assert "vGPU vm4 (R550) on host esx1 (R580): INCOMPATIBLE" in r["table"]
    assert "vm3 (R535) on host esx1 (R580): INCOMPATIBLE" not in r["table"]
    r = F.driver_drift(data, pin="580.65.06", host_pin="580.82.07")
    assert "esx1" in r["off_pin"] and "vGPU host pin 580.82.07" in r["table"]


def test_vgpu_pairs_argument_and_unknown_host():
    r = F.driver_drift({"vm": "580.65.06"}, vgpu_pairs={"vm": "esx-missing"})
    assert r["vgpu"][0]["compatible"] is False and "esx-missing" in r["vgpu"][0]["reason"]


def test_drift_rejects_bad_pin_and_input():
    with pytest.raises(AnsibleFilterError, match="belongs to branch R535, not to the requested branch R550"):
        F.driver_drift(lab_fleet(), pin=PIN, branch="550")
    with pytest.raises(AnsibleFilterError, match="mapping of host"):
        F.driver_drift("nope")
    with pytest.raises(AnsibleFilterError, match="expects the result of driver_drift"):
        F.driver_drift_table({})


# --- repository listing, resolution, validation --------------------------------------------------

MADISON = """\
nvidia-smi | 535.261.03-1 | http://deb.debian.org/debian bookworm/non-free amd64 Packages
nvidia-smi | 535.216.03-2~bpo12+1 | http://deb.debian.org/debian bookworm-backports/non-free amd64 Packages
libnvidia-ml1 | 535.261.03-1 | http://deb.debian.org/debian bookworm/non-free amd64 Packages
"""


def test_repo_versions_and_resolve():
    avail = RF.driver_repo_versions(MADISON)
    assert avail == {"nvidia-smi": [PIN, BPO], "libnvidia-ml1": [PIN]}
    res = RF.driver_resolve(avail, LAB_PKGS, "535.261.03")
    assert res["specs"] == ["nvidia-smi=535.261.03-1", "libnvidia-ml1=535.261.03-1"] and res["missing"] == []
    res = RF.driver_resolve(avail, LAB_PKGS, "535.216.03")
    assert res["missing"] == ["libnvidia-ml1"] and res["versions"] == {"nvidia-smi": BPO}
    assert RF.driver_resolve(avail, LAB_PKGS, "535.999.01")["missing"] == LAB_PKGS


def test_repoquery_rpm_specs():
    text = "nvidia-driver 3:550.163.01-1.el9\nnvidia-driver 3:550.144.03-1.el9\nkmod 0:29-10.el9\n"
    avail = RF.driver_repo_versions(text, "repoquery")
    assert avail["kmod"] == ["29-10.el9"]
    res = RF.driver_resolve(avail, ["nvidia-driver"], "550.163.01", "rpm")
    assert res["specs"] == ["nvidia-driver-3:550.163.01-1.el9"]


def test_driver_validate_never_raises():
    assert RF.driver_validate("535.261.03-1", "R535")["ok"]
    bad = RF.driver_validate("535.261.03", "550")
    assert not bad["ok"] and "R550" in bad["errors"][0]
    assert not RF.driver_validate("", None)["ok"]
    assert "not a branch" in RF.driver_validate("535.261.03", "five")["errors"][0]


def test_filter_module_exports_and_wraps_errors():
    filters = every()
    assert {"driver_drift", "driver_drift_table", "driver_host_state", "driver_branch", "driver_version_compare",
            "driver_version_select", "driver_vgpu_compat", "driver_validate", "driver_repo_versions",
            "driver_resolve", "driver_unavailable_message", "driver_off_pin_message"} <= set(filters)
    assert filters["driver_branch"]("535.216.03-2~bpo12+1") == 535
    assert filters["driver_version_compare"](BPO, PIN) == -1
    assert filters["driver_version_select"]([PIN, BPO], "535.216.03") == BPO
    assert filters["driver_vgpu_compat"]("R550", "R535")["compatible"]
    with pytest.raises(AnsibleFilterError, match="'x' is not a driver branch"):
        filters["driver_branch"]("x")


# --- issue 20: the filters are thin wrappers over module_utils ------------------------------------

def test_every_filter_is_a_two_line_wrapper():
    import ast
    for module, names in ((F, F.FilterModule().filters()), (RF, RF.filters())):
        tree = ast.parse(open(module.__file__, encoding="utf-8").read())
        funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        for name in names:
            body = funcs[name].body
            assert len(body) == 1 and isinstance(body[0], ast.Return), name


@pytest.mark.parametrize("name, args, words", [
    ("driver_drift", ({},), "scheme must be deb or rpm, got 'zip'"),
    ("driver_repo_versions", ("x", "yum"), "unknown repository listing format 'yum' (madison or repoquery)"),
    ("driver_flavour", ([], "auto", ""), "driver_flavour needs the driver branch"),
    ("driver_apt_sources", ("x", "http://x", ["b"], ["main"]), "driver_apt_sources expects {path: text} or slurp results, got str"),
])
def test_module_utils_input_errors_read_as_filter_errors(name, args, words):
    kwargs = dict(scheme="zip") if name == "driver_drift" else {}
    for func in (getattr(F if hasattr(F, name) else RF, name), every()[name]):
        with pytest.raises(AnsibleFilterError) as err:
            func(*args, **kwargs)
        assert str(err.value) == "gpuops.provision driver filter: " + words


def test_driver_roll_queue_reads_a_node_info_result_and_puts_unfinished_nodes_first():
    left = {"metadata": {"name": "n2", "annotations": {"gpuops.provision/roll": "nvidia_driver",
                                                       "gpuops.provision/roll-phase": "failed"}}}
    result = {"changed": False, "resources": [{"metadata": {"name": "n1"}}, left, {"metadata": {"name": "n3"}}]}
    assert every()["driver_roll_queue"](result, ["n1", "n2", "n3"], ["n3", "n1"]) == ["n2", "n1", "n3"]
    # The resources alone, another roll, and a skipped read (check mode: no resources).
    assert RF.driver_roll_queue(result["resources"], ["n1", "n2"], [], roll="gpu_health") == []
    assert RF.driver_roll_queue({"skipped": True}, ["n1", "n2"], ["n2"]) == ["n2"]
