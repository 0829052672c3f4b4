# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/fleet_report.yml over simulated nodes: a MIG node (gpusim), a passthrough host (fake sysfs, no NVML)
and an unreachable host. The run log of a real MIG apply supplies the 'changed by the last run' lines."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "preflight"))
from preflight_lab import ROOT, ansible_env, fake_tree  # noqa: E402  pylint: disable=import-error,wrong-import-position
from gpusim_nvml import library_env  # noqa: E402  pylint: disable=import-error,wrong-import-position

PLAYBOOK = os.path.join(ROOT, "playbooks", "fleet_report.yml")

APPLY = """
- name: Apply
  hosts: mig-node
  gather_facts: false
  tasks:
    - name: Apply the MIG layout
      gpuops.provision.mig_geometry:
        devices:
          - {devices: [0], mig-enabled: true, mig-devices: {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}}
          - {devices: [1], mig-enabled: false}
      environment: "{{ fleet_report_environment }}"
"""


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd, env, timeout=600):
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def test_fleet_report_playbook(tmp_path):
    state = tmp_path / "gpusim.json"
    state.write_text(json.dumps({"gpus": [{"model": "NVIDIA A100-SXM4-40GB", "mig_mode": "enabled"},
                                          {"model": "NVIDIA L40S"}]}))
    with open(os.path.join(ROOT, "lab", "sysfs", "specs", "pve8-gpu-shared.json"), encoding="utf-8") as fh:
        spec = json.load(fh)
    pve_root = fake_tree.build(str(tmp_path / "pve-root"), spec)
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "fleet_report_driver_facts": False}
    hosts = {
        "mig-node": dict(local, fleet_report_environment=library_env(state),
                         gpuops_sysfs_root=str(tmp_path / "empty-root")),
        "pve-host": dict(local, gpuops_sysfs_root=pve_root,
                         # No NVML on a vfio host: point the NVML stand-in at nothing so gpu_info reports it unavailable.
                         fleet_report_environment={"PYTHONPATH": str(tmp_path / "no-nvml")}),
        "gone": {"ansible_host": "127.0.0.1", "ansible_port": closed_port(), "ansible_connection": "ssh",
                 "ansible_ssh_timeout": 3, "fleet_report_driver_facts": False},
    }
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    apply_pb = tmp_path / "apply.yml"
    apply_pb.write_text(APPLY)
    run_log = tmp_path / "run.json"
    env = ansible_env()
    proc = run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), str(apply_pb)],
               dict(env, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_log.write_text(proc.stdout)

    report_dir = tmp_path / "report"
    extra = {"fleet_report_dir": str(report_dir), "fleet_report_run_log": str(run_log), "fleet_report_driver_pin": "550.163.01"}
    proc = run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory), PLAYBOOK,
                "-e", json.dumps(extra)], dict(env, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_SHOW_CUSTOM_STATS="1"))
    # The unreachable host is tolerated: the play itself succeeds.
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    stats = out["global_custom_stats"]["fleet_report"]
    assert stats["html"] == str(report_dir / "report.html")

    model = json.loads((report_dir / "report.json").read_text())
    by_host = dict((h["host"], h) for h in model["hosts"])
    assert sorted(by_host) == ["gone", "mig-node", "pve-host"]
    assert stats["summary"] == model["summary"]

    mig = by_host["mig-node"]
    a100, l40s = mig["gpus"]
    assert a100["mig"]["memory_slices"] == 8
    assert sorted((i["profile"], i["size"]) for i in a100["mig"]["instances"]) == [("1g.5gb", 1), ("2g.10gb", 2), ("3g.20gb", 4)]
    placed = sorted((i["start"], i["size"]) for i in a100["mig"]["instances"])
    assert sum(z for _s, z in placed) == 7 and len(a100["mig"]["free_slices"]) == 1
    assert l40s["mig"] is None
    assert mig["driver"]["loaded"] == "550.163.01" and mig["driver"]["on_pin"] is True
    assert [c["task"] for c in mig["changes"]] == ["Apply the MIG layout"]

    pve = by_host["pve-host"]
    assert pve["iommu"]["active"] is True and pve["iommu"]["not_isolated"]
    assert any(g["isolation"] and g["isolation"]["isolated"] is False for g in pve["gpus"])
    # Both GPUs of the spec are bound to vfio-pci: no NVML by design, said as information, not as a warning.
    assert not any(n.startswith("NVML: ") for n in pve["notes"])
    assert pve["info"] and pve["info"][0].startswith("NVML not loaded: all 2 GPU(s) are bound to vfio-pci")
    assert pve["changes"] == []

    gone = by_host["gone"]
    assert gone["gpus"] == [] and any("gpu_info:" in n for n in gone["notes"])
    assert model["summary"]["not_isolated"] == ["pve-host"] and model["summary"]["changed"] == ["mig-node"]

    text = (report_dir / "report.html").read_text()
    for start, size in placed:
        assert 'data-start="%d" data-size="%d"' % (start, size) in text
    assert text.count('class="slices"') == 1
