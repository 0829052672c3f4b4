# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a MIG roll over Kubernetes nodes decides, without I/O (used by the mig_reconfigure role's filters).

* The resources a node must advertise once its GPUs have their geometry, as the NVIDIA device plugin counts them.
* The GPU Operator operand labels paused and restored around the change, as mig-manager sets them.
* Whether a drain that "succeeded" in fact timed out.
"""

from __future__ import annotations

from ansible_collections.gpuops.provision.plugins.module_utils import _mig

OPERAND_PREFIX = "nvidia.com/gpu.deploy."
PAUSED = "paused-for-mig-change"
# NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go: the client label is only touched when the node has it.
OPTIONAL_OPERANDS = ("client",)
# kubernetes.core 6.x k8s_drain (K8sDrainAnsible.wait_for_pod_deletion): a drain whose wait_timeout runs out only
# warns with this text and reports success.
DRAIN_TIMEOUT_WARNING = "timeout reached while pods were still running"


class RollError(Exception):
    """Input the roll cannot honour; the message is for the user."""


def is_ci_profile(name):
    """'1c.3g.20gb' (a compute instance smaller than its GPU instance) but not '3g.20gb' or '7c.7g.40gb'."""
    c, g, _gb, _attrs = _mig.parse_profile_name(name)
    return c is not None and c < g


def resource_name(profile, strategy="mixed"):
    """nvidia.com/mig-<profile> (mixed; '+' becomes '.', as the device plugin names them) or nvidia.com/gpu."""
    if strategy == "single":
        return "nvidia.com/gpu"
    return "nvidia.com/mig-" + profile.replace("+", ".")


def expected_resources(gpus, strategy="mixed", ci_profiles_served=False):
    """{resource: count} the device plugin advertises for a node whose GPUs are ``gpus`` (mig_geometry's results).

    Every GPU counts, selected or not: a GPU without MIG (or with MIG disabled) is one nvidia.com/gpu, a MIG GPU
    contributes its MIG devices. The device plugin's mixed strategy registers only profiles whose compute instance
    spans its GPU instance (C == G; NVIDIA/k8s-device-plugin internal/rm/rm.go), so smaller compute instances are
    advertised only when ``ci_profiles_served`` says the node's plugin serves them.
    """
    if strategy not in ("mixed", "single"):
        raise RollError("MIG strategy must be mixed or single, got %r" % (strategy,))
    out = {}
    for gpu in gpus or []:
        after = gpu.get("after") or gpu.get("before")
        enabled = bool(gpu.get("mig_capable", True)) and after is not None and \
            (after.get("mig_mode") or {}).get("current") == "enabled"
        if not enabled:
            out["nvidia.com/gpu"] = out.get("nvidia.com/gpu", 0) + 1
            continue
        for profile, count in sorted((after.get("mig_devices") or {}).items()):
            if is_ci_profile(profile) and not ci_profiles_served:
                continue
            key = resource_name(profile, strategy)
            out[key] = out.get(key, 0) + int(count)
    return out


def advertised_resources(allocatable):
    """The GPU resources of a node's status.allocatable that count: nvidia.com/gpu and nvidia.com/mig-*, above 0."""
    out = {}
    for key, value in (allocatable or {}).items():
        if key == "nvidia.com/gpu" or key.startswith("nvidia.com/mig-"):
            try:
                n = int(value)
            except (TypeError, ValueError):
                continue
            if n > 0:
                out[key] = n
    return out


def ci_profiles_requested(gpus):
    """Sorted CI profile names (C < G) that the planned geometry of the selected GPUs contains."""
    names = set()
    for gpu in gpus or []:
        if not gpu.get("selected"):
            continue
        after = gpu.get("after") or {}
        names.update(p for p in (after.get("mig_devices") or {}) if is_ci_profile(p))
    return sorted(names)


def operand_labels(node_labels, operands, phase):
    """Operand labels to PATCH for ``phase`` 'pause' or 'restore', as mig-manager sets them.

    NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go: pause sets each operand's label to
    'paused-for-mig-change' unless it is 'false' (maybeSetPaused); restore sets 'true' unless it was 'false'
    (maybeSetTrue), so a label left paused by an interrupted run comes back. ``node_labels`` are the labels read
    before the pause. The client operand is only touched when the node carries its label.
    """
    if phase not in ("pause", "restore"):
        raise RollError("phase must be pause or restore, got %r" % (phase,))
    labels = node_labels or {}
    out = {}
    for op in operands or []:
        key = OPERAND_PREFIX + op
        current = labels.get(key, "")
        if op in OPTIONAL_OPERANDS and not current:
            continue
        if current == "false":
            out[key] = "false"
        else:
            out[key] = PAUSED if phase == "pause" else "true"
    return out


def drain_timed_out(result):
    """Whether a k8s_drain result carries the wait-timeout warning (the module itself does not fail)."""
    return any(DRAIN_TIMEOUT_WARNING in str(w) for w in (result or {}).get("warnings") or [])
