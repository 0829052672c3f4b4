# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""_preflight/checks.py's checks, record by record: each branch's whole result (status, evidence, remedy), both sides of every
boundary (licence days, versions, counts), and the aggregate shapes (report, fleet summary, JUnit). Mutation testing
(make mutation) showed which of these the behaviour tests in test_preflight.py left open."""

from __future__ import annotations

import datetime
import xml.etree.ElementTree as ET

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._licensing import nls
from ansible_collections.gpuops.provision.plugins.module_utils._preflight import checks as P, dra

R_IOMMU = ("enable VT-d (Intel) or AMD-Vi/IOMMU in the firmware setup; on Intel with a kernel older than 6.8 add "
           "intel_iommu=on to the kernel command line, then reboot")
R_ISO = ("move the card to a slot whose root port isolates it (see the mainboard manual) or enable ACS in the firmware; "
         "pcie_acs_override breaks isolation between devices and is not recommended")
R_INSTALL = "install the pinned driver with playbooks/driver_pin.yml (driver_pin_mode=converge)"
R_LIC = ("configure licensing with the gpuops.provision.nvidia_license role: FeatureType in /etc/nvidia/gridd.conf and the "
         "client configuration token in /etc/nvidia/ClientConfigToken (mode 0744), restart nvidia-gridd; on failure "
         "see journalctl -u nvidia-gridd and the CLS/DLS instance")
R_SVC = ("deploy the client configuration token of the service instance (gpuops.provision.nvidia_license role) and "
         "open the node's way to the instance (firewall, proxy, DNS); DLS: check that the appliance is up")
R_FEATURE = ("set FeatureType in /etc/nvidia/gridd.conf to the licence of the vGPU's series (gpuops.provision."
             "nvidia_license role, nvidia_license_feature_type; 1 lets the driver choose) and restart nvidia-gridd")
R_GEO = ("apply the target with the mig_reconfigure workflow (drain, mig_geometry, uncordon); "
         "for a single node: gpuops.provision.mig_geometry with the same configuration")


def rec(check_id, status, evidence, remedy=""):
    return {"id": check_id, "title": P.TITLES[check_id], "status": status, "evidence": evidence, "remedy": remedy}


def opts(**kw):
    return P.normalize_options(kw)


def dev(address, vendor="0x10de", device="0x26b9", driver="vfio-pci"):
    return {"address": address, "vendor": vendor, "device": device, "driver": driver}


def iommu(active=True, units=("dmar0",), remap=True, unsafe=False, gpus=None, devices=None, cmdline="ro iommu=pt"):
    if devices is None:
        devices = [dev("0000:65:00.0"), dev("0000:65:00.1", device="0x22ba"),
                   dev("0000:66:00.0", vendor="0x8086", device="0x1572", driver="i40e")]
    gpus = gpus if gpus is not None else [{"address": "0000:65:00.0", "isolated": True, "isolation_reason": "only its own"}]
    out = {"active": active, "kind": "intel", "units": list(units), "groups": [{"id": 1, "devices": devices}] if active else [],
           "gpus": gpus if active else [], "interrupt_remapping": remap, "allow_unsafe_interrupts": unsafe}
    if cmdline is not None:
        out["cmdline"] = cmdline
    return {"iommu": out}


# --- iommu_active ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("facts,status,evidence,remedy", [
    ({}, "fail", "IOMMU facts (iommu_info) were not gathered", R_IOMMU),
    ({"iommu": {}}, "fail", "IOMMU facts (iommu_info) were not gathered", R_IOMMU),
    ({"iommu": {"failed": True, "msg": "boom"}}, "fail", "reading IOMMU facts (iommu_info) failed: boom", R_IOMMU),
    ({"iommu": {"failed": True}}, "fail", "reading IOMMU facts (iommu_info) failed: unknown error", R_IOMMU),
    (iommu(active=False, units=()), "fail", "IOMMU is not active: no IOMMU unit in /sys/class/iommu (kind intel, units [], "
     "0 IOMMU groups, cmdline: ro iommu=pt)", R_IOMMU),
    (iommu(active=False), "fail", "IOMMU is not active: IOMMU units exist but no IOMMU groups were created (kind intel, units "
     "[dmar0], 0 IOMMU groups, cmdline: ro iommu=pt)", R_IOMMU),
    (iommu(remap=False), "warn", "IOMMU active but interrupt remapping is off (kind intel, units [dmar0], 1 IOMMU groups, "
     "cmdline: ro iommu=pt)", "enable interrupt remapping in the firmware (or remove intremap=off); without it VFIO refuses "
     "assignment unless vfio_iommu_type1 allow_unsafe_interrupts=1, which is unsafe"),
    (iommu(remap=False, unsafe=True), "pass", "IOMMU active: kind intel, units [dmar0], 1 IOMMU groups, cmdline: ro iommu=pt", ""),
    (iommu(remap=None, units=("dmar0", "dmar1"), cmdline=None), "pass",
     "IOMMU active: kind intel, units [dmar0, dmar1], 1 IOMMU groups, cmdline: ", ""),
])
def test_iommu_active_records(facts, status, evidence, remedy):
    assert P.check_iommu_active(facts, opts()) == rec("iommu_active", status, evidence, remedy)


# --- iommu_isolation ------------------------------------------------------------------------------------------------

TWO = [{"address": "0000:65:00.0", "isolated": True, "isolation_reason": "only its own"},
       {"address": "0000:b3:00.0", "isolated": False, "isolation_reason": "shares group 7 with 0000:b4:00.0"}]


@pytest.mark.parametrize("facts,wanted,status,evidence,remedy", [
    ({}, "all", "fail", "IOMMU facts (iommu_info) were not gathered", R_ISO),
    (iommu(active=False), "all", "fail", "no IOMMU groups: the IOMMU is not active", "make the IOMMU active first (see check iommu_active)"),
    (iommu(gpus=TWO), ["0000:65:00.0", "0000:AA:00.0", "0000:ab:00.0"], "fail",
     "passthrough GPU(s) 0000:aa:00.0, 0000:ab:00.0 not found in any IOMMU group",
     "check the PCI addresses in node_preflight_passthrough_gpus against lspci -D"),
    (iommu(gpus=[]), "all", "fail", "no NVIDIA GPU found in the IOMMU groups", "check that the GPU is seated and visible in lspci -nn"),
    (iommu(gpus=TWO), [], "fail", "no NVIDIA GPU found in the IOMMU groups", "check that the GPU is seated and visible in lspci -nn"),
    (iommu(gpus=TWO), "all", "fail", "not isolated: 0000:b3:00.0: shares group 7 with 0000:b4:00.0", R_ISO),
    (iommu(gpus=TWO), None, "fail", "not isolated: 0000:b3:00.0: shares group 7 with 0000:b4:00.0", R_ISO),
    (iommu(gpus=TWO), ["0000:65:00.0"], "pass", "0000:65:00.0: only its own", ""),
    (iommu(gpus=TWO[:1] + [dict(TWO[1], isolated=True)]), "all", "pass",
     "0000:65:00.0: only its own; 0000:b3:00.0: shares group 7 with 0000:b4:00.0", ""),
])
def test_iommu_isolation_records(facts, wanted, status, evidence, remedy):
    assert P.check_iommu_isolation(facts, dict(opts(), passthrough_gpus=wanted)) == rec("iommu_isolation", status, evidence, remedy)


# --- vfio_bound -----------------------------------------------------------------------------------------------------

def _vfio_remedy(ids):
    return ("bind them to vfio-pci at boot: 'options vfio-pci ids=%s' in /etc/modprobe.d/vfio.conf, 'softdep nvidia pre: "
            "vfio-pci' (and nouveau), vfio modules in /etc/modules-load.d, update-initramfs -u -k all, reboot" % ids)


NV_BOUND = [dev("0000:65:00.0", driver="nvidia"), dev("0000:65:00.1", device="0x22ba", driver=None),
            dev("0000:66:00.0", vendor="0x8086", device="0x1572", driver="i40e"), dev("0000:67:00.0", driver="nvidia")]


@pytest.mark.parametrize("facts,o,status,evidence,remedy", [
    ({}, {}, "fail", "IOMMU facts (iommu_info) were not gathered", "check that sysfs is readable (iommu_info) and rerun"),
    (iommu(), {}, "pass", "vfio-pci bound to 0000:65:00.0, 0000:65:00.1", ""),
    (iommu(), {"vfio_devices": None, "passthrough_gpus": None}, "pass", "vfio-pci bound to 0000:65:00.0, 0000:65:00.1", ""),
    (iommu(devices=NV_BOUND), {}, "fail", "0000:65:00.0 is bound to nvidia; 0000:65:00.1 is bound to no driver",
     _vfio_remedy("10de:22ba,10de:26b9")),
    (iommu(devices=NV_BOUND + [dev("0000:65:00.2", device="0x26b9", driver="nvidia")]), {}, "fail",
     "0000:65:00.0 is bound to nvidia; 0000:65:00.1 is bound to no driver; 0000:65:00.2 is bound to nvidia",
     _vfio_remedy("10de:22ba,10de:26b9")),
    (iommu(), {"vfio_devices": ["0000:66:00.0", "0000:99:00.0", "0000:65:00.0"]}, "fail",
     "0000:66:00.0 is bound to i40e; 0000:99:00.0 is not present", _vfio_remedy("8086:1572")),
    (iommu(), {"vfio_devices": ["0000:99:00.0"]}, "fail", "0000:99:00.0 is not present", _vfio_remedy("<vendor>:<device>")),
    (iommu(), {"vfio_devices": ["0000:65:00.1", "0000:65:00.0"]}, "pass", "vfio-pci bound to 0000:65:00.0, 0000:65:00.1", ""),
    (iommu(gpus=[]), {}, "fail", "no NVIDIA GPU function found to check",
     "check that the GPU is visible in lspci -nn and that the IOMMU is active"),
    (iommu(), {"vfio_devices": []}, "fail", "no NVIDIA GPU function found to check",
     "check that the GPU is visible in lspci -nn and that the IOMMU is active"),
])
def test_vfio_bound_records(facts, o, status, evidence, remedy):
    assert P.check_vfio_bound(facts, dict(opts(), **o)) == rec("vfio_bound", status, evidence, remedy)


# --- driver_version -------------------------------------------------------------------------------------------------

def drv_facts(installed="550.163.01-1", loaded="550.163.01", nvml=None):
    facts = {"driver": {"installed_version": installed, "loaded_version": loaded}}
    if nvml is not None:
        facts["gpu"] = {"nvml": nvml}
    return facts


NVML_OK = {"available": True, "driver_version": "550.163.01"}
NVML_DOWN = {"available": False, "reason": "no kernel module"}
EV = "installed 550.163.01-1, loaded 550.163.01, NVML %s, pin %s"


@pytest.mark.parametrize("facts,pin,status,evidence,remedy", [
    ({}, "", "fail", "no NVIDIA driver package installed (installed none, loaded none, NVML not read, pin none)", R_INSTALL),
    (drv_facts(installed="abc", loaded=None), "", "fail", "installed version not understood: package version 'abc' must start "
     "with a digit after the epoch (installed abc, loaded none, NVML not read, pin none)", R_INSTALL),
    (drv_facts(loaded=None), "", "fail", "driver 550.163.01-1 is installed but the kernel module is not loaded (installed "
     "550.163.01-1, loaded none, NVML not read, pin none)", "load it (modprobe nvidia) or reboot; if it does not load see dmesg "
     "(Secure Boot signing, nouveau still bound, missing DKMS build for the running kernel)"),
    (drv_facts(loaded="1.2.2"), "", "fail", "loaded version not understood: version '1.2.2' does not carry an NVIDIA driver "
     "version (expected e.g. 535.261.03) (installed 550.163.01-1, loaded 1.2.2, NVML not read, pin none)", "reboot the node"),
    (drv_facts(loaded="550.144.03"), "", "fail", "installed driver 550.163.01 differs from the loaded kernel module 550.144.03: "
     "reboot pending (installed 550.163.01-1, loaded 550.144.03, NVML not read, pin none)",
     "reboot the node (drain it first) so the installed driver loads"),
    (drv_facts(nvml=NVML_DOWN), "550.163.01", "fail", "NVML is not usable: no kernel module (%s)" % (
        EV % ("unavailable: no kernel module", "550.163.01")),
     "reboot the node; check that the NVIDIA userspace libraries match the kernel module"),
    (drv_facts(nvml=dict(NVML_OK, driver_version="550.144.03")), "", "fail", "NVML reports driver 550.144.03 but the kernel "
     "module is 550.163.01 (%s)" % (EV % ("550.144.03", "none")), "reboot the node so userspace and kernel module agree"),
    (drv_facts(loaded=None, nvml=NVML_OK), "", "warn", "installed = loaded = 550.163.01, but no pinned version is declared "
     "(%s)" % (EV % ("550.163.01", "none")), "declare the fleet's pin in node_preflight_driver_version (or nvidia_driver_version)"),
    (drv_facts(nvml=NVML_OK), " 550.144.03 ", "fail", "installed driver 550.163.01-1 is not the pinned 550.144.03 (%s)" % (
        EV % ("550.163.01", "550.144.03")), R_INSTALL + " then reboot"),
    (drv_facts(nvml=NVML_OK), "550.163.01", "pass", "installed = loaded = pinned 550.163.01 (%s)" % (
        EV % ("550.163.01", "550.163.01")), ""),
    (drv_facts(nvml={}), "550.163.01-1", "pass", "installed = loaded = pinned 550.163.01-1 (installed 550.163.01-1, loaded "
     "550.163.01, NVML not read, pin 550.163.01-1)", ""),
])
def test_driver_version_records(facts, pin, status, evidence, remedy):
    assert P.check_driver_version(facts, dict(opts(), driver_version=pin)) == rec("driver_version", status, evidence, remedy)


def test_driver_version_bad_pin_names_the_option():
    with pytest.raises(P.PreflightError, match=r"^node_preflight_driver_version: package version '1\.0 x' is empty or has "
                                               r"characters a package version cannot have$"):
        P.check_driver_version(drv_facts(), dict(opts(), driver_version="1.0 x"))


# --- license --------------------------------------------------------------------------------------------------------

def gpu(days=200, **kw):
    g = {"index": 0, "model": "NVIDIA L40S", "virtualization_mode": "vgpu", "supported": True, "licensed": True,
         "state": "licensed", "product": "NVIDIA Virtual Compute Server", "expiry_status": "valid",
         "expiry": "2027-06-01T00:00:00Z", "days_left": days}
    g.update(kw)
    return g


def lic(*gpus, **kw):
    out = {"nvml": {"available": True}, "gridd": {"feature_type": 4}, "gpus": list(gpus)}
    out.update(kw)
    return {"license": out}


LABEL = "GPU 0 (NVIDIA L40S)"
EXP = "%s: NVIDIA Virtual Compute Server licence expires 2027-06-01T00:00:00Z, in %d days"
GOOD = "%s: NVIDIA Virtual Compute Server licensed until 2027-06-01T00:00:00Z (%d days)"
R_EXPIRING = ("the lease normally renews by itself: check that nvidia-gridd reaches the CLS/DLS instance "
              "(journalctl -u nvidia-gridd) and the entitlement's end date on the NVIDIA Licensing Portal")
R_RENEW = "renew the entitlement or check lease renewal (journalctl -u nvidia-gridd)"


@pytest.mark.parametrize("facts,status,evidence,remedy", [
    (lic(gpu(6)), "fail", (EXP + " (minimum 7)") % (LABEL, 6), R_EXPIRING),
    (lic(gpu(7)), "warn", EXP % (LABEL, 7), R_RENEW),
    (lic(gpu(29)), "warn", EXP % (LABEL, 29), R_RENEW),
    (lic(gpu(30)), "pass", GOOD % (LABEL, 30), ""),
    (lic(gpu(expiry_status="permanent")), "pass", "%s: NVIDIA Virtual Compute Server licensed (permanent)" % LABEL, ""),
    (lic(gpu(days=None, expiry_status="unknown")), "pass", "%s: NVIDIA Virtual Compute Server licensed (unknown)" % LABEL, ""),
    (lic(gpu(supported=False, virtualization_mode="vgpu")), "fail",
     "%s: NVML reports no licensable feature (virtualization mode vgpu)" % LABEL, R_LIC),
    (lic(gpu(licensed=False, state=None), gridd=None), "fail", "%s: unlicensed (unlicensed; gridd FeatureType not set)" % LABEL, R_LIC),
    (lic(gpu(licensed=False, state="license expired")), "fail", "%s: unlicensed (license expired; gridd FeatureType 4)" % LABEL, R_LIC),
    # a fail that is not an expiry keeps the configuration remedy; the order is fails, warns, good
    (lic(gpu(40, index=2), gpu(10, index=1), gpu(licensed=False, index=0), gpu(3, index=3)), "fail",
     "GPU 0 (NVIDIA L40S): unlicensed (licensed; gridd FeatureType 4); " + (EXP + " (minimum 7)") % ("GPU 3 (NVIDIA L40S)", 3)
     + "; " + EXP % ("GPU 1 (NVIDIA L40S)", 10) + "; " + GOOD % ("GPU 2 (NVIDIA L40S)", 40), R_LIC),
    (lic(gpu(40, index=2), gpu(10, index=1)), "warn", EXP % ("GPU 1 (NVIDIA L40S)", 10) + "; " + GOOD % ("GPU 2 (NVIDIA L40S)", 40),
     R_RENEW),
    (lic(gpu(40, index=2), gpu(1, index=1)), "fail", (EXP + " (minimum 7)") % ("GPU 1 (NVIDIA L40S)", 1) + "; "
     + GOOD % ("GPU 2 (NVIDIA L40S)", 40), R_EXPIRING),
    (lic(), "fail", "NVML lists no GPU to license", R_LIC),
    (lic(gpu(), nvml={"available": False, "reason": "no driver"}), "fail", "NVML is not available: no driver", R_LIC),
    (lic(gpu(), nvml={}), "pass", GOOD % (LABEL, 200), ""),
    (lic(gpu(), nvml={"reason": "x"}), "pass", GOOD % (LABEL, 200), ""),
    ({}, "fail", "licence facts (nvidia_license_info) were not gathered", R_LIC),
    ({"license": {"failed": True, "msg": "no nvml"}}, "fail", "reading licence facts (nvidia_license_info) failed: no nvml", R_LIC),
])
def test_license_records(facts, status, evidence, remedy):
    assert P.check_license(facts, dict(opts(license_required=True))) == rec("license", status, evidence, remedy)


def test_license_day_options_are_used():
    o = opts(license_required=True, license_min_days="10", license_warn_days=12)
    assert P.check_license(lic(gpu(9)), o)["status"] == "fail"
    assert P.check_license(lic(gpu(10)), o)["status"] == "warn"
    assert P.check_license(lic(gpu(11)), o)["status"] == "warn"
    assert P.check_license(lic(gpu(12)), o)["status"] == "pass"


@pytest.mark.parametrize("facts,o,evidence", [
    (lic(gpu()), {"license_required": False}, "licence not needed: not required by configuration"),
    (lic(gpu(virtualization_mode="passthrough"), gpu(virtualization_mode=None)), {},
     "licence not needed: no GPU runs as a vGPU (virtualization modes: None, passthrough)"),
    (lic(), {}, "licence not needed: no GPU runs as a vGPU (virtualization modes: unknown)"),
    ({}, {}, "licence not needed: no GPU runs as a vGPU (virtualization modes: unknown)"),
])
def test_licence_not_needed_skips_all_three(facts, o, evidence):
    o = opts(**o)
    assert P.check_license(facts, o) == rec("license", "skip", evidence)
    assert P.check_license_service(facts, o) == rec("license_service", "skip", evidence)
    assert P.check_license_feature(facts, o) == rec("license_feature", "skip", evidence)


@pytest.mark.parametrize("facts,role", [(lic(gpu()), "k8s_worker"), (lic(gpu(virtualization_mode="none")), "vgpu_guest"),
                                        ({}, "vgpu_guest")])
def test_licence_needed_by_vgpu_or_role(facts, role):
    assert P.check_license(facts, opts(node_role=role))["status"] != "skip"
    assert P.check_license(facts, opts(node_role=role, license_required=True))["status"] != "skip"


# --- license_service ------------------------------------------------------------------------------------------------

def ep(host, ok=True, kind="DLS", tls_version="TLSv1.3"):
    return {"host": host, "port": 443, "kind": kind, "tls": ok, "tls_version": tls_version, "error": None if ok else "refused"}


def svc(*eps, expires="2099-01-01T00:00:00Z", token=True):
    return {"token": {"file": "t.tok", "service_instance": "si-1", "expires_at": expires} if token else None,
            "error": None, "endpoints": list(eps)}


@pytest.mark.parametrize("service,status,evidence,remedy", [
    (svc(ep("a")), "pass", "token t.tok of service instance si-1: DLS a:443 answers (TLSv1.3)", ""),
    (svc(ep("a", kind=None, tls_version=None)), "pass", "token t.tok of service instance si-1: service a:443 answers (TLS)", ""),
    (svc(ep("a"), ep("b", ok=False)), "warn", "token t.tok of service instance si-1: DLS a:443 answers (TLSv1.3); DLS b:443 does "
     "NOT answer: refused", "bring the unreachable HA node back (the client uses the other one meanwhile)"),
    (svc(ep("b", ok=False)), "fail", "token t.tok of service instance si-1: DLS b:443 does NOT answer: refused", R_SVC),
    (svc(), "fail", "token t.tok of service instance si-1: no endpoint", R_SVC),
    (svc(ep("a"), token=False), "pass", "token None of service instance None: DLS a:443 answers (TLSv1.3)", ""),
    ({"error": "no token", "endpoints": []}, "fail", "no token", R_SVC),
])
def test_license_service_records(service, status, evidence, remedy):
    assert P.check_license_service(lic(gpu(), service=service), opts(license_required=True)) == rec(
        "license_service", status, evidence, remedy)


def test_license_service_unchecked_and_missing():
    o = opts(license_required=True)
    assert P.check_license_service(lic(gpu()), o) == rec(
        "license_service", "fail", "the service was not checked (nvidia_license_info service_check=false)", R_SVC)
    assert P.check_license_service({}, o) == rec("license_service", "fail", "licence facts (nvidia_license_info) were not gathered", R_SVC)


@pytest.mark.parametrize("days,status", [(29, "warn"), (31, "pass")])
def test_license_service_token_expiry_boundary(days, status):
    stamp = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=days, hours=12)).strftime("%Y-%m-%dT%H:%M:%SZ")
    res = P.check_license_service(lic(gpu(), service=svc(ep("a"), expires=stamp)), opts(license_required=True, license_warn_days=30))
    base = "token t.tok of service instance si-1: DLS a:443 answers (TLSv1.3)"
    if status == "warn":
        assert res == rec("license_service", "warn", "%s; the token expires %s, in %d days" % (base, stamp, days),
                          "generate a new client configuration token on the Licensing Portal or the DLS and deploy it")
    else:
        assert res == rec("license_service", "pass", base)


def test_license_service_token_expiry_beats_ha_warning():
    stamp = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=3, hours=12)).strftime("%Y-%m-%dT%H:%M:%SZ")
    res = P.check_license_service(lic(gpu(), service=svc(ep("a"), ep("b", ok=False), expires=stamp)), opts(license_required=True))
    assert res["status"] == "warn" and res["remedy"].startswith("generate a new client configuration token")


# --- license_feature ------------------------------------------------------------------------------------------------

def test_license_feature_records():
    o = opts(license_required=True)
    g = gpu(model="NVIDIA A100-4C", index=0)
    label = "GPU 0 (NVIDIA A100-4C) (C-series)"
    ok_gridd = nls.fits(nls.feature_name(4, "gridd"), "C", False)[1]
    ok_product = nls.fits("NVIDIA Virtual Compute Server", "C", False)[1]
    assert P.check_license_feature(lic(g), o) == rec("license_feature", "pass", "%s: gridd FeatureType 4: %s; %s: licensed product "
                                                     "NVIDIA Virtual Compute Server: %s" % (label, ok_gridd, label, ok_product))
    bad_gridd = nls.fits(nls.feature_name(2, "gridd"), "C", False)[1]
    assert P.check_license_feature(lic(g, gridd={"feature_type": 2}), o) == rec(
        "license_feature", "fail", "%s: gridd FeatureType 2: %s; %s: licensed product NVIDIA Virtual Compute Server: %s"
        % (label, bad_gridd, label, ok_product), R_FEATURE)
    assert nls.fits(nls.feature_name(2, "gridd"), "C", True)[0]
    assert P.check_license_feature(lic(g, gridd={"feature_type": 2}), opts(license_required=True, license_vws_covers_c=True))[
        "status"] == "pass"
    unlicensed = gpu(model="NVIDIA A100-4C", licensed=False)
    assert P.check_license_feature(lic(unlicensed, gridd={}), o) == rec(
        "license_feature", "fail", "%s: no FeatureType in gridd.conf and no licensed product" % label, R_FEATURE)
    assert P.check_license_feature(lic(gpu(model="NVIDIA A100-4C", product=None), gridd=None), o)["status"] == "fail"
    assert P.check_license_feature(lic(gpu(model=None, pci_address="x")), o) == rec(
        "license_feature", "pass", "GPU 0 (?): no vGPU series in the name")
    assert P.check_license_feature(lic(), o) == rec("license_feature", "pass", "no GPU to check")
    assert P.check_license_feature({"license": {"failed": True, "msg": "m"}}, o) == rec(
        "license_feature", "fail", "reading licence facts (nvidia_license_info) failed: m", R_FEATURE)


def test_gpu_label_falls_back_to_the_address():
    assert P._gpu_label({"index": 3, "address": "0000:01:00.0"}) == "GPU 3 (0000:01:00.0)"
    assert P._gpu_label({"index": 3, "model": "A", "address": "x"}) == "GPU 3 (A)"
    assert P._gpu_label({}) == "GPU None (?)"


# --- DRA wrappers ---------------------------------------------------------------------------------------------------

def test_dra_wrappers_without_nvml():
    o = opts(node_role="k8s_dra_worker")
    for check_id, remedy in (("dra_driver", "install and load the NVIDIA driver (playbooks/driver_pin.yml)"),
                             ("dra_mig", "make NVML usable on the node and rerun")):
        res = P.CHECKS[check_id]({}, o)
        assert res["status"] == "fail" and res["remedy"] == remedy and res["id"] == check_id and res["evidence"]
    with pytest.raises(P.PreflightError, match=r"^dra_driver_minimum: "):
        P.check_dra_driver({"gpu": {"nvml": {"available": True, "driver_version": "570.1.1"}, "gpus": []}},
                           dict(o, dra_driver_minimum="not a version"))
    res = P.check_dra_cdi({"cdi": [{"path": "/etc/cdi/a.yaml", "error": "permission denied"},
                                   {"path": "/etc/cdi/b.yaml", "text": "{{{"}]}, o)
    assert res["id"] == "dra_cdi" and res["status"] in ("fail", "warn") and "/etc/cdi/a.yaml" in res["evidence"]


# --- mig_pending ----------------------------------------------------------------------------------------------------

def mig_gpu(index=0, current="enabled", pending="enabled", device=0x20B010DE, model="NVIDIA A100-SXM4-40GB"):
    return {"index": index, "model": model, "mig_mode": {"current": current, "pending": pending}, "pci_device_id": device}


def gpu_facts(*gpus, driver="550.163.01"):
    return {"gpu": {"nvml": {"available": True, "driver_version": driver}, "gpus": list(gpus)}}


@pytest.mark.parametrize("facts,status,evidence,remedy", [
    (gpu_facts(mig_gpu(), mig_gpu(1, pending="disabled"), mig_gpu(2, "disabled", "enabled")), "fail",
     "GPU 1 (NVIDIA A100-SXM4-40GB): MIG mode enabled, pending disabled; GPU 2 (NVIDIA A100-SXM4-40GB): MIG mode disabled, "
     "pending enabled", "stop GPU clients and reset the GPU (nvidia-smi -r -i 1,2) or reboot the node; in a pass-through VM "
     "only a reboot applies it"),
    (gpu_facts(mig_gpu(), {"index": 1, "mig_mode": None}), "pass", "GPU 0 (NVIDIA A100-SXM4-40GB): MIG enabled", ""),
    (gpu_facts({"index": 1, "mig_mode": None}), "skip", "no MIG-capable GPU", ""),
    (gpu_facts(mig_gpu(current="disabled", pending="disabled"), driver="418.1.1"), "pass",
     "GPU 0 (NVIDIA A100-SXM4-40GB): MIG disabled", ""),
    (gpu_facts(mig_gpu(device=None), driver="418.1.1"), "pass", "GPU 0 (NVIDIA A100-SXM4-40GB): MIG enabled", ""),
])
def test_mig_pending_records(facts, status, evidence, remedy):
    assert P.check_mig_pending(facts, opts()) == rec("mig_pending", status, evidence, remedy)


def test_mig_pending_old_driver_and_no_nvml():
    res = P.check_mig_pending(gpu_facts(mig_gpu(), mig_gpu(1, "disabled", "disabled"), driver="418.1.1"), opts())
    assert res["status"] == "fail" and res["evidence"].startswith("GPU 0 (NVIDIA A100-SXM4-40GB): ") and "GPU 1" not in res["evidence"]
    assert res["remedy"] == "install a driver of the documented branch or newer (playbooks/driver_pin.yml), or disable MIG"
    res = P.check_mig_pending({}, opts())
    assert res["status"] == "fail" and res["remedy"] == "make the driver usable first (see check driver_version)" and res["evidence"]


# --- mig_geometry ---------------------------------------------------------------------------------------------------

def geo(current="enabled", devices=None):
    return {"mig_mode": {"current": current, "pending": current}, "mig_devices": devices or {}}


def mig_gpu_result(index=0, changed=False, selected=True, skipped=None, reset=False, before=None, after=None):
    return {"index": index, "model": "A100", "selected": selected, "skipped": skipped, "changed": changed, "reset_required": reset,
            "before": before if before is not None else geo(devices={"1g.5gb": 7}), "after": after if after is not None else geo()}


@pytest.mark.parametrize("mig,status,evidence,remedy", [
    (None, "fail", "the MIG plan (mig_geometry in check mode) was not gathered", R_GEO),
    ({"failed": True, "msg": "GPU 0: no"}, "fail", "the declared MIG target cannot be applied: GPU 0: no",
     "fix the MIG target (profiles and counts must fit each GPU)"),
    ({"gpus": [mig_gpu_result(changed=True, reset=True, after=geo(devices={"3g.20gb": 2, "1g.5gb": 1})),
               mig_gpu_result(1, changed=True, before=geo("disabled"), after=geo(devices={})), mig_gpu_result(2)]}, "fail",
     "GPU 0 (A100): is MIG enabled {1g.5gb: 7}, target MIG enabled {1g.5gb: 1, 3g.20gb: 2} (needs a GPU reset); "
     "GPU 1 (A100): is MIG disabled, target MIG enabled {}", R_GEO),
    ({"gpus": [mig_gpu_result(changed=True, before={}, after={"mig_devices": {}})]}, "fail",
     "GPU 0 (A100): is none, target MIG ?", R_GEO),
    ({"gpus": [mig_gpu_result(skipped="no MIG"), mig_gpu_result(1, selected=False)]}, "warn",
     "the MIG target selects no MIG-capable GPU on this node", "check the target's devices / device-filter"),
    ({"gpus": []}, "warn", "the MIG target selects no MIG-capable GPU on this node", "check the target's devices / device-filter"),
    ({"gpus": [mig_gpu_result(), mig_gpu_result(1, selected=False), mig_gpu_result(2, before=geo("disabled"))]}, "pass",
     "GPU 0 (A100): MIG enabled {1g.5gb: 7}; GPU 2 (A100): MIG disabled", ""),
])
def test_mig_geometry_records(mig, status, evidence, remedy):
    facts = {} if mig is None else {"mig": mig}
    assert P.check_mig_geometry(facts, opts(mig_target=True)) == rec("mig_geometry", status, evidence, remedy)


def test_mig_geometry_skip_record():
    assert P.check_mig_geometry({"mig": {"failed": True}}, opts()) == rec(
        "mig_geometry", "skip", "no MIG target declared (node_preflight_mig_config / node_preflight_mig_devices)")


# --- kernel_args ----------------------------------------------------------------------------------------------------

R_KARGS = ("add them to GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub and run update-grub "
           "(systemd-boot: /etc/kernel/cmdline and proxmox-boot-tool refresh), then reboot")


def test_kernel_args_records():
    o = opts(kernel_args=["iommu=pt", "quiet", " a=b=c "])
    assert P.check_kernel_args({"cmdline": "ro iommu=pt quiet a=b=c\n"}, o) == rec("kernel_args", "pass", "present: iommu=pt quiet a=b=c")
    assert P.check_kernel_args({"cmdline": " ro iommu quiet=1 \n"}, o) == rec(
        "kernel_args", "fail", "iommu=pt wanted, iommu= present; a=b=c missing (cmdline: ro iommu quiet=1)",
        "set 'iommu=pt quiet a=b=c': " + R_KARGS)
    assert P.check_kernel_args({}, o) == rec("kernel_args", "fail", "the kernel command line was not read",
                                             "check that /proc/cmdline is readable")
    assert P.check_kernel_args({"iommu": {"failed": True, "cmdline": "iommu=pt"}}, o)["evidence"] == "the kernel command line was not read"
    assert P.check_kernel_args({"iommu": {"cmdline": "iommu=pt quiet a=b=c"}}, o)["status"] == "pass"
    assert P.check_kernel_args({"cmdline": "", "iommu": {"cmdline": "iommu=pt quiet a=b=c"}}, o)["status"] == "fail"
    assert P.check_kernel_args({}, opts()) == rec("kernel_args", "skip", "no kernel arguments required (node_preflight_kernel_args)")
    assert P.check_kernel_args({}, dict(opts(), kernel_args=None))["status"] == "skip"


def test_parse_required_arg():
    assert P.parse_required_arg(" quiet ") == ("quiet", None)
    assert P.parse_required_arg("a=") == ("a", "")
    assert P.parse_required_arg("a=b=c") == ("a", "b=c")
    with pytest.raises(P.PreflightError, match=r"^node_preflight_kernel_args: empty entry '=x'$"):
        P.parse_required_arg("=x")
    with pytest.raises(P.PreflightError, match=r"^node_preflight_kernel_args: empty entry ' '$"):
        P.parse_required_arg(" ")


# --- options, verdict, reports --------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad,msg", [
    ({"colour": "blue", "aa": 1}, r"^unknown option\(s\): aa, colour$"),
    ({"node_role": "router"}, r"^node_role 'router' is not one of k8s_worker, k8s_dra_worker, vgpu_guest, passthrough_host$"),
    ({"checks": ["iommu_active", "nope", 5]}, r"^unknown check\(s\) nope, 5; known: iommu_active, iommu_isolation, vfio_bound, "),
    ({"license_required": "maybe"}, r"^license_required must be auto, true or false, not 'maybe'$"),
    ({"license_min_days": "soon"}, r"^license_min_days must be a number of days, not 'soon'$"),
    ({"license_warn_days": []}, r"^license_warn_days must be a number of days, not \[\]$"),
    ({"passthrough_gpus": "0000:65:00.0"}, r"^passthrough_gpus must be 'all' or a list of PCI addresses$"),
    ({"vfio_devices": 5}, r"^vfio_devices must be 'all' or a list of PCI addresses$"),
    ({"kernel_args": ["ok", "=x"]}, r"^node_preflight_kernel_args: empty entry '=x'$"),
])
def test_normalize_options_messages(bad, msg):
    with pytest.raises(P.PreflightError, match=msg):
        P.normalize_options(bad)


def test_normalize_options_values():
    o = P.normalize_options({"node_role": "passthrough_host", "license_min_days": "3", "driver_version": None,
                             "passthrough_gpus": ("0000:65:00.0",), "vfio_devices": ["0000:65:00.0"], "kernel_args": None})
    assert o["checks"] == ["iommu_active", "iommu_isolation", "vfio_bound", "kernel_args"]
    assert o["license_min_days"] == 3 and o["license_warn_days"] == 30 and o["driver_version"] == ""
    assert o["passthrough_gpus"] == ("0000:65:00.0",) and o["kernel_args"] == []
    assert P.normalize_options(None)["checks"] == list(P.DEFAULT_CHECKS["k8s_worker"])
    assert P.normalize_options({"checks": None})["checks"] == list(P.DEFAULT_CHECKS["k8s_worker"])
    assert P.normalize_options({"license_required": False})["license_required"] is False
    assert P.normalize_options({"license_required": True})["license_required"] is True
    assert P.normalize_options({"checks": []})["checks"] == []


@pytest.mark.parametrize("statuses,fail_on_warn,verdict", [
    ([], False, "pass"), (["pass", "skip"], False, "pass"), (["warn", "pass"], False, "warn"), (["warn", "pass"], True, "fail"),
    (["warn", "fail"], False, "fail"), (["skip"], True, "pass"),
])
def test_verdict_of(statuses, fail_on_warn, verdict):
    assert P.verdict_of([{"status": s} for s in statuses], fail_on_warn) == verdict


def test_verdict_of_warn_is_not_a_failure_by_default():
    assert P.verdict_of([{"status": "warn"}]) == "warn"


def test_result_refuses_unknown_status_and_blanks_remedy():
    with pytest.raises(P.PreflightError, match=r"^check x: unknown status 'ok'$"):
        P.result("x", "ok", "e")
    assert P.result("x", "pass", "e", "r") == {"id": "x", "title": "x", "status": "pass", "evidence": "e", "remedy": ""}
    assert P.result("x", "skip", "e", "r")["remedy"] == ""
    assert P.result("x", "warn", "e", "r")["remedy"] == "r" and P.result("x", "fail", "e", "r")["remedy"] == "r"


def test_evaluate_record():
    o = {"checks": ["kernel_args", "mig_geometry"], "kernel_args": ["a", "b"], "node_role": "vgpu_guest"}
    rep = P.evaluate("n1", {"cmdline": "ro a"}, o, generated_at="2026-12-04T00:00:00Z")
    ka = rec("kernel_args", "fail", "b missing (cmdline: ro a)", "set 'a b': " + R_KARGS)
    assert rep["checks"][P.CHECK_IDS.index("kernel_args")] == ka
    assert rep["checks"][P.CHECK_IDS.index("iommu_active")] == rec("iommu_active", "skip", "not selected for a vgpu_guest node")
    assert rep["checks"][P.CHECK_IDS.index("mig_geometry")]["status"] == "skip"
    assert [c["id"] for c in rep["checks"]] == list(P.CHECK_IDS)
    assert {k: v for k, v in rep.items() if k != "checks"} == {
        "node": "n1", "node_role": "vgpu_guest", "verdict": "fail", "ready": False, "generated_at": "2026-12-04T00:00:00Z",
        "counts": {"pass": 0, "fail": 1, "warn": 0, "skip": len(P.CHECK_IDS) - 1}, "failed_checks": ["kernel_args"],
        "warned_checks": [], "selected_checks": ["kernel_args", "mig_geometry"]}
    warn = P.evaluate("n2", {"cmdline": "ro a"}, {"checks": ["kernel_args", "driver_version"], "kernel_args": ["a"]})
    # driver_version fails here (no driver facts); the warned list stays empty
    assert (warn["verdict"], warn["ready"], warn["counts"]["pass"], warn["generated_at"]) == ("fail", False, 1, None)
    ok = P.evaluate("n3", None, {"checks": ["kernel_args"], "kernel_args": []})
    assert (ok["verdict"], ok["ready"], ok["failed_checks"]) == ("pass", True, [])


def test_evaluate_warned_checks():
    facts = {"driver": {"installed_version": "550.163.01", "loaded_version": "550.163.01"}}
    rep = P.evaluate("n", facts, {"checks": ["driver_version"]})
    assert (rep["verdict"], rep["ready"], rep["warned_checks"], rep["failed_checks"]) == ("warn", True, ["driver_version"], [])
    rep = P.evaluate("n", facts, {"checks": ["driver_version"], "fail_on_warn": True})
    assert (rep["verdict"], rep["ready"], rep["warned_checks"]) == ("fail", False, ["driver_version"])


def test_missing_report_record():
    assert P.missing_report("gone", "unreachable") == {
        "node": "gone", "node_role": None, "verdict": "fail", "ready": False, "generated_at": None,
        "counts": {"pass": 0, "fail": 1, "warn": 0, "skip": 0}, "failed_checks": ["facts"], "warned_checks": [],
        "selected_checks": [], "checks": [{"id": "facts", "title": "Facts gathered", "status": "fail", "evidence": "unreachable",
                                           "remedy": "make the node reachable and rerun the preflight"}]}


def _report(node, verdict, failed=(), warned=()):
    return {"node": node, "verdict": verdict, "ready": verdict != "fail", "failed_checks": list(failed),
            "warned_checks": list(warned), "checks": []}


def test_fleet_summary_record():
    reports = [_report("worker-long-name", "warn", warned=["license"]),
               _report("a", "fail", ["driver_version", "license"], ["kernel_args"]), _report("b", "pass")]
    s = P.fleet_summary(reports)
    assert s["table"] == "\n".join([
        "node              verdict failing / warning checks",
        "a                 FAIL    driver_version, license, kernel_args (warn)",
        "b                 PASS    -",
        "worker-long-name  WARN    license (warn)",
        "3 node(s): 1 pass, 1 warn, 1 fail"])
    assert {k: v for k, v in s.items() if k != "table"} == {
        "nodes": {"a": {"verdict": "fail", "ready": False, "failed_checks": ["driver_version", "license"],
                        "warned_checks": ["kernel_args"]},
                  "b": {"verdict": "pass", "ready": True, "failed_checks": [], "warned_checks": []},
                  "worker-long-name": {"verdict": "warn", "ready": True, "failed_checks": [], "warned_checks": ["license"]}},
        "total": 3, "passed": 1, "warned": 1, "failed": 1, "ready": ["b", "worker-long-name"], "not_ready": ["a"]}
    short = P.fleet_summary([_report("x", "pass")])
    assert short["table"].splitlines()[:2] == ["node  verdict failing / warning checks", "x     PASS    -"]
    empty = P.fleet_summary([])
    assert empty == {"nodes": {}, "total": 0, "passed": 0, "warned": 0, "failed": 0, "ready": [], "not_ready": [],
                     "table": "node  verdict failing / warning checks\n0 node(s): 0 pass, 0 warn, 0 fail"}


def test_junit_xml_record():
    checks = [rec("kernel_args", "fail", "b missing", "set b"), rec("license", "skip", "not needed"),
              rec("license_service", "skip", "not needed either"),
              rec("driver_version", "warn", "no pin", "declare it"), rec("iommu_active", "pass", "on")]
    reps = [{"node": "z", "generated_at": "2026-12-04T00:00:00Z", "checks": checks},
            {"node": "a", "generated_at": None, "checks": checks[4:]}]
    xml = P.junit_xml(reps, suite_name="pf")
    assert xml.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites ') and xml.endswith("</testsuites>\n")
    root = ET.fromstring(xml.split("\n", 1)[1])
    assert root.attrib == {"name": "pf", "tests": "6", "failures": "1", "skipped": "2", "errors": "0"}
    a, z = root.findall("testsuite")
    assert a.attrib == {"name": "pf.a", "tests": "1", "failures": "0", "errors": "0", "skipped": "0"}
    assert z.attrib == {"name": "pf.z", "tests": "5", "failures": "1", "errors": "0", "skipped": "2",
                        "timestamp": "2026-12-04T00:00:00Z"}
    cases = z.findall("testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        ("pf.z", "kernel_args"), ("pf.z", "license"), ("pf.z", "license_service"), ("pf.z", "driver_version"),
        ("pf.z", "iommu_active")]
    cases = cases[:2] + cases[3:]
    failure = cases[0].find("failure")
    assert failure.attrib == {"message": "b missing", "type": "preflight"}
    assert failure.text == "%s\nevidence: b missing\nremedy: set b" % P.TITLES["kernel_args"]
    assert cases[1].find("skipped").attrib == {"message": "not needed"} and cases[1].find("failure") is None
    assert cases[2].find("system-out").text == "WARN: no pin\nremedy: declare it"
    assert cases[3].find("system-out").text == "PASS: on"
    assert len(list(cases[3])) == 1 and len(list(cases[0])) == 1
    empty = ET.fromstring(P.junit_xml([]).split("\n", 1)[1])
    assert empty.attrib == {"name": "node_preflight", "tests": "0", "failures": "0", "skipped": "0", "errors": "0"}


# --- DRA: what each check hands to dra (its rules are test_dra.py's) ------------------------------------------------

def _dra_rec(check_id, decided):
    return P.result(check_id, *decided)


GOOD_CDI = "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n  containerEdits: {}\ncontainerEdits: {}\n"


@pytest.mark.parametrize("compute_domains,minimum", [(False, None), (True, None), (False, "590.1.1"), (True, "500.1.1")])
def test_dra_driver_passes_options_through(compute_domains, minimum):
    facts = {"gpu": {"nvml": {"available": True, "driver_version": "580.65.06"}, "gpus": []}}
    o = dict(opts(node_role="k8s_dra_worker"), dra_compute_domains=compute_domains, dra_driver_minimum=minimum)
    assert P.check_dra_driver(facts, o) == _dra_rec("dra_driver", dra.check_dra_driver("580.65.06", compute_domains, minimum))


@pytest.mark.parametrize("nvml_ok,dirs,toolkit", [(True, None, False), (False, ["/etc/cdi", "/var/run/cdi"], True),
                                                  (True, ["/etc/cdi"], True)])
def test_dra_cdi_passes_specs_gpus_and_options_through(nvml_ok, dirs, toolkit):
    gpus = [{"index": 0, "uuid": "GPU-0"}, {"index": 1, "uuid": "GPU-1"}]   # the spec lists only "0": stale
    cdi = [{"path": "/etc/cdi/a.yaml", "error": "permission denied"}, {"path": "/etc/cdi/b.yaml", "text": "{{{"},
           {"path": "/etc/cdi/c.yaml", "text": GOOD_CDI}, {"path": "/etc/cdi/d.yaml"}]
    facts = {"gpu": {"nvml": {"available": nvml_ok, "driver_version": "580.65.06"}, "gpus": gpus}, "cdi": cdi}
    specs = [{"path": "/etc/cdi/a.yaml", "error": "permission denied"}]
    for item in cdi[1:]:
        try:
            specs.append(dra.parse_cdi_spec(item.get("text") or "", item["path"]))
        except dra.DraError as e:
            specs.append({"path": item["path"], "error": str(e)})
    o = dict(opts(node_role="k8s_dra_worker"), cdi_spec_dirs=dirs, dra_require_toolkit_spec=toolkit)
    want = dra.check_dra_cdi(specs, gpus if nvml_ok else None, dirs, require_toolkit_spec=toolkit)
    if nvml_ok:   # the GPUs are what makes the difference here
        assert want != dra.check_dra_cdi(specs, None, dirs, require_toolkit_spec=toolkit)
    assert P.check_dra_cdi(facts, o) == _dra_rec("dra_cdi", want)
    assert P.check_dra_cdi({}, o) == _dra_rec("dra_cdi", dra.check_dra_cdi([], None, dirs, require_toolkit_spec=toolkit))


@pytest.mark.parametrize("target,manages", [(False, False), ("yes", True), (True, False), (0, True)])
def test_dra_mig_passes_gpus_and_options_through(target, manages):
    gpus = [{"index": 0, "uuid": "GPU-0", "model": "NVIDIA H100 80GB HBM3", "mig_capable": True,
             "mig_mode": {"current": "enabled", "pending": "enabled"}, "instances": [], "mig_devices": []}]
    o = dict(opts(node_role="k8s_dra_worker"), mig_target=target, dra_manages_mig=manages)
    facts = {"gpu": {"nvml": {"available": True, "driver_version": "580.65.06"}, "gpus": gpus}}
    assert P.check_dra_mig(facts, o) == _dra_rec("dra_mig", dra.check_dra_mig(gpus, bool(target), manages))
    facts["gpu"]["gpus"] = None
    assert P.check_dra_mig(facts, o) == _dra_rec("dra_mig", dra.check_dra_mig([], bool(target), manages))


@pytest.mark.parametrize("gpu_facts_,evidence", [
    (None, "GPU facts (gpu_info) were not gathered"),
    ({"failed": True, "msg": "x"}, "reading GPU facts (gpu_info) failed: x"),
    ({"nvml": {"available": False, "reason": "no driver"}}, "NVML is not available: no driver"),
])
def test_nvml_checks_name_why_nvml_is_unusable(gpu_facts_, evidence):
    facts = {} if gpu_facts_ is None else {"gpu": gpu_facts_}
    o = opts(node_role="k8s_dra_worker")
    assert P.check_dra_driver(facts, o) == rec("dra_driver", "fail", evidence,
                                               "install and load the NVIDIA driver (playbooks/driver_pin.yml)")
    assert P.check_dra_mig(facts, o) == rec("dra_mig", "fail", evidence, "make NVML usable on the node and rerun")
    assert P.check_mig_pending(facts, o) == rec("mig_pending", "fail", evidence,
                                                "make the driver usable first (see check driver_version)")


def test_isolation_names_every_unisolated_gpu():
    bad = [dict(TWO[1]), dict(TWO[1], address="0000:c1:00.0", isolation_reason="shares group 9")]
    assert P.check_iommu_isolation(iommu(gpus=bad), opts()) == rec(
        "iommu_isolation", "fail", "not isolated: 0000:b3:00.0: shares group 7 with 0000:b4:00.0; 0000:c1:00.0: shares group 9", R_ISO)


def test_vfio_all_follows_the_passthrough_selection_and_explicit_addresses_are_lower_cased():
    devices = [dev("0000:65:00.0"), dev("0000:b3:00.0", driver="nvidia")]
    gpus = [{"address": "0000:65:00.0", "isolated": True}, {"address": "0000:b3:00.0", "isolated": True}]
    o = dict(opts(), passthrough_gpus=["0000:65:00.0"])
    assert P.check_vfio_bound(iommu(gpus=gpus, devices=devices), o) == rec("vfio_bound", "pass", "vfio-pci bound to 0000:65:00.0")
    o = dict(opts(), vfio_devices=["0000:B3:00.0"])
    assert P.check_vfio_bound(iommu(gpus=gpus, devices=devices), o) == rec(
        "vfio_bound", "fail", "0000:b3:00.0 is bound to nvidia", _vfio_remedy("10de:26b9"))


def test_license_feature_reads_feature_type_as_gridd_numbers_for_every_gpu():
    o = opts(license_required=True)
    assert nls.feature_name(0, "gridd") != nls.feature_name(0)
    reason = nls.fits(nls.feature_name(0, "gridd"), "C", False)[1]
    gpus = [gpu(model="NVIDIA L40S", index=0), gpu(model="NVIDIA A100-4C", index=1, licensed=False)]
    assert P.check_license_feature(lic(*gpus, gridd={"feature_type": 0}), o) == rec(
        "license_feature", "fail", "GPU 1 (NVIDIA A100-4C) (C-series): gridd FeatureType 0: %s; GPU 0 (NVIDIA L40S): no vGPU series "
        "in the name" % reason, R_FEATURE)


def test_mig_pending_old_driver_record_names_every_gpu():
    facts = gpu_facts(mig_gpu(), mig_gpu(1), driver="418.1.1")
    res = P.check_mig_pending(facts, opts())
    why = "driver 418.1.1 is older than"
    assert res["id"] == "mig_pending" and res["title"] == P.TITLES["mig_pending"] and res["status"] == "fail"
    parts = res["evidence"].split("; ")
    assert len(parts) == 2 and parts[0].startswith("GPU 0 (NVIDIA A100-SXM4-40GB): " + why)
    assert parts[1].startswith("GPU 1 (NVIDIA A100-SXM4-40GB): " + why)
    assert P.check_mig_pending(gpu_facts(mig_gpu(), mig_gpu(1, "disabled", "disabled")), opts()) == rec(
        "mig_pending", "pass", "GPU 0 (NVIDIA A100-SXM4-40GB): MIG enabled; GPU 1 (NVIDIA A100-SXM4-40GB): MIG disabled")


def test_health_options_are_checked_and_applied():
    with pytest.raises(P.PreflightError, match=r"^temperature_margin must be a number, not True$"):
        P.normalize_options({"temperature_margin": True})
    assert P.normalize_options({"temperature_margin": "7"})["temperature_margin"] == 7


def test_result_without_remedy_and_nvml_version_only_when_available():
    assert P.result("x", "fail", "e") == {"id": "x", "title": "x", "status": "fail", "evidence": "e", "remedy": ""}
    facts = drv_facts(nvml={"available": False, "driver_version": "550.1.1", "reason": "gone"})
    assert P.check_driver_version(facts, opts())["evidence"].endswith("(%s)" % (EV % ("unavailable: gone", "none")))


def test_license_pass_lists_every_gpu():
    assert P.check_license(lic(gpu(40, index=0), gpu(50, index=1)), opts(license_required=True)) == rec(
        "license", "pass", GOOD % ("GPU 0 (NVIDIA L40S)", 40) + "; " + GOOD % ("GPU 1 (NVIDIA L40S)", 50))
