"""The pure ranking stages: expected numbers below are worked out by hand, not by the code."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from appliance.memory.fusion import (
    DEDUP_LAYERS,
    KEYWORD_FLOOR,
    VECTOR_FLOOR,
    Floors,
    RankResult,
    apply_boosts,
    backlink_boost,
    convex_combination,
    dedup,
    normalise_keyword,
    rank,
    reciprocal_rank_fusion,
    weighted_sum,
)
from appliance.memory.hits import Candidate
from appliance.rpc.protocol import BadParams

PROPERTY = settings(database=None, deadline=None, max_examples=200)


def cand(
    node_id: str,
    vector: float | None = None,
    keyword_raw: float | None = None,
    *,
    score: float = 0.0,
    backlinks: int = 0,
    **props: Any,
) -> Candidate:
    return Candidate(
        node_id=node_id,
        labels=["Note"],
        props=props,
        vector=vector,
        keyword_raw=keyword_raw,
        score=score,
        backlinks=backlinks,
    )


def five() -> list[Candidate]:
    """The weighted-sum fixture: raw BM25 maximum is 8.0, so keyword = raw / 8."""
    return [
        cand("a", 0.9, 4.0),  # keyword 0.5
        cand("b", 0.6, 8.0),  # keyword 1.0
        cand("c", 0.8, None),  # keyword path missed it
        cand("d", None, 6.0),  # keyword 0.75, vector path missed it
        cand("e", 0.5, 2.0),  # keyword 0.25
    ]


def by_id(cands: list[Candidate]) -> dict[str, Candidate]:
    return {c.node_id: c for c in cands}


def ids(cands: list[Candidate]) -> list[str]:
    return [c.node_id for c in cands]


def fused_order(cands: list[Candidate]) -> list[str]:
    return ids(sorted(cands, key=lambda c: (-c.fused, c.node_id)))


# --- keyword normalisation ------------------------------------------------------------------


def test_normalise_divides_by_the_best_raw_score() -> None:
    got = by_id(normalise_keyword(five()))
    assert {k: c.keyword for k, c in got.items()} == {
        "a": 0.5,
        "b": 1.0,
        "c": None,
        "d": 0.75,
        "e": 0.25,
    }


def test_normalise_single_hit_gets_one() -> None:
    [only] = normalise_keyword([cand("x", keyword_raw=3.7)])
    assert only.keyword == 1.0


def test_normalise_all_zero_gives_zero_and_none_stays_none() -> None:
    got = normalise_keyword([cand("x", keyword_raw=0.0), cand("y", keyword_raw=0.0), cand("z")])
    assert [c.keyword for c in got] == [0.0, 0.0, None]


def test_normalise_resets_a_stale_keyword_when_raw_is_missing() -> None:
    stale = cand("x")
    stale.keyword = 0.9
    normalise_keyword([stale])
    assert stale.keyword is None


def test_normalise_empty_list() -> None:
    assert normalise_keyword([]) == []


# --- weighted sum ---------------------------------------------------------------------------


def test_weighted_sum_default_weights_hand_computed() -> None:
    got = weighted_sum(normalise_keyword(five()))
    # a: .7*.9 + .3*.5 = .78   b: .7*.6 + .3*1 = .72   c: .7*.8 = .56
    # d: .3*.75 = .225         e: .7*.5 + .3*.25 = .425
    expected = {"a": 0.78, "b": 0.72, "c": 0.56, "d": 0.225, "e": 0.425}
    assert {c.node_id: c.fused for c in got} == pytest.approx(expected, abs=1e-12)
    assert fused_order(got) == ["a", "b", "c", "e", "d"]


def test_weighted_sum_equal_weights_hand_computed_with_tie() -> None:
    got = weighted_sum(normalise_keyword(five()), 0.5, 0.5)
    # a: .45+.25 = .70  b: .30+.50 = .80  c: .40  d: .375  e: .25+.125 = .375 (tie with d)
    expected = {"a": 0.70, "b": 0.80, "c": 0.40, "d": 0.375, "e": 0.375}
    assert {c.node_id: c.fused for c in got} == pytest.approx(expected, abs=1e-12)
    assert fused_order(got) == ["b", "a", "c", "d", "e"]


def test_weighted_sum_weights_are_not_renormalised() -> None:
    [x] = weighted_sum([cand("x", 1.0)], vector_weight=2.0, keyword_weight=3.0)
    x.keyword = 1.0
    weighted_sum([x], vector_weight=2.0, keyword_weight=3.0)
    assert x.fused == 5.0


def test_weighted_sum_one_zero_weight_is_allowed() -> None:
    [x] = weighted_sum(normalise_keyword([cand("x", 0.4, 2.0)]), 0.0, 1.0)
    assert x.fused == 1.0


@pytest.mark.parametrize(
    ("vw", "kw"), [(-0.1, 0.3), (0.7, -1.0), (0.0, 0.0), (float("nan"), 0.3), (0.7, float("nan"))]
)
def test_weighted_sum_rejects_bad_weights(vw: float, kw: float) -> None:
    with pytest.raises(ValueError):
        weighted_sum([cand("x", 0.5)], vw, kw)


# --- reciprocal rank fusion -----------------------------------------------------------------


def rrf_fixture() -> list[Candidate]:
    """Vector ranks p1 q2 r3 t4 (q, r tie at .7: q first); keyword ranks s1 q2 t3 p4 (q, t tie)."""
    return [
        cand("p", 0.9, 1.0),
        cand("q", 0.7, 3.0),
        cand("r", 0.7, None),
        cand("s", None, 5.0),
        cand("t", 0.2, 3.0),
    ]


def test_rrf_k60_hand_computed() -> None:
    got = reciprocal_rank_fusion(rrf_fixture())
    expected = {
        "p": 0.032018442622950824,  # 1/61 + 1/64
        "q": 0.032258064516129031,  # 1/62 + 1/62
        "r": 0.015873015873015872,  # 1/63
        "s": 0.016393442622950820,  # 1/61
        "t": 0.031498015873015872,  # 1/64 + 1/63
    }
    assert {c.node_id: c.fused for c in got} == pytest.approx(expected, rel=1e-12)
    assert fused_order(got) == ["q", "p", "t", "s", "r"]


def test_rrf_k0_hand_computed_changes_the_order() -> None:
    got = reciprocal_rank_fusion(rrf_fixture(), k=0)
    # p: 1 + 1/4   q: 1/2 + 1/2   r: 1/3   s: 1   t: 1/4 + 1/3 ; q and s tie at 1.0
    expected = {"p": 1.25, "q": 1.0, "r": 1 / 3, "s": 1.0, "t": 7 / 12}
    assert {c.node_id: c.fused for c in got} == pytest.approx(expected, rel=1e-12)
    assert fused_order(got) == ["p", "q", "s", "t", "r"]


def test_rrf_path_ties_are_broken_by_node_id_not_input_order() -> None:
    forward = reciprocal_rank_fusion([cand("m", 0.5), cand("n", 0.5)])
    backward = reciprocal_rank_fusion([cand("n", 0.5), cand("m", 0.5)])
    for got in (forward, backward):
        assert by_id(got)["m"].fused == 1 / 61
        assert by_id(got)["n"].fused == 1 / 62


def test_rrf_candidate_on_no_path_gets_zero() -> None:
    [x] = reciprocal_rank_fusion([cand("x")])
    assert x.fused == 0.0


def test_convex_even_mix_hand_computed() -> None:
    # vector hits 0.9, 0.6, 0.8, 0.5: min 0.5, span 0.4 -> a 1.0, b 0.25, c 0.75, e 0.0.
    # keyword hits 4, 8, 6, 2: min 2, span 6 -> a 1/3, b 1.0, d 2/3, e 0.0.
    out = by_id(convex_combination(five()))
    assert out["a"].fused == pytest.approx(0.5 * 1.0 + 0.5 / 3)
    assert out["b"].fused == pytest.approx(0.5 * 0.25 + 0.5 * 1.0)
    assert out["c"].fused == pytest.approx(0.5 * 0.75)
    assert out["d"].fused == pytest.approx(0.5 * 2 / 3)
    assert out["e"].fused == pytest.approx(0.0)


def test_convex_weights_are_a_share_and_a_lone_hit_is_one() -> None:
    # 0.7 / 0.3 and 7 / 3 are the same mix; one keyword hit normalises to 1.0.
    one = by_id(convex_combination([cand("a", 0.9, None), cand("b", 0.1, 5.0)], 0.7, 0.3))
    two = by_id(convex_combination([cand("a", 0.9, None), cand("b", 0.1, 5.0)], 7.0, 3.0))
    assert one["a"].fused == pytest.approx(0.7) == two["a"].fused
    assert one["b"].fused == pytest.approx(0.3) == two["b"].fused


def test_convex_does_not_depend_on_either_legs_scale() -> None:
    base = by_id(convex_combination(five()))
    scaled = [cand(c.node_id, c.vector, c.keyword_raw) for c in five()]
    for c in scaled:
        c.vector = None if c.vector is None else 3 * c.vector - 1
        c.keyword_raw = None if c.keyword_raw is None else 40 * c.keyword_raw
    assert by_id(convex_combination(scaled)).keys() == base.keys()
    for node_id, c in by_id(convex_combination(scaled)).items():
        assert c.fused == pytest.approx(base[node_id].fused)


def test_a_whole_pool_is_normalised_from_the_floor_not_its_worst_hit() -> None:
    # Two contacts in a small memory: their vectors a hair apart, only one matching by name.
    # Min-max over the pool would stretch 0.716 / 0.706 to 1 / 0 and tie the name's match with
    # the other contact; from the no-evidence floor (0.5) the vectors stay close, the name decides.
    pool = [cand("olof", 0.716, None), cand("greta", 0.706, 0.3)]
    stretched = by_id(convex_combination(pool))
    assert stretched["olof"].fused == pytest.approx(stretched["greta"].fused)
    whole = by_id(convex_combination(pool, floors=Floors(VECTOR_FLOOR, KEYWORD_FLOOR)))
    assert whole["greta"].fused == pytest.approx(0.5 * 0.206 / 0.216 + 0.5)
    assert whole["olof"].fused == pytest.approx(0.5)


def test_a_hit_below_the_floor_counts_as_no_evidence() -> None:
    out = by_id(convex_combination([cand("a", 0.8), cand("b", 0.45)], floors=Floors(0.5, None)))
    assert out["b"].fused == 0.0 and out["a"].fused == pytest.approx(0.5)
    # Nothing above the floor: no vector evidence at all.
    [c] = convex_combination([cand("c", 0.4)], floors=Floors(0.5, None))
    assert c.fused == 0.0


@pytest.mark.parametrize(("vw", "kw"), [(-0.1, 0.5), (0.0, 0.0), (float("nan"), 1.0)])
def test_convex_rejects_bad_weights(vw: float, kw: float) -> None:
    with pytest.raises(BadParams):
        convex_combination(five(), vw, kw)


def test_rrf_rejects_negative_k() -> None:
    with pytest.raises(ValueError):
        reciprocal_rank_fusion([cand("x", 0.5)], k=-1)


# --- boosts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "b"),
    [
        (1, 0.05),  # .05 + .05*0
        (3, 0.05 + 0.05 * 0.47712125472),  # log10(3)
        (10, 0.10),
        (100, 0.15),
        (1000, 0.20),
        (10_000, 0.25),  # exactly the ceiling
        (10**6, 0.25),  # .35 clamped
    ],
)
def test_backlink_boost_table(n: int, b: float) -> None:
    assert backlink_boost(n) == pytest.approx(b, abs=1e-10)
    [x] = apply_boosts([cand("x", backlinks=n)])
    assert x.boosts == {"backlinks": pytest.approx(1 + b, abs=1e-10)}


@pytest.mark.parametrize("n", [0, -3])
def test_no_backlinks_no_boost(n: int) -> None:
    assert backlink_boost(n) == 0.0
    x = cand("x", backlinks=n)
    x.fused = 0.4
    apply_boosts([x])
    assert x.boosts == {}
    assert x.score == 0.4


def test_compiled_truth_boost() -> None:
    x = cand("x", compiledTruth="Alice lives in Leeds.")
    x.fused = 0.4
    apply_boosts([x])
    assert x.boosts == {"compiledTruth": 1.15}
    assert x.score == pytest.approx(0.46, abs=1e-12)


@pytest.mark.parametrize("value", [None, "", "   ", [], {}])
def test_empty_compiled_truth_is_not_boosted(value: Any) -> None:
    x = cand("x", compiledTruth=value)
    x.fused = 0.4
    apply_boosts([x])
    assert x.boosts == {}
    assert x.score == 0.4


def test_boosts_multiply() -> None:
    x = cand("x", backlinks=100, compiledTruth="yes")
    x.fused = 0.4
    apply_boosts([x])
    assert x.boosts == {"compiledTruth": 1.15, "backlinks": pytest.approx(1.15)}
    assert x.score == pytest.approx(0.4 * 1.15 * 1.15, abs=1e-12)  # 0.529


def test_custom_compiled_truth_weight_and_idempotence() -> None:
    x = cand("x", compiledTruth="yes")
    x.fused = 0.5
    apply_boosts([x], compiled_truth=0.3)
    apply_boosts([x], compiled_truth=0.3)  # a second pass must not compound
    assert x.boosts == {"compiledTruth": 1.3}
    assert x.score == pytest.approx(0.65, abs=1e-12)


def test_negative_compiled_truth_weight_is_rejected() -> None:
    with pytest.raises(ValueError):
        apply_boosts([cand("x")], compiled_truth=-0.1)


# --- dedup ----------------------------------------------------------------------------------


def test_dedup_node_id_layer() -> None:
    low = cand("n1", score=0.3, slug="s-low", name="Low", contentHash="h-low")
    high = cand("n1", score=0.5, slug="s-high", name="High", contentHash="h-high")
    kept, dropped = dedup([low, high])
    assert kept == [high] and kept[0] is high
    assert dropped == 1
    assert high.trace == ["dedup:nodeId dropped n1 (score 0.3)"]


def test_dedup_slug_layer() -> None:
    a = cand("a", score=0.41, slug="alice", name="Alice A", contentHash="h1")
    b = cand("b", score=0.6, slug="alice", name="Alice B", contentHash="h2")
    kept, dropped = dedup([a, b])
    assert ids(kept) == ["b"] and dropped == 1
    assert b.trace == ["dedup:slug dropped a (score 0.41)"]


def test_dedup_canonical_name_layer_trims_and_ignores_case() -> None:
    a = cand("a", score=0.9, slug="s1", canonicalName="  Alice Smith ", contentHash="h1")
    b = cand("b", score=0.2, slug="s2", name="alice SMITH", contentHash="h2")  # name fallback
    c = cand("c", score=0.5, slug="s3", canonicalName="Alice Smyth", contentHash="h3")
    kept, dropped = dedup([b, c, a])
    assert ids(kept) == ["a", "c"] and dropped == 1
    assert a.trace == ["dedup:canonicalName dropped b (score 0.2)"]


def test_dedup_content_hash_layer() -> None:
    a = cand("a", score=0.3, slug="s1", name="One", contentHash="abc")
    b = cand("b", score=0.7, slug="s2", name="Two", contentHash="abc")
    kept, dropped = dedup([a, b])
    assert ids(kept) == ["b"] and dropped == 1
    assert b.trace == ["dedup:contentHash dropped a (score 0.3)"]


def test_dedup_missing_keys_skip_layers() -> None:
    # No slug, name or hash (or only empty/blank ones): nothing to compare, both survive.
    a = cand("a", score=0.5)
    b = cand("b", score=0.5, slug="", name="   ", contentHash="")
    kept, dropped = dedup([a, b])
    assert ids(kept) == ["a", "b"] and dropped == 0
    assert a.trace == [] and b.trace == []


def test_dedup_skipping_one_layer_does_not_exempt_from_the_next() -> None:
    a = cand("a", score=0.5, slug="s", name="Alice")
    b = cand("b", score=0.8, name="ALICE")  # no slug: skips the slug layer only
    kept, dropped = dedup([a, b])
    assert ids(kept) == ["b"] and dropped == 1
    assert b.trace == ["dedup:canonicalName dropped a (score 0.5)"]


def test_dedup_tie_goes_to_lower_node_id() -> None:
    x = cand("x", score=0.5, slug="same")
    w = cand("w", score=0.5, slug="same")
    kept, _ = dedup([x, w])
    assert ids(kept) == ["w"]
    assert w.trace == ["dedup:slug dropped x (score 0.5)"]


def test_dedup_layers_run_in_order() -> None:
    # slug first drops b, so c no longer has a canonicalName twin and survives; had the
    # name layer run first, c would have lost to b and then b to a.
    a = cand("a", score=0.9, slug="s")
    b = cand("b", score=0.8, slug="s", name="X")
    c = cand("c", score=0.7, name="X")
    kept, dropped = dedup([c, b, a])
    assert ids(kept) == ["a", "c"] and dropped == 1


def test_dedup_output_order_and_total_count() -> None:
    cands = [
        cand("e", score=0.1),
        cand("d", score=0.5, slug="s"),
        cand("c", score=0.5),
        cand("b", score=0.4, slug="s"),
        cand("a", score=0.9, contentHash="h"),
        cand("f", score=0.2, contentHash="h"),
    ]
    kept, dropped = dedup(cands)
    assert ids(kept) == ["a", "c", "d", "e"]
    assert dropped == 2


# --- rank -----------------------------------------------------------------------------------


def test_rank_weighted_end_to_end() -> None:
    result = rank(five(), mode="weighted")
    assert ids(result.results) == ["a", "b", "c", "e", "d"]
    assert [c.score for c in result.results] == pytest.approx([0.78, 0.72, 0.56, 0.425, 0.225])
    assert result.counts == {
        "vector": 4,
        "bm25": 4,
        "fused": 5,
        "boosted": 0,
        "deduped": 0,
        "final": 5,
    }


def test_rank_rrf_end_to_end() -> None:
    result = rank(rrf_fixture(), mode="rrf", rrf_k=60)
    assert ids(result.results) == ["q", "p", "t", "s", "r"]
    assert all(c.score == c.fused for c in result.results)


def test_rank_threshold_and_limit() -> None:
    assert ids(rank(five(), threshold=0.5).results) == ["a", "b", "c"]
    assert ids(rank(five(), limit=2).results) == ["a", "b"]
    assert rank(five(), limit=0).results == []
    # A score equal to the threshold is kept (the cut is strictly "below").
    exact = 0.7 * 0.8
    assert ids(rank(five(), threshold=exact).results) == ["a", "b", "c"]


def test_rank_boosts_change_the_order_and_are_counted() -> None:
    cands = five()
    by_id(cands)["e"].props["compiledTruth"] = "settled fact"  # .425 * 1.15 = .48875
    by_id(cands)["d"].backlinks = 10**6  # .225 * 1.25 = .28125
    result = rank(cands, boosts=True)
    assert ids(result.results) == ["a", "b", "c", "e", "d"]
    got = by_id(result.results)
    assert got["e"].score == pytest.approx(0.48875)
    assert got["d"].score == pytest.approx(0.28125)
    assert result.counts["boosted"] == 2

    # Push e past c: fused .425 * 1.15 * (1 + .25) = .6109375 > .56
    cands = five()
    by_id(cands)["e"].props["compiledTruth"] = "settled fact"
    by_id(cands)["e"].backlinks = 10**4
    assert ids(rank(cands, boosts=True).results) == ["a", "b", "e", "c", "d"]


def test_rank_without_boosts_score_is_fused() -> None:
    cands = five()
    by_id(cands)["e"].props["compiledTruth"] = "settled fact"
    result = rank(cands, boosts=False)
    assert all(c.score == c.fused for c in result.results)
    assert result.counts["boosted"] == 0


def test_rank_dedup_counted_and_log_line() -> None:
    cands = five()
    by_id(cands)["e"].props["slug"] = "same"
    by_id(cands)["a"].props["slug"] = "same"
    assert ids(rank(cands, mode="weighted").results) == ["a", "b", "c", "e", "d"]  # off
    result = rank(cands, mode="weighted", dedup_layers=True)
    assert ids(result.results) == ["a", "b", "c", "d"]
    assert by_id(result.results)["a"].trace == ["dedup:slug dropped e (score 0.425)"]
    assert isinstance(result, RankResult)
    assert result.log_line() == (
        "[graph-search:hybrid] vector=4 bm25=4 fused=5 boosted=0 deduped=1 final=4"
    )


def test_rank_empty() -> None:
    result = rank([], mode="rrf")
    assert result.results == []
    assert result.counts == dict.fromkeys(
        ("vector", "bm25", "fused", "boosted", "deduped", "final"), 0
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mode": "bm25"},
        {"limit": -1},
        {"mode": "weighted", "vector_weight": 0.0, "keyword_weight": 0.0},
        {"mode": "rrf", "rrf_k": -5},
    ],
)
def test_rank_rejects_bad_arguments(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        rank(five(), **kwargs)


# --- properties -----------------------------------------------------------------------------

UNIT = st.floats(min_value=0.0, max_value=1.0)
MAYBE_UNIT = st.none() | UNIT
MAYBE_RAW = st.none() | st.floats(min_value=0.0, max_value=1e6)
WEIGHT = st.floats(min_value=0.0, max_value=10.0)
# Small pools so collisions on every dedup key are common.
NODE_IDS = st.sampled_from(["n0", "n1", "n2", "n3", "n4", "n5"])
SLUGS = st.sampled_from([None, "", "s0", "s1"])
NAMES = st.sampled_from([None, "", "  ", "Alice", " alice ", "ALICE", "Bob", "bob  "])
HASHES = st.sampled_from([None, "", "h0", "h1"])
SCORES = st.sampled_from([0.0, 0.25, 0.5, 1.0]) | UNIT


@st.composite
def keyed_candidates(draw: st.DrawFn) -> Candidate:
    props: dict[str, Any] = {}
    for prop, pool in (("slug", SLUGS), ("contentHash", HASHES)):
        if (value := draw(pool)) is not None:
            props[prop] = value
    if (name := draw(NAMES)) is not None:
        props[draw(st.sampled_from(["name", "canonicalName"]))] = name
    return cand(
        draw(NODE_IDS),
        draw(MAYBE_UNIT),
        draw(MAYBE_RAW),
        score=draw(SCORES),
        backlinks=draw(st.integers(min_value=0, max_value=10**7)),
        compiledTruth=draw(st.sampled_from([None, "", "fact"])),
        **props,
    )


@PROPERTY
@given(st.lists(st.tuples(MAYBE_UNIT, MAYBE_RAW), max_size=20), WEIGHT, WEIGHT)
def test_weighted_sum_is_bounded(
    scores: list[tuple[float | None, float | None]], vw: float, kw: float
) -> None:
    assume(vw > 0.0 or kw > 0.0)
    cands = [cand(f"n{i}", v, r) for i, (v, r) in enumerate(scores)]
    normalise_keyword(cands)
    assert all(c.keyword is None or 0.0 <= c.keyword <= 1.0 for c in cands)
    weighted_sum(cands, vw, kw)
    assert all(0.0 <= c.fused <= vw + kw for c in cands)


# Scores on a coarse grid: a positive constant cannot merge two of them by rounding, so any
# change in ranking would be the code's fault, not the float's.
GRID = st.none() | st.integers(min_value=0, max_value=1000).map(lambda i: i / 1000)


@PROPERTY
@given(
    st.lists(st.tuples(GRID, GRID), max_size=20),
    st.floats(min_value=1e-3, max_value=1e3),
    st.floats(min_value=1e-3, max_value=1e3),
)
def test_rrf_is_invariant_to_score_scale(
    scores: list[tuple[float | None, float | None]], v_scale: float, k_scale: float
) -> None:
    plain = [cand(f"n{i:02}", v, r) for i, (v, r) in enumerate(scores)]
    scaled = [
        cand(
            f"n{i:02}",
            None if v is None else v * v_scale,
            None if r is None else r * k_scale,
        )
        for i, (v, r) in enumerate(scores)
    ]
    reciprocal_rank_fusion(plain)
    reciprocal_rank_fusion(scaled)
    assert [c.fused for c in plain] == [c.fused for c in scaled]
    assert fused_order(plain) == fused_order(scaled)


@PROPERTY
@given(st.lists(keyed_candidates(), max_size=25))
def test_dedup_leaves_no_shared_keys(cands: list[Candidate]) -> None:
    before = list(cands)
    kept, dropped = dedup(cands)
    assert len(kept) <= len(before)
    assert len(kept) + dropped == len(before)
    assert all(any(k is c for c in before) for k in kept)
    for layer, key_of in DEDUP_LAYERS:
        keys = [key for c in kept if (key := key_of(c)) is not None]
        assert len(keys) == len(set(keys)), layer
    assert kept == sorted(kept, key=lambda c: (-c.score, c.node_id))
    if before:
        # The best candidate wins every layer it takes part in, so it always survives.
        best = min(before, key=lambda c: (-c.score, c.node_id))
        assert any(k is best for k in kept)


@PROPERTY
@given(
    st.lists(keyed_candidates(), max_size=25),
    st.sampled_from(["weighted", "rrf"]),
    st.floats(min_value=0.0, max_value=1.0),
    st.integers(min_value=0, max_value=12),
    st.booleans(),
    st.booleans(),
)
def test_rank_output_is_sorted_limited_and_thresholded(
    cands: list[Candidate], mode: str, threshold: float, limit: int, boosts: bool, layers: bool
) -> None:
    result = rank(
        cands,
        mode="rrf" if mode == "rrf" else "weighted",
        threshold=threshold,
        limit=limit,
        boosts=boosts,
        dedup_layers=layers,
    )
    scores = [c.score for c in result.results]
    assert scores == sorted(scores, reverse=True)
    assert len(result.results) <= limit
    assert all(s >= threshold for s in scores)
    assert result.counts["final"] == len(result.results)
    assert result.counts["fused"] == len(cands)
    assert result.counts["deduped"] <= len(cands)
