"""Roles vsphere_vgpu_host and vsphere_vgpu_vm run by ansible-playbook against the vcsim-gpu stand-in."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api

pytestmark = pytest.mark.slow

FIXTURE = {"hosts": {"DC0_C0_H0": {"model": "a100-40"},
                     "DC0_C0_H1": {"model": "a100-40", "driver": "535.154.02-1OEM.800.1.0.20613240"},
                     "DC0_C0_H2": {"model": "a100-40"}}}

# The hosts of FIXTURE as the host role leaves them for vGPU VMs: vendor shared passthrough graphics, and H1's first
# A100 in MIG mode for MIG-backed vGPUs.
VM_FIXTURE = {"defaults": {"graphics_type": "sharedDirect"},
              "hosts": dict(FIXTURE["hosts"], DC0_C0_H1=dict(FIXTURE["hosts"]["DC0_C0_H1"], mig_gpus=["0000:3b:00.0"]))}

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  roles:
    - role: gpuops.provision.{role}
"""


def conn(sim, prefix):
    return {prefix + "_vcenter_hostname": sim.address, prefix + "_vcenter_port": int(sim.port),
            prefix + "_vcenter_username": sim.info["username"], prefix + "_vcenter_password": sim.info["password"],
            prefix + "_vcenter_ca_path": sim.info["ca"]}


def graphics(sim):
    with sim.connect() as s:
        return {r["name"]: r["config.graphicsConfig"].hostDefaultGraphicsType for r in s.hosts(props=["name", "config.graphicsConfig"])}


def test_host_role_fails_on_drift_before_changing_then_applies(vcsim_factory, ansible, tmp_path):
    sim = vcsim_factory(hosts=3, vms=0, fixture=FIXTURE)
    book = tmp_path / "host.yml"
    book.write_text(PLAYBOOK.format(role="vsphere_vgpu_host"))
    rc, out = ansible.playbook(str(book), dict(conn(sim, "vsphere_vgpu_host"), vsphere_vgpu_host_cluster="DC0_C0"))
    tasks = ansible.tasks(out)
    assert rc != 0 and tasks["Fail on NVIDIA driver drift between the GPU hosts of a cluster"]["failed"]
    assert "535.154.02" in tasks["Fail on NVIDIA driver drift between the GPU hosts of a cluster"]["msg"]
    assert set(graphics(sim).values()) == {"shared"}

    hosts = ["DC0_C0_H0", "DC0_C0_H2"]
    extra = dict(conn(sim, "vsphere_vgpu_host"), vsphere_vgpu_host_esxi_hostnames=hosts,
                 vsphere_vgpu_host_driver_version="550.90.05", vsphere_vgpu_host_maintenance_mode=True)
    rc, out = ansible.playbook(str(book), extra)
    assert rc == 0, out
    assert graphics(sim) == {"DC0_C0_H0": "sharedDirect", "DC0_C0_H1": "shared", "DC0_C0_H2": "sharedDirect"}
    tasks = ansible.tasks(out)
    assert tasks["Enter maintenance mode on DC0_C0_H2"]["changed"] and tasks["Exit maintenance mode on DC0_C0_H2"]["changed"]
    with sim.connect() as s:
        assert not any(r["runtime.inMaintenanceMode"] for r in s.hosts(props=["name", "runtime.inMaintenanceMode"]))
    rc, out = ansible.playbook(str(book), extra)
    assert rc == 0 and out["stats"]["localhost"]["changed"] == 0


def test_vm_role_plans_all_vms_before_changing_any(vcsim_factory, ansible, tmp_path):
    sim = vcsim_factory(hosts=3, vms=1, fixture=VM_FIXTURE)
    book = tmp_path / "vm.yml"
    book.write_text(PLAYBOOK.format(role="vsphere_vgpu_vm"))
    vms = [dict(name="DC0_C0_H0_VM0", profiles=["grid_a100-40c"], power_policy="power_off"),
           dict(name="DC0_C0_H1_VM0", profiles=["grid_bogus-1q"], power_policy="power_off")]
    rc, out = ansible.playbook(str(book), dict(conn(sim, "vsphere_vgpu_vm"), vsphere_vgpu_vm_vms=vms))
    assert rc != 0

    def profiles():
        with sim.connect() as s:
            return {r["name"]: [d["profile"] for d in api.vm_vgpus(r["config.hardware.device"])]
                    for r in s.vms(props=["name", "config.hardware.device"])}

    assert profiles()["DC0_C0_H0_VM0"] == []  # the valid VM was not touched either
    vms[1]["profiles"] = ["grid_a100-8c"]
    rc, out = ansible.playbook(str(book), dict(conn(sim, "vsphere_vgpu_vm"), vsphere_vgpu_vm_vms=vms))
    assert rc == 0, out
    got = profiles()
    assert got["DC0_C0_H0_VM0"] == ["grid_a100-40c"] and got["DC0_C0_H1_VM0"] == ["grid_a100-8c"]


def test_vm_role_passes_the_multi_vgpu_rules(vcsim_factory, ansible, tmp_path):
    # DC0_C0_H1 runs ESXi 8.0.2 with an R535 driver: MIG-backed vGPUs combine there (issue 14 point 8), unless the
    # play asks for the vSphere 7 rules.
    sim = vcsim_factory(hosts=3, vms=1, fixture=VM_FIXTURE)
    book = tmp_path / "vm.yml"
    book.write_text(PLAYBOOK.format(role="vsphere_vgpu_vm"))
    vms = [dict(name="DC0_C0_H1_VM0", profiles=["grid_a100-3-20c", "grid_a100-2-10c"], power_policy="power_off")]
    extra = dict(conn(sim, "vsphere_vgpu_vm"), vsphere_vgpu_vm_vms=vms, vsphere_vgpu_vm_multi_vgpu_rules="legacy")
    rc, out = ansible.playbook(str(book), extra)
    assert rc != 0
    task = ansible.tasks(out)["Give every VM its vGPUs (one batch; every VM planned before the first change)"]
    assert "before vSphere 8.0" in task["msg"]
    del extra["vsphere_vgpu_vm_multi_vgpu_rules"]
    rc, out = ansible.playbook(str(book), extra)
    assert rc == 0, out
    with sim.connect() as s:
        row = [r for r in s.vms(props=["name", "config.hardware.device"]) if r["name"] == "DC0_C0_H1_VM0"][0]
        assert sorted(d["profile"] for d in api.vm_vgpus(row["config.hardware.device"])) == [
            "grid_a100-2-10c", "grid_a100-3-20c"]


def test_host_role_sets_vgpu_modes_on_vsphere_8_0_u3(vcsim_factory, ansible, tmp_path):
    sim = vcsim_factory(hosts=2, vms=0, api_version="8.0.3.0",
                        fixture={"hosts": {"DC0_C0_*": {}}})
    book = tmp_path / "host.yml"
    book.write_text(PLAYBOOK.format(role="vsphere_vgpu_host"))
    extra = dict(conn(sim, "vsphere_vgpu_host"), vsphere_vgpu_host_cluster="DC0_C0",
                 vsphere_vgpu_host_devices=[dict(pci_id="0000:3b:00.0", vgpu_mode="mixedSize")])
    rc, out = ansible.playbook(str(book), extra)
    assert rc == 0, out
    with sim.connect() as s:
        modes = {r["name"]: api.graphics_config(r["config.graphicsConfig"])["vgpu_modes"]
                 for r in s.hosts(props=["name", "config.graphicsConfig"])}
    assert modes == {"DC0_C0_H0": {"0000:3b:00.0": "mixedSize"}, "DC0_C0_H1": {"0000:3b:00.0": "mixedSize"}}


def test_host_role_sets_fixed_share_reboots_verifies_and_a_rerun_changes_nothing(vcsim_factory, ansible, tmp_path):
    # one GPU host and one plain host (skipped): the reboot loop is per host, one is enough to prove it
    sim = vcsim_factory(hosts=2, vms=0, fixture={"hosts": {"DC0_C0_H0": {"model": "a100-40"}}})
    book = tmp_path / "host.yml"
    book.write_text(PLAYBOOK.format(role="vsphere_vgpu_host"))
    extra = dict(conn(sim, "vsphere_vgpu_host"), vsphere_vgpu_host_cluster="DC0_C0", vsphere_vgpu_host_production=True,
                 vsphere_vgpu_host_scheduler={"policy": "fixed_share"}, vsphere_vgpu_host_scheduler_reboot=True)
    rc, out = ansible.playbook(str(book), extra)
    assert rc == 0, out
    tasks = ansible.tasks(out)
    assert tasks["Set the vGPU scheduler policy of the GPU hosts"]["reboot_required"] == ["DC0_C0_H0"]
    assert tasks["Reboot so the nvidia module loads the new scheduler policy on DC0_C0_H0"]["changed"]
    verified = tasks["Verify the vGPU scheduler policy after the reboots"]
    assert [(h["name"], h.get("verified"), h["skipped"]) for h in verified["hosts"]] == \
        [("DC0_C0_H0", True, False), ("DC0_C0_H1", None, True)]
    with sim.connect() as s:
        props = ["name", "summary.rebootRequired", "configManager.kernelModuleSystem", "runtime.inMaintenanceMode"]
        r = s.hosts(names=["DC0_C0_H0"], props=props)[0]
        assert r["configManager.kernelModuleSystem"].QueryConfiguredModuleOptionString("nvidia") == \
            "NVreg_RegistryDwords=RmPVMRL=0x11"
        assert not r["summary.rebootRequired"] and not r["runtime.inMaintenanceMode"]
    rc, out = ansible.playbook(str(book), extra)
    assert rc == 0 and out["stats"]["localhost"]["changed"] == 0


def test_vm_role_pins_the_drs_behavior(vcsim_factory, ansible, tmp_path):
    sim = vcsim_factory(hosts=1, vms=1, fixture={"hosts": {"DC0_C0_H0": {"model": "a100-40", "graphics_type": "sharedDirect"}}})
    book = tmp_path / "vm.yml"
    book.write_text(PLAYBOOK.format(role="vsphere_vgpu_vm"))
    vms = [dict(name="DC0_C0_H0_VM0", profiles=["grid_a100-40c"], power_policy="power_off")]
    rc, out = ansible.playbook(str(book), dict(conn(sim, "vsphere_vgpu_vm"), vsphere_vgpu_vm_vms=vms,
                                               vsphere_vgpu_vm_drs_behavior="manual"))
    assert rc == 0, out
    with sim.connect() as s:
        cluster = api.host_clusters(s.hosts(props=["name", "parent"]))[0]
        vm = s.vms(props=["name"])[0]
        assert api.cluster_drs(s, objects=[cluster])[cluster._moId]["overrides"][vm["moid"]]["behavior"] == "manual"


def test_both_roles_connect_with_the_credential_environment_alone(vcsim_factory, ansible, tmp_path):
    # issue 41 point 3: AWX's vCenter credential injects VMWARE_HOST/USER/PASSWORD/VALIDATE_CERTS/CA_PATH (and a port
    # through VMWARE_PORT); the roles' port default (443) beat VMWARE_PORT. vcsim listens elsewhere, so only the
    # environment's port reaches it. No connection variable in the play.
    sim = vcsim_factory(hosts=3, vms=0, fixture=FIXTURE)
    assert int(sim.port) != 443
    env = {"VMWARE_HOST": sim.address, "VMWARE_PORT": str(sim.port), "VMWARE_USER": sim.info["username"],
           "VMWARE_PASSWORD": sim.info["password"], "VMWARE_VALIDATE_CERTS": "True", "VMWARE_CA_PATH": sim.info["ca"]}
    for role, extra in (("vsphere_vgpu_host", {"vsphere_vgpu_host_esxi_hostnames": ["DC0_C0_H0"]}),
                        ("vsphere_vgpu_vm", {"vsphere_vgpu_vm_vms": []})):
        book = tmp_path / (role + ".yml")
        book.write_text(PLAYBOOK.format(role=role))
        rc, out = ansible.playbook(str(book), extra, check=True, env=env)
        assert rc == 0, (role, [t for t in ansible.tasks(out).values() if t and t.get("failed")])
        # The roles did connect with what the environment gave: a wrong password there fails them, named with the
        # endpoint and the user, never the password.
        rc, out = ansible.playbook(str(book), extra, check=True, env=dict(env, VMWARE_PASSWORD="wrong-password-value"))
        failed = [t["msg"] for t in ansible.tasks(out).values() if t and t.get("failed")]
        assert rc != 0 and any("login to %s:%s as %s failed" % (sim.address, sim.port, sim.info["username"]) in m
                               for m in failed), (role, failed)
        assert "wrong-password-value" not in json.dumps(out)
