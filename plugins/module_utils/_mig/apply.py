# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One host's MIG change from a mig-parted configuration: the workflow behind the mig_geometry module and the
boot-time re-apply of the mig_reconfigure role (roles/mig_reconfigure/files/gpuops_mig_apply.py).

Take the per-host MIG lock (host_lock) for the whole run, plan every GPU against its own profile table before
touching any (NVML's, or NVIDIA's documented one while an old driver lists none), refuse what cannot work, then apply
GPU by GPU (mode first, a new NVML session, instances), verify, and put the GPUs this run already changed back when a
later one fails. Every NVML failure is reported with the GPU (index, model, UUID, PCI address) and the step. Needs
only pynvml and the collection's module_utils, not ansible-core, so it runs on a host at boot too.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from typing import Any, NoReturn, Optional, Union

from ansible_collections.gpuops.provision.plugins.module_utils._common import disruption
from ansible_collections.gpuops.provision.plugins.module_utils._mig import geometry, host_lock, models
from ansible_collections.gpuops.provision.plugins.module_utils._gpu.nvml import (
    RESET_ARCHES, ApplyError, Device, Nvml, NvmlError, StepError, _text, gpu_label, host_gpu_clients)

DEFAULT_HOLDER = "gpuops.provision.mig_geometry"

PENDING_WHY = {"in_use": " (the GPU was not idle: stop its clients, then reset it)",
               "host_clients": " (host GPU clients hold it: %s; nvidia-smi -r also refuses the reset while nvidia_drm "
                               "is loaded or DCGM runs)",
               "reset_required": " (the driver did not reset the GPU; in a pass-through VM only a reboot does)"}


def pending_why(reason: Optional[str], runner: "Runner") -> str:
    """Why a mode change is pending, for the warning ("" when the reason is not known)."""
    why = PENDING_WHY.get(reason or "", "")
    return why % ", ".join(runner.host_clients) if reason == "host_clients" else why


class RunError(Exception):
    """A failed run; ``result`` holds the per-GPU results and whether anything changed."""

    def __init__(self, msg: str, result: Optional[dict[str, Any]] = None) -> None:
        super(RunError, self).__init__(msg)
        self.result = result or {"changed": False}


class GpuError(NvmlError):
    """An NVML failure whose message names the GPU and the step."""


def _label(gpu: dict[str, Any]) -> str:
    return "GPU %d (%s)" % (gpu["index"], gpu["model"])


def blocking_processes(gpu: dict[str, Any], plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Processes that the plan would disturb: on destroyed instances, or any when the MIG mode changes."""
    procs: list[dict[str, Any]] = gpu.get("processes") or []
    if any(a["action"] == "set_mig_mode" for a in plan["actions"]):
        return procs
    doomed = set(a["gi_id"] for a in plan["actions"] if a["action"] == "destroy_gi")
    live = set(gi["gi_id"] for gi in gpu["instances"])
    # A process without a known GPU instance may be anywhere on the GPU, so it counts.
    return [p for p in procs if p["gpu_instance_id"] in doomed or p["gpu_instance_id"] not in live]


class Target:
    """One GPU of a run: the adapter's Device (``gpu`` is its description as the plan read it), the GPU's result row,
    and this workflow's own planning state: the configuration entry that selects it (empty when none does), the
    profile table the plan was checked against and where that table came from (``nvml``, or ``documented`` while an
    old driver lists none), and the plan (empty until the GPU is planned)."""

    __slots__ = ("device", "result", "entry", "table", "table_source", "plan")

    def __init__(self, device: Device, result: dict[str, Any], entry: Optional[dict[str, Any]]) -> None:
        self.device = device
        self.result = result
        self.entry: dict[str, Any] = entry or {}
        self.table = device.table
        self.table_source = "nvml"
        self.plan: dict[str, Any] = {}

    @property
    def gpu(self) -> dict[str, Any]:
        return self.device.info

    def changes(self) -> bool:
        return bool(self.plan) and bool(self.plan["changed"])


class Runner:
    """One host's MIG change: plan every GPU, check processes, apply, verify, undo across GPUs on failure."""

    def __init__(self, params: dict[str, Any], nvml: Nvml) -> None:
        self.params = params
        self.nvml = nvml
        self.targets: list[Target] = []
        self.results: list[dict[str, Any]] = []
        self.applying = False
        self.driver: Optional[str] = None
        self.notes: list[str] = []  # warnings of the plan (the module shows them)
        self._host_clients: Optional[list[str]] = None

    @property
    def host_clients(self) -> list[str]:
        """Host GPU clients (nvidia-persistenced, nv-hostengine, nvidia_drm) running now; read once per run."""
        if self._host_clients is None:
            self._host_clients = host_gpu_clients()
        return self._host_clients

    @contextlib.contextmanager
    def at(self, gpu: Union[dict[str, Any], int, None], step: str) -> Iterator[None]:
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

    def entries(self) -> list[dict[str, Any]]:
        p = self.params
        if p["config"] is not None:
            return geometry.parse_config(p["config"], p["selected"])
        return geometry.parse_entries(p["devices"], "devices")

    def plan(self, entries: list[dict[str, Any]]) -> list[str]:
        errors = []
        with self.at(None, "counting the GPUs"):
            count = self.nvml.count()
        geometry.check_entries(entries, count)
        with self.at(None, "reading the driver version"):
            self.driver = _text(self.nvml.call("nvmlSystemGetDriverVersion"))
        for index in range(count):
            with self.at(index, "reading its identity (PCI info, memory, UUID, name, MIG mode)"):
                device = self.nvml.device(index)
            gpu = device.info
            entry = geometry.select_entry(entries, index, int(gpu["pci_device_id"], 16), int(gpu["pci_subsystem_id"], 16))
            gpu.update({"instances": [], "processes": []})
            if gpu["mig_capable"] and (entry is not None or gpu["mig_mode"]["current"] == "enabled"):
                with self.at(gpu, "reading its GPU instance profiles"):
                    device.table = models.with_documented_counts(gpu["pci_device_id"], self.nvml.profiles(device))
                if gpu["mig_mode"]["current"] == "enabled":
                    # Also for a GPU no entry selects: still advertised by the device plugin, so reported as it is.
                    with self.at(gpu, "reading its GPU and compute instances"):
                        gpu["instances"] = self.nvml.instances(device)
            if entry is not None and gpu["mig_capable"]:
                with self.at(gpu, "listing its processes"):
                    gpu["processes"] = self.nvml.processes(device, strict=True)
            res = {"index": index, "uuid": gpu["uuid"], "model": gpu["model"], "pci_bus_id": gpu["pci_bus_id"],
                   "selected": entry is not None, "changed": False,
                   "reset_required": False, "actions": [], "profile_table": "nvml", "mig_capable": gpu["mig_capable"]}
            mode = gpu["mig_mode"] or {"current": "disabled", "pending": "disabled"}
            res["before"] = res["after"] = geometry.summarize(mode, gpu["instances"])
            target = Target(device, res, entry)
            self.targets.append(target)
            self.results.append(res)
            if entry is None:
                continue
            error = self.plan_one(target, mode)
            if error:
                errors.append(error)
        gpus = [t.gpu for t in self.targets]
        self.notes.extend(geometry.selection_notes(entries, [
            dict(index=g["index"], model=g["model"], pci_device_id=int(g["pci_device_id"], 16),
                 pci_subsystem_id=int(g["pci_subsystem_id"], 16), mig_capable=g["mig_capable"]) for g in gpus]))
        # mig-parted treats a filter that matches nothing as nothing to do; a typo there would pass unseen.
        for number, item in enumerate(entries):
            if item["device_filter"] and not any(
                    geometry.entry_matches(item, g["index"], int(g["pci_device_id"], 16), int(g["pci_subsystem_id"], 16))
                    for g in gpus):
                self.notes.append("entry %d: device-filter %s matches no GPU on this host (GPUs: %s)" % (
                    number, ", ".join(":".join("0x%08X" % part for part in f) for f in item["device_filter"]),
                    ", ".join("%d %s" % (g["index"], g["pci_device_id"]) for g in gpus) or "none"))
        return errors

    def plan_one(self, target: Target, mode: dict[str, str]) -> Optional[str]:
        """Plan one selected GPU; returns an error sentence or None."""
        gpu, res, entry = target.gpu, target.result, target.entry
        if not gpu["mig_capable"]:
            if entry["devices"] == "all" or not entry["mig_enabled"]:
                res["skipped"] = "GPU does not support MIG"
                return None
            return "%s does not support MIG but the configuration enables MIG on it" % _label(gpu)
        with self.at(gpu, "reading its virtualization mode"):
            virt = self.nvml.virtualization(target.device)["mode"]
        if virt == "vgpu" and entry["mig_enabled"]:
            # nvml.h: GPU instance creation returns NOT_SUPPORTED "in vGPU guest"; MIG-backed vGPU is set on the host.
            return ("%s is a vGPU guest: MIG GPU instances cannot be created inside a vGPU VM; set MIG on the "
                    "hypervisor and give the VM a MIG-backed vGPU profile" % _label(gpu))
        pci_id = int(gpu["pci_device_id"], 16)
        if entry["mig_enabled"]:
            below = models.below_minimum(pci_id, self.driver)
            if below:
                return "%s: %s" % (_label(gpu), below)
        table = target.table
        if entry["mig_enabled"] and entry["mig_devices"] and not table.profiles:
            # R535 and older answer NOT_SUPPORTED to profile queries while MIG is disabled (mig-parted 219e780d).
            documented = models.documented_table(pci_id, self.driver)
            if documented is None:
                return ("%s: NVML (driver %s) lists no GPU instance profiles while MIG mode is %s, and the collection "
                        "has no documented table for PCI device %s; enable MIG first (mig-devices: {}) and run again"
                        % (_label(gpu), self.driver, mode["current"], gpu["pci_device_id"]))
            target.table = table = documented
            target.table_source = res["profile_table"] = "documented"
        unknown = geometry.unknown_profiles(table, entry["mig_devices"])
        if unknown:
            return "%s: profile(s) %s not offered (this GPU offers %s); %s" % (
                _label(gpu), ", ".join(unknown), ", ".join(table.names()) or "none",
                models.missing_profiles_hint(pci_id, self.driver, unknown))
        try:
            plan = geometry.plan_gpu(table, mode, gpu["instances"], entry, mode_change_resets=self.predict_reset(target, virt))
        except geometry.MigError as e:
            return "%s: cannot apply {%s}: %s" % (_label(gpu), geometry.describe_request(entry["mig_devices"]), e)
        target.plan = plan
        res["changed"] = plan["changed"]
        res["reset_required"] = plan["reset_required"]
        res["actions"] = plan["actions"]
        res["after"] = geometry.predicted_after(mode, gpu["instances"], plan, table)
        return None

    def predict_reset(self, target: Target, virt: Optional[str] = None) -> bool:
        """Whether a mode change will wait for a reset: on Ampere when the driver cannot reset the GPU itself, in a
        pass-through VM (nvml.h: RESET_REQUIRED), while processes hold it or while host GPU clients do
        (nvidia-persistenced, DCGM's nv-hostengine, the nvidia_drm module: IN_USE, _gpu.nvml.host_gpu_clients). Hopper
        switches at once."""
        if self.nvml.architecture(target.device) not in RESET_ARCHES:
            return False
        virt = virt or self.nvml.virtualization(target.device)["mode"]
        return virt == "passthrough" or bool(target.gpu.get("processes")) or bool(self.host_clients)

    def after_mode(self, device: Device) -> list[dict[str, Any]]:
        """After a MIG mode change took effect: a new NVML session, fresh handles, the live profile table (checked
        against the documented one the plan used, if any) and the creations planned again on the GPU as it is."""
        (target,) = [t for t in self.targets if t.device is device]
        self.nvml.reopen()
        self.nvml.rebind(t.device for t in self.targets)
        live = models.with_documented_counts(target.gpu["pci_device_id"], self.nvml.profiles(target.device))
        target.device.table = live
        entry, plan = target.entry, target.plan
        if target.table_source == "documented":
            used = geometry.gi_profile_names(entry["mig_devices"])
            diff = models.disagreements(target.table, live, used)
            if diff:
                raise NvmlError("the driver's profile table differs from the documented one the plan was checked "
                                "against (%s); nothing was created" % "; ".join(diff))
        target.table = live
        fresh = self.nvml.refresh(target.device).info
        try:
            again = geometry.plan_gpu(live, fresh["mig_mode"], fresh["instances"], entry)
        except geometry.MigError as e:
            raise NvmlError("the plan no longer fits the GPU after the MIG mode change: %s" % e)
        plan["target_counts"] = again["target_counts"]
        return [a for a in again["actions"] if a["action"] in ("create_gi", "create_ci")]

    def check_processes(self) -> list[str]:
        errors = []
        for target in self.targets:
            if not target.changes():
                continue
            procs = blocking_processes(target.gpu, target.plan)
            if procs:
                errors.append("%s has running processes (PID %s) on instances that would change; stop them or use force=true"
                              % (_label(target.gpu), ", ".join(str(p["pid"]) for p in procs)))
        return errors

    def apply(self) -> None:
        self.applying = True
        done: list[Target] = []
        for target in self.targets:
            plan, gpu, res = target.plan, target.gpu, target.result
            if not target.changes():
                continue
            try:
                outcome = self.nvml.apply(target.device, plan, after_mode=self.after_mode)
            except ApplyError as e:
                try:
                    fresh = self.nvml.refresh(target.device).info
                    res["after"] = geometry.summarize(fresh["mig_mode"], fresh["instances"])
                except self.nvml.nv.NVMLError:
                    pass
                res["changed"] = not e.restored
                self.fail("%s: %s%s" % (gpu_label(gpu), e, self.undo(done)))
            res["reset_required"] = outcome["reset_required"]
            if outcome["pending_reason"]:
                res["pending_reason"] = outcome["pending_reason"]
                if outcome["pending_reason"] == "in_use" and self.host_clients and not gpu.get("processes"):
                    res["pending_reason"] = "host_clients"
            if outcome["deferred"]:
                # Instances wait for the reset; report only what was done.
                res["actions"] = [a for a in res["actions"] if a["action"] not in ("create_gi", "create_ci")]
            try:
                with self.at(gpu, "reading its geometry after the change"):
                    fresh = self.nvml.refresh(target.device).info
            except GpuError as e:
                self.fail("%s%s" % (e, self.undo(done)))
            res["after"] = geometry.summarize(fresh["mig_mode"], fresh["instances"])
            if not outcome["reset_required"] and target.entry["mig_enabled"] and \
                    not geometry.geometry_matches(fresh["instances"], plan["target_counts"]):
                self.fail("%s: verification failed: the GPU shows %s instead of %s%s"
                          % (gpu_label(gpu), geometry.describe_request(geometry.current_counts(fresh["instances"])),
                             geometry.describe_request(plan["target_counts"]), self.undo(done)))
            done.append(target)

    def undo(self, done: list[Target]) -> str:
        """Put the GPUs this run already changed back to their geometry before it, newest first.

        One module run is one host's change: a failure on a later GPU must not leave earlier ones on the new layout
        while the play reports the host as failed. Returns a note for the error message.
        """
        notes = []
        for target in reversed(done):
            gpu, res = target.gpu, target.result
            before = {"devices": "all", "mig_enabled": gpu["mig_mode"]["current"] == "enabled",
                      "mig_devices": geometry.current_counts(gpu["instances"])}
            try:
                with self.at(gpu, "reading its geometry to restore it"):
                    fresh = self.nvml.refresh(target.device)
                back = geometry.plan_gpu(target.table, fresh.info["mig_mode"], fresh.info["instances"], before,
                                         mode_change_resets=self.predict_reset(target))
                if back["changed"]:
                    self.nvml.apply(fresh, back)
                with self.at(gpu, "reading its restored geometry"):
                    now = self.nvml.refresh(target.device).info
                res["after"] = geometry.summarize(now["mig_mode"], now["instances"])
                res["changed"] = back["reset_required"]
                notes.append("GPU %d restored" % gpu["index"])
            except GpuError as e:
                notes.append("GPU %d changed by this run could not be restored: %s" % (gpu["index"], e))
            except (geometry.MigError, NvmlError) as e:
                notes.append("%s changed by this run could not be restored: %s" % (gpu_label(gpu), e))
        return " (%s)" % "; ".join(notes) if notes else ""

    def fail(self, msg: str, applied: bool = True) -> NoReturn:
        """Fail with the per-GPU results; before apply nothing changed, whatever the plan said."""
        changed = applied and any(r["changed"] for r in self.results)
        raise RunError(msg, {"gpus": self.results, "changed": changed, "nvml_calls": self.nvml.calls,
                             "reset_required": any(r["reset_required"] for r in self.results)})


def run(params: dict[str, Any], check_mode: bool = False, nvml: Optional[Nvml] = None) -> tuple[dict[str, Any], list[str]]:
    """Take the per-host lock, plan and (unless ``check_mode``) apply; returns (result, warnings) or raises RunError.

    ``params``: ``config`` and ``selected``, or ``devices``; ``force``; ``lock_path`` (default
    host_lock.default_path()), ``lock_holder``, ``lock_timeout`` and ``lock_supersede`` (an interrupted roll's holder,
    whose leases are not waited for).
    """
    nvml = nvml or Nvml()
    runner = Runner(params, nvml)
    try:
        entries = runner.entries()
    except geometry.MigError as e:
        raise RunError("invalid MIG configuration: %s" % e)
    # Check mode takes the lock too, shared: a plan read while another run rebuilds the GPUs would describe a
    # half-built layout, but plans do not disturb each other. A user who cannot create the lock file still plans,
    # with a warning.
    lock = host_lock.HostLock(params.get("lock_path") or host_lock.default_path(),
                              params.get("lock_holder") or DEFAULT_HOLDER, timeout=params.get("lock_timeout") or 0,
                              shared=check_mode, supersede=params.get("lock_supersede") or "")
    try:
        lock.acquire()
    except host_lock.LockHeld as e:
        raise RunError("%s; nothing was changed" % e, {"changed": False, "lock": dict(lock.info(), held_by=e.held_by)})
    except host_lock.LockError as e:
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


def _run_locked(runner: Runner, entries: list[dict[str, Any]], params: dict[str, Any], check_mode: bool,
                nvml: Nvml) -> tuple[dict[str, Any], list[str]]:
    if not nvml.open():
        raise RunError("NVML is not available: %s" % nvml.reason)
    held: list[tuple[Target, list[int]]] = []
    try:
        try:
            errors = runner.plan(entries)
        except geometry.MigError as e:
            errors = [str(e)]
        if errors:
            runner.fail("nothing was changed: " + "; ".join(errors), applied=False)
        if not params.get("force"):
            errors = runner.check_processes()
            if errors:
                runner.fail("nothing was changed: " + "; ".join(errors), applied=False)
        # The processes on what a change takes away, as the plan read them (named with the disruptions).
        held = [(t, [p["pid"] for p in blocking_processes(t.gpu, t.plan)]) for t in runner.targets if t.changes()]
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
                "to create the instances" % (r["index"], r["model"], pending_why(r.get("pending_reason"), runner))
                for r in results if r["reset_required"]]
    # The GPUs to reset, by PCI bus id and together in one request, as mig-parted resets them (NVIDIA/mig-parted
    # cmd/nvidia-mig-parted/util/device.go nvmlResetAllGPUs: `nvidia-smi -r -i <bus id>,...`): NVML's indexes are
    # not guaranteed to stay the same (nvml.h nvmlDeviceGetHandleByIndex), the bus id is.
    out = {"changed": any(r["changed"] for r in results), "gpus": results,
           "reset_required": any(r["reset_required"] for r in results),
           "reset_bus_ids": [r["pci_bus_id"] for r in results if r["reset_required"]],
           "host_clients": runner.host_clients, "nvml_calls": nvml.calls,
           "disruptions": [d for t, pids in held for d in geometry.gpu_disruptions(t.result, pids)]}
    return out, runner.notes + warnings


def diff(out: Mapping[str, Any]) -> Any:
    """The module's diff: its disruptions first (disruption.diff_first), then the geometry before and after of each
    GPU that changes."""
    changed = [r for r in out["gpus"] if r["changed"]]
    return disruption.diff_first(out.get("disruptions") or [], {
        "before": dict(("gpu%d" % r["index"], r["before"]) for r in changed),
        "after": dict(("gpu%d" % r["index"], r["after"]) for r in changed)})


# ---- the boot-time re-apply's declaration (roles/mig_reconfigure boot_install.yml writes it) --------------------------

def declaration(params: Mapping[str, Any]) -> dict[str, Any]:
    """What the role writes into the boot-time re-apply's declaration for the module parameters ``params``
    (``config``, ``selected``, ``lock_path``, ``boot_declaration.stamp``): the applier reads the first three."""
    return {"config": params["config"], "selected": params["selected"], "lock_path": params["lock_path"],
            "stamp": (params.get("boot_declaration") or {}).get("stamp") or ""}


def declaration_current(path: str, expected: Mapping[str, Any]) -> bool:
    """The file at ``path`` holds exactly ``expected`` (as JSON); a missing or unreadable file does not."""
    try:
        with open(path, encoding="utf-8") as fh:
            return bool(json.load(fh) == dict(expected))
    except (OSError, ValueError):
        return False
