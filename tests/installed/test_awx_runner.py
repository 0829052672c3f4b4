# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The AWX job templates of playbooks/awx_setup.yml run through ansible-runner (the component AWX runs jobs with,
inside the execution environment), from the installed collection, with the private data directory laid out as AWX
lays it (awx_job.py: survey defaults, credential injectors, meta variables). Checked from runner's artifacts, as AWX
reads them: rc and status, the custom stats AWX stores with the job, no secret value in any job event (AWX keeps
events in its database) or in stdout, and the clear message of a failing run in the events."""

from __future__ import annotations

import json
import os
import re
import sys

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration", "mig_reconfigure"))
import awx_job  # noqa: E402  pylint: disable=import-error,wrong-import-position
from installed_env import ROOT  # noqa: E402  pylint: disable=import-error,wrong-import-position
from gpusim_nvml import library_env  # noqa: E402  pylint: disable=import-error,wrong-import-position
from mig_reconfigure_lab import H100_3G_X2, H100_BALANCED, Fleet, gpu  # noqa: E402  pylint: disable=import-error,wrong-import-position

LICENSE = {"token": "nls-client-token-not-a-secret-0123456789abcdef"}
VCENTER = {"host": "vc.example.net", "username": "svc-gpuops", "password": "vcenter-password-not-a-secret-42"}


def runner_env(installed, extra=None):
    return dict(installed.env, **(extra or {}))


def assert_no_secret(events, stdout, secrets):
    blob = json.dumps(events) + stdout
    leaked = [s for s in secrets if s in blob]
    assert not leaked, "secret values in the job events or stdout: %d" % len(leaked)
    return blob.count(secrets[0]) if secrets else 0


def test_the_survey_defaults_reach_the_job_as_awx_passes_them():
    # AWX passes a default that passes the survey's validation, even an empty string; a required variable with no
    # answer and no valid default refuses the launch. A question on a role option has no default, so the job carries
    # the variable only when the launch answers it, and the inventory's value stands otherwise (issue 41).
    tmpl = awx_job.template("gpuops | MIG reconfigure")
    extra = awx_job.job_extra_vars(tmpl, {"mig_reconfigure_selected": "all-balanced"})
    assert extra["mig_reconfigure_selected"] == "all-balanced" and extra["mig_reconfigure_hosts"] == "gpu_nodes"
    assert "mig_reconfigure_max_unavailable" not in extra and "mig_reconfigure_serial" not in extra
    assert "mig_reconfigure_selected" not in awx_job.job_extra_vars(tmpl, {})
    assert extra["awx_job_id"] == 4242 and extra["tower_job_template_name"] == "gpuops | MIG reconfigure"
    extra = awx_job.job_extra_vars(awx_job.template("gpuops | driver pin"), {})
    assert extra["driver_pin_mode"] == "check" and extra["driver_pin_serial"] == "1" and "nvidia_driver_version" not in extra
    with pytest.raises(ValueError, match="Value every for 'driver_pin_mode' expected to be one of"):
        awx_job.job_extra_vars(awx_job.template("gpuops | driver pin"), {"driver_pin_mode": "every"})


def test_the_credential_injectors_render_as_awx_renders_them():
    _templates, types = awx_job.setup_vars()
    env, extra = awx_job.inject(types["vcenter"], VCENTER)
    # validate_certs left out: a missing boolean is False; ca_path left out: empty.
    # port left out: its default(), never an empty port the modules' int option would refuse.
    assert env == {"VMWARE_HOST": "vc.example.net", "VMWARE_PORT": "443", "VMWARE_USER": "svc-gpuops",
                   "VMWARE_PASSWORD": VCENTER["password"], "VMWARE_VALIDATE_CERTS": "False", "VMWARE_CA_PATH": ""}
    assert extra == {}
    env, _extra = awx_job.inject(types["vcenter"], dict(VCENTER, port="8443"))
    assert env["VMWARE_PORT"] == "8443"
    env, _extra = awx_job.inject(types["proxmox"], {"host": "pve", "user": "u@pve", "token_id": "t", "token_secret": "s"})
    assert env["PROXMOX_PORT"] == "8006"
    env, extra = awx_job.inject(types["license"], LICENSE)
    assert env == {} and extra == {"nvidia_license_token": LICENSE["token"]}


# Survey defaults that differ from the playbook's on purpose: in AWX the fleet report and the proposed files go to the
# job's artifacts.
SURVEY_DEFAULTS_OF_THEIR_OWN = {"fleet_report_dir": "/runner/artifacts/fleet-report",
                                "gpu_usage_advice_dir": "/runner/artifacts/gpu-usage-advice"}


def _survey_options():
    """{variable: (template, playbook, role option spec or None)} for every survey question."""
    specs = {}
    for path in sorted(os.listdir(os.path.join(ROOT, "roles"))):
        with open(os.path.join(ROOT, "roles", path, "meta", "argument_specs.yml"), encoding="utf-8") as f:
            for entry in yaml.safe_load(f)["argument_specs"].values():
                specs.update(entry.get("options") or {})
    out = []
    templates, _types = awx_job.setup_vars()
    for tmpl in templates:
        with open(os.path.join(ROOT, tmpl["playbook"]), encoding="utf-8") as f:
            text = f.read()
        # site.yml: the playbooks it imports document their variables.
        for imported in re.findall(r"import_playbook: (\S+)", text):
            with open(os.path.join(ROOT, "playbooks", imported), encoding="utf-8") as f:
                text += f.read()
        for q in tmpl["survey"]:
            var = q["variable"]
            # A playbook variable that feeds a role option: "<option>: "{{ <var> | default(...) }}"".
            fed = re.findall(r"^\s*(\w+): \"\{\{ %s\b" % re.escape(var), text, re.M)
            option = var if var in specs else (fed[0] if fed and fed[0] in specs else None)
            out.append((tmpl, q, text, option, specs.get(option)))
    return out


@pytest.mark.parametrize("tmpl,question,text,option,spec", _survey_options(),
                         ids=lambda v: v["variable"] if isinstance(v, dict) and "variable" in v else "")
def test_every_survey_question_matches_the_role_option_it_sets(tmpl, question, text, option, spec):
    var = question["variable"]
    # A host pattern is the playbook's own even where a role also reads it (gpu_pools_hosts): a play's hosts: line
    # never sees the inventory's variables.
    if spec is None or re.search(r"^\s*hosts: \"\{\{ %s\b" % re.escape(var), text, re.M):
        # A playbook's own variable: documented in the playbook's header, as every AWX-ready playbook does, and its
        # default the playbook's own (the driver pin's batch was 100% in the survey, 1 in the playbook).
        assert re.search(r"^#\s+%s\s" % re.escape(var), text, re.M), "%s: %s is neither a role option nor in its header" % (tmpl["playbook"], var)
        own = set(re.findall(r"\b%s \| default\('?([^)',]*)'?\)" % re.escape(var), text)) - {"none", "omit"}
        if "default" in question and var not in SURVEY_DEFAULTS_OF_THEIR_OWN:
            assert own == {str(question["default"])}, "%s: the survey's default %r, the playbook's %s" % (var, question["default"], own)
        return
    # A role option: no default, not required, so AWX leaves it out unless answered and the inventory's value stands.
    assert "default" not in question and not question.get("required"), \
        "%s: a survey default or a required answer beats the inventory's %s" % (tmpl["name"], var)
    if question["type"] == "multiplechoice":
        assert sorted(question["choices"]) == sorted(spec.get("choices") or []), (var, option)
    elif question["type"] == "integer":
        assert spec["type"] == "int", (var, option)
    else:  # text: a string reaches the role (str, or raw where the role takes a count or a percentage too)
        assert spec.get("type", "str") in ("str", "raw", "path"), (var, option, spec.get("type"))
        assert not spec.get("choices"), "%s: a free text answer for an option with choices (%s)" % (var, option)


def _fleet(tmp_path, installed):
    nodes = {"gpu-a": {"gpus": [gpu(instances=H100_3G_X2)]}, "gpu-b": {"gpus": [gpu(instances=H100_BALANCED)]}}
    fleet = Fleet(tmp_path / "fleet", nodes, label_selected=False)
    with open(fleet.inventory, encoding="utf-8") as f:
        inventory = yaml.safe_load(f)
    # The execution environment's Python runs the modules (ansible-core and requirements.txt only).
    for hv in inventory["all"]["children"]["gpu_nodes"]["hosts"].values():
        hv["ansible_python_interpreter"] = installed.bin("python")
    inventory["all"]["children"]["gpu_nodes"]["vars"].pop("mig_reconfigure_selected", None)  # the survey answers it
    return fleet, inventory


def test_mig_reconfigure_job_through_ansible_runner(installed, tmp_path):
    tmpl = awx_job.template("gpuops | MIG reconfigure")
    fleet, inventory = _fleet(tmp_path, installed)
    with fleet.start() as lab:
        kube_env = {k: v for k, v in lab.ansible_env().items() if k.startswith("K8S_AUTH_")}
        pdd, extra = awx_job.private_data_dir(tmp_path / "ok", tmpl, installed.path, inventory,
                                              answers={"mig_reconfigure_selected": "all-balanced"}, env=kube_env)
        # No survey default on a role option: the job carries only what the launch answered (the inventory's value or
        # the role default stands for the others).
        assert "mig_reconfigure_max_unavailable" not in extra and extra["mig_reconfigure_selected"] == "all-balanced"
        rc, status, events, stdout = awx_job.run_job(pdd, tmpl, installed.bin("ansible-runner"), runner_env(installed))
        assert (rc, status) == (0, "successful"), stdout[-4000:]
        stats = awx_job.artifact_data(events)["mig_reconfigure"]
        assert stats["nodes"]["gpu-a"]["result"] == "success" and stats["nodes"]["gpu-a"]["drained"] is True
        assert stats["roll"]["waves"] == [["gpu-a"]], stats["roll"]
        assert stats["nodes"]["gpu-b"] == {"selected": "all-balanced", "result": "skipped", "drained": False}
        assert lab.cordons("gpu-b") == 0

        # A target the GPUs cannot hold: refused in the plan, before any cordon, with the reason in the events.
        pdd, _extra = awx_job.private_data_dir(tmp_path / "bad", tmpl, installed.path, inventory,
                                               answers={"mig_reconfigure_selected": "too-big"}, env=kube_env)
        rc, status, events, stdout = awx_job.run_job(pdd, tmpl, installed.bin("ansible-runner"), runner_env(installed))
        assert rc != 0 and status == "failed", stdout[-3000:]
        messages = [(h, m) for h, _task, m in awx_job.failures(events)]
        assert any("invalid input on 2 node(s)" in m and "[gpu-a]" in m and "[gpu-b]" in m and "3g.40gb" in m
                   for _h, m in messages), messages
        assert lab.cordons("gpu-a") == 1 and lab.cordons("gpu-b") == 0


def test_fleet_report_job_through_ansible_runner(installed, tmp_path):
    tmpl = awx_job.template("gpuops | fleet report")
    state = tmp_path / "gpusim.json"
    state.write_text(json.dumps({"gpus": [{"model": "NVIDIA A100-SXM4-40GB", "mig_mode": "enabled"}]}))
    inventory = {"all": {"hosts": {"node-1": {
        "ansible_connection": "local", "ansible_python_interpreter": installed.bin("python"),
        "fleet_report_driver_facts": False, "gpuops_sysfs_root": str(tmp_path / "empty-root"),
        "fleet_report_environment": library_env(state)}}}}
    # The survey's default, /runner/artifacts/fleet-report, is the private data directory as the execution
    # environment mounts it (/runner); outside a container the same place is <pdd>/artifacts.
    pdd = os.path.join(str(tmp_path / "job"), "pdd")
    pdd, _extra = awx_job.private_data_dir(tmp_path / "job", tmpl, installed.path, inventory,
                                           answers={"fleet_report_dir": os.path.join(pdd, "artifacts", "fleet-report")})
    rc, status, events, stdout = awx_job.run_job(pdd, tmpl, installed.bin("ansible-runner"), runner_env(installed))
    assert (rc, status) == (0, "successful"), stdout[-4000:]
    report = awx_job.artifact_data(events)["fleet_report"]
    assert report["html"] == os.path.join(pdd, "artifacts", "fleet-report", "report.html") and os.path.isfile(report["html"])
    assert report["summary"]["hosts"] == 1 and report["summary"]["gpus"] == 1, report


def test_preflight_job_with_the_licence_credential_keeps_the_token_out_of_the_events(installed, tmp_path):
    tmpl = awx_job.template("gpuops | preflight")
    state = tmp_path / "gpusim.json"
    state.write_text(json.dumps({"gpus": [{"model": "NVIDIA A100-SXM4-40GB", "mig_mode": "disabled"}]}))
    inventory = {"all": {"children": {"gpu_nodes": {"hosts": {"node-1": {
        "ansible_connection": "local", "ansible_python_interpreter": installed.bin("python"),
        "gpuops_sysfs_root": str(tmp_path / "empty-root"),
        "node_preflight_environment": library_env(state)}}}}}}
    pdd, _extra = awx_job.private_data_dir(tmp_path / "job", tmpl, installed.path, inventory, credentials={"license": LICENSE})
    rc, status, events, stdout = awx_job.run_job(pdd, tmpl, installed.bin("ansible-runner"), runner_env(installed))
    # The verdict itself (this bare simulated node has no IOMMU, driver or licence) is not the point here: the
    # job ran to its verdict, published it and kept the injected token out of everything AWX stores.
    assert status in ("successful", "failed") and rc in (0, 2), stdout[-4000:]
    verdict = awx_job.artifact_data(events)["node_preflight"]
    assert "node-1" in json.dumps(verdict), verdict
    _types = awx_job.setup_vars()[1]
    assert assert_no_secret(events, stdout, awx_job.secrets_of(_types["license"], LICENSE)) == 0
