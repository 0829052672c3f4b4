#!/bin/sh
# device-plugins-view.sh SOCKET_DIR [--proc-driver DIR] [--dev DIR] COMMAND...: run COMMAND (the lab's kubelet, or
# NVIDIA's device plugin) in a private mount namespace whose /var/lib/kubelet/device-plugins is SOCKET_DIR. Start it
# as `unshare -m -- sh device-plugins-view.sh ...` (needs root).
# Both ends use that path whatever the kubelet's --root-dir: the kubelet's device manager listens on
# pluginapi.KubeletSocket (k8s.io/kubelet pkg/apis/deviceplugin/v1beta1/constants.go, used by k8s.io/kubernetes
# pkg/kubelet/cm/devicemanager/manager.go NewManagerImpl, which also empties the dir when it starts), and the plugin
# serves on DevicePluginPath + "nvidia-<resource>.sock" (NVIDIA/k8s-device-plugin internal/plugin/server.go
# getPluginSocketPath), where the kubelet dials it. On a node the DaemonSet's hostPath volume
# (deployments/static/nvidia-device-plugin.yml) makes the two the same dir; here each lab kubelet has a dir of its own
# under its root dir, so two kubelets never empty each other's dir, and this machine's /var/lib/kubelet is hidden
# under a tmpfs, neither read nor written.
# --proc-driver DIR: DIR as /proc/driver, in a /proc that gpusim's kernel-view.sh made (a tmpfs of links): the
# plugin reads /proc/driver/nvidia-caps/mig-minors (internal/mig/mig.go GetMigCapabilityDevicePaths).
# --dev DIR: a /dev of links to this machine's entries and to DIR's (the NVIDIA device nodes): with
# --pass-device-specs the plugin's Allocate names the control nodes that exist (internal/plugin/server.go
# apiDeviceSpecs stats /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools, /dev/nvidia-modeset).
set -eu
socket_dir="$1"
shift
mount --make-rprivate /
mkdir -p /var/lib/kubelet
mount -t tmpfs lab-kubelet /var/lib/kubelet
mkdir /var/lib/kubelet/device-plugins
mount --bind "$socket_dir" /var/lib/kubelet/device-plugins
if [ "${1:-}" = "--proc-driver" ]; then
    rm -f /proc/driver
    mkdir /proc/driver
    mount --bind "$2" /proc/driver
    shift 2
fi
if [ "${1:-}" = "--dev" ]; then
    nodes="$2"
    real="$nodes/.realdev"
    mkdir -p "$real"
    mount --rbind /dev "$real"
    mount -t tmpfs lab-dev /dev
    for e in "$real"/* "$nodes"/*; do
        ln -sfn "$e" "/dev/${e##*/}"
    done
    shift 2
fi
exec "$@"
