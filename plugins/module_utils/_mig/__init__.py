# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""MIG geometry on one host: mig-parted ``v1`` configurations, the profile tables, and the change itself.

- ``geometry.py``: pure. mig-parted ``v1`` parsing and selection, profile names, the placement solver, the plan of
  one GPU.
- ``models.py``: data. Documented MIG profile tables per GPU model, keyed by PCI device id (a new GPU model starts
  here).
- ``host_lock.py``: adapter. The one per-host MIG lock (fcntl), shared by the module, the role and the boot-time
  re-apply; also a small command line the role calls.
- ``apply.py``: workflow. One host's MIG change through _gpu/nvml.py (the mig_geometry module and the boot applier).

The roll over Kubernetes nodes is _k8s/mig_roll.py's.
"""
