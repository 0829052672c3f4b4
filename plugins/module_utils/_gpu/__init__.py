# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA GPUs on one host: what NVML, /sys and the kernel log say about them.

- ``nvml.py``: adapter. NVML through nvidia-ml-py (pynvml); the only file that imports it.
- ``sysfs.py``: adapter. Reads of /proc and /sys under a root directory (tests and containers use a fake tree).
- ``info.py``: workflow. What the gpu_info module reports, through the two adapters above.
- ``iommu.py``: pure. IOMMU facts from what sysfs.py read (kernel command line, groups, isolation).
- ``xid.py``: pure. NVIDIA Xid events in a kernel log, and NVIDIA's Xid catalog.
- ``vgpu_scheduler.py``: pure. The vGPU scheduler policy: validation, the RmPVMRL value, NVML's state.
"""
