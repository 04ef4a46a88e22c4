#!/usr/bin/env bash
# Build the arm64 (Raspberry Pi 4/5, 64-bit) `maxy` into dist/arm64/maxy-onedir/ (--onefile:
# dist/arm64/maxy).
#
#   build/build-arm64.sh [--onefile]     (called by `just build-arm64`)
#
# The one-directory form is the one the card carries: every role starts straight from it. A
# one-file build unpacks itself into /tmp at every start, and the card's roles (five at once,
# each unpacking ~200 MB) then fail with "Failed to extract …: decompression resulted in return
# code -1" and never serve (seen on the arm64 card booted under qemu-system-aarch64).
#
# PyInstaller cannot cross-compile: it freezes the interpreter it runs in and reads the libraries
# that interpreter loads. On an aarch64 machine build/build.sh runs natively (its own cache,
# $MAXY_CACHE_DIR/arm64, so x86-64 wheels never mix in). On x86-64 no arm64 host is needed, and
# only PyInstaller itself runs emulated:
#
# 1. Every locked dependency but llama-cpp-python (build/freeze.lock) is downloaded as a published
#    aarch64 wheel on the host (pip download --platform, hashes checked), into a wheelhouse keyed
#    by the lock.
# 2. The image's cached arm64 Debian base (image/base.py: Debian 12, glibc 2.36, Python 3.11, the
#    card's own userland) is unpacked once into a build root, plus the packages PyInstaller needs
#    (CHROOT_PACKAGES), installed under qemu-user-static; the root is keyed by the base and that
#    list.
# 3. llama-cpp-python, the one compiled dependency, is cross-compiled natively for armv8-a (and
#    armv8.2-a with the dot product, a Pi 5) with Debian's aarch64 cross toolchain
#    (build/llama-wheel.sh, MAXY_WHEEL_ARCH=aarch64; ~2 min once, cached in
#    $MAXY_CACHE_DIR/arm64/wheels/armv8-a+-<key>).
# 4. The arm64 build virtualenv is filled natively: its skeleton is what `python3 -m venv
#    --without-pip` makes, and the host's pip installs the wheelhouse and the llama wheel into its
#    site-packages for CPython 3.11 on aarch64 (wheels are only unpacked: nothing of them runs),
#    then stamps it with the key build/build.sh computes in the root. Emulated, the same install
#    took about four minutes.
# 5. build/build.sh runs in that root through binfmt_misc (registered as image/base.py does),
#    finds the venv current, and freezes; the venv and PyInstaller's work directory are cached,
#    so a second build only re-freezes.
#
# Needs root (chroot and bind mounts; the mounts live in a private mount namespace and vanish
# with it), gcc-aarch64-linux-gnu, g++-aarch64-linux-gnu and qemu-user-static
# (build/system-packages.txt).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache_root=${MAXY_CACHE_DIR:-$HOME/.cache/maxy}
cache=$cache_root/arm64
case "${1:-}" in
  "" | --onedir) mode_args=(--onedir) ;;
  --onefile) mode_args=() ;;
  *) printf '[build-arm64] FATAL unknown argument %s (usage: build-arm64.sh [--onefile])\n' "$1" >&2; exit 2 ;;
esac
mkdir -p "$cache" "$root/dist/arm64"
# What the build root adds to the image's base: the build venv, libpython for PyInstaller's
# bootloader, objdump/ldd for its dependency analysis, and llama.cpp's OpenMP runtime.
CHROOT_PACKAGES="python3-venv libpython3.11 binutils libgomp1"

say() { printf '[build-arm64] %s\n' "$*" >&2; }
die() { printf '[build-arm64] FATAL %s\n' "$*" >&2; exit 1; }
. "$root/build/python.sh"

[ -f "$root/appliance/app/static/vendor/.vendor-stamp" ] ||
  die "the vendored browser libraries are missing: run \`just bootstrap\` first"

if [ "$(uname -m)" = aarch64 ]; then
  say "op=native release=$(. /etc/os-release && echo "${VERSION_CODENAME:-unknown}")"
  MAXY_CACHE_DIR=$cache MAXY_DIST_DIR=$root/dist/arm64 MAXY_BUILD_OUT=$cache/out \
    exec "$root/build/build.sh" "${mode_args[@]}"
fi
[ "$(uname -m)" = x86_64 ] || die "the arm64 build runs on aarch64 or x86_64, not $(uname -m)"
[ "$(id -u)" = 0 ] || die "the arm64 build chroots into an arm64 Debian root: run it as root"
started=$(date +%s)

# 1. The other wheels, for CPython 3.11 on aarch64 glibc 2.36. The lock's markers are evaluated
#    for the build root's Python (Debian 12's python3, which runs PyInstaller there), not the host's.
card_python=3.11.2
# The files' contents, not their paths: every clone of one commit shares the wheelhouse.
lock_key=$( (cat "$root/build/freeze.lock" "$root/build/freeze_requirements.py"; echo "$card_python") | sha256sum | cut -c1-16)
wheelhouse=$cache/wheelhouse-$lock_key
# Every wheel platform the root's glibc 2.36 runs.
platforms=(--platform manylinux2014_aarch64 --platform linux_aarch64)
for glibc in 2_36 2_35 2_34 2_31 2_28 2_27 2_26 2_24 2_17; do
  platforms+=(--platform "manylinux_${glibc}_aarch64")
done
if [ ! -f "$wheelhouse/.complete" ]; then
  say "op=download-wheels platform=aarch64 into=$wheelhouse"
  rm -rf "$wheelhouse" && mkdir -p "$wheelhouse"
  "$root/.venv/bin/python" "$root/build/freeze_requirements.py" --python-full-version "$card_python" \
    "$root/build/freeze.lock" > "$wheelhouse/requirements.txt"
  "$python" -m pip download --quiet --no-deps --only-binary :all: --require-hashes \
    "${platforms[@]}" --python-version 3.11 -d "$wheelhouse" -r "$wheelhouse/requirements.txt"
  touch "$wheelhouse/.complete"
fi

# 2. The build root: the image's arm64 base plus CHROOT_PACKAGES.
base=$("$root/.venv/bin/python" -m image.base --arch arm64 --cache-dir "$cache_root")
root_key=$( (basename "$base"; echo "$CHROOT_PACKAGES") | sha256sum | cut -c1-16)
buildroot=$cache/root-$root_key
if [ ! -f "$buildroot/.maxy-ready" ]; then
  say "op=make-root base=$(basename "$base") packages=\"$CHROOT_PACKAGES\""
  step=$(date +%s)
  rm -rf "$buildroot" "$buildroot.partial" && mkdir -p "$buildroot.partial"
  zstd -q -dc "$base" | tar --numeric-owner -xf - -C "$buildroot.partial"
  # The base's resolv.conf points at systemd-resolved, which does not run in a chroot.
  rm -f "$buildroot.partial/etc/resolv.conf" && cp /etc/resolv.conf "$buildroot.partial/etc/"
  unshare --mount --propagation private /bin/bash -euo pipefail -c '
    r=$1; shift
    mount -t proc proc "$r/proc"
    mount --rbind /dev "$r/dev"
    chroot "$r" /usr/bin/env DEBIAN_FRONTEND=noninteractive /bin/bash -euo pipefail -c "
      apt-get update -qq
      apt-get install -y -qq --no-install-recommends $* >/dev/null
      apt-get clean
      rm -rf /var/lib/apt/lists/*"
  ' bash "$buildroot.partial" $CHROOT_PACKAGES
  touch "$buildroot.partial/.maxy-ready"
  mv "$buildroot.partial" "$buildroot"
  say "op=root-ready seconds=$(( $(date +%s) - step )) path=$buildroot"
fi
root_python=$(awk '/^Package: /{p=$2} p=="python3.11-minimal" && /^Version: /{sub(/-.*/, "", $2); print $2}' \
  "$buildroot/var/lib/dpkg/status")
[ "$root_python" = "$card_python" ] ||
  die "the build root's Python is ${root_python:-unknown}, the wheels were chosen for $card_python: set card_python"
# $cache/root: the current root, for running the binary on x86-64 (QEMU_LD_PREFIX=$cache/root).
ln -sfn "$(basename "$buildroot")" "$cache/root"

# 3. The cross-compiled llama-cpp-python wheel.
wheels=$(MAXY_WHEEL_ARCH=aarch64 MAXY_CACHE_DIR=$cache PYTHON=$python "$root/build/llama-wheel.sh")

if [ ! -f /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
  "$root/.venv/bin/python" -c 'from image.base import _ensure_binfmt; _ensure_binfmt("arm64")'
fi
revision=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || true)
dirty=0
[ -z "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ] || dirty=1
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)}
# build/build.sh (or any command) in the root, emulated, with the checkout at /src and the cache
# at /cache.
in_root() {
  unshare --mount --propagation private /bin/bash -euo pipefail -c '
    r=$1 src=$2 cache=$3; shift 3
    mkdir -p "$r/src" "$r/cache"
    mount -t proc proc "$r/proc"
    mount --rbind /dev "$r/dev"
    mount --bind "$src" "$r/src"
    mount --bind "$cache" "$r/cache"
    exec chroot "$r" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root LC_ALL=C.UTF-8 \
      "$@"
  ' bash "$buildroot" "$root" "$cache" \
    MAXY_CACHE_DIR=/cache MAXY_DIST_DIR=/src/dist/arm64 MAXY_BUILD_OUT=/cache/out PYTHON=python3 \
    PIP_NO_INDEX=1 PIP_FIND_LINKS="/cache/$(basename "$wheelhouse")" PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MAXY_GIT_REVISION="$revision" MAXY_GIT_DIRTY=$dirty SOURCE_DATE_EPOCH="$epoch" "$@"
}

# 4. The build virtualenv, filled natively.
venv=$cache/build-venv
venv_key=$(in_root /src/build/build.sh --venv-key)
if [ "$(cat "$venv/.maxy-build-installed" 2>/dev/null)" != "$venv_key" ]; then
  say "op=install-venv path=$venv native=yes"
  step=$(date +%s)
  rm -rf "$venv" && mkdir -p "$venv/bin" "$venv/include" "$venv/lib/python3.11/site-packages"
  ln -s lib "$venv/lib64"
  ln -s /usr/bin/python3 "$venv/bin/python3"
  ln -s python3 "$venv/bin/python" && ln -s python3 "$venv/bin/python3.11"
  printf '%s\n' "home = /usr/bin" "include-system-site-packages = false" "version = $card_python" \
    "executable = /usr/bin/python3.11" "command = /usr/bin/python3 -m venv /cache/build-venv" \
    > "$venv/pyvenv.cfg"
  site=$venv/lib/python3.11/site-packages
  for_card=(--target "$site" --only-binary :all: --no-deps --no-index --implementation cp
    --python-version "$card_python" --abi cp311 "${platforms[@]}")
  pip_native=("$python" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore)
  "${pip_native[@]}" "${for_card[@]}" --find-links "$wheelhouse" --require-hashes \
    -r "$wheelhouse/requirements.txt"
  "${pip_native[@]}" "${for_card[@]}" --upgrade "$wheels"/llama_cpp_python-*.whl
  # --target writes no launchers that work in the root: the one the build calls, by hand.
  rm -rf "$site/bin"
  printf '%s\n' "#!/cache/build-venv/bin/python3" "import sys" \
    "from PyInstaller.__main__ import _console_script_run" "sys.exit(_console_script_run())" \
    > "$venv/bin/pyinstaller"
  chmod 755 "$venv/bin/pyinstaller"
  echo "$venv_key" > "$venv/.maxy-build-installed"
  say "op=venv-ready seconds=$(( $(date +%s) - step ))"
fi

# 5. build/build.sh in the root, emulated.
say "op=freeze root=$buildroot revision=${revision:-unknown} dirty=$dirty"
in_root /src/build/build.sh "${mode_args[@]}"
[ -n "$wheels" ]
say "op=done seconds=$(( $(date +%s) - started )) path=$root/dist/arm64"
