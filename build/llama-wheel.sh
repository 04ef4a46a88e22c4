#!/usr/bin/env bash
# Compile llama-cpp-python once per machine into a wheel that runs on every CPU of the
# architecture the image targets, not only on the build machine's; print the wheel's directory.
#
#   build/llama-wheel.sh          (called by bootstrap.sh, build.sh and build-arm64.sh)
#   MAXY_WHEEL_ARCH=aarch64 build/llama-wheel.sh   the arm64 wheel, cross-compiled on x86-64
#
# llama.cpp's default (GGML_NATIVE) compiles for the build CPU: a binary built on an AVX-512
# machine dies of an illegal instruction on a mini PC, or under qemu, without it. The flavours:
#   x86-64-v3  AVX, AVX2, BMI2, FMA, F16C (every x86-64 CPU since 2013-2015); no AVX-512
#   armv8-a    the Raspberry Pi 4's Cortex-A72 and everything newer (no dot-product extension)
# Both leave out llama-cpp-python's multimodal library (LLAVA_BUILD=OFF: libmtmd, loaded only by
# its image chat handlers, which an embedder never imports): 51 of the 178 translation units
# (12% of the source bytes) not compiled, and not carried by the binary. And llama.cpp's `common`
# library (argument parsing, chat templates, JSON: 29 heavy C++ units that only the tools and
# libmtmd link): llama-cpp-python's CMakeLists forces it on, so the sdist (checked against the
# sha256 in build/freeze.lock) is unpacked and that one line turned off before the build.
# The wheel lands in $MAXY_CACHE_DIR/wheels/<flavour>-<key of version and flags>/ beside a FLAGS
# file naming how it was made; a wheel made with other flags is never picked up.
#
# Cross-compiling (MAXY_WHEEL_ARCH=aarch64 on an x86_64 machine, as build-arm64.sh does): Debian's
# aarch64 cross toolchain (gcc-aarch64-linux-gnu, g++-aarch64-linux-gnu) builds the same armv8-a
# flavour with the same FLAGS, in minutes instead of the hours it takes under emulation.
# llama-cpp-python holds no CPython extension (it loads libllama.so through ctypes), so the wheel
# differs from a native one only in its platform tag, which is rewritten to linux_aarch64.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${MAXY_CACHE_DIR:-$HOME/.cache/maxy}
version=0.3.36

say() { printf '[llama-wheel] %s\n' "$*" >&2; }
die() { printf '[llama-wheel] FATAL %s\n' "$*" >&2; exit 1; }
. "$root/build/python.sh"

host=$(uname -m)
target=${MAXY_WHEEL_ARCH:-$host}
case "$target" in
  x86_64)
    flavour=x86-64-v3
    flags="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_COMMON=OFF" ;;
  aarch64)
    flavour=armv8-a
    flags="-DGGML_NATIVE=OFF -DGGML_CPU_ARM_ARCH=armv8-a -DLLAVA_BUILD=OFF -DLLAMA_BUILD_COMMON=OFF" ;;
  *) die "no portable llama.cpp flavour for $target; Maxy builds on x86_64 and aarch64" ;;
esac
cross=
if [ "$target" != "$host" ]; then
  [ "$host/$target" = x86_64/aarch64 ] || die "cross-compiling is set up for x86_64 -> aarch64 only"
  command -v aarch64-linux-gnu-gcc >/dev/null && command -v aarch64-linux-gnu-g++ >/dev/null ||
    die "cross-compiling needs apt-get install gcc-aarch64-linux-gnu g++-aarch64-linux-gnu"
  cross="-DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++"
fi

# The directory is keyed by the version and flags, so wheels made with other flags (an older
# checkout, another branch) stay beside it instead of being rebuilt over; one compile at a time.
dir=$cache/wheels/$flavour-$(echo "$version $flags" | sha256sum | cut -c1-12)
mkdir -p "$cache/wheels"
exec 8>"$dir.lock"
flock 8
if ! ls "$dir"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1 ||
   [ "$(cat "$dir/FLAGS" 2>/dev/null)" != "$version $flags" ]; then
  command -v gcc >/dev/null && command -v g++ >/dev/null ||
    die "A C/C++ compiler is needed to build llama-cpp-python: apt-get install build-essential cmake"
  say "op=compile package=llama-cpp-python version=$version flavour=$flavour cross=${cross:+$target} (once per machine, ~8 min)"
  rm -rf "$dir" && mkdir -p "$dir"
  src=$dir.src
  rm -rf "$src" && mkdir -p "$src"
  "$python" -m pip download --quiet --no-deps --no-binary :all: --no-cache-dir -d "$src" \
    "llama-cpp-python==$version"
  sdist=$src/llama_cpp_python-$version.tar.gz
  locked=$(awk -v pkg="llama-cpp-python==$version" '$1 == pkg {getline; sub(/.*sha256:/, ""); print; exit}' \
    "$root/build/freeze.lock")
  [ -n "$locked" ] && [ "$(sha256sum "$sdist" | cut -d' ' -f1)" = "$locked" ] ||
    die "$sdist does not match the sha256 in build/freeze.lock (${locked:-none})"
  tar -xzf "$sdist" -C "$src"
  cmake_lists=$src/llama_cpp_python-$version/CMakeLists.txt
  sed -i 's/set(LLAMA_BUILD_COMMON ON CACHE BOOL/set(LLAMA_BUILD_COMMON OFF CACHE BOOL/' "$cmake_lists"
  grep -q 'set(LLAMA_BUILD_COMMON OFF CACHE BOOL' "$cmake_lists" ||
    die "llama-cpp-python $version's CMakeLists.txt no longer forces LLAMA_BUILD_COMMON: check $cmake_lists"
  CMAKE_ARGS="$flags $cross" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
    "$python" -m pip wheel --quiet --no-deps --no-cache-dir -w "$dir" "$src/llama_cpp_python-$version"
  rm -rf "$src"
  if [ -n "$cross" ]; then
    "$python" - "$dir" "$host" "$target" <<'PY'
import base64, hashlib, pathlib, sys, zipfile
folder, host, target = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
(wheel,) = folder.glob(f"llama_cpp_python-*-linux_{host}.whl")
retagged = wheel.with_name(wheel.name.replace(f"linux_{host}", f"linux_{target}"))
with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(retagged, "w", zipfile.ZIP_DEFLATED) as dst:
    names = src.namelist()
    tag_file = next(n for n in names if n.endswith(".dist-info/WHEEL"))
    record_file = next(n for n in names if n.endswith(".dist-info/RECORD"))
    tag = src.read(tag_file).replace(f"linux_{host}".encode(), f"linux_{target}".encode())
    digest = base64.urlsafe_b64encode(hashlib.sha256(tag).digest()).rstrip(b"=").decode()
    record = "".join(
        f"{tag_file},sha256={digest},{len(tag)}\n" if line.startswith(tag_file + ",") else line
        for line in src.read(record_file).decode().splitlines(keepends=True)
    )
    for info in src.infolist():
        data = {tag_file: tag, record_file: record.encode()}.get(info.filename)
        dst.writestr(info, src.read(info.filename) if data is None else data)
wheel.unlink()
PY
    echo "cross-compiled on $host with $(aarch64-linux-gnu-gcc --version | head -n1)" > "$dir/TOOLCHAIN"
  fi
  echo "$version $flags" > "$dir/FLAGS"
fi
echo "$dir"
