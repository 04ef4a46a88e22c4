"""Browse the memory graph for the admin's Data and Graph pages: a sample and a neighbourhood.

Both reads apply the guards of :mod:`appliance.memory.guards` to every node they return,
neighbours included, exactly as search does; hidden properties (``embedding``, ``accountId``)
never leave the engine.

- :func:`sample` — up to ``limit`` (1..2000) visible nodes, newest first, optionally only some
  labels, and with a text only the nodes search finds for it (``matches``: the engine's own
  hybrid search with the Data page's settings, so the Graph narrows to what the Data page
  finds, not to names); plus the relationships among them and the count of visible nodes per
  label (the category filter). Internal records (:func:`is_internal`) are left out unless asked.
- :func:`neighbourhood` — one node's visible properties and up to 50 of its one-hop neighbours.
- :func:`display_title` — the one human title of a node the pages show: a chunk as
  "Document \u203a Section", a message as who said it and what, never a raw id.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from appliance.core.identity import Caller
from appliance.memory.graph import Graph
from appliance.memory.guards import guard
from appliance.memory.hits import HIDDEN_PROPERTIES
from appliance.rpc.protocol import BadParams

log = logging.getLogger(__name__)

MAX_SAMPLE = 2000
DEFAULT_SAMPLE = 200
MAX_MATCHES = 20  # a narrowed graph shows what the Data page lists for the text by default
MAX_EDGES = 10_000
MAX_NEIGHBOURS = 50
MAX_QUERY_CHARS = 200
MAX_TITLE_CHARS = 120
PATH_SEPARATOR = " \u203a "
# The properties that name a node, best first.
TITLE_KEYS = ("name", "title", "canonicalName", "headline", "subject", "slug")
# A node's own text, best first: what a title falls back on, and what the pages edit.
TEXT_KEYS = ("text", "body", "content", "description", "summary")
# Properties a title never shows: ids and bookkeeping, never what the owner wrote.
_NOT_TITLES = frozenset(
    {"id", "accountId", "scope", "role", "source", "status", "tool", "embeddingModel"}
)
_LABEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
# Records of how Maxy works rather than what the owner keeps: every MCP tool call (ToolCall)
# and the Task an audited durable call becomes (source "audit", appliance/memory/audit.py).
INTERNAL_LABELS = ("ToolCall",)
AUDIT_SOURCE = "audit"
# Who said a message: a visitor's conversations are public, the owner's are not.
_SPEAKERS = {"assistant": "Assistant", "user": "You"}

Matches = Callable[[str, list[str] | None, int], Awaitable[list[str]]]


def is_internal(labels: Sequence[str], props: Mapping[str, Any]) -> bool:
    """True for an internal record: a ToolCall, or a Task the audit trail wrote."""
    if any(label in INTERNAL_LABELS for label in labels):
        return True
    return "Task" in labels and props.get("source") == AUDIT_SOURCE


def internal(var: str) -> str:
    """Cypher predicate: the node bound to ``var`` is an internal record (see is_internal)."""
    tests = [f"{var}:{label}" for label in INTERNAL_LABELS]
    audit = f"({var}:Task AND coalesce({var}.source = '{AUDIT_SOURCE}', false))"
    return f"({' OR '.join(tests)} OR {audit})"


def _one_line(text: str, limit: int = MAX_TITLE_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def display_title(props: Mapping[str, Any], labels: Sequence[str]) -> str:
    """The human title of a node: never a raw id, always something the owner can read."""
    path = props.get("path")
    if ("Chunk" in labels or "Section" in labels) and isinstance(path, list) and path:
        return _one_line(PATH_SEPARATOR.join(str(p) for p in path))
    if "Message" in labels:
        who = "Visitor" if props.get("scope") == "public" and props.get("role") == "user" else None
        speaker = who or _SPEAKERS.get(str(props.get("role")), "Message")
        body = next((props[k] for k in ("body", "text") if isinstance(props.get(k), str)), "")
        return _one_line(f"{speaker}: {body}") if body.strip() else speaker
    for key in TITLE_KEYS:
        value = props.get(key)
        if isinstance(value, str) and value.strip():
            return _one_line(value)
    given = " ".join(
        str(props[k]).strip() for k in ("givenName", "familyName") if isinstance(props.get(k), str)
    ).strip()
    if given:
        return _one_line(given)
    if "ToolCall" in labels and isinstance(props.get("tool"), str):
        return _one_line(f"Tool call: {props['tool']}")
    if "Conversation" in labels:
        started = str(props.get("startedAt") or "")[:10]
        agent = props.get("agentSlug")
        who = f" with {agent}" if isinstance(agent, str) and agent else ""
        return f"Conversation{who}" + (f", {started}" if started else "")
    if "Chunk" in labels:
        return "Part of a document"
    for key in TEXT_KEYS:
        value = props.get(key)
        if isinstance(value, str) and value.strip():
            return _one_line(value)
    for key, value in props.items():
        shown = key not in _NOT_TITLES and not key.endswith("Id") and not key.endswith("At")
        if shown and isinstance(value, str) and value.strip():
            return _one_line(value)
    return str(labels[0]) if labels else "Node"


def _brief(v: str) -> str:
    """Cypher map of a node as the pages draw it: what its title needs, scope; never a vector."""
    keys = [*TITLE_KEYS, *TEXT_KEYS, "givenName", "familyName", "role", "tool", "agentSlug"]
    cut = ", ".join(
        f"{k}: CASE WHEN {v}.{k} IS :: STRING THEN left({v}.{k}, $titleChars) END" for k in keys
    )
    return (
        f"{{id: coalesce({v}.id, elementId({v})), labels: labels({v}), scope: {v}.scope, "
        f"props: {{{cut}, source: {v}.source, startedAt: {v}.startedAt, "
        f"scope: {v}.scope, path: CASE WHEN {v}.path IS :: LIST<STRING NOT NULL> "
        f"THEN {v}.path END}}}}"
    )


def _node(row: Mapping[str, Any]) -> dict[str, Any]:
    labels = list(row["labels"])
    props = {k: v for k, v in (row.get("props") or {}).items() if v is not None}
    return {
        "id": row["id"],
        "labels": labels,
        "title": display_title(props, labels),
        "scope": row.get("scope"),
    }


def check_labels(labels: Sequence[str] | None) -> list[str] | None:
    """Validate a label filter (None or empty: every label)."""
    if not labels:
        return None
    bad = [label for label in labels if not isinstance(label, str) or not _LABEL.match(label)]
    if bad:
        raise BadParams(f"not a node label: {bad[0]!r}")
    return list(labels)


def check_limit(limit: int) -> int:
    """A sample size must be between 1 and MAX_SAMPLE."""
    if not 1 <= limit <= MAX_SAMPLE:
        raise BadParams(f"limit must be between 1 and {MAX_SAMPLE}, not {limit}")
    return limit


def _params(caller: Caller) -> dict[str, Any]:
    return {**caller.params(), "titleChars": MAX_TITLE_CHARS}


async def sample(
    graph: Graph,
    caller: Caller,
    *,
    labels: Sequence[str] | None = None,
    q: str | None = None,
    limit: int = DEFAULT_SAMPLE,
    internal_records: bool = False,
    matches: Matches | None = None,
) -> dict[str, Any]:
    """Visible nodes (newest first), the relationships among them, and per-label counts.

    With ``q``, only the nodes ``matches`` (search) finds for it, at most MAX_MATCHES, and a
    node whose id is ``q``. Internal records only with ``internal_records``.
    """
    started = time.monotonic()
    chosen = check_labels(labels)
    check_limit(limit)
    text = " ".join((q or "").split())[:MAX_QUERY_CHARS] or None
    found_ids: list[str] | None = None
    if text is not None:
        if matches is None:
            raise BadParams("narrowing by text needs the engine's search")
        found_ids = [*await matches(text, chosen, min(limit, MAX_MATCHES)), text]
    params = {
        **_params(caller),
        "labels": chosen,
        "ids": found_ids,
        "limit": limit,
        "maxEdges": MAX_EDGES,
        "internal": internal_records,
    }
    hide = f"AND ($internal OR NOT {internal('n')}) "
    matched = (
        f"MATCH (n) WHERE {guard('n')} "
        "AND ($labels IS NULL OR any(l IN labels(n) WHERE l IN $labels)) "
        "AND ($ids IS NULL OR n.id IN $ids) " + hide
    )
    rows, _ = await graph.read(
        matched + "WITH n ORDER BY n.updatedAt IS NULL, n.updatedAt DESC LIMIT $limit + 1 "
        "WITH collect(n) AS found "
        "WITH found[..$limit] AS nodes, size(found) > $limit AS truncated "
        "CALL (nodes) { UNWIND nodes AS a MATCH (a)-[r]->(b) WHERE b IN nodes "
        "WITH a, r, b LIMIT $maxEdges "
        "RETURN collect({id: elementId(r), source: coalesce(a.id, elementId(a)), "
        "target: coalesce(b.id, elementId(b)), type: type(r)}) AS edges } "
        f"RETURN [n IN nodes | {_brief('n')}] AS nodes, edges, truncated",
        params,
    )
    row: dict[str, Any] = rows[0] if rows else {"nodes": [], "edges": [], "truncated": False}
    counted, _ = await graph.read(
        f"MATCH (n) WHERE {guard('n')} {hide}UNWIND labels(n) AS label "
        "RETURN label, count(*) AS count ORDER BY count DESC, label",
        {**caller.params(), "internal": internal_records},
    )
    nodes = [_node(r) for r in row["nodes"]]
    ms = (time.monotonic() - started) * 1000
    log.info(
        "[graph-explore] op=sample nodes=%s edges=%s truncated=%s labels=%s q=%s matched=%s "
        "internal=%s ms=%d",
        len(nodes),
        len(row["edges"]),
        row["truncated"],
        ",".join(chosen or []) or "all",
        "yes" if text else "no",
        len(found_ids) - 1 if found_ids is not None else "-",
        internal_records,
        ms,
    )
    return {
        "nodes": nodes,
        "edges": row["edges"],
        "truncated": bool(row["truncated"]),
        "categories": [{"label": r["label"], "count": r["count"]} for r in counted],
        "ms": round(ms, 1),
    }


def _visible(props: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in props.items() if v is not None and k not in HIDDEN_PROPERTIES}


async def neighbourhood(
    graph: Graph, caller: Caller, node_id: str, label: str | None = None
) -> dict[str, Any] | None:
    """A visible node's properties and up to MAX_NEIGHBOURS visible neighbours; None if unseen."""
    if not node_id:
        raise BadParams("a node id is needed")
    if label is not None and not _LABEL.match(label):
        raise BadParams(f"not a node label: {label!r}")
    match = f"MATCH (n:`{label}`)" if label else "MATCH (n)"
    rows, _ = await graph.read(
        f"{match} WHERE (n.id = $id OR (n.id IS NULL AND elementId(n) = $id)) AND {guard('n')} "
        "WITH n LIMIT 1 "
        f"CALL (n) {{ MATCH (n)-[r]-(m) WHERE {guard('m')} "
        "WITH r, m ORDER BY m.updatedAt IS NULL, m.updatedAt DESC LIMIT $max "
        f"RETURN collect({{node: {_brief('m')}, type: type(r), id: elementId(r), "
        "direction: CASE WHEN startNode(r) = n THEN 'out' ELSE 'in' END}) AS around } "
        f"CALL (n) {{ MATCH (n)-[r]-(m) WHERE {guard('m')} RETURN count(r) AS degree }} "
        f"RETURN {_brief('n')} AS node, n {{.*, embedding: null}} AS props, around, degree",
        {**_params(caller), "id": node_id, "max": MAX_NEIGHBOURS},
    )
    if not rows:
        log.info("[graph-explore] op=node found=false")
        return None
    row = rows[0]
    center = _node(row["node"])
    neighbours, edges = [], []
    for hop in row["around"]:
        other = _node(hop["node"])
        neighbours.append({**other, "type": hop["type"], "direction": hop["direction"]})
        source, target = (center["id"], other["id"])
        if hop["direction"] == "in":
            source, target = target, source
        edges.append({"id": hop["id"], "source": source, "target": target, "type": hop["type"]})
    log.info(
        "[graph-explore] op=node found=true neighbours=%s degree=%s", len(neighbours), row["degree"]
    )
    return {
        "node": {**center, "props": _visible(row["props"])},
        "neighbours": neighbours,
        "edges": edges,
        "degree": int(row["degree"]),
    }
