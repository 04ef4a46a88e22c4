"""The soak: mixed traffic against `maxy run` for MAXY_SOAK_MINUTES, memory and fds sampled.

Opt-in (it runs for half an hour by default): ``MAXY_TEST_SOAK=1 just test
tests/faults/test_soak.py``; ``MAXY_SOAK_MINUTES`` (30) sets its length, ``MAXY_SOAK_SAMPLE_S``
(60) the sampling interval. One `maxy run` (its own Neo4j, the Anthropic API replaced by the
local fake, sessions by the `claude` double) takes, round after round: a memory write and a
search on the engine, a visitor's chat message through the edge (as the tunnel delivers it, a
new visitor at one of 750 addresses each time), and every 10th round (from the first) an admin
session spawned through the app, stopped and removed two rounds later. Each interval the RSS
and open descriptors of every role's process tree (the supervisor ``run``, ``neo4j``,
``engine``, ``manager``, ``app``, ``edge``; the double's processes not counted) are sampled.

The bounds, after a warm-up (the first 5 minutes, or the first third of a shorter run):
- RSS: the least-squares growth over the rest of the run is at most max(24 MB, 8 MB per 10
  minutes) for each of our roles, and at most max(96 MB, 32 MB per 10 minutes) for Neo4j (a JVM
  grows its heap towards its -Xmx in steps);
- descriptors: once traffic stops and the stopped sessions are gone, each role holds within
  ±16 (Neo4j ±48) of what it held at the end of the warm-up;
- no role restarted, and no session process is left.
The curves are written to ``tests/artefacts/soak.csv`` and ``tests/artefacts/soak.png`` (RSS
above, descriptors below; the colours are printed as a legend).
"""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance.agents.retrieval import CLASSIFIER_SYSTEM
from tests.fakes.anthropic_api import FakeAnthropic, Reply
from tests.support.auth import admin_headers
from tests.support.png import legend, line_chart
from tests.support.processes import (
    REPO,
    open_fds,
    process_table,
    process_tree,
    rss_mb,
    wait_until,
)
from tests.support.stacks import DOUBLE, Stack, add_agent, give_api_key, supervised_stack

MINUTES = float(os.environ.get("MAXY_SOAK_MINUTES", "30"))
SAMPLE_S = float(os.environ.get("MAXY_SOAK_SAMPLE_S", "60"))
ROLES = ("run", "neo4j", "engine", "manager", "channels", "app", "edge")
RSS_FLOOR_MB, RSS_RATE_MB = 24.0, 8.0  # our roles: max(floor, rate per 10 minutes)
NEO4J_FLOOR_MB, NEO4J_RATE_MB = 96.0, 32.0
FD_SLACK, NEO4J_FD_SLACK = 16, 48
PUBLIC_HOST = "visit.example"
ARTEFACTS = REPO / "tests" / "artefacts"
VERDICT = json.dumps(
    {"verdict": "CLEAN", "injection": False, "query": None, "intent": "question"}
    | {"language": "en", "complexity": "simple"}
)
CLASSIFICATION = json.dumps({"action": "search", "retrievalClass": "general", "query": "roses"})


def classifying(body: dict[str, Any]) -> bool:
    """A request of the query classifier (it shares the gateway's model)."""
    return body.get("system") == CLASSIFIER_SYSTEM


pytestmark = pytest.mark.skipif(
    not os.environ.get("MAXY_TEST_SOAK"),
    reason="a soak of MAXY_SOAK_MINUTES (default 30) minutes: run it with "
    "MAXY_TEST_SOAK=1 just test tests/faults/test_soak.py",
)

Sample = dict[str, Any]  # minute, and per role: rss_mb, fds, pid


@pytest.fixture
def device(tmp_path: Path) -> Iterator[tuple[Stack, FakeAnthropic]]:
    with FakeAnthropic() as fake:
        fake.always(Reply(text=VERDICT, delay=0.05), model="claude-haiku-4-5")
        fake.always(Reply(text=CLASSIFICATION, delay=0.05), "claude-haiku-4-5", classifying)
        fake.always(Reply(text="Water them at dawn.", delay=0.05), model="claude-sonnet-4-6")
        with supervised_stack(
            tmp_path,
            MAXY_ANTHROPIC_BASE_URL=fake.url,
            MAXY_PUBLIC_HOSTNAMES=PUBLIC_HOST,
            MAXY_CLAUDE_BIN=str(DOUBLE),
            CLAUDE_DOUBLE_PYTHON=sys.executable,
            MAXY_STOP_GRACE="1",
        ) as stack:
            give_api_key(stack.env)
            add_agent(stack.env, "soak", {"displayName": "Soak"})
            yield stack, fake


def sample(stack: Stack, minute: float) -> Sample:
    """RSS (MB) and open descriptors of each role's process tree, the double's left out."""
    table = process_table()
    row: Sample = {"minute": round(minute, 2)}
    for role in ROLES:
        pid = stack.processes["run"].proc.pid if role == "run" else stack.supervised_pid(role)
        assert pid is not None, f"`maxy run` never started {role}"
        ours = [pid] if role == "run" else process_tree(pid, table, skip=is_double)
        fds = 0
        for member in ours:
            try:
                fds += open_fds(member)
            except OSError:
                pass  # it ended between the table and now
        row[role] = {"pid": pid, "rss_mb": round(sum(rss_mb(p) for p in ours), 1), "fds": fds}
    return row


def is_double(argv: list[str]) -> bool:
    return any("claude" in Path(arg).name for arg in argv[:2])


def doubles() -> list[int]:
    return [pid for pid, (_, argv) in process_table().items() if is_double(argv)]


class Traffic:
    """One round of mixed traffic at a time."""

    def __init__(self, stack: Stack) -> None:
        self.stack, self.round = stack, 0
        stack.admin_cookies()  # sets the PIN: until then the admin routes answer setup-required
        self.admin = stack.client(None, **admin_headers(stack.env.settings))
        self.edge = httpx.Client(base_url=f"http://127.0.0.1:{stack.env.settings.port}", timeout=60)
        self.sessions: list[tuple[int, str]] = []  # (round spawned, id)
        self.failures: list[str] = []

    def step(self) -> None:
        n = self.round = self.round + 1
        written = self.stack.rpc("write", {"label": "Note", "properties": {"name": f"Soak {n}"}})
        self.check(bool(written.get("id")), f"write {n}: {written}")
        found = self.stack.rpc("search", {"query": f"soak note {n}", "limit": 5})
        self.check("results" in found, f"search {n}: {found}")
        self.chat(n)
        if n % 10 == 1:
            answer = self.admin.post("/api/admin/sessions/spawn", json={"message": f"Soak {n}"})
            self.check(answer.status_code == 201, f"spawn {n}: {answer.status_code} {answer.text}")
            if answer.status_code == 201:
                self.sessions.append((n, answer.json()["row"]["id"]))
        for spawned, session in list(self.sessions):
            if n - spawned >= 2:
                self.end(session)
                self.sessions.remove((spawned, session))

    def chat(self, n: int) -> None:
        ip = f"{('192.0.2', '198.51.100', '203.0.113')[n // 250 % 3]}.{n % 250 + 1}"
        headers = {"host": PUBLIC_HOST, "cf-connecting-ip": ip, "cf-ray": "soak"}
        body = {"text": f"How often should I water the roses? ({n})"}
        answer = self.edge.post("/api/public/soak/messages", json=body, headers=headers)
        ok = answer.status_code == 200 and "event: done" in answer.text
        self.check(ok and "event: error" not in answer.text, f"chat {n}: {answer.text[:300]}")

    def end(self, session: str) -> None:
        stopped = self.admin.post(f"/api/admin/sessions/{session}/stop")
        self.check(stopped.status_code == 200, f"stop {session}: {stopped.text}")
        for _ in range(50):  # 409 until the stopped CLI has exited
            removed = self.admin.delete(f"/api/admin/sessions/{session}")
            if removed.status_code != 409:
                break
            time.sleep(0.2)
        # 404: the stop already took the row away (a session that never wrote a transcript).
        self.check(removed.status_code in (200, 404), f"delete {session}: {removed.text}")

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.failures.append(what)

    def close(self) -> None:
        for _, session in self.sessions:
            self.end(session)
        self.admin.close()
        self.edge.close()


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) points."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in points) / spread if spread else 0.0


def write_curves(samples: list[Sample]) -> Path:
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    with (ARTEFACTS / "soak.csv").open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["minute", *(f"{r}_{k}" for r in ROLES for k in ("rss_mb", "fds"))])
        for s in samples:
            out.writerow([s["minute"], *(s[r][k] for r in ROLES for k in ("rss_mb", "fds"))])
    panels = [
        {r: [(s["minute"], float(s[r][k])) for s in samples] for r in ROLES}
        for k in ("rss_mb", "fds")
    ]
    line_chart(ARTEFACTS / "soak.png", panels)
    print(f"[soak] op=curves csv={ARTEFACTS / 'soak.csv'} png={ARTEFACTS / 'soak.png'}")
    print(f"[soak] op=legend {legend(panels)} (RSS MB above, descriptors below)")
    return ARTEFACTS / "soak.png"


@pytest.mark.timeout(MINUTES * 60 + 900)
def test_mixed_traffic_grows_no_memory_and_no_descriptors(
    device: tuple[Stack, FakeAnthropic],
) -> None:
    stack, _ = device
    traffic = Traffic(stack)
    started = time.monotonic()
    deadline = started + MINUTES * 60
    warmup_min = min(5.0, MINUTES / 3)
    samples = [sample(stack, 0.0)]
    try:
        while time.monotonic() < deadline:
            traffic.step()
            if time.monotonic() - started >= len(samples) * SAMPLE_S:
                samples.append(sample(stack, (time.monotonic() - started) / 60))
                print(f"[soak] op=sample {json.dumps(samples[-1])}", flush=True)
    finally:
        traffic.close()
    wait_until(lambda: not doubles(), 60, "every session process to end")
    time.sleep(5)  # let closed connections and finished requests release what they held
    samples.append(sample(stack, (time.monotonic() - started) / 60))
    write_curves(samples)
    print(f"[soak] op=done rounds={traffic.round} samples={len(samples)}")
    assert not traffic.failures, traffic.failures[:10]

    for role in ROLES:
        pids = {s[role]["pid"] for s in samples}
        assert len(pids) == 1, f"{role} restarted during the soak: pids {sorted(pids)}"
    settled = [s for s in samples if s["minute"] >= warmup_min]
    assert len(settled) >= 2, "too short a run to measure growth: raise MAXY_SOAK_MINUTES"
    span = settled[-1]["minute"] - settled[0]["minute"]
    problems = []
    for role in ROLES:
        floor, rate = (
            (NEO4J_FLOOR_MB, NEO4J_RATE_MB) if role == "neo4j" else (RSS_FLOOR_MB, RSS_RATE_MB)
        )
        growth = slope([(s["minute"], s[role]["rss_mb"]) for s in settled]) * span
        allowed = max(floor, rate * span / 10)
        print(f"[soak] op=rss role={role} growth_mb={growth:.1f} allowed_mb={allowed:.1f}")
        if growth > allowed:
            problems.append(f"{role} RSS grew {growth:.1f} MB in {span:.1f} min (> {allowed:.1f})")
        slack = NEO4J_FD_SLACK if role == "neo4j" else FD_SLACK
        base, end = settled[0][role]["fds"], samples[-1][role]["fds"]
        print(f"[soak] op=fds role={role} baseline={base} end={end} slack={slack}")
        if abs(end - base) > slack:
            problems.append(f"{role} holds {end} descriptors, {base} after the warm-up (±{slack})")
    assert not problems, problems
