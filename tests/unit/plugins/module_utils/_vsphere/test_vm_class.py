"""_vsphere/vm_class.py: VM classes with vGPUs and their namespaces (pure)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._vsphere import vm_class as vc
from ansible_collections.gpuops.provision.plugins.module_utils._vsphere.vgpu import VgpuError


def change(profile, key=-100):
    return vc.vgpu_change(profile, key)


NIC = {"_typeName": "VirtualDeviceConfigSpec", "operation": "add",
       "device": {"_typeName": "VirtualVmxnet3", "key": -1, "backing": {"_typeName": "VirtualEthernetCardNetworkBackingInfo"}}}
INFO = {"id": "gpu", "cpu_count": 4, "memory_MB": 8192, "cpu_reservation": 0, "memory_reservation": 100,
        "devices": {"vgpu_devices": [{"profile_name": "grid_a100-8c"}], "dynamic_direct_path_IO_devices": [{"vendor_id": 1}]},
        "config_spec": {"_typeName": "VirtualMachineConfigSpec", "numCPUs": 4, "deviceChange": [NIC, change("grid_a100-4c")]},
        "namespaces": [], "vms": []}


@pytest.mark.parametrize("name", ["a", "gpu-1", "a" * 63, "0x"])
def test_names_are_dns_labels(name):
    assert vc.check_name(name) == name


@pytest.mark.parametrize("name", ["", "-a", "a-", "A", "a_b", "a" * 64, "a.b", "a\n"])
def test_bad_names_fail(name):
    with pytest.raises(VgpuError, match=r"^VM class %s: the name must be a DNS label \(a-z, 0-9 and '-', at most 63 "
                                        r"characters, no '-' at either end\)$" % repr(name).replace("\\", "\\\\")):
        vc.check_name(name)


def test_profiles_and_state_of_a_class():
    assert vc.profiles_of(INFO) == ["grid_a100-4c", "grid_a100-8c"]
    assert vc.profiles_of({}) == []
    assert vc.profiles_of({"devices": None, "config_spec": {"deviceChange": [NIC, "odd", {"device": "x"}]}}) == []
    assert vc.state_of(INFO) == dict(cpu_count=4, memory_mb=8192, cpu_reservation=0, memory_reservation=100,
                                     vgpu_profiles=["grid_a100-4c", "grid_a100-8c"])
    assert vc.state_of({"memory_mb": 1})["memory_mb"] == 1  # govmomi's spelling
    assert vc.state_of(None) is None


def test_device_api():
    assert vc.device_api("auto", (8, 0, 2)) == "config_spec"
    assert vc.device_api("auto", (8, 0, 1)) == "devices"
    assert vc.device_api("auto", None) == "devices"
    assert vc.device_api("devices", (9, 0, 0)) == "devices"
    assert vc.device_api("config_spec", (7, 0, 3)) == "config_spec"
    with pytest.raises(VgpuError, match=r"^device_api must be one of auto, devices, config_spec, got 'x'$"):
        vc.device_api("x", (8, 0, 2))


def test_device_fields_keep_other_devices_and_fields():
    out = vc.device_fields(INFO, ["grid_a100-3-20c", "grid_a100-3-20c"], "config_spec")
    assert out["devices"] == {"dynamic_direct_path_IO_devices": [{"vendor_id": 1}]}
    assert out["config_spec"] == {"_typeName": "VirtualMachineConfigSpec", "numCPUs": 4,
                                  "deviceChange": [NIC, change("grid_a100-3-20c", -100), change("grid_a100-3-20c", -101)]}
    out = vc.device_fields(INFO, ["grid_a100-3-20c"], "devices")
    assert out["devices"]["vgpu_devices"] == [{"profile_name": "grid_a100-3-20c"}]
    assert out["config_spec"]["deviceChange"] == [NIC]
    assert vc.device_fields(None, ["p"], "devices") == {"devices": {"vgpu_devices": [{"profile_name": "p"}]}}
    assert vc.device_fields(None, ["p"], "config_spec") == {"devices": {}, "config_spec": {
        "_typeName": "VirtualMachineConfigSpec", "deviceChange": [change("p")]}}
    assert vc.device_fields(None, [], "config_spec") == {"devices": {}}
    assert INFO["config_spec"]["deviceChange"] == [NIC, change("grid_a100-4c")]  # the input is not changed


def test_create_needs_cpu_and_memory_and_sends_only_what_is_set():
    spec = dict(name="gpu", cpu_count=4, memory_mb=8192, vgpu_profiles=["b", "a"])
    plan = vc.plan_class(spec, None, "devices")
    assert plan == dict(name="gpu", operation="create", before=None, changed=True,
                        after=dict(cpu_count=4, memory_mb=8192, cpu_reservation=None, memory_reservation=None,
                                   vgpu_profiles=["a", "b"]),
                        body={"id": "gpu", "cpu_count": 4, "memory_MB": 8192,
                              "devices": {"vgpu_devices": [{"profile_name": "a"}, {"profile_name": "b"}]}})
    plain = vc.plan_class(dict(name="small", cpu_count=1, memory_mb=512, memory_reservation=50), None, "devices")
    assert plain["body"] == {"id": "small", "cpu_count": 1, "memory_MB": 512, "memory_reservation": 50}
    with pytest.raises(VgpuError, match=r"^VM class gpu does not exist; creating it needs cpu_count and memory_mb$"):
        vc.plan_class(dict(name="gpu"), None, "devices")
    with pytest.raises(VgpuError, match=r"^VM class gpu does not exist; creating it needs memory_mb$"):
        vc.plan_class(dict(name="gpu", cpu_count=2), None, "devices")


def test_update_sends_what_differs_and_nothing_when_nothing_does():
    same = vc.plan_class(dict(name="gpu", cpu_count=4, vgpu_profiles=["grid_a100-8c", "grid_a100-4c"]), INFO, "config_spec")
    assert same["operation"] is None and not same["changed"] and same["body"] is None
    assert same["before"] == same["after"]
    more = vc.plan_class(dict(name="gpu", cpu_count=8, memory_reservation=100), INFO, "devices")
    assert more["operation"] == "update" and more["body"] == {"cpu_count": 8}
    devices = vc.plan_class(dict(name="gpu", vgpu_profiles=["grid_a100-40c"]), INFO, "config_spec")
    assert devices["body"]["config_spec"]["deviceChange"] == [NIC, change("grid_a100-40c")]
    assert devices["after"]["vgpu_profiles"] == ["grid_a100-40c"] and devices["after"]["cpu_count"] == 4
    cleared = vc.plan_class(dict(name="gpu", vgpu_profiles=[]), INFO, "devices")
    assert cleared["body"]["devices"]["vgpu_devices"] == [] and cleared["body"]["config_spec"]["deviceChange"] == [NIC]


def test_delete():
    assert vc.plan_class(dict(name="gpu", state="absent"), INFO, "devices") == dict(
        name="gpu", operation="delete", body=None, before=vc.state_of(INFO), after=None, changed=True)
    assert vc.plan_class(dict(name="gpu", state="absent"), None, "devices") == dict(
        name="gpu", operation=None, body=None, before=None, after=None, changed=False)


NAMESPACES = {"team-a": {"content_libraries": ["lib-1"], "vm_classes": ["small", "gpu"]}, "team-b": {"vm_classes": []},
              "team-c": None}


def test_bindings_make_the_class_bound_to_exactly_the_listed_namespaces():
    out = vc.plan_bindings([dict(name="gpu", namespaces=["team-b"]), dict(name="other")], NAMESPACES)
    assert out["team-a"] == dict(before=["gpu", "small"], after=["small"], changed=True,
                                 body={"vm_service_spec": {"content_libraries": ["lib-1"], "vm_classes": ["small"]}})
    assert out["team-b"] == dict(before=[], after=["gpu"], changed=True,
                                 body={"vm_service_spec": {"content_libraries": [], "vm_classes": ["gpu"]}})
    assert out["team-c"] == dict(before=[], after=[], changed=False, body=None)
    same = vc.plan_bindings([dict(name="gpu", namespaces=["team-a"])], NAMESPACES)
    assert not any(b["changed"] for b in same.values())
    with pytest.raises(VgpuError, match=r"^namespace\(s\) x, y not found; create them \(with their storage\) first$"):
        vc.plan_bindings([dict(name="gpu", namespaces=["y", "team-a", "x"])], NAMESPACES)
    unbind = vc.plan_bindings([dict(name="gpu", state="absent", namespaces=[])], NAMESPACES)
    assert unbind["team-a"]["after"] == ["small"]


def test_deletes_of_bound_or_used_classes_are_refused():
    bindings = vc.plan_bindings([], NAMESPACES)
    plans = [vc.plan_class(dict(name="gpu", state="absent"), INFO, "devices")]
    with pytest.raises(VgpuError, match=r"^VM class gpu is still bound to namespace\(s\) team-a; set its namespaces to "
                                        r"\[\] to unbind it; nothing changed$"):
        vc.check_deletes(plans, bindings, {"gpu": INFO})
    unbound = vc.plan_bindings([dict(name="gpu", namespaces=[])], NAMESPACES)
    vc.check_deletes(plans, unbound, {"gpu": INFO})
    with pytest.raises(VgpuError, match=r"^VM class gpu is used by VM\(s\) vm-1, vm-2; nothing changed$"):
        vc.check_deletes(plans, unbound, {"gpu": dict(INFO, vms=["vm-2", "vm-1"])})
    vc.check_deletes([vc.plan_class(dict(name="gpu", cpu_count=1), INFO, "devices")], bindings, {"gpu": INFO})


def test_exposure_is_who_reaches_which_profile():
    out = vc.exposure({"gpu": ["p2", "p1", "p1"], "small": [], "x": ["p1"]}, {"team-a": ["small", "gpu"], "team-b": []})
    assert out == dict(namespaces={"team-a": {"gpu": ["p1", "p1", "p2"]}, "team-b": {}},
                       profiles={"p1": dict(classes=["gpu", "x"], namespaces=["team-a"]),
                                 "p2": dict(classes=["gpu"], namespaces=["team-a"])})
    assert vc.exposure({}, {}) == dict(namespaces={}, profiles={})
