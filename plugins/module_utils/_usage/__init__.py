# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Measured GPU usage: dcgm-exporter's series through Prometheus, and the sharing advice made of them.

- ``prometheus.py``: adapter. The Prometheus HTTP API (query, query_range).
- ``series.py``: pure. The queries, their answers, and the per-GPU / per-MIG-instance figures.
- ``advice.py``: pure. What to do with a node's or a pool's GPUs after a week of measured use.
"""
