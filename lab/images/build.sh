#!/usr/bin/env bash
# Build the lab's Debian base image(s) for podman: debootstrap (minbase) + podman import.
#
#   lab/images/build.sh            -> localhost/debian-bookworm:lab
#   lab/images/build.sh trixie     -> localhost/debian-trixie:lab
#   lab/images/build.sh bookworm trixie
#
# Idempotent: an image that already exists is left alone (FORCE=1 rebuilds it). The root filesystem
# is cached as lab/images/debian-<suite>.tar (gitignored), so a rebuild or a fresh podman store only
# needs the import. Environment: DEBIAN_MIRROR (default http://deb.debian.org/debian; an internal
# mirror works), FORCE=1, EXTRA_PACKAGES (comma-separated, added to --include).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# python3 + python3-apt: Ansible's apt module needs them and would otherwise try to install
# python3-apt itself; ca-certificates: https sources (NVIDIA CUDA repo, mirrors); systemd + systemd-sysv:
# containers started with /sbin/init (podman --systemd=always) run real units and can reboot
# (molecule/mig_reconfigure); the others keep "sleep infinity" and never start it.
packages="python3,python3-apt,ca-certificates,systemd,systemd-sysv${EXTRA_PACKAGES:+,${EXTRA_PACKAGES}}"
export CONTAINERS_CONF="${CONTAINERS_CONF:-${here}/containers.conf}"

die() { echo "build.sh: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "debootstrap and podman import need root"
command -v podman >/dev/null || die "podman is missing (apt-get install podman runc debootstrap)"

build_one() {
    local suite="$1"
    case "$suite" in
        bookworm|trixie) ;;
        *) die "unsupported suite '$suite' (bookworm or trixie)" ;;
    esac
    local image="localhost/debian-${suite}:lab"
    local tarball="${here}/debian-${suite}.tar"

    if [ "${FORCE:-0}" != 1 ] && podman image exists "$image"; then
        echo "build.sh: $image exists, skipping (FORCE=1 rebuilds)"
        return 0
    fi
    if [ "${FORCE:-0}" = 1 ] || [ ! -s "$tarball" ]; then
        command -v debootstrap >/dev/null || die "debootstrap is missing"
        local rootfs
        rootfs="$(mktemp -d "${TMPDIR:-/var/tmp}/lab-rootfs-${suite}.XXXXXX")"
        # shellcheck disable=SC2064  # expand now: the trap must remove this very directory
        trap "rm -rf '$rootfs'" RETURN
        echo "build.sh: debootstrap $suite from $mirror"
        debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$mirror"
        # Smaller image; the lists are refreshed by whoever adds sources anyway.
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*_Packages
        # Write atomically so an interrupted build never leaves a truncated cache behind.
        tar -C "$rootfs" --numeric-owner -cf "${tarball}.part" .
        mv "${tarball}.part" "$tarball"
    fi
    echo "build.sh: podman import $tarball -> $image"
    podman import --change 'CMD ["sleep", "infinity"]' "$tarball" "$image" >/dev/null
    echo "build.sh: $image ready"
}

if [ "$#" -eq 0 ]; then
    set -- bookworm
fi
for suite in "$@"; do
    build_one "$suite"
done
