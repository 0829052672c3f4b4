"""lab/vcsim: the vCenter rules the launcher adds in front of govmomi's simulator (issue 40), each against the source
its Go file cites: vGPU placement at power-on (placement.go), maintenance mode (maintenance.go), Xorg (services.go),
vGPU profile facts, hardware version, transport faults (faults.go), and the VM class / namespace REST layer
(namespaces.go, apisession.go)."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import xml.parsers.expat

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "lab", "vcsim"))

import vcsim_lab  # noqa: E402  (lab helper, found through the path above)

pytest.importorskip("pyVmomi")
from pyVim.connect import Disconnect  # noqa: E402
from pyVim.task import WaitForTask  # noqa: E402
from pyVmomi import vim  # noqa: E402

if not vcsim_lab.available():
    pytest.skip("vcsim-gpu cannot be built here (no Go >= 1.23, see lab/vcsim/README.md)", allow_module_level=True)

pytestmark = pytest.mark.slow

DIRECT = {"graphics_type": "sharedDirect"}


class Lab:
    """A started simulator with a pyvmomi connection and name lookups."""

    def __init__(self, sim):
        self.sim, self.si = sim, sim.connect()

    def objects(self, kind):
        view = self.si.content.viewManager.CreateContainerView(self.si.content.rootFolder, [kind], True)
        try:
            return {o.name: o for o in view.view}
        finally:
            view.Destroy()

    def host(self, name):
        return self.objects(vim.HostSystem)[name]

    def vm(self, name):
        return self.objects(vim.VirtualMachine)[name]

    def cluster(self):
        return list(self.objects(vim.ClusterComputeResource).values())[0]

    def add_vgpus(self, vm, *profiles, power_off=True):
        if power_off and vm.runtime.powerState == "poweredOn":
            WaitForTask(vm.PowerOffVM_Task())
        changes = [vim.vm.device.VirtualDeviceSpec(operation="add", device=vim.vm.device.VirtualPCIPassthrough(
            key=-100 - i, backing=vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo(vgpu=p))) for i, p in enumerate(profiles)]
        WaitForTask(vm.ReconfigVM_Task(vim.vm.ConfigSpec(deviceChange=changes)))

    def drs(self, vm=None, behavior=None, enabled=True, options=None):
        spec = vim.cluster.ConfigSpecEx(drsConfig=vim.cluster.DrsConfigInfo(
            enabled=enabled, option=[vim.option.OptionValue(key=k, value=v) for k, v in (options or {}).items()]))
        if vm is not None:
            spec.drsVmConfigSpec = [vim.cluster.DrsVmConfigSpec(operation="add",
                                                                info=vim.cluster.DrsVmConfigInfo(key=vm, behavior=behavior))]
        WaitForTask(self.cluster().ReconfigureComputeResource_Task(spec, True))


@pytest.fixture
def lab_factory():
    labs = []

    def start(**kwargs):
        ctx = vcsim_lab.vcsim(**kwargs)
        sim = ctx.__enter__()
        labs.append((ctx, sim))
        return Lab(sim)

    yield start
    for ctx, sim in labs:
        ctx.__exit__(None, None, None)


def task_error(task):
    with pytest.raises(vim.fault.VimFault) as e:
        WaitForTask(task)
    return e.value


# ---- GPUs: MIG mode, profile facts ---------------------------------------------------------------------------------

def test_a_gpu_in_mig_mode_offers_mig_backed_types_only_and_reports_its_mode(lab_factory):
    lab = lab_factory(hosts=1, vms=0, api_version="8.0.3.0", fixture={"defaults": DIRECT, "hosts": {
        "DC0_C0_H0": {"model": "a100-40", "mig_gpus": ["0000:5e:00.0"]}}})
    cfg = lab.host("DC0_C0_H0").config
    assert [g.vgpuMode for g in cfg.graphicsInfo] == ["sameSize", "multiInstanceGpu"]
    assert "grid_a100-4c" in cfg.sharedPassthruGpuTypes and "grid_a100-3-20c" in cfg.sharedPassthruGpuTypes


def test_mig_mode_on_a_gpu_without_mig_is_refused_at_start(tmp_path):
    fixture = tmp_path / "f.json"
    fixture.write_text(json.dumps({"hosts": {"DC0_C0_H0": {"model": "l40s", "mig_gpus": ["0000:3b:00.0"]}}}))
    vcsim_lab.build()
    proc = subprocess.run([vcsim_lab.BINARY, "-run-dir", str(tmp_path / "run"), "-fixture", str(fixture)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode != 0 and "host DC0_C0_H0: mig_gpus names 0000:3b:00.0, a NVIDIA L40S, which has no MIG mode" in proc.stderr


def test_vgpu_profile_info_comes_from_the_graphics_manager(lab_factory):
    lab = lab_factory(hosts=1, vms=0, fixture={"hosts": {"DC0_C0_H0": {"model": "a100-40", "mig_gpus": ["0000:3b:00.0"]}}})
    infos = {i.profileName: i for i in lab.host("DC0_C0_H0").configManager.graphicsManager.RetrieveVgpuProfileInfo()}
    mig, sliced = infos["grid_a100-3-20c"], infos["grid_a100-8c"]
    assert (mig.fbSizeInGib, mig.profileSharing, mig.profileClass, mig.deviceVendorId) == (20, "mig", "compute", 0x20f110de)
    assert (sliced.fbSizeInGib, sliced.profileSharing) == (8, "timeSliced")
    assert [t.migrationBW for t in sliced.stunTimeEstimates] == [10, 25, 100]  # 8.0.2.0 field
    devices = lab.host("DC0_C0_H0").configManager.graphicsManager.RetrieveVgpuDeviceInfo()
    assert [(d.deviceName, d.migCapable, d.maxFbSizeInGib) for d in devices] == [("NVIDIA A100-PCIE-40GB", True, 40)]


# ---- power-on placement --------------------------------------------------------------------------------------------

PLACEMENT = {"defaults": DIRECT, "hosts": {"DC0_C0_H0": {"model": "a100-40", "count": 1}, "DC0_C0_H1": {"model": "l40s"}}}


def test_power_on_fails_on_a_host_without_the_profile_when_drs_does_not_place_the_vm(lab_factory):
    lab = lab_factory(hosts=2, vms=1, fixture=PLACEMENT)
    vm = lab.vm("DC0_C0_H0_VM0")
    lab.add_vgpus(vm, "grid_l40s-8q")
    lab.drs(vm, "manual")
    err = task_error(vm.PowerOnVM_Task())
    assert isinstance(err, vim.fault.InsufficientGraphicsResourcesFault)
    assert "host DC0_C0_H0 does not offer vGPU type grid_l40s-8q" in err.msg
    # the host argument is honoured within the compute resource
    WaitForTask(vm.PowerOnVM_Task(host=lab.host("DC0_C0_H1")))
    assert vm.runtime.host.name == "DC0_C0_H1" and vm.runtime.powerState == "poweredOn"


def test_drs_places_a_vm_it_may_place_on_a_host_with_a_fitting_gpu(lab_factory):
    lab = lab_factory(hosts=2, vms=1, fixture=PLACEMENT)
    vm = lab.vm("DC0_C0_H0_VM0")
    lab.add_vgpus(vm, "grid_l40s-8q")
    WaitForTask(vm.PowerOnVM_Task())  # fullyAutomated by default
    assert vm.runtime.host.name == "DC0_C0_H1"


def test_equal_size_mode_keeps_one_profile_per_gpu_and_mixed_size_mode_does_not(lab_factory):
    lab = lab_factory(hosts=1, vms=2, api_version="8.0.3.0",
                      fixture={"defaults": DIRECT, "hosts": {"DC0_C0_H0": {"model": "a100-40", "count": 1}}})
    a, b = lab.vm("DC0_C0_H0_VM0"), lab.vm("DC0_C0_H0_VM1")
    lab.add_vgpus(a, "grid_a100-8c")
    lab.add_vgpus(b, "grid_a100-4c")
    WaitForTask(a.PowerOnVM_Task())
    err = task_error(b.PowerOnVM_Task())
    assert "no GPU of host DC0_C0_H0 can take vGPU grid_a100-4c" in err.msg
    gm = lab.host("DC0_C0_H0").configManager.graphicsManager
    gm.UpdateGraphicsConfig(vim.host.GraphicsConfig(
        hostDefaultGraphicsType="sharedDirect", sharedPassthruAssignmentPolicy="performance",
        deviceType=[vim.host.GraphicsConfig.DeviceType(deviceId="0000:3b:00.0", graphicsType="sharedDirect", vgpuMode="mixedSize")]))
    WaitForTask(b.PowerOnVM_Task())
    # the frame buffer is the limit: 8 + 4 + 40 > 40 GiB
    c = lab.vm("DC0_C0_H0_VM0")
    WaitForTask(c.PowerOffVM_Task())
    lab.add_vgpus(c, "grid_a100-40c")
    assert "can take vGPU" in task_error(c.PowerOnVM_Task()).msg


def test_a_gpu_in_vsga_mode_takes_no_vgpu(lab_factory):
    lab = lab_factory(hosts=1, vms=1, fixture={"hosts": {"DC0_C0_H0": {"model": "a100-40"}}})  # shared by default
    vm = lab.vm("DC0_C0_H0_VM0")
    lab.add_vgpus(vm, "grid_a100-8c")
    assert "DRS found no compatible host" in task_error(vm.PowerOnVM_Task()).msg


# ---- hardware version ----------------------------------------------------------------------------------------------

def test_vms_get_the_hosts_hardware_version_and_several_vgpus_need_15(lab_factory):
    lab = lab_factory(hosts=1, vms=2, fixture={"defaults": DIRECT, "hosts": {"DC0_C0_H0": {}},
                                               "vm_hardware_version": {"DC0_C0_H0_VM1": "vmx-13"},
                                               "vm_service_vms": ["DC0_C0_H0_VM0"]})
    new, old = lab.vm("DC0_C0_H0_VM0"), lab.vm("DC0_C0_H0_VM1")
    assert (new.config.version, old.config.version) == ("vmx-21", "vmx-13")
    assert (new.config.managedBy.extensionKey, new.config.managedBy.type) == ("com.vmware.vcenter.wcp", "VirtualMachine")
    WaitForTask(old.PowerOffVM_Task())
    err = task_error(old.ReconfigVM_Task(vim.vm.ConfigSpec(deviceChange=[vim.vm.device.VirtualDeviceSpec(
        operation="add", device=vim.vm.device.VirtualPCIPassthrough(
            key=-100 - i, backing=vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo(vgpu="grid_a100-40c"))) for i in range(2)])))
    assert isinstance(err, vim.fault.DeviceUnsupportedForVmVersion) and err.expectedVersion == "vmx-15"
    WaitForTask(old.UpgradeVM_Task())
    assert old.config.version == "vmx-21"
    assert isinstance(task_error(old.UpgradeVM_Task()), vim.fault.AlreadyUpgraded)
    lab.add_vgpus(old, "grid_a100-40c", "grid_a100-40c")


# ---- maintenance mode ----------------------------------------------------------------------------------------------

MM = {"defaults": DIRECT, "hosts": {"DC0_C0_*": {"model": "a100-40"}}}


def test_maintenance_mode_waits_on_a_vgpu_vm_until_both_settings_allow_its_migration(lab_factory):
    lab = lab_factory(hosts=2, vms=1, fixture=MM)
    vm, host = lab.vm("DC0_C0_H0_VM0"), lab.host("DC0_C0_H0")
    lab.add_vgpus(vm, "grid_a100-8c")
    WaitForTask(vm.PowerOnVM_Task(host=host))
    err = task_error(host.EnterMaintenanceMode_Task(timeout=10))
    assert isinstance(err, vim.fault.Timedout)
    assert 'DC0_C0_H0_VM0: vGPU VM and cluster DC0_C0 has VgpuMMAutomationTimeoutSecs="", not -1' in err.msg
    lab.drs(options={"VgpuMMAutomationTimeoutSecs": "-1"})
    assert "vgpu.hotmigrate.enabled" in task_error(host.EnterMaintenanceMode_Task(timeout=10)).msg
    lab.si.content.setting.UpdateOptions(changedValue=[vim.option.OptionValue(key="vgpu.hotmigrate.enabled", value="true")])
    WaitForTask(host.EnterMaintenanceMode_Task(timeout=10))
    assert host.runtime.inMaintenanceMode and vm.runtime.host.name == "DC0_C0_H1"
    # the option is kept (vcsim keeps only enabled/defaultVmBehavior) and merged by key
    lab.drs(options={"Other": "1"})
    assert {o.key: o.value for o in lab.cluster().configurationEx.drsConfig.option} == {
        "VgpuMMAutomationTimeoutSecs": "-1", "Other": "1"}


def test_maintenance_mode_waits_on_vms_drs_only_recommends_for_and_on_a_standalone_host(lab_factory):
    lab = lab_factory(hosts=2, vms=1, standalone_hosts=1, fixture=MM)
    vm = lab.vm("DC0_C0_H0_VM0")
    lab.drs(vm, "partiallyAutomated")
    err = task_error(lab.host("DC0_C0_H0").EnterMaintenanceMode_Task(timeout=10))
    assert "DC0_C0_H0_VM0: DRS automation level partiallyAutomated only recommends migrations" in err.msg
    assert "standalone host, no DRS" in task_error(lab.host("DC0_H0").EnterMaintenanceMode_Task(timeout=10)).msg
    WaitForTask(lab.host("DC0_C0_H1").EnterMaintenanceMode_Task(timeout=10))  # its plain VM moves to H0
    assert lab.vm("DC0_C0_H1_VM0").runtime.host.name == "DC0_C0_H0"
    assert lab.cluster().configurationEx.drsConfig.defaultVmBehavior == "fullyAutomated"


# ---- Xorg ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("flag, fails", [("fail", True), ("start", False)])
def test_xorg_does_not_start_without_a_vsga_device(lab_factory, flag, fails):
    lab = lab_factory(hosts=2, vms=0, extra_args=["-xorg-without-vsga", flag],
                      fixture={"hosts": {"DC0_C0_H0": DIRECT, "DC0_C0_H1": {}}})
    lab.host("DC0_C0_H1").configManager.serviceSystem.RestartService(id="xorg")  # vSGA device: starts
    services = lab.host("DC0_C0_H0").configManager.serviceSystem
    if fails:
        with pytest.raises(vim.fault.HostConfigFault, match="no graphics device in shared"):
            services.RestartService(id="xorg")
    else:
        services.RestartService(id="xorg")
    assert {s.key: s.running for s in services.serviceInfo.service}["xorg"] is not fails


# ---- transport faults ----------------------------------------------------------------------------------------------

def test_armed_faults_answer_html_or_cut_the_reply(lab_factory):
    lab = lab_factory(hosts=1, vms=1)
    vm = lab.vm("DC0_C0_H0_VM0")
    lab.sim.arm_fault("PowerOffVM_Task", "http500")
    with pytest.raises(xml.parsers.expat.ExpatError):
        vm.PowerOffVM_Task()
    si = lab.sim.connect()
    vm = {v.name: v for v in si.content.rootFolder.childEntity[0].vmFolder.childEntity}["DC0_C0_H0_VM0"]
    assert vm.runtime.powerState == "poweredOn"  # not run
    lab.sim.arm_fault("PowerOffVM_Task", "truncate")
    with pytest.raises(xml.parsers.expat.ExpatError):
        vm.PowerOffVM_Task()
    si = lab.sim.connect()
    vm = {v.name: v for v in si.content.rootFolder.childEntity[0].vmFolder.childEntity}["DC0_C0_H0_VM0"]
    assert vm.runtime.powerState == "poweredOff"  # run, the answer lost
    assert [f["fired"] for f in lab.sim.faults()] == [1, 1]
    Disconnect(si)
    req = urllib.request.Request("https://%s:%s/gpuops/faults" % (lab.sim.host, lab.sim.port))
    with pytest.raises(urllib.error.HTTPError, match="401"):
        urllib.request.urlopen(req, context=ssl.create_default_context(cafile=lab.sim.ca))


# ---- VM classes and namespaces (REST) ------------------------------------------------------------------------------

NS = {"defaults": DIRECT, "hosts": {"DC0_C0_H0": {"model": "a100-40"}, "DC0_C1_H0": {"model": "l40s"}},
      "clusters": {"DC0_C0": {"supervisor": True}}, "namespaces": [{"name": "team-a", "cluster": "DC0_C0"}]}


class Rest:
    def __init__(self, sim):
        self.base, self.ctx = "https://%s:%s" % (sim.host, sim.port), ssl.create_default_context(cafile=sim.ca)
        auth = base64.b64encode(("%s:%s" % (sim.username, sim.password)).encode()).decode()
        status, self.token = self.call("POST", "/api/session", headers={"Authorization": "Basic " + auth})
        assert status == 201

    def call(self, method, path, body=None, headers=None):
        hdrs = dict(headers if headers is not None else {"vmware-api-session-id": self.token}, **{"Content-Type": "application/json"})
        req = urllib.request.Request(self.base + path, method=method, headers=hdrs,
                                     data=json.dumps(body).encode() if body is not None else None)
        try:
            with urllib.request.urlopen(req, context=self.ctx) as resp:
                data = resp.read()
                return resp.status, json.loads(data) if data else None
        except urllib.error.HTTPError as e:
            data = e.read()
            return e.code, json.loads(data) if data else None


CLASSES = "/api/vcenter/namespace-management/virtual-machine-classes"
NAMESPACES = "/api/vcenter/namespaces/instances"


def vgpu_class(name, *profiles):
    return {"id": name, "cpu_count": 4, "memory_MB": 8192, "devices": {"vgpu_devices": [{"profile_name": p} for p in profiles]}}


def test_vm_classes_are_validated_against_the_supervisors_hosts_and_linked_to_namespaces(lab_factory):
    lab = lab_factory(clusters=2, hosts=1, vms=0, fixture=NS)
    rest = Rest(lab.sim)
    assert rest.call("GET", CLASSES, headers={}) == (401, None)
    assert rest.call("POST", CLASSES, vgpu_class("gpu-a", "grid_a100-8c")) == (204, None)
    status, err = rest.call("POST", CLASSES, vgpu_class("gpu-a", "grid_a100-8c"))
    assert (status, err["error_type"]) == (400, "ALREADY_EXISTS")
    # the L40S host is outside the Supervisor cluster
    status, err = rest.call("POST", CLASSES, vgpu_class("gpu-b", "grid_l40s-8q"))
    assert (status, err["error_type"]) == (400, "INVALID_ARGUMENT")
    assert "grid_l40s-8q not offered by any host of the Supervisor" in err["messages"][0]["default_message"]
    config_spec = {"_typeName": "VirtualMachineConfigSpec", "deviceChange": [
        {"_typeName": "VirtualDeviceConfigSpec", "operation": "add", "device": {
            "_typeName": "VirtualPCIPassthrough", "key": -100,
            "backing": {"_typeName": "VirtualPCIPassthroughVmiopBackingInfo", "vgpu": "grid_bogus-1q"}}}]}
    assert rest.call("POST", CLASSES, dict(id="gpu-c", cpu_count=1, memory_MB=1024, config_spec=config_spec))[0] == 400
    assert rest.call("POST", CLASSES, dict(vgpu_class("Bad_Name")))[0] == 400
    # PATCH keeps what it does not set
    assert rest.call("PATCH", CLASSES + "/gpu-a", {"cpu_count": 8}) == (204, None)
    status, info = rest.call("GET", CLASSES + "/gpu-a")
    assert (info["cpu_count"], info["memory_MB"], info["devices"]["vgpu_devices"]) == (8, 8192, [{"profile_name": "grid_a100-8c"}])
    assert (info["config_status"], info["namespaces"]) == ("READY", [])
    # the namespace side holds the link; the class reports it, and a bound class is not deleted
    assert rest.call("PATCH", NAMESPACES + "/team-a", {"vm_service_spec": {"vm_classes": ["gpu-nope"]}})[0] == 400
    assert rest.call("PATCH", NAMESPACES + "/team-a", {"vm_service_spec": {"vm_classes": ["gpu-a"]}}) == (204, None)
    assert rest.call("GET", CLASSES + "/gpu-a")[1]["namespaces"] == ["team-a"]
    status, err = rest.call("DELETE", CLASSES + "/gpu-a")
    assert (status, err["error_type"]) == (400, "RESOURCE_IN_USE")
    assert rest.call("PATCH", NAMESPACES + "/nope", {"vm_service_spec": {"vm_classes": []}})[0] == 404
    assert rest.call("PATCH", NAMESPACES + "/team-a", {"vm_service_spec": {"vm_classes": []}}) == (204, None)
    assert rest.call("DELETE", CLASSES + "/gpu-a") == (204, None)
    assert rest.call("GET", CLASSES + "/gpu-a")[0] == 404
    # namespaces live on Supervisor clusters only, once
    assert rest.call("POST", NAMESPACES, {"cluster": "domain-c1", "namespace": "x"})[0] == 400
    status, err = rest.call("POST", NAMESPACES, {"cluster": lab.objects(vim.ClusterComputeResource)["DC0_C0"]._moId,
                                                 "namespace": "team-a"})
    assert (status, err["error_type"]) == (400, "ALREADY_EXISTS")
