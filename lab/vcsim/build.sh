#!/usr/bin/env bash
# Build lab/vcsim/bin/vcsim-gpu against github.com/vmware/govmomi v0.52.0 (pinned in go.mod/go.sum).
# Module mode: the first build downloads the modules from the Go module proxy into bin/.gomodcache;
# later builds reuse that cache and bin/.gocache and need no network.
# Debian's govmomi 0.24.2 predates vSphere 8.0U3 (HostGraphicsConfigDeviceType.vgpuMode), hence v0.52.0.
# Usage: build.sh [--force]     without --force it does nothing when the binary is newer than its sources
#        build.sh --available   exit 0 when a build can run here (Go >= 1.23 found), 3 otherwise
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$here/bin/vcsim-gpu"
min_minor=23 # go.mod: go 1.23.0 (govmomi v0.52.0's own minimum)

# The first Go >= 1.23 of: $VCSIM_GO, `go` on PATH, /usr/local/go/bin/go (Debian 12's golang-go is 1.19).
find_go() {
    local g v
    for g in "${VCSIM_GO:-}" "$(command -v go || true)" /usr/local/go/bin/go; do
        [ -n "$g" ] && [ -x "$g" ] || continue
        v="$(GOTOOLCHAIN=local "$g" env GOVERSION 2>/dev/null || true)" # go1.26.8
        v="${v#go}"
        if [ "${v%%.*}" = 1 ] && [ "$(echo "$v" | cut -d. -f2)" -ge "$min_minor" ] 2>/dev/null; then
            echo "$g"
            return 0
        fi
    done
    return 1
}

if ! go_bin="$(find_go)"; then
    echo "vcsim build: no Go >= 1.$min_minor found (set VCSIM_GO, or install one to /usr/local/go)" >&2
    exit 3
fi
[ "${1:-}" = "--available" ] && exit 0

mkdir -p "$here/bin"
# Parallel test workers may all ask for a build: one builds, the others wait and reuse it.
exec 9>"$here/bin/.build.lock"
flock 9
if [ "${1:-}" != "--force" ] && [ -x "$out" ] &&
    [ -z "$(find "$here" -maxdepth 1 \( -name '*.go' -o -name go.mod -o -name go.sum \) -newer "$out" -print -quit)" ]; then
    exit 0
fi
cd "$here"
# -modcacherw: the module cache stays removable (rm -rf bin) for non-root users.
export GO111MODULE=on GOFLAGS="-mod=readonly -modcacherw" GOTOOLCHAIN=local
export GOMODCACHE="${VCSIM_GOMODCACHE:-$here/bin/.gomodcache}" GOCACHE="${VCSIM_GOCACHE:-$here/bin/.gocache}"
start=$(date +%s)
if ! "$go_bin" mod download 2>"$here/bin/.download.log"; then
    echo "vcsim build: cannot download the Go modules of go.mod (module proxy ${GOPROXY:-https://proxy.golang.org} unreachable?):" >&2
    cat "$here/bin/.download.log" >&2
    exit 3
fi
"$go_bin" build -o "$out.tmp" .
mv -f "$out.tmp" "$out"
echo "vcsim build: $out ($(( $(date +%s) - start )) s, $("$go_bin" env GOVERSION), $(grep -o 'vmware/govmomi v[0-9.]*' go.mod))" >&2
