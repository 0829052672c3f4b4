#!/usr/bin/env bash
# Start the simulated lab's stand-ins (idempotent: a stand-in that is already up is left as it is, so a second
# `make lab` sees the state the first one left and reports no change).
#   lab/up.sh RUN_DIR      (default build/lab/run)
# Each stand-in gets RUN_DIR/<name>/ with its pid, port/url and CA. lab/down.sh stops them by pid.
# The Kubernetes GPU nodes are podman containers named gpuops-lab-<node> (one per lab/gpusim/states/<node>.json);
# lab/down.sh removes them by name.
# Environment: LAB_SYSFS (fake trees, default RUN_DIR/../sysfs), LAB_NODE_IMAGE (default localhost/debian-trixie:lab),
# DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
run="${1:-$root/build/lab/run}"
py="${PYTHON:-$root/.venv/bin/python}"
mkdir -p "$run"
run="$(cd "$run" && pwd)"
sysfs="${LAB_SYSFS:-$(dirname "$run")/sysfs}"
node_image="${LAB_NODE_IMAGE:-localhost/debian-trixie:lab}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# runc and ulimits within the hard limits (lab/images/README.md); the caller's choice wins.
export CONTAINERS_CONF="${CONTAINERS_CONF:-$root/lab/images/containers.conf}"
# In-container paths; inventories/lab/group_vars/gpu_nodes.yml uses the same ones.
node_dir=/opt/gpuops-lab
# The NVIDIA userspace packages each node starts with (apt release), so the first `make lab` has drift to report
# and converge: Debian trixie's 550.163.01-2 (not held, no pin) and trixie-backports' newer 550.163.01-4~bpo13+1.
declare -A node_driver_release=([gpu-node-1]=trixie [gpu-node-2]=trixie-backports)

alive() { [ -f "$1/pid" ] && kill -0 "$(cat "$1/pid")" 2>/dev/null; }

wait_for() {  # wait_for FILE PID NAME
    for _ in $(seq 600); do
        [ -s "$1" ] && return 0
        kill -0 "$2" 2>/dev/null || { echo "lab: $3 exited; see $(dirname "$1")" >&2; return 1; }
        sleep 0.1
    done
    echo "lab: $3 did not come up within 60 s" >&2
    return 1
}

# NVML stand-in: one state file per GPU node, seeded once (the state is the lab's hardware; keep it across runs).
mkdir -p "$run/gpusim"
for seed in "$root"/lab/gpusim/states/*.json; do
    dst="$run/gpusim/$(basename "$seed")"
    [ -f "$dst" ] || cp "$seed" "$dst"
done
echo "lab: gpusim states in $run/gpusim"

# vGPU hosts (no container: lab-pve-1 runs with a local connection): an NVML stand-in state per host, seeded once, whose
# driver reads modprobe.d under $run/vgpu-hosts/<host> on a module reload (kept across runs, unlike the sysfs trees).
mkdir -p "$run/vgpu-hosts"
for seed in "$root"/lab/gpusim/vgpu-hosts/*.json; do
    host="$(basename "$seed" .json)"
    mkdir -p "$run/vgpu-hosts/$host/etc/modprobe.d"
    [ -f "$run/vgpu-hosts/$host.json" ] || "$py" -c 'import json, sys; s = json.load(open(sys.argv[1])); s["modprobe_root"] = sys.argv[3]; json.dump(s, open(sys.argv[2], "w"), indent=1)' \
        "$seed" "$run/vgpu-hosts/$host.json" "$run/vgpu-hosts/$host"
done

# NVML on the nodes is gpusim's libnvidia-ml.so.1 (lab/gpusim/libnvml), loaded by the nodes' nvidia-ml-py through
# LD_LIBRARY_PATH (group_vars/gpu_nodes.yml): one build per state's driver, reached through build/libnvml/by-driver.
mkdir -p "$root/build/libnvml"
for seed in "$root"/lab/gpusim/states/*.json; do
    "$py" "$root/lab/gpusim/libnvml/build.py" --state "$seed" >/dev/null
done

# GPU nodes. A container keeps its packages across runs; it is recreated only when a bind-mounted host directory was
# replaced (rm -rf build/lab), which the inode label detects: the old mount would show a deleted directory.
if ! podman image exists "$node_image"; then
    echo "lab: node image $node_image missing, building it (debootstrap, about a minute)"
    suite="${node_image#localhost/debian-}"
    "$root/lab/images/build.sh" "${suite%:lab}" 2>&1 | sed -u 's/^/lab:   /'
    podman image exists "$node_image" || { echo "lab: could not build $node_image" >&2; exit 1; }
fi
seeding=()
for seed in "$root"/lab/gpusim/states/*.json; do
    node="$(basename "$seed" .json)"
    name="gpuops-lab-$node"
    mkdir -p "$sysfs/$node"
    mounts="$(stat -c %i "$root/lab/gpusim" "$sysfs/$node" "$run/gpusim" "$root/build/libnvml" | paste -sd:)"
    current="$(podman container inspect --format '{{.State.Running}} {{index .Config.Labels "gpuops.lab.mounts"}}' \
        "$name" 2>/dev/null || true)"
    if [ "$current" = "true $mounts" ]; then
        echo "lab: node $node already up (container $name)"
        continue
    elif [ "$current" = "false $mounts" ]; then
        podman start "$name" >/dev/null
        echo "lab: node $node started again (container $name)"
        continue
    elif [ -n "$current" ]; then
        echo "lab: node $node: host directories were replaced, recreating container $name"
        podman rm -f -t 1 "$name" >/dev/null
    fi
    # No MKNOD: with it, root in the container lets libnvidia-ml create /dev/nvidiactl (molecule/driver_pin notes).
    # KILL: sleep as PID 1 ignores SIGTERM, so a stop would wait out the timeout.
    podman run -d --name "$name" --hostname "$node" --runtime runc --stop-signal KILL --cap-drop MKNOD \
        --ulimit nofile=1024:1024 --ulimit nproc=32768:32768 \
        --label gpuops.lab=node --label "gpuops.lab.mounts=$mounts" \
        -v "$root/lab/gpusim:$node_dir/gpusim:ro" -v "$sysfs/$node:$node_dir/sysfs:ro" \
        -v "$run/gpusim:$node_dir/run/gpusim:rw" -v "$root/build/libnvml:$node_dir/libnvml:ro" \
        "$node_image" sleep infinity >/dev/null
    release="${node_driver_release[$node]:-trixie}"
    echo "lab: node $node: container $name created, installing nvidia-smi + libnvidia-ml1 from $release"
    mkdir -p "$run/nodes"
    # Temporary sources, removed again: the nvidia_driver role must set up its own.
    podman exec "$name" bash -ec "
        printf 'Types: deb\nURIs: %s\nSuites: trixie trixie-backports\nComponents: main contrib non-free\n' '$mirror' \
            > /etc/apt/sources.list.d/gpuops-lab-seed.sources
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -t '$release' \
            nvidia-smi libnvidia-ml1
        rm /etc/apt/sources.list.d/gpuops-lab-seed.sources
        dpkg-query -W -f='\${Version}\n' nvidia-smi" >"$run/nodes/$node.seed.log" 2>&1 &
    seeding+=("$node:$!")
done
failed=0
for entry in "${seeding[@]}"; do
    node="${entry%%:*}"
    if wait "${entry#*:}"; then
        echo "lab: node $node up with nvidia-smi $(tail -n1 "$run/nodes/$node.seed.log")"
    else
        # Removed so that the next run seeds it again instead of taking a half-installed node as up.
        echo "lab: node $node: package install failed, see $run/nodes/$node.seed.log; container removed" >&2
        podman rm -f -t 1 "gpuops-lab-$node" >/dev/null
        failed=1
    fi
done
[ "$failed" = 0 ] || exit 1

if alive "$run/pvesim"; then
    echo "lab: pvesim already up on port $(cat "$run/pvesim/port")"
else
    rm -rf "$run/pvesim" && mkdir -p "$run/pvesim"
    setsid "$py" "$root/lab/pvesim/server.py" --fixture "$root/lab/pvesim/fixtures/lab.json" --port 0 \
        --run-dir "$run/pvesim" >"$run/pvesim/server.log" 2>&1 </dev/null &
    wait_for "$run/pvesim/port" $! pvesim
    echo "lab: pvesim up on port $(cat "$run/pvesim/port")"
fi

if alive "$run/vcsim"; then
    echo "lab: vcsim already up at $(cat "$run/vcsim/url")"
else
    rm -rf "$run/vcsim"
    "$root/lab/vcsim/run.sh" --run-dir "$run/vcsim" --fixture "$root/lab/vcsim/fixtures/lab.json" \
        --clusters 1 --hosts 3 --vms 2 >/dev/null
    echo "lab: vcsim up at $(cat "$run/vcsim/url")"
fi

# The upstream Kubernetes control plane (lab/kube), seeded once from the fixture; kept running between runs.
if [ -f "$run/k8s/pid" ]; then # the kmock stand-in of an older checkout: stop it, the control plane replaces it
    kill "$(cat "$run/k8s/pid")" 2>/dev/null || true
    rm -f "$run/k8s/pid"
fi
if "$py" "$root/lab/kube/controlplane.py" status "$run/k8s"; then
    echo "lab: kubernetes control plane already up ($run/k8s)"
else
    gpusim_args=()
    for state in "$run"/gpusim/*.json; do
        gpusim_args+=(--gpusim "$(basename "$state" .json)=$state:mixed")
    done
    "$py" "$root/lab/kube/controlplane.py" up "$run/k8s" --fixture "$root/lab/kube/fixtures/gpu-cluster.yaml" \
        "${gpusim_args[@]}"
fi

# GPU metrics (issue 43): a real Prometheus with a week of backfilled dcgm-exporter history, scraping one exporter per
# node of lab/dcgm/workloads.json. The exporters read the seed states, not $run/gpusim: the site playbook changes the
# nodes' MIG geometry, and a workload profile per MIG instance must match the state it is drawn on.
if "$py" "$root/lab/dcgm/prometheus.py" status "$run/prometheus"; then
    echo "lab: prometheus already up at $(cat "$run/prometheus/url")"
else
    "$py" "$root/lab/dcgm/prometheus.py" up "$run/prometheus" | sed -u 's/^/lab: /'
fi
