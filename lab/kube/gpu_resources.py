"""What NVIDIA's k8s-device-plugin would advertise for a gpusim state: the nvidia.com/* extended resources per MIG
strategy (none, single, mixed), following NVIDIA/k8s-device-plugin internal/rm/rm.go (cited where a rule is).

Pure, apart from loading gpusim's model table for id-only states (``gpusim_namer``): the device-plugin stand-in
(device_plugin.py) and the tests use it. Lab code reading lab code; the product never does this.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys

DEFAULT_MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gpusim", "gpusim", "models.py")


def gpusim_namer(models_path=None):
    """Profile names for gpusim's id-only state, from gpusim's own model table (lab code; None if absent)."""
    models_path = models_path or DEFAULT_MODELS
    if not os.path.exists(models_path):
        return None
    spec = importlib.util.spec_from_file_location("_kubelab_gpusim_models", models_path)
    models = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = models  # dataclasses resolve their module through sys.modules
    try:
        spec.loader.exec_module(models)
    except Exception as exc:  # pylint: disable=broad-except
        print(f"lab device plugin: cannot load gpusim model table {models_path}: {exc}", file=sys.stderr)
        return None

    def namer(model_name, gi, ci):
        model = models.MODELS.get(model_name)
        prof = models.gi_profile_by_id(model, gi.get("profile_id")) if model else None
        if prof is None:
            return None
        if ci is None:
            return models.gi_name(model, prof)
        slices = ci.get("slices") or {v: k for k, v in models.CI_INDEX_BY_SLICES.items()}.get(ci.get("profile_id"), prof.slices)
        return models.ci_name(model, prof, slices)
    return namer


def _mig_enabled(gpu):
    """Current MIG mode from a gpusim GPU entry, read defensively (string, bool/int, or {current, pending})."""
    mode = gpu.get("mig_mode_current", gpu.get("mig_mode"))
    if isinstance(mode, dict):
        mode = mode.get("current")
    if isinstance(mode, str):
        return mode.strip().lower() in ("enabled", "1", "true", "on")
    return bool(mode)


def _profile_name(entry):
    for key in ("profile", "profile_name", "name"):
        value = entry.get(key)
        if isinstance(value, str) and value.strip():
            name = value.strip()
            if name.upper().startswith("MIG "):
                name = name[4:]
            return name
    return None


def _resource_suffix(profile):
    # The device plugin turns '+' into '.' ("1g.10gb+me" -> "nvidia.com/mig-1g.10gb.me").
    return profile.replace("+", ".")


def mig_devices(gpu, namer=None):
    """Profile names of the MIG devices (compute instances) of one GPU; full-GI CIs take the GI's name.

    Names come from the entries themselves ('profile'/'name') or, for gpusim's id-only entries (``profile_id``),
    from ``namer(model, gi, ci_or_None)``.
    """
    devices = []
    for gi in gpu.get("gpu_instances") or []:
        if not isinstance(gi, dict):
            continue
        gi_name = _profile_name(gi) or (namer(gpu.get("model"), gi, None) if namer else None)
        cis = gi.get("compute_instances")
        if cis is None:
            # gpusim state without CI detail: count the GI as one device, as mig-parted always creates a full CI.
            if gi_name:
                devices.append(gi_name)
            continue
        for ci in cis if isinstance(cis, list) else []:
            ci_name = None
            if isinstance(ci, dict):
                ci_name = _profile_name(ci) or (namer(gpu.get("model"), gi, ci) if namer else None)
            devices.append(_mig_device_name(gi_name, ci_name))
    return [name for name in devices if name]


def _mig_device_name(gi_name, ci_name):
    """'<C>c.<G>g.<M>gb' names a CI smaller than its GI; a full-GI CI (C == G) or an unnamed one is the GI's name."""
    match = re.match(r"^(\d+)c\.((\d+)g\..*)$", ci_name or "")
    if not match:
        return gi_name
    slices, rest, gi_slices = match.groups()
    if slices == gi_slices:
        return rest
    return ci_name


def device_plugin_resources(state, strategy="mixed", namer=None):
    """Extended resources a node advertises for a gpusim state, per the k8s-device-plugin MIG strategy.

    Returns (resources, error): resources maps 'nvidia.com/...' to an integer count; error is the device plugin's
    complaint for an invalid single-strategy layout (then 'nvidia.com/gpu' is 0, as the plugin reports).
    """
    state = state if isinstance(state, dict) else {}
    if state.get("driver_loaded") is False or state.get("library_present") is False:
        # No NVML on the host: the device plugin cannot start and the node advertises no GPUs.
        return {}, "NVML is not available on the node"
    gpus = [gpu for gpu in state.get("gpus") or [] if isinstance(gpu, dict)]
    resources = {}

    def add(name, count=1):
        resources[name] = resources.get(name, 0) + count

    if strategy == "none":
        add("nvidia.com/gpu", len(gpus))
        return resources, None
    if strategy == "single":
        enabled = {_mig_enabled(gpu) for gpu in gpus}
        if enabled == {True}:
            devices = [name for gpu in gpus for name in mig_devices(gpu, namer)]
            if len(set(devices)) > 1:
                return {"nvidia.com/gpu": 0}, "more than one MIG device type present on node"
            if any(not mig_devices(gpu, namer) for gpu in gpus):
                return {"nvidia.com/gpu": 0}, "at least one device with migEnabled=true was not configured correctly"
            add("nvidia.com/gpu", len(devices))
            return resources, None
        if len(enabled) > 1:
            return {"nvidia.com/gpu": 0}, "all devices on the node must be configured with the same migEnabled value"
        add("nvidia.com/gpu", len(gpus))
        return resources, None
    if strategy != "mixed":
        raise ValueError(f"unknown MIG strategy {strategy!r} (none, single, mixed)")
    for gpu in gpus:
        if _mig_enabled(gpu):
            for name in mig_devices(gpu, namer):
                # NVIDIA/k8s-device-plugin internal/rm/rm.go AddDefaultResourcesToConfig: the mixed strategy adds a
                # resource only for profiles whose compute instance spans the GPU instance ("if info.C != info.G"),
                # and internal/rm/device_map.go buildMigDeviceMap fails the whole device map on a MIG device that
                # matches no resource: the plugin does not start, and the node serves nothing.
                if re.match(r"^\d+c\.", name):
                    return {}, ("error building MIG device map: MIG profile '%s' does not match any resource patterns"
                                % name)
                add(f"nvidia.com/mig-{_resource_suffix(name)}")
        else:
            add("nvidia.com/gpu")
    return resources, None


# --- sharing: the device plugin's config file (time-slicing, MPS) ---------------------------------------------------
# The GPU Operator (controllers/object_controls.go handleDevicePluginConfig, transformConfigManager*Container) mounts
# the ConfigMap named in ClusterPolicy spec.devicePlugin.config.name into the device plugin pod, one file per key, and
# runs NVIDIA/k8s-device-plugin's config-manager with DEFAULT_CONFIG = spec.devicePlugin.config.default and
# FALLBACK_STRATEGIES = empty. config-manager (cmd/config-manager/main.go updateConfigName) picks the key named by
# the node label nvidia.com/device-plugin.config, else the default, else the empty config (no sharing).
CONFIG_LABEL = "nvidia.com/device-plugin.config"
SHARED_SUFFIX = ".shared"


def select_config(files, label_value, default_config=""):
    """(key, error) as config-manager's updateConfigName picks it from the available ``files`` (a ConfigMap's keys):
    the labelled key, which must exist; else the default, which must exist; else '' (FallbackStrategyEmptyConfig)."""
    files = set(files or ())
    if label_value:
        if label_value not in files:
            return None, "specified config %s does not exist" % label_value
        return label_value, None
    if default_config:
        if default_config not in files:
            return None, "specified config %s does not exist" % default_config
        return default_config, None
    return "", None


def parse_sharing(text):
    """The sharing part of a device plugin config file: ({strategy, replicas: {name: (replicas, rename)},
    fail_requests_greater_than_one} or None for no sharing, error).

    NVIDIA/k8s-device-plugin api/config/v1: config.go parseConfigFrom (YAML or JSON; version must be v1 when set),
    sharing.go SharingStrategy (MPS wins over time-slicing), replicas.go ReplicatedResources.UnmarshalJSON /
    ReplicatedResource.UnmarshalJSON ("no resources specified", "no replicas specified", replicas >= 2),
    config.go DisableResourceNamingInConfig -> disableResoureRenaming (a per-resource rename is ignored;
    renameByDefault renames to <name>.shared, resources.go DefaultSharedRename), NewConfig (MPS defaults
    failRequestsGreaterThanOne to true)."""
    import yaml  # pylint: disable=import-outside-toplevel
    if not text:
        return None, None
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        return None, "unable to parse config file: unmarshal error: %s" % exc
    if not isinstance(doc, dict):
        return None, "unable to parse config file: unmarshal error: not an object"
    version = doc.get("version") or "v1"
    if version != "v1":
        return None, "unable to parse config file: unknown version: %s" % version
    sharing = doc.get("sharing") or {}
    chosen = None
    for key, strategy in (("mps", "mps"), ("timeSlicing", "time-slicing")):
        section = sharing.get(key)
        if section is None:
            continue
        resources = section.get("resources")
        if not resources:
            return None, "unable to parse config file: unmarshal error: no resources specified"
        rename = bool(section.get("renameByDefault"))
        replicas = {}
        for r in resources:
            if not r.get("name"):
                return None, "unable to parse config file: unmarshal error: no resource name specified"
            if "replicas" not in r:
                return None, "unable to parse config file: unmarshal error: no replicas specified"
            if not isinstance(r["replicas"], int) or r["replicas"] < 2:
                return None, "unable to parse config file: unmarshal error: number of replicas must be >= 2"
            name = r["name"] if "/" in r["name"] else "nvidia.com/" + r["name"]
            replicas[name] = (r["replicas"], name + SHARED_SUFFIX if rename else name)
        fail = section.get("failRequestsGreaterThanOne")
        if strategy == "mps" and fail is None:
            fail = True
        if chosen is None:  # sharing.go SharingStrategy: MPS first
            chosen = {"strategy": strategy, "replicas": replicas, "fail_requests_greater_than_one": bool(fail)}
    return chosen, None


def _mps_max_clients(cc):
    # cmd/mps-control-daemon/mps/device.go maxClients / isAtLeastVolta (compares with v7.5): 48, else 16.
    return 48 if tuple(cc) >= (7, 5) else 16


def apply_sharing(resources, sharing, state, cc_of=None):
    """(resources, error): ``resources`` (device_plugin_resources) with ``sharing`` (parse_sharing) applied, as
    internal/rm/device_map.go updateDeviceMapWithReplicas does: every device of a replicated resource becomes
    ``replicas`` devices of the (renamed) resource; other resources are kept.

    MPS refuses MIG devices (internal/plugin/mps.go getMPSOptions: "sharing using MPS is not supported for MIG
    devices") and more replicas than an MPS server takes (mps/device.go assertReplicas); then the plugin does not
    start, and the node advertises its resources as 0. ``cc_of(model)`` gives a GPU's compute capability."""
    if not sharing:
        return dict(resources), None
    if sharing["strategy"] == "mps":
        gpus = [g for g in (state or {}).get("gpus") or [] if isinstance(g, dict)]
        if any(_mig_enabled(g) for g in gpus):
            return {k: 0 for k in resources}, "sharing using MPS is not supported for MIG devices"
        for g in gpus:
            cc = cc_of(g.get("model")) if cc_of else None
            for replicas, _name in sharing["replicas"].values():
                if cc is not None and replicas > _mps_max_clients(cc):
                    return ({k: 0 for k in resources},
                            "invalid device: maximum allowed replicas exceeded: %d > %d" % (replicas, _mps_max_clients(cc)))
    out = {}
    for name, count in resources.items():
        if name in sharing["replicas"] and count:
            replicas, target = sharing["replicas"][name]
            out[target] = out.get(target, 0) + count * replicas
        else:
            out[name] = out.get(name, 0) + count
    return out, None


def gpusim_compute_capability(models_path=None):
    """cc_of(model name) from gpusim's model table (its nvmlDeviceGetCudaComputeCapability answers the same)."""
    models_path = models_path or DEFAULT_MODELS
    module = sys.modules.get("_kubelab_gpusim_models")
    if module is None:
        if gpusim_namer(models_path) is None:
            return None
        module = sys.modules.get("_kubelab_gpusim_models")

    def cc_of(model_name):
        model = module.MODELS.get(model_name)
        return tuple(model.cuda_cc) if model is not None else None
    return cc_of
