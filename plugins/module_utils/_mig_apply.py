# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One host's MIG change from a mig-parted configuration: the workflow behind the mig_geometry module and the
boot-time re-apply of the mig_reconfigure role (roles/mig_reconfigure/files/gpuops_mig_apply.py).

Take the per-host MIG lock (_hostlock) for the whole run, plan every GPU against its own profile table before
touching any (NVML's, or NVIDIA's documented one while an old driver lists none), refuse what cannot work, then apply
GPU by GPU (mode first, a new NVML session, instances), verify, and put the GPUs this run already changed back when a
later one fails. Every NVML failure is reported with the GPU (index, model, UUID, PCI address) and the step. Needs
only pynvml and the collection's module_utils, not ansible-core, so it runs on a host at boot too.
"""

from __future__ import annotations

import contextlib

from ansible_collections.gpuops.provision.plugins.module_utils import _hostlock, _mig, _mig_models
from ansible_collections.gpuops.provision.plugins.module_utils._nvml import (
    RESET_ARCHES, ApplyError, Nvml, NvmlError, StepError, _text, gpu_label)

DEFAULT_HOLDER = "gpuops.provision.mig_geometry"

PENDING_WHY = {"in_use": " (the GPU was not idle: stop its clients, then reset it)",
               "reset_required": " (the driver did not reset the GPU; in a pass-through VM only a reboot does)"}


class RunError(Exception):
    """A failed run; ``result`` holds the per-GPU results and whether anything changed."""

    def __init__(self, msg, result=None):
        super(RunError, self).__init__(msg)
        self.result = result or {"changed": False}


class GpuError(NvmlError):
    """An NVML failure whose message names the GPU and the step."""


def _label(gpu):
    return "GPU %d (%s)" % (gpu["index"], gpu["model"])


def blocking_processes(gpu, plan):
    """Processes that the plan would disturb: on destroyed instances, or any when the MIG mode changes."""
    procs = gpu.get("processes") or []
    if any(a["action"] == "set_mig_mode" for a in plan["actions"]):
        return procs
    doomed = set(a["gi_id"] for a in plan["actions"] if a["action"] == "destroy_gi")
    live = set(gi["gi_id"] for gi in gpu["instances"])
    # A process without a known GPU instance may be anywhere on the GPU, so it counts.
    return [p for p in procs if p["gpu_instance_id"] in doomed or p["gpu_instance_id"] not in live]


class Runner:
    """One host's MIG change: plan every GPU, check processes, apply, verify, undo across GPUs on failure."""

    def __init__(self, params, nvml):
        self.params = params
        self.nvml = nvml
        self.gpus = []
        self.results = []
        self.applying = False
        self.driver = None
        self.notes = []  # warnings of the plan (the module shows them)

    @contextlib.contextmanager
    def at(self, gpu, step):
        """Name the GPU (a gpu dict, or an index before its identity is read; None for host-wide calls) and the step
        in any NVML failure inside: the bare "NVML error: Invalid Argument" told nobody which GPU or what for."""
        try:
            yield
        except (GpuError, ApplyError):
            raise
        except (NvmlError, self.nvml.nv.NVMLError) as e:
            where = "NVML" if gpu is None else gpu_label(gpu if isinstance(gpu, dict) else {"index": gpu})
            if isinstance(e, StepError):
                raise GpuError("%s: %s" % (where, e))
            why = e if isinstance(e, NvmlError) else self.nvml.failure(e)
            raise GpuError("%s: %s: %s" % (where, step, why))

    def entries(self):
        p = self.params
        if p["config"] is not None:
            return _mig.parse_config(p["config"], p["selected"])
        return _mig.parse_entries(p["devices"], "devices")

    def plan(self, entries):
        errors = []
        with self.at(None, "counting the GPUs"):
            count = self.nvml.count()
        _mig.check_entries(entries, count)
        with self.at(None, "reading the driver version"):
            self.driver = _text(self.nvml.call("nvmlSystemGetDriverVersion"))
        for index in range(count):
            with self.at(index, "reading its identity (PCI info, memory, UUID, name, MIG mode)"):
                dev, gpu = self.nvml.identity(index)
            entry = _mig.select_entry(entries, index, int(gpu["pci_device_id"], 16), int(gpu["pci_subsystem_id"], 16))
            gpu.update({"_handle": dev, "_table": _mig.ProfileTable([]), "instances": [], "processes": []})
            if gpu["mig_capable"] and (entry is not None or gpu["mig_mode"]["current"] == "enabled"):
                with self.at(gpu, "reading its GPU instance profiles"):
                    gpu["_table"] = self.nvml.profiles(dev, gpu["memory"]["total_bytes"])
                if gpu["mig_mode"]["current"] == "enabled":
                    # Also for a GPU no entry selects: still advertised by the device plugin, so reported as it is.
                    with self.at(gpu, "reading its GPU and compute instances"):
                        gpu["instances"] = self.nvml.instances(dev, gpu["_table"])
            if entry is not None and gpu["mig_capable"]:
                with self.at(gpu, "listing its processes"):
                    gpu["processes"] = self.nvml.processes(dev, strict=True)
            gpu["_table_source"] = "nvml"
            res = {"index": index, "uuid": gpu["uuid"], "model": gpu["model"], "selected": entry is not None, "changed": False,
                   "reset_required": False, "actions": [], "profile_table": "nvml", "mig_capable": gpu["mig_capable"]}
            mode = gpu["mig_mode"] or {"current": "disabled", "pending": "disabled"}
            res["before"] = res["after"] = _mig.summarize(mode, gpu["instances"])
            gpu["_entry"] = entry
            gpu["_plan"] = None
            self.gpus.append(gpu)
            self.results.append(res)
            if entry is None:
                continue
            error = self.plan_one(gpu, res, entry, mode)
            if error:
                errors.append(error)
        # mig-parted treats a filter that matches nothing as nothing to do; a typo there would pass unseen.
        for number, item in enumerate(entries):
            if item["device_filter"] and not any(
                    _mig.entry_matches(item, g["index"], int(g["pci_device_id"], 16), int(g["pci_subsystem_id"], 16))
                    for g in self.gpus):
                self.notes.append("entry %d: device-filter %s matches no GPU on this host (GPUs: %s)" % (
                    number, ", ".join(":".join("0x%08X" % part for part in f) for f in item["device_filter"]),
                    ", ".join("%d %s" % (g["index"], g["pci_device_id"]) for g in self.gpus) or "none"))
        return errors

    def plan_one(self, gpu, res, entry, mode):
        """Plan one selected GPU; returns an error sentence or None."""
        if not gpu["mig_capable"]:
            if entry["devices"] == "all" or not entry["mig_enabled"]:
                res["skipped"] = "GPU does not support MIG"
                return None
            return "%s does not support MIG but the configuration enables MIG on it" % _label(gpu)
        with self.at(gpu, "reading its virtualization mode"):
            virt = self.nvml.virtualization(gpu["_handle"])["mode"]
        if virt == "vgpu" and entry["mig_enabled"]:
            # nvml.h: GPU instance creation returns NOT_SUPPORTED "in vGPU guest"; MIG-backed vGPU is set on the host.
            return ("%s is a vGPU guest: MIG GPU instances cannot be created inside a vGPU VM; set MIG on the "
                    "hypervisor and give the VM a MIG-backed vGPU profile" % _label(gpu))
        pci_id = int(gpu["pci_device_id"], 16)
        if entry["mig_enabled"]:
            below = _mig_models.below_minimum(pci_id, self.driver)
            if below:
                return "%s: %s" % (_label(gpu), below)
        table = gpu["_table"]
        if entry["mig_enabled"] and entry["mig_devices"] and not table.profiles:
            # R535 and older answer NOT_SUPPORTED to profile queries while MIG is disabled (mig-parted 219e780d).
            table = _mig_models.documented_table(pci_id, self.driver)
            if table is None:
                return ("%s: NVML (driver %s) lists no GPU instance profiles while MIG mode is %s, and the collection "
                        "has no documented table for PCI device %s; enable MIG first (mig-devices: {}) and run again"
                        % (_label(gpu), self.driver, mode["current"], gpu["pci_device_id"]))
            gpu["_table"] = table
            gpu["_table_source"] = res["profile_table"] = "documented"
        unknown = _mig.unknown_profiles(table, entry["mig_devices"])
        if unknown:
            return "%s: profile(s) %s not offered (this GPU offers %s); %s" % (
                _label(gpu), ", ".join(unknown), ", ".join(table.names()) or "none",
                _mig_models.missing_profiles_hint(pci_id, self.driver, unknown))
        try:
            plan = _mig.plan_gpu(table, mode, gpu["instances"], entry, mode_change_resets=self.predict_reset(gpu, virt))
        except _mig.MigError as e:
            return "%s: cannot apply {%s}: %s" % (_label(gpu), _mig.describe_request(entry["mig_devices"]), e)
        gpu["_plan"] = plan
        res["changed"] = plan["changed"]
        res["reset_required"] = plan["reset_required"]
        res["actions"] = plan["actions"]
        res["after"] = _mig.predicted_after(mode, gpu["instances"], plan, table)
        return None

    def predict_reset(self, gpu, virt=None):
        """Whether a mode change will wait for a reset: on Ampere when the driver cannot reset the GPU itself, in a
        pass-through VM (nvml.h: RESET_REQUIRED) or while processes hold it (IN_USE). Hopper switches at once."""
        if self.nvml.architecture(gpu["_handle"]) not in RESET_ARCHES:
            return False
        virt = virt or self.nvml.virtualization(gpu["_handle"])["mode"]
        return virt == "passthrough" or bool(gpu.get("processes"))

    def after_mode(self, gpu):
        """After a MIG mode change took effect: a new NVML session, fresh handles, the live profile table (checked
        against the documented one the plan used, if any) and the creations planned again on the GPU as it is."""
        self.nvml.reopen()
        for other in self.gpus:
            dev = self.nvml.handle(other["index"])
            uuid = _text(self.nvml.call("nvmlDeviceGetUUID", dev))
            if uuid != other["uuid"]:
                raise NvmlError("GPU %d is %s after the MIG mode change, not %s: the GPUs were renumbered"
                                % (other["index"], uuid, other["uuid"]))
            other["_handle"] = dev
        live = self.nvml.profiles(gpu["_handle"], gpu["memory"]["total_bytes"])
        entry = gpu["_entry"]
        if gpu["_table_source"] == "documented":
            used = _mig.gi_profile_names(entry["mig_devices"])
            diff = _mig_models.disagreements(gpu["_table"], live, used)
            if diff:
                raise NvmlError("the driver's profile table differs from the documented one the plan was checked "
                                "against (%s); nothing was created" % "; ".join(diff))
        gpu["_table"] = live
        fresh = self.nvml.refresh(dict(gpu))
        try:
            again = _mig.plan_gpu(live, fresh["mig_mode"], fresh["instances"], entry)
        except _mig.MigError as e:
            raise NvmlError("the plan no longer fits the GPU after the MIG mode change: %s" % e)
        gpu["_plan"]["target_counts"] = again["target_counts"]
        return [a for a in again["actions"] if a["action"] in ("create_gi", "create_ci")]

    def check_processes(self):
        errors = []
        for gpu in self.gpus:
            plan = gpu["_plan"]
            if not plan or not plan["changed"]:
                continue
            procs = blocking_processes(gpu, plan)
            if procs:
                errors.append("%s has running processes (PID %s) on instances that would change; stop them or use force=true"
                              % (_label(gpu), ", ".join(str(p["pid"]) for p in procs)))
        return errors

    def apply(self):
        self.applying = True
        done = []
        for gpu, res in zip(self.gpus, self.results):
            plan = gpu["_plan"]
            if not plan or not plan["changed"]:
                continue
            try:
                outcome = self.nvml.apply(gpu, plan, after_mode=self.after_mode)
            except ApplyError as e:
                try:
                    fresh = self.nvml.refresh(dict(gpu))
                    res["after"] = _mig.summarize(fresh["mig_mode"], fresh["instances"])
                except self.nvml.nv.NVMLError:
                    pass
                res["changed"] = not e.restored
                self.fail("%s: %s%s" % (gpu_label(gpu), e, self.undo(done)))
            res["reset_required"] = outcome["reset_required"]
            if outcome["pending_reason"]:
                res["pending_reason"] = outcome["pending_reason"]
            if outcome["deferred"]:
                # Instances wait for the reset; report only what was done.
                res["actions"] = [a for a in res["actions"] if a["action"] not in ("create_gi", "create_ci")]
            try:
                with self.at(gpu, "reading its geometry after the change"):
                    fresh = self.nvml.refresh(dict(gpu))
            except GpuError as e:
                self.fail("%s%s" % (e, self.undo(done)))
            res["after"] = _mig.summarize(fresh["mig_mode"], fresh["instances"])
            if not outcome["reset_required"] and gpu["_entry"]["mig_enabled"] and \
                    not _mig.geometry_matches(fresh["instances"], plan["target_counts"]):
                self.fail("%s: verification failed: the GPU shows %s instead of %s%s"
                          % (gpu_label(gpu), _mig.describe_request(_mig.current_counts(fresh["instances"])),
                             _mig.describe_request(plan["target_counts"]), self.undo(done)))
            done.append((gpu, res))

    def undo(self, done):
        """Put the GPUs this run already changed back to their geometry before it, newest first.

        One module run is one host's change: a failure on a later GPU must not leave earlier ones on the new layout
        while the play reports the host as failed. Returns a note for the error message.
        """
        notes = []
        for gpu, res in reversed(done):
            before = {"devices": "all", "mig_enabled": gpu["mig_mode"]["current"] == "enabled",
                      "mig_devices": _mig.current_counts(gpu["instances"])}
            try:
                with self.at(gpu, "reading its geometry to restore it"):
                    fresh = self.nvml.refresh(dict(gpu))
                back = _mig.plan_gpu(gpu["_table"], fresh["mig_mode"], fresh["instances"], before,
                                     mode_change_resets=self.predict_reset(gpu))
                if back["changed"]:
                    self.nvml.apply(fresh, back)
                with self.at(gpu, "reading its restored geometry"):
                    fresh = self.nvml.refresh(dict(gpu))
                res["after"] = _mig.summarize(fresh["mig_mode"], fresh["instances"])
                res["changed"] = back["reset_required"]
                notes.append("GPU %d restored" % gpu["index"])
            except GpuError as e:
                notes.append("GPU %d changed by this run could not be restored: %s" % (gpu["index"], e))
            except (_mig.MigError, NvmlError) as e:
                notes.append("%s changed by this run could not be restored: %s" % (gpu_label(gpu), e))
        return " (%s)" % "; ".join(notes) if notes else ""

    def fail(self, msg, applied=True):
        """Fail with the per-GPU results; before apply nothing changed, whatever the plan said."""
        changed = applied and any(r["changed"] for r in self.results)
        raise RunError(msg, {"gpus": self.results, "changed": changed, "nvml_calls": self.nvml.calls,
                             "reset_required": any(r["reset_required"] for r in self.results)})


def run(params, check_mode=False, nvml=None):
    """Take the per-host lock, plan and (unless ``check_mode``) apply; returns (result, warnings) or raises RunError.

    ``params``: ``config`` and ``selected``, or ``devices``; ``force``; ``lock_path`` (default
    _hostlock.default_path()), ``lock_holder`` and ``lock_timeout``.
    """
    nvml = nvml or Nvml()
    runner = Runner(params, nvml)
    try:
        entries = runner.entries()
    except _mig.MigError as e:
        raise RunError("invalid MIG configuration: %s" % e)
    # Check mode takes the lock too, shared: a plan read while another run rebuilds the GPUs would describe a
    # half-built layout, but plans do not disturb each other. A user who cannot create the lock file still plans,
    # with a warning.
    lock = _hostlock.HostLock(params.get("lock_path") or _hostlock.default_path(),
                              params.get("lock_holder") or DEFAULT_HOLDER, timeout=params.get("lock_timeout") or 0,
                              shared=check_mode)
    try:
        lock.acquire()
    except _hostlock.LockHeld as e:
        raise RunError("%s; nothing was changed" % e, {"changed": False, "lock": dict(lock.info(), held_by=e.held_by)})
    except _hostlock.LockError as e:
        raise RunError("cannot take the per-host MIG lock: %s; nothing was changed" % e,
                       {"changed": False, "lock": lock.info()})
    try:
        out, warnings = _run_locked(runner, entries, params, check_mode, nvml)
    except RunError as e:
        e.result["lock"] = lock.info()
        raise
    finally:
        lock.release()
    out["lock"] = lock.info()
    return out, lock.warnings + warnings


def _run_locked(runner, entries, params, check_mode, nvml):
    if not nvml.open():
        raise RunError("NVML is not available: %s" % nvml.reason)
    try:
        try:
            errors = runner.plan(entries)
        except _mig.MigError as e:
            errors = [str(e)]
        if errors:
            runner.fail("nothing was changed: " + "; ".join(errors), applied=False)
        if not params.get("force"):
            errors = runner.check_processes()
            if errors:
                runner.fail("nothing was changed: " + "; ".join(errors), applied=False)
        if not check_mode:
            runner.apply()
    except nvml.nv.NVMLError as e:
        # Every NVML call above runs inside Runner.at(), so this is a safety net, not the usual path.
        runner.fail(("%s" if runner.applying else "nothing was changed: %s") % ("NVML error during the run: %s"
                    % nvml.failure(e)), applied=runner.applying)
    except NvmlError as e:
        runner.fail(("%s" if runner.applying else "nothing was changed: %s") % e, applied=runner.applying)
    finally:
        nvml.close()
    results = runner.results
    warnings = ["GPU %d (%s): the MIG mode change takes effect after a GPU reset or reboot%s; run again afterwards "
                "to create the instances" % (r["index"], r["model"], PENDING_WHY.get(r.get("pending_reason"), ""))
                for r in results if r["reset_required"]]
    out = {"changed": any(r["changed"] for r in results), "gpus": results,
           "reset_required": any(r["reset_required"] for r in results), "nvml_calls": nvml.calls}
    return out, runner.notes + warnings
