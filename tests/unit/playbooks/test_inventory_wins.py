# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The inventory wins (issue 41 point 1): a role variable set in the inventory's group_vars is the value the role
sees in every play of every playbook. Play vars outrank group_vars, so a playbook that fed a role variable from a
survey name of its own (preflight.yml's node_preflight_gate from preflight_gate, driver_pin.yml's
nvidia_driver_version from driver_pin_version) silently ignored the inventory. ansible-core itself answers
(tests/helpers/play_vars.py: VariableManager.get_vars per play and host, as ansible-playbook computes them)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PLAYBOOKS = os.path.join(ROOT, "playbooks")
HELPER = os.path.join(ROOT, "tests", "helpers", "play_vars.py")
ROLES = sorted(os.listdir(os.path.join(ROOT, "roles")))

# Role variables a play sets on purpose, each with its reason. Nothing else may be set by a playbook.
DELIBERATE = {
    # The health roll runs the preflight role in its own mode: its checks, no gate, no failing node, its own report
    # folder; a preflight setting in the inventory (node_preflight_gate: join) must not gate or join from a health run.
    # Every other node_preflight_* (the thresholds) comes from the inventory.
    ("gpu_health.yml", "GPU health | check every GPU node"): {
        "node_preflight_checks", "node_preflight_gate", "node_preflight_fail", "node_preflight_report_dir"},
}
# include_role vars a playbook passes on purpose: per-call inputs the play computes, not settings a user has.
DELIBERATE_INCLUDE_VARS = {
    ("driver_pin.yml", "nvidia_driver_roll_lease"),       # this run's Lease, taken by the play before
    ("fleet_report.yml", "nvidia_driver_module_version_path"),  # under gpuops_sysfs_root, the report's own root
    ("gpu_health.yml", "node_drain_node_name"), ("gpu_health.yml", "node_drain_kubeconfig"),
    ("gpu_health.yml", "node_drain_roll"), ("gpu_health.yml", "node_drain_target"), ("gpu_health.yml", "node_drain_reason"),
}


def role_options(role):
    with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml"), encoding="utf-8") as f:
        specs = yaml.safe_load(f)["argument_specs"]
    return {name for entry in specs.values() for name in (entry.get("options") or {})}


def playbook_text(name, seen=None):
    """The playbook's text with the playbooks it imports."""
    seen = seen if seen is not None else set()
    seen.add(name)
    with open(os.path.join(PLAYBOOKS, name), encoding="utf-8") as f:
        text = f.read()
    for imported in re.findall(r"import_playbook: (\S+)", text):
        if imported not in seen:
            text += playbook_text(imported, seen)
    return text


def host_pattern_vars(text):
    return set(re.findall(r"^\s*hosts: \"\{\{ (\w+)", text, re.M))


def workflow_playbooks():
    return sorted(n for n in os.listdir(PLAYBOOKS) if n.endswith(".yml") and n != "awx_setup.yml")


def sentinel(name):
    return "from-the-inventory:" + name


def inventory_with(tmp_path, names):
    """The example inventory's hosts and groups, with every name set in group_vars/all.yml."""
    inv = tmp_path / "inventory"
    (inv / "group_vars").mkdir(parents=True)
    with open(os.path.join(ROOT, "inventories", "example", "hosts.yml"), encoding="utf-8") as f:
        (inv / "hosts.yml").write_text(f.read(), encoding="utf-8")
    (inv / "group_vars" / "all.yml").write_text(yaml.safe_dump({n: sentinel(n) for n in sorted(names)}), encoding="utf-8")
    return str(inv / "hosts.yml")


def ask_ansible(inventory, playbook, names):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"),
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0", ANSIBLE_LOCALHOST_WARNING="0")
    proc = subprocess.run([sys.executable, HELPER, inventory, os.path.join(PLAYBOOKS, playbook)] + sorted(names),
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("playbook", workflow_playbooks())
def test_a_role_variable_set_in_group_vars_is_what_every_play_sees(playbook, tmp_path):
    text = playbook_text(playbook)
    roles = [r for r in ROLES if re.search(r"\bgpuops\.provision\.%s\b" % r, text)]
    names = set().union(*(role_options(r) for r in roles)) - host_pattern_vars(text) if roles else set()
    if not names:
        pytest.skip("%s runs no role" % playbook)
    plays = ask_ansible(inventory_with(tmp_path, names), playbook, names)
    overridden = {}
    for play, hosts in plays.items():
        allowed = DELIBERATE.get((playbook, play.split(" ", 1)[1]), set())
        for host, values in hosts.items():
            for name, value in values.items():
                if value != sentinel(name) and name not in allowed:
                    overridden.setdefault(play, {})[name] = "%s: %r" % (host, value)
    assert not overridden, "%s overrides the inventory's value of: %s" % (playbook, json.dumps(overridden, indent=1))
    # The check looked: the roles' variables reached the plays that run them.
    assert any(hosts for hosts in plays.values()), plays


@pytest.mark.parametrize("playbook", workflow_playbooks())
def test_no_playbook_passes_a_role_setting_to_include_role(playbook):
    with open(os.path.join(PLAYBOOKS, playbook), encoding="utf-8") as f:
        plays = yaml.safe_load(f)
    options = set().union(*(role_options(r) for r in ROLES))
    passed = set()

    def walk(node):
        if isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            if any(k in node for k in ("ansible.builtin.include_role", "ansible.builtin.import_role")):
                passed.update(k for k in (node.get("vars") or {}) if k in options)
            for value in node.values():
                walk(value)

    walk(plays)
    assert not {(playbook, name) for name in passed} - DELIBERATE_INCLUDE_VARS, passed


@pytest.mark.parametrize("playbook,old,new", [
    ("preflight.yml", "preflight_gate", "node_preflight_gate"),
    ("driver_pin.yml", "driver_pin_version", "nvidia_driver_version")])
def test_the_former_names_are_refused_with_the_new_ones(playbook, old, new, tmp_path):
    # Not silently ignored either: the run fails before the role, naming the role's own variable.
    inventory = inventory_with(tmp_path, set())
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_HOME=str(tmp_path / "home"))
    bindir = os.path.dirname(sys.executable)
    proc = subprocess.run([os.path.join(bindir, "ansible-playbook"), "-i", inventory, os.path.join(PLAYBOOKS, playbook),
                           "-e", "ansible_connection=local", "-e", "ansible_python_interpreter=" + sys.executable,
                           "-e", "%s=join" % old, "--limit", "localhost:k8s-gpu-h100-01.example.net"],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300, check=False)
    assert proc.returncode != 0
    assert "k8s-gpu-h100-01.example.net: %s renamed: set %s instead" % (old, new) in proc.stdout, proc.stdout[-3000:]
