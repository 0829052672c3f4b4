"""Make the repository importable as ``ansible_collections.gpuops.provision`` for pytest.

The repository root is the collection root; Python needs it under an ``ansible_collections/<ns>/<name>``
path. ``make`` creates the same link (build/collections); doing it here too lets a bare ``pytest`` work.
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, "build", "collections")
LINK = os.path.join(COLLECTIONS, "ansible_collections", "gpuops", "provision")

if not os.path.lexists(LINK):
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    os.symlink(os.path.relpath(ROOT, os.path.dirname(LINK)), LINK)
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)
os.environ.setdefault("ANSIBLE_COLLECTIONS_PATH", COLLECTIONS)
