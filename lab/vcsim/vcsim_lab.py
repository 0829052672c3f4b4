"""Start the GPU-flavoured vcsim (lab/vcsim/bin/vcsim-gpu) from Python tests.

    import sys; sys.path.insert(0, "lab/vcsim")
    import vcsim_lab

    with vcsim_lab.vcsim(clusters=1, hosts=2, vms=1, gpu_hosts=["DC0_C0_H0"]) as sim:
        si = sim.connect()                 # pyvmomi ServiceInstance, TLS verified against sim.ca
        sim.url, sim.host, sim.port, sim.ca, sim.username, sim.password, sim.inventory

Builds the binary first when needed (lab/vcsim/build.sh). Raises VcsimUnavailable when no Go >= 1.23
is installed or the pinned modules cannot be downloaded, so tests can skip. Lab code only: product
code never imports it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping

HERE = os.path.dirname(os.path.abspath(__file__))
BINARY = os.path.join(HERE, "bin", "vcsim-gpu")
BUILD = os.path.join(HERE, "build.sh")

DEFAULT_DRIVER = "550.90.05-1OEM.800.1.0.20613240"
DRIVER_VIB = "NVD-AIE_ESXi_8.0.0_Driver"


class VcsimUnavailable(RuntimeError):
    """No Go toolchain new enough, or the pinned Go modules cannot be downloaded."""


def _go_available() -> bool:
    return subprocess.run([BUILD, "--available"], capture_output=True, check=False).returncode == 0


def available() -> bool:
    """True when the launcher can be built here (or already is)."""
    return os.access(BINARY, os.X_OK) or _go_available()


def build(force: bool = False) -> str:
    """Build bin/vcsim-gpu if a source file is newer than it; return its path."""
    if not _go_available():
        if os.access(BINARY, os.X_OK) and not force:
            return BINARY
        raise VcsimUnavailable("no Go >= 1.23 found (see lab/vcsim/README.md)")
    cmd = [BUILD] + (["--force"] if force else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode == 3:
        raise VcsimUnavailable(proc.stderr.strip())
    if proc.returncode != 0:
        raise RuntimeError(f"vcsim build failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return BINARY


@dataclass
class Vcsim:
    """A running simulator."""

    url: str
    host: str
    port: int
    ca: str
    username: str
    password: str
    run_dir: str
    pid: int
    inventory: dict = field(repr=False)

    def ssl_context(self):
        import ssl

        return ssl.create_default_context(cafile=self.ca)

    def connect(self, username: str | None = None, password: str | None = None):
        """pyvmomi ServiceInstance over verified TLS; caller may Disconnect()."""
        from pyVim.connect import SmartConnect

        return SmartConnect(host=self.host, port=self.port, user=username or self.username,
                            pwd=password if password is not None else self.password,
                            sslContext=self.ssl_context())

    def ansible_env(self) -> dict[str, str]:
        """Environment for `ansible` subprocesses: connection vars plus our CA as the trust store,
        so modules keep validate_certs=true."""
        return {
            "VMWARE_HOST": self.host,
            "VMWARE_PORT": str(self.port),
            "VMWARE_USER": self.username,
            "VMWARE_PASSWORD": self.password,
            "VMWARE_VALIDATE_CERTS": "true",
            "SSL_CERT_FILE": self.ca,
            "REQUESTS_CA_BUNDLE": self.ca,
        }

    def arm_fault(self, method: str, mode: str, skip: int = 0, times: int = 1, contains: str | None = None) -> None:
        """Make the next `times` calls of SOAP `method` (after `skip` of them; only those whose request contains
        `contains`) fail: "http500" (not run, HTML error page), "http500_after" (run, then the page) or "truncate"
        (run, reply cut in half). See faults.go."""
        self._faults("POST", dict(method=method, mode=mode, skip=skip, times=times, contains=contains or ""))

    def faults(self) -> list:
        """The armed fault rules with how often each fired."""
        return self._faults("GET") or []

    def clear_faults(self) -> None:
        self._faults("DELETE")

    def _faults(self, method: str, body: dict | None = None):
        import urllib.request

        with open(os.path.join(self.run_dir, "fault-token"), encoding="ascii") as fh:
            token = fh.read().strip()
        req = urllib.request.Request(f"https://{self.host}:{self.port}/gpuops/faults", method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"X-Gpuops-Fault-Token": token, "Content-Type": "application/json"})
        with urllib.request.urlopen(req, context=self.ssl_context(), timeout=10) as resp:
            data = resp.read()
        return json.loads(data) if data else None

    def host_info(self, name: str) -> dict:
        for h in self.inventory["hosts"]:
            if h["name"] == name:
                return h
        raise KeyError(name)


def _args(clusters, hosts, vms, standalone_hosts, gpu_hosts, gpu_model, gpu_count, driver, host_drivers,
          fixture_path, username, password, readonly, api_version, extra_args) -> list[str]:
    args = ["-clusters", str(clusters), "-hosts", str(hosts), "-vms", str(vms),
            "-standalone-hosts", str(standalone_hosts), "-username", username, "-password", password]
    if readonly:
        args += ["-readonly-username", readonly[0], "-readonly-password", readonly[1]]
    if api_version:
        args += ["-api-version", api_version]
    if gpu_hosts:
        args += ["-gpu-hosts", gpu_hosts if isinstance(gpu_hosts, str) else ",".join(gpu_hosts)]
    if gpu_model:
        args += ["-gpu-model", gpu_model]
    if gpu_count:
        args += ["-gpu-count", str(gpu_count)]
    if driver is not None:
        args += ["-driver", driver]
    for name, version in (host_drivers or {}).items():
        args += ["-host-driver", f"{name}={version}"]
    if fixture_path:
        args += ["-fixture", fixture_path]
    return args + list(extra_args)


@contextlib.contextmanager
def vcsim(*, clusters: int = 1, hosts: int = 2, vms: int = 1, standalone_hosts: int = 0,
          gpu_hosts: Iterable[str] | str = (), gpu_model: str | None = None, gpu_count: int | None = None,
          driver: str | None = None, host_drivers: Mapping[str, str] | None = None,
          fixture: Mapping[str, Any] | str | None = None, username: str = "user", password: str = "pass",
          readonly: tuple[str, str] | None = None, api_version: str | None = None,
          run_dir: str | None = None, extra_args: Iterable[str] = (), timeout: float = 30.0) -> Iterator[Vcsim]:
    """Build if needed, start on a free loopback port, yield a Vcsim, stop it afterwards.

    fixture: a dict (written to the run dir) or a path to a JSON fixture (see README.md).
    host_drivers: {host name: driver VIB version}; "" means no NVIDIA driver VIB on that host.
    readonly: (user, password) of a second login that gets NoPermission from host configuration methods.
    api_version: what vCenter and the hosts report (default 8.0.2.0; 8.0.3.0 adds vgpuMode).
    """
    build()
    own_dir = run_dir is None
    run_dir = run_dir or tempfile.mkdtemp(prefix="vcsim-")
    os.makedirs(run_dir, exist_ok=True)
    fixture_path = None
    if isinstance(fixture, Mapping):
        fixture_path = os.path.join(run_dir, "fixture.json")
        with open(fixture_path, "w", encoding="utf-8") as fh:
            json.dump(fixture, fh)
    elif fixture:
        fixture_path = str(fixture)
    url_file = os.path.join(run_dir, "url")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(url_file)
    log_path = os.path.join(run_dir, "vcsim.log")
    args = _args(clusters, hosts, vms, standalone_hosts, gpu_hosts, gpu_model, gpu_count, driver, host_drivers,
                 fixture_path, username, password, readonly, api_version, extra_args)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([BINARY, "-l", "127.0.0.1:0", "-run-dir", run_dir, *args],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        with open(os.path.join(run_dir, "pid"), "w", encoding="utf-8") as fh:
            fh.write(f"{proc.pid}\n")
        deadline = time.monotonic() + timeout
        while not (os.path.exists(url_file) and os.path.getsize(url_file)):
            if proc.poll() is not None:
                with open(log_path, encoding="utf-8", errors="replace") as fh:
                    raise RuntimeError(f"vcsim-gpu exited with {proc.returncode}:\n{fh.read()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"vcsim-gpu did not start within {timeout} s")
            time.sleep(0.05)
        with open(os.path.join(run_dir, "inventory.json"), encoding="utf-8") as fh:
            inventory = json.load(fh)
        host, port = inventory["host"].rsplit(":", 1)
        yield Vcsim(url=inventory["url"], host=host, port=int(port), ca=inventory["ca"], username=username,
                    password=password, run_dir=run_dir, pid=proc.pid, inventory=inventory)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if own_dir:
            shutil.rmtree(run_dir, ignore_errors=True)
