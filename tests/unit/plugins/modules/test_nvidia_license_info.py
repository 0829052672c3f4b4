# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia_license_info against gpusim (lab/gpusim: nvidia-ml-py over its libnvidia-ml.so.1), and the pure helpers of licensing_gridd."""

from __future__ import annotations

import datetime
import json
import os
import sys
import time

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._licensing import gridd as licensing_gridd
from ansible_collections.gpuops.provision.plugins.modules import nvidia_license_info

from gpusim_nvml import use_gpusim  # pylint: disable=import-error

TEMPLATE = """# /etc/nvidia/gridd.conf.template - Configuration file for NVIDIA Grid Daemon
# Description: Set Feature to be enabled
# Possible values:
#    0 => for unlicensed state
#    4 => for NVIDIA Virtual Compute Server
FeatureType=4
#EnableUI=TRUE
ServerPort = "7070"
"""


def _in_days(days):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=days, hours=2)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_licensed_guest_with_expiry_days_left_and_gridd(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"driver_version": "550.163.01", "gpus": [
        {"model": "NVIDIA L40S", "virtualization_mode": "vgpu",
         "license": {"feature": "compute", "licensed": True, "expiry": _in_days(45)}},
        {"model": "NVIDIA L40S", "virtualization_mode": "vgpu", "license": {"feature": "compute", "licensed": True}},
    ]})
    nv = sys.modules["pynvml"]
    # the binding quirk this module must survive: the expiry constants are 1-tuples
    assert nv.NVML_GRID_LICENSE_EXPIRY_VALID == (2,)
    conf = tmp_path / "gridd.conf"
    conf.write_text(TEMPLATE)
    tokens = tmp_path / "tok"
    tokens.mkdir()
    (tokens / "client_configuration_token.tok").write_text("SECRET-TOKEN-CONTENT")
    os.chmod(tokens / "client_configuration_token.tok", 0o744)
    (tokens / "README").write_text("not a token")
    res = run_module(nvidia_license_info, {"gridd_conf": str(conf), "token_dir": str(tokens)})
    assert not res.get("failed") and res["changed"] is False
    assert res["licensed"] is True and res["vgpu_guest"] is True
    g0, g1 = res["gpus"]
    assert g0["product"] == "NVIDIA Virtual Compute Server" and g0["feature"] == "compute"
    assert g0["expiry_status"] == "valid" and g0["expiry"] and g0["days_left"] == 45
    assert g1["expiry_status"] == "permanent" and g1["days_left"] is None and g1["state"] == "licensed"
    gridd = res["gridd"]
    assert gridd["exists"] and gridd["feature_type"] == 4 and gridd["feature_name"] == "compute"
    assert gridd["settings"] == {"FeatureType": "4", "ServerPort": "7070"}
    assert gridd["tokens"] == [{"name": "client_configuration_token.tok", "mode": "0744", "size": 20}]
    assert "SECRET-TOKEN-CONTENT" not in json.dumps(res)


def test_unlicensed_guest(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [
        {"model": "NVIDIA L40S", "virtualization_mode": "vgpu", "license": {"feature": "compute", "licensed": False}}]})
    res = run_module(nvidia_license_info, {"gridd_conf": str(tmp_path / "missing.conf")})
    assert res["licensed"] is False
    assert res["gpus"][0]["state"] == "unlicensed" and res["gpus"][0]["days_left"] is None
    assert res["gridd"]["exists"] is False and res["gridd"]["token_dir"] == "/etc/nvidia/ClientConfigToken"


def test_bare_metal_is_not_licensable(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": "NVIDIA H100 80GB HBM3", "mig_mode": "disabled"}]})
    res = run_module(nvidia_license_info, {"gridd_conf": str(tmp_path / "none")})
    assert res["licensed"] is None and res["vgpu_guest"] is False
    assert res["gpus"][0]["supported"] is False and res["gpus"][0]["state"] == "not licensable"


def test_token_dir_from_gridd_conf(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": []})
    tokdir = tmp_path / "custom"
    tokdir.mkdir()
    (tokdir / "x.tok").write_text("t")
    conf = tmp_path / "gridd.conf"
    conf.write_text("FeatureType=1\nClientConfigTokenPath=%s\n" % tokdir)
    res = run_module(nvidia_license_info, {"gridd_conf": str(conf)})
    assert res["gridd"]["token_dir"] == str(tokdir) and [t["name"] for t in res["gridd"]["tokens"]] == ["x.tok"]
    assert res["gridd"]["feature_name"] == "vgpu"


def test_no_driver_is_reported_not_failed(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [], "driver_loaded": False})
    res = run_module(nvidia_license_info, {"gridd_conf": str(tmp_path / "none")})
    assert not res.get("failed")
    assert res["nvml"]["available"] is False and "not loaded" in res["nvml"]["reason"]
    assert res["licensed"] is None and res["gpus"] == []


def test_parse_gridd_conf_last_wins_and_quotes():
    text = "# c\nFeatureType=0\n\nFeatureType=2\n ServerAddress = \"dls.example\" \nbroken line\n#EnableUI=TRUE\n"
    assert licensing_gridd.parse_gridd_conf(text) == {"FeatureType": "2", "ServerAddress": "dls.example"}
    s = licensing_gridd.gridd_summary({"FeatureType": "3"}, True, "/p", "/t", [])
    assert s["feature_type"] == 3 and s["feature_name"] == "reserved"


@pytest.mark.parametrize("expiry,days", [("2027-01-10T12:00:00Z", 10), ("2027-01-01T11:59:59Z", 0), ("2026-12-31T11:00:00Z", -1), (None, None)])
def test_days_left(expiry, days):
    now = datetime.datetime(2026, 12, 31, 12, 0, 0, tzinfo=datetime.timezone.utc)
    assert licensing_gridd.days_left(expiry, now) == days


# --- the licence service of the client configuration token (service_check) -----------------------------------------

def service_setup(monkeypatch, tmp_path, endpoints):
    from nls_service import write_token  # pylint: disable=import-error,import-outside-toplevel
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": "NVIDIA L40S", "virtualization_mode": "vgpu",
                                                 "vgpu_name": "NVIDIA L40S-24C"}]})
    tokens = write_token(tmp_path / "node", endpoints)
    gridd = tmp_path / "gridd.conf"
    gridd.write_text("FeatureType=4\nClientConfigTokenPath=%s\n" % tokens)
    return {"gridd_conf": str(gridd), "service_check": True, "connect_timeout": 2}


def test_service_check_reaches_every_endpoint_of_the_token_and_never_returns_it(monkeypatch, tmp_path, run_module):
    from nls_service import TlsListener  # pylint: disable=import-error,import-outside-toplevel
    up = TlsListener(tmp_path)
    down = TlsListener(tmp_path)
    down.close()
    try:
        args = service_setup(monkeypatch, tmp_path, [("127.0.0.1", up.port), ("127.0.0.1", down.port)])
        res = run_module(nvidia_license_info, args)
    finally:
        up.close()
    svc = res["service"]
    assert svc["error"] is None and svc["token"]["file"] == "client_configuration_token.tok"
    first, second = svc["endpoints"]
    assert (first["port"], first["kind"], first["services"]) == (up.port, "DLS", ["auth", "lease"])
    assert first["tcp"] and first["tls"] and first["tls_version"].startswith("TLSv1") and first["error"] is None
    assert not second["tcp"] and not second["tls"]
    assert second["error"].startswith("TCP connection to 127.0.0.1:%d failed: " % down.port)
    assert up.handshakes == 1
    token_text = open(os.path.join(str(tmp_path), "node", "tokens", "client_configuration_token.tok")).read()
    assert token_text.split(".")[1] not in json.dumps(res)  # the token's contents never leave the node
    # The vGPU type names the series the licence must fit.
    assert res["gpus"][0]["model"] == "NVIDIA L40S-24C"


def test_service_check_with_verification_refuses_a_self_signed_service(monkeypatch, tmp_path, run_module):
    from nls_service import TlsListener  # pylint: disable=import-error,import-outside-toplevel
    up = TlsListener(tmp_path)
    try:
        args = service_setup(monkeypatch, tmp_path, [("127.0.0.1", up.port)])
        res = run_module(nvidia_license_info, dict(args, validate_certs=True))
    finally:
        up.close()
    ep = res["service"]["endpoints"][0]
    assert ep["tcp"] and not ep["tls"] and "CERTIFICATE_VERIFY_FAILED" in ep["error"], ep


def test_service_check_without_a_token_or_with_a_broken_one(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": [{"model": "NVIDIA L40S", "virtualization_mode": "vgpu"}]})
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    gridd = tmp_path / "gridd.conf"
    gridd.write_text("ClientConfigTokenPath=%s\n" % tokens)
    res = run_module(nvidia_license_info, {"gridd_conf": str(gridd), "service_check": True})
    assert res["service"] == {"token": None, "endpoints": [],
                              "error": "no client configuration token (*.tok) in %s" % tokens}
    (tokens / "client_configuration_token.tok").write_text("not-a-token-secret-part")
    res = run_module(nvidia_license_info, {"gridd_conf": str(gridd), "service_check": True})
    assert res["service"]["error"].startswith("client_configuration_token.tok: ")
    assert "not-a-token-secret-part" not in json.dumps(res)
    bad = run_module(nvidia_license_info, {"gridd_conf": str(gridd), "service_check": True, "connect_timeout": 0})
    assert bad["failed"] and "connect_timeout=0 is out of range" in bad["msg"]


# --- issue 37 point 10: the service check goes the way gridd goes, through gridd.conf's proxy --------------------------

def test_service_check_through_the_proxy_gridd_uses(monkeypatch, tmp_path, run_module):
    """A guest whose only way out is the proxy in gridd.conf: the check reaches the service through it (CONNECT), and a
    proxy that refuses the target or wants credentials fails the endpoint naming the proxy and its answer."""
    from nls_service import TlsListener, connect_proxy  # pylint: disable=import-error,import-outside-toplevel
    service = TlsListener(tmp_path)
    target = "127.0.0.1:%d" % service.port
    proxy = connect_proxy(allow=[target])
    strict = connect_proxy(require_auth=True)
    try:
        args = service_setup(monkeypatch, tmp_path, [("127.0.0.1", service.port)])
        with open(args["gridd_conf"], "a", encoding="utf-8") as fh:
            fh.write("ProxyServerAddress=127.0.0.1\nProxyServerPort=%d\n" % proxy.port)
        res = run_module(nvidia_license_info, args)
        ep = res["service"]["endpoints"][0]
        assert ep["tcp"] and ep["tls"] and ep["error"] is None and ep["proxy"] == "127.0.0.1:%d" % proxy.port, ep
        # The server thread counts the handshake after the client's side of it completes: wait for it (the fresh-clone
        # make test on a loaded machine read 0 here).
        deadline = time.monotonic() + 10
        while service.handshakes < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proxy.targets == [target] and service.handshakes == 1
        # a proxy that wants credentials (gridd's ProxyUserName): 407, named
        gridd = open(args["gridd_conf"], encoding="utf-8").read().replace("ProxyServerPort=%d" % proxy.port,
                                                                          "ProxyServerPort=%d" % strict.port)
        with open(args["gridd_conf"], "w", encoding="utf-8") as fh:
            fh.write(gridd)
        ep = run_module(nvidia_license_info, args)["service"]["endpoints"][0]
        assert not ep["tcp"] and not ep["tls"] and ep["error"] == (
            "the proxy 127.0.0.1:%d refused CONNECT %s: HTTP/1.1 407 Proxy Authentication Required (the proxy wants "
            "credentials: gridd's ProxyUserName/ProxyCredentialsFilePath are not probed)" % (strict.port, target))
        assert service.handshakes == 1   # nothing got past it
        # a proxy address without its port fails the run, naming the setting
        with open(args["gridd_conf"], "w", encoding="utf-8") as fh:
            fh.write("FeatureType=4\nClientConfigTokenPath=%s\nProxyServerAddress=proxy.example\n"
                     % os.path.join(str(tmp_path), "node", "tokens"))
        res = run_module(nvidia_license_info, args)
        assert res["failed"] and res["msg"] == ("gridd.conf ProxyServerAddress=proxy.example needs ProxyServerPort "
                                                "(1-65535), got None")
    finally:
        proxy.close()
        strict.close()
        service.close()
