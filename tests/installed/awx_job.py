# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""An AWX job as AWX hands it to ansible-runner, built from the job templates and credential types that
playbooks/awx_setup.yml creates (the single source of them; docs/awx.md describes the same).

Each rule follows AWX's code:
- extra vars: the survey defaults that pass the survey's own validation, then the launch answers
  (awx/main/models/mixins.py SurveyJobTemplateMixin._update_unified_job_kwargs and _survey_element_validation),
  plus the job's meta variables (awx/main/models/unified_jobs.py UnifiedJob.awx_meta_vars: awx_job_id, ...);
- credentials: custom injectors rendered with Jinja2's ImmutableSandboxedEnvironment over the credential's inputs,
  non-empty values only, missing booleans False; env injectors into the job's environment, extra_vars injectors into
  a file of their own under env/ passed as ``-e @file`` (awx/main/models/credential/__init__.py
  CredentialType.inject_credential);
- the private data directory: inventory/, env/extravars, env/envvars, env/cmdline, project/ (ansible-runner's
  input layout, which AWX writes in awx/main/tasks/jobs.py BaseTask.build_private_data_files and friends).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess

import yaml
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETUP = os.path.join(ROOT, "playbooks", "awx_setup.yml")


class _Loader(yaml.SafeLoader):  # pylint: disable=too-many-ancestors
    """Reads Ansible's !unsafe (the injectors' templates, which AWX renders, not Ansible) as plain strings."""


_Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def setup_vars():
    """(job templates, {credential type key: type}) as awx_setup.yml defines them."""
    with open(SETUP, encoding="utf-8") as f:
        play = yaml.load(f, Loader=_Loader)[0]  # noqa: S506 - SafeLoader subclass
    return play["vars"]["__awx_templates"], {t["key"]: t for t in play["vars"]["__awx_credential_types"]}


def template(name):
    templates, _types = setup_vars()
    return next(t for t in templates if t["name"] == name)


def _survey_errors(element, data):
    """The checks of _survey_element_validation that the collection's surveys use (text, multiplechoice, integer)."""
    var = element["variable"]
    if var not in data:
        return ["'%s' value missing" % var] if element.get("required") else []
    value = data[var]
    if element["type"] in ("text", "textarea", "password"):
        if not isinstance(value, str):
            return ["Value %s for '%s' expected to be a string." % (value, var)]
        if element.get("min") not in ("", None) and len(value) < int(element["min"]):
            return ["'%s' value %s is too small" % (var, value)]
        if element.get("max") not in ("", None) and len(value) > int(element["max"]):
            return ["'%s' value %s is too large" % (var, value)]
    elif element["type"] == "integer":
        # AWX's own test, type() and not isinstance(): a bool is refused.
        if type(value) is not int:  # pylint: disable=unidiomatic-typecheck
            return ["Value %s for '%s' expected to be an integer." % (value, var)]
    elif element["type"] == "multiplechoice":
        if value not in element["choices"]:
            return ["Value %s for '%s' expected to be one of %s." % (value, var, element["choices"])]
    return []


def job_extra_vars(tmpl, answers, job_id=4242):
    """The job's extra vars: valid survey defaults, then the answers (which must pass the survey), then AWX's meta
    variables. Raises ValueError with AWX's messages when an answer or a required value is refused."""
    extra = {}
    for element in tmpl["survey"]:
        default = element.get("default")
        if default is not None and not _survey_errors(element, {element["variable"]: default}):
            extra[element["variable"]] = default
    errors = [e for element in tmpl["survey"] for e in _survey_errors(element, dict(extra, **answers))]
    if errors:
        raise ValueError("; ".join(errors))
    extra.update(answers)
    for prefix in ("awx", "tower"):
        extra.update({prefix + "_job_id": job_id, prefix + "_job_launch_type": "manual",
                      prefix + "_job_template_name": tmpl["name"]})
    return extra


def inject(ctype, inputs):
    """(env, extra_vars) a credential of type ``ctype`` with ``inputs`` injects."""
    namespace = {}
    for key, value in inputs.items():
        if isinstance(value, bool) or len(value):
            namespace[key] = value
    for field in ctype["inputs"]["fields"]:
        if field["type"] == "boolean" and field["id"] not in inputs:
            namespace[field["id"]] = False
    sandbox = ImmutableSandboxedEnvironment()
    env = {k: sandbox.from_string(t).render(**namespace) for k, t in ctype["injectors"].get("env", {}).items()}

    def build(node):
        if isinstance(node, dict):
            return {build(k): build(v) for k, v in node.items()}
        if isinstance(node, list):
            return [build(x) for x in node]
        return sandbox.from_string(node).render(**namespace)

    return env, build(ctype["injectors"].get("extra_vars", {}))


def secrets_of(ctype, inputs):
    """The values of the credential's secret fields (they must never reach the job's events or stdout)."""
    return [inputs[f["id"]] for f in ctype["inputs"]["fields"] if f.get("secret") and inputs.get(f["id"])]


def private_data_dir(base, tmpl, installed_path, inventory, answers=None, credentials=None, env=None, check=False,
                     project=None):
    """Lay out an AWX job's private data directory; returns (path, extra vars). ``inventory``: a dict written to
    inventory/hosts.yml, or None when run_job is given an inventory path instead. ``check``: an AWX check job
    (job_type check: ansible-playbook --check). ``project``: a user's project folder, synced as project/ (see
    project_update) instead of the installed collection's playbooks."""
    _templates, types = setup_vars()
    pdd = os.path.join(str(base), "pdd")
    for sub in ("env", "project") + (("inventory",) if inventory is not None else ()):
        os.makedirs(os.path.join(pdd, sub), exist_ok=True)
    if inventory is not None:
        with open(os.path.join(pdd, "inventory", "hosts.yml"), "w", encoding="utf-8") as f:
            yaml.safe_dump(inventory, f)
    extra = job_extra_vars(tmpl, answers or {})
    envvars = dict(env or {})
    cmdline = ["--check"] if check else []
    for key, inputs in (credentials or {}).items():
        assert key in tmpl["credentials"], "%s does not take a %s credential" % (tmpl["name"], key)
        cenv, cvars = inject(types[key], inputs)
        envvars.update(cenv)
        if cvars:
            path = os.path.join(pdd, "env", "credential-%s.yml" % key)
            with open(path, "w", encoding="utf-8") as f:
                yaml.safe_dump(cvars, f)
            os.chmod(path, 0o400)
            cmdline += ["-e", "@" + path]
    with open(os.path.join(pdd, "env", "extravars"), "w", encoding="utf-8") as f:
        json.dump(extra, f)
    with open(os.path.join(pdd, "env", "envvars"), "w", encoding="utf-8") as f:
        json.dump(envvars, f)
    if cmdline:
        with open(os.path.join(pdd, "env", "cmdline"), "w", encoding="utf-8") as f:
            f.write(" ".join(cmdline))
    if project is not None:
        shutil.copytree(project, os.path.join(pdd, "project"), dirs_exist_ok=True)
    else:  # the project: the playbooks as the installed collection ships them
        shutil.copytree(os.path.join(installed_path, "playbooks"), os.path.join(pdd, "project", "playbooks"), dirs_exist_ok=True)
    return pdd, extra


def job_playbook(tmpl, playbook_dir="playbooks"):
    """The playbook a template runs in the project, as awx_setup.yml sets it (awx_setup_playbook_dir/<file name>)."""
    return "%s/%s" % (playbook_dir, os.path.basename(tmpl["playbook"]))


def project_update(pdd, galaxy, env):
    """What AWX's project sync does for a job before it runs (awx/main/tasks/jobs.py RunJob.pre_run_hook: the
    install_collections step of awx/playbooks/project_update.yml): `ansible-galaxy collection install -r
    collections/requirements.yml` into the job's requirements_collections/, which RunJob.build_env puts first on the
    job's collections path, before the execution environment's own. Returns that directory."""
    target = os.path.join(pdd, "requirements_collections")
    proc = subprocess.run([galaxy, "collection", "install", "--offline", "-r",
                           os.path.join(pdd, "project", "collections", "requirements.yml"), "-p", target],
                          env=env, cwd=os.path.join(pdd, "project"), capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, "project update failed (%d):\n%s\n%s" % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
    return target


def run_job(pdd, tmpl, runner, env, ident="job", timeout=1200, inventory=None, playbook=None):
    """ansible-runner run, as AWX's worker does; returns (rc, status, events, stdout). ``inventory``: a path that
    replaces the private data directory's inventory/ (an inventory with group_vars, as AWX sources one from a project).
    ``playbook``: the project's playbook when it is not the template's own path (a user's project)."""
    cmd = [runner, "run", pdd, "-p", playbook or tmpl["playbook"], "--ident", ident] + (["--inventory", inventory] if inventory else [])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    art = os.path.join(pdd, "artifacts", ident)
    if not os.path.isdir(art):
        raise AssertionError("ansible-runner wrote no artifacts (%d):\n%s\n%s" % (proc.returncode, proc.stdout[-4000:], proc.stderr[-4000:]))
    events = []
    for path in sorted(glob.glob(os.path.join(art, "job_events", "*.json")),
                       key=lambda p: int(os.path.basename(p).split("-")[0])):
        with open(path, encoding="utf-8") as f:
            events.append(json.load(f))
    with open(os.path.join(art, "rc"), encoding="utf-8") as f:
        rc = int(f.read().strip())
    with open(os.path.join(art, "status"), encoding="utf-8") as f:
        status = f.read().strip()
    with open(os.path.join(art, "stdout"), encoding="utf-8") as f:
        stdout = f.read()
    return rc, status, events, stdout


def failures(events):
    """[(host, task, msg)] of the job's failed tasks (runner_on_failed events whose failure was not ignored)."""
    return [(e["event_data"].get("host"), e["event_data"].get("task"), e["event_data"]["res"].get("msg", ""))
            for e in events if e.get("event") == "runner_on_failed" and not e["event_data"].get("ignore_errors")]


def artifact_data(events):
    """What AWX stores as the job's artifacts: the stats event's artifact_data (ansible-runner's awx_display
    callback, v2_playbook_on_stats: set_stats data, the global part)."""
    stats = [e for e in events if e.get("event") == "playbook_on_stats"]
    assert len(stats) == 1, [e.get("event") for e in events][-5:]
    return stats[0]["event_data"].get("artifact_data") or {}
