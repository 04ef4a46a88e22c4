"""The stdio MCP server of one plugin: list its tools, run each call (engine RPC or local).

Every tool call, failed ones included, is then sent to the engine's ``audit.record`` (see
:mod:`appliance.memory.audit`) before its result goes back to the agent; a call of a durable
tool (one that writes the graph) says so and names the node it produced, so the engine keeps it
as a Task too. The protocol itself is :mod:`appliance.mcp.stdio`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from appliance.core.config import Settings
from appliance.core.identity import Caller
from appliance.core.version import __version__
from appliance.mcp import stdio
from appliance.mcp.tools import ALWAYS_LOAD, Tool, ToolContext, ToolError, tools_of
from appliance.memory.text import search_text
from appliance.plugins.claude import ALLOWED_TOOLS_ENV
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RemoteError, RpcError

log = logging.getLogger(__name__)

TOOL_TIMEOUT = 120.0
INSTRUCTIONS = {
    "memory": "The owner's memory graph: search it before answering, write what you learn.",
    "contacts": "The owner's contacts: look a person up before creating or changing them.",
    "projects": "The owner's projects: plan them whole, keep their phase and history true.",
    "tasks": "The owner's tasks: work-ready says what can be done now; complete with outputs.",
}
AUDIT_TIMEOUT = 5.0


def render(method: str, result: Any) -> str:
    """The text an agent reads for a tool's result."""
    if method == "search":
        return search_text(result)
    return json.dumps(result, indent=2, ensure_ascii=False, default=str)


class PluginTools:
    """One plugin's tools, bound to this process's caller identity (:class:`stdio.Tools`)."""

    def __init__(
        self, settings: Settings, environ: Mapping[str, str], plugin: str = "memory"
    ) -> None:
        self.name = f"maxy-{plugin}"
        self.version = __version__
        self.instructions = INSTRUCTIONS.get(plugin)
        self.caller = Caller.from_environ(environ)
        self.engine = RpcClient(settings.engine_socket, timeout=TOOL_TIMEOUT)
        self.auditor = RpcClient(settings.engine_socket, timeout=AUDIT_TIMEOUT)
        tools = tools_of(plugin)
        allowed = environ.get(ALLOWED_TOOLS_ENV)
        if allowed is not None:  # a public session's server lists only the public-allowed tools
            tools = tuple(tool for tool in tools if tool.name in allowed.split(","))
        self.tools = tools
        self.by_name: dict[str, Tool] = {tool.name: tool for tool in tools}
        self.context = ToolContext(settings, self.caller, self.engine)

    def list_tools(self) -> list[dict[str, Any]]:
        return [
            {
                "name": tool.name,
                "description": tool.description,
                "inputSchema": tool.schema,
                "_meta": {**ALWAYS_LOAD, **tool.meta},
            }
            for tool in self.tools
        ]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Run one call and audit it; the MCP ``CallToolResult``."""
        started = datetime.now(UTC)
        clock = time.perf_counter()
        result = await self._invoke(name, arguments)
        ms = (time.perf_counter() - clock) * 1000
        # Awaited, not spawned: the record exists once the agent has the result. It never fails
        # the call, and its short timeout bounds what a struggling engine can add to it.
        await self._record(name, arguments, result, started, ms)
        return result

    async def _record(
        self,
        name: str,
        arguments: dict[str, Any],
        result: dict[str, Any],
        started: datetime,
        ms: float,
    ) -> None:
        text = "".join(c["text"] for c in result["content"] if c.get("type") == "text")
        request: dict[str, Any] = {
            "caller": self.caller.to_wire(),
            "tool": name,
            "input": arguments,
            "output": text,
            "isError": result["isError"],
            "startedAt": started.isoformat(),
            "endedAt": datetime.now(UTC).isoformat(),
            "ms": round(ms, 1),
            "sessionId": self.caller.session_id,
        }
        tool = self.by_name.get(name)
        if tool is not None and tool.durable:
            request["durable"] = True
            if not result["isError"]:
                request["produced"] = tool.produced(arguments, result.get("structuredContent"))
        try:
            await self.auditor.call("audit.record", request)
        except Exception as err:  # the audit trail must never break a tool call
            log.warning(
                "[audit] warn reason=record-failed tool=%s error=%s",
                name,
                getattr(err, "code", type(err).__name__),
            )

    async def _invoke(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        tool = self.by_name.get(name)
        if tool is None:
            return _result(f"There is no tool {name!r}.", is_error=True)
        try:
            text, result = await self._run(tool, arguments)
        except ToolError as err:
            log.warning("[mcp] op=call tool=%s error=%s", tool.name, err.code or "refused")
            return _result(str(err), err.to_json(), is_error=True)
        except RemoteError as err:
            log.warning("[mcp] op=call tool=%s error=%s", tool.name, err.code)
            return _result(f"{tool.name} failed ({err.code}): {err}", is_error=True)
        except RpcError as err:
            log.error("[mcp] op=call tool=%s error=engine-unavailable", tool.name)
            return _result(
                f"The memory engine is not available: {err}. Try again shortly.", is_error=True
            )
        log.info("[mcp] op=call tool=%s", tool.name)
        return _result(text, result if isinstance(result, dict) else None)

    async def _run(self, tool: Tool, arguments: dict[str, Any]) -> tuple[str, Any]:
        if tool.handler is not None:
            result = await tool.handler(self.context, arguments)
            return (result if isinstance(result, str) else render("", result)), result
        assert tool.method is not None
        forwarded = {k: v for k, v in arguments.items() if k in tool.forwarded}
        # The caller comes from the environment, after the arguments: it cannot be overridden.
        result = await self.engine.call(
            tool.method.name, {**forwarded, "caller": self.caller.to_wire()}
        )
        return render(tool.method.name, result), result


def _result(
    text: str, structured: dict[str, Any] | None = None, *, is_error: bool = False
) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": is_error}
    if structured is not None:
        result["structuredContent"] = structured
    return result


def serve(settings: Settings, environ: Mapping[str, str], plugin: str = "memory") -> None:
    """Serve one plugin's tools over MCP on stdin/stdout until the client closes it."""
    stdio.serve(PluginTools(settings, environ, plugin))
