"""Neo4j SIGKILLed in the middle of a burst of writes and ingests from 10 concurrent clients.

Each run sends 1,000 calls through the engine's RPC socket (every tenth an ingest), SIGKILLs the
Java server after a seeded number of them have been issued, and lets its supervisor bring it
back: `maxy run` (the development supervisor) in one test, `maxy neo4j run` restarted as its
systemd unit's ``Restart=`` says in the other. Afterwards every acknowledged write is in the
graph (an acknowledged ingest with all its sections and chunks), every failed one was answered
with an engine error code (never an ``internal`` bug, never a hang), the edge's /healthz said
Neo4j was down during the outage, and the same engine process (not a restarted one) serves
again. ``MAXY_FAULT_RUNS`` sets how many seeded runs each test makes (default one under `maxy run`
and one under the unit, as each restart of Neo4j costs seconds; 20 for the full proof); each run
prints one line of figures. ``MAXY_FAULT_CALLS`` (default 1,000) sets the calls of a run.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import neo4j
import pytest

from appliance.core.accounts import create_account
from appliance.core.identity import Caller
from appliance.core.proc import pid_alive
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RemoteError, RpcError
from tests.support.processes import (
    REPO,
    Env,
    Process,
    get_health,
    maxy,
    neo4j_pid,
    private_neo4j,
    runtime_dir,
    wait_until,
    wait_until_async,
)
from tests.support.stacks import Stack, account_env, running_stack, supervised_stack

RUNS = int(os.environ.get("MAXY_FAULT_RUNS", "1"))
UNIT_RUNS = int(os.environ.get("MAXY_FAULT_RUNS", "1"))  # the unit's variant: one by default
CLIENTS = 10
CALLS = int(os.environ.get("MAXY_FAULT_CALLS", "1000"))  # per run, across the clients
INGEST_EVERY = 10  # every tenth call of a client is an ingest
# What a write may fail with while Neo4j is away: the graph is unavailable, or (while the
# restarted server opens its database) it answers with a transient error.
OUTAGE_CODES = frozenset({"graph-unavailable", "graph-query-failed"})
UNIT = REPO / "image" / "rootfs" / "usr" / "lib" / "systemd" / "system" / "maxy-neo4j.service"
NAMESPACE = uuid.UUID("0b4c2f8e-9d1a-4e5b-8c7d-6a5f4e3d2c1b")

# One section of one chunk: an ingest is three embeds and a handful of statements.
DOCUMENT = """The garden tap of house {key} freezes in winter unless the outside valve is closed."""


@dataclass
class Run:
    """What one seeded run sent, what was answered, and what the edge reported."""

    seed: int
    kill_at: int
    acked: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> the engine's answer
    errors: dict[str, str] = field(default_factory=dict)  # key -> the error code answered
    ingests: set[str] = field(default_factory=set)  # keys of the calls that were ingests
    outage: float = 0.0  # seconds from the kill until /healthz answered 200 again
    saw_down: bool = False

    def node_id(self, key: str) -> str:
        return str(uuid.uuid5(NAMESPACE, key))


def call_params(run: Run, key: str, n: int, ingest: bool) -> tuple[str, Any]:
    if ingest:
        text = DOCUMENT.format(key=key)
        return "ingest", {"title": f"House {key}", "text": text, "attachmentId": key}
    # Numbers only: nothing to embed, so Neo4j (not the model, on shared vCPUs) sets the pace.
    properties = {"seed": run.seed, "call": n}
    return "write", {"label": "Note", "id": run.node_id(key), "properties": properties}


async def burst(stack: Stack, run: Run, kill: Callable[[], None]) -> None:
    """Send the run's calls from CLIENTS concurrent clients; kill Neo4j at ``run.kill_at``."""
    caller = Caller(account_id=stack.env.account_id).to_wire()
    client = RpcClient(stack.env.settings.engine_socket, timeout=60)
    port = stack.env.settings.port
    issued = 0
    kill_now = asyncio.Event()

    async def one(client_no: int, n: int) -> None:
        key = f"s{run.seed}-c{client_no}-{n}"
        ingest = n % INGEST_EVERY == INGEST_EVERY - 1
        if ingest:
            run.ingests.add(key)
        method, params = call_params(run, key, n, ingest)
        try:
            run.acked[key] = await client.call(method, {**params, "caller": caller})
        except RemoteError as err:
            run.errors[key] = err.code
        except RpcError as err:
            run.errors[key] = f"{type(err).__name__}: {err}"

    async def worker(client_no: int) -> None:
        nonlocal issued
        for n in range(CALLS // CLIENTS):
            issued += 1
            if issued == run.kill_at:
                kill_now.set()
            await one(client_no, n)

    async def health(predicate: Callable[[Any], bool]) -> bool:
        answer = await asyncio.to_thread(get_health, port)
        return answer is not None and predicate(answer)

    async def watch() -> None:
        await kill_now.wait()
        started = time.monotonic()
        kill()

        async def neo4j_down() -> bool:
            return await health(lambda a: a.status_code == 503 and not a.json()["neo4j"]["ok"])

        async def healthy() -> bool:
            return await health(lambda a: a.status_code == 200)

        await wait_until_async(neo4j_down, 60, "/healthz to report Neo4j down", 0.1)
        run.saw_down = True
        await wait_until_async(healthy, 300, "/healthz to recover after the kill", 0.2)
        run.outage = time.monotonic() - started

    await asyncio.gather(watch(), *(worker(c) for c in range(CLIENTS)))


def check_stored(stack: Stack, run: Run) -> tuple[int, int]:
    """Assert every acknowledged call is in the graph; return (lost, errored-but-stored)."""
    uri = stack.env.settings.neo4j_address()
    password = stack.env.settings.neo4j_password_path.read_text().strip()
    notes = [run.node_id(k) for k in run.acked if k not in run.ingests]
    documents = {run.acked[k]["documentId"]: run.acked[k] for k in run.acked if k in run.ingests}
    with neo4j.GraphDatabase.driver(uri, auth=("neo4j", password)) as driver:
        found = driver.execute_query(
            "MATCH (n:Note) WHERE n.id IN $ids AND n.accountId = $account RETURN n.id AS id",
            {"ids": notes + [run.node_id(k) for k in run.errors], "account": stack.env.account_id},
        ).records
        stored_notes = {r["id"] for r in found}
        shapes = driver.execute_query(
            "MATCH (d:KnowledgeDocument) WHERE d.attachmentId IN $keys "
            "OPTIONAL MATCH (d)-[:HAS_SECTION]->(s:Section) "
            "OPTIONAL MATCH (s)-[:HAS_CHUNK]->(c:Chunk) "
            "RETURN d.id AS id, d.attachmentId AS key, count(DISTINCT s) AS sections, "
            "count(DISTINCT c) AS chunks",
            {"keys": sorted(run.ingests)},
        ).records
    stored_docs = {r["id"]: (r["sections"], r["chunks"]) for r in shapes}
    lost = [n for n in notes if n not in stored_notes]
    lost += [
        d
        for d, answer in documents.items()
        if stored_docs.get(d) != (answer["sections"], answer["chunks"])
    ]
    present_keys = {r["key"] for r in shapes} | {
        k for k in run.errors if run.node_id(k) in stored_notes
    }
    assert not lost, f"seed {run.seed}: acknowledged but not stored: {lost[:10]}"
    return len(lost), len(present_keys & set(run.errors))


def one_run(stack: Stack, seed: int, kill: Callable[[], None], engine_pid: int | None) -> Run:
    run = Run(seed, kill_at=random.Random(seed).randrange(CALLS // 10, CALLS * 9 // 10))
    asyncio.run(burst(stack, run, kill))
    assert len(run.acked) + len(run.errors) == CALLS, "every call was answered"
    codes = Counter(code for code in run.errors.values())
    assert set(codes) <= OUTAGE_CODES, f"seed {seed}: unexpected errors {codes}"
    assert run.saw_down
    lost, in_doubt = check_stored(stack, run)
    # The engine reconnected by itself: the same process serves a write again.
    assert stack.rpc("write", {"label": "Note", "properties": {"name": f"after {seed}"}})["id"]
    if engine_pid is not None:
        assert pid_alive(engine_pid), "the engine was not restarted: it reconnected"
    print(
        f"\n[neo4j-kill] seed={seed} kill_at={run.kill_at} acked={len(run.acked)} lost={lost} "
        f"errored={len(run.errors)} errored_but_stored={in_doubt} codes={dict(codes)} "
        f"outage_s={run.outage:.1f}"
    )
    return run


def kill_java(home: Path) -> Callable[[], None]:
    def kill() -> None:
        pid = neo4j_pid(home)
        assert pid is not None and pid_alive(pid), "a Neo4j server to kill"
        os.kill(pid, signal.SIGKILL)

    return kill


@pytest.fixture(scope="module")
def supervised(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with supervised_stack(tmp_path_factory.mktemp("neo4j-kill")) as stack:
        yield stack


@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed", range(RUNS))
def test_neo4j_killed_under_maxy_run_loses_no_acknowledged_write(
    supervised: Stack, seed: int
) -> None:
    home = supervised.env.settings.neo4j_home_path
    engine = supervised.supervised_pid("engine")
    one_run(supervised, seed, kill_java(home), engine)
    assert supervised.supervised_pid("engine") == engine
    assert "op=exited child=neo4j" in supervised.processes["run"].output()


def unit_restart_policy() -> tuple[str, float]:
    """``Restart=`` and ``RestartSec=`` (seconds) of the Neo4j unit on the image."""
    lines = [line for line in UNIT.read_text().splitlines() if "=" in line and line[0] != "#"]
    fields = dict(line.split("=", 1) for line in lines)
    return fields["Restart"], float(fields["RestartSec"].removesuffix("s"))


class UnitRestarts:
    """`maxy neo4j run` restarted the way systemd applies its unit's ``Restart=always``."""

    def __init__(self, env: Env, logs: Path) -> None:
        self.env = env
        self.logs = logs
        policy, self.delay = unit_restart_policy()
        assert policy == "always", f"the unit restarts Neo4j with Restart={policy}"
        self.codes: list[int] = []
        self.stopping = threading.Event()
        self.process = self._start()
        self.thread = threading.Thread(target=self._supervise, daemon=True)
        self.thread.start()

    def _start(self) -> Process:
        log = self.logs / f"neo4j-run-{len(self.codes)}.log"
        return Process(maxy("neo4j", "run"), self.env.vars, log)

    def _supervise(self) -> None:
        while not self.stopping.is_set():
            code = self.process.proc.poll()
            if code is None:
                self.stopping.wait(0.1)
                continue
            self.process.stop()
            self.codes.append(code)
            if not self.stopping.wait(self.delay):
                self.process = self._start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(10)
        self.process.stop()


@pytest.fixture(scope="module")
def unit_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, UnitRestarts]]:
    root = tmp_path_factory.mktemp("neo4j-unit")
    data = root / "data"
    account = create_account(data / "accounts", "Test Owner")
    variables = account_env(data, runtime_dir("maxy-run-"), account.id, **private_neo4j())
    env = Env(variables, account.id)
    logs = root / "logs"
    logs.mkdir()
    units = UnitRestarts(env, logs)
    # As the units are ordered: the engine starts once Neo4j has its (port 0: kernel-chosen) port.
    wait_until(env.settings.bolt_port_file.exists, 180, "Neo4j's first start", 0.2)
    try:
        with running_stack(env, logs, "engine", "edge") as stack:
            yield stack, units
    finally:
        units.stop()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed", range(100, 100 + UNIT_RUNS))
def test_neo4j_killed_under_its_unit_loses_no_acknowledged_write(
    unit_stack: tuple[Stack, UnitRestarts], seed: int
) -> None:
    stack, units = unit_stack
    wait_until(stack.engine_healthy, 120, f"the engine healthy\n{stack.output()}")
    before = len(units.codes)
    engine = stack.processes["engine"].proc.pid
    one_run(stack, seed, kill_java(stack.env.settings.neo4j_home_path), engine)
    # The launcher exited with a failure status (so even Restart=on-failure would restart it).
    assert len(units.codes) == before + 1 and units.codes[-1] != 0, units.codes
