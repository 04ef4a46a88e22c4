"""What an MCP tool is: an engine RPC method, or a local handler with its own schema.

The table of every tool is :mod:`appliance.mcp.tools`; plugin modules (e.g.
:mod:`appliance.mcp.web`) define their tools with these types.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from appliance.core.clock import Clock, utc_now
from appliance.core.config import Settings
from appliance.core.identity import Caller
from appliance.rpc.client import RpcClient
from appliance.rpc.contract import Method

# Claude Code loads these tools up front instead of deferring them to tool search.
ALWAYS_LOAD = {"anthropic/alwaysLoad": True}
# Tools whose answer can be long say how long, so the client does not cut them short.
LARGE_RESULT = {"anthropic/maxResultSizeChars": 80_000}


class ToolError(Exception):
    """A local tool's refusal or failure: the message is what the agent reads (is_error).

    A ``code`` (and details) makes the refusal structured too: the result's structured content
    is ``{"code", "message", …details}``, so a caller can act on the code.
    """

    def __init__(self, message: str, code: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.details = details

    def to_json(self) -> dict[str, Any] | None:
        """The structured form of a coded refusal (None for a plain one)."""
        if self.code is None:
            return None
        return {"code": self.code, "message": str(self), **self.details}


@dataclass(frozen=True)
class ToolContext:
    """What a local tool's handler may use: the settings, the caller, the engine, the clock."""

    settings: Settings
    caller: Caller
    engine: RpcClient
    clock: Clock = utc_now


Handler = Callable[[ToolContext, dict[str, Any]], Awaitable[Any]]


@dataclass(frozen=True)
class Tool:
    """One MCP tool: an engine RPC method, or a local handler with its own schema."""

    name: str
    description: str
    plugin: str = "memory"
    method: Method[Any, Any] | None = None
    handler: Handler | None = None
    input_schema: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    # Arguments forwarded to the engine (wire names); anything else in the call is ignored.
    forwarded: tuple[str, ...] = ()
    # A durable tool changes the graph; its calls are kept as Tasks that PRODUCED the node whose
    # id its result holds under ``produces``, labelled ``produces_label`` (None: the call's own
    # ``label`` argument).
    produces: str | None = None
    produces_label: str | None = None

    def __post_init__(self) -> None:
        if (self.method is None) == (self.handler is None):
            raise ValueError(f"tool {self.name}: give exactly one of method or handler")
        if self.handler is not None and self.input_schema is None:
            raise ValueError(f"tool {self.name}: a local tool needs its input_schema")

    @property
    def schema(self) -> dict[str, Any]:
        """The tool's input schema: its method's request type (forwarded arguments) or its own."""
        if self.method is not None:
            return self.method.schema(self.forwarded)
        assert self.input_schema is not None
        return self.input_schema

    @property
    def durable(self) -> bool:
        """True if a call of this tool creates or updates nodes."""
        return self.produces is not None

    def produced(self, arguments: dict[str, Any], result: Any) -> list[dict[str, str]]:
        """The ``{label, id}`` of the node a successful call created or updated."""
        if self.produces is None or not isinstance(result, dict):
            return []
        node_id, label = result.get(self.produces), self.produces_label or arguments.get("label")
        if not isinstance(node_id, str) or not isinstance(label, str):
            return []
        return [{"label": label, "id": node_id}]
