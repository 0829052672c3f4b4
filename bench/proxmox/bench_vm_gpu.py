"""Benchmark: assign a GPU (PCI mapping, pcie=1) to N VMs and re-run, gpuops.provision.pve_vm_gpu vs proxmox_kvm.

Both run in the same process against the same pvesim (HTTPS on 127.0.0.1, own CA, API token), each on its own
N stopped q35 VMs. The anchor is community.proxmox.proxmox_kvm with ``update: true`` and ``hostpci``, which
always writes the config. Prints wall time and API write calls of both runs, and the re-run ratios.

Usage: .venv/bin/python bench/proxmox/bench_vm_gpu.py [--vms 50]
"""

from __future__ import annotations

import argparse
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


def fixture(n):
    pci = [
        {"id": "0000:00:01.0", "class": "0x060400", "vendor": "0x8086", "device": "0x1901", "iommugroup": 1},
        {"id": "0000:01:00.0", "class": "0x030200", "vendor": "0x10de", "device": "0x20b5", "iommugroup": 1,
         "subsystem_vendor": "0x10de", "subsystem_device": "0x1533"},
    ]
    vms = {}
    for base in (1000, 2000):
        for i in range(n):
            vms[str(base + i)] = {"node": "pve1", "status": "stopped",
                                  "config": {"name": "vm%d" % (base + i), "machine": "q35", "bios": "ovmf", "memory": "4096"}}
    return {"nodes": {"pve1": {"pci": pci}},
            "mappings": {"a100": {"map": ["node=pve1,path=0000:01:00.0,id=10de:20b5,subsystem-id=10de:1533,iommugroup=1"]}},
            "vms": vms}


def playbook(path, server, n):
    auth = {"api_host": "127.0.0.1", "api_port": server.port, "api_user": "root@pam", "api_token_id": "ansible",
            "api_token_secret": "pvesim-token", "ca_path": server.ca, "validate_certs": True}
    ours = {"hosts": "localhost", "gather_facts": False, "name": "ours",
            "tasks": [{"name": "GPU by mapping", "gpuops.provision.pve_vm_gpu": dict(
                auth, node="pve1", vmid="{{ item }}", gpus=[{"mapping": "a100", "pcie": True}]),
                "loop": "{{ range(1000, 1000 + %d) | list }}" % n}]}
    anchor = {"hosts": "localhost", "gather_facts": False, "name": "anchor",
              "tasks": [{"name": "GPU by proxmox_kvm", ANCHOR: dict(
                  auth, node="pve1", vmid="{{ item }}", update=True, hostpci={"hostpci0": "mapping=a100,pcie=1"}),
                  "loop": "{{ range(2000, 2000 + %d) | list }}" % n}]}
    files = {}
    for play in (ours, anchor):
        files[play["name"]] = os.path.join(path, play["name"] + ".yml")
        with open(files[play["name"]], "w", encoding="utf-8") as handle:
            json.dump([play], handle)  # JSON is YAML
    return files


def stats(server, ctx):
    with urllib.request.urlopen(server.url + "/_sim/stats", context=ctx, timeout=10) as resp:
        return json.load(resp)["data"]["writes"]


def state(server, ctx):
    with urllib.request.urlopen(server.url + "/_sim/state", context=ctx, timeout=10) as resp:
        return json.load(resp)["data"]


def run(play, server, ctx, tmp):
    env = dict(os.environ)
    env.update({"PATH": VENV_BIN + os.pathsep + env.get("PATH", ""),
                "ANSIBLE_COLLECTIONS_PATH": os.path.join(ROOT, "build", "collections"),
                "ANSIBLE_LOCAL_TEMP": os.path.join(tmp, "ansible-tmp"), "ANSIBLE_HOME": os.path.join(tmp, "ansible-home")})
    before = stats(server, ctx)
    start = time.monotonic()
    proc = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           "-e", "ansible_python_interpreter=" + os.path.join(VENV_BIN, "python"), play],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit("%s failed:\n%s\n%s" % (play, proc.stdout[-4000:], proc.stderr[-4000:]))
    return wall, stats(server, ctx) - before


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
        for name in ("ours", "anchor"):
            results[name] = [run(plays[name], server, ctx, tmp) for dummy in range(2)]
        vms = state(server, ctx)["vms"]
        for base in (1000, 2000):
            wrong = [v for v in range(base, base + opts.vms) if vms[str(v)]["config"].get("hostpci0") != "mapping=a100,pcie=1"]
            if wrong:
                sys.exit("VMs without the expected hostpci0: %s" % wrong)
    finally:
        server.stop()
    print("pve_vm_gpu vs %s, %d VMs, GPU by mapping (pvesim, same run)" % (ANCHOR, opts.vms))
    print("%-28s %10s %8s %10s %8s" % ("", "first s", "writes", "re-run s", "writes"))
    for name, label in (("ours", "gpuops.provision.pve_vm_gpu"), ("anchor", ANCHOR)):
        (w1, c1), (w2, c2) = results[name]
        print("%-28s %10.1f %8d %10.1f %8d" % (label, w1, c1, w2, c2))
    oc1, (o2, oc2) = results["ours"][0][1], results["ours"][1]
    ac1, (a2, ac2) = results["anchor"][0][1], results["anchor"][1]
    print("re-run wall time ratio (anchor/ours): %.2f" % (a2 / o2))
    print("re-run write calls: ours %d, anchor %d (ratio anchor/ours: %s)" % (oc2, ac2, "%.1f" % (ac2 / oc2) if oc2 else "inf, ours made none"))
    print("first-run write calls ratio (anchor/ours): %.2f" % (ac1 / oc1 if oc1 else float("inf")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
