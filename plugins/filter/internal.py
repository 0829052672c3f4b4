# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""``gpuops.provision.internal``: the one entry through which the collection's roles call their own computations.

They live in plugins/plugin_utils/_role_filters/ (why there: its ``__init__.py``). Documentation: ``internal.yml``.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.plugin_utils import _role_filters

_REGISTRY = _role_filters.registry()


def internal(data, name, *args, **kwargs):
    func = _REGISTRY.get(str(name))
    if func is None:
        raise AnsibleFilterError("gpuops.provision.internal: no role-internal filter %r (this filter serves the "
                                 "collection's own roles; the public filters are listed by ansible-doc -t filter -l "
                                 "gpuops.provision)" % (name,))
    return func(data, *args, **kwargs)


class FilterModule:
    """gpuops.provision's role-internal entry."""

    def filters(self):
        return {"internal": internal}
