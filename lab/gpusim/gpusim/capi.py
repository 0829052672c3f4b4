"""The Python side of gpusim's libnvidia-ml.so.1 (lab/gpusim/libnvml): one entry per exported C function.

``libnvml.c`` calls :func:`call` with the C function's name and its input arguments (unsigned ints, strings, device
handle keys as the JSON text the library interned); the answer is a tuple ``(nvmlReturn_t, out values...)`` in the
order the C function's out-parameters take them. The rules are gpusim's own (api.py, machine.py, health.py, state.py):
this file only says which state access each entry point makes (read, or a transaction for a mutation).

The library keeps what a real libnvidia-ml keeps per process: the init refcount, the handles (one pointer per key), the
buffer-size checks of string outputs and NULL-pointer checks (nvml.h "NVML_ERROR_INVALID_ARGUMENT if ... is NULL").
Which entry points exist at all is the library build's export list (per driver branch, gpusim/symbols.py).

``GPUSIM_TRACE=1`` prints every call, its code and gpusim's reason to stderr.
"""

from __future__ import annotations

import json
import os
import sys

from . import api, state
from .machine import Fault

_TRACE = bool(os.environ.get("GPUSIM_TRACE"))


def _key(text):
    try:
        key = tuple(json.loads(text))
    except (TypeError, ValueError):
        raise Fault(api.INVALID_ARGUMENT, "invalid handle") from None
    return key


def _handle(key):
    return json.dumps(list(key))


def _read(fn):
    return lambda *args: fn(state.load(), *args)


def _mutate(fn):
    def run(*args):
        with state.transaction() as st:
            return fn(st, *args)
    return run


def _init(_flags):
    api.init_check()
    return ()


def _memory(st, key):
    total, used = api.memory(st, _key(key))
    return (total, total - used, used)


def _memory_v2(st, key, version):
    api.memory_v2_check(version)
    total, used = api.memory(st, _key(key))
    return (total, 0, total - used, used)


def _pci_v3(st, key):
    p = api.pci_info(api.device(st, _key(key))[0])
    return (p["busIdLegacy"], p["domain"], p["bus"], p["device"], p["pciDeviceId"], p["pciSubSystemId"], p["busId"])


FUNCTIONS = {
    # name: fn(*inputs) -> tuple of outputs (raises Fault)
    "nvmlInitWithFlags": _init,
    "nvmlErrorString": lambda code: (api.error_string(code),),
    "nvmlSystemGetDriverVersion": _read(lambda st: (api.driver_version(st),)),
    "nvmlSystemGetNVMLVersion": _read(lambda st: (api.nvml_version(st),)),
    "nvmlSystemGetCudaDriverVersion": _read(lambda st: (api.cuda_version(st),)),
    "nvmlDeviceGetCount_v2": _read(lambda st: (api.device_count(st),)),
    "nvmlDeviceGetHandleByIndex_v2": _read(lambda st, i: (_handle(api.handle_by_index(st, i)),)),
    "nvmlDeviceGetHandleByPciBusId_v2": _read(lambda st, bus: (_handle(api.handle_by_pci_bus_id(st, bus)),)),
    "nvmlDeviceGetName": _read(lambda st, k: (api.name(st, _key(k)),)),
    "nvmlDeviceGetUUID": _read(lambda st, k: (api.uuid(st, _key(k)),)),
    "nvmlDeviceGetPciInfo_v3": _read(_pci_v3),
    "nvmlDeviceGetMemoryInfo": _read(_memory),
    "nvmlDeviceGetMemoryInfo_v2": _read(_memory_v2),
    "nvmlDeviceGetMigMode": _read(lambda st, k: tuple(api.mig_mode(st, _key(k)))),
    "nvmlDeviceSetMigMode": _mutate(lambda st, k, mode: (api.set_mig_mode(st, _key(k), mode),)),
}


def call(name, *args):
    """(code, outputs...) of the C entry point ``name``."""
    try:
        out = (api.SUCCESS,) + tuple(FUNCTIONS[name](*args))
        why = ""
    except Fault as f:
        out, why = (f.code,), f.why
    except state.StateError as e:
        out, why = (api.UNKNOWN,), str(e)
    if _TRACE:
        print("gpusim libnvidia-ml: %s%r -> %r %s" % (name, args, out, why), file=sys.stderr, flush=True)
    return out
