"""The versions of a KnowledgeDocument: every ingest that changes it keeps what it was.

    (:KnowledgeDocument)-[:HAS_VERSION]->(:DocumentVersion {number, title, text, …})

Why nodes in the graph rather than a git repository per account: a version is written in the
same transaction as the document it describes (:mod:`appliance.memory.ingest`), so the two can
never disagree after a crash; it carries ``accountId``, ``scope``, ``agents`` and ``deletedAt``
like every node, so the guards that keep every other read inside an account keep this one too,
and deleting, restoring and purging a document takes its versions along
(:mod:`appliance.memory.lifecycle`); a backup of the graph holds the history with nothing else to
copy. Git would bring compression and a history an owner can take elsewhere, at the price of a
second store kept in step with the graph, its own locks across three processes and its own
backup. Documents are text of at most two million characters; difflib makes the diffs.

- :func:`record` runs inside the ingest's transaction: a new version when the title or text
  changed (``contentHash``), numbered from 1; the same text again keeps the number. The
  documents of one commit round (:mod:`appliance.memory.commits`) are recorded in one statement.
- :func:`listing`, :func:`show` read through the document: a document the caller may not see
  (another account, deleted, another scope or agent) is :class:`~appliance.memory.errors.NotFound`.
- Restoring a version is ingesting its text again (the engine's ``document.restore-version``):
  that makes a new version, ``source: restore``, ``restoredFrom`` naming the one restored.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from appliance.core.identity import Caller
from appliance.memory.chunking import content_hash
from appliance.memory.errors import NotFound
from appliance.memory.graph import Graph, Runs
from appliance.memory.guards import guard

log = logging.getLogger(__name__)

LABEL = "DocumentVersion"
MAX_TEXT_CHARS = 40_000  # what one answer carries of a version's text or diff, unless asked
CONTEXT_LINES = 3
# What a version says about itself in a list (never its text).
_SUMMARY = (
    "number: v.number, title: v.title, createdAt: v.createdAt, source: v.source, "
    "chars: v.charCount, fileName: v.fileName, restoredFrom: v.restoredFrom, "
    "sessionId: v.sessionId"
)


def version_hash(title: str, text: str) -> str:
    """What tells two versions apart: the title and the text."""
    return content_hash(f"{title.strip()}\x1f{text}")


@dataclass(frozen=True)
class NewVersion:
    """A document's title and text as an ingest leaves them, to keep as its newest version."""

    caller: Caller
    document_id: str
    title: str
    text: str
    source: str
    scope: str | None
    agents: list[str] | None
    file: Mapping[str, Any] | None = None
    restored_from: int | None = None

    def row(self) -> dict[str, Any]:
        digest = version_hash(self.title, self.text)
        return {
            "doc": self.document_id,
            "account": self.caller.account_id,
            "hash": digest,
            "scope": self.scope,
            "agents": self.agents,
            "props": {
                "documentId": self.document_id,
                "title": self.title.strip(),
                "text": self.text,
                "contentHash": digest,
                "charCount": len(self.text),
                "source": self.source,
                "restoredFrom": self.restored_from,
                "sessionId": self.caller.session_id,
                "scope": self.scope,
                "agents": self.agents,
                **{k: v for k, v in (self.file or {}).items() if k in FILE_KEYS},
            },
        }


# For each document: its versions revived and given its scope and agents, then a new version
# (numbered after the newest) unless the newest already has this title and text.
_RECORD = (
    "UNWIND $rows AS row "
    "MATCH (d:KnowledgeDocument {id: row.doc}) WHERE d.accountId = row.account "
    "CALL (d, row) { "
    "OPTIONAL MATCH (d)-[:HAS_VERSION]->(v:DocumentVersion) WHERE v.accountId = row.account "
    "SET v.deletedAt = null, v.scope = row.scope, v.agents = row.agents "
    "RETURN v.number AS last, v.contentHash AS lastHash ORDER BY last DESC LIMIT 1 } "
    "WITH d, row, last, coalesce(lastHash = row.hash, false) AS same "
    "WITH d, row, same, CASE WHEN same THEN last ELSE coalesce(last, 0) + 1 END AS number "
    "CALL (d, row, same, number) { WITH * WHERE NOT same "
    "CREATE (d)-[:HAS_VERSION]->(v:DocumentVersion) "
    "SET v = row.props, v.id = row.doc + ':v:' + toString(number), v.number = number, "
    "v.accountId = row.account, v.createdAt = datetime() } "
    "SET d.version = number "
    "RETURN row.doc AS doc, number, NOT same AS new"
)


async def record(run: Runs, versions: Sequence[NewVersion]) -> list[tuple[int, bool]]:
    """Keep each title and text as its document's newest version unless it already is, in one
    statement for them all (the documents must differ); return each one's number and whether
    it is new, in order."""
    rows, _ = await run.run(_RECORD, {"rows": [version.row() for version in versions]})
    kept = {str(row["doc"]): (int(row["number"]), bool(row["new"])) for row in rows}
    out = []
    for version in versions:
        if version.document_id not in kept:
            raise NotFound(
                f"Document {version.document_id} is not in this account: no version was kept."
            )
        number, new = kept[version.document_id]
        if new:
            log.info(
                "[versions] op=record document=%s number=%d source=%s",
                version.document_id,
                number,
                version.source,
            )
        out.append((number, new))
    return out


# The uploaded file a version (and its document) came from, when it came from one.
FILE_KEYS = ("fileName", "file", "fileSha256", "fileBytes", "mediaType")


async def _document(graph: Graph, caller: Caller, document_id: str) -> dict[str, Any]:
    rows, _ = await graph.read(
        "MATCH (d:KnowledgeDocument {id: $doc}) WHERE " + guard("d") + " "
        "RETURN d.id AS id, d.title AS title, d.attachmentId AS attachmentId, "
        "d.version AS current, d.scope AS scope, d.agents AS agents",
        {**caller.params(), "doc": document_id},
    )
    if not rows:
        raise NotFound(
            f"No document with id {document_id} in this account (or it was deleted). "
            "Search for it again to get its id."
        )
    return rows[0]


async def listing(graph: Graph, caller: Caller, document_id: str) -> dict[str, Any]:
    """The document's versions, newest first (their text left out)."""
    document = await _document(graph, caller, document_id)
    rows, _ = await graph.read(
        "MATCH (d:KnowledgeDocument {id: $doc})-[:HAS_VERSION]->(v:DocumentVersion) "
        "WHERE " + guard("d") + " AND " + guard("v") + " "
        f"RETURN v {{{_SUMMARY}}} AS version ORDER BY v.number DESC",
        {**caller.params(), "doc": document_id},
    )
    return {
        "documentId": document["id"],
        "title": document["title"],
        "attachmentId": document["attachmentId"],
        "current": document["current"],
        "versions": [row["version"] for row in rows],
    }


async def text_of(graph: Graph, caller: Caller, document_id: str, number: int) -> dict[str, Any]:
    """One version in full (its title, text and file), or NotFound."""
    document = await _document(graph, caller, document_id)
    rows, _ = await graph.read(
        "MATCH (d:KnowledgeDocument {id: $doc})-[:HAS_VERSION]->(v:DocumentVersion) "
        "WHERE " + guard("d") + " AND " + guard("v") + " AND v.number = $number "
        f"RETURN v {{{_SUMMARY}, text: v.text, file: v.file, fileSha256: v.fileSha256, "
        "fileBytes: v.fileBytes, mediaType: v.mediaType} AS version",
        {**caller.params(), "doc": document_id, "number": number},
    )
    if not rows:
        raise NotFound(
            f"Document {document_id} has no version {number}. List its versions to see "
            "which it has."
        )
    return {**rows[0]["version"], "document": document}


def _cut(text: str, limit: int) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[:limit], True)


def diff(old: str, new: str, old_name: str, new_name: str) -> str:
    """A unified diff of two texts, line by line."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=old_name,
        tofile=new_name,
        n=CONTEXT_LINES,
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


async def show(
    graph: Graph,
    caller: Caller,
    document_id: str,
    number: int,
    against: int | None = None,
    max_chars: int = MAX_TEXT_CHARS,
) -> dict[str, Any]:
    """One version's text and its diff from ``against`` (default: the version before it)."""
    version = await text_of(graph, caller, document_id, number)
    base = number - 1 if against is None else against
    old = await text_of(graph, caller, document_id, base) if base >= 1 else None
    changes = diff(
        old["text"] if old else "",
        version["text"],
        f"version {base}" if old else "nothing",
        f"version {number}",
    )
    text, text_cut = _cut(version["text"], max_chars)
    changes, diff_cut = _cut(changes, max_chars)
    summary = {k: v for k, v in version.items() if k not in ("text", "document")}
    return {
        "documentId": document_id,
        "title": version["document"]["title"],
        "current": version["document"]["current"],
        "version": summary,
        "against": base if old else None,
        "text": text,
        "diff": changes,
        "truncated": text_cut or diff_cut,
    }
