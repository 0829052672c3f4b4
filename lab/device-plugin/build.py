#!/usr/bin/env python3
"""Build NVIDIA's nvidia-device-plugin from the module pinned in lab/device-plugin/go.mod (run against gpusim's
libnvidia-ml.so.1 on the lab's real kubelet, tests/lab/test_device_plugin.py). Cached under build/device-plugin/ by
lab/gobuild.py. Prints the output directory (bin/nvidia-device-plugin)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import gobuild  # noqa: E402  pylint: disable=wrong-import-position

MODULE = "github.com/NVIDIA/k8s-device-plugin"
PROGRAMS = {MODULE + "/cmd/nvidia-device-plugin": "nvidia-device-plugin"}


def ensure():
    version = gobuild.pinned(HERE, MODULE)
    # The stamp upstream's Makefile links in (BUILDFLAGS: -X $(CLI_VERSION_PACKAGE).version, CLI_VERSION_PACKAGE =
    # .../internal/info), so the plugin's startup line and --version say v0.17.4 rather than "unknown". Its
    # -extldflags (--export-dynamic, --unresolved-symbols=ignore-in-object-files) need no repeating: go-nvml's
    # pkg/nvml/nvml.go `#cgo linux LDFLAGS` carries them, NVML symbols resolving from the dlopened library.
    return gobuild.ensure("device-plugin", HERE, PROGRAMS, version, extra_files=(os.path.abspath(__file__),),
                          ldflags=(f"-X {MODULE}/internal/info.version={version}",))


if __name__ == "__main__":
    print(ensure())
