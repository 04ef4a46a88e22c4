"""The stdio MCP server of one plugin: list its tools, run each call (engine RPC or local).

Every tool call, failed ones included, is then sent to the engine's ``audit.record`` (see
:mod:`appliance.memory.audit`) before its result goes back to the agent; a call of a durable
tool (one that writes the graph) says so and names the node it produced, so the engine keeps it
as a Task too.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from appliance.core.config import Settings
from appliance.core.identity import Caller
from appliance.core.version import __version__
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


def build_server(
    settings: Settings, environ: Mapping[str, str], plugin: str = "memory"
) -> Server[Any]:
    """A low-level MCP server of one plugin's tools, bound to this process's caller identity."""
    caller = Caller.from_environ(environ)
    engine = RpcClient(settings.engine_socket, timeout=TOOL_TIMEOUT)
    auditor = RpcClient(settings.engine_socket, timeout=AUDIT_TIMEOUT)
    tools = tools_of(plugin)
    allowed = environ.get(ALLOWED_TOOLS_ENV)
    if allowed is not None:  # a public session's server lists only the public-allowed tools
        tools = tuple(tool for tool in tools if tool.name in allowed.split(","))
    by_name: dict[str, Tool] = {tool.name: tool for tool in tools}
    context = ToolContext(settings, caller, engine)

    async def list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=tool.name,
                    description=tool.description,
                    input_schema=tool.schema,
                    _meta={**ALWAYS_LOAD, **tool.meta},
                )
                for tool in tools
            ]
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        started = datetime.now(UTC)
        clock = time.perf_counter()
        result = await invoke(params)
        ms = (time.perf_counter() - clock) * 1000
        # Awaited, not spawned: the record exists once the agent has the result. It never fails
        # the call, and its short timeout bounds what a struggling engine can add to it.
        await record(params, result, started, ms)
        return result

    async def record(
        params: types.CallToolRequestParams,
        result: types.CallToolResult,
        started: datetime,
        ms: float,
    ) -> None:
        text = "".join(c.text for c in result.content if isinstance(c, types.TextContent))
        arguments = params.arguments or {}
        request: dict[str, Any] = {
            "caller": caller.to_wire(),
            "tool": params.name,
            "input": arguments,
            "output": text,
            "isError": bool(result.is_error),
            "startedAt": started.isoformat(),
            "endedAt": datetime.now(UTC).isoformat(),
            "ms": round(ms, 1),
            "sessionId": caller.session_id,
        }
        tool = by_name.get(params.name)
        if tool is not None and tool.durable:
            request["durable"] = True
            if not result.is_error:
                request["produced"] = tool.produced(arguments, result.structured_content)
        try:
            await auditor.call("audit.record", request)
        except Exception as err:  # the audit trail must never break a tool call
            log.warning(
                "[audit] warn reason=record-failed tool=%s error=%s",
                params.name,
                getattr(err, "code", type(err).__name__),
            )

    async def invoke(params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = by_name.get(params.name)
        if tool is None:
            return _error(f"There is no tool {params.name!r}.")
        try:
            text, result = await run(tool, params.arguments or {})
        except ToolError as err:
            log.warning("[mcp] op=call tool=%s error=%s", tool.name, err.code or "refused")
            return _error(str(err), err.to_json())
        except RemoteError as err:
            log.warning("[mcp] op=call tool=%s error=%s", tool.name, err.code)
            return _error(f"{tool.name} failed ({err.code}): {err}")
        except RpcError as err:
            log.error("[mcp] op=call tool=%s error=engine-unavailable", tool.name)
            return _error(f"The memory engine is not available: {err}. Try again shortly.")
        log.info("[mcp] op=call tool=%s", tool.name)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structured_content=result if isinstance(result, dict) else None,
        )

    async def run(tool: Tool, arguments: dict[str, Any]) -> tuple[str, Any]:
        if tool.handler is not None:
            result = await tool.handler(context, arguments)
            return (result if isinstance(result, str) else render("", result)), result
        assert tool.method is not None
        forwarded = {k: v for k, v in arguments.items() if k in tool.forwarded}
        # The caller comes from the environment, after the arguments: it cannot be overridden.
        result = await engine.call(tool.method.name, {**forwarded, "caller": caller.to_wire()})
        return render(tool.method.name, result), result

    return Server(
        f"maxy-{plugin}",
        version=__version__,
        instructions=INSTRUCTIONS.get(plugin),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _error(message: str, structured: dict[str, Any] | None = None) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)],
        structured_content=structured,
        is_error=True,
    )


def serve(settings: Settings, environ: Mapping[str, str], plugin: str = "memory") -> None:
    """Serve one plugin's tools over MCP on stdin/stdout until the client closes it."""
    server = build_server(settings, environ, plugin)

    async def main() -> None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)
