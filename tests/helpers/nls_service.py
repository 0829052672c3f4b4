# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The TLS side of an NVIDIA License System service instance (what the license_service check probes) and client
configuration tokens in the format a DLS hands out (lab/nls/token.py), for the tests."""

from __future__ import annotations

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _self_signed(base):
    """A throwaway self-signed certificate for 127.0.0.1 (as a DLS appliance serves one until another is installed)."""
    import datetime  # pylint: disable=import-outside-toplevel
    from cryptography import x509  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives import hashes, serialization  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives.asymmetric import ec  # pylint: disable=import-outside-toplevel
    from cryptography.x509.oid import NameOID  # pylint: disable=import-outside-toplevel
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dls.lab.invalid")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30)).sign(key, hashes.SHA256()))
    cert_path, key_path = os.path.join(str(base), "dls.crt"), os.path.join(str(base), "dls.key")
    with open(cert_path, "wb") as fh:
        fh.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))
    return cert_path, key_path


def _nls_proxy_module():
    spec = importlib.util.spec_from_file_location("nls_proxy", os.path.join(ROOT, "lab", "nls", "proxy.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TlsListener(_nls_proxy_module().LoopbackServer):
    """A TLS server on 127.0.0.1 that completes handshakes and closes (what license_service probes); ``port``."""

    def __init__(self, base):
        import ssl  # pylint: disable=import-outside-toplevel
        cert, key = _self_signed(base)
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.handshakes = 0
        super().__init__()

    def handle(self, conn):
        try:
            with self.ctx.wrap_socket(conn, server_side=True):
                self.handshakes += 1
        except OSError:
            conn.close()


def write_token(node_dir, endpoints):
    """A client configuration token (lab/nls/token.py, the format a DLS hands out) in ``<node_dir>/tokens``, and a
    gridd.conf pointing there; returns the gridd.conf path."""
    spec = importlib.util.spec_from_file_location("lab_nls_token", os.path.join(ROOT, "lab", "nls", "token.py"))
    nls_token = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nls_token)
    tokens = os.path.join(str(node_dir), "tokens")
    os.makedirs(tokens, exist_ok=True)
    with open(os.path.join(tokens, "client_configuration_token.tok"), "w", encoding="utf-8") as fh:
        fh.write(nls_token.make_token(endpoints))
    return tokens


def connect_proxy(allow=None, require_auth=False):
    """lab/nls/proxy.py's ConnectProxy: the HTTP proxy between a guest and its licence service."""
    return _nls_proxy_module().ConnectProxy(allow, require_auth)
