# Maxy's one task runner. `just --list` shows every recipe.

set shell := ["bash", "-euo", "pipefail", "-c"]

root := justfile_directory()
venv := root / ".venv"
export MAXY_CACHE_DIR := env("MAXY_CACHE_DIR", env("HOME") / ".cache/maxy")
export MAXY_DATA_DIR := env("MAXY_DATA_DIR", root / ".dev/data")
export MAXY_RUNTIME_DIR := env("MAXY_RUNTIME_DIR", root / ".dev/run")

# Serve Maxy on http://localhost:19200 with a supervised Neo4j and the dev embedding model.
run: (bootstrap "run")
    #!/usr/bin/env bash
    set -euo pipefail
    if [ -z "${MAXY_ACCOUNT_ID:-}" ]; then
      MAXY_ACCOUNT_ID=$({{venv}}/bin/maxy account list | head -n1 | cut -d' ' -f1)
      if [ -z "$MAXY_ACCOUNT_ID" ]; then
        MAXY_ACCOUNT_ID=$({{venv}}/bin/maxy account create --owner "${USER:-owner}")
        echo "[run] created development account $MAXY_ACCOUNT_ID in $MAXY_DATA_DIR" >&2
      fi
      export MAXY_ACCOUNT_ID
    fi
    exec {{venv}}/bin/maxy run

# Run the whole test suite against real Neo4j, the real model, real servers.
test *args: bootstrap
    {{venv}}/bin/python -m pytest {{args}}

# Prepare this machine: Debian packages (build/system-packages.txt), virtualenv, Neo4j jars, GGUF
# model, browser libraries and, for `test`, the claude CLI (idempotent, fast the second time).
bootstrap FOR="test":
    {{root}}/build/bootstrap.sh --for {{FOR}}

# Build (or verify) the development GGUF embedding model in the cache.
model: bootstrap
    {{venv}}/bin/python {{root}}/build/model.py --cache-dir "$MAXY_CACHE_DIR"

# Static checks: ruff (lint and format), mypy (strict on appliance/, image/, tests/ and build/), the
# import direction.
lint: (bootstrap "run")
    {{venv}}/bin/ruff check appliance tests build image
    {{venv}}/bin/ruff format --check appliance tests build image
    {{venv}}/bin/mypy
    {{venv}}/bin/mypy build/*.py
    {{venv}}/bin/lint-imports --no-cache

# Check the environment Maxy needs and print what to fix.
doctor: bootstrap
    {{venv}}/bin/maxy doctor

# Embedding throughput: llama.cpp in-process vs llama_cpp.server over HTTP vs PyTorch.
bench-embed: bootstrap
    {{root}}/build/bench-venv.sh
    "$MAXY_CACHE_DIR/bench-venv/bin/python" {{root}}/tests/bench/bench_embed.py

# Ingest speed: Cranfield through the engine's ingest path vs the old path, PyTorch and the FLOP bound.
bench-ingest DIR="../shared/ir/cranfield": bootstrap
    {{root}}/build/bench-venv.sh
    "$MAXY_CACHE_DIR/bench-venv/bin/python" {{root}}/tests/bench/bench_ingest.py {{DIR}}

# Retrieval quality (nDCG@10, MAP, R@100) of every fusion mode and a plain-BM25 reference on an IR
# collection: `just bench-quality [DIR] [--fresh] [--keyword-only]` (DIR: ../shared/ir/cranfield).
bench-quality *args: bootstrap
    {{venv}}/bin/python tests/bench/bench_quality.py {{args}}

# memory-search latency at 10k and 100k nodes vs the sequential per-label baseline (own Neo4j).
bench-search: bootstrap
    {{venv}}/bin/python tests/bench/bench_search.py

# Edge proxy overhead (p50/p99 vs the app's socket) and SSE fan-out latency to 100 clients.
bench-edge: bootstrap
    {{venv}}/bin/python tests/bench/bench_edge.py

# Load: 50 visitors chatting (API at 200 ms), 20 searchers at 100k nodes, 10 admin tabs while a session streams.
bench-load: bootstrap
    {{venv}}/bin/python tests/bench/bench_load.py

# Session manager: spawn-to-ready p50/p95 and transcript write -> SSE delta at two clients (own manager).
bench-sessions: bootstrap
    {{venv}}/bin/python tests/bench/bench_sessions.py

# Remake build/freeze.lock (the frozen binary's whole dependency set, hashed) from pyproject.toml.
lock: (bootstrap "run")
    {{venv}}/bin/python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"] + p["optional-dependencies"]["freeze"]))' \
      | {{venv}}/bin/uv pip compile - --generate-hashes --universal --python-version 3.11 --no-header --quiet -o build/freeze.lock

# Freeze every role into one executable: dist/maxy (own build virtualenv under MAXY_CACHE_DIR).
build: bootstrap
    {{root}}/build/build.sh

# Build dist/arm64/maxy-onedir (Raspberry Pi; --onefile: dist/arm64/maxy): natively on arm64; on x86-64 (root) cross + qemu-user chroot.
build-arm64 *args: bootstrap
    {{root}}/build/build-arm64.sh {{args}}

# Card image + signed update bundle into dist/image/: `just image` (x86-64), `just image ARCH=arm64`.
image *args: bootstrap
    #!/usr/bin/env bash
    set -euo pipefail
    arch=x86-64; rest=()
    for arg in {{args}}; do case $arg in ARCH=*) arch=${arg#ARCH=} ;; *) rest+=("$arg") ;; esac; done
    exec {{venv}}/bin/python -m image.build --arch "$arch" "${rest[@]}"

# The image's cached Debian base (debootstrap): needs root once, `sudo -E just image-base ARCH=arm64`.
image-base *args:
    #!/usr/bin/env bash
    set -euo pipefail
    arch=x86-64; rest=()
    for arg in {{args}}; do case $arg in ARCH=*) arch=${arg#ARCH=} ;; *) rest+=("$arg") ;; esac; done
    exec {{venv}}/bin/python -m image.base --arch "$arch" "${rest[@]}"

# Frozen binary: size, edge cold start one-file vs one-dir, RSS of every role (own maxy run).
bench-binary: build
    {{root}}/build/build.sh --onedir
    {{venv}}/bin/python tests/bench/bench_binary.py

# Memory of every role and Neo4j with 100k nodes (idle, during an ingest) and a Claude session, vs a 4 GB Pi.
bench-memory: bootstrap
    {{root}}/build/build.sh --onedir
    {{venv}}/bin/python tests/bench/bench_memory.py

# Telegram lifeline: 20 senders x 10 messages at once, a kill mid-burst, added latency p50/p95 (own stack).
bench-channels: bootstrap
    {{venv}}/bin/python -m pytest tests/channels/test_burst.py -q -s -p no:cacheprovider

# Inbound gateway: precision/recall of the local pattern layer on a labelled set of messages.
bench-gateway FILE="tests/fixtures/gateway-set.jsonl": bootstrap
    {{venv}}/bin/python tests/bench/bench_gateway.py {{FILE}}
