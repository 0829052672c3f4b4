#!/usr/bin/env bash
# Start (or stop) the GPU-flavoured vcsim in the background.
#   run.sh --run-dir DIR [--clusters N] [--hosts M] [--vms K] [--gpu-hosts 'DC0_C0_*,DC0_C1_H0'|all]
#          [--gpu-model a100-40|a100-80|l40s|h100-80] [--gpu-count N] [--driver VERSION]
#          [--host-driver HOST=VERSION ...] [--fixture FILE.json] [--port P] [--username U] [--password P]
#   run.sh --run-dir DIR --stop
# Writes DIR/url, DIR/ca.pem, DIR/pid, DIR/username, DIR/password, DIR/env, DIR/inventory.json, DIR/vcsim.log.
# Every other --option is passed to bin/vcsim-gpu unchanged (see `bin/vcsim-gpu -h`).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
run_dir="" stop=0 port=0 args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --run-dir) run_dir="$2"; shift 2 ;;
        --run-dir=*) run_dir="${1#*=}"; shift ;;
        --stop) stop=1; shift ;;
        --port) port="$2"; shift 2 ;;
        --port=*) port="${1#*=}"; shift ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        *) args+=("$1"); shift ;;
    esac
done
[ -n "$run_dir" ] || { echo "run.sh: --run-dir DIR is required" >&2; exit 2; }
mkdir -p "$run_dir"
run_dir="$(cd "$run_dir" && pwd)"

if [ "$stop" = 1 ]; then
    if [ -f "$run_dir/pid" ]; then
        pid="$(cat "$run_dir/pid")"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        rm -f "$run_dir/pid" "$run_dir/url"
    fi
    exit 0
fi

"$here/build.sh"
rm -f "$run_dir/url"
nohup "$here/bin/vcsim-gpu" -l "127.0.0.1:$port" -run-dir "$run_dir" ${args[@]+"${args[@]}"} \
    >"$run_dir/vcsim.log" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$run_dir/pid"
for _ in $(seq 300); do
    if [ -s "$run_dir/url" ]; then
        cat "$run_dir/url"
        exit 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "run.sh: vcsim-gpu exited; log:" >&2
        cat "$run_dir/vcsim.log" >&2
        rm -f "$run_dir/pid"
        exit 1
    fi
    sleep 0.1
done
echo "run.sh: vcsim-gpu did not write $run_dir/url within 30 s" >&2
kill "$pid" 2>/dev/null || true
exit 1
