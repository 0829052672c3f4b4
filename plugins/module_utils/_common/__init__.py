# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What several domains share: connection options, numeric bounds, batches, disruptions, drift.

Layers here and in every package: pure (decides, no I/O), data (tables, no logic), adapter (talks to one outside
system), workflow (drives an adapter through a read or a change, asking the pure files what to do).

- ``connection.py``: data. Argument specs of the Proxmox VE, vSphere and Prometheus connections; they mirror
  plugins/doc_fragments/.
- ``bounds.py``: pure. Ranges of numeric options and the TLS-verification rule of the API modules.
- ``batch.py``: concurrency. A batch refused whole when one item is invalid, then bounded worker threads.
- ``disruption.py``: pure. The disruptive actions of a write module, ahead of its diff.
- ``drift.py``: pure. Version drift across hosts (drivers on Linux hosts, the VIB on ESXi hosts).
"""
