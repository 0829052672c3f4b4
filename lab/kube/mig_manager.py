"""The GPU Operator's mig-manager for the lab: its reconfigure flow, applied to a node's gpusim state.

Each step follows NVIDIA/mig-parted (cited per function): ``pkg/mig/reconfigure/reconfigure.go`` ``Run`` for the
label-driven flow, ``cmd/nvidia-mig-parted/apply/mode.go`` ``ApplyMigMode`` for the mode change and GPU reset,
``pkg/mig/config/config.go`` ``SetMigConfig`` for the instances (NVML's automatic placement, every ordering of
the flattened profile list tried until one succeeds, the GPU cleared when none does), ``assert`` for "already
applied". This is lab code: it reads gpusim's own rules (lab/gpusim/gpusim/machine.py), never the collection's.

The Kubernetes side (labels, pods) is the caller's (gpu_operator.py): ``reconfigure`` takes a ``k8s`` object with
``labels()``, ``set_labels(dict)``, ``delete_pods(selector)``, ``wait_pods_gone(selector=None,
node_selector_key=None)``, ``config()`` (the config file's text as the container reads it now) and ``sleep()``.
"""

from __future__ import annotations

import itertools
import os
import sys

import yaml

GPUSIM_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gpusim")
# gpusim's package only, and lab/gpusim off sys.path again afterwards: this process's import path stays its own.
sys.path.insert(0, GPUSIM_DIR)
try:
    from gpusim import machine, models, state as gstate  # noqa: E402  pylint: disable=wrong-import-position
finally:
    sys.path.remove(GPUSIM_DIR)

CONFIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"
DEPLOY_LABEL = "nvidia.com/gpu.deploy.mig-manager"
OPERANDS = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm")
# reconfigure.go waitForPodsToBeDeleted: the operand pods its paused labels take off the node (the DaemonSet
# controller deletes them), then DaemonSet pods selecting on the client label; the validators it deletes itself
# (deletePod); restartValidatorPod.
OPERAND_PODS = ("app=nvidia-device-plugin-daemonset", "app=gpu-feature-discovery", "app=nvidia-dcgm-exporter",
                "app=nvidia-dcgm")
CLIENT_LABEL = "nvidia.com/gpu.deploy.client"
VALIDATION_PODS = ("app=nvidia-cuda-validator", "app=nvidia-device-plugin-validator")
VALIDATOR_POD = "app=nvidia-operator-validator"


class MigManagerError(Exception):
    pass


# --- mig-parted configs ---------------------------------------------------------------------------------------------

def selected_entries(config_text, selected):
    """mig-parted ``assert --valid-config``: the selected config's entries, or MigManagerError."""
    try:
        doc = yaml.safe_load(config_text or "")
    except yaml.YAMLError as exc:
        raise MigManagerError(f"config is not YAML: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("version") != "v1" or not isinstance(doc.get("mig-configs"), dict):
        raise MigManagerError("config is not a mig-parted v1 document")
    if selected not in doc["mig-configs"]:
        raise MigManagerError(f"selected mig-config {selected!r} not present")
    entries = doc["mig-configs"][selected]
    if not isinstance(entries, list) or not entries:
        raise MigManagerError(f"mig-config {selected!r} has no entries")
    return entries


def _filters(entry):
    f = entry.get("device-filter")
    if f is None:
        return None
    return [int(x.split(":")[0], 16) for x in (f if isinstance(f, list) else [f])]


def entry_for(entries, index, gpu):
    """The entry mig-parted applies to GPU ``index``: the last one whose devices and device-filter match."""
    found = None
    pci = models.MODELS[gpu["model"]].pci_device_id
    for e in entries:
        devs = e.get("devices")
        if devs != "all" and index not in (devs or []):
            continue
        filters = _filters(e)
        if filters is not None and pci not in filters:
            continue
        found = e
    return found


def _profile(gpu, name):
    """(GI profile, CI slices) for a mig-parted name on this GPU (go-nvlib naming via gpusim's model table)."""
    model = machine.model_of(gpu)
    for prof in model.gi_profiles:
        for c in models.CI_PLACEMENTS[prof.slices]:
            if models.ci_name(model, prof, c) == name:
                return prof, c
    raise MigManagerError(f"MIG profile {name!r} not found on this GPU")


def current_config(gpu):
    """mig-parted ``GetMigConfig``: profile name -> count of compute instances."""
    model = machine.model_of(gpu)
    out = {}
    for gi in gpu.get("gpu_instances") or []:
        prof = models.gi_profile_by_id(model, gi["profile_id"])
        for ci in gi.get("compute_instances") or []:
            name = models.ci_name(model, prof, ci["slices"])
            out[name] = out.get(name, 0) + 1
    return out


def _wanted(entry):
    return {k: v for k, v in (entry.get("mig-devices") or {}).items() if v}


def assert_applied(st, entries, mode_only=False):
    """mig-parted ``assert``: every GPU is matched, its current mode is the wanted one and (unless mode_only) its
    instances are the wanted ones (assert/config.go: "not all GPUs match the specified config")."""
    for i, gpu in enumerate(st["gpus"]):
        entry = entry_for(entries, i, gpu)
        capable = machine.model_of(gpu).mig_capable
        if entry is None:
            return False
        if not capable:
            if entry.get("mig-enabled") and entry.get("devices") != "all":
                return False
            continue
        if bool(gpu["mig_mode"]) != bool(entry.get("mig-enabled")):
            return False
        if not mode_only and entry.get("mig-enabled") and current_config(gpu) != _wanted(entry):
            return False
    return True


# --- on-node apply --------------------------------------------------------------------------------------------------

def _clear(st, gpu):
    """config.go ClearMigConfig: destroy every CI, then its GI."""
    for gi in list(gpu["gpu_instances"]):
        for ci in list(gi["compute_instances"]):
            machine.destroy_ci(st, gpu, gi, ci["id"])
        machine.destroy_gi(st, gpu, gi["id"])


def apply_mode(path, entries):
    """apply/mode.go ApplyMigMode: clear and set the mode of every matched MIG GPU, then reset all GPUs if any
    change is pending (util.ResetAllGPUs). Returns True when a change is still pending afterwards."""
    with gstate.transaction(path) as st:
        pending = False
        for i, gpu in enumerate(st["gpus"]):
            entry = entry_for(entries, i, gpu)
            if entry is None or not machine.model_of(gpu).mig_capable:
                continue
            want = 1 if entry.get("mig-enabled") else 0
            if gpu["mig_mode"] == 1:
                _clear(st, gpu)
            machine.set_mig_mode(st, gpu, want)
            pending = pending or gpu["mig_mode"] != gpu["mig_mode_pending"]
    if not pending:
        return False
    try:
        with gstate.transaction(path) as st:
            for gpu in st["gpus"]:
                if machine.model_of(gpu).mig_capable and gpu["mig_mode"] != gpu["mig_mode_pending"]:
                    machine.reset_gpu(st, gpu)
    except machine.Fault:
        pass  # reset refused (pass-through VM, GPU in use): the assert after it decides
    with gstate.transaction(path) as st:
        return any(machine.model_of(g).mig_capable and g["mig_mode"] != g["mig_mode_pending"] for g in st["gpus"])


def _orderings(flat):
    """config.go iteratePermutationsUntilSuccess: every distinct ordering, the sorted one first."""
    seen = set()
    for perm in itertools.permutations(flat):
        if perm not in seen:
            seen.add(perm)
            yield perm


def _flatten(gpu, wanted):
    """types.MigConfig.Flatten: one item per instance, larger G first, then larger C, then attributes."""
    items = []
    for name, count in wanted.items():
        prof, c = _profile(gpu, name)
        items += [(prof.slices, c, prof.suffix, name)] * int(count)
    items.sort(key=lambda t: (-t[0], -t[1], t[2]))
    return [t[3] for t in items]


def set_config(st, gpu, wanted):
    """config.go SetMigConfig on one GPU: clear, then create GIs with NVML's automatic placement and their CIs,
    reusing the last GI while it has room for a CI of the same GI profile; try the next ordering on failure."""
    if gpu["mig_mode"] != 1:
        raise MigManagerError("error asserting MIG enabled: MIG mode is disabled")
    flat = _flatten(gpu, wanted)
    for order in itertools.islice(_orderings(flat), 5040):
        _clear(st, gpu)
        try:
            last = None
            for name in order:
                prof, c = _profile(gpu, name)
                if last is not None and last[0] == prof.id and machine.ci_free_starts(last[1], c, prof.slices):
                    gi = last[1]
                else:
                    gi = machine.create_gi(st, gpu, prof.id)
                    last = (prof.id, gi)
                machine.create_ci(st, gpu, gi, models.CI_INDEX_BY_SLICES[c])
            return
        except machine.Fault:
            continue
    _clear(st, gpu)
    raise MigManagerError("error attempting multiple config orderings: all orderings failed")


def apply_config(path, entries):
    """mig-parted ``apply`` (after the mode): the instances of every matched MIG-enabled GPU."""
    with gstate.transaction(path) as st:
        for i, gpu in enumerate(st["gpus"]):
            entry = entry_for(entries, i, gpu)
            if entry is None or not entry.get("mig-enabled") or not machine.model_of(gpu).mig_capable:
                continue
            set_config(st, gpu, _wanted(entry))


def reboot(path):
    with gstate.transaction(path) as st:
        machine.reboot(st)


# --- the label-driven flow ------------------------------------------------------------------------------------------

def _maybe_paused(value):
    return "false" if value == "false" else "paused-for-mig-change"


def _maybe_true(value):
    return "false" if value == "false" else "true"


def _operand_labels(labels, fn):
    out = {f"nvidia.com/gpu.deploy.{op}": fn(labels.get(f"nvidia.com/gpu.deploy.{op}", "")) for op in OPERANDS}
    if labels.get("nvidia.com/gpu.deploy.client"):
        out["nvidia.com/gpu.deploy.client"] = fn(labels["nvidia.com/gpu.deploy.client"])
    return out


def reconfigure(k8s, path, selected, with_reboot=False):
    """reconfigure.go Run for one value of nvidia.com/mig.config; returns the final state label."""
    labels = k8s.labels()
    current_state = labels.get(STATE_LABEL, "")

    def finish(result):
        # setState: restore the operand labels (maybeSetTrue) first, then the state.
        k8s.set_labels(dict(_operand_labels(labels, _maybe_true), **{STATE_LABEL: result}))
        return result

    try:
        entries = selected_entries(k8s.config(), selected)
    except MigManagerError as exc:
        k8s.log(f"validate config: {exc}")
        return finish("failed")
    with gstate.transaction(path) as st:
        applied = assert_applied(st, entries)
        mode_ok = assert_applied(st, entries, mode_only=True)
    if applied:
        return finish("success")
    if not mode_ok and current_state == "rebooting":
        k8s.log("MIG mode change did not take effect after rebooting")
        return finish("failed")
    k8s.set_labels({STATE_LABEL: "pending"})
    k8s.sleep()
    k8s.set_labels(_operand_labels(labels, _maybe_paused))
    # waitForPodsToBeDeleted: a pod that does not go within the timeout ends the run with an error and no setState,
    # so the state stays "pending" and the operands paused (reconfigure.go Run).
    for selector in OPERAND_PODS:
        if not k8s.wait_pods_gone(selector):
            k8s.log(f"{selector} pod did not shutdown")
            return "pending"
    if not k8s.wait_pods_gone(node_selector_key=CLIENT_LABEL):
        k8s.log("third-party gpu client pods did not shutdown")
        return "pending"
    for selector in VALIDATION_PODS:
        k8s.delete_pods(selector)
    k8s.sleep()
    try:
        still_pending = apply_mode(path, entries)
    except (machine.Fault, MigManagerError) as exc:
        k8s.log(f"apply mode: {exc}")
        return finish("failed")
    if still_pending and with_reboot:
        k8s.set_labels({STATE_LABEL: "rebooting"})
        reboot(path)
        k8s.sleep()
        # The mig-manager pod starts again after the reboot and runs with state "rebooting".
        return reconfigure(k8s, path, selected, with_reboot)
    try:
        apply_config(path, entries)
    except (machine.Fault, MigManagerError) as exc:
        k8s.log(f"apply config: {exc}")
        return finish("failed")
    k8s.delete_pods(VALIDATOR_POD)
    return finish("success")
