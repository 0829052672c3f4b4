# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side kernel module filters: DKMS status, the kernel that boots next, kernel headers packages,
Secure Boot state, MOK enrolment and the module signing plan (issue 22 points 3 and 9).

The logic is in ``plugins/module_utils/_drivers/kernel_module.py``; these wrappers are
role-internal: called through ``gpuops.provision.internal('<name>', ...)``, not a public interface.
"""

from __future__ import annotations

import functools

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.module_utils._drivers import kernel_module as K
from ansible_collections.gpuops.provision.plugins.module_utils._drivers.versions import VersionError


def _error(name, msg):
    raise AnsibleFilterError("gpuops.provision.%s: %s" % (name, msg))


def _wrap(name, func):
    @functools.wraps(func)
    def inner(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (K.KmodError, VersionError) as exc:
            _error(name, str(exc))
        except TypeError as exc:
            # Wrong number of filter arguments: say which filter instead of a bare Python message.
            _error(name, "bad arguments (%s)" % exc)
    return inner


def kmod_sb_state(text, rc=None):
    return K.parse_sb_state(text, rc)


def kmod_mok_test_key(text, rc=None):
    return K.parse_mok_test_key(text, rc)


def kmod_next_kernel(installed_kernels, running=None, scheme="deb", default=None):
    return K.next_boot_kernel(installed_kernels, running, scheme, default)


def kmod_headers_packages(kernel_release, distribution=None, os_family=None, meta=None):
    return K.headers_packages(kernel_release, distribution, os_family, meta)


def kmod_headers_plan(kernel_packages, running, next_kernel=None):
    return K.kernel_headers_plan(kernel_packages, running, next_kernel)


def kmod_module_check(dkms_status, next_kernel, module="nvidia", version=None):
    return K.module_check(dkms_status, next_kernel, module, version)


def kmod_secure_boot_plan(sb_state, key_path=None, cert_path=None, enrolled=None, dkms_version=None, key_exists=None):
    return K.secure_boot_plan(sb_state, key_path, cert_path, enrolled, dkms_version, key_exists)


def kmod_dkms_signing_config(key_path, cert_path):
    return K.dkms_signing_config(key_path, cert_path)


_FILTERS = (
    kmod_sb_state, kmod_mok_test_key, kmod_next_kernel, kmod_headers_packages,
    kmod_module_check, kmod_secure_boot_plan, kmod_dkms_signing_config, kmod_headers_plan,
)


def filters():
    """This file's role-internal filters by name (called through gpuops.provision.internal)."""
    return {f.__name__: _wrap(f.__name__, f) for f in _FILTERS}
