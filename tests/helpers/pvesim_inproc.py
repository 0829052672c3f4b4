"""pvesim (lab/pvesim) in this process, no HTTPS server: a stand-in for ``proxmoxer.ProxmoxAPI`` whose calls go
straight into pvesim's model with its schema validation, privileges and route handling.

``use_pvesim(monkeypatch, fixture)`` makes ``proxmox_api.ProxmoxAPI`` build one of these, so a module's ``main()``
runs unchanged against a pvesim cluster. An API error becomes proxmoxer's ``ResourceException`` the way
proxmoxer 2.x builds it from an HTTP response (proxmoxer/core.py ``ProxmoxResource._request``: status code,
the standard reason phrase, PVE's message as ``content``, the ``errors`` object), so messages match a real run.
"""

from __future__ import annotations

import json
import os
import sys
from http.client import responses

from proxmoxer.core import ResourceException

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from lab.pvesim import httpd, schema  # noqa: E402  pylint: disable=wrong-import-position
from lab.pvesim.state import PveError, Sim  # noqa: E402  pylint: disable=wrong-import-position


class InProcApi:
    """What ``ProxmoxAPI(host, user=..., token_name=...)`` returns, bound to a pvesim ``Sim``."""

    def __init__(self, sim, user, token_name=None):
        self.sim = sim
        # A token acts as user!tokenid (never plain root@pam), as in PVE; a password login acts as the user.
        self.authid = "%s!%s" % (user, token_name) if token_name else user
        self.auth = httpd.Auth(sim.users)
        # The HTTP handler's route code without a socket: a handler object that was never connected.
        handler_cls = type("InProcHandler", (httpd.Handler,), {"sim": sim, "auth": self.auth})
        self.handler = handler_cls.__new__(handler_cls)

    def __call__(self, path):
        return _Resource(self, path)

    def request(self, method, path, params):
        apipath = "/" + str(path).strip("/")
        schema_path, path_params = httpd.match_route(apipath)
        key = (schema_path, method)
        try:
            if schema_path is None or key not in schema.PARAMS:
                raise PveError("Method '%s %s' not implemented" % (method, apipath), 501)
            self.sim.count(method, schema_path)
            # As the wire carries them: every value a string, a list as repeated keys.
            wire = {k: [str(int(x) if isinstance(x, bool) else x) for x in (v if isinstance(v, list) else [v])]
                    for k, v in params.items() if v is not None}
            props = schema.expanded_params(self.sim.release)[key]
            if path_params.get("node") is not None and path_params["node"] in self.sim.nodes:
                self.sim.require_reachable(path_params["node"])
            args = schema.validate(props, wire, path_params)
            if key in httpd.PERMS:
                acl, needed = httpd.PERMS[key]
                httpd.require(self.auth.privs(self.authid), acl.format(**{k: args.get(k, "") for k in ("id", "vmid")}), needed)
            data = self.handler._call(key, args, self.authid)  # pylint: disable=protected-access
        except schema.ParamError as exc:
            raise ResourceException(400, responses[400], "Parameter verification failed.", errors=exc.errors) from None
        except PveError as exc:
            raise ResourceException(exc.status, responses.get(exc.status, "Unknown"),
                                    exc.message.strip().replace("\n", " ")) from None
        return json.loads(json.dumps(data))  # a copy, as the wire gives


class _Resource:
    def __init__(self, api, path):
        self.api, self.path = api, path

    def get(self, **params):
        return self.api.request("GET", self.path, params)

    def post(self, **params):
        return self.api.request("POST", self.path, params)

    def put(self, **params):
        return self.api.request("PUT", self.path, params)

    def delete(self, **params):
        return self.api.request("DELETE", self.path, params)


def use_pvesim(monkeypatch, fixture):
    """Make ``PveClient.from_params`` talk to a new in-process pvesim of ``fixture``; return the ``Sim``."""
    from ansible_collections.gpuops.provision.plugins.module_utils._proxmox import api as proxmox_api  # pylint: disable=import-outside-toplevel

    sim = Sim(fixture)

    def factory(host, user=None, token_name=None, **kwargs):  # pylint: disable=unused-argument
        return InProcApi(sim, user, token_name)

    monkeypatch.setattr(proxmox_api, "ProxmoxAPI", factory)
    monkeypatch.setattr(proxmox_api.PveClient, "__init__", _fast_init(proxmox_api.PveClient.__init__))
    return sim


def _fast_init(init):
    """Task polling without the half-second sleep (pvesim's tasks finish at once)."""
    def wrapped(self, api, task_timeout=300, poll_interval=0.5):  # pylint: disable=unused-argument
        init(self, api, task_timeout=task_timeout, poll_interval=0.0)
    return wrapped


def writes(sim):
    """Write calls pvesim has served."""
    return sim.stats["writes"]


def dev(id_, cls, group, vendor, device, sub=None, **extra):
    """A pvesim PCI device of a fixture."""
    d = {"id": id_, "class": cls, "vendor": vendor, "device": device, "iommugroup": group}
    if sub:
        d["subsystem_vendor"], d["subsystem_device"] = sub
    d.update(extra)
    return d


NV = "0x10de"
L40S_TYPES = [{"type": "nvidia-1155", "name": "NVIDIA L40S-4Q", "max": 12, "description": "4 GB framebuffer"},
              {"type": "nvidia-1156", "name": "NVIDIA L40S-8Q", "max": 6, "description": "8 GB framebuffer"}]


def cluster(version="9.1.1", pve2_status="online"):
    """Two nodes: pve1 with an isolated A100, a T4 sharing its group with a NIC and an L40S with two VFs; pve2 with an A100."""
    return {
        "version": {"version": version, "release": version.rsplit(".", 1)[0], "repoid": "0"},
        "nodes": {
            "pve1": {"pci": [
                dev("0000:00:01.0", "0x060400", 1, "0x8086", "0x1901"),
                dev("0000:01:00.0", "0x030200", 1, NV, "0x20b5", ("0x10de", "0x1533"), device_name="GA100 [A100 PCIe 80GB]"),
                dev("0000:03:00.0", "0x030200", 3, NV, "0x1eb8", ("0x10de", "0x12a2"), device_name="TU104GL [Tesla T4]"),
                dev("0000:04:00.0", "0x020000", 3, "0x8086", "0x1533", ("0x8086", "0x0000")),
                dev("0000:41:00.0", "0x030200", 40, NV, "0x26b9", ("0x10de", "0x1851"), device_name="AD102GL [L40S]",
                    vgpu_types=L40S_TYPES, nvidia=1),
                dev("0000:41:00.4", "0x030200", 41, NV, "0x26b9", ("0x10de", "0x1851"), physfn="0000:41:00.0"),
                dev("0000:41:00.5", "0x030200", 42, NV, "0x26b9", ("0x10de", "0x1851"), physfn="0000:41:00.0"),
            ]},
            "pve2": {"status": pve2_status, "pci": [
                dev("0000:01:00.0", "0x030200", 10, NV, "0x20b5", ("0x10de", "0x1533"), device_name="GA100 [A100 PCIe 80GB]"),
            ]},
        },
        "mappings": {
            "a100": {"map": ["node=pve1,path=0000:01:00.0,id=10de:20b5,subsystem-id=10de:1533,iommugroup=1",
                             "node=pve2,path=0000:01:00.0,id=10de:20b5,subsystem-id=10de:1533,iommugroup=10"]},
            "l40s-vgpu": {"mdev": 1, "map": ["node=pve1,path=0000:41:00.4,id=10de:26b9,subsystem-id=10de:1851,iommugroup=41",
                                             "node=pve1,path=0000:41:00.5,id=10de:26b9,subsystem-id=10de:1851,iommugroup=42"]},
        },
        "vms": {
            "100": {"node": "pve1", "status": "running", "config": {"name": "ml1", "machine": "q35", "bios": "ovmf"}},
            "101": {"node": "pve1", "status": "stopped", "config": {"name": "legacy"}},
            "102": {"node": "pve1", "status": "stopped", "config": {"name": "q35", "machine": "q35", "bios": "ovmf"}},
            "200": {"node": "pve2", "status": "stopped", "config": {"name": "ml2", "machine": "q35", "bios": "ovmf"}},
        },
    }


def auth(token=True):
    """Connection options of a module run (the host is never contacted)."""
    args = {"api_host": "pve.test", "api_user": "root@pam"}
    if token:
        args.update(api_token_id="ansible", api_token_secret="pvesim-token")
    else:
        args.update(api_password="pvesim")
    return args


def module_runner(run_module, module):
    """run(args, check_mode=False, token=True): the module's main() in-process against the pvesim of use_pvesim,
    with the lab credentials (a token, or the password) and diff on."""
    def _run(args, check_mode=False, token=True):
        full = dict(auth(token=token))
        full.update(args)
        full["_ansible_diff"] = True
        return run_module(module, full, check_mode=check_mode)
    return _run


def warning_texts(res):
    """Warning texts of a result (ansible-core 2.19+ wraps each in a summary dict)."""
    return [w["event"]["msg"] if isinstance(w, dict) else w for w in res.get("warnings", [])]
