# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU pools on Kubernetes, without I/O (used by the gpu_pools role's filters).

A pool is a set of nodes that share their GPUs one way: ``mig`` (a MIG configuration of mig-parted), ``time-slicing``
or ``mps`` (the NVIDIA device plugin's sharing, ``replicas`` per GPU) or ``exclusive`` (whole GPUs). This module
validates the pool definitions against the nodes they select, renders the device plugin's configuration documents
(one key of the GPU Operator's device-plugin ConfigMap per pool, selected by the node label
``nvidia.com/device-plugin.config``), and works out per node the labels, taints, MIG configuration and the resources
the node advertises once it is at its pool.

Device plugin rules (NVIDIA/k8s-device-plugin):
* api/config/v1/replicas.go ReplicatedResource.UnmarshalJSON: ``replicas`` must be >= 2.
* api/config/v1/config.go DisableResourceNamingInConfig / replicas.go disableResoureRenaming: a config file cannot
  rename a resource itself; ``renameByDefault`` renames ``<name>`` to ``<name>.shared`` (resources.go
  DefaultSharedRename), and a per-resource ``devices`` selection is ignored (every device is replicated).
* internal/rm/device_map.go updateDeviceMapWithReplicas: each replicated device becomes ``replicas`` devices of the
  (renamed) resource; resources not named in the sharing config keep their count.
* api/config/v1/config.go NewConfig: MPS defaults ``failRequestsGreaterThanOne`` to true.
* internal/plugin/mps.go getMPSOptions: "sharing using MPS is not supported for MIG devices".
* cmd/mps-control-daemon/mps/device.go maxClients: at most 48 clients per GPU from compute capability 7.5, 16 below.
  CUDA MPS itself needs Volta (compute capability 7.0) for the client isolation the plugin relies on.

GPU Operator rules (NVIDIA/gpu-operator), for the pools' taints:
* The operand DaemonSets (device plugin, GFD, DCGM exporter, validator, mig-manager, ...) tolerate only
  ``nvidia.com/gpu:NoSchedule`` (assets/state-*/0500_daemonset.yaml; deployments/gpu-operator/values.yaml
  ``daemonsets.tolerations``), and the DaemonSet controller places no pod on a node with a NoSchedule or NoExecute
  taint the pod does not tolerate (k8s.io/kubernetes pkg/controller/daemon NodeShouldRunDaemonPod). A pool taint
  would keep the device plugin off its nodes once the roll has paused it.
* controllers/object_controls.go applyCommonDaemonsetConfig: a ClusterPolicy whose ``spec.daemonsets.tolerations``
  lists any toleration replaces every operand's tolerations with that list (so the written list keeps the asset's
  ``nvidia.com/gpu`` toleration and whatever others put there).
* The node-feature-discovery worker is the Helm chart's DaemonSet, not the ClusterPolicy's (values.yaml
  ``node-feature-discovery.worker.tolerations``): its own pod template is patched.
* k8s.io/api core/v1 toleration.go ToleratesTaint: which toleration tolerates which taint.
"""

from __future__ import annotations

import re
from collections.abc import Container, Iterable, Mapping
from typing import Any, Optional

MODES = ("mig", "time-slicing", "mps", "exclusive")
SHARED_MODES = ("time-slicing", "mps")
STRATEGIES = ("none", "single", "mixed")
CONFIG_LABEL = "nvidia.com/device-plugin.config"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
POOL_LABEL = "gpuops.io/gpu-pool"
SHARING_LABEL = "gpuops.io/gpu-sharing"
PROFILE_LABEL = "gpuops.io/gpu-profile"
POOL_TAINT = "gpuops.io/gpu-pool"
RESERVED_LABELS = (CONFIG_LABEL, MIG_CONFIG_LABEL, POOL_LABEL, SHARING_LABEL, PROFILE_LABEL)
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
GPU_RESOURCE = "nvidia.com/gpu"
SHARED_SUFFIX = ".shared"
MPS_MIN_CC = (7, 0)
MPS_MANY_CLIENTS_CC = (7, 5)
OPERAND_SELECTOR_PREFIX = "nvidia.com/gpu.deploy."
OPERAND_DEFAULT_TOLERATIONS = ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},)
# The taint effects that keep a DaemonSet's pod off a node (pkg/controller/daemon NodeShouldRunDaemonPod).
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
POOL_KEYS = ("name", "nodes", "selector", "sharing", "mig_config", "replicas", "rename_by_default",
             "fail_requests_greater_than_one", "labels", "taints", "device_plugin_config")

# Kubernetes label syntax (k8s.io/apimachinery pkg/util/validation: IsQualifiedName, IsValidLabelValue).
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_LABEL_KEY = re.compile(r"^(%s/)?%s$" % (_PREFIX, _NAME))
_LABEL_VALUE = re.compile(r"^(%s)?$" % _NAME)
# ConfigMap keys (IsConfigMapKey): the pool name becomes one.
_CM_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")


class PoolError(Exception):
    """Input the pools cannot honour; the message is for the user."""


def _cc(value: Any) -> Optional[tuple[int, int]]:
    """'7.5' / [7, 5] / 7.5 -> (7, 5); None when unknown."""
    if value is None or value == "":
        return None
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return int(value[0]), int(value[1])
    major, _sep, minor = str(value).partition(".")
    try:
        return int(major), int(minor or 0)
    except ValueError:
        return None


def _mig_enabled_entries(mig_config: Optional[Mapping[str, Any]], name: str) -> Optional[list[Any]]:
    """The entries of mig-parted configuration ``name``, or None when it does not exist."""
    configs = (mig_config or {}).get("mig-configs") or {}
    return configs.get(name) if name in configs else None


def disables_mig(mig_config: Optional[Mapping[str, Any]], name: str) -> bool:
    """Whether every entry of mig-parted configuration ``name`` turns MIG off (a GPU without MIG for sharing)."""
    entries = _mig_enabled_entries(mig_config, name)
    return entries is not None and all(not e.get("mig-enabled") for e in entries)


def shared_resource(name: str, rename_by_default: bool) -> str:
    """The resource a replicated ``name`` is advertised as (replicas.go disableResoureRenaming, DefaultSharedRename)."""
    return name + SHARED_SUFFIX if rename_by_default else name


def share_resources(resources: Optional[Mapping[str, int]], sharing: Optional[Mapping[str, Any]]) -> dict[str, int]:
    """What the device plugin advertises once ``sharing`` ({replicas, rename_by_default}; empty: none) replicates
    nvidia.com/gpu (internal/rm/device_map.go updateDeviceMapWithReplicas); other resources keep their count."""
    resources = dict(resources or {})
    if not sharing:
        return resources
    replicas = int(sharing.get("replicas") or 1)
    count = resources.pop(GPU_RESOURCE, 0)
    if count:
        name = shared_resource(GPU_RESOURCE, bool(sharing.get("rename_by_default")))
        resources[name] = resources.get(name, 0) + count * replicas
    return resources


def render_config(pool: Mapping[str, Any], strategy: str = "mixed") -> dict[str, Any]:
    """The device plugin's configuration document (api/config/v1 Config) for one pool: ``version: v1``,
    ``flags.migStrategy``, and for time-slicing / MPS ``sharing.timeSlicing`` / ``sharing.mps`` replicating
    nvidia.com/gpu."""
    doc = {"version": "v1", "flags": {"migStrategy": strategy}}
    if pool.get("sharing") in SHARED_MODES:
        replicated = {"renameByDefault": bool(pool.get("rename_by_default")),
                      "resources": [{"name": GPU_RESOURCE, "replicas": int(pool["replicas"])}]}
        fail = pool.get("fail_requests_greater_than_one")
        if pool["sharing"] == "mps" and fail is None:
            fail = True  # config.go NewConfig: the default the plugin applies to MPS anyway, written out.
        if fail is not None:
            replicated["failRequestsGreaterThanOne"] = bool(fail)
        doc["sharing"] = {"timeSlicing" if pool["sharing"] == "time-slicing" else "mps": replicated}
    return doc


def _check_labels(where: str, labels: Any, errors: list[str]) -> None:
    if not isinstance(labels, dict):
        errors.append("%s: labels must be a mapping of label keys to values" % where)
        return
    for key, value in labels.items():
        if not _LABEL_KEY.match(str(key)):
            errors.append("%s: %r is not a valid label key" % (where, key))
        elif key in RESERVED_LABELS:
            errors.append("%s: label %s is set by the pool itself" % (where, key))
        if not isinstance(value, str) or not _LABEL_VALUE.match(value):
            errors.append("%s: label %s has the invalid value %r (63 characters at most: letters, digits, '-', '_', '.')"
                          % (where, key, value))


def _check_taints(where: str, taints: Any, errors: list[str]) -> None:
    if not isinstance(taints, list):
        errors.append("%s: taints must be a list of {key, value, effect}" % where)
        return
    for t in taints:
        if not isinstance(t, dict) or not t.get("key") or not _LABEL_KEY.match(str(t.get("key"))):
            errors.append("%s: taint %r needs a valid key" % (where, t))
            continue
        if t.get("effect") not in TAINT_EFFECTS:
            errors.append("%s: taint %s has the effect %r; use one of %s" % (where, t["key"], t.get("effect"), ", ".join(TAINT_EFFECTS)))
        if not _LABEL_VALUE.match(str(t.get("value") or "")):
            errors.append("%s: taint %s has the invalid value %r" % (where, t["key"], t.get("value")))


def normalize(raw: Any, index: int, disabled_config: str = "all-disabled") -> tuple[Optional[dict[str, Any]], list[str]]:
    """One pool definition with its defaults filled in, and the errors in it (each naming the pool)."""
    errors = []
    if not isinstance(raw, dict):
        return None, ["pool #%d: a pool is a mapping, got %r" % (index, raw)]
    name = raw.get("name")
    where = "pool %s" % name if name else "pool #%d" % index
    if not isinstance(name, str) or not _LABEL_VALUE.match(name) or not name or not _CM_KEY.match(name):
        errors.append("%s: name must be a label value (letters, digits, '-', '_', '.'; 63 at most), got %r" % (where, name))
    unknown = sorted(set(raw) - set(POOL_KEYS))
    if unknown:
        errors.append("%s: unknown key(s) %s (known: %s)" % (where, ", ".join(unknown), ", ".join(POOL_KEYS)))
    pool = dict(raw)
    mode = raw.get("sharing")
    if mode not in MODES:
        errors.append("%s: sharing must be one of %s, got %r" % (where, ", ".join(MODES), mode))
    nodes, selector = raw.get("nodes"), raw.get("selector")
    if (nodes is None) == (selector is None):
        errors.append("%s: give either nodes (a list of node names) or selector (node labels), not %s"
                      % (where, "both" if nodes is not None else "neither"))
    if nodes is not None and (not isinstance(nodes, list) or not all(isinstance(n, str) and n for n in nodes)):
        errors.append("%s: nodes must be a list of node names" % where)
    if selector is not None and not isinstance(selector, dict):
        errors.append("%s: selector must be a mapping of node labels to values" % where)
    replicas = raw.get("replicas")
    if mode in SHARED_MODES:
        # api/config/v1/replicas.go ReplicatedResource.UnmarshalJSON: "number of replicas must be >= 2".
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 2:
            errors.append("%s: %s needs replicas, a whole number >= 2 (the device plugin refuses fewer), got %r"
                          % (where, mode, replicas))
    elif replicas is not None:
        errors.append("%s: replicas applies to time-slicing and mps pools only, not %s" % (where, mode))
    for key in ("rename_by_default", "fail_requests_greater_than_one"):
        if raw.get(key) is not None and mode not in SHARED_MODES:
            errors.append("%s: %s applies to time-slicing and mps pools only" % (where, key))
        if raw.get(key) is not None and not isinstance(raw.get(key), bool):
            errors.append("%s: %s must be true or false" % (where, key))
    if mode == "mig":
        if not raw.get("mig_config"):
            errors.append("%s: a mig pool needs mig_config, the name of a configuration in the mig-parted config" % where)
    elif mode in MODES:
        pool["mig_config"] = raw.get("mig_config") or disabled_config
    pool.setdefault("labels", {})
    _check_labels(where, pool["labels"], errors)
    if raw.get("taints") is None:
        pool["taints"] = [{"key": POOL_TAINT, "value": name or "", "effect": "NoSchedule"}]
    _check_taints(where, pool["taints"], errors)
    dp = raw.get("device_plugin_config")
    if dp is not None and (not isinstance(dp, str) or not _CM_KEY.match(dp) or not _LABEL_VALUE.match(dp)):
        errors.append("%s: device_plugin_config %r is not a valid ConfigMap key and label value" % (where, dp))
    return pool, errors


def _selects(pool: Mapping[str, Any], name: str, labels: Mapping[str, Any]) -> bool:
    if pool.get("nodes") is not None:
        return name in pool["nodes"]
    selector = pool.get("selector") or {}
    # An empty selector selects nothing (the project's rule: an empty selection never means "all").
    return bool(selector) and all(labels.get(k) == str(v) for k, v in selector.items())


def profile(pool: Mapping[str, Any]) -> str:
    """The value of gpuops.io/gpu-profile: what a pod of this pool gets (the MIG configuration, '<mode>-<replicas>',
    or 'exclusive')."""
    if pool["sharing"] == "mig":
        return pool["mig_config"]
    if pool["sharing"] in SHARED_MODES:
        return "%s-%d" % (pool["sharing"], pool["replicas"])
    return "exclusive"


def node_taints(current: Optional[Iterable[Mapping[str, Any]]], wanted: Optional[Iterable[Mapping[str, Any]]],
                managed_keys: Container[Any] = (POOL_TAINT,)) -> list[Mapping[str, Any]]:
    """The node's taint list with ``wanted`` in place: taints of the same key and effect are replaced, other taints
    with a managed key (an earlier pool's) removed, every other taint kept in order."""
    wanted = [dict(key=t["key"], value=str(t.get("value") or ""), effect=t["effect"]) for t in wanted or []]
    replaced = {(t["key"], t["effect"]) for t in wanted}
    out = [t for t in current or [] if (t.get("key"), t.get("effect")) not in replaced and t.get("key") not in managed_keys]
    for t in wanted:
        entry = {"key": t["key"], "effect": t["effect"]}
        if t["value"]:
            entry["value"] = t["value"]
        out.append(entry)
    return out


def _same_taints(a: Optional[Iterable[Mapping[str, Any]]], b: Optional[Iterable[Mapping[str, Any]]]) -> bool:
    def norm(ts: Optional[Iterable[Mapping[str, Any]]]) -> list[tuple[Any, Any, Any]]:
        return sorted((t.get("key"), t.get("value") or "", t.get("effect")) for t in ts or [])
    return norm(a) == norm(b)


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Whether ``toleration`` tolerates ``taint`` (k8s.io/api core/v1 toleration.go ToleratesTaint): the same effect
    or none; the same key, or none with operator Exists; Exists, or Equal (the default) with the same value."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    if toleration.get("key") != taint.get("key") and not (not toleration.get("key") and operator == "Exists"):
        return False
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated(tolerations: Optional[Iterable[Mapping[str, Any]]], taints: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The taints among ``taints`` that keep a pod with ``tolerations`` off a node (NoSchedule, NoExecute), each once."""
    known = list(tolerations or [])
    out: list[dict[str, Any]] = []
    for t in taints:
        if t.get("effect") in BLOCKING_EFFECTS and not any(tolerates(x, t) for x in known) and dict(t) not in out:
            out.append(dict(t))
    return out


def with_tolerations(tolerations: Optional[Iterable[Mapping[str, Any]]], taints: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``tolerations`` with one toleration added per taint it does not tolerate yet: the taint's key with operator
    Exists and its effect (so every pool under that key is tolerated, whatever its value); the rest kept in order."""
    out = [dict(t) for t in tolerations or []]
    for t in untolerated(out, taints):
        added = {"key": t["key"], "operator": "Exists", "effect": t["effect"]}
        if not any(tolerates(x, t) for x in out):
            out.append(added)
    return out


def _template_tolerations(daemonset: Mapping[str, Any]) -> list[Any]:
    return list((((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}).get("tolerations") or [])


def operand_daemonsets(daemonsets: Optional[Iterable[Mapping[str, Any]]]) -> list[Mapping[str, Any]]:
    """The GPU Operator's operand DaemonSets among ``daemonsets``: those selecting nodes on an
    nvidia.com/gpu.deploy.<operand> label (controllers/object_controls.go renders every operand so)."""
    out = []
    for ds in daemonsets or []:
        selector = (((ds.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
        if any(str(k).startswith(OPERAND_SELECTOR_PREFIX) for k in selector):
            out.append(ds)
    return out


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def operator_tolerations(taints: Iterable[Mapping[str, Any]], policy_name: str, policy: Optional[Mapping[str, Any]],
                         daemonsets: Optional[Iterable[Mapping[str, Any]]],
                         nfd_workers: Optional[Iterable[Mapping[str, Any]]]) -> tuple[dict[str, Any], list[str]]:
    """What the GPU Operator's DaemonSets need so that ``taints`` (every pool's) keep none of their pods off a pool
    node, and the errors when that cannot be had.

    ``policy_name``: the ClusterPolicy the role may change ('' leaves it alone); ``policy``: that ClusterPolicy as read
    (None: not found); ``daemonsets``: the DaemonSets of the operator's namespace; ``nfd_workers``: the
    node-feature-discovery worker DaemonSets. Returns ({cluster_policy_tolerations: the list to write, or None when
    it tolerates them already; nfd_workers: [{name, namespace, resource_version, tolerations}] to patch; operands:
    the operand DaemonSets' names, whose pod templates must then tolerate ``wait_taints``; wait_taints}, errors)."""
    taints = [dict(t) for t in taints]
    blocking = untolerated([], taints)
    operands = operand_daemonsets(daemonsets)
    out: dict[str, Any] = {"cluster_policy_tolerations": None, "nfd_workers": [], "wait_taints": blocking,
                           "operands": sorted(_name(d) for d in operands)}
    errors: list[str] = []
    if not blocking:
        return out, errors
    if policy is not None:
        current = list((((policy.get("spec") or {}).get("daemonsets") or {}).get("tolerations")) or [])
        # An empty list leaves the assets' tolerations in place: written out, so the new list keeps them.
        base = current or [dict(t) for t in OPERAND_DEFAULT_TOLERATIONS]
        wanted = with_tolerations(base, blocking)
        if wanted != current:
            out["cluster_policy_tolerations"] = wanted
    else:
        why = ("gpu_pools_cluster_policy is empty, so the role leaves the ClusterPolicy alone" if not policy_name
               else "ClusterPolicy %s was not found" % policy_name)
        for t in blocking:
            refusing = sorted(_name(d) for d in operands if untolerated(_template_tolerations(d), [t]))
            if refusing:
                errors.append("taint %s=%s:%s would keep the GPU Operator's %s off the pool's nodes (they do not "
                              "tolerate it) and %s; name the ClusterPolicy in gpu_pools_cluster_policy, add the "
                              "toleration to its spec.daemonsets.tolerations, or give the pool other taints"
                              % (t["key"], t.get("value") or "", t["effect"], ", ".join(refusing), why))
    for ds in nfd_workers or []:
        have = _template_tolerations(ds)
        if untolerated(have, blocking):
            meta = ds.get("metadata") or {}
            out["nfd_workers"].append({"name": meta.get("name"), "namespace": meta.get("namespace"),
                                       "resource_version": meta.get("resourceVersion"),
                                       "tolerations": with_tolerations(have, blocking)})
    return out, errors


def operands_tolerate(daemonsets: Optional[Iterable[Mapping[str, Any]]], names: Container[str],
                      taints: Iterable[Mapping[str, Any]]) -> list[str]:
    """The DaemonSets named in ``names`` whose pod template does not yet tolerate every one of ``taints`` (the
    write waits until none is left: the operator renders the ClusterPolicy into them asynchronously)."""
    taints = list(taints)
    return sorted(_name(d) for d in daemonsets or [] if _name(d) in names and untolerated(_template_tolerations(d), taints))


def plan(pools: Any, nodes: Optional[Mapping[str, Any]], mig_config: Optional[Mapping[str, Any]] = None, strategy: str = "mixed",
         default_config: str = "default", disabled_config: str = "all-disabled",
         operator: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """Validate ``pools`` against ``nodes`` and work out what every selected node gets.

    ``nodes``: {node name: {labels, taints, allocatable, gpus (gpu_info's per-GPU entries: model, compute_capability,
    mig_capable, mig_mode), host (the inventory host with GPU facts, or empty)}} for every Kubernetes node.
    Returns {errors: [...], config_map: {key: document}, nodes: {node: record}}; any error means nothing may be
    written. A record has ``pool``, ``sharing``, ``mig_config`` (the target), ``config_key``, ``labels`` (the pool's
    labels, written when the node is at its pool), ``config_labels`` (nvidia.com/device-plugin.config, which changes
    what the device plugin advertises), ``taints`` (the node's whole list), ``sharing_spec`` ({replicas,
    rename_by_default} or {}), ``expected`` (resources once at its pool, when known without MIG), ``roll`` (whether
    the change needs the drain-and-change roll) and the ``label_patch`` / ``taints_changed`` for the other nodes.
    ``operator`` ({policy_name, policy, daemonsets, nfd_workers}, what operator_tolerations reads): with it the
    result has ``operator``, the GPU Operator tolerations the pools' taints need (operator_tolerations), and a pool
    whose taints the operator's DaemonSets cannot be made to tolerate is an error.
    """
    errors = []
    if strategy not in STRATEGIES:
        errors.append("MIG strategy must be one of %s, got %r" % (", ".join(STRATEGIES), strategy))
    if not isinstance(pools, list):
        return dict(errors=errors + ["pools must be a list, got %r" % (pools,)], config_map={}, nodes={})
    nodes = nodes or {}
    normalized = []
    names = {}
    keys: dict[str, dict[str, Any]] = {}
    for i, raw in enumerate(pools):
        pool, errs = normalize(raw, i, disabled_config)
        errors += errs
        if pool is None:
            continue
        if pool.get("name") in names:
            errors.append("pool %s: defined twice" % pool.get("name"))
        names[pool.get("name")] = pool
        normalized.append(pool)
        if errs:
            continue
        key = pool.get("device_plugin_config") or (pool["name"] if pool["sharing"] in SHARED_MODES else default_config)
        pool["config_key"] = key
        if pool["sharing"] in SHARED_MODES:
            if key == default_config:
                errors.append("pool %s: device_plugin_config %s is the default configuration (no sharing)" % (pool["name"], key))
            elif key in keys and keys[key] != render_config(pool, strategy):
                errors.append("pool %s: device_plugin_config %s is used by another pool with other settings" % (pool["name"], key))
            keys[key] = render_config(pool, strategy)
        elif pool.get("device_plugin_config") and key != default_config:
            errors.append("pool %s: sharing %s uses the default device plugin configuration %s, not %s"
                          % (pool["name"], pool["sharing"], default_config, key))
        # MIG strategy consistent with the pool (rm.go: strategy none advertises no MIG device at all; single one
        # resource type per node).
        target = pool["mig_config"]
        entries = _mig_enabled_entries(mig_config, target)
        if mig_config is not None and entries is None:
            errors.append("pool %s: MIG configuration %s is not in the mig-parted config" % (pool["name"], target))
        elif pool["sharing"] == "mig":
            if strategy == "none":
                errors.append("pool %s: MIG strategy none advertises no MIG devices; a mig pool needs single or mixed" % pool["name"])
            if strategy == "single" and entries and any(len(e.get("mig-devices") or {}) > 1 for e in entries if e.get("mig-enabled")):
                errors.append("pool %s: MIG strategy single advertises one MIG profile per node, and %s mixes profiles"
                              % (pool["name"], target))
            if entries is not None and mig_config is not None and disables_mig(mig_config, target):
                errors.append("pool %s: MIG configuration %s disables MIG; a mig pool needs MIG devices" % (pool["name"], target))
        elif mig_config is not None and not disables_mig(mig_config, target):
            # mps.go getMPSOptions refuses MIG devices; time-slicing here replicates whole GPUs (nvidia.com/gpu).
            errors.append("pool %s: a %s pool needs MIG disabled on its GPUs, and MIG configuration %s enables it"
                          % (pool["name"], pool["sharing"], target))
    config_map = {default_config: render_config({"sharing": "exclusive"}, strategy)}
    config_map.update(keys)

    records = {}
    members: dict[str, list[str]] = {}
    for name in sorted(nodes):
        node = nodes[name] or {}
        labels = node.get("labels") or {}
        chosen = [p for p in normalized if p.get("sharing") in MODES and _selects(p, name, labels)]
        if len(chosen) > 1:
            errors.append("node %s: selected by more than one pool (%s)"
                          % (name, ", ".join(p.get("name") or "one without a name" for p in chosen)))
            continue
        if not chosen:
            current = labels.get(CONFIG_LABEL)
            if current and current not in config_map:
                errors.append("node %s: is in no pool and selects device plugin configuration %s, which this run would "
                              "remove from the ConfigMap" % (name, current))
            continue
        pool = chosen[0]
        if pool.get("name"):  # a pool without a name is invalid (reported above) and lists no members
            members.setdefault(pool["name"], []).append(name)
        if "config_key" not in pool:
            continue  # the pool itself is invalid; reported above
        if not node.get("host"):
            errors.append("node %s: selected by pool %s but no play host manages it (no GPU facts)" % (name, pool["name"]))
            continue
        gpus = node.get("gpus") or []
        if not gpus:
            errors.append("node %s: selected by pool %s but has no GPU" % (name, pool["name"]))
            continue
        for gpu in gpus:
            where = "node %s: GPU %s (%s)" % (name, gpu.get("index"), gpu.get("model") or "unknown model")
            if pool["sharing"] == "mig" and not gpu.get("mig_capable"):
                errors.append("%s does not support MIG; pool %s is a mig pool" % (where, pool["name"]))
            if pool["sharing"] == "mps":
                cc = _cc(gpu.get("compute_capability"))
                if cc is None:
                    errors.append("%s: compute capability unknown; pool %s (MPS) needs Volta (7.0) or later" % (where, pool["name"]))
                elif cc < MPS_MIN_CC:
                    errors.append("%s has compute capability %d.%d; pool %s (MPS) needs Volta (7.0) or later"
                                  % ((where,) + cc + (pool["name"],)))
                else:
                    most = 48 if cc >= MPS_MANY_CLIENTS_CC else 16  # mps/device.go maxClients
                    if pool["replicas"] > most:
                        errors.append("%s: pool %s asks for %d MPS replicas; an MPS server takes at most %d clients on it"
                                      % (where, pool["name"], pool["replicas"], most))
        sharing_spec = {}
        expected = None
        if pool["sharing"] in SHARED_MODES:
            sharing_spec = {"replicas": pool["replicas"], "rename_by_default": bool(pool.get("rename_by_default"))}
        if pool["sharing"] != "mig":
            expected = share_resources({GPU_RESOURCE: len(gpus)}, sharing_spec)
        pool_labels = dict(pool["labels"])
        pool_labels.update({POOL_LABEL: pool["name"], SHARING_LABEL: pool["sharing"], PROFILE_LABEL: profile(pool)})
        config_labels = {CONFIG_LABEL: pool["config_key"]}
        taints = node_taints(node.get("taints"), pool["taints"])
        current_adv = dict((k, int(v)) for k, v in (node.get("allocatable") or {}).items()
                           if str(k).startswith("nvidia.com/") and str(v).isdigit() and int(v) > 0)
        # The MIG geometry is mig_geometry's to compare (the roll's plan), not the label's: a node whose GPUs are at
        # the pool's geometry is not drained for a label alone, as mig_reconfigure skips it.
        roll = (labels.get(CONFIG_LABEL) != pool["config_key"]
                or (expected is not None and current_adv != expected))
        label_patch = dict((k, v) for k, v in pool_labels.items() if labels.get(k) != v)
        records[name] = dict(node=name, host=node.get("host"), pool=pool["name"], sharing=pool["sharing"],
                             mig_config=pool["mig_config"], config_key=pool["config_key"], labels=pool_labels,
                             config_labels=config_labels, taints=taints, pool_taints=node_taints((), pool["taints"]),
                             taints_changed=not _same_taints(taints, node.get("taints")),
                             label_patch=label_patch, sharing_spec=sharing_spec, expected=expected, roll=roll)
    for pool in normalized:
        if pool.get("name") and pool.get("nodes"):
            for n in pool["nodes"]:
                if n not in nodes:
                    errors.append("pool %s: node %s is not a Kubernetes node" % (pool["name"], n))
    out = dict(errors=errors, config_map=config_map, nodes=records,
               pools=dict((p["name"], sorted(members.get(p["name"], []))) for p in normalized if p.get("name")))
    if operator is not None:
        tainting = [p for p in normalized if members.get(p.get("name") or "") and isinstance(p.get("taints"), list)]
        args = (str(operator.get("policy_name") or ""), operator.get("policy"), operator.get("daemonsets"),
                operator.get("nfd_workers"))
        if args[0] and args[1] is None:
            errors.append("ClusterPolicy %s (gpu_pools_cluster_policy) was not found: the role points it at the device "
                          "plugin ConfigMap; name the GPU Operator's ClusterPolicy, or set it empty to leave the "
                          "ClusterPolicy alone" % args[0])
        for pool in tainting:
            errors.extend("pool %s: %s" % (pool["name"], e) for e in operator_tolerations(pool["taints"], *args)[1])
        out["operator"] = operator_tolerations([t for p in tainting for t in p["taints"]], *args)[0]
    return out


def summary(nodes: Mapping[str, Mapping[str, Any]]) -> str:
    """One line for the plan's node records (``plan()['nodes']``): per node its pool, the sharing (with the replicas)
    and whether it rolls to a new device plugin and MIG config."""
    parts = []
    for name, r in nodes.items():
        spec = ", %s replicas" % (r["sharing_spec"]["replicas"],) if r["sharing_spec"] else ""
        change = ("rolls to device plugin config %s and MIG config %s" % (r["config_key"], r["mig_config"]) if r["roll"]
                  else "sharing unchanged")
        parts.append("%s: pool %s (%s%s), %s" % (name, r["pool"], r["sharing"], spec, change))
    return "; ".join(parts)


def previous_labels(current: Optional[Mapping[str, Any]], wanted: Optional[Iterable[str]]) -> dict[str, Any]:
    """A label patch that puts the keys of ``wanted`` back to their values in ``current`` (None removes a label the
    node did not have): the roll's rollback undoes the device plugin config label with it."""
    current = current or {}
    return dict((k, current.get(k)) for k in sorted(wanted or {}))


def node_inputs(k8s_nodes: Optional[Mapping[str, Any]], hosts: Optional[Iterable[Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """``plan``'s ``nodes`` from k8s_info's result for every Node and the play's hosts ([{host, node, gpus}], gpus
    from gpu_info): each Kubernetes node with its labels, taints, allocatable, and the host and GPUs that manage it."""
    by_node = {}
    for h in hosts or []:
        by_node[h.get("node") or h.get("host")] = h
    out: dict[str, dict[str, Any]] = {}
    for n in (k8s_nodes or {}).get("resources") or []:
        meta = n.get("metadata") or {}
        name = meta.get("name")
        h = by_node.get(name) or {}
        # Every Node has a metadata.name (the API server requires it): the None mypy sees comes from the {} fallback only.
        out[name] = dict(labels=meta.get("labels") or {}, taints=(n.get("spec") or {}).get("taints") or [],  # type: ignore[index]
                         allocatable=(n.get("status") or {}).get("allocatable") or {}, host=h.get("host") or "",
                         gpus=[g for g in h.get("gpus") or [] if isinstance(g, dict)])
    return out
