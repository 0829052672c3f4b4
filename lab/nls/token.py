# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stand-in NVIDIA License System client configuration token (``client_configuration_token*.tok``) for the lab
and the tests: the same format as a token a DLS hands out, signed with a throwaway RSA key.

Format, as the open-source service instances that current guest drivers accept write it (own code, no copy):
  - FastAPI-DLS app/main.py ``_client_token`` (GET /-/client-token; GitHub mirror GreenDamTan/fastapi-dls_mirror
    52e9f2c, 2025-05-13): ``jose.jws.sign(payload, key, algorithm=RS256)`` served as text/plain, filename
    ``client_configuration_token_<date>.tok``. python-jose writes a JWS compact serialization
    base64url(header) "." base64url(payload) "." base64url(signature), unpadded; the header is
    {"alg":"RS256","typ":"JWT"} (sorted keys, no spaces), the payload compact JSON in insertion order.
  - Payload keys in that order: jti, iss "NLS Service Instance", aud "NLS Licensed Client", iat, nbf, exp (seconds;
    the .tok is valid 12 years there), protocol_version "2.0", update_mode "ABSOLUTE", scope_ref_list [<uuid>],
    fulfillment_class_ref_list [], service_instance_configuration {nls_service_instance_ref, svc_port_set_list
    [{idx, d_name "DLS", svc_port_map [{service "auth", port}, {service "lease", port}]}], node_url_list [{idx, url,
    url_qr, svc_port_set_idx}]}, service_instance_public_key_configuration {service_instance_public_key_me {mod
    (hex, no 0x), exp}, service_instance_public_key_pem, key_retention_mode "LATEST_ONLY"}.
  - Key order matters to the driver: sjdaws/dls client/token/client.go notes "ServicePortMap must have service name
    first as nvidia parses this using an index rather than key", and another Go DLS ("NVIDIA does not use the json
    library to process it. Must use struct to ensure order"). This generator keeps FastAPI-DLS's order.
  - HA (FastAPI-DLS branch ``ha``, 84b092c): one node_url_list entry per node, each with its own svc_port_set.
    Every endpoint passed to make_token becomes one node with one port set, the way that branch does it.

Not shown by any source read: a token that NVIDIA's own DLS or CLS issued. What a CLS token carries in d_name, and
whether NVIDIA's url ever holds more than a host, stay open; ``d_name`` is therefore a per-endpoint option.

The signature is real RS256 over the first two parts, made with a throwaway 2048-bit key generated once per
process (or the ``key`` passed in); the matching public key is the one in service_instance_public_key_configuration,
as in FastAPI-DLS. Nothing verifies it against NVIDIA: it is not meant to.

Run as a script: ``python lab/nls/token.py dls.lab.example:443 [host[:port] ...] > client_configuration_token.tok``.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # this file's folder must not stay on sys.path: the file would shadow stdlib "token"
    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

# pylint: disable=wrong-import-position
import base64
import calendar
import datetime
import json
import uuid

ISSUER = "NLS Service Instance"
AUDIENCE = "NLS Licensed Client"
PROTOCOL_VERSION = "2.0"
UPDATE_MODE = "ABSOLUTE"
KEY_RETENTION_MODE = "LATEST_ONLY"
DEFAULT_PORT = 443  # FastAPI-DLS DLS_PORT default; the port the token names is the one the driver uses
DEFAULT_SERVICES = ("auth", "lease")
DEFAULT_VALID_YEARS = 12  # FastAPI-DLS CLIENT_TOKEN_EXPIRE_DELTA = relativedelta(years=12)

_KEY = []


def throwaway_key():
    """The process's throwaway RSA-2048 signing key (generated on first use; needs the ``cryptography`` package)."""
    if not _KEY:
        from cryptography.hazmat.primitives.asymmetric import rsa  # pylint: disable=import-outside-toplevel
        _KEY.append(rsa.generate_private_key(public_exponent=65537, key_size=2048))
    return _KEY[0]


def _b64url(raw):
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _seconds(value):
    """datetime (naive = UTC) or number -> whole seconds since the epoch."""
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return calendar.timegm(value.timetuple())
    return int(value)


def _add_years(stamp, years):
    when = datetime.datetime.fromtimestamp(stamp, datetime.timezone.utc)
    try:
        later = when.replace(year=when.year + years)
    except ValueError:  # 29 February
        later = when.replace(year=when.year + years, day=28)
    return calendar.timegm(later.timetuple())


def _endpoint(item):
    """'host', 'host:port', (host, port) or {"host", "port", "services", "d_name"} -> dict."""
    if isinstance(item, dict):
        out = dict(item)
    elif isinstance(item, (tuple, list)):
        out = {"host": item[0], "port": item[1] if len(item) > 1 else DEFAULT_PORT}
    else:
        host, sep, port = str(item).rpartition(":")
        out = {"host": host, "port": int(port)} if sep and port.isdigit() and "]" not in port else {"host": str(item)}
    out.setdefault("port", DEFAULT_PORT)
    out.setdefault("services", DEFAULT_SERVICES)
    out.setdefault("d_name", "DLS")
    return out


def payload(endpoints, service_instance_ref=None, issued_at=None, expires_at=None, key=None, scope_ref=None,
            token_id=None):
    """The claims of a client configuration token, keys in FastAPI-DLS's order (see the module docstring)."""
    eps = [_endpoint(e) for e in endpoints]
    if not eps:
        raise ValueError("a client configuration token names at least one endpoint")
    iat = _seconds(issued_at if issued_at is not None else datetime.datetime.now(datetime.timezone.utc))
    exp = _seconds(expires_at) if expires_at is not None else _add_years(iat, DEFAULT_VALID_YEARS)
    public = (key or throwaway_key()).public_key()
    numbers = public.public_numbers()
    from cryptography.hazmat.primitives import serialization  # pylint: disable=import-outside-toplevel
    pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    port_sets, nodes = [], []
    for idx, ep in enumerate(eps):
        port_sets.append({"idx": idx, "d_name": ep["d_name"],
                          "svc_port_map": [{"service": s, "port": ep["port"]} for s in ep["services"]]})
        nodes.append({"idx": idx, "url": ep["host"], "url_qr": ep.get("url_qr", ep["host"]), "svc_port_set_idx": idx})
    return {
        "jti": token_id or str(uuid.uuid4()),
        "iss": ISSUER,
        "aud": AUDIENCE,
        "iat": iat,
        "nbf": iat,
        "exp": exp,
        "protocol_version": PROTOCOL_VERSION,
        "update_mode": UPDATE_MODE,
        "scope_ref_list": [scope_ref or str(uuid.uuid4())],
        "fulfillment_class_ref_list": [],
        "service_instance_configuration": {
            "nls_service_instance_ref": service_instance_ref or str(uuid.uuid4()),
            "svc_port_set_list": port_sets,
            "node_url_list": nodes,
        },
        "service_instance_public_key_configuration": {
            "service_instance_public_key_me": {"mod": "%x" % numbers.n, "exp": numbers.e},
            "service_instance_public_key_pem": pem.decode("ascii").strip(),
            "key_retention_mode": KEY_RETENTION_MODE,
        },
    }


def sign(claims, key=None):
    """JWS compact serialization of ``claims`` with RS256 (python-jose's byte layout, see the module docstring)."""
    from cryptography.hazmat.primitives import hashes  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives.asymmetric import padding  # pylint: disable=import-outside-toplevel
    header = json.dumps({"typ": "JWT", "alg": "RS256"}, separators=(",", ":"), sort_keys=True).encode("utf-8")
    body = json.dumps(claims, separators=(",", ":")).encode("utf-8")
    signing_input = ("%s.%s" % (_b64url(header), _b64url(body))).encode("ascii")
    signature = (key or throwaway_key()).sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    return "%s.%s" % (signing_input.decode("ascii"), _b64url(signature))


def make_token(endpoints, service_instance_ref=None, issued_at=None, expires_at=None, key=None, scope_ref=None,
               token_id=None):
    """A client configuration token (the .tok file's text) naming ``endpoints``.

    endpoints: 'host', 'host:port', (host, port) or {"host", "port", "services", "d_name", "url_qr"} each; one node
    and one port set per endpoint (services default auth+lease, port 443, d_name "DLS"). issued_at/expires_at:
    datetime (naive = UTC) or epoch seconds; default now and now + 12 years. key: a cryptography RSA private key,
    default the process's throwaway key. The text has no trailing newline, as FastAPI-DLS serves it.
    """
    claims = payload(endpoints, service_instance_ref=service_instance_ref, issued_at=issued_at,
                     expires_at=expires_at, key=key, scope_ref=scope_ref, token_id=token_id)
    return sign(claims, key=key)


def main(argv=None):
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or any(a.startswith("-") for a in args):
        sys.stderr.write("usage: token.py HOST[:PORT] [HOST[:PORT] ...] > client_configuration_token.tok\n")
        return 2
    sys.stdout.write(make_token(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
