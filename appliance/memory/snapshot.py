"""The graph as files: a logical export in one read transaction, its content hash, and its import.

Two streams, each a sequence of msgpack maps compressed with gzip (any language reads them):

    nodes:          {"i": int, "labels": [str, …], "props": {name: value}}
    relationships:  {"s": int, "e": int, "type": str, "props": {name: value}}

``i`` numbers the nodes of one export; ``s``/``e`` are the start and end nodes' ``i``. Values are
msgpack's own (strings, integers, floats as float64 — embeddings exactly — booleans, lists),
except Neo4j's temporal values, written as ``{"$type": "datetime"|"date"|"time"|"localdatetime"|
"localtime"|"duration", "iso": ISO-8601}`` (a property never holds a map, so a map is always
one of these).

The content hash does not depend on Neo4j's internal ids or the order of the records: each node
is hashed as ``sha256(msgpack([sorted labels, sorted props]))``, each relationship as
``sha256(msgpack([start node's hash, type, sorted props, end node's hash]))``, and the graph as
the sha256 of the sorted node hashes followed by the sorted relationship hashes. A graph
exported, restored and exported again hashes the same; so the hash proves a restore equal.

Neo4j Community reads are read-committed, not snapshots: a write committed while the export runs
may or may not be in it, but every exported relationship has both of its nodes (an end node
created after the node pass is fetched in the same transaction).
"""

from __future__ import annotations

import gzip
import hashlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgpack
import neo4j.time

from appliance.memory.errors import BackupError, BackupRefused
from appliance.memory.graph import Graph, Reading, Transaction

log = logging.getLogger(__name__)

NODES = "graph/nodes.msgpack.gz"
RELATIONSHIPS = "graph/relationships.msgpack.gz"
SCHEMA = "graph/schema.cypher"
BATCH = 500
#: ``progress(stage, done, total)``, awaited between stages (inside the read transaction).
Progress = Callable[[str, int, int], Awaitable[None]]
COMPRESS_LEVEL = 3  # embeddings barely compress; a Pi's CPU is better spent elsewhere
_TEMPORAL: dict[str, Any] = {
    "datetime": neo4j.time.DateTime,
    "date": neo4j.time.Date,
    "time": neo4j.time.Time,
    "duration": neo4j.time.Duration,
}


def encode(value: Any) -> Any:
    """A property value as the export writes it (temporal values tagged, lists element-wise)."""
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    if isinstance(value, neo4j.time.DateTime):
        kind = "datetime" if value.tzinfo is not None else "localdatetime"
        return {"$type": kind, "iso": value.iso_format()}
    if isinstance(value, neo4j.time.Date):
        return {"$type": "date", "iso": value.iso_format()}
    if isinstance(value, neo4j.time.Time):
        kind = "time" if value.tzinfo is not None else "localtime"
        return {"$type": kind, "iso": value.iso_format()}
    if isinstance(value, neo4j.time.Duration):
        return {"$type": "duration", "iso": value.iso_format()}
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return value
    raise BackupError(f"A property of type {type(value).__name__} cannot be exported yet.")


def decode(value: Any) -> Any:
    """A property value as Neo4j takes it back (the inverse of :func:`encode`)."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        kind = str(value.get("$type", ""))
        base = kind.removeprefix("local")
        if base not in _TEMPORAL:
            raise BackupRefused(f"The export holds a value of unknown type {kind!r}.")
        return _TEMPORAL[base].from_iso_format(str(value["iso"]))
    return value


def _canonical(props: dict[str, Any]) -> list[Any]:
    return sorted(props.items())


def node_hash(labels: list[str], props: dict[str, Any]) -> bytes:
    """The content hash of one (encoded) node."""
    return hashlib.sha256(msgpack.packb([sorted(labels), _canonical(props)])).digest()


@dataclass
class Summary:
    """Counts per label and relationship type, and the graph's content hash."""

    labels: Counter[str] = field(default_factory=Counter)
    types: Counter[str] = field(default_factory=Counter)
    nodes: int = 0
    relationships: int = 0
    accounts: set[str] = field(default_factory=set)
    _node_hashes: list[bytes] = field(default_factory=list)
    _edge_hashes: list[bytes] = field(default_factory=list)
    _by_index: dict[int, bytes] = field(default_factory=dict)

    def add_node(self, index: int, labels: list[str], props: dict[str, Any]) -> None:
        """Count and hash one encoded node."""
        digest = node_hash(labels, props)
        self._by_index[index] = digest
        self._node_hashes.append(digest)
        self.nodes += 1
        self.labels.update(labels)
        if isinstance(props.get("accountId"), str):
            self.accounts.add(props["accountId"])

    def add_relationship(self, start: int, end: int, kind: str, props: dict[str, Any]) -> None:
        """Count and hash one encoded relationship (its nodes were added before)."""
        try:
            ends = (self._by_index[start], self._by_index[end])
        except KeyError as err:
            raise BackupRefused(
                f"A relationship names node {err.args[0]}, which the export does not hold."
            ) from err
        packed = msgpack.packb([ends[0], kind, _canonical(props), ends[1]])
        self._edge_hashes.append(hashlib.sha256(packed).digest())
        self.relationships += 1
        self.types[kind] += 1

    @property
    def content_hash(self) -> str:
        """The order-free sha256 of every node and relationship."""
        digest = hashlib.sha256()
        for part in sorted(self._node_hashes):
            digest.update(part)
        digest.update(b"|")
        for part in sorted(self._edge_hashes):
            digest.update(part)
        return digest.hexdigest()

    def to_json(self) -> dict[str, Any]:
        """The manifest's ``graph`` entry."""
        return {
            "nodes": self.nodes,
            "relationships": self.relationships,
            "labels": dict(sorted(self.labels.items())),
            "types": dict(sorted(self.types.items())),
            "accounts": sorted(self.accounts),
            "contentHash": self.content_hash,
        }


class _Sink:
    """A gzip'd msgpack stream, or nowhere (only counting and hashing)."""

    def __init__(self, path: Path | None) -> None:
        self._file: gzip.GzipFile | None = (
            gzip.open(path, "wb", compresslevel=COMPRESS_LEVEL) if path else None
        )
        self._packer = msgpack.Packer()

    def write(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.write(self._packer.pack(record))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


async def _node_pass(
    reading: Reading, sink: _Sink, summary: Summary, index: dict[str, int], query: str, **p: Any
) -> None:
    async for element_id, labels, props in reading.stream(query, p):
        if element_id in index:
            continue
        number = index[element_id] = len(index)
        encoded = {k: encode(v) for k, v in props.items()}
        summary.add_node(number, list(labels), encoded)
        sink.write({"i": number, "labels": list(labels), "props": encoded})


async def export_graph(
    graph: Graph,
    folder: Path | None = None,
    progress: Progress | None = None,
) -> Summary:
    """Export every node and relationship in one read transaction to ``folder`` (None: only
    count and hash); return the summary."""
    nodes = _Sink(folder / NODES if folder else None)
    edges = _Sink(folder / RELATIONSHIPS if folder else None)
    summary = Summary()
    index: dict[str, int] = {}
    try:
        async with graph.reading() as reading:
            await _node_pass(
                reading,
                nodes,
                summary,
                index,
                "MATCH (n) RETURN elementId(n), labels(n), properties(n)",
            )
            if progress:
                await progress("nodes", summary.nodes, 0)
            late: list[tuple[str, str, str, dict[str, Any]]] = []
            async for start, end, kind, props in reading.stream(
                "MATCH (a)-[r]->(b) RETURN elementId(a), elementId(b), type(r), properties(r)"
            ):
                late.append((start, end, kind, props))
            missing = sorted({e for s, t, _, _ in late for e in (s, t)} - index.keys())
            if missing:  # created after the node pass, inside this read transaction's view
                await _node_pass(
                    reading,
                    nodes,
                    summary,
                    index,
                    "MATCH (n) WHERE elementId(n) IN $ids "
                    "RETURN elementId(n), labels(n), properties(n)",
                    ids=missing,
                )
            for start, end, kind, props in late:
                encoded = {k: encode(v) for k, v in props.items()}
                summary.add_relationship(index[start], index[end], kind, encoded)
                edges.write({"s": index[start], "e": index[end], "type": kind, "props": encoded})
            if progress:
                await progress("relationships", summary.relationships, 0)
    finally:
        nodes.close()
        edges.close()
    return summary


async def schema_statements(graph: Graph) -> list[str]:
    """The create statements of the store's constraints and its own indexes."""
    constraints, _ = await graph.run(
        "SHOW CONSTRAINTS YIELD createStatement RETURN createStatement"
    )
    indexes, _ = await graph.run(
        "SHOW INDEXES YIELD createStatement, owningConstraint, type "
        "WHERE owningConstraint IS NULL AND type <> 'LOOKUP' RETURN createStatement"
    )
    return [str(row["createStatement"]) for row in constraints + indexes]


def _records(handle: gzip.GzipFile) -> Iterator[dict[str, Any]]:
    try:
        yield from msgpack.Unpacker(handle, raw=False, strict_map_key=False)
    except (OSError, EOFError, ValueError, msgpack.UnpackException) as err:
        raise BackupRefused(f"The graph export is damaged ({err}).") from err


def read_nodes(handle: IO[bytes]) -> Iterator[dict[str, Any]]:
    """The node records of an export stream (gzip'd), checked for shape."""
    with gzip.open(handle, "rb") as stream:
        for record in _records(stream):
            if not (isinstance(record, dict) and {"i", "labels", "props"} <= record.keys()):
                raise BackupRefused("The graph export holds a node record of the wrong shape.")
            yield record


def read_relationships(handle: IO[bytes]) -> Iterator[dict[str, Any]]:
    """The relationship records of an export stream (gzip'd), checked for shape."""
    with gzip.open(handle, "rb") as stream:
        for record in _records(stream):
            if not (isinstance(record, dict) and {"s", "e", "type", "props"} <= record.keys()):
                raise BackupRefused(
                    "The graph export holds a relationship record of the wrong shape."
                )
            yield record


def _label(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


async def delete_accounts(tx: Transaction, accounts: list[str]) -> int:
    """Delete every node of ``accounts`` and every node without an account, in ``tx``."""
    rows, _ = await tx.run(
        "MATCH (n) WHERE n.accountId IN $accounts OR n.accountId IS NULL "
        "DETACH DELETE n RETURN count(*) AS gone",
        {"accounts": accounts},
    )
    return int(rows[0]["gone"]) if rows else 0


async def create_nodes(tx: Transaction, batch: list[dict[str, Any]], ids: dict[int, str]) -> None:
    """Create one batch of node records; remember each one's new element id."""
    by_labels: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for record in batch:
        labels = tuple(sorted(record["labels"]))
        props = {k: decode(v) for k, v in record["props"].items()}
        by_labels.setdefault(labels, []).append({"i": record["i"], "props": props})
    for labels, rows in by_labels.items():
        label_text = "".join(f":{_label(x)}" for x in labels)
        created, _ = await tx.run(
            f"UNWIND $rows AS row CREATE (n{label_text}) SET n = row.props "
            "RETURN row.i AS i, elementId(n) AS id",
            {"rows": rows},
        )
        ids.update({int(r["i"]): str(r["id"]) for r in created})


async def create_relationships(
    tx: Transaction, batch: list[dict[str, Any]], ids: dict[int, str]
) -> None:
    """Create one batch of relationship records between restored nodes."""
    by_type: dict[str, list[dict[str, Any]]] = {}
    for record in batch:
        props = {k: decode(v) for k, v in record["props"].items()}
        row = {"s": ids[int(record["s"])], "e": ids[int(record["e"])], "props": props}
        by_type.setdefault(str(record["type"]), []).append(row)
    for kind, rows in by_type.items():
        await tx.run(
            "UNWIND $rows AS row MATCH (a) WHERE elementId(a) = row.s "
            "MATCH (b) WHERE elementId(b) = row.e "
            f"CREATE (a)-[r:{_label(kind)}]->(b) SET r = row.props",
            {"rows": rows},
        )


async def missing_indexes(graph: Graph, statements: list[str]) -> list[str]:
    """Which of an export's schema statements name an index or constraint the store lacks."""
    rows, _ = await graph.run("SHOW CONSTRAINTS YIELD name RETURN name")
    more, _ = await graph.run("SHOW INDEXES YIELD name RETURN name")
    have = {str(r["name"]) for r in rows + more}
    out = []
    for statement in statements:
        words = statement.split()
        # CREATE [VECTOR|FULLTEXT|RANGE|…] INDEX|CONSTRAINT `name` FOR …
        name = next(
            (words[i + 1] for i, w in enumerate(words[:-1]) if w in ("INDEX", "CONSTRAINT")),
            "",
        ).strip("`")
        if name and name not in have:
            out.append(statement)
    return out
