# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node readiness (pre-join) checks: pure decisions over facts other modules gathered (no I/O).

Each check is a function ``(facts, options) -> {id, title, status, evidence, remedy}`` with status
``pass``/``fail``/``warn``/``skip``. ``evaluate`` runs the checks that apply to the node's role and aggregates a verdict;
``junit_xml`` and ``fleet_summary`` render many nodes' reports for CI systems and the play recap.

facts (all optional; a missing source makes the checks that need it fail, naming what is missing):
  iommu    iommu_info result                    gpu      gpu_info result (nvml, gpus)
  license  nvidia_license_info result           mig      mig_geometry check-mode result (or {failed, msg})
  driver   {installed_version, loaded_version}  cmdline  kernel command line text
  cdi      [{path, text}] of the CDI spec files found on the node (or {path, error} for one that could not be read)
The GPU health checks (gpu_*) read gpu_info's health readings and kernel_log (module_utils/_preflight/health.py).
"""

from __future__ import annotations

import datetime
import xml.etree.ElementTree as ET
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Callable, NamedTuple, Optional

from ansible_collections.gpuops.provision.plugins.module_utils._drivers import versions
from ansible_collections.gpuops.provision.plugins.module_utils._gpu import iommu
from ansible_collections.gpuops.provision.plugins.module_utils._licensing import gridd as licensing_gridd, nls
from ansible_collections.gpuops.provision.plugins.module_utils._mig import models
from ansible_collections.gpuops.provision.plugins.module_utils._preflight import dra, health

STATUSES = ("pass", "fail", "warn", "skip")
NODE_ROLES = ("k8s_worker", "k8s_dra_worker", "vgpu_guest", "passthrough_host")
# What checks read (the role's gather tasks run the reads the selected checks need, see needs()): iommu_info,
# gpu_info (with GPU health, with the kernel log's Xid events), nvidia_license_info, mig_geometry in check mode, the
# CDI spec files, DCGM's diagnostic, and the loaded module's version with the installed driver packages.
FACTS = ("iommu", "gpu", "health", "xid", "license", "mig", "cdi", "runtime", "dcgm", "driver")
DEFAULT_OPTIONS: dict[str, Any] = {
    "node_role": "k8s_worker",
    "checks": None,              # None: DEFAULT_CHECKS[node_role]
    "passthrough_gpus": "all",   # "all" or PCI addresses of the GPUs given to VMs whole
    "vfio_devices": "all",       # "all" (every function of those GPUs) or PCI addresses that must use vfio-pci
    "driver_version": "",        # the pin; empty = installed and loaded must only agree
    "driver_mode": "host",       # host (packages) or gpu_operator (the GPU Operator's driver container)
    "license_required": "auto",  # auto: when NVML reports a vGPU guest; or True/False
    "license_min_days": 7,       # fail when the licence expires sooner
    "license_warn_days": 30,     # warn when it expires sooner (the licence, and the client configuration token)
    "license_vws_covers_c": False,  # a vWS licence serves C-series vGPUs (vGPU 15 and earlier; nls.accepted)
    "dra_compute_domains": False,   # the node runs ComputeDomains (IMEX daemons): a higher driver minimum
    "dra_driver_minimum": None,     # another minimum driver version (the GPU Operator's DRA docs say 580)
    "dra_manages_mig": False,       # the DRA driver's DynamicMIG gate is on: it creates and destroys MIG devices
    "dra_require_toolkit_spec": False,  # something besides the DRA driver requests nvidia.com/gpu CDI devices
    "cdi_spec_dirs": None,          # the container runtime's CDI spec directories; None: as the runtime read says
    "mig_target": False,         # a MIG target was declared (the mig facts are the check-mode plan against it)
    "kernel_args": [],           # "key" (present) or "key=value" (exact value)
    "fail_on_warn": False,
}
DEFAULT_OPTIONS.update(health.DEFAULT_OPTIONS)
REMEDY_KERNEL_ARGS = ("add them to GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub and run update-grub "
                      "(systemd-boot: /etc/kernel/cmdline and proxmox-boot-tool refresh), then reboot")


class PreflightError(ValueError):
    """Invalid options; the message names the option."""


def result(check_id: str, status: str, evidence: str, remedy: str = "") -> dict[str, Any]:
    if status not in STATUSES:
        raise PreflightError("check %s: unknown status %r" % (check_id, status))
    return {"id": check_id, "title": TITLES.get(check_id, check_id), "status": status, "evidence": evidence,
            "remedy": remedy if status in ("fail", "warn") else ""}


def _gpu_label(gpu: Mapping[str, Any]) -> str:
    return "GPU %s (%s)" % (gpu.get("index"), gpu.get("model") or gpu.get("address") or "?")


def _source_error(facts: Mapping[str, Any], name: str, what: str) -> Optional[str]:
    """Evidence when a fact source is missing or its module failed; None when usable."""
    src = facts.get(name)
    if not src:
        return "%s were not gathered" % what
    if src.get("failed"):
        return "reading %s failed: %s" % (what, src.get("msg") or "unknown error")
    return None


def _nvml_error(facts: Mapping[str, Any]) -> Optional[str]:
    """Why NVML's facts cannot be used (gpu_info missing, failed, or NVML unavailable); None when they can."""
    return health.nvml_gpus(facts)[1]


# --- IOMMU / vfio (passthrough hosts) -----------------------------------------------------------------------------

def check_iommu_active(facts: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    err = _source_error(facts, "iommu", "IOMMU facts (iommu_info)")
    remedy = ("enable VT-d (Intel) or AMD-Vi/IOMMU in the firmware setup; on Intel with a kernel older than 6.8 add "
              "intel_iommu=on to the kernel command line, then reboot")
    if err:
        return result("iommu_active", "fail", err, remedy)
    io = facts["iommu"]
    units = io.get("units") or []
    groups = io.get("groups") or []
    detail = "kind %s, units [%s], %d IOMMU groups, cmdline: %s" % (
        io.get("kind"), ", ".join(units), len(groups), io.get("cmdline", ""))
    if not io.get("active"):
        why = "no IOMMU unit in /sys/class/iommu" if not units else "IOMMU units exist but no IOMMU groups were created"
        return result("iommu_active", "fail", "IOMMU is not active: %s (%s)" % (why, detail), remedy)
    if io.get("interrupt_remapping") is False and not io.get("allow_unsafe_interrupts"):
        return result("iommu_active", "warn", "IOMMU active but interrupt remapping is off (%s)" % detail,
                      "enable interrupt remapping in the firmware (or remove intremap=off); without it VFIO refuses "
                      "assignment unless vfio_iommu_type1 allow_unsafe_interrupts=1, which is unsafe")
    return result("iommu_active", "pass", "IOMMU active: %s" % detail)


def _wanted_gpus(io_gpus: Sequence[Mapping[str, Any]], wanted: Any) -> tuple[list[Mapping[str, Any]], list[str]]:
    if wanted in (None, "all"):
        return list(io_gpus), []
    wanted = [str(a).lower() for a in wanted]
    found = [g for g in io_gpus if g["address"] in wanted]
    missing = [a for a in wanted if a not in [g["address"] for g in io_gpus]]
    return found, missing


def check_iommu_isolation(facts: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    remedy = ("move the card to a slot whose root port isolates it (see the mainboard manual) or enable ACS in the "
              "firmware; pcie_acs_override breaks isolation between devices and is not recommended")
    err = _source_error(facts, "iommu", "IOMMU facts (iommu_info)")
    if err:
        return result("iommu_isolation", "fail", err, remedy)
    io = facts["iommu"]
    if not io.get("active"):
        return result("iommu_isolation", "fail", "no IOMMU groups: the IOMMU is not active",
                      "make the IOMMU active first (see check iommu_active)")
    gpus, missing = _wanted_gpus(io.get("gpus") or [], options["passthrough_gpus"])
    if missing:
        return result("iommu_isolation", "fail", "passthrough GPU(s) %s not found in any IOMMU group" % ", ".join(missing),
                      "check the PCI addresses in node_preflight_passthrough_gpus against lspci -D")
    if not gpus:
        return result("iommu_isolation", "fail", "no NVIDIA GPU found in the IOMMU groups",
                      "check that the GPU is seated and visible in lspci -nn")
    bad = [g for g in gpus if not g.get("isolated")]
    lines = ["%s: %s" % (g["address"], g.get("isolation_reason")) for g in gpus]
    if bad:
        return result("iommu_isolation", "fail", "not isolated: " + "; ".join(
            "%s: %s" % (g["address"], g.get("isolation_reason")) for g in bad), remedy)
    return result("iommu_isolation", "pass", "; ".join(lines))


def check_vfio_bound(facts: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    err = _source_error(facts, "iommu", "IOMMU facts (iommu_info)")
    if err:
        return result("vfio_bound", "fail", err, "check that sysfs is readable (iommu_info) and rerun")
    io = facts["iommu"]
    devices = [d for g in io.get("groups") or [] for d in g.get("devices") or []]
    by_addr = dict((d["address"], d) for d in devices)
    wanted = options["vfio_devices"]
    if wanted in (None, "all"):
        gpus, _missing = _wanted_gpus(io.get("gpus") or [], options["passthrough_gpus"])
        slots = set(iommu.slot_of(g["address"]) for g in gpus)
        # Every function of the card (GPU, HDMI audio, USB-C) goes to the VM together, so all need vfio-pci.
        expected = sorted(a for a, d in by_addr.items() if iommu.slot_of(a) in slots and d.get("vendor") == iommu.NVIDIA_VENDOR)
        missing = []
    else:
        expected = sorted(str(a).lower() for a in wanted)
        missing = [a for a in expected if a not in by_addr]
    if not expected:
        return result("vfio_bound", "fail", "no NVIDIA GPU function found to check",
                      "check that the GPU is visible in lspci -nn and that the IOMMU is active")
    wrong = [(a, by_addr[a].get("driver")) for a in expected if a in by_addr and by_addr[a].get("driver") != "vfio-pci"]
    if missing or wrong:
        ids = sorted(set("%s:%s" % (by_addr[a]["vendor"][2:], by_addr[a]["device"][2:]) for a, _drv in wrong))
        parts = ["%s is bound to %s" % (a, drv or "no driver") for a, drv in wrong]
        parts += ["%s is not present" % a for a in missing]
        remedy = ("bind them to vfio-pci at boot: 'options vfio-pci ids=%s' in /etc/modprobe.d/vfio.conf, 'softdep nvidia "
                  "pre: vfio-pci' (and nouveau), vfio modules in /etc/modules-load.d, update-initramfs -u -k all, reboot"
                  % ",".join(ids or ["<vendor>:<device>"]))
        return result("vfio_bound", "fail", "; ".join(parts), remedy)
    return result("vfio_bound", "pass", "vfio-pci bound to %s" % ", ".join(expected))


# --- driver ------------------------------------------------------------------------------------------------------------

# The GPU Operator's driver container (issue 37 point 5) keeps the driver's userspace under its root on the host,
# /run/nvidia/driver (gpu-operator's device-plugin entrypoint: /run/nvidia/validations/driver-ready -> driver root
# /run/nvidia/driver, host-driver-ready -> /; NVIDIA/gpu-operator#178), not in the host's package list nor its library
# path. The driver's libraries carry its version in their names, libnvidia-ml.so.<version> (how the Container
# Toolkit finds a driver's libraries: nvidia-container-toolkit pkg/nvcdi, lib*.so.<driver version>).
DRIVER_MODES = ("host", "gpu_operator")
OPERATOR_DRIVER_ROOT = "/run/nvidia/driver"
OPERATOR_VALIDATION = "/run/nvidia/validations/driver-ready"


def driver_root_facts(paths: Optional[Iterable[str]], driver_root: str = OPERATOR_DRIVER_ROOT) -> dict[str, Any]:
    """The driver in a driver container's root from the paths of its libnvidia-ml.so.* files: dict(installed_version,
    lib_dir, driver_root, source). ``installed_version`` is None when no file names a driver version."""
    found: list[tuple[versions.DriverVersion, str]] = []
    for path in paths or ():
        directory, _sep, name = str(path).rpartition("/")
        if not name.startswith("libnvidia-ml.so."):
            continue
        try:
            found.append((versions.parse_driver_version(name[len("libnvidia-ml.so."):]), directory))
        except versions.VersionError:
            continue
    out: dict[str, Any] = dict(installed_version=None, lib_dir=None, driver_root=driver_root, source="gpu_operator")
    if found:
        version, directory = max(found, key=lambda f: f[0].key)
        out.update(installed_version=str(version), lib_dir=directory)
    return out


def check_driver_version(facts: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    drv = facts.get("driver") or {}
    pin = str(options.get("driver_version") or "").strip()
    if options.get("driver_mode") == "gpu_operator":
        return _check_operator_driver(drv, facts, pin)
    installed = drv.get("installed_version")
    loaded = drv.get("loaded_version")
    gpu = facts.get("gpu") or {}
    nvml = gpu.get("nvml") or {}
    nvml_version = nvml.get("driver_version") if nvml.get("available") else None
    loaded = loaded or nvml_version
    evidence = "installed %s, loaded %s, NVML %s, pin %s" % (installed or "none", loaded or "none",
                                                             nvml_version or ("unavailable: %s" % nvml.get("reason") if nvml else "not read"),
                                                             pin or "none")
    install_remedy = "install the pinned driver with playbooks/driver_pin.yml (driver_pin_mode=converge)"
    if not installed:
        return result("driver_version", "fail", "no NVIDIA driver package installed (%s)" % evidence, install_remedy)
    try:
        inst_drv = versions.driver_version_of(installed)
    except versions.VersionError as e:
        return result("driver_version", "fail", "installed version not understood: %s (%s)" % (e, evidence), install_remedy)
    if not loaded:
        return result("driver_version", "fail", "driver %s is installed but the kernel module is not loaded (%s)" % (installed, evidence),
                      "load it (modprobe nvidia) or reboot; if it does not load see dmesg (Secure Boot signing, nouveau "
                      "still bound, missing DKMS build for the running kernel)")
    try:
        loaded_drv = versions.driver_version_of(loaded)
    except versions.VersionError as e:
        return result("driver_version", "fail", "loaded version not understood: %s (%s)" % (e, evidence), "reboot the node")
    if loaded_drv != inst_drv:
        return result("driver_version", "fail", "installed driver %s differs from the loaded kernel module %s: reboot pending (%s)"
                      % (inst_drv, loaded_drv, evidence), "reboot the node (drain it first) so the installed driver loads")
    if nvml and not nvml.get("available"):
        return result("driver_version", "fail", "NVML is not usable: %s (%s)" % (nvml.get("reason"), evidence),
                      "reboot the node; check that the NVIDIA userspace libraries match the kernel module")
    if nvml_version and versions.driver_version_of(nvml_version) != loaded_drv:
        return result("driver_version", "fail", "NVML reports driver %s but the kernel module is %s (%s)" % (nvml_version, loaded_drv, evidence),
                      "reboot the node so userspace and kernel module agree")
    return _pin_verdict(installed, str(inst_drv), pin, evidence, "installed = loaded", "installed driver",
                        "declare the fleet's pin in node_preflight_driver_version (or nvidia_driver_version)",
                        install_remedy + " then reboot")


def _pin_verdict(have: str, agreed: str, pin: str, evidence: str, agree: str, subject: str, warn_remedy: str,
                 fail_remedy: str) -> dict[str, Any]:
    """driver_version once the driver's parts agree on ``agreed``: warn without a pin, else ``have`` against it."""
    if not pin:
        return result("driver_version", "warn", "%s = %s, but no pinned version is declared (%s)" % (agree, agreed, evidence),
                      warn_remedy)
    try:
        on_pin = versions.matches_pin(have, pin)
    except versions.VersionError as e:
        raise PreflightError("node_preflight_driver_version: %s" % e)
    if not on_pin:
        return result("driver_version", "fail", "%s %s is not the pinned %s (%s)" % (subject, have, pin, evidence), fail_remedy)
    return result("driver_version", "pass", "%s = pinned %s (%s)" % (agree, pin, evidence))


def _check_operator_driver(drv: Mapping[str, Any], facts: Mapping[str, Any], pin: str) -> dict[str, Any]:
    """The GPU Operator's driver: no host package; the driver container's root, the loaded module and NVML agree."""
    root = drv.get("driver_root") or OPERATOR_DRIVER_ROOT
    version = drv.get("installed_version")
    loaded = drv.get("loaded_version")
    nvml = (facts.get("gpu") or {}).get("nvml") or {}
    nvml_version = nvml.get("driver_version") if nvml.get("available") else None
    evidence = "GPU Operator driver root %s: %s, loaded %s, NVML %s, pin %s" % (
        root, "libnvidia-ml.so.%s" % version if version else "no libnvidia-ml.so.<version>", loaded or "none",
        nvml_version or ("unavailable: %s" % nvml.get("reason") if nvml else "not read"), pin or "none")
    pod = "see the nvidia-driver-daemonset pod on this node (kubectl -n gpu-operator logs) and the operator's validator"
    if not version:
        return result("driver_version", "fail", "no driver in the GPU Operator's driver root (%s)" % evidence,
                      "the driver container has not installed the driver yet: " + pod)
    want = versions.parse_driver_version(version)
    checks = (("the kernel module", loaded), ("NVML", nvml_version))
    for what, other in checks:
        if other and versions.driver_version_of(other) != want:
            return result("driver_version", "fail", "driver container %s, but %s reports %s (%s)" % (version, what, other, evidence),
                          "the driver container is being replaced or failed to load its module: " + pod)
    if not loaded:
        return result("driver_version", "fail", "the kernel module is not loaded (%s)" % evidence, pod)
    if nvml and not nvml.get("available"):
        return result("driver_version", "fail", "NVML through the driver root is not usable: %s (%s)" % (nvml.get("reason"), evidence), pod)
    return _pin_verdict(version, version, pin, evidence, "driver container = loaded", "the GPU Operator's driver",
                        "declare the fleet's pin in node_preflight_driver_version (the ClusterPolicy's driver.version)",
                        "set the ClusterPolicy's driver.version (or the NVIDIADriver resource) to the pin; the operator "
                        "rolls its driver containers")


# --- licence ---------------------------------------------------------------------------------------------------------

def _licence_needed(facts: Mapping[str, Any], options: Mapping[str, Any]) -> tuple[bool, str]:
    req = options["license_required"]
    if req in (True, False):
        return req, "required by configuration" if req else "not required by configuration"
    lic = facts.get("license") or {}
    gpus = lic.get("gpus") or []
    if any(g.get("virtualization_mode") == "vgpu" for g in gpus):
        return True, "NVML reports a vGPU guest"
    if options["node_role"] == "vgpu_guest":
        return True, "the node is declared a vGPU guest"
    return False, "no GPU runs as a vGPU (virtualization modes: %s)" % (
        ", ".join(sorted(set(str(g.get("virtualization_mode")) for g in gpus))) or "unknown")


def check_license(facts: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    remedy = ("configure licensing with the gpuops.provision.nvidia_license role: FeatureType in /etc/nvidia/gridd.conf and the "
              "client configuration token in /etc/nvidia/ClientConfigToken (mode 0744), restart nvidia-gridd; on failure "
              "see journalctl -u nvidia-gridd and the CLS/DLS instance")
    needed, why = _licence_needed(facts, options)
    if not needed:
        return result("license", "skip", "licence not needed: %s" % why)
    err = _source_error(facts, "license", "licence facts (nvidia_license_info)")
    if err:
        return result("license", "fail", err, remedy)
    lic = facts["license"]
    nvml = lic.get("nvml") or {}
    if nvml and not nvml.get("available", True):
        return result("license", "fail", "NVML is not available: %s" % nvml.get("reason"), remedy)
    gpus = lic.get("gpus") or []
    if not gpus:
        return result("license", "fail", "NVML lists no GPU to license", remedy)
    fails, warns, good = [], [], []
    min_days = int(options["license_min_days"])
    warn_days = int(options["license_warn_days"])
    gridd = lic.get("gridd") or {}
    for g in gpus:
        label = _gpu_label(g)
        if not g.get("supported"):
            fails.append("%s: NVML reports no licensable feature (virtualization mode %s)" % (label, g.get("virtualization_mode")))
        elif not g.get("licensed"):
            fails.append("%s: unlicensed (%s; gridd FeatureType %s)" % (
                label, g.get("state") or "unlicensed", gridd.get("feature_type", "not set")))
        elif g.get("expiry_status") == "permanent" or g.get("days_left") is None:
            good.append("%s: %s licensed (%s)" % (label, g.get("product"), g.get("expiry_status")))
        elif g["days_left"] < min_days:
            fails.append("%s: %s licence expires %s, in %d days (minimum %d)" % (label, g.get("product"), g.get("expiry"),
                                                                                 g["days_left"], min_days))
        elif g["days_left"] < warn_days:
            warns.append("%s: %s licence expires %s, in %d days" % (label, g.get("product"), g.get("expiry"), g["days_left"]))
        else:
            good.append("%s: %s licensed until %s (%d days)" % (label, g.get("product"), g.get("expiry"), g["days_left"]))
    if fails:
        expiring = all("expires" in f for f in fails)
        if expiring:
            remedy = ("the lease normally renews by itself: check that nvidia-gridd reaches the CLS/DLS instance "
                      "(journalctl -u nvidia-gridd) and the entitlement's end date on the NVIDIA Licensing Portal")
        return result("license", "fail", "; ".join(fails + warns + good), remedy)
    if warns:
        return result("license", "warn", "; ".join(warns + good),
                      "renew the entitlement or check lease renewal (journalctl -u nvidia-gridd)")
    return result("license", "pass", "; ".join(good))


def check_license_service(facts: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """Every endpoint of the token answers TCP and TLS; with an HA pair one that answers is enough (the client fails
    over), the other warns. The token's own expiry warns like the licence's."""
    needed, why = _licence_needed(facts, options)
    if not needed:
        return result("license_service", "skip", "licence not needed: %s" % why)
    err = _source_error(facts, "license", "licence facts (nvidia_license_info)")
    svc = (facts.get("license") or {}).get("service")
    remedy = ("deploy the client configuration token of the service instance (gpuops.provision.nvidia_license role) and "
              "open the node's way to the instance (firewall, proxy, DNS); DLS: check that the appliance is up")
    if err or svc is None:
        return result("license_service", "fail", err or "the service was not checked (nvidia_license_info "
                      "service_check=false)", remedy)
    if svc.get("error"):
        return result("license_service", "fail", svc["error"], remedy)
    eps = svc.get("endpoints") or []
    text = ["%s %s:%s%s %s" % (e.get("kind") or "service", e.get("host"), e.get("port"),
                               " via proxy %s" % e["proxy"] if e.get("proxy") else "",
                               "answers (%s)" % (e.get("tls_version") or "TLS") if e.get("tls") else
                               "does NOT answer: %s" % e.get("error")) for e in eps]
    token = svc.get("token") or {}
    evidence = "token %s of service instance %s: %s" % (
        token.get("file"), token.get("service_instance"), "; ".join(text) or "no endpoint")
    up = [e for e in eps if e.get("tls")]
    if not up:
        return result("license_service", "fail", evidence, remedy)
    days = licensing_gridd.days_left(token.get("expires_at"), datetime.datetime.now(datetime.timezone.utc))
    if days is not None and days < int(options["license_warn_days"]):
        return result("license_service", "warn", "%s; the token expires %s, in %d days" % (
            evidence, token["expires_at"], days),
            "generate a new client configuration token on the Licensing Portal or the DLS and deploy it")
    if len(up) < len(eps):
        return result("license_service", "warn", evidence, "bring the unreachable HA node back (the client uses the "
                                                           "other one meanwhile)")
    return result("license_service", "pass", evidence)


def check_license_feature(facts: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """The gridd FeatureType, and the product NVML reports licensed, fit each vGPU's series (nls.fits): a vWS licence
    for a Q profile, NVIDIA AI Enterprise / vCS for C, vPC for B, vApps for A. A mismatch is a known failure: the
    guest runs unlicensed, with reduced performance, however healthy the service is."""
    needed, why = _licence_needed(facts, options)
    if not needed:
        return result("license_feature", "skip", "licence not needed: %s" % why)
    err = _source_error(facts, "license", "licence facts (nvidia_license_info)")
    remedy = ("set FeatureType in /etc/nvidia/gridd.conf to the licence of the vGPU's series (gpuops.provision."
              "nvidia_license role, nvidia_license_feature_type; 1 lets the driver choose) and restart nvidia-gridd")
    if err:
        return result("license_feature", "fail", err, remedy)
    lic = facts["license"]
    feature_type = (lic.get("gridd") or {}).get("feature_type")
    fails: list[str]
    good: list[str]
    fails, good = [], []
    for g in lic.get("gpus") or []:
        series = nls.profile_class(g.get("model") or "")
        label = _gpu_label(g)
        if series is None:
            good.append("%s: no vGPU series in the name" % label)
            continue
        checks = [("gridd FeatureType %s" % feature_type, nls.feature_name(feature_type, "gridd"))] \
            if feature_type is not None else []
        if g.get("licensed") and g.get("product"):
            checks.append(("licensed product %s" % g["product"], g["product"]))
        for what, feature in checks:
            ok, reason = nls.fits(feature, series, options.get("license_vws_covers_c"))
            (good if ok else fails).append("%s (%s-series): %s: %s" % (label, series, what, reason))
        if not checks:
            fails.append("%s (%s-series): no FeatureType in gridd.conf and no licensed product" % (label, series))
    if fails:
        return result("license_feature", "fail", "; ".join(fails + good), remedy)
    return result("license_feature", "pass", "; ".join(good) or "no GPU to check")


# --- DRA (NVIDIA's DRA Driver for GPUs; the rules and their sources are module_utils/_preflight/dra.py's) ------------------------

def _dra_result(check_id: str, decided: tuple[str, str, str]) -> dict[str, Any]:
    status, evidence, remedy = decided
    return result(check_id, status, evidence, remedy)


def check_dra_driver(facts: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    err = _nvml_error(facts)
    if err:
        return result("dra_driver", "fail", err, "install and load the NVIDIA driver (playbooks/driver_pin.yml)")
    try:
        return _dra_result("dra_driver", dra.check_dra_driver(
            facts["gpu"]["nvml"].get("driver_version"), options["dra_compute_domains"], options["dra_driver_minimum"]))
    except dra.DraError as e:
        raise PreflightError("dra_driver_minimum: %s" % e)


def check_dra_cdi(facts: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    specs = []
    for spec in facts.get("cdi") or []:
        if spec.get("error"):
            specs.append({"path": spec.get("path"), "error": spec["error"]})
            continue
        try:
            specs.append(dra.parse_cdi_spec(spec.get("text") or "", spec.get("path")))
        except dra.DraError as e:
            specs.append({"path": spec.get("path"), "error": str(e)})
    gpus = ((facts.get("gpu") or {}).get("gpus")) if not _nvml_error(facts) else None
    # The runtime's own version and configuration, and the kubelet's version (issue 37 point 7): read on the node.
    read = facts.get("runtime")
    runtime = None
    if read is not None:
        try:
            runtime = dra.runtime_cdi(read.get("containerd_version"), read.get("containerd_config"),
                                      read.get("crio_version"), read.get("crio_config"), read.get("kubelet_version"))
        except dra.DraError as e:
            return result("dra_cdi", "fail", "the container runtime's configuration cannot be read: %s" % e,
                          "check containerd config dump / crio config on the node")
    return _dra_result("dra_cdi", dra.check_dra_cdi(specs, gpus, options["cdi_spec_dirs"],
                                                    require_toolkit_spec=options["dra_require_toolkit_spec"],
                                                    runtime=runtime))


def check_dra_mig(facts: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    err = _nvml_error(facts)
    if err:
        return result("dra_mig", "fail", err, "make NVML usable on the node and rerun")
    return _dra_result("dra_mig", dra.check_dra_mig(facts["gpu"].get("gpus") or [], bool(options["mig_target"]),
                                                    options["dra_manages_mig"]))


# --- MIG -------------------------------------------------------------------------------------------------------------

def check_mig_pending(facts: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    err = _nvml_error(facts)
    if err:
        return result("mig_pending", "fail", err, "make the driver usable first (see check driver_version)")
    gpus = [g for g in facts["gpu"].get("gpus") or [] if g.get("mig_mode")]
    if not gpus:
        return result("mig_pending", "skip", "no MIG-capable GPU")
    pending = [g for g in gpus if g["mig_mode"].get("current") != g["mig_mode"].get("pending")]
    if pending:
        return result("mig_pending", "fail", "; ".join(
            "%s: MIG mode %s, pending %s" % (_gpu_label(g), g["mig_mode"]["current"], g["mig_mode"]["pending"]) for g in pending),
            "stop GPU clients and reset the GPU (nvidia-smi -r -i %s) or reboot the node; in a pass-through VM only a reboot "
            "applies it" % ",".join(str(g.get("index")) for g in pending))
    # MIG user guide, deployment considerations: A100 R450, A30 R460, H100 R525, H200 R550 (models).
    driver = (facts["gpu"].get("nvml") or {}).get("driver_version")
    old = [(g, models.below_minimum(g["pci_device_id"], driver)) for g in gpus
           if g.get("pci_device_id") and "enabled" in (g["mig_mode"].get("current"), g["mig_mode"].get("pending"))]
    old = [(g, why) for g, why in old if why]
    if old:
        return result("mig_pending", "fail", "; ".join("%s: %s" % (_gpu_label(g), why) for g, why in old),
                      "install a driver of the documented branch or newer (playbooks/driver_pin.yml), or disable MIG")
    return result("mig_pending", "pass", "; ".join("%s: MIG %s" % (_gpu_label(g), g["mig_mode"]["current"]) for g in gpus))


def _geometry_text(geo: Optional[Mapping[str, Any]]) -> str:
    if not geo:
        return "none"
    mode = (geo.get("mig_mode") or {}).get("current", "?")
    devices = geo.get("mig_devices") or {}
    if mode != "enabled":
        return "MIG %s" % mode
    return "MIG enabled {%s}" % ", ".join("%s: %s" % (k, devices[k]) for k in sorted(devices))


def check_mig_geometry(facts: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    remedy = ("apply the target with the mig_reconfigure workflow (drain, mig_geometry, uncordon); "
              "for a single node: gpuops.provision.mig_geometry with the same configuration")
    if not options["mig_target"]:
        return result("mig_geometry", "skip", "no MIG target declared (node_preflight_mig_config / node_preflight_mig_devices)")
    mig = facts.get("mig")
    if not mig:
        return result("mig_geometry", "fail", "the MIG plan (mig_geometry in check mode) was not gathered", remedy)
    if mig.get("failed"):
        return result("mig_geometry", "fail", "the declared MIG target cannot be applied: %s" % mig.get("msg"),
                      "fix the MIG target (profiles and counts must fit each GPU)")
    changed = [g for g in mig.get("gpus") or [] if g.get("changed")]
    selected = [g for g in mig.get("gpus") or [] if g.get("selected") and not g.get("skipped")]
    if changed:
        return result("mig_geometry", "fail", "; ".join(
            "%s: is %s, target %s%s" % (_gpu_label(g), _geometry_text(g.get("before")), _geometry_text(g.get("after")),
                                        " (needs a GPU reset)" if g.get("reset_required") else "") for g in changed), remedy)
    if not selected:
        return result("mig_geometry", "warn", "the MIG target selects no MIG-capable GPU on this node",
                      "check the target's devices / device-filter")
    return result("mig_geometry", "pass", "; ".join("%s: %s" % (_gpu_label(g), _geometry_text(g.get("before"))) for g in selected))


# --- kernel command line ---------------------------------------------------------------------------------------------

def parse_required_arg(text: object) -> tuple[str, Optional[str]]:
    key, sep, value = str(text).strip().partition("=")
    if not key:
        raise PreflightError("node_preflight_kernel_args: empty entry %r" % (text,))
    return key, (value if sep else None)


def check_kernel_args(facts: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    required = [parse_required_arg(a) for a in options["kernel_args"] or []]
    if not required:
        return result("kernel_args", "skip", "no kernel arguments required (node_preflight_kernel_args)")
    cmdline = facts.get("cmdline")
    if cmdline is None and facts.get("iommu") and not facts["iommu"].get("failed"):
        cmdline = facts["iommu"].get("cmdline")
    if cmdline is None:
        return result("kernel_args", "fail", "the kernel command line was not read", "check that /proc/cmdline is readable")
    have = iommu.parse_cmdline(cmdline)
    problems = []
    for key, value in required:
        if key not in have:
            problems.append("%s missing" % (key if value is None else "%s=%s" % (key, value)))
        elif value is not None and have[key] != value:
            problems.append("%s=%s wanted, %s=%s present" % (key, value, key, have[key] if have[key] is not None else ""))
    want = " ".join(k if v is None else "%s=%s" % (k, v) for k, v in required)
    if problems:
        return result("kernel_args", "fail", "%s (cmdline: %s)" % ("; ".join(problems), cmdline.strip()),
                      "set '%s': %s" % (want, REMEDY_KERNEL_ARGS))
    return result("kernel_args", "pass", "present: %s" % want)


# --- the record per check: everything else about the checks is derived from it ----------------------------------------

class Check(NamedTuple):
    id: str
    title: str                    # the report's and the JUnit testcase's title
    roles: tuple[str, ...]        # the node roles that run it by default (DEFAULT_CHECKS); the others report it skipped
    facts: tuple[str, ...]        # what it reads (FACTS): the role gathers only what the selected checks need
    run: Callable[[Mapping[str, Any], Mapping[str, Any]], dict[str, Any]]


PASSTHROUGH = ("passthrough_host",)
_HEALTH_EXTRA = {"gpu_xid": ("xid",), "gpu_dcgm": ("dcgm",)}
GUESTS = ("k8s_worker", "vgpu_guest", "k8s_dra_worker")   # nodes that run the NVIDIA driver
# A passthrough (vfio) host runs no NVIDIA driver, so NVML cannot read its GPUs' health; nodes running NVIDIA's DRA
# driver instead of the device plugin have no mig_geometry (dra_mig says whether a MIG target may be declared at all).
RECORDS = (
    Check("iommu_active", "IOMMU active", PASSTHROUGH, ("iommu",), check_iommu_active),
    Check("iommu_isolation", "GPU IOMMU groups isolated", PASSTHROUGH, ("iommu",), check_iommu_isolation),
    Check("vfio_bound", "vfio-pci bound to passthrough GPUs", PASSTHROUGH, ("iommu",), check_vfio_bound),
    Check("driver_version", "NVIDIA driver installed = loaded = pinned", GUESTS, ("gpu", "driver"),
          check_driver_version),
    Check("license", "vGPU licence acquired and not expiring soon", GUESTS, ("license",), check_license),
    Check("license_service", "The licence service instance of the client configuration token answers (TCP and TLS)",
          GUESTS, ("license",), check_license_service),
    Check("license_feature", "The licence feature type fits the vGPU profile class", GUESTS, ("license",),
          check_license_feature),
    Check("mig_pending", "No pending MIG mode change, and a driver NVIDIA supports for MIG on the GPU", GUESTS,
          ("gpu",), check_mig_pending),
    Check("mig_geometry", "MIG mode and geometry equal the declared target", ("k8s_worker", "vgpu_guest"), ("mig",),
          check_mig_geometry),
    Check("kernel_args", "Required kernel arguments present", PASSTHROUGH + GUESTS, ("iommu",), check_kernel_args),
    Check("dra_driver", "NVIDIA driver new enough for the DRA driver (and ComputeDomains)", ("k8s_dra_worker",),
          ("gpu",), check_dra_driver),
    Check("dra_cdi", "CDI ready for the DRA driver (runtime spec directories, specs that load)", ("k8s_dra_worker",),
          ("gpu", "cdi", "runtime"), check_dra_cdi),
    Check("dra_mig", "MIG devices left to the DRA driver where it manages them", ("k8s_dra_worker",), ("gpu",),
          check_dra_mig),
) + tuple(
    # The GPU health checks are module_utils/_preflight/health.py's (one record each, CHECKS there). Each has gpu_info read
    # the GPUs' health; gpu_xid needs the kernel log too, gpu_dcgm DCGM's diagnostic.
    Check(check_id, title, GUESTS, ("gpu", "health") + _HEALTH_EXTRA.get(check_id, ()), fn)
    for check_id, (title, fn) in health.CHECKS.items())

CHECK_IDS = tuple(c.id for c in RECORDS)
HEALTH_CHECK_IDS = tuple(health.CHECKS)
DRA_CHECK_IDS = tuple(c.id for c in RECORDS if c.roles == ("k8s_dra_worker",))
TITLES = {c.id: c.title for c in RECORDS}
CHECKS = {c.id: c.run for c in RECORDS}
# Checks each kind of node needs, in CHECK_IDS order; the others are reported as skipped.
DEFAULT_CHECKS = {role: tuple(c.id for c in RECORDS if role in c.roles) for role in NODE_ROLES}


def needs(checks: Optional[Collection[str]]) -> list[str]:
    """The FACTS the ``checks`` (ids) read, in FACTS order: the node_preflight role gathers these and no others."""
    wanted = {fact for c in RECORDS if c.id in (checks or ()) for fact in c.facts}
    return [fact for fact in FACTS if fact in wanted]


# --- aggregation and rendering ---------------------------------------------------------------------------------------

def tolerates(tolerations: Optional[Iterable[Mapping[str, Any]]], key: str, value: object, effect: str) -> bool:
    """Whether one of ``tolerations`` (core/v1 Toleration dicts) tolerates the taint key=value:effect, as
    k8s.io/api core/v1 Toleration.ToleratesTaint decides: the effect empty or the taint's, and a wildcard (no key,
    Exists), or the key with Exists, or with Equal (the default operator) and the value."""
    for t in tolerations or []:
        exists = t.get("operator") == "Exists"   # else Equal, the default operator
        t_key = t.get("key") or ""
        if (t.get("effect") or "") in ("", effect) and (
                (t_key == "" and exists)
                or (t_key == key and (exists or (t.get("value") or "") == str(value or "")))):
            return True
    return False


def normalize_options(options: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    opts = dict(DEFAULT_OPTIONS)
    opts.update(dict((k, v) for k, v in (options or {}).items() if v is not None or k == "checks"))
    unknown = sorted(set(opts) - set(DEFAULT_OPTIONS))
    if unknown:
        raise PreflightError("unknown option(s): %s" % ", ".join(unknown))
    if opts["node_role"] not in NODE_ROLES:
        raise PreflightError("node_role %r is not one of %s" % (opts["node_role"], ", ".join(NODE_ROLES)))
    if opts["checks"] is None:
        opts["checks"] = list(DEFAULT_CHECKS[opts["node_role"]])
    bad = [c for c in opts["checks"] if c not in CHECKS]
    if bad:
        raise PreflightError("unknown check(s) %s; known: %s" % (", ".join(map(str, bad)), ", ".join(CHECK_IDS)))
    if opts["driver_mode"] not in DRIVER_MODES:
        raise PreflightError("driver_mode must be %s, not %r" % (" or ".join(DRIVER_MODES), opts["driver_mode"]))
    if opts["license_required"] not in ("auto", True, False):
        raise PreflightError("license_required must be auto, true or false, not %r" % (opts["license_required"],))
    for key in ("license_min_days", "license_warn_days"):
        try:
            opts[key] = int(opts[key])
        except (TypeError, ValueError):
            raise PreflightError("%s must be a number of days, not %r" % (key, opts[key]))
    for key in ("passthrough_gpus", "vfio_devices"):
        if opts[key] != "all" and not isinstance(opts[key], (list, tuple)):
            raise PreflightError("%s must be 'all' or a list of PCI addresses" % key)
    for arg in opts["kernel_args"] or []:
        parse_required_arg(arg)
    try:
        opts.update(health.normalize_options(opts))
    except health.HealthError as e:
        raise PreflightError(str(e))
    return opts


def verdict_of(checks: Iterable[Mapping[str, Any]], fail_on_warn: bool = False) -> str:
    statuses = [c["status"] for c in checks]
    if "fail" in statuses:
        return "fail"
    if "warn" in statuses:
        return "fail" if fail_on_warn else "warn"
    return "pass"


def evaluate(node: str, facts: Optional[Mapping[str, Any]], options: Optional[Mapping[str, Any]] = None,
             generated_at: Optional[str] = None) -> dict[str, Any]:
    """The node's report: every known check (selected ones run, others skipped), counts and verdict."""
    opts = normalize_options(options)
    checks = []
    for check_id in CHECK_IDS:
        if check_id in opts["checks"]:
            checks.append(CHECKS[check_id](facts or {}, opts))
        else:
            checks.append(result(check_id, "skip", "not selected for a %s node" % opts["node_role"]))
    counts = dict((s, sum(1 for c in checks if c["status"] == s)) for s in STATUSES)
    verdict = verdict_of(checks, opts["fail_on_warn"])
    return {
        "node": node,
        "node_role": opts["node_role"],
        "verdict": verdict,
        "ready": verdict != "fail",
        "generated_at": generated_at,
        "counts": counts,
        "failed_checks": [c["id"] for c in checks if c["status"] == "fail"],
        "warned_checks": [c["id"] for c in checks if c["status"] == "warn"],
        "selected_checks": list(opts["checks"]),
        "checks": checks,
    }


def missing_report(node: str, reason: str) -> dict[str, Any]:
    """Report for a node whose facts could not be gathered (unreachable, a gathering task failed)."""
    return {"node": node, "node_role": None, "verdict": "fail", "ready": False, "generated_at": None,
            "counts": {"pass": 0, "fail": 1, "warn": 0, "skip": 0}, "failed_checks": ["facts"], "warned_checks": [],
            "selected_checks": [],
            "checks": [{"id": "facts", "title": "Facts gathered", "status": "fail", "evidence": reason,
                        "remedy": "make the node reachable and rerun the preflight"}]}


def fleet_summary(reports: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts and one line per node for the play recap and set_stats."""
    reports = sorted(reports, key=lambda r: r["node"])
    nodes = dict((r["node"], {"verdict": r["verdict"], "ready": r["ready"], "failed_checks": r["failed_checks"],
                              "warned_checks": r["warned_checks"]}) for r in reports)
    total = dict((v, sum(1 for r in reports if r["verdict"] == v)) for v in ("pass", "warn", "fail"))
    width = max([len(r["node"]) for r in reports] + [4])
    lines = ["%-*s  %-7s %s" % (width, "node", "verdict", "failing / warning checks")]
    for r in reports:
        detail = ", ".join(r["failed_checks"] + ["%s (warn)" % w for w in r["warned_checks"]]) or "-"
        lines.append("%-*s  %-7s %s" % (width, r["node"], r["verdict"].upper(), detail))
    lines.append("%d node(s): %d pass, %d warn, %d fail" % (len(reports), total["pass"], total["warn"], total["fail"]))
    return {"nodes": nodes, "total": len(reports), "passed": total["pass"], "warned": total["warn"], "failed": total["fail"],
            "ready": sorted(r["node"] for r in reports if r["ready"]),
            "not_ready": sorted(r["node"] for r in reports if not r["ready"]), "table": "\n".join(lines)}


def junit_xml(reports: Iterable[Mapping[str, Any]], suite_name: str = "node_preflight") -> str:
    """JUnit XML: one testsuite per node, one testcase per check (fail -> failure, skip -> skipped, warn -> system-out)."""
    reports = sorted(reports, key=lambda r: r["node"])
    root = ET.Element("testsuites", name=suite_name)
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    for rep in reports:
        checks = rep["checks"]
        suite = ET.SubElement(root, "testsuite", name="%s.%s" % (suite_name, rep["node"]), tests=str(len(checks)),
                              failures=str(sum(1 for c in checks if c["status"] == "fail")), errors="0",
                              skipped=str(sum(1 for c in checks if c["status"] == "skip")))
        if rep.get("generated_at"):
            suite.set("timestamp", str(rep["generated_at"]))
        for c in checks:
            case = ET.SubElement(suite, "testcase", classname="%s.%s" % (suite_name, rep["node"]), name=c["id"])
            totals["tests"] += 1
            if c["status"] == "fail":
                totals["failures"] += 1
                failure = ET.SubElement(case, "failure", message=c["evidence"], type="preflight")
                failure.text = "%s\nevidence: %s\nremedy: %s" % (c["title"], c["evidence"], c["remedy"])
            elif c["status"] == "skip":
                totals["skipped"] += 1
                ET.SubElement(case, "skipped", message=c["evidence"])
            else:
                out = ET.SubElement(case, "system-out")
                out.text = "%s: %s%s" % (c["status"].upper(), c["evidence"], ("\nremedy: %s" % c["remedy"]) if c["remedy"] else "")
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("errors", "0")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
