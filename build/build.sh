#!/usr/bin/env bash
# Freeze Maxy into one executable with PyInstaller: dist/maxy (one file; --onedir: dist/maxy-onedir/).
#
#   build/build.sh            (called by `just build`; the tests call it when dist/maxy is stale)
#   build/build.sh --onedir   the unpacked form, for start-up measurements and the image
#   build/build.sh --venv-key print the key the build virtualenv's stamp must hold, and stop
#                             (build/build-arm64.sh fills the arm64 venv natively, then stamps it)
#
# MAXY_DIST_DIR (default dist/) and MAXY_BUILD_OUT (default build/out/) move the output and the
# work files (build/build-arm64.sh uses them to keep the arm64 build apart); MAXY_GIT_REVISION and
# MAXY_GIT_DIRTY (1 or 0) give the build metadata where git cannot see the checkout (a chroot).
#
# The build runs in its own virtualenv, $MAXY_CACHE_DIR/build-venv, holding only the runtime
# dependencies of pyproject.toml and PyInstaller (the `freeze` group): nothing from `dev` or
# `build` (pytest, playwright, numpy's converter friends, torch) can be frozen in by accident.
# It is installed from build/freeze.lock, the whole dependency set with its hashes
# (--require-hashes: an indirect dependency cannot change under a signed binary; `just lock`
# remakes the file after pyproject.toml changes).
# llama-cpp-python comes from the portable wheel in $MAXY_CACHE_DIR/wheels/<flavour>-<key>
# (build/llama-wheel.sh): the binary runs on every CPU of its architecture, not only this one.
#
# Build metadata (version, git revision, build date) goes into the binary as
# appliance/_build_info.json; the date is SOURCE_DATE_EPOCH, else the last commit's time, so two
# builds of one commit carry the same metadata. PYTHONHASHSEED is fixed for the same reason.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${MAXY_CACHE_DIR:-$HOME/.cache/maxy}
venv=$cache/build-venv
out=${MAXY_BUILD_OUT:-$root/build/out}
dist=${MAXY_DIST_DIR:-$root/dist}
mode=onefile
[ "${1:-}" = "--onedir" ] && mode=onedir
print_key=0
[ "${1:-}" = "--venv-key" ] && print_key=1

say() { printf '[build] %s\n' "$*" >&2; }
die() { printf '[build] FATAL %s\n' "$*" >&2; exit 1; }

. "$root/build/python.sh"

vendor_stamp=$root/appliance/app/static/vendor/.vendor-stamp
[ -f "$vendor_stamp" ] || die "the vendored browser libraries are missing: run \`just bootstrap\` first"
[ -f "$root/schema/schema.cypher" ] || die "schema/schema.cypher is missing"

# 1. The build virtualenv, reinstalled only when pyproject.toml, the interpreter or the
#    llama.cpp flags change.
wheels=$(PYTHON=$python MAXY_CACHE_DIR=$cache "$root/build/llama-wheel.sh")
stamp=$venv/.maxy-build-installed
lock=$root/build/freeze.lock
want=$(cat "$root/pyproject.toml" "$lock" | sha256sum | cut -d' ' -f1)-$("$python" -c 'import sys; print(sys.version.split()[0])')-$(sha256sum "$wheels/FLAGS" | cut -c1-12)
if [ "$print_key" = 1 ]; then
  echo "$want"
  exit 0
fi
if [ ! -x "$venv/bin/pyinstaller" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "op=install-venv path=$venv"
  rm -rf "$venv"
  "$python" -m venv "$venv" || die "Could not create a virtualenv: apt-get install python3-venv"
  "$venv/bin/pip" install --quiet --upgrade pip
  requirements=$venv/requirements.txt
  # Every locked requirement but llama-cpp-python, which is the portable wheel built here.
  "$python" "$root/build/freeze_requirements.py" "$lock" > "$requirements"
  "$venv/bin/pip" install --quiet --require-hashes --no-deps -r "$requirements"
  "$venv/bin/pip" install --quiet --no-deps --force-reinstall "$wheels"/llama_cpp_python-*.whl
  echo "$want" > "$stamp"
fi

# 2. Build metadata.
mkdir -p "$out"
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH=$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)
fi
export SOURCE_DATE_EPOCH PYTHONHASHSEED=0
"$python" - "$root" "$out/_build_info.json" <<'PY'
import datetime, json, os, subprocess, sys, tomllib
from pathlib import Path
root, target = Path(sys.argv[1]), Path(sys.argv[2])
def git(*args: str) -> str:
    out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else ""
epoch = int(os.environ["SOURCE_DATE_EPOCH"])
info = {
    "version": tomllib.load(open(root / "pyproject.toml", "rb"))["project"]["version"],
    "gitRevision": os.environ.get("MAXY_GIT_REVISION") or git("rev-parse", "--short=12", "HEAD") or None,
    "gitDirty": os.environ["MAXY_GIT_DIRTY"] == "1" if "MAXY_GIT_DIRTY" in os.environ
    else bool(git("status", "--porcelain", "--untracked-files=no")),
    "buildDate": datetime.datetime.fromtimestamp(epoch, datetime.UTC).isoformat(),
    "frozen": True,
}
target.write_text(json.dumps(info, sort_keys=True) + "\n")
PY

# 3. Freeze, unless this very input was frozen before: the output is kept under a key of every
#    file it is made of (the sources, the schema, the spec, this script), the build venv's key,
#    the mode and the build metadata (so the same commit, not merely the same code, reuses it).
#    CI's second run of one commit, and a test session after `just build`, then copy instead of
#    freezing again (PyInstaller under qemu-user takes about ten minutes for arm64).
if [ "$mode" = onefile ]; then
  artefact=$dist/maxy
  made=("$dist/maxy")
else
  artefact=$dist/maxy-onedir/maxy
  made=("$dist/maxy-onedir")
fi
key=$( {
  echo "$want $mode"
  cat "$out/_build_info.json"
  cd "$root" && find appliance schema build/maxy.spec build/entry build/build.sh -type f \
    ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
} | sha256sum | cut -c1-16)
kept=$cache/dist-$mode-$key
started=$(date +%s)
if [ -f "$kept/.complete" ]; then
  rm -rf "${made[@]}" && mkdir -p "$dist"
  cp -r "$kept/$(basename "${made[0]}")" "$dist/"
  say "op=reused key=$key path=$artefact"
else
  say "op=freeze mode=$mode key=$key python=$("$venv/bin/python" -c 'import sys; print(sys.version.split()[0])')"
  MAXY_BUILD_MODE=$mode MAXY_BUILD_INFO=$out/_build_info.json MAXY_BUILD_OUT=$out \
    "$venv/bin/pyinstaller" --noconfirm --log-level WARN \
    --distpath "$dist" --workpath "$out/work-$mode" "$root/build/maxy.spec"
  [ -x "$artefact" ] || die "PyInstaller finished without $artefact"
  rm -rf "$kept.partial" && mkdir -p "$kept.partial"
  cp -r "${made[0]}" "$kept.partial/" && touch "$kept.partial/.complete"
  rm -rf "$kept" && mv "$kept.partial" "$kept"
  # The three newest outputs of each mode are kept; older ones go.
  { ls -1dt "$cache"/dist-"$mode"-* 2>/dev/null | grep -v '\.partial$' | tail -n +4 | xargs -r rm -rf; } || true
fi
[ -x "$artefact" ] || die "no $artefact after the build"
if [ "$mode" = onefile ]; then
  bytes=$(stat -c %s "$artefact" 2>/dev/null || echo 0)
else
  bytes=$(du -sb "$dist/maxy-onedir" 2>/dev/null | cut -f1 || echo 0)
fi
say "op=built path=$artefact bytes=$bytes seconds=$(( $(date +%s) - started ))"
