"""The optional search stages: routing, expansion, dedup, keyword subscriptions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from appliance.memory.search import Searcher, SearchRequest
from appliance.memory.write import WriteRequest
from tests.memory.conftest import Memory

pytestmark = pytest.mark.anyio


async def names(
    memory: Memory, request: SearchRequest, searcher: Searcher | None = None, **caller: object
) -> list[str]:
    who = memory.other(**caller) if caller else memory.caller
    result = await (searcher or memory.searcher).search(who, request)
    return [str(c.props.get("name")) for c in result.results]


async def test_routing_narrows_labels_only_when_on(memory: Memory) -> None:
    await memory.writer.write(memory.caller, WriteRequest("Person", {"name": "Dana Lopez"}))
    await memory.writer.write(
        memory.caller, WriteRequest("Event", {"name": "Dana Lopez's retirement party"})
    )
    routed = await names(
        memory, SearchRequest("Dana Lopez", retrieval_class="entity", routing=True)
    )
    assert routed == ["Dana Lopez"]
    unrouted = await names(memory, SearchRequest("Dana Lopez", retrieval_class="entity"))
    assert set(unrouted) == {"Dana Lopez", "Dana Lopez's retirement party"}


async def test_expansion_finds_what_only_a_paraphrase_names(memory: Memory) -> None:
    await memory.writer.write(
        memory.caller,
        WriteRequest("Note", {"name": "Car insurance", "description": "renews in June"}),
    )
    calls: list[str] = []

    async def expander(query: str) -> list[str]:
        calls.append(query)
        return ["car insurance", "car insurance"]  # duplicates are dropped

    searcher = Searcher(memory.graph, memory.searcher.embed_query, expander)
    plain_request = SearchRequest(
        "automobile cover", vector_weight=0.0, keyword_weight=1.0, threshold=0.01
    )
    plain = await names(memory, plain_request, searcher)
    assert plain == []
    request = replace(plain_request, expand_queries=True)
    assert await names(memory, request, searcher) == ["Car insurance"]
    assert await names(memory, request, searcher) == ["Car insurance"]
    assert calls == ["automobile cover"]  # the second search used the hour-long cache


async def test_a_failing_expander_means_the_original_query_only(memory: Memory) -> None:
    await memory.writer.write(memory.caller, WriteRequest("Note", {"name": "Bike lock code"}))

    async def broken(query: str) -> list[str]:
        raise TimeoutError("the model took too long")

    searcher = Searcher(memory.graph, memory.searcher.embed_query, broken)
    found = await names(memory, SearchRequest("bike lock", expand_queries=True), searcher)
    assert found[0] == "Bike lock code"


async def test_subscriptions_ignore_the_agent_tag_but_not_the_scope(memory: Memory) -> None:
    for name, scope, agents, keywords in [
        ("Warranty terms", "public", ["carol"], ["warranty"]),
        ("Internal warranty costs", "admin", ["bob"], ["warranty"]),
        ("Opening hours", "public", ["bob"], []),
    ]:
        await memory.writer.write(
            memory.caller,
            WriteRequest("Note", {"name": name, "keywords": keywords}, scope=scope, agents=agents),
        )
    request = SearchRequest("warranty", subscriptions=["warranty"])
    bob = await names(memory, request, scopes=("public",), agent="bob")
    assert "Warranty terms" in bob  # tagged for carol, reached through bob's subscription
    assert "Internal warranty costs" not in bob  # the scope guard still applies
    unsubscribed = await names(memory, SearchRequest("warranty"), scopes=("public",), agent="bob")
    assert "Warranty terms" not in unsubscribed
    result = await memory.searcher.search(memory.other(scopes=("public",), agent="bob"), request)
    top = next(c for c in result.results if c.props["name"] == "Warranty terms")
    assert top.keyword == 1.0


async def test_dedup_drops_a_second_node_of_the_same_name_only_when_on(memory: Memory) -> None:
    for description in ("Plumber in Ghent", "Plumber, Ghent; fixed the boiler"):
        await memory.writer.write(
            memory.caller,
            WriteRequest("Person", {"name": "Ravi Shah", "description": description}),
        )
    assert await names(memory, SearchRequest("Ravi Shah plumber")) == ["Ravi Shah", "Ravi Shah"]
    result = await memory.searcher.search(
        memory.caller, SearchRequest("Ravi Shah plumber", dedup=True)
    )
    assert [c.props["name"] for c in result.results] == ["Ravi Shah"]
    assert result.counts["deduped"] == 1
    assert any(d.startswith("dedup:canonicalName dropped") for d in result.results[0].trace)
