"""Issue 15 points 3, 6 and 7: unreachable, silent and wrong endpoints fail clearly and in time; one TLS rule.

The modules run in-process (tests/conftest.py run_module); the endpoints are a TCP listener that never answers
(a blackholed server), pvesim (an HTTPS server that is no vCenter) and the vcsim-gpu stand-in.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import sys
import time

import pytest

from ansible_collections.gpuops.provision.plugins.modules import pve_gpu_info, vsphere_gpu_info

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture
def blackhole():
    """A port that accepts TCP connections and never sends a byte; a test still waiting after 60 s fails."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)

    def hung(signum, frame):
        raise AssertionError("the module is still waiting for the silent server after 60 s")
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    yield srv.getsockname()[1]
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)
    srv.close()


@pytest.fixture(scope="module")
def pvesim(tmp_path_factory):
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from lab.pvesim.httpd import Server  # pylint: disable=import-outside-toplevel
    server = Server(os.path.join(ROOT, "lab", "pvesim", "fixtures", "lab.json"),
                    run_dir=str(tmp_path_factory.mktemp("pvesim")), host="127.0.0.1", port=0).start()
    yield server
    server.stop()


def pve_args(server, **kw):
    args = dict(api_host="127.0.0.1", api_port=server.port, api_user="root@pam", api_token_id="ansible",
                api_token_secret=server.sim.users["root@pam"]["tokens"]["ansible"], ca_path=server.ca)
    args.update(kw)
    return args


def vc_args(port, **kw):
    args = dict(hostname="127.0.0.1", port=port, username="user", password="pass")
    args.update(kw)
    return args


def test_silent_vcenter_fails_within_the_api_timeout(run_module, blackhole):
    start = time.monotonic()
    res = run_module(vsphere_gpu_info, vc_args(blackhole, validate_certs=False, api_timeout=2))
    took = time.monotonic() - start
    assert res.get("failed") and "127.0.0.1:%d" % blackhole in res["msg"], res
    assert "api_timeout=2s" in res["msg"], res["msg"]
    assert took < 15, took  # without a timeout pyvmomi waits for ever


def test_silent_proxmox_fails_within_the_api_timeout(run_module, blackhole, pvesim):
    start = time.monotonic()
    res = run_module(pve_gpu_info, pve_args(pvesim, api_port=blackhole, api_timeout=2))
    assert res.get("failed") and "timed out" in res["msg"].lower(), res
    assert time.monotonic() - start < 15


def test_https_port_that_is_no_vcenter_fails_naming_it(run_module, pvesim):
    res = run_module(vsphere_gpu_info, vc_args(pvesim.port, ca_path=pvesim.ca))
    assert res.get("failed"), res
    assert "127.0.0.1:%d" % pvesim.port in res["msg"] and "does not answer as a vSphere API endpoint" in res["msg"]


def test_proxmox_validate_certs_false_turns_verification_off_and_warns(run_module, pvesim):
    # Before: ca_path won over validate_certs=false (verification stayed on), without a word.
    res = run_module(pve_gpu_info, pve_args(pvesim, validate_certs=False, ca_path="/nonexistent/ca.pem"))
    assert not res.get("failed"), res.get("msg")
    warnings = json.dumps(res.get("warnings", []))
    assert "TLS certificate verification is off" in warnings and "ca_path /nonexistent/ca.pem is not used" in warnings
    res = run_module(pve_gpu_info, pve_args(pvesim))
    assert not res.get("failed") and not res.get("warnings")


def test_vsphere_validate_certs_false_warns(run_module):
    lab = _vcsim_lab()
    if not lab.available():
        pytest.skip("vcsim-gpu cannot be built here")
    with lab.vcsim(hosts=1, vms=0, timeout=120) as sim:
        base = vc_args(int(sim.port), username=sim.username, password=sim.password)
        res = run_module(vsphere_gpu_info, dict(base, validate_certs=False, ca_path=sim.ca))
        assert not res.get("failed"), res.get("msg")
        assert "TLS certificate verification is off" in json.dumps(res.get("warnings", [])), res
        res = run_module(vsphere_gpu_info, dict(base, ca_path=sim.ca))
        assert not res.get("failed") and "TLS" not in json.dumps(res.get("warnings", []))


def _vcsim_lab():
    spec = importlib.util.spec_from_file_location("connections_vcsim_lab", os.path.join(ROOT, "lab", "vcsim", "vcsim_lab.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod
