# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side NVIDIA driver filters: per-host driver state, fleet drift, drift table, vGPU branch compatibility.

Documentation of each filter is in the ``<filter>.yml`` file next to this one.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.module_utils import _apt_sources as S
from ansible_collections.gpuops.provision.plugins.module_utils import _driver_packages as P
from ansible_collections.gpuops.provision.plugins.module_utils import _versions as V

STATE_LOADED = "loaded"
STATE_NOT_LOADED = "installed but not loaded"
STATE_REBOOT = "reboot pending"
STATE_MISSING = "not installed"


def _error(msg):
    raise AnsibleFilterError("gpuops.provision driver filter: %s" % msg)


def _pkg_version(entry):
    """Version string out of one package_facts entry (apt: version; rpm: epoch/version/release)."""
    if isinstance(entry, str):
        return entry
    if not isinstance(entry, Mapping):
        return None
    version = entry.get("version")
    if not version:
        return None
    release = entry.get("release")
    epoch = entry.get("epoch")
    text = str(version)
    if release and entry.get("source") == "rpm":
        text = "%s-%s" % (text, release)
    if epoch not in (None, "", 0, "0") and ":" not in text:
        text = "%s:%s" % (epoch, text)
    return text


def _installed_packages(packages, names):
    """{name: version} for the wanted names present in package facts ({name: [entries]} or {name: version})."""
    found = {}
    for name in names:
        entries = packages.get(name) if isinstance(packages, Mapping) else None
        if entries is None:
            continue
        if isinstance(entries, (list, tuple)):
            versions = [_pkg_version(e) for e in entries]
            versions = [x for x in versions if x]
            if versions:
                found[name] = versions[0]
        else:
            version = _pkg_version(entries)
            if version:
                found[name] = version
    return found


def _driver_of(text):
    try:
        return V.parse_package_version(text, "rpm" if ".el" in text else "deb").driver
    except V.VersionError:
        return None


def _all_installed(packages):
    """{name: version} of every package in package facts ({name: [entries]} or {name: version})."""
    return _installed_packages(packages, list(packages)) if isinstance(packages, Mapping) else {}


def driver_host_state(packages, names=None, loaded_version=None, pin=None, scheme="deb"):
    """One host's driver facts from package facts and the running kernel module version.

    ``packages``: ``ansible_facts.packages`` (or {name: version}); ``names``: the driver packages to look at (first
    present is the primary one); empty = every installed driver package by name (_driver_packages patterns).
    ``loaded_version``: content of /sys/module/nvidia/version or None. The whole driver family counts: a host whose
    metapackage is on the pin while the packages that carry the module or libraries moved is not on the pin.
    """
    everything = _all_installed(packages or {})
    wanted = list(names) if names else P.driver_packages_in(everything)
    found = {n: everything[n] for n in wanted if n in everything}
    primary = next((n for n in wanted if n in found), None)
    installed = found.get(primary) if primary else None
    loaded = str(loaded_version).strip() if loaded_version not in (None, "") else None
    driver = _driver_of(installed) if installed else None
    # Every driver package installed (named or not) must carry the same driver version.
    driver_pkgs = {n: v for n, v in everything.items() if P.driver_package_rank(n) is not None}
    driver_pkgs.update(found)
    drivers = sorted({str(_driver_of(x)) for x in driver_pkgs.values() if _driver_of(x)})
    family = P.family_members(everything, str(driver)) if driver else {}
    off_driver = sorted(n for n, v in driver_pkgs.items() if driver and _driver_of(v) and _driver_of(v) != driver)
    if not installed:
        state = STATE_LOADED if loaded else STATE_MISSING
    elif not loaded:
        state = STATE_NOT_LOADED
    elif driver is not None and loaded == str(driver):
        state = STATE_LOADED
    else:
        state = STATE_REBOOT
    on_pin = None
    if pin:
        on_pin = bool(found) and not off_driver and all(V.matches_pin(x, pin, scheme) for x in found.values())
    return dict(
        package=primary, installed_version=installed, packages=dict(sorted(driver_pkgs.items())), family=family, off_driver=off_driver,
        driver_version=str(driver) if driver else None, branch=driver.branch if driver else None,
        loaded_version=loaded, module_loaded=bool(loaded), state=state, reboot_pending=state == STATE_REBOOT,
        # Packages of one host on different driver versions (nvidia-driver moved while cuda-drivers stayed) are drift.
        mixed=len(drivers) > 1,
        on_pin=on_pin,
        pin=pin or None,
    )


def _record(host, value, fact, names, scheme):
    """Normalise one host's input to dict(host, version, loaded_version, state, ...)."""
    rec = dict(host=host, version=None, driver_version=None, branch=None, loaded_version=None, state=STATE_MISSING,
               reboot_pending=False, mixed=False, source=None, error=None, vgpu_host=None, role=None, packages={})
    if isinstance(value, Mapping) and fact and value.get(fact) is not None:
        value = value.get(fact)
    elif isinstance(value, Mapping) and value.get("nvidia_driver_facts") is not None:
        value = value.get("nvidia_driver_facts")
    if value is None:
        return rec
    if isinstance(value, str):
        rec.update(version=value.strip() or None, source="version", state=STATE_NOT_LOADED if value.strip() else STATE_MISSING)
    elif isinstance(value, Mapping):
        pkgs = value.get("packages")
        if pkgs is None and isinstance(value.get("ansible_facts"), Mapping):
            pkgs = value["ansible_facts"].get("packages")
        if "installed_version" in value:
            rec.update(source="nvidia_driver", version=value.get("installed_version"), packages=dict(value.get("packages") or {}),
                       loaded_version=value.get("loaded_version"), state=value.get("state") or STATE_MISSING,
                       reboot_pending=bool(value.get("reboot_pending")), mixed=bool(value.get("mixed")))
        elif isinstance(value.get("nvml"), Mapping):
            # gpu_info result: the running driver, or why NVML could not report one
            nvml = value["nvml"]
            if nvml.get("available") and nvml.get("driver_version"):
                rec.update(source="gpu_info", version=str(nvml["driver_version"]),
                           loaded_version=str(nvml["driver_version"]), state=STATE_LOADED)
            else:
                rec.update(source="gpu_info", error="NVML: %s" % (nvml.get("reason") or "not available"))
        elif value.get("driver_version"):
            # gpu_info / NVML style: the driver that is running
            rec.update(source="driver_version", version=str(value["driver_version"]),
                       loaded_version=str(value["driver_version"]), state=STATE_LOADED)
        elif isinstance(pkgs, Mapping):
            st = driver_host_state(pkgs, names, value.get("loaded_version"), None, scheme)
            rec.update(source="package_facts", version=st["installed_version"], packages=st["packages"],
                       loaded_version=st["loaded_version"], state=st["state"], reboot_pending=st["reboot_pending"],
                       mixed=st["mixed"])
        elif value.get("version"):
            rec.update(source="version", version=str(value["version"]), state=value.get("state") or STATE_NOT_LOADED)
        rec.update(vgpu_host=value.get("vgpu_host"), role=value.get("role"))
    else:
        rec["error"] = "unsupported driver facts of type %s" % type(value).__name__
        return rec
    if rec["version"]:
        try:
            driver = V.driver_version_of(rec["version"])
            rec.update(driver_version=str(driver), branch=driver.branch)
        except V.VersionError as exc:
            rec["error"] = str(exc)
    return rec


def _iter_hosts(data, hosts):
    if isinstance(data, Mapping):
        keys = list(hosts) if hosts is not None else sorted(data.keys())
        for host in keys:
            try:
                yield host, data[host]
            except KeyError:
                yield host, None
    elif isinstance(data, (list, tuple)):
        for item in data:
            if not isinstance(item, Mapping):
                _error("list input needs dicts with a 'host' key, got %r" % (item,))
            host = item.get("host") or item.get("inventory_hostname") or item.get("name")
            if not host:
                _error("list input item without 'host': %r" % (dict(item),))
            if hosts is None or host in hosts:
                yield host, item
    else:
        _error("driver_drift expects a mapping of host to facts or a list of dicts, got %s" % type(data).__name__)


def _sort_versions(versions, scheme):
    import functools

    def cmp(a, b):
        try:
            return V.compare_versions(a, b, scheme)
        except V.VersionError:
            return (a > b) - (a < b)
    return sorted(versions, key=functools.cmp_to_key(cmp), reverse=True)


def driver_drift(data, pin=None, branch=None, hosts=None, fact=None, packages=None, vgpu_pairs=None, scheme="deb",
                 count_reboot_pending=True, host_pin=None):
    """Fleet view of NVIDIA driver versions. See driver_drift.yml."""
    if scheme not in ("deb", "rpm"):
        _error("scheme must be deb or rpm, got %r" % (scheme,))
    pin = str(pin).strip() if pin not in (None, "") else None
    host_pin = str(host_pin).strip() if host_pin not in (None, "") else None
    want_branch = None
    try:
        if branch not in (None, ""):
            want_branch = V.parse_branch(branch)
        if pin:
            V.validate_version_branch(pin, want_branch)
        if host_pin:
            V.driver_version_of(host_pin)
    except V.VersionError as exc:
        _error(str(exc))
    names = list(packages) if packages else []
    records = [_record(h, val, fact, names, scheme) for h, val in _iter_hosts(data, hosts)]

    groups = {}
    for rec in records:
        if rec["version"]:
            groups.setdefault(rec["version"], []).append(rec["host"])
    ordered = _sort_versions(list(groups), scheme)

    by_host = {r["host"]: r for r in records}
    pairs = dict(vgpu_pairs or {})
    for r in records:
        if r["vgpu_host"] and r["host"] not in pairs:
            pairs[r["host"]] = r["vgpu_host"]
    # vGPU managers (hypervisor hosts) run their own driver line; they are compared among themselves
    # (against host_pin) and with their guests by branch, never against the guests' pin.
    managers = set(pairs.values()) | {r["host"] for r in records if r["role"] == "vgpu_host"}
    targets = {}
    for kind, kind_pin in (("driver", pin), ("vgpu_host", host_pin)):
        members = [r for r in records if (r["host"] in managers) == (kind == "vgpu_host")]
        for r in members:
            r["kind"] = kind
        target = kind_pin
        counts = {}
        for r in members:
            if r["version"] and not r["error"]:
                counts[r["version"]] = counts.get(r["version"], 0) + 1
        if not target and counts:
            # Without a pin the most common version is the reference; ties go to the newest.
            target = max((ver for ver in ordered if ver in counts), key=lambda ver: (counts[ver], -ordered.index(ver)))
        targets[kind] = target
        for rec in members:
            on = None
            if target and rec["version"] and not rec["error"]:
                on = V.matches_pin(rec["version"], target, scheme)
                if on and rec["packages"] and kind_pin:
                    on = all(V.matches_pin(x, kind_pin, scheme) for x in rec["packages"].values() if _driver_of(x))
                if not on:
                    if V.matches_pin(rec["version"], target, scheme):
                        rec["direction"] = "mixed"
                    else:
                        c = V.compare_versions(rec["version"], target, scheme)
                        rec["direction"] = "older" if c < 0 else "newer"
            rec["on_target"] = on
            rec["target"] = target
            rec["branch_ok"] = None
            if want_branch is not None and rec["branch"] is not None and kind == "driver":
                rec["branch_ok"] = rec["branch"] == want_branch

    missing = [r["host"] for r in records if not r["version"]]
    errors = {r["host"]: r["error"] for r in records if r["error"]}
    off_target = [r["host"] for r in records if r["version"] and not r["error"] and r["on_target"] is False]
    off_branch = [r["host"] for r in records if r["branch_ok"] is False]
    mixed = [r["host"] for r in records if r["mixed"]]
    reboot = [r["host"] for r in records if r["reboot_pending"]]
    not_loaded = [r["host"] for r in records if r["state"] == STATE_NOT_LOADED]

    vgpu = []
    for guest in sorted(pairs):
        host = pairs[guest]
        g, h = by_host.get(guest), by_host.get(host)
        row = dict(guest=guest, host=host, guest_version=g and g["version"], host_version=h and h["version"])
        if not g or not h or g["branch"] is None or h["branch"] is None:
            row.update(compatible=False, reason="no driver version known for %s" % (host if not h or h["branch"] is None else guest),
                       host_branch=h and h["branch"], guest_branch=g and g["branch"])
        else:
            row.update(V.vgpu_compatibility(h["branch"], g["branch"]))
        vgpu.append(row)
    vgpu_bad = [r["guest"] for r in vgpu if not r["compatible"]]

    consistent = not (missing or errors or off_target or off_branch or mixed or vgpu_bad
                      or (count_reboot_pending and reboot))
    result = dict(
        consistent=consistent, drift=not consistent, pin=pin, host_pin=host_pin, branch=want_branch,
        target=targets["driver"], host_target=targets["vgpu_host"],
        hosts=records, host_count=len(records),
        groups=[dict(version=ver, count=len(groups[ver]), hosts=sorted(groups[ver]),
                     branch=next(r["branch"] for r in records if r["version"] == ver)) for ver in ordered],
        versions={ver: sorted(groups[ver]) for ver in ordered},
        off_pin=off_target, off_branch=off_branch, missing=missing, errors=errors, mixed=mixed,
        reboot_pending=reboot, not_loaded=not_loaded, vgpu=vgpu, vgpu_incompatible=vgpu_bad,
    )
    result["table"] = driver_drift_table(result)
    return result


def _cell(value):
    return "-" if value in (None, "") else str(value)


def driver_drift_table(drift):
    """Render a driver_drift result as a fixed-width text table."""
    if not isinstance(drift, Mapping) or "hosts" not in drift:
        _error("driver_drift_table expects the result of driver_drift")
    recs = drift["hosts"]
    n_versions = len(drift.get("groups") or [])
    head = "NVIDIA driver fleet: %s - %d host(s), %d version(s)" % (
        "CONSISTENT" if drift.get("consistent") else "DRIFT", len(recs), n_versions)
    if drift.get("pin"):
        head += ", pin %s" % drift["pin"]
    elif drift.get("target"):
        head += ", reference %s (most common)" % drift["target"]
    if drift.get("branch") is not None:
        head += ", branch R%s" % drift["branch"]
    if drift.get("host_pin"):
        head += ", vGPU host pin %s" % drift["host_pin"]
    elif drift.get("host_target"):
        head += ", vGPU host reference %s" % drift["host_target"]
    rows = [("HOST", "INSTALLED", "BRANCH", "LOADED", "STATE", "STATUS")]
    for r in recs:
        status = []
        if r.get("error"):
            status.append("ERROR: %s" % r["error"])
        elif not r.get("version"):
            status.append("NO DRIVER")
        elif r.get("on_target") is False:
            pinned = drift.get("host_pin" if r.get("kind") == "vgpu_host" else "pin")
            status.append("OFF %s (%s)" % ("PIN" if pinned else "REFERENCE", r.get("direction", "differs")))
        if r.get("branch_ok") is False:
            status.append("WRONG BRANCH")
        if r.get("mixed"):
            status.append("MIXED PACKAGES %s" % ", ".join("%s=%s" % kv for kv in sorted((r.get("packages") or {}).items())))
        if r.get("reboot_pending"):
            status.append("REBOOT PENDING")
        name = r["host"] + (" [vGPU host]" if r.get("kind") == "vgpu_host" else "")
        rows.append((name, _cell(r.get("version")), "R%s" % r["branch"] if r.get("branch") else "-",
                     _cell(r.get("loaded_version")), _cell(r.get("state")), "; ".join(status) or "ok"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = [head]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1])
    if drift.get("groups"):
        groups = ["%s x%d (%s)" % (g["version"], g["count"], ", ".join(g["hosts"])) for g in drift["groups"]]
        lines.append("versions: " + "; ".join(groups))
    for v in drift.get("vgpu") or []:
        lines.append("vGPU %s (R%s) on host %s (R%s): %s - %s" % (
            v["guest"], _cell(v.get("guest_branch")), v["host"], _cell(v.get("host_branch")),
            "compatible" if v["compatible"] else "INCOMPATIBLE", v["reason"]))
    return "\n".join(lines)


def _wrap(func):
    def inner(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (V.VersionError, P.PackageError) as exc:
            _error(str(exc))
    inner.__name__ = func.__name__
    inner.__doc__ = func.__doc__
    return inner


def driver_flavour(gpus, requested="auto", branch=None):
    """Kernel-module flavour for a host's GPUs. See driver_flavour.yml."""
    if branch in (None, ""):
        _error("driver_flavour needs the driver branch")
    return P.kernel_flavour(requested, branch, gpus or [])


def driver_package_plan(flavour, distribution, os_family, major_version, source, branch, driver_version=None,
                        persistence=True):
    """Packages, pinning packages, module stream and version locks for one host. See driver_package_plan.yml."""
    if isinstance(flavour, Mapping):
        flavour = flavour.get("flavour")
    return P.package_plan(distribution, os_family, major_version, source, flavour, branch, driver_version or None,
                          persistence)


def driver_family(packages, driver_version):
    """{name: version} of the installed packages of one driver version. See driver_family.yml."""
    if driver_version in (None, ""):
        return {}
    return P.family_members(_all_installed(packages or {}), str(V.driver_version_of(driver_version)))


def driver_apt_pin(driver_version):
    """apt 'Pin: version' value for every revision of a driver version. See driver_apt_pin.yml."""
    return P.apt_version_pin(str(V.driver_version_of(driver_version)))


def driver_apt_sources(files, uri, suites, components, signed_by="", ignore=None):
    """deb822 sources for ``uri`` that agree with the host's Signed-By. See driver_apt_sources.yml."""
    if isinstance(files, (list, tuple)):
        # slurp results: [{source, content (base64)}]
        import base64
        files = {f["source"]: base64.b64decode(f["content"]).decode("utf-8", "replace") for f in files
                 if isinstance(f, Mapping) and f.get("content") is not None}
    if not isinstance(files, Mapping):
        _error("driver_apt_sources expects {path: text} or slurp results, got %s" % type(files).__name__)
    try:
        return S.agreeing_sources(files, uri, list(suites), list(components), signed_by, [ignore] if ignore else [])
    except S.SourcesError as exc:
        _error(str(exc))


def driver_package_file(path, driver_version):
    """Name and version of a driver package file, checked against the requested driver. See driver_package_file.yml."""
    return P.package_file_identity(path, driver_version)


def driver_branch(version):
    """Branch number of a driver/package version or branch string."""
    return V._as_branch(version)  # pylint: disable=protected-access


def driver_version_compare(a, b, scheme="deb"):
    return V.compare_versions(a, b, scheme)


def driver_version_select(available, requested, scheme="deb"):
    return V.select_version(available, requested, scheme)


def driver_vgpu_compat(host, guest):
    return V.vgpu_compatibility(host, guest)


def driver_validate(version, branch=None):
    """dict(ok, errors, driver_version, branch) for a requested version and optional branch; never raises."""
    out = dict(ok=False, errors=[], driver_version=None, branch=None)
    if version in (None, ""):
        out["errors"].append("no driver version given (expected e.g. 535.261.03 or a package version 535.261.03-1)")
        return out
    try:
        out.update(V.validate_version_branch(version, branch))
    except V.VersionError as exc:
        out["errors"].append(str(exc))
    out["ok"] = not out["errors"]
    return out


def driver_repo_versions(text, fmt="madison"):
    """{package: [versions]} from ``apt-cache madison`` or ``dnf repoquery --qf '%{name} %{epoch}:%{version}-%{release}'``."""
    found = {}
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
            _error("unknown repository listing format %r (madison or repoquery)" % (fmt,))
        versions = found.setdefault(name, [])
        if version not in versions:
            versions.append(version)
    return found


def driver_resolve(available, packages, requested, scheme="deb"):
    """Exact package version per package for a requested driver/package version.

    Returns dict(versions={pkg: version}, specs=[pkg=version or pkg-version], missing=[pkg], offered={pkg: [...]}).
    """
    out = dict(versions={}, specs=[], missing=[], offered={})
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


class FilterModule:
    """gpuops.provision driver filters."""

    def filters(self):
        return {
            "driver_drift": driver_drift,
            "driver_drift_table": driver_drift_table,
            "driver_host_state": _wrap(driver_host_state),
            "driver_branch": _wrap(driver_branch),
            "driver_version_compare": _wrap(driver_version_compare),
            "driver_version_select": _wrap(driver_version_select),
            "driver_vgpu_compat": _wrap(driver_vgpu_compat),
            "driver_validate": driver_validate,
            "driver_repo_versions": driver_repo_versions,
            "driver_resolve": _wrap(driver_resolve),
            "driver_flavour": _wrap(driver_flavour),
            "driver_package_plan": _wrap(driver_package_plan),
            "driver_family": _wrap(driver_family),
            "driver_apt_pin": _wrap(driver_apt_pin),
            "driver_apt_sources": driver_apt_sources,
            "driver_package_file": _wrap(driver_package_file),
        }
