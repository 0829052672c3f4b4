# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The `site` and `driver pin` job templates from the installed collection, through ansible-runner, against the
simulated lab (`make lab-up`: pvesim, vcsim, the Kubernetes control plane, GPU node containers). `make installed-lab`
brings the lab up and runs these (marker `lab`); `make installed` leaves them out.

`site` runs as an AWX "check" job (job_type check: ansible-playbook --check) with the licence credential, twice; nothing
in the lab changes either time. On the fresh lab the GPU nodes have the driver packages but no NVML binding (as a real
host has after a plain driver install), and a check job installs nothing, so the MIG plan stops the job on both nodes,
naming the binding. After the `driver pin` job has converged (its nvml step installs Debian's python3-pynvml) every
workflow runs; the MIG geometry is still not applied (check mode applies nothing), so the pre-join gate finds both GPU
nodes not ready: that verdict, and only it, fails the job. `driver pin` runs with its survey default (mode check) and
fails on the lab's planted drift, with the table in the job events. The tests run in file order, on one lab."""

from __future__ import annotations

import glob
import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import awx_job  # noqa: E402  pylint: disable=import-error,wrong-import-position
from installed_env import ROOT, _run, dev_copy  # noqa: E402  pylint: disable=import-error,wrong-import-position

pytestmark = pytest.mark.lab
RUN = os.path.join(ROOT, "build", "lab", "run")
INVENTORY = os.path.join(ROOT, "inventories", "lab")
LICENSE = {"token": "nls-client-token-not-a-secret-lab-0123456789"}


@pytest.fixture(scope="module")
def lab(installed):
    assert os.path.isfile(os.path.join(RUN, "k8s", "kubeconfig")), "the lab is not up: make lab-up (make installed-lab does it)"
    # The lab inventory reaches the GPU node containers with containers.podman's connection (the user's choice of
    # inventory, not a dependency of the collection).
    _run([installed.bin("ansible-galaxy"), "collection", "install", "--offline", "--no-deps", dev_copy("containers.podman"),
          "-p", installed.collections], env=installed.env)
    return dict(installed.env, CONTAINERS_CONF=os.path.join(ROOT, "lab", "images", "containers.conf"))


def gpusim_states():
    return {os.path.basename(p): open(p, "rb").read() for p in sorted(glob.glob(os.path.join(RUN, "gpusim", "*.json")))}


def run_template(installed, env, tmp_path, name, answers=None, credentials=None, check=False):
    tmpl = awx_job.template(name)
    pdd, _extra = awx_job.private_data_dir(tmp_path, tmpl, installed.path, None, answers=answers, credentials=credentials,
                                           check=check)
    # The lab's inventory with its group_vars, as an AWX inventory sourced from the project would hold them.
    rc, _status, events, stdout = awx_job.run_job(pdd, tmpl, installed.bin("ansible-runner"), env, inventory=INVENTORY,
                                                  timeout=1500)
    return rc, events, stdout


def check_site(installed, lab, tmp_path):
    """The site job in check mode: (failed tasks, published stats). Nothing in the lab changes, the licence token
    appears nowhere, and no workflow warns about a deprecation (issue 41 point 9: 2.21 warned about skipped_reason in
    node_preflight's report), in the job's stdout or in any task result AWX keeps."""
    before = gpusim_states()
    rc, events, stdout = run_template(installed, lab, tmp_path, "gpuops | site", credentials={"license": LICENSE}, check=True)
    assert rc == 2, stdout[-4000:]
    assert gpusim_states() == before, "a check job changed the GPUs"
    assert LICENSE["token"] not in json.dumps(events) + stdout
    warned = [line for line in stdout.splitlines() if "DEPRECATION WARNING" in line]
    warned += [(e["event_data"].get("host"), e["event_data"].get("task"), d.get("msg")) for e in events
               for d in (e.get("event_data", {}).get("res") or {}).get("deprecations") or []]
    assert not warned, warned
    return awx_job.failures(events), awx_job.artifact_data(events)


def test_site_as_a_check_job_on_fresh_nodes_stops_at_the_missing_nvml_binding(installed, lab, tmp_path):
    """Issue 42: with gpusim below the real binding, a fresh node has no `pynvml` until the nvidia_driver role's nvml
    step installs it, which a check job does not do; the MIG plan names both nodes and the missing module, before
    anything is cordoned. (With the Python stand-in on PYTHONPATH the job went on to the gate.)"""
    failed, stats = check_site(installed, lab, tmp_path)
    assert len(failed) == 1 and failed[0][1].startswith("Fail the play, naming every node whose plan is invalid"), failed
    msg = failed[0][2]
    assert "gpu-node-1" in msg and "gpu-node-2" in msg and "No module named 'pynvml'" in msg, msg
    assert "nvml step installs it" in msg, msg
    for key in ("iommu", "driver_pin"):
        assert key in stats, (key, sorted(stats))


def test_driver_pin_with_its_survey_defaults_fails_on_the_lab_drift_with_the_table(installed, lab, tmp_path):
    rc, events, stdout = run_template(installed, lab, tmp_path, "gpuops | driver pin",
                                      answers={"nvidia_driver_version": "550.163.01-2"})
    assert rc == 2, stdout[-4000:]
    failed = awx_job.failures(events)
    assert len(failed) == 1 and "DRIFT" in failed[0][2] and "gpu-node-2" in failed[0][2], failed
    # The drift is in the job's artifacts too (published before the failure), for workflows and notifications.
    pin = awx_job.artifact_data(events)["driver_pin"]
    assert pin["mode"] == "check" and pin["consistent"] in (False, "False") and "gpu-node-2" in json.dumps(pin["off_pin"]), pin


def test_driver_pin_converge_installs_the_nvml_binding_the_modules_use(installed, lab, tmp_path):
    """Issue 37 point 4: the product's own step puts nvidia-ml-py on the GPU nodes. The `driver pin` job converges
    (the lab's nodes are Debian 13, whose python3-pynvml 12.550.89 is new enough: the distribution's package), and
    gpu_info, run with the nodes' own interpreter and none of the lab's environment, imports that binding (which then
    loads the driver package's libnvidia-ml.so.1, not gpusim's: the lab's runs name gpusim's in LD_LIBRARY_PATH)."""
    rc, events, stdout = run_template(installed, lab, tmp_path, "gpuops | driver pin",
                                      answers={"nvidia_driver_version": "550.163.01-2", "driver_pin_mode": "converge"})
    assert rc == 0, stdout[-4000:]
    for node in ("gpu-node-1", "gpu-node-2"):
        out = _run(["podman", "exec", "gpuops-lab-" + node, "dpkg-query", "-W", "-f=${Status} ${Version}", "python3-pynvml"],
                   env=lab).stdout
        assert out.startswith("install ok installed 12.550"), (node, out)
    # One line per host: "<host> | SUCCESS => {result}" (ansible -o).
    out = _run([installed.bin("ansible"), "-i", INVENTORY, "gpu_nodes", "-o", "-m", "gpuops.provision.gpu_info",
                "-a", "sysfs_root=/opt/gpuops-lab/sysfs kernel_log=none"], env=lab, cwd=installed.cwd).stdout
    results = {line.split(" | ", 1)[0]: json.loads(line.split(" => ", 1)[1]) for line in out.splitlines() if " => " in line}
    for node in ("gpu-node-1", "gpu-node-2"):
        binding = results[node]["nvml"]["binding"]
        assert binding == {"module": "/usr/lib/python3/dist-packages/pynvml.py", "python": "/usr/bin/python3"}, results[node]
    # With the lab's NVML environment (group_vars/gpu_nodes.yml gpuops_node_env: issue 42), the same binding loads
    # gpusim's libnvidia-ml.so.1 from the mounted build and sees the GPUs of the node's state.
    probe = ("import pynvml; pynvml.nvmlInit(); print(pynvml.__file__, pynvml.nvmlDeviceGetCount(), "
             "[line.split()[-1] for line in open('/proc/self/maps') if 'libnvidia-ml' in line][0])")
    for node in ("gpu-node-1", "gpu-node-2"):
        env = ["LD_LIBRARY_PATH=/opt/gpuops-lab/libnvml/by-driver/550.163.01", "GPUSIM_HOME=/opt/gpuops-lab/gpusim",
               "GPUSIM_STATE=/opt/gpuops-lab/run/gpusim/%s.json" % node]
        out = _run(["podman", "exec", *[a for kv in env for a in ("-e", kv)], "gpuops-lab-" + node, "python3", "-c", probe],
                   env=lab).stdout.split()
        with open(os.path.join(ROOT, "lab", "gpusim", "states", node + ".json"), encoding="utf-8") as fh:
            gpus = len(json.load(fh)["gpus"])
        assert out[0] == "/usr/lib/python3/dist-packages/pynvml.py" and out[1] == str(gpus), (node, out)
        assert out[2].startswith("/opt/gpuops-lab/libnvml/") and out[2].endswith("/550.163.01/libnvidia-ml.so.1"), out


def test_site_as_a_check_job_from_the_install_changes_nothing(installed, lab, tmp_path):
    """After the driver pin job put the binding on the nodes: every workflow runs, and only the gate fails the job."""
    failed, stats = check_site(installed, lab, tmp_path)
    assert sorted(h for h, _t, _m in failed) == ["gpu-node-1", "gpu-node-2"], failed
    assert all("is NOT READY" in m and "mig_geometry" in m for _h, _t, m in failed), failed
    # Every workflow before the gate ran and published its result.
    for key in ("iommu", "driver_pin", "mig_reconfigure", "node_preflight"):
        assert key in stats, (key, sorted(stats))
