# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a licensed client reaches its NVIDIA License System service instance (I/O): the client configuration
token read from the node (module_utils/_nls.py parses it; its contents never leave this function), then for every
endpoint it names a TCP connection and a TLS handshake, each within a timeout. Nothing is sent over the connection.
"""

from __future__ import annotations

import datetime
import os
import socket
import ssl
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from ansible_collections.gpuops.provision.plugins.module_utils import _nls, _sysfs


def read_token(token_dir: str, names: Sequence[str]) -> tuple[Optional[dict[str, Any]], str]:
    """(parse_token result of the newest token file, its name) or (None, why). The guest driver reads the token
    directory too; with several files the newest is taken, as a redeployed token replaces the old one."""
    if not names:
        return None, "no client configuration token (*.tok) in %s" % token_dir
    paths = sorted((os.path.join(token_dir, n) for n in names), key=os.path.getmtime)
    try:
        return _nls.parse_token(_sysfs.read_file(paths[-1])), os.path.basename(paths[-1])
    except _sysfs.SysfsError as e:
        return None, str(e)
    except OSError as e:
        return None, "cannot read %s: %s" % (os.path.basename(paths[-1]), e.strerror or e)
    except _nls.TokenError as e:
        return None, "%s: %s" % (os.path.basename(paths[-1]), e)


def _not_after(cert: Optional[Mapping[str, Any]]) -> Optional[str]:
    text = (cert or {}).get("notAfter")
    if not text:
        return None
    return datetime.datetime.strptime(text, "%b %d %H:%M:%S %Y %Z").replace(
        tzinfo=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def probe(host: str, port: int, timeout: float, validate_certs: bool = False, ca_path: Optional[str] = None) -> dict[str, Any]:
    """{tcp, tls, tls_version, certificate_expires, error} of one endpoint."""
    out: dict[str, Any] = {"tcp": False, "tls": False, "tls_version": None, "certificate_expires": None, "error": None}
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as e:
        out["error"] = "TCP connection to %s:%d failed: %s" % (host, port, e.strerror or e)
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
                  ca_path: Optional[str] = None) -> dict[str, Any]:
    """{token: {...} or None, error, endpoints: [{host, port, kind, services, tcp, tls, ...}]} for the module."""
    parsed, why = read_token(token_dir, names)
    if parsed is None:
        return {"token": None, "error": why, "endpoints": []}
    summary = {"file": why, "service_instance": parsed.get("service_instance"), "issued_at": parsed.get("issued_at"),
               "expires_at": parsed.get("expires_at")}
    endpoints = []
    for target in _nls.targets(parsed):
        endpoints.append(dict(target, **probe(target["host"], target["port"], timeout, validate_certs, ca_path)))
    return {"token": summary, "error": None, "endpoints": endpoints}
