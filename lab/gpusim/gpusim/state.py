"""Machine state of gpusim: one JSON file (env GPUSIM_STATE) shared by all processes.

Reads take a shared lock, mutations an exclusive lock on ``<file>.lock`` and replace
the file atomically, so concurrent module runs see one consistent machine.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import json
import os
import tempfile

from . import health
from .machine import HOST_CLIENTS, model_of
from .models import MODELS

ENV = "GPUSIM_STATE"
DEFAULT_DRIVER = "550.163.01"
# Bus numbers for GPU index 0, 1, ... (any deterministic, distinct values do).
_BUSES = (0x17, 0x31, 0x4B, 0x65, 0x7F, 0x99, 0xB3, 0xCD)


class StateError(Exception):
    """The state file is missing or invalid (reported as an NVML error by the caller)."""


def state_path():
    return os.environ.get(ENV) or None


def _mode(value, where):
    try:
        return health.mode_value(value, where, "MIG mode must be enabled/disabled")
    except health.HealthError as e:
        raise StateError(str(e)) from None


def _uuid(seed):
    h = hashlib.sha256(seed.encode()).hexdigest()
    return "GPU-%s-%s-%s-%s-%s" % (h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])


def normalize(raw):
    """Fill a minimal state in deterministically and validate it; returns a new dict."""
    if not isinstance(raw, dict):
        raise StateError("state must be a JSON object")
    st = copy.deepcopy(raw)
    st.setdefault("driver_version", DEFAULT_DRIVER)
    st.setdefault("driver_loaded", True)
    st.setdefault("library_present", True)
    st.setdefault("faults", {})
    st.setdefault("counters", {})
    unknown = sorted(set(st.get("host_clients") or []) - set(HOST_CLIENTS))
    if unknown:
        raise StateError("host_clients: unknown %s (known: %s)" % (", ".join(unknown), ", ".join(HOST_CLIENTS)))
    gpus = st.setdefault("gpus", [])
    if not isinstance(gpus, list):
        raise StateError("gpus must be a list")
    for i, g in enumerate(gpus):
        where = "gpus[%d]" % i
        if not isinstance(g, dict) or g.get("model") not in MODELS:
            raise StateError("%s: unknown model %r (known: %s)" % (where, g.get("model") if isinstance(g, dict) else g,
                                                                   ", ".join(sorted(MODELS))))
        model = model_of(g)
        g.setdefault("uuid", _uuid("gpusim:%d:%s" % (i, g["model"])))
        g.setdefault("pci_bus_id", "00000000:%02X:00.0" % _BUSES[i % len(_BUSES)] if i < len(_BUSES)
                     else "00000000:%02X:00.0" % (0x10 + i))
        g.setdefault("serial", "%013d" % (1320000000000 + int(g["uuid"][4:12], 16) % 100000000))
        g.setdefault("minor_number", i)
        g.setdefault("persistence_mode", True)
        g.setdefault("reset_supported", True)
        # A GPU whose reset is not exposed sits in a pass-through VM, and NVML says so (nvml.h
        # NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH; mig.md P2).
        g.setdefault("virtualization_mode", "none" if g["reset_supported"] else "passthrough")
        g.setdefault("host_vgpu_mode", "non_sriov")
        g.setdefault("license", None)
        g.setdefault("processes", [])
        if model.mig_capable:
            g["mig_mode"] = _mode(g.get("mig_mode", 0), where)
            g["mig_mode_pending"] = _mode(g.get("mig_mode_pending", g["mig_mode"]), where)
        else:
            g["mig_mode"] = None
            g["mig_mode_pending"] = None
        gis = g.setdefault("gpu_instances", [])
        if gis and g["mig_mode"] != 1:
            raise StateError("%s: GPU instances need MIG mode enabled" % where)
        used = set()
        for gi in gis:
            _fill_gi(model, gi, where)
            slots = set(range(gi["start"], gi["start"] + gi["size"]))
            if slots & used:
                raise StateError("%s: GPU instance at %d:%d overlaps another" % (where, gi["start"], gi["size"]))
            used |= slots
    try:
        health.fill(st)
    except health.HealthError as e:
        raise StateError(str(e)) from None
    return st


def _fill_gi(model, gi, where):
    from .models import gi_profile_by_id, CI_PLACEMENTS, CI_INDEX_BY_SLICES
    prof = gi_profile_by_id(model, gi.get("profile_id"))
    if prof is None:
        raise StateError("%s: GPU instance profile id %r not on %s" % (where, gi.get("profile_id"), model.name))
    start = gi.get("start", prof.starts[0])
    if start not in prof.starts:
        raise StateError("%s: start %r not a placement of profile %d" % (where, start, prof.id))
    gi["start"] = start
    gi["size"] = prof.size
    n = model.memory_slices // prof.size
    gi.setdefault("id", n - 1 + start // prof.size)
    cis = gi.setdefault("compute_instances", [])
    for k, ci in enumerate(cis):
        slices = ci.get("slices")
        if slices is None:
            slices = {v: s for s, v in CI_INDEX_BY_SLICES.items()}.get(ci.get("profile_id"), prof.slices)
        if slices not in CI_PLACEMENTS[prof.slices]:
            raise StateError("%s: compute instance of %d slices not allowed in a %dg GI" % (where, slices, prof.slices))
        ci["slices"] = slices
        ci["profile_id"] = CI_INDEX_BY_SLICES[slices]
        ci.setdefault("start", CI_PLACEMENTS[prof.slices][slices][0])
        ci.setdefault("id", k)


@contextlib.contextmanager
def _locked(path, exclusive):
    with open(path + ".lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# Every NVML call reads the state (a module's plan of an 8-GPU host makes about 500); parsing and normalizing the file
# each time made gpusim, not the code it stands in for, cost about a CPU-second per such host. So the normalized state
# is kept with the exact bytes it came from and handed out as a fresh copy (json.loads of its text, as a JSON file
# round trip would give it): a change to the file by any process is other bytes, and is read and normalized anew.
_NORMALIZED = {}


def _read(path):
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise StateError("state file %s does not exist" % path) from None
    held = _NORMALIZED.get(path)
    if held is None or held[0] != data:
        try:
            raw = json.loads(data)
        except ValueError as e:
            raise StateError("state file %s is not valid JSON: %s" % (path, e)) from None
        held = _NORMALIZED[path] = (data, json.dumps(normalize(raw)))
    return json.loads(held[1])


def load(path=None):
    path = path or state_path()
    if not path:
        raise StateError("%s is not set" % ENV)
    with _locked(path, False):
        return _read(path)


def write(path, st):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".gpusim-", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(st, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def transaction(path=None):
    """Yield the normalized state under an exclusive lock; write it back if the block succeeds.

    An exception inside the block discards every change except the attempt counters
    (fault injection counts attempts, failed ones included).
    """
    path = path or state_path()
    if not path:
        raise StateError("%s is not set" % ENV)
    with _locked(path, True):
        st = _read(path)
        before = json.dumps(st, sort_keys=True)
        try:
            yield st
        except BaseException:
            fresh = json.loads(before)
            if st.get("counters") != fresh["counters"]:
                fresh["counters"] = st["counters"]
                write(path, fresh)
            raise
        if json.dumps(st, sort_keys=True) != before:
            write(path, st)
