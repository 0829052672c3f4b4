#!/usr/bin/env bash
# Stop what lab/up.sh started: the stand-ins by the pid each recorded, the GPU node containers by name.
# Leaves the state files for inspection.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
run="${1:-$root/build/lab/run}"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$root/lab/images/containers.conf}"
"${PYTHON:-$root/.venv/bin/python}" "$root/lab/kube/controlplane.py" down "$run/k8s" && echo "lab: stopped the kubernetes control plane"
"${PYTHON:-$root/.venv/bin/python}" "$root/lab/dcgm/prometheus.py" down "$run/prometheus" | sed 's/^/lab: /'
for name in pvesim vcsim k8s; do
    pidfile="$run/$name/pid"
    [ -f "$pidfile" ] || continue
    pid="$(cat "$pidfile")"
    if kill "$pid" 2>/dev/null; then
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        echo "lab: stopped $name (pid $pid)"
    fi
    rm -f "$pidfile"
done
# One container per seed state (lab/up.sh's naming); their packages go with them, so the next up starts off the pin.
if command -v podman >/dev/null; then
    for seed in "$root"/lab/gpusim/states/*.json; do
        name="gpuops-lab-$(basename "$seed" .json)"
        podman container exists "$name" || continue
        podman rm -f -t 1 "$name" >/dev/null
        echo "lab: removed container $name"
    done
fi
