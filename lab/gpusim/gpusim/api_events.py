"""NVML event sets over gpusim's state: nvmlEventSetCreate, nvmlDeviceGetSupportedEventTypes, nvmlDeviceRegisterEvents,
nvmlEventSetWait_v2, nvmlEventSetFree (C: lab/gpusim/libnvml/events.c; the entry points in capi.py's ``_EVENTS``).

Who calls them: NVIDIA's k8s-device-plugin v0.17.4 health checker (internal/rm/health.go checkHealth): one set, every
GPU (a MIG device's parent, by nvmlDeviceGetHandleByUUID) registered for
``(XidCriticalError | DoubleBitEccError | SingleBitEccError) & supported``, then ``Wait(5000)`` in a loop that goes on
at NVML_ERROR_TIMEOUT, skips other event types and the application Xids 13, 31, 43, 45, 68, 109, and marks the
device of ``eventData``'s Xid unhealthy (a MIG device only when gpuInstanceId/computeInstanceId are its own or
0xFFFFFFFF).

Rules (nvml.h: NVIDIA/go-nvml gen/nvml/nvml.h v0.12.4-0, "Event Handling Methods" and "Event Types"):

* An event set is per process, as NVML's is (the library's, not the driver's): it lives here, in the process's
  interpreter, never in the state file. Its handle key is ``("eventset", n)``; a freed set's handle is refused.
* nvmlDeviceRegisterEvents "starts recording of events on a specified device": "All events that occurred before this
  call are not recorded". A registration is a cursor per GPU: how many of the GPU's ``xid_events`` (the kernel log's
  Xids, kernlog.py; ``python -m gpusim fault xid``) and how many volatile corrected / uncorrected ECC errors
  (health.py's counters; ``fault ecc-storm``) it has delivered. "INVALID_ARGUMENT if eventTypes is invalid" (bits
  outside nvmlEventTypeAll), "NOT_SUPPORTED if the platform does not support ... some of requested event types"
  ("None of the requested eventTypes are registered in that case"). MIG device handles: NOT_SUPPORTED ("This API does
  not currently support per-instance event reporting using MIG device handles"); MIG events come through the parent.
* nvmlEventSetWait_v2: "If some events are ready to be delivered at the time of the call, function returns
  immediately", else it "sleeps till event arrives but not longer than specified timeout" and answers
  NVML_ERROR_TIMEOUT; "On Linux, every xid error event would return the associated event data": one event per
  Xid, in the kernel log's order (kernlog.event_times). nvmlEventData_t: ``device`` the GPU, ``eventData`` the Xid
  ("0 for any other event"), ``gpuInstanceId``/``computeInstanceId`` the event's GPU / compute instance when it is
  attributable to one (a state event's ``gpu_instance_id``/``compute_instance_id``), "0xFFFFFFFF otherwise". A
  registered GPU that fell off the bus (``fault lost``) answers GPU_IS_LOST when nothing else is pending. The wait
  polls the state every POLL_S seconds with the state's shared lock taken only for each read.
* ECC events: a rise of the volatile corrected count is one nvmlEventTypeSingleBitEccError, of the uncorrected count
  one nvmlEventTypeDoubleBitEccError (eventData 0). A count that went down (GPU reset, reboot) or an Xid list that got
  shorter (reboot: "Xids are since boot", health.on_reboot) restarts that cursor at the current value.

Supported event types (nvmlDeviceGetSupportedEventTypes) of a data-centre GPU, from nvml.h's notes (no capture of a
real GPU's mask is cited): XidCriticalError and PState ("For Fermi or newer fully supported devices"); the two ECC
types only with ECC supported and enabled ("Ecc events are available only on ECC enabled devices"); not Clock
("Kepler only") nor PowerSourceChange ("AC/Battery power source changes", a laptop's); MigConfigChange on a
MIG-capable GPU. Only Xid and ECC events are ever delivered: gpusim has no P-state or MIG-change events.
"""

from __future__ import annotations

import itertools
import threading
import time

from . import api, health, kernlog, machine, state
from .machine import Fault

TIMEOUT = 10   # nvml.h NVML_ERROR_TIMEOUT
POLL_S = 0.1   # how often a waiting nvmlEventSetWait_v2 reads the state

# nvml.h nvmlEventType
SINGLE_BIT_ECC = 0x1
DOUBLE_BIT_ECC = 0x2
PSTATE = 0x4
XID_CRITICAL = 0x8
CLOCK = 0x10
POWER_SOURCE_CHANGE = 0x80
MIG_CONFIG_CHANGE = 0x100
ALL = SINGLE_BIT_ECC | DOUBLE_BIT_ECC | PSTATE | CLOCK | XID_CRITICAL | POWER_SOURCE_CHANGE | MIG_CONFIG_CHANGE
NO_INSTANCE = 0xFFFFFFFF

_SETS = {}             # set id -> {gpu uuid: registration}
_LOCK = threading.Lock()
_IDS = itertools.count(1)


def create():
    """nvmlEventSetCreate: the key of a new, empty set."""
    with _LOCK:
        n = next(_IDS)
        _SETS[n] = {}
    return ("eventset", n)


def _set(key):
    if not key or key[0] != "eventset" or len(key) != 2 or key[1] not in _SETS:
        raise Fault(api.INVALID_ARGUMENT, "not an event set (or one already freed)")
    return _SETS[key[1]]


def free(key):
    """nvmlEventSetFree."""
    with _LOCK:
        _set(key)
        del _SETS[key[1]]


def _gpu(st, key):
    if key and key[0] == "mig":
        api.device(st, key, allow_mig=True)
        raise Fault(api.NOT_SUPPORTED, "no per-instance events on a MIG device handle (use its parent GPU)")
    return api.device(st, key)[0]


def supported(st, key):
    """nvmlDeviceGetSupportedEventTypes (see the module's docstring)."""
    g = _gpu(st, key)
    mask = XID_CRITICAL | PSTATE
    if g["ecc"]["supported"] and g["ecc"]["mode"] == 1:
        mask |= SINGLE_BIT_ECC | DOUBLE_BIT_ECC
    if machine.model_of(g).mig_capable:
        mask |= MIG_CONFIG_CHANGE
    return mask


def _counts(g):
    vol = g["ecc"]["volatile"]
    return {"xid": len(g.get("xid_events", [])), "sbe": vol["corrected"], "dbe": vol["uncorrected"]}


def register(st, key, types, set_key):
    """nvmlDeviceRegisterEvents: record ``types`` of the GPU from now on (added to what the set has for it)."""
    if types & ~ALL:
        raise Fault(api.INVALID_ARGUMENT, "eventTypes 0x%x has bits outside nvmlEventTypeAll" % types)
    g = _gpu(st, key)
    missing = types & ~supported(st, key)
    if missing:
        raise Fault(api.NOT_SUPPORTED, "event types 0x%x are not supported on %s" % (missing, g["uuid"]))
    with _LOCK:
        regs = _set(set_key)
        reg = regs.setdefault(g["uuid"], {"types": 0, "device": api.gpu_key(g)})
        new = types & ~reg["types"]
        now = _counts(g)
        # A type registered now starts at the present (nothing from before the call).
        for bit, name in ((XID_CRITICAL, "xid"), (SINGLE_BIT_ECC, "sbe"), (DOUBLE_BIT_ECC, "dbe")):
            if new & bit:
                reg[name] = now[name]
        reg["types"] |= types


def _pending(st, regs):
    """(event tuple, uuid, cursor name, new cursor value) of the next event of the set in the state, or None; the
    lost-GPU code of a registered GPU when nothing is pending (else None)."""
    by_uuid = {g["uuid"]: g for g in health.visible(st)}
    times = {id(ev): t for _g, ev, t in kernlog.event_times(st)}
    best, lost = None, None
    for uuid, reg in regs.items():
        g = by_uuid.get(uuid)
        if g is None:
            continue
        if health.lost_code(g) is not None:
            lost = lost or health.lost_code(g)
            continue
        now = _counts(g)
        for name in ("xid", "sbe", "dbe"):
            if name in reg and now[name] < reg[name]:
                reg[name] = now[name]     # reset or reboot: the count starts again
        if reg["types"] & XID_CRITICAL and now["xid"] > reg["xid"]:
            ev = g["xid_events"][reg["xid"]]
            t = times.get(id(ev), 0.0)
            gi = ev.get("gpu_instance_id")
            ci = ev.get("compute_instance_id") if gi is not None else None
            out = (reg["device"], XID_CRITICAL, int(ev["xid"]), NO_INSTANCE if gi is None else int(gi),
                   NO_INSTANCE if ci is None else int(ci))
            if best is None or t < best[0]:
                best = (t, out, uuid, "xid", reg["xid"] + 1)
        for bit, name in ((DOUBLE_BIT_ECC, "dbe"), (SINGLE_BIT_ECC, "sbe")):
            if reg["types"] & bit and now[name] > reg[name] and best is None:
                best = (float("inf"), (reg["device"], bit, 0, NO_INSTANCE, NO_INSTANCE), uuid, name, now[name])
    return (best[1:] if best else None), lost


def wait(set_key, timeout_ms, load=state.load):
    """nvmlEventSetWait_v2: (device key, eventType, eventData, gpuInstanceId, computeInstanceId) of the next event
    of the set; TIMEOUT when none comes within ``timeout_ms``. The state is read every POLL_S seconds, its lock held
    only for each read."""
    deadline = time.monotonic() + timeout_ms / 1000.0
    while True:
        with _LOCK:
            regs = _set(set_key)
        st = load()
        with _LOCK:
            found, lost = _pending(st, regs)
            if found:
                event, uuid, name, value = found
                regs[uuid][name] = value
                return event
        if lost is not None:
            raise Fault(lost, "a registered GPU has fallen off the bus")
        left = deadline - time.monotonic()
        if left <= 0:
            raise Fault(TIMEOUT, "no event within %d ms" % timeout_ms)
        time.sleep(min(POLL_S, left))
