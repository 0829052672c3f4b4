# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roles' failure messages through their filters, as the role tasks call them.

Each case renders the task's own ``msg``/``fail_msg`` (and task ``vars``) from the role file with Jinja, the filters
registered under their collection names, and compares it with the message function called with the values the task
means to pass (every value distinct): a task that passes its arguments in another order, or calls a filter that is not
registered, fails here.
(The messages themselves, byte for byte: tests/unit/plugins/plugin_utils/test_role_messages.py.)
"""

from __future__ import annotations

import os

import pytest
import yaml
from jinja2.nativetypes import NativeEnvironment

from ansible_collections.gpuops.provision.plugins.plugin_utils._role_filters import license as license_filters
from ansible_collections.gpuops.provision.plugins.plugin_utils import _role_messages as M
from collection_filters import jinja  # pylint: disable=import-error

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

ENV = NativeEnvironment()
ENV.filters.update(jinja())


def task_message(path, name):
    with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
        task = next(t for t in yaml.safe_load(fh) if t.get("name") == name)
    action = task.get("ansible.builtin.fail") or task.get("ansible.builtin.assert")
    return action.get("msg") or action["fail_msg"], task.get("vars") or {}


def render(path, name, variables):
    msg, task_vars = task_message(path, name)
    variables = dict(variables)
    variables.update((k, ENV.from_string(v).render(variables)) for k, v in task_vars.items())
    return ENV.from_string(msg).render(variables)


def test_license_filter_is_registered():
    assert sorted(license_filters.filters()) == ["license_feature_type", "license_timeout_message"]


STATE = {"nvml": {"available": True}, "licensed": False, "gpus": [{"index": 0, "model": "NVIDIA L40S", "state": "unlicensed"}],
         "gridd": {"settings": {"FeatureType": 4}, "tokens": [{"name": "client_configuration_token.tok"}]}}
RESOLVED = {"missing": ["nvidia-driver"], "offered": {"nvidia-driver": ["550.54.15-1"]}}
REPORT = {"failed_checks": ["vfio_bound"], "checks": [
    {"id": "vfio_bound", "status": "fail", "evidence": "bound to nouveau", "remedy": "bind vfio-pci"},
    {"id": "gpu_persistence", "status": "warn", "evidence": "off", "remedy": "enable it"}]}


@pytest.mark.parametrize("path, name, variables, want", [
    ("roles/nvidia_license/tasks/main.yml", "Fail when the licence was not acquired in time",
     dict(inventory_hostname="guest-1", nvidia_license_timeout=3, nvidia_license_token_dir="/tok", nvidia_license_service="gridd",
          nvidia_license_state=STATE),
     M.license_timeout(STATE, "guest-1", 3, "/tok", "gridd")),
    ("roles/node_preflight/tasks/main.yml", "Fail the nodes that are not ready",
     dict(inventory_hostname="node-1", node_preflight_report=REPORT, node_preflight_fail_on_warn=True),
     M.preflight_not_ready(REPORT, "node-1", True)),
    ("roles/nvidia_driver/tasks/debian_resolve.yml", "Fail when the repositories do not offer the version (nothing has been changed)",
     dict(inventory_hostname="gpu-1", nvidia_driver_version="535.999.01", __nvidia_driver_resolved=RESOLVED),
     M.driver_unavailable(RESOLVED, "gpu-1", "535.999.01")),
    ("roles/nvidia_driver/tasks/redhat_resolve.yml", "Fail when the repositories do not offer the version (nothing has been changed)",
     dict(inventory_hostname="gpu-1", nvidia_driver_version="535.999.01", __nvidia_driver_resolved=RESOLVED),
     M.driver_unavailable(RESOLVED, "gpu-1", "535.999.01")),
    ("roles/nvidia_driver/tasks/main.yml", "Fail when packages of the driver are not on the pin after the install",
     dict(inventory_hostname="gpu-2", nvidia_driver_version="535.261.03",
          nvidia_driver_facts={"off_driver": ["cuda-drivers"], "packages": {"cuda-drivers": "560.35.03-1"}}),
     M.driver_off_pin({"off_driver": ["cuda-drivers"], "packages": {"cuda-drivers": "560.35.03-1"}}, "gpu-2", "535.261.03")),
    ("roles/mig_reconfigure/tasks/plan.yml", "Fail the play, naming every node whose plan is invalid (nothing was cordoned)",
     dict(hostvars={"localhost": {"__mig_reconfigure_planned": {"bad": [{"node": "node-2", "error": "3g.40gb does not fit"}]}}}),
     M.mig_invalid_plans([{"node": "node-2", "error": "3g.40gb does not fit"}])),
])
def test_the_role_task_renders_the_message(path, name, variables, want):
    assert render(path, name, variables) == want
