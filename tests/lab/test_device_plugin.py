"""NVIDIA's own k8s-device-plugin v0.17.4 (lab/device-plugin, built on first use) on the lab's real kubelet, answering
from gpusim's libnvidia-ml.so.1 (issue 42 item 4): what the Node advertises comes from NVIDIA's code and the kubelet's
device manager, and must equal what the stand-in (lab/kube/device_plugin.py, gpu_resources.py) and the product
(mig_roll.expected_resources) say for the same state.

The plugin runs with its health checks on, as the GPU Operator runs it (internal/rm/health.go on the library's event
sets, libnvml/events.c): an Xid the plugin does not ignore, injected into gpusim's kernel log, takes that GPU out of
the Node's allocatable. Where the library does not reach yet, the test names the exact point the plugin stops at (the
dynamic linker's "undefined symbol" on the first entry point it lacks), as tests/lab/test_libnvml.py does for
mig-parted: the allocation of whole GPUs (nvmlDeviceGetTopologyCommonAncestor). That test fails once the entry points
land: then it becomes an end-to-end one.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "lab", "kube"))
import gpu_resources as GR  # noqa: E402  pylint: disable=import-error,wrong-import-position
import kube_harness as kh  # noqa: E402  pylint: disable=import-error,wrong-import-position
import kubelet  # noqa: E402  pylint: disable=import-error,wrong-import-position
import nvidia_device_plugin as ndp  # noqa: E402  pylint: disable=import-error,wrong-import-position
from ansible_collections.gpuops.provision.plugins.module_utils._k8s import mig_roll  # noqa: E402  pylint: disable=wrong-import-position


def _why_not():
    if os.geteuid() != 0:
        return "a kubelet and mount namespaces need root"
    for tool in ("go", "gcc", "unshare"):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH (the plugin and library builds need go and gcc; the kernel view unshare)"
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return "no mount namespace here (unshare -m): " + probe.stderr.strip()
    return None


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))]

NODE = "gpu-real"
L40S = "NVIDIA L40S"      # no MIG: go-nvlib's IsMigCapable is false, so no MIG entry point is called
A100 = "NVIDIA A100-SXM4-40GB"
# The health checker's calls (internal/rm/health.go checkHealth: init, the event set, each device by UUID, its
# supported event types, the registration, then nvmlEventSetWait_v2 with a 5000 ms timeout in a loop), which start
# once the plugin has registered with the kubelet (internal/plugin/server.go Start).
HEALTH_CALLS = ["nvmlInitWithFlags", "nvmlEventSetCreate", "nvmlDeviceGetHandleByUUID", "nvmlDeviceGetSupportedEventTypes",
                "nvmlDeviceRegisterEvents", "nvmlEventSetWait_v2"]
# The plugin's calls for whole GPUs, in first-call order (GPUSIM_TRACE): init, the device list and names
# (go-nvlib), the MIG mode (IsMigCapable/IsMigEnabled), then per device internal/rm/nvml_devices.go: UUID,
# GetPaths (minor number), GetNumaNode (PCI bus id), GetTotalMemory, GetComputeCapability.
WHOLE_GPU_CALLS = ["nvmlInitWithFlags", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetName",
                   "nvmlDeviceGetMigMode", "nvmlDeviceGetUUID", "nvmlDeviceGetMinorNumber", "nvmlDeviceGetPciInfo_v3",
                   "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetCudaComputeCapability"]


@pytest.fixture(scope="module")
def node():
    """A control plane and one real kubelet whose device-plugins dir is its own; its node status is posted every
    second (not the default 10 s) so that a plugin's registration shows in the Node at once."""
    with kh.control_plane() as plane:
        root = kubelet.start(plane.cp, NODE, ["--node-status-update-frequency=1s"], device_plugins=True)
        try:
            lab = plane.session()
            lab.wait_for(lambda: any(n.metadata.name == NODE for n in lab.core.list_node().items), timeout=90,
                         what="the kubelet to register its Node")
            yield plane.cp, lab, root
        finally:
            ndp.stop(plane.cp)
            kubelet.stop(plane.cp, root)


def _state(tmp_path, gpus):
    path = tmp_path / "gpusim.json"
    path.write_text(json.dumps({"gpus": gpus}), encoding="utf-8")
    return str(path)


def _gpu_resources(status_part):
    return {k: int(v) for k, v in (status_part or {}).items() if k.startswith("nvidia.com/")}


def _served(cp, lab, want, timeout=90):
    """The Node's nvidia.com/* (capacity, allocatable) once ``want`` is in both and nothing else is allocatable. A
    resource an earlier plugin served stays in capacity with 0 allocatable for the kubelet's grace period
    (pkg/kubelet/cm/devicemanager/types.go endpointStopGracePeriod, 5 min); the plugin's log on a timeout."""
    def check():
        status = lab.core.read_node(NODE).status
        cap, alloc = _gpu_resources(status.capacity), _gpu_resources(status.allocatable)
        ok = all(cap.get(k) == v and alloc.get(k) == v for k, v in want.items()) and \
            not any(v for k, v in alloc.items() if k not in want)
        return (cap, alloc) if ok else None
    try:
        return lab.wait_for(check, timeout=timeout, what=f"{want} from NVIDIA's plugin")
    except Exception:
        print(ndp.log(cp)[-6000:])
        raise


def _stop(cp, lab):
    """Stop the plugin and wait until the kubelet has noticed (its devices unhealthy: nothing allocatable), so that
    the next test's _served sees its own plugin's devices, not this one's."""
    ndp.stop(cp)
    lab.wait_for(lambda: not any(_gpu_resources(lab.core.read_node(NODE).status.allocatable).values()), timeout=90,
                 what="the stopped plugin's devices unhealthy")


def _health_registered(cp, lab, gpus):
    """Wait until the health checker has registered ``gpus`` GPUs for events (the GPUSIM_TRACE line comes when the call
    returns; the first nvmlEventSetWait_v2's only when it does, up to 5 s later)."""
    lab.wait_for(lambda: ndp.log(cp).count("gpusim libnvidia-ml: nvmlDeviceRegisterEvents(") >= gpus, timeout=90,
                 what="the health checker's registrations")


def _stopped_at(cp, symbol, timeout=90):
    """The plugin's log once the dynamic linker has ended it at ``symbol``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = ndp.log(cp)
        if "symbol lookup error" in text:
            assert f"undefined symbol: {symbol}" in text, text[-3000:]
            return text
        time.sleep(0.2)
    raise AssertionError(f"the plugin did not stop at {symbol}:\n" + ndp.log(cp)[-3000:])


def test_single_strategy_advertises_the_gpus_through_the_kubelet(node, tmp_path):
    cp, lab, root = node
    state = _state(tmp_path, [{"model": L40S}, {"model": L40S}])
    ndp.start(cp, root, state, "single")
    try:
        capacity, _allocatable = _served(cp, lab, {"nvidia.com/gpu": 2})
        _health_registered(cp, lab, 2)
    finally:
        _stop(cp, lab)
    text = ndp.log(cp)
    assert "Registered device plugin for 'nvidia.com/gpu' with Kubelet" in text
    before, after = text.split("Registered device plugin", 1)
    assert ndp.nvml_calls(before) == WHOLE_GPU_CALLS
    assert ndp.nvml_calls(after) in (HEALTH_CALLS, HEALTH_CALLS[:-1])
    # The stand-in and the product say the same for this state.
    with open(state, encoding="utf-8") as fh:
        assert GR.device_plugin_resources(json.load(fh), "single") == ({"nvidia.com/gpu": capacity["nvidia.com/gpu"]}, None)
    assert mig_roll.expected_resources([{"index": 0, "mig_capable": False}, {"index": 1, "mig_capable": False}],
                                       "single") == {"nvidia.com/gpu": 2}


@pytest.mark.parametrize("rename", [False, True])
def test_time_slicing_replicas_are_advertised_as_the_stand_in_says(node, tmp_path, rename):
    # internal/rm/device_map.go updateDeviceMapWithReplicas: each GPU becomes `replicas` devices, of
    # nvidia.com/gpu.shared with renameByDefault (api/config/v1 replicas.go).
    cp, lab, root = node
    state = _state(tmp_path, [{"model": L40S}, {"model": L40S}])
    config = {"version": "v1", "sharing": {"timeSlicing": {"renameByDefault": rename,
                                                           "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
    with open(state, encoding="utf-8") as fh:
        st = json.load(fh)
    sharing, error = GR.parse_sharing(json.dumps(config))
    assert error is None
    expected, error = GR.apply_sharing(GR.device_plugin_resources(st, "single")[0], sharing, st, GR.gpusim_compute_capability())
    assert error is None and expected == ({"nvidia.com/gpu.shared": 8} if rename else {"nvidia.com/gpu": 8})
    ndp.start(cp, root, state, "single", config=config)
    try:
        _served(cp, lab, expected)
    finally:
        _stop(cp, lab)


def _pod(lab, name, resource, count):
    """A pod bound to the real kubelet's node (no scheduler) that asks for ``count`` of ``resource``."""
    lab.core.create_namespaced_pod("default", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeName": NODE, "containers": [{"name": "cuda", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                                                   "resources": {"limits": {resource: str(count)}}}]}})
    return lab.core.read_namespaced_pod(name, "default").metadata.uid


def _fields(data):
    """(field number, bytes) of a protobuf message's length-delimited fields (all that the ones read here have)."""
    def varint(at):
        shift = value = 0
        while True:
            byte = data[at]
            value |= (byte & 0x7F) << shift
            at, shift = at + 1, shift + 7
            if not byte & 0x80:
                return value, at
    out, i = [], 0
    while i < len(data):
        tag, i = varint(i)
        size, i = varint(i)
        out.append((tag >> 3, data[i:i + size]))
        i += size
    return out


def _allocation(alloc_resp):
    """(envs, device specs) of a ContainerAllocateResponse (k8s.io/kubelet pkg/apis/deviceplugin/v1beta1 api.proto:
    envs = 1, a map of key 1 / value 2; devices = 3, DeviceSpec container_path 1, host_path 2, permissions 3), from
    the base64 protobuf the kubelet's checkpoint keeps."""
    envs, devices = {}, []
    for number, body in _fields(base64.b64decode(alloc_resp)):
        entry = {n: v.decode() for n, v in _fields(body)}
        if number == 1:
            envs[entry[1]] = entry[2]
        elif number == 3:
            devices.append((entry[1], entry[2], entry[3]))
    return envs, devices


@pytest.mark.parametrize("pass_device_specs", [False, True])
def test_a_time_sliced_pod_is_admitted_with_nvidias_allocation(node, tmp_path, pass_device_specs):
    """The kubelet admits a pod asking for a time-sliced GPU through the plugin's GetPreferredAllocation
    (internal/rm/allocate.go distributedAlloc: no NVML) and Allocate (the envvar device-list strategy:
    NVIDIA_VISIBLE_DEVICES, the GPU's UUID without the replica suffix); the kubelet's checkpoint
    (ROOT/device-plugins/kubelet_internal_checkpoint) keeps the answer. With PASS_DEVICE_SPECS=true (the GPU
    Operator's default, deployments/gpu-operator/values.yaml devicePlugin.env) Allocate also names the device nodes
    (internal/plugin/server.go apiDeviceSpecs): the control nodes found in its /dev, then the GPU's."""
    cp, lab, root = node
    uuids = ["GPU-5e1f0a00-0000-4000-8000-000000000000", "GPU-5e1f0a01-0000-4000-8000-000000000001"]
    state = _state(tmp_path, [{"model": L40S, "uuid": u} for u in uuids])
    config = {"version": "v1", "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
    ndp.start(cp, root, state, "single", config=config, pass_device_specs=pass_device_specs)
    name = f"time-sliced-{str(pass_device_specs).lower()}"
    try:
        _served(cp, lab, {"nvidia.com/gpu": 8})
        uid = _pod(lab, name, "nvidia.com/gpu", 1)

        def allocated():
            with open(os.path.join(root, "device-plugins", "kubelet_internal_checkpoint"), encoding="utf-8") as fh:
                entries = json.load(fh)["Data"]["PodDeviceEntries"] or []
            return [e for e in entries if e["PodUID"] == uid]
        entry, = lab.wait_for(allocated, timeout=90, what="the pod's devices in the kubelet's checkpoint")
    finally:
        lab.core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
        _stop(cp, lab)
    (device,), = entry["DeviceIDs"].values()
    uuid, _sep, replica = device.partition("::")
    assert uuid in uuids and replica in {"0", "1", "2", "3"}
    envs, devices = _allocation(entry["AllocResp"])
    assert envs == {"NVIDIA_VISIBLE_DEVICES": uuid}
    nodes = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset", "/dev/nvidia%d" % uuids.index(uuid)]
    assert devices == ([(p, p, "rw") for p in nodes] if pass_device_specs else [])
    # distributedAlloc and Allocate call no NVML: after the registration only the health checker does.
    assert set(ndp.nvml_calls(ndp.log(cp).split("Registered device plugin", 1)[1])) <= set(HEALTH_CALLS)


def test_a_whole_gpu_pod_stops_at_the_topology_query(node, tmp_path):
    """For whole GPUs the plugin's GetPreferredAllocation asks go-gpuallocator for the GPUs' links
    (internal/rm/nvml_manager.go alignedAlloc -> gpuallocator NewDevices -> internal/links GetP2PLink):
    nvmlDeviceGetTopologyCommonAncestor is not in the library, the plugin ends, and the kubelet refuses the pod
    (UnexpectedAdmissionError)."""
    cp, lab, root = node
    state = _state(tmp_path, [{"model": L40S}, {"model": L40S}])
    ndp.start(cp, root, state, "single")
    try:
        _served(cp, lab, {"nvidia.com/gpu": 2})
        _pod(lab, "whole-gpu", "nvidia.com/gpu", 1)
        _stopped_at(cp, "nvmlDeviceGetTopologyCommonAncestor")

        def refused():
            pod = lab.core.read_namespaced_pod("whole-gpu", "default")
            return pod if pod.status.phase == "Failed" else None
        pod = lab.wait_for(refused, timeout=90, what="the pod refused")
    finally:
        lab.core.delete_namespaced_pod("whole-gpu", "default", grace_period_seconds=0)
        _stop(cp, lab)
    assert pod.status.reason == "UnexpectedAdmissionError"
    assert "GetPreferredAllocation rpc failed" in pod.status.message


def _gpusim(state, *args):
    subprocess.run([sys.executable, "-m", "gpusim", "--state", state, *args], cwd=os.path.join(REPO, "lab", "gpusim"),
                   check=True, capture_output=True, text=True, timeout=60)


def test_a_critical_xid_takes_the_gpu_out_of_allocatable(node, tmp_path):
    """The health checker (internal/rm/health.go) registers every GPU for Xid and ECC events and waits on the set;
    Xid 43 ("GPU stopped processing", one of the application Xids it skips) on GPU 1 and then Xid 79 (fallen off the
    bus) on GPU 0 go into gpusim's kernel log from another process (`python -m gpusim fault xid`): the plugin skips
    the first, marks GPU 0 unhealthy on the second and sends the kubelet its new device list (server.go
    ListAndWatch), so the Node keeps capacity 2 and allocates 1."""
    cp, lab, root = node
    uuids = ["GPU-5e1f0b00-0000-4000-8000-000000000000", "GPU-5e1f0b01-0000-4000-8000-000000000001"]
    state = _state(tmp_path, [{"model": L40S, "uuid": u} for u in uuids])
    ndp.start(cp, root, state, "single")
    try:
        before = _served(cp, lab, {"nvidia.com/gpu": 2})
        _health_registered(cp, lab, 2)
        _gpusim(state, "fault", "xid", "43", "-i", "1")
        _gpusim(state, "fault", "xid", "79", "-i", "0")

        def one_unhealthy():
            status = lab.core.read_node(NODE).status
            cap, alloc = _gpu_resources(status.capacity), _gpu_resources(status.allocatable)
            return (cap, alloc) if (cap.get("nvidia.com/gpu"), alloc.get("nvidia.com/gpu")) == (2, 1) else None
        try:
            after = lab.wait_for(one_unhealthy, timeout=90, what="capacity 2, allocatable 1")
        except Exception:
            print(ndp.log(cp)[-6000:])
            raise
        text = ndp.log(cp)
    finally:
        _stop(cp, lab)
    # (An earlier test's nvidia.com/gpu.shared may still be in capacity with 0 allocatable: see _served.)
    print("capacity/allocatable before %s, after %s" % (before, after))
    gpu = [(cap["nvidia.com/gpu"], alloc["nvidia.com/gpu"]) for cap, alloc in (before, after)]
    assert gpu == [(2, 2), (2, 1)]
    assert f"XidCriticalError: Xid=79 on Device={uuids[0]}; marking device as unhealthy." in text
    assert f"'nvidia.com/gpu' device marked unhealthy: {uuids[0]}" in text
    assert "EventData:43" in text.split("Processing event", 1)[0]     # "Skipping event {... EventData:43 ...}"
    assert f"device marked unhealthy: {uuids[1]}" not in text


def _mig_gpu(*profiles):
    """An A100-SXM4-40GB with MIG on and one full-size compute instance per GPU instance profile id given (19: 1g.5gb
    at slices 0, 1, ...; 14: 2g.10gb at slice 4)."""
    starts = {19: iter(range(7)), 14: iter((4, 0, 2))}
    return {"model": A100, "mig_mode": "enabled",
            "gpu_instances": [{"profile_id": p, "start": next(starts[p]), "compute_instances": [{}]} for p in profiles]}


def _product(gpus):
    """The state's GPUs as mig_geometry reports them, for the product's mig_roll.expected_resources."""
    names = {19: "1g.5gb", 14: "2g.10gb"}
    out = []
    for i, g in enumerate(gpus):
        devices = {}
        for gi in g.get("gpu_instances", []):
            devices[names[gi["profile_id"]]] = devices.get(names[gi["profile_id"]], 0) + 1
        out.append({"index": i, "mig_capable": g["model"] != L40S,
                    "before": {"mig_mode": {"current": g.get("mig_mode", "disabled")}, "mig_devices": devices}})
    return out


MIG_CASES = {
    # MIG on one GPU, off on the other: the mixed strategy serves each as it is (internal/rm/rm.go
    # AddDefaultResourcesToConfig: nvidia.com/mig-<profile> per full-size profile, nvidia.com/gpu for the rest).
    "mixed, one GPU without MIG": ("mixed", [_mig_gpu(19, 19), {"model": A100, "mig_mode": "disabled"}],
                                   {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.5gb": 2}),
    "mixed, two profiles": ("mixed", [_mig_gpu(19, 19, 14), _mig_gpu(19, 19, 14)],
                            {"nvidia.com/mig-1g.5gb": 4, "nvidia.com/mig-2g.10gb": 2}),
    # single: every MIG device of the one type is an nvidia.com/gpu (rm.go AddMIGResource("*", "gpu")).
    "single, one profile": ("single", [_mig_gpu(19, 19), _mig_gpu(19, 19)], {"nvidia.com/gpu": 4}),
    # MIG-capable GPUs with MIG off: go-nvlib VisitMigDevices asks nvmlDeviceGetMaxMigDeviceCount of each (0).
    "single, MIG off": ("single", [{"model": A100, "mig_mode": "disabled"}] * 2, {"nvidia.com/gpu": 2}),
}


@pytest.mark.parametrize("case", sorted(MIG_CASES))
def test_mig_strategies_advertise_what_the_stand_in_and_the_product_expect(node, tmp_path, case):
    cp, lab, root = node
    strategy, gpus, expected = MIG_CASES[case]
    state = _state(tmp_path, gpus)
    with open(state, encoding="utf-8") as fh:
        assert GR.device_plugin_resources(json.load(fh), strategy, GR.gpusim_namer()) == (expected, None)
    assert mig_roll.expected_resources(_product(gpus), strategy) == expected
    ndp.start(cp, root, state, strategy)
    try:
        _served(cp, lab, expected)
        # The health checker registers each device's GPU (a MIG device's parent, found through
        # nvmlDeviceGetHandleByUUID of the MIG UUID) and marks none of them unhealthy.
        _health_registered(cp, lab, sum(expected.values()))
        _served(cp, lab, expected)
    finally:
        _stop(cp, lab)
    assert "unhealthy" not in ndp.log(cp)
    if any(g.get("mig_mode") == "enabled" for g in gpus):
        # What the plugin asks of a MIG device (internal/rm/nvml_devices.go, go-nvlib mig_device.go GetProfile).
        assert {"nvmlDeviceGetMigDeviceHandleByIndex", "nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId",
                "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", "nvmlDeviceGetAttributes_v2",
                "nvmlGpuInstanceGetComputeInstanceProfileInfo"} <= set(ndp.nvml_calls(ndp.log(cp)))


@pytest.mark.parametrize("gpus", [[_mig_gpu(19, 14), _mig_gpu(19, 14)], [_mig_gpu(19), {"model": A100, "mig_mode": "disabled"}]],
                         ids=["two MIG device types", "MIG on one GPU only"])
def test_single_strategy_refuses_the_layouts_the_stand_in_refuses(node, tmp_path, gpus):
    """internal/rm/device_map.go: the single strategy's checks end the plugin with the stand-in's message, and the
    product's plan check (mig_roll.single_strategy_problem) refuses the same layouts beforehand."""
    cp, _lab, root = node
    state = _state(tmp_path, gpus)
    with open(state, encoding="utf-8") as fh:
        resources, error = GR.device_plugin_resources(json.load(fh), "single", GR.gpusim_namer())
    assert resources == {"nvidia.com/gpu": 0} and error
    assert mig_roll.single_strategy_problem(_product(gpus))
    ndp.start(cp, root, state, "single")
    deadline = time.monotonic() + 90
    while ndp.running(cp) and time.monotonic() < deadline:
        time.sleep(0.2)
    text = ndp.log(cp)
    assert not ndp.running(cp) and "Registered device plugin" not in text
    assert error in text.split("error starting plugins: ", 1)[-1], text[-2000:]
