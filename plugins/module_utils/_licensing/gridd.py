# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA License System client facts (pure: no I/O): gridd.conf parsing, licence state per GPU, days left."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional, Union

# gridd.conf FeatureType values (reference licensing-driver-k8s.md 1.2); all others are reserved.
FEATURE_TYPES = {"0": "unlicensed", "1": "vgpu", "2": "nvidia_rtx", "4": "compute"}


class LicenseError(ValueError):
    """A licensing decision that cannot be made from what the node reported; the message says what to set."""


# The FeatureType NVIDIA documents per kind of GPU (NVIDIA License System User Guide, "Configuring a Licensed Client on
# Linux", FeatureType): 1 on a vGPU guest, where the driver takes the licence edition from the vGPU type (Q: vWS,
# B: vPC, C: vCS / NVIDIA AI Enterprise, A: vApps); 2 (RTX vWS) or 4 (Virtual Compute Server) only for a GPU passed
# through or on bare metal, where nothing else tells the driver which licence to ask for. 4 on a Q- or B-series vGPU
# asks for a licence those profiles cannot use, and the guest stays unlicensed (issue 37 point 10).
def default_feature_type(info: Optional[Mapping[str, Any]]) -> int:
    """FeatureType for ``auto``: 1 on a vGPU guest, 4 on a GPU passed through or on bare metal, from an
    nvidia_license_info result (its NVML read). Raises LicenseError when NVML could not tell."""
    info = info or {}
    nvml = info.get("nvml") or {}
    if info.get("failed") or not nvml.get("available"):
        raise LicenseError("cannot tell a vGPU guest from a GPU passed through: NVML is not usable (%s); set "
                           "nvidia_license_feature_type (1 on vGPU guests, 4 or 2 on passed-through GPUs)"
                           % (nvml.get("reason") or info.get("msg") or "not read"))
    modes = [g.get("virtualization_mode") for g in info.get("gpus") or []]
    if not modes:
        raise LicenseError("NVML lists no GPU to license; set nvidia_license_feature_type")
    return 1 if "vgpu" in modes else 4


def parse_gridd_conf(text: Optional[str]) -> dict[str, str]:
    """Active ``Key=Value`` settings of a gridd.conf; comments and blank lines ignored, the last of a repeated key wins."""
    settings = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _sep, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        settings[key.strip()] = value
    return settings


def gridd_summary(settings: Mapping[str, str], exists: bool, path: str, token_dir: Optional[str],
                  tokens: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What gridd runs with: settings, FeatureType name, token directory in effect and the token files found there."""
    feature = settings.get("FeatureType")
    return {
        "path": path,
        "exists": exists,
        "settings": settings,
        "feature_type": int(feature) if feature is not None and feature.isdigit() else feature,
        # typeshed wants a str key: get(None) is right here, it finds no key and gives the default None.
        "feature_name": FEATURE_TYPES.get(feature, "reserved" if feature is not None else None),  # type: ignore[arg-type]
        "token_dir": token_dir,
        "tokens": tokens,
    }


# gridd reaches the licence service through the HTTP proxy gridd.conf names (NVIDIA License System User Guide,
# "Configuring a Licensed Client on Linux": ProxyServerAddress, ProxyServerPort, and for an authenticating proxy
# ProxyUserName with ProxyCredentialsFilePath, whose password file only gridd's tool can write). A probe from the guest
# must take the same way, or it tests a path the driver never uses (issue 37 point 10).
def gridd_proxy(settings: Mapping[str, str]) -> Optional[dict[str, Any]]:
    """dict(host, port, user) of the proxy gridd uses, or None; LicenseError for a proxy without a valid port."""
    address = str(settings.get("ProxyServerAddress") or "").strip()
    if not address:
        return None
    for scheme in ("http://", "https://"):
        if address.lower().startswith(scheme):
            address = address[len(scheme):]
    address = address.rstrip("/")
    port_text = str(settings.get("ProxyServerPort") or "").strip()
    if not port_text and address.count(":") == 1:
        address, port_text = address.split(":")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise LicenseError("gridd.conf ProxyServerAddress=%s needs ProxyServerPort (1-65535), got %r"
                           % (settings.get("ProxyServerAddress"), settings.get("ProxyServerPort")))
    return {"host": address, "port": int(port_text), "user": str(settings.get("ProxyUserName") or "") or None}


def parse_expiry(text: Optional[str]) -> Optional[datetime.datetime]:
    """'2027-05-27T00:08:28Z' -> aware datetime, None for empty."""
    if not text:
        return None
    return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))


def days_left(expiry: Union[str, datetime.datetime, None], now: datetime.datetime) -> Optional[int]:
    """Whole days from ``now`` until ``expiry`` (both aware datetimes; expiry may be text); negative once expired."""
    if isinstance(expiry, str):
        expiry = parse_expiry(expiry)
    if expiry is None:
        return None
    return int((expiry - now).total_seconds() // 86400)


def gpu_licence(index: int, identity: Mapping[str, Any], virtualization: Optional[Mapping[str, Any]],
                licence: Mapping[str, Any], now: datetime.datetime) -> dict[str, Any]:
    """One GPU's licence entry from _gpu.nvml.Nvml.identity/virtualization/licence results."""
    feats = licence.get("features") or []
    enabled = [f for f in feats if f.get("enabled")] or feats
    main = next((f for f in enabled if f.get("licensed")), enabled[0] if enabled else None)
    entry: dict[str, Any] = {
        "index": index,
        "uuid": identity.get("uuid"),
        "model": identity.get("model"),
        "virtualization_mode": (virtualization or {}).get("mode"),
        "supported": bool(licence.get("supported")),
        "licensed": bool(licence.get("licensed")) if licence.get("supported") else False,
        "feature": main.get("feature") if main else None,
        "product": main.get("product") if main else None,
        "expiry_status": main.get("expiry_status") if main else None,
        "expiry": main.get("expiry") if main else None,
        "days_left": None,
        "state": None,
    }
    if entry["licensed"] and entry["expiry"]:
        entry["days_left"] = days_left(entry["expiry"], now)
    if not entry["supported"]:
        entry["state"] = "not licensable"
    elif entry["licensed"]:
        entry["state"] = "licensed"
    else:
        entry["state"] = "unlicensed"
    return entry


def overall(gpus: Iterable[Mapping[str, Any]]) -> Optional[bool]:
    """True when every licensable GPU is licensed, False when one is not, None when no GPU is licensable."""
    licensable = [g for g in gpus if g["supported"]]
    if not licensable:
        return None
    return all(g["licensed"] for g in licensable)
