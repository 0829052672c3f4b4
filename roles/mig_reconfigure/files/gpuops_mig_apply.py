# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Re-apply the MIG geometry that gpuops.provision's mig_reconfigure role declared for this host.

GPU and compute instances do not survive a reboot (NVIDIA MIG user guide), so gpuops-mig-apply.service runs this at
boot, before the GPU clients and the kubelet start, as mig-parted's nvidia-mig-manager.service does. It runs the
same code as the mig_geometry module (the collection's module_utils, installed next to this file), so the plan,
the checks and the rollback are the module's. Exit status: 0 applied or already there, 1 failed (nothing or the
previous geometry left, see the message), 2 a MIG mode change waits for a GPU reset.

It takes the module's per-host MIG lock (module_utils/_hostlock.py, at the declared "lock_path", the role's
mig_reconfigure_lock_path): a run that holds it at boot makes this exit 1 naming it, and nothing is changed.

Usage: python3 gpuops_mig_apply.py [DECLARED.json]
  (default /etc/gpuops/mig-config.json: {"config": {...}, "selected": "...", "lock_path": "..."})
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ansible_collections.gpuops.provision.plugins.module_utils import _mig_apply  # noqa: E402

HOLDER = "gpuops-mig-apply.service (boot-time re-apply of the declared MIG geometry)"


def main(argv):
    path = argv[1] if len(argv) > 1 else "/etc/gpuops/mig-config.json"
    try:
        with open(path, encoding="utf-8") as fh:
            declared = json.load(fh)
        params = {"config": declared["config"], "selected": declared["selected"], "devices": None, "force": False,
                  "lock_path": declared.get("lock_path") or None, "lock_holder": HOLDER, "lock_timeout": 0}
    except (OSError, ValueError, KeyError, TypeError) as e:
        print("gpuops-mig-apply: cannot read the declared geometry %s: %s" % (path, e), file=sys.stderr)
        return 1
    try:
        out, warnings = _mig_apply.run(params)
    except _mig_apply.RunError as e:
        print("gpuops-mig-apply: %s" % e, file=sys.stderr)
        return 1
    for w in warnings:
        print("gpuops-mig-apply: %s" % w, file=sys.stderr)
    for gpu in out["gpus"]:
        after = gpu.get("after") or {}
        print("gpuops-mig-apply: GPU %d (%s): %s%s" % (
            gpu["index"], gpu["model"], "changed" if gpu["changed"] else "unchanged",
            " %s" % json.dumps(after.get("mig_devices"), sort_keys=True) if after.get("mig_devices") else ""))
    return 2 if out["reset_required"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
