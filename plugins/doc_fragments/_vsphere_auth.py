# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vCenter / ESXi connection options (private fragment); matches module_utils/_common/connection.py."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  hostname:
    description:
      - vCenter Server or ESXi host name or address.
      - Falls back to the E(VMWARE_HOST) environment variable.
    type: str
    required: true
  port:
    description:
      - HTTPS port of the vSphere API (1 to 65535).
      - Falls back to the E(VMWARE_PORT) environment variable.
    type: int
    default: 443
  username:
    description:
      - User name, for example V(administrator@vsphere.local).
      - Falls back to the E(VMWARE_USER) environment variable.
    type: str
    required: true
    aliases: [user]
  password:
    description:
      - Password of O(username).
      - Falls back to the E(VMWARE_PASSWORD) environment variable.
    type: str
    required: true
    aliases: [pass, pwd]
  validate_certs:
    description:
      - Verify the TLS certificate of the API. Keep this on; use O(ca_path) for a private CA.
      - V(false) turns verification off whatever O(ca_path) says, and the module warns.
      - Falls back to the E(VMWARE_VALIDATE_CERTS) environment variable.
    type: bool
    default: true
  ca_path:
    description:
      - PEM file with the CA certificate(s) that signed the vCenter certificate. Used only while O(validate_certs=true).
      - Falls back to the E(VMWARE_CA_PATH) environment variable.
    type: path
  api_timeout:
    description:
      - Seconds to wait for the connection and for each API response (1 to 3600), so that an unreachable or silent
        vCenter fails the task instead of hanging it.
    type: int
    default: 30
requirements:
  - pyvmomi >= 8.0.3
"""

    # The hosts a host-changing module acts on (module_utils/_auth.vsphere_host_scope_spec).
    HOST_SCOPE = r"""
options:
  datacenter:
    description: Limit the scope to this datacenter.
    type: str
  cluster:
    description: Hosts of this cluster. One of O(cluster) or O(esxi_hostname) is required.
    type: str
  esxi_hostname:
    description: These hosts. One of O(cluster) or O(esxi_hostname) is required; an empty list selects no host and fails.
    type: list
    elements: str
"""
