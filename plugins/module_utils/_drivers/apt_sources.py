# -*- coding: utf-8 -*-
# Copyright: gpuops.provision contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""apt sources that agree with the host's: the Signed-By of an added entry must equal the host's for the same source.

apt refuses a source (URI and suite) that two entries give different Signed-By values
("Conflicting values set for option Signed-By regarding source <uri> <suite>": apt-pkg/sourcelist.cc, and the
deb822 stock file Debian 12 and later write: /etc/apt/sources.list.d/debian.sources with
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg). So each suite we add takes the Signed-By the host already
uses for it. deb822 files are read and written with python-debian; one-line entries follow sources.list(5).

A source the host already has is reused whole (``existing_source``): NVIDIA's ``cuda-keyring`` package (NVIDIA Driver
Installation Guide, "Network Repository Installation" for Debian and Ubuntu: ``dpkg -i cuda-keyring_1.1-1_all.deb``)
writes /etc/apt/sources.list.d/cuda-<distro>-<arch>.list, ``deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg]
<repository>/ /``; a second entry for that URI with our own keyring makes apt refuse every update
(NVIDIA/cuda-repo-management#4).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Optional

try:
    from debian.deb822 import Deb822
    HAS_DEB822 = True
except ImportError:  # pragma: no cover - reported by the caller
    Deb822 = None  # type: ignore[misc,assignment]  # python-debian is missing: callers check HAS_DEB822
    HAS_DEB822 = False


class SourcesError(ValueError):
    """Host sources that disagree among themselves or with the request."""


def _norm_uri(uri: object) -> str:
    return str(uri).strip().rstrip("/") + "/"


def _one_line_entries(text: str) -> Iterator[tuple[str, str, Optional[str]]]:
    """(uri, suite, signed_by) per 'deb' line of a one-line sources file (sources.list(5))."""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.match(r"^(deb|deb-src)\s+(?:\[(?P<opts>[^\]]*)\]\s+)?(?P<uri>\S+)\s+(?P<suite>\S+)", line)
        if not m or m.group(1) != "deb":
            continue
        signed_by = None
        for opt in (m.group("opts") or "").split():
            key, _sep, value = opt.partition("=")
            if key.lower() == "signed-by":
                signed_by = value
        yield m.group("uri"), m.group("suite"), signed_by


def _deb822_entries(text: str) -> Iterator[tuple[str, str, Optional[str]]]:
    for para in Deb822.iter_paragraphs(text.splitlines(True)):
        if "deb" not in para.get("Types", "").split():
            continue
        if para.get("Enabled", "yes").strip().lower() == "no":
            continue
        signed_by = para.get("Signed-By")
        signed_by = signed_by.strip() if signed_by is not None else None
        for uri in para.get("URIs", "").split():
            for suite in para.get("Suites", "").split():
                yield uri, suite, signed_by


def host_signed_by(files: Optional[Mapping[str, str]]) -> dict[tuple[str, str], dict[str, str]]:
    """{(uri/, suite): {signed_by values}} from {path: text} of the host's sources files (.list and .sources)."""
    if not HAS_DEB822:
        raise SourcesError("python-debian is required on the controller to read deb822 sources (pip install python-debian)")
    seen: dict[tuple[str, str], dict[str, str]] = {}
    for path, text in sorted((files or {}).items()):
        entries = _deb822_entries(text) if str(path).endswith(".sources") else _one_line_entries(text)
        for uri, suite, signed_by in entries:
            seen.setdefault((_norm_uri(uri), suite), {})[signed_by or ""] = path
    return seen


def _single(values: Mapping[str, str], uri: str, suite: str) -> tuple[str, str]:
    """(signed_by, path) of the host's entries for one source; they must agree, or apt refuses them already."""
    if len(values) > 1:
        raise SourcesError("the host's own sources disagree on Signed-By for %s %s: %s" % (
            uri, suite, "; ".join("%s in %s" % (v or "none", p) for v, p in sorted(values.items()))))
    value, path = next(iter(values.items()))
    return value, path


def agreeing_sources(files: Optional[Mapping[str, str]], uri: str, suites: Iterable[str], components: Iterable[str],
                     signed_by: Optional[str] = "", ignore: Iterable[str] = ()) -> dict[str, Any]:
    """The deb822 text of our entries for ``uri`` and ``suites``, each suite with the host's Signed-By.

    ``files``: {path: text} of the host's sources (our own file, ``ignore``, is left out). ``signed_by``: the keyring
    asked for; where the host already has the suite with another one, that is an error (naming both), because apt
    would refuse every source. Returns dict(text, signed_by: {suite: value}, host: {suite: path}).
    """
    host = host_signed_by({p: t for p, t in (files or {}).items() if p not in set(ignore)})
    wanted = str(signed_by or "").strip()
    groups: dict[str, list[str]] = {}
    chosen: dict[str, str] = {}
    origin: dict[str, str] = {}
    for suite in suites:
        values = host.get((_norm_uri(uri), suite))
        if values:
            value, path = _single(values, uri, suite)
            if wanted and wanted != value:
                raise SourcesError("%s %s is already configured in %s with Signed-By %s; nvidia_driver_debian_signed_by=%s "
                                   "would make apt refuse both" % (uri, suite, path, value or "(none)", wanted))
            origin[suite] = path
        else:
            # A suite the host lacks takes the keyring the host uses for this URI's other suites, when they agree.
            others = {v for (u, _s), vals in host.items() if u == _norm_uri(uri) for v in vals}
            value = wanted or (others.pop() if len(others) == 1 else "")
        chosen[suite] = value
        groups.setdefault(value, []).append(suite)
    paragraphs: list[str] = []
    for value, group in groups.items():
        para = Deb822()
        para["Types"] = "deb"
        para["URIs"] = str(uri)
        para["Suites"] = " ".join(group)
        para["Components"] = " ".join(components)
        if value:
            para["Signed-By"] = value
        paragraphs.append(para.dump().rstrip("\n"))
    return dict(text="\n\n".join(paragraphs) + "\n", signed_by=chosen, host=origin)


def existing_source(files: Optional[Mapping[str, str]], uri: str, suite: str = "/",
                    ignore: Iterable[str] = ()) -> Optional[dict[str, Any]]:
    """The host's own enabled entry for ``uri`` and ``suite`` as dict(path, signed_by), or None when it has none.

    ``files``: {path: text} of the host's sources; the paths in ``ignore`` (our own files) are left out. ``signed_by``
    is None for an entry without one (its key then comes from /etc/apt/trusted.gpg.d). Raises SourcesError when the
    host's own entries already disagree on Signed-By (apt refuses them before we add anything).
    """
    skipped = set(ignore)
    host = host_signed_by({p: t for p, t in (files or {}).items() if p not in skipped})
    values = host.get((_norm_uri(uri), suite))
    if not values:
        return None
    value, path = _single(values, uri, suite)
    return dict(path=path, signed_by=value or None)
