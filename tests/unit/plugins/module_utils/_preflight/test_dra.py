# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/_preflight/dra.py: DRA driver minimum driver versions, CDI specs and MIG ownership."""

from __future__ import annotations

import json
import re
import sys

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._preflight import dra


# --- driver versions ----------------------------------------------------------------------------------------------

def test_minimum_constants_are_upstreams():
    assert dra.MIN_DRIVER_GPU == "565"
    assert dra.MIN_DRIVER_COMPUTE_DOMAINS == "570.158.01"
    assert dra.GPU_OPERATOR_MIN_DRIVER == "580"


@pytest.mark.parametrize("version,status", [
    ("560.35.03", "fail"),
    ("564.99.99", "fail"),
    ("565.0", "pass"),            # the branch's first release is enough
    ("565.57.01", "pass"),
    ("570.158.00", "pass"),
    ("580.65.06", "pass"),
    ("565.57.01-0ubuntu1", "pass"),  # a package version carries the driver version
])
def test_gpu_allocation_minimum_is_r565(version, status):
    got, evidence, remedy = dra.check_dra_driver(version)
    assert got == status
    assert "565" in evidence
    assert (remedy != "") is (status == "fail")


def test_gpu_allocation_below_minimum_says_what_to_do():
    status, evidence, remedy = dra.check_dra_driver("564.99.99")
    assert status == "fail"
    assert "564.99.99 is older than 565" in evidence and "GPU allocation" in evidence
    assert "driver_pin.yml" in remedy and "reboot" in remedy
    assert "IMEXDaemonsWithDNSNames" not in remedy


@pytest.mark.parametrize("version,status", [
    ("565.57.01", "fail"),
    ("570.148.08", "fail"),
    ("570.158", "fail"),        # no patch field sorts below 570.158.01
    ("570.158.00", "fail"),
    ("570.158.01", "pass"),
    ("570.158.1", "pass"),      # numeric fields, as k8s version.ParseGeneric compares them
    ("570.172.08", "pass"),
    ("575.57.08", "pass"),
    ("570.158.01-0ubuntu0.24.04.1", "pass"),
])
def test_compute_domains_minimum_is_570_158_01(version, status):
    got, evidence, remedy = dra.check_dra_driver(version, compute_domains=True)
    assert got == status
    assert "570.158.01" in evidence and "IMEXDaemonsWithDNSNames" in evidence


def test_compute_domains_below_minimum_names_the_feature_gate():
    status, evidence, remedy = dra.check_dra_driver("570.158.00", compute_domains=True)
    assert status == "fail"
    assert "570.158.00 is older than 570.158.01" in evidence
    assert "featureGates.IMEXDaemonsWithDNSNames=false" in remedy and "570.158.01 or newer" in remedy


@pytest.mark.parametrize("version,status", [("575.57.08", "fail"), ("580.65.06", "pass")])
def test_minimum_override_gpu_operator(version, status):
    got, evidence, _remedy = dra.check_dra_driver(version, minimum=dra.GPU_OPERATOR_MIN_DRIVER)
    assert got == status
    assert "declared minimum" in evidence and "580" in evidence


def test_minimum_override_wins_over_compute_domains():
    assert dra.check_dra_driver("565.57.01", compute_domains=True, minimum="R565")[0] == "pass"
    assert dra.check_dra_driver("570.158.01", minimum="570.172.08")[0] == "fail"


@pytest.mark.parametrize("value", [None, ""])
def test_missing_driver_version_fails(value):
    status, evidence, remedy = dra.check_dra_driver(value)
    assert status == "fail"
    assert "no NVIDIA driver version" in evidence and "565" in evidence
    assert "driver_pin.yml" in remedy


def test_unparsable_driver_version_fails():
    status, evidence, _remedy = dra.check_dra_driver("nvidia-latest")
    assert status == "fail"
    assert "not understood" in evidence and "nvidia-latest" in evidence


def test_bad_minimum_raises():
    with pytest.raises(dra.DraError, match="minimum driver version.*latest"):
        dra.check_dra_driver("570.158.01", minimum="latest")


# --- parse_cdi_spec -----------------------------------------------------------------------------------------------

TOOLKIT_YAML = """\
---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: "0:1"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: GPU-5b7f0e1c-8c3f-4d0a-9a51-3c1d2e4f5a6b
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: MIG-0c0e1d2f-1111-2222-3333-444455556666
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
containerEdits:
  env:
  - NVIDIA_VISIBLE_DEVICES=void
"""
UUID0 = "GPU-5b7f0e1c-8c3f-4d0a-9a51-3c1d2e4f5a6b"
UUID1 = "GPU-0a1b2c3d-0000-1111-2222-333344445555"


def test_parse_toolkit_yaml_spec():
    spec = dra.parse_cdi_spec(TOOLKIT_YAML, "/etc/cdi/nvidia.yaml")
    assert spec == {"path": "/etc/cdi/nvidia.yaml", "cdi_version": "0.5.0", "kind": "nvidia.com/gpu",
                    "devices": ["0", "0:1", UUID0, "MIG-0c0e1d2f-1111-2222-3333-444455556666", "all"]}


def test_parse_json_spec_bytes_and_parsed_data():
    data = {"cdiVersion": "v0.6.0", "kind": "k8s.gpu.nvidia.com/claim",
            "devices": [{"name": "3f1c-gpu-0", "containerEdits": {}}]}
    for text in (json.dumps(data), json.dumps(data).encode("utf-8"), data):
        spec = dra.parse_cdi_spec(text, "/var/run/cdi/k8s.gpu.nvidia.com-claim_3f1c.json")
        assert spec["kind"] == dra.DRA_CDI_KIND and spec["devices"] == ["3f1c-gpu-0"]
        assert spec["cdi_version"] == "v0.6.0"


def _spec(**kw):
    data = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [{"name": "0", "containerEdits": {}}]}
    data.update(kw)
    return data


@pytest.mark.parametrize("path", ["/etc/cdi/nvidia.yml", "/etc/cdi/nvidia", "/etc/cdi/nvidia.yaml.bak"])
def test_spec_with_other_extension_is_never_read(path):
    with pytest.raises(dra.DraError, match=r"%s is never read.*\*\.json and \*\.yaml" % path):
        dra.parse_cdi_spec(_spec(), path)


def test_invalid_yaml_names_the_file():
    with pytest.raises(dra.DraError, match="/etc/cdi/nvidia.yaml is not valid YAML or JSON"):
        dra.parse_cdi_spec("cdiVersion: [0.5.0\nkind: x", "/etc/cdi/nvidia.yaml")


def test_non_utf8_bytes():
    with pytest.raises(dra.DraError, match="/etc/cdi/x.yaml is not UTF-8"):
        dra.parse_cdi_spec(b"\xff\xfe", "/etc/cdi/x.yaml")


@pytest.mark.parametrize("text", ["", "- 1\n- 2\n", "just a string"])
def test_spec_must_be_a_mapping(text):
    with pytest.raises(dra.DraError, match="/etc/cdi/x.yaml is not a mapping"):
        dra.parse_cdi_spec(text, "/etc/cdi/x.yaml")


def test_unknown_top_level_field_rejects_the_file():
    data = _spec()
    data["device"] = data.pop("devices")
    with pytest.raises(dra.DraError, match="/etc/cdi/x.yaml has unknown field.*device; runtimes reject"):
        dra.parse_cdi_spec(data, "/etc/cdi/x.yaml")


@pytest.mark.parametrize("version", [None, "", 0.5])
def test_cdi_version_required_as_string(version):
    with pytest.raises(dra.DraError, match="/etc/cdi/x.yaml has no cdiVersion"):
        dra.parse_cdi_spec(_spec(cdiVersion=version), "/etc/cdi/x.yaml")


@pytest.mark.parametrize("version", ["0.0.9", "1.2.0", "2.0.0", "0.5"])
def test_unknown_cdi_version(version):
    with pytest.raises(dra.DraError, match="cdiVersion '%s' is not a CDI specification version" % version):
        dra.parse_cdi_spec(_spec(cdiVersion=version), "/etc/cdi/x.yaml")


@pytest.mark.parametrize("version", ["0.1.0", "0.3.0", "0.8.0", "1.0.0", "1.1.0"])
def test_known_cdi_versions(version):
    assert dra.parse_cdi_spec(_spec(cdiVersion=version), "/etc/cdi/x.yaml")["cdi_version"] == version


def test_newer_cdi_versions_can_be_passed():
    spec = dra.parse_cdi_spec(_spec(cdiVersion="1.2.0"), "/etc/cdi/x.yaml",
                              cdi_versions=dra.CDI_VERSIONS + ("1.2.0",))
    assert spec["cdi_version"] == "1.2.0"


@pytest.mark.parametrize("kind,match", [
    ("nvidia.com", "is not vendor/class"),
    ("/gpu", "is not vendor/class"),
    ("nvidia.com/", "is not vendor/class"),
    (None, "is not vendor/class"),
    ("1nvidia.com/gpu", "invalid vendor '1nvidia.com'"),
    ("nvidia.com-/gpu", "invalid vendor 'nvidia.com-'"),
    ("nvidia.com/g/pu", "invalid class 'g/pu'"),
    ("nvidia.com/gpu_", "invalid class 'gpu_'"),
])
def test_invalid_kind(kind, match):
    with pytest.raises(dra.DraError, match="/etc/cdi/x.yaml: kind .*%s" % match):
        dra.parse_cdi_spec(_spec(kind=kind), "/etc/cdi/x.yaml")


@pytest.mark.parametrize("devices", [[], None, "0"])
def test_spec_without_devices(devices):
    with pytest.raises(dra.DraError, match="/etc/cdi/x.yaml defines no devices"):
        dra.parse_cdi_spec(_spec(devices=devices), "/etc/cdi/x.yaml")


def test_device_without_name():
    with pytest.raises(dra.DraError, match="/etc/cdi/x.yaml: device #1 has no name"):
        dra.parse_cdi_spec(_spec(devices=[{"name": "0"}, {"containerEdits": {}}]), "/etc/cdi/x.yaml")


def test_device_unknown_field():
    with pytest.raises(dra.DraError, match="device '0' has unknown field.*edits; runtimes reject"):
        dra.parse_cdi_spec(_spec(devices=[{"name": "0", "edits": {}}]), "/etc/cdi/x.yaml")


@pytest.mark.parametrize("name", [":0", "0:", "-gpu", "gpu 0", "gpu/0", ""])
def test_invalid_device_name(name):
    with pytest.raises(dra.DraError, match="device name '%s' is invalid" % name):
        dra.parse_cdi_spec(_spec(devices=[{"name": name}]), "/etc/cdi/x.yaml")


@pytest.mark.parametrize("name", ["0", "1:0", "all", "gpu0", "mig1:0", UUID0, "a.b_c-d"])
def test_valid_device_names(name):
    assert dra.parse_cdi_spec(_spec(devices=[{"name": name}]), "/etc/cdi/x.yaml")["devices"] == [name]


def test_duplicate_device_rejects_the_file():
    with pytest.raises(dra.DraError, match="/etc/cdi/x.yaml defines device '0' twice"):
        dra.parse_cdi_spec(_spec(devices=[{"name": "0"}, {"name": "0"}]), "/etc/cdi/x.yaml")


# --- check_dra_cdi ------------------------------------------------------------------------------------------------

CONTAINERD = ["/etc/cdi", "/var/run/cdi"]
GPUS = [{"index": 0, "uuid": UUID0}, {"index": 1, "uuid": UUID1}]


def toolkit(path="/var/run/cdi/nvidia.yaml", devices=("0", "1", UUID0, UUID1, "0:1", "all")):
    return {"path": path, "cdi_version": "0.5.0", "kind": "nvidia.com/gpu", "devices": list(devices)}


def claim(uid="3f1c"):
    return {"path": "/var/run/cdi/k8s.gpu.nvidia.com-claim_%s.yaml" % uid, "cdi_version": "0.5.0",
            "kind": dra.DRA_CDI_KIND, "devices": ["%s-gpu-0" % uid]}


def test_dra_node_needs_no_toolkit_spec():
    status, evidence, remedy = dra.check_dra_cdi([], GPUS, spec_dirs=CONTAINERD)
    assert status == "pass" and remedy == ""
    assert "no nvidia.com/gpu spec" in evidence and "does not use it" in evidence
    assert "k8s.gpu.nvidia.com/claim" in evidence and "/etc/cdi, /var/run/cdi" in evidence


def test_toolkit_spec_required_but_missing():
    status, evidence, remedy = dra.check_dra_cdi([claim()], GPUS, spec_dirs=CONTAINERD, require_toolkit_spec=True)
    assert status == "fail"
    assert "no nvidia.com/gpu spec" in evidence and "required" in evidence
    assert "nvidia-cdi-refresh" in remedy and "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" in remedy


def test_runtime_config_not_given_warns():
    status, evidence, remedy = dra.check_dra_cdi([], GPUS)
    assert status == "warn"
    assert "CDI configuration was not given" in evidence and "/var/run/cdi" in evidence
    assert "cdi_spec_dirs" in remedy


def test_runtime_without_cdi_fails():
    status, evidence, remedy = dra.check_dra_cdi([], GPUS, spec_dirs=[])
    assert status == "fail"
    assert "CDI is disabled" in evidence
    assert "enable_cdi = true" in remedy and "systemctl restart containerd" in remedy


def test_runtime_not_reading_dra_cdi_root_fails():
    status, evidence, remedy = dra.check_dra_cdi([toolkit("/etc/cdi/nvidia.yaml")], GPUS, spec_dirs=["/etc/cdi"])
    assert status == "fail"
    assert "reads CDI specs from /etc/cdi, not from /var/run/cdi" in evidence
    assert "cdi_spec_dirs" in remedy


@pytest.mark.parametrize("dirs", [["/etc/cdi", "/run/cdi"], ["/etc/cdi/", "/var/run/cdi/"], ["/var/run/./cdi"]])
def test_run_and_var_run_are_one_directory(dirs):
    assert dra.check_dra_cdi([], GPUS, spec_dirs=dirs)[0] == "pass"


def test_own_cdi_root():
    assert dra.check_dra_cdi([], GPUS, spec_dirs=["/etc/cdi", "/var/cdi"], cdi_root="/var/cdi")[0] == "pass"
    assert dra.check_dra_cdi([], GPUS, spec_dirs=CONTAINERD, cdi_root="/var/cdi")[0] == "fail"


def test_current_toolkit_spec_passes():
    status, evidence, _remedy = dra.check_dra_cdi([toolkit(), claim()], GPUS, spec_dirs=CONTAINERD)
    assert status == "pass"
    assert "/var/run/cdi/nvidia.yaml list 0, 1" in evidence and "1 per-claim spec" in evidence


@pytest.mark.parametrize("devices", [("0", "1", "all"), (UUID0, UUID1), ("0", UUID1)])
def test_gpu_covered_by_index_or_uuid(devices):
    assert dra.check_dra_cdi([toolkit(devices=devices)], GPUS, spec_dirs=CONTAINERD)[0] == "pass"


def test_stale_toolkit_spec_lacking_a_gpu_warns():
    status, evidence, remedy = dra.check_dra_cdi([toolkit(devices=("0", UUID0, "all"))], GPUS, spec_dirs=CONTAINERD)
    assert status == "warn"
    assert "stale" in evidence and "lacks GPU 1 (%s)" % UUID1 in evidence
    assert "systemctl restart nvidia-cdi-refresh.service" in remedy


def test_stale_toolkit_spec_naming_other_gpus_warns():
    other = "GPU-99999999-0000-0000-0000-000000000000"
    status, evidence, _remedy = dra.check_dra_cdi([toolkit(devices=("0", "1", "2", other))], GPUS,
                                                  spec_dirs=CONTAINERD)
    assert status == "warn"
    assert "names 2, %s, not GPUs of this node" % other in evidence


def test_stale_toolkit_spec_fails_when_required():
    assert dra.check_dra_cdi([toolkit(devices=("0",))], GPUS, spec_dirs=CONTAINERD, require_toolkit_spec=True)[0] \
        == "fail"


def test_mig_entries_are_not_judged():
    spec = toolkit(devices=("0", "1", "5:3", "MIG-ffffffff-0000-0000-0000-000000000000"))
    assert dra.check_dra_cdi([spec], GPUS, spec_dirs=CONTAINERD)[0] == "pass"


def test_toolkit_spec_not_judged_without_expected_gpus():
    assert dra.check_dra_cdi([toolkit(devices=("7",))], None, spec_dirs=CONTAINERD)[0] == "pass"


def test_gpus_nvml_could_not_read_are_not_expected():
    gpus = GPUS + [{"index": 2, "error": "GPU is lost"}]
    assert dra.check_dra_cdi([toolkit()], gpus, spec_dirs=CONTAINERD)[0] == "pass"


def test_broken_spec_warns_with_its_path():
    bad = {"path": "/etc/cdi/nvidia.yaml", "error": "cdiVersion '9.9.9' is not a CDI specification version"}
    status, evidence, remedy = dra.check_dra_cdi([bad], GPUS, spec_dirs=CONTAINERD)
    assert status == "warn"
    assert "/etc/cdi/nvidia.yaml does not load: cdiVersion '9.9.9'" in evidence and "skip" in evidence
    assert "fix or remove /etc/cdi/nvidia.yaml" in remedy


def test_same_directory_duplicate_device_warns():
    a = toolkit("/etc/cdi/nvidia.yaml")
    b = toolkit("/etc/cdi/nvidia-extra.json", devices=("0",))
    status, evidence, remedy = dra.check_dra_cdi([a, b], GPUS, spec_dirs=CONTAINERD)
    assert status == "warn"
    assert "nvidia.com/gpu=0 is defined by both /etc/cdi/nvidia.yaml and /etc/cdi/nvidia-extra.json" in evidence
    assert "drop it" in evidence and "remove the extra file" in remedy


def test_later_directory_overrides_without_conflict():
    a = toolkit("/etc/cdi/nvidia.yaml")
    b = toolkit("/var/run/cdi/nvidia.yaml")
    status, evidence, _remedy = dra.check_dra_cdi([a, b], GPUS, spec_dirs=CONTAINERD)
    assert status == "pass" and "conflict" not in evidence


def test_spec_outside_runtime_dirs_is_noted():
    status, evidence, _remedy = dra.check_dra_cdi([toolkit("/opt/cdi/nvidia.yaml")], GPUS, spec_dirs=CONTAINERD)
    assert status == "pass"
    assert "not in a directory the runtime reads: /opt/cdi/nvidia.yaml" in evidence


# --- check_dra_mig ------------------------------------------------------------------------------------------------

def gpu(index=0, model="NVIDIA H100 80GB HBM3", mig="disabled", partitions=None, virt="none", **kw):
    entry = {"index": index, "uuid": "GPU-%d" % index, "model": model, "mig_capable": True,
             "mig_mode": {"current": mig, "pending": mig}, "mig_devices": dict(partitions or {}),
             "instances": [{"gi_id": i} for i in range(sum((partitions or {}).values()))],
             "virtualization": {"mode": virt}}
    entry.update(kw)
    return entry


def test_dynamic_mig_clean_node_passes():
    status, evidence, remedy = dra.check_dra_mig([gpu(0), gpu(1, mig="enabled")], mig_target_declared=False)
    assert status == "pass" and remedy == ""
    assert evidence.startswith("DynamicMIG: ")
    assert "GPU 0 (GPU-0): MIG mode disabled, no partitions" in evidence


def test_dynamic_mig_with_declared_target_fails():
    status, evidence, remedy = dra.check_dra_mig([gpu(0)], mig_target_declared=True)
    assert status == "fail"
    assert "MIG target is declared" in evidence and "destroys the ones it did not create" in evidence
    assert "node_preflight_mig_config" in remedy and "without DynamicMIG" in remedy


def test_dynamic_mig_target_conflicts_even_without_mig_gpus():
    assert dra.check_dra_mig([], mig_target_declared=True)[0] == "fail"


def test_dynamic_mig_precreated_partitions_fail():
    gpus = [gpu(0, mig="enabled", partitions={"3g.40gb": 1, "1g.10gb": 2}), gpu(1)]
    status, evidence, remedy = dra.check_dra_mig(gpus, mig_target_declared=False)
    assert status == "fail"
    assert "GPU 0 (GPU-0) has pre-created MIG partitions (2x 1g.10gb, 1x 3g.40gb)" in evidence
    assert "would destroy them" in evidence
    assert "nvidia-smi mig -i 0 -dci && nvidia-smi mig -i 0 -dgi" in remedy
    assert "-i 1 " not in remedy


def test_dynamic_mig_instances_without_counted_devices_fail():
    entry = gpu(0, mig="enabled")
    entry["instances"] = [{"gi_id": 1, "compute_instances": []}]
    status, evidence, _remedy = dra.check_dra_mig([entry], mig_target_declared=False)
    assert status == "fail" and "1 GPU instance(s)" in evidence


@pytest.mark.parametrize("model", ["NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe", "NVIDIA A30",
                                   "NVIDIA A800-SXM4-80GB"])
def test_dynamic_mig_ampere_with_mig_off_warns(model):
    status, evidence, remedy = dra.check_dra_mig([gpu(0, model=model)], mig_target_declared=False)
    assert status == "warn"
    assert "cannot switch it without a reset" in evidence and "offers it whole" in evidence
    assert "nvidia-smi -i 0 -mig 1" in remedy and "nvidia-smi -r -i 0" in remedy


def test_dynamic_mig_ampere_with_mig_on_and_no_partitions_passes():
    assert dra.check_dra_mig([gpu(0, model="NVIDIA A100-SXM4-40GB", mig="enabled")], False)[0] == "pass"


@pytest.mark.parametrize("model", ["NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA B200", "NVIDIA GA100X"])
def test_dynamic_mig_hopper_and_newer_switch_mig_on_demand(model):
    assert dra.check_dra_mig([gpu(0, model=model)], False)[0] == "pass"


def test_ampere_models_can_be_passed():
    assert dra.check_dra_mig([gpu(0, model="NVIDIA X1")], False, ampere_models=("X1",))[0] == "warn"


def test_dynamic_mig_vgpu_guest_warns():
    status, evidence, remedy = dra.check_dra_mig([gpu(0, virt="vgpu")], mig_target_declared=False)
    assert status == "warn"
    assert "is a vGPU" in evidence and "skips DynamicMIG" in evidence
    assert "vGPU profile" in remedy


def test_gpu_nvml_could_not_read_fails():
    status, evidence, remedy = dra.check_dra_mig([{"index": 3, "error": "Insufficient Permissions"}], False)
    assert status == "fail"
    assert "GPU 3" in evidence and "Insufficient Permissions" in evidence and "unknown" in evidence
    assert "NVML" in remedy


@pytest.mark.parametrize("dynamic", [True, False])
def test_no_mig_capable_gpu_skips(dynamic):
    plain = {"index": 0, "uuid": "GPU-0", "model": "NVIDIA L40S", "mig_capable": False, "mig_mode": None}
    status, evidence, _remedy = dra.check_dra_mig([plain], mig_target_declared=False, dra_manages_mig=dynamic)
    assert status == "skip" and "no MIG-capable GPU" in evidence


def test_static_mig_partitions_created_by_the_collection_pass():
    gpus = [gpu(0, mig="enabled", partitions={"3g.40gb": 2}), gpu(1)]
    status, evidence, _remedy = dra.check_dra_mig(gpus, mig_target_declared=True, dra_manages_mig=False)
    assert status == "pass"
    assert evidence.startswith("static MIG: ")
    assert "GPU 0 (GPU-0): 2x 3g.40gb (advertised when the GPU kubelet plugin starts)" in evidence
    assert "GPU 1 (GPU-1): MIG mode disabled, offered whole" in evidence


def test_static_mig_enabled_without_partitions_strands_the_gpu():
    gpus = [gpu(0, mig="enabled"), gpu(1, mig="enabled", partitions={"7g.80gb": 1})]
    status, evidence, remedy = dra.check_dra_mig(gpus, mig_target_declared=False, dra_manages_mig=False)
    assert status == "fail"
    assert "GPU 0 (GPU-0) has MIG mode enabled but no MIG partitions" in evidence
    assert "neither the whole GPU nor any partition" in evidence
    assert "GPU 1" not in remedy and "nvidia-smi -i 0 -mig 0" in remedy and "mig_reconfigure.yml" in remedy


def test_static_mig_ignores_the_dynamic_rules():
    # Pre-created partitions are what static MIG wants; an Ampere GPU with MIG off is simply offered whole.
    gpus = [gpu(0, model="NVIDIA A100-SXM4-40GB"), gpu(1, mig="enabled", partitions={"1g.10gb": 7}, virt="vgpu")]
    assert dra.check_dra_mig(gpus, mig_target_declared=True, dra_manages_mig=False)[0] == "pass"


# --- whole records: every word a user reads -----------------------------------------------------------------------

def _raises(message):
    """pytest.raises for exactly this DraError message."""
    return pytest.raises(dra.DraError, match="^%s$" % re.escape(message))


DRIVER_REMEDY = ("install NVIDIA driver %s or newer (set nvidia_driver_version and run playbooks/driver_pin.yml with "
                 "driver_pin_mode=converge), drain the node and reboot")
IMEX_REMEDY = ("; or deploy the DRA driver with featureGates.IMEXDaemonsWithDNSNames=false (IMEX daemons then use IP "
               "addresses) and declare the minimum that applies")
WHY_GPU = "the minimum the DRA driver documents for GPU allocation"
WHY_CD = ("the minimum the DRA driver's ComputeDomain kubelet plugin enforces when it starts (feature gate "
          "IMEXDaemonsWithDNSNames, on by default)")


def test_driver_records_gpu_allocation():
    assert dra.check_dra_driver("564.99.99") == (
        "fail", "driver 564.99.99 is older than 565, " + WHY_GPU, DRIVER_REMEDY % "565")
    assert dra.check_dra_driver("565.57.01-0ubuntu1") == ("pass", "driver 565.57.01 >= 565, " + WHY_GPU, "")
    assert dra.check_dra_driver(None) == (
        "fail", "no NVIDIA driver version was read (the DRA driver needs 565 or newer)", DRIVER_REMEDY % "565")
    assert dra.check_dra_driver("nvidia-latest") == (
        "fail", "the driver version is not understood: package version 'nvidia-latest' must start with a digit after "
        "the epoch", DRIVER_REMEDY % "565")


@pytest.mark.parametrize("minimum", [None, ""])
def test_driver_records_compute_domains(minimum):
    # An empty minimum is no minimum: the ComputeDomain floor applies and the feature-gate way out is offered.
    assert dra.check_dra_driver("570.158.00", compute_domains=True, minimum=minimum) == (
        "fail", "driver 570.158.00 is older than 570.158.01, " + WHY_CD, DRIVER_REMEDY % "570.158.01" + IMEX_REMEDY)
    assert dra.check_dra_driver("570.158.1", compute_domains=True, minimum=minimum) == (
        "pass", "driver 570.158.1 >= 570.158.01, " + WHY_CD, "")


@pytest.mark.parametrize("minimum", ["565", "R565", "r565", " R565 "])
def test_driver_records_declared_branch_minimum(minimum):
    # A branch floor is shown as the branch number, whatever the R prefix's case; no feature-gate way out is offered
    # once a minimum is declared, even for ComputeDomains.
    assert dra.check_dra_driver("565.57.01", compute_domains=True, minimum=minimum) == (
        "pass", "driver 565.57.01 >= 565, the declared minimum", "")
    assert dra.check_dra_driver("560.35.03", compute_domains=True, minimum=minimum) == (
        "fail", "driver 560.35.03 is older than 565, the declared minimum", DRIVER_REMEDY % "565")


def test_bad_minimum_message():
    with _raises("minimum driver version: driver version 'latest' is not an NVIDIA driver version (expected e.g. "
                 "535.261.03)"):
        dra.check_dra_driver("570.158.01", minimum="latest")


@pytest.mark.parametrize("path,shown", [("/etc/cdi/nvidia.yml", "/etc/cdi/nvidia.yml"), (None, "(no path)"),
                                        ("", "(no path)")])
def test_parse_message_other_extension(path, shown):
    with _raises("CDI spec %s is never read: runtimes load only *.json and *.yaml files from a CDI directory" % shown):
        dra.parse_cdi_spec(_spec(), path)


def test_parse_message_not_utf8():
    with _raises("CDI spec /etc/cdi/x.yaml is not UTF-8 text: 'utf-8' codec can't decode byte 0xff in position 0: "
                 "invalid start byte"):
        dra.parse_cdi_spec(b"\xff\xfe", "/etc/cdi/x.yaml")


def test_parse_message_invalid_yaml_on_one_line():
    # PyYAML's multi-line problem mark is folded onto one line of the message.
    with _raises("CDI spec /etc/cdi/nvidia.yaml is not valid YAML or JSON: while parsing a flow sequence in "
                 "\"<unicode string>\", line 1, column 13: cdiVersion: [0.5.0 ^ expected ',' or ']', but got ':' in "
                 "\"<unicode string>\", line 2, column 5: kind: x ^"):
        dra.parse_cdi_spec("cdiVersion: [0.5.0\nkind: x", "/etc/cdi/nvidia.yaml")


def test_parse_without_pyyaml(monkeypatch):
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml now raises ImportError
    with _raises("CDI spec /etc/cdi/x.yaml: PyYAML is needed to read it (pass the parsed data instead)"):
        dra.parse_cdi_spec("cdiVersion: 0.5.0", "/etc/cdi/x.yaml")
    assert dra.parse_cdi_spec(_spec(), "/etc/cdi/x.yaml")["devices"] == ["0"]


@pytest.mark.parametrize("text,found", [("", "NoneType"), ("- 1\n", "list"), ("just a string", "str")])
def test_parse_message_not_a_mapping(text, found):
    with _raises("CDI spec /etc/cdi/x.yaml is not a mapping with cdiVersion, kind and devices (found %s)" % found):
        dra.parse_cdi_spec(text, "/etc/cdi/x.yaml")


def test_parse_message_unknown_fields():
    data = _spec(version="1", device=[])
    with _raises("CDI spec /etc/cdi/x.yaml has unknown field(s) device, version; runtimes reject the whole file "
                 "(known: cdiVersion, kind, annotations, devices, containerEdits)"):
        dra.parse_cdi_spec(data, "/etc/cdi/x.yaml")


@pytest.mark.parametrize("version,found", [(None, "None"), ("", "''"), (" ", "' '"), (0.5, "0.5")])
def test_parse_message_no_cdi_version(version, found):
    with _raises("CDI spec /etc/cdi/x.yaml has no cdiVersion string (found %s)" % found):
        dra.parse_cdi_spec(_spec(cdiVersion=version), "/etc/cdi/x.yaml")


@pytest.mark.parametrize("version", ["1.2.0", "V1.0.0", "X1.0.0"])
def test_parse_message_unknown_cdi_version(version):
    # Only a lowercase "v" prefix is read as the version's (sigs.k8s.io semver style); anything else is no version.
    with _raises("CDI spec /etc/cdi/x.yaml: cdiVersion %r is not a CDI specification version (known: 0.1.0, 0.2.0, "
                 "0.3.0, 0.4.0, 0.5.0, 0.6.0, 0.7.0, 0.8.0, 1.0.0, 1.1.0)" % version):
        dra.parse_cdi_spec(_spec(cdiVersion=version), "/etc/cdi/x.yaml")


def test_parse_message_kind():
    with _raises("CDI spec /etc/cdi/x.yaml: kind 'nvidia.com' is not vendor/class (e.g. nvidia.com/gpu)"):
        dra.parse_cdi_spec(_spec(kind="nvidia.com"), "/etc/cdi/x.yaml")
    with _raises("CDI spec /etc/cdi/x.yaml: kind 'nvidia.com/gpu_' has an invalid class 'gpu_' (a letter first, then "
                 "letters, digits, '_', '-', '.', ending with a letter or digit)"):
        dra.parse_cdi_spec(_spec(kind="nvidia.com/gpu_"), "/etc/cdi/x.yaml")


def test_parse_message_devices():
    path = "/etc/cdi/x.yaml"
    with _raises("CDI spec /etc/cdi/x.yaml defines no devices; runtimes reject a spec without devices"):
        dra.parse_cdi_spec(_spec(devices=[]), path)
    with _raises("CDI spec /etc/cdi/x.yaml: device #0 has no name"):
        dra.parse_cdi_spec(_spec(devices=["0"]), path)
    with _raises("CDI spec /etc/cdi/x.yaml: device '0' has unknown field(s) edits, env; runtimes reject the whole "
                 "file"):
        dra.parse_cdi_spec(_spec(devices=[{"name": "0", "env": [], "edits": {}}]), path)
    with _raises("CDI spec /etc/cdi/x.yaml: device name ':0' is invalid (letters, digits, '_', '-', '.', ':', "
                 "beginning and ending with a letter or digit)"):
        dra.parse_cdi_spec(_spec(devices=[{"name": ":0"}]), path)
    with _raises("CDI spec /etc/cdi/x.yaml defines device 'all' twice; runtimes reject the whole file"):
        dra.parse_cdi_spec(_spec(devices=[{"name": "all"}, {"name": "0"}, {"name": "all"}]), path)


RUNTIME_REMEDY = ("enable CDI and read %s: containerd 2.x [plugins.'io.containerd.cri.v1.runtime'] (1.7: "
                  "[plugins.\"io.containerd.grpc.v1.cri\"]) enable_cdi = true, cdi_spec_dirs = [\"/etc/cdi\", "
                  "\"/var/run/cdi\"], then systemctl restart containerd; CRI-O: cdi_spec_dirs in [crio.runtime], then "
                  "systemctl restart crio")
GENERATE = ("systemctl restart nvidia-cdi-refresh.service (toolkit 1.18+, writes /var/run/cdi/nvidia.yaml) or "
            "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml")
NO_TOOLKIT = "no nvidia.com/gpu spec of the NVIDIA Container Toolkit"
NOT_USED = NO_TOOLKIT + " (the DRA driver does not use it: it writes k8s.gpu.nvidia.com/claim specs per claim)"
READS = "the runtime reads CDI specs from /etc/cdi, /var/run/cdi"
ALL_NAMES = "0, 1, %s, %s, 0:1, all" % (UUID0, UUID1)


def test_cdi_record_runtime_not_gathered():
    assert dra.check_dra_cdi([], GPUS) == (
        "warn", "the container runtime's CDI configuration was not given: not confirmed that it reads /var/run/cdi; "
        + NOT_USED,
        "gather the runtime's CDI settings (containerd: enable_cdi and cdi_spec_dirs in /etc/containerd/config.toml; "
        "CRI-O: cdi_spec_dirs)")


def test_cdi_record_cdi_disabled_and_toolkit_spec_required():
    assert dra.check_dra_cdi([], GPUS, spec_dirs=[], require_toolkit_spec=True) == (
        "fail", "CDI is disabled in the container runtime (no CDI spec directory): the DRA driver cannot inject GPUs; "
        + NO_TOOLKIT + ", and it is required",
        RUNTIME_REMEDY % "/var/run/cdi" + "; install nvidia-container-toolkit-base, then " + GENERATE)


def test_cdi_record_runtime_reads_other_directories():
    assert dra.check_dra_cdi([], GPUS, spec_dirs=["/etc/cdi", "/opt/cdi"], cdi_root="/srv/cdi") == (
        "fail", "the container runtime reads CDI specs from /etc/cdi, /opt/cdi, not from /srv/cdi where the DRA "
        "driver's GPU kubelet plugin writes its per-claim specs; " + NOT_USED, RUNTIME_REMEDY % "/srv/cdi")


@pytest.mark.parametrize("dirs,root", [(["/run"], "/var/run"), (["/var/run"], "/run"), (["/run/cdi"], "/var/run/cdi")])
def test_cdi_var_run_itself_is_run(dirs, root):
    assert dra.check_dra_cdi([], GPUS, spec_dirs=dirs, cdi_root=root)[0] == "pass"


def test_cdi_record_pass_with_toolkit_specs_and_claims():
    specs = [toolkit("/etc/cdi/nvidia.yaml", devices=("0", UUID0)), toolkit(devices=("1", UUID1, "all")),
             claim("3f1c"), claim("9a2b")]
    assert dra.check_dra_cdi(specs, GPUS, spec_dirs=CONTAINERD) == (
        "pass", READS + "; 2 per-claim spec(s) of the DRA driver (k8s.gpu.nvidia.com/claim); toolkit spec(s) "
        "/etc/cdi/nvidia.yaml, /var/run/cdi/nvidia.yaml list 0, %s, 1, %s, all" % (UUID0, UUID1), "")


def test_cdi_record_specs_outside_the_runtime_dirs():
    specs = [toolkit("/opt/cdi/nvidia.yaml"), dict(claim(), path="/opt/cdi/k8s.gpu.nvidia.com-claim_3f1c.yaml")]
    assert dra.check_dra_cdi(specs, GPUS, spec_dirs=CONTAINERD) == (
        "pass", READS + "; not in a directory the runtime reads: /opt/cdi/nvidia.yaml, "
        "/opt/cdi/k8s.gpu.nvidia.com-claim_3f1c.yaml; 1 per-claim spec(s) of the DRA driver "
        "(k8s.gpu.nvidia.com/claim); toolkit spec(s) /opt/cdi/nvidia.yaml list " + ALL_NAMES, "")


def test_cdi_record_stale_spec_lacking_gpus():
    assert dra.check_dra_cdi([toolkit(devices=("0", UUID0, "all"))], GPUS, spec_dirs=CONTAINERD) == (
        "warn", "the toolkit spec is stale: lacks GPU 1 (%s); %s; toolkit spec(s) /var/run/cdi/nvidia.yaml list "
        "0, %s, all" % (UUID1, READS, UUID0), "regenerate the toolkit spec: " + GENERATE)


def test_cdi_record_stale_spec_naming_other_gpus():
    other = "GPU-99999999-0000-0000-0000-000000000000"
    assert dra.check_dra_cdi([toolkit(devices=("0", "1", "7", other))], GPUS, spec_dirs=CONTAINERD) == (
        "warn", "the toolkit spec is stale: names 7, %s, not GPUs of this node; %s; toolkit spec(s) "
        "/var/run/cdi/nvidia.yaml list 0, 1, 7, %s" % (other, READS, other), "regenerate the toolkit spec: " + GENERATE)


def test_cdi_record_stale_spec_both_ways_fails_when_required():
    gpus = GPUS + [{"index": 5}]  # NVML gave no UUID: the GPU is named by its index only
    status, evidence, remedy = dra.check_dra_cdi([toolkit(devices=("0", "7"))], gpus, spec_dirs=CONTAINERD,
                                                 require_toolkit_spec=True)
    assert (status, remedy) == ("fail", "regenerate the toolkit spec: " + GENERATE)
    assert evidence == ("the toolkit spec is stale: lacks GPU 1 (%s), GPU 5 (no UUID); names 7, not GPUs of this "
                        "node; %s; toolkit spec(s) /var/run/cdi/nvidia.yaml list 0, 7" % (UUID1, READS))


def test_cdi_record_broken_spec_and_conflict():
    bad = {"path": "/etc/cdi/broken.yaml", "error": "cdiVersion '9.9.9' is not a CDI specification version"}
    specs = [bad, toolkit("/etc/cdi/nvidia.yaml"), toolkit("/etc/cdi/nvidia-extra.json", devices=("0",))]
    assert dra.check_dra_cdi(specs, GPUS, spec_dirs=CONTAINERD) == (
        "warn", "/etc/cdi/broken.yaml does not load: cdiVersion '9.9.9' is not a CDI specification version; runtimes "
        "skip it; device nvidia.com/gpu=0 is defined by both /etc/cdi/nvidia.yaml and /etc/cdi/nvidia-extra.json; "
        "runtimes drop it as a conflict; %s; toolkit spec(s) /etc/cdi/nvidia.yaml, /etc/cdi/nvidia-extra.json list "
        "%s, 0" % (READS, ALL_NAMES),
        "fix or remove /etc/cdi/broken.yaml (a toolkit spec: regenerate it with systemctl restart "
        "nvidia-cdi-refresh.service or nvidia-ctk cdi generate --output=<path>); keep one spec per device in a "
        "directory: remove the extra file among /etc/cdi/nvidia.yaml, /etc/cdi/nvidia-extra.json")


NVML_REMEDY = "make NVML answer for every GPU (gpu_info as root; see check driver_version)"
VGPU_REMEDY = "size the partition with the vGPU profile instead, or run without DynamicMIG"


def test_mig_record_dynamic_clean_node():
    assert dra.check_dra_mig([gpu(0), gpu(1, mig="enabled")], mig_target_declared=False) == (
        "pass", "DynamicMIG: GPU 0 (GPU-0): MIG mode disabled, no partitions (the DRA driver creates them per claim); "
        "GPU 1 (GPU-1): MIG mode enabled, no partitions (the DRA driver creates them per claim)", "")


def test_mig_record_unreadable_gpus_named_by_uuid_model_or_index():
    # A GPU NVML could not read is none of the MIG GPUs (its model says nothing about its MIG state); the remedy,
    # the same for each such GPU, is given once.
    gpus = [{"index": 3, "model": "NVIDIA A100-PCIE-40GB", "mig_capable": True, "error": "Insufficient Permissions"},
            {"index": 4, "mig_mode": {"current": "enabled"}, "error": "GPU is lost"},
            {"index": 5, "uuid": "GPU-5", "model": "NVIDIA A30", "error": "Unknown Error"}, gpu(0)]
    assert dra.check_dra_mig(gpus, mig_target_declared=False) == (
        "fail", "DynamicMIG: GPU 3 (NVIDIA A100-PCIE-40GB): NVML did not answer (Insufficient Permissions), its MIG "
        "partitions are unknown; GPU 4 (?): NVML did not answer (GPU is lost), its MIG partitions are unknown; "
        "GPU 5 (GPU-5): NVML did not answer (Unknown Error), its MIG partitions are unknown; GPU 0 (GPU-0): MIG mode "
        "disabled, no partitions (the DRA driver creates them per claim)", NVML_REMEDY)


def test_mig_record_dynamic_target_and_precreated_partitions():
    gpus = [gpu(0, mig="enabled", partitions={"3g.40gb": 1, "1g.10gb": 2}),
            gpu(1, mig="enabled", partitions={"7g.80gb": 1})]
    assert dra.check_dra_mig(gpus, mig_target_declared=True) == (
        "fail", "DynamicMIG: a MIG target is declared for this node, but with DynamicMIG the DRA driver creates MIG "
        "partitions per claim and destroys the ones it did not create when it starts; GPU 0 (GPU-0) has pre-created "
        "MIG partitions (2x 1g.10gb, 1x 3g.40gb); the DRA driver would destroy them when it starts; GPU 1 (GPU-1) has "
        "pre-created MIG partitions (1x 7g.80gb); the DRA driver would destroy them when it starts",
        "remove this node's MIG target (node_preflight_mig_config, mig_reconfigure_config) so the collection creates "
        "no partitions, or run the DRA driver without DynamicMIG; destroy them before the DRA driver starts, with no "
        "GPU processes: nvidia-smi mig -i 0 -dci && nvidia-smi mig -i 0 -dgi; nvidia-smi mig -i 1 -dci && "
        "nvidia-smi mig -i 1 -dgi; or keep them and run the DRA driver without DynamicMIG")


def test_mig_record_dynamic_instances_only():
    entry = gpu(2, mig="enabled", partitions={"1g.10gb": 0})
    entry["instances"] = [{"gi_id": 1}, {"gi_id": 2}]
    assert dra.check_dra_mig([entry], mig_target_declared=False) == (
        "fail", "DynamicMIG: GPU 2 (GPU-2) has pre-created MIG partitions (2 GPU instance(s)); the DRA driver would "
        "destroy them when it starts", "destroy them before the DRA driver starts, with no GPU processes: nvidia-smi "
        "mig -i 2 -dci && nvidia-smi mig -i 2 -dgi; or keep them and run the DRA driver without DynamicMIG")


def test_mig_record_dynamic_warnings():
    # MIG-capable without a reported MIG mode, or a reported MIG mode without the capability flag: both are MIG GPUs.
    gpus = [gpu(0, model="NVIDIA A100-SXM4-40GB"), gpu(1, model="NVIDIA A30", mig_mode=None),
            gpu(2, virt="vgpu"), gpu(3, virt="vgpu"), gpu(4, mig="enabled", mig_capable=False)]
    assert dra.check_dra_mig(gpus, mig_target_declared=False) == (
        "warn", "DynamicMIG: GPU 0 (GPU-0) (NVIDIA A100-SXM4-40GB) has MIG mode disabled: an Ampere GPU cannot switch "
        "it without a reset, so the DRA driver offers it whole, with no MIG partitions; GPU 1 (GPU-1) (NVIDIA A30) has "
        "MIG mode unknown: an Ampere GPU cannot switch it without a reset, so the DRA driver offers it whole, with no "
        "MIG partitions; GPU 2 (GPU-2) is a vGPU: the DRA driver skips DynamicMIG on it; GPU 3 (GPU-3) is a vGPU: the "
        "DRA driver skips DynamicMIG on it; GPU 4 (GPU-4): MIG mode enabled, no partitions (the DRA driver creates "
        "them per claim)",
        "enable MIG mode before the DRA driver starts: nvidia-smi -i 0 -mig 1, then nvidia-smi -r -i 0 or reboot; "
        "enable MIG mode before the DRA driver starts: nvidia-smi -i 1 -mig 1, then nvidia-smi -r -i 1 or reboot; "
        + VGPU_REMEDY)


def test_mig_record_dynamic_mig_mode_unknown_on_hopper():
    assert dra.check_dra_mig([gpu(0, mig_mode={})], mig_target_declared=False) == (
        "pass", "DynamicMIG: GPU 0 (GPU-0): MIG mode unknown, no partitions (the DRA driver creates them per claim)", "")


def test_mig_record_static():
    gpus = [gpu(0, mig="enabled"), gpu(1, mig="enabled", partitions={"7g.80gb": 1}), gpu(2, mig_mode=None),
            gpu(3, mig="enabled"), gpu(4, mig="disabled", mig_capable=False)]
    assert dra.check_dra_mig(gpus, mig_target_declared=True, dra_manages_mig=False) == (
        "fail", "static MIG: GPU 0 (GPU-0) has MIG mode enabled but no MIG partitions: the DRA driver offers neither "
        "the whole GPU nor any partition; GPU 3 (GPU-3) has MIG mode enabled but no MIG partitions: the DRA driver "
        "offers neither the whole GPU nor any partition; GPU 1 (GPU-1): 1x 7g.80gb (advertised when the GPU kubelet "
        "plugin starts); GPU 2 (GPU-2): MIG mode unknown, offered whole; GPU 4 (GPU-4): MIG mode disabled, offered "
        "whole",
        "create the partitions before the DRA driver's GPU kubelet plugin starts (declare the MIG target and run "
        "playbooks/mig_reconfigure.yml), or disable MIG mode: nvidia-smi -i 0 -mig 0, then nvidia-smi -r -i 0; restart "
        "the plugin after any MIG change; create the partitions before the DRA driver's GPU kubelet plugin starts "
        "(declare the MIG target and run playbooks/mig_reconfigure.yml), or disable MIG mode: nvidia-smi -i 3 -mig 0, "
        "then nvidia-smi -r -i 3; restart the plugin after any MIG change")


@pytest.mark.parametrize("dynamic,mode", [(True, "DynamicMIG"), (False, "static MIG")])
def test_mig_record_skip(dynamic, mode):
    plain = {"index": 0, "uuid": "GPU-0", "model": "NVIDIA L40S", "mig_capable": False, "mig_mode": None}
    assert dra.check_dra_mig([plain], False, dra_manages_mig=dynamic) == ("skip", "no MIG-capable GPU (%s)" % mode, "")
    assert dra.check_dra_mig(None, False, dra_manages_mig=dynamic) == ("skip", "no MIG-capable GPU (%s)" % mode, "")


# --- issue 37 point 7: the runtime and the kubelet, read on the node --------------------------------------------------
# prerequisites.md: Kubernetes v1.32+, CDI enabled in the runtime ("the default in containerd 2.0+ and CRI-O v1.27+").
CTD2 = "containerd github.com/containerd/containerd/v2 v2.0.4 1a43cb6a1035441f9aca8f5666a9b3ef9e70ab20"
CTD17 = "containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da"
CTD16 = "containerd github.com/containerd/containerd v1.6.33 d2d58213f83a351ca8f528a95fbd145f5654e957"
V2_DEFAULT = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.k8s.io/pause:3.8"\n'
V2_CDI = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n  cdi_spec_dirs = ["/var/run/cdi"]\n'
V3_DEFAULT = 'version = 3\n[plugins."io.containerd.cri.v1.runtime"]\n  enable_selinux = false\n'
V3_OFF = 'version = 3\n[plugins."io.containerd.cri.v1.runtime"]\n  enable_cdi = false\n'


@pytest.mark.parametrize("text, version", [
    (CTD2, (2, 0, 4)), (CTD17, (1, 7, 27)), ("crio version 1.26.3\n", (1, 26, 3)),
    ("INFO[0000] Starting CRI-O\nVersion:        1.30.4\nGitCommit:      abc\n", (1, 30, 4)),
    ("Kubernetes v1.33.2", (1, 33, 2)), ("Kubernetes v1.34", (1, 34, 0)), ("", None), (None, None),
    ("sh: 1: containerd: not found", None), ("GitCommit: 1.2.3", None),
])
def test_parse_runtime_version(text, version):
    assert dra.parse_runtime_version(text) == version


@pytest.mark.parametrize("ctd, config, kubelet, enabled, dirs, fails, warns", [
    (CTD2, V3_DEFAULT, "Kubernetes v1.34.1", True, ["/etc/cdi", "/var/run/cdi"], [], []),
    # a version 2 file under containerd 2.x: migrated, still on by default
    (CTD2, V2_DEFAULT, "Kubernetes v1.34.1", True, ["/etc/cdi", "/var/run/cdi"], [], []),
    (CTD2, V3_OFF, "Kubernetes v1.34.1", False, [], ["containerd 2.0.4 runs with enable_cdi = false"], []),
    (CTD17, V2_DEFAULT, "Kubernetes v1.34.1", False, [],
     ["containerd 1.7.27 runs with enable_cdi = false (its default before 2.0)"], []),
    (CTD17, V2_CDI, "Kubernetes v1.33.2", True, ["/var/run/cdi"], [],
     ["Kubernetes 1.33.2: DRA is beta before 1.34, so the DynamicResourceAllocation feature gate and the "
      "resource.k8s.io API must be on"]),
    (CTD16, V2_CDI, "Kubernetes v1.31.4", False, [],
     ["containerd 1.6.33 has no CDI (from 1.7; on by default from 2.0)", "Kubernetes 1.31.4 is older than the DRA "
      "driver's 1.32"], []),
    (CTD2, V3_DEFAULT, "", True, ["/etc/cdi", "/var/run/cdi"], [],
     ["the kubelet's version could not be read (kubelet --version)"]),
])
def test_runtime_cdi_containerd(ctd, config, kubelet, enabled, dirs, fails, warns):
    out = dra.runtime_cdi(ctd, config, None, None, kubelet)
    assert (out["runtime"], out["enabled"], out["spec_dirs"], out["fails"], out["warns"]) == (
        "containerd", enabled, dirs, fails, warns)


def test_runtime_cdi_crio_and_none_and_bad_config():
    ok = dra.runtime_cdi("", "", "crio version 1.27.1", '[crio.runtime]\ncdi_spec_dirs = ["/etc/cdi"]\n', "Kubernetes v1.34.0")
    assert (ok["runtime"], ok["version"], ok["enabled"], ok["spec_dirs"], ok["fails"]) == ("cri-o", "1.27.1", True, ["/etc/cdi"], [])
    assert dra.runtime_cdi(None, None, "Version: 1.28.0", None, "Kubernetes v1.34.0")["spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    old = dra.runtime_cdi(None, None, "crio version 1.26.3", None, "Kubernetes v1.34.0")
    assert old["enabled"] is False and old["fails"] == ["CRI-O 1.26.3 does not enable CDI (from 1.27)"]
    none = dra.runtime_cdi("", "", "", "", "Kubernetes v1.34.0")
    assert none["runtime"] is None and none["fails"] == ["no container runtime answers (containerd --version, crio --version)"]
    with pytest.raises(dra.DraError, match=r"^containerd's configuration is not TOML: "):
        dra.runtime_cdi(CTD2, "version = = 3", None, None, "")


def test_dra_cdi_with_the_runtime_read_fails_containerd_17_default():
    runtime = dra.runtime_cdi(CTD17, V2_DEFAULT, None, None, "Kubernetes v1.34.1")
    status, evidence, remedy = dra.check_dra_cdi([], None, None, runtime=runtime)
    assert status == "fail"
    assert evidence.startswith("containerd 1.7.27 runs with enable_cdi = false (its default before 2.0); CDI is disabled")
    assert "containerd 1.7.27, CDI disabled, Kubernetes 1.34.1" in evidence
    assert remedy.startswith("run containerd 2.x or CRI-O 1.27+ (or set enable_cdi = true in containerd 1.7's")
    good = dra.runtime_cdi(CTD2, V3_DEFAULT, None, None, "Kubernetes v1.34.1")
    status, evidence, remedy = dra.check_dra_cdi([], None, None, runtime=good)
    assert status == "pass" and "the runtime reads CDI specs from /etc/cdi, /var/run/cdi" in evidence and remedy == ""
    # directories stated by the user win over the runtime's
    status, evidence, _r = dra.check_dra_cdi([], None, ["/etc/cdi"], runtime=good)
    assert status == "fail" and "not from /var/run/cdi" in evidence
