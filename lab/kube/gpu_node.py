"""A GPU node of a GPU Operator cluster as a real one looks after some time in service, for fleets of them
(bench/mig_reconfigure --fleet): the labels and annotations each of its owners put there, written by that owner's
own client so that the API server records who owns what (metadata.managedFields, one entry per field manager and
operation), and the status a kubelet reports. A LIST of a thousand of these costs what it costs on a cluster (about
17 KiB a node here), where the lab's plain nodes are a tenth of that.

The owners, each a separate client (a client-go client's field manager is its binary's name, taken from the user
agent: k8s.io/apiserver pkg/endpoints/handlers/rest.go managerOrUserAgent), and each writing with an Update (create,
PATCH), as they do:
- ``kubelet`` registers the node (pkg/kubelet/kubelet_node_status.go initialNode: kubernetes.io/{arch,os,hostname},
  beta.kubernetes.io/{arch,os}; the annotation volumes.kubernetes.io/controller-managed-attach-detach) and reports
  its status (capacity, allocatable, nodeInfo, and the images it holds: at most nodeStatusMaxImages, 50,
  pkg/kubelet/nodestatus/setters.go Images);
- (the lab's real kube-controller-manager adds its own: node.alpha.kubernetes.io/ttl, pkg/controller/ttl);
- ``nfd-master``: Node Feature Discovery's labels (feature.node.kubernetes.io/<source>-<feature>, the feature names
  of its docs/usage/features.md) and the ones GPU feature discovery hands it through a NodeFeature
  (nvidia.com/..., the GPU Operator's chart lets nfd-master write that namespace: extraLabelNs), with its
  annotations nfd.node.kubernetes.io/feature-labels (the labels it owns) and worker.version;
  GFD's labels follow NVIDIA/k8s-device-plugin internal/lm (nvml.go newVersionLabeler, newMigCapabilityLabeler,
  newSharingLabeler, newGPUModeLabeler; resource.go NewGPUResourceLabeler / NewMIGResourceLabeler: product, count,
  replicas, memory and per MIG profile its attributes; mig-strategy.go);
- ``gpu-operator``: nvidia.com/gpu.present and nvidia.com/gpu.deploy.<operand> (NVIDIA/gpu-operator
  controllers/state_manager.go), mig-manager off (this roll's backend nvml changes the GPUs itself);
- ``kubectl-label``: an administrator's nvidia.com/mig.config (``kubectl label``'s field manager), and
  ``kubectl-cordon`` where one cordoned the node.

The fixture format (lab/kube/seed.py): ``fieldManager`` names who creates the node (and reports its status), and
``writers`` the later owners, each ``{manager, patch}`` (a merge patch of the node), applied in order.
"""
from __future__ import annotations

import hashlib

# Sapphire Rapids, as NFD's cpu source reports it (feature.node.kubernetes.io/cpu-cpuid.<flag>=true).
CPUID = ("ADX AESNI AMXBF16 AMXINT8 AMXTILE AVX AVX2 AVX512BF16 AVX512BITALG AVX512BW AVX512CD AVX512DQ AVX512F "
         "AVX512FP16 AVX512IFMA AVX512VBMI AVX512VBMI2 AVX512VL AVX512VNNI AVX512VPOPCNTDQ AVXVNNI CETIBT CETSS "
         "CLDEMOTE CMPXCHG8 FMA3 FSRM FXSR FXSROPT GFNI IA32_ARCH_CAP IBPB LAHF MOVBE MOVDIR64B MOVDIRI OSXSAVE "
         "PCONFIG SERIALIZE SHA SPEC_CTRL_SSBD STIBP SYSCALL SYSEE TSXLDTRK VAES VMX VPCLMULQDQ WAITPKG WBNOINVD X87 "
         "XGETBV1 XSAVE XSAVEC XSAVEOPT XSAVES").split()
NFD_OTHER = {
    "cpu-hardware_multithreading": "true", "cpu-model.family": "6", "cpu-model.id": "143",
    "cpu-model.vendor_id": "Intel", "cpu-pstate.scaling_governor": "performance", "cpu-pstate.status": "active",
    "cpu-pstate.turbo": "true", "kernel-config.NO_HZ": "true", "kernel-config.NO_HZ_IDLE": "true",
    "kernel-version.full": "6.8.0-60-generic", "kernel-version.major": "6", "kernel-version.minor": "8",
    "kernel-version.revision": "0", "memory-numa": "true", "pci-10de.present": "true", "pci-15b3.present": "true",
    "pci-0302_10de.present": "true", "rdma.available": "true", "rdma.capable": "true",
    "storage-nonrotationaldisk": "true", "system-os_release.ID": "ubuntu", "system-os_release.VERSION_ID": "22.04",
    "system-os_release.VERSION_ID.major": "22", "system-os_release.VERSION_ID.minor": "04",
}
NFD_PREFIX = "feature.node.kubernetes.io/"
OPERANDS = ("driver", "gpu-feature-discovery", "container-toolkit", "device-plugin", "dcgm", "dcgm-exporter",
            "node-status-exporter", "operator-validator")
# MIG profile attributes GFD labels (NVIDIA/k8s-device-plugin internal/resource/nvml-mig-device.go GetAttributes),
# H100 80GB: memory MiB, multiprocessors, slices and engines per profile.
H100_MIG = {
    "1g.10gb": dict(memory=9856, multiprocessors=16, gi=1, ci=1, copy=1, decoder=1, encoder=0, jpeg=1, ofa=0),
    "2g.20gb": dict(memory=20096, multiprocessors=32, gi=2, ci=2, copy=2, decoder=2, encoder=0, jpeg=2, ofa=0),
    "3g.40gb": dict(memory=40320, multiprocessors=60, gi=3, ci=3, copy=3, decoder=3, encoder=0, jpeg=3, ofa=0),
}
# What a GPU node's container runtime holds (the kubelet reports them, largest first, at most 50).
IMAGES = [
    ("nvcr.io/nvidia/driver", "570.133.20-ubuntu22.04", 1523),
    ("nvcr.io/nvidia/cloud-native/dcgm", "4.1.1-2-ubuntu22.04", 1187),
    ("nvcr.io/nvidia/k8s/dcgm-exporter", "4.1.1-4.0.4-ubuntu22.04", 1094),
    ("nvcr.io/nvidia/pytorch", "25.03-py3", 9876),
    ("nvcr.io/nvidia/tritonserver", "25.03-py3", 8123),
    ("nvcr.io/nvidia/k8s-device-plugin", "v0.17.1", 412),
    ("nvcr.io/nvidia/gpu-operator", "v25.3.0", 310),
    ("nvcr.io/nvidia/cloud-native/gpu-operator-validator", "v25.3.0", 303),
    ("nvcr.io/nvidia/k8s/container-toolkit", "v1.17.5-ubuntu20.04", 285),
    ("nvcr.io/nvidia/cloud-native/k8s-mig-manager", "v0.12.1-ubuntu20.04", 254),
    ("registry.k8s.io/nfd/node-feature-discovery", "v0.17.2", 81),
    ("registry.k8s.io/kube-proxy", "v1.36.1", 31),
    ("docker.io/calico/node", "v3.29.3", 141),
    ("docker.io/calico/cni", "v3.29.3", 99),
    ("registry.k8s.io/pause", "3.10", 1),
]


def _images():
    out = []
    for repo, tag, mib in IMAGES:
        digest = hashlib.sha256(("%s:%s" % (repo, tag)).encode()).hexdigest()  # the same image on every node
        out.append({"names": ["%s@sha256:%s" % (repo, digest), "%s:%s" % (repo, tag)], "sizeBytes": mib << 20})
    return sorted(out, key=lambda i: -i["sizeBytes"])[:50]


def gfd_labels(product, gpus, memory_mib, profiles, driver="570.133.20", cuda=(12, 8), strategy="mixed"):
    """The labels GPU feature discovery puts on a node with ``gpus`` GPUs of ``product`` ('NVIDIA-H100-80GB-HBM3')
    and, per MIG profile, ``profiles`` {profile: count} (mixed strategy: one resource per profile)."""
    major, minor, rev = (driver.split(".") + ["", ""])[:3]
    labels = {
        "nvidia.com/cuda.driver.major": major, "nvidia.com/cuda.driver.minor": minor, "nvidia.com/cuda.driver.rev": rev,
        "nvidia.com/cuda.driver-version.major": major, "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": rev, "nvidia.com/cuda.driver-version.full": driver,
        "nvidia.com/cuda.runtime.major": str(cuda[0]), "nvidia.com/cuda.runtime.minor": str(cuda[1]),
        "nvidia.com/cuda.runtime-version.major": str(cuda[0]), "nvidia.com/cuda.runtime-version.minor": str(cuda[1]),
        "nvidia.com/cuda.runtime-version.full": "%d.%d" % cuda,
        "nvidia.com/gfd.timestamp": "1767225600", "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.family": "hopper", "nvidia.com/gpu.machine": "PowerEdge-XE9680", "nvidia.com/gpu.mode": "compute",
        "nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": strategy, "nvidia.com/mps.capable": "false",
        "nvidia.com/gpu.sharing-strategy": "none",
        # The whole GPUs are all MIG-enabled: nvidia.com/gpu counts none (resource.go: count 0 gives no labels but
        # the product, which the operator's own labeller keeps).
        "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus), "nvidia.com/gpu.memory": str(memory_mib),
        "nvidia.com/gpu.replicas": "1",
    }
    for profile, count in sorted(profiles.items()):
        attrs = H100_MIG.get(profile)
        if not attrs or not count:
            continue
        key = "nvidia.com/mig-%s." % profile
        labels.update({key + "count": str(count), key + "replicas": "1", key + "sharing-strategy": "none",
                       key + "product": "%s-MIG-%s" % (product, profile), key + "memory": str(attrs["memory"]),
                       key + "multiprocessors": str(attrs["multiprocessors"]), key + "slices.gi": str(attrs["gi"]),
                       key + "slices.ci": str(attrs["ci"]), key + "engines.copy": str(attrs["copy"]),
                       key + "engines.decoder": str(attrs["decoder"]), key + "engines.encoder": str(attrs["encoder"]),
                       key + "engines.jpeg": str(attrs["jpeg"]), key + "engines.ofa": str(attrs["ofa"])})
    return labels


def gpu_node(name, gpus=8, profiles=None, mig_config="all-balanced", product="NVIDIA-H100-80GB-HBM3",
             memory_mib=81559, extra_labels=None, cordoned=False):
    """The fixture entry (seed.py's format) of a GPU node of ``gpus`` H100s whose MIG devices are ``profiles``
    ({profile: count} over the node); the device plugin's resources come from its gpusim state, not from here.
    ``cordoned``: an operator cordoned it since (``kubectl cordon``'s field manager)."""
    kubelet_labels = {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "kubernetes.io/hostname": name,
                      "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                      "node.kubernetes.io/instance-type": "xe9680"}
    kubelet_labels.update(extra_labels or {})
    nfd = {NFD_PREFIX + "cpu-cpuid." + f: "true" for f in CPUID}
    nfd.update({NFD_PREFIX + k: v for k, v in NFD_OTHER.items()})
    nfd.update(gfd_labels(product, gpus, memory_mib, profiles or {}))
    owned = sorted(k[len(NFD_PREFIX):] if k.startswith(NFD_PREFIX) else k for k in nfd)
    operator = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.operands": "true",
                "nvidia.com/gpu.deploy.mig-manager": "false", "nvidia.com/gpu-driver-upgrade-state": "upgrade-done"}
    operator.update({"nvidia.com/gpu.deploy.%s" % o: "true" for o in OPERANDS})
    cpu, memory = "224", "2113645336Ki"
    resources = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "3750157476Ki",
                 "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
    allocatable = dict(resources, cpu="222", memory="2111446936Ki", **{"ephemeral-storage": "3456144837627"})
    return {
        "metadata": {"name": name, "labels": kubelet_labels,
                     "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
        "fieldManager": "kubelet",
        "status": {
            "capacity": resources, "allocatable": allocatable,
            "nodeInfo": {"architecture": "amd64", "bootID": "", "containerRuntimeVersion": "containerd://1.7.27",
                         "kernelVersion": "6.8.0-60-generic", "kubeProxyVersion": "", "kubeletVersion": "v1.36.1",
                         "machineID": "", "operatingSystem": "linux", "osImage": "Ubuntu 22.04.5 LTS", "systemUUID": ""},
            "images": _images(),
        },
        "writers": [
            {"manager": "nfd-master", "patch": {"metadata": {"labels": nfd, "annotations": {
                "nfd.node.kubernetes.io/feature-labels": ",".join(owned),
                "nfd.node.kubernetes.io/worker.version": "v0.17.2"}}}},
            {"manager": "gpu-operator", "patch": {"metadata": {"labels": operator}}},
            {"manager": "kubectl-label", "patch": {"metadata": {"labels": {"nvidia.com/mig.config": mig_config}}}},
        ] + ([{"manager": "kubectl-cordon", "patch": {"spec": {"unschedulable": True}}}] if cordoned else []),
    }
