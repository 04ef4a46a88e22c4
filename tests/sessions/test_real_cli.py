"""Smoke test with the real Claude Code CLI, when it is installed: the manager spawns it in a
PTY against a local stand-in for the Messages API, sees its PID file, lets it finish a turn, and
stops it cleanly."""

from __future__ import annotations

import functools
import json
import os
from typing import Any

import pytest

from appliance.core.config import load_settings
from appliance.plugins.claude import tool_name
from appliance.plugins.resolver import account_root, resolve, write_enabled
from tests.fakes.anthropic_api import FakeAnthropic
from tests.sessions.conftest import Manager
from tests.support.processes import real_claude, wait_until

CLAUDE = real_claude()

pytestmark = pytest.mark.skipif(
    CLAUDE is None,
    reason="the real Claude Code CLI is not installed (no `claude` on PATH or in the cache; "
    "`just bootstrap` caches it)",
)


def test_the_real_cli_runs_a_turn_and_stops_cleanly(start_manager: Any) -> None:
    assert CLAUDE is not None
    with FakeAnthropic(reply="Hello from the local API.") as api:
        env = {
            "ANTHROPIC_BASE_URL": api.url,
            "ANTHROPIC_API_KEY": "sk-ant-local-smoke-test-key-0123456789",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        if os.geteuid() == 0:
            env["IS_SANDBOX"] = "1"  # the CLI refuses bypassPermissions for root elsewhere
        manager: Manager = start_manager(env=env, claude_bin=CLAUDE)
        row = manager.spawn("hello there")
        pid_file = manager.config_dir / "sessions" / f"{row['pid']}.json"
        written = json.loads(pid_file.read_text())
        assert written["sessionId"] == row["id"] and written["pid"] == row["pid"]
        assert written["procStart"].isdigit()  # what the PID-reuse guard compares
        done = manager.wait_row(row["id"], lambda r: r["turnEnded"], timeout=90)
        assert done["stopReason"] == "end_turn" and done["prompts"] == 1
        assert any(path.startswith("/v1/messages") for _, path, _ in api.requests)
        result = manager.stop(row["id"])
        assert result["signal"] == "SIGTERM", manager.output()
        assert result["row"]["state"] == "archived"
        assert not pid_file.exists()


AGENT = """---
name: fixture-scout
description: Finds one fact in the owner's memory for {{productName}}.
tools: mcp__memory__memory-search
---
You look one thing up in {{productName}}'s memory and say what you found.
"""

LOOKUP = """---
name: lookup
description: A public look-up plugin of the owner's.
tools:
  - {name: memory-search, public: true}
  - {name: memory-write, public: false}
agents: [fixture-scout]
mcp:
  command: [maxy, mcp, --plugin, memory]
---
Look things up for {{productName}}'s visitors.
"""


def _tools_of_turn(api: FakeAnthropic) -> list[dict[str, Any]]:
    turns = [body for body in api.messages if body.get("tools")]
    assert turns, "no request offered the model tools"
    tools: list[dict[str, Any]] = turns[-1]["tools"]
    return tools


def _turn_ended(row: dict[str, Any], prompts: int) -> bool:
    return bool(row["prompts"] == prompts and row["turnEnded"])


def _spawn_and_capture(
    manager: Manager, api: FakeAnthropic, servers: int, **body: Any
) -> tuple[dict[str, str], str]:
    """Spawn, let the turn end; the offered tools (name → description) and the whole request."""
    row = manager.spawn("hello there", **body)
    manager.wait_row(row["id"], lambda r: r["turnEnded"], timeout=120)
    # The CLI connects MCP servers without blocking its first request (sent ~0.2 s after start;
    # a server boots in ~1 s), so a later turn is the one that shows what is registered: after
    # every server's first answer, and, on a loaded machine, once the CLI has also listed the
    # tools of each (a turn more or two).
    log = manager.config_dir / "mcp" / row["id"] / "helper.log"
    booted = lambda: log.is_file() and log.read_text().count("op=boot") >= servers  # noqa: E731
    wait_until(booted, 60, f"{servers} servers' boot")
    for prompt in range(2, 7):
        manager.request("POST", f"/{row['id']}/input", json={"text": "and again", "submit": True})
        manager.wait_row(row["id"], functools.partial(_turn_ended, prompts=prompt), 120)
        tools = {tool["name"]: str(tool.get("description", "")) for tool in _tools_of_turn(api)}
        if len({name.split("__")[1] for name in tools if name.startswith("mcp__")}) >= servers:
            break
    request = json.dumps([b for b in api.messages if b.get("tools")][-1])
    manager.stop(row["id"])
    api.requests.clear()
    return tools, request


def test_the_real_cli_gets_each_plugins_tools_and_roles(start_manager: Any) -> None:
    """Admin: every enabled plugin's tools and roles; public: only the public-allowed tools."""
    assert CLAUDE is not None
    with FakeAnthropic(reply="Done.") as api:
        env = {
            "ANTHROPIC_BASE_URL": api.url,
            "ANTHROPIC_API_KEY": "sk-ant-local-smoke-test-key-0123456789",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        if os.geteuid() == 0:
            env["IS_SANDBOX"] = "1"
        manager: Manager = start_manager(env=env, claude_bin=CLAUDE)
        settings = load_settings(manager.env)
        plugin = account_root(settings, manager.account_id) / "lookup"
        (plugin / "agents").mkdir(parents=True)
        (plugin / "PLUGIN.md").write_text(LOOKUP)
        (plugin / "agents" / "fixture-scout.md").write_text(AGENT)
        write_enabled(settings, manager.account_id, ["lookup"])

        installed = resolve(settings, manager.account_id)
        servers = len([p for p in installed.enabled if p.server is not None])
        admin, request = _spawn_and_capture(manager, api, servers=servers)
        mcp = sorted(name for name in admin if name.startswith("mcp__"))
        print("admin tools:", mcp)
        expected = {tool_name(p.name, t.name) for p in installed.enabled for t in p.tools}
        assert {"mcp__memory__memory-search", "mcp__lookup__memory-write"} <= expected
        assert set(mcp) == expected  # each server lists exactly its plugin's declared tools
        assert "fixture-scout" in request  # the role is a dispatchable agent
        public_servers = len([p for p in installed.public() if p.server is not None])
        public, _ = _spawn_and_capture(manager, api, servers=public_servers, kind="public")
        print("public tools:", sorted(public))
        # DeferredToolPlaceholder is the CLI's own stand-in for tools behind tool search.
        assert sorted(set(public) - {"DeferredToolPlaceholder"}) == [
            "mcp__lookup__memory-search",
            "mcp__scheduling__current-datetime",
            "mcp__scheduling__time-resolve",
        ]


def test_the_real_cli_runs_a_specialist_as_its_role(start_manager: Any) -> None:
    """A role spawn (``--agent admin:database-operator``) gets the role's prompt and tools line."""
    assert CLAUDE is not None
    with FakeAnthropic(reply="All parts healthy.") as api:
        env = {
            "ANTHROPIC_BASE_URL": api.url,
            "ANTHROPIC_API_KEY": "sk-ant-local-smoke-test-key-0123456789",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        if os.geteuid() == 0:
            env["IS_SANDBOX"] = "1"
        manager: Manager = start_manager(env=env, claude_bin=CLAUDE)
        row = manager.spawn("check the device", role="database-operator", specialist=True)
        done = manager.wait_row(row["id"], lambda r: r["turnEnded"], timeout=120)
        assert done["specialist"] is True and done["role"] == "database-operator"
        role_tools = {
            "mcp__admin__system-status",
            "mcp__admin__logs-read",
            "mcp__admin__session-list",
            "mcp__memory__memory-search",
            "mcp__memory__memory-reindex",
        }
        log = manager.config_dir / "mcp" / row["id"] / "helper.log"
        booted = lambda: log.is_file() and log.read_text().count("op=boot") >= 3  # noqa: E731
        wait_until(booted, 60, "the servers' boot")
        offered: set[str] = set()
        # A server's tools reach the model from the first request after the CLI has listed
        # them (it connects without blocking): ask again until both servers' tools are there.
        for prompts in range(2, 7):
            manager.request("POST", f"/{row['id']}/input", json={"text": "and?", "submit": True})

            def answered(r: dict[str, Any], n: int = prompts) -> bool:
                return bool(r["prompts"] == n and r["turnEnded"])

            manager.wait_row(row["id"], answered, timeout=120)
            turns = [b for b in api.messages if "You diagnose" in json.dumps(b.get("system"))]
            offered = {tool["name"] for tool in turns[-1].get("tools", [])}
            if role_tools <= offered:
                break
        print("specialist tools:", sorted(offered))
        # Exactly the role's tools line: no native tool, no MCP tool the line does not name.
        assert offered - {"DeferredToolPlaceholder"} == role_tools
        manager.stop(row["id"])
