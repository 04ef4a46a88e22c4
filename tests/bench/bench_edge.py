"""Edge proxy overhead and SSE fan-out latency: the real `maxy edge` in front of a test app.

Run with ``just bench-edge``. Starts the test upstream (tests/edge/upstream.py, Granian on a
Unix socket) and `maxy edge` (Granian on loopback TCP), then measures:

- proxy overhead: latency of a small GET through the edge vs straight to the app's socket, both
  with an ``httpx.AsyncClient`` (one request at a time, blocks of the two paths interleaved,
  after a warm-up);
- SSE fan-out: 100 clients hold an event stream through the edge; the app publishes an event
  carrying its CLOCK_MONOTONIC send time; we time until the LAST of the 100 clients has it, 20
  times (the same with the clients on the app's socket directly, for reference).

Prints a table, the targets (proxy p50 overhead <= 1 ms; an event reaches all 100 clients
within 50 ms), the load average, and ends with one line of JSON holding every figure.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from appliance.core.accounts import create_account
from appliance.core.config import load_settings
from appliance.core.proc import stop_group

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # `tests` as a package
from tests.support.figures import percentile
from tests.support.stacks import account_env

REPO = Path(__file__).resolve().parent.parent.parent
REQUESTS, WARMUP, BLOCK = 3000, 300, 100
CLIENTS, ROUNDS = 100, 20
OVERHEAD_TARGET_MS, FANOUT_TARGET_MS = 1.0, 50.0
_DATA = re.compile(rb"data: (\d+)\n")


@contextmanager
def started(args: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            args, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            yield proc
        finally:
            stop_group(proc, 10)


def wait_for(check: Callable[[], bool], what: str, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (httpx.TransportError, OSError):
            pass
        time.sleep(0.1)
    raise SystemExit(f"{what} did not come up in {timeout:.0f} s:\n{log.read_text()}")


@contextmanager
def stack(home: Path) -> Iterator[tuple[str, Path]]:
    """The upstream and the edge, running; yields (edge URL, app socket)."""
    runtime = Path(tempfile.mkdtemp(prefix="maxy-bench-edge-", dir="/tmp"))
    account = create_account(home / "data" / "accounts", "Bench Owner")
    env = account_env(home / "data", runtime, account.id, MAXY_LOG_LEVEL="WARNING")
    sock = load_settings(env).app_socket
    url = f"http://127.0.0.1:{env['MAXY_PORT']}"
    up_log, edge_log = home / "upstream.log", home / "edge.log"
    try:
        with started([sys.executable, "-m", "tests.edge.upstream", str(sock)], env, up_log):
            wait_for(lambda: _answers(sock), "the test upstream", up_log)
            with started([sys.executable, "-m", "appliance", "edge"], env, edge_log):
                wait_for(lambda: httpx.get(url + "/echo").status_code == 200, "the edge", edge_log)
                yield url, sock
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def _answers(sock: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as probe:
        probe.connect(str(sock))
    return True


async def timed_gets(client: httpx.AsyncClient, count: int) -> list[float]:
    out = []
    for _ in range(count):
        start = time.perf_counter()
        response = await client.get("/echo")
        await response.aread()
        out.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200
    return out


async def proxy_overhead(url: str, sock: Path) -> dict[str, Any]:
    direct = httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(uds=str(sock)), base_url="http://app"
    )
    edge = httpx.AsyncClient(base_url=url)
    samples: dict[str, list[float]] = {"direct": [], "edge": []}
    async with direct, edge:
        await timed_gets(direct, WARMUP)
        await timed_gets(edge, WARMUP)
        for _ in range(REQUESTS // BLOCK):
            samples["direct"] += await timed_gets(direct, BLOCK)
            samples["edge"] += await timed_gets(edge, BLOCK)
    result: dict[str, Any] = {"requests_per_path": REQUESTS}
    for path, values in samples.items():
        result[path] = {
            "p50_ms": round(statistics.median(values), 3),
            "p99_ms": round(percentile(values, 0.99), 3),
            "mean_ms": round(statistics.fmean(values), 3),
        }
    result["overhead_p50_ms"] = round(result["edge"]["p50_ms"] - result["direct"]["p50_ms"], 3)
    result["overhead_p99_ms"] = round(result["edge"]["p99_ms"] - result["direct"]["p99_ms"], 3)
    return result


Opener = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


async def sse_client(
    open_: Opener, host: str, channel: str, arrivals: asyncio.Queue[int], ready: asyncio.Event
) -> None:
    """Hold one event stream; put each stamped event's latency (ns) on the queue."""
    reader, writer = await open_()
    request = f"GET /sse?channel={channel} HTTP/1.1\r\nHost: {host}\r\n\r\n"
    writer.write(request.encode())
    buffer = b""
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                return
            now = time.monotonic_ns()
            buffer += data
            if not ready.is_set() and b": hello" in buffer:
                ready.set()
            for match in _DATA.finditer(buffer):
                arrivals.put_nowait(now - int(match.group(1)))
            buffer = buffer[buffer.rfind(b"\n") + 1 :]
    finally:
        writer.close()


async def fan_out(open_: Opener, host: str, sock: Path, channel: str) -> dict[str, Any]:
    arrivals: asyncio.Queue[int] = asyncio.Queue()
    readies = [asyncio.Event() for _ in range(CLIENTS)]
    tasks = [asyncio.create_task(sse_client(open_, host, channel, arrivals, r)) for r in readies]
    app = httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(uds=str(sock)), base_url="http://app"
    )
    last_ms: list[float] = []
    try:
        async with app:
            await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 30)
            for round_ in range(ROUNDS + 2):  # the first two warm the path up
                delivered = (await app.post(f"/_publish?channel={channel}&stamp=1")).json()
                assert delivered["delivered"] == CLIENTS, delivered
                latencies = [await asyncio.wait_for(arrivals.get(), 10) for _ in range(CLIENTS)]
                if round_ >= 2:
                    last_ms.append(max(latencies) / 1e6)
                await asyncio.sleep(0.05)  # let the streams go quiet between rounds
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "clients": CLIENTS,
        "rounds": ROUNDS,
        "last_client_p50_ms": round(statistics.median(last_ms), 2),
        "last_client_p95_ms": round(percentile(last_ms, 0.95), 2),
        "last_client_max_ms": round(max(last_ms), 2),
    }


async def run(url: str, sock: Path) -> dict[str, Any]:
    port = int(url.rsplit(":", 1)[1])
    result: dict[str, Any] = {"proxy": await proxy_overhead(url, sock)}
    result["sse_edge"] = await fan_out(
        lambda: asyncio.open_connection("127.0.0.1", port), f"127.0.0.1:{port}", sock, "edge"
    )
    result["sse_direct"] = await fan_out(
        lambda: asyncio.open_unix_connection(str(sock)), "app", sock, "direct"
    )
    return result


def report(result: dict[str, Any]) -> None:
    proxy, edge, direct = result["proxy"], result["sse_edge"], result["sse_direct"]
    print(
        f"\nproxy overhead: small GET /echo, {proxy['requests_per_path']} requests per path, "
        "one at a time (ms)"
    )
    print(f"{'path':<28}{'p50':>9}{'p99':>9}{'mean':>9}")
    for key, label in (("direct", "direct (httpx over UDS)"), ("edge", "through the edge (TCP)")):
        row = proxy[key]
        print(f"{label:<28}{row['p50_ms']:>9.3f}{row['p99_ms']:>9.3f}{row['mean_ms']:>9.3f}")
    print(f"{'overhead':<28}{proxy['overhead_p50_ms']:>9.3f}{proxy['overhead_p99_ms']:>9.3f}")
    print(
        f"\nSSE fan-out: {CLIENTS} clients, {ROUNDS} events, time until the LAST client has it (ms)"
    )
    print(f"{'clients on':<28}{'p50':>9}{'p95':>9}{'max':>9}")
    for label, row in (("the edge", edge), ("the app socket (ref.)", direct)):
        print(
            f"{label:<28}{row['last_client_p50_ms']:>9.2f}{row['last_client_p95_ms']:>9.2f}"
            f"{row['last_client_max_ms']:>9.2f}"
        )
    targets = result["targets"]
    print()
    for name, target in targets.items():
        print(
            f"target {name}: {target['value']} ms <= {target['limit']} ms: "
            f"{'met' if target['met'] else 'not met'}"
        )
    print(
        f"load average {result['loadavg']} on {os.cpu_count()} cores "
        "(the bench, the edge and the app share them; other work may too)"
    )
    print(json.dumps(result, separators=(",", ":")))


def main() -> None:
    """Start the upstream and the edge, measure, report, clean up."""
    started_at = time.monotonic()
    home = Path(tempfile.mkdtemp(prefix="maxy-bench-edge-home-"))
    try:
        with stack(home) as (url, sock):
            result = asyncio.run(run(url, sock))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    overhead = result["proxy"]["overhead_p50_ms"]
    fanout = result["sse_edge"]["last_client_p95_ms"]
    result["targets"] = {
        "proxy_p50_overhead": {
            "value": overhead,
            "limit": OVERHEAD_TARGET_MS,
            "met": overhead <= OVERHEAD_TARGET_MS,
        },
        "sse_100_clients_last_p95": {
            "value": fanout,
            "limit": FANOUT_TARGET_MS,
            "met": fanout <= FANOUT_TARGET_MS,
        },
    }
    result["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    result["wall_s"] = round(time.monotonic() - started_at, 1)
    report(result)


if __name__ == "__main__":
    main()
