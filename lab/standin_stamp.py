"""Build stamps of the lab's generated stand-ins (lab/cuda-repo, lab/rpm-repo): a build is redone only when the files
that define it change. The stamp is a SHA-256 of those files (and any extra text, such as an image name), kept in
OUT/.fingerprint."""
import hashlib
import os


def fingerprint(here, names, extra=""):
    h = hashlib.sha256()
    for name in names:
        with open(os.path.join(here, name), "rb") as f:
            h.update(f.read())
    h.update(extra.encode())
    return h.hexdigest()


def is_current(out, value):
    stamp = os.path.join(out, ".fingerprint")
    if not os.path.exists(stamp):
        return False
    with open(stamp, encoding="utf-8") as f:
        return f.read() == value


def mark(out, value):
    with open(os.path.join(out, ".fingerprint"), "w", encoding="utf-8") as f:
        f.write(value)
