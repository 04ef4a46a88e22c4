"""Admin sessions against a real engine: the <previous-context> block at spawn, the MCP tool
calls the `claude` double makes through `maxy mcp`, kept in the graph as ToolCall and Task nodes,
and compaction: a session whose transcript's usage passes the threshold is asked for its
briefing (session-compact), which the next admin session's context starts with.

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
from appliance.sessions.pty import SESSION_OOM_SCORE_ADJ
from tests.sessions.conftest import Manager, restart, wait_for_health
from tests.sessions.test_spawn import option
from tests.support.processes import (
    Neo4jServer,
    Process,
    maxy,
    process_table,
    process_tree,
    runtime_dir,
    wait_until,
)
from tests.support.stacks import manager_env

pytestmark = pytest.mark.timeout(240)

WARNING = "[sessions] warn reason=context-unavailable"
TAGS = (
    "compaction-start",
    "compaction-summary-captured",
    "compaction-failed",
    "compaction-timeout",
)


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
    env = manager_env(data, runtime, account.id, extra, {"compact_timeout": 90})
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


def proc_number(pid: int, name: str) -> int:
    return int(Path(f"/proc/{pid}/{name}").read_text())


def test_out_of_memory_the_kernel_ends_a_session_before_neo4j_the_engine_or_the_manager(
    stack: Stack, neo4j_server: Neo4jServer
) -> None:
    """Every process of a session (the CLI, the MCP servers it started) carries the raised
    oom_score_adj, so each ranks above every process of the appliance in the kernel's choice."""
    manager = stack.manager
    row = manager.spawn("Please search memory for the gate code.")
    manager.wait_row(row["id"], lambda r: r["turnEnded"], 90)
    table = process_table()
    session = process_tree(row["pid"], table)
    commands = [" ".join(table[pid][1]) for pid in session if pid in table]
    assert any("mcp-helper" in c for c in commands), commands
    assert any(" mcp --plugin memory" in c for c in commands), commands
    assert {proc_number(pid, "oom_score_adj") for pid in session} == {SESSION_OOM_SCORE_ADJ}

    appliance = [
        *process_tree(neo4j_server.proc.pid, table),
        *process_tree(stack.engine.proc.pid, table),
        manager.process.proc.pid,
        manager.status()["pid"],
    ]
    assert not set(appliance) & set(session)
    first = min(proc_number(pid, "oom_score") for pid in session)
    last = max(proc_number(pid, "oom_score") for pid in appliance)
    assert first > last, (first, last)
    manager.stop(row["id"])


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


def wait_logged(stack: Stack, session_id: str, tag: str) -> None:
    try:
        wait_until(lambda: compaction_log(stack, session_id)[tag], 90, f"[{tag}]")
    except pytest.fail.Exception:
        pytest.fail(f"no [{tag}] line; the manager said:\n{stack.manager.output()[-5000:]}")


def compaction_log(stack: Stack, session_id: str) -> dict[str, list[str]]:
    """The manager's compaction lines about one session, by tag."""
    lines = stack.manager.process.log.read_text().splitlines()
    return {
        tag: [line for line in lines if f"[{tag}]" in line and session_id in line] for tag in TAGS
    }


def briefings(neo4j_server: Neo4jServer, session_id: str) -> list[dict[str, Any]]:
    async def read() -> list[dict[str, Any]]:
        graph = Graph(neo4j_server.uri, "neo4j", neo4j_server.password)
        try:
            rows, _ = await graph.run(
                "MATCH (b:SessionBriefing {sessionId: $s}) "
                "OPTIONAL MATCH (c:Conversation)-[:HAS_BRIEFING]->(b) "
                "RETURN b {.accountId, .scope, .asked, .aboutOwner} AS b, c.sessionId AS linked",
                {"s": session_id},
            )
            return rows
        finally:
            await graph.close()

    return asyncio.run(read())


def test_past_the_threshold_a_briefing_is_kept_and_the_next_session_starts_with_it(
    stack: Stack, neo4j_server: Neo4jServer
) -> None:
    said = "My name is Ada and I keep bees on the roof. Plan the spring hive inspection."
    session_id = stack.manager.spawn(f"{said} [double usage=160000]")["id"]
    wait_logged(stack, session_id, "compaction-summary-captured")
    [start] = compaction_log(stack, session_id)["compaction-start"]
    assert "tokens=160000 window=200000 percent=80" in start
    [kept] = briefings(neo4j_server, session_id)
    assert kept["b"]["accountId"] == stack.manager.account_id and kept["b"]["scope"] == "admin"
    assert kept["b"]["aboutOwner"] == "My name is Ada and I keep bees on the roof."
    assert kept["linked"] == session_id  # on the session's recorded conversation

    async def other_accounts_briefing() -> None:  # newer, and never this account's to see
        graph = Graph(neo4j_server.uri, "neo4j", neo4j_server.password)
        try:
            await graph.run(
                "CREATE (:SessionBriefing {id: randomUUID(), accountId: 'someone-else', "
                "sessionId: 'theirs', scope: 'admin', createdAt: datetime() + duration('PT1H'), "
                "asked: 'Their private plans', done: 'Theirs'})"
            )
        finally:
            await graph.close()

    asyncio.run(other_accounts_briefing())
    block = stack.rpc("context.previous", {})
    assert block["briefing"] and block["text"].split("\n")[3].startswith("## Where the last")
    # A spawn waits at most 3 s for the block and starts without it when the engine is slower
    # (a loaded machine): try again then, as the owner would see the next session have it.
    for _ in range(3):
        following = stack.manager.spawn("good afternoon")
        [appended] = option(stack.argv(following["id"]), "--append-system-prompt")
        if appended.startswith("<previous-context>"):
            break
        stack.manager.stop(following["id"])
    context = appended.partition("</previous-context>")[0]
    assert context.startswith("<previous-context>\n")
    assert "## Where the last session left off" in context
    assert "- About the owner: My name is Ada and I keep bees on the roof." in context
    assert "Plan the spring hive inspection." in context and "Their private plans" not in context
    # Still past the threshold, the first session is not asked again.
    stack.manager.wait_row(session_id, lambda r: r["turnEnded"] and r["status"] == "idle", 30)
    assert len(compaction_log(stack, session_id)["compaction-start"]) == 1
    stack.manager.stop_all()


@pytest.mark.parametrize(
    ("behaviour", "outcome"),
    [("bad", "compaction-failed"), ("ignore", "compaction-timeout")],
)
def test_a_compaction_that_fails_loses_nothing(
    stack: Stack, neo4j_server: Neo4jServer, behaviour: str, outcome: str
) -> None:
    """The double never calls the tool (the manager stops waiting), or calls it without a
    briefing (the tool answers an error): logged, nothing written, the session goes on."""
    if behaviour == "ignore" and stack.manager.env["MAXY_COMPACT_TIMEOUT"] != "2":
        stack.manager = restart(stack.manager, compact_timeout=2)  # waiting is all it tests
    first = "Check the bee hive."
    session_id = stack.manager.spawn(f"{first} [double usage=170000 compact={behaviour}]")["id"]
    wait_logged(stack, session_id, outcome)
    lines = compaction_log(stack, session_id)
    assert len(lines["compaction-start"]) == 1 and not lines["compaction-summary-captured"]
    if behaviour == "bad":
        assert "reason=tool-error" in lines[outcome][0]
    assert briefings(neo4j_server, session_id) == []
    # The session keeps running with its whole transcript, and takes the owner's next turn.
    response = stack.manager.request("POST", f"/{session_id}/input", json={"text": "Still there?"})
    assert response.status_code == 200, response.text
    stack.manager.wait_row(session_id, lambda r: r["prompts"] == 3 and r["turnEnded"], 30)
    prompts = [
        e["message"]["content"]
        for e in transcript(stack.manager, session_id)
        if e["type"] == "user" and isinstance(e["message"]["content"], str)
    ]
    assert prompts[0].startswith(first) and prompts[2] == "Still there?"
    assert "call the session-compact tool" in prompts[1]
    assert stack.manager.row(session_id)["state"] == "live"  # type: ignore[index]
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
