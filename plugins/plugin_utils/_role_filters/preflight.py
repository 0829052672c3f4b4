# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side node preflight filters: per-node report, fleet collection, summary and JUnit XML.

Role-internal: the collection's roles and playbooks call these through ``gpuops.provision.internal('<name>', ...)``
(see ``__init__.py``); not a public interface.
"""

from __future__ import annotations

import base64

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.module_utils._preflight import join_config as J
from ansible_collections.gpuops.provision.plugins.module_utils._preflight import checks as P
from ansible_collections.gpuops.provision.plugins.plugin_utils import _role_messages as M
from ansible_collections.gpuops.provision.plugins.plugin_utils._plain import plain as _plain


def preflight_report(facts, node, options=None, generated_at=None):
    try:
        return P.evaluate(str(node), _plain(facts or {}), _plain(options or {}), generated_at)
    except P.PreflightError as e:
        raise AnsibleFilterError("gpuops.provision.preflight_report: %s" % e)


def preflight_cdi_files(read, root="/"):
    """The CDI spec files slurped on the node (the loop's ``results``, or the registered {results: [...]}) as
    [{path, text}] or [{path, error}], paths as the node sees them (without ``root``).

    The role passes ``results`` alone: the whole result of a loop over no files carries ansible-core's deprecated
    ``skipped_reason`` (2.21: _internal/_task.py set_skipped), and reading it prints a deprecation warning."""
    out = []
    prefix = str(root or "/").rstrip("/")
    read = _plain(read)
    for res in (read if isinstance(read, list) else (read or {}).get("results")) or []:
        path = str((res.get("item") or {}).get("path") or res.get("source") or "?")
        if prefix and path.startswith(prefix + "/"):
            path = path[len(prefix):]
        if res.get("failed") or "content" not in res:
            out.append({"path": path, "error": str(res.get("msg") or "could not be read")})
            continue
        out.append({"path": path, "text": base64.b64decode(res["content"]).decode("utf-8", "replace")})
    return out


def preflight_driver_root(paths, driver_root=P.OPERATOR_DRIVER_ROOT):
    return P.driver_root_facts(_plain(paths or []), str(driver_root))


def preflight_taint_tolerated(tolerations, key, value, effect):
    return P.tolerates(_plain(tolerations or []), _plain(key), _plain(value), _plain(effect))


def preflight_needs(checks):
    return P.needs(_plain(checks or []))


def preflight_not_ready_message(report, host, fail_on_warn=False):
    return M.preflight_not_ready(_plain(report), _plain(host), _plain(fail_on_warn))


def preflight_node_name(explicit, documents=None, hostname=None):
    """The node's Kubernetes name: explicit, else the JoinConfiguration's nodeRegistration.name, else the host name
    as kubeadm registers it; dict(name, source)."""
    try:
        return J.kubeadm_node_name(_plain(explicit), _plain(documents), _plain(hostname))
    except J.JoinConfigError as e:
        raise AnsibleFilterError("gpuops.provision.preflight_node_name: %s" % e)


def filters():
    """This file's role-internal filters by name (called through gpuops.provision.internal)."""
    return {
        "preflight_report": preflight_report,
        "preflight_cdi_files": preflight_cdi_files,
        "preflight_driver_root": preflight_driver_root,
        "preflight_taint_tolerated": preflight_taint_tolerated,
        "preflight_needs": preflight_needs,
        "preflight_not_ready_message": preflight_not_ready_message,
        "preflight_node_name": preflight_node_name,
    }
