# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What every vSphere module does around its work: check pyvmomi, open the session, pass on warnings, turn the
domain errors into a failed result; and the per-host result with its diff that the host modules return."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.gpuops.provision.plugins.module_utils._common import disruption
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import api, vgpu

ERRORS: Tuple[Type[Exception], ...] = (api.VsphereError, vgpu.VgpuError)


def _warn(module: Any, warnings: List[str]) -> None:
    for w in warnings:
        module.warn(w)


def keep(warnings: List[str], pair: Tuple[Any, List[str]]) -> Any:
    """The result of a ``(result, warnings)`` pair, its warnings added to ``warnings``."""
    warnings.extend(pair[1])
    return pair[0]


def run(module: Any, work: Callable[[Any, List[str]], Any], errors: Tuple[Type[Exception], ...] = ERRORS,
        failure: Optional[Callable[[Exception], Dict[str, Any]]] = None, before: Optional[Callable[[], Any]] = None) -> Any:
    """``work(session, warnings)`` in one session opened from the module's parameters; return its result.

    Warnings (the session's, then what ``work`` adds to the list) are shown whether or not it fails. One of
    ``errors`` (raised by ``before``, the connection or ``work``) fails the module with ``failure(error)``, by
    default its message alone.
    """
    if not api.HAS_PYVMOMI:
        module.fail_json(msg=missing_required_lib("pyvmomi"), exception=api.PYVMOMI_IMPORT_ERROR)
    warnings: List[str] = []
    try:
        if before is not None:
            before()
        with api.Session(module.params) as session:
            warnings.extend(session.warnings)
            result = work(session, warnings)
    except errors as e:
        _warn(module, warnings)
        module.fail_json(**(failure(e) if failure is not None else dict(msg=str(e))))
    _warn(module, warnings)
    return result


def host_result(hosts: Sequence[Dict[str, Any]], diff: bool, disrupts: bool = False, **extra: Any) -> Dict[str, Any]:
    """``changed``, the per-host results (and ``extra``), and with ``diff`` the before/after of the changed hosts.

    ``disrupts``: the hosts carry ``disruptions``; the result then has all of them, in the hosts' order, and they
    lead the diff (disruption.diff_first)."""
    result: Dict[str, Any] = dict(changed=any(h["changed"] for h in hosts), hosts=list(hosts), **extra)
    if disrupts:
        result["disruptions"] = disruption.flatten(hosts)
    if diff:
        result["diff"] = disruption.diff_first(result.get("disruptions") or [], dict(
            before={h["name"]: h["before"] for h in hosts if h["changed"]},
            after={h["name"]: h["after"] for h in hosts if h["changed"]}))
    return result
