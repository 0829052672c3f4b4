# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""roles/pve_gpu_host/tasks/vgpu_scheduler.yml (issue 18, KVM/Proxmox side) run for real: ansible-playbook against a
local host with a fake root (modprobe.d) and the NVML stand-in lab/gpusim, whose module reload reads RmPVMRL from that
root's modprobe.d (lab/gpusim/gpusim/vgpu_sched.py). The filters alone: tests/unit/plugins/filter/test_vgpu_scheduler_filters.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig

import pytest
import yaml
from gpusim_nvml import library_env  # pylint: disable=import-error

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
GPUSIM = os.path.join(ROOT, "lab", "gpusim")


# --- the role's entry point, run for real ---------------------------------------------------------------------------

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: gpuops.provision.pve_gpu_host
        tasks_from: vgpu_scheduler
"""


@pytest.fixture
def host(tmp_path):
    root = tmp_path / "root"
    (root / "etc/modprobe.d").mkdir(parents=True)
    (root / "etc/modprobe.d/nvidia.conf").write_text('options nvidia NVreg_RegistryDwords="RMIntrLockingMode=1"\n'
                                                     "options nvidia NVreg_OpenRmEnableUnsupportedGpus=1\n")
    state = tmp_path / "gpusim.json"
    state.write_text(json.dumps({"modprobe_root": str(root), "gpus": [
        {"model": "NVIDIA L40S", "virtualization_mode": "host_vgpu"},
        {"model": "NVIDIA L40S", "virtualization_mode": "host_vgpu"}]}))
    (tmp_path / "site.yml").write_text(PLAYBOOK)
    (tmp_path / "hosts").write_text("lab-pve-7 ansible_connection=local ansible_python_interpreter=%s\n" % sys.executable)

    class Host:
        path = root / "etc/modprobe.d/zz-gpuops-vgpu-scheduler.conf"

        def sim(self):
            return json.loads(state.read_text())

        def set_sim(self, **top):
            st = self.sim()
            st.update(top)
            state.write_text(json.dumps(st))

        def run(self, spec, check=False, inventory=None, **variables):
            extra = {} if spec is None else {"pve_gpu_host_vgpu_scheduler": spec}
            extra.update({
                "pve_gpu_host_vgpu_modprobe_root": str(root),
                "pve_gpu_host_sysfs_root": str(root),
                "pve_gpu_host_update_initramfs": False,
                "pve_gpu_host_nvml_environment": library_env(state),
                # gpusim's own CLI (its package on the path only here: pynvml is nvidia-ml-py over the library)
                "pve_gpu_host_vgpu_reload_commands": [["env", "PYTHONPATH=" + GPUSIM, sys.executable, "-m", "gpusim",
                                                       "module-reload"]],
            })
            extra.update(variables)
            env = dict(os.environ)
            env.update({
                "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join([os.path.join(ROOT, "build", "collections"),
                                                             sysconfig.get_paths()["purelib"]]),
                "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
                "ANSIBLE_LOCALHOST_WARNING": "0",
                "ANSIBLE_NOCOLOR": "1",
                "ANSIBLE_RETRY_FILES_ENABLED": "0",
            })
            cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory or tmp_path / "hosts"),
                   str(tmp_path / "site.yml"), "-e", json.dumps(extra)] + (["--check", "--diff"] if check else [])
            proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300,
                                  check=False)
            try:
                return proc.returncode, json.loads(proc.stdout)
            except ValueError:
                raise AssertionError("no JSON from ansible-playbook (rc %d):\n%s\n%s"
                                     % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])) from None
    return Host()


def tasks(out):
    # include_role names its tasks "<role> : <task>"
    return {t["task"]["name"].split(" : ", 1)[-1]: t["hosts"]["lab-pve-7"] for p in out["plays"] for t in p["tasks"]
            if "lab-pve-7" in t["hosts"]}


def failure(out):
    return [r["msg"] for r in tasks(out).values() if r.get("failed")]


def test_fixed_share_is_written_loaded_and_verified_then_a_rerun_changes_nothing(host):
    rc, out = host.run({"policy": "fixed_share"}, check=True)
    assert rc == 0 and not host.path.exists()                               # check mode: reported, not written
    assert tasks(out)["Set RmPVMRL in the nvidia module options"]["changed"] is True
    assert host.sim().get("counters", {}).get("module_reload", 0) == 0

    rc, out = host.run({"policy": "fixed_share"})
    assert rc == 0, failure(out)
    assert host.path.read_text().endswith(
        'options nvidia NVreg_RegistryDwords="RMIntrLockingMode=1;RmPVMRL=0x11"\n')
    assert host.sim()["counters"]["module_reload"] == 1                     # the handler ran
    assert [g["rmpvmrl_loaded"] for g in host.sim()["gpus"]] == [0x11, 0x11]
    facts = tasks(out)["Publish the host's vGPU scheduler state"]["ansible_facts"]["pve_gpu_host_vgpu_scheduler_facts"]
    assert facts["verified"] is True and facts["rmpvmrl"] == "0x11" and facts["problems"] == []
    assert [g["running"] for g in facts["gpus"]] == ["fixed_share (arr)", "fixed_share (arr)"]  # idle: no slice read
    assert out["stats"]["lab-pve-7"]["changed"] >= 2

    rc, out = host.run({"policy": "fixed_share"})
    assert rc == 0 and out["stats"]["lab-pve-7"]["changed"] == 0
    assert host.sim()["counters"]["module_reload"] == 1


BAD = {  # one host per bad policy, all in one ansible-playbook run: each fails naming itself
    "bad-policy": ({"policy": "fair_share"}, r"vgpu_scheduler_spec: host bad-policy: vGPU scheduler: unknown policy 'fair_share'"),
    "bad-slice": ({"policy": "fixed_share", "timeslice_ms": 31},
                  r"vgpu_scheduler_spec: host bad-slice: vGPU scheduler: timeslice_ms 31 is outside the driver's range 1-30"),
    "bad-best-effort": ({"policy": "best_effort", "timeslice_ms": 3},
                        r"vgpu_scheduler_spec: host bad-best-effort: vGPU scheduler: timeslice_ms cannot be set for best_effort"),
    "bad-bool": ({"policy": "fixed_share", "timeslice_ms": True},
                 r"vgpu_scheduler_spec: host bad-bool: vGPU scheduler: timeslice_ms must be an integer, got True"),
}


def test_bad_policy_or_time_slice_fails_naming_the_host_before_any_write(host, tmp_path):
    inventory = tmp_path / "bad.yml"
    hosts = {name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                    "pve_gpu_host_vgpu_scheduler": spec} for name, (spec, _m) in BAD.items()}
    hosts["no-policy"] = dict(hosts["bad-policy"], pve_gpu_host_vgpu_scheduler={})   # empty: leave it as it is
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    rc, out = host.run(None, inventory=inventory)
    assert rc != 0
    for name, (_spec, match) in BAD.items():
        failed = [r for p in out["plays"] for t in p["tasks"] for h, r in t["hosts"].items() if h == name and r.get("failed")]
        assert len(failed) == 1 and re.search(match, failed[0]["msg"]), (name, failed)
        assert out["stats"][name]["changed"] == 0
    assert not host.path.exists()
    assert not host.sim().get("counters", {}).get("module_reload")
    idle = out["stats"]["no-policy"]
    assert idle["changed"] == 0 and idle["failures"] == 0 and idle["skipped"] >= 1


def test_driver_that_runs_another_slice_fails_naming_host_gpu_expected_and_observed(host):
    # gpusim option: this driver runs equal share with its default slice whatever TT says; the slice is reported
    host.set_sim(scheduler_equal_share_timeslice=False, scheduler_params_idle="configured")
    rc, out = host.run({"policy": "equal_share", "timeslice_ms": 3})
    assert rc != 0
    msg = failure(out)[0]
    assert msg.startswith("pve_gpu_host vGPU scheduler verification failed: host lab-pve-7: GPU 0000:17:00.0 (GPU-")
    assert "expected equal_share (3 ms), observed equal_share (2 ms)" in msg
    assert host.path.exists() and host.sim()["counters"]["module_reload"] == 1


def test_a_production_host_set_to_best_effort_is_warned(host):
    rc, out = host.run({"policy": "best_effort"}, pve_gpu_host_vgpu_production_tenants=True)
    assert rc == 0, failure(out)
    warn = tasks(out)["Warn when a host with production tenants is set to best effort"]["msg"]
    assert warn.startswith("WARNING pve_gpu_host on lab-pve-7: the vGPU scheduler is set to best effort")
    assert 'NVreg_RegistryDwords="RMIntrLockingMode=1"' in host.path.read_text()   # best effort: RmPVMRL absent


def test_apply_never_warns_and_a_later_run_reloads_a_file_already_in_place(host):
    rc, out = host.run({"policy": "fixed_share"}, pve_gpu_host_vgpu_scheduler_apply="never")
    assert rc == 0, failure(out)
    assert host.path.exists() and not host.sim().get("counters", {}).get("module_reload")
    warn = tasks(out)["Report a policy that waits for a reload or reboot"]["msg"]
    assert warn.startswith("WARNING pve_gpu_host on lab-pve-7: pve_gpu_host_vgpu_scheduler_apply is never")
    assert "expected fixed_share (driver default scheduling), observed best_effort" in warn
    rc, out = host.run({"policy": "fixed_share"})
    assert rc == 0, failure(out)
    t = tasks(out)
    assert t["Set RmPVMRL in the nvidia module options"]["changed"] is False
    assert t["Apply a policy the driver has not loaded yet"]["changed"] is True
    assert host.sim()["counters"]["module_reload"] == 1
    facts = t["Publish the host's vGPU scheduler state"]["ansible_facts"]["pve_gpu_host_vgpu_scheduler_facts"]
    assert facts["verified"] is True
