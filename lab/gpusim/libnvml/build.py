#!/usr/bin/env python3
"""Build gpusim's libnvidia-ml.so.1 (DESIGN.md), one library per driver branch, cached under build/libnvml/.

NVIDIA's nvml.h comes from go-nvml's module (``gen/nvml/nvml.h``, the header go-nvml generates its bindings from) at the
version and checksum pinned below, downloaded through the Go module proxy into build/libnvml/.gomodcache (the Go
module cache layout, so ``make clean`` removes it). The sources are compiled once; each branch links them with a linker
version script that exports only the entry points that driver's libnvidia-ml.so.1 has (gpusim/symbols.py), so the real
binding's symbol lookups fail exactly as on that driver.

Output: build/libnvml/<sha256 of the inputs>/obj/ (the objects), <driver version>[-without-<hash of the missing
symbols>]/libnvidia-ml.so.1 (one link per export set, each with a ``.complete`` marker) and ``build-times.txt``;
build/libnvml/by-driver/<the same name> is a relative link to the latest such directory, a path that stays put across
rebuilds, so a container that mounts build/libnvml can name it in ``LD_LIBRARY_PATH`` (lab/up.sh, Molecule).
``python lab/gpusim/libnvml/build.py [driver version | --state FILE]`` prints that directory (default: gpusim's
default driver; ``--state``: the driver and ``missing_symbols`` of a gpusim state file), for ``LD_LIBRARY_PATH``.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GPUSIM_HOME = os.path.dirname(HERE)                      # lab/gpusim
REPO = os.path.dirname(os.path.dirname(GPUSIM_HOME))
CACHE = os.path.join(REPO, "build", "libnvml")
# Every .c file here is one area's entry points (libnvml.c: the bridge, init, system, devices); gpusim_nvml.h is shared.
SOURCES = tuple(sorted(os.path.join(HERE, n) for n in os.listdir(HERE) if n.endswith(".c")))
HEADER = os.path.join(HERE, "gpusim_nvml.h")

# go-nvml as mig-parted v0.10.0 pins it (lab/mig-parted/go.mod); the sum is the module proxy's h1 hash (go.sum form).
GO_NVML = ("github.com/NVIDIA/go-nvml", "v0.12.4-0", "h1:4tkbB3pT1O77JGr0gQ6uD8FrsUPqP1A/EOEm2wI1TUg=")

sys.path.insert(0, GPUSIM_HOME)
from gpusim import symbols  # noqa: E402  pylint: disable=wrong-import-position,import-error
from gpusim.state import DEFAULT_DRIVER  # noqa: E402  pylint: disable=wrong-import-position,import-error

# Driver versions the tests name most: gpusim's default (every symbol), 535.98 (no _v3 process lists) and an R470 (no
# ...ProfileInfoV, no nvmlDeviceGetMemoryInfo_v2, no _v3), the symbol sets of gpusim/symbols.py. Any other version
# links on demand (ensure).
BRANCHES = (DEFAULT_DRIVER, "535.98", "470.256.02")

# The exported definitions of the sources: a return type at the start of a line, then the nvml name.
_EXPORT = re.compile(r"^(?:nvmlReturn_t |const char \*)(nvml\w+)\(", re.M)


def header_dir():
    """gen/nvml of the pinned go-nvml module (downloaded through the Go module proxy once, then from the cache)."""
    env = dict(os.environ, GOMODCACHE=os.path.join(CACHE, ".gomodcache"), GOFLAGS="-modcacherw", GO111MODULE="on",
               GOTOOLCHAIN="local")
    path, version, h1 = GO_NVML
    if shutil.which("go") is None:
        raise SystemExit("libnvml build: no `go` on PATH (it fetches nvml.h from the Go module proxy)")
    out = subprocess.run(["go", "mod", "download", "-json", "%s@%s" % (path, version)], cwd=CACHE, env=env,
                         check=True, capture_output=True, text=True)
    info = json.loads(out.stdout)
    if info.get("Sum") != h1:
        raise SystemExit("libnvml build: %s@%s has sum %s, pinned %s" % (path, version, info.get("Sum"), h1))
    return os.path.join(info["Dir"], "gen", "nvml")


def default_libpython():
    """The libpython a non-Python process (mig-parted, the device plugin) starts gpusim in: this Python's, if shared."""
    name = sysconfig.get_config_var("INSTSONAME") or "libpython%d.%d.so.1.0" % sys.version_info[:2]
    path = os.path.join(sysconfig.get_config_var("LIBDIR") or "", name)
    return path if sysconfig.get_config_var("Py_ENABLE_SHARED") and os.path.exists(path) else name


def exports(driver, missing=()):
    """The entry points the library of ``driver`` exports (less a state's ``missing_symbols``)."""
    names = []
    for source in SOURCES:
        with open(source, encoding="utf-8") as fh:
            names += _EXPORT.findall(fh.read())
    st = {"driver_version": driver, "missing_symbols": list(missing)}
    return sorted(n for n in names if symbols.exported(st, n))


def _run(cmd):
    subprocess.run(cmd, check=True)


def _objects(cc, hdr, libpython):
    """build/libnvml/<key>/: the sources compiled once (key: sha256 of everything that goes into the objects)."""
    h = hashlib.sha256()
    for path in (*SOURCES, HEADER, os.path.abspath(__file__), os.path.join(GPUSIM_HOME, "gpusim", "symbols.py"),
                 os.path.join(hdr, "nvml.h")):
        with open(path, "rb") as fh:
            h.update(fh.read())
    h.update(subprocess.run([cc, "--version"], check=True, capture_output=True).stdout)
    h.update(("\0".join((GPUSIM_HOME, libpython))).encode())
    out = os.path.join(CACHE, h.hexdigest()[:12])
    objs = [os.path.join(out, "obj", os.path.basename(source)[:-2] + ".o") for source in SOURCES]
    if not os.path.exists(os.path.join(out, "obj", ".complete")):
        tmp = os.path.join(out, "obj.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        for source in SOURCES:
            _run([cc, "-std=gnu11", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-fPIC",
                  "-I", hdr, "-I", HERE, '-DGPUSIM_DEFAULT_HOME="%s"' % GPUSIM_HOME,
                  '-DGPUSIM_DEFAULT_LIBPYTHON="%s"' % libpython, "-c", source,
                  "-o", os.path.join(tmp, os.path.basename(source)[:-2] + ".o")])
        shutil.rmtree(os.path.join(out, "obj"), ignore_errors=True)
        os.rename(tmp, os.path.join(out, "obj"))
        open(os.path.join(out, "obj", ".complete"), "w", encoding="utf-8").close()  # pylint: disable=consider-using-with
    return out, objs


def _link(cc, objs, d, names):
    """libnvidia-ml.so.1 in ``d`` exporting exactly ``names`` (a linker version script), checked with nm -D."""
    tmp = d + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    with open(os.path.join(tmp, "libnvidia-ml.map"), "w", encoding="utf-8") as fh:
        fh.write("{\n  global:\n%s  local: *;\n};\n" % "".join("    %s;\n" % n for n in names))
    lib = os.path.join(tmp, "libnvidia-ml.so.1")
    _run([cc, "-shared", "-Wl,-soname,libnvidia-ml.so.1", "-Wl,--version-script=%s" % fh.name,
          "-Wl,-z,defs", "-o", lib, *objs, "-ldl", "-lpthread"])
    dyn = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True, text=True).stdout
    got = sorted(line.split()[-1] for line in dyn.splitlines() if " T " in line)
    if got != names:
        raise SystemExit("libnvml build: %s exports %s, expected %s" % (lib, got, names))
    shutil.rmtree(d, ignore_errors=True)
    os.rename(tmp, d)
    open(os.path.join(d, ".complete"), "w", encoding="utf-8").close()  # pylint: disable=consider-using-with


def ensure(driver=DEFAULT_DRIVER, missing=()):
    """The directory holding libnvidia-ml.so.1 with the exports of ``driver`` (any version: symbols.py decides),
    less the symbols in ``missing`` (a state's ``missing_symbols``), built first when missing. The objects are
    compiled once; each export set is one link (a tenth of a second), named after the driver."""
    missing = sorted(set(missing))
    name = driver if not missing else "%s-without-%s" % (
        driver, hashlib.sha256("\0".join(missing).encode()).hexdigest()[:8])
    os.makedirs(CACHE, exist_ok=True)
    with open(os.path.join(CACHE, ".build.lock"), "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        start = time.monotonic()
        hdr = header_dir()
        fetched = time.monotonic()
        cc = os.environ.get("CC", "gcc")
        out, objs = _objects(cc, hdr, default_libpython())
        d = os.path.join(out, name)
        if not os.path.exists(os.path.join(d, ".complete")):
            _link(cc, objs, d, exports(driver, missing))
            built = time.monotonic()
            with open(os.path.join(out, "build-times.txt"), "a", encoding="utf-8") as fh:
                fh.write("%s: header %.1f s, compile+link %.1f s\n" % (name, fetched - start, built - fetched))
            print("libnvml build: %s (header %.1f s, compile+link %.1f s)" % (d, fetched - start, built - fetched),
                  file=sys.stderr)
        _point(name, os.path.relpath(d, os.path.join(CACHE, "by-driver")))
    return d


def ensure_for_state(state):
    """ensure() for a gpusim state (its content): its driver's exports less its ``missing_symbols``."""
    return ensure(state.get("driver_version") or DEFAULT_DRIVER, state.get("missing_symbols") or ())


def _point(name, target):
    """build/libnvml/by-driver/<name> -> target (replaced atomically: a process reading it sees the old or the new)."""
    link = os.path.join(CACHE, "by-driver", name)
    if os.path.islink(link) and os.readlink(link) == target:
        return
    os.makedirs(os.path.dirname(link), exist_ok=True)
    tmp = "%s.%d.tmp" % (link, os.getpid())
    os.symlink(target, tmp)
    os.replace(tmp, link)


def main(argv):
    """[driver version] or --state FILE: print the build's directory."""
    if argv[:1] == ["--state"]:
        with open(argv[1], encoding="utf-8") as fh:
            return ensure_for_state(json.load(fh))
    return ensure(*argv[:1])


if __name__ == "__main__":
    print(main(sys.argv[1:]))
