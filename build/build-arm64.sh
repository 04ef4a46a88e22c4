#!/usr/bin/env bash
# Build the arm64 (Raspberry Pi 4/5, 64-bit) `maxy` into dist/arm64/maxy. NOT exercised by CI.
#
#   build/build-arm64.sh              (called by `just build-arm64`)
#
# PyInstaller cannot cross-compile: the build must run on arm64, against the glibc of the image's
# Raspberry Pi OS release (bookworm: Debian 12, glibc 2.36, Python 3.11). In order of preference:
#
# 1. On an arm64 machine (`uname -m` = aarch64) running that Debian release: build/build.sh
#    natively, with its own cache ($MAXY_CACHE_DIR/arm64) so x86-64 wheels never mix in.
# 2. Elsewhere, in an arm64 Debian container (docker or podman, `--platform linux/arm64`),
#    emulated by qemu-user-static through binfmt_misc (`apt-get install qemu-user-static
#    binfmt-support`; docker needs `docker run --privileged --rm tonistiigi/binfmt --install arm64`
#    once where binfmt is not registered by the package).
# 3. MAXY_ARM64_CHROOT=/path/to/an/arm64/debian/root: the same steps in that chroot (make one with
#    `debootstrap --arch=arm64 bookworm DIR` + qemu-user-static); needs root for chroot and mounts.
#
# Under emulation compiling llama-cpp-python takes one to two hours the first time; the wheel
# (build/llama-wheel.sh: armv8-a, so a Pi 5's build also runs on a Pi 4) is cached in
# $MAXY_CACHE_DIR/arm64/wheels/armv8-a and later builds take a few minutes.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${MAXY_CACHE_DIR:-$HOME/.cache/maxy}/arm64
release=${MAXY_ARM64_DEBIAN:-bookworm}
mkdir -p "$cache" "$root/dist/arm64"

say() { printf '[build-arm64] %s\n' "$*" >&2; }
die() { printf '[build-arm64] FATAL %s\n' "$*" >&2; exit 1; }

[ -f "$root/appliance/app/static/vendor/.vendor-stamp" ] ||
  die "the vendored browser libraries are missing: run \`just bootstrap\` first"

# What runs on the arm64 side, with the repository at /src and the cache at /cache.
inner='set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
if ! command -v python3 >/dev/null || ! command -v g++ >/dev/null || ! command -v cmake >/dev/null \
   || ! python3 -c "import venv, ensurepip" 2>/dev/null || ! python3 -m pip --version >/dev/null 2>&1 \
   || ! command -v git >/dev/null; then
  apt-get update -qq
  apt-get install -y -qq python3 python3-venv python3-dev python3-pip build-essential cmake git binutils
fi
git config --global --add safe.directory /src
MAXY_CACHE_DIR=/cache MAXY_DIST_DIR=/src/dist/arm64 MAXY_BUILD_OUT=/cache/out \
  PYTHON=python3 /src/build/build.sh "$@"
'

if [ "$(uname -m)" = aarch64 ]; then
  say "op=native release=$(. /etc/os-release && echo "${VERSION_CODENAME:-unknown}")"
  MAXY_CACHE_DIR=$cache MAXY_DIST_DIR=$root/dist/arm64 MAXY_BUILD_OUT=$cache/out \
    exec "$root/build/build.sh" "$@"
fi

if [ -n "${MAXY_ARM64_CHROOT:-}" ]; then
  chroot_dir=$MAXY_ARM64_CHROOT
  [ -x "$chroot_dir/bin/sh" ] || die "$chroot_dir is not a Debian root (no /bin/sh)"
  say "op=chroot root=$chroot_dir"
  mkdir -p "$chroot_dir/src" "$chroot_dir/cache" "$chroot_dir/proc"
  mount --bind "$root" "$chroot_dir/src"
  mount --bind "$cache" "$chroot_dir/cache"
  mount -t proc proc "$chroot_dir/proc"
  trap 'umount "$chroot_dir/proc" "$chroot_dir/cache" "$chroot_dir/src"' EXIT
  chroot "$chroot_dir" /bin/bash -c "$inner" bash "$@"
  exit 0
fi

engine=$(command -v docker || command -v podman || true)
[ -n "$engine" ] || die "no arm64 builder: run this on arm64, install docker or podman (with \
qemu-user-static), or set MAXY_ARM64_CHROOT to an arm64 Debian root"
say "op=container engine=$(basename "$engine") image=debian:$release platform=linux/arm64"
"$engine" run --rm --platform linux/arm64 \
  -v "$root:/src" -v "$cache:/cache" -w /src \
  "debian:$release" /bin/bash -c "$inner" bash "$@"
say "op=done path=$root/dist/arm64/maxy"
