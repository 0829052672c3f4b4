# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vGPU scheduler policy of ESXi hosts: the ``nvidia`` kernel module's option string.

Pure part first (specs per host, option strings, plans, verification), then :func:`run`, which reads every host,
plans all of them and only then writes, through the HostKernelModuleSystem helpers of _vsphere.py.

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

import re

from ansible_collections.gpuops.provision.plugins.module_utils import _vgpu_scheduler as vs
from ansible_collections.gpuops.provision.plugins.module_utils import _vsphere

MODULE = "nvidia"
SPEC_OPTIONS = vs.SPEC_KEYS
_QUOTED_DWORDS = re.compile(r'^(%s)="([^"\s]*)"$' % re.escape(vs.REGISTRY_DWORDS))


def host_specs(params, host_names):
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
    out = {}
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


def esxi_option_string(option_string, spec):
    """``option_string`` with RmPVMRL set for ``spec`` (the shared editor), in ESXi's unquoted spelling.

    The shared editor quotes the NVreg_RegistryDwords value, as modprobe.d files do; NVIDIA's ESXi command sets it
    unquoted, so a value without whitespace or quotes is written bare. The same string comes back when the driver
    would already run the spec, so a re-run writes nothing.
    """
    before = option_string or ""
    after = vs.options_with_policy(before, spec)
    if after == before:
        return before
    tokens = []
    for token in after.split():
        m = _QUOTED_DWORDS.match(token)
        tokens.append("%s=%s" % (m.group(1), m.group(2)) if m else token)
    return " ".join(tokens)


def plan_host(host, configured, spec, production=False):
    """The plan of one host: the option strings before and after, and the warnings it deserves (pure)."""
    after = esxi_option_string(configured, spec)
    warnings = []
    overrides = vs.per_device_rmpvmrl(configured or "")
    if overrides:
        warnings.append("host %s: NVreg_RegistryDwordsPerDevice sets RmPVMRL for %s, which takes precedence over the "
                        "host-wide policy on those GPUs" % (host, ", ".join(sorted(overrides))))
    if production and spec["policy"] == "best_effort":
        warnings.append("host %s carries production tenants and is set to best_effort: a vGPU's share of the GPU then "
                        "depends on its neighbours' load; fixed_share is the only policy with a stable per-tenant "
                        "share" % host)
    return dict(host=host, before=configured or "", after=after, changed=after != (configured or ""),
                policy=vs.describe(spec), policy_before=vs.describe(vs.configured_spec(configured or "")),
                per_device_overrides=overrides, warnings=warnings)


def verify_host(host, spec, configured, reboot_required):
    """None when the host is configured for ``spec`` and has no reboot pending, else why not (pure)."""
    observed = vs.configured_spec(configured or "")
    if not vs.matches(spec, observed):
        return "host %s: the nvidia module is configured for %s, not %s (option string %r)" % (
            host, vs.describe(observed), vs.describe(spec), configured or "")
    if reboot_required:
        return "host %s: configured for %s but the host reports a reboot pending, so the driver may still run " \
               "the previous policy" % (host, vs.describe(spec))
    return None


def run(session, params, check_mode):
    """Read, validate and plan every host in scope, then update the option string where it differs.

    Returns (per-host results, warnings). Raises SchedulerError or VsphereError, naming the host, before the first
    write when any host is invalid or cannot be read; a failed write names the hosts already changed.
    """
    rows = session.hosts(params.get("datacenter"), params.get("cluster"), params.get("esxi_hostname"),
                         props=_vsphere.HOST_PROPS + _vsphere.SCHEDULER_HOST_PROPS)
    warnings = []
    candidates, results = [], []
    for row in rows:
        configured = _vsphere.module_option_string(row, MODULE)
        if configured is None:
            if _vsphere.is_gpu_host(row) or not params.get("skip_non_gpu_hosts", True):
                raise vs.SchedulerError("host %s: vGPU scheduler: the %s kernel module is not installed (no NVIDIA vGPU "
                                        "host driver); nothing changed" % (row["name"], MODULE))
            results.append(dict(name=row["name"], skipped=True, changed=False, before=None, after=None,
                                reboot_required=bool(row.get("summary.rebootRequired"))))
            continue
        if row.get("runtime.connectionState") != "connected":
            raise vs.SchedulerError("host %s: vGPU scheduler: host is %s; nothing changed"
                                    % (row["name"], row.get("runtime.connectionState")))
        candidates.append((row, configured))
    specs = host_specs(params, [row["name"] for row, dummy in candidates])
    plans = []
    for row, configured in candidates:
        spec, production = specs[row["name"]]
        plan = plan_host(row["name"], configured, spec, production)
        warnings.extend(plan.pop("warnings"))
        plans.append((row, spec, plan))

    if params.get("verify"):
        problems = [verify_host(row["name"], spec, plan["before"], row.get("summary.rebootRequired"))
                    for row, spec, plan in plans]
        problems = [p for p in problems if p]
        if problems:
            raise vs.SchedulerError("; ".join(problems))

    done = []
    for row, spec, plan in plans:
        pending = bool(row.get("summary.rebootRequired"))
        if plan["changed"] and not params.get("verify"):
            if not check_mode:
                try:
                    _vsphere.set_module_option_string(row, MODULE, plan["after"])
                except _vsphere.VsphereError as e:
                    raise _vsphere.VsphereError("%s (already changed: %s)" % (e, ", ".join(done) or "none"))
                done.append(row["name"])
            # the driver reads RmPVMRL when the module loads: a reboot applies it (NVIDIA vGPU user guide)
            pending = True
        result = dict(name=row["name"], skipped=False, changed=plan["changed"] and not params.get("verify"),
                      before=plan["before"], after=plan["after"] if not params.get("verify") else plan["before"],
                      policy=plan["policy"], policy_before=plan["policy_before"],
                      per_device_overrides=plan["per_device_overrides"], reboot_required=pending,
                      boot_time=_vsphere.iso_time(row.get("runtime.bootTime")))
        if params.get("verify"):
            result["verified"] = True
        results.append(result)
    results.sort(key=lambda r: r["name"])
    return results, warnings
