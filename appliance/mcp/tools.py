"""The tool table: every MCP tool, the plugin that ships it, and what implements it.

A tool is one of two kinds:

- **engine-backed** (``method``): the call is forwarded to an engine RPC method. Its input schema
  is not written here: it is the request type of that method (:mod:`appliance.rpc.engine`) cut to
  the arguments the tool exposes, so the MCP view and the engine's contract cannot drift apart.
- **local** (``handler`` with its own ``input_schema``): the call runs inside the ``maxy mcp``
  process (the clock, a web fetch, the session manager), with a :class:`ToolContext`.

``maxy mcp --plugin NAME`` serves the tools whose ``plugin`` is NAME; each plugin's ``PLUGIN.md``
lists the same names (a test holds the two equal).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from appliance.core.config import Settings
from appliance.core.identity import Caller
from appliance.rpc import engine as api
from appliance.rpc.client import RpcClient
from appliance.rpc.contract import Method

# Claude Code loads these tools up front instead of deferring them to tool search.
ALWAYS_LOAD = {"anthropic/alwaysLoad": True}
# Tools whose answer can be long say how long, so the client does not cut them short.
LARGE_RESULT = {"anthropic/maxResultSizeChars": 80_000}


class ToolError(Exception):
    """A local tool's refusal or failure: the message is what the agent reads (is_error)."""


@dataclass(frozen=True)
class ToolContext:
    """What a local tool's handler may use: the settings, the caller, the engine."""

    settings: Settings
    caller: Caller
    engine: RpcClient


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


MEMORY_TOOLS: tuple[Tool, ...] = (
    Tool(
        name="memory-search",
        method=api.SEARCH,
        description=(
            "Search the owner's memory graph (people, places, tasks, documents, preferences, "
            "conversations…) with hybrid vector + keyword retrieval. Returns ranked nodes with "
            "their properties and one hop of related nodes (arrows show direction), separated "
            "by '---'. Use it before answering anything about the owner's life or business."
        ),
        meta={**ALWAYS_LOAD, **LARGE_RESULT},
        forwarded=(
            "query",
            "labels",
            "limit",
            "mode",
            "retrievalClass",
            "threshold",
            "expandHops",
            "fields",
            "scopes",
        ),
    ),
    Tool(
        name="memory-write",
        method=api.WRITE,
        description=(
            "Create or update one node of the memory graph (e.g. a Person, Preference, Task, "
            "Event) with its properties and edges to existing nodes. People and organisations "
            "should name the Task, Conversation or Message that produced them "
            "(producedByTaskId)."
        ),
        meta=ALWAYS_LOAD,
        forwarded=(
            "label",
            "properties",
            "id",
            "edges",
            "producedByTaskId",
            "scope",
            "agents",
        ),
        produces="id",
    ),
    Tool(
        name="memory-report-write",
        method=api.REPORT_WRITE,
        description=(
            "Save a report (a summary, a digest, the result of a routine) to memory. Writing "
            "the same title again within the same minute updates it instead of duplicating."
        ),
        meta=ALWAYS_LOAD,
        forwarded=("title", "body", "sourceWorkflow", "keywords"),
        produces="id",
        produces_label="Report",
    ),
    Tool(
        name="memory-report-read-latest",
        method=api.REPORT_READ_LATEST,
        description="Read the newest report(s) in full, optionally only those matching a keyword.",
        meta={**ALWAYS_LOAD, **LARGE_RESULT},
        forwarded=("keyword", "limit"),
    ),
    Tool(
        name="memory-report-list",
        method=api.REPORT_LIST,
        description="List reports (titles and metadata only, newest first, paginated).",
        meta=ALWAYS_LOAD,
        forwarded=("keyword", "sourceWorkflow", "page", "pageSize"),
    ),
    Tool(
        name="conversation-search",
        method=api.CONVERSATION_SEARCH,
        description=(
            "Search past conversation messages by meaning: this session's conversation when "
            "the session has one, otherwise every conversation of the account."
        ),
        meta={**ALWAYS_LOAD, **LARGE_RESULT},
        forwarded=("query", "limit"),
    ),
    Tool(
        name="memory-ingest",
        method=api.INGEST,
        description=(
            "Ingest a Markdown or text document into memory as a document with sections and "
            "chunks, each embedded and keyword-indexed. Ingesting the same attachmentId again "
            "replaces the earlier version and re-embeds only what changed."
        ),
        meta=ALWAYS_LOAD,
        forwarded=("title", "text", "attachmentId", "scope", "agents"),
        produces="documentId",
        produces_label="KnowledgeDocument",
    ),
    Tool(
        name="memory-reindex",
        method=api.REINDEX,
        description=(
            "Embed every node whose embedding is missing or stale (another model, changed "
            "text). Safe to run any time; reports processed and skipped counts."
        ),
        forwarded=("labels", "dryRun"),
    ),
)

# Every plugin's tools, in one table (a plugin's module adds its tuple here).
TOOLS: tuple[Tool, ...] = MEMORY_TOOLS
BY_NAME = {tool.name: tool for tool in TOOLS}


def tools_of(plugin: str) -> tuple[Tool, ...]:
    """The tools one plugin's MCP server serves (empty for a plugin of no tools)."""
    return tuple(tool for tool in TOOLS if tool.plugin == plugin)


def plugins_with_tools() -> list[str]:
    """The plugins whose tools live in this table, sorted."""
    return sorted({tool.plugin for tool in TOOLS})
