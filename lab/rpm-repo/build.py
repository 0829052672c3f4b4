#!/usr/bin/env python3
"""Build the stand-in NVIDIA CUDA RPM repositories and EL distribution repositories (see packages.yml).

    lab/rpm-repo/build.py OUT_DIR          (make: build/lab/rpm-repo)

Writes the RPM spec files and the DNF module metadata (modules.yaml) here, then builds the empty RPMs with rpmbuild and
the repositories with createrepo_c and modifyrepo_c *inside a container* (localhost/debian-bookworm:lab plus Debian's
rpm and createrepo-c packages), so nothing is installed on this machine. Output:

    OUT_DIR/cuda/rhel9/x86_64/    NVIDIA's layout; modular (modules.yaml: module nvidia-driver, its streams)
    OUT_DIR/cuda/rhel10/x86_64/   no module streams (RHEL 10)
    OUT_DIR/el9/{baseos,extras,crb,epel}/    Rocky Linux 9 stand-in (release and repo files, epel-release, dkms)
    OUT_DIR/el10/{baseos,extras,crb,epel}/   AlmaLinux 10 stand-in
    OUT_DIR/files/                NVIDIA's vGPU guest driver RPM (no repository: a package file)

The repositories are unsigned: use them with gpgcheck off. Idempotent: a tree built from the same packages.yml and this
script is left alone (OUT_DIR/.fingerprint). Environment: CONTAINERS_CONF (default lab/images/containers.conf),
RPM_REPO_IMAGE (default localhost/debian-bookworm:lab).
"""
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import standin_stamp  # noqa: E402  pylint: disable=wrong-import-position
ROOT = os.path.dirname(os.path.dirname(HERE))
IMAGE = os.environ.get("RPM_REPO_IMAGE", "localhost/debian-bookworm:lab")
ARCH = "x86_64"
# Fixed module versions/contexts: the metadata (and so the fingerprint) does not change between builds.
MODULE_VERSION = 20250901000000
MODULE_CONTEXT = "6c81f4a2"


def fingerprint():
    return standin_stamp.fingerprint(HERE, ("packages.yml", "build.py"), IMAGE)


def branch_of(version):
    return version.split(".")[0]


def spec_text(name, packages, dist, arch):
    """One spec whose subpackages are the given packages (dicts: name, version, release, epoch, requires, provides,
    conflicts, files {path: content}, symlinks {path: target}, summary). The spec's own package is never built."""
    out = ["%global debug_package %{nil}", "%global _build_id_links none", "%define dist " + dist,
           "Name: " + name, "Version: 0", "Release: 0", "Summary: gpuops.provision stand-in packages",
           "License: MIT", "BuildArch: " + arch, "", "%description", "Stand-in packages (no content).", ""]
    install = ["%install", "rm -rf %{buildroot}", "mkdir -p %{buildroot}"]
    files = []
    for p in packages:
        out.append("%package -n " + p["name"])
        out.append("Summary: stand-in for %s (no payload)" % p["name"])
        if p.get("epoch"):
            out.append("Epoch: %s" % p["epoch"])
        out.append("Version: %s" % p["version"])
        out.append("Release: %s%%{?dist}" % p.get("release", "1"))
        for key, tag in (("provides", "Provides"), ("requires", "Requires"), ("conflicts", "Conflicts")):
            for rel in p.get(key, []):
                out.append("%s: %s" % (tag, rel))
        out += ["", "%description -n " + p["name"], "Stand-in for %s: metadata only." % p["name"], ""]
        files.append("%files -n " + p["name"])
        for path, content in sorted(p.get("files", {}).items()):
            install.append("mkdir -p %%{buildroot}%s" % os.path.dirname(path))
            install.append("cat > %%{buildroot}%s <<'GPUOPS_EOF'\n%sGPUOPS_EOF" % (path, content))
            files.append(path)
        for path, target in sorted(p.get("symlinks", {}).items()):
            install.append("mkdir -p %%{buildroot}%s" % os.path.dirname(path))
            install.append("ln -sfn %s %%{buildroot}%s" % (target, path))
            files.append(path)
        files.append("")
    return "\n".join(out + install + [""] + files) + "\n"


def driver_packages(spec, version, dist):
    ev = "%s:%s" % (spec["epoch"], version)
    pkgs = []
    for p in spec["driver_packages"]:
        pkgs.append(dict(
            name=p["name"], epoch=spec["epoch"], version=version, release=spec["release"], flavour=p["flavour"],
            requires=[r.format(ev=ev) for r in p.get("requires", [])],
            provides=[r.format(ev=ev) for r in p.get("provides", [])],
            conflicts=[r.format(ev=ev) for r in p.get("conflicts", [])]))
    return pkgs


def nevra(p, dist):
    return "%s-%s:%s-%s%s.%s" % (p["name"], p["epoch"], p["version"], p["release"], dist, ARCH)


def modules_yaml(spec, dist):
    """NVIDIA's module metadata ([kmod]): one modulemd document per stream, listing its artifacts."""
    mod = spec["module"]
    streams = {}
    for version in spec["drivers"]:
        b = branch_of(version)
        pkgs = driver_packages(spec, version, dist)
        for template in mod["branch_streams"]:
            stream = template.format(b=b)
            flavour = "open" if stream.endswith("-open") else "dkms"
            streams.setdefault(stream, (flavour, []))[1].extend(nevra(p, dist) for p in pkgs if flavour in p["flavour"])
        for stream, flavour in mod["latest_streams"].items():
            streams.setdefault(stream, (flavour, []))[1].extend(nevra(p, dist) for p in pkgs if flavour in p["flavour"])
    docs = []
    for stream, (flavour, artifacts) in sorted(streams.items()):
        docs.append({"document": "modulemd", "version": 2, "data": {
            "name": mod["name"], "stream": stream, "version": MODULE_VERSION, "context": MODULE_CONTEXT, "arch": ARCH,
            "summary": "Nvidia driver for %s branch" % stream,
            "description": "NVIDIA driver packages of the %s stream (gpuops.provision stand-in)." % stream,
            "license": {"module": ["MIT"]},
            "profiles": {"default": {"rpms": list(mod["profiles"][flavour])}},
            "artifacts": {"rpms": sorted(artifacts)}}})
    return yaml.safe_dump_all(docs, explicit_start=True, explicit_end=True, sort_keys=False)


def os_release(d, major):
    return ('NAME="{name}"\nVERSION="{version} ({codename})"\nID="{id}"\nID_LIKE="rhel centos fedora"\n'
            'VERSION_ID="{version}"\nPLATFORM_ID="platform:el{major}"\nPRETTY_NAME="{name} {version} ({codename})"\n'
            'ANSI_COLOR="0;32"\nCPE_NAME="cpe:/o:{id}:{id}:{major}"\nHOME_URL="https://example.invalid/"\n'
            ).format(major=major, **d)


def repo_file(d, major):
    text = "# %s repositories (gpuops.provision stand-in: file:// under /srv/rpm-repo, unsigned)\n" % d["name"]
    for repo, enabled in (("baseos", 1), ("extras", 1), ("crb", 0)):
        text += ("\n[{repo}]\nname={name} $releasever - {repo}\nbaseurl=file:///srv/rpm-repo/el$releasever/{repo}/\n"
                 "gpgcheck=0\nenabled={enabled}\n").format(repo=repo, enabled=enabled, name=d["name"])
    return text


def base_packages(spec, el, d):
    """{repo: [package]} of one EL major's distribution stand-in."""
    major = el[2:]
    release_files = {
        "/usr/lib/os-release": os_release(d, major),
        "/etc/%s-release" % d["id"]: "{name} release {version} ({codename})\n".format(**d),
        "/etc/system-release-cpe": "cpe:/o:{id}:{id}:{major}\n".format(major=major, **d),
    }
    repos = {
        "baseos": [
            dict(name=d["release_package"], version=d["version"], release="1",
                 provides=["system-release = %s" % d["version"], "system-release(releasever) = %s" % major,
                           "redhat-release = %s" % d["version"], "base-module(platform:el%s)" % major],
                 requires=[d["repos_package"]], files=release_files,
                 symlinks={"/etc/redhat-release": "%s-release" % d["id"], "/etc/system-release": "%s-release" % d["id"],
                           "/etc/os-release": "../usr/lib/os-release"}),
            dict(name=d["repos_package"], version=d["version"], release="1",
                 files={"/etc/yum.repos.d/" + d["repos_file"]: repo_file(d, major)}),
        ],
        "extras": [], "crb": [], "epel": [],
    }
    for p in spec["base_packages"]:
        pkg = dict(name=p["name"], version=str(p["version"]).format(major=major), release=str(p.get("release", "1")))
        if p.get("repo_file") == "epel":
            pkg["requires"] = ["redhat-release >= %s" % major]
            pkg["files"] = {"/etc/yum.repos.d/epel.repo": (
                "# EPEL (gpuops.provision stand-in: file:// under /srv/rpm-repo, unsigned)\n[epel]\n"
                "name=Extra Packages for Enterprise Linux $releasever (stand-in)\n"
                "baseurl=file:///srv/rpm-repo/el$releasever/epel/\ngpgcheck=0\nenabled=1\n")}
        repos[p["repo"]].append(pkg)
    return repos


def plan(spec, work):
    """Write the specs and modules.yaml files under work/; return the container's build script."""
    script = ["set -eu", "export HOME=/tmp"]

    def add_spec(fname, name, pkgs, dist, arch, outdir):
        with open(os.path.join(work, "specs", fname), "w") as f:
            f.write(spec_text(name, pkgs, dist, arch))
        script.append("mkdir -p /out/%s" % outdir)
        script.append("rpmbuild --quiet -bb --target %s --define '_topdir /tmp/rpmbuild' --define '_rpmdir /out/%s' "
                      "--define '_build_name_fmt %%%%{NAME}-%%%%{VERSION}-%%%%{RELEASE}.%%%%{ARCH}.rpm' /work/specs/%s >/dev/null"
                      % (arch, outdir, fname))

    os.makedirs(os.path.join(work, "specs"))
    repos = []
    for folder, meta in sorted(spec["cuda_repos"].items()):
        outdir = "cuda/%s/%s" % (folder, ARCH)
        for version in spec["drivers"]:
            if int(branch_of(version)) < int(meta.get("since_branch", 0)):
                continue
            add_spec("nvidia-%s-%s.spec" % (folder, version), "gpuops-standin-nvidia",
                     driver_packages(spec, version, meta["dist"]), meta["dist"], ARCH, outdir)
        repos.append(outdir)
        if meta["modules"]:
            with open(os.path.join(work, "modules-%s.yaml" % folder), "w") as f:
                f.write(modules_yaml(spec, meta["dist"]))
    for el, d in sorted(spec["distributions"].items()):
        for repo, pkgs in sorted(base_packages(spec, el, d).items()):
            outdir = "%s/%s" % (el, repo)
            if pkgs:
                add_spec("%s-%s.spec" % (el, repo), "gpuops-standin-%s" % repo, pkgs, "." + el, "noarch", outdir)
            else:
                script.append("mkdir -p /out/%s" % outdir)
            repos.append(outdir)
    # Package files outside any repository; no dist tag (%{nil}: rpm refuses an empty macro body).
    if spec.get("files"):
        add_spec("files.spec", "gpuops-standin-files", [dict(p, version=str(p["version"])) for p in spec["files"]], "%{nil}",
                 ARCH, "files")
    for outdir in repos:
        script.append("createrepo_c --quiet --no-database /out/%s" % outdir)
    for folder, meta in sorted(spec["cuda_repos"].items()):
        if meta["modules"]:
            # The file's name is the metadata type dnf looks for (modifyrepo_c --mdtype would also do).
            script.append("cp /work/modules-%s.yaml /tmp/modules.yaml && modifyrepo_c --mdtype=modules "
                          "/tmp/modules.yaml /out/cuda/%s/%s/repodata >/dev/null" % (folder, folder, ARCH))
    return "\n".join(script) + "\n"


def run_in_container(work, out):
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", os.path.join(ROOT, "lab", "images", "containers.conf"))
    inner = ("apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "
             "rpm createrepo-c file >/dev/null && bash /work/build.sh")
    cmd = ["podman", "run", "--rm", "--runtime=runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=32768:32768",
           "-v", "%s:/work:ro" % work, "-v", "%s:/out" % out, IMAGE, "bash", "-c", inner]
    subprocess.run(cmd, check=True, env=env)


def main(out):
    if standin_stamp.is_current(out, fingerprint()):
        print("rpm-repo: %s is up to date" % out)
        return
    with open(os.path.join(HERE, "packages.yml")) as f:
        spec = yaml.safe_load(f)
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=parent, prefix=".rpm-repo-") as tmp:
        work, built = os.path.join(tmp, "work"), os.path.join(tmp, "out")
        os.makedirs(work)
        os.makedirs(built)
        with open(os.path.join(work, "build.sh"), "w") as f:
            f.write(plan(spec, work))
        run_in_container(work, built)
        standin_stamp.mark(built, fingerprint())
        # Replace the old tree only once the new one is complete.
        if os.path.isdir(out):
            shutil.rmtree(out)
        os.rename(built, out)
    count = sum(1 for _d, _s, fs in os.walk(out) for f in fs if f.endswith(".rpm"))
    print("rpm-repo: built %s (%d packages)" % (out, count))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(os.path.abspath(sys.argv[1]))
