# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/preflight.yml end to end: one ansible-playbook run over simulated nodes (fake sysfs trees + gpusim
states) — passing nodes of each kind and one node per failing check — with the gate taint managed on the lab's
Kubernetes stand-in. Asserts the per-node JSON reports, the JUnit file, set_stats, the failed hosts and the taints."""

from __future__ import annotations

import datetime
import json
import os
import sys
import xml.etree.ElementTree as ET

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from preflight_lab import (  # noqa: E402  pylint: disable=import-error,wrong-import-position
    ROOT, TlsListener, ansible_env, deprecations, make_node, run_playbook, write_inventory, write_token)

sys.path.insert(0, os.path.join(ROOT, "lab", "kube"))
from kube_harness import kube_lab  # noqa: E402  pylint: disable=import-error,wrong-import-position

pytestmark = pytest.mark.slow

PIN = "550.163.01"
TAINT = {"key": "gpuops.io/preflight", "value": "pending", "effect": "NoSchedule"}
OTHER_TAINT = {"key": "example.com/dedicated", "value": "ml", "effect": "NoSchedule"}
H100_3G_X2 = [{"profile_id": 9, "start": 0, "compute_instances": [{"slices": 3}]},
              {"profile_id": 9, "start": 4, "compute_instances": [{"slices": 3}]}]
MIG_TARGET = [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]
WORKER_ARGS = ["nvidia-drm.modeset=1", "systemd.unified_cgroup_hierarchy"]
WORKER_CMDLINE = "BOOT_IMAGE=/boot/vmlinuz-6.1.0-28-amd64 root=/dev/sda1 ro nvidia-drm.modeset=1 systemd.unified_cgroup_hierarchy"
HOST_CMDLINE = "BOOT_IMAGE=/boot/vmlinuz-6.8.12-4-pve root=/dev/mapper/pve-root ro quiet intel_iommu=on iommu=pt"


def _expiry(days):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=days, hours=1)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def worker(cmdline=WORKER_CMDLINE, module_version=PIN):
    return {"cmdline": cmdline, "modules": {"nvidia": {"version": module_version}} if module_version else {}}


def passthrough(cmdline=HOST_CMDLINE, units=True, gpu_driver="vfio-pci", shared_group=False):
    devices = [
        {"address": "0000:64:00.0", "vendor": "0x8086", "device": "0x352a", "class": "0x060400", "driver": "pcieport", "group": 40},
        {"address": "0000:65:00.0", "vendor": "0x10de", "device": "0x26b9", "class": "0x030200", "driver": gpu_driver, "group": 40},
        {"address": "0000:65:00.1", "vendor": "0x10de", "device": "0x22ba", "class": "0x040300", "driver": gpu_driver, "group": 40},
        {"address": "0000:66:00.0", "vendor": "0x8086", "device": "0x1572", "class": "0x020000", "driver": "i40e",
         "group": 40 if shared_group else 41},
    ]
    if not units:
        devices = [dict(d, group=None) for d in devices]
    return {"cmdline": cmdline, "iommu_units": {"dmar0": {"ecap": "0xf050da"}} if units else {}, "devices": devices}


def gpusim_worker(**gpu):
    base = {"model": "NVIDIA H100 80GB HBM3", "mig_mode": "enabled", "gpu_instances": H100_3G_X2}
    base.update(gpu)
    return {"driver_version": PIN, "gpus": [base]}


def gpusim_guest(licence, driver=PIN, vgpu_name="NVIDIA L40S-24C"):
    return {"driver_version": driver, "gpus": [{"model": "NVIDIA L40S", "virtualization_mode": "vgpu", "license": licence,
                                                "vgpu_name": vgpu_name}]}


LICENSED = {"feature": "compute", "licensed": True, "expiry": _expiry(200)}
DRIVER_OK = {"nvidia_driver_facts": {"installed_version": PIN + "-1"}, "node_preflight_driver_version": PIN}
WORKER_VARS = dict(DRIVER_OK, node_preflight_role="k8s_worker", node_preflight_mig_devices=MIG_TARGET,
                   node_preflight_kernel_args=WORKER_ARGS)
GUEST_VARS = dict(DRIVER_OK, node_preflight_role="vgpu_guest")
DRA_PIN = "570.172.08"
DRA_VARS = {"nvidia_driver_facts": {"installed_version": DRA_PIN + "-1"}, "node_preflight_driver_version": DRA_PIN,
            "node_preflight_role": "k8s_dra_worker", "node_preflight_kernel_args": WORKER_ARGS}
HOST_VARS = {"node_preflight_role": "passthrough_host", "node_preflight_kernel_args": ["intel_iommu=on", "iommu=pt"]}

# name: (sysfs spec, gpusim state or None, host vars, expected failing checks)
NODES = {
    "pass-worker": (worker(), gpusim_worker(), WORKER_VARS, []),
    "pass-guest": (worker(), gpusim_guest(LICENSED), GUEST_VARS, []),
    "pass-host": (passthrough(), None, HOST_VARS, []),
    "fail-iommu": (passthrough(cmdline="BOOT_IMAGE=/boot/vmlinuz ro quiet", units=False), None,
                   dict(HOST_VARS, node_preflight_kernel_args=[]), ["iommu_active", "iommu_isolation", "vfio_bound"]),
    "fail-isolation": (passthrough(shared_group=True), None, HOST_VARS, ["iommu_isolation"]),
    "fail-vfio": (passthrough(gpu_driver="nvidia"), None, HOST_VARS, ["vfio_bound"]),
    "fail-kargs": (passthrough(cmdline="BOOT_IMAGE=/boot/vmlinuz ro intel_iommu=on"), None, HOST_VARS, ["kernel_args"]),
    "fail-reboot": (worker(module_version="550.144.03"), gpusim_worker(), WORKER_VARS, ["driver_version"]),
    "fail-pin": (worker(module_version="550.144.03"), dict(gpusim_worker(), driver_version="550.144.03"),
                 dict(WORKER_VARS, nvidia_driver_facts={"installed_version": "550.144.03-1"}), ["driver_version"]),
    "fail-pending": (worker(), {"driver_version": PIN,
                                "gpus": [{"model": "NVIDIA A100-SXM4-40GB", "mig_mode": "disabled", "mig_mode_pending": "enabled"}]},
                     dict(WORKER_VARS, node_preflight_mig_devices=[]), ["mig_pending"]),
    "fail-geometry": (worker(), gpusim_worker(gpu_instances=[]), WORKER_VARS, ["mig_geometry"]),
    "fail-unlicensed": (worker(), gpusim_guest({"feature": "compute", "licensed": False}), GUEST_VARS, ["license"]),
    "fail-expiring": (worker(), gpusim_guest(dict(LICENSED, expiry=_expiry(3))), GUEST_VARS, ["license"]),
    # GPU health, each fault injected into gpusim (lab/gpusim/README.md "Fault injection"), read through NVML or, for
    # the Xid, through gpusim's dmesg.
    "fail-ecc": (worker(), gpusim_worker(ecc={"volatile": {"uncorrected": 12}, "aggregate": {"uncorrected": 12}}),
                 WORKER_VARS, ["gpu_ecc"]),
    "fail-remap": (worker(), gpusim_worker(mig_mode="disabled", gpu_instances=[],
                                           remapped_rows={"uncorrectable": 3, "failure": True}),
                   dict(WORKER_VARS, node_preflight_mig_devices=[{"devices": "all", "mig-enabled": False}]),
                   ["gpu_memory"]),
    "fail-xid": (worker(), gpusim_worker(xid_events=[{"xid": 79, "t": 812.11, "msg": "GPU has fallen off the bus."}]),
                 WORKER_VARS, ["gpu_xid"]),
    "fail-link": (worker(), gpusim_worker(pcie={"width": 8}), WORKER_VARS, ["gpu_pcie"]),
    "fail-missing": (worker(), dict(gpusim_worker(), gpus=[gpusim_worker()["gpus"][0],
                                                           dict(gpusim_worker()["gpus"][0], present=False)]),
                     dict(WORKER_VARS, node_preflight_expected_gpus=2), ["gpu_count"]),
    "fail-hot": (worker(), gpusim_worker(temperature=91), WORKER_VARS, ["gpu_thermal"]),
    # Licensing as a dependency: the token's service does not answer; a vWS FeatureType on a C-series vGPU.
    "fail-service": (worker(), gpusim_guest(LICENSED), GUEST_VARS, ["license_service"]),
    "fail-feature": (worker(), gpusim_guest(LICENSED), GUEST_VARS, ["license_feature"]),
    # NVIDIA's DRA driver instead of the device plugin (node role k8s_dra_worker): a 570 driver passes; a 550 driver is
    # below the DRA driver's R565 floor.
    "pass-dra": (worker(module_version=DRA_PIN),
                 dict(gpusim_worker(mig_mode="disabled", gpu_instances=[]), driver_version=DRA_PIN), DRA_VARS, []),
    "fail-dra": (worker(), gpusim_worker(mig_mode="disabled", gpu_instances=[]),
                 dict(DRA_VARS, nvidia_driver_facts={"installed_version": PIN + "-1"}, node_preflight_driver_version=PIN),
                 ["dra_driver"]),
    # Issue 37 point 7: the runtime is read on the node. containerd 1.7 with its default configuration has CDI off
    # (enable_cdi defaults to false before 2.0): the DRA driver cannot inject GPUs, whatever the spec directories.
    "fail-dra-cdi": (worker(module_version=DRA_PIN),
                     dict(gpusim_worker(mig_mode="disabled", gpu_instances=[]), driver_version=DRA_PIN), DRA_VARS,
                     ["dra_cdi"]),
    # Persistence mode off only warns (node_preflight_persistence_required makes it fail).
    "warn-persistence": (worker(), gpusim_worker(mig_mode="disabled", gpu_instances=[], persistence_mode=False),
                         dict(WORKER_VARS, node_preflight_mig_devices=[{"devices": "all", "mig-enabled": False}]), []),
    # DCGM's diagnostic (gpusim's dcgmi): level 2 catches the x8 link in its PCIe test too; a MIG GPU is refused.
    "fail-dcgm": (worker(), gpusim_worker(mig_mode="disabled", gpu_instances=[], pcie={"width": 8}),
                  dict(WORKER_VARS, node_preflight_mig_devices=[{"devices": "all", "mig-enabled": False}],
                       node_preflight_dcgm_diag_level=2), ["gpu_pcie", "gpu_dcgm"]),
}
# The Container Toolkit's CDI spec of the DRA nodes (nvidia-ctk cdi generate: kind nvidia.com/gpu, index, UUID, all).
CDI_SPEC = "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n  containerEdits: {}\n- name: all\n" \
           "  containerEdits: {}\ncontainerEdits: {}\n"
# Guests: gridd.conf FeatureType and whether their token's DLS answers (a TLS listener of the fixture) or not.
GUESTS = {"pass-guest": (4, True), "fail-unlicensed": (4, True), "fail-expiring": (4, True),
          "fail-service": (4, False), "fail-feature": (2, True)}
# NVML does not read row remapping on a MIG GPU with GPU instances (nvml.h nvmlDeviceGetRemappedRows; gpusim's
# remapped_rows_in_mig default): every node seeded with MIG instances has gpu_memory as a warning, not a pass.
MIG_WITH_INSTANCES = ("pass-worker", "fail-reboot", "fail-pin", "fail-ecc", "fail-xid", "fail-link", "fail-missing",
                      "fail-hot")
EXPECTED_WARNED = {"warn-persistence": ["gpu_persistence"]}
EXPECTED_REMEDY = {
    "iommu_active": "VT-d", "iommu_isolation": "slot", "vfio_bound": "options vfio-pci ids=10de:22ba,10de:26b9",
    "kernel_args": "update-grub", "driver_version": "reboot", "mig_pending": "nvidia-smi -r -i 0",
    "mig_geometry": "mig_reconfigure", "license": "nvidia-gridd",
    "gpu_ecc": "reset the GPU", "gpu_memory": "RMA", "gpu_xid": "drain the node", "gpu_pcie": "reseat",
    "gpu_count": "lspci", "gpu_thermal": "cooling", "license_service": "firewall", "license_feature": "FeatureType",
    "dra_driver": "driver_pin", "gpu_dcgm": "reseat", "dra_cdi": "enable_cdi = true",
}
EXPECTED_EVIDENCE = {
    "fail-iommu": "no IOMMU unit", "fail-isolation": "also holds 0000:66:00.0", "fail-vfio": "0000:65:00.0 is bound to nvidia",
    "fail-kargs": "iommu=pt missing", "fail-reboot": "reboot pending", "fail-pin": "is not the pinned 550.163.01",
    "fail-pending": "MIG mode disabled, pending enabled", "fail-geometry": "target MIG enabled {3g.40gb: 2}",
    "fail-unlicensed": "unlicensed", "fail-expiring": "in 3 days",
    "fail-ecc": "GPU 0 (NVIDIA H100 80GB HBM3, 0000:17:00.0): uncorrectable ECC errors: 12 since the last reset",
    "fail-remap": "GPU 0 (NVIDIA H100 80GB HBM3, 0000:17:00.0): row remapping FAILED",
    "fail-xid": "GPU 0 (NVIDIA H100 80GB HBM3, 0000:17:00.0): 1 Xid event(s) since boot: 79",
    "fail-link": "PCIe link trained at x8, below its x16",
    "fail-missing": "NVML enumerates 1 GPU(s), the inventory expects 2: 1 missing",
    "fail-hot": "hardware slowdown active (HwSlowdown, HwThermalSlowdown)",
    "fail-service": "does NOT answer: TCP connection to 127.0.0.1:",
    "fail-feature": "GPU 0 (NVIDIA L40S-24C) (C-series): gridd FeatureType 2: vws does not license C-series vGPUs",
    "fail-dra": "550.163.01",
    "fail-dra-cdi": "containerd 1.7.27 runs with enable_cdi = false (its default before 2.0)",
    "fail-dcgm": "dcgmi diag -r 2 failed (DCGM 4.6.0): GPU 0",
}


# containerd 2.x (config version 3: CDI on by default) and 1.7 (version 2, enable_cdi not set: off by default), as
# `containerd --version` and `containerd config dump` print them; the kubelet of Kubernetes 1.34.
CONTAINERD_2 = ("containerd github.com/containerd/containerd/v2 v2.0.4 1a43cb6a1035441f9aca8f5666a9b3ef9e70ab20",
                'version = 3\n[plugins."io.containerd.cri.v1.runtime"]\n  enable_selinux = false\n')
CONTAINERD_17 = ("containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da",
                 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.k8s.io/pause:3.8"\n')


def runtime_tools(node_dir, version, config, kubelet="Kubernetes v1.34.1"):
    """A bin directory with containerd and kubelet that answer as the real ones do; returns its path."""
    bindir = node_dir / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    (bindir / "containerd").write_text("#!/bin/sh\ncase \"$1\" in\n  --version) echo '%s' ;;\n  config) cat <<'EOF'\n%sEOF\n ;;\n"
                                       "  *) exit 1 ;;\nesac\n" % (version, config), encoding="utf-8")
    (bindir / "kubelet").write_text("#!/bin/sh\necho '%s'\n" % kubelet, encoding="utf-8")
    for tool in ("containerd", "kubelet"):
        (bindir / tool).chmod(0o755)
    return str(bindir)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base = tmp_path_factory.mktemp("preflight")
    hosts = dict((name, make_node(base, name, sysfs, state, hv)) for name, (sysfs, state, hv, _exp) in NODES.items())
    dls = TlsListener(base)
    closed = TlsListener(base)
    closed.close()  # a port nothing listens on any more
    for name, (feature_type, up) in GUESTS.items():
        tokens = write_token(base / name, [("127.0.0.1", dls.port if up else closed.port)])
        gridd = base / name / "gridd.conf"
        gridd.write_text("FeatureType=%d\nClientConfigTokenPath=%s\n" % (feature_type, tokens), encoding="utf-8")
        hosts[name]["node_preflight_gridd_conf"] = str(gridd)
    for name in ("pass-dra", "fail-dra", "fail-dra-cdi"):
        cdi = base / name / "root" / "etc" / "cdi"
        cdi.mkdir(parents=True, exist_ok=True)
        (cdi / "nvidia.yaml").write_text(CDI_SPEC, encoding="utf-8")
        # The node's container runtime and kubelet, as their --version and containerd's config dump print them.
        runtime = CONTAINERD_17 if name == "fail-dra-cdi" else CONTAINERD_2
        hosts[name]["node_preflight_environment"]["PATH"] = os.pathsep.join(
            [runtime_tools(base / name, *runtime), hosts[name]["node_preflight_environment"]["PATH"]])
    inventory = write_inventory(base / "hosts.yml", hosts)
    k8s_fixture = {"nodes": [{"metadata": {"name": name}, "spec": {"taints": [TAINT] + ([OTHER_TAINT] if name == "pass-worker" else [])}}
                             for name in NODES]}
    report_dir = str(base / "reports")
    with kube_lab(k8s_fixture) as lab:
        env = ansible_env(lab.ansible_env(), {"ANSIBLE_SHOW_CUSTOM_STATS": "1"})
        rc, out, _stdout, stderr = run_playbook(os.path.join(ROOT, "playbooks", "preflight.yml"), inventory,
                                                {"node_preflight_gate": "taint", "node_preflight_report_dir": report_dir}, env=env)
        nodes = dict((n["metadata"]["name"], n) for n in lab.get_json("/api/v1/nodes")["items"])
    reports = {}
    for name in NODES:
        path = os.path.join(report_dir, name + ".json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                reports[name] = json.load(fh)
    dls.close()
    return {"rc": rc, "out": out, "stderr": stderr, "reports": reports, "k8s_nodes": nodes,
            "junit": os.path.join(report_dir, "preflight-junit.xml"), "dls_handshakes": dls.handshakes}


def test_play_fails_for_failing_nodes_only(fleet):
    assert fleet["rc"] != 0
    stats = fleet["out"]["stats"]
    for name, (_s, _g, _h, expected) in NODES.items():
        assert name in stats, fleet["stderr"]
        assert bool(stats[name]["failures"]) == bool(expected), (name, stats[name])
        assert stats[name]["unreachable"] == 0


@pytest.mark.parametrize("name", sorted(NODES))
def test_report_names_failing_check_and_remedy(fleet, name):
    report = fleet["reports"][name]
    expected = NODES[name][3]
    assert report["node"] == name
    assert report["failed_checks"] == expected, json.dumps(report, indent=1)
    warned = EXPECTED_WARNED.get(name, ["gpu_memory"] if name in MIG_WITH_INSTANCES else [])
    assert report["warned_checks"] == warned, json.dumps(report, indent=1)
    assert report["verdict"] == ("fail" if expected else "warn" if warned else "pass")
    assert report["ready"] is not bool(expected)
    assert [c["id"] for c in report["checks"]] == ["iommu_active", "iommu_isolation", "vfio_bound", "driver_version",
                                                   "license", "license_service", "license_feature", "mig_pending",
                                                   "mig_geometry", "kernel_args", "dra_driver", "dra_cdi", "dra_mig",
                                                   "gpu_count", "gpu_ecc", "gpu_memory", "gpu_xid", "gpu_pcie",
                                                   "gpu_thermal", "gpu_persistence", "gpu_dcgm"]
    checks = dict((c["id"], c) for c in report["checks"])
    for cid in expected:
        assert checks[cid]["remedy"], checks[cid]
    if expected:
        # the first failing check is the root cause; its remedy says what to do about it
        assert EXPECTED_REMEDY[expected[0]] in checks[expected[0]]["remedy"], checks[expected[0]]
    if name in EXPECTED_EVIDENCE:
        evidence = " ".join(checks[c]["evidence"] for c in expected)
        assert EXPECTED_EVIDENCE[name] in evidence, evidence
    # every selected check ran on real facts: a passing node has its checks passing, not skipped
    if name == "pass-worker":
        assert [checks[c]["status"] for c in ("driver_version", "mig_pending", "mig_geometry", "kernel_args")] == ["pass"] * 4
        assert checks["license"]["status"] == "skip"
        # The healthy node's GPU health, read through gpusim's NVML and dmesg, passes every check.
        health = ["gpu_count", "gpu_ecc", "gpu_xid", "gpu_pcie", "gpu_thermal", "gpu_persistence"]
        assert [checks[c]["status"] for c in health] == ["pass"] * len(health), [checks[c] for c in health]
        assert checks["gpu_xid"]["evidence"] == "no Xid since boot on 1 GPU(s)"
        # MIG is on with 2 GPU instances: NVML does not read row remapping then, which is reported, not passed.
        assert "row remapping cannot be read while MIG is enabled (2 GPU instance(s)" in checks["gpu_memory"]["evidence"]
    if name == "fail-xid":
        assert checks["gpu_xid"]["gpus"][0]["status"] == "fail" and checks["gpu_xid"]["gpus"][0]["pci_address"] == \
            "0000:17:00.0"
    if name == "warn-persistence":
        assert checks["gpu_persistence"]["evidence"] == ("GPU 0 (NVIDIA H100 80GB HBM3, 0000:17:00.0): persistence "
                                                         "mode off")
        assert "nvidia-persistenced" in checks["gpu_persistence"]["remedy"]
    if name == "pass-dra":
        assert [checks[c]["status"] for c in ("dra_driver", "dra_cdi", "dra_mig")] == ["pass"] * 3, \
            [checks[c] for c in ("dra_driver", "dra_cdi", "dra_mig")]
        assert checks["mig_geometry"]["status"] == "skip" and "/etc/cdi/nvidia.yaml" in checks["dra_cdi"]["evidence"]
    if name == "pass-guest":
        assert checks["license"]["status"] == "pass" and "NVIDIA Virtual Compute Server" in checks["license"]["evidence"]
        # The token names the fixture's DLS, which answered TCP and TLS; FeatureType 4 fits the C-series vGPU.
        assert checks["license_service"]["status"] == "pass" and "DLS 127.0.0.1:" in checks["license_service"]["evidence"]
        assert "answers (TLSv1." in checks["license_service"]["evidence"]
        assert checks["license_feature"]["status"] == "pass" and "compute licenses C-series vGPUs" in \
            checks["license_feature"]["evidence"]
        assert fleet["dls_handshakes"] >= 4  # every guest whose DLS is up made a real TLS handshake
    if name == "pass-host":
        assert [checks[c]["status"] for c in ("iommu_active", "iommu_isolation", "vfio_bound", "kernel_args")] == ["pass"] * 4


def test_failure_message_names_check_and_remedy(fleet):
    failed = {}
    for play in fleet["out"]["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"].endswith("Fail the nodes that are not ready"):
                failed = dict((h, r) for h, r in task["hosts"].items() if r.get("failed"))
    assert sorted(failed) == sorted(n for n, v in NODES.items() if v[3])
    msg = failed["fail-vfio"]["msg"]
    assert "fail-vfio is NOT READY" in msg and "[vfio_bound]" in msg and "remedy:" in msg


def test_taint_stays_on_failing_nodes_and_is_removed_on_passing(fleet):
    for name, (_s, _g, _h, expected) in NODES.items():
        taints = fleet["k8s_nodes"][name]["spec"].get("taints") or []
        keys = [t["key"] for t in taints]
        if expected:
            assert TAINT["key"] in keys, (name, taints)
        else:
            assert TAINT["key"] not in keys, (name, taints)
    # an unrelated taint on a passing node is left alone
    assert OTHER_TAINT["key"] in [t["key"] for t in fleet["k8s_nodes"]["pass-worker"]["spec"]["taints"]]


def test_junit_file_has_a_suite_per_node_and_failures(fleet):
    tree = ET.parse(fleet["junit"])
    root = tree.getroot()
    suites = dict((s.get("name"), s) for s in root.findall("testsuite"))
    assert sorted(suites) == sorted("node_preflight.%s" % n for n in NODES)
    total_fail = sum(len(v[3]) for v in NODES.values())
    assert int(root.get("failures")) == total_fail
    case = [c for c in suites["node_preflight.fail-kargs"].findall("testcase") if c.get("name") == "kernel_args"][0]
    failure = case.find("failure")
    assert failure is not None and "iommu=pt missing" in failure.get("message") and "remedy:" in failure.text
    passing = suites["node_preflight.pass-host"]
    assert passing.get("failures") == "0"


def test_set_stats_and_summary(fleet):
    stats = fleet["out"]["global_custom_stats"]["node_preflight"]
    assert stats["total"] == len(NODES)
    assert sorted(stats["ready"]) == sorted(n for n, v in NODES.items() if not v[3])
    assert stats["nodes"]["fail-geometry"]["failed_checks"] == ["mig_geometry"]


def test_join_gate_runs_join_tasks_only_on_passing_nodes(tmp_path):
    """gate 'join': the user's join tasks run after the checks, and only where the node passed."""
    names = ("pass-host", "fail-vfio")
    hosts = dict((n, make_node(tmp_path, n, NODES[n][0], NODES[n][1], NODES[n][2])) for n in names)
    inventory = write_inventory(tmp_path / "hosts.yml", hosts)
    join = tmp_path / "join.yml"
    marker_dir = tmp_path / "joined"
    marker_dir.mkdir()
    join.write_text("- name: kubeadm join (stand-in)\n  ansible.builtin.copy:\n    content: joined\n"
                    "    dest: \"%s/{{ inventory_hostname }}\"\n    mode: \"0644\"\n" % marker_dir)
    rc, out, _so, _se = run_playbook(os.path.join(ROOT, "playbooks", "preflight.yml"), inventory,
                                     {"node_preflight_gate": "join", "node_preflight_join_tasks": str(join),
                                      "node_preflight_report_dir": str(tmp_path / "reports")})
    assert rc != 0
    assert sorted(os.listdir(marker_dir)) == ["pass-host"]
    assert out["stats"]["fail-vfio"]["failures"] == 1 and out["stats"]["pass-host"]["failures"] == 0


def test_no_deprecation_warning_on_the_tested_ansible_core(fleet):
    # ansible-core 2.21 marks the skipped_reason of a loop over nothing deprecated (_internal/_task.py set_skipped);
    # the report read the whole result of the CDI read, a loop over no files on every node without the DRA driver,
    # and each run printed the warning (issue 41 point 9).
    assert deprecations(fleet["out"], fleet["stderr"]) == []
