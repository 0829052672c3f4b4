#!/usr/bin/env python3
"""Build NVIDIA's nvidia-mig-parted from the module pinned in lab/mig-parted/go.mod (a test oracle for mig-parted v1
config documents; it links go-nvml, which dlopens libnvidia-ml only when a command touches a GPU). Cached under
build/mig-parted/ by lab/gobuild.py. Prints the output directory (bin/nvidia-mig-parted)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import gobuild  # noqa: E402  pylint: disable=wrong-import-position

PROGRAMS = {"github.com/NVIDIA/mig-parted/cmd/nvidia-mig-parted": "nvidia-mig-parted"}


def ensure():
    return gobuild.ensure("mig-parted", HERE, PROGRAMS, gobuild.pinned(HERE, "github.com/NVIDIA/mig-parted"),
                          extra_files=(os.path.abspath(__file__),))


if __name__ == "__main__":
    print(ensure())
