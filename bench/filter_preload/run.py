# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark: what a task that calls one of the collection's filters costs, with and without the preload.

ansible-core runs every task in a worker process forked from the controller and compiles a collection's plugins,
and the module_utils they import, from source in each process that loads them. The roles and playbooks therefore
call ``gpuops.provision.internal('preload')`` in their first play's or task's name, which the controller templates
in its own process before it forks (plugins/plugin_utils/_role_filters/__init__.py ``preload``). Three playbooks of
TASKS ``debug`` tasks on localhost, each run REPEAT times, best time kept:

* anchor: each task calls an ansible-core filter (ansible.builtin.flatten);
* cold: each task calls gpuops.provision.internal, nothing loaded in the controller first;
* preloaded: the same, with the preload in the play's name.

Printed: wall and CPU seconds of each, the cost per task over the anchor, and the ratios.

Usage: .venv/bin/python bench/filter_preload/run.py [--tasks 40] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(ROOT, "build", "collections")
PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
INTERNAL = "{{ {'nvidia.com/mig-1g.10gb': '2'} | gpuops.provision.internal('mig_advertised_resources') }}"
CORE = "{{ [[1], [2]] | ansible.builtin.flatten }}"
PRELOAD = "{{ '' | gpuops.provision.internal('preload') }}"


def playbook(path, msg, name="bench"):
    tasks = [{"name": "task %d" % i, "ansible.builtin.debug": {"msg": msg}} for i in range(ARGS.tasks)]
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump([{"name": name, "hosts": "localhost", "gather_facts": False, "tasks": tasks}], fh)


def timed(path):
    """Best wall time and its CPU time (the run and its workers) of REPEAT runs."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0", PYTHONWARNINGS="ignore")
    best = None
    for _ in range(ARGS.repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        subprocess.run([PLAYBOOK, "-i", "localhost,", "-c", "local", path], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
        wall = time.monotonic() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if best is None or wall < best[0]:
            best = (wall, cpu)
    return best


def main():
    with tempfile.TemporaryDirectory() as tmp:
        runs = {}
        for label, msg, name in (("anchor (ansible.builtin filter)", CORE, "bench"),
                                 ("cold (collection filter)", INTERNAL, "bench"),
                                 ("preloaded (collection filter)", INTERNAL, "bench" + PRELOAD)):
            path = os.path.join(tmp, "%d.yml" % len(runs))
            playbook(path, msg, name)
            runs[label] = timed(path)
    anchor = runs["anchor (ansible.builtin filter)"]
    print("%d tasks on localhost, best of %d runs each" % (ARGS.tasks, ARGS.repeat))
    for label, (wall, cpu) in runs.items():
        print("  %-32s wall %6.2f s  cpu %6.2f s  per task over the anchor: %+.3f s wall, %+.3f s cpu"
              % (label, wall, cpu, (wall - anchor[0]) / ARGS.tasks, (cpu - anchor[1]) / ARGS.tasks))
    cold, pre = runs["cold (collection filter)"], runs["preloaded (collection filter)"]
    print("preloaded/cold: %.3fx wall, %.3fx cpu; preloaded/anchor: %.3fx wall" % (
        pre[0] / cold[0], pre[1] / cold[1], pre[0] / anchor[0]))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    ARGS = parser.parse_args()
    main()
