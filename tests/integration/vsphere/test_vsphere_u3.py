"""Issue 14 (vSphere points 8-11) against the vcsim-gpu stand-in on vSphere 8.0 U3.

Multi-vGPU rules by ESXi release and driver, C-series firmware and MMIO, vGPU modes of host graphics devices,
and read-only accounts without Host.Config.Image.
"""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api

pytestmark = pytest.mark.slow

OLD_DRIVER = "535.154.02-1OEM.800.1.0.20613240"
READER = ("reader", "readpw")
# DC0_C0: H0 ESXi 8.0.3 with the default R550 driver, H1 ESXi 8.0.3 with R535, H2 ESXi 7.0.3; A100-40GB everywhere.
FIXTURE = {
    "defaults": {"graphics_type": "sharedDirect"},
    # H1 and H2 run their first GPU in MIG mode (MIG-backed vGPUs there), H0 its first in mixed-size mode.
    "hosts": {"DC0_C0_H0": {"vgpu_modes": {"0000:3b:00.0": "mixedSize"}},
              "DC0_C0_H1": {"driver": OLD_DRIVER, "mig_gpus": ["0000:3b:00.0"]},
              "DC0_C0_H2": {"esxi_version": "7.0.3", "mig_gpus": ["0000:3b:00.0"]}},
    "vm_firmware": {"DC0_C0_H0_VM1": "bios"},
}
MMIO_128 = {"pciPassthru.use64bitMMIO": "TRUE", "pciPassthru.64bitMMIOSizeGB": "128"}


@pytest.fixture
def sim(vcsim_factory):
    return vcsim_factory(hosts=3, vms=2, fixture=FIXTURE, api_version="8.0.3.0", readonly=READER)


def power_off_all(sim):
    with sim.connect() as s:
        for r in s.vms(props=["name", "runtime.powerState"]):
            if r["runtime.powerState"] == "poweredOn":
                s.call_task("power off %s" % r["name"], r["obj"].PowerOffVM_Task)


def vm_state(sim, name):
    with sim.connect() as s:
        row = [r for r in s.vms(props=["name", "config.hardware.device", "config.extraConfig"]) if r["name"] == name][0]
        return dict(profiles=sorted(d["profile"] for d in api.vm_vgpus(row["config.hardware.device"])),
                    extra={o.key: o.value for o in row["config.extraConfig"] or [] if o.key.startswith("pciPassthru")})


def graphics(sim, host):
    """The host's graphics configuration, read with pyvmomi directly (not through the code under test)."""
    with sim.connect() as s:
        cfg = [r for r in s.hosts(props=["name", "config.graphicsConfig"]) if r["name"] == host][0]["config.graphicsConfig"]
        return dict(default_graphics_type=cfg.hostDefaultGraphicsType, assignment_policy=cfg.sharedPassthruAssignmentPolicy,
                    devices={d.deviceId: d.graphicsType for d in cfg.deviceType or []},
                    vgpu_modes={d.deviceId: d.vgpuMode for d in cfg.deviceType or [] if d.vgpuMode})


# ---- point 8: multi-vGPU rules by ESXi release and NVIDIA driver ----------------------------------------------------

def test_mixed_framebuffer_sizes_on_esxi_8_0_3_with_r550(sim, ansible):
    power_off_all(sim)
    args = dict(sim.auth, name="DC0_C0_H0_VM0", profiles=["grid_a100-40c", "grid_a100-20c"])
    r = ansible.module("gpuops.provision.vsphere_vm_vgpu", args)
    assert r["changed"] and not r.get("failed"), r
    assert r["multi_vgpu_rules"] == dict(name="current", basis="ESXi 8.0.3, NVIDIA driver 550.90.05")
    # 2 x (40 + 20) GB -> the 128 GB power of two (point 9)
    assert vm_state(sim, "DC0_C0_H0_VM0") == dict(profiles=["grid_a100-20c", "grid_a100-40c"], extra=MMIO_128)
    assert not ansible.module("gpuops.provision.vsphere_vm_vgpu", args)["changed"]
    # vSphere 8 allows 8 vGPUs per VM, not 4.
    r = ansible.module("gpuops.provision.vsphere_vm_vgpu", dict(args, profiles=["grid_a100-8c"] * 5), check=True)
    assert r["changed"] and not r.get("failed"), r


def test_r535_driver_allows_mig_combinations_but_not_mixed_sizes(sim, ansible):
    power_off_all(sim)
    r = ansible.module("gpuops.provision.vsphere_vm_vgpu",
                       dict(sim.auth, name="DC0_C0_H1_VM0", profiles=["grid_a100-4-20c", "grid_a100-2-10c"]), check=True)
    assert r["changed"] and not r.get("failed"), r
    assert r["multi_vgpu_rules"]["name"] == "vsphere8"
    r = ansible.module("gpuops.provision.vsphere_vm_vgpu",
                       dict(sim.auth, name="DC0_C0_H1_VM0", profiles=["grid_a100-40c", "grid_a100-20c"]))
    assert r.get("failed") and "same profile" in r["msg"] and "DC0_C0_H1" in r["msg"]
    assert "multi-vGPU rules vsphere8: ESXi 8.0.3, NVIDIA driver 535.154.02" in r["msg"]
    assert vm_state(sim, "DC0_C0_H1_VM0") == dict(profiles=[], extra={})


def test_esxi_7_keeps_the_old_rules_unless_told_otherwise(sim, ansible):
    power_off_all(sim)
    args = dict(sim.auth, name="DC0_C0_H2_VM0", profiles=["grid_a100-4-20c", "grid_a100-2-10c"])
    r = ansible.module("gpuops.provision.vsphere_vm_vgpu", args)
    assert r.get("failed") and "cannot be combined on one VM before vSphere 8.0" in r["msg"], r
    assert "multi-vGPU rules legacy: ESXi 7.0.3" in r["msg"]
    assert vm_state(sim, "DC0_C0_H2_VM0")["profiles"] == []
    r = ansible.module("gpuops.provision.vsphere_vm_vgpu", dict(args, multi_vgpu_rules="current"), check=True)
    assert r["changed"] and r["multi_vgpu_rules"] == dict(name="current", basis="multi_vgpu_rules=current")


# ---- point 9: C-series need EFI firmware and 64-bit MMIO -----------------------------------------------------------

def test_c_series_on_a_bios_vm_fails_and_changes_nothing(sim, ansible):
    power_off_all(sim)
    r = ansible.module("gpuops.provision.vsphere_vm_vgpu", dict(sim.auth, name="DC0_C0_H0_VM1", profiles=["grid_a100-40c"]))
    assert r.get("failed"), r
    assert r["msg"].startswith("VM DC0_C0_H0_VM1: C-series vGPU profile grid_a100-40c needs EFI firmware, the VM boots "
                               "with BIOS firmware")
    assert vm_state(sim, "DC0_C0_H0_VM1") == dict(profiles=[], extra={})


def test_c_series_mmio_defaults_respect_explicit_values(sim, ansible):
    power_off_all(sim)
    args = dict(sim.auth, name="DC0_C0_H2_VM1", profiles=["grid_a100-4c"], mmio_size_gb=32)
    r = ansible.module("gpuops.provision.vsphere_vm_vgpu", args)
    assert r.get("failed") and "at least 64 GB of MMIO space" in r["msg"]
    r = ansible.module("gpuops.provision.vsphere_vm_vgpu", dict(args, mmio_size_gb=256))
    assert r["changed"] and vm_state(sim, "DC0_C0_H2_VM1")["extra"] == {
        "pciPassthru.use64bitMMIO": "TRUE", "pciPassthru.64bitMMIOSizeGB": "256"}
    # Without mmio_size_gb the larger value on the VM stays (64 would do for 4 GB).
    del args["mmio_size_gb"]
    assert not ansible.module("gpuops.provision.vsphere_vm_vgpu", args)["changed"]


# ---- point 10: vGPU mode of host graphics devices --------------------------------------------------------------------

@pytest.mark.parametrize("unset", ["keep", "reset"])
def test_host_graphics_keeps_the_vgpu_mode_of_devices_it_does_not_set(vcsim_factory, ansible, unset):
    sim = vcsim_factory(hosts=1, vms=0, api_version="8.0.3.0", extra_args=["-vgpu-mode-unset", unset],
                        fixture={"defaults": FIXTURE["defaults"], "hosts": {"DC0_C0_H0": FIXTURE["hosts"]["DC0_C0_H0"]}})
    r = ansible.module("gpuops.provision.vsphere_host_graphics",
                       dict(sim.auth, esxi_hostname=["DC0_C0_H0"], assignment_policy="consolidation"))
    assert r["changed"], r
    assert graphics(sim, "DC0_C0_H0") == dict(default_graphics_type="sharedDirect", assignment_policy="consolidation",
                                              devices={"0000:3b:00.0": "sharedDirect"},
                                              vgpu_modes={"0000:3b:00.0": "mixedSize"})


def test_host_graphics_sets_vgpu_mode_check_diff_apply_idempotent(sim, ansible):
    args = dict(sim.auth, esxi_hostname=["DC0_C0_H0"], devices=[dict(pci_id="0000:5e:00.0", vgpu_mode="mixedSize")])
    r = ansible.module("gpuops.provision.vsphere_host_graphics", args, check=True, diff=True)
    assert r["changed"], r
    assert r["diff"]["before"]["DC0_C0_H0"]["vgpu_modes"] == {"0000:3b:00.0": "mixedSize"}
    assert r["diff"]["after"]["DC0_C0_H0"]["vgpu_modes"] == {"0000:3b:00.0": "mixedSize", "0000:5e:00.0": "mixedSize"}
    assert graphics(sim, "DC0_C0_H0")["vgpu_modes"] == {"0000:3b:00.0": "mixedSize"}  # check mode changed nothing

    r = ansible.module("gpuops.provision.vsphere_host_graphics", args)
    assert r["changed"]
    assert graphics(sim, "DC0_C0_H0") == dict(
        default_graphics_type="sharedDirect", assignment_policy="performance",
        devices={"0000:3b:00.0": "sharedDirect", "0000:5e:00.0": "sharedDirect"},
        vgpu_modes={"0000:3b:00.0": "mixedSize", "0000:5e:00.0": "mixedSize"})
    info = ansible.module("gpuops.provision.vsphere_gpu_info", dict(sim.auth, esxi_hostname=["DC0_C0_H0"], gather_driver=False))
    assert [(g["pci_id"], g["vgpu_mode"]) for g in info["hosts"][0]["gpus"]] == [
        ("0000:3b:00.0", "mixedSize"), ("0000:5e:00.0", "mixedSize")]
    assert info["hosts"][0]["esxi_version"] == "8.0.3"
    assert not ansible.module("gpuops.provision.vsphere_host_graphics", args)["changed"]


def test_host_graphics_vgpu_mode_on_an_older_host_fails_before_any_change(sim, ansible):
    before = {h: graphics(sim, h) for h in ("DC0_C0_H0", "DC0_C0_H2")}
    r = ansible.module("gpuops.provision.vsphere_host_graphics",
                       dict(sim.auth, esxi_hostname=["DC0_C0_H0", "DC0_C0_H2"], default_graphics_type="sharedDirect",
                            devices=[dict(pci_id="0000:3b:00.0", vgpu_mode="sameSize")]))
    assert r.get("failed"), r
    assert r["msg"] == ("host DC0_C0_H2: device 0000:3b:00.0: vgpu_mode needs vSphere 8.0 Update 3 (API 8.0.3.0): "
                        "host DC0_C0_H2 ESXi 7.0.3")
    assert {h: graphics(sim, h) for h in before} == before


# ---- point 11: read-only accounts ------------------------------------------------------------------------------------

def test_gpu_info_as_read_only_account_falls_back_to_sensors_with_a_warning(sim, ansible):
    auth = dict(sim.auth, username=READER[0], password=READER[1])
    r = ansible.module("gpuops.provision.vsphere_gpu_info", dict(auth, cluster="DC0_C0"))
    assert not r.get("failed"), r
    hosts = {h["name"]: h["driver"] for h in r["hosts"]}
    assert hosts["DC0_C0_H1"] == dict(vib="NVD-AIE_ESXi_8.0.0_Driver", vib_version=OLD_DRIVER, version="535.154.02",
                                      source="health_sensors")
    assert r["drift"]["versions"] == {"550.90.05": ["DC0_C0_H0", "DC0_C0_H2"], "535.154.02": ["DC0_C0_H1"]}
    warned = [w for w in r.get("warnings", []) if "FetchSoftwarePackages was refused" in w]
    assert len(warned) == 3 and all("privilege Host.Config.Image" in w for w in warned)
    assert any("host DC0_C0_H0:" in w for w in warned)


def test_vm_vgpu_as_read_only_account_still_reads_the_driver(sim, ansible):
    power_off_all(sim)
    auth = dict(sim.auth, username=READER[0], password=READER[1])
    r = ansible.module("gpuops.provision.vsphere_vm_vgpu",
                       dict(auth, name="DC0_C0_H0_VM0", profiles=["grid_a100-40c", "grid_a100-20c"]), check=True)
    assert r["changed"] and r["multi_vgpu_rules"]["name"] == "current", r
    assert any("FetchSoftwarePackages was refused" in w for w in r.get("warnings", []))
