"""The MCP tool-call audit trail against the real Neo4j."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from appliance.core.identity import Caller
from appliance.core.redact import REDACTED, redact, redact_text
from appliance.memory.audit import MAX_CHARS, record_tool_call
from appliance.memory.conversations import record_message
from appliance.memory.errors import WriteRejected
from tests.memory.conftest import Memory

pytestmark = pytest.mark.anyio

STARTED = datetime(2025, 5, 1, 9, 30, tzinfo=UTC)


async def record(memory: Memory, caller: Caller | None = None, **changes: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "tool": "memory-search",
        "tool_input": {"query": "tea"},
        "tool_output": "[Preference] Tea",
        "is_error": False,
        "started_at": STARTED,
        "ended_at": STARTED + timedelta(milliseconds=42),
        "ms": 42.0,
        **changes,
    }
    return await record_tool_call(memory.graph, caller or memory.caller, **fields)


async def calls_of(memory: Memory, session: str) -> list[dict[str, Any]]:
    rows, _ = await memory.graph.run(
        "MATCH (c:Conversation {accountId: $a, sessionId: $s})-[:HAS_TOOL_CALL]->(t:ToolCall) "
        "RETURN t {.*} AS t, c.id AS conversationId ORDER BY t.tool",
        {"a": memory.caller.account_id, "s": session},
    )
    return [{**row["t"], "conversationId": row["conversationId"]} for row in rows]


async def test_a_call_is_stored_and_linked_to_its_session_conversation(memory: Memory) -> None:
    caller = memory.other(session_id="s-audit")
    first = await record(memory, caller)
    second = await record(memory, caller, tool="memory-write", is_error=True)
    assert first["conversationId"] == second["conversationId"] is not None
    calls = await calls_of(memory, "s-audit")
    assert [c["tool"] for c in calls] == ["memory-search", "memory-write"]
    stored = calls[0]
    assert stored["id"] == first["id"]
    assert stored["accountId"] == memory.caller.account_id
    assert stored["plugin"] == "maxy-memory"
    assert stored["sessionId"] == "s-audit"
    assert json.loads(stored["input"]) == {"query": "tea"}
    assert stored["output"] == "[Preference] Tea"
    assert stored["isError"] is False and calls[1]["isError"] is True
    assert stored["ms"] == 42.0
    assert datetime.fromisoformat(stored["startedAt"]) == STARTED
    assert datetime.fromisoformat(stored["endedAt"]) == STARTED + timedelta(milliseconds=42)
    assert stored["scope"] == "admin"  # the admin caller's most private scope


async def test_a_message_and_a_tool_call_share_one_conversation(memory: Memory) -> None:
    said = await record_message(
        memory.graph, memory.caller, memory.writer.embed, "m", "s-shared", "user", "Hello"
    )
    called = await record(memory, session_id="s-shared")
    assert called["conversationId"] == said["conversationId"]


async def test_long_input_and_output_are_cut(memory: Memory) -> None:
    await record(
        memory,
        session_id="s-long",
        tool_input={"text": "x" * 5000},
        tool_output="y" * 5000,
    )
    (stored,) = await calls_of(memory, "s-long")
    assert len(stored["input"]) == len(stored["output"]) == MAX_CHARS
    assert stored["output"].endswith("…")
    assert stored["outputChars"] == 5000


async def test_secrets_are_redacted_before_they_are_stored(memory: Memory) -> None:
    secret_input = {
        "label": "Note",
        "properties": {
            "name": "router",
            "password": "hunter2",
            "API_KEY": "abc",
            "nested": [{"authToken": "t0k3n"}, {"Authorization": "Basic Zm9vOmJhcg=="}],
            "note": "call with Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig please",
            "key": "sk-ant-api03-AAAAAAAAAAAAAAAAAAAA",
        },
    }
    await record(
        memory,
        session_id="s-secret",
        tool_input=secret_input,
        tool_output="stored sk-proj-BBBBBBBBBBBBBBBBBBBB",
    )
    (stored,) = await calls_of(memory, "s-secret")
    properties = json.loads(stored["input"])["properties"]
    assert properties["name"] == "router"
    assert properties["password"] == properties["API_KEY"] == REDACTED
    assert properties["nested"] == [{"authToken": REDACTED}, {"Authorization": REDACTED}]
    assert properties["note"] == f"call with {REDACTED} please"
    assert properties["key"] == REDACTED
    assert stored["output"] == f"stored {REDACTED}"
    for secret in ("hunter2", "abc", "t0k3n", "Zm9v", "eyJhbGci", "sk-"):
        assert secret not in stored["input"] + stored["output"]


def test_redaction_keeps_ordinary_values() -> None:
    value = {"query": "my tokens of appreciation", "limit": 3, "labels": ["Person"]}
    assert redact(value) == value


async def test_another_accounts_conversation_is_never_linked(memory: Memory) -> None:
    stranger = f"{memory.caller.account_id}-other-{uuid.uuid4()}"
    await memory.graph.run(
        "CREATE (:Conversation {id: $id, accountId: $a, sessionId: 's-same'})",
        {"id": str(uuid.uuid4()), "a": stranger},
    )
    result = await record(memory, session_id="s-same")
    rows, _ = await memory.graph.run(
        "MATCH (c:Conversation {sessionId: 's-same'})-[:HAS_TOOL_CALL]->(t:ToolCall {id: $id}) "
        "RETURN c.accountId AS account",
        {"id": result["id"]},
    )
    assert [row["account"] for row in rows] == [memory.caller.account_id]


async def test_the_callers_session_wins_over_the_parameter(memory: Memory) -> None:
    caller = memory.other(session_id="s-mine")
    await record(memory, caller, session_id="s-theirs")
    assert len(await calls_of(memory, "s-mine")) == 1
    assert await calls_of(memory, "s-theirs") == []


async def test_a_conversation_the_caller_cannot_see_is_not_linked(memory: Memory) -> None:
    await record(memory, session_id="s-admin")  # the admin caller creates it at scope admin
    public = memory.other(scopes=("public",), agent="concierge", session_id="s-admin")
    result = await record(memory, public)
    assert result["conversationId"] is None
    rows, _ = await memory.graph.run(
        "MATCH (t:ToolCall {id: $id}) RETURN t.scope AS scope, t.agents AS agents, "
        "EXISTS { (:Conversation)-[:HAS_TOOL_CALL]->(t) } AS linked",
        {"id": result["id"]},
    )
    assert rows == [{"scope": "public", "agents": ["concierge"], "linked": False}]


async def test_a_call_without_a_session_is_kept_unlinked(memory: Memory) -> None:
    result = await record(memory)
    assert result["conversationId"] is None
    rows, _ = await memory.graph.run(
        "MATCH (t:ToolCall {id: $id}) RETURN t.accountId AS account, t.sessionId AS session",
        {"id": result["id"]},
    )
    assert rows == [{"account": memory.caller.account_id, "session": None}]


async def test_an_invalid_call_is_refused(memory: Memory) -> None:
    with pytest.raises(WriteRejected):
        await record(memory, tool="")
    with pytest.raises(WriteRejected):
        await record(memory, ms=-1)


@pytest.mark.parametrize(
    "value",
    [
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",  # sha-256 hex
        "ghp_Zq8sN2vR7tY4uW1xK9mL3pJ6hG5fD0aS2bC7",  # a GitHub-style token
        "AKIAIOSFODNN7EXAMPLE/wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",  # AWS-style
        "dGhpcyBpcyBhIHNlY3JldCBrZXkgMTIzNDU2Nzg5MA==",  # base64
    ],
)
def test_text_that_looks_like_a_key_is_redacted(value: str) -> None:
    assert redact({"note": f"use {value} today"}) == {"note": f"use {REDACTED} today"}


@pytest.mark.parametrize(
    "value",
    [
        "123e4567-e89b-12d3-a456-426614174000",  # an id
        "/home/owner/Documents/garden/tomatoes-2025.md",  # a path
        "memory_report_read_latest_with_keywords",  # an identifier
        "https://example.com/recipes/chocolate-cake-with-raspberries",
    ],
)
def test_ids_paths_and_words_are_kept(value: str) -> None:
    assert redact({"note": value}) == {"note": value}


async def durable(memory: Memory, caller: Caller, **changes: Any) -> dict[str, Any]:
    """Write a Note as memory-write would, then audit the call as the MCP server does."""
    properties = {"name": "wifi", "password": "hunter2-wifi", "note": "sk-ant-0123456789ab"}
    arguments = {"label": "Note", "properties": properties}
    from appliance.memory.write import WriteRequest

    written = await memory.writer.write(caller, WriteRequest("Note", properties))
    fields: dict[str, Any] = {
        "tool": "memory-write",
        "tool_input": arguments,
        "tool_output": json.dumps(written),
        "durable": True,
        "produced": [{"label": "Note", "id": written["id"]}],
        "embed": memory.writer.embed,
        "model_name": memory.writer.model_name,
        **changes,
    }
    return {**(await record(memory, caller, **fields)), "written": written["id"]}


async def test_a_durable_call_is_a_task_that_produced_the_node(memory: Memory) -> None:
    caller = memory.other(session_id="s-task")
    result = await durable(memory, caller)
    rows, _ = await memory.graph.run(
        "MATCH (c:Conversation {accountId: $a, sessionId: 's-task'})-[:HAS_TOOL_CALL]->"
        "(t:ToolCall)-[:PERFORMED]->(k:Task)-[:PRODUCED]->(n:Note) "
        "WHERE (c)-[:HAS_TASK]->(k) "
        "RETURN t.id AS call, k {.*, embedding: k.embedding IS NOT NULL} AS task, n.id AS node",
        {"a": memory.caller.account_id},
    )
    assert len(rows) == 1
    row = rows[0]
    assert row["call"] == result["id"] and row["node"] == result["written"]
    task = row["task"]
    assert task["id"] == result["taskId"] and result["produced"] == [result["written"]]
    assert task["accountId"] == memory.caller.account_id
    assert task["name"] == "memory-write: Note"
    assert task["status"] == "completed" and task["tool"] == "memory-write"
    assert task["sessionId"] == "s-task" and task["source"] == "audit"
    assert task["createdAt"] and task["completedAt"]
    assert task["embedding"] is True and task["embeddingModel"] == memory.writer.model_name
    assert "description" not in task  # the request stays on the ToolCall, redacted


async def test_an_audited_task_is_fresh_for_reindex(memory: Memory) -> None:
    from appliance.memory.reindex import reindex

    await durable(memory, memory.other(session_id="s-fresh"))
    done = await reindex(
        memory.graph,
        memory.caller,
        memory.embed_texts,
        memory.writer.model_name,
        labels=["Task"],
        dry_run=True,
    )
    assert (done["total"], done["stale"]) == (1, 0)


async def test_a_failed_durable_call_is_a_failed_task_that_produced_nothing(
    memory: Memory,
) -> None:
    result = await durable(memory, memory.other(session_id="s-failed"), is_error=True)
    rows, _ = await memory.graph.run(
        "MATCH (k:Task {id: $id}) RETURN k.status AS status, "
        "COUNT { (k)-[:PRODUCED]->() } AS produced",
        {"id": result["taskId"]},
    )
    assert rows == [{"status": "failed", "produced": 0}]


async def test_a_read_only_call_makes_no_task(memory: Memory) -> None:
    result = await record(memory, session_id="s-read")
    assert result["taskId"] is None
    rows, _ = await memory.graph.run(
        "MATCH (t:ToolCall {id: $id}) RETURN COUNT { (t)-[:PERFORMED]->() } AS tasks",
        {"id": result["id"]},
    )
    assert rows == [{"tasks": 0}]


async def test_a_task_never_claims_another_accounts_node(memory: Memory) -> None:
    stranger = f"{memory.caller.account_id}-other-{uuid.uuid4()}"
    await memory.graph.run(
        "CREATE (:Note {id: 'foreign-note', accountId: $a, name: 'not yours'})", {"a": stranger}
    )
    result = await durable(
        memory, memory.caller, produced=[{"label": "Note", "id": "foreign-note"}]
    )
    assert result["produced"] == []
    rows, _ = await memory.graph.run(
        "MATCH (:Task {id: $id})-[:PRODUCED]->(n) RETURN n.id AS id", {"id": result["taskId"]}
    )
    assert rows == []
    await memory.graph.run("MATCH (n:Note {id: 'foreign-note'}) DETACH DELETE n")


@pytest.mark.parametrize(
    "produced",
    [
        [{"label": "ToolCall", "id": "x"}],
        [{"label": "Note) DETACH DELETE (n", "id": "x"}],
        [{"label": "Note"}],
        "Note",
    ],
)
async def test_a_malformed_produced_list_is_refused(memory: Memory, produced: Any) -> None:
    with pytest.raises(WriteRejected):
        await record(memory, session_id="s-bad", durable=True, produced=produced)


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("connect password=hunter2 now", "connect password=[redacted] now"),
        ('{"apiKey": "abc123", "n": 1}', '{"apiKey": "[redacted]", "n": 1}'),
        ("token: t0k3n, then", "token: [redacted], then"),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.x.y", "Authorization: [redacted]"),
        ("my tokens of appreciation", "my tokens of appreciation"),
        ("op=spawn kind=admin specialist=True", "op=spawn kind=admin specialist=True"),
    ],
)
def test_the_value_of_a_secret_named_assignment_is_redacted(text: str, kept: str) -> None:
    assert redact_text(text) == kept
