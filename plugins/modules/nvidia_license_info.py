#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_license_info
short_description: Report the NVIDIA vGPU licence state per GPU and the nvidia-gridd configuration in effect
version_added: 0.1.0
description:
  - Reads through NVML (the C(pynvml) module of the C(nvidia-ml-py) package) each GPU's licensable features and
    reports whether it is licensed, the licensed product, the licence expiry and the days left until it.
  - Reads C(/etc/nvidia/gridd.conf) (the settings in effect, FeatureType by name) and lists the client configuration
    token files in the token directory with their mode and size. Token contents are never read.
  - When the NVML library or the NVIDIA driver is missing the module does not fail;
    it returns RV(nvml.available=false) with the reason.
extends_documentation_fragment:
  - gpuops.provision._attributes
  - gpuops.provision._attributes.INFO_MODULE
options:
  gridd_conf:
    description:
      - Path of the nvidia-gridd configuration file.
    type: path
    default: /etc/nvidia/gridd.conf
  token_dir:
    description:
      - Directory holding the client configuration token (C(*.tok)).
      - Defaults to C(ClientConfigTokenPath) of O(gridd_conf) when set there, else C(/etc/nvidia/ClientConfigToken).
    type: path
  service_check:
    description:
      - Whether to check that the node reaches its NVIDIA License System service instance (RV(service)) - the DLS or
        CLS endpoints named in the newest client configuration token, each with a TCP connection and a TLS
        handshake within O(connect_timeout). Nothing is sent; the token is read on the node and never returned.
    type: bool
    default: false
  connect_timeout:
    description:
      - Seconds for each TCP connection and TLS handshake of O(service_check).
    type: int
    default: 5
  validate_certs:
    description:
      - Verify the service's TLS certificate (against O(ca_path), else the system's CAs) in O(service_check).
      - Off by default for this probe only. A DLS appliance serves a self-signed certificate unless one was installed,
        and the guest driver trusts the service through the token rather than a CA. The probe sends nothing.
    type: bool
    default: false
  ca_path:
    description:
      - CA bundle to verify the service's certificate with; setting it turns verification on.
    type: path
requirements:
  - nvidia-ml-py (import name C(pynvml)) on the managed host
notes:
  - nvidia-ml-py 13.615.71 defines the C(NVML_GRID_LICENSE_EXPIRY_*) constants as 1-tuples; this module compares the
    normalised values, so expiry dates are reported with every binding version.
  - RV(gpus[].days_left) is computed with the managed host's clock.
  - The token's format (a signed JWT whose C(service_instance_configuration) lists the service nodes and ports) is read
    as open-source implementations of the service read and write it; see C(plugins/module_utils/_licensing/nls.py).
seealso:
  - module: gpuops.provision.gpu_info
  - name: NVIDIA License System user guide
    description: Client configuration tokens and gridd settings.
    link: https://docs.nvidia.com/license-system/latest/
"""

EXAMPLES = r"""
- name: Read the licence state
  gpuops.provision.nvidia_license_info:
  register: lic

- name: Fail unless every vGPU is licensed for at least 14 more days
  ansible.builtin.assert:
    that:
      - lic.licensed
      - lic.gpus | selectattr('days_left', 'number') | selectattr('days_left', 'lt', 14) | list | length == 0
    fail_msg: "{{ lic.gpus | map(attribute='state') | list }}"

- name: Wait until nvidia-gridd has acquired the licence (5 minutes at most)
  gpuops.provision.nvidia_license_info:
  register: lic
  until: lic.licensed | default(false)
  retries: 30
  delay: 10
"""

RETURN = r"""
service:
  description: The service instance check (O(service_check)).
  returned: when O(service_check=true)
  type: dict
  contains:
    token:
      description: C(file), C(service_instance), C(issued_at) and C(expires_at) of the token read; V(null) when none
        could be read.
      type: dict
    error:
      description: Why no token could be read; V(null) otherwise.
      type: str
    endpoints:
      description:
        - Every host and port the token names, with C(kind) (V(DLS), V(CLS)), C(services), C(tcp), C(tls),
          C(tls_version), C(certificate_expires) (only when verified), C(error) and C(proxy).
        - With C(ProxyServerAddress) and C(ProxyServerPort) in O(gridd_conf) each endpoint is reached through that HTTP
          proxy's C(CONNECT) tunnel, as nvidia-gridd reaches it; C(proxy) names it (V(null) without one). A proxy that
          wants credentials (C(ProxyUserName)) answers 407, which the error says.
      type: list
      elements: dict
      sample: [{"host": "dls.example.com", "port": 443, "kind": "DLS", "services": ["auth", "lease"], "tcp": true,
                "tls": true, "tls_version": "TLSv1.3", "certificate_expires": null, "error": null, "proxy": null}]
nvml:
  description: NVML availability and the driver version.
  returned: always
  type: dict
  contains:
    available:
      description: Whether NVML could be loaded and initialised.
      type: bool
      sample: true
    reason:
      description: Why NVML is not available; V(null) otherwise.
      type: str
      sample: the NVIDIA kernel driver is not loaded
    driver_version:
      description: NVIDIA driver version.
      type: str
      sample: 550.163.01
licensed:
  description: V(true) when every licensable GPU is licensed, V(false) when one is not, V(null) when no GPU is licensable
    (bare metal, pass-through without licensing, NVML unavailable).
  returned: always
  type: bool
  sample: true
vgpu_guest:
  description: Whether NVML reports a GPU in vGPU guest mode.
  returned: always
  type: bool
  sample: true
gpus:
  description: One entry per GPU in NVML index order.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: NVML index.
      type: int
      sample: 0
    uuid:
      description: GPU UUID.
      type: str
    model:
      description: Product name.
      type: str
      sample: NVIDIA A100-SXM4-40GB
    virtualization_mode:
      description: V(none), V(passthrough), V(vgpu), V(host_vgpu) or V(host_vsga).
      type: str
      sample: vgpu
    supported:
      description: Whether the GPU has licensable features.
      type: bool
    licensed:
      description: Whether an enabled feature is licensed.
      type: bool
    state:
      description: V(licensed), V(unlicensed) or V(not licensable).
      type: str
    feature:
      description: Licensed (or enabled) feature, such as V(compute), V(vgpu) or V(nvidia_rtx).
      type: str
      sample: compute
    product:
      description: Licensed product name.
      type: str
      sample: NVIDIA Virtual Compute Server
    expiry_status:
      description: V(valid), V(permanent), V(not_available), V(invalid) or V(not_applicable).
      type: str
      sample: valid
    expiry:
      description: Licence expiry (UTC, ISO 8601) when NVML reports one.
      type: str
      sample: "2027-05-27T00:08:28Z"
    days_left:
      description: Whole days until RV(gpus[].expiry); V(null) without an expiry date.
      type: int
      sample: 180
    error:
      description: Set instead of the licence keys when NVML failed for this GPU.
      type: str
gridd:
  description: The nvidia-gridd configuration in effect.
  returned: always
  type: dict
  contains:
    path:
      description: The configuration file read.
      type: str
    exists:
      description: Whether it exists.
      type: bool
    settings:
      description: Active C(Key=Value) settings (comments ignored).
      type: dict
      sample: {FeatureType: "4", EnableUI: "FALSE"}
    feature_type:
      description: C(FeatureType) as a number.
      type: int
      sample: 4
    feature_name:
      description: V(unlicensed) (0), V(vgpu) (1), V(nvidia_rtx) (2), V(compute) (4) or V(reserved).
      type: str
      sample: compute
    token_dir:
      description: The token directory in effect.
      type: str
      sample: /etc/nvidia/ClientConfigToken
    tokens:
      description: Token files (C(name), C(mode), C(size)); contents are never read.
      type: list
      elements: dict
      sample: [{name: client_configuration_token.tok, mode: "0744", size: 2875}]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.provision.plugins.module_utils._licensing import info
from ansible_collections.gpuops.provision.plugins.module_utils._gpu.nvml import Nvml


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gridd_conf=dict(type="path", default="/etc/nvidia/gridd.conf"),
            token_dir=dict(type="path"),
            service_check=dict(type="bool", default=False),
            connect_timeout=dict(type="int", default=5),
            validate_certs=dict(type="bool", default=False),
            ca_path=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    result, error = info.collect(module.params, Nvml())
    if error:
        module.fail_json(msg=error, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
