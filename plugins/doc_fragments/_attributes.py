# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared attribute vocabulary for every module of the collection (private fragment)."""

from __future__ import annotations


class ModuleDocFragment:
    # Standard attributes and the collection's author line (every module extends this fragment, so the author is
    # written once); modules override 'support' where it differs.
    DOCUMENTATION = r"""
author:
  - gpuops.provision maintainers (@gpuops)
options: {}
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
  idempotent:
    description:
      - When run twice in a row outside check mode, with the same arguments, the second invocation indicates no change.
      - This assumes that the system controlled/queried by the module has not changed in a relevant way.
"""

    # For modules that change things and support check mode, diff and idempotence fully (no details to add).
    CHANGE_FULL = r"""
options: {}
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
"""

    # For read-only *_info modules.
    INFO_MODULE = r"""
options: {}
attributes:
  check_mode:
    support: full
    details:
      - This action does not modify state.
  diff_mode:
    support: N/A
    details:
      - This action does not modify state.
  idempotent:
    support: full
    details:
      - This action does not modify state.
"""

    ACTIONGROUP_PROXMOX = r"""
options: {}
attributes:
  action_group:
    description: Use C(group/gpuops.provision.proxmox) in C(module_defaults) to set defaults for this module.
    support: full
    membership:
      - gpuops.provision.proxmox
"""

    ACTIONGROUP_VSPHERE = r"""
options: {}
attributes:
  action_group:
    description: Use C(group/gpuops.provision.vsphere) in C(module_defaults) to set defaults for this module.
    support: full
    membership:
      - gpuops.provision.vsphere
"""
