"""``memory-ingest``: a Markdown or plain-text document becomes a searchable hierarchy.

    (:KnowledgeDocument)-[:HAS_SECTION]->(:Section)-[:HAS_CHUNK]->(:Chunk)

Contract:

- A document that is only a title is ingested with its title as its text, and one that is only
  text with a title made of its first heading or line (:func:`~appliance.memory.chunking.title_of`);
  only one with neither a title nor text is refused (``empty-document``).
- ``(account, attachmentId)`` identifies the document; ingesting the same attachment again
  REPLACES its hierarchy: sections and chunks no longer produced are deleted, the rest are
  updated in place, and a soft-deleted hierarchy is revived (``deletedAt`` cleared everywhere).
- Sections come from :func:`~appliance.memory.chunking.sectionise` and chunks from
  :func:`~appliance.memory.chunking.chunk`, both with their documented defaults.
- Every node carries ``id``, ``accountId``, ``contentHash``, ``embedding``, ``embeddingModel``,
  ``createdAt``, ``updatedAt``, the request's ``scope`` and ``agents``, and its position
  (sections ``index``; chunks ``index`` within their section and ``order`` within the document).
  Keyword search sees ``title`` (document, section), ``summary`` (document, section) and
  ``content`` (chunk) through the ``entity_search`` full-text index.
- Each node is embedded from :func:`node_embedding_text` (document: title + opening summary;
  section: title path + summary of its text; chunk: its text) and ``contentHash`` is the hash of
  that text. A node is embedded again only when that hash or the embedding model changed, so an
  edit re-embeds the chunks it touches and a section or document only when its summary moved.
  Nodes that share a text (a one-section document and its section) are embedded from one vector.
- Ids are derived from the document id and the content (a chunk's text, a section's heading
  path), so an unchanged chunk keeps its node, edges and embedding even when text around it moves.
- A chunk carries its section's ``path`` (the document title, then the headings down to its
  section), so it can be shown as "Document \u203a Section" without a second read.
- The text itself is kept (:func:`appliance.core.documents.keep_text`, when the ingester has a
  ``keep``) BEFORE the graph is written: the artefact pane shows and edits it, and an edit is
  saved by ingesting again. A text that cannot be kept refuses the ingest (``text-not-kept``)
  with nothing written.
- A failed embed never aborts the ingest: the node is written without an embedding (a later
  reindex fills it in) and one ``[graph-write] warn reason=embed-failed`` line is logged.
- Writes are a handful of batched ``UNWIND`` statements, not one round trip per chunk, in one
  transaction with the document's new version (:mod:`appliance.memory.versions`): an ingest
  that fails half-way (Neo4j gone, an id of another account) leaves the graph as it was. The
  ingests of different documents that are ready while a commit is in flight share the next
  transaction and its statements: one ``UNWIND`` per level, one for the stale nodes and one for
  the versions, whatever the number of documents (:mod:`appliance.memory.commits`); if it
  fails, each is written again alone.
- A ``progress`` callback hears ``("embedding", done, total)`` after each batch of
  :data:`EMBED_BATCH` texts, so a long ingest streams progress instead of going quiet.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from appliance.core.identity import Caller
from appliance.memory import versions
from appliance.memory.chunking import chunk, content_hash, sectionise, summary, title_of
from appliance.memory.commits import Commits
from appliance.memory.errors import EngineError, ModelLoadFailed, ModelMissing, rejected
from appliance.memory.graph import Graph, Runs
from appliance.memory.write import (
    EmbedTexts,
    WriteRequest,
    embed_together,
    embedding_text,
    validate,
)

log = logging.getLogger(__name__)

MAX_TEXT_CHARS = 2_000_000
BATCH_ROWS = 500  # rows per UNWIND: bounds one statement's size (each row carries a vector)
EMBED_BATCH = 16  # texts embedded between two progress reports
PATH_SEPARATOR = " > "
# Document ids are a pure function of (account, attachmentId), so two racing first ingests of
# one attachment MERGE onto the same node instead of creating two documents.
_DOCUMENT_NAMESPACE = uuid.UUID("6f1d2c4e-5b7a-4e8f-9a3b-2c1d0e9f8a7b")
# These mean the model itself is broken: every further embed would fail the same way.
_MODEL_BROKEN = (ModelMissing, ModelLoadFailed)


@dataclass
class IngestRequest:
    """One document to ingest."""

    title: str
    text: str
    attachment_id: str
    scope: str | None = None
    agents: Sequence[str] | None = None
    # Where the text came from, kept on its version: "ingest", "upload" or "restore".
    source: str = "ingest"
    # The uploaded file it was read from (versions.FILE_KEYS), kept on the document and version.
    file: Mapping[str, Any] | None = None
    restored_from: int | None = None


Progress = Callable[[str, int, int], Awaitable[None]]  # (stage, done, total)


@dataclass
class _Node:
    """A node of the planned hierarchy and what embedding it ends up with."""

    id: str
    props: dict[str, Any]
    hash: str
    text: str
    parent: str | None = None
    embedding: list[float] | None = None
    keep: bool = False  # the stored embedding is current: leave it alone

    def row(self, owner: Mapping[str, Any]) -> dict[str, Any]:
        """The node as one row of an ``UNWIND``, with ``owner``'s account, scope and agents."""
        return {
            **owner,
            "id": self.id,
            "parent": self.parent,
            "props": self.props,
            "hash": self.hash,
            "embedding": self.embedding,
            # Not kept and not embedded: a stored vector would describe other text; drop it.
            "drop": not self.keep and self.embedding is None,
        }


@dataclass
class _Plan:
    document: _Node
    sections: list[_Node] = field(default_factory=list)
    chunks: list[_Node] = field(default_factory=list)

    @property
    def nodes(self) -> list[_Node]:
        return [self.document, *self.sections, *self.chunks]


@dataclass
class _Write:
    """One ingest's share of a commit round: its nodes, whose they are, and its version."""

    plan: _Plan
    owner: dict[str, Any]  # account, scope, agents: set on every node
    version: versions.NewVersion

    def rows(self, level: list[_Node]) -> list[dict[str, Any]]:
        return [node.row(self.owner) for node in level]


def node_embedding_text(label: str, props: Mapping[str, Any]) -> str:
    """The text an ingested KnowledgeDocument, Section or Chunk is embedded from."""
    if label == "Chunk":
        return str(props.get("content") or "")
    if label == "Section":
        path = PATH_SEPARATOR.join(str(p) for p in props.get("path") or [])
        return embedding_text("Section", {"title": path, "summary": props.get("summary")})
    return embedding_text(label, {"title": props.get("title"), "summary": props.get("summary")})


def document_id(account_id: str, attachment_id: str) -> str:
    """The id a new document of this account and attachment gets."""
    return str(uuid.uuid5(_DOCUMENT_NAMESPACE, f"{account_id}\x1f{attachment_id}"))


def _keyed_id(prefix: str, key: str, seen: dict[str, int]) -> str:
    """``prefix`` + a short hash of ``key``, numbered when the key repeats in the document."""
    n = seen.get(key, 0)
    seen[key] = n + 1
    return f"{prefix}{content_hash(key)[:20]}" + (f"-{n}" if n else "")


def _node(label: str, node_id: str, props: dict[str, Any], parent: str | None) -> _Node:
    text = node_embedding_text(label, props)
    return _Node(node_id, props, content_hash(text), text, parent)


def _plan(doc_id: str, request: IngestRequest) -> _Plan:
    """Split the request's text into the document, section and chunk nodes to write."""
    title = request.title.strip()
    sections = sectionise(request.text, title_hint=title)
    common = {"documentId": doc_id, "attachmentId": request.attachment_id}
    out = _Plan(
        _node(
            "KnowledgeDocument",
            doc_id,
            {
                "title": title,
                "summary": summary("\n\n".join(s.text for s in sections)),
                "attachmentId": request.attachment_id,
                "sectionCount": len(sections),
                "charCount": len(request.text),
                **{k: v for k, v in (request.file or {}).items() if k in versions.FILE_KEYS},
            },
            None,
        )
    )
    section_keys: dict[str, int] = {}
    chunk_keys: dict[str, int] = {}
    for section in sections:
        # The preamble's path is already [title]; headings get the document title in front.
        trail = section.path if section.level == 0 else [title, *section.path]
        section_id = _keyed_id(f"{doc_id}:s:", "\x1f".join(section.path), section_keys)
        pieces = chunk(section.text)
        out.sections.append(
            _node(
                "Section",
                section_id,
                {
                    **common,
                    "title": section.title,
                    "summary": summary(section.text),
                    "path": trail,
                    "level": section.level,
                    "index": section.index,
                    "chunkCount": len(pieces),
                },
                doc_id,
            )
        )
        for index, piece in enumerate(pieces):
            props = {
                **common,
                "sectionId": section_id,
                "path": trail,
                "content": piece,
                "index": index,
                "order": len(out.chunks),
            }
            chunk_id = _keyed_id(f"{doc_id}:c:", piece, chunk_keys)
            out.chunks.append(_node("Chunk", chunk_id, props, section_id))
    out.document.props["chunkCount"] = len(out.chunks)
    return out


def _check(caller: Caller, request: IngestRequest) -> None:
    """Refuse a request that cannot be ingested, before anything is read or written."""
    if not request.attachment_id or not request.attachment_id.strip():
        raise rejected(
            "ingest", "missing-attachment", "attachmentId is required: it names the source file."
        )
    if not request.title.strip() and not request.text.strip():
        raise rejected(
            "ingest",
            "empty-document",
            "The document has neither a title nor text; there is nothing to ingest.",
        )
    if len(request.text) > MAX_TEXT_CHARS:
        raise rejected(
            "ingest",
            "too-large",
            f"The text has {len(request.text):,} characters; at most {MAX_TEXT_CHARS:,} can be "
            "ingested at once. Split the document.",
            chars=len(request.text),
        )
    if request.agents is not None and not all(
        isinstance(a, str) and a.strip() for a in request.agents
    ):
        raise rejected("ingest", "invalid-agents", "agents must be a list of agent slugs.")
    # The same scope rules as memory-write (valid scope, and one this caller may write at).
    validate(caller, WriteRequest("KnowledgeDocument", {}, scope=request.scope))


_SET_COMMON = (
    "SET n += row.props, n.contentHash = row.hash, n.updatedAt = datetime(), "
    "n.deletedAt = null, n.scope = row.scope, n.agents = row.agents "
    "FOREACH (_ IN CASE WHEN row.embedding IS NULL THEN [] ELSE [1] END | "
    "SET n.embedding = row.embedding, n.embeddingModel = $model) "
    "FOREACH (_ IN CASE WHEN row.drop THEN [1] ELSE [] END | "
    "REMOVE n.embedding, n.embeddingModel) "
)


KeepText = Callable[[str, str], object]  # (document id, text): keeps it durably


class Ingester:
    """Ingests documents for one embedding model; ``keep`` keeps each document's text."""

    def __init__(
        self, graph: Graph, embed: EmbedTexts, model_name: str, keep: KeepText | None = None
    ) -> None:
        self.graph = graph
        self.embed = embed
        self.model_name = model_name
        self.keep = keep
        # The writes of the ingests that are ready together, in one transaction and a handful
        # of statements (memory/commits.py).
        self.commits: Commits[_Write, tuple[int, int]] = Commits(graph, self._write_round)

    async def ingest(
        self, caller: Caller, request: IngestRequest, progress: Progress | None = None
    ) -> dict[str, Any]:
        """Write (or replace) the document's hierarchy and keep its version, embedding only
        what changed."""
        started = time.monotonic()
        _check(caller, request)
        if not request.text.strip():
            # A title alone is a document: its title is the text to find it by.
            request = replace(request, text=request.title.strip())
        elif not request.title.strip():
            # Text alone is a document too: its opening line names it.
            request = replace(request, title=title_of(request.text))
        known_id, stored = await self._stored(caller, request.attachment_id)
        doc_id = known_id or document_id(caller.account_id, request.attachment_id)
        nodes = _plan(doc_id, request)
        if not nodes.sections:
            raise rejected(
                "ingest",
                "empty-text",
                "The document has headings but no text under them.",
                attachment=request.attachment_id,
            )
        await self._keep(doc_id, request)
        embedded, reused, failed, error = await self._embed(nodes, stored, progress)
        if failed:
            log.warning(
                "[graph-write] warn reason=embed-failed op=ingest attachment=%s document=%s "
                "failed=%d error=%s",
                request.attachment_id,
                doc_id,
                failed,
                error,
            )
        agents = list(request.agents) if request.agents is not None else None
        write = _Write(
            nodes,
            {"account": caller.account_id, "scope": request.scope, "agents": agents},
            versions.NewVersion(
                caller,
                doc_id,
                request.title,
                request.text,
                source=request.source,
                scope=request.scope,
                agents=agents,
                file=request.file,
                restored_from=request.restored_from,
            ),
        )
        # Committed with the writes of the other ingests that are ready (memory/commits.py).
        removed, version = await self.commits(write, len(nodes.nodes), key=doc_id)
        ms = (time.monotonic() - started) * 1000
        log.info(
            "[ingest] op=done attachment=%s document=%s sections=%d chunks=%d embedded=%d "
            "reused=%d failed=%d removed=%d version=%d ms=%d",
            request.attachment_id,
            doc_id,
            len(nodes.sections),
            len(nodes.chunks),
            embedded,
            reused,
            failed,
            removed,
            version,
            ms,
        )
        return {
            "documentId": doc_id,
            "version": version,
            "sections": len(nodes.sections),
            "chunks": len(nodes.chunks),
            "embedded": embedded,
            "reused": reused,
            "warnings": ["embed-failed"] if failed else [],
        }

    async def _keep(self, doc_id: str, request: IngestRequest) -> None:
        """Keep the document's text on disk (off the event loop); refuse the ingest if it fails."""
        if self.keep is None:
            return
        try:
            await asyncio.to_thread(self.keep, doc_id, request.text)
        except (OSError, ValueError) as err:
            raise rejected(
                "ingest",
                "text-not-kept",
                f"The document's text could not be kept on disk ({err}); nothing was ingested. "
                "Check the data partition's free space, then ingest it again.",
                document=doc_id,
            ) from err

    async def _stored(
        self, caller: Caller, attachment_id: str
    ) -> tuple[str | None, dict[str, dict[str, Any]]]:
        """The attachment's document id, and each stored node's hash and embedding state."""
        rows, _ = await self.graph.run(
            "MATCH (d:KnowledgeDocument {accountId: $account, attachmentId: $attachment}) "
            "WITH d ORDER BY d.createdAt LIMIT 1 "
            "MATCH (d)-[:HAS_SECTION|HAS_CHUNK*0..2]->(n) WHERE n.accountId = $account "
            "RETURN DISTINCT d.id AS doc, n.id AS id, n.contentHash AS hash, "
            "n.embeddingModel AS model, n.embedding IS NOT NULL AS embedded",
            {"account": caller.account_id, "attachment": attachment_id},
        )
        if not rows:
            return None, {}
        return str(rows[0]["doc"]), {str(row["id"]): row for row in rows}

    def _current(self, old: dict[str, Any] | None, node: _Node) -> bool:
        """The stored embedding was made from this very text by this model."""
        if old is None or not old["embedded"]:
            return False
        return bool(old["hash"] == node.hash and old["model"] == self.model_name)

    async def _embed(
        self, nodes: _Plan, stored: dict[str, dict[str, Any]], progress: Progress | None
    ) -> tuple[int, int, int, str | None]:
        """Embed every node whose text or model changed, a batch at a time; return embedded,
        reused, failed and the first error."""
        changed = []
        for node in nodes.nodes:
            node.keep = self._current(stored.get(node.id), node)
            if not node.keep:
                changed.append(node)
        # A text several nodes share is embedded once: a one-section document's node and its
        # section are both its title and opening summary.
        texts = list(dict.fromkeys(n.text for n in changed))
        vectors: list[list[float] | EngineError] = []
        if progress is not None:
            await progress("embedding", 0, len(texts))
        for start in range(0, len(texts), EMBED_BATCH):
            batch = texts[start : start + EMBED_BATCH]
            got = await embed_together(self.embed, batch, _MODEL_BROKEN)
            vectors += got
            broken = next((v for v in got if isinstance(v, _MODEL_BROKEN)), None)
            if broken is not None:  # every further batch would fail the same way
                vectors += [broken] * (len(texts) - len(vectors))
            if progress is not None:
                await progress("embedding", len(vectors), len(texts))
            if broken is not None:
                break
        by_text = dict(zip(texts, vectors, strict=True))
        errors = [v for v in vectors if isinstance(v, EngineError)]
        for node in changed:
            vector = by_text[node.text]
            node.embedding = None if isinstance(vector, EngineError) else vector
        error = f"{type(errors[0]).__name__}: {errors[0]}" if errors else None
        embedded = sum(1 for node in changed if node.embedding is not None)
        return embedded, len(nodes.nodes) - len(changed), len(changed) - embedded, error

    async def _write_round(self, tx: Runs, writes: Sequence[_Write]) -> list[tuple[int, int]]:
        """Write the hierarchies and versions of a round's documents (all different) in the
        transaction given; return each one's removed nodes and version number, in order."""
        await self._write_documents(tx, writes)
        await self._write_level(
            tx,
            "Section",
            "KnowledgeDocument",
            "HAS_SECTION",
            [row for w in writes for row in w.rows(w.plan.sections)],
        )
        await self._write_level(
            tx,
            "Chunk",
            "Section",
            "HAS_CHUNK",
            [row for w in writes for row in w.rows(w.plan.chunks)],
        )
        removed = await self._remove_stale(tx, writes)
        numbers = await versions.record(tx, [w.version for w in writes])
        return [
            (removed.get(w.plan.document.id, 0), number)
            for w, (number, _) in zip(writes, numbers, strict=True)
        ]

    async def _write_documents(self, run: Runs, writes: Sequence[_Write]) -> None:
        rows, _ = await run.run(
            "UNWIND $rows AS row "
            "MERGE (n:KnowledgeDocument {id: row.id}) "
            "ON CREATE SET n.accountId = row.account, n.createdAt = datetime() "
            "WITH n, row WHERE n.accountId = row.account " + _SET_COMMON + "RETURN n.id AS id",
            {"model": self.model_name, "rows": [w.rows([w.plan.document])[0] for w in writes]},
        )
        written = {row["id"] for row in rows}
        for w in writes:
            if w.plan.document.id not in written:
                raise rejected(
                    "ingest",
                    "invalid-account-id",
                    "That document id belongs to another account.",
                    id=w.plan.document.id,
                )

    async def _write_level(
        self, run: Runs, label: str, parent: str, rel: str, rows: list[dict[str, Any]]
    ) -> None:
        """MERGE the nodes of ``rows`` under their parents in batches; a moved node leaves its
        old parent."""
        cypher = (
            f"UNWIND $rows AS row MATCH (p:`{parent}` {{id: row.parent}}) "
            "WHERE p.accountId = row.account "
            f"MERGE (n:`{label}` {{id: row.id}}) "
            "ON CREATE SET n.accountId = row.account, n.createdAt = datetime() "
            "WITH p, n, row WHERE n.accountId = row.account "
            + _SET_COMMON
            + f"MERGE (p)-[:`{rel}`]->(n) "
            f"WITH p, n CALL (p, n) {{ MATCH (o:`{parent}`)-[r:`{rel}`]->(n) WHERE o <> p "
            "DELETE r } RETURN count(n) AS written"
        )
        for start in range(0, len(rows), BATCH_ROWS):
            batch = rows[start : start + BATCH_ROWS]
            got, _ = await run.run(cypher, {"model": self.model_name, "rows": batch})
            if got[0]["written"] != len(batch):
                raise rejected(
                    "ingest",
                    "invalid-account-id",
                    f"Some {label} ids of this document belong to another account.",
                    label=label,
                    expected=len(batch),
                    written=got[0]["written"],
                )

    async def _remove_stale(self, run: Runs, writes: Sequence[_Write]) -> dict[str, int]:
        """Delete the documents' sections and chunks these ingests no longer produced; return
        how many each document lost."""
        rows, _ = await run.run(
            "UNWIND $docs AS doc "
            "MATCH (d:KnowledgeDocument {id: doc.id}) WHERE d.accountId = doc.account "
            "CALL (d, doc) { MATCH (d)-[:HAS_SECTION]->(:Section)-[:HAS_CHUNK]->(c:Chunk) "
            "WHERE c.accountId = doc.account AND NOT c.id IN doc.chunks "
            "WITH DISTINCT c DETACH DELETE c RETURN count(c) AS chunks } "
            "CALL (d, doc) { MATCH (d)-[:HAS_SECTION]->(s:Section) "
            "WHERE s.accountId = doc.account AND NOT s.id IN doc.sections "
            "WITH DISTINCT s DETACH DELETE s RETURN count(s) AS sections } "
            "RETURN doc.id AS id, chunks + sections AS removed",
            {
                "docs": [
                    {
                        "id": w.plan.document.id,
                        "account": w.owner["account"],
                        "chunks": [n.id for n in w.plan.chunks],
                        "sections": [n.id for n in w.plan.sections],
                    }
                    for w in writes
                ]
            },
        )
        return {str(row["id"]): int(row["removed"]) for row in rows}
