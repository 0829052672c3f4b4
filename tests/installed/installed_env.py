# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection as users get it: its tarball, installed by ansible-galaxy into an empty collections path, in a
virtualenv holding only ansible-core and requirements.txt, run from a directory outside the source tree.

Galaxy is out of reach here, so the declared dependencies come from the copies the tests use (the `ansible` package
of requirements-dev.txt), each offered to ansible-galaxy as a directory;
ansible-galaxy resolves the tarball's MANIFEST dependencies against them offline, as it would against a server."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
import sysconfig
import types

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = os.path.join(ROOT, "build", "installed", "venv")
# The dev venv's site-packages holds the `ansible` package's collections.
DEV_COLLECTIONS = [os.path.join(ROOT, "build", "collections"), sysconfig.get_paths()["purelib"]]


def pin(package):
    """The version requirements-dev.txt pins ``package`` to."""
    with open(os.path.join(ROOT, "requirements-dev.txt"), encoding="utf-8") as f:
        return re.search(r"^%s==(\S+)" % re.escape(package), f.read(), re.M).group(1)


def _run(cmd, **kwargs):
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)
    assert proc.returncode == 0, "%s failed (%d):\n%s\n%s" % (" ".join(cmd), proc.returncode, proc.stdout[-4000:], proc.stderr[-4000:])
    return proc


def user_venv():
    """build/installed/venv, an execution environment's Python: ansible-core and ansible-runner (the versions the
    tests pin) and requirements.txt, nothing else; rebuilt when one changes. A lock keeps parallel workers from
    building it twice."""
    pins = ["ansible-core==" + pin("ansible-core"), "ansible-runner==" + pin("ansible-runner")]
    with open(os.path.join(ROOT, "requirements.txt"), "rb") as f:
        key = hashlib.sha256(f.read() + " ".join(pins).encode()).hexdigest()
    stamp = os.path.join(VENV, ".stamp")
    os.makedirs(os.path.dirname(VENV), exist_ok=True)
    with open(os.path.join(os.path.dirname(VENV), ".lock"), "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (os.path.isfile(stamp) and open(stamp, encoding="utf-8").read() == key):
            subprocess.run(["rm", "-rf", VENV], check=True)
            _run([sys.executable, "-m", "venv", VENV])
            _run([os.path.join(VENV, "bin", "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                  *pins, "-r", os.path.join(ROOT, "requirements.txt")], timeout=900)
            with open(stamp, "w", encoding="utf-8") as f:
                f.write(key)
    return VENV


def dev_copy(collection):
    ns, name = collection.split(".")
    for base in DEV_COLLECTIONS:
        path = os.path.join(base, "ansible_collections", ns, name)
        if os.path.isfile(os.path.join(path, "MANIFEST.json")):
            return path
    raise AssertionError("%s: no copy on %s (make collection)" % (collection, DEV_COLLECTIONS))


def closure(collections):
    """The collections with everything their MANIFESTs depend on, transitively (as Galaxy would serve them)."""
    todo, seen = list(collections), set()
    while todo:
        c = todo.pop()
        if c not in seen:
            seen.add(c)
            with open(os.path.join(dev_copy(c), "MANIFEST.json"), encoding="utf-8") as f:
                todo.extend(json.load(f)["collection_info"].get("dependencies") or {})
    return sorted(seen)


def clean_env(venv, collections_path, home):
    """Only what a user's shell would have: the venv's bin on PATH, the install's collections path, no ansible.cfg
    of this repository, no sys.path scan (the venv has no `ansible` package anyway)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PYTHON", "VIRTUAL_ENV", "K8S_"))}
    env.update({
        "PATH": os.path.join(venv, "bin") + os.pathsep + "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "ANSIBLE_COLLECTIONS_PATH": collections_path,
        "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "False",
        "ANSIBLE_CONFIG": os.path.join(home, "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCALHOST_WARNING": "False",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
    })
    return env


def install(tmp_path_factory):
    venv = user_venv()
    work = tmp_path_factory.mktemp("installed")
    home = work / "home"
    home.mkdir()
    (home / "ansible.cfg").write_text("[defaults]\n", encoding="utf-8")
    dist = work / "dist"
    galaxy = os.path.join(venv, "bin", "ansible-galaxy")
    _run([galaxy, "collection", "build", "--output-path", str(dist), ROOT], env=clean_env(venv, "", str(home)))
    tarball = str(next(dist.glob("gpuops-provision-*.tar.gz")))
    with open(os.path.join(ROOT, "galaxy.yml"), encoding="utf-8") as f:
        deps = yaml.safe_load(f)["dependencies"]
    collections = work / "collections"
    env = clean_env(venv, str(collections), str(home))
    req = work / "requirements.yml"
    req.write_text(yaml.safe_dump({"collections": [{"name": tarball, "type": "file"}]
                                   + [{"name": dev_copy(c), "type": "dir"} for c in closure(deps)]}), encoding="utf-8")
    _run([galaxy, "collection", "install", "--offline", "-r", str(req), "-p", str(collections)], env=env, cwd=str(work))
    project = work / "project"  # where the user runs ansible-playbook: no playbooks, roles or collections of ours
    project.mkdir()
    return types.SimpleNamespace(venv=venv, env=env, cwd=str(project), collections=str(collections), tarball=tarball,
                                 work=work, deps=deps, closure=closure(deps), bin=lambda name: os.path.join(venv, "bin", name),
                                 path=os.path.join(str(collections), "ansible_collections", "gpuops", "provision"),
                                 manifest=lambda: json.load(open(os.path.join(str(collections), "ansible_collections", "gpuops",
                                                                              "provision", "MANIFEST.json"), encoding="utf-8")))
