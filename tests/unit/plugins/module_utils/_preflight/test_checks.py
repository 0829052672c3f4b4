# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Decision logic of every preflight check, the verdict, the fleet summary and the JUnit rendering."""

from __future__ import annotations

import copy
import datetime
import os
import re
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._preflight import checks as P

from health_readings import healthy  # pylint: disable=import-error  # tests/helpers


def opts(**kw):
    return P.normalize_options(kw)


def dev(address, vendor="0x10de", device="0x26b9", cls="0x030200", driver="vfio-pci"):
    return {"address": address, "vendor": vendor, "device": device, "class": cls, "driver": driver}


def iommu_facts(active=True, isolated=True, driver="vfio-pci", remap=True, units=("dmar0",)):
    gpu = dev("0000:65:00.0", driver=driver)
    audio = dev("0000:65:00.1", device="0x22ba", cls="0x040300", driver=driver)
    nic = dev("0000:66:00.0", vendor="0x8086", device="0x1572", cls="0x020000", driver="i40e")
    groups = [{"id": 40, "devices": [gpu, audio] + ([] if isolated else [nic])}] if active else []
    gpus = [dict(gpu, iommu_group=40, isolated=isolated,
                 isolation_reason="IOMMU group 40 holds only this card's functions and bridges" if isolated
                 else "IOMMU group 40 also holds 0000:66:00.0")] if active else []
    return {"active": active, "kind": "intel" if units else None, "units": list(units), "groups": groups, "gpus": gpus,
            "interrupt_remapping": remap, "allow_unsafe_interrupts": False, "cmdline": "ro intel_iommu=on iommu=pt"}


# gpu_info's health readings of a healthy, busy A100 (module_utils/_preflight/health.py judges them; test_health.py tests that).
HEALTHY = healthy()


def gpu_facts(driver="550.163.01", available=True, mig=("enabled", "enabled")):
    g = {"index": 0, "model": "NVIDIA A100-SXM4-40GB", "mig_mode": {"current": mig[0], "pending": mig[1]} if mig else None,
         "pci_address": "0000:17:00.0", "health": copy.deepcopy(HEALTHY)}
    return {"nvml": {"available": available, "driver_version": driver if available else None,
                     "reason": None if available else "the NVIDIA kernel driver is not loaded"}, "gpus": [g],
            "kernel_log": {"source": "dmesg", "read": True, "error": None, "xid_events": []}}


def lic_facts(licensed=True, days=200, status="valid", mode="vgpu", supported=True):
    return {"nvml": {"available": True}, "licensed": licensed, "gridd": {"feature_type": 4},
            "gpus": [{"index": 0, "model": "NVIDIA L40S", "virtualization_mode": mode, "supported": supported,
                      "licensed": licensed, "state": "licensed" if licensed else "unlicensed",
                      "product": "NVIDIA Virtual Compute Server", "expiry_status": status if licensed else "not_available",
                      "expiry": "2027-06-01T00:00:00Z" if licensed and status == "valid" else None,
                      "days_left": days if licensed and status == "valid" else None}]}


# --- iommu_active -------------------------------------------------------------------------------------------------

def test_iommu_active_pass_and_fail():
    o = opts(node_role="passthrough_host")
    assert P.check_iommu_active({"iommu": iommu_facts()}, o)["status"] == "pass"
    res = P.check_iommu_active({"iommu": iommu_facts(active=False, units=())}, o)
    assert res["status"] == "fail" and "no IOMMU unit" in res["evidence"] and "VT-d" in res["remedy"]
    res = P.check_iommu_active({"iommu": iommu_facts(active=False)}, o)
    assert res["status"] == "fail" and "no IOMMU groups were created" in res["evidence"]


def test_iommu_active_warns_without_interrupt_remapping():
    res = P.check_iommu_active({"iommu": iommu_facts(remap=False)}, opts())
    assert res["status"] == "warn" and "interrupt remapping" in res["evidence"] and res["remedy"]


def test_iommu_active_fails_when_facts_are_missing_or_failed():
    assert "were not gathered" in P.check_iommu_active({}, opts())["evidence"]
    res = P.check_iommu_active({"iommu": {"failed": True, "msg": "Cannot read IOMMU state: boom"}}, opts())
    assert res["status"] == "fail" and "boom" in res["evidence"]


# --- iommu_isolation ----------------------------------------------------------------------------------------------

def test_isolation_pass_fail_and_selection():
    assert P.check_iommu_isolation({"iommu": iommu_facts()}, opts())["status"] == "pass"
    res = P.check_iommu_isolation({"iommu": iommu_facts(isolated=False)}, opts())
    assert res["status"] == "fail" and "0000:66:00.0" in res["evidence"] and "slot" in res["remedy"]
    # only the listed GPUs count; an address that is not there fails naming it
    res = P.check_iommu_isolation({"iommu": iommu_facts(isolated=False)}, opts(passthrough_gpus=["0000:b3:00.0"]))
    assert res["status"] == "fail" and "0000:b3:00.0 not found" in res["evidence"]
    res = P.check_iommu_isolation({"iommu": iommu_facts()}, opts(passthrough_gpus=["0000:65:00.0"]))
    assert res["status"] == "pass"


def test_isolation_fails_without_iommu_or_gpu():
    assert P.check_iommu_isolation({"iommu": iommu_facts(active=False)}, opts())["status"] == "fail"
    facts = iommu_facts()
    facts["gpus"] = []
    assert "no NVIDIA GPU" in P.check_iommu_isolation({"iommu": facts}, opts())["evidence"]


# --- vfio_bound ---------------------------------------------------------------------------------------------------

def test_vfio_all_functions_of_the_card_must_use_vfio():
    assert P.check_vfio_bound({"iommu": iommu_facts()}, opts())["status"] == "pass"
    facts = iommu_facts()
    facts["groups"][0]["devices"][1]["driver"] = "snd_hda_intel"  # the HDMI audio function left on the host driver
    res = P.check_vfio_bound({"iommu": facts}, opts())
    assert res["status"] == "fail" and "0000:65:00.1 is bound to snd_hda_intel" in res["evidence"]
    assert "ids=10de:22ba" in res["remedy"] and "update-initramfs" in res["remedy"]


def test_vfio_explicit_addresses():
    res = P.check_vfio_bound({"iommu": iommu_facts(driver="nvidia")}, opts(vfio_devices=["0000:65:00.0", "0000:99:00.0"]))
    assert res["status"] == "fail"
    assert "0000:65:00.0 is bound to nvidia" in res["evidence"] and "0000:99:00.0 is not present" in res["evidence"]
    res = P.check_vfio_bound({"iommu": iommu_facts()}, opts(vfio_devices=["0000:65:00.0"]))
    assert res["status"] == "pass"


def test_vfio_no_gpu_function_fails():
    res = P.check_vfio_bound({"iommu": iommu_facts(active=False)}, opts())
    assert res["status"] == "fail" and "no NVIDIA GPU function" in res["evidence"]


# --- driver_version -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("installed,loaded,nvml,pin,status,text", [
    ("550.163.01-1", "550.163.01", "550.163.01", "550.163.01", "pass", "installed = loaded = pinned"),
    ("550.163.01-1", "550.163.01", "550.163.01", "550.163.01-1", "pass", "pinned"),
    (None, None, None, "550.163.01", "fail", "no NVIDIA driver package installed"),
    ("550.163.01-1", None, None, "550.163.01", "fail", "kernel module is not loaded"),
    ("550.163.01-1", "550.144.03", "550.144.03", "550.163.01", "fail", "reboot pending"),
    ("550.144.03-1", "550.144.03", "550.144.03", "550.163.01", "fail", "is not the pinned 550.163.01"),
    ("550.163.01-1", "550.163.01", "550.163.01", "550.163.01-2", "fail", "is not the pinned"),
    ("550.163.01-1", "550.163.01", "550.163.01", "", "warn", "no pinned version"),
    ("550.163.01-1", "550.163.01", "550.90.07", "550.163.01", "fail", "NVML reports driver 550.90.07"),
    ("garbage", "550.163.01", "550.163.01", "550.163.01", "fail", "not understood"),
])
def test_driver_version(installed, loaded, nvml, pin, status, text):
    facts = {"driver": {"installed_version": installed, "loaded_version": loaded}}
    if nvml:
        facts["gpu"] = gpu_facts(driver=nvml)
    res = P.check_driver_version(facts, opts(driver_version=pin))
    assert res["status"] == status, res
    assert text in res["evidence"], res
    assert bool(res["remedy"]) == (status != "pass")


def test_driver_loaded_version_falls_back_to_nvml_and_nvml_failure_fails():
    facts = {"driver": {"installed_version": "550.163.01-1", "loaded_version": None}, "gpu": gpu_facts()}
    assert P.check_driver_version(facts, opts(driver_version="550.163.01"))["status"] == "pass"
    facts = {"driver": {"installed_version": "550.163.01-1", "loaded_version": "550.163.01"}, "gpu": gpu_facts(available=False)}
    res = P.check_driver_version(facts, opts(driver_version="550.163.01"))
    assert res["status"] == "fail" and "NVML is not usable" in res["evidence"]


def test_driver_bad_pin_is_an_option_error():
    with pytest.raises(P.PreflightError):
        P.check_driver_version({"driver": {"installed_version": "550.163.01-1", "loaded_version": "550.163.01"}},
                               opts(driver_version="not a version!"))


# --- license ------------------------------------------------------------------------------------------------------

def test_license_pass_warn_fail_by_days():
    o = opts(license_min_days=7, license_warn_days=30)
    assert P.check_license({"license": lic_facts(days=200)}, o)["status"] == "pass"
    res = P.check_license({"license": lic_facts(days=20)}, o)
    assert res["status"] == "warn" and "in 20 days" in res["evidence"]
    res = P.check_license({"license": lic_facts(days=3)}, o)
    assert res["status"] == "fail" and "in 3 days (minimum 7)" in res["evidence"] and "renew" in res["remedy"]
    res = P.check_license({"license": lic_facts(days=-2)}, o)
    assert res["status"] == "fail"


def test_license_unlicensed_and_not_supported_fail():
    res = P.check_license({"license": lic_facts(licensed=False)}, opts())
    assert res["status"] == "fail" and "unlicensed" in res["evidence"] and "nvidia-gridd" in res["remedy"]
    assert "FeatureType 4" in res["evidence"]
    res = P.check_license({"license": lic_facts(supported=False)}, opts(license_required=True))
    assert res["status"] == "fail" and "no licensable feature" in res["evidence"]


def test_license_permanent_passes():
    assert P.check_license({"license": lic_facts(status="permanent")}, opts())["status"] == "pass"


def service(*endpoints, error=None, expires="2037-01-01T00:00:00Z"):
    eps = [{"host": h, "port": port, "kind": "DLS", "services": ["auth", "lease"], "tcp": ok, "tls": ok,
            "tls_version": "TLSv1.3" if ok else None, "error": None if ok else "TCP connection to %s:%d failed: "
            "Connection refused" % (h, port)} for h, port, ok in endpoints]
    token = None if error else {"file": "client_configuration_token.tok", "service_instance": "si-1",
                                "issued_at": "2026-01-01T00:00:00Z", "expires_at": expires}
    return {"token": token, "error": error, "endpoints": eps}


def guest(service_facts=None, model="NVIDIA A100-4C", feature_type=4, product="NVIDIA Virtual Compute Server",
          licensed=True):
    lic = lic_facts(licensed=licensed)
    lic["gpus"][0].update(model=model, product=product if licensed else None)
    lic["gridd"] = {"feature_type": feature_type} if feature_type is not None else {}
    if service_facts is not None:
        lic["service"] = service_facts
    return {"license": lic}


def test_license_service_reached_ha_partly_down_and_unreachable():
    o = opts(node_role="vgpu_guest")
    ok = P.check_license_service(guest(service(("dls-1.lab", 443, True))), o)
    assert ok["status"] == "pass"
    assert ok["evidence"] == ("token client_configuration_token.tok of service instance si-1: DLS dls-1.lab:443 "
                              "answers (TLSv1.3)")
    ha = P.check_license_service(guest(service(("dls-1.lab", 443, True), ("dls-2.lab", 443, False))), o)
    assert ha["status"] == "warn" and "DLS dls-2.lab:443 does NOT answer: TCP connection to dls-2.lab:443 failed: " \
        "Connection refused" in ha["evidence"] and "HA node" in ha["remedy"]
    down = P.check_license_service(guest(service(("dls-1.lab", 443, False))), o)
    assert down["status"] == "fail" and "firewall" in down["remedy"]
    none = P.check_license_service(guest(service(error="no client configuration token (*.tok) in /etc/x")), o)
    assert none["status"] == "fail" and none["evidence"] == "no client configuration token (*.tok) in /etc/x"
    unchecked = P.check_license_service(guest(None), o)
    assert unchecked["status"] == "fail" and "service_check=false" in unchecked["evidence"]


def test_license_service_warns_before_the_token_expires_and_skips_without_a_vgpu():
    o = opts(node_role="vgpu_guest", license_warn_days=30)
    soon = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=10, hours=1)).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    res = P.check_license_service(guest(service(("dls-1.lab", 443, True), expires=soon)), o)
    assert res["status"] == "warn" and res["evidence"].endswith("the token expires %s, in 10 days" % soon)
    later = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=31)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert P.check_license_service(guest(service(("dls-1.lab", 443, True), expires=later)), o)["status"] == "pass"
    worker = P.check_license_service({"license": lic_facts(mode="none", supported=False, licensed=False)}, opts())
    assert worker["status"] == "skip"


@pytest.mark.parametrize("model, feature_type, product, status, words", [
    ("NVIDIA A100-4C", 4, "NVIDIA Virtual Compute Server", "pass", "compute licenses C-series vGPUs"),
    ("NVIDIA L40S-48Q", 2, "NVIDIA RTX Virtual Workstation", "pass", "vws licenses Q-series vGPUs"),
    ("NVIDIA A100-4C", 2, None, "fail",
     "GPU 0 (NVIDIA A100-4C) (C-series): gridd FeatureType 2: vws does not license C-series vGPUs (needs compute)"),
    ("NVIDIA L40S-48Q", 4, "NVIDIA Virtual Compute Server", "fail", "compute does not license Q-series vGPUs"),
    ("NVIDIA L40S-2B", 2, "NVIDIA RTX Virtual Workstation", "pass", "vws licenses B-series vGPUs"),
    ("NVIDIA A100-4C", 1, None, "pass", "FeatureType 1 (NVIDIA vGPU) lets the driver pick"),
    ("NVIDIA A100-4C", None, None, "fail", "no FeatureType in gridd.conf and no licensed product"),
    ("NVIDIA L40S", 4, None, "pass", "no vGPU series in the name"),
])
def test_license_feature_fits_the_profile_series(model, feature_type, product, status, words):
    res = P.check_license_feature(guest(model=model, feature_type=feature_type, product=product,
                                        licensed=product is not None), opts(node_role="vgpu_guest"))
    assert res["status"] == status and words in res["evidence"], res
    assert ("FeatureType" in res["remedy"]) == (status == "fail")


def test_license_feature_vws_for_c_series_only_when_declared():
    facts = guest(model="GRID A100-4C", feature_type=2, product=None, licensed=False)
    assert P.check_license_feature(facts, opts(node_role="vgpu_guest"))["status"] == "fail"
    assert P.check_license_feature(facts, opts(node_role="vgpu_guest", license_vws_covers_c=True))["status"] == "pass"


def test_license_applicability():
    bare = lic_facts(licensed=False, mode="none", supported=False)
    assert P.check_license({"license": bare}, opts())["status"] == "skip"
    assert P.check_license({"license": bare}, opts(license_required=False))["status"] == "skip"
    assert P.check_license({"license": bare}, opts(license_required=True))["status"] == "fail"
    # a declared vGPU guest needs a licence even when the facts are missing
    res = P.check_license({}, opts(node_role="vgpu_guest"))
    assert res["status"] == "fail" and "not gathered" in res["evidence"]
    # auto: NVML reporting a vGPU makes it required whatever the role says
    assert P.check_license({"license": lic_facts(licensed=False)}, opts(node_role="k8s_worker"))["status"] == "fail"


# --- MIG ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("driver,status", [("535.261.03", "fail"), ("550.90.07", "pass")])
def test_mig_pending_checks_the_documented_minimum_driver(driver, status):
    facts = gpu_facts(driver=driver)
    facts["gpus"][0].update(model="NVIDIA H200", pci_device_id="0x233510DE")
    res = P.check_mig_pending({"gpu": facts}, opts())
    assert res["status"] == status
    if status == "fail":
        assert res["evidence"] == ("GPU 0 (NVIDIA H200): driver 535.261.03 is older than 550.90.07, the minimum NVIDIA "
                                   "documents for MIG on H200 (R550)")
        assert "playbooks/driver_pin.yml" in res["remedy"]
    # MIG disabled and not pending: the driver minimum does not matter.
    facts["gpus"][0]["mig_mode"] = {"current": "disabled", "pending": "disabled"}
    assert P.check_mig_pending({"gpu": facts}, opts())["status"] == "pass"


def test_mig_pending():
    assert P.check_mig_pending({"gpu": gpu_facts()}, opts())["status"] == "pass"
    res = P.check_mig_pending({"gpu": gpu_facts(mig=("disabled", "enabled"))}, opts())
    assert res["status"] == "fail" and "pending enabled" in res["evidence"] and "nvidia-smi -r -i 0" in res["remedy"]
    assert P.check_mig_pending({"gpu": gpu_facts(mig=None)}, opts())["status"] == "skip"
    assert P.check_mig_pending({"gpu": gpu_facts(available=False)}, opts())["status"] == "fail"


def _mig_result(changed, selected=True, skipped=None):
    before = {"mig_mode": {"current": "enabled", "pending": "enabled"}, "mig_devices": {"1g.5gb": 7}}
    after = {"mig_mode": {"current": "enabled", "pending": "enabled"}, "mig_devices": {"3g.20gb": 2}}
    g = {"index": 0, "model": "NVIDIA A100-SXM4-40GB", "selected": selected, "changed": changed, "reset_required": False,
         "before": before, "after": after if changed else before}
    if skipped:
        g["skipped"] = skipped
    return {"gpus": [g], "changed": changed}


def test_mig_geometry():
    o = opts(mig_target=True)
    assert P.check_mig_geometry({}, opts())["status"] == "skip"
    assert P.check_mig_geometry({"mig": _mig_result(False)}, o)["status"] == "pass"
    res = P.check_mig_geometry({"mig": _mig_result(True)}, o)
    assert res["status"] == "fail" and "is MIG enabled {1g.5gb: 7}, target MIG enabled {3g.20gb: 2}" in res["evidence"]
    assert "mig_reconfigure" in res["remedy"]
    res = P.check_mig_geometry({"mig": {"failed": True, "msg": "GPU 0: cannot apply"}}, o)
    assert res["status"] == "fail" and "cannot be applied" in res["evidence"]
    assert P.check_mig_geometry({"mig": _mig_result(False, skipped="GPU does not support MIG")}, o)["status"] == "warn"
    assert P.check_mig_geometry({}, o)["status"] == "fail"


# --- kernel_args --------------------------------------------------------------------------------------------------

def test_kernel_args():
    facts = {"cmdline": "BOOT_IMAGE=/vmlinuz ro intel_iommu=on iommu=pt quiet"}
    assert P.check_kernel_args(facts, opts())["status"] == "skip"
    assert P.check_kernel_args(facts, opts(kernel_args=["intel_iommu=on", "iommu", "quiet"]))["status"] == "pass"
    res = P.check_kernel_args(facts, opts(kernel_args=["intel_iommu=on", "iommu=off", "nvidia-drm.modeset=1"]))
    assert res["status"] == "fail"
    assert "iommu=off wanted, iommu=pt present" in res["evidence"] and "nvidia-drm.modeset=1 missing" in res["evidence"]
    assert "update-grub" in res["remedy"]
    # falls back to the cmdline iommu_info read
    assert P.check_kernel_args({"iommu": iommu_facts()}, opts(kernel_args=["iommu=pt"]))["status"] == "pass"
    assert P.check_kernel_args({}, opts(kernel_args=["iommu=pt"]))["status"] == "fail"


# --- options, verdict, rendering ----------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [
    {"node_role": "router"}, {"checks": ["iommu_active", "nope"]}, {"license_required": "maybe"},
    {"license_min_days": "soon"}, {"vfio_devices": "0000:65:00.0"}, {"kernel_args": ["=x"]}, {"colour": "blue"},
])
def test_invalid_options_raise(bad):
    with pytest.raises(P.PreflightError):
        P.normalize_options(bad)


def passing_worker_facts():
    return {"driver": {"installed_version": "550.163.01-1", "loaded_version": "550.163.01"}, "gpu": gpu_facts(),
            "license": lic_facts(mode="none", supported=False, licensed=False), "mig": _mig_result(False),
            "cmdline": "ro nvidia-drm.modeset=1"}


def dra_facts(driver="570.172.08", mig=("disabled", "disabled"), cdi=None, instances=None):
    facts = {"gpu": gpu_facts(driver=driver, mig=mig)}
    facts["gpu"]["gpus"][0].update(uuid="GPU-0", instances=instances or [])
    facts["cdi"] = cdi if cdi is not None else [{"path": "/etc/cdi/nvidia.yaml", "text": (
        "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n  containerEdits: {}\n"
        "containerEdits: {}\n")}]
    return facts


def test_a_dra_worker_runs_the_dra_checks_and_not_mig_geometry():
    rep = P.evaluate("n", dra_facts(), {"node_role": "k8s_dra_worker", "cdi_spec_dirs": ["/etc/cdi", "/var/run/cdi"]})
    checks = {c["id"]: c for c in rep["checks"]}
    assert checks["mig_geometry"]["status"] == "skip"
    assert [checks[c]["status"] for c in P.DRA_CHECK_IDS] == ["pass", "pass", "pass"], checks
    # Without the runtime's CDI directories the gate cannot confirm it reads the DRA driver's: a warning.
    unknown = P.evaluate("n", dra_facts(), {"node_role": "k8s_dra_worker"})
    assert [c["status"] for c in unknown["checks"] if c["id"] == "dra_cdi"] == ["warn"]
    assert checks["dra_driver"]["title"] == "NVIDIA driver new enough for the DRA driver (and ComputeDomains)"
    # Other roles skip them.
    worker = P.evaluate("n", dra_facts(), {})
    assert all(c["status"] == "skip" for c in worker["checks"] if c["id"] in P.DRA_CHECK_IDS)


def test_dra_driver_floor_and_compute_domains():
    o = opts(node_role="k8s_dra_worker")
    assert P.check_dra_driver(dra_facts(driver="565.57.01"), o)["status"] == "pass"
    low = P.check_dra_driver(dra_facts(driver="550.163.01"), o)
    assert low["status"] == "fail" and "550.163.01" in low["evidence"] and "565" in low["evidence"]
    cd = opts(node_role="k8s_dra_worker", dra_compute_domains=True)
    assert P.check_dra_driver(dra_facts(driver="570.158.00"), cd)["status"] == "fail"
    assert P.check_dra_driver(dra_facts(driver="570.158.01"), cd)["status"] == "pass"
    no_nvml = P.check_dra_driver({"gpu": gpu_facts(available=False)}, o)
    assert no_nvml["status"] == "fail" and no_nvml["evidence"].startswith("NVML is not available")
    with pytest.raises(P.PreflightError, match="^dra_driver_minimum: "):
        P.check_dra_driver(dra_facts(), opts(node_role="k8s_dra_worker", dra_driver_minimum="latest"))


def test_dra_cdi_reads_the_files_the_node_has_and_names_a_broken_one():
    o = opts(node_role="k8s_dra_worker", cdi_spec_dirs=["/etc/cdi", "/var/run/cdi"])
    assert P.check_dra_cdi(dra_facts(), o)["status"] == "pass"
    broken = dra_facts(cdi=[{"path": "/etc/cdi/nvidia.yaml", "text": "kind: [unclosed"}])
    res = P.check_dra_cdi(broken, o)
    assert res["status"] == "warn" and "/etc/cdi/nvidia.yaml" in res["evidence"]
    unread = dra_facts(cdi=[{"path": "/var/run/cdi/x.json", "error": "Permission denied"}])
    assert "Permission denied" in P.check_dra_cdi(unread, o)["evidence"]
    off = P.check_dra_cdi(dra_facts(), opts(node_role="k8s_dra_worker", cdi_spec_dirs=[]))
    assert off["status"] == "fail"


def test_dra_mig_refuses_partitions_and_a_declared_target_when_the_dra_driver_manages_mig():
    manages = opts(node_role="k8s_dra_worker", dra_manages_mig=True)
    hopper = dra_facts()
    hopper["gpu"]["gpus"][0]["model"] = "NVIDIA H100 80GB HBM3"
    assert P.check_dra_mig(hopper, manages)["status"] == "pass"
    # An A100 with MIG off cannot switch without a reset: the DRA driver offers it whole (a warning).
    assert P.check_dra_mig(dra_facts(), manages)["status"] == "warn"
    parted = dra_facts(mig=("enabled", "enabled"), instances=[{"gi_id": 1, "profile": "3g.40gb"}])
    assert P.check_dra_mig(parted, manages)["status"] == "fail"
    declared = opts(node_role="k8s_dra_worker", dra_manages_mig=True, mig_target=True)
    assert P.check_dra_mig(dra_facts(), declared)["status"] == "fail"
    # Static MIG (DynamicMIG off, the DRA driver's default): the partitions that exist are what it offers.
    assert P.check_dra_mig(parted, opts(node_role="k8s_dra_worker"))["status"] == "pass"


def test_evaluate_lists_every_check_and_aggregates():
    o = {"driver_version": "550.163.01", "mig_target": True, "kernel_args": ["nvidia-drm.modeset=1"]}
    rep = P.evaluate("gpu-1", passing_worker_facts(), o, "2026-11-29T12:00:00Z")
    assert [c["id"] for c in rep["checks"]] == list(P.CHECK_IDS)
    assert rep["verdict"] == "pass" and rep["ready"] and rep["failed_checks"] == []
    # gpu_dcgm is skipped unless DCGM's diagnostic is asked for.
    assert rep["counts"] == {"pass": 4 + len(P.HEALTH_CHECK_IDS) - 1, "fail": 0, "warn": 0,
                             "skip": 6 + len(P.DRA_CHECK_IDS) + 1}
    assert [c["status"] for c in rep["checks"][:3]] == ["skip"] * 3
    assert rep["checks"][0]["evidence"] == "not selected for a k8s_worker node"
    facts = passing_worker_facts()
    facts["gpu"]["gpus"][0]["mig_mode"]["pending"] = "disabled"
    rep = P.evaluate("gpu-1", facts, o)
    assert rep["verdict"] == "fail" and not rep["ready"] and rep["failed_checks"] == ["mig_pending"]


def test_warn_verdict_and_fail_on_warn():
    o = {"mig_target": True, "kernel_args": ["nvidia-drm.modeset=1"]}  # no pin -> driver warns
    rep = P.evaluate("gpu-1", passing_worker_facts(), o)
    assert rep["verdict"] == "warn" and rep["ready"] and rep["warned_checks"] == ["driver_version"]
    rep = P.evaluate("gpu-1", passing_worker_facts(), dict(o, fail_on_warn=True))
    assert rep["verdict"] == "fail" and not rep["ready"]


def test_explicit_checks_override_role_defaults():
    rep = P.evaluate("h", {"cmdline": "ro iommu=pt"}, {"checks": ["kernel_args"], "kernel_args": ["iommu=pt"]})
    assert rep["selected_checks"] == ["kernel_args"] and rep["verdict"] == "pass"


def test_fleet_summary_and_junit():
    good = P.evaluate("a-good", passing_worker_facts(), {"driver_version": "550.163.01", "mig_target": True,
                                                         "kernel_args": ["nvidia-drm.modeset=1"]})
    facts = copy.deepcopy(passing_worker_facts())
    facts["driver"]["loaded_version"] = "550.144.03"
    bad = P.evaluate("b-bad", facts, {"driver_version": "550.163.01"})
    gone = P.missing_report("c-gone", "unreachable")
    summary = P.fleet_summary([bad, good, gone])
    assert (summary["total"], summary["passed"], summary["failed"]) == (3, 1, 2)
    assert summary["ready"] == ["a-good"] and summary["not_ready"] == ["b-bad", "c-gone"]
    assert "b-bad" in summary["table"] and "driver_version" in summary["table"]

    root = ET.fromstring(P.junit_xml([bad, good, gone]).split("\n", 1)[1])
    assert root.get("tests") == str(2 * len(P.CHECK_IDS) + 1) and root.get("failures") == "2"
    suites = dict((s.get("name"), s) for s in root.findall("testsuite"))
    assert sorted(suites) == ["node_preflight.a-good", "node_preflight.b-bad", "node_preflight.c-gone"]
    case = [c for c in suites["node_preflight.b-bad"] if c.get("name") == "driver_version"][0]
    assert "reboot pending" in case.find("failure").get("message") and "remedy: reboot" in case.find("failure").text
    assert suites["node_preflight.a-good"].get("failures") == "0"
    assert [c for c in suites["node_preflight.a-good"] if c.get("name") == "iommu_active"][0].find("skipped") is not None
    assert suites["node_preflight.c-gone"].find("testcase").get("name") == "facts"


def test_junit_escapes_markup_in_evidence():
    rep = P.evaluate("n", {"cmdline": "ro a=<b>&c"}, {"checks": ["kernel_args"], "kernel_args": ["a=x"]})
    xml = P.junit_xml([rep])
    root = ET.fromstring(xml.split("\n", 1)[1])
    assert "<b>&c" in root.find("testsuite/testcase/failure").get("message")


@pytest.mark.parametrize("toleration,tolerated", [
    ({"operator": "Exists"}, True),                                              # wildcard
    ({"operator": "Exists", "effect": "NoSchedule"}, True),
    ({"operator": "Exists", "effect": "NoExecute"}, False),                      # another effect
    ({"key": "gpuops.io/preflight", "operator": "Exists"}, True),
    ({"key": "gpuops.io/preflight", "value": "pending"}, True),                  # Equal is the default operator
    ({"key": "gpuops.io/preflight", "operator": "Equal", "value": "pending", "effect": ""}, True),
    ({"key": "gpuops.io/preflight", "operator": "Equal", "value": "other"}, False),
    ({"key": "gpuops.io/preflight"}, False),                                     # Equal with no value
    ({"key": "other", "operator": "Exists"}, False),
    ({"operator": "Equal"}, False),                                              # no key needs Exists
    ({"value": "pending"}, False),
])
def test_tolerates_as_kubernetes_toleration_tolerates_taint(toleration, tolerated):
    assert P.tolerates([toleration], "gpuops.io/preflight", "pending", "NoSchedule") is tolerated
    # any one toleration of the list is enough
    assert P.tolerates([{"key": "other", "operator": "Exists"}, toleration], "gpuops.io/preflight", "pending",
                       "NoSchedule") is tolerated


def test_tolerates_a_taint_without_value_and_no_tolerations():
    assert P.tolerates([{"key": "k", "operator": "Equal"}], "k", None, "NoSchedule") is True
    assert P.tolerates([{"key": "k", "value": "v"}], "k", "", "NoSchedule") is False
    assert P.tolerates([], "k", "v", "NoSchedule") is False
    assert P.tolerates(None, "k", "v", "NoSchedule") is False


# ---- the record per check and what is derived from it ---------------------------------------------------------------

def test_default_checks_per_node_role_come_from_the_records():
    health = ("gpu_count", "gpu_ecc", "gpu_memory", "gpu_xid", "gpu_pcie", "gpu_thermal", "gpu_persistence", "gpu_dcgm")
    lic = ("driver_version", "license", "license_service", "license_feature", "mig_pending")
    assert P.DEFAULT_CHECKS == {
        "passthrough_host": ("iommu_active", "iommu_isolation", "vfio_bound", "kernel_args"),
        "k8s_worker": lic + ("mig_geometry", "kernel_args") + health,
        "vgpu_guest": lic + ("mig_geometry", "kernel_args") + health,
        "k8s_dra_worker": lic + ("kernel_args", "dra_driver", "dra_cdi", "dra_mig") + health,
    }
    assert P.DRA_CHECK_IDS == ("dra_driver", "dra_cdi", "dra_mig") and P.HEALTH_CHECK_IDS == health
    assert set(P.CHECKS) == set(P.TITLES) == set(P.CHECK_IDS) and len(P.CHECK_IDS) == len(P.RECORDS) == 21
    assert all(set(c.facts) <= set(P.FACTS) and set(c.roles) <= set(P.NODE_ROLES) and c.roles for c in P.RECORDS)


def _gathered_before(checks):
    """What roles/node_preflight/tasks/gather.yml read for ``checks`` before the records said it (its `when:` tests)."""
    out = set()
    if set(checks) & {"iommu_active", "iommu_isolation", "vfio_bound", "kernel_args"}:
        out.add("iommu")
    if any(re.match("gpu_|dra_|driver_version$|mig_pending$", c) for c in checks):
        out.add("gpu")
    if any(re.match("gpu_", c) for c in checks):
        out.add("health")
    for check, fact in (("gpu_xid", "xid"), ("mig_geometry", "mig"), ("dra_cdi", "cdi"), ("dra_cdi", "runtime"), ("gpu_dcgm", "dcgm"),
                        ("driver_version", "driver")):
        if check in checks:
            out.add(fact)
    if any(re.match("license", c) for c in checks):
        out.add("license")
    return out


@pytest.mark.parametrize("checks", [[c] for c in P.CHECK_IDS] + [list(v) for v in P.DEFAULT_CHECKS.values()] + [[]])
def test_needs_reads_what_the_gather_tasks_read_for_the_checks(checks):
    got = P.needs(checks)
    assert set(got) == _gathered_before(checks)
    assert got == [f for f in P.FACTS if f in got]      # in FACTS order, no duplicates


def test_needs_ignores_unknown_ids_and_none():
    assert P.needs(["no_such_check"]) == [] and P.needs(None) == []
    assert P.needs(["gpu_dcgm", "license"]) == ["gpu", "health", "license", "dcgm"]


def test_docs_table_lists_every_check_in_record_order_with_its_node_roles():
    with open(os.path.join(os.path.dirname(__file__), "../../../../../docs/preflight.md"), encoding="utf-8") as fh:
        rows = re.findall(r"^\| `([a-z_]+)` \| .* \| ([^|]+) \|$", fh.read(), re.M)
    assert tuple(check_id for check_id, _roles in rows) == P.CHECK_IDS
    for check_id, roles in rows:
        assert tuple(re.findall(r"`([a-z0-9_]+)`", roles)) == tuple(r for r in P.NODE_ROLES if check_id in P.DEFAULT_CHECKS[r])


# --- issue 37 point 5: the GPU Operator's driver container manages the driver ----------------------------------------
# (gpu-operator's device-plugin entrypoint: /run/nvidia/validations/driver-ready -> driver root /run/nvidia/driver;
# NVIDIA/gpu-operator#178: no host package, the libraries under that root, named lib*.so.<driver version>).

ROOT_LIBS = ["/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
             "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.163.01"]


def test_driver_root_facts_reads_the_version_from_the_library_name():
    assert P.driver_root_facts(ROOT_LIBS) == {"installed_version": "550.163.01", "source": "gpu_operator",
                                              "lib_dir": "/run/nvidia/driver/usr/lib/x86_64-linux-gnu",
                                              "driver_root": "/run/nvidia/driver"}
    # Two drivers left in the root (an upgrade in progress): the newest; names without a version are no driver.
    two = ROOT_LIBS + ["/run/nvidia/driver/usr/lib64/libnvidia-ml.so.550.90.07", "/x/libnvidia-ml.so.garbage",
                       "/x/libcuda.so.570.1.1"]
    assert P.driver_root_facts(two, "/run/nvidia/driver")["installed_version"] == "550.163.01"
    assert P.driver_root_facts(["/a/libnvidia-ml.so.535.1.1", "/b/libnvidia-ml.so.535.10.1"])["lib_dir"] == "/b"
    assert P.driver_root_facts([], "/r") == {"installed_version": None, "lib_dir": None, "driver_root": "/r",
                                             "source": "gpu_operator"}
    assert P.driver_root_facts(None)["installed_version"] is None


OPERATOR = dict(P.driver_root_facts(ROOT_LIBS), loaded_version="550.163.01")


@pytest.mark.parametrize("driver, nvml, pin, status, evidence, remedy", [
    (OPERATOR, "550.163.01", "550.163.01", "pass",
     "driver container = loaded = pinned 550.163.01 (GPU Operator driver root /run/nvidia/driver: "
     "libnvidia-ml.so.550.163.01, loaded 550.163.01, NVML 550.163.01, pin 550.163.01)", ""),
    (OPERATOR, None, "", "warn", "driver container = loaded = 550.163.01, but no pinned version is declared "
     "(GPU Operator driver root /run/nvidia/driver: libnvidia-ml.so.550.163.01, loaded 550.163.01, NVML not read, pin none)",
     "declare the fleet's pin in node_preflight_driver_version (the ClusterPolicy's driver.version)"),
    (dict(OPERATOR, installed_version=None), None, "550.163.01", "fail",
     "no driver in the GPU Operator's driver root (GPU Operator driver root /run/nvidia/driver: no "
     "libnvidia-ml.so.<version>, loaded 550.163.01, NVML not read, pin 550.163.01)",
     "the driver container has not installed the driver yet: see the nvidia-driver-daemonset pod on this node "
     "(kubectl -n gpu-operator logs) and the operator's validator"),
    (dict(OPERATOR, loaded_version="550.90.07"), None, "550.163.01", "fail",
     "driver container 550.163.01, but the kernel module reports 550.90.07", "the driver container is being replaced"),
    (OPERATOR, "550.90.07", "550.163.01", "fail", "driver container 550.163.01, but NVML reports 550.90.07",
     "failed to load its module"),
    (dict(OPERATOR, loaded_version=None), None, "550.163.01", "fail", "the kernel module is not loaded",
     "see the nvidia-driver-daemonset pod"),
    (OPERATOR, "550.163.01", "550.144.03", "fail", "the GPU Operator's driver 550.163.01 is not the pinned 550.144.03",
     "set the ClusterPolicy's driver.version (or the NVIDIADriver resource) to the pin; the operator rolls its driver "
     "containers"),
    ({"loaded_version": "550.163.01"}, None, "", "fail", "driver root /run/nvidia/driver: no libnvidia", "not installed"),
])
def test_operator_driver_mode(driver, nvml, pin, status, evidence, remedy):
    facts = {"driver": driver}
    if nvml:
        facts["gpu"] = gpu_facts(driver=nvml)
    res = P.check_driver_version(facts, opts(driver_version=pin, driver_mode="gpu_operator"))
    assert res["status"] == status, res
    assert evidence in res["evidence"], res
    assert remedy in res["remedy"] and bool(res["remedy"]) == (status != "pass"), res


def test_operator_mode_nvml_unusable_and_bad_pin_and_mode_option():
    facts = {"driver": OPERATOR, "gpu": gpu_facts(available=False)}
    res = P.check_driver_version(facts, opts(driver_version="550.163.01", driver_mode="gpu_operator"))
    assert res["status"] == "fail" and res["evidence"].startswith(
        "NVML through the driver root is not usable: the NVIDIA kernel driver is not loaded (GPU Operator driver root")
    with pytest.raises(P.PreflightError, match="^node_preflight_driver_version: "):
        P.check_driver_version({"driver": OPERATOR}, opts(driver_version="x.y", driver_mode="gpu_operator"))
    with pytest.raises(P.PreflightError, match=r"^driver_mode must be host or gpu_operator, not 'auto'$"):
        opts(driver_mode="auto")
    # host mode (the default) with the same facts: the host's packages are what counts there
    assert P.check_driver_version({"driver": dict(OPERATOR, installed_version=None)},
                                  opts(driver_version="550.163.01"))["evidence"].startswith("no NVIDIA driver package installed")
