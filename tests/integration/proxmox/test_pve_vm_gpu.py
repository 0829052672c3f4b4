"""pve_vm_gpu against pvesim: check mode, diff, pending-aware restarts, idempotence (zero writes), pre-checks."""

from __future__ import annotations

import pytest


def test_mapping_on_running_vm_pending_restart_idempotent(pvesim):
    args = {"vmid": 100, "gpus": [{"mapping": "a100", "pcie": True}]}
    state0 = pvesim.state()

    res, writes = pvesim.run("pve_vm_gpu", args, check=True, diff=True)
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] is True and writes == 0 and pvesim.state() == state0
    assert res["diff"] == {"before": {}, "after": {"hostpci0": "mapping=a100,pcie=1"}}
    assert res["pending"] is True and res["node"] == "pve1"

    res, writes = pvesim.run("pve_vm_gpu", args)
    assert res["changed"] is True and res["pending"] is True and res["restarted"] is False
    assert writes == 1  # one POST .../config
    vm = pvesim.state()["vms"]["100"]
    assert vm["pending"] == {"hostpci0": "mapping=a100,pcie=1"} and "hostpci0" not in vm["config"]
    assert any("apply at its next start" in w for w in res.get("warnings", []))

    # Pending value already matches: nothing to write, still pending.
    res, writes = pvesim.run("pve_vm_gpu", args)
    assert res["changed"] is False and writes == 0 and res["pending"] is True

    res, writes = pvesim.run("pve_vm_gpu", dict(args, restart="if_needed"))
    assert res["changed"] is True and res["restarted"] is True and res["pending"] is False
    assert writes == 2  # shutdown + start, no config write
    vm = pvesim.state()["vms"]["100"]
    assert vm["status"] == "running" and vm["config"]["hostpci0"] == "mapping=a100,pcie=1"
    assert vm["devices"] == ["0000:01:00.0"] and vm["pending"] == {}

    res, writes = pvesim.run("pve_vm_gpu", dict(args, restart="if_needed"))
    assert res["changed"] is False and writes == 0 and res["restarted"] is False


def test_equivalent_existing_entry_is_kept_and_empty_list_removes(pvesim):
    # VM 102 has hostpci0 "0000:02:00,pcie=on,x-vga=1"; the same device spelled differently is no change.
    args = {"vmid": 102, "node": "pve1", "gpus": [{"host": "02:00", "x_vga": True, "pcie": True, "rombar": True}]}
    res, writes = pvesim.run("pve_vm_gpu", args, token=False)
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] is False and writes == 0
    assert res["hostpci"] == {"hostpci0": "0000:02:00,pcie=1,x-vga=1"}

    state0 = pvesim.state()
    res, writes = pvesim.run("pve_vm_gpu", {"vmid": 102, "gpus": []}, check=True, diff=True, token=False)
    assert res["changed"] is True and writes == 0 and pvesim.state() == state0
    assert res["deleted"] == ["hostpci0"] and res["diff"]["after"] == {}


def test_vf_by_index_with_mdev(pvesim):
    args = {"vmid": 101, "gpus": [{"host": "41:00.0", "vf": 1, "mdev": "nvidia-1155"}]}
    res, writes = pvesim.run("pve_vm_gpu", args, token=False)
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] is True and writes == 1
    assert pvesim.state()["vms"]["101"]["config"]["hostpci0"] == "0000:41:00.5,mdev=nvidia-1155"
    res, writes = pvesim.run("pve_vm_gpu", args, token=False)
    assert res["changed"] is False and writes == 0


@pytest.mark.parametrize("vmid,gpu,token,expected", [
    # mapping whose vendor:device does not match the node's hardware
    (100, {"mapping": "wrongid"}, True, ["PCI mapping 'wrongid' does not match the hardware of node pve1", "10de:20b5 != 10de:2330"]),
    # mdev type the device cannot create
    (100, {"mapping": "l40s-vgpu", "mdev": "nvidia-9999"}, True, ["mdev type 'nvidia-9999' is not available", "nvidia-1155"]),
    # pcie=1 on an i440fx VM (PVE itself would only fail at the next start)
    (101, {"mapping": "a100", "pcie": True}, True, ["pcie=1 needs the q35 machine type"]),
    # T4 shares IOMMU group 3 with a NIC
    (101, {"mapping": "t4"}, True, ["device 0000:03:00.0 shares IOMMU group 3 with 0000:04:00.0"]),
    # raw address with an API token (PVE: only root@pam with a password)
    (101, {"host": "01:00.0"}, True, ["only root@pam with a password may set, replace or delete raw host devices",
                                      "hostpci0: the new entry has a raw host device 0000:01:00.0"]),
    # device the node does not have
    (101, {"host": "0000:09:00.0"}, False, ["no PCI device 0000:09:00.0 on the node"]),
])
def test_prechecks_fail_before_any_write(pvesim, vmid, gpu, token, expected):
    state0 = pvesim.state()
    res, writes = pvesim.run("pve_vm_gpu", {"vmid": vmid, "gpus": [gpu], "restart": "if_needed"}, token=token)
    assert res.get("failed"), res
    msg = res["msg"]
    assert "VM %d on node pve1" % vmid in msg and "nothing changed" in msg, msg
    device = gpu.get("mapping") or gpu.get("host")
    assert device in msg, msg
    for text in expected:
        assert text in msg, msg
    assert writes == 0 and pvesim.state() == state0


def test_running_vgpu_vms_of_the_lab_are_left_alone(lab_pvesim):
    # VM 102 runs an L40S vGPU from a VF pool, VM 201 a classic T4 mdev: the instance they hold is no longer listed
    # as available, which must not make a re-run fail or write.
    res, writes = lab_pvesim.run("pve_vm_gpu", {"vmid": 102, "restart": "if_needed",
                                                "gpus": [{"mapping": "l40s-vgpu", "mdev": "nvidia-1150", "pcie": True}]})
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] is False and writes == 0 and res["restarted"] is False
    res, writes = lab_pvesim.run("pve_vm_gpu", {"vmid": 201, "gpus": [{"host": "21:00.0", "mdev": "nvidia-223"}]}, token=False)
    assert not res.get("failed"), res.get("msg")
    assert res["changed"] is False and writes == 0 and res["node"] == "pve2"
    # Another VM asking for the same type now fails before writing: no instance left.
    state0 = lab_pvesim.state()
    res, writes = lab_pvesim.run("pve_vm_gpu", {"vmid": 200, "gpus": [{"mapping": "t4-vgpu", "mdev": "nvidia-223"}]})
    assert res.get("failed") and "VM 200 on node pve2" in res["msg"] and "t4-vgpu" in res["msg"]
    assert "mdev type 'nvidia-223' has no free instance on mapping t4-vgpu" in res["msg"], res["msg"]
    assert writes == 0 and lab_pvesim.state() == state0
