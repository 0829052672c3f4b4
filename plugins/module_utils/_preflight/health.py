# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU health checks of the pre-join gate and the health roll: pure decisions over what gpu_info read (NVML's
readings per GPU, ``gpus[].health``, and the driver's Xid events from the kernel log, ``kernel_log``); no I/O.

Each check is ``(facts, options) -> {id, title, status, evidence, remedy, gpus}`` like the other preflight checks
(module_utils/_preflight/checks.py runs them), with ``gpus`` the per-GPU verdicts the fleet report draws. ``CHECKS`` is the
one record per check (id, title, function); _preflight/checks.py derives its tables from it.

Sources of the rules (cited again where used):
* NVML API reference / nvml.h (NVIDIA/go-nvml gen/nvml/nvml.h): what each reading means and when NVML cannot give it.
* NVIDIA "GPU Memory Error Management" (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/): row remapping, pending
  remaps cleared by a GPU reset, a remap failure as the RMA signal.
* NVIDIA Xid catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), through module_utils/_gpu/xid.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Optional, Union

from ansible_collections.gpuops.provision.plugins.module_utils._gpu import xid
from ansible_collections.gpuops.provision.plugins.module_utils._k8s import mig_roll
from ansible_collections.gpuops.provision.plugins.module_utils._preflight import dcgm

DEFAULT_OPTIONS: dict[str, Any] = {
    "expected_gpus": None,        # GPUs the node must have (from the inventory); None: at least one, none lost
    "ecc_volatile_max": 0,        # uncorrectable ECC errors since the last reset/boot allowed
    "ecc_aggregate_max": None,    # ... over the GPU's life; None: reported, not judged (remapped rows cover it)
    "temperature_margin": 5,      # warn this many degrees C below the slowdown threshold
    "persistence_required": False,  # persistence mode off fails (True) or warns (False)
    "dcgm_diag_level": 0,         # run `dcgmi diag -r <level>` (1-4) where DCGM is installed; 0: not run
}
HW_SLOWDOWN = ("HwSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown")
RESET_REMEDY = ("drain the node and reset the GPU (nvidia-smi -r -i <index>, GPU clients stopped) or reboot it; "
                "replace the GPU if it happens again")


class HealthError(ValueError):
    """Invalid options; the message names the option."""


def _label(gpu: Mapping[str, Any]) -> str:
    return "GPU %s (%s, %s)" % (gpu.get("index"), gpu.get("model") or "?", gpu.get("pci_address") or "?")


def _result(check_id: str, status: str, evidence: str, remedy: str = "", gpus: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """A check's result, as _preflight.checks.result words one, with the per-GPU verdicts; a remedy only for fail or warn."""
    return {"id": check_id, "title": TITLES[check_id], "status": status, "evidence": evidence,
            "remedy": remedy if status in ("fail", "warn") else "", "gpus": list(gpus)}


def _verdict(check_id: str, per_gpu: Iterable[Mapping[str, Any]], problems_fail: list[str], problems_warn: list[str], passed: str,
             remedy: Callable[[str], str]) -> dict[str, Any]:
    """A check's result from its per-GPU verdicts: fail when any GPU fails, else warn when any warns."""
    status = "fail" if problems_fail else "warn" if problems_warn else "pass"
    evidence = "; ".join(problems_fail + problems_warn) if status != "pass" else passed
    return _result(check_id, status, evidence, remedy(status) if status != "pass" else "", per_gpu)


# Any: gpu_info's GPU dicts in a list, or None exactly when the evidence is set (callers test the evidence first).
def nvml_gpus(facts: Mapping[str, Any]) -> tuple[Any, Optional[str]]:
    """(gpus that answered, evidence when NVML cannot be used at all); _preflight/checks.py's other NVML checks use it too."""
    gpu = facts.get("gpu")
    if not gpu:
        return None, "GPU facts (gpu_info) were not gathered"
    if gpu.get("failed"):
        return None, "reading GPU facts (gpu_info) failed: %s" % (gpu.get("msg") or "unknown error")
    nvml = gpu.get("nvml") or {}
    if not nvml.get("available"):
        return None, "NVML is not available: %s" % (nvml.get("reason") or "unknown reason")
    return gpu.get("gpus") or [], None


def _no_facts(check_id: str, why: str) -> dict[str, Any]:
    return _result(check_id, "fail", why, "make NVML usable on the node (driver loaded, nvidia-ml-py installed) and rerun")


def _record(gpu: Mapping[str, Any], status: str, text: str, per_gpu: list[dict[str, Any]], fails: list[str], warns: list[str]) -> None:
    """One GPU's verdict into the check's per-GPU list, and into its failures or warnings."""
    per_gpu.append({"index": gpu.get("index"), "uuid": gpu.get("uuid"), "pci_address": gpu.get("pci_address"),
                    "status": status, "evidence": text})
    if status == "fail":
        fails.append("%s: %s" % (_label(gpu), text))
    elif status == "warn":
        warns.append("%s: %s" % (_label(gpu), text))


def _per_gpu(check_id: str, facts: Mapping[str, Any], judge: Callable[[Mapping[str, Any], Mapping[str, Any]], tuple[str, str]], passed: str,
             remedy: Callable[[str], str]) -> dict[str, Any]:
    """Run ``judge(gpu) -> (status, text)`` on every GPU that has health readings; a GPU NVML could not read fails."""
    gpus, why = nvml_gpus(facts)
    if why:
        return _no_facts(check_id, why)
    per_gpu: list[dict[str, Any]]
    fails: list[str]
    warns: list[str]
    per_gpu, fails, warns = [], [], []
    for gpu in gpus:
        if gpu.get("error"):
            status, text = "fail", "NVML cannot read it: %s" % gpu["error"]
        elif not gpu.get("health"):
            status, text = "fail", "no health readings (gpu_info ran with health=false)"
        else:
            status, text = judge(gpu, gpu["health"])
        _record(gpu, status, text, per_gpu, fails, warns)
    if not gpus:
        return _verdict(check_id, [], [], [], "no GPU to check", remedy)
    return _verdict(check_id, per_gpu, fails, warns, passed % len(gpus), remedy)


# --- GPU count ------------------------------------------------------------------------------------------------------

def check_gpu_count(facts: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    gpus, why = nvml_gpus(facts)
    if why:
        return _no_facts("gpu_count", why)
    expected = options.get("expected_gpus")
    lost = [g for g in gpus if g.get("error")]
    per_gpu: list[dict[str, Any]] = []
    for g in gpus:
        _record(g, "fail" if g.get("error") else "pass", g.get("error") or "present", per_gpu, [], [])
    found = "NVML enumerates %d GPU(s)" % len(gpus)
    problems = []
    if expected is not None and len(gpus) < expected:
        problems.append("%s, the inventory expects %d: %d missing (a GPU that fell off the PCI bus or did not come "
                        "back after a reboot is not enumerated)" % (found, expected, expected - len(gpus)))
    elif expected is None and not gpus:
        problems.append("NVML enumerates no GPU")
    problems += ["GPU %s: %s" % (g.get("index"), g["error"]) for g in lost]
    if problems:
        return _result("gpu_count", "fail", "; ".join(problems),
                       "check lspci for the missing or lost GPUs and the kernel log for Xid 79; reboot the node "
                       "(drain it first); reseat or replace a GPU that stays missing", per_gpu)
    if expected is not None and len(gpus) > expected:
        return _result("gpu_count", "warn", "%s, more than the %d the inventory expects" % (found, expected),
                       "set the node's expected GPU count (node_preflight_expected_gpus)", per_gpu)
    return _result("gpu_count", "pass", found, gpus=per_gpu)


# --- ECC ------------------------------------------------------------------------------------------------------------

def _judge_ecc(options: Mapping[str, Any]) -> Callable[[Mapping[str, Any], Mapping[str, Any]], tuple[str, str]]:
    vol_max, agg_max = options.get("ecc_volatile_max"), options.get("ecc_aggregate_max")

    def judge(gpu: Mapping[str, Any], health: Mapping[str, Any]) -> tuple[str, str]:
        ecc = health.get("ecc") or {}
        if ecc.get("error") == "NVML_ERROR_NOT_SUPPORTED":
            return "pass", "no ECC on this GPU (NVML_ERROR_NOT_SUPPORTED)"
        if ecc.get("error"):
            return "warn", "ECC state unreadable: %s" % ecc["error"]
        if not ecc.get("enabled"):
            return "warn", "ECC is disabled%s" % (" (enabled after the next reboot)" if ecc.get("pending") else "")
        vol, agg = ecc.get("volatile_uncorrected"), ecc.get("aggregate_uncorrected")
        counts = "uncorrectable ECC errors: %s since the last reset, %s in its life" % (
            "unreadable (%s)" % ecc.get("volatile_uncorrected_error") if vol is None else vol,
            "unreadable (%s)" % ecc.get("aggregate_uncorrected_error") if agg is None else agg)
        if vol is not None and vol > vol_max:
            # normalize_options made every threshold an int (ecc_aggregate_max: or None, tested above).
            return "fail", "%s (more than %d since the last reset)" % (counts, vol_max)  # type: ignore[str-format]
        if agg is not None and agg_max is not None and agg > agg_max:
            return "fail", "%s (more than %d in its life)" % (counts, agg_max)
        if vol is None:
            # NVML keeps the volatile counters from a MIG GPU's instances on some drivers: not known, so not passed.
            return "warn", counts
        return "pass", counts
    return judge


def check_gpu_ecc(facts: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    return _per_gpu("gpu_ecc", facts, _judge_ecc(options),
                    "no uncorrectable ECC errors above the thresholds on %d GPU(s)",
                    lambda s: RESET_REMEDY if s == "fail" else
                    "enable ECC (nvidia-smi -e 1, then reboot) on datacenter GPUs; see the evidence")


# --- row remapping / page retirement --------------------------------------------------------------------------------

def remapping_hidden_by_mig(gpu: Mapping[str, Any]) -> Optional[str]:
    """Why row remapping cannot be read on this GPU when MIG hides it, else None.

    nvml.h nvmlDeviceGetRemappedRows: NVML_ERROR_NOT_SUPPORTED on a MIG-enabled GPU. The preflight warns on it (the
    state is unknown); the fleet report shows it as not applicable, since no operator action short of leaving MIG
    makes it readable."""
    rows = (gpu.get("health") or {}).get("remapped_rows") or {}
    if rows.get("error") != "NVML_ERROR_NOT_SUPPORTED" or (gpu.get("mig_mode") or {}).get("current") != "enabled":
        return None
    return "row remapping cannot be read while MIG is enabled (%s, NVML_ERROR_NOT_SUPPORTED)" % (
        "%d GPU instance(s)" % len(gpu.get("instances") or []) if gpu.get("instances") is not None else "MIG enabled")


def _judge_memory(gpu: Mapping[str, Any], health: Mapping[str, Any]) -> tuple[str, str]:
    rows = health.get("remapped_rows") or {}
    if not rows.get("error"):
        counts = "%d rows remapped for uncorrectable and %d for correctable errors" % (
            rows.get("uncorrectable", 0), rows.get("correctable", 0))
        if rows.get("failure"):
            # GPU Memory Error Management, Row Remapping: a failed remap means the bank has no spare rows left.
            return "fail", "row remapping FAILED (%s): the GPU cannot repair its memory any more" % counts
        if rows.get("pending"):
            return "fail", "a row remap is pending (%s): it takes effect at the next GPU reset" % counts
        return "pass", counts
    hidden = remapping_hidden_by_mig(dict(gpu, health=health))
    if hidden:
        # Unknown, so a warning rather than a silent pass (the fleet report calls it not applicable).
        return "warn", hidden + ": pending or failed remaps are unknown"
    retired = health.get("retired_pages") or {}
    if not retired.get("error"):
        # Page retirement (Volta and earlier): retired pages take effect when the driver is reloaded.
        if retired.get("pending"):
            return "fail", "retired pages are pending: they take effect at the next GPU reset or reboot"
        return "pass", "no retired pages pending (row remapping: %s)" % rows["error"]
    if rows["error"] == "NVML_ERROR_NOT_SUPPORTED" and retired["error"] == "NVML_ERROR_NOT_SUPPORTED":
        return "pass", "neither row remapping nor page retirement is supported on this GPU"
    return "warn", "memory repair state unreadable: row remapping %s, page retirement %s" % (
        rows["error"], retired["error"])


def check_gpu_memory(facts: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:  # pylint: disable=unused-argument
    return _per_gpu("gpu_memory", facts, _judge_memory,
                    "no failed or pending memory repairs on %d GPU(s)",
                    lambda s: RESET_REMEDY + "; a failed row remap needs an RMA" if s == "fail" else
                    "read the state before MIG instances are created (or with MIG disabled)")


# --- Xid ------------------------------------------------------------------------------------------------------------

def check_gpu_xid(facts: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:  # pylint: disable=unused-argument
    gpus, why = nvml_gpus(facts)
    if why:
        return _no_facts("gpu_xid", why)
    log = (facts.get("gpu") or {}).get("kernel_log") or {}
    if not log.get("read"):
        return _result("gpu_xid", "warn",
                       "the kernel log was not read (%s): Xid events unknown" % (log.get("error") or "not asked"),
                       "let gpu_info read the kernel log (kernel_log=dmesg or journal, as root)")
    per_pci = xid.summary(log.get("xid_events") or [])
    per_gpu: list[dict[str, Any]]
    fails: list[str]
    warns: list[str]
    per_gpu, fails, warns, app = [], [], [], []
    for gpu in gpus:
        seen = per_pci.pop(xid.slot_of(gpu.get("pci_address")), None)
        status, text = "pass", "no Xid since boot"
        if seen:
            names = ", ".join("%d (%s)" % (c, (xid.CATALOG.get(c) or ("unknown",))[0]) for c in seen["codes"])
            text = "%d Xid event(s) since boot: %s; last: %s" % (seen["count"], names, seen["last"]["line"].strip())
            unknown = [c for c in seen["codes"] if xid.classify(c) == "unknown"]
            if seen["node_codes"]:
                status = "fail"
            elif unknown:
                status = "warn"
            else:
                app.append("%s: %s" % (_label(gpu), text))
        _record(gpu, status, text, per_gpu, fails, warns)
    # Xids of a PCI address no GPU answers for: a GPU that fell off the bus (79) is often not enumerated any more.
    for slot, seen in sorted(per_pci.items()):
        text = "PCI %s (not enumerated by NVML): Xid %s" % (slot, ", ".join(str(c) for c in seen["codes"]))
        (fails if seen["node_codes"] else warns).append(text)
    passed = "no Xid since boot on %d GPU(s)" % len(gpus)
    if app:
        passed = "only application Xids since boot (the application's fault, NVIDIA's catalog: RESTART_APP): " + \
            "; ".join(app)
    return _verdict("gpu_xid", per_gpu, fails, warns, passed,
                    lambda s: "drain the node; act on the Xid catalog's immediate action (reset the GPU or reboot), "
                              "replace the GPU when it recurs" if s == "fail" else
                              "look the code up in NVIDIA's Xid catalog")


# --- PCIe link ------------------------------------------------------------------------------------------------------

def _judge_pcie(gpu: Mapping[str, Any], health: Mapping[str, Any]) -> tuple[str, str]:
    # Any: NVML's readings, numbers once the None test below has passed (mypy does not narrow through "None in").
    p: Any = health.get("pcie") or {}
    gen, width, max_gen, max_width = p.get("gen"), p.get("width"), p.get("max_gen"), p.get("max_width")
    if None in (gen, width, max_gen, max_width):
        return "warn", "PCIe link unreadable: %s" % (p.get("errors") or "no reading")
    link = "Gen%d x%d (max Gen%d x%d)" % (gen, width, max_gen, max_width)
    idle = "GpuIdle" in ((health.get("clock_event_reasons") or {}).get("active") or [])
    if width < max_width:
        return "fail", "PCIe link trained at x%d, below its x%d: %s" % (width, max_width, link)
    if gen < max_gen and not idle:
        return "fail", "PCIe link at Gen%d while busy, below its Gen%d: %s" % (gen, max_gen, link)
    gpu_max = p.get("gpu_max_gen")
    if gpu_max is not None and max_gen < gpu_max:
        return "warn", "the slot limits the link to Gen%d, the GPU does Gen%d: %s" % (max_gen, gpu_max, link)
    if gen < max_gen:
        # An idle GPU drops the link generation to save power and retrains under load (nvidia-smi shows "Current 1,
        # Max 4" on an idle L40S): not a fault.
        return "pass", "%s, lower generation while idle (power saving)" % link
    return "pass", link


def check_gpu_pcie(facts: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:  # pylint: disable=unused-argument
    return _per_gpu("gpu_pcie", facts, _judge_pcie, "PCIe links at full width on %d GPU(s)",
                    lambda s: "reseat the GPU or its riser, check the slot's BIOS link settings; replace the GPU or "
                              "the riser if it stays degraded" if s == "fail" else
                              "move the GPU to a slot of its generation, or accept the lower bandwidth")


# --- thermal, throttling, persistence ------------------------------------------------------------------------------

def _judge_thermal(options: Mapping[str, Any]) -> Callable[[Mapping[str, Any], Mapping[str, Any]], tuple[str, str]]:
    margin = options.get("temperature_margin")

    def judge(gpu: Mapping[str, Any], health: Mapping[str, Any]) -> tuple[str, str]:
        t = health.get("temperature") or {}
        reasons = (health.get("clock_event_reasons") or {}).get("active") or []
        current, slowdown = t.get("current"), t.get("slowdown")
        text = "%s C (slowdown at %s C); clock event reasons: %s" % (
            "?" if current is None else current, "?" if slowdown is None else slowdown, ", ".join(reasons) or "none")
        hw = [r for r in reasons if r in HW_SLOWDOWN]
        if hw:
            return "fail", "hardware slowdown active (%s): %s" % (", ".join(hw), text)
        if current is not None and slowdown is not None and current >= slowdown:
            return "fail", "at or above the slowdown temperature: %s" % text
        if "SwThermalSlowdown" in reasons:
            return "warn", "the driver slows the clocks for temperature: %s" % text
        if current is not None and slowdown is not None and current >= slowdown - margin:
            # normalize_options made temperature_margin an int.
            return "warn", "within %d C of the slowdown temperature: %s" % (margin, text)  # type: ignore[str-format]
        if current is None:
            return "warn", "temperature unreadable: %s" % text
        return "pass", text
    return judge


def check_gpu_thermal(facts: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    return _per_gpu("gpu_thermal", facts, _judge_thermal(options),
                    "no GPU near its slowdown temperature or slowed by hardware (%d GPU(s))",
                    lambda s: "check the node's cooling (fans, airflow, inlet temperature) and power supplies; "
                              "an idle GPU that is hot has a cooling fault")


def _judge_persistence(options: Mapping[str, Any]) -> Callable[[Mapping[str, Any], Mapping[str, Any]], tuple[str, str]]:
    def judge(gpu: Mapping[str, Any], health: Mapping[str, Any]) -> tuple[str, str]:  # pylint: disable=unused-argument
        p = health.get("persistence_mode") or {}
        if p.get("error"):
            return "pass", "persistence mode not applicable (%s)" % p["error"]
        if p.get("enabled"):
            return "pass", "persistence mode on"
        return ("fail" if options.get("persistence_required") else "warn"), "persistence mode off"
    return judge


def check_gpu_persistence(facts: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    return _per_gpu("gpu_persistence", facts, _judge_persistence(options),
                    "persistence mode on for %d GPU(s)",
                    lambda s: "enable the nvidia-persistenced service (systemctl enable --now nvidia-persistenced)")


# --- DCGM's diagnostic (optional) ----------------------------------------------------------------------------------

def check_gpu_dcgm(facts: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """``dcgmi diag -r <level> -j`` as the node ran it ({stdout, stderr, rc}); module_utils/_preflight/dcgm.py reads DCGM's
    JSON and judges it (DCGM refuses MIG-mode GPUs: a warning saying so; not installed: skipped)."""
    level = options.get("dcgm_diag_level") or 0
    if not level:
        return _result("gpu_dcgm", "skip", "DCGM's diagnostic not asked for (node_preflight_dcgm_diag_level 0)")
    run = facts.get("dcgm")
    if not run:
        return _result("gpu_dcgm", "fail", "dcgmi diag was not run", "rerun the preflight with the gpu_dcgm check selected")
    parsed = dcgm.parse_diag(run.get("stdout") or "", run.get("stderr") or "", run.get("rc") or 0)
    return _result("gpu_dcgm", *dcgm.judge(parsed, level))


# --- the record per check -------------------------------------------------------------------------------------------

CHECKS = {
    "gpu_count": ("GPUs present as expected, none lost", check_gpu_count),
    "gpu_ecc": ("No uncorrectable ECC errors", check_gpu_ecc),
    "gpu_memory": ("No failed or pending memory repairs (row remapping, page retirement)", check_gpu_memory),
    "gpu_xid": ("No Xid since boot that takes the node out of service", check_gpu_xid),
    "gpu_pcie": ("PCIe links at their full width and generation", check_gpu_pcie),
    "gpu_thermal": ("No GPU near its slowdown temperature or slowed by hardware", check_gpu_thermal),
    "gpu_persistence": ("Persistence mode on", check_gpu_persistence),
    "gpu_dcgm": ("DCGM's diagnostic passes (when asked for)", check_gpu_dcgm),
}
TITLES = {check_id: title for check_id, (title, _fn) in CHECKS.items()}


def normalize_options(options: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    """The health options of ``options`` (others are ignored), checked; HealthError names a bad one."""
    out = dict(DEFAULT_OPTIONS)
    out.update({k: v for k, v in (options or {}).items() if k in DEFAULT_OPTIONS and v is not None})
    for key in ("expected_gpus", "ecc_volatile_max", "ecc_aggregate_max", "temperature_margin", "dcgm_diag_level"):
        value = out[key]
        if value is None and key in ("expected_gpus", "ecc_aggregate_max"):
            continue
        if isinstance(value, bool):
            raise HealthError("%s must be a number, not %r" % (key, value))
        try:
            out[key] = int(value)
        except (TypeError, ValueError):
            raise HealthError("%s must be a number, not %r" % (key, value))
        if out[key] < 0:
            raise HealthError("%s must be 0 or more, not %r" % (key, value))
    if out["dcgm_diag_level"] > 4:
        raise HealthError("dcgm_diag_level must be 0 (not run) or a dcgmi diag level 1 to 4, not %r"
                          % (out["dcgm_diag_level"],))
    if not isinstance(out["persistence_required"], bool):
        raise HealthError("persistence_required must be true or false, not %r" % (out["persistence_required"],))
    return out


# --- the health roll (playbooks/gpu_health.yml): which nodes to taint and untaint -----------------------------------

def _taints_of(node: Optional[Mapping[str, Any]]) -> list[Any]:
    return ((node or {}).get("spec") or {}).get("taints") or []


def roll_plan(reports: Optional[Sequence[Mapping[str, Any]]], nodes: Optional[Iterable[Mapping[str, Any]]], taint_key: str,
              max_unhealthy: Union[int, str] = "25%", effect: str = "NoSchedule",
              node_names: Optional[Mapping[str, str]] = None) -> dict[str, Any]:
    """The fleet decision of one health run, from the nodes' preflight reports (only gpu_* checks selected) and the
    Kubernetes Nodes (k8s_info's ``resources``).

    A failing node gets ``taint_key=<first failing check>:effect``; a passing node that carries the key loses it; a
    node without a report (unreachable, its reads failed) is left as it is. More failing nodes than
    ``max_unhealthy`` (a count or a percentage of the pool, rounded up as the MIG roll's budgets are) is more likely a
    monitoring or driver fault than that many broken GPUs: then nothing is tainted or untainted, and ``stopped``
    says why. ``node_names``: {inventory host: Kubernetes node name} where they differ."""
    node_names = node_names or {}
    by_name = {(n.get("metadata") or {}).get("name"): n for n in nodes or []}
    pool = len(reports or [])
    try:
        limit = mig_roll.scaled(max_unhealthy, pool, "max_unhealthy")
    except mig_roll.RollError as e:
        raise HealthError(str(e))
    out: dict[str, Any] = {"pool": pool, "max_unhealthy": limit, "unhealthy": [], "unknown": [], "taint": [], "untaint": [],
                           "not_in_kubernetes": [], "stopped": False, "message": "", "summary": "", "nodes": {}}
    for rep in sorted(reports or [], key=lambda r: r["node"]):
        host = rep["node"]
        k8s_name = node_names.get(host) or host
        node = by_name.get(k8s_name)
        current = [t for t in _taints_of(node) if t.get("key") == taint_key and t.get("effect") == effect]
        failed = [c for c in rep.get("failed_checks") or [] if c in CHECKS]
        missing = "facts" in (rep.get("failed_checks") or [])
        record = {"k8s_node": k8s_name, "verdict": rep.get("verdict"), "failed_checks": failed,
                  "tainted": current[0].get("value") if current else None, "action": "none"}
        if missing:
            out["unknown"].append(host)
            record["action"] = "unknown"
        elif failed:
            out["unhealthy"].append(host)
            record["action"] = "taint" if not current or current[0].get("value") != failed[0] else "keep"
            record["taint_value"] = failed[0]
        elif current:
            record["action"] = "untaint"
        if node is None and record["action"] in ("taint", "untaint"):
            out["not_in_kubernetes"].append(host)
            record["action"] = "not_in_kubernetes"
        out["nodes"][host] = record
    if len(out["unhealthy"]) > limit:
        out["stopped"] = True
        out["message"] = ("%d of %d nodes fail their GPU health checks (%s), more than the %d (max_unhealthy %s) one "
                          "run may take out of service: a fault this wide is more likely in monitoring, the driver or "
                          "the checks than in that many GPUs. No node was tainted or untainted; look at the reports."
                          % (len(out["unhealthy"]), pool, ", ".join(out["unhealthy"]), limit, max_unhealthy))
        for record in out["nodes"].values():
            if record["action"] in ("taint", "untaint"):
                record["action"] = "held"
    out["summary"] = "; ".join("%s: %s" % (h, ", ".join(out["nodes"][h]["failed_checks"])) for h in out["unhealthy"])
    if out["stopped"]:
        return out
    for host, record in out["nodes"].items():
        if record["action"] == "taint":
            out["taint"].append({"host": host, "node": record["k8s_node"], "value": record["taint_value"]})
        elif record["action"] == "untaint":
            out["untaint"].append({"host": host, "node": record["k8s_node"]})
    return out


# --- per GPU, for the fleet report ----------------------------------------------------------------------------------

PER_GPU_CHECKS = ("gpu_ecc", "gpu_memory", "gpu_xid", "gpu_pcie", "gpu_thermal", "gpu_persistence")
WORST = {"fail": 3, "warn": 2, "pass": 1, "skip": 0}


def gpu_verdicts(results: Optional[Iterable[Mapping[str, Any]]]) -> dict[Any, dict[str, Any]]:
    """{GPU index: {status, failing: [{check, status, evidence}]}} from check results (each with its ``gpus``):
    the worst status of every check on that GPU, and the checks that did not pass."""
    out: dict[Any, dict[str, Any]] = {}
    for res in results or []:
        for g in res.get("gpus") or []:
            entry = out.setdefault(g.get("index"), {"status": "pass", "failing": []})
            if g.get("status") in ("fail", "warn"):
                entry["failing"].append({"check": res.get("id"), "status": g["status"], "evidence": g.get("evidence")})
            if WORST.get(g.get("status"), 0) > WORST[entry["status"]]:
                entry["status"] = g["status"]
    return out


def evaluate_gpus(gpu_result: Mapping[str, Any], options: Optional[Mapping[str, Any]] = None) -> dict[Any, dict[str, Any]]:
    """gpu_verdicts of the per-GPU checks run on one host's gpu_info result with ``options`` (defaults)."""
    opts = normalize_options(options)
    return gpu_verdicts([CHECKS[c][1]({"gpu": gpu_result}, opts) for c in PER_GPU_CHECKS])
