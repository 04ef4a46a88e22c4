"""Memory of the whole appliance against a 4 GB Raspberry Pi 4: every role and Neo4j holding
100k nodes, at idle and during an ingest, and one Claude Code session beside them.

Run with ``just bench-memory`` (it builds dist/maxy-onedir first: the frozen binary in the form
the card carries is what a device runs). In a temporary data folder:

1. Neo4j is filled with NODES synthetic nodes of one account (tests/support/corpus.py, as
   ``just bench-search`` and ``just bench-load`` fill it: real-model embeddings, edges);
2. ``maxy run`` from dist/maxy-onedir supervises that store with the card's Neo4j memory
   (image/build.py's NEO4J_HEAP and NEO4J_PAGECACHE, or MAXY_MEMORY_NEO4J_HEAP/_PAGECACHE to try
   others) and every role, with the card's embedding model (q8_0; MAXY_EMBED_MODEL for
   another); searches warm the model and the indexes;
3. idle: RSS and PSS (/proc/<pid>/smaps_rollup: each shared page divided among the processes
   that map it, so the sum over roles is what they take together) of each role's process tree
   and of Neo4j's JVM, after a quiet spell;
4. ingest: INGEST_DOCS Cranfield documents through the engine's ``ingest`` (eight at a time, as
   an importer sends them), sampled every half second: each role's peak and the peak of the sum;
5. a Claude Code session: the real ``claude`` CLI (when `just bootstrap` cached it) spawned by
   the manager as an admin session against a local Messages API, one turn, then its process
   tree (the CLI and the plugins' ``maxy mcp`` servers) measured.

The budget: everything but the sessions within BUDGET_MB (1.5 GB of the Pi's 4 GB, the rest left
to Claude Code sessions and the system). Prints a table and ends with one line of JSON. Knobs:
MAXY_MEMORY_NODES, MAXY_MEMORY_INGEST_DOCS.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # `tests` as a package

from appliance.core.accounts import create_account
from appliance.core.config import load_settings
from appliance.core.identity import Caller
from appliance.memory.embedder import Embedder, configured_model
from appliance.rpc.client import RpcClient
from appliance.web.manager_client import ManagerClient
from image.build import NEO4J_HEAP, NEO4J_PAGECACHE
from image.inputs import model_file
from tests.bench.bench_quality import DEFAULT_DIR, load_collection
from tests.fakes.anthropic_api import FakeAnthropic
from tests.support.corpus import QUERY_TEMPLATES, distinct, fill_account, neo4j_server
from tests.support.processes import (
    REPO,
    Process,
    health_status,
    neo4j_pid,
    process_table,
    process_tree,
    pss_mb,
    real_claude,
    release_ports,
    remove_runtime_dirs,
    rss_mb,
    runtime_dir,
    wait_until,
)
from tests.support.stacks import account_env

# The card's form: one directory, its libraries mapped once for every role that loads them
# (the one-file form unpacks a private copy per process).
BINARY = Path(os.environ.get("MAXY_BINARY", REPO / "dist" / "maxy-onedir" / "maxy"))
NODES = int(os.environ.get("MAXY_MEMORY_NODES", "100000"))
INGEST_DOCS = int(os.environ.get("MAXY_MEMORY_INGEST_DOCS", "300"))
HEAP = os.environ.get("MAXY_MEMORY_NEO4J_HEAP", NEO4J_HEAP)
PAGECACHE = os.environ.get("MAXY_MEMORY_NEO4J_PAGECACHE", NEO4J_PAGECACHE)
ROLES = ("run", "engine", "manager", "channels", "app", "edge")
BUDGET_MB = 1536.0
QUIET_S = 10.0
SAMPLE_S = 0.5
API_KEY = "sk-ant-local-memory-bench-key-0123456789"


def measure(run_pid: int, data: Path) -> dict[str, dict[str, float]]:
    """RSS and PSS (MB) of each role's process tree and of Neo4j, now."""
    table = process_table()

    def role_of(argv: list[str]) -> str | None:
        return argv[1] if len(argv) > 1 and argv[1] in ROLES and argv[1] != "run" else None

    # `maxy run` (and a one-file bootloader's child); each role below it is the subtree from its
    # first process down.
    java = neo4j_pid(data / "neo4j")  # supervised by `maxy run`, counted on its own
    found: dict[str, list[int]] = {
        "run": [p for p in process_tree(run_pid, table, lambda a: bool(role_of(a))) if p != java]
    }
    for pid in process_tree(run_pid, table):
        role = role_of(table[pid][1])
        if role and table.get(table[pid][0], (0, []))[1][1:2] != [role]:
            found[role] = process_tree(pid, table)
    if java:
        found["neo4j"] = [java]
    return {
        name: {
            "rss_mb": round(sum(rss_mb(p) for p in pids), 1),
            "pss_mb": round(sum(pss_mb(p) for p in pids), 1),
        }
        for name, pids in found.items()
    }


def total(sample: dict[str, dict[str, float]], key: str) -> float:
    return round(sum(part[key] for part in sample.values()), 1)


async def searches(sock: Path, account: str, queries: list[str]) -> None:
    rpc = RpcClient(sock, timeout=60)
    caller = Caller(account_id=account).to_wire()
    for query in queries:
        await rpc.call("search", {"query": query, "limit": 10, "caller": caller})


async def ingest(sock: Path, account: str, docs: list[dict[str, str]]) -> float:
    """Ingest ``docs`` through the engine, eight at a time; the seconds it took."""
    rpc = RpcClient(sock, timeout=600)
    caller = Caller(account_id=account).to_wire()
    turns = asyncio.Semaphore(8)

    async def one(doc: dict[str, str]) -> None:
        async with turns:
            await rpc.call(
                "ingest",
                {
                    "title": str(doc.get("title") or ""),
                    "text": str(doc.get("text") or ""),
                    "attachmentId": f"cranfield:{doc['_id']}",
                    "caller": caller,
                },
            )

    started = time.monotonic()
    await asyncio.gather(*(one(d) for d in docs if (d.get("title") or d.get("text"))))
    return time.monotonic() - started


def during(run_pid: int, data: Path, work: Any) -> tuple[Any, dict[str, Any]]:
    """Run ``work()`` while sampling; its result, each part's peak and the peak of the sum."""
    peaks: dict[str, dict[str, float]] = {}
    peak_total = {"rss_mb": 0.0, "pss_mb": 0.0}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            now = measure(run_pid, data)
            for name, part in now.items():
                best = peaks.setdefault(name, {"rss_mb": 0.0, "pss_mb": 0.0})
                for key in best:
                    best[key] = max(best[key], part[key])
            for key in peak_total:
                peak_total[key] = max(peak_total[key], total(now, key))
            done.wait(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = work()
    finally:
        done.set()
        sampler.join()
    return result, {"parts": peaks, "total": peak_total}


def claude_session(env: dict[str, str], manager_sock: Path, api: FakeAnthropic) -> dict[str, Any]:
    """One admin session of the real CLI: its process tree's RSS and PSS after a turn."""
    client = ManagerClient(manager_sock, timeout=120)

    async def spawn() -> dict[str, Any]:
        return await client.spawn({"message": "hello there"})

    row = asyncio.run(spawn())
    token, pid = row["id"], int(row["pid"])

    async def turn_ended() -> bool:
        answer = await client.request("GET", f"/{token}")
        return bool(answer["row"].get("turnEnded"))

    wait_until(lambda: asyncio.run(turn_ended()), 120, "the session's first turn")
    time.sleep(QUIET_S)  # its MCP servers boot beside the first request
    table = process_table()
    members = process_tree(pid, table)
    kinds: dict[str, dict[str, float]] = {}
    for member in members:
        parent, argv = table[member]
        kind = " ".join([Path(argv[0]).name, *argv[1:2]]) if argv else "?"
        if kind.endswith(" mcp-helper") and table.get(parent, (0, []))[1] == argv:
            kind = f"{Path(argv[0]).name} mcp (forked by its helper)"
        part = kinds.setdefault(kind, {"count": 0, "rss_mb": 0.0, "pss_mb": 0.0})
        part["count"] += 1
        part["rss_mb"] = round(part["rss_mb"] + rss_mb(member), 1)
        part["pss_mb"] = round(part["pss_mb"] + pss_mb(member), 1)
    out = {
        "processes": len(members),
        "rss_mb": round(sum(rss_mb(p) for p in members), 1),
        "pss_mb": round(sum(pss_mb(p) for p in members), 1),
        "by_command": kinds,
        "requests": len(api.requests),
    }
    asyncio.run(client.stop(token))
    return out


def main() -> int:
    if not BINARY.is_file():
        print(f"no frozen binary at {BINARY}: run `build/build.sh --onedir`", file=sys.stderr)
        return 1
    started = time.monotonic()
    home = Path(tempfile.mkdtemp(prefix="maxy-bench-memory-"))
    result: dict[str, Any] = {
        "bench": "memory",
        "nodes": NODES,
        "neo4j_heap": HEAP,
        "neo4j_pagecache": PAGECACHE,
        "budget_mb": BUDGET_MB,
    }
    try:
        # The card's model (q8_0) unless MAXY_EMBED_MODEL names another: the fill and the
        # engine embed with the same one, so no node is stale to the engine.
        model = os.environ.get("MAXY_EMBED_MODEL") or str(
            model_file(load_settings(dict(os.environ)).cache_dir, None)[0]
        )
        settings = load_settings(
            {**os.environ, "MAXY_DATA_DIR": str(home), "MAXY_EMBED_MODEL": model}
        )
        result["model"] = Path(model).name
        account = create_account(home / "accounts", "Bench Owner")
        embedder = Embedder(configured_model(settings))
        print(f"[bench-memory] op=fill nodes={NODES}", file=sys.stderr, flush=True)
        with neo4j_server(home) as (uri, password):
            result["fill_s"] = round(
                asyncio.run(
                    fill_account(embedder, uri, password, settings.cache_dir, NODES, account.id)
                ),
                1,
            )
        rng, seen = random.Random(7), set[str]()
        queries = [q for t in QUERY_TEMPLATES for q in distinct(t, 5, rng, seen)]
        embedder.close()
        claude = real_claude()
        with FakeAnthropic(reply="Noted.") as api:
            env = account_env(
                home,
                runtime_dir("maxy-memory-"),
                account.id,
                MAXY_NEO4J_URI="bolt://127.0.0.1:0",
                MAXY_NEO4J_HEAP=HEAP,
                MAXY_NEO4J_PAGECACHE=PAGECACHE,
                MAXY_EMBED_MODEL=model,
                MAXY_LOG_LEVEL="WARNING",
                ANTHROPIC_BASE_URL=api.url,
                ANTHROPIC_API_KEY=API_KEY,
                CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
                **({"MAXY_CLAUDE_BIN": claude} if claude else {}),
                **({"IS_SANDBOX": "1"} if os.geteuid() == 0 else {}),
            )
            run = Process([str(BINARY), "run"], env, home / "run.log")
            try:
                port = int(env["MAXY_PORT"])
                wait_until(lambda: health_status(port) == 200, 600, f"maxy run\n{run.output()}", 1)
                live = load_settings(env)
                asyncio.run(searches(live.engine_socket, account.id, queries))
                time.sleep(QUIET_S)
                result["idle"] = measure(run.proc.pid, home)
                print(f"[bench-memory] op=idle {json.dumps(result['idle'])}", file=sys.stderr)
                docs = load_collection(DEFAULT_DIR).corpus[:INGEST_DOCS]
                seconds, peaks = during(
                    run.proc.pid,
                    home,
                    lambda: asyncio.run(ingest(live.engine_socket, account.id, docs)),
                )
                result["ingest"] = {"docs": len(docs), "seconds": round(seconds, 1), **peaks}
                if claude:
                    result["session"] = claude_session(env, live.manager_socket, api)
                else:
                    result["session"] = None
                    print("[bench-memory] no claude CLI cached: no session measured", flush=True)
            finally:
                run.stop()
    finally:
        shutil.rmtree(home, ignore_errors=True)
        remove_runtime_dirs()
        release_ports()
    result["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    result["wall_s"] = round(time.monotonic() - started, 1)
    report(result)
    return 0


def report(result: dict[str, Any]) -> None:
    idle, ingest_peaks = result["idle"], result["ingest"]["parts"]
    print(
        f"\nMemory of the appliance: {result['nodes']:,} nodes, Neo4j heap {result['neo4j_heap']}"
        f" + page cache {result['neo4j_pagecache']}, {result['model']}, the frozen binary (MB)"
    )
    header = f"{'part':<10}{'idle RSS':>10}{'idle PSS':>10}{'ingest RSS':>12}{'ingest PSS':>12}"
    print(header)
    print("-" * len(header))
    for name in (*ROLES, "neo4j"):
        if name in idle:
            peak = ingest_peaks.get(name, {"rss_mb": 0.0, "pss_mb": 0.0})
            print(
                f"{name:<10}{idle[name]['rss_mb']:>10.1f}{idle[name]['pss_mb']:>10.1f}"
                f"{peak['rss_mb']:>12.1f}{peak['pss_mb']:>12.1f}"
            )
    result["idle_total"] = {"rss_mb": total(idle, "rss_mb"), "pss_mb": total(idle, "pss_mb")}
    peak_total = ingest_peaks and result["ingest"]["total"]
    print(
        f"{'total':<10}{result['idle_total']['rss_mb']:>10.1f}"
        f"{result['idle_total']['pss_mb']:>10.1f}{peak_total['rss_mb']:>12.1f}"
        f"{peak_total['pss_mb']:>12.1f}  (ingest: peak of the sum, "
        f"{result['ingest']['docs']} documents in {result['ingest']['seconds']} s)"
    )
    session = result["session"]
    if session:
        print(
            f"a Claude Code session (the CLI and {session['processes'] - 1} processes under it): "
            f"RSS {session['rss_mb']:.1f}, PSS {session['pss_mb']:.1f}"
        )
        for kind, part in sorted(session["by_command"].items(), key=lambda kv: -kv[1]["pss_mb"]):
            print(
                f"  {part['count']:>3} x {kind[:40]:<40} RSS {part['rss_mb']:>7.1f}"
                f"  PSS {part['pss_mb']:>7.1f}"
            )
    within = peak_total["pss_mb"] <= BUDGET_MB
    result["within_budget"] = within
    print(
        f"\neverything but the sessions, at its peak (PSS): {peak_total['pss_mb']:.0f} MB of the "
        f"{BUDGET_MB:.0f} MB budget: {'within' if within else 'OVER'}"
    )
    if session:
        room = 4096 - peak_total["pss_mb"] - 400  # the kernel, systemd and the page cache's floor
        result["sessions_that_fit"] = int(room // session["pss_mb"]) if session["pss_mb"] else None
        print(
            f"on a 4 GB Pi 4, beside it and ~400 MB for the system: about "
            f"{result['sessions_that_fit']} sessions of this size"
        )
    print(f"load average {result['loadavg']}, wall {result['wall_s']} s")
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    sys.exit(main())
