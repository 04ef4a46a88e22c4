"""The tool table: every MCP tool, the plugin that ships it, and what implements it.

A tool is one of two kinds:

- **engine-backed** (``method``): the call is forwarded to an engine RPC method. Its input schema
  is not written here: it is the request type of that method (:mod:`appliance.rpc.engine`) cut to
  the arguments the tool exposes, so the MCP view and the engine's contract cannot drift apart.
- **local** (``handler`` with its own ``input_schema``): the call runs inside the ``maxy mcp``
  process (a web fetch, the session manager, the account's plugins, Telegram), with a
  :class:`ToolContext`: :mod:`appliance.mcp.web`, :mod:`appliance.mcp.admin`,
  :mod:`appliance.mcp.telegram`.

A plugin with many tools keeps them in a module of its own (:mod:`appliance.mcp.scheduling`,
:mod:`appliance.mcp.work` for projects and tasks) that :data:`TABLES` names; only the server of
that plugin imports it.

``maxy mcp --plugin NAME`` serves the tools whose ``plugin`` is NAME; each plugin's ``PLUGIN.md``
lists the same names (a test holds the two equal).
"""

from __future__ import annotations

import importlib

from appliance.mcp import documents
from appliance.mcp.tool import (
    ALWAYS_LOAD,
    LARGE_RESULT,
    Handler,
    Tool,
    ToolContext,
    ToolError,
)
from appliance.rpc import engine as api

__all__ = ["ALWAYS_LOAD", "LARGE_RESULT", "Handler", "Tool", "ToolContext", "ToolError"]


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
            "replaces the text (the earlier one is kept as a version: memory-versions) and "
            "re-embeds only what changed."
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
    Tool(
        name="memory-delete",
        method=api.DELETE,
        description=(
            "Forget a node: a soft delete (a document goes with its sections and chunks). It "
            "vanishes from every search and read at once, and is purged for good after the "
            "grace period (MAXY_PURGE_GRACE_DAYS); memory-restore brings it back until then."
        ),
        forwarded=("label", "id"),
    ),
    Tool(
        name="memory-restore",
        method=api.RESTORE,
        description="Undo a soft delete (memory-delete) within its grace period.",
        forwarded=("label", "id"),
    ),
    *documents.TOOLS,
    Tool(
        name="memory-versions",
        method=api.DOCUMENT_VERSIONS,
        description=(
            "List a document's versions, newest first: every ingest or upload that changed it "
            "kept the text before (number, when, source, file name, size)."
        ),
        forwarded=("id",),
    ),
    Tool(
        name="memory-version",
        method=api.DOCUMENT_VERSION,
        description=(
            "Read one version of a document: its text and a unified diff from the version "
            "before it (or from `against`)."
        ),
        meta=LARGE_RESULT,
        forwarded=("id", "number", "against", "maxChars"),
    ),
    Tool(
        name="memory-version-restore",
        method=api.RESTORE_VERSION,
        description=(
            "Make an earlier version the document's text again; the restore is itself a new "
            "version, so nothing is lost. Only when the owner asks for it."
        ),
        forwarded=("id", "number"),
        produces="documentId",
        produces_label="KnowledgeDocument",
    ),
)

# --- contacts: the owner's address book (Person nodes; never public) -----------------------
CONTACT_FIELDS = (
    "name",
    "email",
    "telephone",
    "jobTitle",
    "worksFor",
    "address",
    "birthDate",
    "description",
)
CONTACTS_TOOLS: tuple[Tool, ...] = (
    Tool(
        name="contact-create",
        plugin="contacts",
        method=api.CONTACT_CREATE,
        description=(
            "Add a person to the owner's contacts. A contact is unique by email (any case or "
            "spacing): creating one whose email exists updates that contact instead "
            "(created: false). Without an email, a person whose name or telephone matches an "
            "existing contact is refused, naming it: update that one, or pass allowDuplicate "
            "when the owner means someone else. Only details the owner gave or a document "
            "states; never guess an email or a number."
        ),
        forwarded=(*CONTACT_FIELDS, "allowDuplicate"),
        produces="id",
        produces_label="Person",
    ),
    Tool(
        name="contact-lookup",
        plugin="contacts",
        method=api.CONTACT_LOOKUP,
        description=(
            "Find contacts by email, telephone number (compared by its digits) or name (every "
            "word, any case); people matching any detail given, best first, each with "
            "matchedBy. Use it before creating or updating someone."
        ),
        forwarded=("email", "telephone", "name", "limit"),
    ),
    Tool(
        name="contact-update",
        plugin="contacts",
        method=api.CONTACT_UPDATE,
        description=(
            "Change some details of a contact by its id; details not given stay as they are, "
            '"" clears one (not the name). An email another contact has is refused. To forget '
            "a contact, memory-delete it (label Person)."
        ),
        forwarded=("id", *CONTACT_FIELDS),
        produces="id",
        produces_label="Person",
    ),
    Tool(
        name="contact-list",
        plugin="contacts",
        method=api.CONTACT_LIST,
        description="List the owner's contacts by name, a page at a time (with the total).",
        forwarded=("page", "pageSize"),
    ),
)


# Where each plugin's tools live: (module, the tuple in it). A server imports only its own
# plugin's module: a session runs one `maxy mcp` per plugin, and the memory plugin's server need
# not hold the web's HTML converter, Telegram's library or the date parser (`just bench-memory`
# shows the servers' size). The frozen binary holds every appliance module (build/maxy.spec).
TABLES: dict[str, tuple[str, str]] = {
    "memory": (__name__, "MEMORY_TOOLS"),
    "contacts": (__name__, "CONTACTS_TOOLS"),
    "web": ("appliance.mcp.web", "TOOLS"),
    "admin": ("appliance.mcp.admin", "TOOLS"),
    # scheduling: the time, times in words, events and reminders
    "scheduling": ("appliance.mcp.scheduling", "TOOLS"),
    # projects and tasks: the owner's work and the ready set
    "projects": ("appliance.mcp.work", "PROJECT_TOOLS"),
    "tasks": ("appliance.mcp.work", "TASK_TOOLS"),
    # telegram: the owner's bot (chats, a message to one, its token)
    "telegram": ("appliance.mcp.telegram", "TOOLS"),
    # whatsapp: the owner's linked device (chats, a message to one, a chat export's import)
    "whatsapp": ("appliance.mcp.whatsapp", "TOOLS"),
}


def tools_of(plugin: str) -> tuple[Tool, ...]:
    """The tools one plugin's MCP server serves (empty for a plugin of no tools)."""
    if plugin not in TABLES:
        return ()
    module, name = TABLES[plugin]
    table: tuple[Tool, ...] = getattr(importlib.import_module(module), name)
    return tuple(tool for tool in table if tool.plugin == plugin)


def all_tools() -> tuple[Tool, ...]:
    """Every plugin's tools, in one table (this imports every plugin's module)."""
    return tuple(tool for plugin in TABLES for tool in tools_of(plugin))


def plugins_with_tools() -> list[str]:
    """The plugins whose tools live in this table, sorted."""
    return sorted(TABLES)
