"""bench/device/nvml_profiles.py run against gpusim (nvidia-ml-py over gpusim's libnvidia-ml.so.1): zero differences,
read-only, and it does report a table that disagrees with the GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpusim_nvml import library_env  # pylint: disable=import-error  # tests/helpers, on sys.path via tests/conftest.py
from libnvml_common import clean_env  # pylint: disable=import-error

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "device" / "nvml_profiles.py"
MODELS_PY = ROOT / "lab" / "gpusim" / "gpusim" / "models.py"
ALL = ["NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A30", "NVIDIA H100 80GB HBM3",
       "NVIDIA H100 NVL", "NVIDIA H200", "NVIDIA L40S"]


def run(state, *args):
    env = dict(clean_env(), **library_env(state))
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_zero_differences_and_state_untouched(tmp_path):
    state = tmp_path / "gpusim.json"
    # One GPU has MIG on with an existing GI+CI so the CI-profile dump path runs too.
    state.write_text(json.dumps({"gpus": [
        {"model": m, "mig_mode": "enabled" if i % 2 == 0 else "disabled",
         **({"gpu_instances": [{"profile_id": 9, "start": 4, "compute_instances": [{"slices": 3}]}]} if i == 0 else {})}
        for i, m in enumerate(ALL)]}))
    before = state.read_bytes()
    out = tmp_path / "dump.json"
    res = run(state, "--json", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 difference(s)" in res.stdout
    assert state.read_bytes() == before  # read-only: nothing written
    dump = json.loads(out.read_text())
    assert [g["name"] for g in dump["gpus"]] == ALL
    assert dump["gpus"][0]["gpu_instances"][0]["placement"] == [4, 4]
    assert dump["gpus"][0]["gpu_instances"][0]["ci_profiles"]["2"]["name"] == "MIG 3g.20gb"


def test_reports_a_table_that_disagrees(tmp_path):
    state = tmp_path / "gpusim.json"
    state.write_text(json.dumps({"gpus": [{"model": "NVIDIA H200", "mig_mode": "enabled"}]}))
    # The go-nvml H200 mock's 3g placements ({0,4}:3) in a copied table must show up as a difference.
    table = tmp_path / "models.py"
    src = MODELS_PY.read_text()
    bad = src.replace('(GI_3_SLICE, 9, 3, 2, 2, P8_3G, 4, "")', '(GI_3_SLICE, 9, 3, 2, 2, P8_3G, 3, "")')
    assert bad != src
    table.write_text(bad)
    res = run(state, "--table", str(table))
    assert res.returncode == 1
    assert "DIFF profile 9 placements: GPU [[0, 4], [4, 4]], table [[0, 3], [4, 3]]" in res.stdout


def test_nvml_unavailable_exit_2(tmp_path):
    res = run(tmp_path / "absent.json")
    assert res.returncode == 2 and "NVML unavailable" in res.stdout
