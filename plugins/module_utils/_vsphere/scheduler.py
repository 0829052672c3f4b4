# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vGPU scheduler policy of ESXi hosts: the ``nvidia`` kernel module's option string (pure: no I/O).

Everything that decides, over the host rows ``_vsphere.api.Session.hosts`` returns, the option string each host has
configured and the task's parameters: which hosts are skipped or refused, the spec of each host, the option string to
write, the warnings, the verification and the per-host results. ``_vsphere.scheduler_apply.run`` reads the hosts and
their option strings, writes what :func:`plan` says, in its order, and returns what :func:`results` builds.

Sources:
  - NVIDIA vGPU software user guide, "Changing Scheduling Behavior for Time-Sliced vGPUs" (VMware vSphere):
    ``esxcli system module parameters set -m nvidia -p "NVreg_RegistryDwords=RmPVMRL=value"`` and a host reboot;
    the double quotes are the shell's, so the module's option string is ``NVreg_RegistryDwords=RmPVMRL=value``.
  - vSphere Web Services API, HostKernelModuleSystem: QueryConfiguredModuleOptionString ("Note that this is not
    necessarily the option string currently in use by the kernel module"), UpdateModuleOptionString, NotFound "if
    the kernel module does not exist on the host"; privilege Host.Config.Settings (pyVmomi _typeinfo_vim.py).
    KernelModuleInfo.optionString is the configured string as well: the API offers no way to read what a loaded
    module runs with (on the host: nvidia-smi and the vmkernel log). Verification after a reboot therefore checks
    the configured string and that the host has no reboot pending (HostListSummary.rebootRequired).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Optional

from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import vgpu
from ansible_collections.gpuops.provision.plugins.module_utils._gpu import vgpu_scheduler as vs

MODULE = "nvidia"
SPEC_OPTIONS = vs.SPEC_KEYS
_QUOTED_DWORDS = re.compile(r'^(%s)="([^"\s]*)"$' % re.escape(vs.REGISTRY_DWORDS))

# A host as _vsphere.api.Session.hosts returns it: property path -> value, plus name, moid and obj.
Row = Mapping[str, Any]
Spec = dict[str, Any]


class HostPlan(NamedTuple):
    """One host the task sets or verifies: its row, its normalized spec and :func:`plan_host`'s plan."""
    row: Row
    spec: Spec
    plan: dict[str, Any]


class Plan(NamedTuple):
    """What a run does: the hosts it sets or verifies (in host order), the results of the hosts it skips, its
    warnings, and the (host row, option string) writes, in the order they are made."""
    hosts: list[HostPlan]
    skipped: list[dict[str, Any]]
    warnings: list[str]
    writes: list[tuple[Row, str]]


def host_specs(params: Mapping[str, Any], host_names: Sequence[str]) -> dict[str, tuple[Spec, bool]]:
    """{host: (normalized spec, production flag)} for the hosts of a run; every spec is validated here.

    The task's spec (policy and its options) applies to every host; ``host_policies[host]`` replaces it for that
    host. Raises SchedulerError naming the first host whose spec is invalid, before anything is read or written
    beyond the host list.
    """
    per_host = params.get("host_policies") or {}
    unknown = sorted(set(per_host) - set(host_names))
    if unknown:
        raise vs.SchedulerError("host_policies names host(s) not in scope: %s; nothing changed" % ", ".join(unknown))
    task_spec = {k: params.get(k) for k in SPEC_OPTIONS if params.get(k) is not None}
    out: dict[str, tuple[Spec, bool]] = {}
    for host in host_names:
        raw = per_host.get(host)
        if raw is None:
            if "policy" not in task_spec:
                raise vs.SchedulerError("host %s: vGPU scheduler: no policy (set policy, or host_policies for this host)"
                                        % host)
            spec, production = dict(task_spec), bool(params.get("production"))
        else:
            if not isinstance(raw, dict):
                raise vs.SchedulerError("host %s: vGPU scheduler: host_policies entry must be a mapping, got %r" % (host, raw))
            spec = {k: v for k, v in raw.items() if k != "production"}
            production = bool(raw.get("production", params.get("production")))
        out[host] = (vs.normalize(spec, host), production)
    return out


def esxi_option_string(option_string: Optional[str], spec: Spec) -> str:
    """``option_string`` with RmPVMRL set for ``spec`` (the shared editor), in ESXi's unquoted spelling.

    The shared editor quotes the NVreg_RegistryDwords value, as modprobe.d files do; NVIDIA's ESXi command sets it
    unquoted, so a value without whitespace or quotes is written bare. The same string comes back when the driver
    would already run the spec, so a re-run writes nothing.
    """
    before = option_string or ""
    after: str = vs.options_with_policy(before, spec)
    if after == before:
        return before
    tokens = []
    for token in after.split():
        m = _QUOTED_DWORDS.match(token)
        tokens.append("%s=%s" % (m.group(1), m.group(2)) if m else token)
    return " ".join(tokens)


def plan_host(host: str, configured: Optional[str], spec: Spec, production: bool = False) -> dict[str, Any]:
    """The plan of one host: the option strings before and after, and the warnings it deserves."""
    before = configured or ""
    after = esxi_option_string(before, spec)
    warnings = []
    overrides: dict[str, str] = vs.per_device_rmpvmrl(before)
    if overrides:
        warnings.append("host %s: NVreg_RegistryDwordsPerDevice sets RmPVMRL for %s, which takes precedence over the "
                        "host-wide policy on those GPUs" % (host, ", ".join(sorted(overrides))))
    if production and spec["policy"] == "best_effort":
        warnings.append("host %s carries production tenants and is set to best_effort: a vGPU's share of the GPU then "
                        "depends on its neighbours' load; fixed_share is the only policy with a stable per-tenant "
                        "share" % host)
    return dict(host=host, before=before, after=after, changed=after != before, policy=vs.describe(spec),
                policy_before=vs.describe(vs.configured_spec(before)), per_device_overrides=overrides, warnings=warnings)


def verify_host(host: str, spec: Spec, configured: Optional[str], reboot_required: Any) -> Optional[str]:
    """None when the host is configured for ``spec`` and has no reboot pending, else why not."""
    current = configured or ""
    observed = vs.configured_spec(current)
    if not vs.matches(spec, observed):
        return "host %s: the nvidia module is configured for %s, not %s (option string %r)" % (
            host, vs.describe(observed), vs.describe(spec), current)
    if reboot_required:
        return "host %s: configured for %s but the host reports a reboot pending, so the driver may still run " \
               "the previous policy" % (host, vs.describe(spec))
    return None


def check_hosts(rows: Sequence[Row], configured: Sequence[Optional[str]],
                params: Mapping[str, Any]) -> tuple[list[tuple[Row, str]], list[dict[str, Any]]]:
    """([(row, configured option string)] of the hosts to set, [results of the hosts skipped]), in host order.

    ``configured[i]`` is the option string of ``rows[i]``, None when the host has no nvidia module; only the hosts
    with one are looked at (so a caller whose read failed can ask about the hosts before it). A host without GPUs
    and without the module is skipped (unless skip_non_gpu_hosts is false). Raises SchedulerError naming the first
    host that cannot be set: a GPU host without the module (no NVIDIA vGPU host driver), or a host not connected.
    """
    candidates: list[tuple[Row, str]] = []
    skipped: list[dict[str, Any]] = []
    for row, option_string in zip(rows, configured):
        if option_string is None:
            if vgpu.is_gpu_host(row) or not params.get("skip_non_gpu_hosts", True):
                raise vs.SchedulerError("host %s: vGPU scheduler: the %s kernel module is not installed (no NVIDIA vGPU "
                                        "host driver); nothing changed" % (row["name"], MODULE))
            skipped.append(dict(name=row["name"], skipped=True, changed=False, before=None, after=None,
                                reboot_required=bool(row.get("summary.rebootRequired"))))
            continue
        if row.get("runtime.connectionState") != "connected":
            raise vs.SchedulerError("host %s: vGPU scheduler: host is %s; nothing changed"
                                    % (row["name"], row.get("runtime.connectionState")))
        candidates.append((row, option_string))
    return candidates, skipped


def plan(rows: Sequence[Row], configured: Sequence[Optional[str]], params: Mapping[str, Any]) -> Plan:
    """Validate and plan every host in scope before anything is written.

    Raises SchedulerError, naming the host, when a host cannot be set (:func:`check_hosts`), a spec is invalid
    (:func:`host_specs`) or, with ``verify``, a host is not configured for its spec or has a reboot pending (one
    message per such host, joined by "; "). With ``verify`` nothing is written.
    """
    candidates, skipped = check_hosts(rows, configured, params)
    specs = host_specs(params, [row["name"] for row, _option_string in candidates])
    hosts: list[HostPlan] = []
    warnings: list[str] = []
    for row, option_string in candidates:
        spec, production = specs[row["name"]]
        host_plan = plan_host(row["name"], option_string, spec, production)
        warnings.extend(host_plan.pop("warnings"))
        hosts.append(HostPlan(row, spec, host_plan))
    if params.get("verify"):
        problems = [verify_host(h.row["name"], h.spec, h.plan["before"], h.row.get("summary.rebootRequired"))
                    for h in hosts]
        found = [p for p in problems if p]
        if found:
            raise vs.SchedulerError("; ".join(found))
        return Plan(hosts, skipped, warnings, [])
    return Plan(hosts, skipped, warnings, [(h.row, h.plan["after"]) for h in hosts if h.plan["changed"]])


def _iso_time(value: Optional[datetime.datetime]) -> Optional[str]:
    return value.isoformat() if value is not None else None


def results(the_plan: Plan, params: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """(per-host results sorted by host name, warnings) of a plan whose writes were made (or, in check mode, would
    have been: the results are the same)."""
    verify = params.get("verify")
    out = list(the_plan.skipped)
    for row, _spec, host_plan in the_plan.hosts:
        pending = bool(row.get("summary.rebootRequired"))
        if host_plan["changed"] and not verify:
            # the driver reads RmPVMRL when the module loads: a reboot applies it (NVIDIA vGPU user guide)
            pending = True
        result = dict(name=row["name"], skipped=False, changed=host_plan["changed"] and not verify,
                      before=host_plan["before"], after=host_plan["after"] if not verify else host_plan["before"],
                      policy=host_plan["policy"], policy_before=host_plan["policy_before"],
                      per_device_overrides=host_plan["per_device_overrides"], reboot_required=pending,
                      boot_time=_iso_time(row.get("runtime.bootTime")))
        if verify:
            result["verified"] = True
        out.append(result)
    out.sort(key=lambda r: r["name"])
    return out, the_plan.warnings
