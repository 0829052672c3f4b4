# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/filter/joinconfig.py: preflight_join_config and preflight_register_with_taints (through Jinja: the playbook
test tests/integration/preflight/test_join_config_playbook.py)."""

from __future__ import annotations

import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.filter import joinconfig as F
from ansible_collections.gpuops.provision.plugins.plugin_utils._role_filters import preflight as RF

GATE = {"key": "gpuops.io/preflight", "value": "pending", "effect": "NoSchedule"}
GATE_FLAG = "--register-with-taints=gpuops.io/preflight=pending:NoSchedule"
FILTER_DIR = os.path.dirname(F.__file__)


def test_filters_are_registered_and_documented():
    filters = F.FilterModule().filters()
    assert sorted(filters) == ["preflight_join_config", "preflight_register_with_taints"]
    assert "preflight_node_name" in RF.filters()  # the role's own: through gpuops.provision.internal
    for name in filters:
        with open(os.path.join(FILTER_DIR, name + ".yml"), encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
        assert doc["DOCUMENTATION"]["name"] == name
        assert set(doc) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}
        assert doc["DOCUMENTATION"]["options"]["taint"]["required"] is True


@pytest.mark.parametrize("existing", [None, {}, ""])
def test_join_config_new_document(existing):
    assert F.preflight_join_config(existing, GATE) == {
        "apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration", "nodeRegistration": {"taints": [GATE]}}


def test_join_config_mapping_in_mapping_out_list_in_list_out():
    doc = {"apiVersion": "kubeadm.k8s.io/v1beta3", "kind": "JoinConfiguration",
           "nodeRegistration": {"taints": [{"key": "a", "effect": "NoExecute"}]}}
    out = F.preflight_join_config(doc, GATE)
    assert out["apiVersion"] == "kubeadm.k8s.io/v1beta3"
    assert out["nodeRegistration"]["taints"] == [{"key": "a", "effect": "NoExecute"}, GATE]
    kubelet = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration"}
    assert F.preflight_join_config([kubelet, doc], GATE) == [kubelet, out]
    assert F.preflight_join_config([], GATE) == [F.preflight_join_config(None, GATE)]


def test_register_with_taints_flags_and_env_file():
    assert F.preflight_register_with_taints(["--v=2"], GATE) == ["--v=2", GATE_FLAG]
    assert F.preflight_register_with_taints("--v=2", GATE) == "--v=2 " + GATE_FLAG
    assert F.preflight_register_with_taints(None, GATE) == GATE_FLAG
    assert F.preflight_register_with_taints("", GATE, env_var="KUBELET_EXTRA_ARGS") == 'KUBELET_EXTRA_ARGS="%s"\n' % GATE_FLAG
    assert F.preflight_register_with_taints("X=1\n", GATE, env_var="KUBELET_ARGS") == 'X=1\nKUBELET_ARGS="%s"\n' % GATE_FLAG


def test_errors_are_filter_errors_naming_the_filter_and_the_field():
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.provision\.preflight_join_config: taint\.effect 'Never' is not supported"):
        F.preflight_join_config(None, dict(GATE, effect="Never"))
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.provision\.preflight_join_config: JoinConfiguration\.apiVersion "
                       r"'kubeadm\.k8s\.io/v1beta2' is not supported"):
        F.preflight_join_config({"apiVersion": "kubeadm.k8s.io/v1beta2"}, GATE)
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.provision\.preflight_register_with_taints: taint\.key"):
        F.preflight_register_with_taints([], dict(GATE, key="not a key"))
    with pytest.raises(AnsibleFilterError, match=r"gpuops\.provision\.preflight_register_with_taints: .*is not a taint"):
        F.preflight_register_with_taints("--register-with-taints=oops", GATE)


def test_env_file_with_the_join_config_keeps_its_taints():
    join = [{"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration",
             "nodeRegistration": {"taints": [{"key": "example.com/dedicated", "value": "ml", "effect": "NoSchedule"}, GATE]}}]
    assert F.preflight_register_with_taints("", GATE, env_var="KUBELET_EXTRA_ARGS", join_config=join) == \
        'KUBELET_EXTRA_ARGS="--register-with-taints=example.com/dedicated=ml:NoSchedule,%s"\n' % GATE_FLAG.split("=", 1)[1]


# --- issue 37 point 6: the name kubeadm registers the node under ----------------------------------------------------

def test_node_name_filter_and_the_join_configuration_carrying_it():
    assert RF.preflight_node_name("", None, " GPU-A \n") == {"name": "gpu-a", "source": "the host name, as kubeadm registers it"}
    doc = F.preflight_join_config(None, GATE, "gpu-a")
    assert doc["nodeRegistration"] == {"name": "gpu-a", "taints": [GATE]}
    assert F.preflight_join_config([{"kind": "JoinConfiguration"}], GATE, "gpu-a")[0]["nodeRegistration"]["name"] == "gpu-a"
    with pytest.raises(AnsibleFilterError, match=r"^gpuops\.provision\.preflight_node_name: node name 'gpu_a' \(from "
                                                 r"node_preflight_k8s_node_name\) is not a DNS-1123 subdomain"):
        RF.preflight_node_name("gpu_a")
    with pytest.raises(AnsibleFilterError, match=r"^gpuops\.provision\.preflight_join_config: JoinConfiguration\."
                                                 r"nodeRegistration\.name is 'other', but the node is 'gpu-a'"):
        F.preflight_join_config({"nodeRegistration": {"name": "other"}}, GATE, "gpu-a")
