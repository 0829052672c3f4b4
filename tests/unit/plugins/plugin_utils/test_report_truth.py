# -*- coding: utf-8 -*-
"""A report that tells the truth (issue 41 point 7): warn counts and colours in the summary band, gpu_memory on a MIG
GPU as not applicable, run times over the health history, a vfio passthrough host without a warning, and the
Proxmox VE VMs and vSphere hosts sections (plugins/plugin_utils/_report.py and its template)."""

from __future__ import annotations

import json
import re

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.module_utils._preflight import health as preflight_health
from ansible_collections.gpuops.provision.plugins.plugin_utils import _report as R

from health_readings import healthy  # pylint: disable=import-error  # tests/helpers

A100 = "NVIDIA A100-SXM4-40GB"
MIG_REMAP = {"error": "NVML_ERROR_NOT_SUPPORTED", "correctable": None, "uncorrectable": None, "pending": None,
             "failure": None}


def gpu(index, mode="enabled", instances=2, **health):
    h = healthy()
    for key, value in health.items():
        h[key].update(value)
    return {"index": index, "uuid": "GPU-%d" % index, "model": A100, "pci_address": "0000:%02x:00.0" % (0x17 + index),
            "mig_capable": True, "mig_mode": {"current": mode, "pending": mode}, "kernel_driver": "nvidia",
            "instances": [{"gi_id": i, "profile": "3g.20gb", "placement": {"start": 4 * i, "size": 4},
                           "compute_instances": [{}]} for i in range(instances)] if mode == "enabled" else [],
            "health": h}


def host(*gpus, preflight=None):
    facts = {"gpu": {"nvml": {"available": True, "driver_version": "550.163.01"}, "gpus": list(gpus),
                     "kernel_log": {"read": True, "error": None, "xid_events": []}}}
    if preflight is not None:
        facts["preflight"] = preflight
    return facts


def preflight_of(facts_gpu, fail_on_warn=False):
    """The node's preflight report over its gpu_* checks, as node_preflight writes it (module_utils/_health)."""
    opts = preflight_health.normalize_options(None)
    checks = [preflight_health.CHECKS[c][1]({"gpu": facts_gpu}, opts) for c in preflight_health.PER_GPU_CHECKS]
    statuses = [c["status"] for c in checks]
    verdict = "fail" if "fail" in statuses or (fail_on_warn and "warn" in statuses) else "warn" if "warn" in statuses else "pass"
    return {"verdict": verdict, "ready": verdict != "fail", "checks": checks,
            "failed_checks": [c["id"] for c in checks if c["status"] == "fail"],
            "warned_checks": [c["id"] for c in checks if c["status"] == "warn"]}


def band(page):
    """The summary band's counted cells: [(class, failed, warned, text)]."""
    return re.findall(r'<td class="(\w+)" data-failed="(\d+)" data-warned="(\d+)">(.*?)</td>', page)


# --- 1. warn counts and colours ----------------------------------------------------------------------------------------

def test_warned_nodes_and_gpus_are_counted_and_coloured_in_the_summary_band():
    hot = gpu(0, "disabled", temperature={"current": 86})   # within 5 degrees of slowdown (89): a warning
    facts = host(hot)
    facts["preflight"] = preflight_of(facts["gpu"])
    model = R.fleet_model({"n1": facts, "n2": host(gpu(0, "disabled"))})
    s = model["summary"]
    assert s["preflight_warned"] == ["n1"] and s["warned_gpus"] == ["n1 GPU 0"]
    assert s["preflight_failed"] == [] and s["unhealthy_gpus"] == []
    assert s["counts"] == {"preflight_failed": 0, "preflight_warned": 1, "unhealthy_gpus": 0, "warned_gpus": 1,
                           "not_applicable_gpus": 0}
    page = R.render_html(model)
    assert band(page) == [("warn", "0", "1", "0 failed &middot; 1 warned: n1"),
                          ("warn", "0", "1", "0 failed &middot; 1 warned: n1 GPU 0")]
    assert "<th>preflight (nodes)</th><th>GPU health</th>" in page
    assert '<td class="warn">WARN - warning: gpu_thermal</td>' in page


def test_fail_colour_beats_warn_and_none_is_ok():
    sick = host(gpu(0, "disabled", ecc={"volatile_uncorrected": 3}), gpu(1, "disabled", persistence_mode={"enabled": False}))
    model = R.fleet_model({"n1": sick})
    assert model["summary"]["unhealthy_gpus"] == ["n1 GPU 0"] and model["summary"]["warned_gpus"] == ["n1 GPU 1"]
    assert band(R.render_html(model))[1] == ("bad", "1", "1", "1 failed: n1 GPU 0 &middot; 1 warned: n1 GPU 1")
    clean = R.render_html(R.fleet_model({"n1": host(gpu(0, "disabled"))}))
    assert band(clean) == [("ok", "0", "0", "0 failed &middot; 0 warned")] * 2


# --- 2. gpu_memory on a MIG GPU: not applicable ------------------------------------------------------------------------

REASON = "row remapping cannot be read while MIG is enabled (2 GPU instance(s), NVML_ERROR_NOT_SUPPORTED)"


def test_gpu_memory_on_a_mig_gpu_is_not_applicable_with_its_reason():
    model = R.fleet_model({"n1": host(gpu(0, remapped_rows=MIG_REMAP))})
    g = model["hosts"][0]["gpus"][0]
    assert g["health"] == {"status": "pass", "failing": [], "not_applicable": [{"check": "gpu_memory", "reason": REASON}]}
    s = model["summary"]
    assert s["warned_gpus"] == [] and s["not_applicable_gpus"] == ["n1 GPU 0"] and s["counts"]["not_applicable_gpus"] == 1
    page = R.render_html(model)
    assert '<span class="na" data-na="gpu_memory">gpu_memory n/a: %s</span>' % REASON in page
    assert "health PASS" in page and "health WARN" not in page
    assert band(page)[1] == ("ok", "0", "0", '0 failed &middot; 0 warned &middot; <span class="na">1 n/a</span>')
    # The health over runs records the GPU as passing, not warned.
    assert R.health_snapshot(model) == {"n1 GPU 0 (GPU-0)": "pass"}


def test_real_warnings_stay_warnings_beside_a_not_applicable_check():
    # Unreadable for another reason (MIG off): unknown, a warning. A MIG GPU that also runs hot stays warned.
    other = gpu(0, "disabled", remapped_rows={"error": "NVML_ERROR_UNKNOWN"}, retired_pages={"error": "NVML_ERROR_UNKNOWN"})
    hot = gpu(1, remapped_rows=MIG_REMAP, temperature={"current": 86})
    model = R.fleet_model({"n1": host(other, hot)})
    a, b = model["hosts"][0]["gpus"]
    assert a["health"]["status"] == "warn" and [f["check"] for f in a["health"]["failing"]] == ["gpu_memory"]
    assert b["health"]["status"] == "warn" and [f["check"] for f in b["health"]["failing"]] == ["gpu_thermal"]
    assert b["health"]["not_applicable"] == [{"check": "gpu_memory", "reason": REASON}]
    assert model["summary"]["warned_gpus"] == ["n1 GPU 0", "n1 GPU 1"]


def test_a_node_that_warned_only_for_gpu_memory_on_mig_passes_in_the_report():
    facts = host(gpu(0, remapped_rows=MIG_REMAP), gpu(1, remapped_rows=MIG_REMAP))
    facts["preflight"] = preflight_of(facts["gpu"])
    assert facts["preflight"]["verdict"] == "warn"   # what the node itself said
    pf = R.fleet_model({"n1": facts})["hosts"][0]["preflight"]
    assert (pf["verdict"], pf["reported_verdict"], pf["warned_checks"], pf["not_applicable_checks"]) == (
        "pass", "warn", [], ["gpu_memory"])
    mem = [c for c in pf["checks"] if c["id"] == "gpu_memory"][0]
    assert mem == {"id": "gpu_memory", "status": "n/a", "remedy": "",
                   "evidence": "not applicable: GPU 0: %s; GPU 1: %s" % (REASON, REASON)}
    model = R.fleet_model({"n1": facts})
    assert model["summary"]["preflight_warned"] == []
    page = R.render_html(model)
    assert '<td class="ok">PASS - n/a: gpu_memory (the node reported WARN)</td>' in page
    assert '<td>gpu_memory</td><td class="na">n/a</td>' in page


def test_a_node_keeps_its_warning_for_a_real_one_and_its_failure_always():
    facts = host(gpu(0, remapped_rows=MIG_REMAP, temperature={"current": 86}))
    facts["preflight"] = preflight_of(facts["gpu"])
    pf = R.fleet_model({"n1": facts})["hosts"][0]["preflight"]
    assert pf["verdict"] == "warn" and pf["warned_checks"] == ["gpu_thermal"] and pf["not_applicable_checks"] == ["gpu_memory"]
    # fail_on_warn made the node fail on the gpu_memory warning: the report does not overrule the gate.
    strict = host(gpu(0, remapped_rows=MIG_REMAP))
    strict["preflight"] = preflight_of(strict["gpu"], fail_on_warn=True)
    assert R.fleet_model({"n1": strict})["hosts"][0]["preflight"]["verdict"] == "fail"
    # Without the GPU's facts the report cannot tell: the warning stays.
    blind = {"preflight": preflight_of(host(gpu(0, remapped_rows=MIG_REMAP))["gpu"])}
    pf = R.fleet_model({"n1": blind})["hosts"][0]["preflight"]
    assert pf["verdict"] == "warn" and pf["warned_checks"] == ["gpu_memory"]


def test_the_preflight_check_and_the_report_share_the_rule():
    g = gpu(0, remapped_rows=MIG_REMAP)
    assert preflight_health.remapping_hidden_by_mig(g) == REASON
    assert preflight_health.remapping_hidden_by_mig(gpu(0, "disabled", remapped_rows=MIG_REMAP)) is None
    assert preflight_health.remapping_hidden_by_mig(gpu(0)) is None   # readable: nothing hidden
    assert preflight_health.remapping_hidden_by_mig(dict(g, instances=None)) == REASON.replace("2 GPU instance(s)", "MIG enabled")


# --- 3. run times over the health history ------------------------------------------------------------------------------

@pytest.mark.parametrize("when, label", [("2026-12-05T23:10:17Z", "12-05 23:10"), ("2026-01-02 03:04:05", "01-02 03:04"),
                                         ("t7", "t7"), (None, "?"), ("", "?")])
def test_run_label(when, label):
    assert R.run_label(when) == label


def test_history_columns_are_headed_by_their_run_times():
    first = R.with_health_history(dict(R.fleet_model({"n1": host(gpu(0, "disabled"))}),
                                       generated_at="2026-12-05T23:10:17Z"), None)
    second = R.with_health_history(dict(R.fleet_model({"n1": host(gpu(0, "disabled", pcie={"width": 8}))}),
                                        generated_at="2026-12-06T07:45:00Z"), first)
    page = R.render_html(second)
    assert re.findall(r'<th class="run" title="([^"]+)">([^<]+)</th>', page) == [
        ("2026-12-05T23:10:17Z", "12-05 23:10"), ("2026-12-06T07:45:00Z", "12-06 07:45")]
    assert "<th>1</th>" not in page


# --- 4. a vfio passthrough host -----------------------------------------------------------------------------------------

NO_NVML = {"nvml": {"available": False,
                    "reason": "NVML library (libnvidia-ml.so.1) not found: the NVIDIA driver is not installed"}, "gpus": []}


def iommu(*drivers):
    return {"active": True, "kind": "intel", "gpus": [
        {"address": "0000:%02x:00.0" % (0x17 + i), "iommu_group": 20 + i, "isolated": True, "driver": d}
        for i, d in enumerate(drivers)]}


def test_a_passthrough_host_says_why_nvml_is_absent_without_warning():
    model = R.fleet_model({"pve": {"gpu": NO_NVML, "iommu": iommu("vfio-pci", "vfio-pci")}})
    h = model["hosts"][0]
    assert h["notes"] == [] and h["info"] == [
        "NVML not loaded: all 2 GPU(s) are bound to vfio-pci for passthrough, so no NVIDIA driver runs on this host by "
        "design (gpu_info: NVML library (libnvidia-ml.so.1) not found: the NVIDIA driver is not installed)"]
    page = R.render_html(model)
    assert '<p class="info">NVML not loaded: all 2 GPU(s) are bound to vfio-pci' in page
    assert '<p class="warn">NVML' not in page


@pytest.mark.parametrize("io", [iommu("vfio-pci", "nvidia"), iommu("vfio-pci", None), iommu(), None])
def test_without_nvml_a_host_not_all_on_vfio_still_warns(io):
    facts = {"gpu": NO_NVML}
    if io is not None:
        facts["iommu"] = io
    h = R.fleet_model({"n": facts})["hosts"][0]
    assert h["info"] == [] and h["notes"] == ["NVML: " + NO_NVML["nvml"]["reason"]]
    assert '<p class="warn">NVML: NVML library' in R.render_html(R.fleet_model({"n": facts}))


# --- 5. Proxmox VE VMs and vSphere hosts ---------------------------------------------------------------------------------

def pve_result():
    a100 = {"id": "0000:01:00.0", "device_name": "GA100 [A100 PCIe 80GB]", "vfs": []}
    l40s = {"id": "0000:41:00.0", "device_name": "AD102GL [L40S]",
            "vfs": [{"id": "0000:41:00.4", "device_name": None, "pci_id": "10de:26b9"}]}
    t4 = {"id": "0000:21:00.0", "device_name": "TU104GL [Tesla T4]", "vfs": []}
    vm100 = {"vmid": 100, "name": "k8s-gpu-a", "status": "running", "node": "pve1", "hostpci": [
        {"vmid": 100, "slot": "hostpci0", "via": "mapping", "mapping": "a100", "paths": ["0000:01:00.0"], "mdev": None,
         "mdev_name": None, "gpus": ["0000:01:00.0"]}]}
    vm102 = {"vmid": 102, "name": "vdi-l40s-1", "status": "stopped", "node": "pve1", "hostpci": [
        {"vmid": 102, "slot": "hostpci0", "via": "mapping", "mapping": "l40s-vgpu", "paths": ["0000:41:00.4"],
         "mdev": "nvidia-1150", "mdev_name": "NVIDIA L40S-1Q", "gpus": ["0000:41:00.4"]}]}
    return {"changed": False, "skipped_nodes": {"pve3": "offline"}, "nodes": {
        "pve1": {"gpus": [a100, l40s], "vms": [vm100, vm102]},
        # pve2 as an older pve_gpu_info returned it (no vms): the VMs from the GPUs' used_by, without names.
        "pve2": {"gpus": [dict(t4, used_by=[{"vmid": 201, "slot": "hostpci0", "via": "host", "mapping": None,
                                             "paths": ["0000:21:00.0"], "mdev": "nvidia-223"}])]}}}


def test_proxmox_vms_per_node_with_their_gpus_and_vgpu_types():
    (c,) = R.fleet_model({}, proxmox={"pve-cluster": pve_result()})["proxmox"]
    assert c["name"] == "pve-cluster" and c["error"] is None and c["skipped_nodes"] == {"pve3": "offline"}
    pve1, pve2 = c["nodes"]
    assert pve1["gpus"] == ["0000:01:00.0 GA100 [A100 PCIe 80GB]", "0000:41:00.0 AD102GL [L40S]"]
    assert pve1["free_gpus"] == []   # the L40S serves vGPUs through its VF
    assert pve1["vms"][0] == {"vmid": 100, "name": "k8s-gpu-a", "status": "running", "devices": [
        {"slot": "hostpci0", "via": "mapping", "mapping": "a100", "paths": ["0000:01:00.0"], "mdev": None,
         "mdev_name": None, "gpus": ["0000:01:00.0 GA100 [A100 PCIe 80GB]"]}]}
    assert pve1["vms"][1]["devices"][0]["gpus"] == ["0000:41:00.4 10de:26b9"]
    assert pve2["vms"] == [{"vmid": 201, "name": None, "status": None, "devices": [
        {"slot": "hostpci0", "via": "host", "mapping": None, "paths": ["0000:21:00.0"], "mdev": "nvidia-223",
         "mdev_name": None, "gpus": ["0000:21:00.0 TU104GL [Tesla T4]"]}]}]
    model = R.fleet_model({}, proxmox={"pve-cluster": pve_result()})
    assert model["summary"]["proxmox_gpu_vms"] == 3
    page = R.render_html(model)
    assert "<h2>Proxmox VE VMs with GPUs</h2>" in page and '<section class="pve" id="pve-pve-cluster">' in page
    assert "<td>mapping l40s-vgpu</td><td>0000:41:00.4 10de:26b9</td><td>nvidia-1150 (NVIDIA L40S-1Q)</td>" in page
    assert "<td>host 0000:21:00.0</td>" in page and "node pve3 not read: offline" in page


def vsphere_result():
    def h(name, cluster, version, gpus, vms, gpu_host=True):
        return {"name": name, "cluster": cluster, "connection_state": "connected", "in_maintenance_mode": False,
                "esxi_version": "8.0.3", "gpu_host": gpu_host, "gpus": [{"device_name": g} for g in gpus],
                "driver": {"version": version}, "vgpu_vms": vms}
    vm = {"name": "ml-01", "power_state": "poweredOn", "profiles": ["grid_a100-20c"]}
    return {"hosts": [h("esx1", "gpu-a", "550.144.02", ["NVIDIA A100-PCIE-40GB"], [vm]),
                      h("esx2", "gpu-a", "535.216.01", ["NVIDIA L40S"], []),
                      h("esx9", "gpu-a", None, [], [], gpu_host=False),
                      h("esx3", None, "550.144.02", ["NVIDIA L40S"], [])],
            "drift": {"consistent": False, "drifting_clusters": ["gpu-a"], "clusters": {
                "gpu-a": {"consistent": False, "versions": {"535.216.01": ["esx2"], "550.144.02": ["esx1"]}, "missing": [],
                          "majority": "535.216.01"},
                "standalone host esx3": {"consistent": True, "versions": {"550.144.02": ["esx3"]}, "missing": [],
                                         "majority": "550.144.02"}}}}


def test_vsphere_hosts_per_cluster_with_vgpu_vms_and_drift():
    model = R.fleet_model({}, vsphere={"vc1": vsphere_result()})
    (v,) = model["vsphere"]
    a, standalone = v["clusters"]
    assert a["cluster"] == "gpu-a" and a["other_hosts"] == 1 and [x["name"] for x in a["hosts"]] == ["esx1", "esx2"]
    assert a["drift"]["consistent"] is False and a["hosts"][0]["vgpu_vms"] == [
        {"name": "ml-01", "power_state": "poweredOn", "profiles": ["grid_a100-20c"]}]
    assert standalone["cluster"] == "standalone host esx3" and standalone["drift"]["consistent"] is True
    assert model["summary"]["driver_drift"] == ["vc1 gpu-a"] and model["summary"]["vsphere_vgpu_vms"] == 1
    page = R.render_html(model)
    assert "<h2>vSphere GPU hosts and vGPU VMs</h2>" in page
    assert 'data-drift="drift">NVIDIA host driver: DRIFT - 535.216.01 on esx2, 550.144.02 on esx1</p>' in page
    assert 'data-drift="consistent">NVIDIA host driver: one version (550.144.02)</p>' in page
    assert "<td>ml-01 (poweredOn): grid_a100-20c</td>" in page
    assert '<th>vSphere driver drift</th>' in page and '<td class="bad">vc1 gpu-a</td>' in page


def test_a_failed_read_shows_its_reason_and_no_entries_means_no_sections():
    model = R.fleet_model({}, proxmox={"pve-x": {"failed": True, "msg": "HTTP 401: authentication failure"}},
                          vsphere={"vc-x": {"failed": True, "unreachable": True, "msg": "timed out"}})
    assert model["proxmox"][0]["error"] == "HTTP 401: authentication failure" and model["proxmox"][0]["nodes"] == []
    assert model["vsphere"][0]["error"] == "timed out" and model["summary"]["unread"] == ["pve-x", "vc-x"]
    page = R.render_html(model)
    assert '<p class="warn">pve_gpu_info: HTTP 401: authentication failure</p>' in page
    assert '<p class="warn">vsphere_gpu_info: timed out</p>' in page
    plain = R.render_html(R.fleet_model({"n1": {}}))
    assert "Proxmox VE" not in plain and "vSphere" not in plain and "not read:" not in plain
    with pytest.raises(AnsibleFilterError, match="proxmox must be a mapping"):
        R.fleet_model({}, proxmox=["pve"])
    assert json.loads(json.dumps(model)) == model


def test_the_report_model_filter_takes_the_api_reads_too():
    from ansible_collections.gpuops.provision.plugins.filter import report  # pylint: disable=import-outside-toplevel
    model = report.FilterModule().filters()["report_model"]({}, proxmox={"pve-cluster": pve_result()},
                                                            vsphere={"vc1": vsphere_result()})
    assert model["summary"]["proxmox_gpu_vms"] == 3 and model["summary"]["driver_drift"] == ["vc1 gpu-a"]
