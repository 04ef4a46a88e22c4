"""The pure ranking stages of hybrid search: normalise, fuse, boost, dedup, rank.

No I/O: every stage takes the candidates both retrieval paths produced and updates them in
place. Formulas, with ``v`` the vector (cosine) score and ``k`` the normalised keyword score:

* Keyword normalisation: ``keyword = max(keyword_raw, 0) / max(keyword_raw over the set)``;
  None stays None, a lone hit gets 1.0, and if the maximum is 0 every keyword score is 0.0.
* Weighted sum: ``fused = vw * v + kw * k``, a missing score counting 0. The weights are
  used as given, not renormalised, so ``fused`` lies in ``[0, vw + kw]``.
* Reciprocal rank fusion: ``fused = sum over paths p containing the candidate of
  1 / (rrf_k + rank_p)``, ``rank_p`` starting at 1 in order of descending path score
  (vector path: ``vector``; keyword path: ``keyword_raw``), ties broken by ``node_id``.
* Convex combination: each path's scores min-max normalised over that path's own hits
  (``(s - min) / (max - min)``; a lone hit, or a path whose hits all score alike, gets 1.0),
  then ``fused = a * v' + (1 - a) * k'`` with ``a = vw / (vw + kw)``; a candidate missing from
  a path counts 0 there. Unlike the weighted sum, neither leg's scale (cosine in a narrow band,
  BM25 unbounded) decides the mix: only the ranks' spread within each leg does. Min-max takes
  a pool's worst hit for the level of what the pool left out; when a path's index had nothing
  more to give (every visible match is in the pool, as in a small memory), there is no such
  level, and the path's ``floor`` — its score for no evidence at all: a cosine of 0 for vectors
  (:data:`VECTOR_FLOOR`), 0 for BM25 — takes the minimum's place
  (``max(s - floor, 0) / (max - floor)``), so two hits a hair apart are not stretched to 1 and 0.
* Boosts: ``score = fused * product of multipliers``, where a non-empty ``compiledTruth``
  property gives ``1 + compiled_truth`` (default 1.15) and ``backlinks = n >= 1`` gives
  ``1 + clamp(0.05 + 0.05 * log10(n), 0.05, 0.25)``. Without boosts ``score = fused``.
* Dedup: four layers in order (nodeId, slug, canonicalName trimmed and case-folded,
  contentHash); per shared key the highest ``score`` wins, ties to the lower ``node_id``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from appliance.memory.hits import Candidate
from appliance.rpc.protocol import BadParams

Mode = Literal["weighted", "rrf", "convex"]

# A path's score for no evidence at all (see the module's convex combination): Neo4j reports a
# cosine similarity c as (1 + c) / 2, so unrelated texts (c = 0) score 0.5; BM25 scores 0.
VECTOR_FLOOR = 0.5
KEYWORD_FLOOR = 0.0


@dataclass(frozen=True)
class Floors:
    """Per path, the floor convex normalisation takes instead of its pool's minimum (None:
    the pool was cut, its minimum stands for what was left out)."""

    vector: float | None = None
    keyword: float | None = None


BACKLINK_BASE = 0.05
BACKLINK_PER_DECADE = 0.05
BACKLINK_MIN = 0.05
BACKLINK_MAX = 0.25


def _order(cand: Candidate) -> tuple[float, str]:
    """Sort key: score descending, then node_id, so equal scores order the same every run."""
    return (-cand.score, cand.node_id)


def normalise_keyword(cands: list[Candidate]) -> list[Candidate]:
    """Set ``keyword`` to ``keyword_raw`` divided by the set's largest raw BM25 score."""
    raws = [c.keyword_raw for c in cands if c.keyword_raw is not None]
    # BM25 is unbounded and query-dependent; dividing by the set's best puts it on the
    # same [0, 1] footing as cosine similarity so the two can be summed.
    top = max(raws, default=0.0)
    for cand in cands:
        if cand.exact_keyword:
            # A subscribed keyword listed on the node counts as a perfect keyword match.
            cand.keyword_raw = max(top, cand.keyword_raw or 0.0, 1.0)
            cand.keyword = 1.0
        elif cand.keyword_raw is None:
            cand.keyword = None
        elif top <= 0.0:
            cand.keyword = 0.0
        else:
            cand.keyword = max(cand.keyword_raw, 0.0) / top
    return cands


def weighted_sum(
    cands: list[Candidate], vector_weight: float = 0.7, keyword_weight: float = 0.3
) -> list[Candidate]:
    """Set ``fused = vector_weight * vector + keyword_weight * keyword`` (missing counts 0)."""
    # `not >= 0` also rejects NaN, which would otherwise poison every score silently.
    if not (vector_weight >= 0.0 and keyword_weight >= 0.0):
        raise BadParams(f"weights must be non-negative, got {vector_weight}, {keyword_weight}")
    if vector_weight == 0.0 and keyword_weight == 0.0:
        raise BadParams("vector_weight and keyword_weight cannot both be zero")
    for cand in cands:
        vector = cand.vector if cand.vector is not None else 0.0
        keyword = cand.keyword if cand.keyword is not None else 0.0
        cand.fused = vector_weight * vector + keyword_weight * keyword
    return cands


def _path_ranks(
    cands: list[Candidate], score_of: Callable[[Candidate], float | None]
) -> dict[int, int]:
    """1-based rank of each candidate (by ``id``) on one path, ties broken by node_id."""
    on_path = [(s, c) for c in cands if (s := score_of(c)) is not None]
    on_path.sort(key=lambda pair: (-pair[0], pair[1].node_id))
    return {id(c): rank for rank, (_, c) in enumerate(on_path, start=1)}


def reciprocal_rank_fusion(cands: list[Candidate], k: int = 60) -> list[Candidate]:
    """Set ``fused`` to the sum of ``1 / (k + rank)`` over the paths the candidate is on."""
    if k < 0:
        raise BadParams(f"rrf k must be non-negative, got {k}")
    # The keyword path ranks by the raw BM25 score: normalising by a positive maximum keeps
    # the order, so RRF does not depend on normalise_keyword having run.
    paths = [
        _path_ranks(cands, lambda c: c.vector),
        _path_ranks(cands, lambda c: c.keyword_raw),
    ]
    for cand in cands:
        cand.fused = sum(1.0 / (k + ranks[id(cand)]) for ranks in paths if id(cand) in ranks)
    return cands


def _min_max(
    cands: list[Candidate], score_of: Callable[[Candidate], float | None], floor: float | None
) -> dict[int, float]:
    """Each on-path candidate's score (by ``id``) min-max normalised over the path's hits, or
    from ``floor`` (when given) to the path's best."""
    on_path = [(s, c) for c in cands if (s := score_of(c)) is not None]
    if not on_path:
        return {}
    high = max(s for s, _ in on_path)
    if floor is not None:
        span = high - floor
        return {id(c): max(s - floor, 0.0) / span if span > 0 else 0.0 for s, c in on_path}
    low = min(s for s, _ in on_path)
    span = high - low
    return {id(c): (s - low) / span if span > 0 else 1.0 for s, c in on_path}


def convex_combination(
    cands: list[Candidate],
    vector_weight: float = 0.5,
    keyword_weight: float = 0.5,
    floors: Floors = Floors(),
) -> list[Candidate]:
    """Set ``fused = a * v' + (1 - a) * k'`` over min-max normalised paths (see the module)."""
    if not (vector_weight >= 0.0 and keyword_weight >= 0.0):
        raise BadParams(f"weights must be non-negative, got {vector_weight}, {keyword_weight}")
    if vector_weight == 0.0 and keyword_weight == 0.0:
        raise BadParams("vector_weight and keyword_weight cannot both be zero")
    share = vector_weight / (vector_weight + keyword_weight)
    vectors = _min_max(cands, lambda c: c.vector, floors.vector)
    keywords = _min_max(cands, lambda c: c.keyword_raw, floors.keyword)
    for cand in cands:
        cand.fused = share * vectors.get(id(cand), 0.0) + (1.0 - share) * keywords.get(
            id(cand), 0.0
        )
    return cands


def backlink_boost(n: int) -> float:
    """The backlink boost ``b`` for ``n`` inbound links (0.0 when ``n < 1``)."""
    if n < 1:
        return 0.0
    raw = BACKLINK_BASE + BACKLINK_PER_DECADE * math.log10(n)
    # Clamped so a hub node with a million links cannot outrank a far better match.
    return min(max(raw, BACKLINK_MIN), BACKLINK_MAX)


def _has_compiled_truth(cand: Candidate) -> bool:
    """Whether the node carries a non-blank compiledTruth property."""
    value = cand.props.get("compiledTruth")
    if isinstance(value, str):
        return bool(value.strip())
    return bool(value)


def apply_boosts(cands: list[Candidate], compiled_truth: float = 0.15) -> list[Candidate]:
    """Set ``score = fused * boosts`` and record each multiplier in ``cand.boosts``."""
    if not compiled_truth >= 0.0:
        raise ValueError(f"compiled_truth boost must be non-negative, got {compiled_truth}")
    for cand in cands:
        # Rebuilt from scratch so calling this twice does not compound the boosts.
        cand.boosts = {}
        if _has_compiled_truth(cand):
            cand.boosts["compiledTruth"] = 1.0 + compiled_truth
        if cand.backlinks >= 1:
            cand.boosts["backlinks"] = 1.0 + backlink_boost(cand.backlinks)
        cand.score = cand.fused * math.prod(cand.boosts.values())
    return cands


def _canonical_key(cand: Candidate) -> str | None:
    """canonicalName trimmed and case-folded, so "Alice " and "alice" collapse."""
    name = cand.canonical_name
    if name is None:
        return None
    return name.strip().casefold() or None


# Coarsest identity first: the same node twice, then the same page, the same entity, the
# same text stored under two nodes.
DEDUP_LAYERS: tuple[tuple[str, Callable[[Candidate], str | None]], ...] = (
    ("nodeId", lambda c: c.node_id),
    ("slug", lambda c: c.slug),
    ("canonicalName", _canonical_key),
    ("contentHash", lambda c: c.content_hash),
)


def dedup(cands: Iterable[Candidate]) -> tuple[list[Candidate], int]:
    """Collapse duplicates layer by layer; return the kept candidates and the count dropped."""
    kept = sorted(cands, key=_order)
    dropped = 0
    for layer, key_of in DEDUP_LAYERS:
        winners: dict[str, Candidate] = {}
        survivors: list[Candidate] = []
        # `kept` is in score order, so the first holder of a key is the winner.
        for cand in kept:
            key = key_of(cand)
            if key is None:
                survivors.append(cand)
            elif key in winners:
                winners[key].trace.append(
                    f"dedup:{layer} dropped {cand.node_id} (score {cand.score:.4g})"
                )
                dropped += 1
            else:
                winners[key] = cand
                survivors.append(cand)
        kept = survivors
    return kept, dropped


@dataclass
class RankResult:
    """The ranked results and the stage counts for the hybrid-search log line."""

    results: list[Candidate]
    counts: dict[str, int] = field(default_factory=dict)

    def log_line(self) -> str:
        """The counts as ``[graph-search:hybrid] vector=… bm25=… … final=…``."""
        body = " ".join(f"{name}={n}" for name, n in self.counts.items())
        return f"[graph-search:hybrid] {body}"


def fuse(
    cands: list[Candidate],
    mode: Mode = "weighted",
    vector_weight: float = 0.7,
    keyword_weight: float = 0.3,
    rrf_k: int = 60,
    floors: Floors = Floors(),
) -> list[Candidate]:
    """Normalise the keyword scores and set every candidate's ``fused`` by ``mode`` (``floors``
    only matter to the convex mode)."""
    normalise_keyword(cands)
    if mode == "weighted":
        weighted_sum(cands, vector_weight, keyword_weight)
    elif mode == "rrf":
        reciprocal_rank_fusion(cands, rrf_k)
    elif mode == "convex":
        convex_combination(cands, vector_weight, keyword_weight, floors)
    else:
        raise BadParams(f"unknown fusion mode {mode!r}")
    return cands


def rank(
    cands: list[Candidate],
    *,
    mode: Mode = "weighted",
    vector_weight: float = 0.7,
    keyword_weight: float = 0.3,
    rrf_k: int = 60,
    threshold: float = 0.0,
    limit: int = 10,
    boosts: bool = False,
    dedup_layers: bool = False,
    floors: Floors = Floors(),
) -> RankResult:
    """Normalise, fuse, boost, dedup (when asked), threshold, sort and slice the candidates."""
    if limit < 0:
        raise BadParams(f"limit must be non-negative, got {limit}")
    fuse(cands, mode, vector_weight, keyword_weight, rrf_k, floors)
    if boosts:
        apply_boosts(cands)
    else:
        for cand in cands:
            cand.score = cand.fused
    boosted = sum(1 for c in cands if c.boosts) if boosts else 0
    # Dedup before the threshold so a duplicate is credited to its winner's trace even when
    # both would have been cut anyway.
    kept, dropped = dedup(cands) if dedup_layers else (list(cands), 0)
    results = sorted((c for c in kept if c.score >= threshold), key=_order)[:limit]
    counts = {
        "vector": sum(1 for c in cands if c.vector is not None),
        "bm25": sum(1 for c in cands if c.keyword is not None),
        "fused": len(cands),
        "boosted": boosted,
        "deduped": dropped,
        "final": len(results),
    }
    return RankResult(results, counts)
