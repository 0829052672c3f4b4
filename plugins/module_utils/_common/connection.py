# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Argument specs for API connections; they mirror doc_fragments/_proxmox_auth.py and _vsphere_auth.py."""

from __future__ import annotations

from typing import Any

from ansible.module_utils.basic import env_fallback


def proxmox_argument_spec() -> dict[str, Any]:
    """Connection options shared by every Proxmox VE module (group/gpuops.provision.proxmox)."""
    return dict(
        api_host=dict(type="str", required=True, fallback=(env_fallback, ["PROXMOX_HOST"])),
        api_port=dict(type="int", default=8006, fallback=(env_fallback, ["PROXMOX_PORT"])),
        api_user=dict(type="str", required=True, fallback=(env_fallback, ["PROXMOX_USER"])),
        api_password=dict(type="str", no_log=True, fallback=(env_fallback, ["PROXMOX_PASSWORD"])),
        api_token_id=dict(type="str", no_log=False, fallback=(env_fallback, ["PROXMOX_TOKEN_ID"])),
        api_token_secret=dict(type="str", no_log=True, fallback=(env_fallback, ["PROXMOX_TOKEN_SECRET"])),
        validate_certs=dict(type="bool", default=True, fallback=(env_fallback, ["PROXMOX_VALIDATE_CERTS"])),
        ca_path=dict(type="path", fallback=(env_fallback, ["PROXMOX_CA_PATH"])),
        api_timeout=dict(type="int", default=30),
    )


PROXMOX_REQUIRED_ONE_OF = [("api_password", "api_token_id")]
PROXMOX_REQUIRED_TOGETHER = [("api_token_id", "api_token_secret")]


def vsphere_argument_spec() -> dict[str, Any]:
    """Connection options shared by every vSphere module (group/gpuops.provision.vsphere)."""
    return dict(
        hostname=dict(type="str", required=True, fallback=(env_fallback, ["VMWARE_HOST"])),
        port=dict(type="int", default=443, fallback=(env_fallback, ["VMWARE_PORT"])),
        username=dict(type="str", required=True, aliases=["user"], fallback=(env_fallback, ["VMWARE_USER"])),
        password=dict(type="str", required=True, no_log=True, aliases=["pass", "pwd"],
                      fallback=(env_fallback, ["VMWARE_PASSWORD"])),
        validate_certs=dict(type="bool", default=True, fallback=(env_fallback, ["VMWARE_VALIDATE_CERTS"])),
        ca_path=dict(type="path", fallback=(env_fallback, ["VMWARE_CA_PATH"])),
        api_timeout=dict(type="int", default=30),
    )


def vsphere_host_scope_spec() -> dict[str, Any]:
    """The vSphere host scope. The modules that change ESXi hosts document it with doc fragment
    _vsphere_auth.HOST_SCOPE and add required_one_of=[("cluster", "esxi_hostname")]; vsphere_gpu_info documents
    its own wording and requires neither (no scope reads every host)."""
    return dict(
        datacenter=dict(type="str"),
        cluster=dict(type="str"),
        esxi_hostname=dict(type="list", elements="str"),
    )


def prometheus_argument_spec() -> dict[str, Any]:
    """Connection options of the modules that read Prometheus's HTTP API (documented in gpu_usage_info)."""
    return dict(
        url=dict(type="str", required=True, fallback=(env_fallback, ["PROMETHEUS_URL"])),
        bearer_token=dict(type="str", no_log=True, fallback=(env_fallback, ["PROMETHEUS_BEARER_TOKEN"])),
        validate_certs=dict(type="bool", default=True, fallback=(env_fallback, ["PROMETHEUS_VALIDATE_CERTS"])),
        ca_path=dict(type="path", fallback=(env_fallback, ["PROMETHEUS_CA_PATH"])),
        api_timeout=dict(type="int", default=30),
    )
