"""``memory-write``: create or merge one node with its properties and edges.

- Every write stamps ``accountId`` with the caller's account; a different ``accountId`` in the
  properties is refused loudly (``[graph-write] reject reason=invalid-account-id``), and so is
  merging onto an id that belongs to another account.
- The node is embedded at write time from a bounded representation of it
  (:func:`embedding_text`); ``embedding``, ``embeddingModel`` and ``contentHash`` are stored. An
  unchanged representation under the same model is not embedded again. If embedding fails the
  node is still written, without an embedding, and one line
  ``[graph-write] warn reason=embed-failed`` is logged: a failed embed never aborts a write.
- People and organisations carry provenance: an inbound ``PRODUCED`` edge from the Task,
  Conversation or Message named by ``producedByTaskId`` (else the caller's session node);
  without one the write goes ahead with ``[graph-write] warn reason=missing-provenance``.
- A natural key (:attr:`WriteRequest.key`, e.g. a contact's normalised email, unique per account
  by a schema constraint) is merged on instead of the id when no id is given, so two first writes
  of the same key make one node. A write that changes a keyed property without its key
  (:data:`NATURAL_KEYS`: ``memory-write`` of a Person's email) releases the key, so a stale key
  never stands for a value the node no longer holds; the module that keeps the key sets it again
  (:mod:`appliance.memory.contacts`).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from appliance.core.identity import SCOPES, Caller
from appliance.memory.chunking import content_hash, summary
from appliance.memory.errors import EngineError, rejected
from appliance.memory.graph import Graph
from appliance.memory.schema import read_statements

log = logging.getLogger(__name__)

EmbedText = Callable[[str], Awaitable[list[float]]]
EmbedTexts = Callable[[Sequence[str]], Awaitable[list[list[float]]]]


async def embed_together(
    embed: EmbedTexts, texts: Sequence[str], fatal: tuple[type[Exception], ...]
) -> list[list[float] | EngineError]:
    """Embed ``texts`` in one call (the embedder packs them into batches); per text, its vector
    or the error that left it without one.

    If the call fails, each text is tried alone, so a text that breaks the model costs only its
    own vector; an error in ``fatal`` (the model itself is broken) is not retried and fails the
    rest.
    """
    if not texts:
        return []
    try:
        return list(await embed(texts))
    except EngineError as err:
        if isinstance(err, fatal) or len(texts) == 1:
            return [err] * len(texts)
    out: list[list[float] | EngineError] = []
    for text in texts:
        try:
            out.append((await embed([text]))[0])
        except EngineError as err:
            if isinstance(err, fatal):
                return out + [err] * (len(texts) - len(out))
            out.append(err)
    return out


PROVENANCE_LABELS = frozenset(
    {"Person", "UserProfile", "Organization", "LocalBusiness", "Place", "ContactPoint"}
)
PRODUCER_LABELS = ("Task", "Conversation", "Message")
DOCUMENT_LABELS = frozenset(
    {"KnowledgeDocument", "DigitalDocument", "CreativeWork", "Report", "Section", "Article"}
)
RESERVED = frozenset(
    {
        "id",
        "accountId",
        "embedding",
        "embeddingModel",
        "contentHash",
        "createdAt",
        "updatedAt",
        "deletedAt",
        "scope",
        "agents",
        "emailKey",
        # The session a task is being worked in (appliance.memory.tasks): set by starting it.
        "workingSession",
    }
)
# label -> (property, its natural key): the key is set only by the module that keeps it.
NATURAL_KEYS = {"Person": ("email", "emailKey")}
ENTITY_TEXT_CHARS = 1000
# Bounds of one node's properties: a node is a fact, a contact, a task, never a document (those
# go through memory-ingest). Past them a write is refused at once instead of keeping Neo4j and
# its full-text index busy for minutes.
MAX_PROPERTIES = 256
MAX_STRING_CHARS = 1_000_000
MAX_LIST_ITEMS = 10_000
_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
_REL_TYPE = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
_LABEL_IN_SCHEMA = re.compile(r"FOR \(n:(\w+)\) REQUIRE n\.id IS UNIQUE")


# Never written through memory-write: accounts live on disk, and the audit trail (ToolCall)
# is written only by the MCP server itself, so an agent cannot forge or overwrite it.
# DocumentVersion: only an ingest writes one (appliance.memory.versions), in its transaction.
NOT_WRITABLE = frozenset({"Account", "ToolCall", "DocumentVersion"})


@cache
def writable_labels() -> frozenset[str]:
    """Labels the schema declares (each has a unique ``id``): the only ones writes may use."""
    declared = frozenset(m.group(1) for s in read_statements() if (m := _LABEL_IN_SCHEMA.search(s)))
    return declared - NOT_WRITABLE


@dataclass
class Edge:
    """A relationship to write between the node and an existing node."""

    type: str
    to_id: str
    to_label: str
    direction: str = "out"  # "out": (node)-[type]->(other); "in": (other)-[type]->(node)


@dataclass
class WriteRequest:
    """One node to create or merge."""

    label: str
    properties: dict[str, Any]
    id: str | None = None
    edges: list[Edge] = field(default_factory=list)
    produced_by: str | None = None
    scope: str | None = None
    agents: Sequence[str] | None = None
    # A natural key (property -> value), unique per account by a schema constraint: without an
    # id the node is merged on accountId + key; with one the key is set on that node.
    key: Mapping[str, str] | None = None
    # Properties this write removes (an update clearing a field).
    remove: Sequence[str] = ()


def _check_value(key: str, value: Any) -> None:
    scalar = (str, int, float, bool)
    items = value if isinstance(value, list) else [value]
    if len(items) > MAX_LIST_ITEMS or any(
        isinstance(v, str) and len(v) > MAX_STRING_CHARS for v in items
    ):
        raise rejected(
            "graph-write",
            "property-too-large",
            f"Property {key!r} is too large for a node (at most {MAX_STRING_CHARS:,} characters "
            f"a text, {MAX_LIST_ITEMS:,} items a list): put long text in a document "
            "(memory-ingest).",
            key=key,
        )
    if isinstance(value, scalar) or (
        isinstance(value, list) and all(isinstance(v, scalar) for v in value)
    ):
        return
    raise rejected(
        "graph-write",
        "invalid-property",
        f"Property {key!r} must be a string, number, boolean or a list of them.",
        key=key,
    )


def validate(caller: Caller, request: WriteRequest) -> dict[str, Any]:
    """Check a request against the caller and the schema; return the properties to set."""
    if request.label not in writable_labels():
        raise rejected(
            "graph-write",
            "unknown-label",
            f"{request.label!r} is not a label of the memory graph (see schema/schema.cypher).",
            label=request.label,
        )
    claimed = request.properties.get("accountId")
    if claimed is not None and claimed != caller.account_id:
        raise rejected(
            "graph-write",
            "invalid-account-id",
            "accountId must be this device's account; writes to other accounts are refused.",
            claimed=claimed,
            account=caller.account_id,
        )
    if len(request.properties) > MAX_PROPERTIES:
        raise rejected(
            "graph-write",
            "too-many-properties",
            f"A node takes at most {MAX_PROPERTIES} properties, not {len(request.properties):,}.",
            count=len(request.properties),
        )
    props: dict[str, Any] = {}
    for name in [*(request.key or {}), *request.remove]:
        if not _IDENTIFIER.match(name):
            raise rejected(
                "graph-write",
                "invalid-property",
                f"{name!r} is not a valid property name.",
                key=name,
            )
    for key, value in request.properties.items():
        if not _IDENTIFIER.match(key):
            raise rejected(
                "graph-write", "invalid-property", f"{key!r} is not a valid property name.", key=key
            )
        if key in RESERVED:
            continue
        if value is None:
            continue
        _check_value(key, value)
        props[key] = value
    if request.scope is not None and request.scope not in SCOPES:
        raise rejected("graph-write", "invalid-scope", f"scope must be one of {', '.join(SCOPES)}.")
    if caller.scopes is not None and (request.scope or "admin") not in caller.scopes:
        raise rejected(
            "graph-write",
            "scope-not-allowed",
            "This caller may not write at that scope.",
            scope=request.scope,
        )
    for edge in request.edges:
        if not _REL_TYPE.match(edge.type) or edge.direction not in ("in", "out"):
            raise rejected(
                "graph-write",
                "invalid-edge",
                f"Edge {edge.type!r}/{edge.direction!r} is not valid.",
            )
        if edge.to_label not in writable_labels():
            raise rejected(
                "graph-write", "invalid-edge", f"{edge.to_label!r} is not a label of the graph."
            )
    return props


def embedding_text(label: str, props: Mapping[str, Any]) -> str:
    """The bounded text a node is embedded from: documents by summary, entities by fields."""
    if label in DOCUMENT_LABELS:
        title = str(props.get("title") or props.get("name") or "")
        body = next(
            (str(props[k]) for k in ("summary", "body", "content", "text") if props.get(k)), ""
        )
        return f"{title}\n{summary(body)}".strip()
    lines = []
    # Sorted: Neo4j does not keep property order, and reindex must reproduce this text.
    for key, value in sorted(props.items()):
        if isinstance(value, list):
            value = ", ".join(str(v) for v in value)
        if isinstance(value, str) and value.strip():
            lines.append(f"{key}: {value.strip()}")
    return "\n".join(lines)[:ENTITY_TEXT_CHARS]


class Writer:
    """Writes nodes for one account with one embedding model."""

    def __init__(self, graph: Graph, embed: EmbedText, model_name: str) -> None:
        self.graph = graph
        self.embed = embed
        self.model_name = model_name

    async def write(self, caller: Caller, request: WriteRequest) -> dict[str, Any]:
        """Validate, embed (best effort), merge the node and its edges; report what happened."""
        props = validate(caller, request)
        node_id = request.id or str(uuid.uuid4())
        label = request.label
        key = dict(request.key or {})
        # Without an id a keyed node is found by its key, within the caller's account.
        by_key = bool(key) and request.id is None
        pattern = (
            "{accountId: $account, " + ", ".join(f"`{k}`: $key.`{k}`" for k in key) + "}"
            if by_key
            else "{id: $id}"
        )
        existing, _ = await self.graph.run(
            f"MATCH (n:`{label}` {pattern}) RETURN n.accountId AS account, n.id AS id, "
            "n.contentHash AS hash, n.embeddingModel AS model, "
            "n {.*, embedding: null} AS props",
            {"id": node_id, "account": caller.account_id, "key": key},
        )
        if existing and existing[0]["account"] != caller.account_id:
            raise rejected(
                "graph-write",
                "invalid-account-id",
                "That id belongs to another account; writes to other accounts are refused.",
                id=node_id,
            )
        if existing and by_key:
            node_id = str(existing[0]["id"])
        removed = {name: None for name in request.remove if name not in RESERVED}
        keyed = NATURAL_KEYS.get(label)
        if keyed and not key and (keyed[0] in props or keyed[0] in removed):
            removed[keyed[1]] = None  # the value changes without its key: release the key
        warnings: list[str] = []
        # Embed what the node will hold after this write, not only what this write sends.
        merged = dict(existing[0]["props"]) if existing else {}
        merged.update(props)
        merged.update(removed)
        stored = {k: v for k, v in merged.items() if k not in RESERVED and v is not None}
        text = embedding_text(label, stored)
        digest = content_hash(text) if text else None
        embedding: list[float] | None = None
        fresh = (
            bool(existing)
            and existing[0]["hash"] == digest
            and (existing[0]["model"] == self.model_name)
        )
        if text and not fresh:
            try:
                embedding = await self.embed(text)
            except EngineError as err:
                log.warning(
                    "[graph-write] warn reason=embed-failed label=%s id=%s error=%s",
                    label,
                    node_id,
                    err,
                )
                warnings.append("embed-failed")
        set_embedding = (
            "SET n.embedding = $embedding, n.embeddingModel = $model, n.contentHash = $hash "
            if embedding is not None
            else ""
        )
        on_create = (
            "ON CREATE SET n.id = $id, n.createdAt = datetime() "
            if by_key
            else "ON CREATE SET n.accountId = $account, n.createdAt = datetime() "
        )
        rows, _ = await self.graph.run(
            f"MERGE (n:`{label}` {pattern}) "
            f"{on_create}"
            "WITH n WHERE n.accountId = $account "
            "SET n += $props, n += $key, n.updatedAt = datetime(), n.scope = $scope, "
            "n.agents = $agents "
            f"{set_embedding}"
            "RETURN n.id AS id",
            {
                "id": node_id,
                "account": caller.account_id,
                "props": {**props, **removed},
                "key": key,
                "scope": request.scope,
                "agents": list(request.agents) if request.agents is not None else None,
                "embedding": embedding,
                "model": self.model_name,
                "hash": digest,
            },
        )
        if not rows:
            raise rejected(
                "graph-write",
                "invalid-account-id",
                "That id belongs to another account.",
                id=node_id,
            )
        # A keyed first write that lost a race to another merged onto the winner's node.
        created = not existing and rows[0]["id"] == node_id
        node_id = str(rows[0]["id"])
        for edge in request.edges:
            await self._edge(caller, label, node_id, edge)
        if label in PROVENANCE_LABELS:
            if not await self._provenance(caller, label, node_id, request.produced_by):
                log.warning(
                    "[graph-write] warn reason=missing-provenance label=%s id=%s", label, node_id
                )
                warnings.append("missing-provenance")
        log.info(
            "[graph-write] op=%s label=%s id=%s embedded=%s",
            "create" if created else "update",
            label,
            node_id,
            embedding is not None or fresh,
        )
        return {
            "id": node_id,
            "created": created,
            "embedded": embedding is not None or fresh,
            "warnings": warnings,
        }

    async def _edge(self, caller: Caller, label: str, node_id: str, edge: Edge) -> None:
        pattern = "(n)-[:`{t}`]->(m)" if edge.direction == "out" else "(m)-[:`{t}`]->(n)"
        rows, _ = await self.graph.run(
            f"MATCH (n:`{label}` {{id: $id}}) MATCH (m:`{edge.to_label}` {{id: $to}}) "
            "WHERE n.accountId = $account AND m.accountId = $account "
            f"MERGE {pattern.format(t=edge.type)} RETURN count(*) AS linked",
            {"id": node_id, "to": edge.to_id, "account": caller.account_id},
        )
        if not rows or rows[0]["linked"] == 0:
            raise rejected(
                "graph-write",
                "edge-target-missing",
                f"No {edge.to_label} with id {edge.to_id} in this account to link to.",
                to=edge.to_id,
            )

    async def _provenance(
        self, caller: Caller, label: str, node_id: str, produced_by: str | None
    ) -> bool:
        source = produced_by or caller.session_id
        if not source:
            return False
        rows, _ = await self.graph.run(
            f"MATCH (n:`{label}` {{id: $id}}) "
            # Each branch is an index seek; a session id names its Conversation by sessionId.
            "CALL () { MATCH (p:Task {id: $source}) RETURN p "
            "UNION MATCH (p:Conversation {id: $source}) RETURN p "
            "UNION MATCH (p:Message {id: $source}) RETURN p "
            "UNION MATCH (p:Conversation {accountId: $account, sessionId: $source}) RETURN p } "
            "WITH n, p WHERE p.accountId = $account AND p.deletedAt IS NULL "
            "WITH n, p LIMIT 1 MERGE (p)-[:PRODUCED]->(n) RETURN count(*) AS linked",
            {"id": node_id, "source": source, "account": caller.account_id},
        )
        return bool(rows and rows[0]["linked"])
