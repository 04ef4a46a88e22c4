"""``memory-reindex``: embed every node of the caller's account whose embedding is missing or stale.

- Only labels with an ONLINE vector index are visited, discovered at runtime as search does
  (:meth:`Searcher.vector_indexes`); ``labels`` narrows them, and naming a label without a
  vector index is refused (:class:`WriteRejected`).
- Nodes are read through every guard of :mod:`appliance.memory.guards`: soft-deleted nodes,
  other accounts' nodes and nodes outside the caller's scopes or agent are never read, embedded
  or written. Every write-back re-checks ``accountId`` and ``deletedAt``.
- A node is stale when it has no ``embedding``, its ``embeddingModel`` is not the current model,
  or its ``contentHash`` is not the hash of its current embedding text (:func:`reindex_text`:
  :func:`~appliance.memory.ingest.node_embedding_text` for ingested KnowledgeDocument, Section
  and Chunk nodes, the opening of ``body`` for conversation messages,
  :func:`~appliance.memory.write.embedding_text` of the string and list properties for every
  other node).
  Fresh nodes are not embedded. A node with no text to embed is left as it is.
- The nodes to visit are counted first (one query), then read ``batch_size`` at a time per label
  (keyset on ``id``); a batch's stale nodes are embedded in one call (packed by the embedder) and
  written with one ``UNWIND``; node by node if that call or that statement fails.
- A node whose embed raises an ``EmbedError``, or whose own write fails, is skipped with
  ``[reindex] op=skip-error`` and the run goes on. An unreachable graph ends the run (raises).
- ``progress(done, total, skipped)`` (sync or async) is called once before the first batch and
  after every batch; ``done`` counts visited nodes, never decreases and ends equal to ``total``.
- ``dry_run`` reads and compares only: nothing is embedded or written, and ``stale`` says how
  many nodes a real run would embed.

Result: ``{processed, embedded, skipped, stale, total, ms, dryRun}``; in a real run
``stale == embedded + skipped`` unless nodes change or vanish while it runs.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from appliance.core.identity import Caller
from appliance.memory.chunking import MAX_CHARS, content_hash, summary
from appliance.memory.conversations import ROLES
from appliance.memory.errors import GraphError, GraphQueryFailed, WriteRejected
from appliance.memory.graph import Graph
from appliance.memory.guards import guard
from appliance.memory.ingest import node_embedding_text
from appliance.memory.search import Searcher
from appliance.memory.write import RESERVED, EmbedTexts, embed_together, embedding_text

log = logging.getLogger(__name__)

Progress = Callable[[int, int, int], Awaitable[None] | None]

DEFAULT_BATCH = 64
MAX_BATCH = 1000
# Keyset pagination needs a comparable id; write paths always set a string id.
_VISITABLE = "n.id IS :: STRING NOT NULL"
# Only string and list properties can be text; the driver would turn temporal ones (startedAt,
# lastMessageAt, ...) into strings that change the hash at every touch.
_TEXTUAL = "[k IN keys(n) WHERE n[k] IS :: STRING OR n[k] IS :: LIST<ANY>]"
INGEST_LABELS = frozenset({"KnowledgeDocument", "Section", "Chunk"})


def reindex_text(label: str, props: Mapping[str, Any]) -> str:
    """The text a stored node is embedded from, by the rules of the path that wrote it."""
    # Ingested hierarchy nodes carry their attachment; memory-write ones of these labels do not.
    if label in INGEST_LABELS and props.get("attachmentId") is not None:
        return node_embedding_text(label, props)
    # The rule of conversations.record_message, which embeds a message by its opening only.
    if label == "Message" and props.get("role") in ROLES and isinstance(props.get("body"), str):
        return summary(props["body"], MAX_CHARS)
    # Neo4j does not keep property order, so sorted keys make the text depend on content only.
    own = {k: props[k] for k in sorted(props) if k not in RESERVED and props[k] is not None}
    return embedding_text(label, own)


@dataclass
class _Pending:
    """A stale node on its way to a new embedding."""

    node_id: str
    text: str
    digest: str
    embedding: list[float] = field(default_factory=list)


async def indexed_labels(graph: Graph, labels: Sequence[str] | None = None) -> list[str]:
    """The labels to visit: those with a vector index, narrowed to ``labels``."""
    indexed = await Searcher(graph, _no_query_embed).vector_indexes()
    if labels is None:
        return sorted(indexed)
    unknown = sorted(set(labels) - set(indexed))
    if unknown:
        log.error("[reindex] reject reason=no-vector-index labels=%s", ",".join(unknown))
        raise WriteRejected(
            f"{', '.join(unknown)} has no vector index; labels that can be reindexed: "
            f"{', '.join(sorted(indexed))}."
        )
    return sorted(set(labels))


async def _no_query_embed(text: str) -> list[float]:
    # The Searcher is only used for index discovery here; it never embeds a query.
    raise AssertionError("reindex never embeds a search query")


class _Run:
    """One reindex pass: counters, progress and the per-batch work."""

    def __init__(
        self,
        graph: Graph,
        caller: Caller,
        embed: EmbedTexts,
        model_name: str,
        batch_size: int,
        progress: Progress | None,
        dry_run: bool,
    ) -> None:
        self.graph = graph
        self.caller = caller
        self.params = caller.params()
        self.embed = embed
        self.model_name = model_name
        self.batch_size = batch_size
        self.progress = progress
        self.dry_run = dry_run
        self.total = self.done = self.embedded = self.skipped = self.stale = 0

    async def count(self, labels: list[str]) -> None:
        """Count every node the run will visit, all labels in one statement."""
        branches = [
            f"MATCH (n:`{label}`) WHERE {guard('n')} AND {_VISITABLE} RETURN n" for label in labels
        ]
        rows, _ = await self.graph.run(
            "CYPHER 25 CALL () { " + " UNION ALL ".join(branches) + " } RETURN count(n) AS total",
            self.params,
        )
        self.total = int(rows[0]["total"])

    async def report(self) -> None:
        """Tell the progress callback, if any."""
        if self.progress is not None:
            outcome = self.progress(self.done, self.total, self.skipped)
            if inspect.isawaitable(outcome):
                await outcome

    async def label(self, label: str) -> None:
        """Visit every node of one label, a batch at a time."""
        after = ""
        while True:
            rows, _ = await self.graph.run(
                f"MATCH (n:`{label}`) WHERE {guard('n')} AND {_VISITABLE} AND n.id > $after "
                "RETURN n.id AS id, n {.*, embedding: null} AS props, "
                "n.embedding IS NOT NULL AS hasEmbedding, "
                f"{_TEXTUAL} AS textual ORDER BY n.id LIMIT $limit",
                {**self.params, "after": after, "limit": self.batch_size},
            )
            if not rows:
                return
            after = rows[-1]["id"]
            await self.batch(label, [p for row in rows if (p := self.check(label, row))])
            self.done += len(rows)
            # Nodes written while the run goes on may outgrow the first count.
            self.total = max(self.total, self.done)
            await self.report()
            if len(rows) < self.batch_size:
                return

    def check(self, label: str, row: dict[str, Any]) -> _Pending | None:
        """The node as pending work if its embedding is missing or stale, else None."""
        props = {k: v for k, v in row["props"].items() if k in row["textual"]}
        text = reindex_text(label, props)
        if not text:
            return None
        digest = content_hash(text)
        fresh = (
            row["hasEmbedding"]
            and row["props"].get("embeddingModel") == self.model_name
            and row["props"].get("contentHash") == digest
        )
        return None if fresh else _Pending(row["id"], text, digest)

    async def batch(self, label: str, pending: list[_Pending]) -> None:
        """Embed one batch's stale nodes and write them back."""
        self.stale += len(pending)
        if self.dry_run:
            log.info("[reindex] op=stale label=%s n=%d", label, len(pending))
            return
        ready: list[_Pending] = []
        vectors = await embed_together(self.embed, [n.text for n in pending], fatal=())
        for node, vector in zip(pending, vectors, strict=True):
            if isinstance(vector, Exception):
                self.skip(label, node.node_id, vector)
                continue
            node.embedding = vector
            ready.append(node)
        written = await self.write(label, ready)
        self.embedded += written
        log.info("[reindex] op=embedded label=%s n=%d", label, written)

    def skip(self, label: str, node_id: str, err: Exception) -> None:
        """Count and log a node left without a fresh embedding."""
        self.skipped += 1
        log.warning("[reindex] op=skip-error label=%s id=%s error=%s", label, node_id, err)

    async def write(self, label: str, ready: list[_Pending]) -> int:
        """Write a batch with one statement; if that fails, node by node. Return how many."""
        if not ready:
            return 0
        try:
            return await self._write_rows(label, ready)
        except GraphError as err:
            log.warning(
                "[reindex] op=batch-write-failed label=%s n=%d fallback=per-node error=%s",
                label,
                len(ready),
                err,
            )
        written = 0
        for node in ready:
            try:
                written += await self._write_rows(label, [node])
            except GraphQueryFailed as err:
                self.skip(label, node.node_id, err)
        return written

    async def _write_rows(self, label: str, nodes: list[_Pending]) -> int:
        rows, _ = await self.graph.run(
            f"UNWIND $rows AS r MATCH (n:`{label}` {{id: r.id}}) "
            "WHERE n.accountId = $account AND n.deletedAt IS NULL "
            "SET n.embedding = r.embedding, n.embeddingModel = $model, n.contentHash = r.hash "
            "RETURN count(n) AS written",
            {
                "account": self.caller.account_id,
                "model": self.model_name,
                "rows": [
                    {"id": n.node_id, "embedding": n.embedding, "hash": n.digest} for n in nodes
                ],
            },
        )
        return int(rows[0]["written"])


async def reindex(
    graph: Graph,
    caller: Caller,
    embed: EmbedTexts,
    model_name: str,
    *,
    labels: Sequence[str] | None = None,
    batch_size: int = DEFAULT_BATCH,
    progress: Progress | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Embed the caller's nodes whose embedding is missing or stale; report the counts."""
    started = time.monotonic()
    if not 1 <= batch_size <= MAX_BATCH:
        log.error("[reindex] reject reason=invalid-batch-size batch_size=%s", batch_size)
        raise WriteRejected(f"batch_size must be between 1 and {MAX_BATCH}, got {batch_size}.")
    chosen = await indexed_labels(graph, labels)
    run = _Run(graph, caller, embed, model_name, batch_size, progress, dry_run)
    if chosen:
        await run.count(chosen)
    await run.report()
    for label in chosen:
        await run.label(label)
    if run.done != run.total:
        # Nodes deleted while the run went on: end the bar at what was actually visited.
        run.total = run.done
        await run.report()
    ms = round((time.monotonic() - started) * 1000)
    log.info(
        "[reindex] op=done processed=%d skipped=%d ms=%d embedded=%d stale=%d dry_run=%s",
        run.done,
        run.skipped,
        ms,
        run.embedded,
        run.stale,
        dry_run,
    )
    return {
        "processed": run.done,
        "embedded": run.embedded,
        "skipped": run.skipped,
        "stale": run.stale,
        "total": run.total,
        "ms": ms,
        "dryRun": dry_run,
    }
