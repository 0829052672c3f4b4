# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: pve_vm_gpu
short_description: Exact set of passed-through GPUs (hostpciN) of a Proxmox VE VM
version_added: 0.1.0
description:
  - Makes the C(hostpciN) entries of one VM exactly the given list of devices, by cluster mapping, raw PCI address or SR-IOV
    virtual function, with their options (C(pcie), C(x-vga), C(rombar), C(mdev), ...).
  - Existing entries are parsed and normalised, so equivalent spellings (C(01:00) and C(0000:01:00), option order, C(on)/C(1))
    do not cause a change and a re-run makes no write call. An entry for the same device keeps its slot.
  - Checks before any write what Proxmox VE only checks when the VM starts, and fails naming node, VM and device when
    C(pcie) is set on a non-q35 machine, a mapping is missing on the VM's node or does not match the node's hardware,
    the mdev type is not available, or the device's IOMMU group is shared with other devices.
  - On a running VM the change stays pending until the VM restarts (hostpci is not hot-pluggable); O(restart) decides whether
    the module restarts it.
author:
  - gpuops.provision maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.provision._proxmox_auth
  - gpuops.provision._attributes
  - gpuops.provision._attributes.ACTIONGROUP_PROXMOX
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: partial
    details:
      - Idempotent except with O(restart=always), which restarts a running VM on every run.
options:
  vmid:
    description: VM id.
    type: int
    required: true
  node:
    description:
      - Node of the VM. Found through C(/cluster/resources) when not given.
      - A VM on a node that is not online fails naming the node; nothing is changed.
    type: str
  gpus:
    description:
      - The devices the VM must have. V([]) removes every hostpci entry (with O(exclusive=true)).
      - Each entry needs exactly one of O(gpus[].mapping) and O(gpus[].host).
    type: list
    elements: dict
    required: true
    suboptions:
      slot:
        description: Fixed hostpci index (0-15). Default is the slot the device already has, else the lowest free one.
        type: int
      mapping:
        description: Cluster PCI mapping id (works with API tokens; Proxmox VE checks the hardware at start).
        type: str
      host:
        description:
          - Raw PCI address (C(0000:01:00.0), C(01:00.0); C(01:00) passes all functions), or C(;)-separated alternatives.
          - With O(gpus[].vf), the physical function whose virtual function to use.
          - Proxmox VE only lets C(root@pam) with a password (not a token) set raw addresses, and replace or delete an
            entry that has one; the module checks this for every entry it would set, replace or delete before any write.
        type: str
      vf:
        description: Index of the SR-IOV virtual function of O(gpus[].host) (0 = first VF).
        type: int
      pcie:
        description: Attach to the PCI express bus (needs machine type q35).
        type: bool
      x_vga:
        description: Primary GPU (vfio-vga).
        type: bool
      rombar:
        description: Make the device ROM visible to the guest (Proxmox VE default true).
        type: bool
      romfile:
        description:
          - File name of a ROM under C(/usr/share/kvm/) (no C(/), no white space, no comma or C(;)).
          - Only C(root@pam) with a password may set it, and replace or delete an entry that has one.
        type: str
      mdev:
        description: Mediated device (vGPU) type, for example V(nvidia-1034).
        type: str
      legacy_igd:
        description: Legacy IGD mode (Intel integrated graphics, i440fx only).
        type: bool
      vendor_id:
        description: Vendor id the guest sees (C(0x10de)).
        type: str
      device_id:
        description: Device id the guest sees.
        type: str
      sub_vendor_id:
        description: Subsystem vendor id the guest sees.
        type: str
      sub_device_id:
        description: Subsystem device id the guest sees.
        type: str
      driver:
        description:
          - V(keep) leaves the host driver bound. Proxmox VE knows this option from 9.1 (qemu-server 9.0.25); on older
            servers V(keep) fails before any write.
        type: str
        choices: [vfio, keep]
  exclusive:
    description: Delete hostpci entries that are not in O(gpus). With V(false), other entries stay.
    type: bool
    default: true
  restart:
    description:
      - V(never) leaves changes of a running VM pending (RV(pending) says so).
      - V(if_needed) restarts a running VM when hostpci changes are pending (made now or before).
      - V(always) restarts a running VM on every run. A stopped VM is never started.
    type: str
    choices: [never, if_needed, always]
    default: never
  shutdown_timeout:
    description: Seconds to wait for a clean shutdown before the VM is stopped.
    type: int
    default: 180
  timeout:
    description: Seconds to wait for each Proxmox VE task (config, shutdown, start).
    type: int
    default: 300
  precheck:
    description: Run the hardware pre-checks (mapping, mdev type, IOMMU group, machine type). Turn off only to force a configuration.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: One A100 through a mapping on the PCIe bus, restart if needed
  gpuops.provision.pve_vm_gpu:
    vmid: 101
    gpus:
      - {mapping: a100, pcie: true}
    restart: if_needed

- name: vGPU from a mapped pool of virtual functions
  gpuops.provision.pve_vm_gpu:
    vmid: 102
    gpus:
      - {mapping: l40s-vgpu, mdev: nvidia-1155}

- name: Remove all GPUs
  gpuops.provision.pve_vm_gpu:
    vmid: 101
    gpus: []
"""

RETURN = r"""
node:
  description: Node of the VM.
  returned: always
  type: str
hostpci:
  description: The VM's hostpci entries after the run (pending ones included), canonical form.
  returned: always
  type: dict
  sample: {hostpci0: "mapping=a100,pcie=1"}
before:
  description: The hostpci entries before the run.
  returned: always
  type: dict
set:
  description: Entries written (or that would be written in check mode).
  returned: always
  type: dict
deleted:
  description: Entries deleted (or that would be).
  returned: always
  type: list
  elements: str
pending:
  description: The VM runs and hostpci changes wait for its next start.
  returned: always
  type: bool
restarted:
  description: The module restarted (or in check mode would restart) the VM.
  returned: always
  type: bool
writes:
  description: Number of API write calls made.
  returned: always
  type: int
"""

import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.provision.plugins.module_utils import _bounds, _pci
from ansible_collections.gpuops.provision.plugins.module_utils._proxmox import PveClient, PveError, module_kwargs

OPTION_KEYS = {
    "pcie": "pcie", "x_vga": "x-vga", "rombar": "rombar", "romfile": "romfile", "mdev": "mdev",
    "legacy_igd": "legacy-igd", "vendor_id": "vendor-id", "device_id": "device-id",
    "sub_vendor_id": "sub-vendor-id", "sub_device_id": "sub-device-id", "driver": "driver",
}


class Precheck(Exception):
    pass


class VmGpu:
    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.client = PveClient.from_params(self.p, task_timeout=self.p["timeout"])
        self.vmid = self.p["vmid"]
        self.node = None
        self._hw = None
        self._mappings = None
        self.warnings = []

    def where(self):
        return "VM %s on node %s" % (self.vmid, self.node)

    def hw(self):
        if self._hw is None:
            self._hw = self.client.hardware(self.node)[1]
        return self._hw

    def mappings(self):
        if self._mappings is None:
            self._mappings = {m["id"]: m for m in self.client.mappings()}
        return self._mappings

    def desired(self):
        out = []
        for i, g in enumerate(self.p["gpus"]):
            label = "gpus[%d]" % i
            if bool(g.get("mapping")) == bool(g.get("host")):
                raise Precheck("%s: %s needs exactly one of mapping and host" % (self.where(), label))
            entry = {}
            if g.get("mapping"):
                if g.get("vf") is not None:
                    raise Precheck("%s: %s: vf needs host (the physical function)" % (self.where(), label))
                entry["mapping"] = g["mapping"]
            else:
                host = g["host"]
                if g.get("vf") is not None:
                    host = self.resolve_vf(host, g["vf"], label)
                entry["host"] = host
            for opt, key in OPTION_KEYS.items():
                if g.get(opt) is not None:
                    entry[key] = g[opt]
            try:
                norm = _pci.normalize_hostpci(entry)
            except _pci.PciError as exc:
                raise Precheck("%s: %s: %s" % (self.where(), label, exc))
            out.append((g.get("slot"), norm))
        return out

    def resolve_vf(self, pf, index, label):
        try:
            pf_id = _pci.normalize_pci_address(pf, function="0")
        except _pci.PciError as exc:
            raise Precheck("%s: %s: %s" % (self.where(), label, exc))
        dev = next((d for d in self.hw() if d["id"] == pf_id), None)
        if dev is None:
            raise Precheck("%s: %s: no PCI device %s on the node" % (self.where(), label, pf_id))
        if index < 0 or index >= len(dev["virtfns"]):
            raise Precheck("%s: %s: device %s has %d virtual function(s), vf %d does not exist"
                           % (self.where(), label, pf_id, len(dev["virtfns"]), index))
        return dev["virtfns"][index]

    # --------------------------------------------------------------- pre-checks (no writes)

    def precheck(self, config, entries, changing):
        machine = str(config.get("machine") or "")
        q35 = "q35" in machine
        ovmf = str(config.get("bios") or "seabios") == "ovmf"
        hw = self.hw()
        by_id = {d["id"]: d for d in hw}
        for slot, norm in entries:
            label = "hostpci%s (%s)" % (slot, _pci.format_hostpci(norm))
            fail = "%s: %s: %%s; nothing changed" % (self.where(), label)
            if norm.get("pcie") == "1" and not q35:
                raise Precheck(fail % ("pcie=1 needs the q35 machine type, the VM has machine '%s'" % (machine or "pc-i440fx (default)")))
            if (norm.get("pcie") == "1" or norm.get("x-vga") == "1") and not ovmf:
                self.warnings.append("%s: %s: GPUs usually work best with bios=ovmf (the VM uses %s)"
                                     % (self.where(), label, config.get("bios") or "seabios"))
            if "mapping" in norm:
                paths = self.check_mapping(norm, fail, by_id)
            else:
                paths = norm["host"].split(";")
                for path in paths:
                    if _pci.normalize_pci_address(path, function="0") not in by_id:
                        raise Precheck(fail % ("no PCI device %s on the node" % path))
            if norm.get("mdev"):
                if any(_pci.parse_pci_address(pth)[3] is None for pth in paths) and "host" in norm:
                    raise Precheck(fail % "cannot use mediated device with multifunction device (give the function, e.g. .0)")
                if slot in changing:
                    # A running VM already holds its unchanged mdev, which then no longer counts as available.
                    self.check_mdev(norm, paths, fail)
            self.check_iommu(norm, paths, fail, by_id)

    def check_mapping(self, norm, fail, by_id):
        mid = norm["mapping"]
        mapping = self.mappings().get(mid)
        if mapping is None:
            raise Precheck(fail % ("PCI mapping '%s' does not exist" % mid))
        entries = [e for e in _pci.normalize_map_list(mapping.get("map") or []) if e["node"] == self.node]
        if not entries:
            raise Precheck(fail % ("PCI mapping '%s' has no entry for node %s" % (mid, self.node)))
        is_mdev = bool(int(_pci.parse_bool(mapping.get("mdev") or 0)))
        problems = []
        for e in entries:
            # mdev both ways, as PVE 8.4+ checks it at start (assert_valid gets the mapping's global mdev flag).
            problems.extend(_pci.check_map_entry(e, list(by_id.values()), mdev=is_mdev))
        if problems:
            raise Precheck(fail % ("PCI mapping '%s' does not match the hardware of node %s: %s" % (mid, self.node, "; ".join(problems))))
        if norm.get("mdev") and not is_mdev:
            raise Precheck(fail % ("mdev is set but PCI mapping '%s' is not marked mdev" % mid))
        return [pth for e in entries for pth in e["path"].split(";")]

    def check_mdev(self, norm, paths, fail):
        target = norm["mapping"] if "mapping" in norm else None
        listed = []
        if target:
            listed.extend(self.client.mdev_types(self.node, target))
        else:
            for pth in paths:
                listed.extend(self.client.mdev_types(self.node, _pci.normalize_pci_address(pth, function="0")))
        where = "mapping %s" % target if target else ", ".join(paths)
        types = sorted(set(t["type"] for t in listed))
        if norm["mdev"] not in types:
            raise Precheck(fail % ("mdev type '%s' is not available on %s (available: %s)"
                                   % (norm["mdev"], where, ", ".join(types) or "none")))
        # Classic mdev reports how many more instances can be created; 0 means the VM could not start.
        if not any(int(t.get("available") or 0) > 0 for t in listed if t["type"] == norm["mdev"]):
            raise Precheck(fail % ("mdev type '%s' has no free instance on %s" % (norm["mdev"], where)))

    def check_iommu(self, norm, paths, fail, by_id):
        hw = list(by_id.values())
        for pth in paths:
            dev = by_id[_pci.normalize_pci_address(pth, function="0")]
            if norm.get("mdev") and not dev["physfn"]:
                continue  # classic mdev: the host driver keeps the device, each mdev gets its own group
            if dev["iommu_group"] < 0:
                raise Precheck(fail % ("device %s has no IOMMU group (IOMMU not present on node %s)" % (dev["id"], self.node)))
            isolated, members = _pci.iommu_isolation(hw, dev["id"])
            if not isolated:
                others = [m for m in members if by_id[m]["slot"] != dev["slot"]]
                raise Precheck(fail % ("device %s shares IOMMU group %d with %s; all of them would have to go to this VM"
                                       % (dev["id"], dev["iommu_group"], ", ".join(others))))

    # --------------------------------------------------------------- run

    def run(self):
        p = self.p
        self.node = p["node"] or self.client.find_vm_node(self.vmid)
        if self.node is None:
            raise Precheck("VM %s not found on any node" % self.vmid)
        self.client.require_online(self.node, "change VM %s" % self.vmid)
        base = "nodes/%s/qemu/%s" % (self.node, self.vmid)
        config = self.client.get(base + "/config")  # pending values applied
        status = (self.client.get(base + "/status/current") or {}).get("status")
        running = status == "running"
        pending_keys = set()
        if running:
            for item in self.client.get(base + "/pending") or []:
                if re.match(r"^hostpci\d+\Z", item.get("key", "")) and ("pending" in item or item.get("delete")):
                    pending_keys.add(item["key"])
        try:
            current = _pci.hostpci_from_config(config)
        except _pci.PciError as exc:
            raise Precheck("%s: cannot parse existing hostpci entry: %s" % (self.where(), exc))
        desired = self.desired()
        try:
            plan = _pci.plan_hostpci(current, desired, exclusive=p["exclusive"])
        except _pci.PciError as exc:
            raise Precheck("%s: %s" % (self.where(), exc))
        self.check_versions(plan)
        self.check_permissions(plan, current)
        if p["precheck"]:
            self.precheck(config, [(s, _pci.normalize_hostpci(v)) for s, v in plan["desired"].items()], set(plan["set"]))

        changed_keys = ["hostpci%d" % s for s in plan["set"]] + ["hostpci%d" % s for s in plan["delete"]]
        config_changed = bool(changed_keys)
        if config_changed and not self.module.check_mode:
            params = {"hostpci%d" % s: v for s, v in plan["set"].items()}
            if plan["delete"]:
                params["delete"] = ",".join("hostpci%d" % s for s in plan["delete"])
            upid = self.client.post(base + "/config", digest=config.get("digest"), **params)
            if isinstance(upid, str) and upid.startswith("UPID:"):
                self.client.wait_task(self.node, upid, what="config update of %s" % self.where())
        if running:
            if config_changed and not self.module.check_mode:
                pending_keys = set()
                for item in self.client.get(base + "/pending") or []:
                    if re.match(r"^hostpci\d+\Z", item.get("key", "")) and ("pending" in item or item.get("delete")):
                        pending_keys.add(item["key"])
            elif config_changed:
                pending_keys.update(changed_keys)
        restart = running and (p["restart"] == "always" or (p["restart"] == "if_needed" and bool(pending_keys)))
        if restart and not self.module.check_mode:
            self.restart(base)
            pending_keys = set()
        pending = bool(running and pending_keys and not restart)
        if pending:
            self.warnings.append("%s runs; hostpci changes (%s) apply at its next start (restart=never)"
                                 % (self.where(), ", ".join(sorted(pending_keys))))
        before = {"hostpci%d" % s: v for s, v in plan["before"].items()}
        after = {"hostpci%d" % s: v for s, v in plan["after"].items()}
        return dict(
            changed=config_changed or restart,
            node=self.node,
            hostpci=after,
            before=before,
            set={"hostpci%d" % s: v for s, v in plan["set"].items()},
            deleted=["hostpci%d" % s for s in plan["delete"]],
            pending=pending,
            restarted=restart,
            writes=len(self.client.writes),
            diff={"before": before, "after": after},
        )

    def check_versions(self, plan):
        """hostpci options the server's release lacks would fail the whole config call."""
        for slot, value in sorted(plan["set"].items()):
            if "driver" in _pci.normalize_hostpci(value):  # the default (vfio) is dropped, so only driver=keep is sent
                gate = _pci.version_gate("driver", self.client.version())
                if gate:
                    raise Precheck("%s: hostpci%d (%s): %s; nothing changed" % (self.where(), slot, value, gate))

    def check_permissions(self, plan, current):
        """check_hostpci_perm of qemu-server, for every entry set, replaced or deleted, before any write."""
        p = self.p
        is_root = p["api_user"] == "root@pam" and not p["api_token_id"]
        problems = _pci.permission_problems(plan, current, is_root)
        if problems:
            who = "%s%s" % (p["api_user"], " with token %s" % p["api_token_id"] if p["api_token_id"] else "")
            raise Precheck("%s: only root@pam with a password may set, replace or delete raw host devices and romfiles "
                           "(this run is %s): %s; use a PCI mapping; nothing changed" % (self.where(), who, "; ".join(problems)))

    def restart(self, base):
        upid = self.client.post(base + "/status/shutdown", forceStop=1, timeout=self.p["shutdown_timeout"])
        self.client.wait_task(self.node, upid, timeout=self.p["shutdown_timeout"] + self.p["timeout"], what="shutdown of %s" % self.where())
        upid = self.client.post(base + "/status/start")
        try:
            self.client.wait_task(self.node, upid, what="start of %s" % self.where())
        except PveError as exc:
            raise PveError("%s (the new hostpci configuration is saved; the VM is stopped)" % exc)


def main():
    gpu_options = dict(
        slot=dict(type="int"),
        mapping=dict(type="str"),
        host=dict(type="str"),
        vf=dict(type="int"),
        pcie=dict(type="bool"),
        x_vga=dict(type="bool"),
        rombar=dict(type="bool"),
        romfile=dict(type="str"),
        mdev=dict(type="str"),
        legacy_igd=dict(type="bool"),
        vendor_id=dict(type="str"),
        device_id=dict(type="str"),
        sub_vendor_id=dict(type="str"),
        sub_device_id=dict(type="str"),
        driver=dict(type="str", choices=["vfio", "keep"]),
    )
    module = AnsibleModule(**module_kwargs(
        dict(
            vmid=dict(type="int", required=True),
            node=dict(type="str"),
            gpus=dict(type="list", elements="dict", required=True, options=gpu_options),
            exclusive=dict(type="bool", default=True),
            restart=dict(type="str", default="never", choices=["never", "if_needed", "always"]),
            shutdown_timeout=dict(type="int", default=180),
            timeout=dict(type="int", default=300),
            precheck=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    ))
    problems = _bounds.out_of_range(module.params, {"vmid": _bounds.PVE_VMID, "timeout": _bounds.TASK_TIMEOUT,
                                                    "shutdown_timeout": _bounds.SHUTDOWN_TIMEOUT})
    if problems:
        module.fail_json(msg="VM %s: %s; nothing changed" % (module.params["vmid"], "; ".join(problems)))
    try:
        vm = VmGpu(module)
        result = vm.run()
    except (Precheck, PveError) as exc:
        module.fail_json(msg=str(exc))
    else:
        for warning in vm.client.warnings + vm.warnings:
            module.warn(warning)
        module.exit_json(**result)


if __name__ == "__main__":
    main()
