"""Shared fixtures of the stand-ins' own tests."""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpusim_loader import load_gpusim  # noqa: E402  pylint: disable=wrong-import-position,import-error


@pytest.fixture
def sim(tmp_path, monkeypatch):
    """start(state) writes the state file and runs nvmlInit; .state() reads the file back."""
    path = tmp_path / "gpusim.json"
    monkeypatch.setenv("GPUSIM_STATE", str(path))
    nv = load_gpusim()

    def start(st):
        path.write_text(json.dumps(st))
        nv.nvmlInit()
        return nv

    yield SimpleNamespace(nv=nv, path=path, start=start, state=lambda: json.loads(path.read_text()))
    while True:  # the library's init refcount back to zero, for the next test
        try:
            nv.nvmlShutdown()
        except nv.NVMLError_Uninitialized:
            break


@pytest.fixture(scope="session")
def libdirs():
    """{driver: directory of gpusim's libnvidia-ml.so.1 with that driver's exports} for the builds the tests name."""
    from libnvml_common import libnvml_build  # pylint: disable=import-outside-toplevel,import-error
    return {d: libnvml_build.ensure(d) for d in libnvml_build.BRANCHES}
