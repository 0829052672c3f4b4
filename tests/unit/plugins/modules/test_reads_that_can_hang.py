# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Paths a user points a module at that are not regular files (issue 37 point 11).

open() of a FIFO blocks until a writer comes (fifo(7)), so iommu_info's cmdline_path and nvidia_license_info's
gridd_conf, pointed at one, hung the module for ever. Each module runs here in a thread that must end within seconds;
a run that blocks is released by opening the FIFO for writing, and the test fails.
"""

from __future__ import annotations

import os
import threading

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._gpu import sysfs
from ansible_collections.gpuops.provision.plugins.modules import iommu_info, nvidia_license_info

from gpusim_nvml import use_gpusim  # pylint: disable=import-error


def _within(seconds, fifo, call):
    """call() in a thread; its result, or a failure when it blocks (the FIFO is then opened to release it)."""
    box = {}

    def target():
        try:
            box["result"] = call()
        except BaseException as exc:  # noqa: BLE001 - reported below
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        thread.join(10)
        pytest.fail("the module blocked on the FIFO %s for more than %d s" % (fifo, seconds))
    if "error" in box:
        raise box["error"]
    return box["result"]


def test_iommu_info_cmdline_path_fifo_fails_naming_it(tmp_path, run_module):
    fifo = tmp_path / "cmdline"
    os.mkfifo(fifo)
    res = _within(5, fifo, lambda: run_module(iommu_info, {"root": str(tmp_path), "cmdline_path": str(fifo)}))
    assert res["failed"] is True
    assert res["msg"].endswith("%s is not a regular file (it is a FIFO): only regular files are read" % fifo)


def test_license_info_gridd_conf_fifo_fails_naming_it(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": []})
    fifo = tmp_path / "gridd.conf"
    os.mkfifo(fifo)
    res = _within(5, fifo, lambda: run_module(nvidia_license_info, {"gridd_conf": str(fifo)}))
    assert res["failed"] is True
    assert res["msg"] == ("cannot read the gridd configuration: %s is not a regular file (it is a FIFO): only regular "
                          "files are read" % fifo)


def test_license_info_gridd_conf_not_utf8_names_the_file(monkeypatch, tmp_path, run_module):
    use_gpusim(monkeypatch, tmp_path, {"gpus": []})
    conf = tmp_path / "gridd.conf"
    conf.write_bytes(b"# caf\xe9\nFeatureType=4\n")
    res = run_module(nvidia_license_info, {"gridd_conf": str(conf)})
    assert res["failed"] is True
    assert res["msg"] == "cannot read the gridd configuration: %s is not UTF-8 text (byte 0xe9 at offset 5)" % conf


def test_read_file_kinds_limits_and_missing(tmp_path):
    good = tmp_path / "ok"
    good.write_text("x=1\n", encoding="utf-8")
    assert sysfs.read_file(str(good)) == "x=1\n"
    with pytest.raises(FileNotFoundError):
        sysfs.read_file(str(tmp_path / "none"))
    with pytest.raises(sysfs.SysfsError, match=r"^%s is not a regular file \(it is a directory\)" % tmp_path):
        sysfs.read_file(str(tmp_path))
    with pytest.raises(sysfs.SysfsError, match=r"^/dev/null is not a regular file \(it is a device\)"):
        sysfs.read_file("/dev/null")
    big = tmp_path / "big"
    big.write_bytes(b"a" * 101)
    with pytest.raises(sysfs.SysfsError, match=r"^%s is larger than 100 bytes: not read$" % big):
        sysfs.read_file(str(big), limit=100)
    assert sysfs.read_file(str(big), limit=101) == "a" * 101
    with pytest.raises(sysfs.SysfsError, match=r"^reading %s took longer than -1 s: not read$" % big):
        sysfs.read_file(str(big), timeout=-1)
    unreadable = tmp_path / "secret"
    unreadable.write_text("x", encoding="utf-8")
    unreadable.chmod(0)
    if os.geteuid() != 0:
        with pytest.raises(sysfs.SysfsError, match=r"^cannot read %s: Permission denied$" % unreadable):
            sysfs.read_file(str(unreadable))
