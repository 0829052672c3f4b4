# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/fleet_report.yml with the API-managed half of the fleet (issue 41 point 7): a Proxmox VE cluster entry
(pvesim over HTTPS with the lab's cluster, lab/pvesim/fixtures/lab.json) read once through pve_gpu_info, and a
vCenter entry whose read fails (nothing listens), shown with its reason; the play itself succeeds."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "preflight"))
from preflight_lab import ROOT, ansible_env  # noqa: E402  pylint: disable=import-error,wrong-import-position

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from lab.pvesim.httpd import Server  # noqa: E402  pylint: disable=wrong-import-position

PLAYBOOK = os.path.join(ROOT, "playbooks", "fleet_report.yml")


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_proxmox_vms_and_a_failed_vcenter_read_in_the_report(tmp_path):
    with open(os.path.join(ROOT, "lab", "pvesim", "fixtures", "lab.json"), encoding="utf-8") as fh:
        fixture = json.load(fh)
    server = Server(fixture, run_dir=str(tmp_path / "pvesim"), host="127.0.0.1", port=0).start()
    try:
        local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        token = fixture["users"]["root@pam"]["tokens"]["ansible"]
        inventory = {"all": {"hosts": {"n1": dict(local, fleet_report_driver_facts=False,
                                                  gpuops_sysfs_root=str(tmp_path / "empty-root"),
                                                  fleet_report_environment={"PYTHONPATH": str(tmp_path / "no-nvml")})},
                             "children": {
            "pve_clusters": {"hosts": {"lab-pve": dict(local, pve_gpu_vm_api_host="127.0.0.1", pve_gpu_vm_api_port=server.port,
                                                       pve_gpu_vm_api_user="root@pam", pve_gpu_vm_api_token_id="ansible",
                                                       pve_gpu_vm_api_token_secret=token, pve_gpu_vm_ca_path=server.ca)}},
            "vcenters": {"hosts": {"vc-gone": dict(local, vsphere_vgpu_host_vcenter_hostname="127.0.0.1",
                                                   vsphere_vgpu_host_vcenter_port=closed_port(),
                                                   vsphere_vgpu_host_vcenter_username="u",
                                                   vsphere_vgpu_host_vcenter_password="p",
                                                   vsphere_vgpu_host_vcenter_ca_path=server.ca)}}}}}
        (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
        report_dir = tmp_path / "report"
        proc = subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"), PLAYBOOK,
             "-e", json.dumps({"fleet_report_dir": str(report_dir), "fleet_report_hosts": "n1"})],
            cwd=ROOT, env=ansible_env(extra={"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_SHOW_CUSTOM_STATS": "1"}),
            capture_output=True, text=True, timeout=600, check=False)
    finally:
        server.stop()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    stats = json.loads(proc.stdout)["global_custom_stats"]["fleet_report"]
    model = json.loads((report_dir / "report.json").read_text())
    assert [h["host"] for h in model["hosts"]] == ["n1"]   # the API entries are not report hosts here
    (pve,) = model["proxmox"]
    assert pve["name"] == "lab-pve" and pve["error"] is None
    vms = {(n["node"], vm["vmid"]): vm for n in pve["nodes"] for vm in n["vms"]}
    # lab.json: VM 100 holds the A100 through mapping a100, VM 102 an L40S vGPU through mapping l40s-vgpu.
    assert vms[("pve1", 100)]["name"] == "k8s-gpu-a" and vms[("pve1", 100)]["status"] == "running"
    assert vms[("pve1", 100)]["devices"][0]["via"] == "mapping" and vms[("pve1", 100)]["devices"][0]["mapping"] == "a100"
    assert vms[("pve1", 102)]["devices"][0]["mdev"] == "nvidia-1150" and vms[("pve1", 102)]["devices"][0]["gpus"]
    # VM 104 passes a NIC only: not a GPU VM.
    assert ("pve1", 104) not in vms and ("pve1", 101) not in vms
    (vc,) = model["vsphere"]
    assert vc["name"] == "vc-gone" and vc["error"] and vc["clusters"] == []
    assert stats["summary"]["unread"] == ["vc-gone"] and stats["summary"]["proxmox_gpu_vms"] == len(vms)
    text = (report_dir / "report.html").read_text()
    assert "Proxmox VE VMs with GPUs" in text and "k8s-gpu-a" in text
    assert "vsphere_gpu_info: " in text and "not read: vc-gone" in text
