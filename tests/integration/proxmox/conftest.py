"""Fixtures for the Proxmox VE module tests: a pvesim per test (HTTPS on 127.0.0.1, own CA) and a module runner.

The modules run in the test's process (tests/helpers/module_runs.py), against the simulator over HTTPS: a module test
needs no controller process. The role tests run ansible-playbook."""

from __future__ import annotations

import copy
import json
import os
import ssl
import sys
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from lab.pvesim.httpd import Server  # noqa: E402  pylint: disable=wrong-import-position

VENV_BIN = os.path.join(ROOT, ".venv", "bin")  # the role tests' ansible-playbook
PYTHON = os.path.join(VENV_BIN, "python")


# The PCI device records and the L40S mdev types are the unit tests' (tests/helpers/pvesim_inproc.py).
from pvesim_inproc import NV, L40S_TYPES, dev as _dev  # noqa: E402  pylint: disable=wrong-import-position,import-error
from module_runs import run_as_task  # noqa: E402  pylint: disable=wrong-import-position,import-error

FIXTURE = {
    "nodes": {
        "pve1": {"pci": [
            _dev("0000:00:01.0", "0x060400", 1, "0x8086", "0x1901", device_name="PCIe root port"),
            # A100: isolated (shares group 1 with its root port only)
            _dev("0000:01:00.0", "0x030200", 1, NV, "0x20b5", ("0x10de", "0x1533"), device_name="GA100 [A100 PCIe 80GB]"),
            # RTX with HDMI audio: own functions only in group 2
            _dev("0000:02:00.0", "0x030000", 2, NV, "0x2204", ("0x1458", "0x403b"), device_name="GA102 [GeForce RTX 3090]"),
            _dev("0000:02:00.1", "0x040300", 2, NV, "0x1aef", ("0x1458", "0x403b")),
            # T4 sharing group 3 with a NIC
            _dev("0000:03:00.0", "0x030200", 3, NV, "0x1eb8", ("0x10de", "0x12a2"), device_name="TU104GL [Tesla T4]"),
            _dev("0000:04:00.0", "0x020000", 3, "0x8086", "0x1533", ("0x8086", "0x0000")),
            # L40S with SR-IOV VFs (NVIDIA >= 6.8 vGPU interface)
            _dev("0000:41:00.0", "0x030200", 40, NV, "0x26b9", ("0x10de", "0x1851"), device_name="AD102GL [L40S]",
                 vgpu_types=L40S_TYPES, nvidia=1),
            _dev("0000:41:00.4", "0x030200", 41, NV, "0x26b9", ("0x10de", "0x1851"), physfn="0000:41:00.0"),
            _dev("0000:41:00.5", "0x030200", 42, NV, "0x26b9", ("0x10de", "0x1851"), physfn="0000:41:00.0"),
        ]},
        "pve2": {"pci": [
            _dev("0000:01:00.0", "0x030200", 10, NV, "0x20b5", ("0x10de", "0x1533"), device_name="GA100 [A100 PCIe 80GB]"),
            _dev("0000:02:00.0", "0x030200", 11, NV, "0x2330", ("0x10de", "0x16c1"), device_name="GH100 [H100 SXM5 80GB]"),
        ]},
    },
    "mappings": {
        "a100": {"map": ["node=pve1,path=0000:01:00.0,id=10de:20b5,subsystem-id=10de:1533,iommugroup=1",
                         "node=pve2,path=0000:01:00.0,id=10de:20b5,subsystem-id=10de:1533,iommugroup=10"]},
        # stale: pve1's 0000:01:00.0 is an A100 (10de:20b5), not an H100
        "wrongid": {"map": ["node=pve1,path=0000:01:00.0,id=10de:2330,subsystem-id=10de:1533,iommugroup=1"]},
        "t4": {"map": ["node=pve1,path=0000:03:00.0,id=10de:1eb8,subsystem-id=10de:12a2,iommugroup=3"]},
        "l40s-vgpu": {"mdev": 1, "map": ["node=pve1,path=0000:41:00.4,id=10de:26b9,subsystem-id=10de:1851,iommugroup=41",
                                         "node=pve1,path=0000:41:00.5,id=10de:26b9,subsystem-id=10de:1851,iommugroup=42"]},
    },
    "vms": {
        "100": {"node": "pve1", "status": "running", "config": {"name": "ml1", "machine": "q35", "bios": "ovmf", "memory": "8192"}},
        "101": {"node": "pve1", "status": "stopped", "config": {"name": "legacy", "memory": "4096"}},
        "102": {"node": "pve1", "status": "stopped",
                "config": {"name": "rtx", "machine": "pc-q35-9.2", "bios": "ovmf", "hostpci0": "0000:02:00,pcie=on,x-vga=1"}},
        "200": {"node": "pve2", "status": "stopped", "config": {"name": "ml2", "machine": "q35", "bios": "ovmf"}},
    },
}


class Sim:
    """A started pvesim with helpers to run modules against it and to read its state and write counters."""

    def __init__(self, fixture, tmp_path, run_module=None):
        # No module runner for a simulator that serves other callers only (tests/installed runs an AWX job at it).
        self.run_module = run_module
        self.server = Server(fixture, run_dir=str(tmp_path / "pvesim"), host="127.0.0.1", port=0).start()
        root = fixture.get("users", {}).get("root@pam", {"password": "pvesim", "tokens": {"ansible": "pvesim-token"}})
        self.password, self.token = root["password"], root["tokens"]["ansible"]
        self.ctx = ssl.create_default_context(cafile=self.server.ca)
        self.tmp = tmp_path

    def stop(self):
        self.server.stop()

    def _get(self, path):
        with urllib.request.urlopen(self.server.url + path, context=self.ctx, timeout=10) as resp:
            return json.load(resp)["data"]

    def state(self):
        return self._get("/_sim/state")

    def writes(self):
        return self._get("/_sim/stats")["writes"]

    def auth(self, token=True):
        args = {"api_host": "127.0.0.1", "api_port": self.server.port, "api_user": "root@pam", "ca_path": self.server.ca}
        if token:
            args.update(api_token_id="ansible", api_token_secret=self.token)
        else:
            args.update(api_password=self.password)
        return args

    def run(self, module, args, check=False, diff=False, token=True):
        """Run gpuops.provision.<module> in this process; return (result dict, writes made)."""
        assert self.run_module is not None, "this Sim was started without the run_module fixture"
        full = dict(self.auth(token=token))
        full.update(args)
        before = self.writes()
        result = run_as_task(self.run_module, module, full, check=check, diff=diff)
        return result, self.writes() - before


@pytest.fixture
def fixture_data():
    return copy.deepcopy(FIXTURE)


@pytest.fixture
def pvesim(tmp_path, fixture_data, run_module):
    sim = Sim(fixture_data, tmp_path, run_module)
    yield sim
    sim.stop()


@pytest.fixture
def lab_pvesim(tmp_path, run_module):
    """pvesim with the shared lab cluster (lab/pvesim/fixtures/lab.json): running VMs that already hold GPUs and vGPUs.

    The T4's nvidia-223 is limited to one instance, which running VM 201 holds (so none is available).
    """
    with open(os.path.join(ROOT, "lab", "pvesim", "fixtures", "lab.json"), encoding="utf-8") as handle:
        data = json.load(handle)
    t4 = [d for d in data["nodes"]["pve2"]["pci"] if d["id"].endswith("21:00.0")][0]
    [t for t in t4["mdev_types"] if t["type"] == "nvidia-223"][0]["max"] = 1
    sim = Sim(data, tmp_path, run_module)
    yield sim
    sim.stop()


@pytest.fixture
def make_pvesim(tmp_path, run_module):
    """Factory for pvesims on variants of FIXTURE: ``make_pvesim(version="8.3.5", offline=("pve2",),
    hostpci0=("102", "mapping=a100"))`` (a release, nodes that are down, VM config keys set to values)."""
    started = []

    def make(version=None, offline=(), **vm_config):
        fixture = copy.deepcopy(FIXTURE)
        if version:
            fixture["version"] = {"version": version, "release": version.rsplit(".", 1)[0], "repoid": "0123456789abcdef"}
        for node in offline:
            fixture["nodes"][node]["status"] = "offline"
        for key, (vmid, value) in vm_config.items():
            fixture["vms"][vmid]["config"][key] = value
        sim = Sim(fixture, tmp_path / ("sim%d" % len(started)), run_module)
        started.append(sim)
        return sim
    yield make
    for sim in started:
        sim.stop()
