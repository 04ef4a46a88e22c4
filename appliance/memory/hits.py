"""The shapes a search passes between its stages: candidates, related nodes, score traces."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Properties never returned to a caller, whatever ``fields`` asks for (``emailKey`` is the
# contact book's uniqueness key, a copy of the email).
HIDDEN_PROPERTIES = frozenset({"embedding", "accountId", "emailKey"})


@dataclass
class Related:
    """A neighbour of a result found by one-hop graph expansion."""

    node_id: str
    labels: list[str]
    rel_type: str
    direction: str  # "out": (result)-[rel]->(related); "in": (result)<-[rel]-(related)
    props: dict[str, Any]


@dataclass
class Candidate:
    """One node on its way through retrieval, with every score that shaped its rank."""

    node_id: str
    labels: list[str]
    props: dict[str, Any]
    vector: float | None = None  # cosine similarity in [0, 1], None if the vector path missed it
    keyword_raw: float | None = None  # Lucene BM25 score as Neo4j returned it
    keyword: float | None = None  # BM25 normalised within the result set, in [0, 1]
    fused: float = 0.0  # after weighted-sum or RRF
    boosts: dict[str, float] = field(default_factory=dict)  # name -> multiplier applied
    score: float = 0.0  # final score after boosts
    backlinks: int = 0  # inbound relationships, for the backlink boost
    exact_keyword: bool = False  # a keyword subscription matched its `keywords` property
    related: list[Related] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)  # dedup and other decisions, human-readable

    @property
    def slug(self) -> str | None:
        """The node's slug property, if any."""
        value = self.props.get("slug")
        return str(value) if value else None

    @property
    def canonical_name(self) -> str | None:
        """The node's canonical name (canonicalName, else name), if any."""
        value = self.props.get("canonicalName") or self.props.get("name")
        return str(value) if value else None

    @property
    def content_hash(self) -> str | None:
        """The node's contentHash property, if any."""
        value = self.props.get("contentHash")
        return str(value) if value else None
