# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/plugin_utils/_role_messages.py: the roles' failure messages, byte for byte.

Every expected string below is what the role's old ``{% ... %}`` template rendered for the same input under
ansible-core's Templar (issue 20 moved the loops into these functions): the double spaces, the trailing space and the
empty text for None are the old template's, kept so that nothing that reads these messages sees a change. The cases
marked "old: undefined" are inputs the old template failed on (a key it had no default for); there the message now
says what it can instead of failing the task with a template error.
"""

from __future__ import annotations

import glob
import os

import pytest

from ansible_collections.gpuops.provision.plugins.plugin_utils import _role_messages as M

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

GRIDD = {"settings": {"FeatureType": 4}, "token_dir": "/tok", "tokens": [{"name": "a.tok"}, {"name": "b.tok"}]}
TAIL = " Check journalctl -u nvidia-gridd and that the guest reaches the CLS/DLS instance."
DEFAULT_GRIDD = " gridd.conf FeatureType=unset, tokens in /etc/nvidia/ClientConfigToken: none." + TAIL


def license_msg(state):
    return M.license_timeout(state, "guest-1", 3, "/etc/nvidia/ClientConfigToken", "nvidia-gridd")


@pytest.mark.parametrize("state, want", [
    ({"nvml": {"available": False, "reason": "driver not loaded"}, "gridd": GRIDD},
     "guest-1: no licence after 3 s. NVML is not available: driver not loaded.  gridd.conf FeatureType=4, tokens in /tok:"
     " a.tok, b.tok." + TAIL),
    # a failed module result: no nvml, no gridd -> its msg, then every default
    ({"failed": True, "msg": "module failed"}, "guest-1: no licence after 3 s. NVML is not available: module failed. " + DEFAULT_GRIDD),
    ({"failed": True}, "guest-1: no licence after 3 s. NVML is not available: unknown. " + DEFAULT_GRIDD),
    ({"nvml": None, "msg": "boom"}, "guest-1: no licence after 3 s. NVML is not available: boom. " + DEFAULT_GRIDD),
    # a reason that is None prints nothing (default() does not replace None); settings without FeatureType: unset
    ({"nvml": {"available": False, "reason": None}, "gridd": {"settings": {}, "tokens": []}},
     "guest-1: no licence after 3 s. NVML is not available: . " + DEFAULT_GRIDD),
    ({"nvml": {"available": True}, "licensed": None, "gpus": [], "gridd": GRIDD},
     "guest-1: no licence after 3 s. NVML reports no licensable GPU (not a vGPU guest?).  gridd.conf FeatureType=4, tokens in"
     " /tok: a.tok, b.tok." + TAIL),
    # each GPU: its state, else its error, else '?'; a model that is missing is '?', one that is None prints nothing
    ({"nvml": {"available": True}, "licensed": False, "gridd": GRIDD,
      "gpus": [{"index": 0, "model": "NVIDIA L40S", "state": "unlicensed"}, {"index": 1, "error": "Unknown Error"},
               {"index": 2}, {"index": 3, "model": None, "state": None, "error": "x"}]},
     "guest-1: no licence after 3 s. GPU 0 (NVIDIA L40S): unlicensed. GPU 1 (?): Unknown Error. GPU 2 (?): ?. GPU 3 (): . "
     " gridd.conf FeatureType=4, tokens in /tok: a.tok, b.tok." + TAIL),
    ({"nvml": {"available": True}, "licensed": False, "gpus": [], "gridd": {"token_dir": "/t", "tokens": []}},
     "guest-1: no licence after 3 s.  gridd.conf FeatureType=unset, tokens in /t: none." + TAIL),
    # available is truthy, not only True; settings None reads as unset
    ({"nvml": {"available": "yes"}, "licensed": False, "gpus": [{"index": 0, "state": "expired"}], "gridd": {"settings": None}},
     "guest-1: no licence after 3 s. GPU 0 (?): expired. " + DEFAULT_GRIDD),
    # old: undefined (no gpus list): no GPUs named
    ({"nvml": {"available": True}, "licensed": False}, "guest-1: no licence after 3 s. " + DEFAULT_GRIDD),
])
def test_license_timeout(state, want):
    assert license_msg(state) == want


def test_license_timeout_names_the_role_values():
    got = M.license_timeout({"failed": True}, "g9", 600, "/opt/tok", "gridd-x")
    assert got == ("g9: no licence after 600 s. NVML is not available: unknown.  gridd.conf FeatureType=unset, tokens in"
                   " /opt/tok: none. Check journalctl -u gridd-x and that the guest reaches the CLS/DLS instance.")
    # a token without a name (old: undefined) reads as a name None would: Jinja's join printed None
    assert "tokens in /tok: None, b." in license_msg({"gridd": {"token_dir": "/tok", "tokens": [{}, {"name": "b"}]}})


CHECKS = [{"id": "vfio_bound", "status": "fail", "evidence": "0000:17:00.0 bound to nouveau", "remedy": "bind vfio-pci"},
          {"id": "gpu_persistence", "status": "warn", "evidence": "off", "remedy": "enable nvidia-persistenced"},
          {"id": "iommu", "status": "pass", "evidence": "on", "remedy": ""},
          {"id": "cdi", "status": "fail", "evidence": None, "remedy": None}]


@pytest.mark.parametrize("report, fail_on_warn, want", [
    ({"failed_checks": ["vfio_bound", "cdi"], "checks": CHECKS}, False,
     "n1 is NOT READY: vfio_bound, cdi failed.  [vfio_bound] 0000:17:00.0 bound to nouveau -- remedy: bind vfio-pci"
     "  [cdi]  -- remedy:  "),
    ({"failed_checks": ["vfio_bound", "cdi"], "checks": CHECKS}, True,
     "n1 is NOT READY: vfio_bound, cdi failed.  [vfio_bound] 0000:17:00.0 bound to nouveau -- remedy: bind vfio-pci"
     "  [gpu_persistence] off -- remedy: enable nvidia-persistenced  [cdi]  -- remedy:  "),
    ({"failed_checks": ["gpu_persistence"], "checks": CHECKS[1:3]}, True,
     "n1 is NOT READY: gpu_persistence failed.  [gpu_persistence] off -- remedy: enable nvidia-persistenced "),
    ({"failed_checks": ["gpu_persistence"], "checks": CHECKS[1:3]}, False, "n1 is NOT READY: gpu_persistence failed. "),
    ({"failed_checks": [], "checks": []}, False, "n1 is NOT READY:  failed. "),
    ({}, True, "n1 is NOT READY:  failed. "),  # old: undefined
])
def test_preflight_not_ready(report, fail_on_warn, want):
    assert M.preflight_not_ready(report, "n1", fail_on_warn) == want


HEAD = "gpu-1: NVIDIA driver 535.999.01 is not available in the configured repositories for "


@pytest.mark.parametrize("resolved, want", [
    ({"missing": [], "offered": {}}, HEAD + " (offered: ). Nothing was changed."),
    ({"missing": ["nvidia-driver"], "offered": {"nvidia-driver": ["550.1-1", "535.2-1"]}},
     HEAD + "nvidia-driver (offered: nvidia-driver: 550.1-1, 535.2-1). Nothing was changed."),
    # an empty list or None: none; no entry at all (x, old: undefined): none
    ({"missing": ["nvidia-driver", "libnvidia-ml1", "cuda-drivers", "x"],
      "offered": {"nvidia-driver": [], "libnvidia-ml1": ["1-1"], "cuda-drivers": None}},
     HEAD + "nvidia-driver, libnvidia-ml1, cuda-drivers, x (offered: nvidia-driver: none; libnvidia-ml1: 1-1; cuda-drivers: none;"
     " x: none). Nothing was changed."),
    ({}, HEAD + " (offered: ). Nothing was changed."),  # old: undefined
])
def test_driver_unavailable(resolved, want):
    assert M.driver_unavailable(resolved, "gpu-1", "535.999.01") == want


OFF = "gpu-2: after installing NVIDIA driver 535.261.03 these driver packages are on another version: "
PIN = ". Check the apt pin (/etc/apt/preferences.d) and the repository's dependencies."


@pytest.mark.parametrize("facts, want", [
    ({"off_driver": [], "packages": {}}, OFF + PIN),
    ({"off_driver": ["cuda-drivers"], "packages": {"cuda-drivers": "560.35.03-1"}}, OFF + "cuda-drivers=560.35.03-1" + PIN),
    ({"off_driver": ["libnvidia-ml1", "nvidia-driver", "x"], "packages": {"libnvidia-ml1": "560.1-1", "nvidia-driver": None}},
     OFF + "libnvidia-ml1=560.1-1, nvidia-driver=, x=" + PIN),  # x, old: undefined
    ({}, OFF + PIN),  # old: undefined
])
def test_driver_off_pin(facts, want):
    assert M.driver_off_pin(facts, "gpu-2", "535.261.03") == want


STOP = "MIG reconfigure stopped before touching any node; invalid input on "


@pytest.mark.parametrize("bad, want", [
    ([], STOP + "0 node(s): "),
    ([{"node": "node-2", "error": "profile 3g.40gb does not fit"}], STOP + "1 node(s): [node-2] profile 3g.40gb does not fit"),
    ([{"node": "node-2", "error": "a"}, {"node": "node-3", "error": "unknown config no-such-config"}, {"node": "node-4", "error": None}],
     STOP + "3 node(s): [node-2] a; [node-3] unknown config no-such-config; [node-4] "),
    (None, STOP + "0 node(s): "),  # old: undefined
])
def test_mig_invalid_plans(bad, want):
    assert M.mig_invalid_plans(bad) == want


def test_no_jinja_statements_left_in_roles_or_playbooks():
    """Issue 20: role and playbook logic is in filters; a task's message holds a filter call, not a {% %} program."""
    found = []
    for pattern in ("roles/**/*.yml", "playbooks/**/*.yml"):
        for path in glob.glob(os.path.join(ROOT, pattern), recursive=True):
            with open(path, encoding="utf-8") as fh:
                found += ["%s:%d" % (os.path.relpath(path, ROOT), n) for n, line in enumerate(fh, 1) if "{%" in line]
    assert found == []
