"""Benchmark: assign a GPU (PCI mapping, pcie=1) to N VMs and re-run, gpuops.provision.pve_vm_gpu vs proxmox_kvm.

All run against the same pvesim (HTTPS on 127.0.0.1, own CA, API token), each on its own N stopped q35 VMs:
pve_vm_gpu's batch form (one task for the N VMs), pve_vm_gpu looped (one task per VM) and the anchor,
community.proxmox.proxmox_kvm looped with ``update: true`` and ``hostpci``, which always writes the config. Prints
wall time, API requests and write calls of the first run and the re-run, and the ratios against the anchor.

Usage: .venv/bin/python bench/proxmox/bench_vm_gpu.py [--vms 50]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from lab.pvesim.httpd import Server  # noqa: E402  pylint: disable=wrong-import-position

VENV_BIN = os.path.join(ROOT, ".venv", "bin")
ANCHOR = "community.proxmox.proxmox_kvm"
BASES = {"batch": 3000, "ours": 1000, "anchor": 2000}  # first VM id of each contender's N VMs


def fixture(n):
    pci = [
        {"id": "0000:00:01.0", "class": "0x060400", "vendor": "0x8086", "device": "0x1901", "iommugroup": 1},
        {"id": "0000:01:00.0", "class": "0x030200", "vendor": "0x10de", "device": "0x20b5", "iommugroup": 1,
         "subsystem_vendor": "0x10de", "subsystem_device": "0x1533"},
    ]
    vms = {}
    for base in BASES.values():
        for i in range(n):
            vms[str(base + i)] = {"node": "pve1", "status": "stopped",
                                  "config": {"name": "vm%d" % (base + i), "machine": "q35", "bios": "ovmf", "memory": "4096"}}
    return {"nodes": {"pve1": {"pci": pci}},
            "mappings": {"a100": {"map": ["node=pve1,path=0000:01:00.0,id=10de:20b5,subsystem-id=10de:1533,iommugroup=1"]}},
            "vms": vms}


def playbook(path, server, n):
    auth = {"api_host": "127.0.0.1", "api_port": server.port, "api_user": "root@pam", "api_token_id": "ansible",
            "api_token_secret": "pvesim-token", "ca_path": server.ca, "validate_certs": True}
    gpus = [{"mapping": "a100", "pcie": True}]
    batch = {"hosts": "localhost", "gather_facts": False, "name": "batch",
             "tasks": [{"name": "GPU by mapping, one task", "gpuops.provision.pve_vm_gpu": dict(
                 auth, vms=[{"vmid": BASES["batch"] + i, "node": "pve1", "gpus": gpus} for i in range(n)])}]}
    ours = {"hosts": "localhost", "gather_facts": False, "name": "ours",
            "tasks": [{"name": "GPU by mapping", "gpuops.provision.pve_vm_gpu": dict(
                auth, node="pve1", vmid="{{ item }}", gpus=gpus),
                "loop": "{{ range(%d, %d) | list }}" % (BASES["ours"], BASES["ours"] + n)}]}
    anchor = {"hosts": "localhost", "gather_facts": False, "name": "anchor",
              "tasks": [{"name": "GPU by proxmox_kvm", ANCHOR: dict(
                  auth, node="pve1", vmid="{{ item }}", update=True, hostpci={"hostpci0": "mapping=a100,pcie=1"}),
                  "loop": "{{ range(%d, %d) | list }}" % (BASES["anchor"], BASES["anchor"] + n)}]}
    files = {}
    for play in (batch, ours, anchor):
        files[play["name"]] = os.path.join(path, play["name"] + ".yml")
        with open(files[play["name"]], "w", encoding="utf-8") as handle:
            json.dump([play], handle)  # JSON is YAML
    return files


def stats(server, ctx):
    """(requests, writes) pvesim has counted so far."""
    with urllib.request.urlopen(server.url + "/_sim/stats", context=ctx, timeout=10) as resp:
        data = json.load(resp)["data"]
    return data["requests"], data["writes"]


def state(server, ctx):
    with urllib.request.urlopen(server.url + "/_sim/state", context=ctx, timeout=10) as resp:
        return json.load(resp)["data"]


def task_seconds(output):
    """Wall time of the play's one task (its loop included) from the json callback: the run without the
    ansible-playbook process start, which both sides pay once."""
    task = json.loads(output)["plays"][0]["tasks"][0]["task"]["duration"]
    parse = datetime.datetime.fromisoformat
    return (parse(task["end"].replace("Z", "+00:00")) - parse(task["start"].replace("Z", "+00:00"))).total_seconds()


def run(play, server, ctx, tmp):
    """(process wall s, task wall s, API requests, API writes) of one ansible-playbook run."""
    env = dict(os.environ)
    env.update({"PATH": VENV_BIN + os.pathsep + env.get("PATH", ""),
                "ANSIBLE_COLLECTIONS_PATH": os.path.join(ROOT, "build", "collections"),
                "ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
                "ANSIBLE_LOCAL_TEMP": os.path.join(tmp, "ansible-tmp"), "ANSIBLE_HOME": os.path.join(tmp, "ansible-home")})
    before = stats(server, ctx)
    start = time.monotonic()
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", "ansible_python_interpreter=" + os.path.join(VENV_BIN, "python"), play],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit("%s failed:\n%s\n%s" % (play, proc.stdout[-4000:], proc.stderr[-4000:]))
    after = stats(server, ctx)
    return wall, task_seconds(proc.stdout), after[0] - before[0], after[1] - before[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vms", type=int, default=int(os.environ.get("BENCH_VMS", "50")))
    opts = parser.parse_args()
    link = os.path.join(ROOT, "build", "collections", "ansible_collections", "gpuops", "provision")
    if not os.path.lexists(link):
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(os.path.relpath(ROOT, os.path.dirname(link)), link)
    tmp = tempfile.mkdtemp(prefix="bench-pve-")
    server = Server(fixture(opts.vms), run_dir=os.path.join(tmp, "pvesim"), host="127.0.0.1", port=0).start()
    ctx = ssl.create_default_context(cafile=server.ca)
    try:
        plays = playbook(tmp, server, opts.vms)
        results = {}
        for name in ("batch", "ours", "anchor"):
            results[name] = [run(plays[name], server, ctx, tmp) for dummy in range(2)]
        vms = state(server, ctx)["vms"]
        for base in BASES.values():
            wrong = [v for v in range(base, base + opts.vms) if vms[str(v)]["config"].get("hostpci0") != "mapping=a100,pcie=1"]
            if wrong:
                sys.exit("VMs without the expected hostpci0: %s" % wrong)
    finally:
        server.stop()
    print("pve_vm_gpu vs %s, %d VMs, GPU by mapping (pvesim, same run; load average %.1f)"
          % (ANCHOR, opts.vms, os.getloadavg()[0]))
    print("process s: the ansible-playbook run; task s: its one task, without the process start both sides pay once")
    print("%-38s %9s %7s %6s %6s %10s %7s %6s %6s" % ("", "process s", "task s", "calls", "writes",
                                                     "re-run: s", "task s", "calls", "writes"))
    labels = (("batch", "pve_vm_gpu, one batch task"), ("ours", "pve_vm_gpu, looped"), ("anchor", ANCHOR + ", looped"))
    for name, label in labels:
        print("%-38s %9.1f %7.1f %6d %6d %10.1f %7.1f %6d %6d" % ((label,) + results[name][0] + results[name][1]))
    anchor = results["anchor"]
    for name, label in labels[:2]:
        first, rerun = results[name]
        print("%s, ratio anchor/ours: re-run task %.1f (process %.1f), first run task %.1f (process %.1f); "
              "re-run writes %d, the anchor's %d" % (label, anchor[1][1] / rerun[1], anchor[1][0] / rerun[0],
                                                     anchor[0][1] / first[1], anchor[0][0] / first[0],
                                                     rerun[3], anchor[1][3]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
