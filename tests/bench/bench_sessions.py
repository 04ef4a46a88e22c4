"""Session manager latency: spawn-to-ready, and a transcript write reaching two SSE clients.

Run with ``just bench-sessions``. Starts its own ``maxy manager`` (temporary data and runtime
directories) driving the ``claude`` test double in real PTYs, then measures

- spawn-to-ready: ``POST /rc-spawn`` until it answers, i.e. until the double's PID file was
  seen (each session is stopped again, untimed);
- write-to-delta: one line appended to a live session's transcript until the ``row-updated``
  delta carrying it is read by each of two connected ``/events`` clients (target p95 ≤ 100 ms).

Prints a table and ends with one line of JSON holding every figure. Nothing asserts on times.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # `tests` as a package

from tests.sessions.conftest import Feed, Manager, launch

SPAWNS, SPAWN_WARMUP = 100, 5
WRITES, WRITE_WARMUP = 300, 10
DELTA_TARGET_MS = 100.0


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * len(ordered)) - 1))]


def spawn_to_ready(manager: Manager) -> list[float]:
    times: list[float] = []
    with manager.client() as client:
        for i in range(SPAWN_WARMUP + SPAWNS):
            started = time.perf_counter()
            response = client.post("/rc-spawn", json={})
            elapsed = (time.perf_counter() - started) * 1000
            assert response.status_code == 201, response.text
            client.post(f"/{response.json()['row']['id']}/stop")
            if i >= SPAWN_WARMUP:
                times.append(elapsed)
    return times


def write_to_delta(manager: Manager) -> dict[str, list[float]]:
    row = manager.spawn()  # live, no transcript yet: every line below is a transcript write
    project = manager.config_dir / "projects"
    cwd = row["cwd"]
    transcript = project / "".join(c if c.isalnum() else "-" for c in cwd) / f"{row['id']}.jsonl"
    feeds = {"client-a": Feed(manager.socket), "client-b": Feed(manager.socket)}
    for feed in feeds.values():
        assert feed.next().event == "snapshot"
    delays: dict[str, list[float]] = {name: [] for name in feeds}
    rng = random.Random(7)
    with transcript.open("ab") as handle:
        for n in range(1, WRITE_WARMUP + WRITES + 1):
            entry = {"type": "user", "message": {"role": "user", "content": f"write {n}"}}
            written = time.monotonic()
            handle.write((json.dumps(entry) + "\n").encode())
            handle.flush()

            def carries(event: Any, n: int = n) -> bool:
                return bool(event.data.get("id") == row["id"] and event.data["row"]["lines"] >= n)

            for name, feed in feeds.items():
                event = feed.until(carries)[-1]
                if n > WRITE_WARMUP:
                    delays[name].append((event.at - written) * 1000)
            time.sleep(rng.uniform(0.01, 0.04))  # writes arrive apart, as a CLI's do
    for feed in feeds.values():
        feed.close()
    manager.stop(row["id"])
    return delays


def main() -> None:
    wall = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="bench-sessions-"))
    manager = launch(base)
    try:
        ready = spawn_to_ready(manager)
        delays = write_to_delta(manager)
    finally:
        manager.shutdown()
        shutil.rmtree(manager.runtime_dir, ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)
    both = delays["client-a"] + delays["client-b"]
    result: dict[str, Any] = {
        "bench": "sessions",
        "spawn_to_ready_ms": {
            "n": len(ready),
            "p50": round(percentile(ready, 50), 1),
            "p95": round(percentile(ready, 95), 1),
            "mean": round(statistics.fmean(ready), 1),
        },
        "write_to_delta_ms": {
            name: {
                "n": len(values),
                "p50": round(percentile(values, 50), 1),
                "p95": round(percentile(values, 95), 1),
                "max": round(max(values), 1),
            }
            for name, values in delays.items()
        },
        "write_to_delta_p95_both_ms": round(percentile(both, 95), 1),
        "target_delta_p95_ms": DELTA_TARGET_MS,
        "delta_target_met": percentile(both, 95) <= DELTA_TARGET_MS,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "wall_s": round(time.monotonic() - wall, 1),
    }
    print("\nsession manager latency (ms)")
    print(f"{'measure':<34}{'n':>6}{'p50':>9}{'p95':>9}")
    spawn = result["spawn_to_ready_ms"]
    print(
        f"{'spawn-to-ready (POST /rc-spawn)':<34}{spawn['n']:>6}{spawn['p50']:>9}{spawn['p95']:>9}"
    )
    for name, figures in result["write_to_delta_ms"].items():
        label = f"transcript write -> SSE, {name}"
        print(f"{label:<34}{figures['n']:>6}{figures['p50']:>9}{figures['p95']:>9}")
    verdict = "met" if result["delta_target_met"] else "NOT met"
    p95_both = result["write_to_delta_p95_both_ms"]
    print(
        f"\ndelta p95 over both clients: {p95_both} ms (target <= {DELTA_TARGET_MS:.0f}: {verdict})"
    )
    print(f"load average {result['loadavg']} on 2 cores (other work may share the machine)")
    print(f"wall {result['wall_s']} s")
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    main()
