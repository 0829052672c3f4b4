# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA vGPU licensing: the client's configuration, NVIDIA License System (NLS) facts, and the probe.

- ``gridd.py``: pure. gridd.conf, each GPU's licence state, days left.
- ``nls.py``: pure. NLS client tokens, feature types, and which licence serves which vGPU series.
- ``probe.py``: adapter. Whether a client reaches its NLS service instance.
- ``info.py``: workflow. What the nvidia_license_info module reports (files on disk, NVML, the probe).
"""
