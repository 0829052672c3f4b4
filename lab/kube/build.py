#!/usr/bin/env python3
"""Build the lab's Kubernetes from the upstream Go modules pinned in lab/kube/go.mod, in two sets cached under
build/kube/ by lab/gobuild.py (one module and build cache for both):

- the control plane `make lab` runs (``ensure``): kube-apiserver, kube-controller-manager and kube-scheduler
  (k8s.io/kubernetes), etcd (go.etcd.io/etcd/server) and kwok (sigs.k8s.io/kwok) with kwok's own Stage files;
- the node and client programs only some tests run (``ensure_tools``): kubeadm, kubelet and kubectl, and fakecri
  (cmd/fakecri: upstream's fake CRI server for the kubelet). Built by `make test` before the suites, or on first
  use (lab/kube/kubelet.py); a fresh `make lab` does not wait for them (issue 41: 871 s, 473 s of it this build).

Prints the output directories (bin/, kwok-stages/)."""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import gobuild  # noqa: E402  pylint: disable=wrong-import-position

PROGRAMS = {
    "k8s.io/kubernetes/cmd/kube-apiserver": "kube-apiserver",
    "k8s.io/kubernetes/cmd/kube-controller-manager": "kube-controller-manager",
    "k8s.io/kubernetes/cmd/kube-scheduler": "kube-scheduler",
    "sigs.k8s.io/kwok/cmd/kwok": "kwok",
    "go.etcd.io/etcd/server/v3": "etcd",
}
TOOLS = {
    "k8s.io/kubernetes/cmd/kubeadm": "kubeadm",
    "k8s.io/kubernetes/cmd/kubectl": "kubectl",
    "k8s.io/kubernetes/cmd/kubelet": "kubelet",
    "gpuops.lab/kube/cmd/fakecri": "fakecri",
}


def _kwok_stages(out, env):
    src = os.path.join(gobuild.module_dir(HERE, "sigs.k8s.io/kwok", env), "kustomize", "stage")
    shutil.copytree(src, os.path.join(out, "kwok-stages"), copy_function=shutil.copyfile)
    for root, dirs, _files in os.walk(os.path.join(out, "kwok-stages")):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)


# The version stamps upstream's release build links in (k8s.io/kubernetes hack/lib/version.sh kube::version::ldflags:
# gitVersion, gitMajor, gitMinor, gitTreeState and buildDate, into k8s.io/client-go/pkg/version and
# k8s.io/component-base/version), so that `kubeadm version`, `kubectl version` and the API server's /version say
# v1.36.x as a released binary does, and version-skew checks have a version to compare (unstamped: v0.0.0-master).
# The build date is the pin's, fixed, so that the build stays reproducible (upstream honours SOURCE_DATE_EPOCH).
BUILD_DATE = "2026-05-13T00:00:00Z"


def version_ldflags(version):
    major, minor = version.lstrip("v").split(".")[:2]
    stamps = {"gitVersion": version, "gitMajor": major, "gitMinor": minor, "gitTreeState": "clean", "buildDate": BUILD_DATE}
    return [f"-X {pkg}.{key}={value}" for pkg in ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version")
            for key, value in stamps.items()]


def ensure():
    """The control plane's output dir (bin/, kwok-stages/), built first when missing."""
    version = gobuild.pinned(HERE, "k8s.io/kubernetes")
    return gobuild.ensure("kube", HERE, PROGRAMS, version, extra_files=(os.path.abspath(__file__),),
                          after=_kwok_stages, ldflags=version_ldflags(version))


def ensure_tools():
    """The output dir of kubeadm, kubectl, kubelet and fakecri (bin/), built first when missing."""
    version = gobuild.pinned(HERE, "k8s.io/kubernetes")
    return gobuild.ensure("kube", HERE, TOOLS, version, extra_files=(os.path.abspath(__file__), os.path.join(HERE, "cmd", "fakecri", "main.go")),
                          ldflags=version_ldflags(version), variant="tools")


if __name__ == "__main__":
    # `build.py` the control plane, `build.py tools` the rest, `build.py all` both.
    WHICH = sys.argv[1] if len(sys.argv) > 1 else "control-plane"
    if WHICH not in ("control-plane", "tools", "all"):
        raise SystemExit("usage: build.py [control-plane|tools|all]")
    if WHICH in ("control-plane", "all"):
        print(ensure())
    if WHICH in ("tools", "all"):
        print(ensure_tools())
