"""memory-search against the real Neo4j and model: ranking, guards, expansion, projection."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from appliance.core.identity import Caller
from appliance.memory import search as search_module
from appliance.memory.embedder import Embedder
from appliance.memory.errors import GraphUnavailable
from appliance.memory.fusion import fuse
from appliance.memory.graph import Graph
from appliance.memory.hits import Candidate
from appliance.memory.ingest import Ingester, IngestRequest
from appliance.memory.search import (
    Searcher,
    SearchRequest,
    SearchResult,
    by_document,
    wants_documents,
)
from appliance.memory.write import Edge, WriteRequest
from tests.memory.conftest import Memory

pytestmark = pytest.mark.anyio

FACTS = [
    ("Preference", {"name": "Coffee order", "description": "Oat milk flat white, no sugar"}),
    ("Event", {"name": "Sister's birthday", "description": "Anna's birthday is on 3 May"}),
    ("Task", {"name": "Fix the garden gate", "description": "The hinge on the back gate broke"}),
    ("Note", {"name": "Wi-Fi", "description": "The guest network password is on the fridge"}),
]


async def seed(memory: Memory) -> dict[str, str]:
    ids = {}
    for label, props in FACTS:
        done = await memory.writer.write(memory.caller, WriteRequest(label, dict(props)))
        ids[str(props["name"])] = done["id"]
    return ids


async def search(memory: Memory, query: str, caller: object = None, **kw: object) -> list[str]:
    result = await memory.searcher.search(
        caller or memory.caller,  # type: ignore[arg-type]
        SearchRequest(query=query, **kw),  # type: ignore[arg-type]
    )
    return [str(c.props.get("name")) for c in result.results]


async def test_the_relevant_memory_ranks_first(memory: Memory) -> None:
    await seed(memory)
    assert (await search(memory, "when is Anna's birthday?"))[0] == "Sister's birthday"
    assert (await search(memory, "how do I take my coffee"))[0] == "Coffee order"
    # The keyword path alone finds an exact word the vector path may rank lower.
    assert (await search(memory, "hinge", vector_weight=0.0, keyword_weight=1.0))[0] == (
        "Fix the garden gate"
    )


async def test_rrf_mode_and_label_filter(memory: Memory) -> None:
    await seed(memory)
    names = await search(memory, "birthday", mode="rrf", labels=["Task", "Note"])
    assert "Sister's birthday" not in names


async def test_a_burst_of_searches_queues_for_a_turn_and_every_one_is_answered(
    memory: Memory,
) -> None:
    """Forty searches at once: never more than SEARCHES_AT_ONCE inside, none fails for want of
    a pooled connection, and each gets the answer it would get alone."""
    await seed(memory)
    inside = peak = 0
    run = memory.searcher._search

    async def counted(caller: Caller, request: SearchRequest, started: float) -> SearchResult:
        nonlocal inside, peak
        inside += 1
        peak = max(peak, inside)
        try:
            return await run(caller, request, started)
        finally:
            inside -= 1

    memory.searcher._search = counted  # type: ignore[method-assign]
    alone = await search(memory, "when is Anna's birthday?")
    answers = await asyncio.gather(*(search(memory, "when is Anna's birthday?") for _ in range(40)))
    assert all(names == alone for names in answers)
    assert peak == search_module.SEARCHES_AT_ONCE


async def test_hidden_properties_are_never_returned(memory: Memory) -> None:
    await seed(memory)
    result = await memory.searcher.search(memory.caller, SearchRequest("coffee"))
    for cand in result.results:
        assert "embedding" not in cand.props and "accountId" not in cand.props
    projected = await memory.searcher.search(
        memory.caller, SearchRequest("coffee", fields=["name", "embedding", "accountId"])
    )
    assert all(set(c.props) <= {"name"} for c in projected.results)
    none = await memory.searcher.search(memory.caller, SearchRequest("coffee", fields=[]))
    assert all(c.props == {} for c in none.results)


async def test_expansion_records_direction_and_respects_guards(memory: Memory) -> None:
    project = await memory.writer.write(memory.caller, WriteRequest("Project", {"name": "Shed"}))
    await memory.writer.write(
        memory.caller,
        WriteRequest(
            "Task",
            {"name": "Buy timber for the shed"},
            edges=[Edge("PART_OF", project["id"], "Project")],
        ),
    )
    secret = await memory.writer.write(
        memory.caller, WriteRequest("Note", {"name": "Shed budget"}, scope="admin")
    )
    await memory.graph.run(
        "MATCH (p:Project {id: $p}), (n:Note {id: $n}) CREATE (p)-[:HAS_NOTE]->(n)",
        {"p": project["id"], "n": secret["id"]},
    )
    result = await memory.searcher.search(memory.caller, SearchRequest("timber", labels=["Task"]))
    related = result.results[0].related
    assert [(r.rel_type, r.direction, r.props["name"]) for r in related] == [
        ("PART_OF", "out", "Shed")
    ]
    public = memory.other(scopes=("public",))
    result = await memory.searcher.search(public, SearchRequest("shed project", labels=["Project"]))
    assert [r.props["name"] for c in result.results for r in c.related] == [
        "Buy timber for the shed"
    ]
    compact = await memory.searcher.search(
        memory.caller, SearchRequest("timber", labels=["Task"], expand_hops=0)
    )
    assert compact.results[0].related == []


async def test_guards_soft_delete_scope_agent_and_account(memory: Memory) -> None:
    text = {"description": "the spare key is under the blue flower pot"}
    await memory.writer.write(memory.caller, WriteRequest("Note", {"name": "open", **text}))
    gone = await memory.writer.write(
        memory.caller, WriteRequest("Note", {"name": "deleted", **text})
    )
    await memory.graph.run(
        "MATCH (n:Note {id: $id}) SET n.deletedAt = datetime()", {"id": gone["id"]}
    )
    await memory.writer.write(
        memory.caller, WriteRequest("Note", {"name": "admin-only", **text}, scope="admin")
    )
    await memory.writer.write(
        memory.caller,
        WriteRequest("Note", {"name": "for-bob", **text}, scope="public", agents=["bob"]),
    )
    stranger = memory.other(account_id=memory.caller.account_id + "-zz")
    await memory.writer.write(stranger, WriteRequest("Note", {"name": "stranger", **text}))

    everything = set(await search(memory, "where is the spare key"))
    assert everything == {"open", "admin-only", "for-bob"}
    public = set(await search(memory, "spare key", memory.other(scopes=("public",))))
    assert public == {"open", "for-bob"}
    bob = set(await search(memory, "spare key", memory.other(scopes=("public",), agent="bob")))
    assert bob == {"for-bob"}
    alice = set(await search(memory, "spare key", memory.other(scopes=("public",), agent="alice")))
    assert alice == set()


async def test_a_guarded_query_still_fills_its_limit(memory: Memory) -> None:
    for i in range(40):
        await memory.writer.write(
            memory.caller,
            WriteRequest(
                "Note", {"name": f"admin {i}", "description": "boiler service date"}, scope="admin"
            ),
        )
    for i in range(5):
        await memory.writer.write(
            memory.caller,
            WriteRequest(
                "Note",
                {"name": f"public {i}", "description": "boiler repair phone"},
                scope="public",
            ),
        )
    names = await search(memory, "boiler", memory.other(scopes=("public",)), limit=5)
    assert sorted(names) == [f"public {i}" for i in range(5)]


async def test_the_keyword_leg_takes_one_statement_where_other_accounts_share_its_index(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The full-text index is every account's: half of these matches are a stranger's, so a first
    # pool of just the rows wanted (30 for 10 results) would come back short and go again.
    stranger = memory.other(account_id=memory.caller.account_id + "-zz")
    for who, name in ((memory.caller, "own"), (stranger, "theirs")):
        for i in range(20):
            text = {"name": f"{name} {i}", "description": "the zqvlarbic valve is stuck"}
            await memory.writer.write(who, WriteRequest("Note", text))
    pools: list[int] = []
    read = memory.graph.read

    async def counting(cypher: str, params: dict[str, Any] | None = None) -> object:
        if params and search_module.FULLTEXT_INDEX in cypher:
            pools.append(int(params["k"]))
        return await read(cypher, params)

    monkeypatch.setattr(memory.graph, "read", counting)
    names = await search(memory, "zqvlarbic", vector_weight=0.0, keyword_weight=1.0)
    assert len(names) == 10 and all(name.startswith("own ") for name in names), names
    assert pools == [30 * search_module.KEYWORD_POOL]


async def test_a_search_with_neo4j_unreachable_says_what_to_do(embedder: Embedder) -> None:
    graph = Graph("bolt://127.0.0.1:1", "neo4j", "secret", timeout=1.0)

    async def embed(text: str) -> list[float]:
        return [float(x) for x in embedder.embed(text)]

    try:
        with pytest.raises(GraphUnavailable, match=r"(?s)not reachable.*just run"):
            await Searcher(graph, embed).search(Caller(account_id="nobody"), SearchRequest("tea"))
    finally:
        await graph.close()


@pytest.mark.parametrize(
    "query",
    [
        "+",
        "-",
        "&&",
        "||",
        "!",
        "(",
        ")",
        "{",
        "}",
        "[",
        "]",
        "^",
        '"',
        "~",
        "*",
        "?",
        ":",
        "\\",
        "/",
        'title:"unbalanced',
        "a && b || !c",
        "(((",
        "name:*",
        "\\\\",
        "AND",
        "OR NOT",
    ],
)
async def test_lucene_special_characters_never_error(memory: Memory, query: str) -> None:
    await seed(memory)
    await memory.searcher.search(memory.caller, SearchRequest(query))


async def test_without_the_fulltext_index_search_is_vector_only(memory: Memory) -> None:
    from appliance.memory.schema import apply_schema

    await seed(memory)
    await memory.graph.run("DROP INDEX entity_search")
    try:
        result = await memory.searcher.search(memory.caller, SearchRequest("coffee"))
        assert result.vector_only
        assert result.results[0].props["name"] == "Coffee order"
    finally:
        await apply_schema(memory.graph, 384)


async def test_a_failing_model_gives_keyword_results_flagged_keyword_only(
    memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    from appliance.memory.errors import ModelLoadFailed
    from appliance.memory.search import Searcher

    await seed(memory)

    async def broken(text: str) -> list[float]:
        raise ModelLoadFailed("the model file is corrupt")

    searcher = Searcher(memory.graph, broken)
    result = await searcher.search(memory.caller, SearchRequest("garden gate"))
    assert result.keyword_only and not result.vector_only
    assert result.results[0].props["name"] == "Fix the garden gate"
    assert all(c.vector is None for c in result.results)
    assert "warn=embed-failed fallback=keyword-only" in caplog.text


async def test_a_failing_model_without_the_fulltext_index_is_an_error(memory: Memory) -> None:
    from appliance.memory.errors import ModelLoadFailed
    from appliance.memory.schema import apply_schema
    from appliance.memory.search import Searcher

    async def broken(text: str) -> list[float]:
        raise ModelLoadFailed("the model file is corrupt")

    await memory.graph.run("DROP INDEX entity_search")
    try:
        with pytest.raises(ModelLoadFailed):
            await Searcher(memory.graph, broken).search(memory.caller, SearchRequest("gate"))
    finally:
        await apply_schema(memory.graph, 384)


def _nodes() -> list[Candidate]:
    return [
        Candidate("c1", ["Chunk"], {"documentId": "d1"}, vector=0.5, keyword_raw=2.0),
        Candidate("n1", ["Note"], {}, vector=0.6, keyword_raw=2.5),
        Candidate("d1", ["KnowledgeDocument"], {}, vector=0.7, keyword_raw=1.0),
        Candidate("s1", ["Section"], {"documentId": "d1"}, keyword_raw=0.5),
        Candidate("c2", ["Chunk"], {"documentId": "d1"}, vector=0.6),
    ]


@pytest.mark.parametrize(
    ("weights", "carrier"),
    [((0.0, 1.0), "c1"), ((1.0, 0.0), "c2")],
    ids=["keyword-fusion-picks-its-chunk", "vector-fusion-picks-its-chunk"],
)
def test_a_documents_nodes_become_one_candidate_scored_on_the_whole_document(
    weights: tuple[float, float], carrier: str
) -> None:
    out = by_document(_nodes(), lambda c: fuse(c, "weighted", *weights))
    # The document: its best vector score, its nodes' keyword scores summed, on the chunk the
    # caller's fusion ranks first (not the summary-only document node, however high it ranks);
    # the note, outside any document, is left as it was.
    assert [(c.node_id, c.vector, c.keyword_raw) for c in out] == [
        (carrier, 0.7, 3.5),
        ("n1", 0.6, 2.5),
    ]


def test_a_document_whose_chunks_did_not_match_is_carried_by_its_best_node() -> None:
    nodes = [c for c in _nodes() if c.node_id in ("d1", "s1")]
    out = by_document(nodes, lambda c: fuse(c, "weighted", 1.0, 0.0))
    assert [(c.node_id, c.vector, c.keyword_raw) for c in out] == [("d1", 0.7, 1.5)]


def test_a_document_ranked_by_a_section_is_carried_by_the_passage_under_that_section() -> None:
    # "when is the boiler serviced": the Service section's summary matches best; the passage
    # about the boiler itself matches better than the one under Service, which holds the answer.
    nodes = [
        Candidate("s-boiler", ["Section"], {"documentId": "d1"}, vector=0.76),
        Candidate("s-service", ["Section"], {"documentId": "d1"}, vector=0.84),
        Candidate("c-boiler", ["Chunk"], {"documentId": "d1", "sectionId": "s-boiler"}, 0.76),
        Candidate("c-service", ["Chunk"], {"documentId": "d1", "sectionId": "s-service"}, 0.72),
    ]
    out = by_document(nodes, lambda c: fuse(c, "weighted", 1.0, 0.0))
    assert [(c.node_id, c.vector) for c in out] == [("c-service", 0.84)]


def test_candidates_of_distinct_documents_are_left_as_they_are() -> None:
    alone = [c for c in _nodes() if c.node_id in ("c1", "n1")]
    out = by_document(alone, lambda c: fuse(c, "weighted"))
    assert out == alone and [c.keyword_raw for c in out] == [2.0, 2.5]


def test_only_a_search_for_passages_keeps_a_documents_nodes_apart() -> None:
    assert wants_documents(None) and wants_documents(["KnowledgeDocument", "Chunk"])
    assert not wants_documents(["Chunk"]) and not wants_documents(["Section", "Chunk"])


async def test_one_document_takes_one_keyword_place(memory: Memory) -> None:
    text = "Flutter of swept wings.\n\n## Tests\n\nWind tunnel flutter tests of swept wings."
    await Ingester(memory.graph, memory.embed_texts, memory.writer.model_name).ingest(
        memory.caller, IngestRequest("Wing flutter", text, "att-flutter")
    )
    await memory.writer.write(
        memory.caller, WriteRequest("Note", {"name": "Flutter", "description": "A bird's wing"})
    )
    await memory.graph.run("CALL db.awaitIndexes(60)")
    result = await memory.searcher.search(
        memory.caller,
        SearchRequest("flutter wings", keyword_weight=1.0, vector_weight=0.0, limit=10),
    )
    matched = [c for c in result.results if c.keyword is not None]  # the keyword leg's hits
    # The document, its sections and its chunks take one place; the stemmed note is found too.
    assert [c.props.get("attachmentId", c.props.get("name")) for c in matched] == [
        "att-flutter",
        "Flutter",
    ]
