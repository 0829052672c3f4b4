"""Bad input against every API module and mig_geometry (issue 15 point 9), run in-process against the stand-ins.

Each case is what a hostile or careless user might pass: wrong types, empty and huge values, unicode, newline and
separator injection, unknown objects. For every case the suite asserts:
- no traceback: main() ends with fail_json (an exception escaping it, or a run over CASE_SECONDS, is a failure);
- the message names the object and the reason (each case lists words the message must contain);
- the stand-in's state is byte-identical afterwards (pvesim's whole state, the vCenter hosts' graphics settings and
  VM devices read back through the API, the gpusim state file).
Counts per module go to build/bad_input/<module>.json; conftest.py prints the table at the end of the run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys

import pytest

from ansible_collections.gpuops.provision.plugins.modules import (
    mig_geometry, pve_gpu_info, pve_pci_mapping, pve_vm_gpu, vsphere_gpu_info, vsphere_host_graphics, vsphere_vm_vgpu,
)

from gpusim_nvml import use_gpusim  # pylint: disable=import-error

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
RESULTS = os.path.join(ROOT, "build", "bad_input")
CASE_SECONDS = 60


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, path))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


class CaseTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise CaseTimeout()


def run_cases(run_module, module, base, cases, state, where):
    """Run every (extra args, words, check_mode) case; return counts and the failures with their reasons."""
    counts = {"tried": 0, "refused": 0, "unchanged": 0}
    failures = []
    for args, words, *rest in cases:
        counts["tried"] += 1
        full = dict(base)
        for key, value in args.items():
            if value is DROP:
                full.pop(key, None)
            else:
                full[key] = value
        before = state()
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(CASE_SECONDS)
        try:
            result = run_module(module, full, check_mode=bool(rest and rest[0]))
        except CaseTimeout:
            result = {"crash": "no answer within %ss" % CASE_SECONDS}
        except Exception as exc:  # pylint: disable=broad-except
            result = {"crash": "%s: %s" % (type(exc).__name__, exc)}
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
        msg = str(result.get("msg", ""))
        label = "%s %s" % (where, json.dumps(args, default=str)[:160])
        if "crash" in result:
            failures.append("%s: crashed: %s" % (label, result["crash"][:300]))
        elif not result.get("failed"):
            failures.append("%s: accepted (changed=%s)" % (label, result.get("changed")))
        elif "Traceback" in msg or "exception" in result:
            failures.append("%s: traceback: %s" % (label, msg[:300]))
        elif not all(w.lower() in msg.lower() for w in words):
            failures.append("%s: message lacks %s: %s" % (label, words, msg[:300]))
        else:
            counts["refused"] += 1
        if state() == before:
            counts["unchanged"] += 1
        else:
            failures.append("%s: the stand-in's state changed" % label)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, where + ".json"), "w", encoding="utf-8") as handle:
        json.dump(counts, handle)
    return counts, failures


def assert_all_refused(run_module, module, base, cases, state, where):
    """Every case refused cleanly with the stand-in unchanged: tried == refused == unchanged == number of cases."""
    counts, failures = run_cases(run_module, module, base, cases, state, where)
    assert not failures, "\n".join(failures)
    assert counts["tried"] == counts["refused"] == counts["unchanged"] == len(cases)


DROP = object()  # a case that removes a key of the base arguments
HUGE = 10 ** 18
LONG = "x" * 10000


# ------------------------------------------------------------------ Proxmox VE
@pytest.fixture(scope="module")
def pve(tmp_path_factory):
    # The Proxmox tests' cluster (it also puts the repository root on sys.path for lab.pvesim).
    fixture = _load("tests/integration/proxmox/conftest.py", "bad_input_pve_fixture").FIXTURE
    from lab.pvesim.httpd import Server  # pylint: disable=import-outside-toplevel
    server = Server(fixture, run_dir=str(tmp_path_factory.mktemp("pvesim")), host="127.0.0.1", port=0).start()
    root = fixture.get("users", {}).get("root@pam", {"password": "pvesim", "tokens": {"ansible": "pvesim-token"}})
    auth = dict(api_host="127.0.0.1", api_port=server.port, api_user="root@pam", api_token_id="ansible",
                api_token_secret=root["tokens"]["ansible"], ca_path=server.ca)
    yield server, auth
    server.stop()


def pve_state(server):
    return lambda: json.dumps(server.sim.dump(), sort_keys=True)


MAP_CASES = [
    ({"id": ""}, ["invalid mapping id"]),
    ({"id": "1abc"}, ["invalid mapping id", "1abc"]),
    ({"id": "a"}, ["invalid mapping id"]),
    ({"id": "abc\n"}, ["invalid mapping id"]),
    ({"id": "ab c"}, ["invalid mapping id"]),
    ({"id": "ab,c"}, ["invalid mapping id"]),
    ({"id": "\u00e4100"}, ["invalid mapping id"]),
    ({"id": "a100;rm"}, ["invalid mapping id"]),
    ({"map": []}, ["map must not be empty"]),
    ({"map": [{"node": "pve1", "path": []}]}, ["node pve1", "path must not be empty"]),
    ({"map": [{"node": "pve1", "path": ["01:00:00"]}]}, ["node pve1", "invalid PCI address", "01:00:00"]),
    ({"map": [{"node": "pve1", "path": ["zz:00.0"]}]}, ["invalid PCI address", "zz:00.0"]),
    ({"map": [{"node": "pve1", "path": ["01:00.0\n"]}]}, ["invalid PCI address"]),
    ({"map": [{"node": "pve1", "path": ["01:00.0", ""]}]}, ["node pve1", "invalid"]),
    ({"map": [{"node": "pve1", "path": ["01:00.0,pcie=1"]}]}, ["invalid PCI address"]),
    ({"map": [{"node": "pve1", "path": ["0000:09:00.0"]}]}, ["node pve1", "no PCI device", "0000:09:00.0"]),
    ({"map": [{"node": "pve9", "path": ["01:00.0"]}]}, ["pve9"]),
    ({"map": [{"node": "pve_1", "path": ["01:00.0"]}]}, ["invalid node name", "pve_1"]),
    ({"map": [{"node": "pve1\n", "path": ["01:00.0"]}]}, ["invalid node name"]),
    ({"map": [{"node": "", "path": ["01:00.0"]}]}, ["invalid node name"]),
    ({"map": [{"node": "pve1", "path": ["01:00.0"], "pci_id": "10de:20b"}]}, ["node pve1", "invalid id", "10de:20b"]),
    ({"map": [{"node": "pve1", "path": ["01:00.0"], "pci_id": "10de"}]}, ["invalid id"]),
    ({"map": [{"node": "pve1", "path": ["01:00.0"], "pci_id": "10de:20b5,x=1"}]}, ["invalid id"]),
    ({"map": [{"node": "pve1", "path": ["01:00.0"], "pci_id": "10de:2330"}]}, ["node pve1", "'id' does not match"]),
    ({"map": [{"node": "pve1", "path": ["01:00.0"], "subsystem_id": "10de:153"}]}, ["invalid subsystem-id"]),
    ({"map": [{"node": "pve1", "path": ["01:00.0"], "iommu_group": -1}]}, ["node pve1", "iommu_group=-1", "out of range"]),
    ({"map": [{"node": "pve1", "path": ["01:00.0"], "iommu_group": HUGE}]}, ["iommu_group", "out of range"]),
    ({"map": [{"node": "pve1", "path": ["01:00.0"], "iommu_group": "x"}]}, ["iommu_group"]),
    ({"map": [{"node": "pve1", "path": ["01:00.0"], "iommu_group": 7}]}, ["node pve1", "'iommugroup' does not match"]),
    ({"map": [{"node": "pve1", "path": ["01:00.0"], "description": "left, top"}]}, ["description", "comma"]),
    ({"map": [{"node": "pve1", "path": ["01:00.0"], "description": "left\nright"}]}, ["description", "line break"]),
    ({"map": [{"node": "pve1", "path": ["01:00.0"], "description": LONG}]}, ["10000 characters", "4096"]),
    ({"description": LONG}, ["description", "4096"]),
    ({"description": "first\nsecond"}, ["description", "line break"]),
    ({"mdev": "maybe"}, ["mdev"]),
    ({"mdev": False, "map": [{"node": "pve1", "path": ["41:00.4"]}]}, ["0000:41:00.4", "'mdev' does not match"]),
    ({"map": [{"node": "pve1", "path": ["01:00.0"]}, {"node": "pve1", "path": ["0000:01:00"]}]},
     ["same device more than once", "node pve1 path 0000:01:00.0"]),
    ({"map": [{"node": "pve1", "path": ["41:00.4"]}, {"node": "pve1", "path": ["01:00.0"]}]}, ["mixes devices"]),
    ({"map": DROP, "build_from": {"selector": "["}}, ["build_from.selector", "not a valid JMESPath"]),
    ({"map": DROP, "build_from": {"selector": "[?pci_id=='dead:beef']"}}, ["selects no device"]),
    ({"map": DROP, "build_from": {"selector": "[]", "nodes": []}}, ["build_from.nodes", "empty list"]),
    ({"map": DROP, "build_from": {"selector": "[]", "nodes": ["pve9"]}}, ["pve9"]),
    ({"map": DROP, "build_from": {"selector": "[].id"}}, ["must return device facts"]),
    ({"build_from": {"selector": "[]"}}, ["mutually exclusive"]),
    ({"state": "gone"}, ["state"]),
    ({"live_migration_capable": "perhaps"}, ["live_migration_capable"]),
    ({"api_port": 0}, ["api_port=0", "out of range"]),
    ({"api_port": 70000}, ["api_port=70000", "out of range"]),
    ({"api_timeout": -1}, ["api_timeout=-1", "out of range"]),
    ({"api_token_secret": "wrong"}, ["401"]),
]

VM_CASES = [
    ({"vmid": 99}, ["vmid=99", "out of range"]),
    ({"vmid": HUGE}, ["vmid", "out of range"]),
    ({"vmid": -1}, ["vmid=-1", "out of range"]),
    ({"vmid": "abc"}, ["vmid"]),
    ({"vmid": 999}, ["VM 999 not found"]),
    ({"node": "pve9"}, ["unknown node pve9"]),
    ({"gpus": [{}]}, ["VM 200", "exactly one of mapping and host"]),
    ({"gpus": [{"mapping": "a100", "host": "01:00.0"}]}, ["VM 200", "exactly one of mapping and host"]),
    ({"gpus": [{"mapping": "nope"}]}, ["VM 200", "'nope' does not exist"]),
    ({"gpus": [{"mapping": "a100\n"}]}, ["VM 200", "invalid mapping id"]),
    ({"gpus": [{"mapping": "a100,pcie=1"}]}, ["VM 200", "invalid mapping id"]),
    ({"gpus": [{"mapping": "a100;x"}]}, ["VM 200", "invalid mapping id"]),
    ({"gpus": [{"host": "01:00:00"}]}, ["VM 200", "invalid PCI address"]),
    ({"gpus": [{"host": "01:00.0,x-vga=1"}]}, ["VM 200", "invalid PCI address"]),
    ({"gpus": [{"host": "0000:09:00.0"}]}, ["VM 200", "0000:09:00.0"]),
    ({"vmid": 101, "node": "pve1", "gpus": [{"host": "41:00.0", "vf": -1}]}, ["VM 101", "vf -1 does not exist"]),
    ({"vmid": 101, "node": "pve1", "gpus": [{"host": "41:00.0", "vf": HUGE}]}, ["VM 101", "does not exist"]),
    ({"gpus": [{"mapping": "a100", "vf": 0}]}, ["VM 200", "vf needs host"]),
    ({"gpus": [{"mapping": "a100", "slot": 16}]}, ["VM 200", "slot 16 out of range"]),
    ({"gpus": [{"mapping": "a100", "slot": -1}]}, ["VM 200", "out of range"]),
    ({"gpus": [{"mapping": "a100", "slot": 1}, {"mapping": "t4", "slot": 1}]}, ["VM 200", "slot is requested twice"]),
    ({"gpus": [{"mapping": "a100"}, {"mapping": "a100"}]}, ["VM 200", "same device is requested twice"]),
    ({"gpus": [{"mapping": "a100", "romfile": "../x.rom"}]}, ["VM 200", "invalid romfile"]),
    ({"gpus": [{"mapping": "a100", "romfile": "a,b.rom"}]}, ["VM 200", "invalid romfile"]),
    ({"gpus": [{"mapping": "a100", "mdev": "a.b"}]}, ["VM 200", "invalid mdev"]),
    ({"gpus": [{"mapping": "a100", "mdev": "nvidia-1\n"}]}, ["VM 200", "invalid mdev"]),
    ({"gpus": [{"mapping": "a100", "vendor_id": "10de0"}]}, ["VM 200", "invalid vendor-id"]),
    ({"gpus": [{"mapping": "a100", "vendor_id": "0x10d"}]}, ["VM 200", "invalid vendor-id"]),
    ({"gpus": [{"mapping": "a100", "driver": "nvidia"}]}, ["driver"]),
    ({"gpus": [{"mapping": "a100", "pcie": "maybe"}]}, ["pcie"]),
    # ansible-core's own message for a list element that is not a dict does not name the option (left as it is)
    ({"gpus": "notalist"}, ["dictionary requested"]),
    ({"gpus": [{"mapping": "wrongid"}]}, ["VM 200", "'wrongid' has no entry for node pve2"]),
    ({"vmid": 101, "node": "pve1", "gpus": [{"mapping": "wrongid"}]}, ["VM 101", "does not match the hardware"]),
    ({"vmid": 101, "node": "pve1", "gpus": [{"mapping": "a100", "pcie": True}]}, ["VM 101", "q35"]),
    ({"vmid": 101, "node": "pve1", "gpus": [{"mapping": "l40s-vgpu", "mdev": "nvidia-9999"}]},
     ["VM 101", "nvidia-9999", "not available"]),
    ({"timeout": -1}, ["timeout=-1", "out of range"]),
    ({"timeout": HUGE}, ["timeout", "out of range"]),
    ({"shutdown_timeout": -5}, ["shutdown_timeout=-5", "out of range"]),
    ({"restart": "sometimes"}, ["restart"]),
    ({"api_port": 0}, ["api_port=0", "out of range"]),
    ({"api_timeout": 0}, ["api_timeout=0", "out of range"]),
]

INFO_CASES = [
    ({"nodes": []}, ["nodes", "empty list"]),
    ({"nodes": ["pve9"]}, ["pve9"]),
    ({"nodes": ["pve1\n"]}, ["unknown node"]),
    ({"nodes": "pve1,pve9"}, ["pve9"]),
    ({"api_port": -1}, ["api_port=-1", "out of range"]),
    ({"api_timeout": HUGE}, ["api_timeout", "out of range"]),
    ({"gather_mdev": "x"}, ["gather_mdev"]),
    ({"api_token_secret": "wrong"}, ["401"]),
    ({"api_user": ""}, ["401"]),
    ({"ca_path": DROP}, ["certificate"]),
]


@pytest.mark.parametrize("module,base,cases,where", [
    (pve_pci_mapping, {"id": "badin", "map": [{"node": "pve1", "path": ["01:00.0"]}]}, MAP_CASES, "pve_pci_mapping"),
    (pve_vm_gpu, {"vmid": 200, "gpus": [{"mapping": "a100"}]}, VM_CASES, "pve_vm_gpu"),
    (pve_gpu_info, {}, INFO_CASES, "pve_gpu_info"),
])
def test_proxmox_modules_refuse_bad_input_cleanly(pve, run_module, module, base, cases, where):
    server, auth = pve
    assert_all_refused(run_module, module, dict(auth, **base), cases, pve_state(server), where)


# ------------------------------------------------------------------ vSphere
@pytest.fixture(scope="module")
def vc():
    lab = _load("lab/vcsim/vcsim_lab.py", "bad_input_vcsim_lab")
    if not lab.available():
        pytest.skip("vcsim-gpu cannot be built here (no Go >= 1.23, see lab/vcsim/README.md)")
    fixture = {"hosts": {"DC0_C0_H0": {"model": "a100-40"}, "DC0_C0_H1": {"model": "l40s"}}}
    with lab.vcsim(hosts=2, vms=1, fixture=fixture, timeout=120) as sim:
        auth = dict(hostname=sim.host, port=int(sim.port), username=sim.username, password=sim.password, ca_path=sim.ca)
        yield sim, auth


def vc_state(auth):
    """Hosts' graphics settings and VMs' devices, power state and extra config, read through the API."""
    from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api  # pylint: disable=import-outside-toplevel

    def read():
        with api.Session(dict(auth, validate_certs=True, api_timeout=30)) as s:
            hosts = {r["name"]: str(r["config.graphicsConfig"]) for r in s.hosts(props=["name", "config.graphicsConfig"])}
            vms = {r["name"]: [str(r["config.hardware.device"]), r["runtime.powerState"], str(r["config.extraConfig"])]
                   for r in s.vms(props=["name", "runtime.powerState", "config.hardware.device", "config.extraConfig"])}
        return json.dumps({"hosts": hosts, "vms": vms}, sort_keys=True)
    return read


GRAPHICS_CASES = [
    ({"esxi_hostname": []}, ["esxi_hostname", "empty list"]),
    ({"esxi_hostname": ["nohost"]}, ["not found", "nohost"]),
    ({"esxi_hostname": ["DC0_C0_H0\n"]}, ["not found"]),
    ({"esxi_hostname": DROP, "cluster": "nope"}, ["nope"]),
    ({"esxi_hostname": DROP, "cluster": ""}, ["cluster"]),
    ({"esxi_hostname": DROP}, ["cluster", "esxi_hostname"]),
    ({"default_graphics_type": "dedicated"}, ["default_graphics_type"]),
    ({"assignment_policy": "x"}, ["assignment_policy"]),
    ({"devices": [{"pci_id": "zz", "graphics_type": "shared"}]}, ["zz"]),
    ({"devices": [{"pci_id": "0000:99:00.0", "graphics_type": "shared"}]}, ["DC0_C0_H0", "0000:99:00.0", "not found"]),
    ({"devices": [{"pci_id": "0000:5e:00.0", "graphics_type": "shared"},
                  {"pci_id": "0000:5E:00.0", "graphics_type": "sharedDirect"}]}, ["DC0_C0_H0", "listed twice"]),
    ({"devices": [{"pci_id": "0000:5e:00.0"}]}, ["graphics_type", "vgpu_mode"]),
    ({"devices": [{"pci_id": "0000:5e:00.0", "vgpu_mode": "tiny"}]}, ["vgpu_mode"]),
    ({"devices": "x"}, ["dictionary requested"]),  # ansible-core's message, as for pve_vm_gpu's gpus
    ({"skip_non_gpu_hosts": "maybe"}, ["skip_non_gpu_hosts"]),
    ({"datacenter": "nodc"}, ["nodc"]),
    ({"port": 0}, ["port=0", "out of range"]),
    ({"api_timeout": 0}, ["api_timeout=0", "out of range"]),
    ({"api_timeout": HUGE}, ["api_timeout", "out of range"]),
    ({"password": "wrong"}, ["login", "failed"]),
    ({"port": 1}, ["cannot connect", ":1"]),
]

VGPU_CASES = [
    ({"name": "nope"}, ["VM nope not found"]),
    ({"name": "DC0_C0_H0_VM0\n"}, ["not found"]),
    ({"name": "*"}, ["not found"]),
    ({"name": DROP, "uuid": "00000000-0000-0000-0000-000000000000"}, ["uuid", "not found"]),
    ({"name": DROP, "uuid": "not-a-uuid\n"}, ["uuid"]),
    ({"name": DROP, "moid": "vm-99999"}, ["vm-99999"]),
    ({"uuid": "00000000-0000-0000-0000-000000000000"}, ["mutually exclusive"]),
    ({"profiles": ["nonsense"]}, ["DC0_C0_H0_VM0", "nonsense"]),
    ({"profiles": ["grid_a100-40c\n"]}, ["DC0_C0_H0_VM0"]),
    ({"profiles": [""]}, ["DC0_C0_H0_VM0"]),
    ({"profiles": "grid_a100-7c,x"}, ["DC0_C0_H0_VM0"]),
    ({"profiles": ["grid_a100-40c"] * 9}, ["DC0_C0_H0_VM0", "9 vGPUs"]),
    ({"max_vgpus": 0}, ["max_vgpus=0", "out of range"]),
    ({"max_vgpus": -1}, ["max_vgpus=-1", "out of range"]),
    ({"max_vgpus": HUGE}, ["max_vgpus", "out of range"]),
    ({"mmio_size_gb": 0}, ["mmio_size_gb=0", "out of range"]),
    ({"mmio_size_gb": -64}, ["mmio_size_gb=-64", "out of range"]),
    ({"mmio_size_gb": HUGE}, ["mmio_size_gb", "out of range"]),
    ({"shutdown_timeout": -1}, ["shutdown_timeout=-1", "out of range"]),
    ({"power_policy": "reboot"}, ["power_policy"]),
    ({"multi_vgpu_rules": "newest"}, ["multi_vgpu_rules"]),
    ({"datacenter": "nodc"}, ["nodc"]),
    ({"port": 70000}, ["port=70000", "out of range"]),
    ({"api_timeout": 100000}, ["api_timeout=100000", "out of range"]),
    ({"profiles": DROP}, ["profiles"]),
]

VCINFO_CASES = [
    ({"esxi_hostname": []}, ["esxi_hostname", "empty list"]),
    ({"esxi_hostname": ["nope"]}, ["not found", "nope"]),
    ({"driver_vib_regex": "("}, ["driver_vib_regex", "("]),
    ({"cluster": "nope"}, ["nope"]),
    ({"port": 0}, ["port=0", "out of range"]),
    ({"api_timeout": 0}, ["api_timeout=0", "out of range"]),
    ({"gather_vgpu_vms": "x"}, ["gather_vgpu_vms"]),
    ({"ca_path": DROP}, ["TLS verification", "failed"]),
]


@pytest.mark.parametrize("module,base,cases,where", [
    (vsphere_host_graphics, {"esxi_hostname": ["DC0_C0_H0"], "default_graphics_type": "sharedDirect"}, GRAPHICS_CASES,
     "vsphere_host_graphics"),
    (vsphere_vm_vgpu, {"name": "DC0_C0_H0_VM0", "profiles": ["grid_a100-40c"], "power_policy": "fail"}, VGPU_CASES,
     "vsphere_vm_vgpu"),
    (vsphere_gpu_info, {}, VCINFO_CASES, "vsphere_gpu_info"),
])
def test_vsphere_modules_refuse_bad_input_cleanly(vc, run_module, module, base, cases, where):
    dummy, auth = vc
    assert_all_refused(run_module, module, dict(auth, **base), cases, vc_state(auth), where)


# ------------------------------------------------------------------ mig_geometry
A100 = {"gpus": [{"model": "NVIDIA A100-SXM4-40GB", "mig_mode": "enabled"}]}


def entry(**kw):
    e = {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.20gb": 1}}
    e.update(kw)
    return {k: v for k, v in e.items() if v is not DROP}


MIG_CASES = [
    ({"devices": []}, ["devices"]),
    ({"devices": [{}]}, ["missing required key 'devices'"]),
    ({"devices": "all"}, ["devices"]),
    ({"devices": [entry(devices="some")]}, ["devices must be 'all' or a list of GPU indexes"]),
    ({"devices": [entry(devices=[-1])]}, ["devices", "-1"]),
    ({"devices": [entry(devices=[HUGE])]}, ["GPU index", str(HUGE)]),
    ({"devices": [entry(devices=["0"])]}, ["devices must be 'all' or a list of GPU indexes"]),
    ({"devices": [entry(devices=[5])]}, ["5"]),
    ({"devices": [entry(**{"mig-enabled": "maybe"})]}, ["mig-enabled"]),
    ({"devices": [entry(**{"mig-devices": {"3g.20gb": HUGE}})]}, ["3g.20gb"]),
    ({"devices": [entry(**{"mig-devices": {"3g.20gb": 10 ** 7}})]}, ["3g.20gb"]),
    ({"devices": [entry(**{"mig-devices": {"3g.20gb": -1}})]}, ["3g.20gb"]),
    ({"devices": [entry(**{"mig-devices": {"3g.20gb": "two"}})]}, ["3g.20gb"]),
    ({"devices": [entry(**{"mig-devices": {"nope.1gb": 1}})]}, ["nope.1gb"]),
    ({"devices": [entry(**{"mig-devices": {"1g.5gb": 8}})]}, ["1g.5gb"]),
    ({"devices": [entry(**{"mig-devices": {"3g.20gb\n": 1}})]}, ["3g.20gb"]),
    ({"devices": [entry(**{"mig-devices": ["3g.20gb"]})]}, ["mig-devices"]),
    ({"devices": [entry(**{"device-filter": "nonsense"})]}, ["device-filter", "nonsense"]),
    ({"devices": [entry(**{"device-filter": []})]}, ["device-filter is empty"]),
    ({"devices": [entry(**{"device-filter": ["0x20B010DE\n"]})]}, ["device-filter"]),
    ({"devices": [entry(**{"mig-devicez": {}})]}, ["mig-devicez"]),
    ({"devices": [entry(**{"mig-enabled": False})]}, ["MIG devices included when 'mig-enabled' is false"]),
    ({"devices": [entry(**{"mig-devices": DROP})]}, ["'mig-devices' is missing"]),
    ({"devices": DROP, "config": {"version": "v2", "mig-configs": {"a": [entry()]}}, "selected": "a"}, ["version"]),
    ({"devices": DROP, "config": {"version": "v1", "mig-configs": {"a": [entry()]}}, "selected": "nope"}, ["nope"]),
    ({"devices": DROP, "config": {"version": "v1", "mig-configs": {"a": [entry()]}}, "selected": ""}, ["selected"]),
    ({"devices": DROP, "config": "notadict"}, ["config"]),
    ({"config": {"version": "v1", "mig-configs": {}}}, ["mutually exclusive"]),
    ({"devices": [entry()], "force": "sometimes"}, ["force"]),
    ({"devices": [entry(**{"mig-devices": {"3g.20gb": 1, "4g.20gb": 1, "1g.5gb": 1}})]}, ["GPU 0"]),
]


def test_mig_geometry_refuses_bad_input_cleanly(monkeypatch, tmp_path, run_module):
    path = use_gpusim(monkeypatch, tmp_path, A100)
    assert_all_refused(run_module, mig_geometry, {"devices": [entry()]}, MIG_CASES, path.read_bytes, "mig_geometry")


def test_the_suite_is_big_enough():
    cases = [MAP_CASES, VM_CASES, INFO_CASES, GRAPHICS_CASES, VGPU_CASES, VCINFO_CASES, MIG_CASES]
    assert sum(len(c) for c in cases) >= 150
