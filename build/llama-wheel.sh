#!/usr/bin/env bash
# Compile llama-cpp-python once per machine into a wheel that runs on every CPU of the
# architecture the image targets, not only on the build machine's; print the wheel's directory.
#
#   build/llama-wheel.sh          (called by bootstrap.sh, build.sh and build-arm64.sh)
#
# llama.cpp's default (GGML_NATIVE) compiles for the build CPU: a binary built on an AVX-512
# machine dies of an illegal instruction on a mini PC, or under qemu, without it. The flavours:
#   x86-64-v3  AVX, AVX2, BMI2, FMA, F16C (every x86-64 CPU since 2013-2015); no AVX-512
#   armv8-a    the Raspberry Pi 4's Cortex-A72 and everything newer (no dot-product extension)
# The wheel lands in $MAXY_CACHE_DIR/wheels/<flavour>/ beside a FLAGS file naming how it was made;
# a wheel made with other flags is never picked up (the directory is the key).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${MAXY_CACHE_DIR:-$HOME/.cache/maxy}
version=0.3.36

say() { printf '[llama-wheel] %s\n' "$*" >&2; }
die() { printf '[llama-wheel] FATAL %s\n' "$*" >&2; exit 1; }
. "$root/build/python.sh"

case "$(uname -m)" in
  x86_64)
    flavour=x86-64-v3
    flags="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF" ;;
  aarch64)
    flavour=armv8-a
    flags="-DGGML_NATIVE=OFF -DGGML_CPU_ARM_ARCH=armv8-a" ;;
  *) die "no portable llama.cpp flavour for $(uname -m); Maxy builds on x86_64 and aarch64" ;;
esac

dir=$cache/wheels/$flavour
if ! ls "$dir"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1 ||
   [ "$(cat "$dir/FLAGS" 2>/dev/null)" != "$version $flags" ]; then
  command -v gcc >/dev/null && command -v g++ >/dev/null ||
    die "A C/C++ compiler is needed to build llama-cpp-python: apt-get install build-essential cmake"
  say "op=compile package=llama-cpp-python version=$version flavour=$flavour (once per machine, ~8 min)"
  rm -rf "$dir" && mkdir -p "$dir"
  CMAKE_ARGS="$flags" "$python" -m pip wheel --quiet --no-deps --no-cache-dir -w "$dir" \
    "llama-cpp-python==$version"
  echo "$version $flags" > "$dir/FLAGS"
fi
echo "$dir"
