# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vsphere_vm_class's workflow: read the VM classes and namespaces (vCenter REST) and the Supervisor cluster's hosts
(pyVmomi), validate every class's vGPUs against those hosts, plan every class and binding (vm_class), then create or
update the classes, bind them, and delete last."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api as vsphere_api, rest as vsphere_rest, vgpu, vm_class
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere.vm import Inventory

try:
    from pyVmomi import vim
except ImportError:
    pass  # reported through vsphere_api.HAS_PYVMOMI

CLASSES = "/api/vcenter/namespace-management/virtual-machine-classes"
NAMESPACES = "/api/vcenter/namespaces/instances"


def read(rest: vsphere_rest.RestSession) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """({class id: Info}, {namespace: its vm_service_spec})."""
    infos = {str(c["id"]): c for c in rest.call("GET", CLASSES, what="listing the VM classes") or []}
    namespaces = {}
    for summary in rest.call("GET", NAMESPACES, what="listing the namespaces") or []:
        name = str(summary["namespace"])
        info = rest.call("GET", "%s/%s" % (NAMESPACES, name), what="reading namespace %s" % name) or {}
        namespaces[name] = dict(info.get("vm_service_spec") or {})
    return infos, namespaces


def validate(session: vsphere_api.Session, params: Mapping[str, Any], warnings: list[str]) -> None:
    """Every class's vGPUs must be offered together by one connected host of the Supervisor cluster outside maintenance
    mode whose GPUs can take them (the rules vsphere_vm_vgpu applies to a VM of the class)."""
    with_vgpus = [c for c in params["classes"] if c.get("state") != "absent" and c.get("vgpu_profiles")]
    if not with_vgpus:
        return
    if not params.get("cluster"):
        raise vgpu.VgpuError("VM class %s has vGPU profiles: cluster (the Supervisor cluster whose hosts run its VMs) is "
                             "required to check them" % with_vgpus[0]["name"])
    inv = Inventory(session)
    rows = inv.cluster(session.find_one(vim.ClusterComputeResource, params["cluster"], what="cluster"))
    offers = {n: vsphere_api.host_offer(r) for n, r in rows.items()}
    problems = []
    for spec in with_vgpus:
        profiles = list(spec["vgpu_profiles"])
        try:
            vgpu.validate_profiles("class %s" % spec["name"], profiles, params["cluster"], offers, "cluster",
                                   host_rules=inv.rules_of(rows, profiles, "auto", warnings),
                                   host_errors=inv.gpu_errors(rows, profiles, warnings),
                                   facts={n: inv.facts(r, profiles, warnings) for n, r in rows.items()})
        except vgpu.VgpuError as e:
            problems.append(str(e))
    if problems:
        raise vgpu.VgpuError("; ".join(problems) + "; nothing changed")


def run(session: vsphere_api.Session, params: Mapping[str, Any], check_mode: bool, warnings: list[str]) -> dict[str, Any]:
    names = [c["name"] for c in params["classes"]]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise vgpu.VgpuError("VM class(es) %s listed twice; nothing changed" % ", ".join(twice))
    api = vm_class.device_api(params["device_api"], vgpu.parse_version(session.content.about.apiVersion))
    validate(session, params, warnings)
    rest = vsphere_rest.RestSession(params)
    try:
        infos, namespaces = read(rest)
        plans = [vm_class.plan_class(spec, infos.get(spec["name"]), api) for spec in params["classes"]]
        bindings = vm_class.plan_bindings(params["classes"], namespaces)
        vm_class.check_deletes(plans, bindings, infos)
        if not check_mode:
            apply(rest, plans, bindings)
    finally:
        rest.close()
    after = {name: list(info and vm_class.profiles_of(info) or []) for name, info in infos.items()}
    for plan in plans:
        if plan["operation"] == "delete":
            after.pop(plan["name"], None)
        elif plan["after"] is not None:
            after[plan["name"]] = plan["after"]["vgpu_profiles"]
    classes = [dict(name=p["name"], operation=p["operation"], changed=p["changed"], before=p["before"], after=p["after"])
               for p in plans]
    ns_results = [dict(name=ns, changed=b["changed"], before=b["before"], after=b["after"]) for ns, b in bindings.items()]
    return dict(classes=classes, namespaces=ns_results, device_api=api,
                exposure=vm_class.exposure(after, {ns: b["after"] for ns, b in bindings.items()}))


def apply(rest: vsphere_rest.RestSession, plans: list[dict[str, Any]], bindings: Mapping[str, Mapping[str, Any]]) -> None:
    """Creates and updates, then the namespaces, then deletes (a class is unbound before it goes)."""
    done: list[str] = []

    def step(what: str, method: str, path: str, body: Any = None) -> None:
        try:
            rest.call(method, path, body, what=what)
        except vsphere_api.VsphereError as e:
            raise vsphere_api.VsphereError("%s (already done: %s)" % (e, ", ".join(done) or "nothing"))
        done.append(what)

    for plan in plans:
        if plan["operation"] == "create":
            step("create VM class %s" % plan["name"], "POST", CLASSES, plan["body"])
        elif plan["operation"] == "update":
            step("update VM class %s" % plan["name"], "PATCH", "%s/%s" % (CLASSES, plan["name"]), plan["body"])
    for ns, binding in sorted(bindings.items()):
        if binding["changed"]:
            step("bind namespace %s to %s" % (ns, ", ".join(binding["after"]) or "no VM class"), "PATCH",
                 "%s/%s" % (NAMESPACES, ns), binding["body"])
    for plan in plans:
        if plan["operation"] == "delete":
            step("delete VM class %s" % plan["name"], "DELETE", "%s/%s" % (CLASSES, plan["name"]))


def outcome(fields: Mapping[str, Any], diff: bool) -> dict[str, Any]:
    changed = any(c["changed"] for c in fields["classes"]) or any(n["changed"] for n in fields["namespaces"])
    result = dict(fields, changed=changed)
    if diff:
        result["diff"] = dict(
            before=dict(classes={c["name"]: c["before"] for c in fields["classes"] if c["changed"]},
                        namespaces={n["name"]: n["before"] for n in fields["namespaces"] if n["changed"]}),
            after=dict(classes={c["name"]: c["after"] for c in fields["classes"] if c["changed"]},
                       namespaces={n["name"]: n["after"] for n in fields["namespaces"] if n["changed"]}))
    return result
