# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""lab/nls/token.py, the stand-in client configuration token: it has the layout FastAPI-DLS app/main.py
``_client_token`` gives a real .tok (python-jose JWS compact, RS256; the claim names, their order and nesting; one
node and port set per HA node as on FastAPI-DLS's ``ha`` branch), and module_utils/_nls.parse_token reads it back."""

from __future__ import annotations

import base64
import datetime
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._licensing import nls

HERE = os.path.dirname(os.path.abspath(__file__))
TOKEN_PY = os.path.abspath(os.path.join(HERE, "..", "..", "lab", "nls", "token.py"))

# Loaded from its path under its own name: "token" would be the stdlib module on sys.path.
_SPEC = importlib.util.spec_from_file_location("gpuops_lab_nls_token", TOKEN_PY)
T = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(T)

# FastAPI-DLS app/main.py _client_token (GreenDamTan/fastapi-dls_mirror 52e9f2c): the payload's keys, in order.
FASTAPI_DLS_CLAIMS = ["jti", "iss", "aud", "iat", "nbf", "exp", "protocol_version", "update_mode", "scope_ref_list",
                      "fulfillment_class_ref_list", "service_instance_configuration",
                      "service_instance_public_key_configuration"]
FASTAPI_DLS_CONFIG = ["nls_service_instance_ref", "svc_port_set_list", "node_url_list"]
FASTAPI_DLS_PORT_SET = ["idx", "d_name", "svc_port_map"]
FASTAPI_DLS_PORT_MAP = ["service", "port"]  # sjdaws/dls: "must have service name first"
FASTAPI_DLS_NODE = ["idx", "url", "url_qr", "svc_port_set_idx"]
FASTAPI_DLS_PUBLIC_KEY = ["service_instance_public_key_me", "service_instance_public_key_pem", "key_retention_mode"]

ISSUED = datetime.datetime(2026, 12, 1, 8, 0, 0, tzinfo=datetime.timezone.utc)
EXPIRES = datetime.datetime(2038, 12, 1, 8, 0, 0, tzinfo=datetime.timezone.utc)
REF = "3f1b0c2d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"


def _decode(part):
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _ordered(token):
    """The payload as JSON with key order kept (lists of pairs)."""
    return json.loads(_decode(token.split(".")[1]), object_pairs_hook=lambda pairs: pairs)


def _keys(pairs):
    return [k for k, _v in pairs]


def _get(pairs, key):
    return dict(pairs)[key]


def test_round_trip_single_dls():
    token = T.make_token(["dls.lab.example:443"], service_instance_ref=REF, issued_at=ISSUED, expires_at=EXPIRES)
    parsed = nls.parse_token(token)
    assert parsed["service_instance"] == REF
    assert parsed["endpoints"] == [
        {"host": "dls.lab.example", "port": 443, "service": "auth", "kind": "DLS", "node": 0},
        {"host": "dls.lab.example", "port": 443, "service": "lease", "kind": "DLS", "node": 0},
    ]
    assert parsed["issued_at"] == "2026-12-01T08:00:00Z"
    assert parsed["not_before"] == "2026-12-01T08:00:00Z"
    assert parsed["expires_at"] == "2038-12-01T08:00:00Z"
    assert (parsed["issuer"], parsed["audience"]) == ("NLS Service Instance", "NLS Licensed Client")
    assert (parsed["algorithm"], parsed["signed"]) == ("RS256", True)
    assert (parsed["protocol_version"], parsed["update_mode"]) == ("2.0", "ABSOLUTE")


def test_round_trip_ha_pair_and_custom_services():
    token = T.make_token([("dls-a.lab.example", 443),
                          {"host": "10.20.0.2", "port": 8443, "services": ("auth", "lease", "quick_release")},
                          {"host": "api.cls.licensing.nvidia.com", "d_name": "CLS"}],
                         service_instance_ref=REF, issued_at=1796112000, expires_at=2174803200)
    parsed = nls.parse_token(token)
    assert [(e["host"], e["port"], e["service"], e["kind"], e["node"]) for e in parsed["endpoints"]] == [
        ("dls-a.lab.example", 443, "auth", "DLS", 0), ("dls-a.lab.example", 443, "lease", "DLS", 0),
        ("10.20.0.2", 8443, "auth", "DLS", 1), ("10.20.0.2", 8443, "lease", "DLS", 1),
        ("10.20.0.2", 8443, "quick_release", "DLS", 1),
        ("api.cls.licensing.nvidia.com", 443, "auth", "CLS", 2),
        ("api.cls.licensing.nvidia.com", 443, "lease", "CLS", 2)]
    assert [(t["host"], t["port"]) for t in nls.targets(parsed)] == [
        ("dls-a.lab.example", 443), ("10.20.0.2", 8443), ("api.cls.licensing.nvidia.com", 443)]


def test_jws_compact_layout_and_header_as_python_jose_writes_it():
    token = T.make_token(["dls.lab.example"], issued_at=ISSUED)
    parts = token.split(".")
    assert len(parts) == 3
    for part in parts:
        assert re.match(r"^[A-Za-z0-9_-]+\Z", part), "unpadded base64url"
    assert _decode(parts[0]) == b'{"alg":"RS256","typ":"JWT"}'
    body = _decode(parts[1])
    assert body == json.dumps(json.loads(body), separators=(",", ":")).encode("utf-8")  # compact, order kept
    assert not token.endswith("\n")


def test_payload_names_order_and_nesting_follow_fastapi_dls():
    token = T.make_token(["dls-a.lab.example:443", "dls-b.lab.example:443"], service_instance_ref=REF,
                         issued_at=ISSUED, expires_at=EXPIRES)
    claims = _ordered(token)
    assert _keys(claims) == FASTAPI_DLS_CLAIMS
    assert _get(claims, "iss") == "NLS Service Instance"
    assert _get(claims, "aud") == "NLS Licensed Client"
    assert _get(claims, "iat") == _get(claims, "nbf") == int(ISSUED.timestamp())
    assert _get(claims, "exp") == int(EXPIRES.timestamp())
    assert _get(claims, "protocol_version") == "2.0"
    assert _get(claims, "update_mode") == "ABSOLUTE"
    assert len(_get(claims, "scope_ref_list")) == 1
    assert _get(claims, "fulfillment_class_ref_list") == []
    config = _get(claims, "service_instance_configuration")
    assert _keys(config) == FASTAPI_DLS_CONFIG
    assert _get(config, "nls_service_instance_ref") == REF
    for idx, port_set in enumerate(_get(config, "svc_port_set_list")):
        assert _keys(port_set) == FASTAPI_DLS_PORT_SET
        assert (_get(port_set, "idx"), _get(port_set, "d_name")) == (idx, "DLS")
        assert [_keys(m) for m in _get(port_set, "svc_port_map")] == [FASTAPI_DLS_PORT_MAP] * 2
        assert [dict(m) for m in _get(port_set, "svc_port_map")] == [{"service": "auth", "port": 443},
                                                                     {"service": "lease", "port": 443}]
    nodes = _get(config, "node_url_list")
    assert [_keys(n) for n in nodes] == [FASTAPI_DLS_NODE] * 2
    assert [dict(n) for n in nodes] == [
        {"idx": 0, "url": "dls-a.lab.example", "url_qr": "dls-a.lab.example", "svc_port_set_idx": 0},
        {"idx": 1, "url": "dls-b.lab.example", "url_qr": "dls-b.lab.example", "svc_port_set_idx": 1}]
    public = _get(claims, "service_instance_public_key_configuration")
    assert _keys(public) == FASTAPI_DLS_PUBLIC_KEY
    assert _keys(_get(public, "service_instance_public_key_me")) == ["mod", "exp"]
    assert _get(public, "key_retention_mode") == "LATEST_ONLY"


def test_signature_verifies_with_the_key_the_token_carries():
    serialization = pytest.importorskip("cryptography.hazmat.primitives.serialization")
    from cryptography.hazmat.primitives import hashes  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives.asymmetric import padding  # pylint: disable=import-outside-toplevel
    token = T.make_token(["dls.lab.example"])
    public = json.loads(_decode(token.split(".")[1]))["service_instance_public_key_configuration"]
    key = serialization.load_pem_public_key(public["service_instance_public_key_pem"].encode("ascii"))
    numbers = key.public_numbers()
    assert public["service_instance_public_key_me"] == {"mod": "%x" % numbers.n, "exp": numbers.e}
    assert key.key_size == 2048
    head, body, sig = token.split(".")
    key.verify(_decode(sig), ("%s.%s" % (head, body)).encode("ascii"), padding.PKCS1v15(), hashes.SHA256())


def test_default_validity_is_twelve_years():
    claims = json.loads(_decode(T.make_token(["dls.lab.example"], issued_at=ISSUED).split(".")[1]))
    assert claims["exp"] == int(datetime.datetime(2038, 12, 1, 8, 0, tzinfo=datetime.timezone.utc).timestamp())
    leap = datetime.datetime(2088, 2, 29, tzinfo=datetime.timezone.utc)  # 2100 is no leap year
    claims = json.loads(_decode(T.make_token(["dls.lab.example"], issued_at=leap).split(".")[1]))
    assert claims["exp"] == int(datetime.datetime(2100, 2, 28, tzinfo=datetime.timezone.utc).timestamp())


def test_no_endpoint_is_refused():
    with pytest.raises(ValueError, match="at least one endpoint"):
        T.make_token([])


def test_script_writes_a_token_the_parser_reads():
    out = subprocess.run([sys.executable, TOKEN_PY, "dls.lab.example:8443"], check=True, capture_output=True,
                         text=True, timeout=120)
    parsed = nls.parse_token(out.stdout)
    assert [(e["host"], e["port"], e["service"]) for e in parsed["endpoints"]] == [
        ("dls.lab.example", 8443, "auth"), ("dls.lab.example", 8443, "lease")]
