"""lab/vcsim against community.vmware modules run by real `ansible` subprocesses, TLS verified."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "lab", "vcsim"))

import vcsim_lab  # noqa: E402

pytest.importorskip("pyVmomi")
from pyVim.connect import Disconnect  # noqa: E402
from pyVim.task import WaitForTask  # noqa: E402
from pyVmomi import vim  # noqa: E402

if not vcsim_lab.available():
    pytest.skip("vcsim-gpu cannot be built here (no Go >= 1.23, see lab/vcsim/README.md)", allow_module_level=True)

pytestmark = pytest.mark.slow  # starts the simulator

BIN = os.path.dirname(sys.executable)
OLD_DRIVER = "535.154.02-1OEM.800.1.0.20613240"


def ansible_env(sim, tmp_path):
    env = dict(os.environ)
    env.update(sim.ansible_env())
    env.update({
        "PATH": BIN + os.pathsep + env.get("PATH", ""),
        "ANSIBLE_COLLECTIONS_PATH": os.path.join(ROOT, "build", "collections"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_DEPRECATION_WARNINGS": "0",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
        "ANSIBLE_LOCALHOST_WARNING": "0",
    })
    return env


def run_module(sim, tmp_path, module, args):
    cmd = [os.path.join(BIN, "ansible"), "localhost", "-o", "-m", module, "-a", json.dumps(args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False,
                          env=ansible_env(sim, tmp_path))
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("localhost | ")), None)
    assert line, f"no result line:\n{proc.stdout}\n{proc.stderr}"
    status, dummy, payload = line[len("localhost | "):].partition(" => ")
    return status, json.loads(payload)


@pytest.fixture(scope="module")
def sim():
    with vcsim_lab.vcsim(clusters=1, hosts=2, vms=1, gpu_hosts="all", host_drivers={"DC0_C0_H1": OLD_DRIVER}) as s:
        yield s


def test_vmware_guest_vgpu_info_reads_the_vm_vgpu(sim, tmp_path):
    si = sim.connect()
    try:
        vm = si.content.searchIndex.FindByInventoryPath("DC0/vm/DC0_C0_H0_VM0")
        dev = vim.vm.device.VirtualPCIPassthrough(
            key=-100, backing=vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo(vgpu="grid_a100-10c"))
        WaitForTask(vm.ReconfigVM_Task(spec=vim.vm.ConfigSpec(
            deviceChange=[vim.vm.device.VirtualDeviceSpec(operation="add", device=dev)])))
        # vcsim numbers device keys in the order devices were added; other tests of this module share the VM.
        (key,) = [d.key for d in vm.config.hardware.device if isinstance(d, vim.vm.device.VirtualPCIPassthrough)]
    finally:
        Disconnect(si)

    status, result = run_module(sim, tmp_path, "community.vmware.vmware_guest_vgpu_info",
                                {"name": "DC0_C0_H0_VM0", "datacenter": "DC0"})
    assert status == "SUCCESS", result
    assert result["vgpu"] == [{"Controller_Key": 100, "Key": key, "Label": "PCI device 0",
                               "Summary": "NVIDIA GRID vGPU grid_a100-10c", "Unit_Number": 18, "Vgpu": "grid_a100-10c"}]


def test_community_modules_use_the_host_managers(sim, tmp_path):
    # One playbook (one ansible start-up): modules that fail on stock vcsim, then a TLS check.
    playbook = tmp_path / "play.yml"
    playbook.write_text("""
- hosts: localhost
  gather_facts: false
  tasks:
    - community.vmware.vmware_host_package_info:
        cluster_name: DC0_C0
      register: pkgs
    - community.vmware.vmware_host_graphics:
        esxi_hostname: [DC0_C0_H1]
        graphic_type: sharedDirect
        assigment_policy: consolidation
      register: graphics
    - community.vmware.vmware_host_graphics:
        esxi_hostname: [DC0_C0_H1]
        graphic_type: sharedDirect
        assigment_policy: consolidation
      register: graphics_again
    # Without the lab CA in the trust store the same module must refuse the connection.
    - community.vmware.vmware_host_package_info:
        cluster_name: DC0_C0
      environment:
        SSL_CERT_FILE: /dev/null
      register: untrusted
      ignore_errors: true
    - ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ {'pkgs': pkgs, 'graphics': graphics, 'graphics_again': graphics_again, 'untrusted': untrusted} | to_json }}"
""")
    out = tmp_path / "out.json"
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook),
                           "-e", f"out={out}"], capture_output=True, text=True, timeout=300, check=False,
                          env=ansible_env(sim, tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads(out.read_text())

    def nvidia(host):
        return [(p["name"], p["version"], p["vendor"]) for p in res["pkgs"]["hosts_package_info"][host] if p["vendor"] == "NVD"]

    assert nvidia("DC0_C0_H0")[0] == ("NVD-AIE_ESXi_8.0.0_Driver", vcsim_lab.DEFAULT_DRIVER, "NVD")
    assert nvidia("DC0_C0_H1")[0] == ("NVD-AIE_ESXi_8.0.0_Driver", OLD_DRIVER, "NVD")
    assert res["graphics"]["changed"] is True
    assert res["graphics_again"]["changed"] is False  # read back through graphicsManager.graphicsConfig
    assert res["untrusted"]["failed"] is True
    assert "CERTIFICATE_VERIFY_FAILED" in res["untrusted"]["msg"]

    si = sim.connect()
    try:
        host = si.content.searchIndex.FindByInventoryPath("DC0/host/DC0_C0/DC0_C0_H1")
        cfg = host.config.graphicsConfig
        assert (cfg.hostDefaultGraphicsType, cfg.sharedPassthruAssignmentPolicy) == ("sharedDirect", "consolidation")
    finally:
        Disconnect(si)
