"""`maxy mcp` through the official SDK's client over stdio, against a real engine."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any, TextIO

import mcp_types as types
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from appliance.memory.graph import Graph
from tests.memory.test_service import engine_healthy
from tests.support.processes import Env, Neo4jServer, wait_until

pytestmark = pytest.mark.anyio


@pytest.fixture
def engine(maxy_env: Env, start_maxy: Any) -> Env:
    process = start_maxy(maxy_env, "engine")
    wait_until(lambda: engine_healthy(maxy_env), 90, f"engine health\n{process.output()}")
    return maxy_env


def server(env: Env, plugin: str = "memory", **extra: str) -> StdioServerParameters:
    variables = {**env.vars, "ACCOUNT_ID": env.account_id, **extra}
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "appliance", "mcp", "--plugin", plugin],
        env=variables,
    )


async def call(
    params: StdioServerParameters,
    name: str,
    arguments: dict[str, Any],
    errlog: TextIO = sys.stderr,
) -> Any:
    async with (
        stdio_client(params, errlog=errlog) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        return await session.call_tool(name, arguments)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        return await session.call_tool(name, arguments)


async def test_tools_are_listed_with_their_meta(engine: Env) -> None:
    async with stdio_client(server(engine)) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        tools = {tool.name: tool for tool in (await s.list_tools()).tools}
    assert {"memory-search", "memory-write"} <= set(tools)
    search = tools["memory-search"]
    assert search.meta is not None and search.meta["anthropic/alwaysLoad"] is True
    assert search.meta["anthropic/maxResultSizeChars"] == 80_000
    assert search.input_schema["required"] == ["query"]


async def test_write_then_search_round_trip(engine: Env) -> None:
    params = server(engine)
    written = await call(
        params,
        "memory-write",
        {"label": "Preference", "properties": {"name": "Tea", "description": "Earl Grey, hot"}},
    )
    assert not written.is_error, written.content
    found = await call(params, "memory-search", {"query": "what tea do I like"})
    assert not found.is_error
    text = found.content[0].text
    assert "[Preference]" in text and "Earl Grey, hot" in text
    assert "embedding:" not in text and "accountId" not in text
    assert found.structured_content["results"][0]["props"]["name"] == "Tea"


async def test_arguments_cannot_widen_the_environment(engine: Env) -> None:
    admin = server(engine)
    await call(
        admin,
        "memory-write",
        {"label": "Note", "properties": {"name": "safe code 1234"}, "scope": "admin"},
    )
    public = server(engine, ALLOWED_SCOPES="public")
    sneaky = await call(
        public,
        "memory-search",
        {
            "query": "safe code",
            "scopes": ["admin", "shared", "public"],
            "caller": {"account": engine.account_id, "scopes": None},
        },
    )
    assert not sneaky.is_error
    assert "1234" not in sneaky.content[0].text
    # Another account in the environment is refused by the engine, whatever the arguments say.
    stranger = server(engine, ACCOUNT_ID="00000000-0000-0000-0000-000000000000")
    refused = await call(stranger, "memory-search", {"query": "safe code"})
    assert refused.is_error
    assert "write-rejected" in refused.content[0].text or "account" in refused.content[0].text


async def test_an_unreachable_engine_is_a_tool_error_not_a_crash(maxy_env: Env) -> None:
    result = await call(server(maxy_env), "memory-search", {"query": "anything"})
    assert result.is_error
    assert "not available" in result.content[0].text


async def test_reports_and_conversation_search_tools(engine: Env) -> None:
    params = server(engine)
    written = await call(
        params,
        "memory-report-write",
        {"title": "Weekly garden digest", "body": "Tomatoes ripening; water twice a week."},
    )
    assert not written.is_error, written.content
    latest = await call(params, "memory-report-read-latest", {"keyword": "garden"})
    assert "Tomatoes ripening" in latest.content[0].text
    listing = await call(params, "memory-report-list", {})
    assert "Weekly garden digest" in listing.content[0].text
    assert "Tomatoes" not in listing.content[0].text  # metadata only
    found = await call(params, "conversation-search", {"query": "tomatoes"})
    assert not found.is_error


async def test_ingest_then_find_a_chunk_then_reindex(engine: Env) -> None:
    params = server(engine)
    document = (
        "# Boiler\n\nThe boiler is a Vaillant ecoTEC.\n\n"
        "## Service\n\nThe annual service is due every October; call Dave the plumber.\n"
    )
    done = await call(
        params,
        "memory-ingest",
        {"title": "House manual", "text": document, "attachmentId": "att-house-manual"},
    )
    assert not done.is_error, done.content
    assert done.structured_content["sections"] == 2
    found = await call(params, "memory-search", {"query": "when is the boiler serviced"})
    assert "October" in found.content[0].text
    again = await call(params, "memory-reindex", {})
    assert not again.is_error
    assert again.structured_content["skipped"] == 0
    assert again.structured_content["embedded"] == 0  # everything was embedded at write time


async def test_every_tool_call_is_audited_on_its_sessions_conversation(
    engine: Env, neo4j_server: Neo4jServer
) -> None:
    session_id = f"s-audit-{uuid.uuid4()}"
    params = server(engine, SESSION_ID=session_id)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        wrote = await s.call_tool(
            "memory-write",
            {"label": "Note", "properties": {"name": "wifi", "password": "hunter2-wifi"}},
        )
        found = await s.call_tool("memory-search", {"query": "wifi"})
        bad = await s.call_tool("memory-write", {"label": "NoSuchLabel", "properties": {}})
    assert not wrote.is_error and not found.is_error and bad.is_error
    graph = Graph(neo4j_server.uri, "neo4j", neo4j_server.password)
    try:
        rows, _ = await graph.run(
            "MATCH (c:Conversation {accountId: $a, sessionId: $s})-[:HAS_TOOL_CALL]->"
            "(t:ToolCall) RETURN t {.*} AS t ORDER BY t.startedAt",
            {"a": engine.account_id, "s": session_id},
        )
    finally:
        await graph.close()
    calls = [row["t"] for row in rows]
    assert [(c["tool"], c["isError"]) for c in calls] == [
        ("memory-write", False),
        ("memory-search", False),
        ("memory-write", True),
    ]
    assert all(c["sessionId"] == session_id and c["plugin"] == "maxy-memory" for c in calls)
    assert all(c["accountId"] == engine.account_id and c["ms"] >= 0 for c in calls)
    assert "hunter2" not in calls[0]["input"] and "[redacted]" in calls[0]["input"]
    assert "wifi" in calls[1]["input"] and "NoSuchLabel" in calls[2]["output"]


async def test_a_failed_audit_never_fails_the_call(maxy_env: Env, tmp_path: Path) -> None:
    errors = tmp_path / "mcp-stderr.log"
    with errors.open("w") as errlog:
        result = await call(server(maxy_env), "memory-search", {"query": "anything"}, errlog)
    assert result.is_error and "not available" in result.content[0].text
    assert "[audit] warn reason=record-failed tool=memory-search" in errors.read_text()


async def test_durable_calls_become_tasks_that_produced_their_nodes(
    engine: Env, neo4j_server: Neo4jServer
) -> None:
    session_id = f"s-tasks-{uuid.uuid4()}"
    params = server(engine, SESSION_ID=session_id)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        note = await s.call_tool(
            "memory-write",
            {"label": "Note", "properties": {"name": "gate code", "api_key": "sk-live-123456789"}},
        )
        report = await s.call_tool(
            "memory-report-write", {"title": "Garden digest", "body": "Tomatoes ripening."}
        )
        document = await s.call_tool(
            "memory-ingest",
            {"title": "Manual", "text": "# Boiler\n\nServiced in October.", "attachmentId": "a-1"},
        )
        await s.call_tool("memory-search", {"query": "gate code"})
    produced = {
        ("Note", note.structured_content["id"]),
        ("Report", report.structured_content["id"]),
        ("KnowledgeDocument", document.structured_content["documentId"]),
    }
    graph = Graph(neo4j_server.uri, "neo4j", neo4j_server.password)
    try:
        # "What tools ran in the last session?" — one hop from its Conversation.
        calls, _ = await graph.run(
            "MATCH (c:Conversation {accountId: $a, sessionId: $s})-[:HAS_TOOL_CALL]->(t:ToolCall) "
            "OPTIONAL MATCH (t)-[:PERFORMED]->(k:Task)-[:PRODUCED]->(n) "
            "RETURN t.tool AS tool, k.status AS status, k.sessionId AS session, "
            "labels(n)[0] AS label, n.id AS id, t.input AS asked, k.name AS task "
            "ORDER BY t.startedAt",
            {"a": engine.account_id, "s": session_id},
        )
    finally:
        await graph.close()
    assert [c["tool"] for c in calls] == [
        "memory-write",
        "memory-report-write",
        "memory-ingest",
        "memory-search",
    ]
    assert {(c["label"], c["id"]) for c in calls[:3]} == produced
    assert all(c["status"] == "completed" and c["session"] == session_id for c in calls[:3])
    assert calls[3]["status"] is None  # a search changes nothing: no Task
    assert "sk-live" not in calls[0]["asked"] and "[redacted]" in calls[0]["asked"]
    assert [c["task"] for c in calls[:3]] == [
        "memory-write: Note",
        "memory-report-write",
        "memory-ingest",
    ]


def text(result: Any) -> str:
    """The text of a tool's result."""
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def test_the_contacts_plugin_keeps_people_for_the_owner_only(
    engine: Env, neo4j_server: Neo4jServer
) -> None:
    session_id = f"s-contacts-{uuid.uuid4()}"
    params = server(engine, "contacts", SESSION_ID=session_id)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        listed = {tool.name: tool for tool in (await s.list_tools()).tools}
        made = await s.call_tool(
            "contact-create",
            {"name": "Greta Lindqvist", "email": "Greta@Lindqvist.example ", "worksFor": "Acme"},
        )
        again = await s.call_tool(
            "contact-create",
            {"name": "Greta Lindqvist", "email": "greta@lindqvist.example", "telephone": "+46 8 1"},
        )
        bad = await s.call_tool("contact-create", {"name": "Greta", "email": "greta at home"})
        updated = await s.call_tool(
            "contact-update",
            {"id": made.structured_content["id"], "description": "Piano teacher", "worksFor": ""},
        )
        found = await s.call_tool("contact-lookup", {"telephone": "+46 (8) 1"})
        page = await s.call_tool("contact-list", {"pageSize": 5})
        unknown = await s.call_tool("contact-update", {"id": "no-such-id", "name": "x"})
    assert sorted(listed) == ["contact-create", "contact-list", "contact-lookup", "contact-update"]
    assert listed["contact-create"].input_schema["required"] == ["name"]
    assert "caller" not in listed["contact-create"].input_schema["properties"]
    assert not made.is_error and not again.is_error, (made.content, again.content)
    person = made.structured_content["id"]
    assert again.structured_content["id"] == person and again.structured_content["created"] is False
    assert bad.is_error and "is not an email address" in text(bad)
    contact = updated.structured_content["contact"]
    assert contact["description"] == "Piano teacher" and "worksFor" not in contact
    assert [c["id"] for c in found.structured_content["contacts"]] == [person]
    assert page.structured_content["total"] == 1
    assert unknown.is_error and "No contact with id no-such-id" in text(unknown)

    # Found through the memory plugin's search, and soft-deleted there: gone from the book.
    memory = server(engine)
    searched = await call(memory, "memory-search", {"query": "who teaches piano"})
    assert searched.structured_content["results"][0]["id"] == person
    assert "greta@lindqvist.example" in text(searched)
    assert "emailKey" not in text(searched)
    await call(memory, "memory-delete", {"label": "Person", "id": person})
    after = await call(params, "contact-lookup", {"email": "greta@lindqvist.example"})
    assert after.structured_content["contacts"] == []

    # A public agent's server is refused by the engine even if it were given the tool.
    public = server(engine, "contacts", ALLOWED_SCOPES="public", AGENT_SLUG="bob")
    refused = await call(public, "contact-list", {})
    assert refused.is_error and "owner's" in text(refused)

    # The writes were kept as Tasks that PRODUCED the person.
    graph = Graph(neo4j_server.uri, "neo4j", neo4j_server.password)
    try:
        rows, _ = await graph.run(
            "MATCH (c:Conversation {accountId: $a, sessionId: $s})-[:HAS_TOOL_CALL]->(t:ToolCall)"
            "-[:PERFORMED]->(:Task)-[:PRODUCED]->(p:Person) RETURN t.tool AS tool, p.id AS id",
            {"a": engine.account_id, "s": session_id},
        )
    finally:
        await graph.close()
    assert sorted((r["tool"], r["id"]) for r in rows) == [
        ("contact-create", person),
        ("contact-create", person),
        ("contact-update", person),
    ]
