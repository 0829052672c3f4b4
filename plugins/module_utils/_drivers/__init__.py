# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA drivers: versions and branches, packages per platform, repositories, the kernel module, fleet drift.

All pure (decides from facts other tasks gathered), except the data table ``branches.py``:

- ``versions.py``: driver versions and branches, package version order (dpkg and rpm rules), vGPU host/guest
  compatibility.
- ``branches.py``: data. NVIDIA driver branches and the vGPU software releases built on them.
- ``packages.py``: which packages carry a driver on each platform; the kernel-module flavour of a host.
- ``repo.py``: what to install for a driver request (repository listings, the NVML binding plan).
- ``apt_sources.py``: apt sources that agree with the host's existing entries (Signed-By).
- ``kernel_module.py``: whether the driver's kernel module will load after the reboot.
- ``fleet.py``: the driver state of one host and of a fleet (drift, the table).
"""
