# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the nvidia_license_info module reports: gridd.conf and the token files on disk, each GPU's licence through
the NVML adapter, and (optionally) whether the licence service answers. The decisions are licensing_gridd's (pure)."""

from __future__ import annotations

import datetime
import os
import stat
from typing import Any

from ansible_collections.gpuops.provision.plugins.module_utils._common import bounds
from ansible_collections.gpuops.provision.plugins.module_utils._gpu import sysfs
from ansible_collections.gpuops.provision.plugins.module_utils._licensing import gridd as licensing_gridd, probe
from ansible_collections.gpuops.provision.plugins.module_utils._gpu.nvml import Nvml

DEFAULT_TOKEN_DIR = "/etc/nvidia/ClientConfigToken"


def read_gridd(gridd_conf: str, token_dir: str | None) -> dict[str, Any]:
    try:
        # A regular file only, within a timeout: a FIFO there would block the module for ever (sysfs.read_file).
        settings = licensing_gridd.parse_gridd_conf(sysfs.read_file(gridd_conf))
        exists = True
    except FileNotFoundError:
        settings, exists = {}, False
    token_dir = token_dir or settings.get("ClientConfigTokenPath") or DEFAULT_TOKEN_DIR
    tokens = []
    if os.path.isdir(token_dir):
        for name in sorted(os.listdir(token_dir)):
            if not name.endswith(".tok"):
                continue
            st = os.stat(os.path.join(token_dir, name))
            tokens.append({"name": name, "mode": "%04o" % stat.S_IMODE(st.st_mode), "size": st.st_size})
    return licensing_gridd.gridd_summary(settings, exists, gridd_conf, token_dir, tokens)


def read_gpus(nvml: Nvml, now: datetime.datetime) -> list[dict[str, Any]]:
    gpus = []
    for index in range(nvml.count()):
        try:
            device = nvml.device(index)
            gpus.append(licensing_gridd.gpu_licence(index, device.info, nvml.virtualization(device), nvml.licence(device), now))
        except nvml.nv.NVMLError as e:
            gpus.append({"index": index, "error": nvml.describe(e)})
    return gpus


def collect(p: dict[str, Any], nvml: Nvml) -> tuple[dict[str, Any], str | None]:
    """The module's result for its parameters ``p``, and the failure message (None when it did not fail)."""
    result: dict[str, Any] = {"changed": False, "nvml": {"available": False, "reason": None, "driver_version": None},
                              "licensed": None, "vgpu_guest": False, "gpus": []}
    try:
        result["gridd"] = read_gridd(p["gridd_conf"], p["token_dir"])
    except sysfs.SysfsError as e:
        return result, "cannot read the gridd configuration: %s" % e
    except OSError as e:
        return result, "cannot read the gridd configuration %s: %s" % (getattr(e, "filename", None) or p["gridd_conf"],
                                                                       e.strerror or e)
    problems = bounds.out_of_range(p, {"connect_timeout": (1, 300, "seconds per connection")})
    if problems:
        return result, "; ".join(problems)
    if p["service_check"]:
        gridd = result["gridd"]
        try:
            proxy = licensing_gridd.gridd_proxy(gridd["settings"])
        except licensing_gridd.LicenseError as e:
            return result, str(e)
        result["service"] = probe.check_service(gridd["token_dir"], [t["name"] for t in gridd["tokens"]],
                                                p["connect_timeout"], p["validate_certs"], p["ca_path"], proxy)
    if not nvml.open():
        result["nvml"]["reason"] = nvml.reason
        return result, None
    try:
        result["nvml"]["driver_version"] = nvml.system()["driver_version"]
        result["nvml"]["available"] = True
        result["gpus"] = read_gpus(nvml, datetime.datetime.now(datetime.timezone.utc))
    except nvml.nv.NVMLError as e:
        return result, "reading NVML failed: %s" % nvml.describe(e)
    finally:
        nvml.close()
    good = [g for g in result["gpus"] if "error" not in g]
    result["licensed"] = licensing_gridd.overall(good)
    if len(good) != len(result["gpus"]) and result["licensed"]:
        result["licensed"] = False  # a GPU NVML cannot answer for is not known to be licensed
    result["vgpu_guest"] = any(g.get("virtualization_mode") == "vgpu" for g in good)
    return result, None
