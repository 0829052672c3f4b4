"""gpusim's libnvidia-ml.so.1 (issue 42): event sets (libnvml/events.c, rules gpusim/api_events.py) under the REAL
nvidia-ml-py, in an isolated subprocess on the library, as NVIDIA's k8s-device-plugin health checker uses them
(internal/rm/health.go): create a set, register a GPU's Xid events, wait with a timeout (NVMLError_Timeout), an Xid
injected by another process (`python -m gpusim fault xid`) while the wait runs arrives with its Xid and the GPU's
handle, free. Then the rest of nvml.h's rules: the supported mask, nothing from before the registration, MIG
attribution (gpuInstanceId/computeInstanceId), ECC events, MIG device handles, a freed set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from libnvml_common import GPUSIM, NEEDS_BUILD, lib_env, libnvml_build  # pylint: disable=import-error

pytestmark = NEEDS_BUILD

WAITER = r'''
import ctypes, json, sys, time
import pynvml as n
out = {"file": n.__file__}
addr = lambda p: ctypes.cast(p, ctypes.c_void_p).value
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
uuid = n.nvmlDeviceGetUUID(h)
out["by_uuid"] = n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByUUID(uuid)) == uuid
s = n.nvmlEventSetCreate()
n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, s)
t = time.monotonic()
try:
    n.nvmlEventSetWait_v2(s, 300)
    out["first"] = "event"
except n.NVMLError_Timeout as e:
    out["first"] = [type(e).__name__, e.value, round(time.monotonic() - t, 2)]
print("waiting", flush=True)
d = n.nvmlEventSetWait_v2(s, 30000)
out["event"] = {"eventType": d.eventType, "eventData": d.eventData, "gpuInstanceId": d.gpuInstanceId,
                "computeInstanceId": d.computeInstanceId, "uuid": n.nvmlDeviceGetUUID(d.device),
                "same_handle": addr(d.device) == addr(h)}
out["uuid"] = uuid
n.nvmlEventSetFree(s)
n.nvmlShutdown()
print(json.dumps(out), flush=True)
'''


def _gpusim(state, *args):
    subprocess.run([sys.executable, "-m", "gpusim", "--state", str(state), *args], cwd=str(GPUSIM), check=True,
                   capture_output=True, text=True, timeout=60)


def _state(tmp_path, gpus):
    path = tmp_path / "gpusim.json"
    path.write_text(json.dumps({"gpus": gpus}), encoding="utf-8")
    return path


def test_an_xid_injected_while_waiting_arrives_on_the_registered_gpu(libdirs, tmp_path):
    state = _state(tmp_path, [{"model": "NVIDIA A100-SXM4-40GB"}, {"model": "NVIDIA A100-SXM4-40GB"}])
    proc = subprocess.Popen([sys.executable, "-I", "-c", WAITER], env=lib_env(libdirs[libnvml_build.DEFAULT_DRIVER], state),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "waiting", proc.stderr.read()
        time.sleep(0.3)                    # the wait is polling now
        _gpusim(state, "fault", "xid", "43", "-i", "1")   # another GPU: not registered, not delivered
        _gpusim(state, "fault", "xid", "79", "-i", "0")
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    out = json.loads(stdout)
    assert "site-packages" in out["file"] and out["by_uuid"]
    assert out["first"] == ["NVMLError_Timeout", 10, out["first"][2]] and 0.3 <= out["first"][2] < 2
    assert out["event"] == {"eventType": 8, "eventData": 79, "gpuInstanceId": 0xFFFFFFFF,
                            "computeInstanceId": 0xFFFFFFFF, "uuid": out["uuid"], "same_handle": True}


RULES = r'''
import json
import pynvml as n
out = {}

def rec(name, fn, *args):
    try:
        v = fn(*args)
        out[name] = ["ok", v]
    except n.NVMLError as e:
        out[name] = ["err", type(e).__name__, e.value]

n.nvmlInit()
mig_gpu, l40s = n.nvmlDeviceGetHandleByIndex(0), n.nvmlDeviceGetHandleByIndex(1)
rec("supported_a100", n.nvmlDeviceGetSupportedEventTypes, mig_gpu)
rec("supported_l40s_ecc_off", n.nvmlDeviceGetSupportedEventTypes, l40s)
mig = n.nvmlDeviceGetMigDeviceHandleByIndex(mig_gpu, 0)
rec("mig_by_uuid", lambda: n.nvmlDeviceGetUUID(n.nvmlDeviceGetHandleByUUID(n.nvmlDeviceGetUUID(mig))) ==
    n.nvmlDeviceGetUUID(mig))
rec("by_uuid_unknown", n.nvmlDeviceGetHandleByUUID, b"GPU-00000000-0000-0000-0000-000000000000")
s = n.nvmlEventSetCreate()
rec("register_mig_handle", n.nvmlDeviceRegisterEvents, mig, n.nvmlEventTypeXidCriticalError, s)
rec("register_bad_bits", n.nvmlDeviceRegisterEvents, mig_gpu, 1 << 40, s)
rec("register_ecc_off", n.nvmlDeviceRegisterEvents, l40s, n.nvmlEventTypeXidCriticalError | n.nvmlEventTypeDoubleBitEccError, s)
all3 = n.nvmlEventTypeXidCriticalError | n.nvmlEventTypeDoubleBitEccError | n.nvmlEventTypeSingleBitEccError
rec("register", n.nvmlDeviceRegisterEvents, mig_gpu, all3, s)
rec("register_l40s_xid", n.nvmlDeviceRegisterEvents, l40s, n.nvmlEventTypeXidCriticalError, s)
rec("nothing_from_before", lambda: n.nvmlEventSetWait_v2(s, 0))
print("registered", flush=True)
input()
events = []
for _ in range(4):
    d = n.nvmlEventSetWait_v2(s, 5000)
    events.append([n.nvmlDeviceGetUUID(d.device), d.eventType, d.eventData, d.gpuInstanceId, d.computeInstanceId])
out["events"] = events
rec("then_timeout", lambda: n.nvmlEventSetWait_v2(s, 0))
rec("free", n.nvmlEventSetFree, s)
rec("wait_freed", lambda: n.nvmlEventSetWait_v2(s, 0))
out["uuids"] = [n.nvmlDeviceGetUUID(mig_gpu), n.nvmlDeviceGetUUID(l40s)]
print(json.dumps(out), flush=True)
'''


def test_event_set_rules_of_nvml_h(libdirs, tmp_path):
    """The supported mask (ECC types only with ECC on), INVALID_ARGUMENT / NOT_SUPPORTED registrations (none of the
    types registered then), nothing from before the registration, the kernel log's order, MIG attribution and ECC
    counter events, TIMEOUT with a 0 ms wait, a freed set refused."""
    a100 = {"model": "NVIDIA A100-SXM4-40GB", "mig_mode": "enabled",
            "gpu_instances": [{"profile_id": 19, "start": 0, "compute_instances": [{}]}],
            "xid_events": [{"xid": 48}]}              # before the registration: never delivered
    state = _state(tmp_path, [a100, {"model": "NVIDIA L40S", "ecc": {"mode": 0}}])
    proc = subprocess.Popen([sys.executable, "-I", "-c", RULES], env=lib_env(libdirs[libnvml_build.DEFAULT_DRIVER], state),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "registered", proc.stderr.read()
        with open(state, encoding="utf-8") as fh:
            st = json.load(fh)
        st["gpus"][0]["xid_events"].append({"xid": 94, "t": 2000.0, "gpu_instance_id": 1, "compute_instance_id": 0})
        st["gpus"][1]["xid_events"] = [{"xid": 13, "t": 1500.0}]   # earlier in the kernel log: first
        st["gpus"][0]["ecc"] = {"volatile": {"uncorrected": 1, "corrected": 2}, "aggregate": {"uncorrected": 1}}
        tmp = tmp_path / "next.json"
        tmp.write_text(json.dumps(st), encoding="utf-8")
        os.replace(tmp, state)                         # the waiting reader sees the old file or the new one
        stdout, stderr = proc.communicate("\n", timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    out = json.loads(stdout)
    a, l = out.pop("uuids")
    assert out == {
        "supported_a100": ["ok", 0x10F], "supported_l40s_ecc_off": ["ok", 0xC], "mig_by_uuid": ["ok", True],
        "by_uuid_unknown": ["err", "NVMLError_NotFound", 6],
        "register_mig_handle": ["err", "NVMLError_NotSupported", 3],
        "register_bad_bits": ["err", "NVMLError_InvalidArgument", 2],
        "register_ecc_off": ["err", "NVMLError_NotSupported", 3],
        "register": ["ok", None], "register_l40s_xid": ["ok", None],
        "nothing_from_before": ["err", "NVMLError_Timeout", 10],
        "events": [[l, 8, 13, 0xFFFFFFFF, 0xFFFFFFFF], [a, 8, 94, 1, 0], [a, 2, 0, 0xFFFFFFFF, 0xFFFFFFFF],
                   [a, 1, 0, 0xFFFFFFFF, 0xFFFFFFFF]],
        "then_timeout": ["err", "NVMLError_Timeout", 10],
        "free": ["ok", None], "wait_freed": ["err", "NVMLError_InvalidArgument", 2]}
