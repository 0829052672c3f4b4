# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nodes' reboot records (written by the scenario's reboot command): {node: [unix time, ...]}."""

from __future__ import annotations

import os


def reboot_times(directory, nodes):
    out = {}
    for node in nodes:
        path = os.path.join(directory, "reboots-%s" % node)
        times = []
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                times = [float(line.split()[0]) for line in fh if line.strip()]
        out[node] = times
    return out


class FilterModule:
    def filters(self):
        return {"reboot_times": reboot_times}
