# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What to install for an NVIDIA driver request (pure: no I/O); the driver_* filters are thin wrappers over it.

Repository listings (``apt-cache madison``, ``dnf repoquery``) parsed into {package: [versions]}, a requested
version resolved to exact package versions, a request checked without raising, the kernel-module flavour and package
plan for a host, and deb822 sources that agree with the Signed-By a host already has.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from ansible_collections.gpuops.provision.plugins.module_utils._drivers import apt_sources as S
from ansible_collections.gpuops.provision.plugins.module_utils._drivers import packages as P
from ansible_collections.gpuops.provision.plugins.module_utils._drivers import versions as V
from ansible_collections.gpuops.provision.plugins.module_utils._drivers.fleet import DriverInputError


def validate(version: Any, branch: Any = None) -> dict[str, Any]:
    """dict(ok, errors, driver_version, branch) for a requested version and optional branch; never raises."""
    out: dict[str, Any] = dict(ok=False, errors=[], driver_version=None, branch=None)
    if version in (None, ""):
        out["errors"].append("no driver version given (expected e.g. 535.261.03 or a package version 535.261.03-1)")
        return out
    try:
        out.update(V.validate_version_branch(version, branch))
    except V.VersionError as exc:
        out["errors"].append(str(exc))
    out["ok"] = not out["errors"]
    return out


def repo_versions(text: Optional[str], fmt: str = "madison") -> dict[str, list[str]]:
    """{package: [versions]} from ``apt-cache madison`` or ``dnf repoquery --qf '%{name} %{epoch}:%{version}-%{release}'``."""
    found: dict[str, list[str]] = {}
    for line in (text or "").splitlines():
        if fmt == "madison":
            parts = [p.strip() for p in line.split("|")]
            if len(parts) < 3 or not parts[0] or not parts[1]:
                continue
            name, version = parts[0], parts[1]
        elif fmt == "repoquery":
            parts = line.split()
            if len(parts) != 2:
                continue
            name, version = parts
            if version.startswith("0:"):
                version = version[2:]
        else:
            raise DriverInputError("unknown repository listing format %r (madison or repoquery)" % (fmt,))
        versions = found.setdefault(name, [])
        if version not in versions:
            versions.append(version)
    return found


def resolve(available: Optional[Mapping[str, Sequence[str]]], packages: Optional[Sequence[str]], requested: Any,
            scheme: str = "deb") -> dict[str, Any]:
    """Exact package version per package for a requested driver/package version.

    Returns dict(versions={pkg: version}, specs=[pkg=version or pkg-version], missing=[pkg], offered={pkg: [...]}).
    """
    out: dict[str, Any] = dict(versions={}, specs=[], missing=[], offered={})
    for name in packages or []:
        offered = list((available or {}).get(name) or [])
        out["offered"][name] = offered
        chosen = V.select_version(offered, requested, scheme)
        if chosen is None:
            out["missing"].append(name)
            continue
        out["versions"][name] = chosen
        out["specs"].append(("%s=%s" if scheme == "deb" else "%s-%s") % (name, chosen))
    return out


def host_flavour(gpus: Any, requested: str = "auto", branch: Any = None) -> Any:
    """Kernel-module flavour for a host's GPUs (_drivers.packages.kernel_flavour); the branch is required."""
    if branch in (None, ""):
        raise DriverInputError("driver_flavour needs the driver branch")
    return P.kernel_flavour(requested, branch, gpus or [])


def package_plan(flavour: Any, distribution: str, os_family: str, major_version: Any, source: str, branch: Any,
                 driver_version: Any = None, persistence: bool = True, kernel_modules: str = "dkms",
                 kernel_flavours: Optional[Sequence[str]] = None) -> Any:
    """Package plan for one host (_drivers.packages.package_plan); ``flavour`` may be the result of ``host_flavour``."""
    if isinstance(flavour, Mapping):
        flavour = flavour.get("flavour")
    return P.package_plan(distribution, os_family, major_version, source, flavour, branch, driver_version or None,
                          persistence, kernel_modules or "dkms", kernel_flavours or ())


def _source_files(files: Any, what: str) -> Mapping[str, str]:
    if isinstance(files, (list, tuple)):
        # slurp results: [{source, content (base64)}]
        files = {f["source"]: base64.b64decode(f["content"]).decode("utf-8", "replace") for f in files
                 if isinstance(f, Mapping) and f.get("content") is not None}
    if not isinstance(files, Mapping):
        raise DriverInputError("%s expects {path: text} or slurp results, got %s" % (what, type(files).__name__))
    return files


def apt_sources(files: Any, uri: str, suites: Sequence[str], components: Sequence[str], signed_by: str = "",
                ignore: Optional[str] = None) -> Any:
    """deb822 sources for ``uri`` that agree with the host's Signed-By; ``files``: {path: text} or slurp results."""
    files = _source_files(files, "driver_apt_sources")
    try:
        return S.agreeing_sources(files, uri, list(suites), list(components), signed_by, [ignore] if ignore else [])
    except S.SourcesError as exc:
        raise DriverInputError(str(exc)) from exc


def apt_source_existing(files: Any, uri: str, suite: str = "/", ignore: Optional[Sequence[str]] = None) -> Any:
    """The host's own entry for ``uri`` (NVIDIA's flat repository: suite ``/``) as dict(path, signed_by), or None.

    The role then writes no source and no keyring of its own for it: apt refuses two entries of one source with
    different Signed-By values. ``files``: {path: text} or slurp results; ``ignore``: our own files.
    """
    files = _source_files(files, "driver_apt_source_existing")
    try:
        return S.existing_source(files, uri, suite, list(ignore or []))
    except S.SourcesError as exc:
        raise DriverInputError(str(exc)) from exc


# --- what an install would do, before it is done (issue 37 points 2 and 9) --------------------------------------------
# ``apt-get -s install`` prints what apt would do, one line per action (apt-pkg/algorithms.cc, pkgSimulate::Install,
# ::Remove, ::Configure): "Inst <pkg> [<installed version>] (<candidate version> <release> [<arch>])",
# "Remv <pkg> [<installed version>]", "Conf <pkg> (<version> ...)". A package name may carry ":<arch>".
_SIM_RE = re.compile(r"^(?P<action>Inst|Remv|Purg|Conf) (?P<name>[^\s\[(:]+)(?::\S+)?(?: \[(?P<old>[^\]]+)\])?"
                     r"(?: \((?P<version>\S+)[^)]*\))?")
# The NVIDIA kernel-module packages that build with DKMS: Debian nvidia-kernel-dkms / nvidia-open-kernel-dkms /
# nvidia-tesla-<b>-kernel-dkms, NVIDIA's nvidia-kernel-dkms / nvidia-kernel-open-dkms (CUDA repository), Ubuntu's
# nvidia-dkms-<b>[-server][-open], the RHEL family's kmod-nvidia-latest-dkms / kmod-nvidia-open-dkms. Ubuntu's
# precompiled linux-modules-nvidia-* and nvidia-headless-no-dkms-* build nothing.
_DKMS_PACKAGE_RE = re.compile(r"^(?!.*-no-dkms)(?:kmod-)?nvidia-(?:.*-)?dkms(?:-.*)?\Z")


def parse_apt_simulation(text: Optional[str]) -> list[dict[str, Optional[str]]]:
    """``apt-get -s install`` output -> list of dict(action, name, version, old); other lines are skipped."""
    out: list[dict[str, Optional[str]]] = []
    for line in (text or "").splitlines():
        m = _SIM_RE.match(line.strip())
        if m:
            out.append(dict(action=m.group("action"), name=m.group("name"), version=m.group("version"), old=m.group("old")))
    return out


def is_dkms_package(name: object) -> bool:
    """An NVIDIA kernel-module package that DKMS builds on the host (not the dkms tool itself)."""
    return bool(_DKMS_PACKAGE_RE.match(str(name)))


def install_check(simulated: Any, installed: Optional[Mapping[str, Any]], requested: Any,
                  requested_packages: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """What the simulated install means: dict(ok, reason, builds_module, dkms_packages, installs, removes, off_branch).

    ``simulated``: ``parse_apt_simulation`` entries or its text; ``installed``: {name: version} of the host's
    packages (package_facts); ``requested``: the driver or package version asked for; ``requested_packages``: the
    names asked for, named in the message. ``builds_module``: an NVIDIA DKMS package is installed now or by this
    install and stays. ``off_branch``: driver packages the install would put on another branch than the request's
    (a transitional package such as Ubuntu noble's nvidia-headless-565-server, which depends on the 580 branch);
    any makes ``ok`` False with a reason naming both.
    """
    entries = simulated if isinstance(simulated, (list, tuple)) else parse_apt_simulation(simulated)
    want = V.as_branch(requested)
    installs = {str(e["name"]): str(e["version"]) for e in entries if e.get("action") == "Inst" and e.get("version")}
    removes = sorted({str(e["name"]) for e in entries if e.get("action") in ("Remv", "Purg")})
    kept = [n for n in (installed or {}) if n not in removes]
    dkms = sorted({n for n in list(installs) + kept if is_dkms_package(n)})
    off = []
    for name, version in sorted(installs.items()):
        if not P.is_family_package(name):
            continue
        try:
            branch = V.driver_version_of(version).branch
        except V.VersionError:
            continue
        if branch != want:
            off.append("%s %s (R%d)" % (name, version, branch))
    out = dict(ok=not off, reason="", builds_module=bool(dkms), dkms_packages=dkms, installs=installs, removes=removes,
               off_branch=off)
    if off:
        asked = ", ".join(requested_packages or []) or "the driver packages"
        out["reason"] = ("%s for R%d would install packages of another branch: %s. A package of the requested branch "
                         "that depends on another one is a transitional package; ask for a version of R%d that the "
                         "repositories still offer, or for the other branch" % (asked, want, "; ".join(off), want))
    return out


# --- the NVML binding on the host (issue 37 point 4) ------------------------------------------------------------------
# gpu_info, mig_geometry, nvidia_license_info and the preflight reads import pynvml (nvidia-ml-py) on the host. The
# distribution's package is used where it exists and is new enough: Debian's python3-pynvml (src:python-pynvml,
# contrib; bookworm 11.525.112, trixie 12.550.89), Ubuntu's in universe. It depends on
# "libnvidia-ml1 | ... | libnvidia-ml.so.1": where the driver installed carries no such package (a vGPU guest driver
# from a package file), apt would pull the distribution's NVML library beside the driver's, so it is not used then.
NVML_PACKAGE = "python3-pynvml"
NVML_METHODS = ("auto", "distribution", "virtualenv")


def apt_policy(text: Optional[str]) -> dict[str, Optional[str]]:
    """``apt-cache policy <pkg>`` -> dict(installed, candidate), None for '(none)' or a package apt does not know."""
    out: dict[str, Optional[str]] = dict(installed=None, candidate=None)
    for line in (text or "").splitlines():
        key, sep, value = line.strip().partition(":")
        if sep and key in ("Installed", "Candidate"):
            value = value.strip()
            out[key.lower()] = None if value in ("", "(none)") else value
    return out


def nvml_binding_plan(policy: Optional[str], simulation: Optional[str], minimum: Any, method: str = "auto") -> dict[str, Any]:
    """How nvidia-ml-py comes onto the host: dict(method, reason, package_version).

    ``policy``: ``apt-cache policy python3-pynvml`` output (None where there is no apt); ``simulation``: ``apt-get -s
    install python3-pynvml`` output; ``minimum``: the lowest nvidia-ml-py version the collection supports (12.535);
    ``method``: auto, distribution or virtualenv (the collection's virtualenv with the pinned wheel).
    """
    if method not in NVML_METHODS:
        raise DriverInputError("nvml method must be auto, distribution or virtualenv, not %r" % (method,))
    pol = apt_policy(policy)
    version = pol["installed"] or pol["candidate"]
    out: dict[str, Any] = dict(method=method, reason="requested", package_version=version)
    if method != "auto":
        return out
    if version is None:
        return dict(out, method="virtualenv", reason="the distribution has no %s" % NVML_PACKAGE)
    if V.compare_debian(version, str(minimum)) < 0:
        return dict(out, method="virtualenv", reason="the distribution's %s %s is older than %s" % (
            NVML_PACKAGE, version, minimum))
    pulled = [e["name"] for e in parse_apt_simulation(simulation)
              if e["action"] == "Inst" and e["name"] != NVML_PACKAGE and P.is_family_package(e["name"])]
    if pulled:
        return dict(out, method="virtualenv", reason="installing %s would also install %s beside the driver" % (
            NVML_PACKAGE, ", ".join(sorted(str(p) for p in pulled))))
    return dict(out, method="distribution", reason="the distribution's %s %s" % (NVML_PACKAGE, version))


def fabric_manager_plan(vendor_files: Any, class_files: Any, branch: Any, setting: Any = "auto") -> dict[str, Any]:
    """dict(needed, nvswitches, packages, service, reason): Fabric Manager for an NVSwitch system (auto), or as
    ``setting`` (true/false) says. ``vendor_files`` / ``class_files``: ``find`` results or paths (_drivers/packages.py)."""
    def paths(found: Any) -> list[str]:
        if isinstance(found, Mapping):
            found = found.get("files") or []
        return [str(f.get("path") if isinstance(f, Mapping) else f) for f in found or []]
    switches = P.nvswitch_addresses(paths(vendor_files), paths(class_files))
    text = str(setting).strip().lower()
    if text not in ("auto", "true", "false", "yes", "no"):
        raise DriverInputError("nvidia_driver_fabric_manager must be auto, true or false, not %r" % (setting,))
    needed = bool(switches) if text == "auto" else text in ("true", "yes")
    reason = ("NVSwitches %s" % ", ".join(switches) if switches else "no NVSwitch") if text == "auto" else "requested"
    return dict(needed=needed, nvswitches=switches, reason=reason, service=P.FABRIC_MANAGER_SERVICE,
                packages=P.fabric_manager_packages(branch) if needed else [])
