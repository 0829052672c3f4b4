# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA driver state of one host and of a fleet (pure: no I/O); the driver_* filters are thin wrappers over it.

``host_state`` reads one host's package facts and running kernel module version; ``fleet_drift`` compares hosts
(package facts, nvidia_driver facts, gpu_info results or plain versions) against a pin or the most common version
(the shared rule in ``_common/drift.py``), with vGPU managers compared among themselves and with their guests by branch;
``drift_table`` renders its result as text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Optional

from ansible_collections.gpuops.provision.plugins.module_utils._common import drift as D
from ansible_collections.gpuops.provision.plugins.module_utils._drivers import packages as P
from ansible_collections.gpuops.provision.plugins.module_utils._drivers import versions as V

STATE_LOADED = "loaded"
STATE_NOT_LOADED = "installed but not loaded"
STATE_REBOOT = "reboot pending"
STATE_MISSING = "not installed"


class DriverInputError(ValueError):
    """Input a driver filter cannot work with (wrong shape, bad pin or branch); the message says what and why."""


def _epoch(value: Any) -> Any:
    """An rpm epoch from package_facts; a package without one reads None, or the string 'None' (ansible-core's
    package_facts RPM._none turns rpm's '(none)' into 'None', as its python3-rpm version printed str(None))."""
    return None if value in ("None", "(none)") else value


def package_version(entry: Any) -> Optional[str]:
    """Version string out of one package_facts entry (apt: version; rpm: epoch/version/release)."""
    if isinstance(entry, str):
        return entry
    if not isinstance(entry, Mapping):
        return None
    version = entry.get("version")
    if not version:
        return None
    release = entry.get("release")
    epoch = _epoch(entry.get("epoch"))
    text = str(version)
    if release and entry.get("source") == "rpm":
        text = "%s-%s" % (text, release)
    if epoch not in (None, "", 0, "0") and ":" not in text:
        text = "%s:%s" % (epoch, text)
    return text


def installed_packages(packages: Any, names: Iterable[str]) -> dict[str, str]:
    """{name: version} for the wanted names present in package facts ({name: [entries]} or {name: version})."""
    found: dict[str, str] = {}
    for name in names:
        entries = packages.get(name) if isinstance(packages, Mapping) else None
        if entries is None:
            continue
        if isinstance(entries, (list, tuple)):
            versions = [x for x in (package_version(e) for e in entries) if x]
            if versions:
                found[name] = versions[0]
        else:
            version = package_version(entries)
            if version:
                found[name] = version
    return found


def all_installed(packages: Any) -> dict[str, str]:
    """{name: version} of every package in package facts ({name: [entries]} or {name: version})."""
    return installed_packages(packages, list(packages)) if isinstance(packages, Mapping) else {}


def driver_of(text: str) -> Optional[V.DriverVersion]:
    """Driver version of a package version (RPM ordering when it carries an .el release), None when it has none."""
    try:
        return V.parse_package_version(text, "rpm" if ".el" in text else "deb").driver
    except V.VersionError:
        return None


def host_state(packages: Any, names: Optional[Sequence[str]] = None, loaded_version: Any = None, pin: Optional[str] = None,
               scheme: str = "deb") -> dict[str, Any]:
    """One host's driver facts from package facts and the running kernel module version.

    ``packages``: ``ansible_facts.packages`` (or {name: version}); ``names``: the driver packages to look at (first
    present is the primary one); empty = every installed driver package by name (_drivers/packages.py patterns).
    ``loaded_version``: content of /sys/module/nvidia/version or None. The whole driver family counts: a host whose
    metapackage is on the pin while the packages that carry the module or libraries moved is not on the pin.
    """
    everything = all_installed(packages or {})
    wanted = list(names) if names else P.driver_packages_in(everything)
    found = {n: everything[n] for n in wanted if n in everything}
    primary = next((n for n in wanted if n in found), None)
    installed = found.get(primary) if primary else None
    loaded = str(loaded_version).strip() if loaded_version not in (None, "") else None
    driver = driver_of(installed) if installed else None
    # Every driver package installed (named or not) must carry the same driver version.
    driver_pkgs = {n: v for n, v in everything.items() if P.driver_package_rank(n) is not None}
    driver_pkgs.update(found)
    drivers = sorted({str(driver_of(x)) for x in driver_pkgs.values() if driver_of(x)})
    members = P.family_members(everything, str(driver)) if driver else {}
    off_driver = sorted(n for n, v in driver_pkgs.items() if driver and driver_of(v) and driver_of(v) != driver)
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
        package=primary, installed_version=installed, packages=dict(sorted(driver_pkgs.items())), family=members, off_driver=off_driver,
        driver_version=str(driver) if driver else None, branch=driver.branch if driver else None,
        loaded_version=loaded, module_loaded=bool(loaded), state=state, reboot_pending=state == STATE_REBOOT,
        # Packages of one host on different driver versions (nvidia-driver moved while cuda-drivers stayed) are drift.
        mixed=len(drivers) > 1,
        on_pin=on_pin,
        pin=pin or None,
    )


def installed_family(packages: Any, driver_version: Any) -> dict[str, str]:
    """{name: version} of the installed packages of one driver version ({} without a version)."""
    if driver_version in (None, ""):
        return {}
    return P.family_members(all_installed(packages or {}), str(V.driver_version_of(driver_version)))


def host_record(host: str, value: Any, fact: Optional[str], names: Sequence[str], scheme: str) -> dict[str, Any]:
    """Normalise one host's input to dict(host, version, loaded_version, state, ...)."""
    rec: dict[str, Any] = dict(host=host, version=None, driver_version=None, branch=None, loaded_version=None, state=STATE_MISSING,
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
            st = host_state(pkgs, names, value.get("loaded_version"), None, scheme)
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


def iter_hosts(data: Any, hosts: Optional[Sequence[str]]) -> Iterator[tuple[str, Any]]:
    """(host, facts) from {host: facts} (``hosts`` picks and orders; default all, sorted) or [{host, ...}]."""
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
                raise DriverInputError("list input needs dicts with a 'host' key, got %r" % (item,))
            host = item.get("host") or item.get("inventory_hostname") or item.get("name")
            if not host:
                raise DriverInputError("list input item without 'host': %r" % (dict(item),))
            if hosts is None or host in hosts:
                yield host, item
    else:
        raise DriverInputError("driver_drift expects a mapping of host to facts or a list of dicts, got %s" % type(data).__name__)


def newest_first(versions: Iterable[str], scheme: str) -> list[str]:
    """Versions newest first by package ordering; text ordering between versions that do not parse."""
    def cmp(a: str, b: str) -> int:
        try:
            return V.compare_versions(a, b, scheme)
        except V.VersionError:
            return (a > b) - (a < b)
    return sorted(versions, key=functools.cmp_to_key(cmp), reverse=True)


def _checked_pins(scheme: str, pin: Any, branch: Any, host_pin: Any) -> tuple[Optional[str], Optional[int], Optional[str]]:
    """(pin, branch, host_pin) normalised, or DriverInputError naming what is wrong."""
    if scheme not in ("deb", "rpm"):
        raise DriverInputError("scheme must be deb or rpm, got %r" % (scheme,))
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
        raise DriverInputError(str(exc)) from exc
    return pin, want_branch, host_pin


def _judge(members: list[dict[str, Any]], kind: str, kind_pin: Optional[str], ordered: list[str], want_branch: Optional[int],
           scheme: str) -> Optional[str]:
    """Set kind/on_target/direction/target/branch_ok on one kind of host; returns the target (pin or majority)."""
    for r in members:
        r["kind"] = kind
    target = kind_pin
    if not target:
        # Without a pin the most common version is the reference; ties go to the newest.
        groups, _missing = D.group_hosts((r["host"], r["version"]) for r in members if not r["error"])
        target = D.majority(groups, ordered)
    for rec in members:
        on = None
        if target and rec["version"] and not rec["error"]:
            on = V.matches_pin(rec["version"], target, scheme)
            if on and rec["packages"] and kind_pin:
                on = all(V.matches_pin(x, kind_pin, scheme) for x in rec["packages"].values() if driver_of(x))
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
    return target


def _vgpu_rows(pairs: Mapping[str, str], by_host: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per vGPU guest: its manager, both versions and branches, and whether the branches are compatible."""
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
    return vgpu


def fleet_drift(data: Any, pin: Any = None, branch: Any = None, hosts: Optional[Sequence[str]] = None, fact: Optional[str] = None,
                packages: Optional[Sequence[str]] = None, vgpu_pairs: Optional[Mapping[str, str]] = None, scheme: str = "deb",
                count_reboot_pending: bool = True, host_pin: Any = None) -> dict[str, Any]:
    """Fleet view of NVIDIA driver versions (the driver_drift filter; its fields are in driver_drift.yml)."""
    pin, want_branch, host_pin = _checked_pins(scheme, pin, branch, host_pin)
    names = list(packages) if packages else []
    records = [host_record(h, val, fact, names, scheme) for h, val in iter_hosts(data, hosts)]
    groups, missing = D.group_hosts((r["host"], r["version"]) for r in records)
    ordered = newest_first(list(groups), scheme)

    pairs = dict(vgpu_pairs or {})
    for r in records:
        if r["vgpu_host"] and r["host"] not in pairs:
            pairs[r["host"]] = r["vgpu_host"]
    # vGPU managers (hypervisor hosts) run their own driver line; they are compared among themselves
    # (against host_pin) and with their guests by branch, never against the guests' pin.
    managers = set(pairs.values()) | {r["host"] for r in records if r["role"] == "vgpu_host"}
    targets = {kind: _judge([r for r in records if (r["host"] in managers) == (kind == "vgpu_host")], kind, kind_pin, ordered,
                            want_branch, scheme)
               for kind, kind_pin in (("driver", pin), ("vgpu_host", host_pin))}

    errors = {r["host"]: r["error"] for r in records if r["error"]}
    off_target = [r["host"] for r in records if r["version"] and not r["error"] and r["on_target"] is False]
    off_branch = [r["host"] for r in records if r["branch_ok"] is False]
    mixed = [r["host"] for r in records if r["mixed"]]
    reboot = [r["host"] for r in records if r["reboot_pending"]]
    not_loaded = [r["host"] for r in records if r["state"] == STATE_NOT_LOADED]
    vgpu = _vgpu_rows(pairs, {r["host"]: r for r in records})
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
    result["table"] = drift_table(result)
    return result


def _cell(value: Any) -> str:
    return "-" if value in (None, "") else str(value)


def _status(drift: Mapping[str, Any], r: Mapping[str, Any]) -> str:
    """The STATUS column of one host row."""
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
    return "; ".join(status) or "ok"


def drift_table(drift: Any) -> str:
    """Render a fleet_drift result as a fixed-width text table."""
    if not isinstance(drift, Mapping) or "hosts" not in drift:
        raise DriverInputError("driver_drift_table expects the result of driver_drift")
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
        name = r["host"] + (" [vGPU host]" if r.get("kind") == "vgpu_host" else "")
        rows.append((name, _cell(r.get("version")), "R%s" % r["branch"] if r.get("branch") else "-",
                     _cell(r.get("loaded_version")), _cell(r.get("state")), _status(drift, r)))
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


# ---- dnf versionlock entries (roles/nvidia_driver/tasks/redhat_install.yml) ------------------------------------------

# `dnf versionlock list` prints name-epoch:version-release.arch; '!' starts an exclude entry. A driver version is
# NNN.NN or NNN.NN.NN.
_LOCK_ENTRY = re.compile(r"^([^!\s].*)-(\d+:\d{3}\.\d+(?:\.\d+)?-[^-\s]+)\.[^.\s]+$")
_DRIVER_EVR = re.compile(r"\d+:\d{3}\.\d+(\.\d+)?-")


def stale_locks(entries: Iterable[str], target_evr: str, hold: bool) -> list[str]:
    """The driver's entries of ``dnf versionlock list`` to delete before installing ``target_evr``.

    A lock is the driver's when its version is a driver version and its name is NVIDIA's lock glob (``*nvidia*``) or
    a package of the driver family (cuda-drivers); other software's locks stay. With ``hold`` only locks on another
    version than the target go (they would hide the new packages from dnf); without it every driver lock goes.
    """
    out = []
    for entry in entries:
        m = _LOCK_ENTRY.search(entry)
        if not m:
            continue
        name, evr = m.group(1), m.group(2)
        if "nvidia" not in name and not installed_family({name: evr}, evr):
            continue
        if not hold or V.select_version([evr], target_evr, "rpm") is None:
            out.append(entry)
    return out


def version_locks(packages: Any, driver_version: str) -> list[str]:
    """``name-epoch:version-release.*`` for every installed package of the driver ``driver_version`` (rpm package
    facts): the family's packages, and packages named *nvidia* at that driver version (NVIDIA's guide locks
    '*nvidia*<branch>*'; the role locks the exact version, the entries `dnf versionlock add` writes)."""
    family = installed_family(packages or {}, driver_version)
    locks: list[str] = []
    for name, entries in sorted((packages or {}).items()):
        for e in entries:
            if "version" not in e:
                continue
            evr = "%s:%s-%s" % (_epoch(e.get("epoch")) or 0, e["version"], e["release"])
            if name in family or ("nvidia" in name and _DRIVER_EVR.match(evr)
                                  and V.select_version([evr], driver_version, "rpm") is not None):
                lock = "%s-%s.*" % (name, evr)
                if lock not in locks:
                    locks.append(lock)
    return locks
