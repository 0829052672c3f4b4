"""Unchanged third-party clients against pvesim: proxmoxer (token and password) and community.proxmox.proxmox_kvm."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAB = os.path.join(ROOT, "lab")
if LAB not in sys.path:
    sys.path.insert(0, LAB)

from pvesim.harness import running_pvesim  # noqa: E402  pylint: disable=wrong-import-position

proxmoxer = pytest.importorskip("proxmoxer")


@pytest.fixture
def pve():
    with running_pvesim() as handle:
        yield handle


@pytest.mark.parametrize("auth", ["token", "password"])
def test_proxmoxer_end_to_end(pve, auth):
    api = proxmoxer.ProxmoxAPI(pve.host, port=pve.port, user=pve.user, verify_ssl=pve.ca,
                               **({"token_name": pve.token_name, "token_value": pve.token_value} if auth == "token"
                                  else {"password": pve.password}))
    assert api.version.get()["release"] == "9.1"
    assert [n["node"] for n in api.nodes.get()] == ["pve1", "pve2"]
    gpus = [d for d in api.nodes("pve1").hardware.pci.get(**{"pci-class-blacklist": ""}) if d["vendor"] == "0x10de"]
    assert {d["id"] for d in gpus} >= {"0000:01:00.0", "0000:02:00.4", "0000:41:00.1"}
    assert api.nodes("pve2").hardware("pci/0000:21:00.0/mdev").get()[1]["type"] == "nvidia-223"
    api("cluster/mapping/pci").post(id="t4-pool", map=["node=pve2,path=0000:21:00.0,id=10de:1eb8,subsystem-id=10de:12a2,iommugroup=25"],
                                    mdev=1)
    digest = api.cluster.mapping.pci("t4-pool").get()["digest"]
    api.cluster.mapping.pci("t4-pool").put(description="pool", digest=digest)
    conf = api.nodes("pve2").qemu(200).config.get()
    api.nodes("pve2").qemu(200).config.put(hostpci0="mapping=t4-pool,mdev=nvidia-223", digest=conf["digest"])
    upid = api.nodes("pve2").qemu(200).status.start.post()
    from proxmoxer.tools import Tasks  # pylint: disable=import-outside-toplevel
    assert Tasks.blocking_status(api, upid, timeout=10)["exitstatus"] == "OK"
    assert Tasks.decode_upid(upid)["type"] == "qmstart"
    state = pve.state()
    assert state["vms"]["200"]["status"] == "running" and state["mappings"]["t4-pool"]["description"] == "pool"
    assert state["vms"]["200"]["mdevs"] == [["0000:21:00.0", "nvidia-223"]]


def test_proxmoxer_refuses_unknown_ca(pve):
    api = proxmoxer.ProxmoxAPI(pve.host, port=pve.port, user=pve.user, token_name=pve.token_name,
                               token_value=pve.token_value, verify_ssl=True)
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        api.version.get()


def test_server_cli_in_subprocess(tmp_path):
    with running_pvesim(mode="process", run_dir=str(tmp_path)) as pve:
        assert pve.api().nodes("pve1").qemu(100).status.current.get()["status"] == "running"
        assert (tmp_path / "ca.pem").read_text().startswith("-----BEGIN CERTIFICATE-----")
        assert int((tmp_path / "pid").read_text()) > 0
        assert pve.stats()["requests"] == 1


def _proxmox_kvm(pve, args, env_extra=None):
    env = dict(os.environ)
    env.update({
        "ANSIBLE_COLLECTIONS_PATH": os.path.join(ROOT, "build", "collections"),
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_STDOUT_CALLBACK": "json",
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "PATH": os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),
    })
    env.pop("REQUESTS_CA_BUNDLE", None)
    env.pop("CURL_CA_BUNDLE", None)
    env.update(env_extra or {})
    base = {"api_host": pve.host, "api_port": pve.port, "api_user": pve.user, "api_token_id": pve.token_name,
            "api_token_secret": pve.token_value}
    base.update(args)
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-c", "local",
                           "-m", "community.proxmox.proxmox_kvm", "-a", json.dumps(base)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False)
    try:
        return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError):
        pytest.fail(f"ansible output not understood: rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return None


def test_community_proxmox_kvm_update_hostpci(pve):
    pytest.importorskip("ansible_collections.community.proxmox")
    pve.reset_stats()
    update = {"node": "pve1", "vmid": 100, "update": True, "hostpci": {"hostpci1": "mapping=l40s-vgpu,mdev=nvidia-1150,pcie=1"}}
    # 1. verification stays on: without a CA the module fails on TLS
    failed = _proxmox_kvm(pve, update)
    assert failed.get("failed") and "CERTIFICATE_VERIFY_FAILED" in failed["msg"]
    assert pve.stats()["writes"] == 0
    # 2. with ca_path (validate_certs defaults to true) the update goes through; VM 100 runs, so it is pending
    result = _proxmox_kvm(pve, dict(update, ca_path=pve.ca))
    assert result.get("changed") and not result.get("failed"), result
    vm = pve.state()["vms"]["100"]
    assert vm["pending"] == {"hostpci1": "mapping=l40s-vgpu,mdev=nvidia-1150,pcie=1"} and "hostpci1" not in vm["config"]
    assert pve.stats()["by_route"]["PUT /nodes/{node}/qemu/{vmid}/config"] == 1
    # 3. REQUESTS_CA_BUNDLE also works (requests uses it when verify is plain True)
    result = _proxmox_kvm(pve, {"node": "pve2", "vmid": 200, "update": True, "hostpci": {"hostpci0": "mapping=a100,pcie=1"}},
                          {"REQUESTS_CA_BUNDLE": pve.ca})
    assert result.get("changed") and not result.get("failed"), result
    assert pve.state()["vms"]["200"]["config"]["hostpci0"] == "mapping=a100,pcie=1"  # stopped VM: applied directly
    # 4. a malformed hostpci comes back as PVE's parameter error
    result = _proxmox_kvm(pve, {"node": "pve2", "vmid": 200, "update": True, "hostpci": {"hostpci0": "pcie=yes-please"},
                                "ca_path": pve.ca})
    assert result.get("failed") and "hostpci0" in result["msg"] and "Parameter verification failed" in result["msg"]


def test_silent_and_plain_http_clients_do_not_block_the_server(pve):
    import socket  # pylint: disable=import-outside-toplevel
    with socket.create_connection((pve.host, pve.port), timeout=5) as silent, \
            socket.create_connection((pve.host, pve.port), timeout=5) as plain:
        plain.sendall(b"GET /api2/json/version HTTP/1.1\r\nHost: x\r\n\r\n")
        assert silent and pve.api().version.get()["version"]
