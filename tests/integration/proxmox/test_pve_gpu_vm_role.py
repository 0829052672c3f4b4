"""Role gpuops.provision.pve_gpu_vm against pvesim: mappings first, then VMs; idempotent; check mode writes nothing;
an impossible VM fails the play before any VM is written."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from .conftest import PYTHON, ROOT, VENV_BIN

MAPPINGS = [{"id": "h100", "description": "H100 of pve2", "map": [{"node": "pve2", "path": ["0000:02:00.0"]}]}]
VMS = [
    # stopped q35 VM on pve2: gets the new mapping
    {"vmid": 200, "gpus": [{"mapping": "h100", "pcie": True}]},
    # running VM on pve1: the existing a100 mapping, pending until its next start (restart never)
    {"vmid": 100, "node": "pve1", "gpus": [{"mapping": "a100", "pcie": True}]},
]


def run_role(sim, mappings, vms, check=False, verbosity=0, output=None, extra=None, auth_env=None):
    """Run the role in a play on localhost; return (play recap for localhost, failure messages, API writes made).
    auth_env: no connection variables in the play, these environment variables instead (an AWX credential)."""
    auth = sim.auth(token=True)
    connection = {} if auth_env is not None else {
        "pve_gpu_vm_api_host": auth["api_host"],
        "pve_gpu_vm_api_port": auth["api_port"],
        "pve_gpu_vm_api_user": auth["api_user"],
        "pve_gpu_vm_api_token_id": auth["api_token_id"],
        "pve_gpu_vm_api_token_secret": auth["api_token_secret"],
        "pve_gpu_vm_ca_path": auth["ca_path"],
    }
    play = [{
        "hosts": "localhost",
        "gather_facts": False,
        "vars": {
            **connection,
            "pve_gpu_vm_mappings": mappings,
            "pve_gpu_vm_vms": vms,
            **(extra or {}),
        },
        "roles": ["gpuops.provision.pve_gpu_vm"],
    }]
    playbook = sim.tmp / "play.yml"
    playbook.write_text(json.dumps(play), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXMOX_")}
    env.update(auth_env or {})
    env.update({
        "PATH": VENV_BIN + os.pathsep + env.get("PATH", ""),
        "ANSIBLE_COLLECTIONS_PATH": os.path.join(ROOT, "build", "collections"),
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_STDOUT_CALLBACK": "json",
        "ANSIBLE_LOCAL_TEMP": str(sim.tmp / "ansible-tmp"),
        "ANSIBLE_HOME": str(sim.tmp / "ansible-home"),
    })
    cmd = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=" + PYTHON, str(playbook)]
    if check:
        cmd.append("--check")
    if verbosity:
        cmd.append("-" + "v" * verbosity)
    before = sim.writes()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    if output is not None:
        # verbose runs print more than the JSON document: keep the text, parse from the document's first line
        output.append(proc.stdout + proc.stderr)
        proc.stdout = proc.stdout[proc.stdout.index("\n{\n") + 1:] if "\n{\n" in proc.stdout else proc.stdout
    try:
        out = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError("ansible-playbook output not parseable (rc=%s):\n%s\n%s" % (proc.returncode, proc.stdout, proc.stderr))
    failures = [h.get("msg", "") for play_ in out["plays"] for task in play_["tasks"]
                for h in task["hosts"].values() if h.get("failed")]
    failures += [r.get("msg", "") for play_ in out["plays"] for task in play_["tasks"]
                 for h in task["hosts"].values() for r in h.get("results", [])
                 if r.get("failed") or "exception" in r]
    return out["stats"]["localhost"], failures, sim.writes() - before


def test_role_applies_mappings_then_vms_and_is_idempotent(pvesim):
    stats, failures, writes = run_role(pvesim, MAPPINGS, VMS)
    assert stats["failures"] == 0, failures
    assert stats["changed"] == 2  # the mapping task and the VM batch task (two VMs)
    assert writes == 3  # POST mapping, POST config of 200, POST config of 100
    state = pvesim.state()
    assert [m for m in state["mappings"]["h100"]["map"] if "node=pve2" in m and "path=0000:02:00.0" in m]
    assert state["vms"]["200"]["config"]["hostpci0"] == "mapping=h100,pcie=1"
    assert state["vms"]["100"]["pending"] == {"hostpci0": "mapping=a100,pcie=1"}
    assert "hostpci0" not in state["vms"]["100"]["config"]

    stats, failures, writes = run_role(pvesim, MAPPINGS, VMS)
    assert stats["failures"] == 0, failures
    assert stats["changed"] == 0 and writes == 0


def test_check_mode_changes_nothing(pvesim):
    before = pvesim.state()
    stats, failures, writes = run_role(pvesim, MAPPINGS, VMS, check=True)
    assert stats["failures"] == 0, failures
    # The mapping and both VMs would change: reported, not written.
    assert stats["changed"] == 2  # mapping task + the VM batch task
    assert writes == 0
    after = pvesim.state()
    assert "h100" not in after["mappings"]
    assert after["vms"] == before["vms"]


def test_impossible_vm_fails_before_any_vm_is_written(pvesim):
    # VM 101 is i440fx: pcie=1 needs q35. It comes after VM 200, which must not be written either.
    vms = [{"vmid": 200, "gpus": [{"mapping": "a100", "pcie": True}]}, {"vmid": 101, "gpus": [{"mapping": "a100", "pcie": True}]}]
    stats, failures, writes = run_role(pvesim, [], vms)
    assert stats["failures"] == 1
    assert any("VM 101" in f and "q35" in f for f in failures), failures
    assert writes == 0
    state = pvesim.state()
    assert "hostpci0" not in state["vms"]["200"]["config"] and "hostpci0" not in state["vms"]["101"]["config"]


@pytest.mark.parametrize("vms", [[{"vmid": 200}], [{"vmid": 200, "gpus": []}, {"vmid": 200, "gpus": []}]])
def test_invalid_input_fails_without_api_writes(pvesim, vms):
    stats, failures, writes = run_role(pvesim, [], vms)
    assert stats["failures"] == 1 and writes == 0
    assert any("invalid input" in f for f in failures), failures


def test_connection_secrets_never_reach_the_output(pvesim):
    # issue 15 point 8: the role's argument spec marks the password and the token secret no_log, so neither the
    # argument validation nor any task shows them, at any verbosity.
    output = []
    stats, failures, dummy = run_role(pvesim, MAPPINGS, VMS, check=True, verbosity=4, output=output)
    assert stats["failures"] == 0, failures
    secret = pvesim.auth(token=True)["api_token_secret"]
    assert secret not in output[0]


def test_a_vm_whose_write_fails_is_named_and_the_others_are_written(make_pvesim):
    # A backup holds VM 200's lock (PVE refuses its config write); VM 100 is still written, in the same batch task.
    sim = make_pvesim(lock=("200", "backup"))
    vms = [{"vmid": 200, "gpus": [{"mapping": "a100", "pcie": True}]},
           {"vmid": 100, "gpus": [{"mapping": "a100", "pcie": True}]}]
    stats, failures, writes = run_role(sim, [], vms)
    assert stats["failures"] == 1
    assert any("1 of 2 VMs failed" in f and "VM is locked (backup)" in f and "the other VMs are done" in f
               for f in failures), failures
    state = sim.state()
    assert "hostpci0" not in state["vms"]["200"]["config"] and "hostpci0" not in state["vms"]["200"]["pending"]
    assert state["vms"]["100"]["pending"] == {"hostpci0": "mapping=a100,pcie=1"}
    assert writes == 2  # the refused config of 200 (a failed task) and the config of 100


def test_a_romfile_missing_on_the_node_fails_before_any_write(pvesim, tmp_path):
    # issue 39 point 8: QEMU fails the start without /usr/share/kvm/<romfile> on the VM's node and the API cannot see
    # that folder, so the role looks on the node (here localhost, its folder a temporary one) first.
    (tmp_path / "a100.rom").write_bytes(b"\x55\xaa")
    extra = {"pve_gpu_vm_node_hosts": {"pve2": "localhost"}, "pve_gpu_vm_romfile_dir": str(tmp_path),
             "pve_gpu_vm_api_password": pvesim.auth(token=False)["api_password"], "pve_gpu_vm_api_token_id": "",
             "pve_gpu_vm_api_token_secret": ""}
    vms = [{"vmid": 200, "node": "pve2", "gpus": [{"host": "0000:02:00.0", "pcie": True, "romfile": "gone.rom"}]}]
    stats, failures, writes = run_role(pvesim, [], vms, extra=extra)
    assert stats["failures"] == 1 and writes == 0, failures
    assert any(f == "pve_gpu_vm: VM 200: romfile gone.rom is not in %s on node pve2 (QEMU would fail its start); "
               "nothing changed" % tmp_path for f in failures), failures
    vms[0]["gpus"][0]["romfile"] = "a100.rom"
    stats, failures, writes = run_role(pvesim, [], vms, extra=extra)
    assert stats["failures"] == 0 and writes == 1, failures
    stats, failures, writes = run_role(pvesim, [], [{"vmid": 200, "gpus": [{"mapping": "a100", "romfile": "a100.rom"}]}],
                                       extra=extra)
    assert stats["failures"] == 1 and writes == 0
    assert any("VM 200 names romfile a100.rom but no node" in f for f in failures), failures


def credential_env(sim, **override):
    """The environment AWX's "gpuops Proxmox API token" credential injects (docs/awx.md)."""
    auth = sim.auth(token=True)
    env = {"PROXMOX_HOST": auth["api_host"], "PROXMOX_PORT": str(auth["api_port"]), "PROXMOX_USER": auth["api_user"],
           "PROXMOX_TOKEN_ID": auth["api_token_id"], "PROXMOX_TOKEN_SECRET": auth["api_token_secret"],
           "PROXMOX_VALIDATE_CERTS": "True", "PROXMOX_CA_PATH": auth["ca_path"]}
    env.update(override)
    return env


def test_the_credential_environment_alone_is_enough(pvesim):
    # issue 41 point 3: with only PROXMOX_* set (an AWX credential), the role asked for pve_gpu_vm_api_host, and once
    # that was set its defaults (root@pam, port 8006) beat the credential's user and port. Now the role leaves every
    # connection option to the modules' fallbacks; the simulator listens on a port other than 8006.
    assert str(pvesim.auth(token=True)["api_port"]) != "8006"
    stats, failures, writes = run_role(pvesim, MAPPINGS, VMS, auth_env=credential_env(pvesim))
    assert stats["failures"] == 0, failures
    assert writes == 3


def test_a_refused_token_names_endpoint_user_and_token_id(pvesim):
    auth = pvesim.auth(token=True)
    stats, failures, writes = run_role(pvesim, MAPPINGS, VMS, auth_env=credential_env(pvesim, PROXMOX_TOKEN_SECRET="wrong-secret-value"))
    assert stats["failures"] == 1 and writes == 0
    where = "%s:%s as %s, token id %s was refused" % (auth["api_host"], auth["api_port"], auth["api_user"], auth["api_token_id"])
    assert any("HTTP 401" in f and where in f for f in failures), failures
    assert not any("wrong-secret-value" in f or auth["api_token_secret"] in f for f in failures)


def test_without_any_connection_the_role_names_what_it_needs(pvesim):
    stats, failures, writes = run_role(pvesim, MAPPINGS, VMS, auth_env={})
    assert stats["failures"] == 1 and writes == 0
    assert any("the API host (pve_gpu_vm_api_host or PROXMOX_HOST)" in f for f in failures), failures
