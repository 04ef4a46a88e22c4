"""Request and response types of the engine's backup methods (:mod:`appliance.memory.backup`).

Declared here to keep :mod:`appliance.rpc.engine` short; it names the methods in its one table.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from appliance.rpc.calls import Called
from appliance.rpc.contract import Response


class BackupCreateRequest(Called):
    """Back up now (streams progress); ``includeKeys`` unset: MAXY_BACKUP_KEYS decides."""

    include_keys: bool | None = Field(
        default=None, description="Include the keys folder and the Claude login (0600)."
    )


class BackupCreated(Response):
    """The archive written and what it holds."""

    name: str
    bytes: int
    created_at: str
    nodes: int
    relationships: int
    content_hash: str
    accounts: list[str]
    files: int
    keys: bool
    seconds: float


class BackupListRequest(Called):
    """No parameters."""


class BackupListResponse(Response):
    """Newest first: ``{name, bytes, createdAt, nodes?, relationships?, accounts?, keys?,
    error?}``; ``folder``: where they are; ``keep``: how many are kept."""

    backups: list[dict[str, Any]]
    folder: str
    keep: int
    schedule: str


class BackupRestoreRequest(Called):
    """An archive verified whole, then restored (streams progress)."""

    name: str = Field(
        description="An archive's name from backup.list, or an absolute path to one.",
        json_schema_extra={"maxLength": 4096},
    )


class BackupRestored(Response):
    """What was restored."""

    name: str
    nodes: int
    relationships: int
    content_hash: str
    accounts: list[str]
    files: int
    seconds: float
