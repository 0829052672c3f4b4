# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/_preflight/join_config.py: the gate taint in a kubeadm JoinConfiguration, kubelet's --register-with-taints and
an environment file, and taint validation as the API server does it."""

from __future__ import annotations

import copy
import re

import pytest

from ansible_collections.gpuops.provision.plugins.module_utils._preflight import join_config as J

GATE = {"key": "gpuops.io/preflight", "value": "pending", "effect": "NoSchedule"}
OTHER = {"key": "example.com/dedicated", "value": "ml", "effect": "NoSchedule"}
GATE_FLAG = "--register-with-taints=gpuops.io/preflight=pending:NoSchedule"


def join(**fields):
    doc = {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration"}
    doc.update(fields)
    return doc


# --- render_join_taint -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("existing", [None, {}])
def test_new_document_is_v1beta4_with_only_the_gate_taint(existing):
    assert J.render_join_taint(existing, GATE) == {
        "apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration",
        "nodeRegistration": {"taints": [GATE]}}


def test_merge_keeps_other_taints_and_the_rest_of_the_document():
    existing = join(discovery={"bootstrapToken": {"token": "abcdef.0123456789abcdef", "apiServerEndpoint": "10.0.0.1:6443"}},
                    nodeRegistration={"name": "gpu-a", "criSocket": "unix:///run/containerd/containerd.sock",
                                      "taints": [OTHER, {"key": "example.com/spot", "effect": "PreferNoSchedule"}]})
    before = copy.deepcopy(existing)
    out = J.render_join_taint(existing, GATE)
    assert existing == before  # the input is not modified
    assert out["discovery"] == existing["discovery"]
    assert out["nodeRegistration"]["name"] == "gpu-a"
    assert out["nodeRegistration"]["criSocket"] == "unix:///run/containerd/containerd.sock"
    assert out["nodeRegistration"]["taints"] == [OTHER, {"key": "example.com/spot", "effect": "PreferNoSchedule"}, GATE]
    assert list(out)[:2] == ["apiVersion", "kind"]


def test_the_gate_taint_is_kept_once():
    once = J.render_join_taint(join(nodeRegistration={"taints": [OTHER]}), GATE)
    twice = J.render_join_taint(once, GATE)
    assert twice == once
    assert [t["key"] for t in twice["nodeRegistration"]["taints"]].count(GATE["key"]) == 1


def test_same_key_and_effect_with_another_value_is_replaced_in_place_and_duplicates_dropped():
    stale = dict(GATE, value="old")
    out = J.render_join_taint(join(nodeRegistration={"taints": [stale, OTHER, dict(stale)]}), GATE)
    assert out["nodeRegistration"]["taints"] == [GATE, OTHER]


def test_same_key_with_another_effect_is_another_taint():
    noexec = dict(GATE, effect="NoExecute")
    out = J.render_join_taint(join(nodeRegistration={"taints": [noexec]}), GATE)
    assert out["nodeRegistration"]["taints"] == [noexec, GATE]


def test_an_identical_entry_is_kept_as_written():
    written = {"effect": "NoSchedule", "key": "gpuops.io/preflight", "value": "pending"}
    out = J.render_join_taint(join(nodeRegistration={"taints": [written]}), GATE)
    assert out["nodeRegistration"]["taints"][0] is not None and list(out["nodeRegistration"]["taints"][0]) == ["effect", "key", "value"]


@pytest.mark.parametrize("taints", [[], None])
def test_explicit_empty_or_null_taints_on_a_worker_give_only_the_gate_taint(taints):
    out = J.render_join_taint(join(nodeRegistration={"taints": taints}), GATE)
    assert out["nodeRegistration"]["taints"] == [GATE]


def test_missing_or_null_node_registration():
    assert J.render_join_taint(join(), GATE)["nodeRegistration"] == {"taints": [GATE]}
    assert J.render_join_taint(join(nodeRegistration=None), GATE)["nodeRegistration"] == {"taints": [GATE]}


def test_control_plane_join_that_omitted_taints_keeps_kubeadms_control_plane_taint():
    out = J.render_join_taint(join(controlPlane={"localAPIEndpoint": {"advertiseAddress": "10.0.0.2"}}), GATE)
    assert out["nodeRegistration"]["taints"] == [
        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}, GATE]
    # an empty controlPlane mapping is still a control-plane join (non-nil pointer); null is not
    assert len(J.render_join_taint(join(controlPlane={}), GATE)["nodeRegistration"]["taints"]) == 2
    assert J.render_join_taint(join(controlPlane=None), GATE)["nodeRegistration"]["taints"] == [GATE]
    # taints: [] on a control-plane join means "no control-plane taint": only the gate's
    out = J.render_join_taint(join(controlPlane={}, nodeRegistration={"taints": []}), GATE)
    assert out["nodeRegistration"]["taints"] == [GATE]


def test_v1beta3_is_kept_and_a_missing_api_version_or_kind_is_filled():
    out = J.render_join_taint({"apiVersion": "kubeadm.k8s.io/v1beta3", "kind": "JoinConfiguration"}, GATE)
    assert out["apiVersion"] == "kubeadm.k8s.io/v1beta3"
    out = J.render_join_taint({"discovery": {"file": {"kubeConfigPath": "/etc/kubernetes/discovery.conf"}}}, GATE)
    assert (out["apiVersion"], out["kind"]) == ("kubeadm.k8s.io/v1beta4", "JoinConfiguration")


@pytest.mark.parametrize("api", ["kubeadm.k8s.io/v1beta2", "kubeadm.k8s.io/v1beta1", "v1", "kubeadm.k8s.io/v1"])
def test_other_api_versions_are_refused_naming_the_field(api):
    with pytest.raises(J.JoinConfigError, match=r"JoinConfiguration\.apiVersion '%s' is not supported: use "
                       r"kubeadm\.k8s\.io/v1beta4" % api.replace(".", r"\.")):
        J.render_join_taint({"apiVersion": api, "kind": "JoinConfiguration"}, GATE)


def test_another_kind_is_refused():
    with pytest.raises(J.JoinConfigError, match="kind 'InitConfiguration' is not a JoinConfiguration"):
        J.render_join_taint({"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "InitConfiguration"}, GATE)


def test_bad_shapes_are_refused():
    with pytest.raises(J.JoinConfigError, match="must be a mapping"):
        J.render_join_taint(["not", "a", "document"], GATE)
    with pytest.raises(J.JoinConfigError, match=r"nodeRegistration must be a mapping"):
        J.render_join_taint(join(nodeRegistration="gpu-a"), GATE)
    with pytest.raises(J.JoinConfigError, match=r"nodeRegistration\.taints must be a list"):
        J.render_join_taint(join(nodeRegistration={"taints": {"key": "a"}}), GATE)


def test_an_invalid_existing_taint_is_named_by_its_place():
    with pytest.raises(J.JoinConfigError, match=r"JoinConfiguration\.nodeRegistration\.taints\[1\]\.effect 'NoSchedul' "
                       r"is not supported"):
        J.render_join_taint(join(nodeRegistration={"taints": [OTHER, dict(OTHER, effect="NoSchedul")]}), GATE)


def test_kubelet_extra_args_register_with_taints_gets_the_gate_taint_v1beta3_map():
    doc = {"apiVersion": "kubeadm.k8s.io/v1beta3", "kind": "JoinConfiguration",
           "nodeRegistration": {"kubeletExtraArgs": {"node-ip": "10.0.0.5", "register-with-taints": "a=b:NoExecute"}}}
    out = J.render_join_taint(doc, GATE)
    assert out["nodeRegistration"]["kubeletExtraArgs"] == {
        "node-ip": "10.0.0.5", "register-with-taints": "a=b:NoExecute,gpuops.io/preflight=pending:NoSchedule"}
    assert out["nodeRegistration"]["taints"] == [GATE]


def test_kubelet_extra_args_register_with_taints_gets_the_gate_taint_v1beta4_list():
    args = [{"name": "node-ip", "value": "10.0.0.5"}, {"name": "register-with-taints", "value": "a:NoSchedule"},
            {"name": "register-with-taints", "value": "gpuops.io/preflight=pending:NoSchedule"}]
    out = J.render_join_taint(join(nodeRegistration={"kubeletExtraArgs": args}), GATE)
    assert out["nodeRegistration"]["kubeletExtraArgs"] == [
        {"name": "node-ip", "value": "10.0.0.5"},
        {"name": "register-with-taints", "value": "a:NoSchedule,gpuops.io/preflight=pending:NoSchedule"},
        {"name": "register-with-taints", "value": "gpuops.io/preflight=pending:NoSchedule"}]


def test_kubelet_extra_args_without_the_flag_are_left_alone():
    args = [{"name": "node-ip", "value": "10.0.0.5"}]
    assert J.render_join_taint(join(nodeRegistration={"kubeletExtraArgs": args}), GATE)["nodeRegistration"]["kubeletExtraArgs"] == args
    with pytest.raises(J.JoinConfigError, match="kubeletExtraArgs must be a mapping"):
        J.render_join_taint(join(nodeRegistration={"kubeletExtraArgs": "--node-ip=1"}), GATE)


# --- taint validation --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("effect", ["NoSchedule", "PreferNoSchedule", "NoExecute"])
def test_the_three_effects_are_accepted(effect):
    assert J.validate_taint(dict(GATE, effect=effect))["effect"] == effect


@pytest.mark.parametrize("effect", ["noschedule", "NoScheduleNoAdmit", "Evict", 1])
def test_a_bad_effect_is_refused_with_the_field_named(effect):
    with pytest.raises(J.JoinConfigError, match=r"taint\.effect .* is not supported: one of NoSchedule, PreferNoSchedule, NoExecute"):
        J.render_join_taint(None, dict(GATE, effect=effect))


@pytest.mark.parametrize("effect", [None, ""])
def test_the_effect_is_required(effect):
    with pytest.raises(J.JoinConfigError, match=r"taint\.effect is required"):
        J.register_with_taints_flag([], dict(GATE, effect=effect))


@pytest.mark.parametrize("key, problem", [
    ("", "taint.key is required"),
    (None, "taint.key is required"),
    ("Bad.Example.com/x", "prefix part must be a DNS-1123 subdomain"),
    ("/x", "prefix part must be non-empty"),
    ("example.com/", "name part must be non-empty"),
    ("a/b/c", "one '/'"),
    ("-starts-with-dash", "must start and end with an alphanumeric"),
    ("has space", "name part must consist of"),
    ("x" * 64, "name part must be no more than 63 characters"),
    ("%s.com/x" % ("a" * 250), "prefix part must be no more than 253 characters"),
])
def test_a_bad_key_is_refused_with_the_field_named(key, problem):
    with pytest.raises(J.JoinConfigError, match=r"taint\.key") as exc:
        J.validate_taint(dict(GATE, key=key))
    assert problem in str(exc.value)


@pytest.mark.parametrize("key", ["x" * 63, "gpuops.io/preflight", "A_b.c-D", "node-role.kubernetes.io/control-plane", "9"])
def test_good_keys(key):
    assert J.validate_taint(dict(GATE, key=key))["key"] == key


@pytest.mark.parametrize("value, problem", [
    ("has space", "is not a valid taint value"),
    ("-x", "is not a valid taint value"),
    ("v" * 64, "must be no more than 63 characters"),
    (1, "taint.value must be a string"),
])
def test_a_bad_value_is_refused_with_the_field_named(value, problem):
    with pytest.raises(J.JoinConfigError, match=r"taint\.value") as exc:
        J.validate_taint(dict(GATE, value=value))
    assert problem in str(exc.value)


@pytest.mark.parametrize("value", ["", None])
def test_an_empty_value_is_allowed(value):
    t = J.validate_taint(dict(GATE, value=value))
    assert t["value"] == "" and J.taint_string(t) == "gpuops.io/preflight:NoSchedule"
    assert J.render_join_taint(None, t)["nodeRegistration"]["taints"] == [{"key": "gpuops.io/preflight", "effect": "NoSchedule"}]


def test_a_taint_must_be_a_mapping_without_unknown_fields():
    with pytest.raises(J.JoinConfigError, match="taint must be a mapping"):
        J.validate_taint("gpuops.io/preflight=pending:NoSchedule")
    with pytest.raises(J.JoinConfigError, match=r"taint: unknown field\(s\) efect"):
        J.validate_taint({"key": "a", "efect": "NoSchedule"})


# --- register_with_taints_flag -------------------------------------------------------------------------------------

def test_flag_appended_to_a_string_without_it():
    assert J.register_with_taints_flag("--node-ip=10.0.0.5 --v=2", GATE) == "--node-ip=10.0.0.5 --v=2 " + GATE_FLAG


def test_flag_merged_with_an_existing_register_with_taints():
    out = J.register_with_taints_flag("--node-ip=10.0.0.5 --register-with-taints=a=b:NoExecute,c:NoSchedule", GATE)
    assert out == "--node-ip=10.0.0.5 --register-with-taints=a=b:NoExecute,c:NoSchedule,gpuops.io/preflight=pending:NoSchedule"
    # the space-separated form, and every occurrence (kubelet keeps the last one)
    out = J.register_with_taints_flag(["--register-with-taints", "a=b:NoExecute", "--v=2", "--register-with-taints=c:NoSchedule"], GATE)
    assert out == ["--register-with-taints", "a=b:NoExecute,gpuops.io/preflight=pending:NoSchedule", "--v=2",
                   "--register-with-taints=c:NoSchedule,gpuops.io/preflight=pending:NoSchedule"]


def test_flag_replaces_a_stale_value_and_keeps_the_taint_once():
    out = J.register_with_taints_flag(["--register-with-taints=gpuops.io/preflight=old:NoSchedule,a:NoExecute"], GATE)
    assert out == ["--register-with-taints=gpuops.io/preflight=pending:NoSchedule,a:NoExecute"]
    assert J.register_with_taints_flag(out, GATE) == out


def test_flag_unchanged_when_already_registered():
    flags = "--node-ip=10.0.0.5   '--register-with-taints=gpuops.io/preflight=pending:NoSchedule'"
    assert J.register_with_taints_flag(flags, GATE) is flags  # formatting kept


@pytest.mark.parametrize("existing, expected", [
    (None, GATE_FLAG), ("", GATE_FLAG), ("   ", GATE_FLAG), ([], [GATE_FLAG]), ((), [GATE_FLAG]),
    (["--register-with-taints="], [GATE_FLAG]),
    ("--register-with-taints ''", "--register-with-taints gpuops.io/preflight=pending:NoSchedule"),
])
def test_flag_empty_selection_cases(existing, expected):
    assert J.register_with_taints_flag(existing, GATE) == expected


def test_flag_keeps_quoting_for_arguments_that_need_it():
    out = J.register_with_taints_flag("--node-labels='a=b c'", GATE)
    assert out == "'--node-labels=a=b c' " + GATE_FLAG


@pytest.mark.parametrize("flags, problem", [
    ("--register-with-taints", "has no value"),
    ("--register-with-taints=a=b=c:NoSchedule", "is not a taint"),
    ("--register-with-taints=a=b", "is not a taint"),
    ("--register-with-taints=a=b:Sometimes", "effect 'Sometimes' is not supported"),
    ("--register-with-taints=a,,b:NoSchedule", "is not a taint"),
    ("--node-ip='unterminated", "cannot be split"),
    (["--v=2", 3], "must be strings"),
    (3, "a list of arguments or a string"),
])
def test_flag_refuses_what_kubelet_would_refuse(flags, problem):
    with pytest.raises(J.JoinConfigError) as exc:
        J.register_with_taints_flag(flags, GATE)
    assert problem in str(exc.value)


def test_flag_refuses_a_bad_gate_taint_naming_the_field():
    with pytest.raises(J.JoinConfigError, match=r"taint\.effect 'NoSchedul' is not supported"):
        J.register_with_taints_flag("--v=2", dict(GATE, effect="NoSchedul"))


# --- kubelet_env_text ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [None, ""])
def test_env_file_created(text):
    assert J.kubelet_env_text(text, GATE) == 'KUBELET_EXTRA_ARGS="%s"\n' % GATE_FLAG


def test_env_file_variable_merged_other_lines_kept():
    text = "# managed by hand\nKUBELET_EXTRA_ARGS=--node-ip=10.0.0.5\nOTHER=1\n"
    assert J.kubelet_env_text(text, GATE) == (
        '# managed by hand\nKUBELET_EXTRA_ARGS="--node-ip=10.0.0.5 %s"\nOTHER=1\n' % GATE_FLAG)


def test_env_file_quoted_value_existing_flag_and_export():
    text = "export KUBELET_EXTRA_ARGS='--register-with-taints=a:NoExecute --v=2'"
    assert J.kubelet_env_text(text, GATE) == (
        'export KUBELET_EXTRA_ARGS="--register-with-taints=a:NoExecute,gpuops.io/preflight=pending:NoSchedule --v=2"')


def test_env_file_unchanged_when_registered_and_every_assignment_merged():
    done = J.kubelet_env_text("A=1\nKUBELET_EXTRA_ARGS=\nKUBELET_EXTRA_ARGS=\"--v=2\"\n", GATE)
    assert done == 'A=1\nKUBELET_EXTRA_ARGS="%s"\nKUBELET_EXTRA_ARGS="--v=2 %s"\n' % (GATE_FLAG, GATE_FLAG)
    assert J.kubelet_env_text(done, GATE) is done


def test_env_file_appends_to_a_file_without_a_final_newline_and_other_variables():
    assert J.kubelet_env_text("A=1", GATE, "KUBELET_ARGS") == 'A=1\nKUBELET_ARGS="%s"\n' % GATE_FLAG
    assert J.kubelet_env_text("KUBELET_EXTRA_ARGS_OLD=x\n", GATE).endswith('KUBELET_EXTRA_ARGS="%s"\n' % GATE_FLAG)


def test_env_file_refusals():
    with pytest.raises(J.JoinConfigError, match="not an environment variable name"):
        J.kubelet_env_text("", GATE, "KUBELET EXTRA")
    with pytest.raises(J.JoinConfigError, match="quotes or backslashes"):
        J.kubelet_env_text('KUBELET_EXTRA_ARGS="--node-labels=\'a b\'"\n', GATE)


# --- merge_join_documents --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("docs", [None, [], [None], [None, None]])
def test_documents_empty_selection_gives_one_new_join_configuration(docs):
    assert J.merge_join_documents(docs, GATE) == [J.render_join_taint(None, GATE)]


def test_documents_other_kinds_kept_and_join_appended_with_the_files_api_version():
    cluster = {"apiVersion": "kubeadm.k8s.io/v1beta3", "kind": "ClusterConfiguration", "clusterName": "gpu"}
    kubelet = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "cgroupDriver": "systemd"}
    out = J.merge_join_documents([kubelet, None, cluster], GATE)
    assert out[:2] == [kubelet, cluster]
    assert out[2]["apiVersion"] == "kubeadm.k8s.io/v1beta3" and out[2]["nodeRegistration"]["taints"] == [GATE]


def test_documents_join_merged_in_place():
    kubelet = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration"}
    docs = [join(nodeRegistration={"taints": [OTHER]}), kubelet]
    out = J.merge_join_documents(docs, GATE)
    assert out == [join(nodeRegistration={"taints": [OTHER, GATE]}), kubelet]
    assert J.merge_join_documents(out, GATE) == out


def test_documents_a_lone_document_without_kind_is_the_join_configuration():
    out = J.merge_join_documents([{"discovery": {"file": {"kubeConfigPath": "/x"}}}], GATE)
    assert out[0]["kind"] == "JoinConfiguration" and out[0]["discovery"] == {"file": {"kubeConfigPath": "/x"}}


def test_documents_refusals():
    with pytest.raises(J.JoinConfigError, match=r"2 JoinConfiguration documents \(documents 1, 2\)"):
        J.merge_join_documents([join(), join()], GATE)
    with pytest.raises(J.JoinConfigError, match="document 2 has no kind"):
        J.merge_join_documents([join(), {"apiVersion": "kubeadm.k8s.io/v1beta4"}], GATE)
    with pytest.raises(J.JoinConfigError, match="document 1 is not a mapping"):
        J.merge_join_documents(["text"], GATE)
    with pytest.raises(J.JoinConfigError, match=r"document 1 \(ClusterConfiguration\)\.apiVersion 'kubeadm\.k8s\.io/v1beta2'"):
        J.merge_join_documents([{"apiVersion": "kubeadm.k8s.io/v1beta2", "kind": "ClusterConfiguration"}], GATE)
    with pytest.raises(J.JoinConfigError, match="must be a list"):
        J.merge_join_documents({"kind": "JoinConfiguration"}, GATE)


# --- the environment file beside kubeadm's flags ---------------------------------------------------------------------
# kubeadm's drop-in runs `kubelet ... $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS` and the kubelet keeps the last
# --register-with-taints (pkg/util/flag/flags.go RegisterWithTaintsVar.Set replaces the list): the env file's flag must
# carry the JoinConfiguration's taints. tests/integration/preflight/test_join_registration.py shows it on a kubelet.

def test_registered_join_taints_worker_extra_args_override_and_control_plane():
    join = {"kind": "JoinConfiguration", "nodeRegistration": {"taints": [OTHER, GATE]}}
    assert J.registered_join_taints([{"kind": "KubeletConfiguration"}, join]) == [OTHER, GATE]
    override = copy.deepcopy(join)
    override["nodeRegistration"]["kubeletExtraArgs"] = [
        {"name": "register-with-taints", "value": "a=b:NoExecute"}, {"name": "register-with-taints", "value": "c:NoSchedule"}]
    assert J.registered_join_taints([override]) == [{"key": "c", "value": "", "effect": "NoSchedule"}]
    override["nodeRegistration"]["kubeletExtraArgs"] = {"register-with-taints": ""}
    assert J.registered_join_taints([override]) == []
    assert J.registered_join_taints([dict(join, controlPlane={})]) == []
    assert J.registered_join_taints([{"kind": "JoinConfiguration"}]) == []
    assert J.registered_join_taints([]) == []


def test_env_file_keeps_the_join_taints_kubeadm_would_register():
    assert J.kubelet_env_text("", GATE, also=[OTHER, GATE]) == \
        'KUBELET_EXTRA_ARGS="--register-with-taints=example.com/dedicated=ml:NoSchedule,gpuops.io/preflight=pending:NoSchedule"\n'
    # The file's own value for a key and effect stays; a taint it lacks is added before the gate taint.
    text = 'KUBELET_EXTRA_ARGS="--register-with-taints=example.com/dedicated=other:NoSchedule --v=2"\n'
    assert J.kubelet_env_text(text, GATE, also=[OTHER]) == \
        'KUBELET_EXTRA_ARGS="--register-with-taints=example.com/dedicated=other:NoSchedule,gpuops.io/preflight=pending:NoSchedule --v=2"\n'
    done = J.kubelet_env_text("", GATE, also=[OTHER])
    assert J.kubelet_env_text(done, GATE, also=[OTHER]) == done
    with pytest.raises(J.JoinConfigError, match="JoinConfiguration's taint"):
        J.kubelet_env_text("", GATE, also=[{"key": "k", "effect": "Sometimes"}])


# --- every message in full: the field, the value and the reason ------------------------------------------------------

def _raises(message):
    """pytest.raises for exactly this JoinConfigError message."""
    return pytest.raises(J.JoinConfigError, match="^%s$" % re.escape(message))


EFFECTS = "one of NoSchedule, PreferNoSchedule, NoExecute"
QNAME_CHARS = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
               "alphanumeric character (e.g. 'MyName', 'my.name', '123-abc')")
DNS_PREFIX = ("prefix part must be a DNS-1123 subdomain (lower case alphanumerics, '-' or '.', starting and ending "
              "with an alphanumeric character, e.g. 'example.com')")
VALUE_CHARS = ("must be empty or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
               "alphanumeric character")


@pytest.mark.parametrize("key, problems", [
    ("/x", "prefix part must be non-empty"),
    ("Bad.Example.com/x", DNS_PREFIX),
    ("%s.com/x" % ("a" * 250), "prefix part must be no more than 253 characters"),
    ("%s/x" % ("A" * 254), "prefix part must be no more than 253 characters; " + DNS_PREFIX),
    ("a/b/c", "must be a name with an optional DNS subdomain prefix and one '/' (e.g. 'example.com/MyName')"),
    ("example.com/", "name part must be non-empty"),
    ("x" * 64, "name part must be no more than 63 characters"),
    ("-" + "x" * 63, "name part must be no more than 63 characters; " + QNAME_CHARS),
    ("has space", QNAME_CHARS),
])
def test_key_message(key, problems):
    with _raises("taint.key %r is not a valid taint key: %s" % (key, problems)):
        J.validate_taint(dict(GATE, key=key))


@pytest.mark.parametrize("key", ["%s.com/x" % ("a" * 249), "%s.com/%s" % ("a" * 249, "b" * 63)])
def test_key_prefix_of_253_characters_is_valid(key):
    assert J.validate_taint(dict(GATE, key=key)) == dict(GATE, key=key)


@pytest.mark.parametrize("value, problems", [
    ("v" * 64, "must be no more than 63 characters"),
    ("-" + "v" * 63, "must be no more than 63 characters; " + VALUE_CHARS),
    ("has space", VALUE_CHARS),
])
def test_value_message(value, problems):
    with _raises("taint.value %r is not a valid taint value: %s" % (value, problems)):
        J.validate_taint(dict(GATE, value=value))


def test_value_of_63_characters_is_valid():
    assert J.validate_taint(dict(GATE, value="v" * 63)) == dict(GATE, value="v" * 63)


def test_taint_field_messages():
    with _raises("taint must be a mapping with key, value and effect, not 'gpuops.io/preflight=pending:NoSchedule'"):
        J.validate_taint("gpuops.io/preflight=pending:NoSchedule")
    with _raises("taint: unknown field(s) efect, vaule; a taint has key, value and effect"):
        J.validate_taint({"key": "a", "vaule": "b", "efect": "NoSchedule"})
    with _raises("taint.key is required (a qualified name such as gpuops.io/preflight), got None"):
        J.validate_taint({"effect": "NoSchedule"})
    with _raises("taint.key is required (a qualified name such as gpuops.io/preflight), got ''"):
        J.validate_taint(dict(GATE, key=""))
    with _raises("taint.value must be a string, got 1"):
        J.validate_taint(dict(GATE, value=1))
    with _raises("taint.effect is required: " + EFFECTS):
        J.validate_taint(dict(GATE, effect=""))
    with _raises("taint.effect 'noschedule' is not supported: " + EFFECTS):
        J.validate_taint(dict(GATE, effect="noschedule"))


def test_time_added_is_kept_everywhere():
    stamped = dict(GATE, timeAdded="2026-12-04T10:00:00Z")
    assert J.validate_taint(stamped) == {"key": "gpuops.io/preflight", "value": "pending", "effect": "NoSchedule",
                                         "timeAdded": "2026-12-04T10:00:00Z"}
    assert J.validate_taint(dict(GATE, timeAdded=None)) == GATE
    # new, and replacing a stale entry in place
    assert J.render_join_taint(None, stamped)["nodeRegistration"]["taints"] == [stamped]
    stale = dict(GATE, value="old")
    assert J.render_join_taint(join(nodeRegistration={"taints": [OTHER, stale]}), stamped)["nodeRegistration"] == {
        "taints": [OTHER, stamped]}


def test_render_messages():
    with _raises("the JoinConfiguration must be a mapping (one YAML document), not ['not', 'a', 'document']"):
        J.render_join_taint(["not", "a", "document"], GATE)
    with _raises("JoinConfiguration.apiVersion 'kubeadm.k8s.io/v1beta2' is not supported: use kubeadm.k8s.io/v1beta4 "
                 "(or kubeadm.k8s.io/v1beta3, still accepted by kubeadm)"):
        J.render_join_taint({"apiVersion": "kubeadm.k8s.io/v1beta2"}, GATE)
    with _raises("kind 'InitConfiguration' is not a JoinConfiguration (the taint goes into kubeadm join's "
                 "configuration)"):
        J.render_join_taint({"kind": "InitConfiguration"}, GATE)
    with _raises("JoinConfiguration.nodeRegistration must be a mapping, not 'gpu-a'"):
        J.render_join_taint(join(nodeRegistration="gpu-a"), GATE)
    with _raises("JoinConfiguration.nodeRegistration.taints must be a list, not {'key': 'a'}"):
        J.render_join_taint(join(nodeRegistration={"taints": {"key": "a"}}), GATE)
    with _raises("JoinConfiguration.nodeRegistration.kubeletExtraArgs must be a mapping (v1beta3) or a list of "
                 "{name, value} (v1beta4), not '--node-ip=1'"):
        J.render_join_taint(join(nodeRegistration={"kubeletExtraArgs": "--node-ip=1"}), GATE)


def test_render_empty_api_version_and_kind_are_filled():
    assert J.render_join_taint({"apiVersion": "", "kind": ""}, GATE) == J.render_join_taint(None, GATE)


def test_render_result_shares_nothing_with_the_input():
    existing = join(discovery={"bootstrapToken": {"token": "abcdef.0123456789abcdef"}},
                    nodeRegistration={"taints": [OTHER]})
    before = copy.deepcopy(existing)
    out = J.render_join_taint(existing, GATE)
    out["discovery"]["bootstrapToken"]["token"] = "changed"
    out["nodeRegistration"]["taints"][0]["value"] = "changed"
    assert existing == before


@pytest.mark.parametrize("extra", [{"register-with-taints": None}, [{"name": "register-with-taints", "value": None}],
                                   [{"name": "register-with-taints"}]])
def test_extra_args_null_register_with_taints_is_an_empty_list(extra):
    out = J.render_join_taint(join(nodeRegistration={"kubeletExtraArgs": extra}), GATE)
    value = "gpuops.io/preflight=pending:NoSchedule"
    expected = {"register-with-taints": value} if isinstance(extra, dict) else [
        {"name": "register-with-taints", "value": value}]
    assert out["nodeRegistration"]["kubeletExtraArgs"] == expected
    assert J.registered_join_taints([join(nodeRegistration={"kubeletExtraArgs": extra, "taints": [OTHER]})]) == []


def test_extra_args_messages_name_the_entry():
    with _raises("JoinConfiguration.nodeRegistration.kubeletExtraArgs.register-with-taints: 'a=b' is not a taint "
                 "(key=value:effect or key:effect)"):
        J.render_join_taint(join(nodeRegistration={"kubeletExtraArgs": {"register-with-taints": "a=b"}}), GATE)
    args = [{"name": "node-ip", "value": "10.0.0.5"}, {"name": "register-with-taints", "value": "a=b=c:NoSchedule"}]
    with _raises("JoinConfiguration.nodeRegistration.kubeletExtraArgs[1].value: 'a=b=c:NoSchedule' is not a taint "
                 "(key=value:effect or key:effect)"):
        J.render_join_taint(join(nodeRegistration={"kubeletExtraArgs": args}), GATE)


def test_flag_messages():
    with _raises("kubelet flags: --register-with-taints has no value"):
        J.register_with_taints_flag("--v=2 --register-with-taints", GATE)
    with _raises("kubelet flags: --register-with-taints has no value"):
        J.register_with_taints_flag(["--register-with-taints"], GATE)
    with _raises("kubelet flags --register-with-taints: 'a=b' is not a taint (key=value:effect or key:effect)"):
        J.register_with_taints_flag(["--register-with-taints", "a=b"], GATE)
    with _raises("kubelet flags --register-with-taints: 'a=b=c:NoSchedule' is not a taint (key=value:effect or "
                 "key:effect)"):
        J.register_with_taints_flag("--register-with-taints=a=b=c:NoSchedule", GATE)
    with _raises("kubelet flags --register-with-taints 'a=b:Sometimes'.effect 'Sometimes' is not supported: "
                 + EFFECTS):
        J.register_with_taints_flag(["--register-with-taints=a=b:Sometimes"], GATE)
    with _raises("kubelet flags must be strings, got 3"):
        J.register_with_taints_flag(["--v=2", 3], GATE)
    with _raises("kubelet flags must be a list of arguments or a string, not 3"):
        J.register_with_taints_flag(3, GATE)
    with _raises("kubelet flags \"--node-ip='unterminated\" cannot be split into arguments: No closing quotation"):
        J.register_with_taints_flag("--node-ip='unterminated", GATE)


def test_flag_space_form_after_other_arguments():
    flags = ["--v=2", "--register-with-taints", "a:NoSchedule", "--node-ip=10.0.0.5"]
    assert J.register_with_taints_flag(flags, GATE) == [
        "--v=2", "--register-with-taints", "a:NoSchedule,gpuops.io/preflight=pending:NoSchedule", "--node-ip=10.0.0.5"]
    assert J.register_with_taints_flag(" ".join(flags), GATE) == (
        "--v=2 --register-with-taints a:NoSchedule,gpuops.io/preflight=pending:NoSchedule --node-ip=10.0.0.5")


@pytest.mark.parametrize("value, merged", [
    ("--register-with-taints a:NoExecute", "--register-with-taints a:NoExecute,%s,%s"),
    ("--register-with-taints=a:NoExecute --v=2", "--register-with-taints=a:NoExecute,%s,%s --v=2"),
    ("--v=2", "--v=2 --register-with-taints=%s,%s"),
])
def test_env_file_adds_the_join_taints_to_every_flag_form(value, merged):
    pair = ("example.com/dedicated=ml:NoSchedule", "gpuops.io/preflight=pending:NoSchedule")
    assert J.kubelet_env_text("KUBELET_EXTRA_ARGS=\"%s\"\n" % value, GATE, also=[OTHER]) == (
        "KUBELET_EXTRA_ARGS=\"%s\"\n" % (merged % pair))


@pytest.mark.parametrize("empty", ['""', "''", ""])
def test_env_file_empty_value(empty):
    assert J.kubelet_env_text("KUBELET_EXTRA_ARGS=%s\n" % empty, GATE) == 'KUBELET_EXTRA_ARGS="%s"\n' % GATE_FLAG


def test_env_file_value_kept_to_its_last_character():
    # every assignment is merged; trailing blanks and the line ending stay after the closing quote
    text = "KUBELET_EXTRA_ARGS=--node-labels=gpu.model=RTX\nX=1\nKUBELET_EXTRA_ARGS=--v=2  \r\n"
    assert J.kubelet_env_text(text, GATE) == (
        'KUBELET_EXTRA_ARGS="--node-labels=gpu.model=RTX %s"\nX=1\nKUBELET_EXTRA_ARGS="--v=2 %s"  \r\n'
        % (GATE_FLAG, GATE_FLAG))


def test_env_file_appended_after_a_final_newline():
    assert J.kubelet_env_text("OTHER=1\n", GATE) == 'OTHER=1\nKUBELET_EXTRA_ARGS="%s"\n' % GATE_FLAG


def test_env_file_messages():
    with _raises("env_var 'KUBELET EXTRA' is not an environment variable name"):
        J.kubelet_env_text("", GATE, "KUBELET EXTRA")
    with _raises("the environment file must be text, not 3"):
        J.kubelet_env_text(3, GATE)
    with _raises("KUBELET_EXTRA_ARGS in the environment file: quotes or backslashes inside the value are not "
                 "supported: \"--node-labels='a b'\""):
        J.kubelet_env_text('KUBELET_EXTRA_ARGS="--node-labels=\'a b\'"\n', GATE)
    with _raises("KUBELET_EXTRA_ARGS in the environment file: --register-with-taints has no value"):
        J.kubelet_env_text("KUBELET_EXTRA_ARGS=--register-with-taints\n", GATE)
    with _raises("KUBELET_EXTRA_ARGS in the environment file --register-with-taints: 'a=b' is not a taint "
                 "(key=value:effect or key:effect)"):
        J.kubelet_env_text("KUBELET_EXTRA_ARGS=--register-with-taints=a=b\n", GATE)
    with _raises("the JoinConfiguration's taint.effect 'Sometimes' is not supported: " + EFFECTS):
        J.kubelet_env_text("", GATE, also=[{"key": "k", "effect": "Sometimes"}])


def test_documents_messages():
    with _raises("the documents must be a list, not {'kind': 'JoinConfiguration'}"):
        J.merge_join_documents({"kind": "JoinConfiguration"}, GATE)
    with _raises("document 1 is not a mapping: 'text'"):
        J.merge_join_documents(["text"], GATE)
    with _raises("document 2 has no kind (in a file of several documents each needs one)"):
        J.merge_join_documents([join(), {"apiVersion": "kubeadm.k8s.io/v1beta4"}], GATE)
    with _raises("2 JoinConfiguration documents (documents 1, 3); kubeadm takes one"):
        J.merge_join_documents([join(), {"kind": "KubeletConfiguration"}, join()], GATE)


def test_registered_join_taints_last_flag_entry_wins_whatever_follows():
    extra = [{"name": "register-with-taints", "value": "a:NoSchedule,c=d:NoExecute"},
             {"name": "node-ip", "value": "10.0.0.5"}, "not an argument"]
    assert J.registered_join_taints([join(nodeRegistration={"kubeletExtraArgs": extra})]) == [
        {"key": "a", "value": "", "effect": "NoSchedule"}, {"key": "c", "value": "d", "effect": "NoExecute"}]


def test_registered_join_taints_kind_may_be_empty():
    assert J.registered_join_taints([{"kind": "", "nodeRegistration": {"taints": [OTHER]}}]) == [OTHER]


def test_registered_join_taints_messages():
    def reg(**fields):
        return J.registered_join_taints([join(nodeRegistration=fields)])
    with _raises("JoinConfiguration.nodeRegistration.kubeletExtraArgs: 'x' is not a taint (key=value:effect or "
                 "key:effect)"):
        reg(kubeletExtraArgs={"register-with-taints": "x"})
    with _raises("JoinConfiguration.nodeRegistration.kubeletExtraArgs 'a=b:Sometimes'.effect 'Sometimes' is not "
                 "supported: " + EFFECTS):
        reg(kubeletExtraArgs=[{"name": "register-with-taints", "value": "a=b:Sometimes"}])
    with _raises("JoinConfiguration.nodeRegistration.taints[1].effect 'NoSchedul' is not supported: " + EFFECTS):
        reg(taints=[OTHER, dict(OTHER, effect="NoSchedul")])


# --- issue 37 point 6: kubeadm registers a node under nodeRegistration.name, else its lower-cased host name -----------
# (cmd/kubeadm/app/util/config/initconfiguration.go SetNodeRegistrationDynamicDefaults; k8s.io/component-helpers/node/
# util/hostname.go GetHostname: TrimSpace then ToLower).

@pytest.mark.parametrize("explicit, documents, hostname, expected", [
    ("gpu-a", {"nodeRegistration": {"name": "other"}}, "Host", {"name": "gpu-a", "source": "node_preflight_k8s_node_name"}),
    ("", {"kind": "JoinConfiguration", "nodeRegistration": {"name": "gpu-b"}}, "Host",
     {"name": "gpu-b", "source": "the JoinConfiguration's nodeRegistration.name"}),
    (None, [{"kind": "ClusterConfiguration", "nodeRegistration": {"name": "no"}},
            {"kind": "JoinConfiguration", "nodeRegistration": {"name": "gpu-c"}}], "Host",
     {"name": "gpu-c", "source": "the JoinConfiguration's nodeRegistration.name"}),
    ("", {"nodeRegistration": {"name": ""}}, "  GPU-D.Example.COM \n",
     {"name": "gpu-d.example.com", "source": "the host name, as kubeadm registers it"}),
    ("", {}, "gpu-e", {"name": "gpu-e", "source": "the host name, as kubeadm registers it"}),
    ("", None, "gpu-f", {"name": "gpu-f", "source": "the host name, as kubeadm registers it"}),
    ("", {"nodeRegistration": "bad"}, "gpu-g", {"name": "gpu-g", "source": "the host name, as kubeadm registers it"}),
])
def test_kubeadm_node_name(explicit, documents, hostname, expected):
    assert J.kubeadm_node_name(explicit, documents, hostname) == expected


def test_kubeadm_node_name_refusals():
    with pytest.raises(J.JoinConfigError, match=r"^the node's name is unknown: no node_preflight_k8s_node_name, no "
                                                r"nodeRegistration\.name and an empty host name$"):
        J.kubeadm_node_name("", {}, "  ")
    with pytest.raises(J.JoinConfigError, match=r"^node name '10\.0\.0\.7:22' \(from node_preflight_k8s_node_name\) is "
                                                r"not a DNS-1123 subdomain \(lower case alphanumerics, '-' or '\.'\)$"):
        J.kubeadm_node_name("10.0.0.7:22", None, "x")
    with pytest.raises(J.JoinConfigError, match="is not a DNS-1123 subdomain"):
        J.kubeadm_node_name("a" * 254, None, "x")
    assert J.kubeadm_node_name("a" * 63 + "." + "b" * 63, None, "x")["name"].startswith("a")
    assert J.join_node_name([{"kind": "JoinConfiguration"}]) is None


def test_join_configuration_gets_the_node_name():
    doc = J.render_join_taint(None, GATE, "gpu-a")
    assert doc == {"apiVersion": "kubeadm.k8s.io/v1beta4", "kind": "JoinConfiguration",
                   "nodeRegistration": {"name": "gpu-a", "taints": [GATE]}}
    same = J.render_join_taint({"nodeRegistration": {"name": "gpu-a"}}, GATE, "gpu-a")
    assert same["nodeRegistration"]["name"] == "gpu-a"
    assert "name" not in J.render_join_taint(None, GATE)["nodeRegistration"]
    assert "name" not in J.render_join_taint(None, GATE, "")["nodeRegistration"]
    with pytest.raises(J.JoinConfigError, match=r"^JoinConfiguration\.nodeRegistration\.name is 'gpu-b', but the node is "
                                                r"'gpu-a' \(node_preflight_k8s_node_name\): kubeadm would register it under "
                                                r"the former$"):
        J.render_join_taint({"nodeRegistration": {"name": "gpu-b"}}, GATE, "gpu-a")
    docs = J.merge_join_documents([{"kind": "ClusterConfiguration", "apiVersion": "kubeadm.k8s.io/v1beta3"}], GATE, "gpu-a")
    assert docs[1]["nodeRegistration"]["name"] == "gpu-a" and docs[1]["apiVersion"] == "kubeadm.k8s.io/v1beta3"
