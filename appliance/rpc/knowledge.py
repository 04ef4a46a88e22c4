"""Request and response types of the engine's document methods: uploaded files and versions.

Declared here to keep :mod:`appliance.rpc.engine` short; it names the methods in its one table,
and the engine, the MCP tools and the docs read them through it.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from appliance.rpc.calls import Called, scope_field
from appliance.rpc.contract import Response


class IngestedResponse(Response):
    """Counts of what an ingest wrote, and the document's version after it."""

    document_id: str
    version: int
    sections: int
    chunks: int
    embedded: int
    reused: int
    warnings: list[str]


class IngestFileRequest(Called):
    """A staged upload: converted to text, kept as the attachment, ingested (streams progress)."""

    staged: str = Field(description="The staged file's name in the account's upload folder.")
    file_name: str = Field(description="The file's own name (its extension says its kind).")
    title: str | None = Field(default=None, description="Default: the document's own title.")
    scope: str | None = scope_field()
    agents: list[str] | None = None


class IngestFileResponse(IngestedResponse):
    """What was ingested, from which file, how long it took (``readSeconds``: the conversion)."""

    attachment_id: str
    title: str
    kind: str
    bytes: int
    chars: int
    file_name: str
    seconds: float
    read_seconds: float


class DocumentRef(Called):
    """One KnowledgeDocument by id."""

    id: str = Field(description="The KnowledgeDocument's id (documentId).")


class VersionsResponse(Response):
    """Newest first: ``{number, title, createdAt, source, chars, fileName?, restoredFrom?}``."""

    document_id: str
    title: str | None
    attachment_id: str | None
    current: int | None
    versions: list[dict[str, Any]]


class VersionRequest(DocumentRef):
    """One version of a document, with its diff from another."""

    number: int = Field(json_schema_extra={"minimum": 1})
    against: int | None = Field(
        default=None, description="Diff against this version (default: the one before)."
    )
    max_chars: int = Field(
        default=40_000,
        description="At most this much of the text and of the diff.",
        json_schema_extra={"minimum": 1, "maximum": 2_000_000, "default": 40_000},
    )


class VersionResponse(Response):
    """The version's text and a unified diff (``truncated`` when either was cut)."""

    document_id: str
    title: str | None
    current: int | None
    version: dict[str, Any]
    against: int | None
    text: str
    diff: str
    truncated: bool


class RestoreVersionRequest(DocumentRef):
    """Make an earlier version the document's text again (itself a new version)."""

    number: int = Field(json_schema_extra={"minimum": 1})


class RestoreVersionResponse(IngestedResponse):
    """What the restoring ingest wrote; ``restoredFrom`` is the version restored."""

    restored_from: int
