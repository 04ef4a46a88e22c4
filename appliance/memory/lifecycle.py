"""Soft delete, restore and purge of memory nodes.

- :func:`soft_delete` stamps ``deletedAt`` (a Neo4j DateTime); every read path's guards then hide
  the node. A KnowledgeDocument cascades to its Sections, Chunks and DocumentVersions, a Section
  to its Chunks; the
  cascaded nodes get the very same ``deletedAt`` as the node deleted, which is how
  :func:`restore` tells them from nodes deleted on their own earlier (those stay deleted).
  Deleting again changes nothing and keeps the first ``deletedAt``, so the grace period runs
  from the first delete.
- Both refuse, with :class:`~appliance.memory.write.WriteRejected` and nothing changed, a node of
  another account, a missing one (the same answer, so ids of other accounts are not revealed)
  and one outside the caller's scopes or agent.
- :func:`purge` hard-deletes (``DETACH DELETE``) nodes soft-deleted longer ago than the grace
  period, in batches of :data:`PURGE_BATCH` nodes, each its own transaction. It is maintenance,
  not a caller's request: it takes an optional account instead of a :class:`Caller`.
- :func:`forget_texts` then removes the kept text (:mod:`appliance.core.documents`) of every
  document no longer in the graph, so a purged document leaves nothing on disk either. A text
  younger than :data:`TEXT_GRACE_S` stays: its ingest may not have written the graph yet.
"""

from __future__ import annotations

import logging
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from appliance.core.documents import DOCUMENTS, TEXT_SUFFIX
from appliance.core.identity import Caller
from appliance.memory.errors import rejected
from appliance.memory.graph import Graph
from appliance.memory.write import writable_labels

log = logging.getLogger(__name__)

PURGE_BATCH = 1000
TEXT_GRACE_S = 3600.0
# Deleting one of these takes the nodes below it along (HAS_SECTION, then HAS_CHUNK; a
# document's versions, HAS_VERSION).
CASCADES = frozenset({"KnowledgeDocument", "Section"})
_DESCENDANTS = (
    "MATCH (n)-[:HAS_SECTION|HAS_CHUNK|HAS_VERSION*1..2]->(k) "
    "WHERE (k:Section OR k:Chunk OR k:DocumentVersion) AND k.accountId = $account "
)
# The guards of appliance.memory.guards.guard except deletedAt: a deleted node must stay
# reachable here, to be deleted again (idempotence) or restored.
_MAY_CHANGE = (
    "($scopes IS NULL OR n.scope IS NULL OR n.scope IN $scopes) "
    "AND ($agent IS NULL OR $agent IN coalesce(n.agents, []))"
)


async def _check(graph: Graph, caller: Caller, op: str, label: str, node_id: str) -> None:
    """Refuse unless the node exists in the caller's account and the caller may see it."""
    if label not in writable_labels():
        raise rejected(
            "graph-write",
            "unknown-label",
            f"{label!r} is not a label of the memory graph.",
            op=op,
            label=label,
        )
    rows, _ = await graph.run(
        f"MATCH (n:`{label}` {{id: $id}}) RETURN n.accountId AS account, {_MAY_CHANGE} AS allowed",
        {**caller.params(), "id": node_id},
    )
    missing = f"No {label} with id {node_id} in this account."
    if not rows:
        raise rejected("graph-write", "not-found", missing, op=op, label=label, id=node_id)
    if rows[0]["account"] != caller.account_id:
        raise rejected(
            "graph-write",
            "invalid-account-id",
            missing,
            op=op,
            label=label,
            id=node_id,
            account=caller.account_id,
        )
    if not rows[0]["allowed"]:
        raise rejected(
            "graph-write",
            "scope-not-allowed",
            f"This caller may not change that {label}.",
            op=op,
            label=label,
            id=node_id,
        )


async def soft_delete(graph: Graph, caller: Caller, label: str, node_id: str) -> dict[str, Any]:
    """Mark a node (and a document's or section's descendants) deleted; idempotent."""
    await _check(graph, caller, "soft-delete", label, node_id)
    cascade = (
        "CALL (n) { " + _DESCENDANTS + "AND k.deletedAt IS NULL "
        "WITH DISTINCT n, k SET k.deletedAt = n.deletedAt RETURN count(k) AS cascaded } "
        if label in CASCADES
        else "WITH n, live, 0 AS cascaded "
    )
    rows, _ = await graph.run(
        f"MATCH (n:`{label}` {{id: $id}}) WHERE n.accountId = $account "
        "WITH n, n.deletedAt IS NULL AS live "
        "SET n.deletedAt = coalesce(n.deletedAt, datetime()) "
        "WITH n, live " + cascade + "RETURN n.deletedAt AS deletedAt, "
        "CASE WHEN live THEN 1 ELSE 0 END + cascaded AS changed",
        {**caller.params(), "id": node_id},
    )
    if not rows:  # deleted between the check and now
        raise rejected(
            "graph-write", "not-found", f"No {label} with id {node_id} in this account.", id=node_id
        )
    changed = int(rows[0]["changed"])
    log.info("[graph-write] op=soft-delete label=%s id=%s changed=%d", label, node_id, changed)
    return {"id": node_id, "label": label, "deletedAt": rows[0]["deletedAt"], "changed": changed}


async def restore(graph: Graph, caller: Caller, label: str, node_id: str) -> dict[str, Any]:
    """Undo :func:`soft_delete`, descendants deleted with the node included; idempotent."""
    await _check(graph, caller, "restore", label, node_id)
    cascade = (
        "CALL (n, was) { " + _DESCENDANTS + "AND was IS NOT NULL AND k.deletedAt = was "
        "WITH DISTINCT k SET k.deletedAt = null RETURN count(k) AS cascaded } "
        if label in CASCADES
        else "WITH n, was, 0 AS cascaded "
    )
    rows, _ = await graph.run(
        f"MATCH (n:`{label}` {{id: $id}}) WHERE n.accountId = $account "
        "WITH n, n.deletedAt AS was " + cascade + "SET n.deletedAt = null "
        "RETURN CASE WHEN was IS NULL THEN 0 ELSE 1 END + cascaded AS changed",
        {**caller.params(), "id": node_id},
    )
    if not rows:
        raise rejected(
            "graph-write", "not-found", f"No {label} with id {node_id} in this account.", id=node_id
        )
    changed = int(rows[0]["changed"])
    log.info("[graph-write] op=restore label=%s id=%s changed=%d", label, node_id, changed)
    return {"id": node_id, "label": label, "changed": changed}


async def purge(graph: Graph, grace_days: float = 7, account_id: str | None = None) -> int:
    """Hard-delete nodes soft-deleted more than ``grace_days`` ago; return how many."""
    if grace_days < 0:
        raise ValueError(f"grace_days must be 0 or more, got {grace_days}")
    started = time.monotonic()
    # One cutoff for every batch, so a long purge does not chase nodes deleted meanwhile.
    cutoff = datetime.now(UTC) - timedelta(days=grace_days)
    deleted = batches = 0
    # CALL { … } IN TRANSACTIONS needs an auto-commit transaction, and Graph.run runs managed
    # ones: a loop of LIMITed statements gives the same bounded transactions.
    while True:
        rows, _ = await graph.run(
            "MATCH (n) WHERE n.deletedAt < $cutoff "
            "AND ($account IS NULL OR n.accountId = $account) "
            "WITH n LIMIT $batch DETACH DELETE n RETURN count(*) AS deleted",
            {"cutoff": cutoff, "account": account_id, "batch": PURGE_BATCH},
        )
        count = int(rows[0]["deleted"]) if rows else 0
        deleted += count
        batches += 1
        if count < PURGE_BATCH:
            break
    log.info(
        "[purge] op=done deleted=%d grace_days=%s account=%s batches=%d ms=%d",
        deleted,
        grace_days,
        account_id or "all",
        batches,
        (time.monotonic() - started) * 1000,
    )
    return deleted


async def forget_texts(graph: Graph, account_id: str, account_dir: Path) -> int:
    """Remove the kept texts of documents the graph no longer holds; return how many."""
    folder = account_dir / DOCUMENTS
    try:
        names = [n for n in os.listdir(folder) if n.endswith(TEXT_SUFFIX)]
    except FileNotFoundError:
        return 0
    rows, _ = await graph.run(
        "MATCH (d:KnowledgeDocument {accountId: $account}) RETURN collect(d.id) AS ids",
        {"account": account_id},
    )
    known = set(rows[0]["ids"]) if rows else set()
    now = time.time()
    removed = 0
    for name in names:
        path = folder / name
        if name[: -len(TEXT_SUFFIX)] in known:
            continue
        try:
            if now - path.lstat().st_mtime < TEXT_GRACE_S:
                continue
            path.unlink()
        except FileNotFoundError:
            continue
        removed += 1
    if removed:
        log.info("[purge] op=forget-texts removed=%d account=%s", removed, account_id)
    return removed
