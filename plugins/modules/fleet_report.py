#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: fleet_report
short_description: Write the GPU fleet report (JSON and a self-contained HTML page) on the controller
version_added: 0.1.0
description:
  - Combines per-host facts produced by the collection (M(gpuops.provision.gpu_info), M(gpuops.provision.iommu_info),
    the C(nvidia_driver_facts) of the nvidia_driver role,
    M(gpuops.provision.nvidia_license_info), the C(node_preflight_report) of the node_preflight role) and the tasks
    the last run changed into C(<dest>/report.json) and C(<dest>/report.html).
  - The HTML page has inline CSS only (no scripts, no external assets). Each MIG-enabled GPU is drawn as its memory
    slices (8 on A100/H100/H200, 4 on A30) with every GPU instance placed at its placement start and size.
  - Every piece of a host's facts is optional; a failed or skipped gathering task shows as a note on that host.
  - The summary counts failed and warned nodes (preflight) and GPUs (health) and colours each count, the fail colour
    over the warn colour over the ok colour. A check that cannot apply is shown as not applicable with its reason and
    is not a warning - C(gpu_memory) on a MIG-enabled GPU, whose row remapping NVML cannot read (nvml.h
    C(nvmlDeviceGetRemappedRows)) - and a host whose GPUs are all bound to C(vfio-pci) says why it has no NVML instead
    of warning.
  - With O(proxmox) and O(vsphere), the page lists the Proxmox VE VMs holding GPUs per node and the vSphere GPU hosts
    with their vGPU VMs and the driver drift per cluster.
  - With O(usage), a GPU usage section - per GPU and MIG instance a chart of its SM activity and memory over the
    window (inline SVG, no script), the advice per node or pool with its rule and reason, and the GPU-hours per MIG
    profile and per namespace.
  - Runs on the controller as an action plugin; nothing is sent to the managed node. Files are replaced atomically
    and only when their content differs.
extends_documentation_fragment:
  - gpuops.provision._attributes
attributes:
  check_mode:
    support: full
    details:
      - Reports which files would change without writing them.
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - Idempotent for equal input; pass O(generated_at) only when a changing timestamp is wanted.
options:
  hosts:
    description:
      - Host name to facts. Each value is a dict with the optional keys C(gpu) (a registered
        M(gpuops.provision.gpu_info) result), C(iommu) (M(gpuops.provision.iommu_info)), C(driver)
        (C(nvidia_driver_facts)), C(license) (M(gpuops.provision.nvidia_license_info)), C(preflight)
        (C(node_preflight_report)), C(changes) (list of task names, or dicts with C(task) and C(detail)),
        C(notes) (list of strings shown on the host) and C(driver_pin).
    type: dict
    required: true
  dest:
    description:
      - Controller directory for C(report.json) and C(report.html); created when missing. A relative path is taken
        from the directory C(ansible-playbook) runs in.
    type: path
    required: true
  title:
    description:
      - Page title.
    type: str
    default: GPU fleet report
  driver_pin:
    description:
      - Fleet-wide driver pin shown in the header and compared per host when the host's driver facts carry no pin.
    type: str
  run_log:
    description:
      - Output of the last run made with the C(ansible.posix.json) stdout callback. Tasks that reported a change on
        a host are added to that host's changes. A missing file is a warning, an unreadable one an error.
    type: path
  generated_at:
    description:
      - Timestamp shown in the report, for example C({{ now(utc=true).isoformat() }}).
    type: str
  proxmox:
    description:
      - Proxmox VE cluster inventory entry to its registered M(gpuops.provision.pve_gpu_info) result; a failed read
        is shown with its reason.
    type: dict
  vsphere:
    description:
      - vCenter inventory entry to its registered M(gpuops.provision.vsphere_gpu_info) result; a failed read is shown
        with its reason.
    type: dict
  usage:
    description:
      - A registered M(gpuops.provision.gpu_usage_info) result, read with O(gpuops.provision.gpu_usage_info#module:series=true)
        for the charts. A failed read is shown with its reason; a dict with C(skipped) true and C(msg) (why) shows the
        section as not read, with that reason. An C(advice_error) key in the result (the reason a first read with the advice failed) is shown
        above the charts.
    type: dict
seealso:
  - module: gpuops.provision.gpu_usage_info
  - module: gpuops.provision.gpu_info
  - module: gpuops.provision.pve_gpu_info
  - module: gpuops.provision.vsphere_gpu_info
  - module: gpuops.provision.iommu_info
  - module: gpuops.provision.nvidia_license_info
"""

EXAMPLES = r"""
- name: Write the fleet report of the play's hosts
  gpuops.provision.fleet_report:
    hosts: >-
      {{ dict(ansible_play_hosts_all | zip(ansible_play_hosts_all
         | map('extract', hostvars, 'fleet_report_facts') | list)) }}
    dest: /srv/gpuops/report
    driver_pin: "550.163.01"
  run_once: true
  check_mode: false
  register: report
"""

RETURN = r"""
json:
  description: Path of the JSON report.
  returned: always
  type: str
  sample: /srv/report/report.json
html:
  description: Path of the HTML report.
  returned: always
  type: str
  sample: /srv/report/report.html
written:
  description: The files whose content changed (or would change in check mode).
  returned: always
  type: list
  elements: str
summary:
  description:
    - Fleet counts C(hosts), C(gpus), C(mig_enabled), C(gpu_instances); host lists C(off_pin), C(unlicensed),
      C(not_isolated), C(preflight_failed), C(preflight_warned), C(changed); GPU lists C(unhealthy_gpus) (a health
      check fails), C(warned_gpus) (one warns), C(not_applicable_gpus) (a check does not apply, see the description);
      C(counts), the length of each of those five lists.
    - From O(proxmox) and O(vsphere) - C(proxmox_gpu_vms), C(vsphere_vgpu_vms), C(driver_drift) (the vSphere clusters whose
      GPU hosts run different drivers) and C(unread) (the entries whose read failed).
    - With O(usage) - C(usage_advice) (node or pool name to its advice, V(saturated), V(mig), V(time-slicing) or
      V(whole); empty when the usage was not read) and C(usage_advice_counts) (per advice kind present, its C(names)).
  returned: always
  type: dict
  sample: {hosts: 2, gpus: 3, mig_enabled: 1, gpu_instances: 3, off_pin: [], unlicensed: [], not_isolated: [],
           preflight_failed: [], preflight_warned: [gpu-node-2], unhealthy_gpus: [], warned_gpus: [gpu-node-2 GPU 0],
           not_applicable_gpus: [gpu-node-1 GPU 0, gpu-node-2 GPU 0], changed: [gpu-node-1],
           counts: {preflight_failed: 0, preflight_warned: 1, unhealthy_gpus: 0, warned_gpus: 1, not_applicable_gpus: 2},
           proxmox_gpu_vms: 0, vsphere_vgpu_vms: 0, driver_drift: [], unread: []}
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    # The work happens in the action plugin of the same name on the controller; reaching this means it was bypassed.
    module = AnsibleModule(
        argument_spec=dict(
            hosts=dict(type="dict", required=True),
            dest=dict(type="path", required=True),
            title=dict(type="str", default="GPU fleet report"),
            driver_pin=dict(type="str"),
            run_log=dict(type="path"),
            generated_at=dict(type="str"),
            proxmox=dict(type="dict"),
            vsphere=dict(type="dict"),
            usage=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    module.fail_json(msg="gpuops.provision.fleet_report runs on the controller as an action plugin; "
                         "it cannot run as a module on the managed node")


if __name__ == "__main__":
    main()
