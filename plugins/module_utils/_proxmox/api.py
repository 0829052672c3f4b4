# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Proxmox VE API adapter over proxmoxer: session, error mapping, task waiting, fact gathering (I/O)."""

from __future__ import annotations

import ssl
import time
import traceback
from collections.abc import Mapping
from typing import Any, Literal, Optional, Union

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.gpuops.provision.plugins.module_utils._common import bounds
from ansible_collections.gpuops.provision.plugins.module_utils._proxmox import property_strings, rules
from ansible_collections.gpuops.provision.plugins.module_utils._common.connection import (
    PROXMOX_REQUIRED_ONE_OF,
    PROXMOX_REQUIRED_TOGETHER,
    proxmox_argument_spec,
)

try:
    from proxmoxer import ProxmoxAPI
    from proxmoxer.core import ResourceException
    HAS_PROXMOXER = True
    PROXMOXER_IMPORT_ERROR = None
except ImportError:  # pragma: no cover - exercised only where proxmoxer is missing
    HAS_PROXMOXER = False
    PROXMOXER_IMPORT_ERROR = traceback.format_exc()

    class ResourceException(Exception):  # type: ignore[no-redef]
        pass

AUTH_KEYS = tuple(proxmox_argument_spec())


class PveError(Exception):
    """An API call or task failed; ``str()`` is a message fit for fail_json."""


def module_kwargs(argument_spec: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """AnsibleModule kwargs with the shared Proxmox connection options merged in."""
    spec = proxmox_argument_spec()
    spec.update(argument_spec)
    kwargs = dict(
        argument_spec=spec,
        required_one_of=list(PROXMOX_REQUIRED_ONE_OF) + list(extra.pop("required_one_of", [])),
        required_together=list(PROXMOX_REQUIRED_TOGETHER) + list(extra.pop("required_together", [])),
    )
    kwargs.update(extra)
    return kwargs


def error_message(exc: BaseException) -> str:
    """Human message for a proxmoxer ResourceException: status, reason (PVE puts its message there), errors."""
    if isinstance(exc, ResourceException) and hasattr(exc, "status_code"):
        reason = (getattr(exc, "content", None) or getattr(exc, "status_message", "") or "").strip()
        msg = "HTTP %s: %s" % (exc.status_code, reason)
        errors = getattr(exc, "errors", None)
        if errors:
            if isinstance(errors, dict):
                msg += " (" + "; ".join("%s: %s" % (k, str(v).strip()) for k, v in sorted(errors.items())) + ")"
            else:
                msg += " (%s)" % errors
        return msg
    return "%s: %s" % (type(exc).__name__, exc)


def identity(params: Mapping[str, Any]) -> str:
    """'<host>:<port> as <user>, token id <id>' (or 'with a password'): what an authentication failure names. Never
    the secret or the password."""
    who = "%s:%s as %s" % (params.get("api_host"), params.get("api_port"), params.get("api_user"))
    if params.get("api_token_id"):
        return "%s, token id %s" % (who, params["api_token_id"])
    return who + " with a password"


def check_ca_path(ca_path: str, host: Any) -> None:
    """Load ``ca_path`` as the TLS stack will, so a missing or malformed file fails naming the option, not as an
    OpenSSL error from deep inside requests."""
    try:
        ssl.create_default_context(cafile=ca_path)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise PveError("%s: ca_path %s cannot be used as the CA to verify the server with (%s: %s); give a PEM file "
                       "of the CA certificate(s); nothing was sent" % (host, ca_path, type(exc).__name__, exc))


class PveClient:
    """Thin wrapper over a ProxmoxAPI object: string paths, error mapping, write-call counting."""

    def __init__(self, api: Any, task_timeout: float = 300, poll_interval: float = 0.5) -> None:
        self.api = api
        self.task_timeout = task_timeout
        self.poll_interval = poll_interval
        self.writes: list[tuple[str, str]] = []  # (method, path) of every write call, for results and the benchmark
        self._nodes: Optional[list[tuple[str, str]]] = None  # (name, status), sorted
        self._version: Union[Literal[False], Optional[tuple[int, ...]]] = False  # not read yet (None: the server did not say)
        self.warnings: list[str] = []  # for the module to show (module.warn)
        # Who is calling where, for a refused authentication: an AWX credential, an environment variable or a role
        # default may have supplied any part of it, and PVE's own answer names none ("invalid token value!").
        self.identity = ""

    @classmethod
    def from_params(cls, params: Mapping[str, Any], task_timeout: float = 300) -> PveClient:
        if not HAS_PROXMOXER:
            raise PveError(missing_required_lib("proxmoxer") + "\n" + (PROXMOXER_IMPORT_ERROR or ""))
        problems = bounds.out_of_range(params, {"api_port": bounds.PORT, "api_timeout": bounds.API_TIMEOUT})
        if problems:
            raise PveError("%s: %s; nothing was sent" % (params.get("api_host"), "; ".join(problems)))
        # A caller that does not say (a script, not a module: modules default it to true) gets verification on.
        verify, tls_warning = bounds.tls_verify(params.get("validate_certs", True), params.get("ca_path"))
        if isinstance(verify, str):
            check_ca_path(verify, params.get("api_host"))
        kwargs = dict(port=params.get("api_port"), verify_ssl=verify, timeout=params.get("api_timeout"), backend="https")
        if params.get("api_token_id"):
            # Token auth is preferred: no ticket round trip, no password in the play.
            kwargs.update(user=params["api_user"], token_name=params["api_token_id"], token_value=params["api_token_secret"])
        else:
            kwargs.update(user=params["api_user"], password=params["api_password"])
        try:
            api = ProxmoxAPI(params["api_host"], **kwargs)
        except ResourceException as exc:
            raise PveError("cannot log in to %s: %s" % (identity(params), error_message(exc)))
        except Exception as exc:  # requests/SSL errors come in many types
            raise PveError("cannot connect to %s:%s: %s" % (params["api_host"], params.get("api_port"), exc))
        client = cls(api, task_timeout=task_timeout)
        client.identity = identity(params)
        if tls_warning:
            client.warnings.append("%s:%s: %s" % (params["api_host"], params.get("api_port"), tls_warning))
        return client

    def _call(self, method: str, path: str, params: Optional[Mapping[str, Any]]) -> Any:
        params = {k: v for k, v in (params or {}).items() if v is not None}
        if method != "get":
            self.writes.append((method.upper(), path))
        try:
            return getattr(self.api(path), method)(**params)
        except ResourceException as exc:
            msg = "%s /%s failed: %s" % (method.upper(), path, error_message(exc))
            status = getattr(exc, "status_code", None)
            if status == 401 and self.identity:
                msg += "; %s was refused: check the user, the token id and its secret (or the password)" % self.identity
            hint = rules.forbidden_hint(method, path) if status == 403 else ""
            raise PveError(msg + ("; %s (docs/proxmox.md, privileges)" % hint if hint else ""))
        except Exception as exc:
            raise PveError("%s /%s failed: %s" % (method.upper(), path, exc))

    def get(self, path: str, **params: Any) -> Any:
        return self._call("get", path, params)

    def post(self, path: str, **params: Any) -> Any:
        return self._call("post", path, params)

    def put(self, path: str, **params: Any) -> Any:
        return self._call("put", path, params)

    def delete(self, path: str, **params: Any) -> Any:
        return self._call("delete", path, params)

    # ----------------------------------------------------------------- tasks

    def wait_task(self, node: str, upid: Optional[str], timeout: Optional[float] = None, what: str = "task") -> Optional[dict[str, Any]]:
        """Poll a UPID until it stops; raise PveError with the exit status unless it is OK (or a WARN)."""
        if not upid:
            return None
        deadline = time.monotonic() + (timeout or self.task_timeout)
        while True:
            status = self.get("nodes/%s/tasks/%s/status" % (node, upid))
            if status.get("status") == "stopped":
                exitstatus = status.get("exitstatus") or ""
                if exitstatus == "OK" or exitstatus.startswith("WARN"):
                    return status
                raise PveError("%s %s on node %s failed: %s" % (what, upid, node, exitstatus))
            if time.monotonic() >= deadline:
                raise PveError("%s %s on node %s did not finish within %ss" % (what, upid, node, timeout or self.task_timeout))
            time.sleep(self.poll_interval)

    # ----------------------------------------------------------------- lookups

    def permissions(self, acl_path: str) -> dict[str, Any]:
        """This session's own privileges on ``acl_path`` (GET /access/permissions, allowed to every user for itself):
        {path: {privilege: propagate}}."""
        return self._call("get", "access/permissions", {"path": acl_path}) or {}

    def version(self) -> Optional[tuple[int, ...]]:
        """The server's release as a tuple, e.g. (8, 4, 1), read once per run (GET /version)."""
        if self._version is False:
            self._version = property_strings.parse_pve_version((self.get("version") or {}).get("version"))
        return self._version

    def nodes(self, online_only: bool = False) -> list[str]:
        if self._nodes is None:
            self._nodes = sorted((n["node"], n.get("status", "online")) for n in self.get("nodes") or [])
        return [name for name, status in self._nodes if status == "online" or not online_only]

    def node_status(self, node: str) -> Optional[str]:
        """'online', 'offline' or 'unknown' as GET /nodes says (None for a node the cluster does not have)."""
        self.nodes()
        return dict(self._nodes).get(node)  # type: ignore[arg-type]  # nodes() has just read them

    def require_online(self, node: str, why: str) -> None:
        """Raise PveError unless ``node`` is a cluster node that is online (PVE cannot proxy calls to others)."""
        status = self.node_status(node)
        if status is None:
            raise PveError("unknown node %s (cluster has: %s)" % (node, ", ".join(self.nodes())))
        if status != "online":
            raise PveError("node %s is %s, cannot %s" % (node, status, why))

    def vm_nodes(self) -> dict[int, Optional[str]]:
        """``{vmid: node}`` of every QEMU VM: one /cluster/resources call, which also lists the VMs of offline nodes
        (asking each node instead fails on the first offline one)."""
        return {int(item["vmid"]): item.get("node") for item in self.get("cluster/resources", type="vm") or []
                if item.get("type") == "qemu" and item.get("vmid") is not None}

    def hardware(self, node: str) -> tuple[Any, list[dict[str, Any]]]:
        """All PCI devices of a node as device facts (no class filter: bridges matter for IOMMU isolation)."""
        raw = self.get("nodes/%s/hardware/pci" % node, **{"pci-class-blacklist": ""})
        return raw, [property_strings.device_facts(d) for d in raw or []]

    def mdev_types(self, node: str, pci_or_mapping: str) -> list[dict[str, Any]]:
        items = self.get("nodes/%s/hardware/pci/%s/mdev" % (node, pci_or_mapping)) or []
        return sorted(({"type": i.get("type"), "name": i.get("name"), "available": i.get("available"),
                        "description": i.get("description")} for i in items), key=lambda i: i["type"] or "")

    def mappings(self) -> list[dict[str, Any]]:
        return sorted(self.get("cluster/mapping/pci") or [], key=lambda m: m.get("id", ""))

    def mapping(self, mapping_id: str) -> Optional[dict[str, Any]]:
        """Stored mapping (with digest) or None if it does not exist."""
        for m in self.mappings():
            if m.get("id") == mapping_id:
                return self.get("cluster/mapping/pci/%s" % mapping_id)
        return None

    def vm_configs(self, node: str) -> dict[int, dict[str, Any]]:
        out = {}
        for vm in self.get("nodes/%s/qemu" % node) or []:
            out[int(vm["vmid"])] = self.get("nodes/%s/qemu/%s/config" % (node, vm["vmid"]))
        return out

    def gpu_facts(self, node: str, gather_mdev: bool = True, gather_vms: bool = True,
                  mappings: Optional[list[dict[str, Any]]] = None) -> list[dict[str, Any]]:
        """pve_gpu_info's GPU facts of one node (see property_strings.gpu_facts)."""
        gpus: list[dict[str, Any]] = self.node_facts(node, gather_mdev, gather_vms, mappings)["gpus"]
        return gpus

    def node_facts(self, node: str, gather_mdev: bool = True, gather_vms: bool = True,
                   mappings: Optional[list[dict[str, Any]]] = None) -> dict[str, Any]:
        """pve_gpu_info facts of one node: ``gpus`` (property_strings.gpu_facts) and ``vms``, the VMs holding them (property_strings.gpu_vms;
        the VM list that names the configs to read also gives each VM's name and status)."""
        raw, devices = self.hardware(node)
        mdev = {}
        if gather_mdev:
            gpu_ids = set()
            for d in devices:
                if property_strings.is_gpu_class(d["class"]) and not d["physfn"]:
                    gpu_ids.add(d["id"])
                    gpu_ids.update(d["virtfns"])
            for d in devices:
                if d["id"] in gpu_ids and d["mdev"]:
                    mdev[d["id"]] = self.mdev_types(node, d["id"])
        if mappings is None:
            mappings = self.mappings()
        vm_list = (self.get("nodes/%s/qemu" % node) or []) if gather_vms else []
        configs = {int(vm["vmid"]): self.get("nodes/%s/qemu/%s/config" % (node, vm["vmid"])) for vm in vm_list}
        gpus = property_strings.gpu_facts(node, raw, mdev_types=mdev, mappings=mappings, vm_configs=configs)
        return {"gpus": gpus, "vms": property_strings.gpu_vms(node, gpus, vm_list, configs, mappings)}
