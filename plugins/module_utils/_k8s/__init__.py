# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kubernetes: the API adapter, and what rolls, roll locks and GPU pools decide over nodes.

- ``api.py``: adapter. The official Python client (the one kubernetes.core uses): nodes, pods, evictions, Leases.
- ``controller.py``: adapter. Who runs a roll on this host: the ansible-playbook process, from /proc.
- ``node_roll.py``: pure. A roll over nodes as a reconcile from the live cluster (cordon, drain, release).
- ``node_roll_apply.py``: workflow. A node's side of a roll through api.py (modules node_roll, node_release,
  node_info).
- ``roll_lock.py``: pure. A roll's lock as a coordination.k8s.io/v1 Lease: what to write.
- ``mig_roll.py``: pure. What a MIG roll decides: waves within the disruption budget, labels, advertised resources.
- ``gpu_pools.py``: pure. GPU pools (time-slicing, MPS, MIG): device-plugin configurations, node taints.
"""
