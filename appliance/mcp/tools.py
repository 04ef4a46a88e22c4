"""The tool table: name, description, input schema, ``_meta``, and the engine method behind it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Claude Code loads these tools up front instead of deferring them to tool search.
ALWAYS_LOAD = {"anthropic/alwaysLoad": True}
# Tools whose answer can be long say how long, so the client does not cut them short.
LARGE_RESULT = {"anthropic/maxResultSizeChars": 80_000}

_LABELS = {"type": "array", "items": {"type": "string"}, "description": "Only these labels."}


@dataclass(frozen=True)
class Tool:
    """One MCP tool and the engine RPC method that implements it."""

    name: str
    method: str
    description: str
    schema: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    # Arguments forwarded to the engine; anything else in the call is ignored.
    forwarded: tuple[str, ...] = ()
    # A durable tool changes the graph; its calls are kept as Tasks that PRODUCED the node whose
    # id its result holds under ``produces``, labelled ``produces_label`` (None: the call's own
    # ``label`` argument).
    produces: str | None = None
    produces_label: str | None = None

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


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


TOOLS: tuple[Tool, ...] = (
    Tool(
        name="memory-search",
        method="search",
        description=(
            "Search the owner's memory graph (people, places, tasks, documents, preferences, "
            "conversations…) with hybrid vector + keyword retrieval. Returns ranked nodes with "
            "their properties and one hop of related nodes (arrows show direction), separated "
            "by '---'. Use it before answering anything about the owner's life or business."
        ),
        schema=_object(
            {
                "query": {"type": "string", "description": "What to look for, in plain words."},
                "labels": _LABELS,
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
                "mode": {"type": "string", "enum": ["weighted", "rrf"]},
                "threshold": {"type": "number", "minimum": 0},
                "expandHops": {"type": "integer", "enum": [0, 1], "default": 1},
                "retrievalClass": {
                    "type": "string",
                    "enum": ["entity", "temporal", "event", "general", "none"],
                    "description": "What kind of question this is (used when routing is on).",
                },
                "fields": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Return only these properties ([] for none).",
                },
                "scopes": {
                    "type": "array",
                    "items": {"type": "string", "enum": ["public", "shared", "admin"]},
                    "description": "Narrow to these scopes (never widens what you may see).",
                },
            },
            ["query"],
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
        method="write",
        description=(
            "Create or update one node of the memory graph (e.g. a Person, Preference, Task, "
            "Event) with its properties and edges to existing nodes. People and organisations "
            "should name the Task, Conversation or Message that produced them "
            "(producedByTaskId)."
        ),
        schema=_object(
            {
                "label": {"type": "string"},
                "properties": {"type": "object"},
                "id": {"type": "string", "description": "Update this node instead of creating."},
                "edges": {
                    "type": "array",
                    "items": _object(
                        {
                            "type": {"type": "string", "pattern": "^[A-Z][A-Z0-9_]*$"},
                            "toId": {"type": "string"},
                            "toLabel": {"type": "string"},
                            "direction": {"type": "string", "enum": ["out", "in"]},
                        },
                        ["type", "toId", "toLabel"],
                    ),
                },
                "producedByTaskId": {"type": "string"},
                "scope": {"type": "string", "enum": ["public", "shared", "admin"]},
                "agents": {"type": "array", "items": {"type": "string"}},
            },
            ["label", "properties"],
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
        method="report.write",
        description=(
            "Save a report (a summary, a digest, the result of a routine) to memory. Writing "
            "the same title again within the same minute updates it instead of duplicating."
        ),
        schema=_object(
            {
                "title": {"type": "string", "maxLength": 300},
                "body": {"type": "string", "maxLength": 10_000},
                "sourceWorkflow": {"type": "string"},
                "keywords": {"type": "array", "items": {"type": "string"}},
            },
            ["title", "body"],
        ),
        meta=ALWAYS_LOAD,
        forwarded=("title", "body", "sourceWorkflow", "keywords"),
        produces="id",
        produces_label="Report",
    ),
    Tool(
        name="memory-report-read-latest",
        method="report.read-latest",
        description="Read the newest report(s) in full, optionally only those matching a keyword.",
        schema=_object(
            {
                "keyword": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 20, "default": 1},
            },
            [],
        ),
        meta={**ALWAYS_LOAD, **LARGE_RESULT},
        forwarded=("keyword", "limit"),
    ),
    Tool(
        name="memory-report-list",
        method="report.list",
        description="List reports (titles and metadata only, newest first, paginated).",
        schema=_object(
            {
                "keyword": {"type": "string"},
                "sourceWorkflow": {"type": "string"},
                "page": {"type": "integer", "minimum": 1, "default": 1},
                "pageSize": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
            },
            [],
        ),
        meta=ALWAYS_LOAD,
        forwarded=("keyword", "sourceWorkflow", "page", "pageSize"),
    ),
    Tool(
        name="conversation-search",
        method="conversation.search",
        description=(
            "Search past conversation messages by meaning: this session's conversation when "
            "the session has one, otherwise every conversation of the account."
        ),
        schema=_object(
            {
                "query": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
            },
            ["query"],
        ),
        meta={**ALWAYS_LOAD, **LARGE_RESULT},
        forwarded=("query", "limit"),
    ),
    Tool(
        name="memory-ingest",
        method="ingest",
        description=(
            "Ingest a Markdown or text document into memory as a document with sections and "
            "chunks, each embedded and keyword-indexed. Ingesting the same attachmentId again "
            "replaces the earlier version and re-embeds only what changed."
        ),
        schema=_object(
            {
                "title": {"type": "string"},
                "text": {"type": "string"},
                "attachmentId": {"type": "string", "description": "The source file's id."},
                "scope": {"type": "string", "enum": ["public", "shared", "admin"]},
                "agents": {"type": "array", "items": {"type": "string"}},
            },
            ["title", "text", "attachmentId"],
        ),
        meta=ALWAYS_LOAD,
        forwarded=("title", "text", "attachmentId", "scope", "agents"),
        produces="documentId",
        produces_label="KnowledgeDocument",
    ),
    Tool(
        name="memory-reindex",
        method="reindex",
        description=(
            "Embed every node whose embedding is missing or stale (another model, changed "
            "text). Safe to run any time; reports processed and skipped counts."
        ),
        schema=_object(
            {
                "labels": _LABELS,
                "dryRun": {"type": "boolean", "default": False},
            },
            [],
        ),
        forwarded=("labels", "dryRun"),
    ),
)

BY_NAME = {tool.name: tool for tool in TOOLS}
