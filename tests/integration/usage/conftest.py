# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures for the usage advice's integration tests."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from usage_lab import start, stop  # noqa: E402  pylint: disable=import-error,wrong-import-position


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """Every node of lab/dcgm/workloads.json, a week of history at the lab's default 300 s step."""
    run_dir = tmp_path_factory.mktemp("prometheus")
    try:
        yield start(run_dir)
    finally:
        stop(run_dir)
