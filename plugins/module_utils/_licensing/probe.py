# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a licensed client reaches its NVIDIA License System service instance (I/O): the client configuration
token read from the node (module_utils/_licensing/nls.py parses it; its contents never leave this function), then for every
endpoint it names a TCP connection and a TLS handshake, each within a timeout. Nothing is sent over the connection.
"""

from __future__ import annotations

import datetime
import os
import socket
import ssl
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from ansible_collections.gpuops.provision.plugins.module_utils._gpu import sysfs
from ansible_collections.gpuops.provision.plugins.module_utils._licensing import nls


def read_token(token_dir: str, names: Sequence[str]) -> tuple[Optional[dict[str, Any]], str]:
    """(parse_token result of the newest token file, its name) or (None, why). The guest driver reads the token
    directory too; with several files the newest is taken, as a redeployed token replaces the old one."""
    if not names:
        return None, "no client configuration token (*.tok) in %s" % token_dir
    paths = sorted((os.path.join(token_dir, n) for n in names), key=os.path.getmtime)
    try:
        return nls.parse_token(sysfs.read_file(paths[-1])), os.path.basename(paths[-1])
    except sysfs.SysfsError as e:
        return None, str(e)
    except OSError as e:
        return None, "cannot read %s: %s" % (os.path.basename(paths[-1]), e.strerror or e)
    except nls.TokenError as e:
        return None, "%s: %s" % (os.path.basename(paths[-1]), e)


def _not_after(cert: Optional[Mapping[str, Any]]) -> Optional[str]:
    text = (cert or {}).get("notAfter")
    if not text:
        return None
    return datetime.datetime.strptime(text, "%b %d %H:%M:%S %Y %Z").replace(
        tzinfo=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


_PROXY_REPLY_LIMIT = 8192


def _tunnel(host: str, port: int, timeout: float, proxy: Mapping[str, Any]) -> socket.socket:
    """A socket to host:port through the HTTP proxy's CONNECT tunnel (RFC 9110 9.3.6), as gridd opens it. Raises
    OSError naming the proxy and its answer."""
    where = "%s:%d" % (proxy["host"], proxy["port"])
    try:
        sock = socket.create_connection((proxy["host"], proxy["port"]), timeout=timeout)
    except OSError as e:
        raise OSError("TCP connection to the proxy %s failed: %s" % (where, e.strerror or e)) from e
    try:
        sock.settimeout(timeout)
        sock.sendall(("CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host, port, host, port)).encode("ascii"))
        reply = b""
        while b"\r\n\r\n" not in reply and len(reply) < _PROXY_REPLY_LIMIT:
            chunk = sock.recv(1024)
            if not chunk:
                break
            reply += chunk
        status = reply.split(b"\r\n", 1)[0].decode("latin-1").strip()
        parts = status.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or parts[1] != "200":
            hint = " (the proxy wants credentials: gridd's ProxyUserName/ProxyCredentialsFilePath are not probed)" \
                if len(parts) > 1 and parts[1] == "407" else ""
            raise OSError("the proxy %s refused CONNECT %s:%d: %s%s" % (where, host, port, status or "no answer", hint))
    except OSError:
        sock.close()
        raise
    return sock


def probe(host: str, port: int, timeout: float, validate_certs: bool = False, ca_path: Optional[str] = None,
          proxy: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """{tcp, tls, tls_version, certificate_expires, error, proxy} of one endpoint, through gridd's proxy if any."""
    out: dict[str, Any] = {"tcp": False, "tls": False, "tls_version": None, "certificate_expires": None, "error": None,
                           "proxy": "%s:%d" % (proxy["host"], proxy["port"]) if proxy else None}
    try:
        sock = _tunnel(host, port, timeout, proxy) if proxy else socket.create_connection((host, port), timeout=timeout)
    except OSError as e:
        out["error"] = str(e) if proxy else "TCP connection to %s:%d failed: %s" % (host, port, e.strerror or e)
        return out
    out["tcp"] = True
    ctx = ssl.create_default_context(cafile=ca_path) if (validate_certs or ca_path) else ssl.SSLContext(
        ssl.PROTOCOL_TLS_CLIENT)
    if not (validate_certs or ca_path):
        # A DLS appliance serves a self-signed certificate unless one is installed; the guest driver trusts the
        # service through the token, not a CA. The probe only proves the TLS service answers.
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    try:
        with ctx.wrap_socket(sock, server_hostname=host) as tls:
            tls.settimeout(timeout)
            out["tls"] = True
            out["tls_version"] = tls.version()
            # Python gives the certificate's fields only once it was verified.
            cert = tls.getpeercert() if ctx.verify_mode != ssl.CERT_NONE else None
            out["certificate_expires"] = _not_after(cert)
    except (OSError, ssl.SSLError) as e:
        out["error"] = "TLS handshake with %s:%d failed: %s" % (host, port, getattr(e, "reason", None) or e)
    finally:
        sock.close()
    return out


def check_service(token_dir: str, names: Sequence[str], timeout: float, validate_certs: bool = False,
                  ca_path: Optional[str] = None, proxy: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """{token: {...} or None, error, endpoints: [{host, port, kind, services, tcp, tls, ...}]} for the module."""
    parsed, why = read_token(token_dir, names)
    if parsed is None:
        return {"token": None, "error": why, "endpoints": []}
    summary = {"file": why, "service_instance": parsed.get("service_instance"), "issued_at": parsed.get("issued_at"),
               "expires_at": parsed.get("expires_at")}
    endpoints = []
    for target in nls.targets(parsed):
        endpoints.append(dict(target, **probe(target["host"], target["port"], timeout, validate_certs, ca_path, proxy)))
    return {"token": summary, "error": None, "endpoints": endpoints}
