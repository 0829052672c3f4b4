#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: mig_geometry
short_description: Apply a MIG geometry (mig-parted v1 configuration) to the NVIDIA GPUs of a host
version_added: 0.1.0
description:
  - Takes a mig-parted C(v1) document (O(config) with O(selected)) or its entries directly (O(devices)), with
    mig-parted's own keys C(devices), C(device-filter), C(mig-enabled) and C(mig-devices).
  - Validates every targeted GPU's target against that GPU's own profiles and possible placements, read from NVML,
    before changing anything. An impossible layout fails naming the GPU index, model, requested profiles and why;
    no GPU is touched.
  - Chooses explicit placements for every GPU instance, so layouts that depend on creation order with NVML's
    automatic placement (for example V(1g.5gb) twice, V(2g.10gb) and V(3g.20gb) on an A100) always work.
  - Only GPUs whose geometry differs are touched. GPU instances that already match the target are kept when the rest
    of the target fits around them; otherwise the GPU is cleared and rebuilt. Compute instances are destroyed before
    GPU instances, MIG mode is changed when needed, then GPU instances are created with their placements, then their
    compute instances, and the result is verified.
  - If a step fails, the GPU's previous geometry is restored, and so is that of every GPU the same run already changed;
    the module fails saying what happened on each.
author:
  - gpuops.provision contributors (@gpuops)
extends_documentation_fragment:
  - gpuops.provision._attributes
attributes:
  check_mode:
    support: full
    details:
      - Reports per GPU the geometry before and after and the actions it would take.
      - Whether a MIG mode change waits for a GPU reset is predicted. On Ampere (A100, A30) it does in a pass-through VM
        or while processes hold the GPU; Hopper and later switch at once.
  diff_mode:
    support: full
  idempotent:
    support: full
options:
  config:
    description:
      - A mig-parted configuration document (C(version=v1), C(mig-configs)), as a dictionary.
      - To use a mig-parted YAML file, read it with the P(ansible.builtin.file#lookup) lookup and the C(from_yaml) filter (see the examples).
      - Mutually exclusive with O(devices).
    type: dict
  selected:
    description:
      - Name of the entry of C(mig-configs) in O(config) to apply. May be omitted when O(config) has only one.
    type: str
  devices:
    description:
      - The entries of one mig-parted configuration, given directly instead of O(config).
      - Each entry has C(devices) (V(all) or a list of GPU indexes), optional C(device-filter) (PCI device ids like
        V(0x20B010DE), a string or a list), C(mig-enabled) and, when MIG is enabled, C(mig-devices) (profile name to count).
      - When several entries match a GPU, the last one applies, as with mig-parted. GPUs matched by no entry are left alone.
    type: list
    elements: dict
  force:
    description:
      - Change GPUs even when processes run on instances that would be destroyed (or on a GPU whose MIG mode changes).
      - Without it such a GPU fails the module naming the process ids, before any GPU is changed.
    type: bool
    default: false
requirements:
  - nvidia-ml-py (import name C(pynvml)) on the managed host
notes:
  - Profile names are those mig-parted computes (C(1g.5gb), C(3g.20gb), C(1c.3g.20gb) for a 1-slice compute instance
    in a 3g GPU instance); NVML's own name for a profile is accepted too. A plain GPU-instance name gets one full-size
    compute instance, as with mig-parted.
  - The MIG mode is changed first, as mig-parted does. A mode change that takes effect at once (Hopper, or an idle
    bare-metal Ampere GPU that the driver resets itself) is followed by a new NVML session, a fresh read of the
    GPU's profile table and the instance creation, in the same run. When the change waits for a GPU reset (Ampere in
    a pass-through VM, or a GPU that was not idle) the module reports RV(reset_required=true) with
    RV(gpus[].pending_reason) and creates the instances on its next run after the reset.
  - Drivers of the R535 branch and older do not list GPU instance profiles while MIG mode is disabled. The target is
    then validated against the profile table NVIDIA documents for the GPU model (by PCI device id), and checked
    against the driver's own table right after the mode change; if they disagree the mode is set back and the module
    fails, having created nothing. RV(gpus[].profile_table) says which table the plan used.
  - A GPU whose driver is older than NVIDIA's documented minimum for MIG on that model (A100 R450, A30 R460,
    H100 R525, H200 R550), a requested profile the loaded driver does not offer, a GPU in a vGPU guest, and a GPU
    whose process list NVML refuses, all fail before any GPU is changed, naming the GPU and the reason.
  - GPUs without MIG support are skipped when matched by C(devices=all) or C(mig-enabled=false), and fail otherwise.
seealso:
  - module: gpuops.provision.gpu_info
  - name: NVIDIA mig-parted
    description: The configuration format this module accepts.
    link: https://github.com/NVIDIA/mig-parted
"""

EXAMPLES = r"""
- name: Apply a mig-parted configuration file, config "balanced"
  gpuops.provision.mig_geometry:
    config: "{{ lookup('ansible.builtin.file', 'files/mig-config.yaml') | from_yaml }}"
    selected: balanced
  register: mig

- name: One 3g and two 2g instances on every GPU
  gpuops.provision.mig_geometry:
    devices:
      - devices: all
        mig-enabled: true
        mig-devices:
          3g.20gb: 1
          2g.10gb: 2

- name: Only A100 40GB GPUs (PCI id 0x20B010DE); GPU 3 without MIG
  gpuops.provision.mig_geometry:
    devices:
      - devices: all
        device-filter: "0x20B010DE"
        mig-enabled: true
        mig-devices: {"1g.5gb": 7}
      - devices: [3]
        mig-enabled: false

- name: Plan only (check mode) and show what would change
  gpuops.provision.mig_geometry:
    devices:
      - devices: all
        mig-enabled: true
        mig-devices: {"7g.40gb": 1}
  check_mode: true
  diff: true
  register: plan
"""

RETURN = r"""
gpus:
  description: One entry per GPU of the host, in NVML index order.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: NVML index.
      type: int
      sample: 0
    uuid:
      description: GPU UUID.
      type: str
      sample: GPU-5b7f0e1c-8c3f-4d0a-9a51-3c1d2e4f5a6b
    model:
      description: Product name.
      type: str
      sample: NVIDIA A100-SXM4-40GB
    selected:
      description: Whether an entry of the configuration applies to this GPU.
      type: bool
    before:
      description: Geometry before the run, C(mig_mode) (C(current), C(pending)), C(mig_devices) (count per profile)
        and C(instances) (C(profile), C(placement), C(compute_instances)).
      type: dict
    after:
      description: Geometry after the run (predicted in check mode).
      type: dict
    changed:
      description: Whether this GPU was (or in check mode would be) changed.
      type: bool
    reset_required:
      description: Whether a MIG mode change waits for a GPU reset (or reboot) before the target can be completed.
      type: bool
    actions:
      description: Ordered actions taken (or planned), such as C(destroy_ci), C(destroy_gi), C(set_mig_mode),
        C(create_gi) with its placement and C(create_ci). In check mode on a GPU that needs a reset the creations
        are listed although they happen only on the run after the reset.
      type: list
      elements: dict
    skipped:
      description: Why a selected GPU was left alone (no MIG support), if it was.
      type: str
    mig_capable:
      description: Whether the GPU supports MIG. GPUs no entry selects are reported too, as they are, since the
        device plugin still advertises them.
      type: bool
    profile_table:
      description: Which profile table the plan was checked against, V(nvml) (read from the driver) or
        V(documented) (NVIDIA's table for the model, when the driver lists none while MIG is disabled).
      type: str
      sample: nvml
    pending_reason:
      description: Why a MIG mode change is still pending, when it is, V(in_use) (the GPU was not idle) or
        V(reset_required) (the driver did not reset the GPU, for example in a pass-through VM).
      type: str
      returned: when a mode change is pending after this run
reset_required:
  description: Whether any GPU waits for a reset.
  returned: always
  type: bool
nvml_calls:
  description: Number of NVML calls this run made.
  returned: always
  type: int
  sample: 120
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.provision.plugins.module_utils import _mig, _mig_models
from ansible_collections.gpuops.provision.plugins.module_utils._nvml import RESET_ARCHES, ApplyError, Nvml, NvmlError


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


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
    def __init__(self, module, nvml):
        self.module = module
        self.nvml = nvml
        self.gpus = []
        self.results = []
        self.applying = False
        self.driver = None

    def entries(self):
        p = self.module.params
        if p["config"] is not None:
            return _mig.parse_config(p["config"], p["selected"])
        return _mig.parse_entries(p["devices"], "devices")

    def plan(self, entries):
        errors = []
        count = self.nvml.count()
        _mig.check_indexes(entries, count)
        self.driver = _text(self.nvml.call("nvmlSystemGetDriverVersion"))
        for index in range(count):
            dev, gpu = self.nvml.identity(index)
            entry = _mig.select_entry(entries, index, int(gpu["pci_device_id"], 16), int(gpu["pci_subsystem_id"], 16))
            if entry is not None and gpu["mig_capable"]:
                self.nvml.fill(dev, gpu, detail=False, strict=True)
            else:
                # Untouched GPUs need no profile or instance reads.
                gpu.update({"_handle": dev, "_table": _mig.ProfileTable([]), "instances": [], "processes": []})
            if gpu["mig_capable"] and entry is None and gpu["mig_mode"]["current"] == "enabled":
                # Not selected, but still advertised by the device plugin: reported as it is.
                gpu["instances"] = self.nvml.instances(dev, self.nvml.profiles(dev, gpu["memory"]["total_bytes"]))
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
        return errors

    def plan_one(self, gpu, res, entry, mode):
        """Plan one selected GPU; returns an error sentence or None."""
        if not gpu["mig_capable"]:
            if entry["devices"] == "all" or not entry["mig_enabled"]:
                res["skipped"] = "GPU does not support MIG"
                return None
            return "%s does not support MIG but the configuration enables MIG on it" % _label(gpu)
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
                self.fail("%s: %s%s" % (_label(gpu), e, self.undo(done)))
            res["reset_required"] = outcome["reset_required"]
            if outcome["pending_reason"]:
                res["pending_reason"] = outcome["pending_reason"]
            if outcome["deferred"]:
                # Instances wait for the reset; report only what was done.
                res["actions"] = [a for a in res["actions"] if a["action"] not in ("create_gi", "create_ci")]
            fresh = self.nvml.refresh(dict(gpu))
            res["after"] = _mig.summarize(fresh["mig_mode"], fresh["instances"])
            if not outcome["reset_required"] and gpu["_entry"]["mig_enabled"] and \
                    not _mig.geometry_matches(fresh["instances"], plan["target_counts"]):
                self.fail("%s: verification failed: the GPU shows %s instead of %s%s"
                          % (_label(gpu), _mig.describe_request(_mig.current_counts(fresh["instances"])),
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
                fresh = self.nvml.refresh(dict(gpu))
                back = _mig.plan_gpu(gpu["_table"], fresh["mig_mode"], fresh["instances"], before,
                                     mode_change_resets=self.predict_reset(gpu))
                if back["changed"]:
                    self.nvml.apply(fresh, back)
                fresh = self.nvml.refresh(dict(gpu))
                res["after"] = _mig.summarize(fresh["mig_mode"], fresh["instances"])
                res["changed"] = back["reset_required"]
                notes.append("GPU %d restored" % gpu["index"])
            except (_mig.MigError, NvmlError, self.nvml.nv.NVMLError) as e:
                notes.append("GPU %d changed by this run could not be restored: %s" % (gpu["index"], e))
        return " (%s)" % "; ".join(notes) if notes else ""

    def fail(self, msg, applied=True):
        """Fail with the per-GPU results; before apply nothing changed, whatever the plan said."""
        changed = applied and any(r["changed"] for r in self.results)
        self.module.fail_json(msg=msg, gpus=self.results, changed=changed,
                              reset_required=any(r["reset_required"] for r in self.results), nvml_calls=self.nvml.calls)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            config=dict(type="dict"),
            selected=dict(type="str"),
            devices=dict(type="list", elements="dict"),
            force=dict(type="bool", default=False),
        ),
        mutually_exclusive=[("config", "devices")],
        required_one_of=[("config", "devices")],
        required_by={"selected": "config"},
        supports_check_mode=True,
    )
    nvml = Nvml()
    runner = Runner(module, nvml)
    try:
        entries = runner.entries()
    except _mig.MigError as e:
        module.fail_json(msg="invalid MIG configuration: %s" % e)
    if not nvml.open():
        module.fail_json(msg="NVML is not available: %s" % nvml.reason)
    try:
        try:
            errors = runner.plan(entries)
        except _mig.MigError as e:
            errors = [str(e)]
        if errors:
            runner.fail("nothing was changed: " + "; ".join(errors), applied=False)
        if not module.params["force"]:
            errors = runner.check_processes()
            if errors:
                runner.fail("nothing was changed: " + "; ".join(errors), applied=False)
        if not module.check_mode:
            runner.apply()
    except nvml.nv.NVMLError as e:
        runner.fail("NVML error: %s" % nvml.describe(e), applied=runner.applying)
    except NvmlError as e:
        runner.fail(str(e), applied=runner.applying)
    finally:
        nvml.close()
    results = runner.results
    changed = any(r["changed"] for r in results)
    for r in results:
        if r["reset_required"]:
            why = {"in_use": " (the GPU was not idle: stop its clients, then reset it)",
                   "reset_required": " (the driver did not reset the GPU; in a pass-through VM only a reboot does)"}
            module.warn("GPU %d (%s): the MIG mode change takes effect after a GPU reset or reboot%s; run again afterwards "
                        "to create the instances" % (r["index"], r["model"], why.get(r.get("pending_reason"), "")))
    out = {"changed": changed, "gpus": results, "reset_required": any(r["reset_required"] for r in results),
           "nvml_calls": nvml.calls}
    if module._diff:
        changed_gpus = [r for r in results if r["changed"]]
        out["diff"] = {"before": dict(("gpu%d" % r["index"], r["before"]) for r in changed_gpus),
                       "after": dict(("gpu%d" % r["index"], r["after"]) for r in changed_gpus)}
    module.exit_json(**out)


if __name__ == "__main__":
    main()
