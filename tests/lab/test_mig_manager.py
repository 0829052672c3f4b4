"""The lab's mig-manager (lab/kube/mig_manager.py) against NVIDIA/mig-parted's behaviour, each test naming the
upstream function it follows; then in the nvidia-mig-manager DaemonSet's pods on the upstream control plane
(lab/kube/gpu_operator.py: label watch)."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "lab", "kube"))
import mig_manager as MM  # noqa: E402  pylint: disable=import-error,wrong-import-position
from kube_harness import kube_lab  # noqa: E402  pylint: disable=import-error,wrong-import-position
from requestlog import mig_allocatable  # noqa: E402  pylint: disable=import-error,wrong-import-position

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"
BALANCED = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
DOC = {"version": "v1", "mig-configs": {
    "all-disabled": [{"devices": "all", "mig-enabled": False}],
    "all-balanced": [{"devices": "all", "device-filter": ["0x233010DE"], "mig-enabled": True, "mig-devices": BALANCED},
                     {"devices": "all", "device-filter": ["0x20B010DE"], "mig-enabled": True,
                      "mig-devices": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}}],
    "all-1g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
    "mixed-ci": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1c.3g.40gb": 3, "3g.40gb": 1}}],
    "impossible": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 3}}],
}}


class FakeNode:
    def __init__(self, labels, config="doc", stuck=()):
        config = DOC if config == "doc" else config
        self.labels_ = dict(labels)
        self.history = []
        self.deleted = []
        self.waited = []
        self.stuck = stuck  # selectors whose pods never go
        self.text = yaml.safe_dump(config) if isinstance(config, dict) else config

    def labels(self):
        return dict(self.labels_)

    def set_labels(self, labels):
        self.labels_.update(labels)
        self.history.append(dict(labels))

    def delete_pods(self, selector):
        self.deleted.append(selector)

    def wait_pods_gone(self, selector=None, node_selector_key=None):
        self.waited.append(selector or node_selector_key)
        return (selector or node_selector_key) not in self.stuck

    def config(self):
        return self.text

    def sleep(self):
        pass

    def log(self, message):
        self.history.append({"log": message})

    def states(self):
        return [h[MM.STATE_LABEL] for h in self.history if MM.STATE_LABEL in h]


def write(tmp_path, gpus):
    path = tmp_path / "gpusim.json"
    path.write_text(json.dumps({"gpus": gpus}))
    return str(path)


def gpus_of(path):
    return MM.gstate.load(path)["gpus"]  # gpusim's normalized view (modes as 0/1)


def test_reconfigure_flow_pending_paused_applied_restored_success(tmp_path):
    """reconfigure.go Run: pending, operands paused (maybeSetPaused), apply, validator restarted, labels restored
    (maybeSetTrue) before the state becomes success."""
    path = write(tmp_path, [{"model": H100, "mig_mode": "disabled"}])
    node = FakeNode({"nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/gpu.deploy.dcgm": "false"})
    assert MM.reconfigure(node, path, "all-balanced") == "success"
    assert node.states() == ["pending", "success"]
    paused = next(h for h in node.history if "nvidia.com/gpu.deploy.device-plugin" in h)
    assert paused["nvidia.com/gpu.deploy.device-plugin"] == "paused-for-mig-change"
    assert paused["nvidia.com/gpu.deploy.dcgm"] == "false" and paused["nvidia.com/gpu.deploy.nvsm"] == "paused-for-mig-change"
    assert "nvidia.com/gpu.deploy.client" not in paused
    assert node.labels_["nvidia.com/gpu.deploy.device-plugin"] == "true" and node.labels_["nvidia.com/gpu.deploy.dcgm"] == "false"
    # waitForPodsToBeDeleted: the DaemonSet controller removes the paused operands' pods; mig-manager waits for them
    # (and for DaemonSet pods selecting on the client label), deletes only the validation pods, and at the end
    # restarts the operator validator (restartValidatorPod).
    assert node.waited == list(MM.OPERAND_PODS) + [MM.CLIENT_LABEL]
    assert node.deleted == list(MM.VALIDATION_PODS) + ["app=nvidia-operator-validator"]
    gpu = gpus_of(path)[0]
    assert gpu["mig_mode"] == 1 and MM.current_config(gpu) == BALANCED


def test_already_applied_config_is_success_without_pending(tmp_path):
    """reconfigure.go Run: isConfigAlreadyApplied -> setState(success) and nothing else."""
    path = write(tmp_path, [{"model": H100, "mig_mode": "disabled"}])
    node = FakeNode({})
    assert MM.reconfigure(node, path, "all-disabled") == "success"
    assert node.states() == ["success"] and node.deleted == [] and node.waited == []


def test_operand_pods_that_do_not_go_leave_the_node_pending_and_paused(tmp_path):
    """reconfigure.go Run: waitForPodsToBeDeleted failing returns the error without setState: the state stays
    pending, the operand labels paused, and the GPUs untouched."""
    path = write(tmp_path, [{"model": H100, "mig_mode": "disabled"}])
    node = FakeNode({"nvidia.com/gpu.deploy.device-plugin": "true"}, stuck=("app=gpu-feature-discovery",))
    assert MM.reconfigure(node, path, "all-balanced") == "pending"
    assert node.states() == ["pending"]
    assert node.labels_["nvidia.com/gpu.deploy.device-plugin"] == "paused-for-mig-change"
    assert node.deleted == [] and gpus_of(path)[0]["mig_mode"] == 0


@pytest.mark.parametrize("text,why", [("version: v1\nmig-configs: {}\n", "not present"), (None, "not a mig-parted"),
                                      (": : :", "not YAML")])
def test_invalid_or_missing_config_fails(tmp_path, text, why):
    """reconfigure.go validateMigConfig (mig-parted assert --valid-config) -> setState(failed)."""
    path = write(tmp_path, [{"model": H100, "mig_mode": "disabled"}])
    node = FakeNode({}, config=text)
    assert MM.reconfigure(node, path, "all-balanced") == "failed"
    assert any(why in h.get("log", "") for h in node.history)
    assert gpus_of(path)[0]["mig_mode"] == 0


def test_impossible_config_fails_and_leaves_the_gpu_cleared(tmp_path):
    """config.go SetMigConfig: all orderings fail -> ClearMigConfig, error; Run -> failed."""
    path = write(tmp_path, [{"model": H100, "mig_mode": "enabled", "gpu_instances": [{"profile_id": 0, "compute_instances": [{}]}]}])
    node = FakeNode({"nvidia.com/gpu.deploy.device-plugin": "true"})
    assert MM.reconfigure(node, path, "impossible") == "failed"
    assert node.states() == ["pending", "failed"]
    assert gpus_of(path)[0]["gpu_instances"] == []  # what mig-parted leaves: no rollback
    assert node.labels_["nvidia.com/gpu.deploy.device-plugin"] == "true"


def test_orderings_and_gi_reuse_give_compute_instances(tmp_path):
    """config.go SetMigConfig: CIs of one GI profile share the last GI while it has room (reuseGI)."""
    path = write(tmp_path, [{"model": H100, "mig_mode": "enabled"}])
    assert MM.reconfigure(FakeNode({}), path, "mixed-ci") == "success"
    gpu = gpus_of(path)[0]
    assert MM.current_config(gpu) == {"1c.3g.40gb": 3, "3g.40gb": 1}
    assert sorted(len(gi["compute_instances"]) for gi in gpu["gpu_instances"]) == [1, 3]


def test_pass_through_ampere_mode_change_reboots_with_reboot_enabled(tmp_path):
    """apply/mode.go ApplyMigMode resets all GPUs; a refused reset leaves the mode pending, and with WITH_REBOOT
    reconfigure.go sets rebooting and reboots; the pod's next run continues."""
    gpus = [{"model": A100, "mig_mode": "disabled", "reset_supported": False}]
    path = write(tmp_path, gpus)
    node = FakeNode({})
    assert MM.reconfigure(node, path, "all-balanced", with_reboot=True) == "success"
    assert node.states() == ["pending", "rebooting", "pending", "success"]
    assert gpus_of(path)[0]["mig_mode"] == 1
    path = write(tmp_path, gpus)
    node = FakeNode({})
    assert MM.reconfigure(node, path, "all-balanced", with_reboot=False) == "failed"
    assert any("MIG mode is disabled" in h.get("log", "") for h in node.history)


def test_every_gpu_must_be_matched_for_assert(tmp_path):
    """assert/config.go: "not all GPUs match the specified config" -> not applied."""
    path = write(tmp_path, [{"model": H100, "mig_mode": "disabled"}, {"model": "NVIDIA L40S"}])
    st = {"gpus": gpus_of(path)}
    only_h100 = MM.selected_entries(yaml.safe_dump({"version": "v1", "mig-configs": {"x": [
        {"devices": [0], "mig-enabled": False}]}}), "x")
    assert MM.assert_applied(st, only_h100) is False
    assert MM.assert_applied(st, MM.selected_entries(yaml.safe_dump(DOC), "all-disabled")) is True


# --- in the DaemonSet's pods on the upstream control plane ---------------------------------------------------------

def _fixture(label, config=None, deployed="true"):
    config = DOC if config is None else config
    return {
        "migManager": {"configMap": "custom-mig-parted-config", "namespace": "gpu-operator", "stepDelay": 0.2},
        "nodes": [{"metadata": {"name": "gpu-a", "labels": {MM.CONFIG_LABEL: label, MM.DEPLOY_LABEL: deployed,
                                                            "nvidia.com/gpu.deploy.device-plugin": "true"}}}],
        "configmaps": [{"metadata": {"name": "custom-mig-parted-config", "namespace": "gpu-operator"},
                        "data": {"config.yaml": yaml.safe_dump(config)}}],
    }


def _wait_state(lab, want, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        labels = lab.get_json("/api/v1/nodes/gpu-a")["metadata"]["labels"]
        if labels.get(MM.STATE_LABEL) in want:
            return labels
        time.sleep(0.2)
    raise AssertionError("state never reached %s: %s" % (want, labels))


def _events(lab):
    with open(os.path.join(lab.run_dir, "mig-manager.jsonl"), encoding="utf-8") as fh:
        return [json.loads(line)["event"] for line in fh]


def test_daemonset_pod_applies_on_start_and_on_label_change(tmp_path):
    """cmd/nvidia-mig-manager/main.go: the informer's AddFunc applies the current label at start; UpdateFunc only
    when the nvidia.com/mig.config value changes."""
    path = write(tmp_path, [{"model": H100, "mig_mode": "disabled"}])
    with kube_lab(_fixture("all-disabled"), run_dir=str(tmp_path / "k8s"), gpusim={"gpu-a": path}) as lab:
        _wait_state(lab, ("success",))
        lab.run_module("kubernetes.core.k8s", {"state": "patched", "kind": "Node", "name": "gpu-a",
                                               "definition": {"metadata": {"labels": {MM.CONFIG_LABEL: "all-balanced",
                                                                                      MM.STATE_LABEL: None}}}})
        labels = _wait_state(lab, ("success", "failed"))
        assert labels[MM.STATE_LABEL] == "success" and labels["nvidia.com/gpu.deploy.device-plugin"] == "true"
        # The device plugin advertises what the GPU now has once it sees the new state (it polls, as a restarted
        # plugin re-registers: not at the instant mig-manager says success).
        want = {"nvidia.com/mig-" + k: v for k, v in BALANCED.items()}
        lab.wait_for(lambda: mig_allocatable(lab.get_json("/api/v1/nodes/gpu-a")) == want, timeout=10,
                     what="the MIG devices advertised")
        states = [e for e in _events(lab) if MM.STATE_LABEL in e]
        assert any('"pending"' in e for e in states) and states[-1].endswith('"success"}')


def test_no_reconfigure_on_a_node_without_a_mig_manager_pod(tmp_path):
    """The DaemonSet's nodeSelector (nvidia.com/gpu.deploy.mig-manager=true) keeps its pod, and so mig-manager, off
    a node labelled "false"."""
    path = write(tmp_path, [{"model": H100, "mig_mode": "disabled"}])
    with kube_lab(_fixture("all-balanced", deployed="false"), run_dir=str(tmp_path / "k8s"), gpusim={"gpu-a": path}) as lab:
        assert [p.metadata.name for p in lab.pods("gpu-operator") if p.metadata.labels.get("app") == "nvidia-mig-manager"] == []
        time.sleep(3)
        assert MM.STATE_LABEL not in lab.get_json("/api/v1/nodes/gpu-a")["metadata"]["labels"]
        assert gpus_of(path)[0]["mig_mode"] == 0
