# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The disruptive actions of a write module (power cycles, restarts, reboots, drains) ahead of its diff (pure).

Every write module that can disrupt returns ``disruptions``, one sentence per action naming the action and its object,
in the order they are (or in check mode would be) taken, and puts them first in its diff with :func:`diff_first`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

HEADER = "Disruptive actions, in order:"

Diff = Union[Mapping[str, Any], Sequence[Mapping[str, Any]]]


def prepared(disruptions: Sequence[str]) -> str:
    """The text of the diff entry that lists ``disruptions``: a header line, then one numbered line each ("" for none)."""
    if not disruptions:
        return ""
    return "".join([HEADER + "\n"] + ["%d. %s\n" % (n, what) for n, what in enumerate(disruptions, 1)])


def diff_first(disruptions: Sequence[str], diff: Optional[Diff]) -> Optional[Diff]:
    """``diff`` (one before/after dict, a list of them, or None) with the disruptions in an entry of their own before it.

    ansible-core's callback renders a list of diff dicts in order, and within one dict the ``prepared`` text after the
    before/after diff (ansible/plugins/callback/__init__.py, CallbackBase._get_diff): so the disruptions go into a
    dict of their own, first. Without disruptions ``diff`` is returned as it is, so that a run that disrupts nothing
    shows the diff it always showed.
    """
    if not disruptions:
        return diff
    rest: list[Mapping[str, Any]] = [] if diff is None else [diff] if isinstance(diff, Mapping) else list(diff)
    return [{"prepared": prepared(disruptions)}] + rest


def flatten(items: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ``disruptions`` of several items (the VMs of a batch, the hosts of a scope), in the items' order."""
    return [str(what) for item in items for what in item.get("disruptions") or []]
