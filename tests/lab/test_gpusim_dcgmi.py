"""lab/gpusim/bin/dcgmi: DCGM's `dcgmi diag` on the gpusim state; what it prints parses with the gate's
module_utils/_dcgm.parse_diag, and each case gets the verdict the gate gives a real node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._preflight import dcgm

DCGMI = Path(__file__).resolve().parents[2] / "lab" / "gpusim" / "bin" / "dcgmi"
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"


def dcgmi(tmp_path, st, *args):
    path = tmp_path / "gpusim.json"
    path.write_text(json.dumps(st))
    env = dict(os.environ, GPUSIM_STATE=str(path))
    env.pop("PYTHONPATH", None)
    return subprocess.run([sys.executable, str(DCGMI), *args], env=env, capture_output=True, text=True, timeout=60,
                          check=False)


def diag(tmp_path, st, level=1, *extra):
    res = dcgmi(tmp_path, st, "diag", "-r", str(level), "-j", *extra)
    return res, dcgm.parse_diag(res.stdout, res.stderr, res.returncode)


def failed(parsed):
    return [(t["gpu"], t["name"], t["error_ids"]) for t in parsed["tests"] if t["status"] == "fail"]


@pytest.mark.parametrize("version,fmt", [("4.6.0", "dcgm4"), ("3.3.9", "dcgm3"), ("3.1.8", "dcgm3-legacy")])
@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_healthy_gpus_pass_every_level(tmp_path, version, fmt, level):
    res, p = diag(tmp_path, {"gpus": [{"model": H100}, {"model": H100}], "dcgm": {"version": version}}, level)
    assert res.returncode == 0, res.stderr
    # a passing level 1 of 3.0-3.2 has no per-GPU result, so nothing tells it from 3.3
    fmt = "dcgm3" if fmt == "dcgm3-legacy" and level == 1 else fmt
    assert (p["ran"], p["refused"], p["error"], p["format"], p["version"], p["overall"]) == (
        True, None, None, fmt, version, "pass")
    gpus = sorted(set(t["gpu"] for t in p["tests"] if t["gpu"] is not None))
    # 3.x Deployment checks name a GPU only on an error; every per-GPU test (level >= 2) and 4.x results name it
    assert gpus == ([] if fmt != "dcgm4" and level == 1 else [0, 1])
    categories = set(t["category"] for t in p["tests"])
    assert categories == {1: {"Deployment"}, 2: {"Deployment", "Hardware", "Integration"}}.get(
        level, {"Deployment", "Hardware", "Integration", "Stress"})
    status, evidence, _remedy = dcgm.judge(p, level)
    assert status == "pass" and evidence.startswith("dcgmi diag -r %d passed (DCGM %s)" % (level, version))


@pytest.mark.parametrize("version", ["4.6.0", "3.3.9"])
def test_uncorrectable_ecc_fails_the_memory_test_from_level_2(tmp_path, version):
    st = {"gpus": [{"model": H100}, {"model": H100, "ecc": {"volatile": {"uncorrected": 3}}}],
          "dcgm": {"version": version}}
    res, p = diag(tmp_path, st, 2)
    assert res.returncode == 205  # DCGM_FR_CUDA_DBE is an ISOLATE error
    name = "memory" if version.startswith("4") else "GPU Memory"
    assert failed(p) == [(1, name, [57])]
    status, evidence, remedy = dcgm.judge(p, 2)
    assert status == "fail"
    assert evidence.endswith("GPU 1 %s (Hardware): CUDA APIs have indicated that a double-bit ECC error has occured "
                             "on GPU 1." % name)
    assert "exit 205" in remedy
    # level 1 has no memory test: the same GPU passes
    res, p = diag(tmp_path, st, 1)
    assert (res.returncode, p["overall"]) == (0, "pass")


def test_row_remap_failure_fails_level_1(tmp_path):
    st = {"gpus": [{"model": A100, "remapped_rows": {"uncorrectable": 1, "failure": True}}, {"model": A100}]}
    res, p = diag(tmp_path, st, 1)
    assert res.returncode == 226
    assert failed(p) == [(0, "software", [80])]
    assert dcgm.judge(p, 1)[1] == ("dcgmi diag -r 1 failed (DCGM 4.6.0): GPU 0 software (Deployment): GPU 0 had "
                                   "uncorrectable memory errors and row remapping failed.")


@pytest.mark.parametrize("pcie,ids,text", [
    ({"width": 8}, [46], "GPU 1 is running at PCI link width 8X, which is below the minimum allowed link generation "
                         "of 16 (parameter 'min_pci_width')"),
    ({"host_max_gen": 2}, [45], "GPU 1 is running at PCI link generation 2, which is below the minimum allowed link "
                                "generation of 3 (parameter 'min_pci_generation')"),
])
def test_degraded_pcie_link_fails_the_pcie_test(tmp_path, pcie, ids, text):
    st = {"gpus": [{"model": H100}, {"model": H100, "pcie": pcie}]}
    res, p = diag(tmp_path, st, 2)
    assert res.returncode == 226
    assert failed(p) == [(1, "pcie", ids)]
    assert dcgm.judge(p, 2)[1] == "dcgmi diag -r 2 failed (DCGM 4.6.0): GPU 1 pcie (Integration): %s" % text
    # a link at the minimum passes; so does level 1, which has no PCIe test
    st["dcgm"] = {"min_pci_width": 8, "min_pci_generation": 2}
    assert diag(tmp_path, st, 2)[1]["overall"] == "pass"
    assert diag(tmp_path, {"gpus": st["gpus"]}, 1)[1]["overall"] == "pass"


def test_persistence_mode_off_is_a_warn(tmp_path):
    st = {"gpus": [{"model": H100, "persistence_mode": False}]}
    res, p = diag(tmp_path, st, 1)
    assert res.returncode == 226  # 4.x GetFailureResult counts every software error
    assert [(t["gpu"], t["status"], t["error_ids"]) for t in p["tests"]] == [(0, "warn", [29])]
    assert dcgm.judge(p, 1)[0] == "warn"
    st["dcgm"] = {"version": "3.3.9"}
    res, p = diag(tmp_path, st, 1)
    assert res.returncode == 0  # 3.3.9 counts FAIL results only
    assert [t["status"] for t in p["tests"] if t["name"] == "Persistence Mode"] == ["warn"]


@pytest.mark.parametrize("gpus,message", [
    ([{"model": A100, "mig_mode": "enabled"}, {"model": A100}],
     "Cannot run diagnostic: CUDA does not support enumerating GPUs with MIG mode enabled, yet GPU 0 is MIG enabled "
     "and the diagnostic is attempting to run on 2 GPUs."),
    ([{"model": A100}, {"model": A100, "mig_mode": "enabled",
                        "gpu_instances": [{"profile_id": 9, "start": 0, "compute_instances": [{}]}]}],
     "GPU 1's MIG configuration is incompatible with the diagnostic because it prevents access to the entire GPU."),
    ([{"model": H100, "mig_mode": "enabled"}],
     "Cannot run diagnostic: MIG is enabled, but no compute instances are configured. CUDA needs to execute on a "
     "compute instance if MIG is enabled."),
])
@pytest.mark.parametrize("version", ["4.6.0", "3.3.9"])
def test_mig_is_refused_as_dcgm_does(tmp_path, gpus, message, version):
    res, p = diag(tmp_path, {"gpus": gpus, "dcgm": {"version": version}}, 1)
    assert res.returncode == 226
    assert (p["ran"], p["refused"]) == (False, "mig")
    assert p["message"].endswith(message)
    status, evidence, remedy = dcgm.judge(p, 1)
    assert status == "warn" and evidence.startswith("DCGM refuses to run its diagnostic on GPUs in MIG mode")
    assert remedy == dcgm.MIG_REMEDY


def test_mig_spanning_the_whole_gpu_is_accepted(tmp_path):
    """Gpu::IsMigModeDiagCompatible: one GPU, one GPU instance and compute instance of the whole GPU."""
    st = {"gpus": [{"model": H100, "mig_mode": "enabled",
                    "gpu_instances": [{"profile_id": 0, "compute_instances": [{}]}]}]}
    res, p = diag(tmp_path, st, 2)
    assert (res.returncode, p["refused"], p["overall"]) == (0, None, "pass")


def test_no_host_engine(tmp_path):
    st = {"gpus": [{"model": H100}], "dcgm": {"hostengine": False, "embedded": False}}
    res, p = diag(tmp_path, st, 1)
    assert res.returncode == 249
    assert res.stdout == "Error: Unable to start an embedded host engine. DCGM initialization error.\n"
    assert p["refused"] == "hostengine"
    status, _evidence, remedy = dcgm.judge(p, 1)
    assert status == "fail" and "systemctl start nvidia-dcgm" in remedy
    # dcgmi diag runs an embedded host engine when nv-hostengine is down (Diag.cpp DoExecuteConnectionFailure);
    # with --host it first says it could not connect
    st["dcgm"] = {"hostengine": False}
    res, p = diag(tmp_path, st, 1, "--host", "localhost")
    assert res.stdout.startswith("Error: unable to establish a connection to the specified host: localhost\n{")
    assert (res.returncode, p["refused"], p["overall"]) == (0, None, "pass")


def test_dcgm_not_installed_is_a_skip(tmp_path):
    res, p = diag(tmp_path, {"gpus": [{"model": H100}], "dcgm": {"installed": False}}, 1)
    assert (res.returncode, res.stdout) == (2, "")
    assert p["refused"] == "not_installed"
    assert dcgm.judge(p, 1)[0] == "skip"


def test_bad_command_lines_and_state(tmp_path):
    res = dcgmi(tmp_path, {"gpus": [{"model": H100}]}, "diag", "-r", "5")
    assert res.returncode == 254 and "Invalid value '5' specified for -r" in res.stderr
    res = dcgmi(tmp_path, {"gpus": [{"model": H100}]}, "discovery", "-l")
    assert res.returncode == 255 and res.stdout == "ERROR: Invalid subsystem.\n"
    res = dcgmi(tmp_path, {"gpus": [{"model": H100}], "dcgm": {"hostengin": False}}, "diag")
    assert res.returncode == 255 and "dcgm: unknown key(s) hostengin" in res.stderr


def test_plain_text_without_json(tmp_path):
    res = dcgmi(tmp_path, {"gpus": [{"model": H100, "pcie": {"width": 8}}]}, "diag", "-r", "2")
    assert res.returncode == 226
    assert res.stdout.startswith("Successfully ran diagnostic for group.\n")
    assert "| pcie                      | Fail: GPU 0" in res.stdout
    assert dcgm.parse_diag(res.stdout, res.stderr, res.returncode)["error"].startswith("dcgmi printed no JSON")
