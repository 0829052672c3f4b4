#!/usr/bin/env bash
# Stop what lab/up.sh started, by the pid each stand-in recorded. Leaves the state files for inspection.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
run="${1:-$root/build/lab/run}"
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
