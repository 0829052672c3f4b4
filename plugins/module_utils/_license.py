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
    """One GPU's licence entry from _nvml.Nvml.identity/virtualization/licence results."""
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
