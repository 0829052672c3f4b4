# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One host's variables out of ``hostvars`` in a filter, for the fleet-wide summaries the playbooks print."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def host_vars(hostvars: Any, host: str) -> Mapping[str, Any]:
    """The variables of ``host``; an empty mapping for a host hostvars does not know (left out of the inventory, or
    a name that is not a host)."""
    try:
        hv = hostvars[host]
    except KeyError:
        return {}
    return hv if isinstance(hv, Mapping) else {}
