# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""_licensing/gridd.py: gridd.conf, the proxy gridd uses, the licence entry of each GPU (every field), days left and the
host's verdict."""

from __future__ import annotations

import datetime

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._licensing import gridd as L

NOW = datetime.datetime(2026, 12, 4, 12, 0, tzinfo=datetime.timezone.utc)

GRIDD = """# /etc/nvidia/gridd.conf
ServerAddress=old
  FeatureType = 4
ClientConfigTokenPath="/etc/nvidia/ClientConfigToken"
EnableUI='FALSE'
   # indented comment
# FeatureType=1 (a commented-out setting)
ServerURL=https://dls.example.com/request?a=b
Xed=XvalueX
Quoted="a'
OneChar="
Empty=
no equals sign here
ServerAddress=dls.example.com
"""


def test_parse_gridd_conf_active_settings_last_wins_quotes_stripped():
    assert L.parse_gridd_conf(GRIDD) == {
        "ServerAddress": "dls.example.com", "FeatureType": "4", "ClientConfigTokenPath": "/etc/nvidia/ClientConfigToken",
        "EnableUI": "FALSE", "Quoted": "\"a'", "OneChar": "\"", "Empty": "",
        "ServerURL": "https://dls.example.com/request?a=b", "Xed": "XvalueX"}
    assert L.parse_gridd_conf("") == {} and L.parse_gridd_conf(None) == {}
    assert L.parse_gridd_conf('A=""') == {"A": ""}


@pytest.mark.parametrize("feature,number,name", [
    ("0", 0, "unlicensed"), ("1", 1, "vgpu"), ("2", 2, "nvidia_rtx"), ("4", 4, "compute"), ("3", 3, "reserved"),
    ("x", "x", "reserved"), (None, None, None),
])
def test_gridd_summary(feature, number, name):
    settings = {} if feature is None else {"FeatureType": feature}
    tokens = [{"name": "a.tok", "mode": "0600", "size": 2048}]
    assert L.gridd_summary(settings, True, "/etc/nvidia/gridd.conf", "/tok", tokens) == {
        "path": "/etc/nvidia/gridd.conf", "exists": True, "settings": settings, "feature_type": number,
        "feature_name": name, "token_dir": "/tok", "tokens": tokens}


def test_parse_expiry_and_days_left_both_sides_of_a_day():
    assert L.parse_expiry("2027-05-27T00:08:28Z") == datetime.datetime(2027, 5, 27, 0, 8, 28, tzinfo=datetime.timezone.utc)
    assert L.parse_expiry("") is None and L.parse_expiry(None) is None
    day = datetime.timedelta(days=1)
    assert L.days_left(NOW + day, NOW) == 1
    assert L.days_left(NOW + day - datetime.timedelta(seconds=1), NOW) == 0
    assert L.days_left(NOW, NOW) == 0
    assert L.days_left(NOW - datetime.timedelta(seconds=1), NOW) == -1
    assert L.days_left("2026-12-14T12:00:00Z", NOW) == 10
    assert L.days_left(None, NOW) is None and L.days_left("", NOW) is None


IDENT = {"uuid": "GPU-1", "model": "NVIDIA L4", "pci_address": "0000:17:00.0"}


def entry(**over):
    base = {"index": 1, "uuid": "GPU-1", "model": "NVIDIA L4", "virtualization_mode": "vgpu", "supported": True,
            "licensed": True, "feature": "vgpu", "product": "NVIDIA Virtual Compute Server",
            "expiry_status": "valid", "expiry": "2026-12-24T12:00:00Z", "days_left": 20, "state": "licensed"}
    base.update(over)
    return base


FEAT = {"feature": "vgpu", "product": "NVIDIA Virtual Compute Server", "enabled": True, "licensed": True,
        "expiry_status": "valid", "expiry": "2026-12-24T12:00:00Z"}


def test_gpu_licence_licensed_with_days_left():
    lic = {"supported": True, "licensed": True, "features": [FEAT]}
    assert L.gpu_licence(1, IDENT, {"mode": "vgpu"}, lic, NOW) == entry()


def test_gpu_licence_prefers_an_enabled_licensed_feature():
    off = dict(FEAT, feature="rtx", product="RTX vWS", enabled=False, licensed=True)
    unlicensed = dict(FEAT, feature="grid", product="vPC", licensed=False)
    lic = {"supported": True, "licensed": True, "features": [off, unlicensed, FEAT]}
    assert L.gpu_licence(1, IDENT, {"mode": "vgpu"}, lic, NOW) == entry()
    # none enabled: all count; none licensed: the first
    lic = {"supported": True, "licensed": False, "features": [
        dict(FEAT, enabled=False, licensed=False, feature="a"), dict(FEAT, enabled=False, licensed=False, feature="b")]}
    assert L.gpu_licence(1, IDENT, {"mode": "vgpu"}, lic, NOW) == entry(licensed=False, feature="a", days_left=None,
                                                                        state="unlicensed")


def test_gpu_licence_licensed_without_expiry_and_not_licensable():
    lic = {"supported": True, "licensed": True, "features": [dict(FEAT, expiry=None)]}
    assert L.gpu_licence(1, IDENT, {"mode": "vgpu"}, lic, NOW) == entry(expiry=None, days_left=None)
    # a GPU that does not support licensing is never licensed, whatever the flag says
    assert L.gpu_licence(0, {}, None, {"supported": False, "licensed": True}, NOW) == {
        "index": 0, "uuid": None, "model": None, "virtualization_mode": None, "supported": False, "licensed": False,
        "feature": None, "product": None, "expiry_status": None, "expiry": None, "days_left": None,
        "state": "not licensable"}


def test_overall():
    yes, no, na = {"supported": True, "licensed": True}, {"supported": True, "licensed": False}, {"supported": False, "licensed": False}
    assert L.overall([yes, na]) is True
    assert L.overall([yes, no]) is False
    assert L.overall([na]) is None and L.overall([]) is None


# --- issue 37 point 10: the FeatureType NVIDIA documents for the node's GPUs -----------------------------------------

@pytest.mark.parametrize("modes, feature_type", [
    (["vgpu"], 1), (["vgpu", "vgpu"], 1), (["passthrough"], 4), (["none"], 4), (["passthrough", "vgpu"], 1)])
def test_default_feature_type(modes, feature_type):
    info = {"nvml": {"available": True}, "gpus": [{"index": i, "virtualization_mode": m} for i, m in enumerate(modes)]}
    assert L.default_feature_type(info) == feature_type


def test_default_feature_type_needs_nvml_and_a_gpu():
    with pytest.raises(L.LicenseError, match=r"^cannot tell a vGPU guest from a GPU passed through: NVML is not "
                                             r"usable \(the NVIDIA kernel driver is not loaded\); set "
                                             r"nvidia_license_feature_type \(1 on vGPU guests, 4 or 2 on "
                                             r"passed-through GPUs\)$"):
        L.default_feature_type({"nvml": {"available": False, "reason": "the NVIDIA kernel driver is not loaded"}})
    with pytest.raises(L.LicenseError, match=r"NVML is not usable \(boom\)"):
        L.default_feature_type({"failed": True, "msg": "boom", "nvml": {"available": True}})
    with pytest.raises(L.LicenseError, match=r"NVML is not usable \(not read\)"):
        L.default_feature_type(None)
    with pytest.raises(L.LicenseError, match=r"^NVML lists no GPU to license; set nvidia_license_feature_type$"):
        L.default_feature_type({"nvml": {"available": True}, "gpus": []})


# --- gridd_proxy: the proxy gridd.conf names, which the licence probe must take too (issue 37 point 10) ---------------

@pytest.mark.parametrize("settings, proxy", [
    ({}, None),
    ({"ProxyServerAddress": ""}, None),
    ({"ProxyServerAddress": "   ", "ProxyServerPort": "x"}, None),
    ({"ProxyServerAddress": "10.31.20.45", "ProxyServerPort": "3128"}, {"host": "10.31.20.45", "port": 3128, "user": None}),
    ({"ProxyServerAddress": "http://proxy.example/", "ProxyServerPort": "8080", "ProxyUserName": "lab"},
     {"host": "proxy.example", "port": 8080, "user": "lab"}),
    # the scheme is matched without regard to case, https as well as http; surrounding blanks are not part of a value
    ({"ProxyServerAddress": " HTTPS://proxy.example// ", "ProxyServerPort": " 1 ", "ProxyUserName": ""},
     {"host": "proxy.example", "port": 1, "user": None}),
    ({"ProxyServerAddress": "proxy.example", "ProxyServerPort": "65535"}, {"host": "proxy.example", "port": 65535, "user": None}),
    # only slashes are trimmed from the end of the address, nothing else
    ({"ProxyServerAddress": "http://SQUID-X/", "ProxyServerPort": "3128"}, {"host": "SQUID-X", "port": 3128, "user": None}),
    # host:port in the address when no ProxyServerPort is set; an explicit ProxyServerPort is taken as it stands
    ({"ProxyServerAddress": "proxy.example:3128"}, {"host": "proxy.example", "port": 3128, "user": None}),
    ({"ProxyServerAddress": "http://proxy.example:3128/"}, {"host": "proxy.example", "port": 3128, "user": None}),
    ({"ProxyServerAddress": "proxy.example:3128", "ProxyServerPort": "8080"},
     {"host": "proxy.example:3128", "port": 8080, "user": None}),
])
def test_gridd_proxy(settings, proxy):
    assert L.gridd_proxy(settings) == proxy


@pytest.mark.parametrize("settings, got", [
    ({"ProxyServerAddress": "p", "ProxyServerPort": "0"}, "'0'"),
    ({"ProxyServerAddress": "p", "ProxyServerPort": "65536"}, "'65536'"),
    ({"ProxyServerAddress": "p", "ProxyServerPort": "x"}, "'x'"),
    ({"ProxyServerAddress": "p", "ProxyServerPort": ""}, "''"),
    ({"ProxyServerAddress": "p", "ProxyServerPort": "-1"}, "'-1'"),
    ({"ProxyServerAddress": "p"}, "None"),
    # an IPv6 address holds more than one colon: it is never split into host and port
    ({"ProxyServerAddress": "fe80::1"}, "None"),
])
def test_gridd_proxy_without_a_valid_port_names_the_setting(settings, got):
    with pytest.raises(L.LicenseError) as err:
        L.gridd_proxy(settings)
    assert str(err.value) == "gridd.conf ProxyServerAddress=%s needs ProxyServerPort (1-65535), got %s" % (
        settings["ProxyServerAddress"], got)
