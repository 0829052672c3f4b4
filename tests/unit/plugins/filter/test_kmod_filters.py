# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/filter/kmod.py and roles/nvidia_driver/tasks/kernel.yml, secure_boot_gate.yml and kernel_module.yml
(issue 22 points 3 and 9; issue 37 points 2 and 8: the Secure Boot question and the next kernel are settled in the
plan, before any package moves).

The filters as registered, their documentation files, and the task file run for real: ansible-playbook against
localhost (connection local) with fake ``mokutil``, ``dkms`` and ``grubby`` scripts on PATH and a fake boot directory.
The fakes print what the real tools print (formats: github:dell/dkms dkms.in do_status(); github:lcp/mokutil
src/mokutil.c sb_state_internal() and test_key()).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import sysconfig

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.module_utils._drivers import kernel_module as K
from ansible_collections.gpuops.provision.plugins.plugin_utils._role_filters import kmod

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
FILTER_DIR = os.path.join(ROOT, "plugins", "filter")
TASK_DIR = os.path.join(ROOT, "roles", "nvidia_driver", "tasks")
NAMES = sorted([
    "kmod_dkms_signing_config", "kmod_headers_packages", "kmod_headers_plan", "kmod_mok_test_key",
    "kmod_module_check", "kmod_next_kernel", "kmod_sb_state", "kmod_secure_boot_plan",
])


# --- the filters ---------------------------------------------------------------------------------------------------

def test_filters_are_registered_and_wrap_the_pure_code():
    f = kmod.filters()
    assert sorted(f) == NAMES
    status = K.parse_dkms_status("nvidia/535.261.03, 6.1.0-28-amd64, x86_64: installed\n")
    assert status[0]["kernel"] == "6.1.0-28-amd64"
    nxt = f["kmod_next_kernel"](["/boot/vmlinuz-6.1.0-28-amd64", "/boot/vmlinuz-6.1.0-30-amd64"], "6.1.0-28-amd64")
    assert nxt == "6.1.0-30-amd64"
    assert f["kmod_module_check"](status, nxt)["reason"] == \
        "no nvidia module for kernel 6.1.0-30-amd64 (dkms: built for 6.1.0-28-amd64 only)"
    assert f["kmod_headers_packages"]("6.1.0-28-amd64", "Debian", "Debian") == [
        "linux-headers-6.1.0-28-amd64", "linux-headers-amd64"]
    sb = f["kmod_sb_state"]("SecureBoot enabled\n", 0)
    assert sb["secure_boot"] is True
    plan = f["kmod_secure_boot_plan"](sb, "", "", None)
    assert not plan["ok"] and "mokutil --import" in plan["message"]
    assert f["kmod_mok_test_key"]("/var/lib/dkms/mok.pub is not enrolled\n", 1)["enrolled"] is False
    assert "mok_certificate=" in f["kmod_dkms_signing_config"]("/var/lib/dkms/mok.key", "/var/lib/dkms/mok.pub")


def test_bad_input_is_a_filter_error_naming_the_filter():
    f = kmod.filters()
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.provision\.kmod_next_kernel: scheme must be deb or rpm"):
        f["kmod_next_kernel"](["6.1.0-28-amd64"], None, "apk")
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.provision\.kmod_headers_packages: .*OS families"):
        f["kmod_headers_packages"]("6.4.0-150600.23.25-default", "SLES", "Suse")
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.provision\.kmod_dkms_signing_config: .*absolute path"):
        f["kmod_dkms_signing_config"]("mok.key", "/var/lib/dkms/mok.pub")
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.provision\.kmod_module_check: bad arguments"):
        f["kmod_module_check"]("")


# --- the task file, run for real -----------------------------------------------------------------------------------

FAKE_MOKUTIL = """#!/bin/sh
# Fake mokutil: prints what src/mokutil.c prints, read from files the test writes.
case "$1" in
  --sb-state) cat "$FAKE_DIR/sb_state"; exit "$(cat "$FAKE_DIR/sb_state.rc")" ;;
  --test-key) echo "$2 $(cat "$FAKE_DIR/test_key")"; exit "$(cat "$FAKE_DIR/test_key.rc")" ;;
esac
echo "fake mokutil: unexpected $*" >&2; exit 99
"""
FAKE_DKMS = """#!/bin/sh
# Fake dkms: `dkms status` prints the file the test wrote; build/install only log their arguments.
echo "$*" >> "$FAKE_DIR/dkms.log"
case "$1" in
  status) cat "$FAKE_DIR/dkms_status" ;;
  --version) echo "dkms-3.0.10" ;;
  build|install) ;;
  *) echo "fake dkms: unexpected $*" >&2; exit 99 ;;
esac
"""
FAKE_GRUBBY = """#!/bin/sh
[ "$1" = "--default-kernel" ] && cat "$FAKE_DIR/grubby" && exit 0
exit 99
"""
PLAYBOOK = """- name: Kernel reads and Secure Boot gate of the plan, then the kernel module check before the reboot
  hosts: all
  gather_facts: false
  tasks:
    - name: Run the role's plan-time kernel reads
      ansible.builtin.include_tasks: {tasks}/kernel.yml
    - name: The plan builds the module (validate.yml decides it)
      ansible.builtin.set_fact:
        __nvidia_driver_builds_module: "{{{{ nvidia_driver_build_kernel_module }}}}"
    - name: Run the role's Secure Boot gate
      ansible.builtin.include_tasks: {tasks}/secure_boot_gate.yml
    - name: Run the role's kernel module task file
      ansible.builtin.include_tasks: {tasks}/kernel_module.yml
"""


def _script(path, text):
    path.write_text(text, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def host(tmp_path):
    """A fake host: bin/ with the fake tools, boot/ with kernels, files with the tools' answers; run() plays."""
    fake = tmp_path / "fake"
    fake.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _script(bindir / "mokutil", FAKE_MOKUTIL)
    _script(bindir / "dkms", FAKE_DKMS)
    _script(bindir / "grubby", FAKE_GRUBBY)
    boot = tmp_path / "boot"
    boot.mkdir()
    (tmp_path / "dkms-conf.d").mkdir()
    playbook = tmp_path / "play.yml"
    playbook.write_text(PLAYBOOK.format(tasks=TASK_DIR), encoding="utf-8")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"gpu-node-1": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}), encoding="utf-8")

    class Host:
        def __init__(self):
            self.fake = fake
            self.boot = boot
            self.config_dir = tmp_path / "dkms-conf.d"
            self.answers(sb_state="SecureBoot disabled\n", test_key="is not enrolled", test_key_rc=1,
                         dkms_status="", grubby="")

        def answers(self, sb_state=None, sb_rc=0, test_key=None, test_key_rc=0, dkms_status=None, grubby=None):
            for name, value in (("sb_state", sb_state), ("test_key", test_key), ("dkms_status", dkms_status),
                                ("grubby", grubby)):
                if value is not None:
                    (fake / name).write_text(value, encoding="utf-8")
            (fake / "sb_state.rc").write_text(str(sb_rc), encoding="utf-8")
            (fake / "test_key.rc").write_text(str(test_key_rc), encoding="utf-8")

        def kernels(self, *releases):
            for rel in releases:
                (boot / ("vmlinuz-" + rel)).write_bytes(b"")

        def run(self, facts, check=False, path_extra=True, **variables):
            extra = {
                "ansible_facts": facts,
                "nvidia_driver_version": "535.261.03-1",
                "nvidia_driver_build_kernel_module": True,
                "nvidia_driver_secure_boot_check": True,
                "nvidia_driver_mok_signing_key": "",
                "nvidia_driver_mok_certificate": "",
                "nvidia_driver_boot_dir": str(boot),
                "nvidia_driver_dkms_module": "nvidia",
                "nvidia_driver_dkms_config_dir": str(self.config_dir),
            }
            extra.update(variables)
            env = dict(os.environ)
            env.update({
                "PATH": os.pathsep.join(([str(bindir)] if path_extra else []) + [os.path.dirname(sys.executable),
                                                                                 env.get("PATH", "")]),
                "FAKE_DIR": str(fake),
                "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join([os.path.join(ROOT, "build", "collections"),
                                                             sysconfig.get_paths()["purelib"]]),
                "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
                "ANSIBLE_LOCALHOST_WARNING": "0",
                "ANSIBLE_NOCOLOR": "1",
                "ANSIBLE_RETRY_FILES_ENABLED": "0",
            })
            cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(inventory),
                   str(playbook), "-e", json.dumps(extra)] + (["--check"] if check else [])
            proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300,
                                  check=False)
            try:
                out = json.loads(proc.stdout)
            except ValueError:
                raise AssertionError("no JSON from ansible-playbook (rc %d):\n%s\n%s"
                                     % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])) from None
            return proc.returncode, Result(out)

        def dkms_calls(self):
            log = fake / "dkms.log"
            return log.read_text(encoding="utf-8").splitlines() if log.exists() else []

    return Host()


class Result:
    """The JSON callback's output, by task name."""

    def __init__(self, out):
        self.out = out
        self.tasks = {}
        for play in out["plays"]:
            for task in play["tasks"]:
                self.tasks.setdefault(task["task"]["name"], task["hosts"].get("gpu-node-1", {}))

    def failed(self):
        return {name: r for name, r in self.tasks.items() if r.get("failed")}

    def __getitem__(self, name):
        return self.tasks[name]


DEBIAN = {"kernel": "6.1.0-28-amd64", "os_family": "Debian", "distribution": "Debian"}
RHEL = {"kernel": "5.14.0-503.14.1.el9_5.x86_64", "os_family": "RedHat", "distribution": "RedHat"}
FAIL_SB = "Stop when Secure Boot would refuse the module the plan builds (nothing has been changed)"
FAIL_KMOD = "Stop before the reboot when the next kernel has no kernel module"


def test_play_fails_naming_the_next_kernel_when_its_module_is_missing(host):
    """The kernel was upgraded with the driver; DKMS built the module for the running kernel only (dkms 3 format)."""
    host.kernels("6.1.0-28-amd64", "6.1.0-30-amd64")
    host.answers(dkms_status="nvidia/535.261.03, 6.1.0-28-amd64, x86_64: installed\n")
    rc, res = host.run(DEBIAN)
    assert rc == 2, res.out
    assert list(res.failed()) == [FAIL_KMOD]
    msg = res[FAIL_KMOD]["msg"]
    assert msg.startswith("gpu-node-1: no nvidia 535.261.03-1 module for kernel 6.1.0-30-amd64 "
                          "(dkms: built for 6.1.0-28-amd64 only)")
    assert "dkms autoinstall -k 6.1.0-30-amd64" in msg and msg.endswith("Not rebooting.")
    # In check mode with driver packages that would change, DKMS cannot have built the new module yet: a warning.
    rc, res = host.run(DEBIAN, check=True, __nvidia_driver_install={"changed": True})
    assert rc == 0, res.failed()
    assert "is checked on the real run" in res["Warn that the kernel module is checked on the real run"]["msg"]


def test_play_passes_when_the_module_is_installed_for_the_next_kernel(host):
    """Both kernels have the module (dkms 2 format, "module, version")."""
    host.kernels("6.1.0-28-amd64", "6.1.0-30-amd64")
    host.answers(dkms_status="nvidia, 535.261.03, 6.1.0-28-amd64, x86_64: installed\n"
                             "nvidia, 535.261.03, 6.1.0-30-amd64, x86_64: installed\n")
    rc, res = host.run(DEBIAN)
    assert rc == 0, res.failed()
    assert res["Report the kernel module for the next boot"]["msg"] == \
        "gpu-node-1: nvidia/535.261.03 is installed for kernel 6.1.0-30-amd64"
    # Secure Boot off: nothing written, nothing rebuilt, nothing changed.
    assert res["Make DKMS sign the kernel modules it builds with the MOK key"].get("skipped")
    assert host.dkms_calls() == ["status"]
    assert not any(r.get("changed") for r in res.tasks.values())


def test_play_rhel_follows_grubby_default(host):
    """The module exists for the newest kernel only; grubby's default is the older one: fail naming that kernel."""
    host.kernels("5.14.0-427.13.1.el9_4.x86_64", "5.14.0-503.14.1.el9_5.x86_64")
    host.answers(dkms_status="nvidia/535.261.03, 5.14.0-503.14.1.el9_5.x86_64, x86_64: installed\n",
                 grubby="/boot/vmlinuz-5.14.0-427.13.1.el9_4.x86_64\n")
    rc, res = host.run(RHEL)
    assert rc == 2 and "for kernel 5.14.0-427.13.1.el9_4.x86_64" in res[FAIL_KMOD]["msg"]
    host.answers(grubby="/boot/vmlinuz-5.14.0-503.14.1.el9_5.x86_64\n")
    rc, res = host.run(RHEL)
    assert rc == 0, res.failed()


def test_play_secure_boot_on_without_key_fails_with_the_enrolment_steps(host):
    host.kernels("6.1.0-28-amd64")
    host.answers(sb_state="SecureBoot enabled\n", dkms_status="nvidia/535.261.03, 6.1.0-28-amd64, x86_64: installed\n")
    rc, res = host.run(DEBIAN)
    assert rc == 2 and list(res.failed()) == [FAIL_SB]
    msg = res[FAIL_SB]["msg"]
    assert msg.startswith("gpu-node-1: Secure Boot is enabled") and "mokutil --import /var/lib/dkms/mok.pub" in msg
    assert msg.endswith("Nothing was changed.")
    # It stopped in the plan, before looking at DKMS at all.
    assert host.dkms_calls() == []
    # A plan that builds no module (Ubuntu's precompiled signed modules, userspace only) passes the gate.
    rc, res = host.run(DEBIAN, nvidia_driver_build_kernel_module=False)
    assert rc == 0, res.failed()
    assert res[FAIL_SB].get("skipped")


def test_play_secure_boot_on_with_key_not_enrolled_fails(host, tmp_path):
    key = tmp_path / "mok.key"
    key.write_text("key", encoding="utf-8")
    host.kernels("6.1.0-28-amd64")
    host.answers(sb_state="SecureBoot enabled\n", test_key="is already in the enrollment request", test_key_rc=0)
    rc, res = host.run(DEBIAN, nvidia_driver_mok_signing_key=str(key), nvidia_driver_mok_certificate="/var/lib/dkms/mok.pub")
    assert rc == 2 and "enrolment is not confirmed yet" in res[FAIL_SB]["msg"]


def test_play_secure_boot_on_with_enrolled_key_writes_the_signing_config(host, tmp_path):
    key = tmp_path / "mok.key"
    key.write_text("key", encoding="utf-8")
    host.kernels("6.1.0-28-amd64", "6.1.0-30-amd64")
    host.answers(sb_state="SecureBoot enabled\n", test_key="is already enrolled", test_key_rc=0,
                 dkms_status="nvidia/535.261.03, 6.1.0-28-amd64, x86_64: installed\n"
                             "nvidia/535.261.03, 6.1.0-30-amd64, x86_64: installed\n")
    cert = "/var/lib/dkms/mok.pub"
    # Check mode first: reports the file it would write, writes nothing, rebuilds nothing.
    rc, res = host.run(DEBIAN, check=True, nvidia_driver_mok_signing_key=str(key), nvidia_driver_mok_certificate=cert)
    assert rc == 0, res.failed()
    assert res["Make DKMS sign the kernel modules it builds with the MOK key"]["changed"] is True
    assert list(host.config_dir.iterdir()) == []
    assert [c for c in host.dkms_calls() if not c.startswith(("status", "--version"))] == []
    if os.geteuid() != 0:
        pytest.skip("writing a root-owned file needs root")
    rc, res = host.run(DEBIAN, nvidia_driver_mok_signing_key=str(key), nvidia_driver_mok_certificate=cert)
    assert rc == 0, res.failed()
    conf = host.config_dir / "gpuops-nvidia-mok.conf"
    assert oct(conf.stat().st_mode & 0o777) == "0o644"
    assert 'mok_signing_key="%s"\nmok_certificate="%s"\n' % (key, cert) in conf.read_text(encoding="utf-8")
    # The modules built before the configuration existed are rebuilt, signed: running and next kernel.
    rebuilt = [c for c in host.dkms_calls() if c.startswith(("build", "install"))]
    assert rebuilt == ["build --force -m nvidia -v 535.261.03 -k 6.1.0-28-amd64",
                       "build --force -m nvidia -v 535.261.03 -k 6.1.0-30-amd64",
                       "install --force -m nvidia -v 535.261.03 -k 6.1.0-28-amd64",
                       "install --force -m nvidia -v 535.261.03 -k 6.1.0-30-amd64"]
    # A second run changes nothing.
    before = len(host.dkms_calls())
    rc, res = host.run(DEBIAN, nvidia_driver_mok_signing_key=str(key), nvidia_driver_mok_certificate=cert)
    assert rc == 0 and not any(r.get("changed") for r in res.tasks.values())
    assert not [c for c in host.dkms_calls()[before:] if c.startswith(("build", "install"))]


def test_play_without_mokutil_warns_and_goes_on(host, tmp_path):
    """mokutil missing: the Secure Boot state is unknown, the play warns and still checks the module."""
    host.kernels("6.1.0-28-amd64")
    host.answers(dkms_status="nvidia/535.261.03, 6.1.0-28-amd64, x86_64: installed\n")
    (tmp_path / "bin" / "mokutil").unlink()
    rc, res = host.run(DEBIAN)
    assert rc == 0, res.failed()
    warning = res["Warn that the Secure Boot state is unknown"]["msg"]
    assert warning.startswith("gpu-node-1: WARNING - Secure Boot state unknown (mokutil is not installed)")
    assert res["Report the kernel module for the next boot"]["msg"].endswith("for kernel 6.1.0-28-amd64")
