# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Register a node with the preflight gate taint: kubeadm JoinConfiguration and kubelet --register-with-taints.

Documentation of each filter is in the ``<filter>.yml`` file next to this one; the logic (and the upstream behaviour
it follows) is in module_utils/_preflight/join_config.py.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.module_utils._preflight import join_config as J
from ansible_collections.gpuops.provision.plugins.plugin_utils._plain import plain as _plain


def preflight_join_config(existing, taint, node_name=None):
    """One JoinConfiguration (a mapping, or None/empty for a new one) -> that document with the taint; a list of a
    file's documents -> the list with the taint in its JoinConfiguration (appended when there is none). ``node_name``
    goes into nodeRegistration.name."""
    try:
        existing = _plain(existing)
        name = str(node_name) if node_name else None
        if isinstance(existing, list):
            return J.merge_join_documents(existing, _plain(taint), name)
        return J.render_join_taint(existing or None, _plain(taint), name)
    except J.JoinConfigError as e:
        raise AnsibleFilterError("gpuops.provision.preflight_join_config: %s" % e)


def preflight_register_with_taints(existing, taint, env_var=None, join_config=None):
    """kubelet flags (a list or a string) with the taint in --register-with-taints; with env_var, the text of an
    environment file whose env_var (KUBELET_EXTRA_ARGS) carries it, and the taints kubeadm registers the node with
    from ``join_config`` (its documents) as well."""
    try:
        if env_var:
            also = J.registered_join_taints(_plain(join_config)) if join_config else ()
            return J.kubelet_env_text(_plain(existing), _plain(taint), str(env_var), also)
        return J.register_with_taints_flag(_plain(existing), _plain(taint))
    except J.JoinConfigError as e:
        raise AnsibleFilterError("gpuops.provision.preflight_register_with_taints: %s" % e)


class FilterModule:
    """gpuops.provision node registration filters."""

    def filters(self):
        return {
            "preflight_join_config": preflight_join_config,
            "preflight_register_with_taints": preflight_register_with_taints,
        }
