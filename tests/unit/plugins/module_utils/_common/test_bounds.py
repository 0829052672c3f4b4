# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""_common/bounds.py: numeric option ranges (both sides of each bound, the whole message) and the TLS rule."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._common import bounds as B

BOUNDS = {"port": B.PORT, "timeout": B.API_TIMEOUT, "vmid": B.PVE_VMID}


@pytest.mark.parametrize("name,low,high", [("port", 1, 65535), ("timeout", 1, 3600), ("vmid", 100, 999999999)])
def test_each_bound_holds_on_both_sides(name, low, high):
    assert B.out_of_range({name: low}, BOUNDS) == []
    assert B.out_of_range({name: high}, BOUNDS) == []
    what = BOUNDS[name][2]
    assert B.out_of_range({name: low - 1}, BOUNDS) == ["%s=%d is out of range: %d to %d (%s)" % (name, low - 1, low, high, what)]
    assert B.out_of_range({name: high + 1}, BOUNDS) == ["%s=%d is out of range: %d to %d (%s)" % (name, high + 1, low, high, what)]


def test_every_problem_is_reported_in_option_order_with_the_prefix():
    assert B.out_of_range({"vmid": 5, "port": 0, "timeout": 30}, BOUNDS, where="vms[2].") == [
        "vms[2].port=0 is out of range: 1 to 65535 (a TCP port)",
        "vms[2].vmid=5 is out of range: 100 to 999999999 (Proxmox VE's pve-vmid range)",
    ]


def test_unset_and_boolean_values_are_not_checked():
    assert B.out_of_range({}, BOUNDS) == []
    assert B.out_of_range({"port": None, "timeout": True, "vmid": False}, BOUNDS) == []
    # a value of 0 is set (only None is "not set")
    assert B.out_of_range({"timeout": 0}, BOUNDS) == ["timeout=0 is out of range: 1 to 3600 (seconds per API request)"]


def test_the_ranges_the_modules_use():
    assert (B.DAY, B.TASK_TIMEOUT, B.SHUTDOWN_TIMEOUT) == (
        86400, (1, 86400, "seconds to wait"), (0, 86400, "seconds to wait for a guest shutdown"))
    assert B.MAX_CONCURRENT[:2] == (1, 64) and B.PVE_IOMMU_GROUP[:2] == (0, 2 ** 31 - 1)
    assert B.MMIO_SIZE_GB[:2] == (1, 16384) and B.MAX_VGPUS[:2] == (1, 8)


def test_tls_verify_on_uses_the_ca_or_the_system_store():
    assert B.tls_verify(True, None) == (True, None)
    assert B.tls_verify(True, "/etc/ssl/lab-ca.pem") == ("/etc/ssl/lab-ca.pem", None)


def test_tls_verify_off_warns_and_says_the_ca_is_unused():
    assert B.tls_verify(False, None) == (False, (
        "TLS certificate verification is off (validate_certs=false): the credentials go to whoever answers. "
        "Keep validate_certs on and give ca_path for a private CA."))
    assert B.tls_verify(False, "/ca.pem") == (False, (
        "TLS certificate verification is off (validate_certs=false): the credentials go to whoever answers; "
        "ca_path /ca.pem is not used while validate_certs is false. Keep validate_certs on and give ca_path for a "
        "private CA."))
