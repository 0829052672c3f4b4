# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vSphere adapter over pyvmomi: session, PropertyCollector bulk reads, task waiting, host/VM GPU facts.

Decisions live in _vsphere/vgpu.py; this file only reads and writes vSphere objects.
"""

from __future__ import annotations

import copy
import http.client
import os
import re
import socket
import ssl
import threading
import time
import traceback
import xml.parsers.expat
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Optional

try:
    from pyVmomi import VmomiSupport, vim, vmodl
    from pyVim.connect import SmartConnect, Disconnect
    HAS_PYVMOMI = True
    PYVMOMI_IMPORT_ERROR = None
except ImportError:  # pragma: no cover - reported by the module through missing_required_lib
    HAS_PYVMOMI = False
    PYVMOMI_IMPORT_ERROR = traceback.format_exc()

from ansible_collections.gpuops.provision.plugins.module_utils._common import bounds
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import vgpu

# Benchmarks set this to a file path; every session appends "<soap calls>\n" to it when it closes.
CALLS_FILE_ENV = "GPUOPS_VSPHERE_CALLS_FILE"

DEFAULT_DRIVER_REGEX = r"(?i)^(nvidia|nvd)"

HOST_PROPS = [
    "name", "parent", "runtime.connectionState", "runtime.inMaintenanceMode", "config.product.version",
    "config.graphicsInfo", "config.sharedPassthruGpuTypes", "config.sharedGpuCapabilities", "config.graphicsConfig",
    "configManager.graphicsManager", "configManager.imageConfigManager",
]
# Property paths added after API 6.5 (HostSharedGpuCapabilities is 6.7).
NEWER_HOST_PROPS = ("config.sharedGpuCapabilities",)
VM_PROPS = ["name", "runtime.host", "runtime.powerState", "config.hardware.device"]


class VsphereError(Exception):
    """An API or lookup failure; the message is ready for fail_json."""


class TransportError(VsphereError):
    """A call got no usable answer (connection dropped, a reply cut short, an HTTP error page instead of SOAP):
    whether vCenter ran the method is unknown."""


# What pyVmomi raises when a reply is not a SOAP answer: it parses every 200 and 500 reply as SOAP
# (pyVmomi/SoapAdapter.py SoapStubAdapter.InvokeMethod), so an HTML error page or a reply cut short is an
# ExpatError; other statuses are HTTPException; a dropped connection or a timeout is an OSError.
TRANSPORT_ERRORS = (OSError, http.client.HTTPException, xml.parsers.expat.ExpatError)


def fault_message(fault: Any) -> str:
    """Readable text of a vmodl fault (localizedMessage, else faultMessage, else the class name)."""
    msg = getattr(fault, "localizedMessage", None) or getattr(fault, "msg", None)
    if not msg:
        parts = [getattr(m, "message", "") for m in (getattr(fault, "faultMessage", None) or [])]
        msg = "; ".join(p for p in parts if p)
    return "%s%s" % (type(fault).__name__.split(".")[-1], (": " + msg) if msg else "")


def ssl_context(validate_certs: bool, ca_path: Optional[str] = None) -> ssl.SSLContext:
    """Verifying context (CA file or system store); an unverified one only when validate_certs is false.

    The same rule as the Proxmox modules (bounds.tls_verify): ca_path counts only while verifying."""
    verify, dummy = bounds.tls_verify(validate_certs, ca_path)
    if verify:
        ctx = ssl.create_default_context(cafile=verify) if isinstance(verify, str) else ssl.create_default_context()
        return ctx
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


class CallCounter:
    """Counts SOAP round trips on one stub (method calls and property fetches both go through InvokeMethod)."""

    def __init__(self, stub: Any) -> None:
        self.calls = 0
        self.by_method: dict[Any, int] = {}  # pyvmomi's method name (wsdlName) -> calls
        lock = threading.Lock()  # a batch calls from several threads
        original = stub.InvokeMethod

        def counting(mo: Any, info: Any, args: Any, *rest: Any, **kw: Any) -> Any:
            name = getattr(info, "wsdlName", None) or getattr(info, "name", "?")
            with lock:
                self.calls += 1
                self.by_method[name] = self.by_method.get(name, 0) + 1
            try:
                return original(mo, info, args, *rest, **kw)
            except TRANSPORT_ERRORS as e:
                # Every call of the session passes here (property reads too): one place turns them into ours.
                raise TransportError("%s on %s got no usable answer from vCenter (%s: %s)"
                                     % (name, getattr(mo, "_moId", mo), type(e).__name__, e)) from e

        stub.InvokeMethod = counting


class Session:
    """One authenticated vSphere API session with bulk-read helpers."""

    def __init__(self, params: Mapping[str, Any]) -> None:
        if not HAS_PYVMOMI:
            raise VsphereError("pyvmomi is required")
        self.params = params
        self.warnings: list[str] = []  # for the module to show (module.warn)
        where = "%s:%s" % (params["hostname"], params["port"])
        problems = bounds.out_of_range(params, {"port": bounds.PORT, "api_timeout": bounds.API_TIMEOUT})
        if problems:
            raise VsphereError("%s: %s; nothing was sent" % (params["hostname"], "; ".join(problems)))
        dummy, tls_warning = bounds.tls_verify(params["validate_certs"], params.get("ca_path"))
        if tls_warning:
            self.warnings.append("%s: %s" % (where, tls_warning))
        timeout = params.get("api_timeout") or 30
        # httpConnectionTimeout bounds the session's requests; SmartConnect's version discovery before the login
        # (pyVim/connect.py __GetElementTree) opens its own HTTPSConnection without a timeout, so the process
        # default covers that part: a blackholed vCenter fails instead of hanging.
        previous = socket.getdefaulttimeout()
        socket.setdefaulttimeout(timeout)
        try:
            self.si = SmartConnect(host=params["hostname"], port=params["port"], user=params["username"],
                                   pwd=params["password"], httpConnectionTimeout=timeout,
                                   sslContext=ssl_context(params["validate_certs"], params.get("ca_path")))
        except vim.fault.InvalidLogin as e:
            raise VsphereError("login to %s as %s failed: %s" % (where, params["username"], fault_message(e)))
        except ssl.SSLError as e:
            raise VsphereError("TLS verification of %s failed (%s); pass ca_path for a private CA" % (where, e))
        except (OSError, vmodl.MethodFault) as e:
            # socket.timeout is an OSError: name the limit that ran out
            if isinstance(e, TimeoutError) or "timed out" in str(e):
                raise VsphereError("cannot connect to %s: no answer within api_timeout=%ss (%s)" % (where, timeout, e))
            raise VsphereError("cannot connect to %s: %s" % (where, e))
        except Exception as e:  # pylint: disable=broad-except
            # pyVim raises a bare Exception when the port answers HTTPS but is no vSphere API ("no matching version").
            raise VsphereError("cannot connect to %s: it does not answer as a vSphere API endpoint (%s: %s)"
                               % (where, type(e).__name__, e))
        finally:
            socket.setdefaulttimeout(previous)
        self.counter = CallCounter(self.si._stub)
        self.content = self.si.RetrieveContent()
        self.api_version = tuple(int(x) for x in re.findall(r"\d+", self.content.about.apiVersion or "0")[:2])
        # The version pyvmomi speaks on this session: it leaves out fields newer than that when it sends objects.
        self.wire_version = getattr(self.si._stub, "version", None)

    def speaks(self, data_type: Any, field: str) -> bool:
        """Whether this session sends and receives ``data_type.field`` (False for fields newer than the session)."""
        info = [p for p in data_type._GetPropertyList() if p.name == field]  # pylint: disable=protected-access
        return bool(info and self.wire_version and VmomiSupport.IsChildVersion(self.wire_version, info[0].version))

    def host_props(self, props: Optional[Sequence[str]] = None) -> list[str]:
        """Host property paths this API version can return (pyvmomi cannot decode fields newer than the session)."""
        props = list(props or HOST_PROPS)
        if self.api_version < (6, 7):
            props = [p for p in props if p not in NEWER_HOST_PROPS]
        return props

    def close(self) -> None:
        try:
            Disconnect(self.si)
        except Exception:  # pylint: disable=broad-except
            pass  # logout failures do not change the result of the module
        path = os.environ.get(CALLS_FILE_ENV)
        if path:
            with open(path, "a") as f:
                f.write("%d\n" % self.counter.calls)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- PropertyCollector -------------------------------------------------------------------------------------

    def collect(self, obj_type: Any, props: Sequence[str], container: Any = None,
                objects: Optional[Sequence[Any]] = None) -> list[dict[str, Any]]:
        """Read ``props`` of every ``obj_type`` below ``container`` (or of ``objects``) in one retrieval.

        Returns a list of dicts: the property values plus ``obj`` (the managed object) and ``moid``.
        """
        pc = self.content.propertyCollector
        view = None
        if objects is not None:
            if not objects:
                return []
            obj_specs = [vmodl.query.PropertyCollector.ObjectSpec(obj=o) for o in objects]
        else:
            view = self.content.viewManager.CreateContainerView(container or self.content.rootFolder, [obj_type], True)
            traversal = vmodl.query.PropertyCollector.TraversalSpec(
                name="view", path="view", skip=False, type=vim.view.ContainerView)
            obj_specs = [vmodl.query.PropertyCollector.ObjectSpec(obj=view, skip=True, selectSet=[traversal])]
        spec = vmodl.query.PropertyCollector.FilterSpec(
            objectSet=obj_specs, propSet=[vmodl.query.PropertyCollector.PropertySpec(type=obj_type, pathSet=props)])
        out = []
        try:
            result = pc.RetrievePropertiesEx([spec], vmodl.query.PropertyCollector.RetrieveOptions())
            while result:
                for oc in result.objects:
                    row: dict[str, Any] = {p: None for p in props}
                    row.update({dp.name: dp.val for dp in oc.propSet})
                    row["obj"] = oc.obj
                    row["moid"] = oc.obj._moId
                    out.append(row)
                result = pc.ContinueRetrievePropertiesEx(result.token) if result.token else None
        except vmodl.MethodFault as e:
            raise VsphereError("reading %s properties failed: %s" % (obj_type.__name__, fault_message(e)))
        finally:
            if view is not None:
                view.Destroy()
        return out

    def find_one(self, obj_type: Any, name: str, container: Any = None, what: Optional[str] = None) -> Any:
        rows = [r for r in self.collect(obj_type, ["name"], container) if r["name"] == name]
        if not rows:
            raise VsphereError("%s %s not found" % (what or obj_type.__name__, name))
        return rows[0]["obj"]

    def scope_container(self, datacenter: Optional[str] = None, cluster: Optional[str] = None) -> Any:
        # An empty name would read as "no filter" and widen the scope to the whole vCenter: it names nothing.
        for what, value in (("datacenter", datacenter), ("cluster", cluster)):
            if value is not None and not str(value).strip():
                raise VsphereError("%s is empty, which names no %s; leave it out or name one" % (what, what))
        container = None
        if datacenter:
            container = self.find_one(vim.Datacenter, datacenter, what="datacenter")
        if cluster:
            container = self.find_one(vim.ClusterComputeResource, cluster, container, what="cluster")
        return container

    def hosts(self, datacenter: Optional[str] = None, cluster: Optional[str] = None, names: Optional[Sequence[str]] = None,
              props: Optional[Sequence[str]] = None) -> list[dict[str, Any]]:
        """Hosts in scope (one retrieval); missing names fail naming them; an empty list selects no host and fails."""
        if names is not None and not names:
            # It used to mean "no filter": vsphere_host_graphics then changed every GPU host in scope.
            raise VsphereError("esxi_hostname is an empty list, which selects no host")
        rows = self.collect(vim.HostSystem, self.host_props(props), self.scope_container(datacenter, cluster))
        if names:
            wanted = set(names)
            missing = sorted(wanted - {r["name"] for r in rows})
            if missing:
                raise VsphereError("ESXi host(s) not found in scope: %s" % ", ".join(missing))
            rows = [r for r in rows if r["name"] in wanted]
        return sorted(rows, key=lambda r: r["name"])

    def vms(self, container: Any = None, props: Optional[Sequence[str]] = None,
            objects: Optional[Sequence[Any]] = None) -> list[dict[str, Any]]:
        return self.collect(vim.VirtualMachine, props or VM_PROPS, container, objects)

    # ---- tasks --------------------------------------------------------------------------------------------------

    def wait_task(self, task: Any, what: str, timeout: float = 600) -> Any:
        """Poll a task until it ends; a failed task raises VsphereError naming ``what`` and the fault."""
        delay, deadline = 0.05, time.monotonic() + timeout
        while True:
            info = task.info
            if info.state == vim.TaskInfo.State.success:
                return info.result
            if info.state == vim.TaskInfo.State.error:
                raise VsphereError("%s failed: %s" % (what, fault_message(info.error)))
            if time.monotonic() > deadline:
                raise VsphereError("%s did not finish within %ss (task %s)" % (what, timeout, task._moId))
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def call_task(self, what: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            task = method(*args, **kwargs)
        except vmodl.MethodFault as e:
            raise VsphereError("%s failed: %s" % (what, fault_message(e)))
        return self.wait_task(task, what)


# ---- conversions (pyvmomi objects -> plain data) -------------------------------------------------------------


def graphics_devices(graphics_info: Any) -> list[dict[str, Any]]:
    return [dict(device_name=g.deviceName, vendor_name=g.vendorName, pci_id=g.pciId, graphics_type=g.graphicsType,
                 vgpu_mode=getattr(g, "vgpuMode", None), memory_mb=(g.memorySizeInKB or 0) // 1024,
                 vms=sorted(v._moId for v in (g.vm or [])))
            for g in (graphics_info or [])]


def graphics_config(cfg: Any) -> dict[str, Any]:
    """Plain HostGraphicsConfig: per-device graphics types, and vGPU modes where the server reports them (8.0.3.0+)."""
    if cfg is None:
        return dict(default_graphics_type=None, assignment_policy=None, devices={}, vgpu_modes={})
    return dict(default_graphics_type=cfg.hostDefaultGraphicsType, assignment_policy=cfg.sharedPassthruAssignmentPolicy,
                devices={vgpu.normalize_pci_id(d.deviceId): d.graphicsType for d in (cfg.deviceType or [])},
                vgpu_modes={vgpu.normalize_pci_id(d.deviceId): d.vgpuMode for d in (cfg.deviceType or [])
                            if getattr(d, "vgpuMode", None)})


def edit_graphics_config(cfg: Any, after: Mapping[str, Any]) -> Any:
    """The fetched HostGraphicsConfig with the planned values written into it.

    Working on a copy of what the host returned keeps every field this code does not set (vgpuMode of devices it
    leaves alone, fields of later API releases) instead of rebuilding the object from the planned dict.
    """
    new = copy.deepcopy(cfg) if cfg is not None else vim.host.GraphicsConfig(deviceType=[])
    new.hostDefaultGraphicsType = after["default_graphics_type"]
    new.sharedPassthruAssignmentPolicy = after["assignment_policy"]
    entries = list(new.deviceType or [])
    by_pci = {vgpu.normalize_pci_id(d.deviceId): d for d in entries}
    modes = after.get("vgpu_modes") or {}
    for pci, gtype in sorted(after["devices"].items()):
        entry = by_pci.get(pci)
        if entry is None:
            entry = vim.host.GraphicsConfig.DeviceType(deviceId=pci, graphicsType=gtype)
            entries.append(entry)
        entry.graphicsType = gtype
        if pci in modes:
            entry.vgpuMode = modes[pci]
    new.deviceType = entries
    return new


def vgpu_mode_unsupported(session: Session, row: Mapping[str, Any]) -> Optional[str]:
    """None when vgpuMode can be read and set on this host, else why not.

    HostGraphicsConfigDeviceType.vgpuMode is "Since vSphere API Release 8.0.3.0": vCenter, the host and this
    session must all be that new (an older pyvmomi session drops the field silently when it sends the config).
    """
    need = (8, 0, 3)
    old = []
    vc = vgpu.parse_version(session.content.about.apiVersion)
    if not vc or vc < need:
        old.append("vCenter API %s" % (session.content.about.apiVersion or "unknown"))
    host = vgpu.parse_version(row.get("config.product.version"))
    if not host or host < need:
        old.append("host %s ESXi %s" % (row.get("name"), row.get("config.product.version") or "unknown"))
    if not old and not session.speaks(vim.host.GraphicsConfig.DeviceType, "vgpuMode"):
        old.append("pyvmomi session version %s" % session.wire_version)
    return ", ".join(old) or None


def vgpu_profile_info(session: Session, row: Mapping[str, Any], warnings: Optional[list[str]] = None) -> dict[str, dict[str, Any]]:
    """{profile: {fb_gb, sharing, profile_class, device}} from the host's HostGraphicsManager.RetrieveVgpuProfileInfo
    ("Since vSphere API Release 7.0.3.0"; pyVmomi vim.host.GraphicsManager), {} where the host, vCenter or this session
    is older or the call fails (the profile names tell then; a failure is a warning)."""
    gm = row.get("configManager.graphicsManager")
    host = vgpu.parse_version(row.get("config.product.version"))
    if gm is None or not host or host < (7, 0, 3) or not session.speaks(vim.vm.VgpuProfileInfo, "fbSizeInGib"):
        return {}
    try:
        infos = gm.RetrieveVgpuProfileInfo() or []
    except (vmodl.MethodFault, VsphereError) as e:
        if warnings is not None:
            warnings.append("host %s: RetrieveVgpuProfileInfo failed (%s); vGPU profile facts come from their names"
                            % (row.get("name"), fault_message(e) if isinstance(e, vmodl.MethodFault) else e))
        return {}
    return {i.profileName: dict(fb_gb=i.fbSizeInGib, sharing=i.profileSharing, profile_class=i.profileClass,
                                device=i.deviceVendorId,
                                stun_time_s={int(t.migrationBW): int(t.stunTime) for t in (getattr(i, "stunTimeEstimates", None) or [])})
            for i in infos if i.profileName}


def esxi_version(row: Mapping[str, Any]) -> Optional[str]:
    return row.get("config.product.version")


def host_offer(row: Mapping[str, Any]) -> list[str]:
    """Profiles a host offers: sharedPassthruGpuTypes plus sharedGpuCapabilities (community.vmware reads the latter)."""
    names = set(row.get("config.sharedPassthruGpuTypes") or [])
    names.update(c.vgpu for c in (row.get("config.sharedGpuCapabilities") or []) if c.vgpu)
    return sorted(names)


def vm_vgpus(devices: Any) -> list[dict[str, Any]]:
    """vGPU devices of a VM: VirtualPCIPassthrough with a VMIOP backing."""
    out = []
    for d in devices or []:
        if isinstance(d, vim.vm.device.VirtualPCIPassthrough) and \
                isinstance(d.backing, vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo):
            out.append(dict(key=d.key, profile=d.backing.vgpu, label=d.deviceInfo.label if d.deviceInfo else None,
                            device=d))
    return out


def public_vgpu(dev: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in dev.items() if k != "device"}


# ---- driver version -----------------------------------------------------------------------------------------


def host_packages(session: Session, row: Mapping[str, Any],
                  warnings: Optional[list[str]] = None) -> tuple[list[dict[str, Any]], str]:
    """NVIDIA-relevant software inventory of a host.

    FetchSoftwarePackages is the real API; hosts where the image config manager is not available
    (ManagedObjectNotFound/NotSupported) fall back to the 'Software Components' health sensors, and so do accounts
    without the Host.Config.Image privilege that FetchSoftwarePackages needs (pyVmomi _typeinfo_vim.py,
    HostImageConfigManager.fetchSoftwarePackages), with a message appended to ``warnings``.
    Returns (packages, source).
    """
    host_obj, host_name = row["obj"], row["name"]
    icm = row.get("configManager.imageConfigManager")
    if icm is not None:
        try:
            pkgs = icm.FetchSoftwarePackages()
            return [dict(name=p.name, vendor=p.vendor, version=p.version) for p in pkgs or []], "software_packages"
        except (vmodl.fault.ManagedObjectNotFound, vmodl.fault.NotSupported, vmodl.fault.MethodNotFound):
            pass
        except vim.fault.NoPermission as e:
            if warnings is not None:
                warnings.append("host %s: FetchSoftwarePackages was refused (%s, privilege %s); the driver version "
                                "comes from the host's health sensors instead"
                                % (host_name, fault_message(e), missing_privileges(e) or "unknown"))
        except vmodl.MethodFault as e:
            raise VsphereError("host %s: FetchSoftwarePackages failed: %s" % (host_name, fault_message(e)))
    rows = session.collect(vim.HostSystem, ["runtime.healthSystemRuntime.systemHealthInfo.numericSensorInfo"],
                           objects=[host_obj])
    sensors = (rows[0]["runtime.healthSystemRuntime.systemHealthInfo.numericSensorInfo"] if rows else None) or []
    pkgs = []
    for s in sensors:
        if (s.sensorType or "").lower() == "software components":
            p = vgpu.parse_sensor_component(s.name)
            if p:
                pkgs.append(p)
    return pkgs, "health_sensors"


def missing_privileges(fault: Any) -> str:
    """Privilege ids a NoPermission fault names (missingPrivileges since 7.0.3.2, else privilegeId)."""
    ids = [i for ep in (getattr(fault, "missingPrivileges", None) or []) for i in (ep.privilegeIds or [])]
    if not ids and getattr(fault, "privilegeId", None):
        ids = [fault.privilegeId]
    return ", ".join(sorted(set(ids)))


def host_driver(session: Session, row: Mapping[str, Any], name_regex: str = DEFAULT_DRIVER_REGEX,
                warnings: Optional[list[str]] = None) -> dict[str, Any]:
    pkgs, source = host_packages(session, row, warnings)
    vib = vgpu.match_driver_vib(pkgs, name_regex)
    if not vib:
        return dict(vib=None, vib_version=None, version=None, source=source)
    return dict(vib=vib["name"], vib_version=vib["version"], version=vgpu.driver_version(vib["version"]), source=source)


# ---- kernel module options (vGPU scheduler) ------------------------------------------------------------------

# Read with the host list by vsphere_host_vgpu_scheduler: the kernel module system, and the reboot state a host reports.
SCHEDULER_HOST_PROPS = ["configManager.kernelModuleSystem", "summary.rebootRequired", "runtime.bootTime"]


def module_option_string(row: Mapping[str, Any], module: str) -> Optional[str]:
    """The option string configured for kernel ``module`` on the host of ``row``; None when the host has no such
    module (NotFound) or no HostKernelModuleSystem. Needs Host.Config.Settings."""
    kms = row.get("configManager.kernelModuleSystem")
    if kms is None:
        return None
    try:
        return kms.QueryConfiguredModuleOptionString(module) or ""
    except vim.fault.NotFound:
        return None
    except vim.fault.NoPermission as e:
        raise VsphereError("host %s: reading the %s module options was refused (%s, privilege %s)"
                           % (row["name"], module, fault_message(e), missing_privileges(e) or "Host.Config.Settings"))
    except vmodl.MethodFault as e:
        raise VsphereError("host %s: QueryConfiguredModuleOptionString(%s) failed: %s" % (row["name"], module, fault_message(e)))


def set_module_option_string(row: Mapping[str, Any], module: str, options: str) -> None:
    """Replace the option string of kernel ``module``; the module loads it at the next host reboot."""
    kms = row.get("configManager.kernelModuleSystem")
    try:
        # Only hosts whose options were read (module_option_string: not None) are planned for a write, so it has one.
        kms.UpdateModuleOptionString(module, options)  # type: ignore[union-attr]
    except vmodl.MethodFault as e:
        raise VsphereError("host %s: UpdateModuleOptionString(%s) failed: %s" % (row["name"], module, fault_message(e)))


# ---- DRS per-VM overrides -----------------------------------------------------------------------------------


def cluster_drs(session: Session, objects: Optional[Sequence[Any]] = None, container: Any = None) -> dict[Any, dict[str, Any]]:
    """{cluster moid: DRS facts} of the given clusters (or all below ``container``), in one retrieval.

    Facts: ``name``, ``enabled``, ``default_behavior`` (drsConfig), ``overrides_enabled``
    (drsConfig.enableVmBehaviorOverrides: without it DRS ignores per-VM overrides) and ``overrides``,
    {VM moid: {behavior, enabled}} from ClusterConfigInfoEx.drsVmConfig.
    """
    out = {}
    for row in session.collect(vim.ClusterComputeResource, ["name", "configurationEx"], container, objects):
        cfg = row.get("configurationEx")
        drs = getattr(cfg, "drsConfig", None)
        overrides = {}
        for entry in (getattr(cfg, "drsVmConfig", None) or []):
            overrides[entry.key._moId] = dict(behavior=str(entry.behavior) if entry.behavior else None,
                                              enabled=entry.enabled)
        out[row["moid"]] = dict(
            name=row["name"], moid=row["moid"], obj=row["obj"], enabled=getattr(drs, "enabled", None),
            default_behavior=str(drs.defaultVmBehavior) if drs is not None and drs.defaultVmBehavior else None,
            overrides_enabled=getattr(drs, "enableVmBehaviorOverrides", None), overrides=overrides,
            options={o.key: str(o.value) for o in (getattr(drs, "option", None) or [])})
    return out


def set_drs_option(session: Session, cluster_obj: Any, cluster_name: str, key: str, value: str) -> None:
    """Set one DRS advanced option of a cluster (ClusterConfigSpecEx.drsConfig.option, modify=True)."""
    spec = vim.cluster.ConfigSpecEx(drsConfig=vim.cluster.DrsConfigInfo(option=[vim.option.OptionValue(key=key, value=value)]))
    session.call_task("cluster %s: DRS advanced option %s=%s" % (cluster_name, key, value),
                      cluster_obj.ReconfigureComputeResource_Task, spec=spec, modify=True)


def vcenter_setting(session: Session, key: str) -> Optional[str]:
    """A vCenter advanced setting (OptionManager ``content.setting``); None when vCenter does not have it (InvalidName)."""
    try:
        found = [o for o in session.content.setting.QueryOptions(key) or [] if o.key == key]
    except vim.fault.InvalidName:
        return None
    except vmodl.MethodFault as e:
        raise VsphereError("reading the vCenter advanced setting %s failed: %s" % (key, fault_message(e)))
    return str(found[0].value) if found else None


def set_vcenter_setting(session: Session, key: str, value: str) -> None:
    """Set (or add) a vCenter advanced setting; needs Global.Settings."""
    try:
        session.content.setting.UpdateOptions(changedValue=[vim.option.OptionValue(key=key, value=value)])
    except vmodl.MethodFault as e:
        raise VsphereError("setting the vCenter advanced setting %s=%s failed: %s" % (key, value, fault_message(e)))


def host_clusters(rows: Iterable[Mapping[str, Any]]) -> list[Any]:
    """The distinct clusters the host rows belong to (standalone hosts' compute resources left out)."""
    out = {}
    for row in rows:
        parent = row.get("parent")
        if isinstance(parent, vim.ClusterComputeResource):
            out[parent._moId] = parent
    return list(out.values())


def set_drs_overrides(session: Session, cluster_obj: Any, cluster_name: str,
                      changes: Iterable[tuple[str, Any, Optional[str], Optional[bool]]]) -> None:
    """One ReconfigureComputeResource_Task(modify=True) for the cluster's overrides.

    ``changes``: [(operation "add"|"edit", vm object, behavior or None, enabled or None)]."""
    specs = []
    for operation, vm_obj, behavior, enabled in changes:
        # Any: pyvmomi's stubs type behavior as its DrsBehavior enum, whose values are the plain strings passed here.
        info: Any = vim.cluster.DrsVmConfigInfo(key=vm_obj)
        if behavior is not None:
            info.behavior = behavior
        if enabled is not None:
            info.enabled = enabled
        specs.append(vim.cluster.DrsVmConfigSpec(operation=operation, info=info))
    spec = vim.cluster.ConfigSpecEx(drsVmConfigSpec=specs)
    session.call_task("cluster %s: DRS overrides" % cluster_name, cluster_obj.ReconfigureComputeResource_Task,
                      spec=spec, modify=True)


def cluster_names(session: Session, container: Any = None) -> dict[str, str]:
    return {r["moid"]: r["name"] for r in session.collect(vim.ClusterComputeResource, ["name"], container)}


def valid_regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as e:
        raise VsphereError("driver_vib_regex %r is not a valid regular expression: %s" % (pattern, e))
    return pattern
