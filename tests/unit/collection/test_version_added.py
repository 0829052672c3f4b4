# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""No plugin or option says it was added in a version later than the collection being built (galaxy.yml): the
rendered docs would show "New in 0.4.0" in a 0.1.0 collection. Nothing has been released yet
(changelogs/changelog.yaml), so everything is new in galaxy.yml's version."""

from __future__ import annotations

import ast
import glob
import os

import yaml
from packaging.version import Version

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _docs():
    """(file, parsed documentation) of every module and filter."""
    for path in sorted(glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py"))):
        tree = ast.parse(open(path).read())
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "DOCUMENTATION" for t in node.targets):
                yield os.path.relpath(path, ROOT), yaml.safe_load(node.value.value)
    for path in sorted(glob.glob(os.path.join(ROOT, "plugins", "filter", "*.yml"))):
        yield os.path.relpath(path, ROOT), yaml.safe_load(open(path))


def _version_added(doc, where=""):
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key == "version_added":
                yield where or "(plugin)", str(value)
            else:
                yield from _version_added(value, "%s.%s" % (where, key) if where else str(key))
    elif isinstance(doc, list):
        for item in doc:
            yield from _version_added(item, where)


def test_nothing_is_added_after_the_version_being_built():
    galaxy = yaml.safe_load(open(os.path.join(ROOT, "galaxy.yml")))["version"]
    released = (yaml.safe_load(open(os.path.join(ROOT, "changelogs", "changelog.yaml"))) or {}).get("releases") or {}
    seen, wrong = 0, []
    for path, doc in _docs():
        for where, version in _version_added(doc):
            seen += 1
            # Unreleased so far: everything is new in the version being built; after a release, not later than it.
            if released:
                ok = Version(version) <= Version(galaxy)
            else:
                ok = Version(version) == Version(galaxy)
            if not ok:
                wrong.append("%s %s: version_added %s" % (path, where, version))
    assert seen > 30 and wrong == [], "galaxy.yml version %s:\n%s" % (galaxy, "\n".join(wrong))
