# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/_dra.py: DRA driver minimum driver versions, CDI specs and MIG ownership."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils import _dra


# --- driver versions ----------------------------------------------------------------------------------------------

def test_minimum_constants_are_upstreams():
    assert _dra.MIN_DRIVER_GPU == "565"
    assert _dra.MIN_DRIVER_COMPUTE_DOMAINS == "570.158.01"
    assert _dra.GPU_OPERATOR_MIN_DRIVER == "580"


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
    got, evidence, remedy = _dra.check_dra_driver(version)
    assert got == status
    assert "565" in evidence
    assert (remedy != "") is (status == "fail")


def test_gpu_allocation_below_minimum_says_what_to_do():
    status, evidence, remedy = _dra.check_dra_driver("564.99.99")
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
    got, evidence, remedy = _dra.check_dra_driver(version, compute_domains=True)
    assert got == status
    assert "570.158.01" in evidence and "IMEXDaemonsWithDNSNames" in evidence


def test_compute_domains_below_minimum_names_the_feature_gate():
    status, evidence, remedy = _dra.check_dra_driver("570.158.00", compute_domains=True)
    assert status == "fail"
    assert "570.158.00 is older than 570.158.01" in evidence
    assert "featureGates.IMEXDaemonsWithDNSNames=false" in remedy and "570.158.01 or newer" in remedy


@pytest.mark.parametrize("version,status", [("575.57.08", "fail"), ("580.65.06", "pass")])
def test_minimum_override_gpu_operator(version, status):
    got, evidence, _remedy = _dra.check_dra_driver(version, minimum=_dra.GPU_OPERATOR_MIN_DRIVER)
    assert got == status
    assert "declared minimum" in evidence and "580" in evidence


def test_minimum_override_wins_over_compute_domains():
    assert _dra.check_dra_driver("565.57.01", compute_domains=True, minimum="R565")[0] == "pass"
    assert _dra.check_dra_driver("570.158.01", minimum="570.172.08")[0] == "fail"


@pytest.mark.parametrize("value", [None, ""])
def test_missing_driver_version_fails(value):
    status, evidence, remedy = _dra.check_dra_driver(value)
    assert status == "fail"
    assert "no NVIDIA driver version" in evidence and "565" in evidence
    assert "driver_pin.yml" in remedy


def test_unparsable_driver_version_fails():
    status, evidence, _remedy = _dra.check_dra_driver("nvidia-latest")
    assert status == "fail"
    assert "not understood" in evidence and "nvidia-latest" in evidence


def test_bad_minimum_raises():
    with pytest.raises(_dra.DraError, match="minimum driver version.*latest"):
        _dra.check_dra_driver("570.158.01", minimum="latest")


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
    spec = _dra.parse_cdi_spec(TOOLKIT_YAML, "/etc/cdi/nvidia.yaml")
    assert spec == {"path": "/etc/cdi/nvidia.yaml", "cdi_version": "0.5.0", "kind": "nvidia.com/gpu",
                    "devices": ["0", "0:1", UUID0, "MIG-0c0e1d2f-1111-2222-3333-444455556666", "all"]}


def test_parse_json_spec_bytes_and_parsed_data():
    data = {"cdiVersion": "v0.6.0", "kind": "k8s.gpu.nvidia.com/claim",
            "devices": [{"name": "3f1c-gpu-0", "containerEdits": {}}]}
    for text in (json.dumps(data), json.dumps(data).encode("utf-8"), data):
        spec = _dra.parse_cdi_spec(text, "/var/run/cdi/k8s.gpu.nvidia.com-claim_3f1c.json")
        assert spec["kind"] == _dra.DRA_CDI_KIND and spec["devices"] == ["3f1c-gpu-0"]
        assert spec["cdi_version"] == "v0.6.0"


def _spec(**kw):
    data = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [{"name": "0", "containerEdits": {}}]}
    data.update(kw)
    return data


@pytest.mark.parametrize("path", ["/etc/cdi/nvidia.yml", "/etc/cdi/nvidia", "/etc/cdi/nvidia.yaml.bak"])
def test_spec_with_other_extension_is_never_read(path):
    with pytest.raises(_dra.DraError, match=r"%s is never read.*\*\.json and \*\.yaml" % path):
        _dra.parse_cdi_spec(_spec(), path)


def test_invalid_yaml_names_the_file():
    with pytest.raises(_dra.DraError, match="/etc/cdi/nvidia.yaml is not valid YAML or JSON"):
        _dra.parse_cdi_spec("cdiVersion: [0.5.0\nkind: x", "/etc/cdi/nvidia.yaml")


def test_non_utf8_bytes():
    with pytest.raises(_dra.DraError, match="/etc/cdi/x.yaml is not UTF-8"):
        _dra.parse_cdi_spec(b"\xff\xfe", "/etc/cdi/x.yaml")


@pytest.mark.parametrize("text", ["", "- 1\n- 2\n", "just a string"])
def test_spec_must_be_a_mapping(text):
    with pytest.raises(_dra.DraError, match="/etc/cdi/x.yaml is not a mapping"):
        _dra.parse_cdi_spec(text, "/etc/cdi/x.yaml")


def test_unknown_top_level_field_rejects_the_file():
    data = _spec()
    data["device"] = data.pop("devices")
    with pytest.raises(_dra.DraError, match="/etc/cdi/x.yaml has unknown field.*device; runtimes reject"):
        _dra.parse_cdi_spec(data, "/etc/cdi/x.yaml")


@pytest.mark.parametrize("version", [None, "", 0.5])
def test_cdi_version_required_as_string(version):
    with pytest.raises(_dra.DraError, match="/etc/cdi/x.yaml has no cdiVersion"):
        _dra.parse_cdi_spec(_spec(cdiVersion=version), "/etc/cdi/x.yaml")


@pytest.mark.parametrize("version", ["0.0.9", "1.2.0", "2.0.0", "0.5"])
def test_unknown_cdi_version(version):
    with pytest.raises(_dra.DraError, match="cdiVersion '%s' is not a CDI specification version" % version):
        _dra.parse_cdi_spec(_spec(cdiVersion=version), "/etc/cdi/x.yaml")


@pytest.mark.parametrize("version", ["0.1.0", "0.3.0", "0.8.0", "1.0.0", "1.1.0"])
def test_known_cdi_versions(version):
    assert _dra.parse_cdi_spec(_spec(cdiVersion=version), "/etc/cdi/x.yaml")["cdi_version"] == version


def test_newer_cdi_versions_can_be_passed():
    spec = _dra.parse_cdi_spec(_spec(cdiVersion="1.2.0"), "/etc/cdi/x.yaml",
                               cdi_versions=_dra.CDI_VERSIONS + ("1.2.0",))
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
    with pytest.raises(_dra.DraError, match="/etc/cdi/x.yaml: kind .*%s" % match):
        _dra.parse_cdi_spec(_spec(kind=kind), "/etc/cdi/x.yaml")


@pytest.mark.parametrize("devices", [[], None, "0"])
def test_spec_without_devices(devices):
    with pytest.raises(_dra.DraError, match="/etc/cdi/x.yaml defines no devices"):
        _dra.parse_cdi_spec(_spec(devices=devices), "/etc/cdi/x.yaml")


def test_device_without_name():
    with pytest.raises(_dra.DraError, match="/etc/cdi/x.yaml: device #1 has no name"):
        _dra.parse_cdi_spec(_spec(devices=[{"name": "0"}, {"containerEdits": {}}]), "/etc/cdi/x.yaml")


def test_device_unknown_field():
    with pytest.raises(_dra.DraError, match="device '0' has unknown field.*edits; runtimes reject"):
        _dra.parse_cdi_spec(_spec(devices=[{"name": "0", "edits": {}}]), "/etc/cdi/x.yaml")


@pytest.mark.parametrize("name", [":0", "0:", "-gpu", "gpu 0", "gpu/0", ""])
def test_invalid_device_name(name):
    with pytest.raises(_dra.DraError, match="device name '%s' is invalid" % name):
        _dra.parse_cdi_spec(_spec(devices=[{"name": name}]), "/etc/cdi/x.yaml")


@pytest.mark.parametrize("name", ["0", "1:0", "all", "gpu0", "mig1:0", UUID0, "a.b_c-d"])
def test_valid_device_names(name):
    assert _dra.parse_cdi_spec(_spec(devices=[{"name": name}]), "/etc/cdi/x.yaml")["devices"] == [name]


def test_duplicate_device_rejects_the_file():
    with pytest.raises(_dra.DraError, match="/etc/cdi/x.yaml defines device '0' twice"):
        _dra.parse_cdi_spec(_spec(devices=[{"name": "0"}, {"name": "0"}]), "/etc/cdi/x.yaml")


# --- check_dra_cdi ------------------------------------------------------------------------------------------------

CONTAINERD = ["/etc/cdi", "/var/run/cdi"]
GPUS = [{"index": 0, "uuid": UUID0}, {"index": 1, "uuid": UUID1}]


def toolkit(path="/var/run/cdi/nvidia.yaml", devices=("0", "1", UUID0, UUID1, "0:1", "all")):
    return {"path": path, "cdi_version": "0.5.0", "kind": "nvidia.com/gpu", "devices": list(devices)}


def claim(uid="3f1c"):
    return {"path": "/var/run/cdi/k8s.gpu.nvidia.com-claim_%s.yaml" % uid, "cdi_version": "0.5.0",
            "kind": _dra.DRA_CDI_KIND, "devices": ["%s-gpu-0" % uid]}


def test_dra_node_needs_no_toolkit_spec():
    status, evidence, remedy = _dra.check_dra_cdi([], GPUS, spec_dirs=CONTAINERD)
    assert status == "pass" and remedy == ""
    assert "no nvidia.com/gpu spec" in evidence and "does not use it" in evidence
    assert "k8s.gpu.nvidia.com/claim" in evidence and "/etc/cdi, /var/run/cdi" in evidence


def test_toolkit_spec_required_but_missing():
    status, evidence, remedy = _dra.check_dra_cdi([claim()], GPUS, spec_dirs=CONTAINERD, require_toolkit_spec=True)
    assert status == "fail"
    assert "no nvidia.com/gpu spec" in evidence and "required" in evidence
    assert "nvidia-cdi-refresh" in remedy and "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml" in remedy


def test_runtime_config_not_given_warns():
    status, evidence, remedy = _dra.check_dra_cdi([], GPUS)
    assert status == "warn"
    assert "CDI configuration was not given" in evidence and "/var/run/cdi" in evidence
    assert "cdi_spec_dirs" in remedy


def test_runtime_without_cdi_fails():
    status, evidence, remedy = _dra.check_dra_cdi([], GPUS, spec_dirs=[])
    assert status == "fail"
    assert "CDI is disabled" in evidence
    assert "enable_cdi = true" in remedy and "systemctl restart containerd" in remedy


def test_runtime_not_reading_dra_cdi_root_fails():
    status, evidence, remedy = _dra.check_dra_cdi([toolkit("/etc/cdi/nvidia.yaml")], GPUS, spec_dirs=["/etc/cdi"])
    assert status == "fail"
    assert "reads CDI specs from /etc/cdi, not from /var/run/cdi" in evidence
    assert "cdi_spec_dirs" in remedy


@pytest.mark.parametrize("dirs", [["/etc/cdi", "/run/cdi"], ["/etc/cdi/", "/var/run/cdi/"], ["/var/run/./cdi"]])
def test_run_and_var_run_are_one_directory(dirs):
    assert _dra.check_dra_cdi([], GPUS, spec_dirs=dirs)[0] == "pass"


def test_own_cdi_root():
    assert _dra.check_dra_cdi([], GPUS, spec_dirs=["/etc/cdi", "/var/cdi"], cdi_root="/var/cdi")[0] == "pass"
    assert _dra.check_dra_cdi([], GPUS, spec_dirs=CONTAINERD, cdi_root="/var/cdi")[0] == "fail"


def test_current_toolkit_spec_passes():
    status, evidence, _remedy = _dra.check_dra_cdi([toolkit(), claim()], GPUS, spec_dirs=CONTAINERD)
    assert status == "pass"
    assert "/var/run/cdi/nvidia.yaml list 0, 1" in evidence and "1 per-claim spec" in evidence


@pytest.mark.parametrize("devices", [("0", "1", "all"), (UUID0, UUID1), ("0", UUID1)])
def test_gpu_covered_by_index_or_uuid(devices):
    assert _dra.check_dra_cdi([toolkit(devices=devices)], GPUS, spec_dirs=CONTAINERD)[0] == "pass"


def test_stale_toolkit_spec_lacking_a_gpu_warns():
    status, evidence, remedy = _dra.check_dra_cdi([toolkit(devices=("0", UUID0, "all"))], GPUS, spec_dirs=CONTAINERD)
    assert status == "warn"
    assert "stale" in evidence and "lacks GPU 1 (%s)" % UUID1 in evidence
    assert "systemctl restart nvidia-cdi-refresh.service" in remedy


def test_stale_toolkit_spec_naming_other_gpus_warns():
    other = "GPU-99999999-0000-0000-0000-000000000000"
    status, evidence, _remedy = _dra.check_dra_cdi([toolkit(devices=("0", "1", "2", other))], GPUS,
                                                   spec_dirs=CONTAINERD)
    assert status == "warn"
    assert "names 2, %s, not GPUs of this node" % other in evidence


def test_stale_toolkit_spec_fails_when_required():
    assert _dra.check_dra_cdi([toolkit(devices=("0",))], GPUS, spec_dirs=CONTAINERD, require_toolkit_spec=True)[0] \
        == "fail"


def test_mig_entries_are_not_judged():
    spec = toolkit(devices=("0", "1", "5:3", "MIG-ffffffff-0000-0000-0000-000000000000"))
    assert _dra.check_dra_cdi([spec], GPUS, spec_dirs=CONTAINERD)[0] == "pass"


def test_toolkit_spec_not_judged_without_expected_gpus():
    assert _dra.check_dra_cdi([toolkit(devices=("7",))], None, spec_dirs=CONTAINERD)[0] == "pass"


def test_gpus_nvml_could_not_read_are_not_expected():
    gpus = GPUS + [{"index": 2, "error": "GPU is lost"}]
    assert _dra.check_dra_cdi([toolkit()], gpus, spec_dirs=CONTAINERD)[0] == "pass"


def test_broken_spec_warns_with_its_path():
    bad = {"path": "/etc/cdi/nvidia.yaml", "error": "cdiVersion '9.9.9' is not a CDI specification version"}
    status, evidence, remedy = _dra.check_dra_cdi([bad], GPUS, spec_dirs=CONTAINERD)
    assert status == "warn"
    assert "/etc/cdi/nvidia.yaml does not load: cdiVersion '9.9.9'" in evidence and "skip" in evidence
    assert "fix or remove /etc/cdi/nvidia.yaml" in remedy


def test_same_directory_duplicate_device_warns():
    a = toolkit("/etc/cdi/nvidia.yaml")
    b = toolkit("/etc/cdi/nvidia-extra.json", devices=("0",))
    status, evidence, remedy = _dra.check_dra_cdi([a, b], GPUS, spec_dirs=CONTAINERD)
    assert status == "warn"
    assert "nvidia.com/gpu=0 is defined by both /etc/cdi/nvidia.yaml and /etc/cdi/nvidia-extra.json" in evidence
    assert "drop it" in evidence and "remove the extra file" in remedy


def test_later_directory_overrides_without_conflict():
    a = toolkit("/etc/cdi/nvidia.yaml")
    b = toolkit("/var/run/cdi/nvidia.yaml")
    status, evidence, _remedy = _dra.check_dra_cdi([a, b], GPUS, spec_dirs=CONTAINERD)
    assert status == "pass" and "conflict" not in evidence


def test_spec_outside_runtime_dirs_is_noted():
    status, evidence, _remedy = _dra.check_dra_cdi([toolkit("/opt/cdi/nvidia.yaml")], GPUS, spec_dirs=CONTAINERD)
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
    status, evidence, remedy = _dra.check_dra_mig([gpu(0), gpu(1, mig="enabled")], mig_target_declared=False)
    assert status == "pass" and remedy == ""
    assert evidence.startswith("DynamicMIG: ")
    assert "GPU 0 (GPU-0): MIG mode disabled, no partitions" in evidence


def test_dynamic_mig_with_declared_target_fails():
    status, evidence, remedy = _dra.check_dra_mig([gpu(0)], mig_target_declared=True)
    assert status == "fail"
    assert "MIG target is declared" in evidence and "destroys the ones it did not create" in evidence
    assert "node_preflight_mig_config" in remedy and "without DynamicMIG" in remedy


def test_dynamic_mig_target_conflicts_even_without_mig_gpus():
    assert _dra.check_dra_mig([], mig_target_declared=True)[0] == "fail"


def test_dynamic_mig_precreated_partitions_fail():
    gpus = [gpu(0, mig="enabled", partitions={"3g.40gb": 1, "1g.10gb": 2}), gpu(1)]
    status, evidence, remedy = _dra.check_dra_mig(gpus, mig_target_declared=False)
    assert status == "fail"
    assert "GPU 0 (GPU-0) has pre-created MIG partitions (2x 1g.10gb, 1x 3g.40gb)" in evidence
    assert "would destroy them" in evidence
    assert "nvidia-smi mig -i 0 -dci && nvidia-smi mig -i 0 -dgi" in remedy
    assert "-i 1 " not in remedy


def test_dynamic_mig_instances_without_counted_devices_fail():
    entry = gpu(0, mig="enabled")
    entry["instances"] = [{"gi_id": 1, "compute_instances": []}]
    status, evidence, _remedy = _dra.check_dra_mig([entry], mig_target_declared=False)
    assert status == "fail" and "1 GPU instance(s)" in evidence


@pytest.mark.parametrize("model", ["NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe", "NVIDIA A30",
                                   "NVIDIA A800-SXM4-80GB"])
def test_dynamic_mig_ampere_with_mig_off_warns(model):
    status, evidence, remedy = _dra.check_dra_mig([gpu(0, model=model)], mig_target_declared=False)
    assert status == "warn"
    assert "cannot switch it without a reset" in evidence and "offers it whole" in evidence
    assert "nvidia-smi -i 0 -mig 1" in remedy and "nvidia-smi -r -i 0" in remedy


def test_dynamic_mig_ampere_with_mig_on_and_no_partitions_passes():
    assert _dra.check_dra_mig([gpu(0, model="NVIDIA A100-SXM4-40GB", mig="enabled")], False)[0] == "pass"


@pytest.mark.parametrize("model", ["NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA B200", "NVIDIA GA100X"])
def test_dynamic_mig_hopper_and_newer_switch_mig_on_demand(model):
    assert _dra.check_dra_mig([gpu(0, model=model)], False)[0] == "pass"


def test_ampere_models_can_be_passed():
    assert _dra.check_dra_mig([gpu(0, model="NVIDIA X1")], False, ampere_models=("X1",))[0] == "warn"


def test_dynamic_mig_vgpu_guest_warns():
    status, evidence, remedy = _dra.check_dra_mig([gpu(0, virt="vgpu")], mig_target_declared=False)
    assert status == "warn"
    assert "is a vGPU" in evidence and "skips DynamicMIG" in evidence
    assert "vGPU profile" in remedy


def test_gpu_nvml_could_not_read_fails():
    status, evidence, remedy = _dra.check_dra_mig([{"index": 3, "error": "Insufficient Permissions"}], False)
    assert status == "fail"
    assert "GPU 3" in evidence and "Insufficient Permissions" in evidence and "unknown" in evidence
    assert "NVML" in remedy


@pytest.mark.parametrize("dynamic", [True, False])
def test_no_mig_capable_gpu_skips(dynamic):
    plain = {"index": 0, "uuid": "GPU-0", "model": "NVIDIA L40S", "mig_capable": False, "mig_mode": None}
    status, evidence, _remedy = _dra.check_dra_mig([plain], mig_target_declared=False, dra_manages_mig=dynamic)
    assert status == "skip" and "no MIG-capable GPU" in evidence


def test_static_mig_partitions_created_by_the_collection_pass():
    gpus = [gpu(0, mig="enabled", partitions={"3g.40gb": 2}), gpu(1)]
    status, evidence, _remedy = _dra.check_dra_mig(gpus, mig_target_declared=True, dra_manages_mig=False)
    assert status == "pass"
    assert evidence.startswith("static MIG: ")
    assert "GPU 0 (GPU-0): 2x 3g.40gb (advertised when the GPU kubelet plugin starts)" in evidence
    assert "GPU 1 (GPU-1): MIG mode disabled, offered whole" in evidence


def test_static_mig_enabled_without_partitions_strands_the_gpu():
    gpus = [gpu(0, mig="enabled"), gpu(1, mig="enabled", partitions={"7g.80gb": 1})]
    status, evidence, remedy = _dra.check_dra_mig(gpus, mig_target_declared=False, dra_manages_mig=False)
    assert status == "fail"
    assert "GPU 0 (GPU-0) has MIG mode enabled but no MIG partitions" in evidence
    assert "neither the whole GPU nor any partition" in evidence
    assert "GPU 1" not in remedy and "nvidia-smi -i 0 -mig 0" in remedy and "mig_reconfigure.yml" in remedy


def test_static_mig_ignores_the_dynamic_rules():
    # Pre-created partitions are what static MIG wants; an Ampere GPU with MIG off is simply offered whole.
    gpus = [gpu(0, model="NVIDIA A100-SXM4-40GB"), gpu(1, mig="enabled", partitions={"1g.10gb": 7}, virt="vgpu")]
    assert _dra.check_dra_mig(gpus, mig_target_declared=True, dra_manages_mig=False)[0] == "pass"
