# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side report files shared by the fleet_report and node_preflight_report actions (private)."""

from __future__ import annotations

import json
import os
import re
import tempfile
from typing import Any


# When a report was made is not what it says: a re-run over an unchanged fleet keeps the files (changed=false).
_JSON_TIME_KEY = "generated_at"
_XML_TIME_ATTR = re.compile(r' timestamp="[^"]*"')


def _without_times(value: Any) -> Any:
    if isinstance(value, dict):
        return dict((k, _without_times(v)) for k, v in value.items() if k != _JSON_TIME_KEY)
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def same_report(old_text: str, new_text: str) -> bool:
    """Whether two report files say the same thing, generation times aside (JSON, JUnit XML or plain text)."""
    if old_text == new_text:
        return True
    try:
        return _without_times(json.loads(old_text)) == _without_times(json.loads(new_text))
    except ValueError:
        return _XML_TIME_ATTR.sub("", old_text) == _XML_TIME_ATTR.sub("", new_text)


def write_report(path: str, text: str, check_mode: bool) -> bool:
    """Atomic write unless the file already says the same; returns whether it (would have) changed."""
    try:
        with open(path, encoding="utf-8") as fh:
            if same_report(fh.read(), text):
                return False
    except FileNotFoundError:
        pass
    if check_mode:
        return True
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".report-")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return True
