# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia_license role against a temp-dir root and a gpusim vGPU guest.

gpusim has no nvidia-gridd, so a watcher thread plays its part: once the token file appears it marks the GPU
licensed in the gpusim state, which is what NVML then reports. That proves the role waits for the licence (it
cannot pass before the token is placed) and that the timeout is enforced when no licence comes."""

from __future__ import annotations

import grp
import json
import os
import pwd
import sys
import threading
import time
import uuid

import pytest
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from preflight_lab import ansible_env, run_playbook, write_inventory  # noqa: E402  pylint: disable=import-error,wrong-import-position
from gpusim_nvml import library_env  # noqa: E402  pylint: disable=import-error,wrong-import-position

pytestmark = pytest.mark.slow
PLAYBOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "license_role.yml")
TEMPLATE = """# gridd.conf.template shipped by the driver
# Description: Set Feature to be enabled
# Possible values:
#    0 => for unlicensed state
#    4 => for NVIDIA Virtual Compute Server
FeatureType=0
# Description: Enable/disable the licensing page in nvidia-settings
#EnableUI=TRUE
# Site-specific key the role must not touch
LingerInterval=120
ServerAddress=legacy-ls.example.com
"""


class Guest:
    def __init__(self, base):
        self.base = str(base)
        self.etc = os.path.join(self.base, "etc", "nvidia")
        os.makedirs(self.etc)
        with open(os.path.join(self.etc, "gridd.conf.template"), "w", encoding="utf-8") as fh:
            fh.write(TEMPLATE)
        self.state = os.path.join(self.base, "gpusim.json")
        self.set_licensed(False)
        self.token = "NLS-TOKEN-%s" % uuid.uuid4().hex
        self.token_dir = os.path.join(self.etc, "ClientConfigToken")
        self.token_file = os.path.join(self.token_dir, "client_configuration_token.tok")
        # the token travels the way a vault or AWX credential gives it: as a variable, from a vars file
        self.secrets = os.path.join(self.base, "secrets.yml")
        with open(self.secrets, "w", encoding="utf-8") as fh:
            yaml.safe_dump({"nvidia_license_token": self.token}, fh)

    def secret_args(self):
        return ["-e", "@" + self.secrets]

    def set_licensed(self, licensed):
        lic = {"feature": "compute", "licensed": licensed}
        if licensed:
            lic["expiry"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 90 * 86400))
        tmp = self.state + ".new"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"driver_version": "550.163.01", "gpus": [{"model": "NVIDIA L40S", "virtualization_mode": "vgpu",
                                                                 "license": lic}]}, fh)
        os.replace(tmp, self.state)

    def inventory(self, **extra):
        hv = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "nvidia_license_gridd_conf": os.path.join(self.etc, "gridd.conf"),
            "nvidia_license_gridd_template": os.path.join(self.etc, "gridd.conf.template"),
            "nvidia_license_token_dir": self.token_dir,
            "nvidia_license_owner": pwd.getpwuid(os.getuid()).pw_name,
            "nvidia_license_group": grp.getgrgid(os.getgid()).gr_name,
            "nvidia_license_manage_service": False,  # no systemd here; the watcher plays nvidia-gridd
            "nvidia_license_gridd_settings": {"EnableUI": "FALSE"},
            "nvidia_license_timeout": 30,
            "nvidia_license_poll_interval": 1,
            "nvidia_license_environment": library_env(self.state),
        }
        hv.update(extra)
        return write_inventory(os.path.join(self.base, "hosts.yml"), {"guest-1": hv}, group="guests")

    def gridd_conf(self):
        with open(os.path.join(self.etc, "gridd.conf"), encoding="utf-8") as fh:
            return fh.read()


class GriddStandIn(threading.Thread):
    """Licenses the guest a moment after the token file shows up, as nvidia-gridd does after its restart."""

    def __init__(self, guest):
        super().__init__(daemon=True)
        self.guest = guest
        self.stop = threading.Event()
        self.licensed_at = None

    def run(self):
        while not self.stop.is_set():
            if os.path.exists(self.guest.token_file):
                time.sleep(1.5)
                self.guest.set_licensed(True)
                self.licensed_at = time.time()
                return
            time.sleep(0.1)


def test_configures_waits_and_never_shows_the_token(tmp_path):
    guest = Guest(tmp_path)
    inv = guest.inventory()
    gridd = GriddStandIn(guest)
    gridd.start()
    try:
        rc, _out, stdout, stderr = run_playbook(PLAYBOOK, inv, env=ansible_env(), json_output=False, verbosity=3,
                                                extra_args=guest.secret_args() + ["--diff"])
    finally:
        gridd.stop.set()
    assert rc == 0, stdout[-3000:] + stderr[-3000:]
    # acceptance: the token appears nowhere in the output at -vvv with --diff
    assert guest.token not in stdout and guest.token not in stderr
    assert "client_configuration_token.tok" in stdout  # the task did run and was shown (without content)
    assert gridd.licensed_at is not None  # the role could only finish after the stand-in licensed the GPU
    with open(guest.token_file, encoding="utf-8") as fh:
        assert fh.read() == guest.token
    assert oct(os.stat(guest.token_file).st_mode & 0o777) == "0o600"  # issue 15: a credential, not world-readable
    conf = guest.gridd_conf()
    lines = conf.splitlines()
    # issue 37 point 10: a vGPU guest gets FeatureType 1 (its vGPU type picks the licence), not 4
    assert "FeatureType=1" in lines and "FeatureType=0" not in lines and "FeatureType=4" not in lines
    assert "EnableUI=FALSE" in lines and "#EnableUI=TRUE" not in lines
    # unrelated keys and comments survive; the default token directory needs no ClientConfigTokenPath
    assert "LingerInterval=120" in lines and "ServerAddress=legacy-ls.example.com" in lines
    assert "#    4 => for NVIDIA Virtual Compute Server" in lines
    assert "ClientConfigTokenPath" not in conf or "/ClientConfigToken" in conf

    # second run: nothing changes, and the licence is seen at once
    rc, out, _so, se = run_playbook(PLAYBOOK, inv, extra_args=guest.secret_args())
    assert rc == 0, se
    assert out["stats"]["guest-1"]["changed"] == 0
    assert guest.token not in json.dumps(out)


def test_times_out_with_a_clear_message_when_no_licence_comes(tmp_path):
    guest = Guest(tmp_path)
    inv = guest.inventory(nvidia_license_timeout=3, nvidia_license_gridd_absent_keys=["ServerAddress"])
    start = time.monotonic()
    rc, out, _so, _se = run_playbook(PLAYBOOK, inv, extra_args=guest.secret_args())
    elapsed = time.monotonic() - start
    assert rc != 0
    failed = [t for p in out["plays"] for t in p["tasks"] if t["task"]["name"].endswith("Fail when the licence was not acquired in time")]
    msg = failed[0]["hosts"]["guest-1"]["msg"]
    assert "guest-1: no licence after 3 s" in msg and "GPU 0 (NVIDIA L40S): unlicensed" in msg
    assert "FeatureType=1" in msg and "client_configuration_token.tok" in msg and "journalctl -u nvidia-gridd" in msg
    assert elapsed < 120
    assert "ServerAddress" not in guest.gridd_conf()  # the legacy key was removed on request
    assert guest.token not in json.dumps(out)


def test_missing_token_fails_before_changing_anything(tmp_path):
    guest = Guest(tmp_path)
    inv = guest.inventory()
    rc, out, _so, _se = run_playbook(PLAYBOOK, inv, extra_vars={"nvidia_license_token": ""})
    assert rc != 0
    assert not os.path.exists(os.path.join(guest.etc, "gridd.conf")) and not os.path.exists(guest.token_dir)
    assert "nvidia_license_token must be set" in json.dumps(out)


@pytest.mark.parametrize("mode, feature_type", [("passthrough", "4"), ("none", "4")])
def test_feature_type_auto_on_a_passed_through_gpu_is_compute(tmp_path, mode, feature_type):
    """Issue 37 point 10: FeatureType follows the GPU NVML shows - 4 (Virtual Compute Server) where the GPU is passed
    through or on bare metal; an explicit value still wins."""
    guest = Guest(tmp_path)
    with open(guest.state, "w", encoding="utf-8") as fh:
        json.dump({"driver_version": "550.163.01", "gpus": [{"model": "NVIDIA L40S", "virtualization_mode": mode}]}, fh)
    rc, _out, _so, se = run_playbook(PLAYBOOK, guest.inventory(nvidia_license_wait=False), extra_args=guest.secret_args())
    assert rc == 0, se
    assert "FeatureType=%s" % feature_type in guest.gridd_conf().splitlines()
    rc, _out, _so, se = run_playbook(PLAYBOOK, guest.inventory(nvidia_license_wait=False, nvidia_license_feature_type=2),
                                     extra_args=guest.secret_args())
    assert rc == 0, se
    assert "FeatureType=2" in guest.gridd_conf().splitlines()


def test_feature_type_auto_without_nvml_fails_before_changing_anything(tmp_path):
    guest = Guest(tmp_path)
    inv = guest.inventory(nvidia_license_environment={"PYTHONPATH": str(tmp_path / "no-nvml")})
    rc, out, _so, _se = run_playbook(PLAYBOOK, inv, extra_args=guest.secret_args())
    assert rc != 0
    assert "set nvidia_license_feature_type" in json.dumps(out)
    assert not os.path.exists(os.path.join(guest.etc, "gridd.conf")) and not os.path.exists(guest.token_dir)
