# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/awx_setup.yml against the awx.awx modules' own argument specs.

Each awx.awx module validates its arguments (AnsibleModule: names, types, choices) before its first request to the
controller. The playbook runs here, templated by ansible-core as on a real controller, against a controller address
nothing listens on: every awx.awx task (every loop item) must fail at the connection, after its arguments were
accepted. A wrong option name or type fails at the validation instead, naming the option. The copy that runs differs
from the playbook only in `ignore_errors` on those tasks (so each is reached) and no `no_log` (the test's dummy
credential inputs are not secret), nothing in the arguments."""

from __future__ import annotations

import copy
import json
import os
import re
import socket
import sys

import pytest
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "preflight"))
from preflight_lab import ROOT, ansible_env, run_playbook  # noqa: E402  pylint: disable=import-error,wrong-import-position

PLAYBOOK = os.path.join(ROOT, "playbooks", "awx_setup.yml")
AWX = os.path.join(ROOT, "build", "collections", "ansible_collections", "awx", "awx")
# ControllerAPIModule.make_request (awx.awx plugins/module_utils/controller_api.py) on a refused connection:
# "There was an unknown error when trying to connect to <url>: URLError <urlopen error [Errno 111] Connection refused>".
CONNECTION_FAILED = re.compile(r"error when trying to connect to https://127\.0\.0\.1:\d+/api/v2/.*Connection refused")
INVALID_ARGS = re.compile(r"Unsupported parameters|is of type|value of \w+ must be one of|missing required arguments")

pytestmark = pytest.mark.skipif(not os.path.isdir(AWX), reason="awx.awx is unpacked by `make collection`")


class _Loader(yaml.SafeLoader):  # pylint: disable=too-many-ancestors
    """Keeps !unsafe values marked, so the copy dumps them back unsafe."""


class Unsafe(str):
    pass


_Loader.add_constructor("!unsafe", lambda loader, node: Unsafe(loader.construct_scalar(node)))
yaml.SafeDumper.add_representer(Unsafe, lambda dumper, data: dumper.represent_scalar("!unsafe", str(data)))


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def reachable_copy(path, mutate=None):
    """The playbook with ignore_errors on every awx.awx task and no no_log; mutate(play) may alter the arguments."""
    with open(PLAYBOOK, encoding="utf-8") as f:
        plays = yaml.load(f, Loader=_Loader)  # noqa: S506 - SafeLoader subclass
    plays = copy.deepcopy(plays)
    for task in plays[0]["tasks"]:
        if any(k.startswith("awx.awx.") for k in task):
            task["ignore_errors"] = True
            task.pop("no_log", None)
    if mutate:
        mutate(plays[0])
    path.write_text(yaml.safe_dump(plays, sort_keys=False), encoding="utf-8")
    return str(path)


EXTRA = {
    "awx_setup_project_url": "https://git.example.net/infra/gpu-platform.git",
    "awx_setup_inventory_source": "inventory/hosts.yml",
    "awx_setup_machine_credential": "fleet ssh",
    # Long dummy inputs: Ansible masks every occurrence of a secret-looking value in the messages.
    "awx_setup_vcenter": {"host": "vc.example.net", "username": "svc-gpuops-test", "password": "not-a-secret-1",
                          "validate_certs": True},
    "awx_setup_proxmox": {"host": "pve.example.net", "user": "gpuops@pve", "token_id": "gpuops-test-token",
                          "token_secret": "not-a-secret-2"},
    "awx_setup_license": {"token": "not-a-secret-3"},
    "awx_setup_prometheus": {"url": "https://prometheus.example.net:9090", "bearer_token": "not-a-secret-4"},
    "awx_setup_gpu_health_rrule": "DTSTART:20270101T020000Z RRULE:FREQ=HOURLY;INTERVAL=6",
}


def awx_results(out):
    """[(task name, item label or None, msg)] of every awx.awx module run in the json callback's output."""
    rows = []
    for play in out["plays"]:
        for task in play["tasks"]:
            action = task["hosts"].get("localhost", {}).get("action") or ""
            result = task["hosts"].get("localhost", {})
            if not task["task"]["name"] or "awx.awx" not in json.dumps(result.get("invocation", {})) and not action.startswith("awx.awx"):
                continue
            for item in result.get("results") or [result]:
                rows.append((task["task"]["name"], item.get("_ansible_item_label"), item.get("msg", "")))
    return rows


def run(tmp_path, playbook):
    env = ansible_env(extra={"CONTROLLER_HOST": "https://127.0.0.1:%d" % closed_port(), "CONTROLLER_OAUTH_TOKEN": "x"})
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n      ansible_python_interpreter: %s\n"
                         % sys.executable)
    rc, out, stdout, stderr = run_playbook(playbook, str(inventory), extra_vars=EXTRA, env=env)[:4]
    assert out is not None, stdout[-3000:] + stderr[-3000:]
    return rc, awx_results(out)


def test_every_awx_task_passes_its_module_argument_spec(tmp_path):
    rc, rows = run(tmp_path, reachable_copy(tmp_path / "awx_setup.yml"))
    assert rc == 0
    # 4 credential types, 4 credentials, the EE, project, inventory, inventory source, 13 job templates, 1 schedule.
    assert len(rows) == 26, rows
    bad = [r for r in rows if not CONNECTION_FAILED.search(r[2])]
    assert not bad, "awx.awx tasks that did not get as far as the controller: %s" % bad


def test_a_wrong_option_name_or_type_is_caught(tmp_path):
    # What the test above relies on: the same run with a misspelt option and a wrong type fails at the arguments.
    def mutate(play):
        for task in play["tasks"]:
            if "awx.awx.project" in task:
                task["awx.awx.project"]["scm_update_on_lunch"] = task["awx.awx.project"].pop("scm_update_on_launch")
            if "awx.awx.inventory_source" in task:
                task["awx.awx.inventory_source"]["overwrite"] = "sometimes"
    _rc, rows = run(tmp_path, reachable_copy(tmp_path / "awx_setup.yml", mutate))
    messages = {name: msg for name, _item, msg in rows}
    assert INVALID_ARGS.search(messages["Project"]) and "scm_update_on_lunch" in messages["Project"], messages["Project"]
    assert "overwrite" in messages["Inventory source from the project"], messages["Inventory source from the project"]


@pytest.mark.parametrize("missing", ["awx_setup_project_url", "awx_setup_inventory_source"])
def test_the_project_and_its_inventory_are_required_before_anything_is_created(tmp_path, missing):
    # The inventory source defaulted to the collection's example inventory: a user's project got a fleet of example
    # hosts. Both are the user's now, and without either nothing reaches the controller.
    env = ansible_env(extra={"CONTROLLER_HOST": "https://127.0.0.1:%d" % closed_port(), "CONTROLLER_OAUTH_TOKEN": "x"})
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n      ansible_python_interpreter: %s\n"
                         % sys.executable)
    extra = {k: v for k, v in EXTRA.items() if k != missing}
    rc, out = run_playbook(reachable_copy(tmp_path / "awx_setup.yml"), str(inventory), extra_vars=extra, env=env)[:2]
    assert rc != 0
    assert awx_results(out) == []
    failed = [h["msg"] for play in out["plays"] for task in play["tasks"] for h in task["hosts"].values() if h.get("failed")]
    assert len(failed) == 1 and "awx_setup_inventory_source" in failed[0] and "nothing was created" in failed[0], failed
