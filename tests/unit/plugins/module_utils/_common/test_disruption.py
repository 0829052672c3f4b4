# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/module_utils/_common/disruption.py: the disruptive actions of a write module, first in its diff; rendered here by
ansible-core's own callback code, so that "first" is what a person reading ``--diff`` sees."""

from __future__ import annotations

import pytest

from ansible.plugins.callback import CallbackBase

from ansible_collections.gpuops.provision.plugins.module_utils._common import disruption as D

STEPS = ["shut down the guest of VM vm1 (VMware Tools, up to 300 s)", "power on VM vm1 on host esx1"]


def test_prepared_is_a_header_and_one_numbered_line_per_action():
    assert D.prepared(STEPS) == ("Disruptive actions, in order:\n"
                                 "1. shut down the guest of VM vm1 (VMware Tools, up to 300 s)\n"
                                 "2. power on VM vm1 on host esx1\n")
    assert D.prepared(["cordon node n1"]) == "Disruptive actions, in order:\n1. cordon node n1\n"
    assert D.prepared([]) == ""


def test_diff_first_puts_the_disruptions_in_an_entry_of_their_own_before_the_diff():
    one = {"before": {"a": 1}, "after": {"a": 2}}
    assert D.diff_first(STEPS, one) == [{"prepared": D.prepared(STEPS)}, one]
    many = [dict(one, before_header="VM 1"), dict(one, before_header="VM 2")]
    assert D.diff_first(STEPS, many) == [{"prepared": D.prepared(STEPS)}] + many
    assert D.diff_first(STEPS, None) == [{"prepared": D.prepared(STEPS)}]
    assert D.diff_first(STEPS, ()) == [{"prepared": D.prepared(STEPS)}]


def test_without_disruptions_the_diff_is_returned_as_it_was():
    one = {"before": {"a": 1}, "after": {"a": 2}}
    assert D.diff_first([], one) is one
    many = [one]
    assert D.diff_first([], many) is many
    assert D.diff_first((), None) is None


def test_flatten_keeps_the_items_order_and_skips_items_without_any():
    items = [{"disruptions": ["a1", "a2"]}, {"disruptions": []}, {"name": "no key"}, {"disruptions": ["c1"]}]
    assert D.flatten(items) == ["a1", "a2", "c1"]
    assert D.flatten([]) == []


@pytest.fixture(name="render")
def fixture_render(monkeypatch):
    """ansible-core's CallbackBase._get_diff, which every stdout callback uses for --diff, without colour."""
    from ansible.plugins import callback  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(callback, "stringc", lambda text, color, **kw: text)
    return CallbackBase()._get_diff  # pylint: disable=protected-access


def test_ansible_shows_the_disruptions_before_the_configuration_diff(render):
    diff = {"before": {"profiles": ["grid_a100-4c"]}, "after": {"profiles": ["grid_a100-40c"]}}
    text = render(D.diff_first(STEPS, dict(diff)))
    assert text.startswith(D.prepared(STEPS)), text
    assert text.index(STEPS[1]) < text.index("grid_a100-4c") < text.index("grid_a100-40c")
    # Why an entry of its own: in the same dict, ansible-core prints 'prepared' after the before/after diff.
    same = render(dict(diff, prepared=D.prepared(STEPS)))
    assert same.index("grid_a100-40c") < same.index(STEPS[0])
