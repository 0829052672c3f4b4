"""Command-line entry: ``python lab/pvesim/server.py --fixture F --port 0 --run-dir DIR``.

Writes DIR/ca.pem (the CA clients verify against), DIR/pid and DIR/port (last, once listening).
"""

from __future__ import annotations

import importlib
import os
import sys


def _main():
    # Run as a script, the package's parent (lab/) is not on sys.path yet.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return importlib.import_module("pvesim.httpd").main()


if __name__ == "__main__":
    sys.exit(_main())
