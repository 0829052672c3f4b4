# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ask ansible-core itself what each play of a playbook makes of a set of variables, host by host.

Usage: play_vars.py INVENTORY PLAYBOOK VAR [VAR ...]  ->  JSON {play name: {host: {VAR: templated value or absent}}}
       play_vars.py INVENTORY --patterns PATTERN [...]  ->  JSON {pattern: [the hosts it matches]}

Loads the inventory and the playbook (imports followed) with ansible's own classes, as ansible-playbook does, and
for every play and every host its pattern matches, templates each VAR from VariableManager.get_vars(play, host):
the precedence a role in that play sees (play vars over group_vars over role defaults). Run in a process of its own:
it initialises ansible's plugin loader, which is process-wide.
"""

from __future__ import annotations

import json
import sys

from ansible import context
from ansible.inventory.manager import InventoryManager
from ansible.module_utils.common.collections import ImmutableDict
from ansible.parsing.dataloader import DataLoader
from ansible.playbook import Playbook
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar
from ansible.vars.manager import VariableManager


def main(inventory, playbook, names):
    init_plugin_loader()
    context.CLIARGS = ImmutableDict(tags=(), skip_tags=(), check=False, diff=False, verbosity=0, extra_vars=())
    loader = DataLoader()
    inv = InventoryManager(loader=loader, sources=[inventory])
    if playbook == "--patterns":
        json.dump({pattern: [h.name for h in inv.get_hosts(pattern)] for pattern in names}, sys.stdout)
        return
    variables = VariableManager(loader=loader, inventory=inv)
    book = Playbook.load(playbook, variable_manager=variables, loader=loader)
    out = {}
    for index, play in enumerate(book.get_plays()):
        play_vars = variables.get_vars(play=play)
        pattern = Templar(loader=loader, variables=play_vars).template(play.hosts)
        seen = {}
        for host in inv.get_hosts(pattern):
            host_vars = variables.get_vars(play=play, host=host)
            templar = Templar(loader=loader, variables=host_vars)
            seen[host.name] = {name: templar.template(host_vars[name]) for name in names if name in host_vars}
        out["%d %s" % (index, play.get_name())] = seen
    json.dump(out, sys.stdout, default=str)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
