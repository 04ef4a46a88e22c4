"""``memory-search``: hybrid vector + keyword retrieval over the memory graph.

Stages: (1) the query vector against every discovered vector index in ONE statement (a UNION of
``SEARCH`` clauses, account filtered inside each index); (2) the Lucene-escaped query against
the ``entity_search`` full-text index; (3) fusion, boosts, dedup, threshold and slice
(:mod:`appliance.memory.fusion`); (4) one-hop graph expansion of each result. The guards of
:mod:`appliance.memory.guards` apply on every path, related nodes included. Candidate pools are
over-fetched and fetched again, larger, while guards leave a path short of the limit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from appliance.memory.errors import GraphQueryFailed
from appliance.memory.fusion import Mode, RankResult, rank
from appliance.memory.graph import Graph
from appliance.memory.guards import Caller, guard, guard_after_search
from appliance.memory.hits import HIDDEN_PROPERTIES, Candidate, Related
from appliance.memory.lucene import keyword_query

log = logging.getLogger(__name__)

FULLTEXT_INDEX = "entity_search"
MAX_RELATED = 20
MAX_FETCH = 2000
MAX_QUERY_TERMS = 32

EmbedQuery = Callable[[str], Awaitable[list[float]]]



def _node_or_null(guard_predicate: str) -> str:
    """A row per pooled node: its columns if the guards allow it, else null (counted only)."""
    return (
        f"CASE WHEN {guard_predicate} THEN {{id: coalesce(n.id, elementId(n)), "
        "eid: elementId(n), labels: labels(n), props: n {.*, embedding: null}, "
        "backlinks: COUNT { (n)<--() }} END AS node"
    )


@dataclass
class SearchRequest:
    """What a caller asks for; defaults come from the settings."""

    query: str
    labels: Sequence[str] | None = None
    limit: int = 10
    mode: Mode = "weighted"
    vector_weight: float = 0.7
    keyword_weight: float = 0.3
    rrf_k: int = 60
    threshold: float = 0.0
    boosts: bool = False
    expand_hops: int = 1
    fields: Sequence[str] | None = None


@dataclass
class SearchResult:
    """Ranked results, the stage counts and how long it took."""

    results: list[Candidate]
    counts: dict[str, int] = field(default_factory=dict)
    ms: float = 0.0
    vector_only: bool = False


def _clean_props(props: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in props.items() if v is not None and k not in HIDDEN_PROPERTIES}


def project(props: dict[str, Any], fields: Sequence[str] | None) -> dict[str, Any]:
    """Keep only ``fields`` (None: all; []: none); hidden properties never pass."""
    visible = _clean_props(props)
    if fields is None:
        return visible
    return {k: visible[k] for k in fields if k in visible}


class Searcher:
    """Runs searches against one graph with one query embedder."""

    def __init__(self, graph: Graph, embed_query: EmbedQuery) -> None:
        self.graph = graph
        self.embed_query = embed_query
        self._indexes: dict[str, str] | None = None  # label -> vector index name

    def forget_indexes(self) -> None:
        """Drop the cached index discovery (call after schema changes)."""
        self._indexes = None

    async def vector_indexes(self) -> dict[str, str]:
        """Discover the vector indexes at runtime; cached until :meth:`forget_indexes`."""
        if self._indexes is None:
            rows, _ = await self.graph.run(
                "SHOW VECTOR INDEXES YIELD name, labelsOrTypes, entityType, state "
                "WHERE entityType = 'NODE' AND state = 'ONLINE' "
                "RETURN name, labelsOrTypes[0] AS label"
            )
            self._indexes = {row["label"]: row["name"] for row in rows}
        return self._indexes

    async def _vector(
        self, caller: Caller, vector: list[float], labels: Sequence[str] | None, want: int
    ) -> list[dict[str, Any]]:
        indexes = await self.vector_indexes()
        chosen = {lb: ix for lb, ix in indexes.items() if labels is None or lb in labels}
        if not chosen:
            return []
        branches = [
            f"MATCH (n:`{label}`) SEARCH n IN (VECTOR INDEX `{index}` FOR $vector "
            "WHERE n.accountId = $account LIMIT $k) SCORE AS score RETURN n, score"
            for label, index in sorted(chosen.items())
        ]
        cypher = (
            "CYPHER 25 CALL () { "
            + " UNION ALL ".join(branches)
            + f" }} RETURN {_node_or_null(guard_after_search('n'))}, score ORDER BY score DESC"
        )
        return await self._fill(cypher, {**caller.params(), "vector": vector}, want)

    async def _keyword(
        self, caller: Caller, text: str, labels: Sequence[str] | None, want: int
    ) -> list[dict[str, Any]]:
        # Lucene allows 1024 clauses and each term expands over every indexed property.
        query = keyword_query(" ".join(text.split()[:MAX_QUERY_TERMS]))
        if query is None:
            return []
        allowed = guard("n")
        if labels is not None:
            allowed = f"({allowed} AND any(l IN labels(n) WHERE l IN $labels))"
        cypher = (
            f"CALL db.index.fulltext.queryNodes('{FULLTEXT_INDEX}', $q, {{limit: $k}}) "
            f"YIELD node AS n, score RETURN {_node_or_null(allowed)}, score ORDER BY score DESC"
        )
        params = {**caller.params(), "q": query, "labels": list(labels or [])}
        return await self._fill(cypher, params, want)

    async def _fill(self, cypher: str, params: dict[str, Any], want: int) -> list[dict[str, Any]]:
        """Over-fetch; while guards leave fewer than ``want`` of a full pool, widen the pool."""
        k = max(want * 4, 40)
        while True:
            rows, _ = await self.graph.run(cypher, {**params, "k": k})
            allowed = [{**row["node"], "score": row["score"]} for row in rows if row["node"]]
            # Fewer pooled rows than k: the indexes had nothing more to give.
            if len(allowed) >= want or len(rows) < k or k >= MAX_FETCH:
                return allowed[:want]
            k = min(k * 4, MAX_FETCH)

    async def expand(
        self, caller: Caller, results: list[Candidate], eids: dict[str, str]
    ) -> None:
        """Attach up to MAX_RELATED guarded one-hop neighbours to each result."""
        if not results:
            return
        rows, _ = await self.graph.run(
            "UNWIND $eids AS eid MATCH (r) WHERE elementId(r) = eid "
            "CALL (r) { MATCH (r)-[rel]-(m) WHERE " + guard("m") + " "
            "RETURN coalesce(m.id, elementId(m)) AS id, labels(m) AS labels, type(rel) AS type, "
            "CASE WHEN startNode(rel) = r THEN 'out' ELSE 'in' END AS direction, "
            "m {.*, embedding: null} AS props LIMIT " + str(MAX_RELATED) + " } "
            "RETURN eid, collect({id: id, labels: labels, type: type, direction: direction, "
            "props: props}) AS related",
            {**caller.params(), "eids": [eids[c.node_id] for c in results]},
        )
        by_eid = {row["eid"]: row["related"] for row in rows}
        for cand in results:
            cand.related = [
                Related(r["id"], r["labels"], r["type"], r["direction"], _clean_props(r["props"]))
                for r in by_eid.get(eids[cand.node_id], [])
            ]

    async def search(self, caller: Caller, request: SearchRequest) -> SearchResult:
        """Run every stage and return the ranked, guarded, expanded results."""
        started = time.monotonic()
        want = max(request.limit * 3, request.limit + 10)
        vector = await self.embed_query(request.query)
        vector_rows = await self._vector(caller, vector, request.labels, want)
        vector_only = False
        try:
            keyword_rows = await self._keyword(caller, request.query, request.labels, want)
        except GraphQueryFailed as err:
            if FULLTEXT_INDEX not in str(err):
                raise
            log.warning("[graph-search:hybrid] warn=no-fulltext-index fallback=vector-only")
            keyword_rows, vector_only = [], True

        candidates: dict[str, Candidate] = {}
        eids: dict[str, str] = {}
        for rows, path in ((vector_rows, "vector"), (keyword_rows, "keyword")):
            for row in rows:
                cand = candidates.get(row["id"])
                if cand is None:
                    cand = Candidate(
                        node_id=row["id"],
                        labels=row["labels"],
                        props=_clean_props(row["props"]),
                        backlinks=int(row["backlinks"]),
                    )
                    candidates[row["id"]] = cand
                    eids[row["id"]] = row["eid"]
                if path == "vector":
                    cand.vector = max(cand.vector or 0.0, float(row["score"]))
                else:
                    cand.keyword_raw = max(cand.keyword_raw or 0.0, float(row["score"]))

        ranked: RankResult = rank(
            list(candidates.values()),
            mode=request.mode,
            vector_weight=request.vector_weight,
            keyword_weight=request.keyword_weight,
            rrf_k=request.rrf_k,
            threshold=request.threshold,
            limit=request.limit,
            boosts=request.boosts,
        )
        if request.expand_hops > 0:
            await self.expand(caller, ranked.results, eids)
        for cand in ranked.results:
            cand.props = project(cand.props, request.fields)
        ms = (time.monotonic() - started) * 1000
        counts = ranked.counts
        log.info(
            "[graph-search:hybrid] vector=%s bm25=%s fused=%s boosted=%s deduped=%s final=%s "
            "mode=%s ms=%d",
            counts.get("vector"),
            counts.get("bm25"),
            counts.get("fused"),
            counts.get("boosted"),
            counts.get("deduped"),
            counts.get("final"),
            request.mode,
            ms,
        )
        return SearchResult(ranked.results, counts, ms, vector_only)
