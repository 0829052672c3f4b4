# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The boot-time applier (roles/mig_reconfigure/files/gpuops_mig_apply.py) runs the collection code from the one
sources file the role copies beside it (tasks/boot_install.yml), on a host without the collection.

Each case runs the applier in its own interpreter (-I: no PYTHONPATH, no user site), as the unit does at boot: its
import hook would otherwise stay in this test process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLE = os.path.join(ROOT, "roles", "mig_reconfigure")
APPLIER = os.path.join(ROLE, "files", "gpuops_mig_apply.py")
MODULE_UTILS = os.path.join(ROOT, "plugins", "module_utils")
PACKAGE = "ansible_collections.gpuops.provision.plugins.module_utils"


def role_sources():
    """The sources file as boot_install.yml writes it: vars/main.yml's files, each as the file lookup reads it."""
    with open(os.path.join(ROLE, "vars", "main.yml"), encoding="utf-8") as fh:
        files = yaml.safe_load(fh)["__mig_reconfigure_boot_files"]
    out = {}
    for name in files:
        with open(os.path.join(MODULE_UTILS, name), encoding="utf-8") as fh:
            out[name] = fh.read().rstrip()
    return out


def install(tmp_path, sources):
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copy(APPLIER, lib / "gpuops_mig_apply.py")
    if sources is not None:
        (lib / "gpuops_mig_apply.sources.json").write_text(json.dumps(sources), encoding="utf-8")
    return lib


def run_in(lib, code, env=None, cwd=None):
    """``code`` after loading the installed applier as a module and its hook (what main() does first)."""
    prelude = ("import importlib.util, sys\n"
               "spec = importlib.util.spec_from_file_location('applier', %r)\n"
               "applier = importlib.util.module_from_spec(spec); spec.loader.exec_module(applier)\n"
               "sys.meta_path.insert(0, applier.BundledSources(applier.SOURCES))\n") % str(lib / "gpuops_mig_apply.py")
    return subprocess.run([sys.executable, "-I", "-c", prelude + code], capture_output=True, text=True, check=False,
                          timeout=60, env=env, cwd=cwd)


def test_every_module_the_role_ships_imports_from_the_sources_file(tmp_path):
    sources = role_sources()
    lib = install(tmp_path, sources)
    names = [PACKAGE + "." + n[:-3].replace("/", ".").replace(".__init__", "") for n in sources]
    code = ("import importlib, json\n"
            "mods = [importlib.import_module(n) for n in %r]\n"
            "print(json.dumps([m.__spec__.origin for m in mods]))\n") % names
    proc = run_in(lib, code, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    origins = json.loads(proc.stdout)
    sources_path = str(lib / "gpuops_mig_apply.sources.json")
    assert origins == ["%s/%s.py" % (sources_path, n) for n in names]


def test_the_bundled_code_wins_over_a_collection_installed_on_the_host(tmp_path):
    """A host with another version of the collection on its Python path still runs the code the role stamped."""
    other = tmp_path / "site" / PACKAGE.replace(".", "/")
    other.mkdir(parents=True)
    (other / "mig").mkdir()
    (other / "mig" / "apply.py").write_text("WHO = 'installed'\n", encoding="utf-8")
    lib = install(tmp_path, {"_mig/apply.py": "WHO = 'bundled'"})
    code = ("sys.path.insert(0, %r)\n"
            "from ansible_collections.gpuops.provision.plugins.module_utils._mig import apply\n"
            "print(apply.WHO)\n") % str(tmp_path / "site")
    proc = run_in(lib, code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "bundled"


def test_modules_in_packages_and_package_inits_import(tmp_path):
    """Paths under module_utils with folders (a package per domain) keep working."""
    lib = install(tmp_path, {"_mig/__init__.py": "INIT = 1", "_mig/geometry.py": "from . import INIT\nVALUE = INIT + 1",
                             "shared/bounds.py": "LIMIT = 3"})
    code = ("from ansible_collections.gpuops.provision.plugins.module_utils._mig import geometry\n"
            "from ansible_collections.gpuops.provision.plugins.module_utils.shared import bounds\n"
            "print(geometry.VALUE, bounds.LIMIT)\n")
    proc = run_in(lib, code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["2", "3"]


def test_a_module_missing_from_the_sources_file_is_an_import_error(tmp_path):
    lib = install(tmp_path, {"_mig/geometry.py": "X = 1"})
    code = ("try:\n"
            "    from ansible_collections.gpuops.provision.plugins.module_utils._mig import apply\n"
            "except ImportError as e:\n"
            "    print('ImportError', e)\n")
    proc = run_in(lib, code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ImportError cannot import name 'apply'")


def test_without_its_sources_file_the_applier_exits_1_naming_it(tmp_path):
    lib = install(tmp_path, None)
    declared = tmp_path / "mig-config.json"
    declared.write_text(json.dumps({"config": {"version": "v1", "mig-configs": {}}, "selected": "x"}), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-I", str(lib / "gpuops_mig_apply.py"), str(declared)],
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 1
    assert "cannot load the collection code from %s" % (lib / "gpuops_mig_apply.sources.json") in proc.stderr


def test_a_sources_file_that_is_not_an_object_exits_1(tmp_path):
    lib = install(tmp_path, ["_mig/geometry.py"])
    proc = subprocess.run([sys.executable, "-I", str(lib / "gpuops_mig_apply.py"), str(tmp_path / "none.json")],
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 1
    assert "not a JSON object of module sources" in proc.stderr


def test_with_the_role_sources_the_applier_gets_to_the_declared_geometry(tmp_path):
    """Past the code: a missing declaration is the next thing it reports (exit 1), not an import failure."""
    lib = install(tmp_path, role_sources())
    proc = subprocess.run([sys.executable, "-I", str(lib / "gpuops_mig_apply.py"), str(tmp_path / "none.json")],
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 1
    assert "cannot read the declared geometry %s" % (tmp_path / "none.json") in proc.stderr
    assert "cannot load" not in proc.stderr
