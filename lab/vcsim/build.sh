#!/usr/bin/env bash
# Build lab/vcsim/bin/vcsim-gpu offline from Debian's govmomi 0.24.2 library sources
# (apt: golang-go golang-github-vmware-govmomi-dev). GOPATH mode: Debian ships the sources
# under /usr/share/gocode/src and no Go module proxy is needed.
# Usage: build.sh [--force]   (without --force it does nothing when the binary is newer than every .go file)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
gocode="${VCSIM_GOCODE:-/usr/share/gocode}"
out="$here/bin/vcsim-gpu"

if ! command -v go >/dev/null 2>&1; then
    echo "vcsim build: 'go' not found; install the Debian packages golang-go golang-github-vmware-govmomi-dev" >&2
    exit 3
fi
if [ ! -d "$gocode/src/github.com/vmware/govmomi/simulator" ]; then
    echo "vcsim build: $gocode/src/github.com/vmware/govmomi/simulator missing; install golang-github-vmware-govmomi-dev" >&2
    exit 3
fi

mkdir -p "$here/bin"
# Parallel test workers may all ask for a build: one builds, the others wait and reuse it.
exec 9>"$here/bin/.build.lock"
flock 9
if [ "${1:-}" != "--force" ] && [ -x "$out" ] && [ -z "$(find "$here" -maxdepth 1 -name '*.go' -newer "$out" -print -quit)" ]; then
    exit 0
fi
cd "$here"
start=$(date +%s)
GO111MODULE=off GOPATH="$gocode" GOFLAGS= GOCACHE="${VCSIM_GOCACHE:-$here/bin/.gocache}" \
    go build -o "$out.tmp" .
mv -f "$out.tmp" "$out"
echo "vcsim build: $out ($(( $(date +%s) - start )) s, $(go version | cut -d' ' -f3))" >&2
