"""Admin sessions against a real engine: the <previous-context> block at spawn, and the MCP tool
calls the `claude` double makes through `maxy mcp`, kept in the graph as ToolCall and Task nodes.

One engine and one manager (running the double) share an account and a runtime directory, as
on the device; the double records its argv, so the tests read what each spawn was given.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from appliance.core.accounts import create_account
from appliance.core.identity import Caller
from appliance.memory.graph import Graph
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RpcError
from tests.sessions.conftest import Manager, restart, wait_for_health
from tests.sessions.test_spawn import option
from tests.support.processes import Neo4jServer, Process, maxy, runtime_dir, wait_until
from tests.support.stacks import manager_env

pytestmark = pytest.mark.timeout(240)

WARNING = "[sessions] warn reason=context-unavailable"


@dataclass
class Stack:
    manager: Manager
    engine: Process
    record: Path
    logs: Path

    def rpc(self, method: str, params: dict[str, Any]) -> Any:
        caller = Caller(account_id=self.manager.account_id).to_wire()
        client = RpcClient(self.manager.runtime_dir / "engine.sock", timeout=30)
        return asyncio.run(client.call(method, {**params, "caller": caller}))

    def argv(self, session_id: str) -> list[str]:
        seen: list[str] = json.loads((self.record / f"{session_id}.json").read_text())["argv"]
        return seen


def engine_up(stack: Stack) -> bool:
    try:
        return bool(stack.rpc("health", {})["ok"])
    except RpcError:
        return False


@pytest.fixture(scope="module")
def stack(neo4j_server: Neo4jServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("admin-memory")
    data = root / "data"
    runtime = runtime_dir("maxy-adm-")
    account = create_account(data / "accounts", "Memory Owner")
    record = root / "record"
    extra = {
        "MAXY_NEO4J_URI": neo4j_server.uri,
        "MAXY_NEO4J_PASSWORD_FILE": str(neo4j_server.password_file),
        "CLAUDE_DOUBLE_RECORD": str(record),
    }
    env = manager_env(data, runtime, account.id, extra, {})
    engine = Process(maxy("engine"), env, root / "engine.log")
    manager = Manager(
        Process(maxy("manager"), env, root / "manager.log"), env, data, runtime, account.id
    )
    running = Stack(manager, engine, record, root)
    try:
        wait_until(lambda: engine_up(running), 120, f"the engine\n{engine.output()}")
        wait_for_health(manager)
        yield running
    finally:
        running.manager.shutdown()  # a test may have restarted it
        engine.stop()


def transcript(manager: Manager, session_id: str) -> list[dict[str, Any]]:
    response = manager.request("GET", f"/{session_id}/log")
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines() if line.strip()]


def blocks(entries: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    found = []
    for entry in entries:
        content = (entry.get("message") or {}).get("content")
        if isinstance(content, list):
            found += [b for b in content if isinstance(b, dict) and b.get("type") == kind]
    return found


def test_admin_spawns_start_with_the_previous_context_and_public_ones_never(
    stack: Stack,
) -> None:
    stack.rpc("task.create", {"name": "Renew the car insurance", "priority": "high"})
    stack.rpc(
        "project.create",
        {"name": "Garden shed", "phase": "blocked", "items": [{"name": "Pour the base"}]},
    )
    admin = stack.manager.spawn("good morning", systemPrompt="Be brief.")
    [appended] = option(stack.argv(admin["id"]), "--append-system-prompt")
    assert appended.startswith("<previous-context>\n")
    context, _, own = appended.partition("</previous-context>")
    assert "- [red] Garden shed (blocked, standard) — 0/1 done; the project is blocked" in context
    assert "  - [high] Renew the car insurance" in context
    assert "Pour the base" not in context  # a blocked project holds its tasks back
    # Then the enabled plugins' instructions, then the request's own system prompt.
    plugins, _, own = own.rpartition("</plugin>")
    assert '<plugin name="memory">' in plugins
    assert own == "\n\nBe brief."

    public = stack.manager.spawn("hello", kind="public", systemPrompt="Be kind.")
    argv = stack.argv(public["id"])
    [public_prompt] = option(argv, "--append-system-prompt")
    assert public_prompt.endswith("</plugin>\n\nBe kind.")  # the publicEmbed guide, then its own
    assert '<plugin name="maxy-guide">' in public_prompt and "memory-search" not in public_prompt
    assert not any("previous-context" in arg or "car insurance" in arg for arg in argv)
    stack.manager.stop_all()


def test_the_doubles_tool_calls_are_audited_on_its_conversation(
    stack: Stack, neo4j_server: Neo4jServer
) -> None:
    manager = stack.manager
    row = manager.spawn("Please remember the gate code is 4711. Then search memory for gate code.")
    session_id = row["id"]
    manager.wait_row(session_id, lambda r: r["status"] == "idle" and r["lines"] >= 8, 90)
    entries = transcript(manager, session_id)
    uses, results = blocks(entries, "tool_use"), blocks(entries, "tool_result")
    assert [u["name"] for u in uses] == ["mcp__memory__memory-write", "mcp__memory__memory-search"]
    assert uses[0]["input"] == {"label": "Note", "properties": {"name": "the gate code is 4711"}}
    assert [r["tool_use_id"] for r in results] == [u["id"] for u in uses]
    assert not any(r.get("is_error") for r in results), results
    found = results[1]["content"][0]["text"]
    assert "[Note]" in found and "name: the gate code is 4711" in found
    final = [e for e in entries if e["type"] == "assistant"][-1]["message"]
    assert final["stop_reason"] == "end_turn"

    async def audited() -> list[dict[str, Any]]:
        graph = Graph(neo4j_server.uri, "neo4j", neo4j_server.password)
        try:
            rows, _ = await graph.run(
                "MATCH (c:Conversation {accountId: $a, sessionId: $s})-[:HAS_TOOL_CALL]->"
                "(t:ToolCall) OPTIONAL MATCH (t)-[:PERFORMED]->(k:Task)-[:PRODUCED]->(n:Note) "
                "RETURN t {.tool, .plugin, .input, .output, .isError, .sessionId, .accountId, "
                ".startedAt, .endedAt} AS call, k.status AS task, n.name AS produced "
                "ORDER BY t.startedAt",
                {"a": manager.account_id, "s": session_id},
            )
            return rows
        finally:
            await graph.close()

    rows = asyncio.run(audited())
    assert [(r["call"]["tool"], r["task"], r["produced"]) for r in rows] == [
        ("memory-write", "completed", "the gate code is 4711"),
        ("memory-search", None, None),
    ]
    for row_ in rows:
        call = row_["call"]
        assert call["plugin"] == "maxy-memory" and call["isError"] is False
        assert call["sessionId"] == session_id and call["accountId"] == manager.account_id
        assert call["startedAt"] <= call["endedAt"]
    assert "gate code" in rows[1]["call"]["input"] and "4711" in rows[1]["call"]["output"]
    manager.stop_all()


def test_the_owners_turns_are_kept_as_a_conversation_and_never_twice(stack: Stack) -> None:
    """What the owner says in an admin session is found by conversation search; a manager
    restart reads the transcript again and records nothing twice."""
    first = "Remind me that the piano tuner comes on Thursday morning."
    row = stack.manager.spawn(first)
    session_id = row["id"]

    def said() -> list[tuple[str, str]]:
        answer = stack.rpc("conversation.messages", {"sessionId": session_id, "limit": 50})
        return [(m["role"], m["text"]) for m in answer["messages"]]

    wait_until(lambda: len(said()) == 2, 60, f"two messages; have {said()}")
    assert said() == [("user", first), ("assistant", f"Reply 1 to: {first}")]
    found = stack.rpc("conversation.search", {"query": "when is the piano tuner coming"})
    top = found["results"][0]
    assert (top["text"], top["sessionId"], top["role"]) == (first, session_id, "user")
    stack.manager.stop(session_id)
    stack.manager.wait_row(session_id, lambda r: r["state"] == "archived", 30)

    # A restarted manager reads every transcript again; the resumed session's new turn is
    # recorded after what was kept, and nothing is kept twice.
    stack.manager = restart(stack.manager)
    second = "And the chimney sweep comes on Friday."
    stack.manager.spawn(second, resume=session_id)
    wait_until(lambda: len(said()) >= 4, 60, f"four messages; have {said()}")
    assert said() == [
        ("user", first),
        ("assistant", f"Reply 1 to: {first}"),
        ("user", second),
        ("assistant", f"Reply 1 to: {second}"),
    ]
    keys = [
        m["key"] for m in stack.rpc("conversation.messages", {"sessionId": session_id})["messages"]
    ]
    assert len(set(keys)) == 4 and all(keys)
    stack.manager.stop_all()


# Last in the module: it stops the engine for good.
def test_an_unreachable_engine_costs_one_warning_not_the_session(stack: Stack) -> None:
    log = stack.manager.process.log
    before = log.read_text().count(WARNING)
    stack.engine.stop()
    try:
        row = stack.manager.spawn("hello without memory")
        assert row["state"] == "live"
        [appended] = option(stack.argv(row["id"]), "--append-system-prompt")
        assert "previous-context" not in appended  # only the plugins' instructions
        wait_until(lambda: log.read_text().count(WARNING) == before + 1, 10, "the warning")
        stack.manager.spawn("hello again", kind="public")
        assert log.read_text().count(WARNING) == before + 1  # public spawns never ask
    finally:
        stack.manager.stop_all()
