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
    the module fails saying what happened on each. An NVML error names the GPU (index, model, UUID, PCI address),
    the step and the NVML function.
  - Every run holds the per-host MIG lock (O(lock_path)) from before the first NVML read to after the last write,
    rollback included. A run that finds the lock held fails at once, having read and changed nothing, naming the
    holder (who, pid, host, since when); O(lock_timeout) lets it wait instead. The role
    C(gpuops.provision.mig_reconfigure) and its boot-time re-apply take the same lock.
extends_documentation_fragment:
  - gpuops.provision._attributes
attributes:
  check_mode:
    support: full
    details:
      - Reports per GPU the geometry before and after and the actions it would take.
      - Takes the per-host lock too, shared, so a plan is never read while another run rebuilds the GPUs (it would
        describe a half-built layout), while plans (this module's, node preflight's, the role's plan phase) do not
        refuse each other. A user who may not create the lock file still plans, with a warning, unless a changing run
        holds the lock.
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
  lock_path:
    description:
      - The per-host MIG lock file. The run holds C(flock) on it for its whole duration, exclusively, or shared in
        check mode, so no run changes the GPUs of a host while another changes them or plans on them. The kernel
        drops the lock when the process ends, so a run that crashed or was killed leaves no lock behind. The file
        holds the holder's record and is removed when the last holder releases the lock.
      - Runs of this module, the role C(gpuops.provision.mig_reconfigure) and its boot-time re-apply on one host must
        use the same path to exclude each other; all default to this one.
      - When not set, the environment variable E(GPUOPS_MIG_LOCK) is used if set (the lab and tests use it), else
        V(/run/gpuops/mig.lock). The directory is created when missing.
    type: path
    default: /run/gpuops/mig.lock
  lock_holder:
    description:
      - Who this run is, recorded in the lock and named to any run it refuses.
      - The role C(gpuops.provision.mig_reconfigure) keeps the lock for a node's whole reconfiguration, across its
        tasks, under a holder naming its run. A run with that same O(lock_holder) runs inside it (and renews it); any
        other run is refused, naming it, until the role releases it or it was not renewed for its stale timeout
        (C(mig_reconfigure_lock_stale_after)); then a run that changes the GPUs takes it over, and a check-mode run
        ignores it, with a warning naming the stale holder.
    type: str
    default: gpuops.provision.mig_geometry
  lock_supersede:
    description:
      - The holder of a roll known to have been interrupted (RV(gpuops.provision.roll_lock#module:superseded) of
        M(gpuops.provision.roll_lock)). A lease it left on the lock (its holder, or its holder followed by a space)
        does not hold this run back; a changing run takes it over, a check-mode run ignores it, either with a warning.
    type: str
    default: ""
  boot_declaration:
    description:
      - Compare the boot-time re-apply's declaration file (written by the C(gpuops.provision.mig_reconfigure) role) with
        what it would hold for O(config), O(selected) and O(lock_path), and return RV(boot_declaration_current), so
        that a roll re-installs the boot-time re-apply only where it is out of date. Read only, also in check mode.
    type: dict
    suboptions:
      path:
        description: The declaration file.
        type: path
        required: true
      stamp:
        description: The version of the applier code the role installs with it (recorded in the file).
        type: str
        default: ""
  lock_timeout:
    description:
      - Seconds to wait for another holder to release the lock before failing. V(0) fails at once.
      - A holder that is alive is never forced out; one that has held the lock for long is named with its age and
        pid, so it can be stopped if it hangs.
    type: int
    default: 0
requirements:
  - nvidia-ml-py (import name C(pynvml)) on the managed host
notes:
  - Profile names are those mig-parted computes (C(1g.5gb), C(3g.20gb), C(1c.3g.20gb) for a 1-slice compute instance
    in a 3g GPU instance); NVML's own name for a profile is accepted too. A plain GPU-instance name gets one full-size
    compute instance, as with mig-parted.
  - The MIG mode is changed first, as mig-parted does. A mode change that takes effect at once (Hopper, or an idle
    bare-metal Ampere GPU that the driver resets itself) is followed by a new NVML session, a fresh read of the
    GPU's profile table and the instance creation, in the same run. When the change waits for a GPU reset (Ampere in
    a pass-through VM, a GPU with processes, or while host GPU clients hold the GPUs, namely C(nvidia-persistenced),
    DCGM's C(nv-hostengine) or the C(nvidia_drm) module, read from C(/proc)) the plan and check mode say so, the module
    reports RV(reset_required=true) with RV(gpus[].pending_reason) and RV(reset_bus_ids), and creates the instances
    on its next run after the reset. C(nvidia_drm) and C(nv-hostengine) also make C(nvidia-smi -r) refuse the reset
    (NVIDIA/mig-parted#181); stop or unload them first.
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
boot_declaration_current:
  description: Whether the declaration file of O(boot_declaration) already holds this configuration, selection, lock
    path and applier version (V(false) when it is missing or differs).
  returned: when O(boot_declaration) and O(config) are set
  type: bool
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
    pci_bus_id:
      description: PCI bus id as NVML reports it.
      type: str
      sample: "00000000:17:00.0"
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
      description: Why a MIG mode change is still pending, when it is, V(in_use) (the GPU was not idle),
        V(host_clients) (host GPU clients, RV(host_clients), held it) or V(reset_required) (the driver did not reset
        the GPU, for example in a pass-through VM).
      type: str
      returned: when a mode change is pending after this run
reset_required:
  description: Whether any GPU waits for a reset.
  returned: always
  type: bool
disruptions:
  description:
    - What the run takes away (in check mode would take away) from what runs on the GPUs, GPU by GPU in the apply's
      order - the GPU instances destroyed with their compute instances (with O(force), the processes using them), and
      the MIG mode change, saying when it waits for a GPU reset or reboot that this module does not do. Creations are
      not listed; empty when no GPU changes.
    - With diff mode they come first in the diff, in an entry of their own, before the configuration diff.
  returned: success
  type: list
  elements: str
  sample: ["destroy the GPU instances 7g.40gb x1 of GPU 0 (NVIDIA A100-SXM4-40GB) with their compute instances"]
reset_bus_ids:
  description: PCI bus ids of the GPUs that wait for a reset, to reset together in one C(nvidia-smi -r -i <ids>) as
    mig-parted does.
  returned: when the run got past planning
  type: list
  elements: str
  sample: ["00000000:17:00.0", "00000000:31:00.0"]
host_clients:
  description: Host GPU clients found running (C(nvidia-persistenced), C(nv-hostengine), C(nvidia_drm)); while any
    runs, a MIG mode change on Ampere waits for a GPU reset.
  returned: when the run got past planning
  type: list
  elements: str
nvml_calls:
  description: Number of NVML calls this run made.
  returned: always
  type: int
  sample: 120
lock:
  description: The per-host MIG lock this run took, or the holder that refused it.
  returned: unless the configuration is invalid
  type: dict
  contains:
    path:
      description: The lock file.
      type: str
      sample: /run/gpuops/mig.lock
    holder:
      description: This run's O(lock_holder).
      type: str
      sample: gpuops.provision.mig_geometry
    lease:
      description: The holder of the lock kept across tasks that this run ran inside (its own O(lock_holder)), or
        V(null) when it held the lock on its own.
      type: str
    waited:
      description: Seconds this run waited for the lock.
      type: float
      sample: 0.0
    shared:
      description: Whether this run held the lock shared, as a check-mode run does (see O(lock_path)).
      type: bool
    took_over:
      description: A stale lock kept across tasks that this run took over; the same keys as RV(lock.held_by).
      type: dict
      returned: when a stale lock was taken over
    held_by:
      description: Who holds the lock, when this run was refused.
      type: dict
      returned: when the lock was held by another run
      contains:
        kind:
          description: V(run), a process holding the lock now, or V(lease), a lock kept across tasks by a run
            such as the role's.
          type: str
        check_mode:
          description: Whether that run is a check-mode run (a plan), for V(kind=run).
          type: bool
        holder:
          description: The holder's O(lock_holder).
          type: str
          sample: gpuops.provision.mig_reconfigure run 5f0c2a91 (user=alice controller=awx-1 node=gpu-node-1)
        pid:
          description: Its process id (V(null) for a lease).
          type: int
        host:
          description: The host name it recorded.
          type: str
        since:
          description: Since when it holds the lock (UTC, ISO 8601).
          type: str
          sample: "2026-05-04T09:12:00Z"
        age_seconds:
          description: How long it has held the lock.
          type: float
"""

from ansible.module_utils.basic import AnsibleModule, env_fallback

from ansible_collections.gpuops.provision.plugins.module_utils._mig import apply, host_lock


def main():
    module = AnsibleModule(
        argument_spec=dict(
            config=dict(type="dict"),
            selected=dict(type="str"),
            devices=dict(type="list", elements="dict"),
            force=dict(type="bool", default=False),
            lock_path=dict(type="path", default=host_lock.DEFAULT_PATH, fallback=(env_fallback, [host_lock.ENV_PATH])),
            lock_holder=dict(type="str", default=apply.DEFAULT_HOLDER),
            lock_timeout=dict(type="int", default=0),
            lock_supersede=dict(type="str", default=""),
            boot_declaration=dict(type="dict", options=dict(path=dict(type="path", required=True),
                                                            stamp=dict(type="str", default=""))),
        ),
        mutually_exclusive=[("config", "devices")],
        required_one_of=[("config", "devices")],
        required_by={"selected": "config"},
        supports_check_mode=True,
    )
    if module.params["lock_timeout"] < 0:
        module.fail_json(msg="lock_timeout must be 0 or more seconds, got %d" % module.params["lock_timeout"])
    for name in ("lock_path", "lock_holder"):
        if not (module.params[name] or "").strip():
            module.fail_json(msg="%s must not be empty" % name)
    try:
        out, warnings = apply.run(module.params, module.check_mode)
    except apply.RunError as e:
        module.fail_json(msg=str(e), **e.result)
    if module.params["boot_declaration"] and module.params["config"]:
        out["boot_declaration_current"] = apply.declaration_current(module.params["boot_declaration"]["path"],
                                                                    apply.declaration(module.params))
    for w in warnings:
        module.warn(w)
    if module._diff:
        out["diff"] = apply.diff(out)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
