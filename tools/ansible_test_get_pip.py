"""Offline stand-in for the get-pip bootstrap script that `ansible-test --venv` downloads.

ansible-test fetches get-pip-<version>.py from ci-files.testing.ansible.com, which this lab cannot reach. It runs
the script with pip's install arguments (for example `--disable-pip-version-check pip==25.2`); doing the same with
the interpreter's bundled pip (ensurepip) and then letting that pip fetch the asked-for version from PyPI gives the
same virtual environment. `make sanity` copies this file into ansible-test's cache.
"""

import subprocess
import sys

# get-pip's own switches, not pip's: ansible-test passes them to keep setuptools/wheel out of the venv.
GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}

# In a child process: ensurepip points PIP_CONFIG_FILE at /dev/null in its own environment, which would hide the
# machine's pip configuration (index, CA bundle) from the install below.
subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade"])
args = [a for a in sys.argv[1:] if a not in GET_PIP_ONLY]
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + args))
