#!/usr/bin/env python3
"""Build the stand-in NVIDIA CUDA apt repository (see packages.yml) as a flat, signed repository.

    lab/cuda-repo/build.py OUT_DIR

Builds each package with dpkg-deb, indexes and signs with apt-ftparchive and gpg (the tools Debian archives are made
with), and exports the signing key as OUT_DIR/3bf863cc.pub (the file name NVIDIA's repository uses, so the role's
default key URL works unchanged against the stand-in). Idempotent: a repository built from the same packages.yml and
this script is left alone.
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


def fingerprint():
    return standin_stamp.fingerprint(HERE, ("packages.yml", "build.py"))


def expand(spec):
    """One control paragraph per (package, driver) with the placeholders filled in; duplicates (e.g. the branch
    pinning package built from two drivers) keep the newest driver's."""
    revs = spec["revisions"]
    out = {}
    for driver in spec["drivers"]:
        branch = driver.split(".")[0]
        values = dict(v=driver, b=branch, r=revs["module"], m=revs["meta"])
        for pkg in spec["packages"]:
            if int(branch) < int(pkg.get("since_branch", 0)):
                continue
            fields = {k: " ".join(str(v).format(**values).split()) for k, v in pkg.items()
                      if k not in ("since_branch", "files")}
            # Files the package ships ({path: text}), with the same placeholders; kept as written (line breaks).
            fields["files"] = {path.format(**values): text.format(**values) for path, text in (pkg.get("files") or {}).items()}
            out[(fields["name"], fields["version"])] = fields
    return list(out.values())


def build_deb(fields, workdir, pool, arch="all", files=None):
    """One package; ``files``: {path inside the package: bytes} it installs."""
    name, version = fields["name"], fields["version"]
    root = os.path.join(workdir, "%s_%s" % (name, version))
    os.makedirs(os.path.join(root, "DEBIAN"))
    for path, data in (files or {}).items():
        dest = os.path.join(root, path.lstrip("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "wb") as f:
            f.write(data)
        if "/bin/" in path:
            os.chmod(dest, 0o755)
    control = ["Package: %s" % name, "Version: %s" % version, "Architecture: %s" % arch,
               "Maintainer: gpuops.provision stand-in <noreply@example.invalid>", "Section: non-free/libs",
               "Priority: optional"]
    for key in ("depends", "recommends", "provides", "conflicts"):
        if fields.get(key):
            control.append("%s: %s" % (key.capitalize(), fields[key]))
    control.append("Description: stand-in for NVIDIA's %s (no files)" % name)
    if fields.get("pin"):
        # The pinning package ships an apt preferences file, as NVIDIA's do. apt reads only names without an
        # extension or ending in .pref (apt_preferences(5)); "...-580.82.07" alone would be ignored.
        prefs = os.path.join(root, "etc", "apt", "preferences.d")
        os.makedirs(prefs)
        with open(os.path.join(prefs, name + ".pref"), "w") as f:
            f.write("Package: cuda-drivers* nvidia-open* nvidia-driver nvidia-kernel-dkms nvidia-open-kernel-dkms "
                    "firmware-nvidia-gsp libcuda1 libnvidia-ml1 nvidia-smi nvidia-persistenced\n"
                    "Pin: version %s\nPin-Priority: 1000\n" % fields["pin"])
    with open(os.path.join(root, "DEBIAN", "control"), "w") as f:
        f.write("\n".join(control) + "\n")
    deb = os.path.join(pool, "%s_%s_%s.deb" % (name, version, arch))
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", root, deb], check=True, stdout=subprocess.DEVNULL)


def main(out):
    if standin_stamp.is_current(out, fingerprint()):
        print("cuda-repo: %s is up to date" % out)
        return
    with open(os.path.join(HERE, "packages.yml")) as f:
        spec = yaml.safe_load(f)
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    with tempfile.TemporaryDirectory() as tmp:
        gnupg = os.path.join(tmp, "gnupg")
        os.makedirs(gnupg, mode=0o700)
        env = dict(os.environ, GNUPGHOME=gnupg)
        gpg = ["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
        subprocess.run(gpg + ["--quick-gen-key", "gpuops CUDA repository stand-in", "ed25519", "sign", "never"],
                       check=True, env=env)
        pool = os.path.join(out, "pool")
        os.makedirs(pool)
        for fields in expand(spec):
            build_deb(fields, tmp, pool, files={p: t.encode() for p, t in fields.pop("files").items()})
        # NVIDIA's cuda-keyring: the repository key (binary keyring) and the one-line source naming it.
        keyring = spec["keyring"]
        key = subprocess.run(gpg + ["--export"], check=True, env=env, capture_output=True).stdout
        build_deb(keyring, tmp, pool, files={
            keyring["keyring"]: key,
            "/etc/apt/sources.list.d/" + keyring["list"]:
                ("deb [signed-by=%s] %s /\n" % (keyring["keyring"], keyring["uri"])).encode()})
        # Package files that come from outside a repository (the vGPU guest driver from NVIDIA's licensing portal).
        files = os.path.join(out, "files")
        os.makedirs(files)
        for fields in spec.get("files", []):
            build_deb(fields, tmp, files, arch=fields.get("arch", "all"))
        subprocess.run("apt-ftparchive packages pool > Packages && gzip -9nk Packages", shell=True, cwd=out, check=True)
        release = subprocess.run(["apt-ftparchive", "-o", "APT::FTPArchive::Release::Label=NVIDIA CUDA (stand-in)",
                                  "-o", "APT::FTPArchive::Release::Origin=gpuops stand-in", "release", "."],
                                 cwd=out, check=True, capture_output=True, text=True).stdout
        with open(os.path.join(out, "Release"), "w") as f:
            f.write(release)
        subprocess.run(gpg + ["--clearsign", "-o", "InRelease", "Release"], cwd=out, check=True, env=env)
        subprocess.run(gpg + ["--detach-sign", "--armor", "-o", "Release.gpg", "Release"], cwd=out, check=True, env=env)
        with open(os.path.join(out, "3bf863cc.pub"), "w") as f:
            f.write(subprocess.run(gpg + ["--armor", "--export"], check=True, env=env, capture_output=True, text=True).stdout)
    standin_stamp.mark(out, fingerprint())
    print("cuda-repo: built %s (%d packages)" % (out, len(os.listdir(os.path.join(out, "pool")))))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(os.path.abspath(sys.argv[1]))
