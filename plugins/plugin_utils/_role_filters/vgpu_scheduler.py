# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vGPU scheduler filters for KVM / Proxmox VE vGPU hosts (issue 18): validate the policy, plan the modprobe.d file
that sets RmPVMRL, and compare what NVML reports (gpuops.provision.gpu_info) with the policy.

The logic is in ``plugins/module_utils/_gpu/vgpu_scheduler.py``; these wrappers are
role-internal: called through ``gpuops.provision.internal('<name>', ...)``, not a public interface.
"""

from __future__ import annotations

import base64
import functools

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.provision.plugins.module_utils._gpu import vgpu_scheduler as V


def _wrap(name, func):
    @functools.wraps(func)
    def inner(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except V.SchedulerError as exc:
            raise AnsibleFilterError("gpuops.provision.%s: %s" % (name, exc)) from None
        except TypeError as exc:
            raise AnsibleFilterError("gpuops.provision.%s: bad arguments (%s)" % (name, exc)) from None
    return inner


def _file(item):
    """{path, content} from ansible.builtin.slurp's result (source, content, encoding) or a plain {path, content}."""
    if "source" in item:
        raw = item.get("content") or ""
        text = base64.b64decode(raw).decode("utf-8", "replace") if item.get("encoding") == "base64" else raw
        return {"path": item["source"], "content": text}
    return {"path": item["path"], "content": item.get("content") or ""}


def vgpu_scheduler_spec(spec, host=None):
    return V.normalize(spec, host)


def vgpu_scheduler_modprobe(files, spec, path, host=None, module="nvidia"):
    return V.modprobe_plan([_file(f) for f in files or []], spec, path, host, module)


def vgpu_scheduler_precheck(gpus, spec, host=None):
    return V.precheck(gpus or [], spec, host)


def vgpu_scheduler_mismatches(gpus, spec, host=None):
    return V.mismatches(gpus or [], spec, host)


def vgpu_scheduler_running(gpus):
    return V.running(gpus or [])


_FILTERS = (vgpu_scheduler_spec, vgpu_scheduler_modprobe, vgpu_scheduler_precheck, vgpu_scheduler_mismatches,
            vgpu_scheduler_running)


def filters():
    """This file's role-internal filters by name (called through gpuops.provision.internal)."""
    return {f.__name__: _wrap(f.__name__, f) for f in _FILTERS}
