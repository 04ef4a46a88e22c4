"""The engine's RPC contract: every method of ``maxy engine`` with its request and response.

This is the one declaration: the engine validates calls against it (:mod:`appliance.memory.
service`), the MCP tools take their input schemas from it (:mod:`appliance.mcp.tools`) and the
README's table of methods is generated from it (:func:`methods_table`). Limits marked
"advertised" are told to agents in the schemas; the engine enforces them itself (cutting, or
refusing with its own error), so a call that breaks one is not a malformed call.

Every request that acts on the graph carries ``caller`` (account, scopes, agent, session,
keyword subscriptions), set by the calling process from its own environment, never by an
agent; the engine refuses any account but its own.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, JsonValue

from appliance.rpc import work
from appliance.rpc.backup import (
    BackupCreated,
    BackupCreateRequest,
    BackupListRequest,
    BackupListResponse,
    BackupRestored,
    BackupRestoreRequest,
)
from appliance.rpc.briefings import BriefingWriteRequest, BriefingWriteResponse
from appliance.rpc.calls import (
    SCOPES,
    Called,
    CallerWire,
    Written,
    scope_field,
    scopes_field,
)
from appliance.rpc.channels import (
    ArchivedMessage,
    ChannelArchiveRequest,
    ChannelArchiveResponse,
    ChannelChatsRequest,
    ChannelChatsResponse,
    ChannelMessageResponse,
    ChannelMessagesResponse,
    ChannelPendingRequest,
    ChannelRecordRequest,
    ChannelUpdateRequest,
)
from appliance.rpc.contract import Method, Request, Response
from appliance.rpc.knowledge import (
    DocumentRef,
    IngestedResponse,
    IngestFileRequest,
    IngestFileResponse,
    RestoreVersionRequest,
    RestoreVersionResponse,
    VersionRequest,
    VersionResponse,
    VersionsResponse,
)
from appliance.rpc.scheduling import (
    CancelResponse,
    EventCreateRequest,
    EventListRequest,
    EventListResponse,
    EventUpdateRequest,
    ReminderCreateRequest,
    ReminderListRequest,
    ReminderListResponse,
    ReminderUpdateRequest,
    ScheduleClaimRequest,
    ScheduleClaimResponse,
    Scheduled,
    ScheduledRef,
    ScheduleFiredRequest,
    ScheduleFiredResponse,
)

__all__ = [
    "SCOPES",
    "ArchivedMessage",
    "BackupCreateRequest",
    "BackupListRequest",
    "BackupRestoreRequest",
    "BriefingWriteRequest",
    "Called",
    "CallerWire",
    "ChannelArchiveRequest",
    "ChannelChatsRequest",
    "ChannelPendingRequest",
    "ChannelRecordRequest",
    "ChannelUpdateRequest",
    "DocumentRef",
    "EventCreateRequest",
    "EventListRequest",
    "EventUpdateRequest",
    "IngestFileRequest",
    "ReminderCreateRequest",
    "ReminderListRequest",
    "ReminderUpdateRequest",
    "RestoreVersionRequest",
    "ScheduleClaimRequest",
    "ScheduleFiredRequest",
    "ScheduledRef",
    "VersionRequest",
    "scope_field",
    "scopes_field",
]

RETRIEVAL_CLASSES: tuple[JsonValue, ...] = ("entity", "temporal", "event", "general", "none")


# --- health and embeddings ---------------------------------------------------------------


class HealthRequest(Request):
    """No parameters."""


class HealthResponse(Response):
    """``ok`` is true when Neo4j answers and the schema is applied (``neo4j.code`` says why
    not: ``disk-full`` when Neo4j stopped its database on a full disk); ``disk`` is the data
    partition (``ok``: at least 8 MiB free, ``freeBytes``), informing only; ``audit`` is the
    latest graph-health audit (``at``, ``ms``, ``nullEmbedding`` and ``nullAccount``: counts by
    label), null until the first has run."""

    ok: bool
    account: str
    neo4j: dict[str, Any] = Field(alias="neo4j")
    embedder: dict[str, Any]
    schema_: dict[str, Any] = Field(alias="schema")
    disk: dict[str, Any] | None = None
    audit: dict[str, Any] | None = None


MAX_TEXTS_PER_CALL = 256
MAX_EDGES_PER_WRITE = 500


class EmbedRequest(Request):
    """Texts to embed, at most 256."""

    texts: list[str | bytes] = Field(max_length=MAX_TEXTS_PER_CALL)


class EmbedResponse(Response):
    """Vectors as packed little-endian float32, one after another."""

    model: str
    dimension: int
    vectors: bytes


# --- search and writes -------------------------------------------------------------------


class SearchRequest(Called):
    """Hybrid search; unset knobs take the engine's settings."""

    query: str = Field(description="What to look for, in plain words.")
    labels: list[str] | None = Field(default=None, description="Only these labels.")
    limit: int | None = Field(
        default=None, json_schema_extra={"minimum": 1, "maximum": 100, "default": 10}
    )
    mode: Literal["weighted", "rrf", "convex"] | None = None
    vector_weight: float | None = None
    keyword_weight: float | None = None
    rrf_k: int | None = None
    threshold: float = Field(default=0.0, json_schema_extra={"minimum": 0})
    boosts: bool | None = None
    expand_hops: int = Field(default=1, json_schema_extra={"enum": [0, 1], "default": 1})
    fields: list[str] | None = Field(
        default=None, description="Return only these properties ([] for none)."
    )
    retrieval_class: str | None = Field(
        default=None,
        description="What kind of question this is (used when routing is on).",
        json_schema_extra={"enum": list(RETRIEVAL_CLASSES)},
    )
    routing: bool | None = None
    expand_queries: bool | None = None
    dedup: bool | None = None
    per_document: bool | None = Field(
        default=None,
        description="One result per ingested document, on its best node (default: unless only "
        "sections or chunks are asked for); false ranks every node on its own.",
    )
    scopes: list[str] | None = scopes_field()


class SearchResponse(Response):
    """Ranked results; ``keywordOnly`` when the model failed and only keyword search ran."""

    results: list[dict[str, Any]]
    counts: dict[str, Any]
    ms: float
    vector_only: bool
    keyword_only: bool


class EdgeWire(Request):
    """An edge from the written node to an existing one."""

    type: str = Field(json_schema_extra={"pattern": "^[A-Z][A-Z0-9_]*$"})
    to_id: str
    to_label: str
    direction: str = Field(default="out", json_schema_extra={"enum": ["out", "in"]})


class WriteRequest(Called):
    """Create or merge one node."""

    label: str
    properties: dict[str, Any] = Field(default_factory=dict)
    id: str | None = Field(default=None, description="Update this node instead of creating.")
    edges: list[EdgeWire] = Field(default_factory=list, max_length=MAX_EDGES_PER_WRITE)
    produced_by_task_id: str | None = None
    scope: str | None = scope_field()
    agents: list[str] | None = None


class IngestRequest(Called):
    """A Markdown or text document: KnowledgeDocument → Section → Chunk."""

    title: str = Field(
        default="", description="Its title (none: its first heading or line names it)."
    )
    text: str = Field(default="", description="Its text (none: the title alone is its text).")
    attachment_id: str = Field(description="The source file's id.")
    scope: str | None = scope_field()
    agents: list[str] | None = None


class ReindexRequest(Called):
    """Embed what is missing or stale (streams progress frames)."""

    labels: list[str] | None = Field(default=None, description="Only these labels.")
    dry_run: bool = Field(default=False, json_schema_extra={"default": False})


class ReindexResponse(Response):
    """Counts of the run."""

    processed: int
    embedded: int
    skipped: int
    stale: int
    total: int
    ms: float
    dry_run: bool


class NodeRef(Called):
    """One node by label and id."""

    label: str
    id: str


class DeleteResponse(Response):
    """``changed``: how many nodes were deleted (a document's parts too); 0 when it already was."""

    id: str
    label: str
    deleted_at: Any
    changed: int


class RestoreResponse(Response):
    """``changed``: how many nodes came back (a document's parts too); 0 when it was not deleted."""

    id: str
    label: str
    changed: int


# --- reports -----------------------------------------------------------------------------


class ReportWriteRequest(Called):
    """A report; the same title within the same minute updates it."""

    title: str = Field(json_schema_extra={"maxLength": 300})
    body: str = Field(json_schema_extra={"maxLength": 10_000})
    source_workflow: str | None = None
    keywords: list[str] | None = None
    scope: str | None = scope_field()


class ReportReadLatestRequest(Called):
    """The newest reports in full."""

    keyword: str | None = None
    limit: int = Field(default=1, json_schema_extra={"minimum": 1, "maximum": 20, "default": 1})


class ReportReadLatestResponse(Response):
    """Newest first."""

    reports: list[dict[str, Any]]


class ReportListRequest(Called):
    """Report metadata, newest first, a page at a time."""

    keyword: str | None = None
    source_workflow: str | None = None
    page: int = Field(default=1, json_schema_extra={"minimum": 1, "default": 1})
    page_size: int = Field(
        default=20, json_schema_extra={"minimum": 1, "maximum": 100, "default": 20}
    )


class ReportListResponse(Response):
    """One page."""

    items: list[dict[str, Any]]
    page: int
    page_size: int
    total: int


# --- conversations and the audit trail ---------------------------------------------------


class ConversationRecordRequest(Called):
    """One message of a session's conversation."""

    session_id: str
    role: str
    text: str
    agent_slug: str | None = None
    scope: str | None = scope_field()
    key: str | None = Field(
        default=None, description="Where the message comes from (a transcript line's id): once."
    )


class ConversationRecordResponse(Response):
    """Where the message went; ``created`` is false when its key was recorded before."""

    conversation_id: str
    message_id: str
    order: int
    embedded: bool
    warnings: list[str]
    created: bool = True


class ConversationSearchRequest(Called):
    """Messages by meaning: the caller's session if it has one, else the whole account."""

    query: str
    session_id: str | None = None
    limit: int = Field(default=10, json_schema_extra={"minimum": 1, "maximum": 50, "default": 10})


class ConversationSearchResponse(Response):
    """Closest first."""

    results: list[dict[str, Any]]
    session_id: str | None


class ConversationMessagesRequest(Called):
    """One session's messages in order."""

    session_id: str | None = None
    limit: int = 50


class ConversationMessagesResponse(Response):
    """Oldest first: ``{id, role, text, createdAt, order, key}`` each."""

    session_id: str | None
    conversation_id: str | None
    messages: list[dict[str, Any]]


class AuditRecordRequest(Called):
    """One MCP tool call (a durable one also becomes a Task)."""

    tool: str
    input: Any = None
    output: Any = None
    is_error: bool = False
    started_at: datetime
    ended_at: datetime
    ms: float
    session_id: str | None = None
    durable: bool = False
    produced: list[Any] | None = None


class AuditRecordResponse(Response):
    """The ToolCall node and, for a durable call, its Task."""

    id: str
    conversation_id: str | None
    task_id: str | None
    produced: list[Any]


class PreviousContextRequest(Called):
    """The ``<previous-context>`` block of an admin spawn."""

    max_chars: int | None = None


class PreviousContextResponse(Response):
    """The block, how many active projects and ready tasks it shows of how many, and the id of
    the compaction briefing it starts with (if any)."""

    text: str
    chars: int
    projects: dict[str, int]
    ready: dict[str, int]
    briefing: str | None = None


# --- the Graph page and public agents ----------------------------------------------------


class GraphSampleRequest(Called):
    """A guarded sample of the graph."""

    labels: list[str] | None = None
    q: str | None = Field(default=None, description="Only what search finds for this text.")
    limit: int | None = None
    scopes: list[str] | None = scopes_field()
    internal: bool = Field(default=False, description="Include tool calls and audit tasks.")


class GraphSampleResponse(Response):
    """Nodes, the edges between them, counts per category."""

    nodes: list[dict[str, Any]]
    edges: list[dict[str, Any]]
    truncated: bool
    categories: list[dict[str, Any]]
    ms: float


class GraphNodeRequest(Called):
    """One node and its one-hop neighbourhood."""

    id: str
    label: str | None = None
    scopes: list[str] | None = scopes_field()


class GraphNodeResponse(Response):
    """``{node: null}`` alone when the node is not visible to the caller."""

    node: dict[str, Any] | None
    neighbours: list[dict[str, Any]] | None = None
    edges: list[dict[str, Any]] | None = None
    degree: int | None = None


class AgentKnowledgeRequest(Called):
    """A public agent's knowledge (the caller's agent and subscriptions)."""

    limit: int | None = None


class AgentKnowledgeResponse(Response):
    """Tagged public nodes, then keyword-subscription matches."""

    tagged: list[dict[str, Any]]
    subscribed: list[dict[str, Any]]
    truncated: bool


# --- contacts (the contacts plugin) ------------------------------------------------------


class ContactFields(Called):
    """A contact's details (schema.org Person properties); unset ones are left as they are."""

    name: str | None = Field(default=None, json_schema_extra={"maxLength": 200})
    email: str | None = Field(
        default=None,
        description="Stored trimmed and lower-cased; one contact per email.",
        json_schema_extra={"maxLength": 254},
    )
    telephone: str | None = Field(default=None, json_schema_extra={"maxLength": 40})
    job_title: str | None = Field(default=None, json_schema_extra={"maxLength": 200})
    works_for: str | None = Field(
        default=None, description="The organisation's name.", json_schema_extra={"maxLength": 200}
    )
    address: str | None = Field(default=None, json_schema_extra={"maxLength": 500})
    birth_date: str | None = Field(
        default=None, description="YYYY-MM-DD, or --MM-DD when the year is unknown."
    )
    description: str | None = Field(
        default=None, description="Notes about the person.", json_schema_extra={"maxLength": 4000}
    )

    def fields(self) -> dict[str, str | None]:
        """The details by their stored (wire) names."""
        return {
            info.alias or name: getattr(self, name)
            for name, info in ContactFields.model_fields.items()
            if name != "caller"
        }


class ContactCreateRequest(ContactFields):
    """A new contact; the same email again merges into the contact that has it."""

    name: str = Field(description="The person's name.", json_schema_extra={"maxLength": 200})
    allow_duplicate: bool = Field(
        default=False,
        description=(
            "Create even though a contact of the same name or telephone (and no email) exists: "
            "only when the owner means a different person."
        ),
    )


class ContactUpdateRequest(ContactFields):
    """New values for some of a contact's details; "" clears one (not the name)."""

    id: str = Field(description="The contact's id (from contact-lookup or contact-list).")


class ContactWritten(Written):
    """What a contact write answers, with the contact as stored."""

    contact: dict[str, Any]


class ContactLookupRequest(Called):
    """Contacts matching any of the given details."""

    email: str | None = None
    telephone: str | None = Field(default=None, description="Compared by its digits.")
    name: str | None = Field(
        default=None, description="Every word must appear in the name (any case)."
    )
    limit: int = Field(default=10, json_schema_extra={"minimum": 1, "maximum": 50, "default": 10})


class ContactLookupResponse(Response):
    """Best match first; each says which details matched (``matchedBy``)."""

    contacts: list[dict[str, Any]]


class ContactListRequest(Called):
    """Every contact by name, a page at a time."""

    page: int = Field(default=1, json_schema_extra={"minimum": 1, "default": 1})
    page_size: int = Field(
        default=20, json_schema_extra={"minimum": 1, "maximum": 100, "default": 20}
    )


class ContactListResponse(Response):
    """One page."""

    items: list[dict[str, Any]]
    page: int
    page_size: int
    total: int


HEALTH = Method(
    "health",
    HealthRequest,
    HealthResponse,
    "Neo4j, the embedder, the schema and the data partition's free space.",
)
EMBED = Method("embed", EmbedRequest, EmbedResponse, "Embed up to 256 texts.")
SEARCH = Method("search", SearchRequest, SearchResponse, "Hybrid vector + keyword search.")
WRITE = Method("write", WriteRequest, Written, "Create or merge one node.")
INGEST = Method("ingest", IngestRequest, IngestedResponse, "Ingest a Markdown/text document.")
REINDEX = Method(
    "reindex", ReindexRequest, ReindexResponse, "Embed what is missing or stale.", streams=True
)
DELETE = Method("delete", NodeRef, DeleteResponse, "Soft-delete a node (a document whole).")
RESTORE = Method("restore", NodeRef, RestoreResponse, "Undo a soft delete.")
REPORT_WRITE = Method("report.write", ReportWriteRequest, Written, "Write a report.")
REPORT_READ_LATEST = Method(
    "report.read-latest", ReportReadLatestRequest, ReportReadLatestResponse, "Newest reports."
)
REPORT_LIST = Method("report.list", ReportListRequest, ReportListResponse, "List reports.")
CONVERSATION_RECORD = Method(
    "conversation.record",
    ConversationRecordRequest,
    ConversationRecordResponse,
    "Store one message.",
)
CONVERSATION_SEARCH = Method(
    "conversation.search",
    ConversationSearchRequest,
    ConversationSearchResponse,
    "Search messages by meaning.",
)
CONVERSATION_MESSAGES = Method(
    "conversation.messages",
    ConversationMessagesRequest,
    ConversationMessagesResponse,
    "One session's messages in order.",
)
AUDIT_RECORD = Method(
    "audit.record", AuditRecordRequest, AuditRecordResponse, "Keep one MCP tool call."
)
PREVIOUS_CONTEXT = Method(
    "context.previous",
    PreviousContextRequest,
    PreviousContextResponse,
    "The <previous-context> block of an admin spawn.",
)
BRIEFING_WRITE = Method(
    "briefing.write",
    BriefingWriteRequest,
    BriefingWriteResponse,
    "Keep an admin session's compaction briefing.",
)
GRAPH_SAMPLE = Method(
    "graph.sample", GraphSampleRequest, GraphSampleResponse, "A sample for the Graph page."
)
GRAPH_NODE = Method("graph.node", GraphNodeRequest, GraphNodeResponse, "One node's neighbourhood.")
AGENT_KNOWLEDGE = Method(
    "agent.knowledge",
    AgentKnowledgeRequest,
    AgentKnowledgeResponse,
    "What a public agent's KNOWLEDGE.md is made of.",
)

# The scheduling plugin's methods (events, reminders, and the manager's firing loop).
EVENT_CREATE = Method("event.create", EventCreateRequest, Scheduled, "Add an event.")
EVENT_LIST = Method("event.list", EventListRequest, EventListResponse, "Events in a window.")
EVENT_UPDATE = Method("event.update", EventUpdateRequest, Scheduled, "Change an event.")
EVENT_CANCEL = Method("event.cancel", ScheduledRef, CancelResponse, "Cancel an event.")
REMINDER_CREATE = Method("reminder.create", ReminderCreateRequest, Scheduled, "Add a reminder.")
REMINDER_LIST = Method(
    "reminder.list", ReminderListRequest, ReminderListResponse, "Reminders by status."
)
REMINDER_UPDATE = Method("reminder.update", ReminderUpdateRequest, Scheduled, "Change a reminder.")
REMINDER_CANCEL = Method("reminder.cancel", ScheduledRef, CancelResponse, "Cancel a reminder.")
SCHEDULE_CLAIM = Method(
    "schedule.claim", ScheduleClaimRequest, ScheduleClaimResponse, "Claim what is due, once."
)
SCHEDULE_FIRED = Method(
    "schedule.fired", ScheduleFiredRequest, ScheduleFiredResponse, "Record how a firing went."
)
CONTACT_CREATE = Method(
    "contacts.create", ContactCreateRequest, ContactWritten, "Create or merge (by email) a contact."
)
CONTACT_LOOKUP = Method(
    "contacts.lookup",
    ContactLookupRequest,
    ContactLookupResponse,
    "Contacts by email, phone, name.",
)
CONTACT_UPDATE = Method(
    "contacts.update", ContactUpdateRequest, ContactWritten, "Change a contact's details."
)
CONTACT_LIST = Method("contacts.list", ContactListRequest, ContactListResponse, "List contacts.")
# Documents: uploaded files and versions (the memory plugin; appliance.memory.uploads, versions).
INGEST_FILE = Method(
    "document.ingest-file",
    IngestFileRequest,
    IngestFileResponse,
    "Convert and ingest an uploaded file.",
    streams=True,
)
DOCUMENT_VERSIONS = Method(
    "document.versions", DocumentRef, VersionsResponse, "A document's versions."
)
DOCUMENT_VERSION = Method(
    "document.version", VersionRequest, VersionResponse, "One version and its diff."
)
RESTORE_VERSION = Method(
    "document.restore-version",
    RestoreVersionRequest,
    RestoreVersionResponse,
    "Restore a version (a new version).",
    streams=True,
)
# Backups that restore (appliance.memory.backup).
BACKUP_CREATE = Method(
    "backup.create", BackupCreateRequest, BackupCreated, "Back up everything now.", streams=True
)
BACKUP_LIST = Method("backup.list", BackupListRequest, BackupListResponse, "The backups kept.")
BACKUP_RESTORE = Method(
    "backup.restore",
    BackupRestoreRequest,
    BackupRestored,
    "Verify a backup whole, then restore it.",
    streams=True,
)

CHANNEL_RECORD = Method(
    "channel.record",
    ChannelRecordRequest,
    ChannelMessageResponse,
    "Keep one channel message (once per key).",
)
CHANNEL_UPDATE = Method(
    "channel.update", ChannelUpdateRequest, ChannelMessageResponse, "Move an inbound message on."
)
CHANNEL_PENDING = Method(
    "channel.pending",
    ChannelPendingRequest,
    ChannelMessagesResponse,
    "Inbound messages not yet handled.",
)
CHANNEL_CHATS = Method(
    "channel.chats", ChannelChatsRequest, ChannelChatsResponse, "A channel's recent chats."
)
CHANNEL_ARCHIVE = Method(
    "channel.archive",
    ChannelArchiveRequest,
    ChannelArchiveResponse,
    "Keep one session of a chat export (once).",
)

METHODS: tuple[Method[Any, Any], ...] = (
    HEALTH,
    EMBED,
    SEARCH,
    WRITE,
    REPORT_WRITE,
    REPORT_READ_LATEST,
    REPORT_LIST,
    CONVERSATION_RECORD,
    CONVERSATION_SEARCH,
    CONVERSATION_MESSAGES,
    INGEST,
    REINDEX,
    DELETE,
    RESTORE,
    GRAPH_SAMPLE,
    GRAPH_NODE,
    AUDIT_RECORD,
    AGENT_KNOWLEDGE,
    PREVIOUS_CONTEXT,
    BRIEFING_WRITE,
    # scheduling
    EVENT_CREATE,
    EVENT_LIST,
    EVENT_UPDATE,
    EVENT_CANCEL,
    REMINDER_CREATE,
    REMINDER_LIST,
    REMINDER_UPDATE,
    REMINDER_CANCEL,
    SCHEDULE_CLAIM,
    SCHEDULE_FIRED,
    # contacts
    CONTACT_CREATE,
    CONTACT_LOOKUP,
    CONTACT_UPDATE,
    CONTACT_LIST,
    # documents
    INGEST_FILE,
    DOCUMENT_VERSIONS,
    DOCUMENT_VERSION,
    RESTORE_VERSION,
    # backups
    BACKUP_CREATE,
    BACKUP_LIST,
    BACKUP_RESTORE,
    # projects and tasks, and the review of visitors' ended conversations
    *work.METHODS,
    # channels
    CHANNEL_RECORD,
    CHANNEL_UPDATE,
    CHANNEL_PENDING,
    CHANNEL_CHATS,
    CHANNEL_ARCHIVE,
)
BY_NAME = {method.name: method for method in METHODS}


def _wire_fields(model: type[Request] | type[Response]) -> str:
    names = [
        (info.alias or name) + ("" if info.is_required() else "?")
        for name, info in model.model_fields.items()
        if name != "caller"
    ]
    return ", ".join(names)


def methods_table() -> str:
    """The Markdown table of every method, its parameters and its answer (for the README)."""
    lines = ["| method | params | answer | what it does |", "|---|---|---|---|"]
    for method in METHODS:
        lines.append(
            f"| `{method.name}` | {_wire_fields(method.request) or '—'} | "
            f"{_wire_fields(method.response)} | {method.summary} |"
        )
    return "\n".join(lines)
