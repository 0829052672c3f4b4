#!/usr/bin/env python3
"""Benchmark: vSphere GPU facts and vGPU assignment, gpuops.provision vs community.vmware, in one run.

One vcsim-gpu (lab/vcsim) with 10 clusters x 20 GPU hosts x 5 VMs = 200 hosts and 1,000 VMs (``--quick``: 2 x 5 x 2).
(a) GPU facts of every host: one gpuops.provision.vsphere_gpu_info task (PropertyCollector bulk reads plus
    FetchSoftwarePackages per GPU host) vs community.vmware.vmware_host_facts looped over the hosts (the anchor:
    the per-host facts module, asked for the GPU properties; it cannot read driver VIBs).
(b) one vGPU on N powered-off VMs: gpuops.provision.vsphere_vm_vgpu's batch form (one task for the N VMs) and
    vsphere_vm_vgpu looped vs community.vmware.vmware_guest_vgpu looped, each on its own N VMs, then re-run
    (idempotence pass).
Prints wall times, SOAP round trips (counted in every module process by soapcount/sitecustomize.py) and the
anchor/ours ratios. Everything runs on 127.0.0.1 with verified TLS (the simulator's CA).

Usage: .venv/bin/python bench/vsphere/bench_vsphere.py [--quick] [--vgpu-vms 100] [--no-facts] [--no-loop]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_BIN = os.path.join(ROOT, ".venv", "bin")
sys.path.insert(0, os.path.join(ROOT, "lab", "vcsim"))
sys.path.insert(0, os.path.join(ROOT, "build", "collections"))

import vcsim_lab  # noqa: E402  pylint: disable=wrong-import-position,import-error

PROFILE = "grid_a100-8c"


def playbook(path, tasks):
    with open(path, "w") as f:
        json.dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}], f)


def run(path, sim, calls_file):
    env = dict(os.environ)
    env.update(sim.ansible_env())
    env.update(PATH=VENV_BIN + os.pathsep + env.get("PATH", ""),
               ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"),
               PYTHONPATH=os.path.join(ROOT, "bench", "vsphere", "soapcount"),
               BENCH_SOAP_CALLS_FILE=calls_file, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_DEPRECATION_WARNINGS="0")
    if os.path.exists(calls_file):
        os.unlink(calls_file)
    start = time.monotonic()
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", "ansible_python_interpreter=" + os.path.join(VENV_BIN, "python"), path],
                          capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit("%s failed:\n%s\n%s" % (path, proc.stdout[-4000:], proc.stderr[-2000:]))
    stats = json.loads(proc.stdout)["stats"]["localhost"]
    with open(calls_file) as f:
        calls = sum(int(x) for x in f.read().split())
    return dict(wall_s=round(wall, 2), soap_calls=calls, changed=stats["changed"])


def vm_profiles(sim, names):
    from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api as vsphere_api
    with vsphere_api.Session(dict(hostname=sim.host, port=sim.port, username=sim.username, password=sim.password,
                                  validate_certs=True, ca_path=sim.ca)) as s:
        rows = {r["name"]: r for r in s.vms(props=["name", "config.hardware.device"])}
        return {n: [d["profile"] for d in vsphere_api.vm_vgpus(rows[n]["config.hardware.device"])] for n in names}


def power_off(sim, names):
    from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api as vsphere_api
    with vsphere_api.Session(dict(hostname=sim.host, port=sim.port, username=sim.username, password=sim.password,
                                  validate_certs=True, ca_path=sim.ca)) as s:
        rows = {r["name"]: r["obj"] for r in s.vms(props=["name"])}
        for n in names:
            s.call_task("power off " + n, rows[n].PowerOffVM_Task)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10 hosts, 20 VMs, vGPU to 5 VMs")
    ap.add_argument("--clusters", type=int, default=10)
    ap.add_argument("--hosts", type=int, default=20, help="hosts per cluster")
    ap.add_argument("--vms", type=int, default=5, help="VMs per host")
    ap.add_argument("--vgpu-vms", type=int, default=100)
    ap.add_argument("--no-facts", action="store_true", help="skip part (a)")
    ap.add_argument("--no-loop", action="store_true", help="skip vsphere_vm_vgpu looped (the batch form still runs)")
    a = ap.parse_args()
    if a.quick:
        a.clusters, a.hosts, a.vms, a.vgpu_vms = 2, 5, 2, 5
    tmp = tempfile.mkdtemp(prefix="bench-vsphere-")
    calls = os.path.join(tmp, "calls")
    t0 = time.monotonic()
    # GPU hosts set up for vGPU (vendor shared passthrough graphics): hosts left in vSGA mode run no vGPU VM.
    with vcsim_lab.vcsim(clusters=a.clusters, hosts=a.hosts, vms=a.vms, timeout=600,
                         fixture={"defaults": {"graphics_type": "sharedDirect"}, "hosts": {"all": {}}}) as sim:
        hosts = sorted(h["name"] for h in sim.inventory["hosts"])
        vms = sorted(v["name"] if isinstance(v, dict) else v for v in sim.inventory.get("vms", []))
        if len(vms) < 3 * a.vgpu_vms:
            raise SystemExit("need %d VMs, inventory has %d" % (3 * a.vgpu_vms, len(vms)))
        n = a.vgpu_vms
        ours_vms, anchor_vms, batch_vms = vms[:n], vms[n:2 * n], vms[2 * n:3 * n]
        power_off(sim, ours_vms + anchor_vms + batch_vms)
        print("inventory: %d hosts, %d VMs (started in %.1fs)" % (len(hosts), len(vms), time.monotonic() - t0))
        conn = dict(hostname=sim.host, port=sim.port, username=sim.username, password=sim.password, ca_path=sim.ca)

        facts_ours = os.path.join(tmp, "facts_ours.json")
        playbook(facts_ours, [{"name": "gpu facts", "gpuops.provision.vsphere_gpu_info": dict(conn, datacenter="DC0"),
                               "register": "r"},
                              {"ansible.builtin.assert": {"that": ["r.hosts | length == %d" % len(hosts)]}}])
        facts_anchor = os.path.join(tmp, "facts_anchor.json")
        # vsphere schema with the GPU properties: the default summary schema also queries vSAN, which vcsim lacks.
        playbook(facts_anchor, [{"name": "host facts", "community.vmware.vmware_host_facts": {
            "esxi_hostname": "{{ item }}", "schema": "vsphere", "properties": [
                "name", "config.graphicsInfo", "config.sharedPassthruGpuTypes", "config.graphicsConfig"]},
            "loop": hosts}])
        vgpu_ours = os.path.join(tmp, "vgpu_ours.json")
        playbook(vgpu_ours, [{"name": "vgpu", "gpuops.provision.vsphere_vm_vgpu": dict(conn, name="{{ item }}", profiles=[PROFILE]),
                              "loop": ours_vms}])
        vgpu_batch = os.path.join(tmp, "vgpu_batch.json")
        playbook(vgpu_batch, [{"name": "vgpu batch", "gpuops.provision.vsphere_vm_vgpu": dict(
            conn, vms=[{"name": v, "profiles": [PROFILE]} for v in batch_vms])}])
        vgpu_anchor = os.path.join(tmp, "vgpu_anchor.json")
        playbook(vgpu_anchor, [{"name": "vgpu", "community.vmware.vmware_guest_vgpu": {
            "name": "{{ item }}", "datacenter": "DC0", "vgpu": PROFILE, "state": "present"}, "loop": anchor_vms}])

        res = {}
        if not a.no_facts:
            res["facts_ours"] = run(facts_ours, sim, calls)
            res["facts_anchor"] = run(facts_anchor, sim, calls)
        res["vgpu_batch"] = run(vgpu_batch, sim, calls)
        if not a.no_loop:
            res["vgpu_ours"] = run(vgpu_ours, sim, calls)
        res["vgpu_anchor"] = run(vgpu_anchor, sim, calls)
        res["vgpu_batch_rerun"] = run(vgpu_batch, sim, calls)
        if not a.no_loop:
            res["vgpu_ours_rerun"] = run(vgpu_ours, sim, calls)
        res["vgpu_anchor_rerun"] = run(vgpu_anchor, sim, calls)
        checked = batch_vms + anchor_vms + ([] if a.no_loop else ours_vms)
        got = vm_profiles(sim, checked)
        bad = {n: p for n, p in got.items() if p != [PROFILE]}
        if bad:
            raise SystemExit("wrong vGPUs after the runs: %s" % bad)

    n_h, n_v = len(hosts), a.vgpu_vms
    print("\nload average at the end: %.1f (2-core machine)" % os.getloadavg()[0])
    print("%-28s %9s %11s %9s" % ("run", "wall s", "SOAP calls", "changed"))
    for k, v in res.items():
        print("%-28s %9.2f %11d %9d" % (k, v["wall_s"], v["soap_calls"], v["changed"]))
    if not a.no_facts:
        print("\n(a) GPU facts, %d hosts: anchor/ours wall %.1fx; SOAP calls per host ours %.2f, anchor %.2f"
              % (n_h, res["facts_anchor"]["wall_s"] / res["facts_ours"]["wall_s"],
                 res["facts_ours"]["soap_calls"] / n_h, res["facts_anchor"]["soap_calls"] / n_h))
    for ours, label in (("vgpu_batch", "one batch task"), ("vgpu_ours", "looped")):
        for tag in ("", "_rerun"):
            if ours + tag not in res:
                continue
            o, an = res[ours + tag], res["vgpu_anchor" + tag]
            print("(b) vGPU to %d VMs%s, vsphere_vm_vgpu %s: anchor/ours wall %.2fx; SOAP calls per VM ours %.1f, anchor %.1f"
                  % (n_v, " (re-run)" if tag else "", label, an["wall_s"] / o["wall_s"], o["soap_calls"] / n_v,
                     an["soap_calls"] / n_v))
    print(json.dumps(dict(hosts=n_h, vms=len(vms), vgpu_vms=n_v, results=res)))


if __name__ == "__main__":
    main()
