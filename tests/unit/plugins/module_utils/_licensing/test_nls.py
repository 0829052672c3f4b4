# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/_licensing/nls.py: the NLS client configuration token read as FastAPI-DLS and sjdaws/dls write it (JWS compact,
service_instance_configuration with svc_port_set_list / node_url_list), and the vGPU series -> licence rules of the
Virtual GPU Client Licensing User Guides (12.0 and 17.0 tables) and NVIDIA AI Enterprise.

Tokens here are built with the stdlib only; lab/nls/token.py (tests/lab/test_nls_token.py) builds signed ones.
"""

from __future__ import annotations

import base64
import json

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._licensing import nls

SECRET_HOST = "dls-secret-7f3a.corp.example"
SECRET_REF = "5ec7e700-aaaa-4bbb-8ccc-0123456789ab"


def _b64(raw):
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _jws(claims, header=None, signature="c2lnbmF0dXJl"):
    head = header if header is not None else {"alg": "RS256", "typ": "JWT"}
    head_raw = head if isinstance(head, bytes) else json.dumps(head, separators=(",", ":")).encode()
    body_raw = claims if isinstance(claims, bytes) else json.dumps(claims, separators=(",", ":")).encode()
    return "%s.%s.%s" % (_b64(head_raw), _b64(body_raw), signature)


def _claims(nodes=None, port_sets=None, **extra):
    """Claims shaped as FastAPI-DLS app/main.py _client_token writes them."""
    claims = {
        "jti": "0b5e0f0e-1111-4222-8333-444455556666",
        "iss": "NLS Service Instance",
        "aud": "NLS Licensed Client",
        "iat": 1767225600,  # 2026-01-01T00:00:00Z
        "nbf": 1767225600,
        "exp": 2145916800,  # 2038-01-01T00:00:00Z
        "protocol_version": "2.0",
        "update_mode": "ABSOLUTE",
        "scope_ref_list": ["9d2f8e1a-0000-4000-8000-00000000abcd"],
        "fulfillment_class_ref_list": [],
        "service_instance_configuration": {
            "nls_service_instance_ref": SECRET_REF,
            "svc_port_set_list": port_sets if port_sets is not None else [
                {"idx": 0, "d_name": "DLS", "svc_port_map": [{"service": "auth", "port": 443},
                                                             {"service": "lease", "port": 443}]}],
            "node_url_list": nodes if nodes is not None else [
                {"idx": 0, "url": SECRET_HOST, "url_qr": SECRET_HOST, "svc_port_set_idx": 0}],
        },
        "service_instance_public_key_configuration": {
            "service_instance_public_key_me": {"mod": "c0ffee", "exp": 65537},
            "service_instance_public_key_pem": "-----BEGIN PUBLIC KEY-----\n...\n-----END PUBLIC KEY-----",
            "key_retention_mode": "LATEST_ONLY",
        },
    }
    claims.update(extra)
    return claims


def _config(claims):
    return claims["service_instance_configuration"]


# ----------------------------------------------------------------------------------------------------- parse_token

def test_single_dls_token():
    parsed = nls.parse_token(_jws(_claims()))
    assert parsed["service_instance"] == SECRET_REF
    assert parsed["endpoints"] == [
        {"host": SECRET_HOST, "port": 443, "service": "auth", "kind": "DLS", "node": 0},
        {"host": SECRET_HOST, "port": 443, "service": "lease", "kind": "DLS", "node": 0},
    ]
    assert parsed["issued_at"] == "2026-01-01T00:00:00Z"
    assert parsed["not_before"] == "2026-01-01T00:00:00Z"
    assert parsed["expires_at"] == "2038-01-01T00:00:00Z"
    assert parsed["token_id"] == "0b5e0f0e-1111-4222-8333-444455556666"
    assert parsed["issuer"] == "NLS Service Instance"
    assert parsed["audience"] == "NLS Licensed Client"
    assert parsed["protocol_version"] == "2.0"
    assert parsed["update_mode"] == "ABSOLUTE"
    assert parsed["scope_refs"] == ["9d2f8e1a-0000-4000-8000-00000000abcd"]
    assert parsed["algorithm"] == "RS256"
    assert parsed["signed"] is True
    assert parsed["nodes"] == [{"idx": 0, "host": SECRET_HOST, "url_qr": SECRET_HOST, "port_set": 0,
                                "d_name": "DLS", "kind": "DLS"}]


def test_targets_merge_services_of_one_port():
    parsed = nls.parse_token(_jws(_claims()))
    assert nls.targets(parsed) == [{"host": SECRET_HOST, "port": 443, "kind": "DLS", "services": ["auth", "lease"]}]


def test_ha_pair_each_node_its_own_port_set():
    # FastAPI-DLS branch "ha": the secondary is a second node pointing at a second port set (its port as a string).
    sets = [{"idx": 0, "d_name": "DLS", "svc_port_map": [{"service": "auth", "port": 443},
                                                         {"service": "lease", "port": 443}]},
            {"idx": 1, "d_name": "DLS", "svc_port_map": [{"service": "auth", "port": "8443"},
                                                         {"service": "lease", "port": "8443"}]}]
    nodes = [{"idx": 0, "url": "dls-a.example", "url_qr": "dls-a.example", "svc_port_set_idx": 0},
             {"idx": 1, "url": "10.1.2.3", "url_qr": "10.1.2.3", "svc_port_set_idx": 1}]
    parsed = nls.parse_token(_jws(_claims(nodes=nodes, port_sets=sets)))
    assert [(e["host"], e["port"], e["service"], e["node"]) for e in parsed["endpoints"]] == [
        ("dls-a.example", 443, "auth", 0), ("dls-a.example", 443, "lease", 0),
        ("10.1.2.3", 8443, "auth", 1), ("10.1.2.3", 8443, "lease", 1)]
    assert [(t["host"], t["port"]) for t in nls.targets(parsed)] == [("dls-a.example", 443), ("10.1.2.3", 8443)]


def test_file_bytes_with_newline_and_bom_are_read():
    token = _jws(_claims())
    assert nls.parse_token(("\ufeff" + token + "\r\n").encode("utf-8"))["service_instance"] == SECRET_REF
    assert nls.parse_token("  %s\n" % token)["service_instance"] == SECRET_REF


def test_unsigned_token_is_read_and_marked():
    parsed = nls.parse_token(_jws(_claims(), header={"alg": "none"}, signature=""))
    assert parsed["signed"] is False
    assert parsed["algorithm"] == "none"


def test_padded_base64url_parts_are_tolerated():
    token = _jws(_claims())
    head, body, sig = token.split(".")
    padded = ".".join([head + "=" * (-len(head) % 4), body + "=" * (-len(body) % 4), sig])
    assert nls.parse_token(padded)["endpoints"][0]["host"] == SECRET_HOST


def test_claims_without_times_give_none():
    claims = _claims()
    for name in ("iat", "nbf", "exp"):
        del claims[name]
    parsed = nls.parse_token(_jws(claims))
    assert (parsed["issued_at"], parsed["not_before"], parsed["expires_at"]) == (None, None, None)


@pytest.mark.parametrize("url, host", [
    ("DLS.Example.COM", "dls.example.com"),
    ("https://dls.example.com:8443/leasing", "dls.example.com"),
    ("dls.example.com:443", "dls.example.com"),
    ("192.0.2.10", "192.0.2.10"),
    ("[2001:db8::10]", "2001:db8::10"),
    ("2001:db8::10", "2001:db8::10"),
])
def test_node_url_forms_give_the_host(url, host):
    nodes = [{"idx": 0, "url": url, "url_qr": url, "svc_port_set_idx": 0}]
    assert nls.parse_token(_jws(_claims(nodes=nodes)))["endpoints"][0]["host"] == host


@pytest.mark.parametrize("host, d_name, kind", [
    ("api.cls.licensing.nvidia.com", "DLS", "CLS"),   # the CLS host gridd logs name wins over d_name
    ("api.cls.licensing.nvidia.com", None, "CLS"),
    ("dls.example", "DLS", "DLS"),
    ("dls.example", "dls", "DLS"),
    ("cls-proxy.example", "CLS", "CLS"),
    ("dls.example", "XYZ", None),
    ("dls.example", None, None),
    ("licensing.nvidia.com.evil.example", "XYZ", None),
])
def test_kind_from_host_then_d_name(host, d_name, kind):
    sets = [{"idx": 0, "svc_port_map": [{"service": "lease", "port": 443}]}]
    if d_name is not None:
        sets[0]["d_name"] = d_name
    nodes = [{"idx": 0, "url": host, "url_qr": host, "svc_port_set_idx": 0}]
    assert nls.parse_token(_jws(_claims(nodes=nodes, port_sets=sets)))["endpoints"][0]["kind"] == kind


def test_cls_host_suffixes_is_a_parameter():
    nodes = [{"idx": 0, "url": "nls.cloud.example", "url_qr": "", "svc_port_set_idx": 0}]
    token = _jws(_claims(nodes=nodes, port_sets=[{"idx": 0, "d_name": "X", "svc_port_map": [
        {"service": "lease", "port": 443}]}]))
    assert nls.parse_token(token)["endpoints"][0]["kind"] is None
    assert nls.parse_token(token, cls_host_suffixes=("cloud.example",))["endpoints"][0]["kind"] == "CLS"


def test_service_names_are_kept_as_the_token_names_them():
    sets = [{"idx": 0, "d_name": "DLS", "svc_port_map": [{"service": "auth", "port": 443},
                                                         {"service": "quick_release", "port": 80}]}]
    parsed = nls.parse_token(_jws(_claims(port_sets=sets)))
    assert [(e["service"], e["port"]) for e in parsed["endpoints"]] == [("auth", 443), ("quick_release", 80)]


def test_list_audience_is_kept():
    assert nls.parse_token(_jws(_claims(aud=["NLS Licensed Client"])))["audience"] == ["NLS Licensed Client"]


def _with(mutate):
    claims = _claims()
    mutate(claims)
    return _jws(claims)


def _set(path, value):
    def mutate(claims):
        node = claims
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return mutate


def _drop(path):
    def mutate(claims):
        node = claims
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    return mutate


SIC = "service_instance_configuration"
PORT0 = "token svc_port_set_list[0].svc_port_map[0] port is not a TCP port (1-65535)"
BROKEN = [
    ("", "token file is empty"),
    ("   \n", "token file is empty"),
    ("abc.def", "token is not a JWS compact serialization: 2 dot-separated parts, expected 3"),
    ("a.b.c.d", "token is not a JWS compact serialization: 4 dot-separated parts, expected 3"),
    ("!!!." + _jws(_claims()).split(".", 1)[1], "token header is not base64url"),
    ("abcde." + _jws(_claims()).split(".", 1)[1], "token header is not base64url (bad length)"),
    (_jws(_claims()).split(".")[0] + ".e30$.sig", "token payload is not base64url"),
    (_jws(b"{not json"), "token payload is not JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
    (_jws(b"\xff\xfe"), "token payload is not UTF-8 text"),
    (_jws(b"[1, 2]"), "token payload is not a JSON object"),
    (_jws(_claims(), header=b"[]"), "token header is not a JSON object"),
    (_jws(_claims(), signature="a+b/c"), "token signature is not base64url"),
    (_with(_drop([SIC])), "token has no service_instance_configuration"),
    (_with(_set([SIC], "x")), "token has no service_instance_configuration"),
    (_with(_set([SIC, "svc_port_set_list"], [])), "token has no endpoints: svc_port_set_list is missing or empty"),
    (_with(_drop([SIC, "svc_port_set_list"])), "token has no endpoints: svc_port_set_list is missing or empty"),
    (_with(_set([SIC, "node_url_list"], [])), "token has no endpoints: node_url_list is missing or empty"),
    (_with(_drop([SIC, "node_url_list"])), "token has no endpoints: node_url_list is missing or empty"),
    (_with(_set([SIC, "svc_port_set_list", 0, "idx"], True)), "token svc_port_set_list[0] has no valid idx"),
    (_with(_set([SIC, "svc_port_set_list", 0, "idx"], -1)), "token svc_port_set_list[0] has no valid idx"),
    (_with(_set([SIC, "svc_port_set_list", 0], "x")), "token svc_port_set_list[0] has no valid idx"),
    (_with(_set([SIC, "svc_port_set_list", 0, "svc_port_map"], [])), "token svc_port_set_list[0] lists no services (svc_port_map)"),
    (_with(_set([SIC, "svc_port_set_list", 0, "svc_port_map", 1, "service"], " ")),
     "token svc_port_set_list[0].svc_port_map[1] has no service name"),
    (_with(_set([SIC, "svc_port_set_list", 0, "svc_port_map", 0, "port"], 0)), PORT0),
    (_with(_set([SIC, "svc_port_set_list", 0, "svc_port_map", 0, "port"], 65536)), PORT0),
    (_with(_set([SIC, "svc_port_set_list", 0, "svc_port_map", 0, "port"], "https")), PORT0),
    (_with(_set([SIC, "svc_port_set_list", 0, "svc_port_map", 0, "port"], 443.5)), PORT0),
    (_with(_set([SIC, "node_url_list", 0], "x")), "token node_url_list[0] is not an object"),
    (_with(_set([SIC, "node_url_list", 0, "url"], "")), "token node_url_list[0] url is not a host name or address"),
    (_with(_set([SIC, "node_url_list", 0, "url"], "two words")), "token node_url_list[0] url is not a host name or address"),
    (_with(_set([SIC, "node_url_list", 0, "url"], "https://")), "token node_url_list[0] url is not a host name or address"),
    (_with(_set([SIC, "node_url_list", 0, "url"], 42)), "token node_url_list[0] url is not a host name or address"),
    (_with(_set([SIC, "node_url_list", 0, "svc_port_set_idx"], 3)), "token node_url_list[0] points at a svc_port_set_idx the token does not have"),
    (_with(_drop([SIC, "node_url_list", 0, "svc_port_set_idx"])), "token node_url_list[0] points at a svc_port_set_idx the token does not have"),
    (_with(_set(["exp"], "2038-01-01")), "token claim exp is not a NumericDate"),
    (_with(_set(["iat"], True)), "token claim iat is not a NumericDate"),
    (_with(_set(["exp"], 10 ** 20)), "token claim exp is out of range"),
    # Padding is stripped from the end only: "abcdX=" is five characters of data, one too many for base64.
    ("abcdX=." + _jws(_claims()).split(".", 1)[1], "token header is not base64url (bad length)"),
    ("=abcd." + _jws(_claims()).split(".", 1)[1], "token header is not base64url"),
    # Only a byte order mark is dropped before the header, no other leading character ("Xe30" is not "e30", {}).
    ("Xe30.e30.c2ln", "token header is not UTF-8 text"),
    (_with(_set([SIC, "svc_port_set_list", 0, "svc_port_map", 0], "auth")),
     "token svc_port_set_list[0].svc_port_map[0] has no service name"),
    (_with(_set([SIC, "node_url_list", 0, "url"], "[2001:db8::10")), "token node_url_list[0] url is not a host name or address"),
]


@pytest.mark.parametrize("text, message", BROKEN)
def test_broken_tokens_are_named(text, message):
    with pytest.raises(nls.TokenError) as err:
        nls.parse_token(text)
    assert str(err.value) == message


def test_token_error_is_a_value_error():
    assert issubclass(nls.TokenError, ValueError)
    with pytest.raises(ValueError, match="^token is not text$"):
        nls.parse_token(None)
    with pytest.raises(nls.TokenError, match="^token file is not UTF-8 text$"):
        nls.parse_token(b"\xff\xfe.a.b")


@pytest.mark.parametrize("text, _message", BROKEN)
def test_no_error_message_contains_the_token(text, _message):
    with pytest.raises(nls.TokenError) as err:
        nls.parse_token(text)
    message = str(err.value)
    if text.strip():
        assert text.strip() not in message
    for part in text.split("."):
        if len(part) >= 4:
            assert part not in message
    for secret in (SECRET_HOST, SECRET_REF, "c2lnbmF0dXJl", "NLS Service Instance"):
        assert secret not in message


# ----------------------------------------------------------------------------------------------------- licences

@pytest.mark.parametrize("name, series, feature", [
    ("GRID A100-4C", "C", "compute"),
    ("NVIDIA A100-4C", "C", "compute"),
    ("A100D-80C", "C", "compute"),
    ("GRID A100D-1-10C", "C", "compute"),
    ("GRID A100D-1-10CME", "C", "compute"),
    ("H100XM-1-10CME", "C", "compute"),
    ("DC-2-32C", "C", "compute"),
    ("NVIDIA H100-80C", "C", "compute"),
    ("grid_a100-3-20c", "C", "compute"),
    ("L40S-48Q", "Q", "vws"),
    ("NVIDIA L40S-4Q", "Q", "vws"),
    ("nvidia_l40s-48q", "Q", "vws"),
    ("GRID M60-0Q", "Q", "vws"),
    ("RTX6000-Ada-48Q", "Q", "vws"),
    ("NVIDIA A16-2B", "B", "vpc"),
    ("GRID M60-0B", "B", "vpc"),
    ("GRID M10-8A", "A", "vapps"),
    ("NVIDIA A40-48A", "A", "vapps"),
])
def test_series_and_needed_licence(name, series, feature):
    assert nls.profile_class(name) == series
    assert nls.feature_for_profile(name) == feature


@pytest.mark.parametrize("name", [
    "nvidia-1149",      # KVM mdev type id: the series is in its sysfs "name", not in the id
    "nvidia-699",
    "",
    None,
    "A100",
    "GRID M60-8X",      # no such series
    "A100-4CXX",        # unknown suffix
    "A100-C",
    "passthrough",
])
def test_names_without_a_series_need_no_known_licence(name):
    assert nls.profile_class(name) is None
    assert nls.feature_for_profile(name) is None


def test_feature_for_a_bare_series_letter():
    assert [nls.feature_for_profile(s) for s in ("Q", "c", "B", "a")] == ["vws", "compute", "vpc", "vapps"]
    assert nls.feature_for_profile("X") is None


def test_feature_types_follow_gridd_conf_and_nvml():
    assert nls.FEATURE_TYPES["gridd"] == {0: "unlicensed", 1: "vgpu", 2: "vws", 4: "compute"}
    assert nls.FEATURE_TYPES["nvml"] == {0: "unknown", 1: "vgpu", 2: "vws", 3: "gaming", 4: "compute", 5: "vgamedev"}


@pytest.mark.parametrize("value, source, name", [
    (2, "nvml", "vws"),
    ("4", "gridd", "compute"),
    (1, "gridd", "vgpu"),
    (0, "gridd", "unlicensed"),
    (3, "gridd", "reserved"),
    (3, "nvml", "gaming"),
    (9, "nvml", "unknown"),
    (True, "nvml", "unknown"),
    ("nvidia_rtx", "nvml", "vws"),
    ("compute", "nvml", "compute"),
    ("vCS", "nvml", "compute"),
    ("NVIDIA RTX Virtual Workstation", "nvml", "vws"),
    ("Quadro Virtual Data Center Workstation", "nvml", "vws"),
    ("NVIDIA Virtual Compute Server", "nvml", "compute"),
    ("NVIDIA Virtual PC", "nvml", "vpc"),
    ("GRID Virtual PC", "nvml", "vpc"),
    ("NVIDIA Virtual Applications", "nvml", "vapps"),
    ("Something Else", "nvml", "something_else"),
    (None, "nvml", None),
])
def test_feature_name(value, source, name):
    assert nls.feature_name(value, source=source) == name


@pytest.mark.parametrize("feature, series, ok", [
    # Q: vWS only (17.0 enforcement table; Citrix deployment guide)
    ("vws", "Q", True), ("vpc", "Q", False), ("compute", "Q", False), ("vapps", "Q", False),
    # C: vCS / NVIDIA AI Enterprise ("licensed exclusively through NVIDIA AI Enterprise")
    ("compute", "C", True), ("vws", "C", False), ("vpc", "C", False), ("vapps", "C", False),
    # B: vPC or vWS
    ("vpc", "B", True), ("vws", "B", True), ("vapps", "B", False), ("compute", "B", False),
    # A: vApps only; vWS is not listed for A-series in any guide read
    ("vapps", "A", True), ("vws", "A", False), ("vpc", "A", False), ("compute", "A", False),
])
def test_fits_series_rules(feature, series, ok):
    result, reason = nls.fits(feature, series)
    assert result is ok, reason
    if ok:
        assert reason == "%s licenses %s-series vGPUs" % (feature, series)
    else:
        assert "does not license %s-series vGPUs" % series in reason


def test_vws_covers_c_series_only_when_asked():
    assert nls.fits("vws", "C") == (False, "vws does not license C-series vGPUs (needs compute)")
    assert nls.fits("vws", "C", vws_covers_c=True) == (True, "vws licenses C-series vGPUs")
    assert nls.accepted("C", vws_covers_c=True) == ("compute", "vws")
    assert nls.accepted("B") == ("vpc", "vws")
    assert nls.accepted("Z") == ()


def test_fits_reads_profile_names_product_names_and_codes():
    assert nls.fits("NVIDIA RTX Virtual Workstation", "GRID A40-8Q")[0] is True
    assert nls.fits("nvidia_rtx", "L40S-48Q")[0] is True
    assert nls.fits(4, "GRID A100-4C")[0] is True
    assert nls.fits("NVIDIA Virtual PC", "NVIDIA A40-8Q") == (False, "vpc does not license Q-series vGPUs (needs vws)")


def test_autodetect_feature_type():
    ok, reason = nls.fits("vgpu", "C")
    assert ok is True
    assert reason == "FeatureType 1 (NVIDIA vGPU) lets the driver pick the licence for C-series vGPUs"
    assert nls.fits(1, "Q", autodetect=False) == (
        False, "feature vgpu names no licensed product; Q-series vGPUs need vws")


@pytest.mark.parametrize("feature, series, reason", [
    ("unlicensed", "Q", "unlicensed is no vGPU licence; Q-series vGPUs need vws"),
    ("gaming", "B", "gaming is no vGPU licence; B-series vGPUs need vpc"),
    (0, "A", "unknown is no vGPU licence; A-series vGPUs need vapps"),
    (None, "C", "no licence feature: C-series vGPUs need compute"),
    ("vws", "nvidia-1149", "no vGPU series (Q, C, B or A) in 'nvidia-1149'"),
    ("vws", "", "no vGPU series (Q, C, B or A) in ''"),
    ("vws", None, "no vGPU series (Q, C, B or A) in ''"),
])
def test_fits_refuses_what_is_no_licence_or_no_series(feature, series, reason):
    assert nls.fits(feature, series) == (False, reason)


# ---- issue 23: every field of the record, both ends of each range, the exact reasons ---------------------------------

def test_every_field_of_a_token_with_key_id_refs_and_odd_values():
    nodes = [{"url": "DLS-B.example", "url_qr": 123, "svc_port_set_idx": "1"},
             {"idx": 7, "url": "[2001:db8::10]:8443", "svc_port_set_idx": 0}]
    sets = [{"idx": 0, "svc_port_map": [{"service": " lease ", "port": 1}]},
            {"idx": "1", "d_name": " dls ", "svc_port_map": [{"service": "auth", "port": "65535"}]}]
    claims = _claims(nodes=nodes, port_sets=sets, fulfillment_class_ref_list=["fc-1", 7, "fc-2"],
                     scope_ref_list="not-a-list", jti=5, iss=None, aud=["NLS Licensed Client", 3], protocol_version=2)
    parsed = nls.parse_token(_jws(claims, header={"alg": "RS256", "kid": "key-1"}, signature="c2ln"))
    assert parsed == {
        "service_instance": SECRET_REF,
        "endpoints": [{"host": "dls-b.example", "port": 65535, "service": "auth", "kind": "DLS", "node": 0},
                      {"host": "2001:db8::10", "port": 1, "service": "lease", "kind": None, "node": 7}],
        "nodes": [{"idx": 0, "host": "dls-b.example", "url_qr": None, "port_set": 1, "d_name": " dls ", "kind": "DLS"},
                  {"idx": 7, "host": "2001:db8::10", "url_qr": None, "port_set": 0, "d_name": None, "kind": None}],
        "issued_at": "2026-01-01T00:00:00Z", "not_before": "2026-01-01T00:00:00Z", "expires_at": "2038-01-01T00:00:00Z",
        "token_id": None, "issuer": None, "audience": ["NLS Licensed Client"], "protocol_version": None,
        "update_mode": "ABSOLUTE", "scope_refs": [], "fulfillment_class_refs": ["fc-1", "fc-2"],
        "algorithm": "RS256", "key_id": "key-1", "signed": True,
    }


def test_node_index_defaults_to_the_position_in_the_list():
    sets = [{"idx": 0, "d_name": "DLS", "svc_port_map": [{"service": "lease", "port": 443}]}]
    nodes = [{"idx": 4, "url": "a.example", "svc_port_set_idx": 0}, {"url": "b.example", "svc_port_set_idx": 0},
             {"idx": "x", "url": "c.example", "svc_port_set_idx": 0}]
    parsed = nls.parse_token(_jws(_claims(nodes=nodes, port_sets=sets)))
    assert [(n["idx"], n["host"]) for n in parsed["nodes"]] == [(4, "a.example"), (1, "b.example"), (2, "c.example")]
    assert [(e["node"], e["host"]) for e in parsed["endpoints"]] == [(4, "a.example"), (1, "b.example"), (2, "c.example")]


def test_cls_host_suffix_with_a_leading_dot_matches_the_domain_and_its_hosts():
    sets = [{"idx": 0, "d_name": "DLS", "svc_port_map": [{"service": "lease", "port": 443}]}]
    for host in ("cloud.example", "api.cloud.example"):
        nodes = [{"idx": 0, "url": host, "svc_port_set_idx": 0}]
        token = _jws(_claims(nodes=nodes, port_sets=sets))
        assert nls.parse_token(token, cls_host_suffixes=(".Cloud.Example",))["endpoints"][0]["kind"] == "CLS"
    nodes = [{"idx": 0, "url": "notcloud.example", "svc_port_set_idx": 0}]
    token = _jws(_claims(nodes=nodes, port_sets=sets))
    assert nls.parse_token(token, cls_host_suffixes=(".cloud.example",))["endpoints"][0]["kind"] == "DLS"


def test_header_json_error_names_the_part_line_and_column():
    with pytest.raises(nls.TokenError) as err:
        nls.parse_token(_jws(_claims(), header=b'{"alg":\n  }'))
    assert str(err.value) == "token header is not JSON (Expecting value at line 2 column 3)"


def test_targets_keep_token_order_and_each_service_once():
    parsed = {"endpoints": [
        {"host": "b", "port": 443, "service": "auth", "kind": "DLS", "node": 0},
        {"host": "a", "port": 443, "service": "lease", "kind": "CLS", "node": 1},
        {"host": "b", "port": 443, "service": "auth", "kind": "DLS", "node": 2},
        {"host": "b", "port": 80, "service": "lease", "kind": "DLS", "node": 0},
        {"host": "b", "port": 443, "service": "lease", "kind": "DLS", "node": 0}]}
    assert nls.targets(parsed) == [{"host": "b", "port": 443, "kind": "DLS", "services": ["auth", "lease"]},
                                   {"host": "a", "port": 443, "kind": "CLS", "services": ["lease"]},
                                   {"host": "b", "port": 80, "kind": "DLS", "services": ["lease"]}]
    assert nls.targets({}) == [] and nls.targets({"endpoints": None}) == []


@pytest.mark.parametrize("value, name", [
    ("NVIDIA-RTX", "vws"), (" vDWS ", "vws"), ("ai enterprise", "compute"), ("some-new name", "some_new_name"),
    (" 4 ", "compute"), (False, "unknown"),
])
def test_feature_name_spellings(value, name):
    assert nls.feature_name(value) == name


def test_accepted_is_the_current_documents_by_default():
    assert nls.accepted("C") == ("compute",)
    assert [nls.accepted(s) for s in ("q", " A ", None)] == [("vws",), ("vapps",), ()]
    assert nls.accepted("B", vws_covers_c=True) == ("vpc", "vws")


def test_fits_lists_every_accepted_licence_in_the_reason():
    assert nls.fits("vapps", "B") == (False, "vapps does not license B-series vGPUs (needs vpc or vws)")
    assert nls.fits("vpc", "GRID A100-4C", vws_covers_c=True) == (
        False, "vpc does not license C-series vGPUs (needs compute or vws)")
    assert nls.fits("compute", " c ") == (True, "compute licenses C-series vGPUs")
