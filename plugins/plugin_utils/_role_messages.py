# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The failure messages the roles print (private): one function per message, called through a filter.

Controller-side presentation only: each function turns a role's registered result or facts into the text of one
``fail``/``assert`` message, exactly as the Jinja loop it replaces rendered it (issue 20: role logic in filters, not
``{% ... %}`` blocks). A key the old template defaulted falls back the same way; a value Jinja printed as nothing
(``None``) is printed as nothing, while a list joined with ``join`` shows ``None`` as Jinja's join did.

=============================  ==================================================  ===============================
function                       role / task                                          filter
=============================  ==================================================  ===============================
``license_timeout``            nvidia_license tasks/main.yml, "Fail when the        ``license_timeout_message``
                               licence was not acquired in time"
``preflight_not_ready``        node_preflight tasks/main.yml, "Fail the nodes that  ``preflight_not_ready_message``
                               are not ready"
``driver_unavailable``         nvidia_driver tasks/debian_resolve.yml and           ``driver_unavailable_message``
                               redhat_resolve.yml, "Fail when the repositories do
                               not offer the version"
``driver_off_pin``             nvidia_driver tasks/main.yml, "Fail when packages    ``driver_off_pin_message``
                               of the driver are not on the pin after the install"
``mig_invalid_plans``          mig_reconfigure tasks/plan.yml, "Fail the play,      ``mig_invalid_plans_message``
                               naming every node whose plan is invalid"
=============================  ==================================================  ===============================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# A default for a key that must not be confused with any value the key may hold (None included).
_MISSING: Any = object()


def _text(value: Any) -> str:
    """A value as ``{{ value }}`` prints it inside a message: None prints as nothing."""
    return "" if value is None else str(value)


def _get(value: Any, *path: Any, default: Any = None) -> Any:
    """``value.a.b | default(default)``: the default where a key is missing or a step is not a mapping (Jinja's
    undefined); a key present with None keeps None (``default`` without ``true`` does not replace it)."""
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return default
        value = value[key]
    return value


def _items(value: Any) -> list[Any]:
    """The elements of a list the message loops over; nothing where it is missing or not a list."""
    return list(value) if isinstance(value, (list, tuple)) else []


def _joined(values: Any) -> str:
    """``values | join(', ')``: each element as str() prints it (None as 'None')."""
    return ", ".join(str(v) for v in _items(values))


def _gpu_state(gpu: Any) -> Any:
    """A GPU's licence state, else its error (NVML could not read the state), else '?'."""
    return _get(gpu, "state", default=_get(gpu, "error", default="?"))


def license_timeout(state: Any, host: str, timeout: Any, token_dir: str, service: str) -> str:
    """Why the licence was not acquired in time: NVML missing (with its reason), no licensable GPU, or each GPU's
    licence state; then the gridd.conf feature type and the token files, from the ``nvidia_license_info`` result
    ``state``. ``token_dir`` is the role's token directory, named where the result has none."""
    if not _get(state, "nvml", "available", default=False):
        reason = _get(state, "nvml", "reason", default=_get(state, "msg", default="unknown"))
        why = "NVML is not available: %s. " % _text(reason)
    elif _get(state, "licensed", default=_MISSING) is None:
        why = "NVML reports no licensable GPU (not a vGPU guest?). "
    else:
        why = "".join("GPU %s (%s): %s. " % (_text(_get(g, "index")), _text(_get(g, "model", default="?")), _text(_gpu_state(g)))
                      for g in _items(_get(state, "gpus")))
    tokens = ", ".join(str(_get(t, "name")) for t in _items(_get(state, "gridd", "tokens")))
    return ("%s: no licence after %s s. %s gridd.conf FeatureType=%s, tokens in %s: %s. "
            "Check journalctl -u %s and that the guest reaches the CLS/DLS instance."
            % (_text(host), _text(timeout), why, _text(_get(state, "gridd", "settings", "FeatureType", default="unset")),
               _text(_get(state, "gridd", "token_dir", default=token_dir)), tokens or "none", _text(service)))


def preflight_not_ready(report: Any, host: str, fail_on_warn: Any) -> str:
    """The node is not ready: its failed checks, then each failing check (a warning too with ``fail_on_warn``) with
    its evidence and remedy, from the ``node_preflight_report`` fact ``report``."""
    lines = "".join(" [%s] %s -- remedy: %s " % (_text(_get(c, "id")), _text(_get(c, "evidence")), _text(_get(c, "remedy")))
                    for c in _items(_get(report, "checks"))
                    if _get(c, "status") == "fail" or (_get(c, "status") == "warn" and fail_on_warn))
    return "%s is NOT READY: %s failed. %s" % (_text(host), _joined(_get(report, "failed_checks")), lines)


def driver_unavailable(resolved: Any, host: str, version: Any) -> str:
    """The repositories do not offer the driver version: the missing packages and the versions offered for each,
    from the ``driver_resolve`` filter's result ``resolved``."""
    missing = _get(resolved, "missing")
    offered = _get(resolved, "offered")

    def offer(package: Any) -> str:
        versions = _get(offered, package)
        return "%s: %s" % (_text(package), _joined(versions) if versions else "none")

    each = "; ".join(offer(p) for p in _items(missing))
    return ("%s: NVIDIA driver %s is not available in the configured repositories for %s (offered: %s). "
            "Nothing was changed." % (_text(host), _text(version), _joined(missing), each))


def driver_off_pin(facts: Any, host: str, version: Any) -> str:
    """Driver packages left on another version than the pin after the install, each with its installed version,
    from the role's ``nvidia_driver_facts`` (``off_driver`` names, ``packages`` versions)."""
    packages = _get(facts, "packages")
    each = ", ".join("%s=%s" % (_text(n), _text(_get(packages, n))) for n in _items(_get(facts, "off_driver")))
    return ("%s: after installing NVIDIA driver %s these driver packages are on another version: %s. "
            "Check the apt pin (/etc/apt/preferences.d) and the repository's dependencies." % (_text(host), _text(version), each))


def mig_invalid_plans(bad: Any) -> str:
    """The MIG roll stops before any node: every node whose plan is invalid, with its error, from the plan records
    (``node``, ``error``) the role gathered."""
    plans = _items(bad)
    each = "; ".join("[%s] %s" % (_text(_get(p, "node")), _text(_get(p, "error"))) for p in plans)
    return "MIG reconfigure stopped before touching any node; invalid input on %d node(s): %s" % (len(plans), each)
