"""The admin chat in headless Chromium, end to end: edge, app, engine, session manager, the
`claude` double and the `maxy mcp` server it starts.

A session started from the UI shows its transcript as chat bubbles, each MCP tool call the
double made collapsed into a <details> with its input and result; the raw terminal shows on
demand; and the graph holds a ToolCall node for each call, linked to the session's
Conversation, with a Task for the durable one.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from appliance.memory.graph import Graph
from tests.app import test_browser as shell_tests
from tests.sessions.test_spawn import option
from tests.support.processes import Neo4jServer
from tests.support.stacks import DOUBLE, Stack, make_env, running_stack, start_manager

pytestmark = pytest.mark.timeout(300)

browser = shell_tests.browser
admin_state = shell_tests.admin_state
admin = shell_tests.admin
base_url = shell_tests.base_url
screenshot = shell_tests.screenshot

WAIT = 60_000  # ms; the first `maxy mcp` of a session imports a lot on a busy 2-core machine
PROMPT = (
    "Remember the spare key is under the blue pot. Then search memory for spare key. <i>now</i>"
)


@pytest.fixture(scope="module")
def stack(neo4j_server: Neo4jServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("admin-chat")
    env = make_env(
        neo4j_server,
        root / "data",
        MAXY_CLAUDE_BIN=str(DOUBLE),
        CLAUDE_DOUBLE_PYTHON=sys.executable,
        CLAUDE_DOUBLE_RECORD=str(root / "record"),
        MAXY_STOP_GRACE="1",
    )
    with running_stack(env, root / "logs", "engine", "app", "edge") as running:
        running.rpc("task.create", {"name": "Oil the gate", "priority": "high"})
        start_manager(running)
        yield running


def tool_calls(neo4j: Neo4jServer, account: str, session_id: str) -> list[dict[str, Any]]:
    async def query() -> list[dict[str, Any]]:
        graph = Graph(neo4j.uri, "neo4j", neo4j.password)
        try:
            rows, _ = await graph.run(
                "MATCH (c:Conversation {accountId: $a, sessionId: $s})-[:HAS_TOOL_CALL]->"
                "(t:ToolCall) OPTIONAL MATCH (t)-[:PERFORMED]->(k:Task)-[:PRODUCED]->(n) "
                "RETURN t.tool AS tool, t.isError AS isError, t.sessionId AS session, "
                "k.status AS task, n.name AS produced ORDER BY t.startedAt",
                {"a": account, "s": session_id},
            )
            return rows
        finally:
            await graph.close()

    # Playwright's sync API keeps an event loop running on this thread: query from another one.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, query()).result()


def test_a_session_started_from_the_ui_shows_bubbles_and_collapsed_tool_calls(
    admin: Any, base_url: str, stack: Stack, neo4j_server: Neo4jServer
) -> None:
    from playwright.sync_api import expect

    admin.goto(base_url + "/")
    expect(admin.locator("#live-dot")).to_have_attribute("data-state", "live", timeout=WAIT)
    admin.click("#start-session")
    admin.fill("#composer-input", PROMPT)
    admin.press("#composer-input", "Enter")

    turns = admin.locator("#chat-turns > li")
    user = admin.locator("#chat-turns .turn-user")
    expect(user).to_have_text(PROMPT, timeout=WAIT)
    assert user.locator("i").count() == 0  # transcript text is text, never markup
    tools = admin.locator("#chat-turns .turn-tool")
    expect(tools).to_have_count(2, timeout=WAIT)
    expect(admin.locator("#chat-turns .turn-assistant")).to_have_text(
        f"Reply 1 to: {PROMPT}", timeout=WAIT
    )
    assert [turns.nth(i).get_attribute("data-role") for i in range(4)] == [
        "user",
        "tool",
        "tool",
        "assistant",
    ]

    write, search = tools.nth(0), tools.nth(1)
    assert write.get_attribute("data-tool") == "memory-write"
    assert search.get_attribute("data-tool") == "memory-search"
    expect(write).to_have_attribute("data-state", "done")
    expect(search).to_have_attribute("data-state", "done")
    expect(write.locator("summary")).to_contain_text("memory-write")
    # Collapsed: the input and result stay hidden until the summary is clicked.
    assert write.locator("details").get_attribute("open") is None
    expect(write.locator(".tool-input")).to_be_hidden()
    write.locator("summary").click()
    expect(write.locator(".tool-input")).to_be_visible()
    assert json.loads(write.locator(".tool-input").inner_text()) == {
        "label": "Note",
        "properties": {"name": "the spare key is under the blue pot"},
    }
    expect(write.locator(".tool-result")).to_contain_text('"created": true')
    search.locator("summary").click()
    expect(search.locator(".tool-result")).to_contain_text("the spare key is under the blue pot")
    expect(search.locator(".tool-result")).to_contain_text("[Note]")
    screenshot(admin, "admin-chat-tools-1400")

    # The next turn re-renders the transcript; what the owner opened stays open.
    admin.fill("#composer-input", "thanks")
    admin.press("#composer-input", "Enter")
    expect(admin.locator("#chat-turns .turn-assistant").nth(1)).to_have_text(
        "Reply 2 to: thanks", timeout=WAIT
    )
    assert write.locator("details").get_attribute("open") is not None
    expect(write.locator(".tool-input")).to_be_visible()

    session_id = parse_qs(urlparse(admin.url).query)["session"][0]
    # The raw terminal, on demand: the double's screen shows the same calls.
    admin.click("#view-terminal")
    expect(admin.locator("#session-terminal .xterm-rows")).to_contain_text(
        "mcp__memory__memory-write", timeout=WAIT
    )
    admin.click("#view-transcript")
    expect(tools).to_have_count(2, timeout=WAIT)

    # The graph: both calls as ToolCall nodes on the session's Conversation, the write a Task.
    assert tool_calls(neo4j_server, stack.env.account_id, session_id) == [
        {
            "tool": "memory-write",
            "isError": False,
            "session": session_id,
            "task": "completed",
            "produced": "the spare key is under the blue pot",
        },
        {
            "tool": "memory-search",
            "isError": False,
            "session": session_id,
            "task": None,
            "produced": None,
        },
    ]
    # The spawn carried the owner's ready tasks in its <previous-context>.
    record = stack.env.vars["CLAUDE_DOUBLE_RECORD"]
    with open(f"{record}/{session_id}.json") as handle:
        argv = json.load(handle)["argv"]
    [appended] = option(argv, "--append-system-prompt")
    assert appended.startswith("<previous-context>") and "  - [high] Oil the gate" in appended
    admin.click("#session-stop")
