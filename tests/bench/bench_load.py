"""Load: visitors chatting at once, concurrent memory search, admin tabs while a session streams.

Run with ``just bench-load``. Three parts, each on real processes:

- chat: ``maxy run`` (its own Neo4j, every role) with the Anthropic API replaced by the local
  fake answering every call after 200 ms. VISITORS visitors, each from its own address, arrive as
  the tunnel delivers them (the edge's TCP port, loopback peer, ``Cf-Connecting-Ip`` naming the
  visitor, a public host name) and send MESSAGES messages each, all at once. Per message: the
  time to the stream's ``done`` minus the API's own time (its calls per message x 200 ms) is the
  appliance's added latency. Then a crowd behind ONE address sends RATE_LIMIT + 10 messages at
  once: exactly RATE_LIMIT may pass, the rest must be 429 (the many addresses above: none).
- search: a private Neo4j (the card's heap and page cache) holding NODES synthetic nodes
  (tests/support/corpus.py, as bench-search builds them) and a ``maxy engine`` on it;
  SEARCH_CLIENTS clients call the engine's ``search`` over its RPC socket at once (the query
  embedded by the engine, as for the MCP tools), SEARCHES each: throughput and p50/p95.
- admin: on the same ``maxy run``, an admin session of the ``claude`` double is spawned through
  the edge; TABS tabs each hold the sessions event stream and load the Sessions page again and
  again while the session's transcript grows a line every 20-50 ms (what a streaming turn
  writes): page p50/p95 and the delay from a transcript write to each tab's ``row-updated``.

Knobs (environment) to shrink a run: MAXY_LOAD_VISITORS (50), MAXY_LOAD_MESSAGES (3),
MAXY_LOAD_NODES (100000), MAXY_LOAD_SEARCH_CLIENTS (20), MAXY_LOAD_SEARCHES (10 per client),
MAXY_LOAD_TABS (10), MAXY_LOAD_WRITES (200), MAXY_LOAD_PARTS (chat,search,admin).
Prints a table, the load average, and ends with one line of JSON. Nothing asserts on times.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from appliance.agents.retrieval import CLASSIFIER_SYSTEM
from appliance.app.chat import RATE_LIMIT
from appliance.core.accounts import create_account
from appliance.core.config import load_settings
from appliance.core.identity import Caller
from appliance.memory.embedder import Embedder, configured_model
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RpcError

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # `tests` as a package
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.support.auth import admin_headers
from tests.support.corpus import QUERY_TEMPLATES, distinct, fill_account, neo4j_server
from tests.support.figures import loadavg, percentile
from tests.support.processes import (
    Process,
    base_environ,
    maxy,
    release_ports,
    remove_runtime_dirs,
    runtime_dir,
    wait_until,
)
from tests.support.sse import sse_events
from tests.support.stacks import (
    DOUBLE,
    Stack,
    account_env,
    add_agent,
    give_api_key,
    supervised_stack,
)


def knob(name: str, default: int) -> int:
    return int(os.environ.get(f"MAXY_LOAD_{name}", default))


VISITORS, MESSAGES = knob("VISITORS", 50), knob("MESSAGES", 3)
NODES, SEARCH_CLIENTS, SEARCHES = (
    knob("NODES", 100_000),
    knob("SEARCH_CLIENTS", 20),
    knob("SEARCHES", 10),
)
TABS, WRITES, PAGE_LOADS = knob("TABS", 10), knob("WRITES", 200), 10
PARTS = set(os.environ.get("MAXY_LOAD_PARTS", "chat,search,admin").split(","))
API_DELAY_S = 0.2
PUBLIC_HOST = "visit.example"
VERDICT = json.dumps(
    {
        "verdict": "CLEAN",
        "injection": False,
        "query": None,
        "intent": "question",
        "language": "en",
        "complexity": "simple",
    }
)
CLASSIFICATION = json.dumps({"action": "search", "retrievalClass": "general", "query": "roses"})


def classifying(body: dict[str, Any]) -> bool:
    """A request of the query classifier (it shares the gateway's model)."""
    return body.get("system") == CLASSIFIER_SYSTEM


ANSWER = "Roses like morning sun, deep watering and a little patience."


def visitor_ip(n: int) -> str:
    """Distinct public-looking addresses (the documentation ranges, never LAN)."""
    nets = ("192.0.2", "198.51.100", "203.0.113")
    return f"{nets[n // 250 % 3]}.{n % 250 + 1}"


def figures(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50": round(statistics.median(values), 1),
        "p95": round(percentile(values, 0.95), 1),
        "max": round(max(values), 1),
    }


# --- chat --------------------------------------------------------------------------------------


async def chat_once(client: httpx.AsyncClient, ip: str) -> tuple[int, float, bool]:
    """One message as a visitor at ``ip``: (status, ms to ``done``, answered without error)."""
    headers = {"host": PUBLIC_HOST, "cf-connecting-ip": ip, "cf-ray": "bench"}
    started = time.perf_counter()
    body = {"text": "How often should I water the roses in my garden?"}
    async with client.stream("POST", "/api/public/bench/messages", json=body, headers=headers) as r:
        if r.status_code != 200:
            await r.aread()
            return r.status_code, 0.0, False
        names = [event.event async for event in sse_events(r)]
    elapsed = (time.perf_counter() - started) * 1000
    return 200, elapsed, names[-1:] == ["done"] and "error" not in names


async def visitor(url: str, ip: str) -> list[tuple[int, float, bool]]:
    """One visitor (its own cookie jar) sending MESSAGES messages one after the other."""
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        return [await chat_once(client, ip) for _ in range(MESSAGES)]


async def crowd(url: str, ip: str, count: int) -> list[int]:
    """``count`` visitors behind one address, one message each, all at once."""

    async def one() -> int:
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            return (await chat_once(client, ip))[0]

    return list(await asyncio.gather(*(one() for _ in range(count))))


def chat(stack: Stack, fake: FakeAnthropic) -> dict[str, Any]:
    url = f"http://127.0.0.1:{stack.env.settings.port}"
    asyncio.run(visitor(url, visitor_ip(999)))  # warm-up: the first graph writes, the cookie key
    calls_before = len(fake.messages)
    started = time.monotonic()
    results = asyncio.run(_all_visitors(url))
    wall = time.monotonic() - started
    sent = [r for rs in results for r in rs]
    answered = [r for r in sent if r[0] == 200 and r[2]]
    calls = (len(fake.messages) - calls_before) / max(1, len(answered))
    api_ms = round(round(calls) * API_DELAY_S * 1000)
    added = [ms - api_ms for status, ms, ok in sent if status == 200 and ok]
    statuses = [s for s, _, _ in sent]
    one_ip = asyncio.run(crowd(url, visitor_ip(998), RATE_LIMIT + 10))
    return {
        "visitors": VISITORS,
        "messages": len(sent),
        "wall_s": round(wall, 1),
        "messages_per_s": round(len(sent) / wall, 2),
        "api_calls_per_message": round(calls, 2),
        "api_ms_per_message": api_ms,
        "total_ms": figures([ms for s, ms, ok in sent if s == 200 and ok]),
        "added_ms": figures(added),
        "errors": len(sent) - len(answered),
        "rate_limited_many_ips": statuses.count(429),
        "one_ip": {
            "sent": len(one_ip),
            "passed": one_ip.count(200),
            "limited_429": one_ip.count(429),
            "limit": RATE_LIMIT,
            "holds": one_ip.count(200) == RATE_LIMIT and one_ip.count(429) == 10,
        },
    }


async def _all_visitors(url: str) -> list[list[tuple[int, float, bool]]]:
    return list(await asyncio.gather(*(visitor(url, visitor_ip(n)) for n in range(VISITORS))))


# --- search ------------------------------------------------------------------------------------


async def searchers(
    sock: Path, account: str, queries: list[str]
) -> tuple[list[float], Counter[str]]:
    """Every client's searches at once: the times of those answered, the errors by message."""
    caller = Caller(account_id=account).to_wire()
    times: list[float] = []
    errors: Counter[str] = Counter()

    async def client(offset: int) -> None:
        rpc = RpcClient(sock, timeout=120)
        for i in range(SEARCHES):
            query = queries[(offset * SEARCHES + i) % len(queries)]
            started = time.perf_counter()
            try:
                await rpc.call("search", {"query": query, "limit": 10, "caller": caller})
            except RpcError as err:
                errors[str(err)[:160]] += 1
                continue
            times.append((time.perf_counter() - started) * 1000)

    await asyncio.gather(*(client(n) for n in range(SEARCH_CLIENTS)))
    return times, errors


def search(home: Path) -> dict[str, Any]:
    settings = load_settings(base_environ())
    embedder = Embedder(configured_model(settings), max_chars=8000)
    data = home / "search"
    data.mkdir()
    account = create_account(data / "accounts", "Bench Owner")
    with neo4j_server(data) as (uri, password):
        load_s = asyncio.run(
            fill_account(embedder, uri, password, settings.cache_dir, NODES, account.id)
        )
        rng, seen = random.Random(7), set[str]()
        queries = [q for t in QUERY_TEMPLATES for q in distinct(t, 30, rng, seen)]
        rng.shuffle(queries)
        embedder.close()
        env = account_env(data, runtime_dir("maxy-load-"), account.id, MAXY_NEO4J_URI=uri)
        engine = Process(maxy("engine"), env, home / "engine.log")
        try:
            sock = load_settings(env).engine_socket
            wait_until(lambda: _healthy(sock, account.id), 180, f"the engine\n{engine.output()}")
            asyncio.run(searchers(sock, account.id, queries[:20]))  # warm-up
            started = time.monotonic()
            times, errors = asyncio.run(searchers(sock, account.id, queries))
            wall = time.monotonic() - started
        finally:
            engine.stop()
    return {
        "nodes": NODES,
        "load_s": round(load_s, 1),
        "clients": SEARCH_CLIENTS,
        "searches": len(times) + sum(errors.values()),
        "answered_per_s": round(len(times) / wall, 2),
        "ms": figures(times),
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
    }


def _healthy(sock: Path, account: str) -> bool:
    try:
        caller = Caller(account_id=account).to_wire()
        return bool(
            asyncio.run(RpcClient(sock, timeout=10).call("health", {"caller": caller}))["ok"]
        )
    except Exception:  # not up yet: the socket is missing or refuses
        return False


# --- admin -------------------------------------------------------------------------------------


async def tab(
    url: str,
    headers: dict[str, str],
    row_id: str,
    seen: list[tuple[int, float]],
    pages: list[float],
) -> None:
    """One open admin tab: the sessions event stream, and the page loaded again and again."""
    complete = asyncio.Event()  # the last line has arrived
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:

        async def feed() -> None:
            async with client.stream("GET", "/api/admin/sessions/events") as answer:
                assert answer.status_code == 200, await answer.aread()
                async for event in sse_events(answer):
                    data = event.data if isinstance(event.data, dict) else {}
                    if event.event == "row-updated" and data.get("id") == row_id:
                        seen.append((int(data["row"].get("lines") or 0), event.at))
                        if seen[-1][0] >= WRITES:
                            complete.set()

        reader = asyncio.create_task(feed())
        try:
            for _ in range(PAGE_LOADS):
                started = time.perf_counter()
                answer = await client.get("/admin/sessions")
                assert answer.status_code == 200, answer.status_code
                pages.append((time.perf_counter() - started) * 1000)
                await asyncio.sleep(random.uniform(0.2, 0.6))
            with contextlib.suppress(TimeoutError):  # what never arrived counts as missed
                await asyncio.wait_for(complete.wait(), 60)
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)


async def stream_transcript(transcript: Path, written: dict[int, float]) -> None:
    """Append WRITES transcript lines 20-50 ms apart, as a turn being streamed writes them."""
    await asyncio.sleep(1.0)  # every tab has its stream open
    transcript.parent.mkdir(parents=True, exist_ok=True)
    with transcript.open("ab") as handle:
        for n in range(1, WRITES + 1):
            entry = {"type": "user", "message": {"role": "user", "content": f"write {n}"}}
            written[n] = time.monotonic()
            handle.write((json.dumps(entry) + "\n").encode())
            handle.flush()
            await asyncio.sleep(random.uniform(0.02, 0.05))


async def tabs(url: str, headers: dict[str, str], row: dict[str, Any], transcript: Path) -> Any:
    seen: list[list[tuple[int, float]]] = [[] for _ in range(TABS)]
    pages: list[float] = []
    written: dict[int, float] = {}
    jobs = [tab(url, headers, row["id"], seen[n], pages) for n in range(TABS)]
    await asyncio.wait_for(asyncio.gather(stream_transcript(transcript, written), *jobs), 600)
    deltas: list[float] = []
    missed = 0
    for events in seen:
        for n, at in written.items():
            first = next((when for lines, when in events if lines >= n), None)
            if first is None:
                missed += 1
            else:
                deltas.append((first - at) * 1000)
    return pages, deltas, missed


def admin(stack: Stack) -> dict[str, Any]:
    settings = stack.env.settings
    url = f"http://127.0.0.1:{settings.port}"
    stack.admin_cookies()  # sets the PIN: until then the admin routes answer setup-required
    headers = {**admin_headers(settings), "host": f"maxy.local:{settings.port}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        answer = client.post("/api/admin/sessions/spawn", json={})
        assert answer.status_code == 201, answer.text
        row = answer.json()["row"]
        claude = settings.accounts_dir / stack.env.account_id / "claude" / "projects"
        slug = "".join(c if c.isalnum() else "-" for c in row["cwd"])
        try:
            pages, deltas, missed = asyncio.run(
                tabs(url, headers, row, claude / slug / f"{row['id']}.jsonl")
            )
        finally:
            client.post(f"/api/admin/sessions/{row['id']}/stop")
    return {
        "tabs": TABS,
        "transcript_lines": WRITES,
        "page_ms": figures(pages),
        "delta_ms": figures(deltas),
        "deltas_missed": missed,
    }


# --- the run -----------------------------------------------------------------------------------


def report(result: dict[str, Any]) -> None:
    print()
    print(f"{'measure':<52}{'n':>7}{'p50':>9}{'p95':>9}{'max':>9}")

    def row(label: str, f: dict[str, float]) -> None:
        cells = [f.get(k, "-") for k in ("n", "p50", "p95", "max")]
        print(
            f"{label:<52}" + "".join(f"{c:>{w}}" for c, w in zip(cells, (7, 9, 9, 9), strict=True))
        )

    if chat := result.get("chat"):
        row(f"chat: message to done, {chat['visitors']} visitors (ms)", chat["total_ms"])
        row(
            f"chat: added beyond the API's {chat['api_ms_per_message']:.0f} ms (ms)",
            chat["added_ms"],
        )
    if found := result.get("search"):
        row(f"search: {found['clients']} clients at {found['nodes']} nodes (ms)", found["ms"])
    if tabs_ := result.get("admin"):
        row(f"admin: Sessions page, {tabs_['tabs']} tabs (ms)", tabs_["page_ms"])
        row("admin: transcript write -> SSE at every tab (ms)", tabs_["delta_ms"])
    print()
    if chat:
        one = chat["one_ip"]
        print(
            f"chat: {chat['messages']} messages in {chat['wall_s']} s "
            f"({chat['messages_per_s']}/s), {chat['api_calls_per_message']} API calls each, "
            f"errors {chat['errors']}, 429s across many addresses {chat['rate_limited_many_ips']}"
        )
        print(
            f"chat: one address, {one['sent']} at once: {one['passed']} passed, "
            f"{one['limited_429']} got 429 (limit {one['limit']}/min): "
            f"{'holds' if one['holds'] else 'DOES NOT hold'}"
        )
    if found:
        print(
            f"search: {found['searches']} searches, {found['answered_per_s']}/s answered, "
            f"errors {found['errors']} (graph loaded in {found['load_s']} s)"
        )
        for kind, count in found["error_kinds"].items():
            print(f"  {count} x {kind}")
    if tabs_:
        print(f"admin: deltas a tab never saw: {tabs_['deltas_missed']}")
    print(f"load average {result['loadavg']} on {os.cpu_count()} cores (other work may share them)")
    print(f"wall {result['wall_s']} s")
    print(json.dumps(result, separators=(",", ":")))


def main() -> None:
    started = time.monotonic()
    home = Path(tempfile.mkdtemp(prefix="maxy-bench-load-"))
    result: dict[str, Any] = {"bench": "load", "parts": sorted(PARTS)}
    try:
        if PARTS & {"chat", "admin"}:
            settings = load_settings(base_environ())
            with FakeAnthropic() as fake:
                fake.always(Reply(text=VERDICT, delay=API_DELAY_S), model=settings.gateway_model)
                fake.always(
                    Reply(text=CLASSIFICATION, delay=API_DELAY_S),
                    model=settings.gateway_model,
                    when=classifying,
                )
                fake.always(Reply(text=ANSWER, delay=API_DELAY_S), model=settings.agent_model)
                with supervised_stack(
                    home / "stack",
                    MAXY_ANTHROPIC_BASE_URL=fake.url,
                    MAXY_PUBLIC_HOSTNAMES=PUBLIC_HOST,
                    MAXY_CLAUDE_BIN=str(DOUBLE),
                    CLAUDE_DOUBLE_PYTHON=sys.executable,
                    MAXY_LOG_LEVEL="WARNING",
                ) as stack:
                    give_api_key(stack.env)
                    folder = add_agent(stack.env, "bench", {"displayName": "Bench"})
                    (folder / "IDENTITY.md").write_text("You are the gardener of {{productName}}.")
                    if "chat" in PARTS:
                        result["chat"] = chat(stack, fake)
                        print(f"[bench-load] op=chat {json.dumps(result['chat'])}", flush=True)
                    if "admin" in PARTS:
                        result["admin"] = admin(stack)
        if "search" in PARTS:
            result["search"] = search(home)
    finally:
        shutil.rmtree(home, ignore_errors=True)
        remove_runtime_dirs()
        release_ports()
    result["loadavg"] = loadavg()
    result["wall_s"] = round(time.monotonic() - started, 1)
    report(result)


if __name__ == "__main__":
    main()
