"""Fail when a built collection tarball contains a password or token of the simulator fixtures.

Usage: tarball_secrets.py TARBALL FIXTURE.json [FIXTURE.json ...]
"""

from __future__ import annotations

import json
import sys
import tarfile


def secrets(fixture):
    """Every password and token secret of a pvesim fixture's ``users``."""
    out = set()
    for user in fixture.get("users", {}).values():
        if user.get("password"):
            out.add(user["password"])
        for token in (user.get("tokens") or {}).values():
            out.add(token["secret"] if isinstance(token, dict) else token)
    return {s for s in out if len(s) >= 6}  # short ones would match ordinary text


def main(argv):
    tarball, fixtures = argv[1], argv[2:]
    wanted = set()
    for path in fixtures:
        with open(path, encoding="utf-8") as handle:
            wanted |= secrets(json.load(handle))
    found = []
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            data = tar.extractfile(member).read().decode("utf-8", "replace")
            found.extend("%s: %s..." % (member.name, s[:6]) for s in wanted if s in data)
    if found:
        print("tarball ships simulator secrets:\n  " + "\n  ".join(sorted(found)))
        return 1
    print("tarball: none of %d simulator secrets found" % len(wanted))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
