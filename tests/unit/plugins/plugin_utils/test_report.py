# -*- coding: utf-8 -*-
"""The fleet report page from its template file (plugins/plugin_utils/templates/fleet_report.html.j2).

The golden page was written by the Python string renderer the template replaced (plugins/filter/report.py before
issue 20) for the model next to it: every part of the page (health red and amber, MIG slices with an invalid
placement, a pending reset, isolation, licences, driver pin, preflight checks, changes, notes, the health history)
and escaping of <&"' everywhere. Issue 41 regenerated it from the template, on purpose, with what it added to the model:
the warn counts of the summary band, a not-applicable check (GPU and preflight), a vfio host's information, run
times over the health history, and the Proxmox VE and vSphere sections (a failed read of each too). Any change to the
template's output fails here, byte for byte.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from ansible_collections.gpuops.provision.plugins.plugin_utils import _report

HERE = os.path.dirname(os.path.abspath(__file__))


def golden():
    with open(os.path.join(HERE, "fleet_report_golden.json"), encoding="utf-8") as fh:
        model = json.load(fh)
    with open(os.path.join(HERE, "fleet_report_golden.html"), encoding="utf-8", newline="") as fh:
        return model, fh.read()


def test_the_page_is_byte_identical_to_the_golden_page():
    model, page = golden()
    got = _report.render_html(model)
    if got != page:
        at = next((i for i, (a, b) in enumerate(zip(got, page)) if a != b), min(len(got), len(page)))
        pytest.fail("the page differs from the golden page at character %d:\n want %r\n got  %r"
                    % (at, page[max(0, at - 80):at + 80], got[max(0, at - 80):at + 80]))


def test_values_are_escaped_as_html_escape_does_and_none_prints_nothing():
    model = _report.fleet_model({"n<1>": {"notes": ["a'b\"c&d"]}}, title="<T & 'q'>")
    page = _report.render_html(model)
    assert "<title>&lt;T &amp; &#x27;q&#x27;&gt;</title>" in page
    assert '<section class="host" id="host-n&lt;1&gt;"><h2>n&lt;1&gt;</h2>' in page
    assert '<p class="warn">a&#x27;b&quot;c&amp;d</p>' in page
    # generated_at None prints "-" (the model's default), the driver pin nothing at all.
    assert '<p class="muted">generated -</p>' in page


def test_the_page_comes_from_the_template_file_next_to_the_module(tmp_path, monkeypatch):
    assert os.path.isfile(os.path.join(_report.TEMPLATES, _report.PAGE))
    model, page = golden()
    shutil.copytree(_report.TEMPLATES, str(tmp_path / "templates"))
    css = tmp_path / "templates" / "fleet_report.css"
    css.write_text(css.read_text(encoding="utf-8").replace("#76b900", "#123456"), encoding="utf-8")
    monkeypatch.setattr(_report, "TEMPLATES", str(tmp_path / "templates"))
    _report._environment.cache_clear()
    try:
        changed = _report.render_html(model)
    finally:
        monkeypatch.undo()
        _report._environment.cache_clear()
    assert "#123456" in changed and "#76b900" not in changed
    assert changed == page.replace("#76b900", "#123456")
