"""A knowledge document's files on disk: the text it was last ingested from, and its source file.

    accounts/<id>/documents/<documentId>.md   the text of the document's last ingest
    accounts/<id>/attachments/…               source files; ``file:<absolute path>`` names one

The engine keeps a document's text at every ingest, before it writes the graph (so a failed write
of the text changes nothing), and the artefact pane reads it to show and edit the document; an
edit is saved by ingesting again. The folder is private (0700, files 0600): it holds the owner's
documents. A ``file:`` attachmentId whose path lies inside the account's ``attachments/`` folder
names the document's source file (a PDF shows inline); one anywhere else is never served.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from appliance.core.fsio import ensure_private_dir, write_atomic

DOCUMENTS = "documents"
ATTACHMENTS = "attachments"
TEXT_SUFFIX = ".md"
FILE_SCHEME = "file:"
_DOCUMENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,99}$")


def is_document_id(value: object) -> bool:
    """True when ``value`` can be a document id (and so a file name): letters, digits, hyphens."""
    return isinstance(value, str) and bool(_DOCUMENT_ID.match(value))


def text_path(account_dir: Path, document_id: str) -> Path:
    """Where the kept text of ``document_id`` lives; ValueError for an id that is no file name."""
    if not is_document_id(document_id):
        raise ValueError(f"{document_id!r} is not a document id")
    return account_dir / DOCUMENTS / f"{document_id}{TEXT_SUFFIX}"


def keep_text(account_dir: Path, document_id: str, text: str) -> Path:
    """Write the document's text durably (0600 in a 0700 folder); return its path."""
    path = text_path(account_dir, document_id)
    ensure_private_dir(path.parent)
    write_atomic(path, text, mode=0o600)
    return path


def read_text(account_dir: Path, document_id: str) -> str | None:
    """The kept text of a document; None when there is none. Never follows a symlink."""
    path = text_path(account_dir, document_id)
    if path.parent.is_symlink():
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:  # ELOOP: a symlink put there
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        return handle.read().decode("utf-8", errors="replace")


def source_of(account_dir: Path, attachment_id: str | None) -> str | None:
    """The path, relative to the account's ``attachments/`` folder, that ``attachment_id`` names.

    Only ``file:<absolute path>`` inside that folder counts (judged on the path as written, so
    ``..`` cannot climb out); anything else is None: the document has no source file to serve.
    """
    if not attachment_id or not attachment_id.startswith(FILE_SCHEME):
        return None
    raw = attachment_id[len(FILE_SCHEME) :]
    if not raw.startswith("/") or "\x00" in raw:
        return None
    path = os.path.normpath(raw)
    for root in {str(account_dir / ATTACHMENTS), os.path.realpath(account_dir / ATTACHMENTS)}:
        if path.startswith(root + os.sep):
            return path[len(root) + 1 :]
    return None
