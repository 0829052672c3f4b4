"""vsphere_gpu_info (in this process) and the host role (ansible-playbook) on a vCenter with two GPU clusters (issue 40):
driver drift judged per cluster (point 6), and vGPU profile facts from vCenter's RetrieveVgpuProfileInfo (point 8)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.modules import vsphere_gpu_info, vsphere_vm_vgpu

pytestmark = pytest.mark.slow

OLD = "535.154.02-1OEM.800.1.0.20613240"
# Cluster DC0_C0 runs R550 on both hosts, DC0_C1 R535 on both: one driver per cluster, no drift.
FIXTURE = {"defaults": {"graphics_type": "sharedDirect"},
           "hosts": {"DC0_C0_*": {"model": "a100-40"}, "DC0_C1_*": {"model": "l40s", "driver": OLD}}}


@pytest.fixture
def sim(vcsim_factory):
    return vcsim_factory(clusters=2, hosts=2, vms=1, fixture=FIXTURE)


def test_hosts_of_different_clusters_may_run_different_drivers(sim, run_module):
    r = run_module(vsphere_gpu_info, dict(sim.auth, gather_vgpu_vms=False))
    assert not r.get("failed"), r
    drift = r["drift"]
    assert drift["consistent"] is True and drift["drifting_clusters"] == []
    assert drift["clusters"]["DC0_C0"]["versions"] == {"550.90.05": ["DC0_C0_H0", "DC0_C0_H1"]}
    assert drift["clusters"]["DC0_C1"]["versions"] == {"535.154.02": ["DC0_C1_H0", "DC0_C1_H1"]}


def test_a_drifting_cluster_is_named(vcsim_factory, run_module):
    fixture = {"hosts": dict(FIXTURE["hosts"], DC0_C1_H1={"driver": "550.90.05-1OEM.800.1.0.20613240"})}  # H1 on R550
    sim = vcsim_factory(clusters=2, hosts=2, vms=0, fixture=fixture)
    drift = run_module(vsphere_gpu_info, dict(sim.auth, gather_vgpu_vms=False))["drift"]
    assert drift["consistent"] is False and drift["drifting_clusters"] == ["DC0_C1"]
    assert drift["clusters"]["DC0_C1"]["versions"] == {"535.154.02": ["DC0_C1_H0"], "550.90.05": ["DC0_C1_H1"]}


def test_the_host_role_passes_a_fleet_with_one_driver_per_cluster(sim, ansible, tmp_path):
    book = tmp_path / "host.yml"
    book.write_text("- hosts: localhost\n  gather_facts: false\n  roles:\n    - role: gpuops.provision.vsphere_vgpu_host\n")
    extra = {"vsphere_vgpu_host_vcenter_hostname": sim.address, "vsphere_vgpu_host_vcenter_port": int(sim.port),
             "vsphere_vgpu_host_vcenter_username": sim.info["username"],
             "vsphere_vgpu_host_vcenter_password": sim.info["password"], "vsphere_vgpu_host_vcenter_ca_path": sim.info["ca"],
             "vsphere_vgpu_host_esxi_hostnames": ["DC0_C0_H0", "DC0_C0_H1", "DC0_C1_H0", "DC0_C1_H1"]}
    rc, out = ansible.playbook(str(book), extra)
    assert rc == 0, [t["hosts"]["localhost"].get("msg") for t in out["plays"][0]["tasks"] if t["hosts"]["localhost"].get("failed")]


def test_profile_facts_come_from_vcenter_where_the_host_has_them(vcsim_factory, run_module):
    sim = vcsim_factory(hosts=2, vms=1, fixture={"defaults": {"graphics_type": "sharedDirect"}, "hosts": {
        "DC0_C0_H0": {"model": "a100-40", "profiles": ["grid_a100-8c", "nvidia_custom"]},
        "DC0_C0_H1": {"model": "a100-40", "esxi_version": "7.0.2"}}})
    r = run_module(vsphere_gpu_info, dict(sim.auth, gather_vgpu_vms=False, gather_driver=False))
    hosts = {h["name"]: h for h in r["hosts"]}
    facts = {p["name"]: p for p in hosts["DC0_C0_H0"]["profile_info"]}
    assert facts["grid_a100-8c"] == dict(name="grid_a100-8c", board="device-552669406", fb_gb=8, series="c", mig=False,
                                         source="api", stun_time_s={"10": 7, "25": 3, "100": 1})
    assert facts["nvidia_custom"]["source"] == "api" and facts["nvidia_custom"]["fb_gb"] == 1
    # ESXi 7.0.2 predates RetrieveVgpuProfileInfo (7.0.3): the names tell
    assert {p["source"] for p in hosts["DC0_C0_H1"]["profile_info"]} == {"name"}
    # a profile only vCenter can describe may be given twice (the name parser could not prove it)
    r = run_module(vsphere_vm_vgpu, dict(sim.auth, name="DC0_C0_H0_VM0", profiles=["nvidia_custom"] * 2,
                                         power_policy="power_off"), check_mode=True)
    assert not r.get("failed") and r["changed"], r
