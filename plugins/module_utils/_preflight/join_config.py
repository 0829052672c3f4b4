# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Register a node with the preflight gate taint from its first moment in the cluster (pure, no I/O).

A node that joins untainted is schedulable between its registration and the first gate run. The taint must therefore
be part of the registration itself:

* kubeadm: ``JoinConfiguration.nodeRegistration.taints`` (``render_join_taint``, ``merge_join_documents``);
* other installers: kubelet's ``--register-with-taints`` flag (``register_with_taints_flag``, ``kubelet_env_text``
  for an environment file such as /etc/default/kubelet's ``KUBELET_EXTRA_ARGS``).

Upstream behaviour this follows (kubernetes/kubernetes):

* ``cmd/kubeadm/app/apis/kubeadm/v1beta4/types.go`` ``NodeRegistrationOptions.Taints`` (``json:"taints"``, no
  omitempty): "If this field is unset, i.e. nil, it will be defaulted with a control-plane taint for control-plane
  nodes. If you don't want to taint your control-plane node, set this field to an empty slice". v1beta3 has the same
  field. The defaulting is ``SetJoinDynamicDefaults`` (``cmd/kubeadm/app/util/config/joinconfiguration.go``: the
  control-plane taint only when ``controlPlane`` is set) -> ``SetNodeRegistrationDynamicDefaults``
  (``cmd/kubeadm/app/util/config/initconfiguration.go``: only ``if controlPlaneTaint && cfg.Taints == nil``). So for
  a worker an omitted list means no taint, an explicit ``[]`` means none, and for a control-plane join an omitted
  list means ``node-role.kubernetes.io/control-plane:NoSchedule``, which we must keep when we set the list.
* ``cmd/kubeadm/app/phases/kubelet/flags.go`` ``buildKubeletArgMapCommon``: for a worker join
  (``registerTaintsUsingFlags := cfg.ControlPlane == nil`` in ``cmd/kubeadm/app/cmd/phases/join/kubelet.go``) the
  taints become ``--register-with-taints=<Taint.ToString()>,...`` in /var/lib/kubelet/kubeadm-flags.env; a
  control-plane join gets them from the mark-control-plane phase instead. ``nodeRegistration.kubeletExtraArgs``
  override that generated flag (``cmd/kubeadm/app/util/arguments.go`` ``ArgumentsToCommand``: an override drops every
  base argument of the same name), so a user's own ``register-with-taints`` extra argument would drop ours: it gets
  the gate taint merged in too.
* ``cmd/kubelet/app/options/options.go``: ``fs.Var(utiltaints.NewTaintsVar(&c.RegisterWithTaints),
  "register-with-taints", "Register the node with the given list of taints (comma separated
  \"<key>=<value>:<effect>\"). No-op if register-node is false.")``. ``pkg/util/taints/taints.go`` ``taintsVar.Set``
  splits on commas and *replaces* the list (the last occurrence of the flag wins), each entry parsed by
  ``k8s.io/cloud-provider/util/taints`` ``ParseTaint``; so the gate taint is merged into every occurrence.
* Taint validation as the API server does it: ``pkg/apis/core/validation/validation.go`` ``validateNodeTaints`` (key:
  ``ValidateLabelName`` = apimachinery ``IsQualifiedName``; value: ``IsValidLabelValue``; effect:
  ``validateTaintEffect`` NoSchedule|PreferNoSchedule|NoExecute, required; taints unique by key and effect pair) with
  the rules of ``staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go``.
* Rendering: ``staging/src/k8s.io/api/core/v1/taint.go`` ``Taint.ToString`` (``key=value:effect``, ``key:effect``).
"""

from __future__ import annotations

import copy
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional, Union

API_GROUP = "kubeadm.k8s.io"
API_VERSIONS = ("kubeadm.k8s.io/v1beta4", "kubeadm.k8s.io/v1beta3")
DEFAULT_API_VERSION = API_VERSIONS[0]
JOIN_KIND = "JoinConfiguration"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# cmd/kubeadm/app/constants/constants.go ControlPlaneTaint: what kubeadm puts on a control-plane join that omits taints.
CONTROL_PLANE_TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
REGISTER_WITH_TAINTS = "register-with-taints"
FLAG = "--" + REGISTER_WITH_TAINTS
DEFAULT_ENV_VAR = "KUBELET_EXTRA_ARGS"

# staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go
_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QNAME_RE = re.compile(r"\A" + _QNAME_FMT + r"\Z")
_LABEL_VALUE_RE = re.compile(r"\A(" + _QNAME_FMT + r")?\Z")
_DNS1123_SUBDOMAIN_RE = re.compile(r"\A[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
QUALIFIED_NAME_MAX = 63
LABEL_VALUE_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
_ENV_NAME_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
_TAINT_FIELDS = ("key", "value", "effect", "timeAdded")


class JoinConfigError(ValueError):
    """Invalid input; the message names the field."""


# --- taint validation ------------------------------------------------------------------------------------------------

def qualified_name_errors(value: str) -> list[str]:
    """apimachinery IsQualifiedName: ``[prefix/]name``, prefix a DNS-1123 subdomain, name 1-63 alphanumerics with
    '-', '_', '.' inside. Returns the problems (empty when valid)."""
    errs = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            if len(prefix) > DNS1123_SUBDOMAIN_MAX:
                errs.append("prefix part must be no more than %d characters" % DNS1123_SUBDOMAIN_MAX)
            if not _DNS1123_SUBDOMAIN_RE.match(prefix):
                errs.append("prefix part must be a DNS-1123 subdomain (lower case alphanumerics, '-' or '.', starting "
                            "and ending with an alphanumeric character, e.g. 'example.com')")
    else:
        return ["must be a name with an optional DNS subdomain prefix and one '/' (e.g. 'example.com/MyName')"]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX:
        errs.append("name part must be no more than %d characters" % QUALIFIED_NAME_MAX)
    if name and not _QNAME_RE.match(name):
        errs.append("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
                    "an alphanumeric character (e.g. 'MyName', 'my.name', '123-abc')")
    return errs


def label_value_errors(value: str) -> list[str]:
    """apimachinery IsValidLabelValue: empty, or 1-63 alphanumerics with '-', '_', '.' inside."""
    errs = []
    if len(value) > LABEL_VALUE_MAX:
        errs.append("must be no more than %d characters" % LABEL_VALUE_MAX)
    if not _LABEL_VALUE_RE.match(value):
        errs.append("must be empty or consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
                    "an alphanumeric character")
    return errs


def validate_taint(taint: object, where: str = "taint") -> dict[str, Any]:
    """The taint as {key, value, effect} (plus timeAdded when given), validated as the API server validates node
    taints; JoinConfigError names the bad field (``<where>.key`` ...)."""
    if not isinstance(taint, Mapping):
        raise JoinConfigError("%s must be a mapping with key, value and effect, not %r" % (where, taint))
    unknown = sorted(str(k) for k in taint if k not in _TAINT_FIELDS)
    if unknown:
        raise JoinConfigError("%s: unknown field(s) %s; a taint has key, value and effect" % (where, ", ".join(unknown)))
    key = taint.get("key")
    if not isinstance(key, str) or not key:
        raise JoinConfigError("%s.key is required (a qualified name such as gpuops.io/preflight), got %r" % (where, key))
    errs = qualified_name_errors(key)
    if errs:
        raise JoinConfigError("%s.key %r is not a valid taint key: %s" % (where, key, "; ".join(errs)))
    value = taint.get("value")
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise JoinConfigError("%s.value must be a string, got %r" % (where, value))
    errs = label_value_errors(value)
    if errs:
        raise JoinConfigError("%s.value %r is not a valid taint value: %s" % (where, value, "; ".join(errs)))
    effect = taint.get("effect")
    if effect in (None, ""):
        raise JoinConfigError("%s.effect is required: one of %s" % (where, ", ".join(TAINT_EFFECTS)))
    if effect not in TAINT_EFFECTS:
        raise JoinConfigError("%s.effect %r is not supported: one of %s" % (where, effect, ", ".join(TAINT_EFFECTS)))
    out = {"key": key, "value": value, "effect": effect}
    if taint.get("timeAdded") is not None:
        out["timeAdded"] = taint["timeAdded"]
    return out


def taint_string(taint: Mapping[str, Any]) -> str:
    """core/v1 Taint.ToString: key=value:effect, or key:effect without a value."""
    if taint.get("value"):
        return "%s=%s:%s" % (taint["key"], taint["value"], taint["effect"])
    return "%s:%s" % (taint["key"], taint["effect"])


def parse_taint_string(spec: str, where: str) -> dict[str, Any]:
    """cloud-provider util/taints ParseTaint for one entry of --register-with-taints, validated as a node taint."""
    parts = spec.split(":")
    if len(parts) != 2:
        raise JoinConfigError("%s: %r is not a taint (key=value:effect or key:effect)" % (where, spec))
    key_value, effect = parts
    kv = key_value.split("=")
    if len(kv) > 2:
        raise JoinConfigError("%s: %r is not a taint (key=value:effect or key:effect)" % (where, spec))
    taint = {"key": kv[0], "value": kv[1] if len(kv) == 2 else "", "effect": effect}
    return validate_taint(taint, "%s %r" % (where, spec))


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    # Node taints are unique by key and effect (validateNodeTaints); the value is what changes.
    return a["key"] == b["key"] and a["effect"] == b["effect"]


def merge_taints(existing: Iterable[dict[str, Any]], taint: Mapping[str, Any]) -> list[dict[str, Any]]:
    """existing (validated) taints with ``taint`` kept exactly once: a taint with the same key and effect is replaced
    in place (its value updated), further duplicates dropped, every other taint kept in order."""
    out, placed = [], False
    for t in existing:
        if _same(t, taint):
            if not placed:
                out.append(dict(taint))
                placed = True
            continue
        out.append(t)
    if not placed:
        out.append(dict(taint))
    return out


# --- kubelet --register-with-taints ----------------------------------------------------------------------------------

def _merge_flag_value(value: str, taint: Mapping[str, Any], where: str, also: Iterable[Mapping[str, Any]] = ()) -> str:
    """One --register-with-taints value (comma separated taints) with the gate taint merged; ``value`` unchanged
    (same string) when the taint is already there. ``also``: taints to keep as well, added (before the gate taint)
    when the value has none with their key and effect (the value's own stays as written)."""
    entries = value.split(",") if value != "" else []
    # taintsVar.Set("") clears the list; an empty entry inside a list is a ParseTaint error that we report.
    existing = [parse_taint_string(e, where) for e in entries]
    merged = list(existing)
    for t in also:
        if not any(_same(t, m) for m in merged):
            merged.append(dict(t))
    merged = merge_taints(merged, taint)
    if merged == existing:
        return value
    return ",".join(taint_string(t) for t in merged)


def _merge_flag_tokens(tokens: Sequence[str], taint: Mapping[str, Any], where: str,
                       also: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """Tokens (one argument each) with the gate taint in every --register-with-taints occurrence, or the flag appended."""
    out, found, i = [], False, 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == FLAG:
            if i + 1 >= len(tokens):
                raise JoinConfigError("%s: %s has no value" % (where, FLAG))
            out += [tok, _merge_flag_value(tokens[i + 1], taint, "%s %s" % (where, FLAG), also)]
            found = True
            i += 2
            continue
        if tok.startswith(FLAG + "="):
            value = tok[len(FLAG) + 1:]
            out.append(FLAG + "=" + _merge_flag_value(value, taint, "%s %s" % (where, FLAG), also))
            found = True
        else:
            out.append(tok)
        i += 1
    if not found:
        out.append("%s=%s" % (FLAG, _merge_flag_value("", taint, where, also)))
    return out


def register_with_taints_flag(existing_flags: object, taint: object) -> Union[str, list[str]]:
    """kubelet flags with the gate taint registered.

    existing_flags: a list of arguments (returned as a list) or one command-line string (returned as a string, split
    and re-joined with shell quoting; returned unchanged when nothing changes), or None/'' (no flags yet: a string).
    Every --register-with-taints occurrence (``--register-with-taints=V`` or ``--register-with-taints V``) gets the
    taint merged in (kubelet keeps the last one); without one, ``--register-with-taints=<taint>`` is appended.
    """
    gate = validate_taint(taint)
    if existing_flags is None:
        existing_flags = ""
    if isinstance(existing_flags, (list, tuple)):
        bad = [f for f in existing_flags if not isinstance(f, str)]
        if bad:
            raise JoinConfigError("kubelet flags must be strings, got %r" % (bad[0],))
        return _merge_flag_tokens(list(existing_flags), gate, "kubelet flags")
    if not isinstance(existing_flags, str):
        raise JoinConfigError("kubelet flags must be a list of arguments or a string, not %r" % (existing_flags,))
    try:
        tokens = shlex.split(existing_flags)
    except ValueError as e:
        raise JoinConfigError("kubelet flags %r cannot be split into arguments: %s" % (existing_flags, e))
    merged = _merge_flag_tokens(tokens, gate, "kubelet flags")
    if merged == tokens:
        return existing_flags
    return " ".join(shlex.quote(t) for t in merged)


_ENV_LINE_RE = r"\A(?P<lead>\s*(?:export\s+)?)%s=(?P<value>.*?)(?P<trail>\s*)\Z"


def _env_unquote(raw: str, where: str) -> str:
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        raw = raw[1:-1]
    if any(q in raw for q in "\"'\\"):
        raise JoinConfigError("%s: quotes or backslashes inside the value are not supported: %r" % (where, raw))
    return raw


def kubelet_env_text(text: object, taint: object, variable: object = DEFAULT_ENV_VAR, also: Optional[Iterable[Any]] = ()) -> str:
    """An environment file (systemd EnvironmentFile= / sh, e.g. /etc/default/kubelet, /etc/sysconfig/kubelet) whose
    ``variable`` (KUBELET_EXTRA_ARGS) carries the gate taint in --register-with-taints. Other lines are kept; every
    assignment of the variable is merged (the last one wins); without one, ``variable="--register-with-taints=..."``
    is appended. The text comes back unchanged when the taint is already there.

    ``also``: the taints the node's kubeadm flags register it with (``registered_join_taints``). kubeadm's drop-in
    (10-kubeadm.conf) runs ``kubelet ... $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS``, so a --register-with-taints here
    replaces the one kubeadm built from the JoinConfiguration (the last flag wins): it must carry those taints too, or
    they are lost at registration."""
    gate = validate_taint(taint)
    also = [validate_taint(t, "the JoinConfiguration's taint") for t in also or ()]
    if not isinstance(variable, str) or not _ENV_NAME_RE.match(variable):
        raise JoinConfigError("env_var %r is not an environment variable name" % (variable,))
    text = "" if text is None else text
    if not isinstance(text, str):
        raise JoinConfigError("the environment file must be text, not %r" % (text,))
    line_re = re.compile(_ENV_LINE_RE % re.escape(variable))
    lines = text.splitlines(True)
    out, found = [], False
    for line in lines:
        body = line.rstrip("\r\n")
        eol = line[len(body):]
        m = line_re.match(body)
        if not m:
            out.append(line)
            continue
        found = True
        where = "%s in the environment file" % variable
        tokens = _env_unquote(m.group("value"), where).split()
        merged = _merge_flag_tokens(tokens, gate, where, also)
        if merged == tokens:
            out.append(line)
        else:
            out.append('%s%s="%s"%s%s' % (m.group("lead"), variable, " ".join(merged), m.group("trail"), eol))
    if not found:
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n"
        out.append('%s="%s=%s"\n' % (variable, FLAG, _merge_flag_value("", gate, variable, also)))
    result = "".join(out)
    return text if result == text else result


# --- kubeadm JoinConfiguration ---------------------------------------------------------------------------------------

def _check_api_version(doc: Mapping[str, Any], where: str) -> Optional[str]:
    api = doc.get("apiVersion")
    if api in (None, ""):
        return None
    if api not in API_VERSIONS:
        raise JoinConfigError("%s.apiVersion %r is not supported: use %s (or %s, still accepted by kubeadm)"
                              % (where, api, API_VERSIONS[0], API_VERSIONS[1]))
    return api


def _merge_extra_args(extra: object, gate: Mapping[str, Any], where: str) -> Union[Mapping[Any, Any], list[Any], None]:
    """nodeRegistration.kubeletExtraArgs: a v1beta3 map {flag: value} or a v1beta4 list [{name, value}]; every
    register-with-taints entry gets the gate taint (it overrides the flag kubeadm builds from taints)."""
    if extra is None:
        return None
    out: Union[dict[Any, Any], list[Any]]
    if isinstance(extra, Mapping):
        if REGISTER_WITH_TAINTS not in extra:
            return extra
        value = extra[REGISTER_WITH_TAINTS]
        value = "" if value is None else str(value)
        out = dict(extra)
        out[REGISTER_WITH_TAINTS] = _merge_flag_value(value, gate, "%s.%s" % (where, REGISTER_WITH_TAINTS))
        return out
    if isinstance(extra, list):
        out = []
        for i, arg in enumerate(extra):
            if isinstance(arg, Mapping) and arg.get("name") == REGISTER_WITH_TAINTS:
                arg = dict(arg)
                value = arg.get("value")
                arg["value"] = _merge_flag_value("" if value is None else str(value), gate, "%s[%d].value" % (where, i))
            out.append(arg)
        return out
    raise JoinConfigError("%s must be a mapping (v1beta3) or a list of {name, value} (v1beta4), not %r" % (where, extra))


# The name a node registers under (issue 37 point 6): kubeadm takes nodeRegistration.name, else the host's name
# (cmd/kubeadm/app/util/config/initconfiguration.go SetNodeRegistrationDynamicDefaults ->
# k8s.io/component-helpers/node/util GetHostname: os.Hostname(), i.e. /proc/sys/kernel/hostname, trimmed and
# lower-cased). An FQDN or IP inventory name is neither, so the gate looks the node up by this name and writes it into
# the JoinConfiguration, where it is what kubeadm uses.
def join_node_name(documents: object) -> Optional[str]:
    """nodeRegistration.name of the JoinConfiguration among ``documents`` (a mapping or a list), or None."""
    docs = documents if isinstance(documents, (list, tuple)) else [documents]
    for d in docs:
        if isinstance(d, Mapping) and d.get("kind") in (None, "", JOIN_KIND):
            reg = d.get("nodeRegistration")
            name = reg.get("name") if isinstance(reg, Mapping) else None
            if name not in (None, ""):
                return str(name)
    return None


def kubeadm_node_name(explicit: object, documents: object, hostname: object) -> dict[str, str]:
    """The node's name in Kubernetes: dict(name, source). ``explicit`` (node_preflight_k8s_node_name) wins; then
    the JoinConfiguration's nodeRegistration.name; then the host's name as kubeadm reads it (trimmed, lower-cased).
    The name must be a DNS-1123 subdomain (the API server's rule for node names)."""
    for value, source in ((explicit, "node_preflight_k8s_node_name"),
                          (join_node_name(documents), "the JoinConfiguration's nodeRegistration.name")):
        if value not in (None, ""):
            name = str(value)
            break
    else:
        name, source = str(hostname or "").strip().lower(), "the host name, as kubeadm registers it"
    if not name:
        raise JoinConfigError("the node's name is unknown: no node_preflight_k8s_node_name, no nodeRegistration.name "
                              "and an empty host name")
    if len(name) > DNS1123_SUBDOMAIN_MAX or not _DNS1123_SUBDOMAIN_RE.match(name):
        raise JoinConfigError("node name %r (from %s) is not a DNS-1123 subdomain (lower case alphanumerics, '-' or '.')"
                              % (name, source))
    return {"name": name, "source": source}


def render_join_taint(existing_join_config: object, taint: object, node_name: Optional[str] = None) -> dict[str, Any]:
    """A kubeadm JoinConfiguration (dict, or None/{} for a new one) with ``nodeRegistration.taints`` holding ``taint``
    exactly once, every other taint kept. A new document is kubeadm.k8s.io/v1beta4; a given apiVersion is kept when it
    is v1beta4 or v1beta3 and refused otherwise. A control-plane join (``controlPlane`` set) that omitted taints keeps
    the control-plane taint kubeadm would have defaulted. ``node_name``: written to ``nodeRegistration.name``, which
    must not name another node already. The input is not modified."""
    gate = validate_taint(taint)
    if existing_join_config is None:
        existing_join_config = {}
    if not isinstance(existing_join_config, Mapping):
        raise JoinConfigError("the JoinConfiguration must be a mapping (one YAML document), not %r" % (existing_join_config,))
    doc = copy.deepcopy(dict(existing_join_config))
    where = JOIN_KIND
    api = _check_api_version(doc, where)
    kind = doc.get("kind")
    if kind not in (None, "", JOIN_KIND):
        raise JoinConfigError("kind %r is not a %s (the taint goes into kubeadm join's configuration)" % (kind, JOIN_KIND))
    head: dict[str, Any] = {"apiVersion": api or DEFAULT_API_VERSION, "kind": JOIN_KIND}
    for k, v in doc.items():
        if k not in head:
            head[k] = v
    doc = head
    reg = doc.get("nodeRegistration")
    if reg is None:
        reg = {}
    if not isinstance(reg, Mapping):
        raise JoinConfigError("%s.nodeRegistration must be a mapping, not %r" % (where, reg))
    reg = dict(reg)
    if node_name not in (None, ""):
        if reg.get("name") not in (None, "", node_name):
            raise JoinConfigError("%s.nodeRegistration.name is %r, but the node is %r (node_preflight_k8s_node_name): "
                                  "kubeadm would register it under the former" % (where, reg["name"], node_name))
        reg["name"] = node_name
    taints = reg.get("taints")
    if taints is None:
        # Omitted (nil): kubeadm applies none to a worker and the control-plane taint to a control-plane join.
        taints = [dict(CONTROL_PLANE_TAINT)] if doc.get("controlPlane") is not None else []
    if not isinstance(taints, list):
        raise JoinConfigError("%s.nodeRegistration.taints must be a list, not %r" % (where, taints))
    reg["taints"] = _merge_doc_taints(taints, gate, "%s.nodeRegistration.taints" % where)
    if "kubeletExtraArgs" in reg:
        reg["kubeletExtraArgs"] = _merge_extra_args(reg["kubeletExtraArgs"], gate, "%s.nodeRegistration.kubeletExtraArgs" % where)
    doc["nodeRegistration"] = reg
    return doc


def _merge_doc_taints(taints: Iterable[Any], gate: Mapping[str, Any], where: str) -> list[Any]:
    """The document's taints (each validated, and kept as written) with the gate taint once: an entry with the gate's
    key and effect stays as it is when its value is the gate's, else it is replaced in place; later duplicates of it
    are dropped (the API server refuses them); without one the gate taint is appended."""
    out, placed = [], False
    for i, orig in enumerate(taints):
        t = validate_taint(orig, "%s[%d]" % (where, i))
        if _same(t, gate):
            if not placed:
                out.append(orig if t["value"] == gate["value"] else _compact(gate))
                placed = True
            continue
        out.append(orig)
    if not placed:
        out.append(_compact(gate))
    return out


def _compact(taint: Mapping[str, Any]) -> dict[str, Any]:
    # As core/v1 serializes a taint (value and timeAdded omitempty).
    out = {"key": taint["key"]}
    if taint.get("value"):
        out["value"] = taint["value"]
    out["effect"] = taint["effect"]
    if taint.get("timeAdded") is not None:
        out["timeAdded"] = taint["timeAdded"]
    return out


def merge_join_documents(documents: object, taint: object, node_name: Optional[str] = None) -> list[Any]:
    """A kubeadm config file's documents (a list; None entries, i.e. empty documents, dropped) with the taint in its
    JoinConfiguration, every other document (ClusterConfiguration, KubeletConfiguration, ...) kept as it is. A lone
    document without kind is taken for the JoinConfiguration. Without a JoinConfiguration one is appended, with the
    apiVersion of the file's kubeadm documents when they have one."""
    if documents is None:
        documents = []
    if not isinstance(documents, (list, tuple)):
        raise JoinConfigError("the documents must be a list, not %r" % (documents,))
    docs = [d for d in documents if d is not None]
    joins = []
    for i, d in enumerate(docs):
        if not isinstance(d, Mapping):
            raise JoinConfigError("document %d is not a mapping: %r" % (i + 1, d))
        if not d.get("kind"):
            if len(docs) == 1:
                joins.append(i)  # a lone document without kind is the JoinConfiguration (render_join_taint sets it)
                continue
            raise JoinConfigError("document %d has no kind (in a file of several documents each needs one)" % (i + 1))
        if d.get("kind") == JOIN_KIND:
            joins.append(i)
    if len(joins) > 1:
        raise JoinConfigError("%d JoinConfiguration documents (documents %s); kubeadm takes one"
                              % (len(joins), ", ".join(str(i + 1) for i in joins)))
    if joins:
        out = list(docs)
        out[joins[0]] = render_join_taint(docs[joins[0]], taint, node_name)
        return out
    api = None
    for i, d in enumerate(docs):
        if str(d.get("apiVersion", "")).startswith(API_GROUP + "/"):
            api = _check_api_version(d, "document %d (%s)" % (i + 1, d.get("kind")))
            break
    return list(docs) + [render_join_taint({"apiVersion": api} if api else None, taint, node_name)]


def registered_join_taints(documents: Optional[Iterable[Any]]) -> list[dict[str, Any]]:
    """The taints ``kubeadm join`` with these documents registers a worker node with, as its kubelet flag carries them
    (cmd/kubeadm/app/phases/kubelet/flags.go buildKubeletArgMapCommon): nodeRegistration.taints, unless
    kubeletExtraArgs has its own register-with-taints, which overrides the built flag (the last entry wins). A
    control-plane join (``controlPlane`` set) gets none by flag: its taints come from the mark-control-plane phase."""
    joins = [d for d in documents or [] if isinstance(d, Mapping) and d.get("kind") in (None, "", JOIN_KIND)]
    if len(joins) != 1 or joins[0].get("controlPlane") is not None:
        return []
    reg = joins[0].get("nodeRegistration") or {}
    extra = reg.get("kubeletExtraArgs")
    where = "%s.nodeRegistration.kubeletExtraArgs" % JOIN_KIND
    values = []
    if isinstance(extra, Mapping) and REGISTER_WITH_TAINTS in extra:
        values = [extra[REGISTER_WITH_TAINTS]]
    elif isinstance(extra, list):
        values = [a.get("value") for a in extra if isinstance(a, Mapping) and a.get("name") == REGISTER_WITH_TAINTS]
    if values:
        value = "" if values[-1] is None else str(values[-1])
        return [parse_taint_string(e, where) for e in value.split(",")] if value else []
    return [validate_taint(t, "%s.nodeRegistration.taints[%d]" % (JOIN_KIND, i)) for i, t in enumerate(reg.get("taints") or [])]
