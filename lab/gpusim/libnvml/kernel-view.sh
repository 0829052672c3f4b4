#!/bin/sh
# kernel-view.sh ROOT COMMAND...: run COMMAND in a private mount namespace that sees ROOT/sys as /sys and a /proc
# with ROOT/proc/modules as its modules file; every other /proc entry is the real one (symlinks into a bind mount).
# What NVIDIA's Go tools read of the kernel besides libnvidia-ml: mig-parted `cmd/nvidia-mig-parted/util/nvml.go`
# IsNvidiaModuleLoaded (/proc/modules), go-nvlib `pkg/nvpci/nvpci.go` getGPUByPciBusID (/sys/bus/pci/devices/<bdf>/
# vendor, class, device, numa_node, resource). Needs root (or a user namespace); start it as `unshare -m -- sh kernel-view.sh ...`.
set -eu
root="$1"
shift
real="$root/.realproc"
mkdir -p "$real"
mount --make-rprivate /
mount --bind /proc "$real"
mount --rbind "$root/sys" /sys
mount -t tmpfs gpusim-proc /proc
for e in "$real"/*; do
    ln -s "$e" "/proc/${e##*/}"
done
rm -f /proc/modules
cp "$root/proc/modules" /proc/modules
exec "$@"
