# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vsphere_vm_vgpu
short_description: Set the exact list of NVIDIA vGPU profiles of a vSphere VM
version_added: 0.1.0
description:
  - Makes the VM hold exactly the vGPU profiles in O(profiles) (an empty list removes all vGPUs).
    Devices whose profile is already right are kept; others are removed and the missing ones added, in one reconfigure.
  - Validates the profiles against what the VM's host offers, or with O(placement=cluster) what any connected host
    of the VM's cluster offers, before anything changes.
  - Several vGPUs on one VM must follow NVIDIA's multi-vGPU rules for the host's ESXi release and NVIDIA driver
    (O(multi_vgpu_rules)); with V(auto) they are read from the host.
  - C-series (compute) profiles need EFI firmware, 64-bit MMIO and enough MMIO space on ESXi. The module fails for
    a BIOS VM, and sets C(pciPassthru.use64bitMMIO) and C(pciPassthru.64bitMMIOSizeGB) unless O(use_64bit_mmio)
    or O(mmio_size_gb) say otherwise.
  - vGPUs can only be changed on a powered-off VM. By default the module fails for a powered-on VM;
    O(power_policy) allows a power cycle instead, after which the VM is powered on again.
  - Reserves all guest memory (C(memoryReservationLockedToMax)) when the VM gets vGPUs, as vGPU VMs require it,
    and optionally sets the 64-bit MMIO options large-BAR devices need.
options:
  name:
    description: VM name. Must be unique in scope.
    type: str
  uuid:
    description: VM BIOS UUID.
    type: str
  moid:
    description: VM managed object id, for example V(vm-42).
    type: str
  datacenter:
    description: Datacenter to search the VM in (by O(name)).
    type: str
  profiles:
    description: The vGPU profiles the VM must hold, for example V([grid_a100-40c]). Repeat a profile for several vGPUs.
    type: list
    elements: str
    required: true
  placement:
    description:
      - V(host) accepts only profiles the VM's current host offers.
      - V(cluster) accepts profiles offered by any connected host in the VM's cluster; DRS then places the VM on one of
        them at power on. RV(eligible_hosts) lists them.
    type: str
    choices: [host, cluster]
    default: host
  power_policy:
    description:
      - What to do when a change is needed and the VM is powered on.
      - V(fail) fails and changes nothing. V(power_off) powers the VM off hard, reconfigures and powers it on.
        V(shutdown_guest) shuts the guest down (VMware Tools needed), waits O(shutdown_timeout) seconds,
        reconfigures and powers it on.
    type: str
    choices: [fail, power_off, shutdown_guest]
    default: fail
  shutdown_timeout:
    description: Seconds to wait for a guest shutdown.
    type: int
    default: 300
  reserve_all_memory:
    description: Reserve all guest memory when the VM holds vGPUs (required by vSphere for vGPU VMs).
    type: bool
    default: true
  use_64bit_mmio:
    description:
      - Set C(pciPassthru.use64bitMMIO).
      - Unset leaves the VM as it is, except with C-series profiles, which need it V(true) (NVIDIA AI Enterprise,
        "Requirements for Using NVIDIA vGPU (C-Series)"); V(false) with C-series profiles fails.
    type: bool
  mmio_size_gb:
    description:
      - Set C(pciPassthru.64bitMMIOSizeGB) to this many GiB.
      - Unset leaves the VM as it is, except with C-series profiles, which get the power of two at or above twice the
        vGPUs' total frame buffer, at least 64 (a larger value already on the VM stays). Less than 64 with C-series
        profiles fails.
    type: int
  multi_vgpu_rules:
    description:
      - Which rules several vGPUs on one VM must follow.
      - V(auto) picks them by the host's ESXi release and NVIDIA host driver version (read with
        C(FetchSoftwarePackages), only when more than one vGPU is requested on ESXi 8.0 or later; the driver VIB is
        found as P(gpuops.provision.vsphere_gpu_info#module) finds it by default, and accounts without
        C(Host.Config.Image) fall back to the host's health sensors with a warning).
      - V(current) (NVIDIA AI Enterprise 8.1, ESXi 8.0 and later with driver R550 or later) allows up to 8 vGPUs of one
        board type and one series with different frame buffer sizes, MIG-backed ones included.
      - V(vsphere8) (ESXi 8.0 and later, older drivers) allows up to 8, MIG-backed vGPUs of one board in any sizes,
        time-sliced ones only as one full-framebuffer profile.
      - V(legacy) (vSphere 6.7 Update 3 and 7) allows up to 4 vGPUs of one full-framebuffer Q- or C-series profile.
      - Where the host's versions cannot be read, V(auto) applies V(legacy).
    type: str
    choices: [auto, current, vsphere8, legacy]
    default: auto
  max_vgpus:
    description: Most vGPUs one VM may hold; unset takes the limit of the O(multi_vgpu_rules) in force (4 or 8).
    type: int
extends_documentation_fragment:
  - gpuops.provision._vsphere_auth
  - gpuops.provision._attributes
  - gpuops.provision._attributes.ACTIONGROUP_VSPHERE
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
notes:
  - Exactly one of O(name), O(uuid) and O(moid) is required.
  - Removing all vGPUs leaves the memory reservation as it is.
author:
  - gpuops.provision maintainers (@gpuops)
"""

EXAMPLES = r"""
- name: One full A100 for the training VM, power-cycling it if needed
  gpuops.provision.vsphere_vm_vgpu:
    hostname: vcenter.example.com
    username: administrator@vsphere.local
    password: "{{ vcenter_password }}"
    name: train-01
    profiles: [grid_a100-40c]
    power_policy: shutdown_guest
    use_64bit_mmio: true
    mmio_size_gb: 128

- name: Two full-framebuffer vGPUs, any host of the cluster may offer them
  gpuops.provision.vsphere_vm_vgpu:
    name: train-02
    profiles: [grid_a100-40c, grid_a100-40c]
    placement: cluster

- name: Two MIG-backed vGPUs of different sizes (ESXi 8.0 and later)
  gpuops.provision.vsphere_vm_vgpu:
    name: infer-01
    profiles: [grid_a100-4-20c, grid_a100-2-10c]

- name: Remove all vGPUs
  gpuops.provision.vsphere_vm_vgpu:
    name: train-03
    profiles: []
"""

RETURN = r"""
vm:
  description: VM name.
  returned: always
  type: str
  sample: train-01
host:
  description: The host the VM is registered on.
  returned: always
  type: str
before:
  description: Profiles, memory reservation flag and MMIO settings before.
  returned: always
  type: dict
  sample: {profiles: [grid_a100-4c], memory_reservation_locked_to_max: false, extra_config: {}}
after:
  description: The same after the change (predicted in check mode).
  returned: always
  type: dict
  sample: {profiles: [grid_a100-40c], memory_reservation_locked_to_max: true, extra_config: {pciPassthru.use64bitMMIO: "TRUE"}}
actions:
  description: What was (or in check mode would be) done, in order.
  returned: always
  type: list
  elements: str
  sample: [power_off, "remove grid_a100-4c (key 203)", add grid_a100-40c, reserve_all_memory, power_on]
eligible_hosts:
  description: Hosts that offer every requested profile (only the VM's host with O(placement=host)).
  returned: always
  type: list
  elements: str
vgpus:
  description: vGPU devices of the VM after the run (as before in check mode).
  returned: always
  type: list
  elements: dict
  sample: [{key: 203, profile: grid_a100-40c, label: PCI device 0}]
power_cycled:
  description: Whether the VM was powered off and on again.
  returned: always
  type: bool
multi_vgpu_rules:
  description: The multi-vGPU rules applied on the VM's host and why (null for fewer than two vGPUs).
  returned: always
  type: dict
  sample: {name: current, basis: "ESXi 8.0.3, NVIDIA driver 550.90.05"}
"""

import time

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.provision.plugins.module_utils import _auth, _bounds, _vgpu, _vsphere

try:
    from pyVmomi import vim, vmodl
except ImportError:
    pass  # reported through _vsphere.HAS_PYVMOMI

VM_READ = ["name", "runtime.host", "runtime.powerState", "config.hardware.device",
           "config.memoryReservationLockedToMax", "config.extraConfig", "config.firmware"]
OFFER_PROPS = ["name", "parent", "runtime.connectionState", "config.sharedPassthruGpuTypes", "config.sharedGpuCapabilities",
               "config.product.version", "configManager.imageConfigManager"]


def find_vm(session, p):
    if p["moid"]:
        vm = vim.VirtualMachine(p["moid"], session.si._stub)
        try:
            vm.name  # pylint: disable=pointless-statement  # the reference is only checked when it is read
        except vmodl.fault.ManagedObjectNotFound:
            raise _vsphere.VsphereError("VM with moid %s not found" % p["moid"])
        return vm
    if p["uuid"]:
        vm = session.content.searchIndex.FindByUuid(None, p["uuid"], True, False)
        if vm is None:
            raise _vsphere.VsphereError("VM with uuid %s not found" % p["uuid"])
        return vm
    container = session.scope_container(p["datacenter"]) if p["datacenter"] else None
    rows = [r for r in session.collect(vim.VirtualMachine, ["name"], container) if r["name"] == p["name"]]
    if not rows:
        raise _vsphere.VsphereError("VM %s not found" % p["name"])
    if len(rows) > 1:
        raise _vsphere.VsphereError("VM name %s is not unique (%s); use moid or uuid"
                                    % (p["name"], ", ".join(sorted(r["moid"] for r in rows))))
    return rows[0]["obj"]


def read_vm(session, vm_obj):
    rows = session.vms(props=VM_READ, objects=[vm_obj])
    if not rows:
        raise _vsphere.VsphereError("VM %s not found" % vm_obj._moId)
    return rows[0]


def host_rows(session, host_obj, placement):
    """Rows of the VM's host, or of the connected hosts of its cluster, by name; plus the host's name and parent."""
    props = session.host_props(OFFER_PROPS)
    row = session.collect(vim.HostSystem, props, objects=[host_obj])[0]
    parent = row.get("parent")
    rows = {row["name"]: row}
    if placement == "cluster" and isinstance(parent, vim.ClusterComputeResource):
        rows.update(cluster_rows(session, parent, props))
    return row["name"], rows, parent


def cluster_rows(session, cluster, props):
    rows = session.collect(vim.HostSystem, props, container=cluster)
    return {r["name"]: r for r in rows if r.get("runtime.connectionState") == "connected"}


def rules_of(session, rows, profiles, choice, warnings, cache):
    """{host: multi-vGPU rules} for the hosts that offer every profile; the driver is read only where it matters.

    cache: {host: rules} kept across calls so that no host's driver is read twice.
    """
    if len(profiles) < 2:
        return {}
    out = {}
    for name in _vgpu.hosts_offering(profiles, {n: _vsphere.host_offer(r) for n, r in rows.items()}):
        if name not in cache:
            row = rows[name]
            esxi = _vsphere.esxi_version(row)
            driver = None
            # Before ESXi 8.0 the driver does not change the rules (MULTI_VGPU_RULES).
            if choice == "auto" and (_vgpu.parse_version(esxi) or (0,)) >= (8, 0, 0):
                driver = _vsphere.host_driver(session, row, warnings=warnings)["version"]
            cache[name] = _vgpu.multi_vgpu_rules(choice, esxi, driver)
        out[name] = cache[name]
    return out


def build_spec(plan):
    changes = []
    for dev in plan["remove"]:
        changes.append(vim.vm.device.VirtualDeviceSpec(operation="remove", device=dev["device"]))
    for i, profile in enumerate(plan["add"]):
        dev = vim.vm.device.VirtualPCIPassthrough(
            key=-100 - i,
            backing=vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo(vgpu=profile),
            deviceInfo=vim.Description(summary="NVIDIA vGPU %s" % profile, label="vGPU %s" % profile))
        changes.append(vim.vm.device.VirtualDeviceSpec(operation="add", device=dev))
    spec = vim.vm.ConfigSpec(deviceChange=changes)
    if plan["lock_memory"]:
        spec.memoryReservationLockedToMax = True
    if plan["extra_config"]:
        spec.extraConfig = [vim.option.OptionValue(key=k, value=v) for k, v in sorted(plan["extra_config"].items())]
    return spec


def actions_of(plan):
    acts = []
    if plan["power"]["power_off"]:
        acts.append("shutdown_guest" if plan["power"]["power_off"] == "guest" else "power_off")
    acts += ["remove %s (key %s)" % (d["profile"], d["key"]) for d in plan["remove"]]
    acts += ["add %s" % prof for prof in plan["add"]]
    if plan["lock_memory"]:
        acts.append("reserve_all_memory")
    acts += ["set %s=%s" % kv for kv in sorted(plan["extra_config"].items())]
    if plan["power"]["power_on_after"]:
        acts.append("power_on")
    return acts


def power_off(session, vm_obj, name, mode, timeout):
    if mode == "hard":
        session.call_task("VM %s: power off" % name, vm_obj.PowerOffVM_Task)
        return
    try:
        vm_obj.ShutdownGuest()
    except vmodl.MethodFault as e:
        raise _vsphere.VsphereError("VM %s: guest shutdown failed: %s" % (name, _vsphere.fault_message(e)))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if read_power(session, vm_obj) == "poweredOff":
            return
        time.sleep(1)
    raise _vsphere.VsphereError("VM %s: guest did not shut down within %ss; nothing was changed" % (name, timeout))


def read_power(session, vm_obj):
    return session.vms(props=["runtime.powerState"], objects=[vm_obj])[0]["runtime.powerState"]


def run(module, session, warnings):
    p = module.params
    vm_obj = find_vm(session, p)
    vm = read_vm(session, vm_obj)
    if vm.get("runtime.host") is None:
        raise _vgpu.VgpuError("VM %s has no host; register it on a host first" % vm["name"])
    host_name, rows, parent = host_rows(session, vm["runtime.host"], p["placement"])
    current = _vsphere.vm_vgpus(vm.get("config.hardware.device"))
    extra = {o.key: o.value for o in (vm.get("config.extraConfig") or [])}
    rules_cache = {}

    def plan_with(rows):
        offers = {n: _vsphere.host_offer(r) for n, r in rows.items()}
        scope = rows if p["placement"] == "cluster" else {host_name: rows[host_name]}
        host_rules = rules_of(session, scope, p["profiles"], p["multi_vgpu_rules"], warnings, rules_cache)
        plan = _vgpu.plan_vm(vm["name"], host_name, current, p["profiles"], offers, vm.get("runtime.powerState"),
                             bool(vm.get("config.memoryReservationLockedToMax")), extra,
                             placement=p["placement"], reserve_all_memory=p["reserve_all_memory"],
                             use_64bit_mmio=p["use_64bit_mmio"], mmio_size_gb=p["mmio_size_gb"],
                             power_policy=p["power_policy"], max_vgpus=p["max_vgpus"], host_rules=host_rules,
                             firmware=vm.get("config.firmware"))
        rules = host_rules.get(host_name)
        plan["rules"] = dict(name=rules["name"], basis=rules["basis"]) if rules else None
        return plan

    try:
        plan = plan_with(rows)
    except _vgpu.VgpuError:
        if p["placement"] != "host" or not isinstance(parent, vim.ClusterComputeResource):
            raise
        # Only read the rest of the cluster on failure, to name the hosts that do offer the profile.
        rows.update({k: v for k, v in cluster_rows(session, parent, session.host_props(OFFER_PROPS)).items()
                     if k != host_name})
        plan = plan_with(rows)
    result = dict(vm=vm["name"], host=host_name, before=plan["before"], after=plan["after"], actions=actions_of(plan),
                  eligible_hosts=plan["eligible_hosts"], power_cycled=False, changed=plan["changed"],
                  multi_vgpu_rules=plan["rules"])
    vgpus = current
    if plan["changed"] and not module.check_mode:
        if plan["power"]["power_off"]:
            power_off(session, vm_obj, vm["name"], plan["power"]["power_off"], p["shutdown_timeout"])
        try:
            session.call_task("VM %s: reconfigure" % vm["name"], vm_obj.ReconfigVM_Task, spec=build_spec(plan))
        except _vsphere.VsphereError:
            if plan["power"]["power_on_after"]:
                # Leave the VM running as it was; the vGPU change itself did not happen.
                session.call_task("VM %s: power on after failed reconfigure" % vm["name"], vm_obj.PowerOnVM_Task)
            raise
        if plan["power"]["power_on_after"]:
            session.call_task("VM %s: power on" % vm["name"], vm_obj.PowerOnVM_Task)
            result["power_cycled"] = True
        vgpus = _vsphere.vm_vgpus(read_vm(session, vm_obj).get("config.hardware.device"))
    result["vgpus"] = [_vsphere.public_vgpu(d) for d in vgpus]
    return result


def main():
    spec = _auth.vsphere_argument_spec()
    spec.update(
        name=dict(type="str"),
        uuid=dict(type="str"),
        moid=dict(type="str"),
        datacenter=dict(type="str"),
        profiles=dict(type="list", elements="str", required=True),
        placement=dict(type="str", default="host", choices=["host", "cluster"]),
        power_policy=dict(type="str", default="fail", choices=list(_vgpu.POWER_POLICIES)),
        shutdown_timeout=dict(type="int", default=300),
        reserve_all_memory=dict(type="bool", default=True),
        use_64bit_mmio=dict(type="bool"),
        mmio_size_gb=dict(type="int"),
        multi_vgpu_rules=dict(type="str", default="auto", choices=list(_vgpu.MULTI_VGPU_CHOICES)),
        max_vgpus=dict(type="int"),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True,
                           required_one_of=[("name", "uuid", "moid")], mutually_exclusive=[("name", "uuid", "moid")])
    if not _vsphere.HAS_PYVMOMI:
        module.fail_json(msg=missing_required_lib("pyvmomi"), exception=_vsphere.PYVMOMI_IMPORT_ERROR)
    where = module.params["name"] or module.params["uuid"] or module.params["moid"]
    problems = _bounds.out_of_range(module.params, {"max_vgpus": _bounds.MAX_VGPUS, "mmio_size_gb": _bounds.MMIO_SIZE_GB,
                                                    "shutdown_timeout": _bounds.TASK_TIMEOUT})
    if problems:
        module.fail_json(msg="VM %s: %s; nothing changed" % (where, "; ".join(problems)))
    warnings = []
    try:
        with _vsphere.Session(module.params) as session:
            warnings.extend(session.warnings)
            result = run(module, session, warnings)
    except (_vsphere.VsphereError, _vgpu.VgpuError) as e:
        for w in warnings:
            module.warn(w)
        module.fail_json(msg=str(e))
    for w in warnings:
        module.warn(w)
    if module._diff:
        result["diff"] = dict(before=result["before"], after=result["after"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
