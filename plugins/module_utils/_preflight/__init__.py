# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pre-join gate: node readiness checks before a node joins Kubernetes, and its join configuration.

All pure (judges facts that other modules gathered):

- ``checks.py``: the checks, one record each (``RECORDS``: id, what it reads, its function); a new check starts
  here.
- ``health.py``: the GPU health checks (NVML readings, Xid events, DCGM), shared with the health roll.
- ``dcgm.py``: what ``dcgmi diag -j`` printed, read and judged.
- ``dra.py``: the rules for nodes that run NVIDIA's DRA driver instead of the device plugin.
- ``join_config.py``: registering a node with the gate's taint (kubeadm and kubelet configuration).
"""
