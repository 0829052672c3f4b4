# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pre-join decisions for nodes that run the DRA Driver for NVIDIA GPUs instead of the device plugin (pure: no I/O).

The DRA driver moved from github.com/NVIDIA/k8s-dra-driver-gpu to github.com/kubernetes-sigs/dra-driver-nvidia-gpu;
the sources cited below are read at kubernetes-sigs/dra-driver-nvidia-gpu commit 95932046 (2026-08-07, after
v0.4.1) unless another repository is named. Each check returns ``(status, evidence, remedy)`` with status
``pass``/``fail``/``warn``/``skip``; _preflight/checks.py wraps them into its check records.

What a DRA node needs, and what it does not:
  * GPU allocation: NVIDIA driver R565 or later. ComputeDomains: 570.158.01 or later (check_dra_driver).
  * CDI: the DRA driver does NOT use the NVIDIA Container Toolkit's spec (``nvidia.com/gpu``, /etc/cdi/nvidia.yaml or
    nvidia-cdi-refresh's /var/run/cdi/nvidia.yaml). Its GPU kubelet plugin generates one transient spec per
    ResourceClaim itself (kind ``k8s.gpu.nvidia.com/claim``) with the toolkit's Go library built in, and writes it to
    /var/run/cdi; it brings its own nvidia-cdi-hook. What the node must provide is a container runtime with CDI
    enabled that reads /var/run/cdi (check_dra_cdi). The toolkit's own spec is only judged when present or required.
  * MIG: with the DynamicMIG feature gate the plugin creates and destroys MIG partitions itself and destroys, when it
    starts, every partition it did not create; so the collection must create none there (check_dra_mig). Without it
    (static MIG, the upstream default) the plugin advertises the partitions that exist when it starts.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional, Union

from ansible_collections.gpuops.provision.plugins.module_utils._drivers import versions

__all__ = [
    "DraError", "MIN_DRIVER_GPU", "MIN_DRIVER_COMPUTE_DOMAINS", "GPU_OPERATOR_MIN_DRIVER", "DRA_CDI_ROOT",
    "DRA_CDI_KIND", "TOOLKIT_CDI_KIND", "TOOLKIT_CDI_SPECS", "CDI_SPEC_DIRS", "CDI_VERSIONS", "AMPERE_MIG_MODELS",
    "parse_cdi_spec", "check_dra_driver", "check_dra_cdi", "check_dra_mig", "parse_runtime_version", "runtime_cdi",
]


class DraError(ValueError):
    """A CDI spec a container runtime would not load (the message names the file and the problem), or a bad argument."""


# --- driver versions ----------------------------------------------------------------------------------------------

# site/content/docs/prerequisites.md (kubernetes-sigs/dra-driver-nvidia-gpu; docs/prerequisites.md in the older
# NVIDIA repository): "NVIDIA Driver | v565 or later for GPU allocation". A documented floor only: the GPU kubelet
# plugin (cmd/gpu-kubelet-plugin) does not compare the driver version anywhere, so the check is ours.
MIN_DRIVER_GPU = "565"
# cmd/compute-domain-kubelet-plugin/main.go IMEXDaemonsWithDNSNamesMinDriverVersion = "570.158.01", enforced at plugin
# start by device_state.go validateDriverVersionForIMEXDaemonsWithDNSNames() (k8s version.ParseGeneric, numeric
# fields, so 570.158.01 == 570.158.1) whenever the IMEXDaemonsWithDNSNames gate is on: on by default
# (pkg/featuregates/featuregates.go). prerequisites.md: "The ComputeDomain plugin will fail to start on older drivers
# unless IMEXDaemonsWithDNSNames is explicitly disabled". Upstream states no floor for ComputeDomains with the gate
# off; callers that disabled it pass their own ``minimum``.
MIN_DRIVER_COMPUTE_DOMAINS = "570.158.01"
# NVIDIA GPU Operator docs, gpu-operator/dra-intro-install.rst "Prerequisites" (NVIDIA/cloud-native-docs 52dcb7b8,
# https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/dra-intro-install.html): "NVIDIA GPU driver
# version 580 or later" for the DRA driver deployed by the GPU Operator (GPUCluster). Stricter than the DRA driver's
# own documents; not the default here, pass it as ``minimum`` for Operator-managed DRA.
GPU_OPERATOR_MIN_DRIVER = "580"


def _floor(value: object) -> versions.DriverVersion:
    """A DriverVersion from a full version (570.158.01) or a branch (565, R565: its first release)."""
    text = str(value if value is not None else "").strip()
    try:
        if re.match(r"^[Rr]?\d{2,4}\Z", text):
            return versions.DriverVersion(versions.parse_branch(text), 0, None, text.lstrip("Rr"))
        return versions.parse_driver_version(text)
    except versions.VersionError as e:
        raise DraError("minimum driver version: %s" % e)


def check_dra_driver(driver_version: Optional[str], compute_domains: bool = False,
                     minimum: Union[int, str, None] = None) -> tuple[str, str, str]:
    """The loaded NVIDIA driver is new enough for the DRA driver.

    driver_version: the version NVML (or the kernel module) reports; a package version is accepted too.
    compute_domains: the node runs ComputeDomains (the compute-domain kubelet plugin), which needs
    MIN_DRIVER_COMPUTE_DOMAINS; otherwise GPU allocation's MIN_DRIVER_GPU applies.
    minimum: a floor of your own instead (e.g. GPU_OPERATOR_MIN_DRIVER, or the one for IMEXDaemonsWithDNSNames=false).
    Returns (status, evidence, remedy).
    """
    if minimum not in (None, ""):
        floor, why = _floor(minimum), "the declared minimum"
    elif compute_domains:
        floor = _floor(MIN_DRIVER_COMPUTE_DOMAINS)
        why = ("the minimum the DRA driver's ComputeDomain kubelet plugin enforces when it starts "
               "(feature gate IMEXDaemonsWithDNSNames, on by default)")
    else:
        floor = _floor(MIN_DRIVER_GPU)
        why = "the minimum the DRA driver documents for GPU allocation"
    remedy = ("install NVIDIA driver %s or newer (set nvidia_driver_version and run playbooks/driver_pin.yml with "
              "driver_pin_mode=converge), drain the node and reboot" % floor)
    if compute_domains and minimum in (None, ""):
        remedy += ("; or deploy the DRA driver with featureGates.IMEXDaemonsWithDNSNames=false (IMEX daemons then use "
                   "IP addresses) and declare the minimum that applies")
    if driver_version in (None, ""):
        return "fail", "no NVIDIA driver version was read (the DRA driver needs %s or newer)" % floor, remedy
    try:
        have = versions.driver_version_of(driver_version)
    except versions.VersionError as e:
        return "fail", "the driver version is not understood: %s" % e, remedy
    if have < floor:
        return "fail", "driver %s is older than %s, %s" % (have, floor, why), remedy
    return "pass", "driver %s >= %s, %s" % (have, floor, why), ""


# --- CDI ----------------------------------------------------------------------------------------------------------

# cmd/gpu-kubelet-plugin/cdi.go defaultCDIRoot = "/var/run/cdi"; the Helm chart sets CDI_ROOT=/var/run/cdi and mounts
# hostPath /var/run/cdi (deployments/helm/dra-driver-nvidia-gpu/templates/kubeletplugin.yaml), not configurable there.
DRA_CDI_ROOT = "/var/run/cdi"
# cdi.go cdiVendor = "k8s." + DriverName ("gpu.nvidia.com", main.go), cdiClaimClass = "claim"; CreateClaimSpecFile()
# writes <root>/k8s.gpu.nvidia.com-claim_<claim UID>.yaml (CDI GenerateTransientSpecName), devices named
# "<claim UID>-<canonical name>", e.g. k8s.gpu.nvidia.com/claim=<uid>-gpu-0; DeleteClaimSpecFile() removes it.
DRA_CDI_KIND = "k8s.gpu.nvidia.com/claim"
# NVIDIA/nvidia-container-toolkit cmd/nvidia-ctk/cdi/generate/generate.go: --vendor nvidia.com, --class gpu,
# --device-name-strategy index and uuid by default (pkg/nvcdi/namer.go: "0", MIG "0:1", GPU-/MIG- UUIDs) plus "all".
TOOLKIT_CDI_KIND = "nvidia.com/gpu"
# Where the toolkit writes it: "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" (container-toolkit docs,
# cdi-support.md, before v1.18), and since v1.18 the nvidia-cdi-refresh service
# (deployments/systemd/nvidia-cdi-refresh.service: NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/var/run/cdi/nvidia.yaml).
TOOLKIT_CDI_SPECS = ("/etc/cdi/nvidia.yaml", "/var/run/cdi/nvidia.yaml")
# The directories CDI-enabled runtimes read by default: container-device-interface pkg/cdi/spec-dirs.go
# DefaultSpecDirs (containerd's cdi_spec_dirs and CRI-O's default to the same). Later directories take precedence.
CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
# container-device-interface specs-go/version.go validSpecVersions (CDI v1.1.0, vendored by the DRA driver): a spec
# with any other cdiVersion fails to load ("invalid version"). A newer CDI release adds versions: pass cdi_versions.
CDI_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
# pkg/cdi/spec-dirs.go scanSpecDirs(): files with any other extension are skipped (a .yml spec is never read).
CDI_EXTENSIONS = (".json", ".yaml")
# specs-go/config.go: the fields of Spec and Device. ParseSpec() uses sigs.k8s.io/yaml UnmarshalStrict, so an
# unknown field makes the whole file fail to load.
_SPEC_FIELDS = ("cdiVersion", "kind", "annotations", "devices", "containerEdits")
_DEVICE_FIELDS = ("name", "annotations", "containerEdits")
# pkg/parser/parser.go validateVendorOrClassName() and ValidateDeviceName().
_VENDOR_CLASS_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?\Z")
_DEVICE_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?\Z")


def _load_text(text: Union[str, bytes], path: str) -> Any:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DraError("CDI spec %s is not UTF-8 text: %s" % (path, e))
    try:
        import yaml  # the controller's PyYAML (ansible-core requires it); JSON specs parse as YAML too
    except ImportError:
        raise DraError("CDI spec %s: PyYAML is needed to read it (pass the parsed data instead)" % path)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise DraError("CDI spec %s is not valid YAML or JSON: %s" % (path, " ".join(str(e).split())))


def parse_cdi_spec(text: Union[str, bytes, dict[str, Any]], path: Optional[str],
                   cdi_versions: Sequence[str] = CDI_VERSIONS) -> dict[str, Any]:
    """Read one CDI spec the way container runtimes load it (container-device-interface pkg/cdi/spec.go ReadSpec).

    text: the file's content (str or bytes, YAML or JSON: both are read as YAML, as sigs.k8s.io/yaml does), or the
    already parsed mapping. path: the file's path on the node, used in messages and to check the extension.
    Returns {path, cdi_version, kind, devices: [names]}; raises DraError naming the file and the problem.
    Not checked: containerEdits' content and annotation keys (the library validates those too), duplicate YAML keys.
    """
    path = str(path or "")
    if not path.endswith(CDI_EXTENSIONS):
        raise DraError("CDI spec %s is never read: runtimes load only *.json and *.yaml files from a CDI directory"
                       % (path or "(no path)"))
    data = text if isinstance(text, dict) else _load_text(text, path)
    if not isinstance(data, dict):
        raise DraError("CDI spec %s is not a mapping with cdiVersion, kind and devices (found %s)"
                       % (path, type(data).__name__))
    unknown = sorted(str(k) for k in data if k not in _SPEC_FIELDS)
    if unknown:
        raise DraError("CDI spec %s has unknown field(s) %s; runtimes reject the whole file (known: %s)"
                       % (path, ", ".join(unknown), ", ".join(_SPEC_FIELDS)))
    version = data.get("cdiVersion")
    if not isinstance(version, str) or not version.strip():
        raise DraError("CDI spec %s has no cdiVersion string (found %r)" % (path, version))
    version = version.strip()
    if version.lstrip("v") not in cdi_versions:
        raise DraError("CDI spec %s: cdiVersion %r is not a CDI specification version (known: %s)"
                       % (path, version, ", ".join(cdi_versions)))
    kind = data.get("kind")
    parts = kind.split("/", 1) if isinstance(kind, str) else []
    if len(parts) != 2 or not all(parts):
        raise DraError("CDI spec %s: kind %r is not vendor/class (e.g. nvidia.com/gpu)" % (path, kind))
    for what, name in (("vendor", parts[0]), ("class", parts[1])):
        if not _VENDOR_CLASS_RE.match(name):
            raise DraError("CDI spec %s: kind %r has an invalid %s %r (a letter first, then letters, digits, '_', "
                           "'-', '.', ending with a letter or digit)" % (path, kind, what, name))
    devices = data.get("devices")
    if not isinstance(devices, list) or not devices:
        raise DraError("CDI spec %s defines no devices; runtimes reject a spec without devices" % path)
    names = []
    for number, dev in enumerate(devices):
        if not isinstance(dev, dict) or not isinstance(dev.get("name"), str):
            raise DraError("CDI spec %s: device #%d has no name" % (path, number))
        extra = sorted(str(k) for k in dev if k not in _DEVICE_FIELDS)
        if extra:
            raise DraError("CDI spec %s: device %r has unknown field(s) %s; runtimes reject the whole file"
                           % (path, dev["name"], ", ".join(extra)))
        if not _DEVICE_NAME_RE.match(dev["name"]):
            raise DraError("CDI spec %s: device name %r is invalid (letters, digits, '_', '-', '.', ':', beginning and "
                           "ending with a letter or digit)" % (path, dev["name"]))
        if dev["name"] in names:
            raise DraError("CDI spec %s defines device %r twice; runtimes reject the whole file" % (path, dev["name"]))
        names.append(dev["name"])
    return {"path": path, "cdi_version": version, "kind": kind, "devices": names}


def _dir_key(path: str) -> str:
    """A directory as runtimes compare it (filepath.Clean); /var/run is taken as /run, its symlink on systemd hosts."""
    clean = posixpath.normpath(str(path))
    if clean == "/var/run" or clean.startswith("/var/run/"):
        clean = clean[len("/var"):]
    return clean


def _stale_names(names: Iterable[str], gpus: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    """Toolkit spec entries that do not match the node's GPUs: (GPUs missing from the spec, names of no GPU).

    A GPU is covered by its index ("0") or its UUID; MIG entries ("0:1", MIG-...) change with the geometry and
    nvidia-cdi-refresh does not follow MIG changes (container-toolkit docs, cdi-support.md), so they are not judged.
    """
    indexes = set(str(g.get("index")) for g in gpus if g.get("index") is not None)
    uuids = set(str(g.get("uuid")) for g in gpus if g.get("uuid"))
    present = set(names)
    missing = ["GPU %s (%s)" % (g.get("index"), g.get("uuid") or "no UUID") for g in gpus
               if str(g.get("index")) not in present and g.get("uuid") not in present]
    unknown = sorted(n for n in present if (n.isdigit() and n not in indexes) or (n.startswith("GPU-") and
                                                                                  n not in uuids))
    return missing, unknown


# --- the container runtime and Kubernetes the DRA driver needs (issue 37 point 7) ------------------------------------
# prerequisites.md (kubernetes-sigs/dra-driver-nvidia-gpu site/content/docs): Kubernetes v1.32 or newer (DRA is GA from
# 1.34; in 1.32 and 1.33 the DynamicResourceAllocation feature gate and the resource.k8s.io API must be turned on),
# and "CDI: Enabled in your container runtime. This is the default in containerd 2.0+ and CRI-O v1.27+".
# containerd's CRI plugin (its config dump, with defaults): 1.7 (config version 2)
# [plugins."io.containerd.grpc.v1.cri"] enable_cdi, default false (containerd v1.7 pkg/cri/config DefaultConfig);
# 2.x (config version 3) [plugins."io.containerd.cri.v1.runtime"] enable_cdi, default true (containerd v2
# internal/cri/config DefaultRuntimeConfig), a version 2 file being migrated to it; cdi_spec_dirs defaults to
# ["/etc/cdi", "/var/run/cdi"] in both. `containerd --version`: "containerd <module> v1.7.27 <commit>";
# `crio --version`: "crio version 1.27.1" (older) or "Version:  1.27.1"; `kubelet --version`: "Kubernetes v1.33.2".
MIN_KUBERNETES = (1, 32)
DRA_GA_KUBERNETES = (1, 34)
CONTAINERD_CDI_DEFAULT = (2, 0)
CONTAINERD_CDI_FIRST = (1, 7)
CRIO_CDI_DEFAULT = (1, 27)
_VERSION_LINE_RE = re.compile(r"^(?:containerd\s+\S+\s+|crio version\s+|Version:\s*|Kubernetes\s+)v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_runtime_version(text: object) -> Optional[tuple[int, int, int]]:
    """(major, minor, patch) from ``containerd --version``, ``crio --version`` or ``kubelet --version``, or None."""
    for line in str(text or "").splitlines():
        m = _VERSION_LINE_RE.match(line.strip())
        if m:
            return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
    return None


def _toml(text: object, what: str) -> dict[str, Any]:
    import tomllib  # pylint: disable=import-outside-toplevel  # Python 3.11+: read on the controller
    try:
        return tomllib.loads(str(text or ""))
    except tomllib.TOMLDecodeError as e:
        raise DraError("%s is not TOML: %s" % (what, e)) from e


def _ver(v: Optional[tuple[int, int, int]]) -> str:
    return ".".join(str(n) for n in v) if v else "unknown"


def runtime_cdi(containerd_version: object = None, containerd_config: object = None, crio_version: object = None,
                crio_config: object = None, kubelet_version: object = None) -> dict[str, Any]:
    """What the node's runtime and kubelet give the DRA driver: dict(runtime, version, enabled, spec_dirs, kubernetes,
    fails, warns). ``*_version``: the tools' --version output (empty when the tool is absent); ``containerd_config``:
    ``containerd config dump``; ``crio_config``: ``crio config`` (or its configuration file)."""
    out: dict[str, Any] = dict(runtime=None, version=None, enabled=None, spec_dirs=[], kubernetes=None, fails=[], warns=[])
    ctd = parse_runtime_version(containerd_version)
    crio = parse_runtime_version(crio_version)
    if ctd:
        plugins = _toml(containerd_config, "containerd's configuration").get("plugins") or {}
        v2 = ctd >= (CONTAINERD_CDI_DEFAULT + (0,))
        section = plugins.get("io.containerd.cri.v1.runtime") if v2 else None
        if section is None:
            section = plugins.get("io.containerd.grpc.v1.cri") or {}   # 1.7, or a version 2 file migrated by 2.x
        explicit = "enable_cdi" in section
        enabled = bool(section.get("enable_cdi", v2)) and ctd >= (CONTAINERD_CDI_FIRST + (0,))
        out.update(runtime="containerd", version=_ver(ctd), enabled=enabled,
                   spec_dirs=list(section.get("cdi_spec_dirs") or CDI_SPEC_DIRS) if enabled else [])
        if ctd < (CONTAINERD_CDI_FIRST + (0,)):
            out["fails"].append("containerd %s has no CDI (from 1.7; on by default from 2.0)" % _ver(ctd))
        elif not enabled:
            out["fails"].append("containerd %s runs with enable_cdi = false%s" % (
                _ver(ctd), "" if explicit else " (its default before 2.0)"))
    elif crio:
        runtime = ((_toml(crio_config, "CRI-O's configuration").get("crio") or {}).get("runtime") or {}) if crio_config else {}
        ok = crio >= (CRIO_CDI_DEFAULT + (0,))
        out.update(runtime="cri-o", version=_ver(crio), enabled=ok,
                   spec_dirs=list(runtime.get("cdi_spec_dirs") or CDI_SPEC_DIRS) if ok else [])
        if not ok:
            out["fails"].append("CRI-O %s does not enable CDI (from 1.27)" % _ver(crio))
    else:
        out["fails"].append("no container runtime answers (containerd --version, crio --version)")
    kube = parse_runtime_version(kubelet_version)
    out["kubernetes"] = _ver(kube) if kube else None
    if kube is None:
        out["warns"].append("the kubelet's version could not be read (kubelet --version)")
    elif kube[:2] < MIN_KUBERNETES:
        out["fails"].append("Kubernetes %s is older than the DRA driver's 1.32" % _ver(kube))
    elif kube[:2] < DRA_GA_KUBERNETES:
        out["warns"].append("Kubernetes %s: DRA is beta before 1.34, so the DynamicResourceAllocation feature gate and "
                            "the resource.k8s.io API must be on" % _ver(kube))
    return out


def check_dra_cdi(specs: Optional[Sequence[Mapping[str, Any]]], expected_gpus: Optional[Iterable[Mapping[str, Any]]] = None,
                  spec_dirs: Optional[Sequence[str]] = None, cdi_root: str = DRA_CDI_ROOT, require_toolkit_spec: bool = False,
                  toolkit_kind: str = TOOLKIT_CDI_KIND, runtime: Optional[Mapping[str, Any]] = None) -> tuple[str, str, str]:
    """CDI on a DRA node: the runtime reads the directory the DRA driver writes its per-claim specs to, and the
    specs already there load.

    specs: one entry per spec file found in the CDI directories: parse_cdi_spec's result, or {path, error} for a
    file it rejected. expected_gpus: gpu_info's gpus (index, uuid) to judge the toolkit's spec against.
    spec_dirs: the container runtime's CDI spec directories in order ([] = CDI disabled, None = not gathered):
    containerd's enable_cdi/cdi_spec_dirs, CRI-O's cdi_spec_dirs. cdi_root: where the DRA driver writes
    (DRA_CDI_ROOT). require_toolkit_spec: the node also needs the toolkit's spec (nvidia.com/gpu=... requested by
    something other than the DRA driver); the DRA driver itself does not. runtime: runtime_cdi's reading of the node's
    container runtime and kubelet; its spec directories stand in for spec_dirs when spec_dirs is None. Returns
    (status, evidence, remedy).
    """
    fails: list[str] = []
    warns: list[str] = []
    notes: list[str] = []
    remedies: list[str] = []
    if runtime is not None:
        fails.extend(runtime.get("fails") or [])
        warns.extend(runtime.get("warns") or [])
        if runtime.get("runtime"):
            notes.append("%s %s, CDI %s, Kubernetes %s" % (runtime["runtime"], runtime.get("version"),
                                                           "enabled" if runtime.get("enabled") else "disabled",
                                                           runtime.get("kubernetes") or "unknown"))
        if runtime.get("fails") or runtime.get("warns"):
            remedies.append("run containerd 2.x or CRI-O 1.27+ (or set enable_cdi = true in containerd 1.7's "
                            "[plugins.\"io.containerd.grpc.v1.cri\"]) and Kubernetes 1.32+ with DynamicResourceAllocation")
        if spec_dirs is None:
            spec_dirs = runtime.get("spec_dirs")
    runtime_remedy = ("enable CDI and read %s: containerd 2.x [plugins.'io.containerd.cri.v1.runtime'] (1.7: "
                      "[plugins.\"io.containerd.grpc.v1.cri\"]) enable_cdi = true, cdi_spec_dirs = [\"/etc/cdi\", "
                      "\"/var/run/cdi\"], then systemctl restart containerd; CRI-O: cdi_spec_dirs in [crio.runtime], "
                      "then systemctl restart crio" % cdi_root)
    # Runtime side: the DRA driver's prerequisites (site/content/docs/prerequisites.md, "CDI: Enabled in your
    # container runtime ... by default in containerd 2.0+ and CRIO v1.27+"); it writes only to cdi_root.
    # dirs is None exactly when spec_dirs is: mypy cannot follow that, hence the two type: ignore[arg-type] below.
    dirs = None if spec_dirs is None else [_dir_key(d) for d in spec_dirs]
    if dirs is None:
        warns.append("the container runtime's CDI configuration was not given: not confirmed that it reads %s"
                     % cdi_root)
        remedies.append("gather the runtime's CDI settings (containerd: enable_cdi and cdi_spec_dirs in "
                        "/etc/containerd/config.toml; CRI-O: cdi_spec_dirs)")
    elif not dirs:
        fails.append("CDI is disabled in the container runtime (no CDI spec directory): the DRA driver cannot "
                     "inject GPUs")
        remedies.append(runtime_remedy)
    elif _dir_key(cdi_root) not in dirs:
        fails.append("the container runtime reads CDI specs from %s, not from %s where the DRA driver's GPU kubelet "
                     "plugin writes its per-claim specs" % (", ".join(spec_dirs), cdi_root))  # type: ignore[arg-type]
        remedies.append(runtime_remedy)
    else:
        notes.append("the runtime reads CDI specs from %s" % ", ".join(spec_dirs))  # type: ignore[arg-type]

    good = [s for s in specs or [] if not s.get("error")]
    for bad in [s for s in specs or [] if s.get("error")]:
        # pkg/cdi/cache.go refresh(): a spec that fails to load is skipped and its error recorded; its devices are
        # unresolvable, the other specs still work.
        warns.append("%s does not load: %s; runtimes skip it" % (bad.get("path"), bad["error"]))
        remedies.append("fix or remove %s (a toolkit spec: regenerate it with systemctl restart "
                        "nvidia-cdi-refresh.service or nvidia-ctk cdi generate --output=<path>)" % bad.get("path"))
    if dirs:
        unread = [s["path"] for s in good if _dir_key(posixpath.dirname(s["path"])) not in dirs]
        if unread:
            notes.append("not in a directory the runtime reads: %s" % ", ".join(unread))
    # cache.go refresh() resolveConflict(): one device name in two specs of the same directory (same priority) is a
    # conflict and the runtime drops the device; a later directory silently overrides an earlier one.
    seen: dict[tuple[str, str, str], list[str]] = {}
    for spec in good:
        for name in spec["devices"]:
            seen.setdefault((_dir_key(posixpath.dirname(spec["path"])), spec["kind"], name), []).append(spec["path"])
    for (_dir, kind, name), paths in sorted(seen.items()):
        if len(paths) > 1:
            warns.append("device %s=%s is defined by both %s; runtimes drop it as a conflict"
                         % (kind, name, " and ".join(paths)))
            remedies.append("keep one spec per device in a directory: remove the extra file among %s"
                            % ", ".join(paths))

    claims = [s for s in good if s["kind"] == DRA_CDI_KIND]
    if claims:
        notes.append("%d per-claim spec(s) of the DRA driver (%s)" % (len(claims), DRA_CDI_KIND))
    toolkit = [s for s in good if s["kind"] == toolkit_kind]
    generate = ("systemctl restart nvidia-cdi-refresh.service (toolkit 1.18+, writes /var/run/cdi/nvidia.yaml) or "
                "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml")
    if not toolkit:
        text = "no %s spec of the NVIDIA Container Toolkit" % toolkit_kind
        if require_toolkit_spec:
            fails.append(text + ", and it is required")
            remedies.append("install nvidia-container-toolkit-base, then " + generate)
        else:
            notes.append(text + " (the DRA driver does not use it: it writes %s specs per claim)" % DRA_CDI_KIND)
    else:
        names = [n for s in toolkit for n in s["devices"]]
        notes.append("toolkit spec(s) %s list %s" % (", ".join(s["path"] for s in toolkit), ", ".join(names)))
        if expected_gpus is not None:
            missing, unknown = _stale_names(names, [g for g in expected_gpus if not g.get("error")])
            if missing or unknown:
                text = "the toolkit spec is stale: %s" % "; ".join(
                    (["lacks %s" % ", ".join(missing)] if missing else []) +
                    (["names %s, not GPUs of this node" % ", ".join(unknown)] if unknown else []))
                (fails if require_toolkit_spec else warns).append(text)
                remedies.append("regenerate the toolkit spec: " + generate)
    evidence = "; ".join(fails + warns + notes)
    if fails:
        return "fail", evidence, "; ".join(remedies)
    if warns:
        return "warn", evidence, "; ".join(remedies)
    return "pass", evidence, ""


# --- MIG ----------------------------------------------------------------------------------------------------------

# cmd/gpu-kubelet-plugin/nvlib.go supportsMIGModeToggle(): only Hopper and newer change MIG mode without a GPU reset;
# isDynamicMIGCapable(): on an older GPU DynamicMIG works only if MIG mode is already on, else the GPU is offered
# whole. gpu_info does not report the architecture, so the MIG-capable pre-Hopper (Ampere) models are named here
# (MIG user guide, supported GPUs: A100, A30; A800 is the A100's export variant). Matched at the start of a word of
# gpu_info's model ("NVIDIA A100-SXM4-40GB"); pass your own list for other names.
AMPERE_MIG_MODELS = ("A100", "A30", "A800")


def _gpu_name(gpu: Mapping[str, Any]) -> str:
    return "GPU %s (%s)" % (gpu.get("index"), gpu.get("uuid") or gpu.get("model") or "?")


def _partitions(gpu: Mapping[str, Any]) -> str:
    """'2x 1g.10gb, 1x 3g.40gb' for the MIG devices gpu_info reports on the GPU, or '' when there are none."""
    counts = dict((str(k), v) for k, v in (gpu.get("mig_devices") or {}).items() if v)
    if counts:
        return ", ".join("%dx %s" % (counts[k], k) for k in sorted(counts))
    instances = gpu.get("instances") or []
    return "%d GPU instance(s)" % len(instances) if instances else ""


def _is_ampere(gpu: Mapping[str, Any], models: Iterable[str]) -> bool:
    model = str(gpu.get("model") or "")
    return any(re.search(r"(?<![A-Za-z0-9])%s" % re.escape(m), model) for m in models)


def check_dra_mig(gpus: Optional[Iterable[Mapping[str, Any]]], mig_target_declared: bool, dra_manages_mig: bool = True,
                  ampere_models: Sequence[str] = AMPERE_MIG_MODELS) -> tuple[str, str, str]:
    """MIG on a DRA node: no partitions made by anyone else where the DRA driver manages MIG (DynamicMIG), and no GPU
    stranded in MIG mode without partitions where it only discovers them (static MIG).

    gpus: gpu_info's gpus (index, uuid, model, mig_capable, mig_mode, instances, mig_devices, virtualization).
    mig_target_declared: the collection has a MIG target for this node (it would create partitions).
    dra_manages_mig: the DRA driver runs with featureGates.DynamicMIG=true (upstream default false, alpha).
    Meant for a node whose GPU kubelet plugin does not run yet: once it runs, the partitions seen are its claims'.
    Returns (status, evidence, remedy).
    """
    gpus = list(gpus or [])
    fails, warns, good, remedies = [], [], [], []
    broken = [g for g in gpus if g.get("error")]
    for gpu in broken:
        fails.append("%s: NVML did not answer (%s), its MIG partitions are unknown" % (_gpu_name(gpu), gpu["error"]))
        remedies.append("make NVML answer for every GPU (gpu_info as root; see check driver_version)")
    mig = [g for g in gpus if not g.get("error") and (g.get("mig_capable") or g.get("mig_mode"))]
    mode = "DynamicMIG" if dra_manages_mig else "static MIG"
    if dra_manages_mig:
        # site/content/docs/guides/gpu-allocation/mig.md, "Limitations and considerations": dynamic MIG "does not use
        # pre-created static partitions. MIG partitions the driver did not create are destroyed when the GPU kubelet
        # plugin starts"; do not run mig-parted or nvidia-smi mig while it runs. Code: cmd/gpu-kubelet-plugin/driver.go
        # NewDriver() -> device_state.go DestroyUnknownMIGDevices() -> nvlib.go obliterateStaleMIGDevices().
        if mig_target_declared:
            fails.append("a MIG target is declared for this node, but with DynamicMIG the DRA driver creates MIG "
                         "partitions per claim and destroys the ones it did not create when it starts")
            remedies.append("remove this node's MIG target (node_preflight_mig_config, mig_reconfigure_config) so the "
                            "collection creates no partitions, or run the DRA driver without DynamicMIG")
        made = [(g, _partitions(g)) for g in mig if _partitions(g)]
        for gpu, what in made:
            fails.append("%s has pre-created MIG partitions (%s); the DRA driver would destroy them when it starts"
                         % (_gpu_name(gpu), what))
        if made:
            remedies.append("destroy them before the DRA driver starts, with no GPU processes: %s; or keep them and "
                            "run the DRA driver without DynamicMIG" % "; ".join(
                                "nvidia-smi mig -i %s -dci && nvidia-smi mig -i %s -dgi"
                                % (g.get("index"), g.get("index"))
                                for g, _what in made))
        for gpu in [g for g in mig if not _partitions(g)]:
            current = (gpu.get("mig_mode") or {}).get("current")
            if (gpu.get("virtualization") or {}).get("mode") == "vgpu":
                # nvlib.go isDynamicMIGCapable(): "vGPU guest detected — skipping DynamicMIG"; mig.md: "Dynamic MIG
                # is not supported on vGPU guests".
                warns.append("%s is a vGPU: the DRA driver skips DynamicMIG on it" % _gpu_name(gpu))
                remedies.append("size the partition with the vGPU profile instead, or run without DynamicMIG")
            elif current != "enabled" and _is_ampere(gpu, ampere_models):
                # mig.md: "On Ampere GPUs (for example, A100), enable MIG mode on the GPU before the DRA Driver starts
                # ... If MIG mode is off, the driver falls back to full-GPU allocation and advertises no MIG
                # partitions. Hopper and later architectures enable MIG mode on demand."
                warns.append("%s (%s) has MIG mode %s: an Ampere GPU cannot switch it without a reset, so the DRA "
                             "driver offers it whole, with no MIG partitions" % (_gpu_name(gpu), gpu.get("model"),
                                                                                 current or "unknown"))
                remedies.append("enable MIG mode before the DRA driver starts: nvidia-smi -i %s -mig 1, then "
                                "nvidia-smi -r -i %s or reboot" % (gpu.get("index"), gpu.get("index")))
            else:
                good.append("%s: MIG mode %s, no partitions (the DRA driver creates them per claim)"
                            % (_gpu_name(gpu), current or "unknown"))
    else:
        # site/content/docs/concepts/gpu-allocation.md "How static MIG discovery works": partitions that exist when the
        # plugin starts are advertised; "MIG mode enabled with no partitions strands the GPU ... the driver advertises
        # neither the full GPU nor any slices for it" (nvlib.go: "has MIG mode enabled but no configured MIG devices").
        for gpu in mig:
            current = (gpu.get("mig_mode") or {}).get("current")
            what = _partitions(gpu)
            if current == "enabled" and not what:
                fails.append("%s has MIG mode enabled but no MIG partitions: the DRA driver offers neither the whole "
                             "GPU nor any partition" % _gpu_name(gpu))
                remedies.append("create the partitions before the DRA driver's GPU kubelet plugin starts (declare the "
                                "MIG target and run playbooks/mig_reconfigure.yml), or disable MIG mode: nvidia-smi "
                                "-i %s -mig 0, then nvidia-smi -r -i %s; restart the plugin after any MIG change"
                                % (gpu.get("index"), gpu.get("index")))
            elif what:
                good.append("%s: %s (advertised when the GPU kubelet plugin starts)" % (_gpu_name(gpu), what))
            else:
                good.append("%s: MIG mode %s, offered whole" % (_gpu_name(gpu), current or "unknown"))
    if not fails and not warns and not mig:
        return "skip", "no MIG-capable GPU (%s)" % mode, ""
    evidence = "%s: %s" % (mode, "; ".join(fails + warns + good))
    # Each remedy once: the NVML and vGPU remedies name no GPU, so several GPUs would repeat them word for word.
    remedy = "; ".join(dict.fromkeys(remedies))
    if fails:
        return "fail", evidence, remedy
    if warns:
        return "warn", evidence, remedy
    return "pass", evidence, ""
