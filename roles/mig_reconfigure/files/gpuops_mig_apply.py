# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Re-apply the MIG geometry that gpuops.provision's mig_reconfigure role declared for this host.

GPU and compute instances do not survive a reboot (NVIDIA MIG user guide), so gpuops-mig-apply.service runs this at
boot, before the GPU clients and the kubelet start, as mig-parted's nvidia-mig-manager.service does. It runs the
same code as the mig_geometry module (the collection's module_utils, in gpuops_mig_apply.sources.json next to this
file: {"_mig/apply.py": source, ...}, one file for the role to copy instead of one per module), so the plan, the
checks and the rollback are the module's. Exit status: 0 applied or already there, 1 failed (nothing or the
previous geometry left, see the message), 2 a MIG mode change waits for a GPU reset.

It takes the module's per-host MIG lock (module_utils/_mig/host_lock.py, at the declared "lock_path", the role's
mig_reconfigure_lock_path): a run that holds it at boot makes this exit 1 naming it, and nothing is changed.

Usage: python3 gpuops_mig_apply.py [DECLARED.json]
  (default /etc/gpuops/mig-config.json: {"config": {...}, "selected": "...", "lock_path": "..."})
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys

HOLDER = "gpuops-mig-apply.service (boot-time re-apply of the declared MIG geometry)"
SOURCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpuops_mig_apply.sources.json")
PACKAGE = "ansible_collections.gpuops.provision.plugins.module_utils"


class BundledSources(importlib.abc.MetaPathFinder, importlib.abc.SourceLoader):
    """Imports PACKAGE's modules from the sources file (relative path under module_utils -> source text), ahead of
    anything installed on the host, so the applier runs exactly the code the role stamped."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as fh:
            files = json.load(fh)
        if not isinstance(files, dict):
            raise ValueError("not a JSON object of module sources")
        self.path = path
        self.sources = {}
        parts = PACKAGE.split(".")
        self.packages = set(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        for rel, text in files.items():
            dotted = parts + rel[:-len(".py")].split("/")
            if dotted[-1] == "__init__":
                dotted.pop()
                self.packages.add(".".join(dotted))
            for i in range(len(parts) + 1, len(dotted)):
                self.packages.add(".".join(dotted[:i]))
            self.sources[".".join(dotted)] = text

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.packages and fullname not in self.sources:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin=self.get_filename(fullname),
                                               is_package=fullname in self.packages)

    def is_package(self, fullname):
        return fullname in self.packages

    def get_filename(self, fullname):
        # Shown in tracebacks: the sources file and the module in it.
        return "%s/%s.py" % (self.path, fullname)

    def get_data(self, path):
        return self.sources.get(path[len(self.path) + 1:-len(".py")], "").encode("utf-8")


def main(argv):
    path = argv[1] if len(argv) > 1 else "/etc/gpuops/mig-config.json"
    try:
        sys.meta_path.insert(0, BundledSources(SOURCES))
        from ansible_collections.gpuops.provision.plugins.module_utils._mig import apply  # pylint: disable=import-outside-toplevel
    except (OSError, ValueError, ImportError, SyntaxError) as e:
        print("gpuops-mig-apply: cannot load the collection code from %s: %s" % (SOURCES, e), file=sys.stderr)
        return 1
    try:
        with open(path, encoding="utf-8") as fh:
            declared = json.load(fh)
        params = {"config": declared["config"], "selected": declared["selected"], "devices": None, "force": False,
                  "lock_path": declared.get("lock_path") or None, "lock_holder": HOLDER, "lock_timeout": 0}
    except (OSError, ValueError, KeyError, TypeError) as e:
        print("gpuops-mig-apply: cannot read the declared geometry %s: %s" % (path, e), file=sys.stderr)
        return 1
    try:
        out, warnings = apply.run(params)
    except apply.RunError as e:
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
