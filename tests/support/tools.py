"""Calling a local MCP tool's handler in this process, as `maxy mcp` would, with a caller."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from appliance.core.config import Settings
from appliance.core.identity import Caller
from appliance.mcp.tool import Tool, ToolContext, ToolError


def tool_context(settings: Settings, account_id: str | None = None, **caller: Any) -> ToolContext:
    """A tool's context for ``account_id`` (default: the settings' account); no engine client."""
    who = Caller(account_id=account_id or settings.account_id, **caller)
    return ToolContext(settings=settings, caller=who, engine=None)  # type: ignore[arg-type]


def call_tool(
    tools: Sequence[Tool], name: str, context: ToolContext, arguments: dict[str, Any]
) -> dict[str, Any]:
    """Run the handler of the tool ``name`` once; its answer."""
    handler = next(tool for tool in tools if tool.name == name).handler
    assert handler is not None, f"{name} is not a local tool"

    async def once() -> dict[str, Any]:
        result: dict[str, Any] = await handler(context, arguments)
        return result

    return asyncio.run(once())


def tool_refusal(
    tools: Sequence[Tool], name: str, context: ToolContext, arguments: dict[str, Any]
) -> ToolError:
    """The :class:`ToolError` the tool ``name`` answers with (the test fails if it answers)."""
    with pytest.raises(ToolError) as caught:
        call_tool(tools, name, context, arguments)
    return caught.value
