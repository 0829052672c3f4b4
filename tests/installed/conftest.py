# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``installed`` fixture: one install of the tarball per test process (installed_env.py says how)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from installed_env import install  # noqa: E402  pylint: disable=import-error,wrong-import-position


@pytest.fixture(scope="session")
def installed(tmp_path_factory):
    return install(tmp_path_factory)
