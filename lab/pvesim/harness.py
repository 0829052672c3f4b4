"""Start pvesim for a test: ``with running_pvesim() as pve: ...``.

``mode="thread"`` (default) serves from a thread of the calling process; ``mode="process"`` runs
``server.py`` in a subprocess. Either way the handle carries url, CA path and credentials.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_FIXTURE = os.path.join(HERE, "fixtures", "lab.json")


def load_fixture(path=DEFAULT_FIXTURE):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


@dataclasses.dataclass
class PveSimHandle:
    host: str
    port: int
    ca: str
    run_dir: str
    user: str
    password: str
    token_name: str
    token_value: str
    sim: object = None  # the in-memory model (thread mode only)

    @property
    def url(self):
        return f"https://{self.host}:{self.port}"

    @property
    def api_url(self):
        return self.url + "/api2/json"

    @property
    def token_id(self):
        return f"{self.user}!{self.token_name}"

    def _get(self, path, method="GET"):
        ctx = ssl.create_default_context(cafile=self.ca)
        req = urllib.request.Request(self.url + path, method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            return json.loads(resp.read())["data"]

    def state(self):
        """The simulator's whole state (GET /_sim/state)."""
        return self._get("/_sim/state")

    def stats(self):
        """Request counters (GET /_sim/stats): requests, writes (POST/PUT/DELETE), by_method, by_route."""
        return self._get("/_sim/stats")

    def reset_stats(self):
        return self._get("/_sim/stats/reset", "POST")

    def api(self, auth="token", **kwargs):
        """A proxmoxer ProxmoxAPI verifying against the simulator's CA (auth: token or password)."""
        from proxmoxer import ProxmoxAPI  # pylint: disable=import-outside-toplevel
        creds = {"token_name": self.token_name, "token_value": self.token_value} if auth == "token" else {"password": self.password}
        creds.update(kwargs)
        return ProxmoxAPI(self.host, port=self.port, user=self.user, verify_ssl=self.ca, **creds)


def _credentials(fixture):
    users = fixture.get("users") or {"root@pam": {"password": "pvesim", "tokens": {"ansible": "pvesim-token"}}}
    user = "root@pam" if "root@pam" in users else sorted(users)[0]
    token_name, token_value = sorted(users[user].get("tokens", {}).items())[0]
    return user, users[user]["password"], token_name, token_value


@contextlib.contextmanager
def running_pvesim(fixture=None, mode="thread", run_dir=None, task_seconds=0.0, host="127.0.0.1", timeout=30):
    """Yield a PveSimHandle for a simulator started from ``fixture`` (a path or a dict; default fixtures/lab.json)."""
    if fixture is None:
        fixture = DEFAULT_FIXTURE
    data = load_fixture(fixture) if isinstance(fixture, (str, os.PathLike)) else copy.deepcopy(fixture)
    own_dir = run_dir is None
    run_dir = run_dir or tempfile.mkdtemp(prefix="pvesim-")
    user, password, token_name, token_value = _credentials(data)
    try:
        if mode == "thread":
            from .httpd import Server  # pylint: disable=import-outside-toplevel
            server = Server(data, run_dir, host, 0, task_seconds).start()
            try:
                yield PveSimHandle(host, server.port, server.ca, run_dir, user, password, token_name, token_value, server.sim)
            finally:
                server.stop()
        else:
            fixture_path = os.path.join(run_dir, "fixture.json")
            with open(fixture_path, "w", encoding="utf-8") as handle:
                json.dump(data, handle)
            cmd = [sys.executable, os.path.join(HERE, "server.py"), "--fixture", fixture_path, "--port", "0",
                   "--run-dir", run_dir, "--host", host, "--task-seconds", str(task_seconds)]
            with open(os.path.join(run_dir, "server.log"), "wb") as log:
                proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)  # pylint: disable=consider-using-with
            try:
                port_file = os.path.join(run_dir, "port")
                deadline = time.monotonic() + timeout
                while not os.path.exists(port_file):
                    if proc.poll() is not None or time.monotonic() > deadline:
                        with open(os.path.join(run_dir, "server.log"), encoding="utf-8", errors="replace") as handle:
                            raise RuntimeError(f"pvesim did not start: {handle.read()}")
                    time.sleep(0.05)
                with open(port_file, encoding="utf-8") as handle:
                    port = int(handle.read())
                yield PveSimHandle(host, port, os.path.join(run_dir, "ca.pem"), run_dir, user, password, token_name, token_value)
            finally:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    finally:
        if own_dir:
            shutil.rmtree(run_dir, ignore_errors=True)
