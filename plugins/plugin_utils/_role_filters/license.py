# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side NVIDIA licensing filters (thin: the message is in plugin_utils/_role_messages.py).

Role-internal: the collection's roles and playbooks call these through ``gpuops.provision.internal('<name>', ...)``
(see ``__init__.py``); not a public interface.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.module_utils._licensing import gridd as L
from ansible_collections.gpuops.provision.plugins.plugin_utils import _role_messages as M
from ansible_collections.gpuops.provision.plugins.plugin_utils._plain import plain as _plain


def license_timeout_message(state, host, timeout, token_dir, service):
    return M.license_timeout(_plain(state), _plain(host), _plain(timeout), _plain(token_dir), _plain(service))


def license_feature_type(info):
    try:
        return L.default_feature_type(_plain(info))
    except L.LicenseError as e:
        raise AnsibleFilterError("gpuops.provision.license_feature_type: %s" % e)


def filters():
    """This file's role-internal filters by name (called through gpuops.provision.internal)."""
    return {"license_timeout_message": license_timeout_message, "license_feature_type": license_feature_type}
