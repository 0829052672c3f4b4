#!/usr/bin/env bash
# Start the simulated lab's stand-ins (idempotent: a stand-in that is already up is left as it is, so a second
# `make lab` sees the state the first one left and reports no change).
#   lab/up.sh RUN_DIR      (default build/lab/run)
# Each stand-in gets RUN_DIR/<name>/ with its pid, port/url and CA. lab/down.sh stops them by pid.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
run="${1:-$root/build/lab/run}"
py="${PYTHON:-$root/.venv/bin/python}"
mkdir -p "$run"
run="$(cd "$run" && pwd)"

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

if alive "$run/k8s"; then
    echo "lab: kubernetes stand-in already up on port $(cat "$run/k8s/port")"
else
    rm -rf "$run/k8s" && mkdir -p "$run/k8s"
    gpusim_args=()
    for state in "$run"/gpusim/*.json; do
        gpusim_args+=(--gpusim "$(basename "$state" .json)=$state:mixed")
    done
    setsid "$py" "$root/lab/k8s/server.py" --fixture "$root/lab/k8s/fixtures/gpu-cluster.yaml" --port 0 \
        --run-dir "$run/k8s" "${gpusim_args[@]}" >"$run/k8s/server.log" 2>&1 </dev/null &
    echo $! >"$run/k8s/pid"
    wait_for "$run/k8s/port" "$(cat "$run/k8s/pid")" "kubernetes stand-in"
    echo "lab: kubernetes stand-in up on port $(cat "$run/k8s/port")"
fi
