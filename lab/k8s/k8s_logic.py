"""Pure logic of the Kubernetes stand-in: selectors, patches, disruption budgets, device-plugin resources.

No I/O here (the device-plugin part takes already-parsed gpusim state), so the rules can be unit-tested in-process.
"""

from __future__ import annotations

import copy
import math
import re

import jsonpatch


class SelectorError(ValueError):
    """A selector the real API server would reject with 400 Bad Request."""


# --- selectors -------------------------------------------------------------------------------------------------------

def _split_terms(text):
    """Split a selector at top-level commas (commas inside ``in (a,b)`` belong to the term)."""
    terms, depth, current = [], 0, []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced ')' in selector {text!r}")
        if char == "," and depth == 0:
            terms.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if depth:
        raise SelectorError(f"unbalanced '(' in selector {text!r}")
    terms.append("".join(current).strip())
    return [term for term in terms if term]


def dotted_get(obj, path):
    """Value at a dotted path (``spec.nodeName``); missing or non-scalar gives '' as the API server compares it."""
    node = obj
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return ""
        node = node[part]
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node) if not isinstance(node, (dict, list)) else ""


def parse_field_selector(text):
    """``a.b=v,c!=w`` -> [(path, op, value)] with op in ('=', '!=')."""
    result = []
    for term in _split_terms(text or ""):
        match = re.fullmatch(r"([A-Za-z0-9_.\-/]+)\s*(==|=|!=)\s*(.*)", term)
        if not match:
            raise SelectorError(f"invalid field selector term {term!r}")
        path, op, value = match.groups()
        result.append((path, "!=" if op == "!=" else "=", value.strip()))
    return result


def match_fields(obj, terms):
    for path, op, value in terms:
        actual = dotted_get(obj, path)
        if (actual == value) != (op == "="):
            return False
    return True


_LABEL_KEY = r"[A-Za-z0-9][A-Za-z0-9_.\-/]*"


def parse_label_selector(text):
    """Equality-, set- and existence-based terms -> [(key, op, values)] with op in '=', '!=', 'in', 'notin', 'exists', '!'."""
    result = []
    for term in _split_terms(text or ""):
        match = re.fullmatch(rf"({_LABEL_KEY})\s+(in|notin)\s*\((.*)\)", term)
        if match:
            key, op, values = match.groups()
            result.append((key, op, {v.strip() for v in values.split(",") if v.strip()}))
            continue
        match = re.fullmatch(rf"({_LABEL_KEY})\s*(==|=|!=)\s*([A-Za-z0-9_.\-]*)", term)
        if match:
            key, op, value = match.groups()
            result.append((key, "!=" if op == "!=" else "=", {value}))
            continue
        match = re.fullmatch(rf"(!?)\s*({_LABEL_KEY})", term)
        if match:
            bang, key = match.groups()
            result.append((key, "!" if bang else "exists", set()))
            continue
        raise SelectorError(f"invalid label selector term {term!r}")
    return result


def match_labels(labels, terms):
    labels = labels or {}
    for key, op, values in terms:
        present = key in labels
        value = labels.get(key)
        ok = {
            "=": present and value in values,
            "in": present and value in values,
            # As in Kubernetes: '!=' and 'notin' also match objects without the label.
            "!=": not present or value not in values,
            "notin": not present or value not in values,
            "exists": present,
            "!": not present,
        }[op]
        if not ok:
            return False
    return True


def label_selector_object_matches(selector, labels):
    """A ``metav1.LabelSelector`` object (matchLabels + matchExpressions); an empty selector matches everything."""
    selector = selector or {}
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), set(expr.get("values") or [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


# --- patches ---------------------------------------------------------------------------------------------------------

# Lists that the API server merges by a key under strategic merge patch (patchMergeKey in the Go types); every other
# list is replaced whole, as for Node spec.taints, which carries no patch strategy.
_MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name", "volumes": "name",
    "volumeMounts": "mountPath", "env": "name", "ports": "containerPort", "conditions": "type",
    "ownerReferences": "uid", "tolerations": None, "imagePullSecrets": "name", "addresses": "type",
}


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch: dicts merge, null deletes, everything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target, patch, field=None):
    """The subset of strategic merge patch that clients send to nodes and pods.

    Supports ``$patch: replace|delete`` in maps, merge-by-key lists from ``_MERGE_KEYS`` and ignores the ordering
    directives (``$setElementOrder/...``, ``$retainKeys``) that only affect ordering or pruning.
    """
    if isinstance(patch, dict):
        directive = patch.get("$patch")
        body = {k: v for k, v in patch.items() if not k.startswith("$")}
        if directive == "delete":
            return None
        if directive == "replace":
            return copy.deepcopy(body)
        result = copy.deepcopy(target) if isinstance(target, dict) else {}
        for key, value in body.items():
            if value is None:
                result.pop(key, None)
                continue
            merged = strategic_merge_patch(result.get(key), value, field=key)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        return result
    if isinstance(patch, list) and _MERGE_KEYS.get(field) and isinstance(target, list):
        key = _MERGE_KEYS[field]
        result = copy.deepcopy(target)
        for item in patch:
            if not isinstance(item, dict) or key not in item:
                result.append(copy.deepcopy(item))
                continue
            index = next((i for i, old in enumerate(result) if isinstance(old, dict) and old.get(key) == item[key]), None)
            if item.get("$patch") == "delete":
                if index is not None:
                    del result[index]
            elif index is None:
                result.append({k: v for k, v in item.items() if not k.startswith("$")})
            else:
                result[index] = strategic_merge_patch(result[index], item, field=None)
        return result
    return copy.deepcopy(patch)


def apply_patch(target, patch, content_type):
    """Apply a PATCH body by its Content-Type the way the API server does; raises ValueError on a malformed patch."""
    kind = (content_type or "").split(";")[0].strip().lower()
    if kind == "application/json-patch+json":
        if not isinstance(patch, list):
            raise ValueError("json patch must be a list of operations")
        try:
            return jsonpatch.apply_patch(target, patch)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise ValueError(str(exc)) from exc
    if not isinstance(patch, dict):
        raise ValueError(f"{kind or 'patch'} body must be a JSON object")
    if kind == "application/merge-patch+json":
        return merge_patch(target, patch)
    if kind in ("application/strategic-merge-patch+json", "application/apply-patch+yaml"):
        # Server-side apply is approximated by a strategic merge (no field ownership in this stand-in).
        return strategic_merge_patch(target, patch)
    raise ValueError(f"unsupported patch content type {content_type!r}")


# --- pod disruption budgets ------------------------------------------------------------------------------------------

def _scaled(value, total, round_up):
    if isinstance(value, str) and value.endswith("%"):
        fraction = int(value[:-1]) * total / 100.0
        return math.ceil(fraction) if round_up else math.floor(fraction)
    return int(value)


def pod_is_healthy(pod):
    """Running, Ready (when conditions say so) and not terminating: what the disruption controller counts."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase", "Running") != "Running":
        return False
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return True


def pdb_status(pdb, pods):
    """PDB status computed from the current pods of its namespace (the disruption controller's arithmetic)."""
    namespace = (pdb.get("metadata") or {}).get("namespace")
    spec = pdb.get("spec") or {}
    selected = [
        pod for pod in pods
        if (pod.get("metadata") or {}).get("namespace") == namespace
        and label_selector_object_matches(spec.get("selector"), (pod.get("metadata") or {}).get("labels"))
    ]
    expected = len(selected)
    healthy = sum(1 for pod in selected if pod_is_healthy(pod))
    if spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected, round_up=True)
    elif spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected, round_up=True))
    else:
        desired = 0
    return {
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "disruptionsAllowed": max(0, healthy - desired),
    }


def eviction_verdict(pod, pdbs, pods):
    """(http_status, status_body or None) for evicting ``pod``; None body means 'go ahead'.

    Mirrors kube-apiserver's eviction REST handler: terminating or not-running pods are evictable regardless of
    budgets, more than one matching budget is a 500, and a budget with no disruption left is a 429 TooManyRequests.
    """
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed", "Pending"):
        return 201, None
    matching = [
        pdb for pdb in pdbs
        if (pdb.get("metadata") or {}).get("namespace") == meta.get("namespace")
        and label_selector_object_matches((pdb.get("spec") or {}).get("selector"), meta.get("labels"))
    ]
    if len(matching) > 1:
        return 500, status_body(500, "InternalError", "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.")
    if matching:
        pdb = matching[0]
        status = pdb_status(pdb, pods)
        if pod_is_healthy(pod) and status["disruptionsAllowed"] <= 0:
            name = pdb["metadata"]["name"]
            body = status_body(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
            body["details"] = {"causes": [{
                "reason": "DisruptionBudget",
                "message": f"The disruption budget {name} needs {status['desiredHealthy']} healthy pods and has "
                           f"{status['currentHealthy']} currently",
            }]}
            return 429, body
    return 201, None


def status_body(code, reason, message, details=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure" if code >= 400 else "Success",
            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return body


# --- device plugin ---------------------------------------------------------------------------------------------------

def _mig_enabled(gpu):
    """Current MIG mode from a gpusim GPU entry, read defensively (string, bool/int, or {current, pending})."""
    mode = gpu.get("mig_mode_current", gpu.get("mig_mode"))
    if isinstance(mode, dict):
        mode = mode.get("current")
    if isinstance(mode, str):
        return mode.strip().lower() in ("enabled", "1", "true", "on")
    return bool(mode)


def _profile_name(entry):
    for key in ("profile", "profile_name", "name"):
        value = entry.get(key)
        if isinstance(value, str) and value.strip():
            name = value.strip()
            if name.upper().startswith("MIG "):
                name = name[4:]
            return name
    return None


def _resource_suffix(profile):
    # The device plugin turns '+' into '.' ("1g.10gb+me" -> "nvidia.com/mig-1g.10gb.me").
    return profile.replace("+", ".")


def mig_devices(gpu, namer=None):
    """Profile names of the MIG devices (compute instances) of one GPU; full-GI CIs take the GI's name.

    Names come from the entries themselves ('profile'/'name') or, for gpusim's id-only entries (``profile_id``),
    from ``namer(model, gi, ci_or_None)``.
    """
    devices = []
    for gi in gpu.get("gpu_instances") or []:
        if not isinstance(gi, dict):
            continue
        gi_name = _profile_name(gi) or (namer(gpu.get("model"), gi, None) if namer else None)
        cis = gi.get("compute_instances")
        if cis is None:
            # gpusim state without CI detail: count the GI as one device, as mig-parted always creates a full CI.
            if gi_name:
                devices.append(gi_name)
            continue
        for ci in cis if isinstance(cis, list) else []:
            ci_name = None
            if isinstance(ci, dict):
                ci_name = _profile_name(ci) or (namer(gpu.get("model"), gi, ci) if namer else None)
            devices.append(_mig_device_name(gi_name, ci_name))
    return [name for name in devices if name]


def _mig_device_name(gi_name, ci_name):
    """'<C>c.<G>g.<M>gb' names a CI smaller than its GI; a full-GI CI (C == G) or an unnamed one is the GI's name."""
    match = re.match(r"^(\d+)c\.((\d+)g\..*)$", ci_name or "")
    if not match:
        return gi_name
    slices, rest, gi_slices = match.groups()
    if slices == gi_slices:
        return rest
    return ci_name


def device_plugin_resources(state, strategy="mixed", namer=None):
    """Extended resources a node advertises for a gpusim state, per the k8s-device-plugin MIG strategy.

    Returns (resources, error): resources maps 'nvidia.com/...' to an integer count; error is the device plugin's
    complaint for an invalid single-strategy layout (then 'nvidia.com/gpu' is 0, as the plugin reports).
    """
    state = state if isinstance(state, dict) else {}
    if state.get("driver_loaded") is False or state.get("library_present") is False:
        # No NVML on the host: the device plugin cannot start and the node advertises no GPUs.
        return {}, "NVML is not available on the node"
    gpus = [gpu for gpu in state.get("gpus") or [] if isinstance(gpu, dict)]
    resources = {}

    def add(name, count=1):
        resources[name] = resources.get(name, 0) + count

    if strategy == "none":
        add("nvidia.com/gpu", len(gpus))
        return resources, None
    if strategy == "single":
        enabled = {_mig_enabled(gpu) for gpu in gpus}
        if enabled == {True}:
            devices = [name for gpu in gpus for name in mig_devices(gpu, namer)]
            if len(set(devices)) > 1:
                return {"nvidia.com/gpu": 0}, "more than one MIG device type present on node"
            if any(not mig_devices(gpu, namer) for gpu in gpus):
                return {"nvidia.com/gpu": 0}, "at least one device with migEnabled=true was not configured correctly"
            add("nvidia.com/gpu", len(devices))
            return resources, None
        if len(enabled) > 1:
            return {"nvidia.com/gpu": 0}, "all devices on the node must be configured with the same migEnabled value"
        add("nvidia.com/gpu", len(gpus))
        return resources, None
    if strategy != "mixed":
        raise ValueError(f"unknown MIG strategy {strategy!r} (none, single, mixed)")
    for gpu in gpus:
        if _mig_enabled(gpu):
            for name in mig_devices(gpu, namer):
                # NVIDIA/k8s-device-plugin internal/rm/rm.go AddDefaultResourcesToConfig: the mixed strategy adds a
                # resource only for profiles whose compute instance spans the GPU instance ("if info.C != info.G").
                if re.match(r"^\d+c\.", name):
                    continue
                add(f"nvidia.com/mig-{_resource_suffix(name)}")
        else:
            add("nvidia.com/gpu")
    return resources, None


def apply_node_resources(node, resources):
    """Replace the node's nvidia.com/* capacity and allocatable with ``resources`` (counts as strings, as kubelet)."""
    status = node.setdefault("status", {})
    for field in ("capacity", "allocatable"):
        current = {k: v for k, v in (status.get(field) or {}).items() if not k.startswith("nvidia.com/")}
        current.update({k: str(v) for k, v in resources.items()})
        status[field] = current
    return node
