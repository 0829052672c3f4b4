# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a MIG roll over Kubernetes nodes decides, without I/O (used by the mig_reconfigure role's filters).

* The resources a node must advertise once its GPUs have their geometry, as the NVIDIA device plugin counts them.
* The GPU Operator operand labels paused and restored around the change, as mig-manager sets them.
* Whether a drain that "succeeded" in fact timed out.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any, Optional, Union

from ansible_collections.gpuops.provision.plugins.module_utils._k8s import gpu_pools, node_roll
from ansible_collections.gpuops.provision.plugins.module_utils._mig import geometry

OPERAND_PREFIX = "nvidia.com/gpu.deploy."
PAUSED = "paused-for-mig-change"
# NVIDIA/mig-parted pkg/mig/reconfigure/reconfigure.go: the client label is only touched when the node has it.
OPTIONAL_OPERANDS = ("client",)


class RollError(Exception):
    """Input the roll cannot honour; the message is for the user."""


def is_ci_profile(name: str) -> bool:
    """'1c.3g.20gb' (a compute instance smaller than its GPU instance) but not '3g.20gb' or '7c.7g.40gb'."""
    c, g, _gb, _attrs = geometry.parse_profile_name(name)
    return c is not None and c < g


def resource_name(profile: str, strategy: str = "mixed") -> str:
    """nvidia.com/mig-<profile> (mixed; '+' becomes '.', as the device plugin names them) or nvidia.com/gpu."""
    if strategy == "single":
        return "nvidia.com/gpu"
    return "nvidia.com/mig-" + profile.replace("+", ".")


def _after(gpu: Mapping[str, Any]) -> Optional[Mapping[str, Any]]:
    """A GPU's record once at the plan's geometry (its ``after``, or ``before`` when unchanged) when MIG is enabled
    there; None for a GPU that is a whole nvidia.com/gpu (no MIG, MIG off, or no record)."""
    after: Any = gpu.get("after") or gpu.get("before")
    enabled = bool(gpu.get("mig_capable", True)) and after is not None and \
        (after.get("mig_mode") or {}).get("current") == "enabled"
    return after if enabled else None


def single_strategy_problem(gpus: Optional[Iterable[Mapping[str, Any]]]) -> str:
    """Why NVIDIA's device plugin with the single MIG strategy would refuse the node at the plan's geometry (then it
    advertises nothing), or '': internal/rm/device_map.go buildDeviceMapFromConfigResources ("all devices on the node
    must be configured with the same migEnabled value") and assertAllMigDevicesAreValid with uniform=true (every
    MIG-enabled GPU has MIG devices, "more than one MIG device type present on node"). Every GPU of the node counts,
    selected or not."""
    enabled: list[str] = []
    disabled: list[str] = []
    empty: list[str] = []
    types: set[str] = set()
    for gpu in gpus or []:
        after = _after(gpu)
        (disabled if after is None else enabled).append(str(gpu.get("index")))
        if after is not None:
            devices = [p for p, n in (after.get("mig_devices") or {}).items() if n]
            if not devices:
                empty.append(str(gpu.get("index")))
            types.update(devices)
    if enabled and disabled:
        return ("the device plugin's single MIG strategy needs MIG enabled on every GPU of the node or on none, and the "
                "plan leaves GPU %s with MIG enabled and GPU %s without" % (", ".join(enabled), ", ".join(disabled)))
    if empty:
        return "the device plugin's single MIG strategy refuses a MIG-enabled GPU without MIG devices (GPU %s)" % ", ".join(empty)
    if len(types) > 1:
        return ("the device plugin's single MIG strategy serves one MIG device type per node, and the plan leaves %s"
                % ", ".join(sorted(types)))
    return ""


def expected_resources(gpus: Optional[Iterable[Mapping[str, Any]]], strategy: str = "mixed", ci_profiles_served: bool = False) -> dict[str, int]:
    """{resource: count} the device plugin advertises for a node whose GPUs are ``gpus`` (mig_geometry's results).

    Every GPU counts, selected or not: a GPU without MIG (or with MIG disabled) is one nvidia.com/gpu, a MIG GPU
    contributes its MIG devices. The device plugin's mixed strategy registers only profiles whose compute instance
    spans its GPU instance (C == G; NVIDIA/k8s-device-plugin internal/rm/rm.go), so smaller compute instances are
    advertised only when ``ci_profiles_served`` says the node's plugin serves them.
    """
    if strategy not in ("mixed", "single"):
        raise RollError("MIG strategy must be mixed or single, got %r" % (strategy,))
    out: dict[str, int] = {}
    for gpu in gpus or []:
        after = _after(gpu)
        if after is None:
            out["nvidia.com/gpu"] = out.get("nvidia.com/gpu", 0) + 1
            continue
        for profile, count in sorted((after.get("mig_devices") or {}).items()):
            # Under single, rm.go AddMIGResource("*", "gpu") serves every profile, compute-instance ones too.
            if is_ci_profile(profile) and not ci_profiles_served and strategy != "single":
                continue
            key = resource_name(profile, strategy)
            out[key] = out.get(key, 0) + int(count)
    return out


def advertised_resources(allocatable: Optional[Mapping[str, Any]]) -> dict[str, int]:
    """The GPU resources of a node's status.allocatable that count: nvidia.com/gpu and nvidia.com/mig-*, above 0, and
    nvidia.com/gpu.shared, the name the device plugin gives shared GPUs with renameByDefault (gpu_pools)."""
    out = {}
    for key, value in (allocatable or {}).items():
        if key in ("nvidia.com/gpu", "nvidia.com/gpu.shared") or key.startswith("nvidia.com/mig-"):
            try:
                n = int(value)
            except (TypeError, ValueError):
                continue
            if n > 0:
                out[key] = n
    return out


def ci_profiles_requested(gpus: Optional[Iterable[Mapping[str, Any]]]) -> list[str]:
    """Sorted CI profile names (C < G) that the planned geometry of the selected GPUs contains."""
    names: set[str] = set()
    for gpu in gpus or []:
        if not gpu.get("selected"):
            continue
        after = gpu.get("after") or {}
        names.update(p for p in (after.get("mig_devices") or {}) if is_ci_profile(p))
    return sorted(names)


def label_patch(current: Mapping[str, Any], wanted: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """The part of ``wanted`` ({key: value, or None to remove}) that changes ``current``: a merge patch of
    metadata.labels that writes nothing when the node already carries every wanted value."""
    out: dict[str, Any] = {}
    for key, value in (wanted or {}).items():
        if value is None:
            if key in current:
                out[key] = None
        elif current.get(key) != value:
            out[key] = value
    return out


def patched_labels(current: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``current`` with a merge patch of labels applied (a None value removes the key)."""
    out = dict(current)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def operand_labels(node_labels: Optional[Mapping[str, str]], operands: Optional[Iterable[str]], phase: str) -> dict[str, str]:
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


# ---- the roll's schedule: waves within a disruption budget and capacity floors ---------------------------------------

def scaled(value: object, total: int, what: str, round_up: bool = True) -> int:
    """A count or a percentage of ``total`` ('25%'), rounded up, as Kubernetes scales IntOrString budgets
    (intstr.GetScaledValueFromIntOrPercent(..., roundUp=true), which the GPU Operator's upgrade policy uses:
    NVIDIA/k8s-operator-libs pkg/upgrade/upgrade_inplace.go ProcessUpgradeRequiredNodes). A failure budget rounds
    down (``round_up=False``): it never tolerates more failures than its percentage says."""
    text = str(value).strip()
    if isinstance(value, bool):
        raise RollError("%s must be a count or a percentage, got %r" % (what, value))
    try:
        if text.endswith("%"):
            pct = int(text[:-1])
            if pct < 0:
                raise ValueError
            return -(-pct * total // 100) if round_up else pct * total // 100
        count = int(text)
    except ValueError:
        raise RollError("%s must be a count or a percentage such as 25%%, got %r" % (what, value))
    if count < 0:
        raise RollError("%s must not be negative, got %r" % (what, value))
    return count


def roll_waves(nodes: Optional[Iterable[Mapping[str, Any]]], max_parallel: Union[int, str, None] = 1, max_unavailable: Union[int, str, None] = None,
               floors: Optional[Mapping[str, int]] = None, max_failures: Union[int, str, None] = 0) -> dict[str, Any]:
    """The waves of a roll: consecutive groups of the changing nodes, in the given order, reconfigured together.

    ``nodes``: every targeted node, in roll order, as dicts ``name``, ``changing`` (the plan changes it),
    ``unavailable`` (cordoned or not Ready before the roll), ``current`` and ``target`` ({resource: count} it
    advertises now and will advertise after its change).
    ``max_parallel``: nodes changed at once, a count or a percentage of the targeted nodes; 0 means no limit.
    ``max_unavailable``: nodes unavailable at once, counting those already unavailable (as the GPU Operator's
    GetUpgradesAvailable in k8s-operator-libs pkg/upgrade/common_manager.go counts cordoned and not-Ready nodes);
    a count or a percentage; None means all targeted nodes.
    ``floors``: {resource: count} the schedulable nodes must keep advertising at every moment of the roll (before
    and during each wave; after the last one follows). An unavailable node's resources do not count: no pod can be scheduled there.
    ``max_failures``: nodes that may fail before the roll stops starting further ones, a count or a percentage of
    the changing nodes (rounded down); 0 stops at the first failure.

    A wave grows while it stays within both limits and every floor. Raises RollError, naming the node and the limit,
    when the next node cannot go even alone: the roll must not start.
    Returns ``waves`` (lists of names), ``sizes`` (for the playbook's serial), ``max_parallel``, ``max_unavailable``,
    ``max_failures`` (as counts), ``unavailable_before``, ``min_capacity`` ({resource: lowest schedulable count during the roll}) and
    ``wave_of`` ({name: index of its wave}).
    """
    nodes = list(nodes or [])
    total = len(nodes)
    names = [n["name"] for n in nodes]
    if len(set(names)) != len(names):
        raise RollError("nodes listed twice: %s" % ", ".join(sorted(set(x for x in names if names.count(x) > 1))))
    parallel = scaled(1 if max_parallel is None else max_parallel, total, "max_parallel") or total
    unavailable_max = total if max_unavailable in (None, "") else scaled(max_unavailable, total, "max_unavailable")
    failures_max = scaled(0 if max_failures in (None, "") else max_failures,
                          sum(1 for n in nodes if n.get("changing")), "max_failures", round_up=False)
    floors = dict(floors or {})
    for res, floor in floors.items():
        if isinstance(floor, bool) or not isinstance(floor, int) or floor < 0:
            raise RollError("capacity floor of %s must be a count of 0 or more, got %r" % (res, floor))
    down = [n["name"] for n in nodes if n.get("unavailable")]
    done: set[str] = set()

    def capacity(wave: Collection[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in nodes:
            if n.get("unavailable") or n["name"] in wave:
                continue
            held = n.get("target") if n["name"] in done else n.get("current")
            for res in floors:
                out[res] = out.get(res, 0) + int((held or {}).get(res, 0))
        return out

    def short(wave: Collection[str]) -> list[tuple[str, int]]:
        have = capacity(wave)
        return [(res, have.get(res, 0)) for res in sorted(floors) if have.get(res, 0) < floors[res]]

    lowest = dict(capacity(set()))
    below = short(set())
    if below:
        raise RollError("the pool is already below its capacity floor before the roll: %s; no node is drained"
                        % "; ".join("%s has %d schedulable, floor %d" % (r, h, floors[r]) for r, h in below))
    pending = [n for n in nodes if n.get("changing")]
    waves = []
    while pending:
        wave: list[str] = []
        why = None
        for n in pending:
            if len(wave) >= parallel:
                break
            trial = set(wave) | {n["name"]}
            unavailable = len(set(down) | trial)
            if unavailable > unavailable_max:
                why = ("max_unavailable %d: %d node(s) would be unavailable (%s)"
                       % (unavailable_max, unavailable, ", ".join(sorted(set(down) | trial))))
                break
            missing = short(trial)
            if missing:
                why = "capacity floor: %s" % "; ".join(
                    "%s would drop to %d schedulable, floor %d" % (r, h, floors[r]) for r, h in missing)
                break
            wave.append(n["name"])
        if not wave:
            raise RollError("node %s cannot be drained even alone (%s); no node is drained" % (pending[0]["name"], why))
        for res, have in capacity(set(wave)).items():
            lowest[res] = min(lowest.get(res, have), have)
        done.update(wave)
        waves.append(wave)
        pending = pending[len(wave):]
    # No check after the last wave is needed: the pool then holds what it held during that wave plus the targets
    # of the wave's own nodes.
    return dict(waves=waves, sizes=[len(w) for w in waves], max_parallel=parallel, max_unavailable=unavailable_max,
                max_failures=failures_max, unavailable_before=down, min_capacity=lowest,
                wave_of={name: i for i, wave in enumerate(waves) for name in wave},
                order={name: i for i, name in enumerate(n for wave in waves for n in wave)})


# ---- while the roll runs ------------------------------------------------------------------------------------------

def budget_spent(results: Optional[Iterable[Any]], max_failures: Union[int, str, None]) -> dict[str, Any]:
    """Whether the roll must stop starting nodes: more than ``max_failures`` of ``results`` (the per-node result
    records so far) failed. Returns ``spent``, ``failed`` (node names, sorted) and ``msg``."""
    failed = sorted(r.get("node") for r in results or [] if (r or {}).get("result") == "failed")
    spent = len(failed) > int(max_failures or 0)
    msg = ("the roll stopped: %d node(s) failed (%s), more than its failure budget of %d; this node was not started"
           % (len(failed), ", ".join(failed), int(max_failures or 0))) if spent else ""
    return dict(spent=spent, failed=failed, msg=msg)


def running_pods(pods: Optional[Iterable[Any]]) -> list[str]:
    """'<namespace>/<name>' of the pods still Running or Pending, the ones a wait for jobs waits for
    (NVIDIA/k8s-operator-libs pkg/upgrade/pod_manager.go IsPodRunningOrPending); pods being deleted count too."""
    out = []
    for pod in pods or []:
        phase = ((pod or {}).get("status") or {}).get("phase")
        if phase in ("Running", "Pending"):
            meta = pod.get("metadata") or {}
            out.append("%s/%s" % (meta.get("namespace", ""), meta.get("name", "")))
    return sorted(out)


def pods_matching(pods: Optional[Iterable[Any]], selectors: Optional[Iterable[object]]) -> list[Any]:
    """The pods (in input order) whose labels match any of ``selectors`` ('key=value' or 'key==value',
    equality only, as the role's selector variables are written)."""
    wanted = []
    for sel in selectors or []:
        key, sep, value = str(sel).replace("==", "=").partition("=")
        if not sep or not key.strip():
            raise RollError("pod selector %r is not key=value" % (sel,))
        wanted.append((key.strip(), value.strip()))
    out = []
    for pod in pods or []:
        labels = ((pod or {}).get("metadata") or {}).get("labels") or {}
        if any(labels.get(k) == v for k, v in wanted):
            out.append(pod)
    return out


# ---- the plan of one node (plan.yml) ------------------------------------------------------------------------------

BACKENDS = ("nvml", "gpu_operator")
# The roll name on the nodes (node_roll.ROLL): the mig_reconfigure role and gpu_pools, which rolls through it.
ROLL_NAME = "mig_reconfigure"


def nodes_named(nodes: Optional[Mapping[str, Any]], name: str) -> list[Any]:
    """The Nodes of ``nodes`` (k8s_info's result) whose metadata.name is ``name``: one, or none."""
    return [n for n in (nodes or {}).get("resources") or [] if (n.get("metadata") or {}).get("name") == name]


MIG_MANAGER_APP = "nvidia-mig-manager"


def running_pod(pods: Optional[Iterable[Mapping[str, Any]]], node: str, app: str = MIG_MANAGER_APP) -> str:
    """The name of a Running pod labelled app=``app`` on ``node`` that is not being deleted, or ''."""
    for pod in pods or []:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        if ((meta.get("labels") or {}).get("app") == app and spec.get("nodeName") == node
                and status.get("phase") == "Running" and not meta.get("deletionTimestamp")):
            return str(meta.get("name") or "")
    return ""


def mig_manager_config(config: Optional[Mapping[str, Any]]) -> tuple[str, bool]:
    """(why the GPU Operator's mig-manager would not read the role's ConfigMap, whether the role is to point the
    ClusterPolicy at it) for ``config`` = {policy_name, policy (the ClusterPolicy read, None when absent),
    config_map (the role's ConfigMap), may_set (the role may set spec.migManager.config.name)}.

    NVIDIA/gpu-operator controllers/object_controls.go TransformMIGManager gives mig-manager CONFIG_FILE (the
    ConfigMap mounted at /mig-parted-config) only when spec.migManager.config.name is set; otherwise mig-manager
    generates its configuration from the hardware (NVIDIA/mig-parted cmd/nvidia-mig-manager/main.go setupMigConfig)
    and never reads a ConfigMap of ours: a configuration name only the role's ConfigMap has fails its validation."""
    config = config or {}
    wanted = str(config.get("config_map") or "")
    policy = config.get("policy")
    if policy is None:
        return ("ClusterPolicy %s (mig_reconfigure_cluster_policy) was not found: backend gpu_operator needs the GPU "
                "Operator's ClusterPolicy to name mig-manager's ConfigMap %s" % (config.get("policy_name") or "''", wanted),
                False)
    current = ((((policy.get("spec") or {}).get("migManager") or {}).get("config") or {}).get("name")) or ""
    if current == wanted:
        return "", False
    if config.get("may_set"):
        return "", True
    return ("mig-manager does not read the ConfigMap %s: ClusterPolicy %s %s, so mig-manager %s; set "
            "spec.migManager.config.name to %s in the ClusterPolicy, or let the role set it "
            "(mig_reconfigure_mig_manager_set_config: true)"
            % (wanted, (policy.get("metadata") or {}).get("name") or config.get("policy_name"),
               "names %s (spec.migManager.config.name)" % current if current else "names no config (spec.migManager.config.name)",
               "reads %s" % current if current else "generates its configuration from the hardware", wanted), False)


# assets/state-mig-manager/0600_daemonset.yaml: the config volume and where the container mounts it.
MIG_MANAGER_CONFIG_VOLUME = "mig-parted-config"
MIG_MANAGER_CONFIG_MOUNT = "/mig-parted-config"


def mig_manager_config_file(pods: Optional[Iterable[Mapping[str, Any]]], node: str, config_map: str,
                            kubelet_root: str) -> str:
    """The file on ``node`` that its running mig-manager reads as its configuration when that is ConfigMap
    ``config_map``: the kubelet's copy of the pod's ConfigMap volume, ``<kubelet_root>/pods/<uid>/volumes/
    kubernetes.io~configmap/<volume>/<file>`` (k8s.io/kubernetes pkg/kubelet/kubelet_getters.go getPodVolumeDir),
    the file being CONFIG_FILE under the volume's mount (object_controls.go TransformMIGManager sets
    CONFIG_FILE=/mig-parted-config/config.yaml with the named ConfigMap). '' while no Running mig-manager pod on the
    node mounts that ConfigMap with CONFIG_FILE (the operator has not rendered the ClusterPolicy yet)."""
    for pod in pods or []:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if not running_pod([pod], node):
            continue
        volume = [v for v in spec.get("volumes") or [] if v.get("name") == MIG_MANAGER_CONFIG_VOLUME]
        if not volume or ((volume[0].get("configMap") or {}).get("name")) != config_map:
            continue
        container = (spec.get("containers") or [{}])[0]
        env = dict((e.get("name"), e.get("value")) for e in container.get("env") or [])
        mounts = [m.get("mountPath") for m in container.get("volumeMounts") or [] if m.get("name") == MIG_MANAGER_CONFIG_VOLUME]
        mount = (mounts[0] if mounts else MIG_MANAGER_CONFIG_MOUNT).rstrip("/") + "/"
        config_file = str(env.get("CONFIG_FILE") or "")
        if not config_file.startswith(mount):
            continue
        return "/".join([kubelet_root.rstrip("/"), "pods", str(meta.get("uid")), "volumes", "kubernetes.io~configmap",
                         MIG_MANAGER_CONFIG_VOLUME, config_file[len(mount):]])
    return ""


def node_facts(nodes: Optional[Mapping[str, Any]], name: str, selected: Optional[str] = "", skip_label: Optional[str] = "",
               backend: str = "nvml", mig_manager_pods: Optional[Iterable[Mapping[str, Any]]] = None,
               mig_manager: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """What the plan needs from the Kubernetes node ``name`` in ``nodes`` (k8s_info's result for every Node).

    ``selected``: the configuration asked for by variable; empty takes the node label nvidia.com/mig.config.
    ``skip_label``: 'key=value' (or 'key', matching an empty value) that keeps the node out of the roll.
    ``mig_manager_pods``: the GPU Operator's mig-manager pods (k8s_info); whether mig-manager runs on the node is
    decided from a Running one there, not from nvidia.com/gpu.deploy.mig-manager, which the operator sets on every
    MIG-capable node even with migManager disabled (controllers/state_manager.go addGPUStateLabels).
    ``mig_manager``: mig_manager_config's input (backend gpu_operator).
    Returns the node's ``labels``, ``mig_manager`` (its nvidia.com/gpu.deploy.mig-manager label),
    ``mig_manager_pod`` (the Running mig-manager pod on it, or ''), ``mig_manager_config_error`` and
    ``set_mig_manager_config`` (mig_manager_config), ``was_cordoned`` (by an operator, before any roll of ours), ``unavailable`` (cordoned or not Ready),
    ``advertised`` MIG resources, ``selected``, ``skip``, ``resume`` (the phase an earlier, unfinished run of the roll
    left on the node, '' when none: ``node_roll.resume_from``) and ``plannable`` (whether mig_geometry plans it: found, a
    configuration, and mig-manager as ``backend`` needs it).
    """
    if backend not in BACKENDS:
        raise RollError("backend must be one of %s, got %r" % (", ".join(BACKENDS), backend))
    nodes = nodes or {}
    found = nodes_named(nodes, name)
    node = found[0] if found else {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    spec, status = node.get("spec") or {}, node.get("status") or {}
    ready = [c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    cordoned = bool(spec.get("unschedulable"))
    roll = node_roll.state(node, ROLL_NAME)
    skip_key, _sep, skip_value = (skip_label or "").partition("=")
    label = labels.get("nvidia.com/gpu.deploy.mig-manager", "")
    pod = running_pod(mig_manager_pods, name)
    selected = selected or labels.get("nvidia.com/mig.config", "")
    config_error, set_config = mig_manager_config(mig_manager) if backend == "gpu_operator" else ("", False)
    manager_fits = not pod if backend == "nvml" else bool(pod) and not config_error
    return dict(node=name, failed=bool(nodes.get("failed")), msg=nodes.get("msg") or "", found=bool(found),
                labels=labels, mig_manager=label, mig_manager_pod=pod, mig_manager_config_error=config_error,
                set_mig_manager_config=set_config, was_cordoned=roll["was_cordoned"],
                resume=node_roll.resume_from(roll, selected),
                unavailable=cordoned or (ready[0] if ready else "False") != "True",
                advertised=advertised_resources(status.get("allocatable")), selected=selected,
                skip=bool(skip_key) and skip_key in labels and labels[skip_key] == skip_value,
                plannable=bool(found) and bool(selected) and manager_fits, backend=backend)


def node_error(facts: Mapping[str, Any], check: Mapping[str, Any], ci_profiles: Iterable[str] = ()) -> str:
    """Why the node cannot be planned ('' when it can): the first of node unreadable or absent, mig-manager at odds
    with the backend, no configuration, mig_geometry's own refusal, the planned CI profiles ``ci_profiles`` that the
    device plugin does not serve."""
    name, backend, label, pod = facts["node"], facts["backend"], facts["mig_manager"], facts["mig_manager_pod"]
    if facts["failed"]:
        return "cannot read Kubernetes node %s: %s" % (name, facts["msg"])
    if not facts["found"]:
        return "Kubernetes node %s not found" % name
    if backend == "nvml" and pod:
        return ("the GPU Operator's mig-manager runs on this node (pod %s), which re-applies its own MIG "
                "configuration; backend nvml needs it off (label the node nvidia.com/gpu.deploy.mig-manager=false, or "
                "disable migManager in the ClusterPolicy), or use mig_reconfigure_backend=gpu_operator" % pod)
    if backend == "gpu_operator" and not pod:
        return ("backend gpu_operator needs the GPU Operator's mig-manager running on this node, but no Running "
                "app=%s pod is on it (nvidia.com/gpu.deploy.mig-manager is %s; the operator sets that label on every "
                "MIG-capable node, also with migManager disabled in the ClusterPolicy)" % (MIG_MANAGER_APP, label or "absent"))
    if backend == "gpu_operator" and facts["mig_manager_config_error"]:
        return facts["mig_manager_config_error"]
    if not facts["selected"]:
        return "no MIG configuration selected: set mig_reconfigure_selected or the node label nvidia.com/mig.config"
    if check.get("failed"):
        return check.get("msg") or "mig_geometry failed"
    ci = list(ci_profiles)
    if ci:
        return ("compute-instance profile(s) %s are not registered by the NVIDIA device plugin (mixed strategy serves "
                "C == G profiles only); set mig_reconfigure_ci_profiles_served if the plugin on this node serves them"
                % ", ".join(ci))
    return ""


def node_plan(facts: Mapping[str, Any], check: Optional[Mapping[str, Any]], strategy: str = "mixed", ci_profiles_served: bool = False,
              force: bool = False, sharing: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """The plan record of one node (``facts`` from node_facts, ``check`` mig_geometry's check-mode result, or a
    skipped task's): the configuration, the error that stops the whole roll, whether it changes (a node skipped by
    label does not), its GPUs, and the MIG resources it advertises now and once at the target.

    ``force``: the node changes even where its geometry does not (the gpu_pools role: its device plugin sharing
    changes); ``sharing`` ({replicas, rename_by_default}) replicates its whole GPUs in the target resources."""
    check = check or {}
    gpus = check.get("gpus") or []
    would_change = bool(check.get("changed")) or bool(force)
    # Under single the plugin serves compute-instance profiles too (rm.go AddMIGResource("*", "gpu")).
    served = bool(ci_profiles_served) or strategy == "single"
    error = node_error(facts, check, () if served else ci_profiles_requested(gpus))
    # A node an earlier run of the roll left unfinished (cordoned, drained, applied, failed) is finished, whatever
    # its geometry and its skip label say: it is still cordoned or paused by us.
    resume = facts.get("resume") or ""
    if not error and strategy == "single" and would_change:
        error = single_strategy_problem(gpus)
    return dict(node=facts["node"], selected=facts["selected"], error=error,
                changed=not error and (would_change and not facts["skip"] or bool(resume)), resume=resume,
                skipped_by_label=facts["skip"] and would_change and not resume,
                reset_required=bool(check.get("reset_required")), gpus=gpus, unavailable=facts["unavailable"],
                current=facts["advertised"],
                target=gpu_pools.share_resources(expected_resources(gpus, strategy, served), sharing)
                if would_change else facts["advertised"])


def previous_geometry(gpus: Optional[Iterable[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """The mig-parted entries that restore the GPUs a node plan changes (its ``gpus`` records, each with ``before``,
    the GPU as it was): MIG enabled with the devices it had, or MIG disabled."""
    out = []
    for g in gpus or []:
        before = g.get("before")
        if not (g.get("changed") and before):
            continue
        if before["mig_mode"]["current"] == "enabled":
            out.append({"devices": [g["index"]], "mig-enabled": True, "mig-devices": before["mig_devices"]})
        else:
            out.append({"devices": [g["index"]], "mig-enabled": False})
    return out


def roll_summary(rows: Iterable[tuple[str, Mapping[str, Any], Mapping[str, Any]]], check: bool) -> str:
    """One line for the whole roll: per host (``rows``: [(host, plan, result)], {} where a host has none) its node
    and what happened to it - the result (and reason), skipped when already at its geometry, else not reached (or
    would reconfigure, in check mode) - and how long it was cordoned."""
    parts = []
    for host, plan, result in rows:
        if "result" in result:
            what = "%s%s" % (result["result"], " (%s)" % (result["reason"],) if "reason" in result else "")
        elif not plan.get("changed"):
            what = "skipped (already at %s, not drained)" % (plan.get("selected", "?"),)
        else:
            what = "would reconfigure" if check else "not reached"
        cordoned = result.get("cordoned_seconds")
        parts.append("%s: %s%s" % (plan.get("node", host), what,
                                   ", cordoned %s s" % (cordoned,) if cordoned is not None else ""))
    return "; ".join(parts)


def plan_groups(rows: Iterable[tuple[str, Mapping[str, Any], bool, Optional[Mapping[str, Any]]]],
                superseded: str) -> dict[str, Any]:
    """The plan's outcome over every node, worked out once (plan.yml) rather than in a task per host (each costs the
    controller a fork per host: seconds a hundred nodes). ``rows``: (host, plan record, whether the boot-time re-apply
    is wanted, the per-host lock the check took over: {path, holder, python} or empty) for each host whose plan ran;
    ``superseded``: the holder of the interrupted roll this run finishes (roll_lock), or empty.

    Returns ``bad`` (the invalid plans), ``groups`` ([{host, groups}]: mig_reconfigure_changing or
    mig_reconfigure_unchanged, and mig_reconfigure_boot where the re-apply is wanted) and ``unlock`` ([{host, path,
    holder, python}]: the per-host locks the superseded roll left on nodes that do not change; the nodes that change
    take theirs over in node.yml). A holder is the superseded roll's when it is that holder followed by its details
    ("<holder> (user=... node=...)")."""
    bad: list[Mapping[str, Any]] = []
    groups: list[dict[str, Any]] = []
    unlock: list[dict[str, Any]] = []
    for host, plan, boot, lock in rows:
        if plan.get("error"):
            bad.append(plan)
        names = ["mig_reconfigure_changing" if plan.get("changed") else "mig_reconfigure_unchanged"]
        if boot:
            names.append("mig_reconfigure_boot")
        groups.append({"host": host, "groups": names})
        lock = lock or {}
        holder = lock.get("holder")
        if superseded and holder and not plan.get("changed") and (str(holder) + " ").startswith(superseded + " "):
            unlock.append({"host": host, "path": lock.get("path"), "holder": str(holder), "python": lock.get("python")})
    return {"bad": bad, "groups": groups, "unlock": unlock}


def _largest_first(profile: str) -> tuple[int, int, str]:
    """Sort key of a profile in a layout: the larger GPU instance first, then the larger compute instance."""
    try:
        c, g, _gb, _attrs = geometry.parse_profile_name(profile)
    except geometry.MigError:
        return (0, 0, profile)
    return (-g, -(g if c is None else c), profile)


def layout(counts: Optional[Mapping[str, Any]]) -> str:
    """A GPU's MIG devices in a few words, largest first: '3g.40gb x2, 1g.10gb x1'; 'MIG on, no instances' for none."""
    parts = ["%s x%d" % (p, int(n)) for p, n in sorted((counts or {}).items(), key=lambda kv: _largest_first(kv[0]))
             if int(n)]
    return ", ".join(parts) or "MIG on, no instances"


def _mode_word(mode: Optional[str]) -> str:
    return "on" if mode == "enabled" else "off"


def gpu_before(gpu: Mapping[str, Any]) -> str:
    """The geometry a GPU has now, from its mig_geometry record: its layout, or 'MIG off'; a mode change pending from
    an earlier run is named."""
    before = gpu.get("before") or {}
    mode = before.get("mig_mode") or {}
    text = layout(before.get("mig_devices")) if mode.get("current") == "enabled" else "MIG off"
    if mode.get("pending") and mode.get("pending") != mode.get("current"):
        text += " (MIG %s pending)" % _mode_word(mode.get("pending"))
    return text


def gpu_after(gpu: Mapping[str, Any]) -> str:
    """The geometry a GPU gets, from its mig_geometry check-mode record: 'MIG off' when its target mode is off, else
    its layout. Where the mode change waits for a reset, check mode's ``after`` still has MIG off and no instances:
    the layout is then the one its planned ``create_ci`` actions build once the reset is done."""
    after = gpu.get("after") or gpu.get("before") or {}
    mode = after.get("mig_mode") or {}
    if (mode.get("pending") or mode.get("current")) != "enabled":
        return "MIG off"
    if mode.get("current") == "enabled":
        return layout(after.get("mig_devices"))
    counts: dict[str, int] = {}
    for action in gpu.get("actions") or []:
        if action.get("action") == "create_ci":
            counts[action["profile"]] = counts.get(action["profile"], 0) + 1
    return layout(counts)


def reset_need(gpu: Mapping[str, Any], gpu_reset: bool = True, reboot: bool = False) -> str:
    """What a GPU's change waits for before its instances can be made: 'none'; 'reset' when the MIG mode change
    waits for a GPU reset and the role resets GPUs (mig_reconfigure_gpu_reset, the default; also when neither is
    allowed, which fails the node); 'reboot' when only the reboot is allowed (mig_reconfigure_reboot)."""
    if not gpu.get("reset_required"):
        return "none"
    return "reboot" if reboot and not gpu_reset else "reset"


NEED_WORDS = {"none": "no reset", "reset": "GPU reset", "reboot": "reboot"}
GPU_LINES_HEADER = "GPUs that change (node GPU: before → after, reset or reboot, drain):"


def plan_report(plans: Optional[Iterable[Mapping[str, Any]]], roll: Optional[Mapping[str, Any]], skip_label: str = "",
                gpu_reset: bool = True, reboot: bool = False) -> dict[str, Any]:
    """The plan as the roll shows and publishes it, once for every node (plan.yml): ``lines``, one per node in the
    plans' order, then under one header line one per GPU that changes (node, GPU index, geometry before and after, the
    reset or reboot it needs, whether the node is drained for it); ``nodes`` ({node: {selected, result
    planned|skipped, drained false}}) and ``gpus`` ([{node, gpu, model, before, after, needs, drain}]), set_stats's
    records. ``gpu_reset``/``reboot``: how the role completes a pending MIG mode change (mig_reconfigure_gpu_reset,
    mig_reconfigure_reboot)."""
    roll = roll or {}
    count = len(roll.get("order") or {})
    lines, nodes, gpus, gpu_lines = [], {}, [], []
    for p in plans or []:
        if p.get("changed"):
            what = "%s %s%s, %d of %d in roll order" % (
                "finish the interrupted roll (phase %s) to" % p["resume"] if p.get("resume") else "reconfigure to",
                p["selected"], " (MIG mode change, needs a GPU reset)" if p.get("reset_required") else "",
                (roll.get("order") or {}).get(p["node"], 0) + 1, count)
        elif p.get("skipped_by_label"):
            what = "skipped by %s (not drained)" % skip_label
        else:
            what = "already at %s, skipped (not drained)" % p["selected"]
        lines.append("%s: %s" % (p["node"], what))
        nodes[p["node"]] = dict(selected=p["selected"], result="planned" if p.get("changed") else "skipped", drained=False)
        if not p.get("changed"):
            continue
        # A node an earlier run took past the drain (still cordoned) is not drained again (node_roll).
        drain = p.get("resume") not in ("drained", "applied")
        for gpu in sorted((g for g in p.get("gpus") or [] if g.get("changed")), key=lambda g: g.get("index", 0)):
            record = dict(node=p["node"], gpu=gpu.get("index"), model=gpu.get("model", ""), before=gpu_before(gpu),
                          after=gpu_after(gpu), needs=reset_need(gpu, gpu_reset, reboot), drain=drain)
            gpus.append(record)
            gpu_lines.append("  %s GPU %s: %s → %s, %s, %s" % (
                p["node"], record["gpu"], record["before"], record["after"], NEED_WORDS[record["needs"]],
                "node drained" if drain else "node already drained"))
    if gpu_lines:
        lines += [GPU_LINES_HEADER] + gpu_lines
    return dict(lines=lines, nodes=nodes, gpus=gpus)
