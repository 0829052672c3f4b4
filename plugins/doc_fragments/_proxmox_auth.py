# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Proxmox VE API connection options (private fragment); matches module_utils/_common/connection.py."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  api_host:
    description:
      - Proxmox VE API host name or address (any cluster node).
      - Falls back to the E(PROXMOX_HOST) environment variable.
    type: str
    required: true
  api_port:
    description:
      - Proxmox VE API port (1 to 65535).
      - Falls back to the E(PROXMOX_PORT) environment variable.
    type: int
    default: 8006
  api_user:
    description:
      - User in C(user@realm) form, for example V(root@pam).
      - Falls back to the E(PROXMOX_USER) environment variable.
    type: str
    required: true
  api_password:
    description:
      - Password of O(api_user). Use O(api_token_id) and O(api_token_secret) instead where possible.
      - Falls back to the E(PROXMOX_PASSWORD) environment variable.
    type: str
  api_token_id:
    description:
      - API token name (the part after C(!)), used together with O(api_token_secret).
      - Falls back to the E(PROXMOX_TOKEN_ID) environment variable.
    type: str
  api_token_secret:
    description:
      - API token secret (a UUID).
      - Falls back to the E(PROXMOX_TOKEN_SECRET) environment variable.
    type: str
  validate_certs:
    description:
      - Verify the TLS certificate of the API. Keep this on; use O(ca_path) for a private CA.
      - V(false) turns verification off whatever O(ca_path) says, and the module warns.
      - Falls back to the E(PROXMOX_VALIDATE_CERTS) environment variable.
    type: bool
    default: true
  ca_path:
    description:
      - PEM file with the CA certificate(s) that signed the API certificate. Used only while O(validate_certs=true).
      - Falls back to the E(PROXMOX_CA_PATH) environment variable.
    type: path
  api_timeout:
    description: Seconds to wait for the connection and for one API response (1 to 3600).
    type: int
    default: 30
requirements:
  - proxmoxer >= 2.0
  - requests
notes:
  - Either O(api_password) or both O(api_token_id) and O(api_token_secret) must be given.
  - Raw C(hostpciN host=) addresses need password authentication as C(root@pam) on Proxmox VE; cluster PCI mappings work with tokens.
"""
