"""The scheduling plugin through the running roles: a real engine, a real `maxy manager` whose
due loop fires reminders as admin turns of the `claude` double, and the plugin's MCP server
started by those sessions.

Reminders are created through the engine with a "now" in the past (the engine takes the clock
of the call), so they are already due when the manager starts — as after a power cut — and no
test waits for time to pass.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from appliance.core.accounts import create_account
from appliance.core.identity import Caller
from appliance.memory.graph import Graph
from appliance.memory.scheduling import Scheduling
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RpcError
from tests.sessions.conftest import Manager, restart, wait_for_health
from tests.sessions.test_admin_memory import blocks, transcript
from tests.support.processes import Neo4jServer, Process, maxy, runtime_dir, wait_until
from tests.support.stacks import manager_env

pytestmark = pytest.mark.timeout(300)

PARIS = ZoneInfo("Europe/Paris")


@dataclass
class Stack:
    env: dict[str, str]
    data: Path
    runtime: Path
    account_id: str
    engine: Process
    record: Path
    logs: Path

    def rpc(self, method: str, params: dict[str, Any]) -> Any:
        caller = Caller(account_id=self.account_id).to_wire()
        client = RpcClient(self.runtime / "engine.sock", timeout=30)
        return asyncio.run(client.call(method, {**params, "caller": caller}))

    def start_manager(self) -> Manager:
        process = Process(maxy("manager"), self.env, self.logs / "manager.log")
        manager = Manager(process, self.env, self.data, self.runtime, self.account_id)
        wait_for_health(manager)
        return manager

    def recorded(self) -> list[dict[str, Any]]:
        """What each spawn of the double was given."""
        return [json.loads(path.read_text()) for path in sorted(self.record.glob("*.json"))]


def engine_up(stack: Stack) -> bool:
    try:
        return bool(stack.rpc("health", {})["ok"])
    except RpcError:
        return False


@pytest.fixture(scope="module")
def stack(neo4j_server: Neo4jServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("scheduling")
    data = root / "data"
    runtime = runtime_dir("maxy-sch-")
    account = create_account(data / "accounts", "Clock Owner", time_zone="Europe/Paris")
    record = root / "record"
    extra = {
        "MAXY_NEO4J_URI": neo4j_server.uri,
        "MAXY_NEO4J_PASSWORD_FILE": str(neo4j_server.password_file),
        "CLAUDE_DOUBLE_RECORD": str(record),
    }
    env = manager_env(data, runtime, account.id, extra, {})
    engine = Process(maxy("engine"), env, root / "engine.log")
    running = Stack(env, data, runtime, account.id, engine, record, root)
    try:
        wait_until(lambda: engine_up(running), 120, f"the engine\n{engine.output()}")
        yield running
    finally:
        engine.stop()


def message(seen: dict[str, Any]) -> str:
    argv: list[str] = seen["argv"]
    return argv[argv.index("--") + 1]


def catch_up(manager: Manager, fired: int) -> None:
    line = f"[scheduling] op=catch-up fired={fired}"
    wait_until(lambda: line in manager.output(), 60, f"{line!r}\n{manager.output()}", 0.1)


def local(moment: datetime) -> str:
    return moment.astimezone(PARIS).replace(tzinfo=None).isoformat(timespec="minutes")


def test_reminders_missed_while_down_fire_once_on_start_and_never_again(
    stack: Stack, neo4j_server: Neo4jServer
) -> None:
    now = datetime.now(UTC)
    # Made three days ago: a daily one first due then (so due three times since), and a
    # one-off that came due yesterday.
    made_at = (now - timedelta(days=3, hours=1)).isoformat()
    daily = stack.rpc(
        "reminder.create",
        {
            "name": "Take the pills",
            "dueDate": local(now - timedelta(days=3) + timedelta(hours=2)),
            "rrule": "FREQ=DAILY",
            "description": "The blue box on the shelf.",
            "now": made_at,
        },
    )
    once = stack.rpc(
        "reminder.create",
        {"name": "Call Anna", "dueDate": local(now - timedelta(days=1)), "now": made_at},
    )
    # Another account's reminder, due as well, in the same graph.
    stranger = Caller(account_id=f"other-{stack.account_id}")

    async def theirs() -> str:
        graph = Graph(neo4j_server.uri, "neo4j", neo4j_server.password)
        try:
            store = Scheduling(graph, _no_embed, "none", lambda: PARIS, lambda: now)
            made = await store.create(
                stranger,
                "reminder",
                {"name": "Their secret", "dueDate": local(now - timedelta(days=1))},
                now - timedelta(days=2),
            )
            return str(made["id"])
        finally:
            await graph.close()

    their_id = asyncio.run(theirs())

    manager = stack.start_manager()
    try:
        catch_up(manager, 2)
        seen = stack.recorded()
        assert len(seen) == 2
        texts = {message(s).splitlines()[0]: message(s) for s in seen}
        assert set(texts) == {"Reminder due: Take the pills", "Reminder due: Call Anna"}
        pills = texts["Reminder due: Take the pills"]
        assert "2 more times while the device was off" in pills
        assert "The blue box on the shelf." in pills and "It repeats (FREQ=DAILY)" in pills
        assert f"Scheduled reminder {daily['id']}" in pills
        assert "(Europe/Paris)" in pills
        assert "Their secret" not in json.dumps(seen)
        for spawned in seen:
            sidecar_id = spawned["argv"][spawned["argv"].index("--session-id") + 1]
            row = manager.wait_row(sidecar_id, lambda r: r["state"] == "archived", 30)
            assert row["channel"] == "scheduling" and row["closeAfterTurn"] is True
            assert row["kind"] == "admin" and not row["hidden"]
        listed = stack.rpc("reminder.list", {"status": "all"})["reminders"]
        by_id = {r["id"]: r for r in listed}
        assert set(by_id) == {daily["id"], once["id"]}
        assert by_id[daily["id"]]["fireCount"] == 1 and by_id[daily["id"]]["status"] == "active"
        assert by_id[once["id"]]["fireCount"] == 1 and by_id[once["id"]]["status"] == "done"
        assert datetime.fromisoformat(by_id[daily["id"]]["next"]) > now
        fires = re.findall(
            r"\[scheduling\] op=fire id=(\S+) .* session=(\S+) error=None", manager.output()
        )
        assert {item for item, _ in fires} == {daily["id"], once["id"]}

        # A restart (or the next boot) fires nothing already fired.
        manager = restart(manager)
        catch_up(manager, 0)
        assert len(stack.recorded()) == 2
    finally:
        manager.shutdown()

    async def untouched() -> dict[str, Any]:
        graph = Graph(neo4j_server.uri, "neo4j", neo4j_server.password)
        try:
            rows, _ = await graph.run(
                "MATCH (n:Reminder {id: $id}) RETURN properties(n) AS p", {"id": their_id}
            )
            return dict(rows[0]["p"])
        finally:
            await graph.run("MATCH (n {accountId: $a}) DETACH DELETE n", {"a": stranger.account_id})
            await graph.close()

    still = asyncio.run(untouched())
    assert still["fireCount"] == 0 and still["status"] == "active"


async def _no_embed(text: str) -> list[float]:
    raise AssertionError("a reminder is never embedded")


def test_sessions_resolve_times_through_the_scheduling_server(stack: Stack) -> None:
    manager = stack.start_manager()
    try:
        catch_up(manager, 0)
        admin = manager.spawn("Please resolve the time tomorrow at 9.")
        public = manager.spawn("Hello! resolve the time in 2 hours.", kind="public", agent="maxy")
        for row in (admin, public):
            manager.wait_row(row["id"], lambda r: r["status"] == "idle" and r["lines"] >= 6, 90)
            entries = transcript(manager, row["id"])
            [use] = blocks(entries, "tool_use")
            [result] = blocks(entries, "tool_result")
            assert use["name"] == "mcp__scheduling__time-resolve", use
            assert not result.get("is_error"), result
            answer = json.loads(result["content"][0]["text"])
            assert answer["timeZone"] == "Europe/Paris" and answer["precision"] == "time"
            resolved = datetime.fromisoformat(answer["resolved"])
            assert resolved.utcoffset() == resolved.astimezone(PARIS).utcoffset()
        assert json.loads(result["content"][0]["text"])["past"] is False
    finally:
        manager.stop_all()
        manager.shutdown()
