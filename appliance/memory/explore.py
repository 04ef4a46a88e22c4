"""Browse the memory graph for the admin's Data and Graph pages: a sample and a neighbourhood.

Both reads apply the guards of :mod:`appliance.memory.guards` to every node they return,
neighbours included, exactly as search does; hidden properties (``embedding``, ``accountId``)
never leave the engine.

- :func:`sample` — up to ``limit`` (1..2000) visible nodes, newest first, optionally only some
  labels and only those whose name-like properties contain a text; plus the relationships among
  them and the count of visible nodes per label (the category filter).
- :func:`neighbourhood` — one node's visible properties and up to 50 of its one-hop neighbours.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from appliance.core.identity import Caller
from appliance.memory.graph import Graph
from appliance.memory.guards import guard
from appliance.memory.hits import HIDDEN_PROPERTIES
from appliance.rpc.protocol import BadParams

log = logging.getLogger(__name__)

MAX_SAMPLE = 2000
DEFAULT_SAMPLE = 200
MAX_EDGES = 10_000
MAX_NEIGHBOURS = 50
MAX_QUERY_CHARS = 200
MAX_TITLE_CHARS = 120
# The properties that name a node, best first; the type-to-narrow text is looked for in these.
TITLE_KEYS = ("name", "title", "canonicalName", "headline", "subject", "slug")
_LABEL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


def _brief(v: str) -> str:
    """Cypher map of a node as the pages draw it: names, a text excerpt, scope; never a vector."""
    return (
        f"{{id: coalesce({v}.id, elementId({v})), labels: labels({v}), scope: {v}.scope, "
        f"names: [k IN $titleKeys | CASE WHEN {v}[k] IS :: STRING "
        f"THEN left({v}[k], $titleChars) END], "
        f"text: CASE WHEN {v}.text IS :: STRING THEN left({v}.text, $titleChars) END}}"
    )


def _title(row: Mapping[str, Any]) -> str:
    """The best human name of a node: a naming property, else its text, else its first label."""
    for value in row.get("names") or ():
        if value and value.strip():
            return str(value).strip()
    text = row.get("text")
    if text and text.strip():
        return " ".join(str(text).split())
    labels = row.get("labels") or ["Node"]
    return str(labels[0])


def _node(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": row["id"],
        "labels": list(row["labels"]),
        "title": _title(row),
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
    return {**caller.params(), "titleKeys": list(TITLE_KEYS), "titleChars": MAX_TITLE_CHARS}


async def sample(
    graph: Graph,
    caller: Caller,
    *,
    labels: Sequence[str] | None = None,
    q: str | None = None,
    limit: int = DEFAULT_SAMPLE,
) -> dict[str, Any]:
    """Visible nodes (newest first), the relationships among them, and per-label counts."""
    started = time.monotonic()
    chosen = check_labels(labels)
    check_limit(limit)
    text = (q or "").strip().lower()[:MAX_QUERY_CHARS] or None
    params = {**_params(caller), "labels": chosen, "q": text, "limit": limit, "maxEdges": MAX_EDGES}
    matches = (
        f"MATCH (n) WHERE {guard('n')} "
        "AND ($labels IS NULL OR any(l IN labels(n) WHERE l IN $labels)) "
        "AND ($q IS NULL OR n.id = $q OR any(k IN $titleKeys WHERE "
        "n[k] IS :: STRING AND toLower(n[k]) CONTAINS $q)) "
    )
    rows, _ = await graph.run(
        matches + "WITH n ORDER BY n.updatedAt IS NULL, n.updatedAt DESC LIMIT $limit + 1 "
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
    counted, _ = await graph.run(
        f"MATCH (n) WHERE {guard('n')} UNWIND labels(n) AS label "
        "RETURN label, count(*) AS count ORDER BY count DESC, label",
        caller.params(),
    )
    nodes = [_node(r) for r in row["nodes"]]
    ms = (time.monotonic() - started) * 1000
    log.info(
        "[graph-explore] op=sample nodes=%s edges=%s truncated=%s labels=%s q=%s ms=%d",
        len(nodes),
        len(row["edges"]),
        row["truncated"],
        ",".join(chosen or []) or "all",
        "yes" if text else "no",
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
    rows, _ = await graph.run(
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
