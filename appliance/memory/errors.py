"""Errors of the retrieval engine.

    EngineError
    ├── WriteRejected              a write refused before anything was written
    ├── NotFound                   no such node the caller may see
    ├── BackupError                a backup could not be written (disk full, busy) or restored
    │   └── BackupRefused          an archive failed verification: nothing was changed
    ├── EmbedError
    │   ├── ModelMissing           the GGUF file is not there
    │   ├── ModelLoadFailed        llama.cpp could not load it
    │   └── EmptyText              nothing left to embed after clean-up
    └── GraphError
        ├── GraphUnavailable       Neo4j not reachable
        ├── GraphAuthFailed        wrong user or password
        ├── GraphQueryFailed       Neo4j rejected a statement
        └── SchemaDimensionMismatch  vector indexes built for another model

Each carries a stable ``code`` that crosses the RPC boundary unchanged.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


class EngineError(Exception):
    """Base of every error the engine reports."""

    code = "engine-error"


class EmbedError(EngineError):
    """The embedding model failed."""

    code = "embed-failed"


class ModelMissing(EmbedError):
    """The GGUF model file does not exist."""

    code = "model-missing"


class ModelLoadFailed(EmbedError):
    """llama.cpp could not load the model."""

    code = "model-load-failed"


class EmptyText(EmbedError):
    """The text is empty once cleaned."""

    code = "empty-text"


class GraphError(EngineError):
    """Neo4j failed."""

    code = "graph-error"


class GraphUnavailable(GraphError):
    """Neo4j is not reachable."""

    code = "graph-unavailable"


class GraphAuthFailed(GraphError):
    """Neo4j refused the credentials."""

    code = "graph-auth-failed"


class GraphQueryFailed(GraphError):
    """Neo4j rejected a statement."""

    code = "graph-query-failed"


class SchemaDimensionMismatch(GraphError):
    """Existing vector indexes have another dimension than the model."""

    code = "schema-dimension-mismatch"


class WriteRejected(EngineError):
    """The write was refused; nothing was written."""

    code = "write-rejected"


class BackupError(EngineError):
    """A backup could not be written, listed or restored."""

    code = "backup-failed"


class BackupRefused(BackupError):
    """An archive is corrupt, truncated or of another format: refused before any change."""

    code = "backup-refused"


class NotFound(EngineError):
    """Nothing the caller may see has that id (another account's nodes answer the same)."""

    code = "not-found"


def rejected(area: str, reason: str, message: str, **fields: Any) -> WriteRejected:
    """Log ``[area] reject reason=… key=value…`` once and return the error to raise."""
    detail = " ".join(f"{k}={v}" for k, v in fields.items())
    log.error("[%s] reject reason=%s %s", area, reason, detail)
    return WriteRejected(message)
