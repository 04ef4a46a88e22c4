#!/usr/bin/env bash
# Compile llama-cpp-python once per machine into a wheel that runs on every CPU of the
# architecture the image targets, not only on the build machine's; print the wheel's directory.
#
#   build/llama-wheel.sh          (called by bootstrap.sh, build.sh and build-arm64.sh)
#   MAXY_WHEEL_ARCH=aarch64 build/llama-wheel.sh   the arm64 wheel, cross-compiled on x86-64
#
# llama.cpp's default (GGML_NATIVE) compiles for the build CPU: a binary built on an AVX-512
# machine dies of an illegal instruction on a mini PC, or under qemu, without it. Instead its CPU
# code is compiled several times, once per processor generation, each a library of its own
# (GGML_BACKEND_DL): libggml-cpu-<variant>.so beside libllama. At run time ggml scores each
# against the CPU and loads the best (appliance/memory/embedder.py, load_cpu_backend). The
# variants, lowest first (ggml's own names and feature sets, a subset of GGML_CPU_ALL_VARIANTS):
#   x86-64 (flavour x86-64-v3+)
#     haswell    AVX, AVX2, BMI2, FMA, F16C: every x86-64 CPU since 2013-2015, qemu's TCG
#     alderlake  + AVX-VNNI: Intel N100-class mini PCs and 12th-generation Core
#     icelake    + AVX-512 (F, VBMI, VNNI): Ice Lake and later Xeons and Cores;
#                 on a 2-vCPU Xeon it embeds a batch 1.5x as fast as haswell (README, Embeddings)
#     zen4       + AVX512_BF16: AMD Zen 4 and 5 (and Sapphire Rapids Xeons); it multiplies the
#                 bf16 model's weights natively, 1.45x f16's batch speed on a Zen 4, where the
#                 engine loads that model (embedder.py, fastest_form; README, Embeddings)
#   arm64 (flavour armv8-a+)
#     armv8.0_1  the Raspberry Pi 4's Cortex-A72 (no dot-product extension)
#     armv8.2_2  + dot product and half-precision arithmetic: the Pi 5's Cortex-A76
# Left out: sapphirerapids (AMX: an illegal instruction on a VM that reports AMX but does not
# grant it), and the generations below haswell and the server Arm cores, which Maxy never runs on.
# Both leave out llama-cpp-python's multimodal library (LLAVA_BUILD=OFF: libmtmd, loaded only by
# its image chat handlers, which an embedder never imports): 51 of the 178 translation units
# (12% of the source bytes) not compiled, and not carried by the binary. And llama.cpp's `common`
# library (argument parsing, chat templates, JSON: 29 heavy C++ units that only the tools and
# libmtmd link): llama-cpp-python's CMakeLists forces it on, so the sdist (checked against the
# sha256 in build/freeze.lock) is unpacked and that one line turned off before the build.
# One line of llama.cpp itself is changed (`patches` below): a context made for embeddings reserves
# no logits. Its output buffer otherwise holds a row of the whole vocabulary per output token, for
# an encoder every token of the micro-batch (30,522 x 256-512 floats, 30-62 MB per context,
# zeroed and so resident), which an embedding graph never writes: the engine's three contexts
# held 90 MB or more of zeros (README, Memory). Every reader of logits checks for none.
# And ggml's CPU code gets build/ggml-simd.patch (its head says what and why): three loops it ran
# one value at a time (GELU through a table, a row's maximum, flash attention's mask) run a vector
# at a time: embed_many 1.11x (haswell, f16) to 1.16x (zen4, bf16) as fast, the same vectors; a
# text shorter than 64 tokens (a query) gets tiled flash attention too (8.8 -> 6.6 ms on one
# thread), and the matrix kernel sums a tile's four outputs together (~1.04x).
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
# Each variant as "name FEATURE ...", the arguments of ggml's ggml_add_cpu_backend_variant.
case "$target" in
  x86_64)
    flavour=x86-64-v3+
    variants="haswell SSE42 AVX F16C FMA AVX2 BMI2
alderlake SSE42 AVX F16C FMA AVX2 BMI2 AVX_VNNI
icelake SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI AVX512_VNNI
zen4 SSE42 AVX F16C FMA AVX2 BMI2 AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16" ;;
  aarch64)
    flavour=armv8-a+
    variants="armv8.0_1
armv8.2_2 DOTPROD FP16_VECTOR_ARITHMETIC" ;;
  *) die "no portable llama.cpp flavour for $target; Maxy builds on x86_64 and aarch64" ;;
esac
flags="-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DLLAVA_BUILD=OFF -DLLAMA_BUILD_COMMON=OFF"
cross=
if [ "$target" != "$host" ]; then
  [ "$host/$target" = x86_64/aarch64 ] || die "cross-compiling is set up for x86_64 -> aarch64 only"
  command -v aarch64-linux-gnu-gcc >/dev/null && command -v aarch64-linux-gnu-g++ >/dev/null ||
    die "cross-compiling needs apt-get install gcc-aarch64-linux-gnu g++-aarch64-linux-gnu"
  cross="-DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++"
fi

# The directory is keyed by the version and flags, so wheels made with other flags (an older
# checkout, another branch) stay beside it instead of being rebuilt over; one compile at a time.
patch=$root/build/ggml-simd.patch
patches="embeddings-without-logits ggml-simd-$(sha256sum "$patch" | cut -c1-12)"
made="$version $flags $(echo "$variants" | tr '\n' ',') $patches"
dir=$cache/wheels/$flavour-$(echo "$made" | sha256sum | cut -c1-12)
mkdir -p "$cache/wheels"
exec 8>"$dir.lock"
flock 8
if ! ls "$dir"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1 ||
   [ "$(cat "$dir/FLAGS" 2>/dev/null)" != "$made" ]; then
  command -v gcc >/dev/null && command -v g++ >/dev/null ||
    die "A C/C++ compiler is needed to build llama-cpp-python: apt-get install build-essential cmake"
  say "op=compile package=llama-cpp-python version=$version flavour=$flavour cross=${cross:+$target} (once per machine, ~2 min on 2 cores)"
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
  context_cpp=$src/llama_cpp_python-$version/vendor/llama.cpp/src/llama-context.cpp
  sed -i 's/^    bool has_logits     = true;$/    bool has_logits     = !cparams.embeddings;  \/\/ Maxy: embeddings-without-logits/' "$context_cpp"
  grep -q 'has_logits     = !cparams.embeddings;' "$context_cpp" ||
    die "llama.cpp's output_reserve in $version no longer reads 'bool has_logits = true': check $context_cpp"
  command -v patch >/dev/null || die "applying $patch needs patch: apt-get install patch"
  patch -p1 --forward --batch --quiet -d "$src/llama_cpp_python-$version/vendor/llama.cpp" <"$patch" ||
    die "$patch does not apply to llama-cpp-python $version's llama.cpp: remake it against that source"
  # Only Maxy's variants are compiled (ggml's list has 14 for x86 alone), and llama-cpp-python,
  # which installs the single libggml-cpu by name, installs each of them beside libllama.
  "$python" - "$src/llama_cpp_python-$version" "$variants" <<'PY' || die "cannot set the CPU variants in llama-cpp-python $version's CMake files"
import pathlib, sys
tree, variants = pathlib.Path(sys.argv[1]), sys.argv[2].splitlines()
ggml = tree / "vendor/llama.cpp/ggml/src/CMakeLists.txt"
text = ggml.read_text()
start = text.index("if (GGML_CPU_ALL_VARIANTS)\n")
end = text.index("elseif (GGML_CPU)\n", start)
block = "".join(f"    ggml_add_cpu_backend_variant({v})\n" for v in variants)
ggml.write_text(f"{text[:start]}if (GGML_CPU_ALL_VARIANTS)\n{block}{text[end:]}")
python = tree / "CMakeLists.txt"
text = python.read_text()
anchor = "    llama_cpp_python_install_target(ggml-cpu)\n"
assert anchor in text
names = "".join(f"    llama_cpp_python_install_target(ggml-cpu-{v.split()[0]})\n" for v in variants)
python.write_text(text.replace(anchor, anchor + names))
PY
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
  echo "$made" > "$dir/FLAGS"
fi
echo "$dir"
