# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host patterns (issue 41 point 2): every workflow playbook's default pattern matches hosts of the example
inventory (and of the lab's), and a pattern that matches no host fails the run, naming the pattern and its variable,
instead of "skipping: no hosts matched" and rc 0 (pve_gpu.yml targeted proxmox_clusters where the example inventory
has pve_clusters)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PLAYBOOKS = os.path.join(ROOT, "playbooks")
HELPER = os.path.join(ROOT, "tests", "helpers", "play_vars.py")
WORKFLOWS = sorted(n for n in os.listdir(PLAYBOOKS) if n.endswith(".yml") and n not in ("awx_setup.yml", "site.yml"))


def default_patterns(playbook):
    """(variable, default pattern) of the playbook's hosts: lines, without the groups a play adds at run time."""
    with open(os.path.join(PLAYBOOKS, playbook), encoding="utf-8") as f:
        text = f.read()
    found = re.findall(r"""^\s*hosts: "\{\{ (\w+) \| default\('([^']+)'\) \}\}""", text, re.M)
    assert found, "%s: no templated hosts: line" % playbook
    return sorted(set(found))


def matches(inventory, patterns):
    proc = subprocess.run([sys.executable, HELPER, inventory, "--patterns"] + patterns, capture_output=True, text=True,
                          env=dict(os.environ, ANSIBLE_INVENTORY_UNPARSED_WARNING="0"), cwd=ROOT, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("inventory", ["example", "lab"])
def test_every_default_pattern_matches_hosts_of_the_shipped_inventories(inventory):
    wanted = {(book, var, pattern) for book in WORKFLOWS for var, pattern in default_patterns(book)}
    found = matches(os.path.join(ROOT, "inventories", inventory, "hosts.yml"), sorted({p for _b, _v, p in wanted}))
    empty = sorted("%s: %s (default of %s)" % (book, pattern, var) for book, var, pattern in wanted if not found[pattern])
    if inventory == "lab":
        # The lab has no vSphere hosts in its inventory (vcsim is reached from localhost by the tests).
        empty = [e for e in empty if "vsphere_target" not in e]
    assert not empty, "patterns that match no host of inventories/%s: %s" % (inventory, empty)


@pytest.mark.parametrize("playbook", WORKFLOWS)
def test_a_pattern_that_matches_no_host_fails_the_run(playbook, tmp_path):
    var, _pattern = default_patterns(playbook)[0]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_HOME=str(tmp_path / "home"))
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
                           "-i", os.path.join(ROOT, "inventories", "example", "hosts.yml"),
                           os.path.join(PLAYBOOKS, playbook), "-e", "%s=no_such_group" % var,
                           "-e", "ansible_python_interpreter=" + sys.executable],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300, check=False)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "The host pattern 'no_such_group' matches no host in the inventory" in proc.stdout, proc.stdout[-2000:]
    assert "set %s to a pattern of this inventory" % var in proc.stdout
    assert "Nothing was changed." in proc.stdout
