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
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from ansible_collections.gpuops.provision.plugins.module_utils import _apt_sources as S
from ansible_collections.gpuops.provision.plugins.module_utils import _driver_packages as P
from ansible_collections.gpuops.provision.plugins.module_utils import _versions as V
from ansible_collections.gpuops.provision.plugins.module_utils._driver_fleet import DriverInputError


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
    """Kernel-module flavour for a host's GPUs (_driver_packages.kernel_flavour); the branch is required."""
    if branch in (None, ""):
        raise DriverInputError("driver_flavour needs the driver branch")
    return P.kernel_flavour(requested, branch, gpus or [])


def package_plan(flavour: Any, distribution: str, os_family: str, major_version: Any, source: str, branch: Any,
                 driver_version: Any = None, persistence: bool = True) -> Any:
    """Package plan for one host (_driver_packages.package_plan); ``flavour`` may be the result of ``host_flavour``."""
    if isinstance(flavour, Mapping):
        flavour = flavour.get("flavour")
    return P.package_plan(distribution, os_family, major_version, source, flavour, branch, driver_version or None,
                          persistence)


def apt_sources(files: Any, uri: str, suites: Sequence[str], components: Sequence[str], signed_by: str = "",
                ignore: Optional[str] = None) -> Any:
    """deb822 sources for ``uri`` that agree with the host's Signed-By; ``files``: {path: text} or slurp results."""
    if isinstance(files, (list, tuple)):
        # slurp results: [{source, content (base64)}]
        files = {f["source"]: base64.b64decode(f["content"]).decode("utf-8", "replace") for f in files
                 if isinstance(f, Mapping) and f.get("content") is not None}
    if not isinstance(files, Mapping):
        raise DriverInputError("driver_apt_sources expects {path: text} or slurp results, got %s" % type(files).__name__)
    try:
        return S.agreeing_sources(files, uri, list(suites), list(components), signed_by, [ignore] if ignore else [])
    except S.SourcesError as exc:
        raise DriverInputError(str(exc)) from exc
