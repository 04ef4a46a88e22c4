"""The admin plugin's ``system-status`` against a real stack: the engine (real Neo4j and model),
the app, the edge and a manager running the `claude` double; healthy, then a part stopped."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import TextContent

from appliance.core.version import build_info
from appliance.mcp import status
from tests.support.processes import Neo4jServer
from tests.support.stacks import DOUBLE, Stack, make_env, running_stack, start_manager
from tests.support.tools import call_tool, tool_context


@pytest.fixture
def stack(neo4j_server: Neo4jServer, tmp_path: Path) -> Iterator[Stack]:
    env = make_env(
        neo4j_server,
        tmp_path / "data",
        brand="Gardenia",
        MAXY_CLAUDE_BIN=str(DOUBLE),
        CLAUDE_DOUBLE_PYTHON=sys.executable,
    )
    with running_stack(env, tmp_path / "logs", "engine", "app", "edge") as running:
        start_manager(running)
        yield running


def system_status(stack: Stack) -> dict[str, Any]:
    context = tool_context(stack.env.settings, session_id="s-admin")
    return call_tool(status.TOOLS, "system-status", context, {})


def test_every_part_reports_healthy_then_a_stopped_part_is_named(stack: Stack) -> None:
    found = system_status(stack)
    assert found["status"] == "healthy", found["problems"]
    assert found["problems"] == [] and found["account"] == stack.env.account_id
    parts = found["parts"]
    assert all(parts[name]["ok"] for name in ("edge", "app", "manager", "claude", "neo4j"))
    assert parts["edge"]["status"] == "healthy" and parts["edge"]["missingPlugins"] == []
    assert parts["engine"]["embedder"]["ok"] and parts["engine"]["schema"]["state"] == "applied"
    assert found["versions"]["maxy"] == build_info()["version"]
    assert found["versions"]["claude"] == "2.1.328-double (Claude Code)"
    assert found["versions"]["neo4j"] == stack.env.settings.neo4j_version
    assert found["disk"]["freeBytes"] > 0 and found["disk"]["path"] == str(
        stack.env.settings.data_dir
    )
    assert found["sessions"]["live"] == 0 and found["sessions"]["caps"]["total"] == 0

    stack.processes["manager"].stop()
    down = system_status(stack)
    assert down["status"] == "degraded"
    assert [p for p in down["problems"] if p.startswith("manager: ")] == [
        f"manager: {down['parts']['manager']['error']}"
    ]
    assert "does not answer" in down["parts"]["manager"]["error"]
    assert down["sessions"]["live"] is None

    stack.processes["engine"].stop()
    worse = system_status(stack)
    assert any(p.startswith("engine: ") for p in worse["problems"])
    assert worse["parts"]["edge"]["ok"] is False  # the edge reports the engine unhealthy


@pytest.mark.anyio
async def test_system_status_through_the_admin_server(stack: Stack) -> None:
    env = {**stack.env.vars, "ACCOUNT_ID": stack.env.account_id, "SESSION_ID": "s-admin"}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "appliance", "mcp", "--plugin", "admin"], env=env
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("system-status", {})
    assert not result.is_error, result.content
    assert result.structured_content["status"] == "healthy"
    [text] = result.content
    assert isinstance(text, TextContent) and '"status": "healthy"' in text.text
