"""Visitors without an API key, end to end: the real app asks the real session manager for a
public Claude Code session (the `claude` double; no tools but the public ones, the time) per
message, relays its reply to the visitor's event stream, and deletes the ended session; with
neither a key nor Claude connected the visitor gets the friendly sentence."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance.agents.answering import UNAVAILABLE
from appliance.app.chat import VISITOR_COOKIE
from appliance.core.fsio import write_secret
from appliance.sessions.spawn import DENIED_TOOLS
from tests.sessions.test_spawn import option
from tests.support.sse import sse_events
from tests.support.stacks import Stack, add_agent, sessions_stack

pytestmark = pytest.mark.timeout(180)

TOKEN = "sk-ant-oat01-visitors-through-the-subscription-0123456789abcdefAA"
IDENTITY = "You are Anna, the gardener of the house. Answer questions about the garden."


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("public-spawn")
    with sessions_stack(root, "app", CLAUDE_DOUBLE_RECORD=str(root / "record")) as running:
        folder = add_agent(running.env, "anna", {"displayName": "Anna the Gardener"})
        (folder / "IDENTITY.md").write_text(IDENTITY)
        yield running


@pytest.fixture
def connected(stack: Stack) -> Iterator[None]:
    """Claude connected (the token Connect Claude stores), no API key."""
    write_secret(stack.env.settings.claude_token_path, (TOKEN + "\n").encode())
    yield
    stack.env.settings.claude_token_path.unlink(missing_ok=True)


def ask(stack: Stack, text: str, cookie: str | None = None) -> tuple[list[Any], str | None]:
    """Send a visitor's message; return its events and the visitor cookie."""

    async def run() -> tuple[list[Any], str | None]:
        transport = httpx.AsyncHTTPTransport(uds=str(stack.env.settings.app_socket))
        cookies = {VISITOR_COOKIE: cookie} if cookie else None
        async with httpx.AsyncClient(
            transport=transport, base_url="http://maxy.local:19200", cookies=cookies, timeout=120
        ) as client:
            async with client.stream(
                "POST", "/api/public/anna/messages", json={"text": text}
            ) as response:
                assert response.status_code == 200, await response.aread()
                events = [event async for event in sse_events(response)]
                return events, client.cookies.get(VISITOR_COOKIE) or cookie

    return asyncio.run(run())


def records(stack: Stack) -> list[dict[str, Any]]:
    folder = Path(stack.env.vars["CLAUDE_DOUBLE_RECORD"])
    paths = sorted(folder.glob("*.json"), key=lambda path: path.stat().st_mtime_ns)
    return [json.loads(path.read_text()) for path in paths]


def manager_rows(stack: Stack) -> list[dict[str, Any]]:
    sock = stack.env.settings.manager_socket
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://m") as http:
        rows: list[dict[str, Any]] = http.get("/sessions").json()["rows"]
        return rows


def test_a_visitor_is_answered_by_a_public_session(stack: Stack, connected: None) -> None:
    events, cookie = ask(stack, "How do I water roses?")
    kinds = [event.event for event in events]
    assert kinds[-1] == "done", events
    reply = "".join(event.data["text"] for event in events if event.event == "delta")
    assert reply == "Reply 1 to: How do I water roses?"

    [record] = records(stack)
    argv, env = record["argv"], record["env"]
    agent_dir = stack.env.settings.accounts_dir / stack.env.account_id / "agents" / "anna"
    assert record["cwd"] == str(agent_dir.resolve())
    assert option(argv, "--tools") == [""] and "--strict-mcp-config" in argv
    # Native tools are denied; the only MCP tools allowed are the public ones (the time).
    denied = option(argv, "--disallowedTools")[0].split(",")
    assert [tool for tool in DENIED_TOOLS if tool != "mcp__*"] == denied[: len(DENIED_TOOLS) - 1]
    assert option(argv, "--allowedTools") == [
        "mcp__scheduling__current-datetime,mcp__scheduling__time-resolve"
    ]
    assert option(argv, "--permission-mode") == ["dontAsk"]
    [appended] = option(argv, "--append-system-prompt")
    assert IDENTITY in appended and "<message-metadata>" in appended
    assert env["CLAUDE_CODE_OAUTH_TOKEN"] == TOKEN and env["ALLOWED_SCOPES"] == "public"
    assert env["AGENT_SLUG"] == "anna"
    assert manager_rows(stack) == []  # the ended session is deleted; the graph keeps the chat
    log = stack.output()
    assert "[public-agent] op=session-reply agent=anna" in log and "outcome=answered" in log
    assert TOKEN not in log

    # The next message carries the conversation so far.
    events, _ = ask(stack, "And the tulips?", cookie)
    reply = "".join(event.data["text"] for event in events if event.event == "delta")
    prompt = records(stack)[-1]["argv"][-1]
    assert reply == f"Reply 1 to: {prompt}"
    assert prompt == (
        "Earlier in this conversation:\nVisitor: How do I water roses?\n"
        "You: Reply 1 to: How do I water roses?\n\nThe visitor's new message:\nAnd the tulips?"
    )


def test_a_session_that_fails_gives_the_visitor_the_friendly_sentence(
    stack: Stack, connected: None
) -> None:
    events, _ = ask(stack, "Tell me [double crash=start]")
    assert [event.event for event in events] == ["error"]
    assert events[0].data == {"message": UNAVAILABLE}
    assert "outcome=spawn-failed" in stack.output()


def test_with_neither_a_key_nor_claude_visitors_are_turned_away(stack: Stack) -> None:
    before = len(records(stack))
    events, _ = ask(stack, "Is anyone there?")
    assert [event.event for event in events] == ["error"]
    assert events[0].data == {"message": UNAVAILABLE}
    assert len(records(stack)) == before  # no session was started
    assert "outcome=degraded-no-key" in stack.output()
