# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vsphere_host_vgpu_scheduler
short_description: Set the NVIDIA vGPU scheduler policy of ESXi hosts
version_added: 0.1.0
description:
  - Sets the time-sliced vGPU scheduler (best effort, equal share or fixed share, with the time slice or the adaptive
    round-robin parameters where the driver allows them) of every host in scope, through the C(RmPVMRL) key in
    C(NVreg_RegistryDwords) of the C(nvidia) kernel module's option string
    (C(HostKernelModuleSystem.UpdateModuleOptionString)), as NVIDIA's
    C(esxcli system module parameters set -m nvidia) does.
  - Every other key and module parameter in the option string is kept; a host whose string already configures the
    policy is not written.
  - Validates every host first (the policy and its parameters, the C(nvidia) module being installed); nothing is
    written when one host is invalid, and the error names the host.
  - The driver reads the key when the module loads, so a change takes effect at the next host reboot. The module
    does not reboot; it reports RV(hosts[].reboot_required) per host and the caller (for example the
    P(gpuops.provision.vsphere_vgpu_host#role) role) decides.
  - With O(verify=true) nothing is written; the task fails, naming each host, unless the host is configured for
    the policy and reports no reboot pending. The vSphere API shows only the configured option string (also in
    C(KernelModuleInfo.optionString)), not the one the loaded driver runs with; on the host, C(nvidia-smi) shows that.
  - MIG-backed vGPUs are not time-sliced, and the scheduler does not apply to them.
options:
  policy:
    description:
      - The scheduler of every host in scope (unless O(host_policies) names the host).
      - V(fixed_share) gives each vGPU a fixed share of the GPU whatever its neighbours do, the only policy with a
        stable per-tenant share. V(equal_share) divides the GPU equally among the running vGPUs, so a share changes
        as vGPUs start and stop. V(best_effort) (the driver default) lets busy vGPUs use idle time, best for
        utilisation and worst for predictability.
    type: str
    choices: [best_effort, equal_share, fixed_share]
  arr:
    description:
      - Adaptive round robin (the driver's default scheduler for equal and fixed share where the branch has it).
        V(false) selects the legacy scheduler with a plain time slice (O(timeslice_ms)). Unset leaves it to the driver.
    type: bool
  timeslice_ms:
    description: Time slice in milliseconds (1-30) of the legacy scheduler (implies O(arr=false)); equal and fixed share only.
    type: int
  frequency_hz:
    description: Adaptive round-robin scheduling frequency (63-960 Hz; implies O(arr=true)); equal and fixed share only.
    type: int
  averaging_factor:
    description: Adaptive round-robin averaging factor (1-60; implies O(arr=true)); equal and fixed share only.
    type: int
  host_policies:
    description:
      - "Per-host schedulers: host name -> C({policy, arr, timeslice_ms, frequency_hz, averaging_factor, production}).
        An entry replaces the task's policy and parameters for that host; the hosts must be in scope."
    type: dict
    default: {}
  production:
    description:
      - The hosts carry production tenants. Setting such a host to V(best_effort) gives a warning, because a tenant's
        share of the GPU then depends on its neighbours' load. Per host in O(host_policies).
    type: bool
    default: false
  verify:
    description:
      - Write nothing; fail, naming each host, unless it is configured for its policy and reports no reboot
        pending (C(summary.rebootRequired)). Run after the hosts are back from their reboot.
    type: bool
    default: false
  skip_non_gpu_hosts:
    description:
      - Leave hosts without GPUs and without the C(nvidia) module alone. A GPU host without the module (no NVIDIA
        host driver) always fails.
    type: bool
    default: true
extends_documentation_fragment:
  - gpuops.provision._vsphere_auth
  - gpuops.provision._vsphere_auth.HOST_SCOPE
  - gpuops.provision._attributes
  - gpuops.provision._attributes.CHANGE_FULL
  - gpuops.provision._attributes.ACTIONGROUP_VSPHERE
notes:
  - Needs the privilege C(Host.Config.Settings) on the hosts (HostKernelModuleSystem).
  - Whether ESXi raises C(summary.rebootRequired) for a module option change is not documented; the module reports
    RV(hosts[].reboot_required) as true for every host it changes, whatever the host says.
seealso:
  - name: NVIDIA vGPU software user guide
    description: Changing Scheduling Behavior for Time-Sliced vGPUs (the RmPVMRL registry key and its values).
    link: https://docs.nvidia.com/vgpu/latest/grid-vgpu-user-guide/index.html
"""

EXAMPLES = r"""
- name: Fixed share on every GPU host of the inference cluster
  gpuops.provision.vsphere_host_vgpu_scheduler:
    hostname: vcenter.example.com
    username: administrator@vsphere.local
    password: "{{ vcenter_password }}"
    cluster: gpu-inference
    policy: fixed_share
    production: true
  register: sched

- name: Equal share with a 3 ms time slice on one host, best effort on a notebook host
  gpuops.provision.vsphere_host_vgpu_scheduler:
    esxi_hostname: [esx1.example.com, esx2.example.com]
    host_policies:
      esx1.example.com: {policy: equal_share, timeslice_ms: 3}
      esx2.example.com: {policy: best_effort}

- name: After the reboots, check that the hosts are configured and have no reboot pending
  gpuops.provision.vsphere_host_vgpu_scheduler:
    cluster: gpu-inference
    policy: fixed_share
    verify: true
"""

RETURN = r"""
hosts:
  description: One entry per host in scope.
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: Host name., type: str}
    changed: {description: Whether the option string was (or in check mode would be) changed., type: bool}
    skipped: {description: True for hosts without GPUs and without the nvidia module., type: bool}
    before: {description: The nvidia module's configured option string before., type: str}
    after: {description: The option string after (predicted in check mode)., type: str}
    policy: {description: The scheduler the host is set to (in words)., type: str, sample: fixed_share (driver default scheduling)}
    policy_before: {description: The scheduler the option string configured before (in words)., type: str}
    per_device_overrides:
      description: C(RmPVMRL) values set per GPU with C(NVreg_RegistryDwordsPerDevice); they win over the host-wide key.
      type: dict
    reboot_required:
      description: The host needs a reboot before the driver runs the configured policy (changed now, or the host
        reports C(summary.rebootRequired)).
      type: bool
    boot_time: {description: When the host last booted (C(runtime.bootTime))., type: str}
    verified: {description: The host passed the verification., type: bool, returned: with O(verify=true)}
  sample:
    - name: esx1
      changed: true
      skipped: false
      before: ""
      after: NVreg_RegistryDwords=RmPVMRL=0x11
      policy: fixed_share (driver default scheduling)
      policy_before: best_effort
      per_device_overrides: {}
      reboot_required: true
      boot_time: "2026-12-01T08:00:00+00:00"
reboot_required:
  description: Names of the hosts that need a reboot for their policy to take effect.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.provision.plugins.module_utils._common import connection
from ansible_collections.gpuops.provision.plugins.module_utils._gpu import vgpu_scheduler
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api, module as vsphere_module, scheduler_apply


def main():
    spec = connection.vsphere_argument_spec()
    spec.update(connection.vsphere_host_scope_spec())
    spec.update(
        policy=dict(type="str", choices=list(vgpu_scheduler.POLICIES)),
        arr=dict(type="bool"),
        timeslice_ms=dict(type="int"),
        frequency_hz=dict(type="int"),
        averaging_factor=dict(type="int"),
        host_policies=dict(type="dict", default={}),
        production=dict(type="bool", default=False),
        verify=dict(type="bool", default=False),
        skip_non_gpu_hosts=dict(type="bool", default=True),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True, required_one_of=[("cluster", "esxi_hostname")])
    hosts = vsphere_module.run(module, lambda session, warnings: vsphere_module.keep(
        warnings, scheduler_apply.run(session, module.params, module.check_mode)),
        errors=(api.VsphereError, vgpu_scheduler.SchedulerError))
    module.exit_json(**vsphere_module.host_result(
        hosts, module._diff, reboot_required=[h["name"] for h in hosts if h.get("reboot_required")]))


if __name__ == "__main__":
    main()
