# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA License System (NLS) facts for the pre-join gate; pure logic, no I/O.

1. ``parse_token``: the client configuration token (``/etc/nvidia/ClientConfigToken/*.tok``) -> the service
   instance and every (host, port, service) the guest driver will connect to.
2. ``feature_for_profile`` / ``fits``: which licence a vGPU profile class needs, and whether a given licence feature
   (gridd.conf FeatureType, NVML feature code or licensed product name) serves it.

Sources (read 2026-12; public repositories by owner/name, commit):
  [fdls]   FastAPI-DLS (oscar.krause/fastapi-dls, GitHub mirror GreenDamTan/fastapi-dls_mirror 52e9f2c, 2025-05-13),
           app/main.py ``_client_token`` (GET /-/client-token): an open-source DLS that current guest drivers accept.
           The .tok body is python-jose ``jws.sign(payload, RS256)``: a JWS compact serialization
           base64url(header).base64url(payload).base64url(signature), header {"alg": "RS256", "typ": "JWT"}.
  [fdlsha] Same mirror, branch ``ha`` (84b092c): an HA pair puts one ``node_url_list`` entry per node, each pointing
           with ``svc_port_set_idx`` at its own ``svc_port_set_list`` entry.
  [sjdls]  sjdaws/dls (424a9aa) client/token/client.go ``ClientToken``: the same claims in Go, with the note
           "ServicePortMap must have service name first as nvidia parses this using an index rather than key".
  [nlsug]  NVIDIA License System User Guide, "About Service Instances"
           (https://docs.nvidia.com/license-system/latest/nvidia-license-system-user-guide/index.html): CLS instances
           are hosted on the NVIDIA Licensing Portal, DLS instances on premises; an HA cluster holds only DLS nodes.
  [clslog] nvidia-gridd journal lines quoted in public notes: "Acquiring license. (Info: api.cls.licensing.nvidia.com;
           NVIDIA Virtual Compute Server)" - the CLS host a guest reaches.
  [lic12]  Virtual GPU Client Licensing User Guide 11.0 and 12.0, table "NVIDIA vGPU Software Licensed Products"
           (https://docs.nvidia.com/vgpu/12.0/grid-licensing-user-guide/index.html): vApps: A-series; vPC: B-series;
           vCS: C-series; vWS: Q-series, C-series, B-series (plus pass-through and bare metal).
  [lic17]  The same table in 16.0 and 17.0 (https://docs.nvidia.com/vgpu/17.0/grid-licensing-user-guide/index.html):
           vApps: A-series; vPC: B-series; vWS: Q-series and B-series only; vCS is no longer listed. Enforcement
           table: "B-series NVIDIA vGPU | vPC or vWS"; "Q-series NVIDIA vGPU | vWS".
  [cvad]   NVIDIA vGPU deployment guide, Citrix Virtual Apps, "Selecting the Correct vGPU Profiles"
           (https://docs.nvidia.com/vgpu/deployment/citrix-virtual-apps/latest/vgpu-profile.html): "Q-series vGPU
           types require an RTX vWS license. B-series ... require an NVIDIA Virtual PC license but can also be used
           with an RTX vWS license. A-series ... require a NVIDIA Virtual Applications license".
  [aie]    NVIDIA AI Enterprise 7.x/8.x, "NVIDIA vGPU for Compute" and ".../vgpu/reference/blackwell.html": "NVIDIA vGPU
           for Compute is licensed exclusively through NVIDIA AI Enterprise"; "Required license edition: NVIDIA AI
           Enterprise"; vGPU type names such as DC-2-32C, H800-1-10CME.
  [ref]    Project reference notes shared/reference/licensing-driver-k8s.md 1.2/1.3: gridd.conf FeatureType 0/1/2/4
           and NVML nvmlGridLicenseFeatureCode_t 0..5 (nvidia-ml-py 13.615.71 pynvml.py).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional, Union
from urllib.parse import urlsplit


class TokenError(ValueError):
    """The token cannot be read. The message names the problem and never quotes the token (it is a secret)."""


# ----------------------------------------------------------------------------------------------------- token

# Host suffixes that mark a Cloud License Service endpoint. Only api.cls.licensing.nvidia.com is attested [clslog];
# the suffix is a parameter because NVIDIA may serve other regions or names.
CLS_HOST_SUFFIXES = ("licensing.nvidia.com",)

# d_name values of a svc_port_set ("DLS" in every generator read [fdls][sjdls][fdlsha]). What a CLS-issued token
# carries there is not shown by any source read, hence the host rule above comes first.
_KIND_BY_DNAME = {"DLS": "DLS", "CLS": "CLS"}

_B64URL = re.compile(r"^[A-Za-z0-9_-]*={0,2}\Z")
_HOST = re.compile(r"^[A-Za-z0-9._:%-]+\Z")
_DIGITS = re.compile(r"^[0-9]+\Z")


def _b64url_json(part: str, what: str) -> Any:
    """One base64url part of the JWS -> its JSON value; TokenError naming ``what`` otherwise."""
    if not _B64URL.match(part):
        raise TokenError("token %s is not base64url" % what)
    part = part.rstrip("=")
    if len(part) % 4 == 1:
        raise TokenError("token %s is not base64url (bad length)" % what)
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise TokenError("token %s is not base64url" % what) from None
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise TokenError("token %s is not UTF-8 text" % what) from None
    except ValueError as exc:
        # JSONDecodeError's msg/lineno/colno never contain the document itself.
        raise TokenError("token %s is not JSON (%s at line %s column %s)"
                         % (what, getattr(exc, "msg", "invalid"), getattr(exc, "lineno", "?"),
                            getattr(exc, "colno", "?"))) from None


def _numeric_date(claims: Mapping[str, Any], name: str) -> Optional[str]:
    """A JWT NumericDate claim (RFC 7519 2: seconds since the epoch) -> '2026-01-02T03:04:05Z'; None when absent."""
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TokenError("token claim %s is not a NumericDate" % name)
    try:
        stamp = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=int(value))
    except (OverflowError, ValueError):
        raise TokenError("token claim %s is out of range" % name) from None
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def _index(value: object) -> Optional[int]:
    """An idx / svc_port_set_idx value as int, or None when it is not a non-negative integer."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and value >= 0:
        return value
    if isinstance(value, str) and _DIGITS.match(value):
        return int(value)
    return None


def _port(value: object) -> Optional[int]:
    """A svc_port_map port as int 1..65535, or None. [fdlsha] writes the secondary's port as a string."""
    number = _index(value)
    return number if number is not None and 1 <= number <= 65535 else None


def _host(url: str) -> Optional[str]:
    """node_url_list[].url -> host name or address. Every generator read writes a bare host or IP [fdls][sjdls];
    a scheme://host[:port]/path, host:port or [IPv6] form is reduced to the host, None when nothing is left."""
    url = url.strip()
    if "://" in url:
        try:
            host = urlsplit(url).hostname
        except ValueError:
            return None
    elif url.startswith("["):
        host = url[1:url.find("]")] if "]" in url else None
    elif url.count(":") == 1:
        host = url.split(":", 1)[0]
    else:
        host = url
    if not host or not _HOST.match(host):
        return None
    return host.lower()


def _kind(host: str, d_name: object, cls_host_suffixes: Iterable[str]) -> Optional[str]:
    """'CLS', 'DLS' or None (unknown): the host rule first ([clslog]), then the port set's d_name ([fdls])."""
    for suffix in cls_host_suffixes:
        suffix = suffix.lower().lstrip(".")
        if host == suffix or host.endswith("." + suffix):
            return "CLS"
    if isinstance(d_name, str):
        return _KIND_BY_DNAME.get(d_name.strip().upper())
    return None


def _text(value: object) -> Optional[str]:
    return value if isinstance(value, str) else None


def _text_list(value: object) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _decode_jws(text: object) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """The .tok text (str or bytes) -> (header dict, claims dict, signed). No signature check (see parse_token)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise TokenError("token file is not UTF-8 text") from None
    if not isinstance(text, str):
        raise TokenError("token is not text")
    text = text.strip().lstrip("\ufeff").strip()
    if not text:
        raise TokenError("token file is empty")
    parts = text.split(".")
    if len(parts) != 3:
        raise TokenError("token is not a JWS compact serialization: %d dot-separated parts, expected 3" % len(parts))
    header = _b64url_json(parts[0], "header")
    if not isinstance(header, dict):
        raise TokenError("token header is not a JSON object")
    claims = _b64url_json(parts[1], "payload")
    if not isinstance(claims, dict):
        raise TokenError("token payload is not a JSON object")
    if parts[2] and not _B64URL.match(parts[2]):
        raise TokenError("token signature is not base64url")
    return header, claims, bool(parts[2])


def _port_sets(port_sets: object) -> dict[int, tuple[Any, list[tuple[str, int]]]]:
    """svc_port_set_list -> {idx: (d_name, [(service, port), ...])}."""
    if not isinstance(port_sets, list) or not port_sets:
        raise TokenError("token has no endpoints: svc_port_set_list is missing or empty")
    sets = {}
    for pos, entry in enumerate(port_sets):
        idx = _index(entry.get("idx")) if isinstance(entry, dict) else None
        if idx is None:
            raise TokenError("token svc_port_set_list[%d] has no valid idx" % pos)
        services = entry.get("svc_port_map")
        if not isinstance(services, list) or not services:
            raise TokenError("token svc_port_set_list[%d] lists no services (svc_port_map)" % pos)
        mapped = []
        for spos, svc in enumerate(services):
            name = svc.get("service") if isinstance(svc, dict) else None
            if not isinstance(name, str) or not name.strip():
                raise TokenError("token svc_port_set_list[%d].svc_port_map[%d] has no service name" % (pos, spos))
            port = _port(svc.get("port"))
            if port is None:
                raise TokenError("token svc_port_set_list[%d].svc_port_map[%d] port is not a TCP port (1-65535)"
                                 % (pos, spos))
            mapped.append((name.strip(), port))
        sets[idx] = (entry.get("d_name"), mapped)
    return sets


def _nodes(nodes: object, sets: Mapping[int, tuple[Any, Iterable[tuple[str, int]]]],
           cls_host_suffixes: Iterable[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """node_url_list joined to the port sets -> (endpoints, nodes) as parse_token returns them."""
    if not isinstance(nodes, list) or not nodes:
        raise TokenError("token has no endpoints: node_url_list is missing or empty")
    endpoints, node_out = [], []
    for pos, node in enumerate(nodes):
        if not isinstance(node, dict):
            raise TokenError("token node_url_list[%d] is not an object" % pos)
        url = node.get("url")
        host = _host(url) if isinstance(url, str) else None
        if host is None:
            raise TokenError("token node_url_list[%d] url is not a host name or address" % pos)
        set_idx = _index(node.get("svc_port_set_idx"))
        if set_idx is None or set_idx not in sets:
            raise TokenError("token node_url_list[%d] points at a svc_port_set_idx the token does not have" % pos)
        d_name, mapped = sets[set_idx]
        kind = _kind(host, d_name, cls_host_suffixes)
        node_idx = _index(node.get("idx"))
        node_idx = pos if node_idx is None else node_idx
        node_out.append({"idx": node_idx, "host": host, "url_qr": _text(node.get("url_qr")),
                         "port_set": set_idx, "d_name": _text(d_name), "kind": kind})
        for service, port in mapped:
            endpoints.append({"host": host, "port": port, "service": service, "kind": kind, "node": node_idx})
    return endpoints, node_out


def parse_token(text: Union[str, bytes], cls_host_suffixes: Sequence[str] = CLS_HOST_SUFFIXES) -> dict[str, Any]:
    """The client configuration token as the .tok file holds it -> what the gate needs.

    Format ([fdls] ``_client_token``, [sjdls], [fdlsha]): a JWS compact serialization, three base64url parts
    joined by dots. The payload is a JSON object with the JWT claims jti, iss ("NLS Service Instance"), aud
    ("NLS Licensed Client"), iat, nbf, exp, then protocol_version, update_mode, scope_ref_list,
    fulfillment_class_ref_list, ``service_instance_configuration`` {nls_service_instance_ref, svc_port_set_list:
    [{idx, d_name, svc_port_map: [{service, port}]}], node_url_list: [{idx, url, url_qr, svc_port_set_idx}]} and
    service_instance_public_key_configuration. Each node connects to every service of the port set it points at.

    The signature is NOT verified. The node holds no trusted key to check it with (the only key in sight is the
    service instance's own, inside the token); the service instance is the judge of the token, and a TLS connection
    to each endpoint is the gate's real test. Whether the guest driver checks the signature is not shown by the
    sources read.

    Uncertain, hence parameters or lenient reading: the CLS marker (``cls_host_suffixes``, and d_name "CLS" which no
    source shows); the url form (only bare hosts are attested); url_qr's purpose (reported, never used).

    Returns {"service_instance", "endpoints": [{"host", "port", "service", "kind", "node"}], "nodes",
    "issued_at", "not_before", "expires_at" (ISO 8601 UTC or None), "token_id", "issuer", "audience",
    "protocol_version", "update_mode", "scope_refs", "fulfillment_class_refs", "algorithm", "key_id", "signed"}.
    Raises TokenError (a ValueError) naming the problem, never quoting the token.
    """
    header, claims, signed = _decode_jws(text)
    config = claims.get("service_instance_configuration")
    if not isinstance(config, dict):
        raise TokenError("token has no service_instance_configuration")
    sets = _port_sets(config.get("svc_port_set_list"))
    endpoints, node_out = _nodes(config.get("node_url_list"), sets, cls_host_suffixes)

    aud = claims.get("aud")
    return {
        "service_instance": _text(config.get("nls_service_instance_ref")),
        "endpoints": endpoints,
        "nodes": node_out,
        "issued_at": _numeric_date(claims, "iat"),
        "not_before": _numeric_date(claims, "nbf"),
        "expires_at": _numeric_date(claims, "exp"),
        "token_id": _text(claims.get("jti")),
        "issuer": _text(claims.get("iss")),
        "audience": _text_list(aud) if isinstance(aud, list) else _text(aud),
        "protocol_version": _text(claims.get("protocol_version")),
        "update_mode": _text(claims.get("update_mode")),
        "scope_refs": _text_list(claims.get("scope_ref_list")),
        "fulfillment_class_refs": _text_list(claims.get("fulfillment_class_ref_list")),
        "algorithm": _text(header.get("alg")),
        "key_id": _text(header.get("kid")),
        "signed": signed,
    }


def targets(parsed: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Distinct (host, port) pairs of a parse_token result in token order, each with the services it serves:
    what the gate connects to (auth and lease usually share the DLS's one port [fdls])."""
    seen: dict[tuple[str, int], dict[str, Any]] = {}
    for ep in parsed.get("endpoints") or []:
        key = (ep["host"], ep["port"])
        if key not in seen:
            seen[key] = {"host": ep["host"], "port": ep["port"], "kind": ep["kind"], "services": []}
        if ep["service"] not in seen[key]["services"]:
            seen[key]["services"].append(ep["service"])
    return list(seen.values())


# ----------------------------------------------------------------------------------------------------- licences

VWS = "vws"          # NVIDIA RTX Virtual Workstation (formerly Quadro vDWS, GRID Virtual Workstation)
COMPUTE = "compute"  # NVIDIA Virtual Compute Server / NVIDIA AI Enterprise: one feature as the guest sees it
VPC = "vpc"          # NVIDIA Virtual PC (formerly GRID Virtual PC)
VAPPS = "vapps"      # NVIDIA Virtual Applications (formerly GRID Virtual Applications)
VGPU = "vgpu"        # gridd FeatureType 1 / NVML code 1: the driver picks the licence from the vGPU type
LICENSED_FEATURES = (VWS, COMPUTE, VPC, VAPPS)

# gridd.conf FeatureType and NVML nvmlGridLicenseFeatureCode_t -> feature name [ref]. Names that are no licensed
# product ("unlicensed", "unknown", "gaming", "vgamedev") never fit a vGPU profile.
FEATURE_TYPES = {
    # gridd.conf.template: 0 unlicensed, 1 "NVIDIA vGPU" (autodetected as per vGPU type), 2 NVIDIA RTX Virtual
    # Workstation, 4 NVIDIA Virtual Compute Server; all other values reserved.
    "gridd": {0: "unlicensed", 1: VGPU, 2: VWS, 4: COMPUTE},
    # NVML_GRID_LICENSE_FEATURE_CODE_UNKNOWN=0, VGPU=1, NVIDIA_RTX=2 (VWORKSTATION alias), GAMING=3, COMPUTE=4,
    # VGAMEDEV=5 (nvidia-ml-py 13.615.71).
    "nvml": {0: "unknown", 1: VGPU, 2: VWS, 3: "gaming", 4: COMPUTE, 5: "vgamedev"},
}

# Licensed product names (NVML productName, nvidia-smi "Product Name", gridd log "Info: <host>; <product>"), old and
# new brand names from the licensing guides 6.0/11.0/12.0/17.0 [lic12][lic17], lower case. "nvidia ai enterprise"
# as a name a guest prints is UNVERIFIED (the gridd logs read show "NVIDIA Virtual Compute Server" for C-series).
PRODUCT_NAMES = {
    "nvidia rtx virtual workstation": VWS,
    "quadro virtual data center workstation": VWS,
    "nvidia quadro virtual data center workstation": VWS,
    "grid virtual workstation": VWS,
    "nvidia virtual compute server": COMPUTE,
    "nvidia ai enterprise": COMPUTE,
    "nvidia virtual pc": VPC,
    "grid virtual pc": VPC,
    "nvidia virtual applications": VAPPS,
    "grid virtual applications": VAPPS,
}

# Other spellings callers hold: the names plugins/module_utils/_gpu/nvml.py and _licensing/gridd.py already report.
_ALIASES = {
    "nvidia_rtx": VWS, "rtx": VWS, "vworkstation": VWS, "quadro_vdws": VWS, "vdws": VWS,
    "vcs": COMPUTE, "nvaie": COMPUTE, "ai_enterprise": COMPUTE, "nvidia_ai_enterprise": COMPUTE,
}


def feature_name(value: object, source: str = "nvml") -> Optional[str]:
    """Normalise a licence feature: a feature name, an alias, a product name, or a number (NVML feature code, or
    gridd FeatureType with source="gridd") -> a feature name; None for None; unknown strings come back lower-cased."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "unknown"
    if isinstance(value, int) or (isinstance(value, str) and _DIGITS.match(value.strip())):
        table = FEATURE_TYPES["gridd" if source == "gridd" else "nvml"]
        return table.get(int(value), "reserved" if source == "gridd" else "unknown")
    key = str(value).strip().lower()
    if key in PRODUCT_NAMES:
        return PRODUCT_NAMES[key]
    key = key.replace("-", "_").replace(" ", "_")
    return _ALIASES.get(key, key)


# vGPU type names: "GRID A100-4C", "NVIDIA L40S-48Q", "A100D-80C", MIG-backed "<board>-<slices>-<fb>C" such as
# "GRID A100D-1-10CME" (ME: media extensions) and Blackwell "DC-2-32C" [aie]; vSphere's "grid_a100-4c" and
# "nvidia_l40s-48q" (plugins/module_utils/_vsphere/vgpu.py). The series letter follows the frame buffer size. KVM mdev type ids
# ("nvidia-699") carry no series: their sysfs "name" holds the type name (stackhpc/ansible-collection-linux
# roles/vgpu/README.md: "#nvidia-699 GRID A100D-1-10C"; lab/pvesim/fixtures/lab.json nvidia-1149 "NVIDIA L40S-4Q").
_PROFILE = re.compile(r"^(?:(?:grid|nvidia)[ _])?(?P<board>[a-z0-9][a-z0-9 _-]*?)-(?:(?P<slices>\d+)-)?(?P<fb>\d+)"
                      r"(?P<series>[a-z])(?P<suffix>me)?\Z", re.IGNORECASE)
SERIES = ("Q", "C", "B", "A")

# Series letter -> the licence it needs [lic17][cvad][aie].
NEEDS = {"Q": VWS, "C": COMPUTE, "B": VPC, "A": VAPPS}


def profile_class(profile_name: Optional[str]) -> Optional[str]:
    """The series letter ("Q", "C", "B", "A") of a vGPU type name, or None when the name carries none."""
    m = _PROFILE.match((profile_name or "").strip())
    if not m or m.group("series").upper() not in SERIES:
        return None
    return m.group("series").upper()


def feature_for_profile(profile_name: Optional[str]) -> Optional[str]:
    """The licence feature a vGPU profile needs from its series letter; None when the name shows no series.

    Q -> vws; C -> compute (vCS up to vGPU 15, NVIDIA AI Enterprise since [aie]); B -> vpc (vws also serves it,
    see fits); A -> vapps. Accepts a type name ("GRID A100-4C") or a bare letter ("C").
    """
    name = (profile_name or "").strip()
    letter = name.upper() if len(name) == 1 else profile_class(name)
    return NEEDS.get(letter)  # type: ignore[arg-type]  # typeshed wants a str key; get(None) is None, as meant


def accepted(profile_class_letter: Optional[str], vws_covers_c: Optional[bool] = False) -> tuple[str, ...]:
    """Licence features that serve a series, the needed one first.

    B: vPC or vWS [lic17][cvad]. A: vApps only - no guide lists A-series under vWS [lic12][lic17]. C: compute, and
    vWS too when ``vws_covers_c``: the 11.0/12.0 guides list C-series under vWS [lic12] (the reference file reads the
    same in 15.0), the 16.0/17.0 guides no longer do [lic17]. Default False, the current documents.
    """
    letter = (profile_class_letter or "").strip().upper()
    if letter not in NEEDS:
        return ()
    if letter == "B":
        return (VPC, VWS)
    if letter == "C" and vws_covers_c:
        return (COMPUTE, VWS)
    return (NEEDS[letter],)


def fits(feature: object, profile_class_letter: Optional[str], vws_covers_c: Optional[bool] = False,
         autodetect: bool = True) -> tuple[bool, str]:
    """Whether licence ``feature`` serves a vGPU of series ``profile_class_letter`` -> (bool, reason).

    ``feature``: anything feature_name() reads (name, alias, product name, NVML feature code). ``profile_class_letter``:
    "Q"/"C"/"B"/"A" or a vGPU type name. "vgpu" (gridd FeatureType 1, NVML code 1) names no product: the driver
    picks the licence "as per vGPU type" [ref], so it fits every series while ``autodetect`` is True; to check a
    licence already held, pass the NVML productName instead.
    """
    raw = (profile_class_letter or "").strip()
    letter = raw.upper() if len(raw) == 1 else profile_class(raw)
    if letter not in NEEDS:
        return False, "no vGPU series (Q, C, B or A) in %r" % raw
    name = feature_name(feature)
    if name is None:
        return False, "no licence feature: %s-series vGPUs need %s" % (letter, NEEDS[letter])
    if name == VGPU:
        if autodetect:
            return True, "FeatureType 1 (NVIDIA vGPU) lets the driver pick the licence for %s-series vGPUs" % letter
        return False, "feature vgpu names no licensed product; %s-series vGPUs need %s" % (letter, NEEDS[letter])
    if name not in LICENSED_FEATURES:
        return False, "%s is no vGPU licence; %s-series vGPUs need %s" % (name, letter, NEEDS[letter])
    ok = accepted(letter, vws_covers_c)
    if name in ok:
        return True, "%s licenses %s-series vGPUs" % (name, letter)
    return False, "%s does not license %s-series vGPUs (needs %s)" % (name, letter, " or ".join(ok))
