# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's filters as ansible-core sees them, for tests that render the roles' Jinja or call a filter by name.

``public()``: every FilterModule in plugins/filter/ (what ``gpuops.provision.<name>`` resolves to);
``role_internal()``: the computations behind ``gpuops.provision.internal('<name>', ...)``;
``every()``: both by bare name; ``jinja()``: the public ones under their collection names for a Jinja environment.
"""

from __future__ import annotations

import glob
import importlib
import os

from ansible_collections.gpuops.provision.plugins.plugin_utils import _role_filters

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def public():
    out = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "plugins", "filter", "*.py"))):
        name = os.path.basename(path)[:-3]
        module = importlib.import_module("ansible_collections.gpuops.provision.plugins.filter." + name)
        out.update(module.FilterModule().filters())
    return out


def role_internal():
    return _role_filters.registry()


def every():
    return {**role_internal(), **public()}


def jinja():
    return {"gpuops.provision." + name: func for name, func in public().items()}
