"""``memory-search``: hybrid vector + keyword retrieval over the memory graph.

Stages: (1) the query vector against every discovered vector index in ONE statement (a UNION of
``SEARCH`` clauses, account filtered inside each index); (2) the Lucene-escaped query against
the ``entity_search`` full-text index; (3) one candidate per ingested document where the caller
ranks documents (:func:`by_document`: vector score the best of its nodes', keyword score their
sum, carried by its best passage), fusion, boosts, dedup, threshold and slice
(:mod:`appliance.memory.fusion`); (4) one-hop graph expansion of each result. The guards of
:mod:`appliance.memory.guards` apply on every path, related nodes included. Candidate pools are
over-fetched and fetched again, larger, while guards leave a path short of the limit.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from appliance.core.identity import Caller
from appliance.memory.errors import EmbedError, GraphQueryFailed
from appliance.memory.fusion import (
    KEYWORD_FLOOR,
    VECTOR_FLOOR,
    Floors,
    Mode,
    RankResult,
    fuse,
    rank,
)
from appliance.memory.graph import Graph
from appliance.memory.guards import guard, guard_after_search, records_hidden
from appliance.memory.hits import HIDDEN_PROPERTIES, Candidate, Related
from appliance.memory.lucene import keyword_query

log = logging.getLogger(__name__)

FULLTEXT_INDEX = "entity_search"
MAX_RELATED = 20
MAX_FETCH = 2000
MAX_QUERY_TERMS = 32
# The full-text index holds every account's nodes, in every scope and under every label: a
# search's guards and label filter cut Lucene's hits after it ranks them. A first pool of just
# the rows wanted came back short nearly every time, and the second, wider statement cost as much
# as the first; this first pool is wider (bench-search: one keyword statement, not two).
KEYWORD_POOL = 4

EmbedQuery = Callable[[str], Awaitable[list[float]]]
# A leg's allowed rows, and whether its indexes had nothing more to give (the pool was not cut).
Pool = tuple[list[dict[str, Any]], bool]
# Paraphrases of a query (the Anthropic-backed one plugs in with the agents work).
Expander = Callable[[str], Awaitable[list[str]]]

MAX_SUBSCRIPTIONS = 5
MAX_PARAPHRASES = 3
EXPANSION_TTL = 3600.0
# Searches that run at once; the rest wait their turn. Each one holds up to two pooled Neo4j
# connections (its two legs side by side) of the engine's sixteen, so four leave half the pool to
# writes; past that, more concurrency only shares the same cores and the model's one context, and
# a burst of visitors used to drain the pool and fail (the acquisition timeout) instead of queueing.
SEARCHES_AT_ONCE = 4


@dataclass(frozen=True)
class Route:
    """Where a class of question looks, and how it weighs the two paths."""

    labels: tuple[str, ...] | None
    vector_weight: float
    keyword_weight: float


# Names and identifiers match well by keyword; happenings are better found by meaning.
ROUTES: dict[str, Route] = {
    "entity": Route(
        (
            "Person",
            "LocalBusiness",
            "Service",
            "DefinedTerm",
            "Question",
            "Preference",
            "Organization",
            "UserProfile",
            "Place",
            "Product",
        ),
        0.5,
        0.5,
    ),
    "temporal": Route(("Event", "Task", "Message", "Conversation", "Report"), 0.6, 0.4),
    "event": Route(("Event", "Task", "Workflow", "Conversation"), 0.7, 0.3),
    "general": Route(None, 0.7, 0.3),
}


# One candidate, projected only after guards and the top-$want cut: moving and decoding rows
# that are then thrown away was most of a search's time. Backlinks only matter to boosts.
_NODE = (
    "{id: coalesce(n.id, elementId(n)), eid: elementId(n), labels: labels(n), "
    "props: n {.*, embedding: null}, score: score, "
    "backlinks: CASE WHEN $boosts THEN COUNT { (n)<--() } ELSE 0 END}"
)


def _pooled(source: str, allowed: str) -> str:
    """Wrap a source of ``n, score`` rows: one row with the pool size and the allowed top $want."""
    return (
        source + " WITH collect({n: n, score: score}) AS pool "
        "CALL (pool) { UNWIND pool AS hit WITH hit.n AS n, hit.score AS score "
        f"WHERE {allowed} WITH n, score ORDER BY score DESC LIMIT $want "
        f"RETURN collect({_NODE}) AS allowed }} "
        "RETURN size(pool) AS pooled, allowed"
    )


@dataclass
class SearchRequest:
    """What a caller asks for; defaults come from the settings."""

    query: str
    labels: Sequence[str] | None = None
    limit: int = 10
    # The settings' defaults (README, "Retrieval quality"): legs min-max normalised, even mix.
    mode: Mode = "convex"
    vector_weight: float = 0.5
    keyword_weight: float = 0.5
    rrf_k: int = 60
    threshold: float = 0.0
    boosts: bool = False
    expand_hops: int = 1
    fields: Sequence[str] | None = None
    # Optional stages, each off unless asked for (the engine turns them on from settings).
    retrieval_class: str | None = None  # entity | temporal | event | general | none
    routing: bool = False
    expand_queries: bool = False
    dedup: bool = False  # the four dedup layers (nodeId, slug, canonicalName, contentHash)
    per_document: bool | None = None  # one result per ingested document (None: wants_documents)
    subscriptions: Sequence[str] = ()  # a public agent's keyword subscriptions (at most 5)


@dataclass
class SearchResult:
    """Ranked results, the stage counts and how long it took."""

    results: list[Candidate]
    counts: dict[str, int] = field(default_factory=dict)
    ms: float = 0.0
    vector_only: bool = False  # the full-text index is missing
    keyword_only: bool = False  # the model failed: keyword results only


def document_key(cand: Candidate) -> str:
    """The ingested document a candidate belongs to, or the candidate itself."""
    key = cand.props.get("documentId")  # on every section and chunk
    if not key and "KnowledgeDocument" in cand.labels:
        key = cand.node_id
    return f"doc:{key}" if key else f"node:{cand.node_id}"


def wants_documents(labels: Sequence[str] | None) -> bool:
    """Whether a search over ``labels`` ranks documents (all labels, or documents among them)
    rather than passages (only sections or chunks, each on its own)."""
    return labels is None or "KnowledgeDocument" in labels


def _carrier(members: list[Candidate]) -> Candidate:
    """The node that carries a document's result: the one the caller's fusion ranks first, or,
    where that is a summary (the document, or a section), the best matching passage under it.
    A chunk holds the text itself; the document and its sections only summaries of it, and the
    best summary says which part of the document the query is about."""

    def order(c: Candidate) -> tuple[float, str]:
        return (-c.fused, c.node_id)

    best = min(members, key=order)
    if "Chunk" in best.labels:
        return best
    whole = "KnowledgeDocument" in best.labels
    under = [
        c
        for c in members
        if "Chunk" in c.labels and (whole or c.props.get("sectionId") == best.node_id)
    ]
    return min(under, key=order) if under else best


def by_document(
    cands: list[Candidate], fuse_nodes: Callable[[list[Candidate]], object]
) -> list[Candidate]:
    """One candidate per ingested document, scored on the whole document.

    A document, its sections and its chunks each match on part of the document's text (title
    and summary, or a chunk's content); ranked apart they compete with each other, no node is
    scored on the whole, and the two legs' evidence lands on different nodes. Here the document's
    vector score is its best node's and its keyword score the sum over its nodes, carried by
    :func:`_carrier` (the nodes ranked by the caller's own fusion, ``fuse_nodes``). Candidates
    outside a document hierarchy are left as they are.
    """
    groups: dict[str, list[Candidate]] = {}
    for cand in cands:
        groups.setdefault(document_key(cand), []).append(cand)
    if all(len(members) == 1 for members in groups.values()):
        return cands
    fuse_nodes(cands)
    out = []
    for members in groups.values():
        best = _carrier(members)
        if len(members) > 1:
            vectors = [c.vector for c in members if c.vector is not None]
            keywords = [c.keyword_raw for c in members if c.keyword_raw is not None]
            best.vector = max(vectors) if vectors else None
            best.keyword_raw = sum(keywords) if keywords else None
            best.exact_keyword = any(c.exact_keyword for c in members)
            best.trace.append(f"document: best of its {len(members)} matching nodes")
        out.append(best)
    return out


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

    def __init__(
        self, graph: Graph, embed_query: EmbedQuery, expander: Expander | None = None
    ) -> None:
        self.graph = graph
        self.embed_query = embed_query
        self.expander = expander
        self._indexes: dict[str, str] | None = None  # label -> vector index name
        self._paraphrases: dict[str, tuple[float, list[str]]] = {}
        self._slots = asyncio.Semaphore(SEARCHES_AT_ONCE)

    async def paraphrases(self, query: str) -> list[str]:
        """Up to three paraphrases of ``query``, cached for an hour; none if the expander fails."""
        if self.expander is None:
            return []
        now = time.monotonic()
        cached = self._paraphrases.get(query)
        if cached and now - cached[0] < EXPANSION_TTL:
            return cached[1]
        try:
            found = await self.expander(query)
        except Exception as err:  # a pluggable, remote expander: any failure means "no expansion"
            log.warning("[graph-search:expand] warn=expander-failed error=%s", err)
            return []
        unique = [p for p in dict.fromkeys(x.strip() for x in found) if p and p != query]
        self._paraphrases[query] = (now, unique[:MAX_PARAPHRASES])
        return unique[:MAX_PARAPHRASES]

    async def _subscriptions(
        self, caller: Caller, keywords: Sequence[str], want: int, boosts: bool
    ) -> list[dict[str, Any]]:
        """Nodes matching a public agent's keyword subscriptions (scope guard, no agent tag)."""
        rows: list[dict[str, Any]] = []
        # The agent tag does not apply to subscriptions.
        scoped = caller.params() | {"agent": None, "boosts": boosts, "want": want}
        for keyword in list(keywords)[:MAX_SUBSCRIPTIONS]:
            query = keyword_query(keyword)
            if query is not None:
                cypher = _pooled(
                    f"CALL db.index.fulltext.queryNodes('{FULLTEXT_INDEX}', $q, {{limit: $k}}) "
                    "YIELD node AS n, score",
                    f"({guard('n')} AND {records_hidden('n')})",
                )
                params = {**scoped, "q": query}
                rows += (await self._fill(cypher, params, want, want * KEYWORD_POOL))[0]
            # A node that lists the keyword in its `keywords` property matches fully (1.0).
            listed, _ = await self.graph.read(
                "MATCH (n) WHERE n.accountId = $account AND $kw IN coalesce(n.keywords, []) "
                f"AND {guard('n')} AND {records_hidden('n')} WITH n, 1.0 AS score LIMIT $want "
                f"RETURN collect({_NODE}) AS allowed",
                {**scoped, "kw": keyword},
            )
            rows += [{**node, "exact": True} for node in listed[0]["allowed"]] if listed else []
        return rows

    def forget_indexes(self) -> None:
        """Drop the cached index discovery (call after schema changes)."""
        self._indexes = None

    async def vector_indexes(self) -> dict[str, str]:
        """Discover the vector indexes at runtime; cached until :meth:`forget_indexes`."""
        if self._indexes is None:
            rows, _ = await self.graph.read(
                "SHOW VECTOR INDEXES YIELD name, labelsOrTypes, entityType, state "
                "WHERE entityType = 'NODE' AND state = 'ONLINE' "
                "RETURN name, labelsOrTypes[0] AS label"
            )
            self._indexes = {row["label"]: row["name"] for row in rows}
        return self._indexes

    async def _vector(
        self,
        caller: Caller,
        vector: list[float],
        labels: Sequence[str] | None,
        want: int,
        boosts: bool = False,
    ) -> Pool:
        indexes = await self.vector_indexes()
        chosen = {lb: ix for lb, ix in indexes.items() if labels is None or lb in labels}
        if not chosen:
            return [], True
        branches = [
            f"MATCH (n:`{label}`) SEARCH n IN (VECTOR INDEX `{index}` FOR $vector "
            "WHERE n.accountId = $account LIMIT $k) SCORE AS score RETURN n, score"
            for label, index in sorted(chosen.items())
        ]
        cypher = _pooled(
            "CYPHER 25 CALL () { " + " UNION ALL ".join(branches) + " }",
            f"({guard_after_search('n')} AND {records_hidden('n')})",
        )
        params = {**caller.params(), "vector": vector, "boosts": boosts, "want": want}
        return await self._fill(cypher, params, want)

    async def _keyword(
        self,
        caller: Caller,
        text: str,
        labels: Sequence[str] | None,
        want: int,
        boosts: bool = False,
    ) -> Pool:
        # Lucene allows 1024 clauses and each term expands over every indexed property.
        query = keyword_query(" ".join(text.split()[:MAX_QUERY_TERMS]))
        if query is None:
            return [], True
        allowed = f"({guard('n')} AND {records_hidden('n')})"
        if labels is not None:
            allowed = f"({allowed} AND any(l IN labels(n) WHERE l IN $labels))"
        cypher = _pooled(
            f"CALL db.index.fulltext.queryNodes('{FULLTEXT_INDEX}', $q, {{limit: $k}}) "
            "YIELD node AS n, score",
            allowed,
        )
        params = {
            **caller.params(),
            "q": query,
            "labels": list(labels or []),
            "boosts": boosts,
            "want": want,
        }
        return await self._fill(cypher, params, want, want * KEYWORD_POOL)

    async def _fill(
        self, cypher: str, params: dict[str, Any], want: int, first: int | None = None
    ) -> Pool:
        """Over-fetch (a first pool of ``first`` rows, or ``want``); while guards leave fewer than
        ``want`` of a full pool, widen the pool. Also says whether the indexes gave everything
        they had (the pool was not cut)."""
        k = min(first or want, MAX_FETCH)
        while True:
            rows, _ = await self.graph.read(cypher, {**params, "k": k})
            pooled = int(rows[0]["pooled"]) if rows else 0
            allowed: list[dict[str, Any]] = rows[0]["allowed"] if rows else []
            # Fewer pooled rows than k: the indexes had nothing more to give.
            exhausted = pooled < k
            if len(allowed) >= want or exhausted or k >= MAX_FETCH:
                return allowed[:want], exhausted and len(allowed) <= want
            k = min(k * 4, MAX_FETCH)

    async def expand(self, caller: Caller, results: list[Candidate], eids: dict[str, str]) -> None:
        """Attach up to MAX_RELATED guarded one-hop neighbours to each result."""
        if not results:
            return
        rows, _ = await self.graph.read(
            "UNWIND $eids AS eid MATCH (r) WHERE elementId(r) = eid "
            f"CALL (r) {{ MATCH (r)-[rel]-(m) WHERE {guard('m')} AND {records_hidden('m')} "
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

    async def _vector_path(
        self, caller: Caller, query: str, labels: Sequence[str] | None, want: int, boosts: bool
    ) -> Pool:
        vector = await self.embed_query(query)
        return await self._vector(caller, vector, labels, want, boosts)

    async def _keyword_path(
        self, caller: Caller, query: str, labels: Sequence[str] | None, want: int, boosts: bool
    ) -> Pool | None:
        """Keyword rows, or None when the full-text index is missing (vector-only, no error)."""
        try:
            return await self._keyword(caller, query, labels, want, boosts)
        except GraphQueryFailed as err:
            if FULLTEXT_INDEX not in str(err):
                raise
            log.warning("[graph-search:hybrid] warn=no-fulltext-index fallback=vector-only")
            return None

    async def search(self, caller: Caller, request: SearchRequest) -> SearchResult:
        """Run every stage and return the ranked, guarded, expanded results (at most
        SEARCHES_AT_ONCE at a time; the time waiting for a turn counts in ``ms``)."""
        started = time.monotonic()
        async with self._slots:
            return await self._search(caller, request, started)

    async def _search(self, caller: Caller, request: SearchRequest, started: float) -> SearchResult:
        want = max(request.limit * 3, request.limit + 10)
        labels, weights = request.labels, (request.vector_weight, request.keyword_weight)
        route = ROUTES.get(request.retrieval_class or "") if request.routing else None
        if route is not None:
            if route.labels is not None:
                labels = [lb for lb in route.labels if labels is None or lb in labels]
            weights = (route.vector_weight, route.keyword_weight)
        queries = [request.query]
        if request.expand_queries:
            queries += await self.paraphrases(request.query)

        paths: list[tuple[list[dict[str, Any]], str]] = []
        vector_only = keyword_only = False
        # Whether each leg's indexes gave all they had, for every query (see fusion.Floors).
        whole = {"vector": True, "keyword": True}
        for query in queries:
            # The two paths are independent statements: run them side by side.
            vector_rows, keyword_rows = await asyncio.gather(
                self._vector_path(caller, query, labels, want, request.boosts),
                self._keyword_path(caller, query, labels, want, request.boosts),
                return_exceptions=True,
            )
            if isinstance(vector_rows, EmbedError) and isinstance(keyword_rows, tuple):
                log.warning(
                    "[graph-search:hybrid] warn=embed-failed fallback=keyword-only error=%s",
                    vector_rows.code,
                )
                keyword_only = True
            elif isinstance(vector_rows, BaseException):
                raise vector_rows
            else:
                paths.append((vector_rows[0], "vector"))
                whole["vector"] = whole["vector"] and vector_rows[1]
            if keyword_rows is None:
                vector_only = True
            elif isinstance(keyword_rows, BaseException):
                raise keyword_rows
            else:
                paths.append((keyword_rows[0], "keyword"))
                whole["keyword"] = whole["keyword"] and keyword_rows[1]
        floors = Floors(
            VECTOR_FLOOR if whole["vector"] else None, KEYWORD_FLOOR if whole["keyword"] else None
        )
        if request.subscriptions and not vector_only:
            subscribed = await self._subscriptions(
                caller, request.subscriptions, want, request.boosts
            )
            paths.append((subscribed, "sub"))

        candidates: dict[str, Candidate] = {}
        eids: dict[str, str] = {}
        for rows, path in paths:
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
                elif row.get("exact"):
                    cand.trace.append("subscription: keywords property match (keyword 1.0)")
                    cand.exact_keyword = True
                else:
                    cand.keyword_raw = max(cand.keyword_raw or 0.0, float(row["score"]))

        pool = list(candidates.values())
        per_document = request.per_document
        if per_document is None:
            per_document = wants_documents(labels)
        if per_document:
            pool = by_document(
                pool, lambda c: fuse(c, request.mode, weights[0], weights[1], request.rrf_k, floors)
            )
        ranked: RankResult = rank(
            pool,
            mode=request.mode,
            vector_weight=weights[0],
            keyword_weight=weights[1],
            rrf_k=request.rrf_k,
            threshold=request.threshold,
            limit=request.limit,
            boosts=request.boosts,
            dedup_layers=request.dedup,
            floors=floors,
        )
        if request.expand_hops > 0:
            await self.expand(caller, ranked.results, eids)
        for cand in ranked.results:
            cand.props = project(cand.props, request.fields)
        ms = (time.monotonic() - started) * 1000
        counts = ranked.counts
        log.info(
            "[graph-search:hybrid] vector=%s bm25=%s fused=%s boosted=%s deduped=%s final=%s "
            "mode=%s route=%s queries=%s subscriptions=%s keyword_only=%s ms=%d",
            counts.get("vector"),
            counts.get("bm25"),
            counts.get("fused"),
            counts.get("boosted"),
            counts.get("deduped"),
            counts.get("final"),
            request.mode,
            request.retrieval_class if route is not None else "none",
            len(queries),
            len(request.subscriptions),
            keyword_only,
            ms,
        )
        return SearchResult(ranked.results, counts, ms, vector_only, keyword_only)
