"""Build upstream Go programs from the modules pinned in a lab/<name>/go.mod, once per pin.

The binaries go to build/<name>/<version>-<sha256(go.mod, go.sum, the caller's build file)[:12]>/bin; a `.complete`
marker makes a second `make lab`/`make test` do nothing. Module and build caches stay under build/<name>/ so a rebuild
after a pin change is incremental and `make clean` removes everything. One builder at a time (flock); others wait.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def builder(name):
    """lab/<name>/build.py as a module, loaded by path (each lab folder's is called build.py)."""
    import importlib.util  # pylint: disable=import-outside-toplevel
    spec = importlib.util.spec_from_file_location(f"gpuops_lab_{name.replace('-', '_')}_build",
                                                  os.path.join(REPO, "lab", name, "build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pinned(src, module):
    with open(os.path.join(src, "go.mod"), encoding="utf-8") as fh:
        match = re.search(r"^\s*(?:require\s+)?" + re.escape(module) + r" (v\S+)", fh.read(), re.M)
    return match.group(1)


def key(src, version, extra_files=()):
    h = hashlib.sha256()
    for path in (os.path.join(src, "go.mod"), os.path.join(src, "go.sum"), *extra_files):
        with open(path, "rb") as fh:
            h.update(fh.read())
    return f"{version}-{h.hexdigest()[:12]}"


def go_env(cache):
    env = dict(os.environ)
    env.update({
        # cgo stays on (the go command's default with gcc present): go-nvml needs it for mig-parted.
        "GO111MODULE": "on", "GOTOOLCHAIN": "local",
        # -modcacherw: the module cache stays removable by `make clean` for non-root users.
        "GOFLAGS": "-mod=readonly -modcacherw -buildvcs=false",
        "GOMODCACHE": os.path.join(cache, ".gomodcache"), "GOCACHE": os.path.join(cache, ".gocache"),
        # A temp directory of our own: cgo writes the C it feeds gcc there, and gcc looks for a quoted #include
        # beside it first, so a stray /tmp/nvml.h (an NVML header someone unpacked) replaced go-nvml's own and broke
        # the mig-parted build (273 "incompatible type for argument 1" errors; none with TMPDIR elsewhere).
        "TMPDIR": os.path.join(cache, ".tmp"),
    })
    return env


def module_dir(src, module, env):
    """Where a pinned module's source is in the module cache (to read upstream data files without copying them)."""
    out = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", module], cwd=src, env=env, check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


def ensure(name, src, programs, version, extra_files=(), after=None, ldflags=(), variant=""):
    """The output dir (with bin/<program>) for the current pin, built first when missing.

    ``variant``: a second set of programs from the same pin, in an output dir of its own (``<key>-<variant>``) that
    shares the module and build caches, so it compiles only the packages the first set did not.
    ``programs``: {main package: binary name}. ``after(tmp_out, env)`` adds data files before the build is marked.
    ``ldflags``: more -ldflags for every program (upstream's -X version stamps); the caller's build file, which
    spells them, is among ``extra_files`` so that a change rebuilds."""
    cache = os.path.join(REPO, "build", name)
    out = os.path.join(cache, key(src, version, extra_files) + (f"-{variant}" if variant else ""))
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, ".build.lock"), "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(os.path.join(out, ".complete")):
            return out
        if shutil.which("go") is None:
            raise SystemExit(f"{name} build: no `go` on PATH (Go 1.26 is needed for {src}/go.mod)")
        env = go_env(cache)
        os.makedirs(env["TMPDIR"], exist_ok=True)
        tmp = out + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(os.path.join(tmp, "bin"))
        start = time.monotonic()
        subprocess.run(["go", "mod", "download"], cwd=src, env=env, check=True)
        downloaded = time.monotonic()
        flags = ["-trimpath", "-ldflags=" + " ".join(["-s", "-w", *ldflags])]
        same = [p for p, b in programs.items() if b == p.rstrip("/").rsplit("/", 1)[-1]]
        if same:  # one invocation: the programs share one package graph
            subprocess.run(["go", "build", *flags, "-o", os.path.join(tmp, "bin") + "/", *same], cwd=src, env=env, check=True)
        for package, binary in programs.items():
            if package not in same:  # e.g. etcd, whose main package is its module root ("v3")
                subprocess.run(["go", "build", *flags, "-o", os.path.join(tmp, "bin", binary), package],
                               cwd=src, env=env, check=True)
        if after:
            after(tmp, env)
        built = time.monotonic()
        with open(os.path.join(tmp, "build-times.txt"), "w", encoding="utf-8") as fh:
            fh.write(f"modules {downloaded - start:.0f} s\nbuild {built - downloaded:.0f} s\n")
        shutil.rmtree(out, ignore_errors=True)
        os.rename(tmp, out)
        open(os.path.join(out, ".complete"), "w", encoding="utf-8").close()  # pylint: disable=consider-using-with
        print(f"{name} build: {out} (modules {downloaded - start:.0f} s, build {built - downloaded:.0f} s)", file=sys.stderr)
    return out
