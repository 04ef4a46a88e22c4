"""`maxy mcp --plugin admin` through the official SDK's client over stdio: it serves exactly the
tools the admin plugin's PLUGIN.md declares, answers as the session's account, returns coded
refusals as structured content, and refuses a public caller."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from appliance.core.accounts import create_account
from appliance.mcp import admin
from appliance.mcp.tools import tools_of
from appliance.plugins.format import read_plugin
from appliance.plugins.resolver import core_root
from tests.support.processes import runtime_dir
from tests.support.stacks import account_env

pytestmark = pytest.mark.anyio

BRAND = "Gardenia"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    data = tmp_path / "data"
    account = create_account(data / "accounts", "Owner", product_name=BRAND)
    variables = account_env(data, runtime_dir(), account.id)
    return {**variables, "ACCOUNT_ID": account.id, "SESSION_ID": "s-admin"}


def server(env: dict[str, str], **extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "appliance", "mcp", "--plugin", "admin"],
        env={**env, **extra},
    )


async def calls(params: StdioServerParameters, *steps: tuple[str, dict[str, Any]]) -> list[Any]:
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        return [await session.call_tool(name, arguments) for name, arguments in steps]


def test_the_plugin_declares_exactly_the_tools_its_server_serves() -> None:
    declared = [tool.name for tool in read_plugin(core_root() / "admin", "core").tools]
    assert declared == [tool.name for tool in admin.TOOLS] == [t.name for t in tools_of("admin")]
    assert all(not tool.public for tool in read_plugin(core_root() / "admin", "core").tools)


@pytest.mark.slow
async def test_the_server_lists_the_admin_tools(env: dict[str, str]) -> None:
    async with stdio_client(server(env)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert list(listed) == [tool.name for tool in admin.TOOLS]
    assert listed["store-skill"].input_schema["required"] == [
        "plugin",
        "skill",
        "description",
        "body",
    ]


@pytest.mark.slow
async def test_a_skill_stored_over_mcp_is_loaded_and_shipped_names_are_refused(
    env: dict[str, str],
) -> None:
    stored, loaded, taken, here = await calls(
        server(env),
        (
            "store-skill",
            {
                "plugin": "household",
                "skill": "bin-day",
                "description": "Use on Sunday nights.",
                "body": "1. Remind the owner: {{productName}} says the bins go out.",
            },
        ),
        ("skill-load", {"name": "household:bin-day"}),
        ("store-skill", {"plugin": "memory", "skill": "x", "description": "d", "body": "b"}),
        ("capabilities-here", {}),
    )
    assert not stored.is_error, stored.content
    assert stored.structured_content["stored"] == "plugins/household/skills/bin-day/SKILL.md"
    assert loaded.structured_content["text"] == (
        f"1. Remind the owner: {BRAND} says the bins go out."
    )
    assert taken.is_error and "ships" in taken.content[0].text
    assert taken.structured_content["code"] == "plugin-name-taken"
    assert taken.structured_content["plugin"] == "memory"
    assert "household:bin-day" in here.structured_content["skills"]


@pytest.mark.slow
async def test_a_public_caller_gets_nothing(env: dict[str, str]) -> None:
    [answer] = await calls(server(env, ALLOWED_SCOPES="public"), ("capabilities-here", {}))
    assert answer.is_error and answer.structured_content["code"] == "owner-only"
    # A public spawn's allow-list of the plugin's public tools is empty: nothing is served.
    async with (
        stdio_client(server(env, MAXY_MCP_TOOLS="")) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        assert (await session.list_tools()).tools == []
