"""lab/vcsim: the GPU-flavoured vcsim, driven by pyvmomi over verified TLS."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAB = os.path.join(ROOT, "lab", "vcsim")
sys.path.insert(0, LAB)

import vcsim_lab  # noqa: E402  (lab helper, found through the path above)

pyVmomi = pytest.importorskip("pyVmomi")
from pyVim.connect import Disconnect, SmartConnect  # noqa: E402
from pyVim.task import WaitForTask  # noqa: E402
from pyVmomi import vim, vmodl  # noqa: E402

if not vcsim_lab.available():
    pytest.skip("vcsim-gpu cannot be built here (no Go >= 1.23, see lab/vcsim/README.md)", allow_module_level=True)

pytestmark = pytest.mark.slow  # starts the simulator

OLD_DRIVER = "535.154.02-1OEM.800.1.0.20613240"
# With MIG mode off (its default) an A100 offers the time-sliced vGPU types; MIG-backed ones need MIG mode on
# (fixture mig_gpus, tests/lab/test_vcsim_rules.py).
A100_PROFILES = ["grid_a100-4c", "grid_a100-5c", "grid_a100-8c", "grid_a100-10c", "grid_a100-20c", "grid_a100-40c"]


@pytest.fixture(scope="module")
def sim():
    # DC0_C0_H0/H1 are GPU hosts (H1 with an older driver: drift), DC0_C1_H0 has a GPU but no
    # driver VIB, DC0_C1_H1 is a plain host.
    with vcsim_lab.vcsim(clusters=2, hosts=2, vms=1, gpu_hosts="DC0_C0_*",
                         host_drivers={"DC0_C0_H1": OLD_DRIVER, "DC0_C1_H0": ""}) as s:
        yield s


@pytest.fixture()
def si(sim):
    conn = sim.connect()
    yield conn
    Disconnect(conn)


def objects(si, kind):
    view = si.content.viewManager.CreateContainerView(si.content.rootFolder, [kind], True)
    try:
        return {o.name: o for o in view.view}
    finally:
        view.Destroy()


def vgpus(vm):
    return [d for d in vm.config.hardware.device
            if isinstance(d, vim.vm.device.VirtualPCIPassthrough)
            and isinstance(d.backing, vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo)]


def test_tls_is_verified_against_the_run_ca(sim):
    with open(sim.ca, encoding="ascii") as fh:
        assert "BEGIN CERTIFICATE" in fh.read()
    # The system trust store does not know the lab CA, so a verifying client without it must fail.
    with pytest.raises(ssl.SSLCertVerificationError):
        SmartConnect(host=sim.host, port=sim.port, user=sim.username, pwd=sim.password,
                     sslContext=ssl.create_default_context())
    conn = sim.connect()
    try:
        assert conn.content.about.apiType == "VirtualCenter"
        assert conn.content.about.apiVersion == "8.0.2.0"
    finally:
        Disconnect(conn)
    assert sim.host == "127.0.0.1"


def test_only_the_configured_credentials_log_in(sim):
    with pytest.raises(vim.fault.InvalidLogin):
        sim.connect(password="not-" + sim.password)
    with pytest.raises(vim.fault.InvalidLogin):
        sim.connect(username="administrator@vsphere.local")


def test_run_dir_files_describe_the_inventory(sim):
    for name in ("url", "ca.pem", "username", "password", "inventory.json", "env"):
        assert os.path.getsize(os.path.join(sim.run_dir, name)) > 0
    with open(os.path.join(sim.run_dir, "url"), encoding="utf-8") as fh:
        assert fh.read().strip() == f"https://127.0.0.1:{sim.port}/sdk"
    inv = sim.inventory
    assert inv["gpu_hosts"] == ["DC0_C0_H0", "DC0_C0_H1", "DC0_C1_H0"]
    assert [h["name"] for h in inv["hosts"]] == ["DC0_C0_H0", "DC0_C0_H1", "DC0_C1_H0", "DC0_C1_H1"]
    assert {v["name"]: v["host"] for v in inv["vms"]} == {f"{h}_VM0": h for h in ("DC0_C0_H0", "DC0_C0_H1", "DC0_C1_H0", "DC0_C1_H1")}
    assert sim.host_info("DC0_C0_H1")["driver_version"] == OLD_DRIVER
    assert sim.host_info("DC0_C1_H0")["driver_version"] is None


def test_gpu_host_config_properties(si):
    hosts = objects(si, vim.HostSystem)
    h = hosts["DC0_C0_H0"]
    cfg = h.config
    assert cfg.product.version == "8.0.2"
    assert [(g.deviceName, g.vendorName, g.pciId, g.graphicsType, g.memorySizeInKB) for g in cfg.graphicsInfo] == [
        ("NVIDIA A100-PCIE-40GB", "NVIDIA Corporation", "0000:3b:00.0", "shared", 40 * 1024 * 1024),
        ("NVIDIA A100-PCIE-40GB", "NVIDIA Corporation", "0000:5e:00.0", "shared", 40 * 1024 * 1024),
    ]
    assert list(cfg.sharedPassthruGpuTypes) == A100_PROFILES
    # community.vmware.vmware_guest_vgpu validates profiles against sharedGpuCapabilities
    assert [c.vgpu for c in cfg.sharedGpuCapabilities] == A100_PROFILES
    assert all(c.migrateSupported for c in cfg.sharedGpuCapabilities)
    assert (cfg.graphicsConfig.hostDefaultGraphicsType, cfg.graphicsConfig.sharedPassthruAssignmentPolicy) == ("shared", "performance")
    nvidia = [d for d in h.hardware.pciDevice if d.vendorId == 0x10de]
    assert [(d.id, d.deviceId, d.deviceName) for d in nvidia] == [
        ("0000:3b:00.0", 0x20f1, "NVIDIA A100-PCIE-40GB"), ("0000:5e:00.0", 0x20f1, "NVIDIA A100-PCIE-40GB")]
    assert {p.id for p in cfg.pciPassthruInfo if p.passthruCapable} >= {"0000:3b:00.0", "0000:5e:00.0"}

    plain = hosts["DC0_C1_H1"].config
    assert not plain.graphicsInfo and not plain.sharedPassthruGpuTypes and not plain.sharedGpuCapabilities
    assert not [d for d in hosts["DC0_C1_H1"].hardware.pciDevice if d.vendorId == 0x10de]


def test_graphics_manager_is_per_host_and_mirrors_config(si):
    hosts = objects(si, vim.HostSystem)
    managers = {name: h.configManager.graphicsManager for name, h in hosts.items()}
    assert len({m._moId for m in managers.values()}) == len(hosts)
    gm = managers["DC0_C0_H0"]
    assert [g.pciId for g in gm.graphicsInfo] == ["0000:3b:00.0", "0000:5e:00.0"]
    assert list(gm.sharedPassthruGpuTypes) == A100_PROFILES
    assert [c.vgpu for c in gm.sharedGpuCapabilities] == A100_PROFILES
    assert gm.graphicsConfig.hostDefaultGraphicsType == "shared"
    assert gm.IsSharedGraphicsActive() is True
    assert managers["DC0_C1_H1"].IsSharedGraphicsActive() is False
    gm.RefreshGraphicsManager()


def test_update_graphics_config_persists_and_applies_per_device_types(sim, si):
    h = objects(si, vim.HostSystem)["DC0_C0_H1"]
    gm = h.configManager.graphicsManager
    gm.UpdateGraphicsConfig(vim.host.GraphicsConfig(
        hostDefaultGraphicsType="sharedDirect", sharedPassthruAssignmentPolicy="consolidation",
        deviceType=[vim.host.GraphicsConfig.DeviceType(deviceId="0000:5e:00.0", graphicsType="shared")]))

    # A second session sees the change, on the host and on the manager.
    other = sim.connect()
    try:
        h2 = objects(other, vim.HostSystem)["DC0_C0_H1"]
        for cfg in (h2.config.graphicsConfig, h2.configManager.graphicsManager.graphicsConfig):
            assert cfg.hostDefaultGraphicsType == "sharedDirect"
            assert cfg.sharedPassthruAssignmentPolicy == "consolidation"
            assert [(d.deviceId, d.graphicsType) for d in cfg.deviceType] == [("0000:5e:00.0", "shared")]
        assert [(g.pciId, g.graphicsType) for g in h2.config.graphicsInfo] == [
            ("0000:3b:00.0", "sharedDirect"), ("0000:5e:00.0", "shared")]
        assert h2.configManager.graphicsManager.IsSharedGraphicsActive() is True
    finally:
        Disconnect(other)

    gm.UpdateGraphicsConfig(vim.host.GraphicsConfig(hostDefaultGraphicsType="sharedDirect",
                                                    sharedPassthruAssignmentPolicy="performance"))
    assert [g.graphicsType for g in h.config.graphicsInfo] == ["sharedDirect", "sharedDirect"]
    assert not h.config.graphicsConfig.deviceType
    assert gm.IsSharedGraphicsActive() is False


@pytest.mark.parametrize("config, prop", [
    (dict(hostDefaultGraphicsType="direct", sharedPassthruAssignmentPolicy="performance"), "config.hostDefaultGraphicsType"),
    (dict(hostDefaultGraphicsType="shared", sharedPassthruAssignmentPolicy="spread"), "config.sharedPassthruAssignmentPolicy"),
    (dict(hostDefaultGraphicsType="shared", sharedPassthruAssignmentPolicy="performance",
          deviceType=[("0000:99:00.0", "shared")]), "config.deviceType[0].deviceId"),
    (dict(hostDefaultGraphicsType="shared", sharedPassthruAssignmentPolicy="performance",
          deviceType=[("0000:3b:00.0", "shared"), ("0000:3b:00.0", "sharedDirect")]), "config.deviceType[1].deviceId"),
    (dict(hostDefaultGraphicsType="shared", sharedPassthruAssignmentPolicy="performance",
          deviceType=[("0000:3b:00.0", "basic")]), "config.deviceType[0].graphicsType"),
])
def test_update_graphics_config_rejects_bad_input_and_changes_nothing(si, config, prop):
    h = objects(si, vim.HostSystem)["DC0_C0_H0"]
    before = (h.config.graphicsConfig.hostDefaultGraphicsType, h.config.graphicsConfig.sharedPassthruAssignmentPolicy,
              [(g.pciId, g.graphicsType) for g in h.config.graphicsInfo])
    config = dict(config)
    config["deviceType"] = [vim.host.GraphicsConfig.DeviceType(deviceId=i, graphicsType=t) for i, t in config.get("deviceType", [])]
    with pytest.raises(vmodl.fault.InvalidArgument) as err:
        h.configManager.graphicsManager.UpdateGraphicsConfig(vim.host.GraphicsConfig(**config))
    assert err.value.invalidProperty == prop
    assert "DC0_C0_H0" in err.value.msg
    after = (h.config.graphicsConfig.hostDefaultGraphicsType, h.config.graphicsConfig.sharedPassthruAssignmentPolicy,
             [(g.pciId, g.graphicsType) for g in h.config.graphicsInfo])
    assert after == before


def test_fetch_software_packages_lists_driver_vib_with_per_host_drift(si):
    hosts = objects(si, vim.HostSystem)

    def nvidia(name):
        pkgs = hosts[name].configManager.imageConfigManager.FetchSoftwarePackages()
        return [(p.name, p.version, p.vendor, p.acceptanceLevel) for p in pkgs if p.vendor == "NVD"]

    assert nvidia("DC0_C0_H0") == [
        ("NVD-AIE_ESXi_8.0.0_Driver", vcsim_lab.DEFAULT_DRIVER, "NVD", "partner"),
        ("nvdgpumgmtdaemon", vcsim_lab.DEFAULT_DRIVER, "NVD", "partner")]
    assert nvidia("DC0_C0_H1")[0] == ("NVD-AIE_ESXi_8.0.0_Driver", OLD_DRIVER, "NVD", "partner")
    assert nvidia("DC0_C1_H0") == []  # GPU present, driver not installed
    assert nvidia("DC0_C1_H1") == []
    base = hosts["DC0_C1_H1"].configManager.imageConfigManager.FetchSoftwarePackages()
    assert [(p.name, p.vendor) for p in base][:1] == [("esx-base", "VMware")]
    assert base[0].version == "8.0.2-0.0.22380479"
    assert base[0].creationDate is not None and base[0].maintenanceModeRequired is True


def test_driver_version_also_in_software_component_sensors(si):
    hosts = objects(si, vim.HostSystem)

    def sensors(name):
        info = hosts[name].runtime.healthSystemRuntime.systemHealthInfo
        return [s.name for s in info.numericSensorInfo if s.sensorType == "Software Components" and s.name.startswith("NVIDIA ")]

    assert sensors("DC0_C0_H0") == [f"NVIDIA NVD-AIE_ESXi_8.0.0_Driver {vcsim_lab.DEFAULT_DRIVER} 2024-06-04 00:00:00.000"]
    assert sensors("DC0_C0_H1")[0].split()[2] == OLD_DRIVER
    assert sensors("DC0_C1_H1") == []


def test_image_config_acceptance_level(si):
    im = objects(si, vim.HostSystem)["DC0_C1_H1"].configManager.imageConfigManager
    assert im.QueryHostAcceptanceLevel() == "partner"
    im.UpdateAcceptanceLevel("community")
    assert im.QueryHostAcceptanceLevel() == "community"
    with pytest.raises(vmodl.fault.InvalidArgument):
        im.UpdateAcceptanceLevel("anything")
    assert im.QueryHostAcceptanceLevel() == "community"
    assert im.QueryHostImageProfile().name == "ESXi-8.0.2-22380479-standard"


def test_vm_vgpu_add_edit_remove_persist(sim, si):
    vm = objects(si, vim.VirtualMachine)["DC0_C0_H0_VM0"]
    assert vm.runtime.host.name == "DC0_C0_H0"
    dev = vim.vm.device.VirtualPCIPassthrough(
        key=-100, backing=vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo(vgpu="grid_a100-4c"))
    WaitForTask(vm.ReconfigVM_Task(spec=vim.vm.ConfigSpec(
        deviceChange=[vim.vm.device.VirtualDeviceSpec(operation="add", device=dev)], memoryReservationLockedToMax=True)))

    other = sim.connect()
    try:
        vm2 = objects(other, vim.VirtualMachine)["DC0_C0_H0_VM0"]
        (d,) = vgpus(vm2)
        assert d.backing.vgpu == "grid_a100-4c"
        assert (d.deviceInfo.label, d.deviceInfo.summary) == ("PCI device 0", "NVIDIA GRID vGPU grid_a100-4c")
        assert d.controllerKey == 100 and d.unitNumber == 18
        assert vm2.config.memoryReservationLockedToMax is True

        d.backing.vgpu = "grid_a100-8c"
        WaitForTask(vm2.ReconfigVM_Task(spec=vim.vm.ConfigSpec(
            deviceChange=[vim.vm.device.VirtualDeviceSpec(operation="edit", device=d)])))
    finally:
        Disconnect(other)

    (d,) = vgpus(vm)
    assert (d.backing.vgpu, d.deviceInfo.summary) == ("grid_a100-8c", "NVIDIA GRID vGPU grid_a100-8c")
    WaitForTask(vm.ReconfigVM_Task(spec=vim.vm.ConfigSpec(
        deviceChange=[vim.vm.device.VirtualDeviceSpec(operation="remove", device=d)])))
    assert vgpus(vm) == []
    pci = [c for c in vm.config.hardware.device if isinstance(c, vim.vm.device.VirtualPCIController)][0]
    assert d.key not in list(pci.device)


def test_two_vgpus_get_distinct_labels_and_units(si):
    vm = objects(si, vim.VirtualMachine)["DC0_C0_H1_VM0"]
    for i, profile in enumerate(("grid_a100-20c", "grid_a100-20c")):
        dev = vim.vm.device.VirtualPCIPassthrough(
            key=-200 - i, backing=vim.vm.device.VirtualPCIPassthrough.VmiopBackingInfo(vgpu=profile))
        WaitForTask(vm.ReconfigVM_Task(spec=vim.vm.ConfigSpec(
            deviceChange=[vim.vm.device.VirtualDeviceSpec(operation="add", device=dev)])))
    got = sorted((d.deviceInfo.label, d.unitNumber) for d in vgpus(vm))
    assert got == [("PCI device 0", 18), ("PCI device 1", 19)]
    WaitForTask(vm.ReconfigVM_Task(spec=vim.vm.ConfigSpec(
        deviceChange=[vim.vm.device.VirtualDeviceSpec(operation="remove", device=d) for d in vgpus(vm)])))
    assert vgpus(vm) == []


def test_query_config_target_lists_the_hosts_vgpu_types(si):
    hosts = objects(si, vim.HostSystem)
    vm = objects(si, vim.VirtualMachine)["DC0_C1_H1_VM0"]  # any VM of the cluster shares its browser
    target = vm.environmentBrowser.QueryConfigTarget(host=hosts["DC0_C0_H0"])
    assert [t.vgpu for t in target.sharedGpuPassthroughTypes] == A100_PROFILES
    assert target.datastore  # vcsim's own part of the answer is still there
    assert not vm.environmentBrowser.QueryConfigTarget(host=hosts["DC0_C1_H1"]).sharedGpuPassthroughTypes


def test_json_fixture_models_profiles_and_graphics():
    fixture = {
        "defaults": {"model": "l40s", "count": 1},
        "hosts": {
            "DC0_C0_*": {},
            "DC0_C0_H1": {"gpus": [{"model": "h100-80"}, {"model": "NVIDIA H100 PCIe", "pci_id": "0000:af:00.0"}],
                          "profiles": ["grid_h100-20c", "grid_h100-80c"], "graphics_type": "sharedDirect",
                          "assignment_policy": "consolidation", "device_types": {"0000:af:00.0": "shared"},
                          "driver": OLD_DRIVER,
                          "vibs": [{"name": "nvd-gpu-extra", "version": "2.0", "vendor": "NVD"}]},
        },
    }
    with vcsim_lab.vcsim(clusters=1, hosts=2, vms=0, fixture=fixture) as s:
        conn = s.connect()
        try:
            hosts = objects(conn, vim.HostSystem)
            h0, h1 = hosts["DC0_C0_H0"].config, hosts["DC0_C0_H1"].config
            assert [g.deviceName for g in h0.graphicsInfo] == ["NVIDIA L40S"]
            assert "grid_l40s-48q" in h0.sharedPassthruGpuTypes and "grid_l40s-4c" in h0.sharedPassthruGpuTypes
            assert [(g.deviceName, g.pciId, g.graphicsType) for g in h1.graphicsInfo] == [
                ("NVIDIA H100 PCIe", "0000:3b:00.0", "sharedDirect"), ("NVIDIA H100 PCIe", "0000:af:00.0", "shared")]
            assert list(h1.sharedPassthruGpuTypes) == ["grid_h100-20c", "grid_h100-80c"]
            assert h1.graphicsConfig.sharedPassthruAssignmentPolicy == "consolidation"
            pkgs = {p.name: p.version for p in hosts["DC0_C0_H1"].configManager.imageConfigManager.FetchSoftwarePackages()}
            assert pkgs["NVD-AIE_ESXi_8.0.0_Driver"] == OLD_DRIVER and pkgs["nvd-gpu-extra"] == "2.0"
        finally:
            Disconnect(conn)


@pytest.mark.parametrize("kwargs, message", [
    (dict(gpu_hosts=["DC0_C9_H0"]), 'GPU host "DC0_C9_H0" matches no host'),
    (dict(gpu_hosts="all", gpu_model="v100"), 'unknown GPU model "v100"'),
    (dict(fixture={"hosts": {"DC0_C0_H0": {"graphics_type": "direct"}}}), 'host DC0_C0_H0: graphics_type "direct"'),
    (dict(fixture={"hosts": {"DC0_C0_H0": {"device_types": {"0000:01:00.0": "shared"}}}}), "device_types names 0000:01:00.0"),
    (dict(fixture={"hosts": {"DC0_C0_H0": {"drivr": "1"}}}), 'unknown field "drivr"'),
    (dict(extra_args=["-l", "0.0.0.0:0"]), "only 127.0.0.1 or localhost"),
])
def test_bad_fixture_fails_naming_host_and_reason(kwargs, message):
    with pytest.raises(RuntimeError) as err:
        with vcsim_lab.vcsim(clusters=1, hosts=1, vms=0, **kwargs):
            pass
    assert message in str(err.value)


def test_run_sh_start_and_stop(tmp_path):
    run_dir = tmp_path / "run"
    out = subprocess.run([os.path.join(LAB, "run.sh"), "--run-dir", str(run_dir), "--clusters", "1", "--hosts", "1",
                          "--vms", "1", "--gpu-hosts", "DC0_C0_H0", "--gpu-model", "a100-80"],
                         capture_output=True, text=True, timeout=120, check=True)
    pid = int((run_dir / "pid").read_text())
    try:
        url = (run_dir / "url").read_text().strip()
        assert out.stdout.strip() == url and url.startswith("https://127.0.0.1:")
        inv = json.loads((run_dir / "inventory.json").read_text())
        assert inv["hosts"][0]["gpus"][0]["device_name"] == "NVIDIA A100 80GB PCIe"
        host, port = url.split("/")[2].split(":")
        conn = SmartConnect(host=host, port=int(port), user=(run_dir / "username").read_text().strip(),
                            pwd=(run_dir / "password").read_text().strip(),
                            sslContext=ssl.create_default_context(cafile=str(run_dir / "ca.pem")))
        assert "grid_a100d-80c" in objects(conn, vim.HostSystem)["DC0_C0_H0"].config.sharedPassthruGpuTypes
        Disconnect(conn)
    finally:
        subprocess.run([os.path.join(LAB, "run.sh"), "--run-dir", str(run_dir), "--stop"], check=True, timeout=30)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not (run_dir / "pid").exists()


# ---- issue 14 point 12: the faults and fields of vSphere 8.0 U3 and read-only accounts ------------------------------

U3_FIXTURE = {
    "hosts": {"DC0_C0_H0": {"graphics_type": "sharedDirect", "vgpu_modes": {"0000:3b:00.0": "mixedSize"}},
              "DC0_C0_H1": {"esxi_version": "8.0.2"}},
    "vm_firmware": {"DC0_C0_H1_VM0": "bios"},
}


@pytest.fixture(scope="module")
def sim_u3():
    with vcsim_lab.vcsim(clusters=1, hosts=2, vms=1, fixture=U3_FIXTURE, api_version="8.0.3.0",
                         readonly=("reader", "readpw")) as s:
        yield s


def test_vgpu_mode_is_served_from_api_8_0_3(sim_u3):
    conn = sim_u3.connect()
    try:
        assert conn._stub.version == "vim.version.v8_0_3_0"  # pylint: disable=protected-access
        hosts = objects(conn, vim.HostSystem)
        h0 = hosts["DC0_C0_H0"].config
        assert h0.product.version == "8.0.3"
        assert [(d.deviceId, d.graphicsType, d.vgpuMode) for d in h0.graphicsConfig.deviceType] == [
            ("0000:3b:00.0", "sharedDirect", "mixedSize")]
        # HostGraphicsInfoVgpuMode: sameSize unless set for vGPU devices
        assert [(g.pciId, g.vgpuMode) for g in h0.graphicsInfo] == [("0000:3b:00.0", "mixedSize"), ("0000:5e:00.0", "sameSize")]
        # A host that stays on 8.0.2 in the same vCenter has no vGPU modes.
        h1 = hosts["DC0_C0_H1"].config
        assert h1.product.version == "8.0.2" and h1.product.apiVersion == "8.0.2.0"
        assert [g.vgpuMode for g in h1.graphicsInfo] == [None, None]
        assert sim_u3.host_info("DC0_C0_H0")["vgpu_modes"] == {"0000:3b:00.0": "mixedSize"}
    finally:
        Disconnect(conn)


def test_update_graphics_config_vgpu_mode_needs_an_8_0_3_host(sim_u3):
    conn = sim_u3.connect()
    try:
        h1 = objects(conn, vim.HostSystem)["DC0_C0_H1"]
        with pytest.raises(vmodl.fault.InvalidArgument) as err:
            h1.configManager.graphicsManager.UpdateGraphicsConfig(vim.host.GraphicsConfig(
                hostDefaultGraphicsType="sharedDirect", sharedPassthruAssignmentPolicy="performance",
                deviceType=[vim.host.GraphicsConfig.DeviceType(deviceId="0000:3b:00.0", graphicsType="sharedDirect",
                                                               vgpuMode="mixedSize")]))
        assert err.value.invalidProperty == "config.deviceType[0].vgpuMode" and "DC0_C0_H1" in err.value.msg
        assert h1.config.graphicsConfig.hostDefaultGraphicsType == "shared"
    finally:
        Disconnect(conn)


@pytest.mark.parametrize("unset", ["keep", "reset"])
def test_update_graphics_config_without_vgpu_mode(unset):
    fixture = {"hosts": {"DC0_C0_H0": {"graphics_type": "sharedDirect",
                                       "vgpu_modes": {"0000:3b:00.0": "mixedSize", "0000:5e:00.0": "mixedSize"}}}}
    with vcsim_lab.vcsim(clusters=1, hosts=1, vms=0, fixture=fixture, api_version="8.0.3.0",
                         extra_args=["-vgpu-mode-unset", unset]) as s:
        conn = s.connect()
        try:
            h = objects(conn, vim.HostSystem)["DC0_C0_H0"]
            cfg = h.config.graphicsConfig
            cfg.sharedPassthruAssignmentPolicy = "consolidation"
            for d in cfg.deviceType:
                d.vgpuMode = None  # a client that drops the field
            cfg.deviceType[1].vgpuMode = "sameSize"
            h.configManager.graphicsManager.UpdateGraphicsConfig(cfg)
            modes = [(d.deviceId, d.vgpuMode) for d in h.config.graphicsConfig.deviceType]
            first = "mixedSize" if unset == "keep" else "sameSize"  # "If this value is unset, the mode remains unchanged"
            assert modes == [("0000:3b:00.0", first), ("0000:5e:00.0", "sameSize")]
            assert [g.vgpuMode for g in h.config.graphicsInfo] == [first, "sameSize"]
            with pytest.raises(vmodl.fault.InvalidArgument) as err:
                cfg.deviceType[0].vgpuMode = "equal"
                h.configManager.graphicsManager.UpdateGraphicsConfig(cfg)
            assert err.value.invalidProperty == "config.deviceType[0].vgpuMode"
        finally:
            Disconnect(conn)


def test_readonly_account_gets_no_permission_from_host_configuration(sim_u3):
    ro = sim_u3.connect(username="reader", password="readpw")
    try:
        h = objects(ro, vim.HostSystem)["DC0_C0_H0"]
        assert h.config.graphicsConfig.hostDefaultGraphicsType == "sharedDirect"  # reading is allowed
        with pytest.raises(vim.fault.NoPermission) as err:
            h.configManager.imageConfigManager.FetchSoftwarePackages()
        assert err.value.privilegeId == "Host.Config.Image" and err.value.object._moId == h._moId
        assert [(p.entity._moId, list(p.privilegeIds)) for p in err.value.missingPrivileges] == [(h._moId, ["Host.Config.Image"])]
        with pytest.raises(vim.fault.NoPermission) as err:
            h.configManager.graphicsManager.UpdateGraphicsConfig(h.config.graphicsConfig)
        assert err.value.privilegeId == "Host.Config.Settings"
    finally:
        Disconnect(ro)
    conn = sim_u3.connect()
    try:
        assert objects(conn, vim.HostSystem)["DC0_C0_H0"].configManager.imageConfigManager.FetchSoftwarePackages()
    finally:
        Disconnect(conn)
    with pytest.raises(vim.fault.InvalidLogin):
        sim_u3.connect(username="reader", password="wrong")


def test_vm_firmware_from_fixture_else_flag(sim_u3):
    conn = sim_u3.connect()
    try:
        vms = objects(conn, vim.VirtualMachine)
        assert {n: v.config.firmware for n, v in vms.items()} == {"DC0_C0_H0_VM0": "efi", "DC0_C0_H1_VM0": "bios"}
    finally:
        Disconnect(conn)
    assert {v["name"]: v["firmware"] for v in sim_u3.inventory["vms"]} == {"DC0_C0_H0_VM0": "efi", "DC0_C0_H1_VM0": "bios"}
    with vcsim_lab.vcsim(clusters=1, hosts=1, vms=1, extra_args=["-vm-firmware", "bios"]) as s:
        assert [v["firmware"] for v in s.inventory["vms"]] == ["bios"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(api_version="8.0.3.0", fixture={"hosts": {"DC0_C0_H0": {"vgpu_modes": {"0000:3b:00.0": "equal"}}}}),
     'vgpu_modes[0000:3b:00.0] "equal" not one of sameSize, mixedSize'),
    (dict(fixture={"hosts": {"DC0_C0_H0": {"vgpu_modes": {"0000:3b:00.0": "mixedSize"}}}}),
     "host DC0_C0_H0: vgpu_modes need ESXi 8.0.3 or later (API 8.0.3.0), the host reports 8.0.2"),
    (dict(fixture={"hosts": {"DC0_C0_H0": {"esxi_version": "8.0U3"}}}), 'esxi_version "8.0U3": want like 8.0.3'),
    (dict(fixture={"hosts": {}, "vm_firmware": {"*": "uefi"}}), 'vm_firmware[*] "uefi" not one of efi, bios'),
    (dict(readonly=("user", "x")), "-readonly-username must differ from -username"),
])
def test_bad_u3_fixture_fails_naming_host_and_reason(kwargs, message):
    with pytest.raises(RuntimeError) as err:
        with vcsim_lab.vcsim(clusters=1, hosts=1, vms=0, **kwargs):
            pass
    assert message in str(err.value)
