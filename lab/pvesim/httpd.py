"""HTTPS front of pvesim: TLS with its own CA, PVE auth (ticket + CSRF, API tokens), routing, PVE wire format."""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import json
import os
import re
import secrets
import ssl
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import schema
from .state import PveError, Sim

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_FIXTURE = os.path.join(HERE, "fixtures", "lab.json")
API_PREFIX = "/api2/json"


# ------------------------------------------------------------------ TLS
def make_ca(run_dir, hosts=("127.0.0.1", "localhost")):
    """Write ca.pem, server.pem and server.key into run_dir; return (ca, cert, key) paths."""
    from cryptography import x509  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives import hashes, serialization  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives.asymmetric import ec  # pylint: disable=import-outside-toplevel
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # pylint: disable=import-outside-toplevel

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pvesim CA"),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "gpuops lab")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=30))
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                            crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
               .add_extension(ca_ski, critical=False)
               .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    sans = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
            .sign(ca_key, hashes.SHA256()))
    os.makedirs(run_dir, exist_ok=True)
    paths = tuple(os.path.join(run_dir, n) for n in ("ca.pem", "server.pem", "server.key"))
    with open(paths[0], "wb") as handle:
        handle.write(ca_cert.public_bytes(serialization.Encoding.PEM))
    with open(paths[1], "wb") as handle:
        handle.write(cert.public_bytes(serialization.Encoding.PEM))
    with os.fdopen(os.open(paths[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as handle:
        handle.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return paths


# ------------------------------------------------------------------ routing
def _compile(path):
    names = []

    def repl(match):
        names.append(match.group(1))
        return f"(?P<p{len(names) - 1}>[^/]+)"

    return re.compile("^" + re.sub(r"\{([^}]+)\}", repl, path) + "$"), names


ROUTES = {}
for _path, _method in list(schema.PARAMS) + [("/access/ticket", "POST"), ("/nodes/{node}/tasks/{upid}/log", "GET")]:
    ROUTES.setdefault(_path, _compile(_path))


def match_route(path):
    for schema_path, (regex, names) in ROUTES.items():
        found = regex.match(path)
        if found:
            return schema_path, {name: urllib.parse.unquote(found.group(f"p{i}")) for i, name in enumerate(names)}
    return None, None


# Privileges each route needs (any of them), with the ACL path PVE checks. Privileges are global in pvesim.
PERMS = {
    ("/nodes/{node}/hardware/pci", "GET"): ("/", ["Sys.Audit", "Sys.Modify"]),
    ("/nodes/{node}/hardware/pci/{pci-id-or-mapping}/mdev", "GET"): ("/", ["Sys.Audit", "Sys.Modify"]),
    ("/cluster/mapping/pci", "POST"): ("/mapping/pci", ["Mapping.Modify"]),
    ("/cluster/mapping/pci/{id}", "GET"): ("/mapping/pci/{id}", ["Mapping.Audit", "Mapping.Use", "Mapping.Modify"]),
    ("/cluster/mapping/pci/{id}", "PUT"): ("/mapping/pci/{id}", ["Mapping.Modify"]),
    ("/cluster/mapping/pci/{id}", "DELETE"): ("/mapping/pci", ["Mapping.Modify"]),
    ("/nodes/{node}/qemu/{vmid}/config", "GET"): ("/vms/{vmid}", ["VM.Audit"]),
    ("/nodes/{node}/qemu/{vmid}/config", "PUT"): ("/vms/{vmid}", ["VM.Config.HWType", "VM.Config.Options", "VM.Config.CPU",
                                                                  "VM.Config.Memory", "VM.Config.Disk", "VM.Config.Network"]),
    ("/nodes/{node}/qemu/{vmid}/config", "POST"): ("/vms/{vmid}", ["VM.Config.HWType", "VM.Config.Options", "VM.Config.CPU",
                                                                   "VM.Config.Memory", "VM.Config.Disk", "VM.Config.Network"]),
    ("/nodes/{node}/qemu/{vmid}/pending", "GET"): ("/vms/{vmid}", ["VM.Audit"]),
    ("/nodes/{node}/qemu/{vmid}/status/current", "GET"): ("/vms/{vmid}", ["VM.Audit"]),
    ("/nodes/{node}/qemu/{vmid}/status/start", "POST"): ("/vms/{vmid}", ["VM.PowerMgmt"]),
    ("/nodes/{node}/qemu/{vmid}/status/stop", "POST"): ("/vms/{vmid}", ["VM.PowerMgmt"]),
    ("/nodes/{node}/qemu/{vmid}/status/shutdown", "POST"): ("/vms/{vmid}", ["VM.PowerMgmt"]),
    ("/nodes/{node}/qemu/{vmid}/status/reboot", "POST"): ("/vms/{vmid}", ["VM.PowerMgmt"]),
}


def require(privs, acl, needed):
    """403 as PVE's permission check does (pve-common PVE/Exception.pm raise_perm_exc: "Permission check failed (<path>,
    <priv>|<priv>)"), unless the caller has one of ``needed`` on ``acl``."""
    have = privs.at(acl)
    if have is not None and not set(needed) & have:
        raise PveError(f"Permission check failed ({acl}, {'|'.join(needed)})", 403)


# The privileges pvesim's routes check (a user without a `privs` list has them all, like root@pam).
ALL_PRIVS = ("Datastore.AllocateSpace", "Mapping.Audit", "Mapping.Modify", "Mapping.Use", "Sys.Audit", "Sys.Modify", "VM.Audit",
             "VM.Config.CPU", "VM.Config.Disk", "VM.Config.HWType", "VM.Config.Memory", "VM.Config.Network",
             "VM.Config.Options", "VM.PowerMgmt")


class Privs:
    """The privileges of one user or token, by ACL path, as PVE's RPCEnvironment computes them (propagated ACLs:
    an entry on a path holds for everything below it). A spec is None (every privilege), a list (held on "/", so
    everywhere) or {acl path: [privileges]}; a token with privilege separation has the intersection with its user."""

    def __init__(self, user_spec, token_spec=None):
        self.specs = [s for s in (user_spec, token_spec) if s is not None]

    @staticmethod
    def _on(spec, path):
        if isinstance(spec, dict):
            out = set()
            for acl, privs in spec.items():
                if acl == "/" or path == acl or path.startswith(acl.rstrip("/") + "/"):
                    out |= set(privs)
            return out
        return set(spec)

    def at(self, path):
        """The privileges on ``path``, or None for all of them."""
        out = None
        for spec in self.specs:
            have = self._on(spec, path)
            out = have if out is None else out & have
        return out

    def has(self, path, priv):
        have = self.at(path)
        return have is None or priv in have

    def dump(self, path=None):
        """GET /access/permissions (pve-access-control API2/AccessControl.pm permissions): {path: {priv: 1}}."""
        paths = [path] if path else sorted({"/"} | {acl for s in self.specs if isinstance(s, dict) for acl in s})
        out = {}
        for one in paths:
            have = self.at(one)
            privs = ALL_PRIVS if have is None else sorted(have)
            if privs:
                out[one] = {p: 1 for p in privs}
        return out


class Auth:
    """Tickets and tokens. A token's user is ``user@realm!tokenid`` (never plain root@pam, as in PVE).

    A fixture user may carry ``privs`` (a list, held everywhere, or {acl path: [privileges]}); without it the user
    has every privilege. A token is a secret string, or ``{"secret": ..., "privs": ...}`` (privilege separation: the
    intersection with the user's).
    """

    def __init__(self, users):
        self.users = users
        self.tickets = {}

    def privs(self, authid):
        user, _sep, tokenid = authid.partition("!")
        entry = self.users.get(user, {})
        token = entry.get("tokens", {}).get(tokenid) if tokenid else None
        return Privs(entry.get("privs"), token.get("privs") if isinstance(token, dict) else None)

    def login(self, username, password, realm=None):
        if realm and "@" not in username:
            username = f"{username}@{realm}"
        user = self.users.get(username)
        if user is None or not secrets.compare_digest(str(user.get("password", "")), str(password or "")):
            raise PveError("authentication failure", 401)
        ticket = f"PVE:{username}:{int(time.time()):08X}::{secrets.token_urlsafe(32)}"
        csrf = f"{int(time.time()):08X}:{secrets.token_urlsafe(24)}"
        self.tickets[ticket] = (username, csrf)
        return {"username": username, "ticket": ticket, "CSRFPreventionToken": csrf,
                "cap": {"vms": {}, "nodes": {}, "access": {}, "storage": {}, "dc": {}, "mapping": {}}}

    def check(self, headers, method):
        header = headers.get("Authorization", "")
        if header.startswith("PVEAPIToken"):
            found = re.match(r"^PVEAPIToken[= ](\S+@[^!\s]+)!([^=\s]+)=(\S+)$", header)
            if not found:
                raise PveError("invalid token value!", 401)
            user, tokenid, secret = found.groups()
            expected = self.users.get(user, {}).get("tokens", {}).get(tokenid)
            if isinstance(expected, dict):
                expected = expected.get("secret")
            if expected is None or not secrets.compare_digest(str(expected), secret):
                raise PveError("invalid token value!", 401)
            return f"{user}!{tokenid}"
        cookies = {}
        for part in headers.get("Cookie", "").split(";"):
            if "=" in part:
                key, value = part.strip().split("=", 1)
                cookies[key] = urllib.parse.unquote(value)
        ticket = cookies.get("PVEAuthCookie")
        if not ticket:
            raise PveError("No ticket", 401)
        entry = self.tickets.get(ticket)
        if entry is None:
            raise PveError("authentication failure", 401)
        if method != "GET" and headers.get("CSRFPreventionToken") != entry[1]:
            raise PveError("Permission denied - invalid csrf token", 401)
        return entry[0]


# ------------------------------------------------------------------ request handling
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "pve-api-daemon/3.0"
    sys_version = ""
    timeout = 120  # idle keep-alive connections do not hold a thread forever
    disable_nagle_algorithm = True  # headers and body go out in two writes; avoid the 40 ms delayed-ACK stall
    sim: Sim = None
    auth: Auth = None

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        if os.environ.get("PVESIM_LOG"):
            sys.stderr.write("pvesim: " + (format % args) + "\n")

    def do_GET(self):  # pylint: disable=invalid-name
        self._dispatch("GET")

    def do_POST(self):  # pylint: disable=invalid-name
        self._dispatch("POST")

    def do_PUT(self):  # pylint: disable=invalid-name
        self._dispatch("PUT")

    def do_DELETE(self):  # pylint: disable=invalid-name
        self._dispatch("DELETE")

    def _send(self, status, body, reason=None):
        data = json.dumps(body).encode()
        # PVE puts the message into the reason phrase (one line); proxmoxer shows it to the user.
        self.send_response(status, (reason or "").strip().replace("\n", " ").replace("\r", " ") or None)
        self.send_header("Content-Type", "application/json;charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "max-age=0")
        self.end_headers()
        self.wfile.write(data)

    def _params(self):
        url = urllib.parse.urlsplit(self.path)
        params = {}
        for key, value in urllib.parse.parse_qsl(url.query, keep_blank_values=True):
            params.setdefault(key, []).append(value)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if raw:
            if self.headers.get("Content-Type", "").startswith("application/json"):
                for key, value in json.loads(raw.decode() or "{}").items():
                    values = value if isinstance(value, list) else [value]
                    params.setdefault(key, []).extend(int(v) if isinstance(v, bool) else v for v in values)
                params = {k: [str(v) for v in vs] for k, vs in params.items()}
            else:
                for key, value in urllib.parse.parse_qsl(raw.decode(), keep_blank_values=True):
                    params.setdefault(key, []).append(value)
        return url.path, params

    def _dispatch(self, method):
        try:
            path, params = self._params()
        except (ValueError, UnicodeDecodeError) as exc:
            self._send(400, {"data": None, "message": f"{exc}\n"}, str(exc))
            return
        if path.startswith("/_sim/"):
            self._sim_endpoint(method, path)
            return
        if not path.startswith(API_PREFIX + "/"):
            self._send(501, {"data": None}, f"Method '{method} {path}' not implemented")
            return
        apipath = path[len(API_PREFIX):].rstrip("/") or "/"
        schema_path, path_params = match_route(apipath)
        key = (schema_path, method)
        if schema_path is None or (key not in schema.PARAMS and key not in (
                ("/access/ticket", "POST"), ("/nodes/{node}/tasks/{upid}/log", "GET"))):
            self._send(501, {"data": None}, f"Method '{method} {apipath}' not implemented")
            return
        self.sim.count(method, schema_path)
        try:
            if key == ("/access/ticket", "POST"):
                flat = {k: v[0] for k, v in params.items()}
                data = self.auth.login(flat.get("username"), flat.get("password"), flat.get("realm"))
                self._send(200, {"data": data})
                return
            user = self.auth.check(self.headers, method)
            if key == ("/nodes/{node}/tasks/{upid}/log", "GET"):
                props = {"node": schema.NODE, "upid": {"type": "string"},
                         "start": schema.OPT | {"type": "integer"}, "limit": schema.OPT | {"type": "integer"}}
            else:
                props = schema.expanded_params(self.sim.release)[key]
            if path_params.get("node") is not None and path_params["node"] in self.sim.nodes:
                self.sim.require_reachable(path_params["node"])
            args = schema.validate(props, params, path_params)
            if key in PERMS:
                acl, needed = PERMS[key]
                require(self.auth.privs(user), acl.format(**{k: args.get(k, "") for k in ("id", "vmid")}), needed)
            data = self._call(key, args, user)
            self._send(200, {"data": data})
        except schema.ParamError as exc:
            self._send(400, {"data": None, "errors": exc.errors, "message": "Parameter verification failed.\n"},
                       "Parameter verification failed.")
        except PveError as exc:
            self._send(exc.status, {"data": None, "message": exc.message if exc.message.endswith("\n") else exc.message + "\n"},
                       exc.message)

    def _sim_endpoint(self, method, path):
        if method == "GET" and path == "/_sim/state":
            self._send(200, {"data": self.sim.dump()})
        elif method == "GET" and path == "/_sim/stats":
            with self.sim.lock:
                self._send(200, {"data": json.loads(json.dumps(self.sim.stats))})
        elif method == "POST" and path == "/_sim/stats/reset":
            self.sim.reset_stats()
            self._send(200, {"data": None})
        else:
            self._send(501, {"data": None}, f"Method '{method} {path}' not implemented")

    def _call(self, key, args, user):  # pylint: disable=too-many-return-statements,too-many-branches
        sim = self.sim
        path, method = key
        node = args.get("node")
        vmid = args.get("vmid")
        if path == "/version":
            return dict(sim.version)
        if path == "/nodes":
            return [{"node": n, "status": d["status"], "type": "node", "id": f"node/{n}", "maxcpu": d["maxcpu"],
                     "maxmem": d["maxmem"], "cpu": 0.02, "mem": d["maxmem"] // 8, "level": "",
                     "uptime": 86400, "ssl_fingerprint": ""} for n, d in sorted(sim.nodes.items())]
        if path == "/cluster/resources":
            privs = self.auth.privs(user)  # pve-manager API2/Cluster.pm resources: VMs with VM.Audit only
            return [r for r in sim.resources(args.get("type"))
                    if r.get("type") != "qemu" or privs.has(f"/vms/{r['vmid']}", "VM.Audit")]
        if path == "/nodes/{node}/hardware":
            sim.node(node)
            return [{"type": "pci"}, {"type": "usb"}]
        if path == "/nodes/{node}/hardware/pci":
            return sim.pci_scan(node, args.get("pci-class-blacklist", "05;06;0b"), args.get("verbose", 1))
        if path == "/nodes/{node}/hardware/pci/{pci-id-or-mapping}":
            sim.node(node)
            return [{"method": "mdev"}]
        if path == "/nodes/{node}/hardware/pci/{pci-id-or-mapping}/mdev":
            return sim.mdev_scan(node, args["pci-id-or-mapping"])
        if path == "/cluster/mapping":
            return [{"name": "pci"}, {"name": "usb"}, {"name": "dir"}]
        if path == "/cluster/mapping/pci":
            if method == "GET":
                privs = self.auth.privs(user)
                visible = {"Mapping.Audit", "Mapping.Use", "Mapping.Modify"}
                return [m for m in sim.mapping_list(args.get("check-node"))
                        if privs.at(f"/mapping/pci/{m['id']}") is None or privs.at(f"/mapping/pci/{m['id']}") & visible]
            sim.mapping_create(args)
            return None
        if path == "/cluster/mapping/pci/{id}":
            if method == "GET":
                return sim.mapping_get(args["id"])
            if method == "PUT":
                sim.mapping_update(args["id"], args)
            else:
                sim.mapping_delete(args["id"])
            return None
        if path == "/access/permissions":
            return self.auth.privs(args.get("userid") or user).dump(args.get("path"))
        if path == "/nodes/{node}/qemu":
            # qemu-server API2/Qemu.pm vmlist: only the VMs the caller has VM.Audit on
            privs = self.auth.privs(user)
            return [v for v in sim.vm_list(node) if privs.has(f"/vms/{v['vmid']}", "VM.Audit")]
        if path == "/nodes/{node}/qemu/{vmid}":
            sim.vm(node, vmid)
            return [{"subdir": s} for s in ("config", "pending", "status")]
        if path == "/nodes/{node}/qemu/{vmid}/config":
            return self._config(method, node, vmid, args, user)
        if path == "/nodes/{node}/qemu/{vmid}/pending":
            return sim.vm_pending(node, vmid)
        if path == "/nodes/{node}/qemu/{vmid}/status":
            sim.vm(node, vmid)
            return [{"subdir": s} for s in ("current", "start", "stop", "shutdown", "reboot")]
        if path == "/nodes/{node}/qemu/{vmid}/status/current":
            return sim.vm_status(node, vmid)
        if path.startswith("/nodes/{node}/qemu/{vmid}/status/"):
            return sim.vm_power(node, vmid, path.rsplit("/", 1)[1], user)
        if path == "/nodes/{node}/tasks/{upid}":
            sim.task_status(node, args["upid"])
            return [{"name": "log"}, {"name": "status"}]
        if path == "/nodes/{node}/tasks/{upid}/status":
            return sim.task_status(node, args["upid"])
        if path == "/nodes/{node}/tasks/{upid}/log":
            return sim.task_log_lines(node, args["upid"])
        raise PveError(f"Method '{method} {path}' not implemented", 501)

    def _config(self, method, node, vmid, args, user):
        sim = self.sim
        if method == "GET":
            if args.get("snapshot"):
                raise PveError(f"snapshot '{args['snapshot']}' does not exist\n")
            return sim.vm_config(node, vmid, bool(args.get("current")))
        sim.vm(node, vmid)
        raw = {k: v for k, v in args.items() if k not in ("node", "vmid")}
        privs = self.auth.privs(user)
        if method == "PUT":
            sim.vm_update(node, vmid, raw, user, privs)
            return None
        # POST: the update runs in a 'qmconfig' worker; its errors fail the task instead of the request.
        try:
            sim.vm_update(node, vmid, raw, user, privs)
            upid = sim.new_task(node, "qmconfig", str(vmid), user)
        except (PveError, schema.ParamError) as exc:
            text = exc.message.strip() if isinstance(exc, PveError) else "%s %s" % (
                str(exc).strip(), "; ".join(f"{k}: {v}" for k, v in sorted(exc.errors.items())))
            upid = sim.new_task(node, "qmconfig", str(vmid), user, exitstatus=text)
            if args.get("background_delay"):
                raise
        if args.get("background_delay") and sim.task_seconds <= args["background_delay"]:
            return None
        return upid


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # failed TLS handshakes and dropped connections are the client's business
        if os.environ.get("PVESIM_LOG"):
            super().handle_error(request, client_address)


class Server:
    """A running pvesim (HTTPS server thread + model)."""

    def __init__(self, fixture=DEFAULT_FIXTURE, run_dir=None, host="127.0.0.1", port=0, task_seconds=0.0):
        import tempfile  # pylint: disable=import-outside-toplevel
        self.run_dir = run_dir or tempfile.mkdtemp(prefix="pvesim-")
        self.sim = Sim(fixture, task_seconds=task_seconds)
        self.ca, cert, key = make_ca(self.run_dir, (host, "localhost") if host != "localhost" else (host,))
        handler = type("PveSimHandler", (Handler,), {"sim": self.sim, "auth": Auth(self.sim.users)})
        self.httpd = _HTTPServer((host, port), handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        # handshake in the connection's own thread, so a silent or plain-HTTP client cannot stall accept()
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True, do_handshake_on_connect=False)
        self.host = host
        self.port = self.httpd.server_address[1]
        self.thread = None

    @property
    def url(self):
        return f"https://{self.host}:{self.port}"

    def start(self):
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="pvesim",
                                       daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        if self.thread:
            self.thread.join(timeout=5)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Proxmox VE API simulator (HTTPS on loopback, own CA)")
    parser.add_argument("--fixture", default=DEFAULT_FIXTURE, help="cluster fixture (JSON)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (written to RUN_DIR/port)")
    parser.add_argument("--run-dir", required=True, help="where ca.pem, port and pid are written")
    parser.add_argument("--task-seconds", type=float, default=0.0, help="how long UPID tasks report 'running'")
    opts = parser.parse_args(argv)
    server = Server(opts.fixture, opts.run_dir, opts.host, opts.port, opts.task_seconds)
    with open(os.path.join(opts.run_dir, "pid"), "w", encoding="utf-8") as handle:
        handle.write(f"{os.getpid()}\n")
    # root@pam's first API token, for the lab inventory: read from here, so no secret is written into the repository's
    # inventories or docs (and none ships in the collection tarball).
    users = server.sim.users
    tokens = users.get("root@pam", {}).get("tokens") or {}
    if tokens:
        name, secret = sorted(tokens.items())[0]
        fd = os.open(os.path.join(opts.run_dir, "token"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(f"{secret['secret'] if isinstance(secret, dict) else secret}\n")
        with open(os.path.join(opts.run_dir, "token_id"), "w", encoding="utf-8") as handle:
            handle.write(f"{name}\n")
    # port last: its presence tells a waiting launcher that ca.pem and pid are in place
    tmp = os.path.join(opts.run_dir, "port.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(f"{server.port}\n")
    os.replace(tmp, os.path.join(opts.run_dir, "port"))
    print(f"pvesim listening on {server.url}{API_PREFIX} ca={server.ca}", flush=True)
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
    return 0
